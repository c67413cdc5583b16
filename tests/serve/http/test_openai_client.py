"""The official OpenAI JavaScript client (npm `openai@6`, Node.js 20) against `--http`: a
completion and a streamed completion whose text equals `lockstep generate`'s for the same seed,
a stream with `stream_options.include_usage` whose last chunk carries the usage,
models.retrieve, a batch of two prompts, and a prompt's own scores (echo with logprobs); and
structured output: `response_format: {type: "json_schema", ...}` on chat completions, streamed and
not, twice for a seed, valid JSON of the schema and the same bytes every time.
npm installs into a temporary folder outside the repository, bounded in time; where npm is
missing or cannot reach its registry the test is skipped, saying so."""
import json
import shutil
import subprocess

import pytest

from conftest import generate

SCRIPT = r"""
import OpenAI from 'openai';
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'unused', maxRetries: 0, timeout: 20000 });
const body = { model: 'tiny', prompt: 'Hello', max_tokens: 30, temperature: 0.8, seed: 5 };
const c = await client.completions.create(body);
let streamed = '';
let finish = null;
const s = await client.completions.create({ ...body, stream: true });
for await (const chunk of s) {
  streamed += chunk.choices[0].text;
  if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
}
// With stream_options.include_usage the last chunk has no choices and carries the usage.
let counted = '';
let usage = null;
const u = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
for await (const chunk of u) {
  if (chunk.choices.length) counted += chunk.choices[0].text;
  if (chunk.usage) usage = chunk.usage;
}
const model = await client.models.retrieve('tiny');
// A batch of prompts (choice p * n + i) and a prompt's own scores (echo with logprobs, max_tokens 0).
const batch = await client.completions.create({ ...body, prompt: ['Hello', 'Hi'] });
const scored = await client.completions.create({ model: 'tiny', prompt: 'Hello', max_tokens: 0, echo: true, logprobs: 1 });
console.log(JSON.stringify({ text: c.choices[0].text, finish: c.choices[0].finish_reason, streamed, stream_finish: finish,
                             counted, usage, model: model.id, batch: batch.choices.map((x) => x.text),
                             scored: scored.choices[0].logprobs.tokens.length, first: scored.choices[0].logprobs.token_logprobs[0] }));
"""


STRUCTURED = r"""
import OpenAI from 'openai';
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'unused', maxRetries: 0, timeout: 20000 });
const schema = { type: 'object', properties: { name: { type: 'string', maxLength: 8 }, count: { type: 'integer' },
                 tags: { type: 'array', items: { enum: ['a', 'b'] }, maxItems: 3 } },
                 required: ['name', 'count', 'tags'], additionalProperties: false };
const body = { model: 'tiny', messages: [{ role: 'user', content: 'An item, please.' }], max_tokens: 400,
               temperature: 1, seed: 11,
               response_format: { type: 'json_schema', json_schema: { name: 'item', schema, strict: true } } };
const out = [];
for (let i = 0; i < 2; ++i) {
  const c = await client.chat.completions.create(body);
  out.push({ text: c.choices[0].message.content, finish: c.choices[0].finish_reason });
  let streamed = '';
  let finish = null;
  const s = await client.chat.completions.create({ ...body, stream: true });
  for await (const chunk of s) {
    if (chunk.choices.length && chunk.choices[0].delta.content) streamed += chunk.choices[0].delta.content;
    if (chunk.choices.length && chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  out.push({ text: streamed, finish });
}
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def openai_dir(tmp_path_factory):
    if not shutil.which("npm") or not shutil.which("node"):
        pytest.skip("SKIPPED: npm or node is missing; the OpenAI JavaScript client test did not run")
    folder = tmp_path_factory.mktemp("openai-js")
    try:
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", "openai@6"], cwd=folder,
                           capture_output=True, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.skip("SKIPPED: npm install openai@6 took over 180 s (no registry?); the OpenAI client test did not run")
    if r.returncode != 0 or not (folder / "node_modules" / "openai").exists():
        pytest.skip("SKIPPED: npm could not install openai@6 (no registry?): " + r.stderr.decode()[-300:])
    (folder / "check.mjs").write_text(SCRIPT)
    (folder / "structured.mjs").write_text(STRUCTURED)
    return folder


def test_openai_js_client_equals_generate(openai_dir, serve, model):
    s = serve("--http", "127.0.0.1:0")
    r = subprocess.run(["node", "check.mjs"], cwd=openai_dir, capture_output=True, timeout=60,
                       env={"BASE_URL": f"http://127.0.0.1:{s.port}/v1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    expected = generate(model, "Hello", 30, "0.8", 5).decode("utf-8", errors="replace")
    hi = generate(model, "Hi", 30, "0.8", 5).decode("utf-8", errors="replace")
    assert got == {"text": expected, "finish": "length", "streamed": expected, "stream_finish": "length",
                   "counted": expected, "usage": {"prompt_tokens": 5, "completion_tokens": 30, "total_tokens": 35},
                   "model": "tiny", "batch": [expected, hi], "scored": 5, "first": None}


def test_openai_js_client_gets_valid_json_of_a_schema_the_same_every_time(openai_dir, serve):
    import jsonschema
    s = serve("--http", "127.0.0.1:0")
    r = subprocess.run(["node", "structured.mjs"], cwd=openai_dir, capture_output=True, timeout=60,
                       env={"BASE_URL": f"http://127.0.0.1:{s.port}/v1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr.decode()
    answers = json.loads(r.stdout)
    assert len(answers) == 4 and all(a == answers[0] for a in answers), answers
    assert answers[0]["finish"] == "stop"
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "count": {"type": "integer"},
                                               "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
              "required": ["name", "count", "tags"], "additionalProperties": False}
    jsonschema.validate(json.loads(answers[0]["text"]), schema)
