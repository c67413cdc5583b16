"""The HTTP API with a model's own tokenizer (docs/HTTP.md, "Models with a tokenizer"): a tiny
model of 300 ids whose model.json names a SentencePiece model trained here with `spm_train`
(Debian's sentencepiece, with byte pieces, so its random text holds characters split across
tokens). Its text equals `lockstep generate`'s for the same prompt and seed, streamed or not,
with stop strings and echo; a model of 300 ids without a tokenizer takes token ids only."""
import hashlib
import http.client
import json
import shutil
import struct
import subprocess

import pytest

from conftest import Server, run

pytestmark = pytest.mark.skipif(shutil.which("spm_train") is None,
                                reason="spm_train (Debian's sentencepiece package) is not installed")

VOCAB = 300


def init(path):
    r = run("init", "--seed", "3", "--d-model", "16", "--n-layers", "2", "--n-heads", "2", "--d-ff", "32",
            "--length", "32", "--vocab-size", str(VOCAB), "-o", str(path))
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def tok_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    with open(d / "text.txt", "w") as f:
        for i in range(30):
            f.write(f"the quick brown fox jumps over the lazy dog number {i}\n")
            f.write("a stitch in time saves nine, said the old tailor\n")
    done = subprocess.run(["spm_train", f"--input={d / 'text.txt'}", f"--model_prefix={d / 'sp'}",
                           f"--vocab_size={VOCAB}", "--model_type=unigram", "--byte_fallback=true"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    model = d / "m"
    init(model)
    shutil.copy(d / "sp.model", model / "tokenizer.model")
    meta = json.loads((model / "model.json").read_text())
    meta["tokenizer"] = {"type": "sentencepiece", "file": "tokenizer.model",
                         "sha256": hashlib.sha256((model / "tokenizer.model").read_bytes()).hexdigest()}
    (model / "model.json").write_text(json.dumps(meta, indent=2))
    return str(model)


@pytest.fixture(scope="module")
def tok_server(tok_model, tmp_path_factory):
    s = Server(tok_model, ["--http", "127.0.0.1:0"], tmp_path_factory.mktemp("toksrv"))
    assert s.port, s.banner + s.err()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ids_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("ids")
    init(d / "m")
    s = Server(str(d / "m"), ["--http", "127.0.0.1:0"], d)
    assert s.port, s.banner + s.err()
    yield s, str(d / "m")
    s.stop()


def generate_text(model, prompt, tokens, temperature="0", seed=0, stop=None):
    """`lockstep generate`'s output, decoded: the prompt's text, then the generated text."""
    args = ["generate", model, "--prompt", prompt, "-n", str(tokens), "--temperature", temperature, "--seed", str(seed)]
    r = run(*args, *(["--stop", stop] if stop else []))
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith(b"\n")
    text = r.stdout[:-1].decode("utf-8")  # the tokenizer's text is valid UTF-8
    assert text.startswith(prompt)
    return text[len(prompt):]


def stream(server, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}))
    r = conn.getresponse()
    assert r.status == 200
    raw = r.read().decode("utf-8")  # every event is valid UTF-8: no character split
    conn.close()
    events = [e[len("data: "):] for e in raw.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


CASES = [("the lazy fox", 20, "0", 0), ("a stitch", 24, "0.9", 7), ("over the", 60, "1", 3)]  # the last: past the window


@pytest.mark.parametrize("prompt,tokens,temperature,seed", CASES)
def test_completion_text_equals_generate(tok_server, tok_model, prompt, tokens, temperature, seed):
    expected = generate_text(tok_model, prompt, tokens, temperature, seed)
    body = dict(prompt=prompt, max_tokens=tokens, temperature=float(temperature), seed=seed)
    status, a = tok_server.post("/v1/completions", body)
    assert status == 200, a
    c = a["choices"][0]
    assert c["text"] == expected and c["finish_reason"] == "length"
    assert c["sha256"] == hashlib.sha256(expected.encode()).hexdigest()
    assert len(c["token_ids"]) == tokens and all(0 <= t < VOCAB for t in c["token_ids"])
    assert a["usage"]["completion_tokens"] == tokens
    # The prompt: BOS, then its pieces.
    status, ids = tok_server.post("/v1/completions", dict(body, prompt=[1] + encode(tok_model, prompt)))
    assert ids["choices"][0]["text"] == expected and a["usage"]["prompt_tokens"] == 1 + len(encode(tok_model, prompt))
    # Streamed: the pieces join to the same text, and none is taken back.
    events = stream(tok_server, "/v1/completions", body)
    assert "".join(e["choices"][0]["text"] for e in events) == expected
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"][0]["sha256"] == c["sha256"]
    # Echo: the prompt's text first.
    status, e = tok_server.post("/v1/completions", dict(body, echo=True))
    assert e["choices"][0]["text"] == prompt + expected
    events = stream(tok_server, "/v1/completions", dict(body, echo=True))
    assert "".join(e["choices"][0]["text"] for e in events) == prompt + expected


def encode(model, text):
    done = subprocess.run(["spm_encode", f"--model={model}/tokenizer.model", "--output_format=id"],
                          input=text + "\n", capture_output=True, text=True, check=True)
    return [int(t) for t in done.stdout.split()]


def test_stop_strings_on_the_decoded_text(tok_server, tok_model):
    full = generate_text(tok_model, "the lazy fox", 40, "0.8", 5)
    # A two-character stop string first seen well inside the text.
    at = next(i for i in range(6, len(full) - 2) if full[i:i + 2].isprintable() and full.find(full[i:i + 2]) == i)
    stop = full[at:at + 2]
    expected = generate_text(tok_model, "the lazy fox", 40, "0.8", 5, stop=stop)
    assert expected == full[:at + 2]  # ends right after the stop string, which it keeps
    body = dict(prompt="the lazy fox", max_tokens=40, temperature=0.8, seed=5, stop=["zzzz", stop])
    status, a = tok_server.post("/v1/completions", body)
    c = a["choices"][0]
    assert status == 200 and c["text"] == expected and c["finish_reason"] == "stop"
    assert len(c["token_ids"]) < 40
    events = stream(tok_server, "/v1/completions", body)
    assert "".join(e["choices"][0]["text"] for e in events) == expected
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_n_choices_use_seed_plus_i(tok_server, tok_model):
    status, a = tok_server.post("/v1/completions", dict(prompt="a stitch", max_tokens=10, temperature=1.0, seed=50, n=2))
    assert status == 200 and [c["seed"] for c in a["choices"]] == [50, 51]
    for i, c in enumerate(a["choices"]):
        assert c["text"] == generate_text(tok_model, "a stitch", 10, "1", 50 + i)


def test_logprobs_chat_and_models(tok_server, tok_model):
    status, a = tok_server.post("/v1/completions", dict(prompt="the lazy fox", max_tokens=8, temperature=0, seed=0,
                                                        logprobs=2, echo=True))
    c = a["choices"][0]
    lp = c["logprobs"]
    # With echo: the prompt's tokens (BOS, then the pieces; BOS has no score), then the 8 generated.
    p = a["usage"]["prompt_tokens"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == p + 8
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x < 0 and len(t) == 2 for x, t in zip(lp["token_logprobs"][1:p], lp["top_logprobs"][1:p]))
    offsets = lp["text_offset"]
    assert offsets[0] == 0 and offsets[p] == len("the lazy fox".encode()) and offsets == sorted(offsets)
    for tok, top, x in zip(lp["tokens"][p:], lp["top_logprobs"][p:], lp["token_logprobs"][p:]):
        assert max(top.values()) == x and top[tok] == x  # greedy
    # The prompt's scores are those its tokens get as generated ones (one pass, two paths).
    prompt_ids = [1] + encode(tok_model, "the lazy fox")  # SentencePiece's BOS, then the pieces
    assert len(prompt_ids) == p
    status, g = tok_server.post("/v1/completions", dict(prompt="the lazy fox", max_tokens=3, temperature=0, logprobs=2))
    status, e = tok_server.post("/v1/completions", dict(prompt=prompt_ids + g["choices"][0]["token_ids"], max_tokens=0,
                                                        logprobs=2, echo=True))
    assert status == 200, e
    assert e["choices"][0]["logprobs"]["token_logprobs"][p:] == g["choices"][0]["logprobs"]["token_logprobs"]
    # Chat: the plain template, through the tokenizer (whose normalization may change the
    # prompt's text: `generate` prints the prompt's decoding, as echo gives it).
    template = "user: hi there\nassistant:"
    status, chat = tok_server.post("/v1/chat/completions", dict(messages=[{"role": "user", "content": "hi there"}],
                                                                max_tokens=12, temperature=0, seed=0))
    assert status == 200, chat
    status, echo = tok_server.post("/v1/completions", dict(prompt=template, max_tokens=12, temperature=0, seed=0,
                                                           echo=True))
    r = run("generate", tok_model, "--prompt", template, "-n", "12")
    assert r.stdout.decode() == echo["choices"][0]["text"] + "\n"
    content = chat["choices"][0]["message"]["content"]
    assert content and echo["choices"][0]["text"].endswith(content)
    assert chat["choices"][0]["token_ids"] == echo["choices"][0]["token_ids"]
    status, _, body = tok_server.request("GET", "/v1/models")
    m = json.loads(body)["data"][0]
    assert m["tokenizer"] == "sentencepiece" and m["vocab_size"] == VOCAB


def test_tokenizer_endpoints_use_the_models_tokenizer(tok_server, tok_model):
    status, _, body = tok_server.request("GET", "/tokenizer_info")
    info = json.loads(body)
    assert status == 200 and info["tokenizer_class"] == "sentencepiece" and info["vocab_size"] == VOCAB
    assert info["bos_token"] == "<s>" and info["eos_token"] == "</s>" and info["unk_token"] == "<unk>"
    pieces = encode(tok_model, "the lazy fox")
    status, t = tok_server.post("/tokenize", {"prompt": "the lazy fox"})  # BOS first, as completions encode text
    assert status == 200 and t["tokens"] == [1] + pieces and t["count"] == len(pieces) + 1
    status, t = tok_server.post("/tokenize", {"prompt": "the lazy fox", "add_special_tokens": False})
    assert t["tokens"] == pieces
    status, d = tok_server.post("/detokenize", {"tokens": pieces})
    assert status == 200 and d["prompt"] == "the lazy fox"
    status, e = tok_server.post("/detokenize", {"tokens": [VOCAB]})
    assert status == 400 and e["error"]["param"] == "tokens[0]"


def test_a_model_without_a_tokenizer_takes_token_ids_only(ids_server):
    server, model = ids_server
    for path, body, param in [("/v1/completions", dict(prompt="hello"), "prompt"),
                              ("/v1/chat/completions", dict(messages=[{"role": "user", "content": "hi"}]), "messages"),
                              ("/v1/completions", dict(prompt=[5, 6], stop="x"), "stop"),
                              ("/v1/completions", dict(prompt=[5, 6], echo=True), "echo")]:
        status, e = server.post(path, body)
        assert status == 400 and e["error"]["param"] == param and "no tokenizer" in e["error"]["message"], e
    status, e = server.post("/v1/completions", dict(prompt=[5, VOCAB]))
    assert status == 400 and e["error"]["param"] == "prompt[1]"
    # Its tokenizer endpoints: no text either way.
    for path, body, param in [("/tokenize", {"prompt": "hi"}, "prompt"), ("/detokenize", {"tokens": [5]}, "tokens")]:
        status, e = server.post(path, body)
        assert status == 400 and e["error"]["param"] == param and "no tokenizer" in e["error"]["message"], e
    status, _, body = server.request("GET", "/tokenizer_info")
    assert status == 200 and json.loads(body)["tokenizer_class"] == "none"
    # Token ids in, token ids out (an extension field); the text is empty.
    body = dict(prompt=[5, 17, 3], max_tokens=10, temperature=0.9, seed=4)
    status, a = server.post("/v1/completions", body)
    c = a["choices"][0]
    r = run("generate", model, "--prompt-ids", "5,17,3", "-n", "10", "--temperature", "0.9", "--seed", "4")
    assert r.returncode == 0, r.stderr
    assert [5, 17, 3] + c["token_ids"] == [int(t) for t in r.stdout.decode().split(",")]
    assert c["text"] == "" and c["sha256"] == hashlib.sha256(struct.pack(f"<{len(c['token_ids'])}i", *c["token_ids"])).hexdigest()
    events = stream(server, "/v1/completions", body)
    assert [e["choices"][0]["token_ids"][0] for e in events[:-1]] == c["token_ids"]
    assert all(e["choices"][0]["text"] == "" for e in events)
    assert events[-1]["choices"][0]["sha256"] == c["sha256"]
    status, _, body = server.request("GET", "/v1/models")
    assert json.loads(body)["data"][0]["tokenizer"] == "none"


def test_a_changed_tokenizer_refuses_the_start(tok_model, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(tok_model, copy)
    with open(copy / "tokenizer.model", "ab") as f:
        f.write(b"\0")
    s = Server(str(copy), ["--http", "127.0.0.1:0"], tmp_path)
    try:
        assert s.proc.wait(20) != 0 and s.port is None
        assert "tokenizer.model: SHA-256 is" in s.err()
    finally:
        s.stop()
