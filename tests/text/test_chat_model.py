"""A chat with an imported instruct-shaped model (random weights, a small SmolLM-style
tokenizer.json with <|im_start|> and <|im_end|>, SmolLM2-Instruct's published chat template in
tokenizer_config.json), through every front end:

- `lockstep import hf` keeps the template (chat_template.json, pinned in model.json) and refuses
  one the interpreter cannot run, naming the construct, writing nothing;
- Python's apply_chat_template equals python3-jinja2's render (transformers' environment), and
  with tokenize=True the Hugging Face tokenizers oracle's ids of that render
  (add_special_tokens=False);
- POST /tokenize with vLLM's `messages` gives the same ids;
- `lockstep chat`, driven through a pseudo-terminal for two turns, answers what
  /v1/chat/completions answers for the same conversation and seed, its second turn reusing the
  first's state (the stop line's counts), and Ctrl-D ends it with status 0;
- the official OpenAI JavaScript client chats with the server, whole and streamed, the same
  text twice for a seed."""
import hashlib
import http.client
import json
import os
import pty
import re
import select
import subprocess
import time

import pytest

import chat_oracles
import hf_styles
import npm_oracle
from conftest import BINARY
from test_hf_tokenizer import run_oracle

lockstep = pytest.importorskip("lockstep")
if lockstep.extension_error is not None:
    pytest.skip("the lockstep module is not built: %s" % lockstep.extension_error, allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
SMOL = chat_oracles.template_text("smollm2-instruct")
BOS, EOS = chat_oracles.MODELS["smollm2-instruct"]
SEED = 11
SAMPLING = ["--temperature", "0.9", "--top-k", "40", "--seed", str(SEED), "-n", "12"]
FIRST, SECOND = "Hello there, who are you?", "Tell me about the 2 cats."


def tokenizer_doc():
    vocab, merges = hf_styles.train("hello there who are you tell me about the cats assistant user system " * 30,
                                    merges_wanted=24)
    return hf_styles.style("smollm", vocab, merges)


def make_instruct_hf(path, config_extra):
    from test_import_hf import make_hf  # python/tests: a random LlamaForCausalLM directory

    make_hf(path, vocab=300, max_pos=1024, seed=3)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_doc(), f)
    config = {"bos_token": BOS, "eos_token": {"content": EOS, "special": True}, **config_extra}
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)


def run(*args):
    return subprocess.run([BINARY, *args], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat")
    hf, out = str(root / "hf"), str(root / "model")
    make_instruct_hf(hf, {"chat_template": SMOL})
    done = run("import", "hf", hf, "-o", out)
    assert done.returncode == 0, done.stderr.decode()
    assert b"chat template: tokenizer_config.json's, kept as chat_template.json" in done.stdout
    return out


def test_import_keeps_the_template_pinned(model):
    entry = json.load(open(os.path.join(model, "model.json")))["chat_template"]
    data = open(os.path.join(model, "chat_template.json"), "rb").read()
    assert entry == {"file": "chat_template.json", "sha256": hashlib.sha256(data).hexdigest()}
    kept = json.loads(data)
    assert kept == {"chat_template": SMOL, "bos_token": BOS, "eos_token": EOS}
    m = lockstep.LanguageModelInference.from_checkpoint(model)
    assert m.chat_template.source == SMOL and m.chat_template.eos_token == EOS


def test_import_takes_the_default_of_named_templates_and_refuses_what_it_cannot_run(tmp_path):
    hf = str(tmp_path / "hf")
    make_instruct_hf(hf, {"chat_template": [{"name": "tool_use", "template": "{{ x | wordwrap }}"},
                                            {"name": "default", "template": SMOL}]})
    done = run("import", "hf", hf, "-o", str(tmp_path / "named"))
    assert done.returncode == 0, done.stderr.decode()
    assert json.load(open(tmp_path / "named" / "chat_template.json"))["chat_template"] == SMOL
    for index, (template, needle) in enumerate([
            ("{% for m in messages %}\n{{ m.content | wordwrap }}{% endfor %}", "line 2: the filter 'wordwrap' is not supported"),
            ("{% filter upper %}{{ messages }}{% endfilter %}", "line 1: the tag {% filter %} is not supported"),
            ("{{ messages[0].content.format(1) }}", "line 1: the method .format() is not supported")]):
        with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
            json.dump({"chat_template": template}, f)
        target = str(tmp_path / f"bad{index}")
        done = run("import", "hf", hf, "-o", target)
        assert done.returncode != 0
        assert ("tokenizer_config.json: 'chat_template' " + needle).encode() in done.stderr, done.stderr.decode()
        assert not os.path.exists(target)
    assert sorted(os.listdir(tmp_path)) == ["hf", "named"]


def conversation(system=True, answer=None, second=False):
    msgs = [{"role": "system", "content": "You are terse."}] if system else []
    msgs.append({"role": "user", "content": FIRST})
    if answer is not None:
        msgs.append({"role": "assistant", "content": answer})
    if second:
        msgs.append({"role": "user", "content": SECOND})
    return msgs


@pytest.fixture(scope="module")
def tokenizers_oracle():
    folder = os.path.join(HERE, "oracle")
    npm_oracle.install_or_skip(folder, "tokenizers", "the tokenizer.json oracle")
    return folder


def test_apply_chat_template_is_the_oracles_render(model, tokenizers_oracle, tmp_path):
    m = lockstep.LanguageModelInference.from_checkpoint(model)
    cases = [(conversation(system=s, answer=a, second=a is not None), g)
             for s in (False, True) for a in (None, "I am a small model.") for g in (False, True)]
    texts = []
    for messages, gen in cases:
        context = {"messages": messages, "add_generation_prompt": gen, "bos_token": BOS, "eos_token": EOS,
                   "tools": None, "documents": None}
        expected = chat_oracles.jinja2_render(SMOL, context)
        assert expected[0] == "text"
        text = m.apply_chat_template(messages, add_generation_prompt=gen)
        assert text == expected[1]
        texts.append(text)
    oracle = run_oracle(tokenizers_oracle, os.path.join(model, "tokenizer.json"), texts, [], str(tmp_path))
    for (messages, gen), ids in zip(cases, oracle["plain"]):
        assert m.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True) == ids
        assert m.tokenizer.encode(m.apply_chat_template(messages, add_generation_prompt=gen)) == ids
    # The special tokens the template writes are single ids, not their characters' pieces.
    assert oracle["plain"][0].count(m.tokenizer.encode("<|im_start|>")[0]) == 2


