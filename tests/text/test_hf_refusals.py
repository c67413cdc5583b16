"""Bad tokenizer.json files are refused, naming the key (Tokenizer.for_model and `lockstep import
hf`), and the import then writes nothing; a good one is imported beside the weights, pinned by its
SHA-256 in model.json, with a vocab_size larger than the tokenizer (Qwen2's padding) accepted, and
then generate and the HTTP API's /tokenize and /detokenize use it."""
import copy
import http.client
import json
import os
import re
import subprocess
import time

import pytest

import hf_styles
from conftest import BINARY
from test_hf_tokenizer import model_dir

lockstep = pytest.importorskip("lockstep")


def small():
    """A small Llama 3 style tokenizer.json (the 256 bytes and a few merges)."""
    vocab, merges = hf_styles.train("the then there hello hello world 123 4567 " * 20, merges_wanted=12)
    return hf_styles.style("llama3", vocab, merges)


def set_path(doc, path, value):
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


BAD = [
    (("model", "type"), "WordPiece", 'model.type "WordPiece" is not supported'),
    (("pre_tokenizer", "pretokenizers", 1, "type"), "Metaspace", 'pre_tokenizer.pretokenizers[1].type "Metaspace" is not supported'),
    (("pre_tokenizer", "pretokenizers", 0, "pattern", "Regex"), "(?<x", "pre_tokenizer.pretokenizers[0].pattern.Regex is not a regex Oniguruma accepts"),
    (("pre_tokenizer", "pretokenizers", 0, "behavior"), "Sideways", 'pre_tokenizer.pretokenizers[0].behavior "Sideways" is not a split behavior'),
    (("pre_tokenizer", "pretokenizers", 0, "invert"), "no", "pre_tokenizer.pretokenizers[0].invert must be true or false"),
    (("normalizer",), {"type": "NFKC"}, 'normalizer.type "NFKC" is not supported'),
    (("model", "merges"), 5, "model.merges must be an array"),
    (("model", "merges", 0), ["Ġ", "no such token"], "model.merges[0] names a token not in the vocabulary"),
    (("model", "vocab", "a"), "x", 'model.vocab["a"] must be a token id'),
    # An id past lockstep's largest vocabulary (2^20): the id-indexed table once asked for 7 GB
    # (fuzz_hf_tokenizer's finding).
    (("model", "vocab", "a"), 222222222, 'model.vocab["a"] must be a token id (0 to 1048575'),
    (("model", "byte_fallback"), True, "model.byte_fallback true is not supported"),
    (("model", "continuing_subword_prefix"), "##", 'model.continuing_subword_prefix "##" is not supported'),
    (("model", "dropout"), 0.1, "model.dropout is not supported"),
    (("added_tokens", 0, "content"), 5, "added_tokens[0].content must be a string"),
    (("decoder",), {"type": "WordPiece"}, 'decoder.type "WordPiece" is not supported'),
    (("post_processor",), {"type": "RobertaProcessing"}, 'post_processor.type "RobertaProcessing" is not supported'),
    (("truncation",), {"max_length": 8}, "truncation is not supported"),
    (("pre_tokenizer",), {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": False},
     "pre_tokenizer has no ByteLevel step"),
]


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("index", range(len(BAD)))
def test_a_bad_file_is_refused_naming_the_key(index, tmp_path):
    path, value, needle = BAD[index]
    doc = small()
    set_path(doc, path, value)
    with pytest.raises(Exception) as e:
        lockstep.Tokenizer.for_model(model_dir(str(tmp_path / "m"), doc))
    assert "tokenizer.json: " + needle in str(e.value)


def test_truncated_and_too_large_vocab(tmp_path):
    data = json.dumps(small()).encode()
    d = model_dir(str(tmp_path / "m"), small())
    write(os.path.join(d, "tokenizer.json"), data[: len(data) // 2])
    with pytest.raises(Exception, match="SHA-256"):
        lockstep.Tokenizer.for_model(d)
    d = model_dir(str(tmp_path / "n"), small(), vocab_size=100)
    with pytest.raises(Exception, match="vocab_size is 100"):
        lockstep.Tokenizer.for_model(d)
    # More rows than tokens (a padded embedding): accepted; the ids past the tokenizer decode to nothing.
    d = model_dir(str(tmp_path / "p"), small(), vocab_size=400)
    tok = lockstep.Tokenizer.for_model(d)
    ids = tok.encode("hello world", add_special_tokens=True)
    assert ids[0] == tok.bos and tok.decode(ids) == "hello world"


def run(*args):
    return subprocess.run([BINARY, *args], capture_output=True)


def test_import_copies_a_good_file_and_refuses_a_bad_one(tmp_path):
    from test_import_hf import make_hf  # python/tests: a random LlamaForCausalLM directory

    hf = str(tmp_path / "hf")
    make_hf(hf, vocab=300)
    doc = small()
    data = json.dumps(doc).encode()
    write(os.path.join(hf, "tokenizer.json"), data)
    out = str(tmp_path / "model")
    done = run("import", "hf", hf, "-o", out, "--length", "12")
    assert done.returncode == 0, done.stderr.decode()
    assert b"tokenizer  huggingface tokenizer.json, " in done.stdout and b"(copied into the model directory)" in done.stdout
    entry = json.load(open(os.path.join(out, "model.json")))["tokenizer"]
    assert entry["type"] == "huggingface" and entry["file"] == "tokenizer.json"
    assert open(os.path.join(out, "tokenizer.json"), "rb").read() == data
    tok = lockstep.Tokenizer.for_model(out)
    assert tok.decode(tok.encode("hello there")) == "hello there"
    done = run("generate", out, "--prompt", "hello", "--tokens", "3", "--temperature", "0")
    assert done.returncode == 0, done.stderr.decode()
    check_http(out, tok, tmp_path)
    # A Llama 3 style tokenizer.json exports as llama.cpp's gpt2 vocabulary (tests/text/test_gguf_vocab.py).
    done = run("export-gguf", out, "-o", str(tmp_path / "x.gguf"))
    assert done.returncode == 0, done.stderr
    os.unlink(tmp_path / "x.gguf")

    for index, (path, value, needle) in enumerate(BAD):
        bad = copy.deepcopy(doc)
        set_path(bad, path, value)
        write(os.path.join(hf, "tokenizer.json"), json.dumps(bad).encode())
        target = str(tmp_path / f"bad{index}")
        done = run("import", "hf", hf, "-o", target, "--length", "12")
        assert done.returncode != 0
        assert ("tokenizer.json: " + needle).encode() in done.stderr, done.stderr.decode()
        assert not os.path.exists(target)
    write(os.path.join(hf, "tokenizer.json"), data[: len(data) // 3])  # truncated
    done = run("import", "hf", hf, "-o", str(tmp_path / "cut"), "--length", "12")
    assert done.returncode != 0 and b"tokenizer.json: not valid JSON" in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["hf", "model", "serve.out"]  # nothing else written, no temporary left


def check_http(model, tok, tmp_path):
    """The HTTP API's /tokenize and /detokenize give what the tokenizer gives (one encode: the
    template's <|begin_of_text|> unless add_special_tokens is false)."""
    log = tmp_path / "serve.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen([BINARY, "serve", model, "--http", "127.0.0.1:0"], stdout=out, stderr=subprocess.DEVNULL)
    try:
        port = None
        deadline = time.monotonic() + 30
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            port = int(m.group(1)) if m else time.sleep(0.05)
        assert port, log.read_text(errors="replace")

        def post(path, body):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            assert r.status == 200, data
            return json.loads(data)

        text = "hello <|eot_id|> there\n\n  123 e\u0301"
        assert post("/tokenize", {"prompt": text})["tokens"] == tok.encode(text, add_special_tokens=True)
        ids = tok.encode(text)
        assert post("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"] == ids
        assert post("/detokenize", {"tokens": [tok.bos] + ids})["prompt"] == tok.decode(ids)
    finally:
        proc.terminate()
        proc.wait(20)
