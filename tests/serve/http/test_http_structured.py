"""Structured output over HTTP (docs/HTTP.md, "Structured output"): `response_format` (json_object,
json_schema) on completions and chat completions, streamed or not, llama-server's `grammar` and
`json_schema` fields, the answers checked with Debian's python3-jsonschema, the same bytes for a
seed streamed or not and from `lockstep generate --json-schema`; refusals name the field and the
keyword or the grammar's line and column; any field lockstep does not implement is a 400 naming it."""
import json

import jsonschema
import pytest

from conftest import run
from test_http import completion, expect_error, stream

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                          "n": {"type": "integer"}, "ok": {"type": "boolean"}},
          "required": ["name", "n"], "additionalProperties": False}
FORMAT = {"type": "json_schema", "json_schema": {"name": "item", "schema": SCHEMA, "strict": True}}


def chat(server, **body):
    status, answer = server.post("/v1/chat/completions", body)
    assert status == 200, answer
    return answer


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_json_schema_answers_validate_streamed_or_not_and_equal_generate(shared_server, model, tmp_path, seed):
    body = dict(prompt="Item: ", max_tokens=400, temperature=1, seed=seed, response_format=FORMAT)
    whole = completion(shared_server, **body)["choices"][0]
    assert whole["finish_reason"] == "stop", whole
    jsonschema.validate(json.loads(whole["text"]), SCHEMA)
    events = stream(shared_server, body)
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == whole["text"]
    assert completion(shared_server, **body)["choices"][0]["text"] == whole["text"]
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    r = run("generate", model, "--prompt", "Item: ", "-n", "400", "--temperature", "1", "--seed", str(seed),
            "--json-schema", str(schema_file))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == "Item: " + whole["text"] + "\n"


def test_llama_server_fields_and_chat(shared_server):
    a = completion(shared_server, prompt="x", max_tokens=300, temperature=1, seed=4, json_schema=SCHEMA)["choices"][0]
    b = completion(shared_server, prompt="x", max_tokens=300, temperature=1, seed=4, response_format=FORMAT)["choices"][0]
    assert a["text"] == b["text"]
    g = completion(shared_server, prompt="x", max_tokens=50, temperature=1, seed=4,
                   grammar='root ::= ("yes" | "no") " " [0-9]{2}\n')["choices"][0]
    assert g["finish_reason"] == "stop" and g["text"][:3] in ("yes", "no ") and g["text"][-2:].isdigit(), g
    c = chat(shared_server, messages=[{"role": "user", "content": "an object"}], max_tokens=400, temperature=1, seed=2,
             response_format={"type": "json_object"}, logprobs=True, top_logprobs=2)["choices"][0]
    assert isinstance(json.loads(c["message"]["content"]), dict)
    # logprobs are those of the masked distribution: the first token of a JSON object is "{", alone allowed.
    first = c["logprobs"]["content"][0]
    assert first["token"] == "{" and first["logprob"] == 0.0, first
    assert [t["token"] for t in first["top_logprobs"]] == ["{"], first  # refused tokens are no candidates
    text = chat(shared_server, messages=[{"role": "user", "content": "a"}], max_tokens=5, seed=2,
                response_format={"type": "text"})["choices"][0]["message"]["content"]
    assert isinstance(text, str)


@pytest.mark.parametrize("body,param,words", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}}}}},
     "response_format.json_schema.schema", "/properties/age: 'minimum' is not supported"),
    ({"response_format": {"type": "xml"}}, "response_format.type", "xml"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema", "required"),
    ({"grammar": 'root ::= "a" (\n'}, "grammar", "line 2, column 1"),
    ({"grammar": "root ::= item\n"}, "grammar", "'item'"),
    ({"json_schema": {"type": "string", "pattern": "^(?=a)$"}}, "json_schema", "'pattern' a group other than"),
    ({"json_schema": {"type": "array", "items": False, "minItems": 1}}, "json_schema", "can match no text"),
    ({"grammar": "root ::= \"a\"\n", "json_schema": {}}, "grammar", "not several"),
    ({"mirostat": 2}, "mirostat", "not a field lockstep implements"),
    ({"prompt_logprobs": 1}, "prompt_logprobs", "not a field lockstep implements"),
])
def test_refusals_name_the_field_and_the_place(shared_server, body, param, words):
    e = expect_error(shared_server, "POST", "/v1/completions", json.dumps({"prompt": "a", **body}).encode(), 400, param)
    assert words in e["message"], e


def test_what_sdks_send_by_default_is_taken(shared_server):
    plain = completion(shared_server, prompt="ab", max_tokens=5, seed=3)["choices"][0]["text"]
    sent = dict(user="u", stream_options=None, logprobs=None, stop=None, n=1, suffix=None, metadata={"a": "b"},
                service_tier="auto", best_of=1, echo=False, top_p=1, presence_penalty=0, frequency_penalty=0)
    assert completion(shared_server, prompt="ab", max_tokens=5, seed=3, **sent)["choices"][0]["text"] == plain
    c = chat(shared_server, messages=[{"role": "user", "content": "a"}], max_tokens=5, seed=3, user="u", store=False,
             tool_choice="none", parallel_tool_calls=True, tools=[], max_completion_tokens=5, logprobs=False,
             top_logprobs=None, response_format={"type": "text"})
    assert c["choices"][0]["message"]["role"] == "assistant"
    expect_error(shared_server, "POST", "/v1/chat/completions",
                 json.dumps({"messages": [{"role": "user", "content": "a"}], "modalities": ["audio"]}).encode(), 400,
                 "modalities")


def test_choices_batched_together_equal_their_requests_alone(shared_server):
    # n choices and a batch of prompts run as one batch in the engine: each choice's masked draw
    # is the one its prompt and seed give alone.
    body = dict(max_tokens=300, temperature=1, seed=20, response_format=FORMAT)
    together = completion(shared_server, prompt=["Item: ", "Other: "], n=3, **body)["choices"]
    for c in together:
        prompt = ["Item: ", "Other: "][c["index"] // 3]
        alone = completion(shared_server, prompt=prompt, **{**body, "seed": 20 + c["index"] % 3})["choices"][0]
        assert c["text"] == alone["text"] and c["finish_reason"] == "stop", (c, alone)
        jsonschema.validate(json.loads(c["text"]), SCHEMA)