class Server:
    def __init__(self, model, log):
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen([BINARY, "serve", model, "--http", "127.0.0.1:0"], stdout=out,
                                         stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        self.port = None
        while self.port is None and time.monotonic() < deadline and self.proc.poll() is None:
            found = re.search(r"http://127\.0\.0\.1:(\d+)", open(log, errors="replace").read())
            self.port = int(found.group(1)) if found else time.sleep(0.05)
        assert self.port, open(log, errors="replace").read()

    def post(self, path, body):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        data = r.read()
        assert r.status == 200, data
        return json.loads(data)

    def chat(self, messages):
        body = {"messages": messages, "temperature": 0.9, "top_k": 40, "seed": SEED, "max_tokens": 12}
        return self.post("/v1/chat/completions", body)["choices"][0]["message"]["content"]

    def close(self):
        self.proc.terminate()
        self.proc.wait(20)


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    s = Server(model, str(tmp_path_factory.mktemp("serve") / "serve.out"))
    yield s
    s.close()


def test_tokenize_messages_is_the_template_encoded_once(model, server, tokenizers_oracle, tmp_path):
    """vLLM's messages form of /tokenize: python3-jinja2's render encoded by Hugging Face's
    tokenizers (add_special_tokens=False)."""
    messages = conversation(answer="Fine.", second=True)
    renders = [chat_oracles.jinja2_render(SMOL, {"messages": messages, "add_generation_prompt": gen, "bos_token": BOS,
                                                 "eos_token": EOS, "tools": None, "documents": None})[1]
               for gen in (True, False)]
    expected = run_oracle(tokenizers_oracle, os.path.join(model, "tokenizer.json"), renders, [], str(tmp_path))["plain"]
    for gen, ids in zip((True, False), expected):
        got = server.post("/tokenize", {"messages": messages, "add_generation_prompt": gen})
        assert got["tokens"] == ids
        assert got["count"] == len(got["tokens"])
    bad = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    bad.request("POST", "/tokenize", json.dumps({"messages": [{"role": "user", "content": "x"}], "prompt": "x"}))
    assert bad.getresponse().status == 400


def read_until(fd, pattern, deadline):
    """Reads the terminal until `pattern` (a compiled bytes regex) matches what came; returns it."""
    got = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
            if pattern.search(got):
                return got
    raise AssertionError("timed out waiting for %r; got %r" % (pattern.pattern, got))


def test_the_terminal_chat_answers_as_the_http_api(model, server, tmp_path):
    # The HTTP API's answers for the same conversation: the second request carries the first answer.
    first = server.chat(conversation(system=True))
    second = server.chat(conversation(system=True, answer=first, second=True))

    err_path = tmp_path / "chat.err"
    pid, fd = pty.fork()
    if pid == 0:  # the child: lockstep chat on the terminal, stderr to a file
        err = os.open(str(err_path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(err, 2)
        os.execv(BINARY, [BINARY, "chat", model, "--system", "You are terse.", *SAMPLING])
    try:
        deadline = time.monotonic() + 120
        read_until(fd, re.compile(rb"> $"), deadline)
        os.write(fd, FIRST.encode() + b"\n")
        out1 = read_until(fd, re.compile(rb"\r\n> $"), deadline)
        os.write(fd, SECOND.encode() + b"\n")
        out2 = read_until(fd, re.compile(rb"\r\n> $"), deadline)
        os.write(fd, b"\x04")  # Ctrl-D: end of input
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status

    def answer(out, typed):
        text = out.decode("utf-8", errors="replace").replace("\r\n", "\n")
        assert text.startswith(typed + "\n"), text  # the terminal echoes the line typed
        return text[len(typed) + 1:-len("\n> ")]

    assert answer(out1, FIRST) == first
    assert answer(out2, SECOND) == second
    lines = [line for line in err_path.read_text().splitlines() if line.startswith("[")]
    assert len(lines) == 2, lines
    counts = [tuple(int(x) for x in re.search(r"prompt (\d+) tokens: (\d+) computed, (\d+) reused", line).groups())
              for line in lines]
    (p1, c1, r1), (p2, c2, r2) = counts
    assert (c1, r1) == (p1, 0)
    # The second turn reuses at least the first turn's prompt and computes only the rest.
    assert r2 >= p1 and c2 == p2 - r2 and c2 < p2, counts
    m = lockstep.LanguageModelInference.from_checkpoint(model)
    assert p2 == len(m.apply_chat_template(conversation(answer=first, second=True), add_generation_prompt=True,
                                           tokenize=True))


def test_openai_client_chats_whole_and_streamed(server):
    folder = os.path.join(HERE, "chat_client")
    npm_oracle.install_or_skip(folder, "openai", "the OpenAI JavaScript client chat test")
    body = {"messages": conversation(), "temperature": 0.9, "top_k": 40, "seed": SEED, "max_tokens": 12}
    env = dict(os.environ, BASE_URL="http://127.0.0.1:%d/v1" % server.port, BODY=json.dumps(body))
    r = subprocess.run(["node", "chat.mjs"], cwd=folder, env=env, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    got = json.loads(r.stdout)
    expected = server.chat(conversation())
    assert got["whole"] == got["streamed"] == expected and got["finish"] in ("length", "stop")


def test_sentencepiece_splits_special_tokens_out_first(tmp_path):
    """On the SentencePiece path too, a rendered template's special tokens (TinyLlama's `</s>`)
    become their ids, and the text between them is SentencePiece's own encoding of each piece
    (Debian's python3-sentencepiece as the oracle: spm_encode reads lines, and the pieces hold
    line ends), as Hugging Face's Llama tokenizers split them."""
    import shutil

    sentencepiece = pytest.importorskip("sentencepiece")
    if shutil.which("spm_train") is None:
        pytest.skip("SKIPPED: spm_train (Debian's sentencepiece) is missing")
    text = tmp_path / "text.txt"
    text.write_text("".join("hello there user assistant who are you number %d\n" % i for i in range(40)))
    done = subprocess.run(["spm_train", "--input=%s" % text, "--model_prefix=%s" % (tmp_path / "sp"), "--vocab_size=30",
                           "--model_type=unigram"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    model = tmp_path / "sp.model"
    d = tmp_path / "m"
    d.mkdir()
    data = model.read_bytes()
    (d / "tokenizer.model").write_bytes(data)
    (d / "model.json").write_text(json.dumps({"format": "lockstep.model", "tokenizer": {
        "type": "sentencepiece", "file": "tokenizer.model", "sha256": hashlib.sha256(data).hexdigest()}}))
    tok = lockstep.Tokenizer.for_model(str(d))

    spm = sentencepiece.SentencePieceProcessor(model_file=str(model)).encode

    tiny = lockstep.ChatTemplate(chat_oracles.template_text("tinyllama-chat-v1.0"), bos_token="<s>", eos_token="</s>")
    rendered = tiny.render([{"role": "system", "content": "who are you"}, {"role": "user", "content": "hello there"},
                            {"role": "assistant", "content": "number 7"}], add_generation_prompt=True)
    for sample in [rendered, "<s>hello</s>", "x<unk>y </s></s> there", "no specials at all"]:
        expected, rest = [], sample
        while rest:
            at = min([(rest.find(s), s) for s in ("<s>", "</s>", "<unk>") if s in rest] or [(len(rest), "")])
            if at[0] > 0:
                expected += spm(rest[:at[0]])
            if at[1]:
                expected.append({"<unk>": 0, "<s>": 1, "</s>": 2}[at[1]])
            rest = rest[at[0] + len(at[1]):]
        assert tok.encode(sample) == expected, sample
    assert tok.encode(rendered).count(2) == 3  # the three turns' </s>
