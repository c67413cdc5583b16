"""A SentencePiece tokenizer trained here (`spm_train`, Debian's sentencepiece) goes with an
imported model: `import hf` copies tokenizer.model into the model directory and names it in
model.json; `generate` takes the prompt as text (BOS, then the pieces) and gives text, which is
the tokenizer's decoding (`spm_decode`) of the prompt's ids and the greedy ids lockstep's own
logits choose; `export-gguf` writes the vocabulary as llama.cpp's `llama` tokenizer."""

import hashlib
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import BINARY
from test_gguf import ARRAY, F32, I32, STRING, U32, BOOL, read_gguf
from test_import_hf import lockstep_logits, make_hf, run

pytestmark = pytest.mark.skipif(shutil.which("spm_train") is None, reason="spm_train (Debian's sentencepiece) is not installed")

VOCAB = 50


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    d = tmp_path_factory.mktemp("spm")
    text = d / "text.txt"
    with open(text, "w") as f:
        for i in range(40):
            f.write(f"the quick brown fox jumps over the lazy dog number {i}\n")
            f.write("a stitch in time saves nine, said the old tailor\n")
    done = subprocess.run(["spm_train", f"--input={text}", f"--model_prefix={d / 'sp'}", f"--vocab_size={VOCAB}",
                           "--model_type=unigram"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return str(d / "sp.model")


def spm_ids(model, text):
    done = subprocess.run(["spm_encode", f"--model={model}", "--output_format=id"], input=text + "\n",
                          capture_output=True, text=True, check=True)
    return [int(t) for t in done.stdout.split()]


def spm_text(model, ids):
    done = subprocess.run(["spm_decode", f"--model={model}", "--input_format=id"],
                          input=" ".join(map(str, ids)) + "\n", capture_output=True, text=True, check=True)
    return done.stdout.rstrip("\n")


@pytest.fixture(scope="module")
def imported(spm, tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    hf = str(d / "hf")
    make_hf(hf, vocab=VOCAB, seed=3, kv_heads=2)
    shutil.copy(spm, os.path.join(hf, "tokenizer.model"))
    out = str(d / "m")
    done = run("import", "hf", hf, "-o", out, "--length", "32")
    assert done.returncode == 0, done.stderr.decode()
    assert b"tokenizer  sentencepiece " in done.stdout and b"(copied into the model directory)" in done.stdout
    return out


def test_import_copies_and_names_the_tokenizer(spm, imported):
    raw = open(spm, "rb").read()
    assert open(os.path.join(imported, "tokenizer.model"), "rb").read() == raw
    meta = json.load(open(os.path.join(imported, "model.json")))
    assert meta["tokenizer"] == {"type": "sentencepiece", "file": "tokenizer.model",
                                 "sha256": hashlib.sha256(raw).hexdigest()}
    done = run("inspect", imported)  # still a model lockstep loads, and it shows the tokenizer
    assert done.returncode == 0
    assert (f"tokenizer  sentencepiece tokenizer.model, {VOCAB} pieces, sha256 "
            f"{hashlib.sha256(raw).hexdigest()}\n").encode() in done.stdout


def test_generate_round_trips_text(spm, imported):
    prompt = "the lazy fox"
    done = run("generate", imported, "--prompt", prompt, "-n", "8", "--temperature", "0")
    assert done.returncode == 0, done.stderr.decode()
    text = done.stdout.decode()
    assert text.endswith("\n")
    ids = [1] + spm_ids(spm, prompt)  # BOS (id 1 in spm_train's models), then the pieces
    for _ in range(8):
        padded = np.zeros(32, dtype=np.int64)
        padded[:len(ids)] = ids
        ids.append(int(np.argmax(lockstep_logits(imported, padded, VOCAB)[len(ids) - 1])))
    assert text[:-1] == spm_text(spm, ids)
    assert text.startswith(prompt)
    # The same prompt as ids gives the same text.
    done = run("generate", imported, "--prompt-ids", ",".join(map(str, ids[:-8])), "-n", "8", "--temperature", "0")
    assert done.stdout.decode() == text


def test_changed_tokenizer_and_mismatched_vocabulary_are_refused(spm, imported, tmp_path):
    copy = str(tmp_path / "m")
    shutil.copytree(imported, copy)
    with open(os.path.join(copy, "tokenizer.model"), "ab") as f:
        f.write(b"\0")
    done = run("generate", copy, "--prompt", "the", "-n", "2")
    assert done.returncode != 0 and b"SHA-256" in done.stderr and done.stdout == b""
    hf = str(tmp_path / "hf")
    make_hf(hf, vocab=VOCAB + 2)
    shutil.copy(spm, os.path.join(hf, "tokenizer.model"))
    done = run("import", "hf", hf, "-o", str(tmp_path / "x"))
    assert done.returncode != 0 and b"holds 50 pieces but config.json's vocab_size is 52" in done.stderr
    assert not os.path.exists(tmp_path / "x")


def test_a_tokenizer_must_hold_the_models_vocabulary(extension, imported, tmp_path):
    """Tokenizer.for_model (as every front end reads it) refuses a tokenizer whose piece count is
    not the model's vocab_size, so no generated id lacks a piece."""
    other = str(tmp_path / "other")
    shutil.copytree(imported, other)
    meta = json.load(open(os.path.join(other, "model.json")))
    meta["config"]["vocab_size"] = VOCAB + 2
    with open(os.path.join(other, "model.json"), "w") as f:
        json.dump(meta, f)
    with pytest.raises(Exception, match="the tokenizer holds 50 pieces but the model's vocab_size is 52"):
        extension.Tokenizer.for_model(other)


def test_gguf_carries_the_sentencepiece_vocabulary(spm, imported, tmp_path):
    out = str(tmp_path / "m.gguf")
    done = run("export-gguf", imported, "-o", out)
    assert done.returncode == 0, done.stderr.decode()
    kv, tensors, _ = read_gguf(out)
    vocab = subprocess.run(["spm_export_vocab", f"--model={spm}"], capture_output=True, text=True, check=True)
    rows = [line.split("\t") for line in vocab.stdout.splitlines()]
    assert kv["tokenizer.ggml.model"] == (STRING, "llama")
    assert kv["tokenizer.ggml.tokens"] == (ARRAY, ("array", STRING, [r[0] for r in rows]))
    scores = kv["tokenizer.ggml.scores"][1][2]
    assert np.allclose(scores, [float(r[1]) for r in rows], atol=1e-6)  # spm_export_vocab prints rounded scores
    types = kv["tokenizer.ggml.token_type"][1][2]
    assert types[:3] == [2, 3, 3] and set(types[3:]) == {1}  # <unk>, <s>, </s>, then normal pieces
    assert kv["tokenizer.ggml.bos_token_id"] == (U32, 1) and kv["tokenizer.ggml.eos_token_id"] == (U32, 2)
    assert kv["tokenizer.ggml.unknown_token_id"] == (U32, 0)
    assert kv["tokenizer.ggml.add_bos_token"] == (BOOL, True)
    assert "tokenizer.ggml.merges" not in kv and kv["llama.vocab_size"] == (U32, VOCAB)
    assert tensors["token_embd.weight"][0] == [32, VOCAB]


def test_python_generate_gives_the_cli_text(extension, spm, imported):
    """generate() takes text through the model's tokenizer (BOS, then the pieces) and returns the
    text the generated tokens add, so the prompt's decoding and it are `lockstep generate`'s text,
    greedy and sampled; ids in give the same text."""
    lm = extension.LanguageModelInference.from_checkpoint(imported)
    tok = lm.tokenizer
    assert isinstance(tok, extension.Tokenizer) and len(tok) == VOCAB
    assert (tok.bos, tok.eos, tok.unk) == (1, 2, 0)
    prompt = "the lazy fox"
    assert tok.encode(prompt) == spm_ids(spm, prompt) and tok.encode(prompt.encode()) == tok.encode(prompt)
    assert tok.decode([1] + tok.encode(prompt)) == prompt
    for temperature, seed in (("0", 0), ("0.9", 7)):
        done = run("generate", imported, "--prompt", prompt, "-n", "12", "--temperature", temperature,
                   "--seed", str(seed))
        assert done.returncode == 0, done.stderr.decode()
        seen = []
        text = lm.generate(prompt, 12, temperature=float(temperature), seed=seed, on_token=seen.append)
        assert isinstance(text, str) and len(seen) == 12
        assert prompt + text + "\n" == done.stdout.decode()
        assert tok.decode([1] + tok.encode(prompt) + seen) == prompt + text
        assert lm.generate([1] + tok.encode(prompt), 12, temperature=float(temperature), seed=seed) == text
        assert lm.generate(prompt.encode(), 12, temperature=float(temperature), seed=seed) == text
    # stop= compares the decoded text, as `generate --stop`: it ends right after the stop string.
    full = lm.generate(prompt, 12, temperature=0.9, seed=7)
    stop = full[3:5]
    done = run("generate", imported, "--prompt", prompt, "-n", "12", "--temperature", "0.9", "--seed", "7",
               "--stop", stop)
    assert done.returncode == 0, done.stderr.decode()
    stopped = lm.generate(prompt, 12, temperature=0.9, seed=7, stop=stop)
    assert done.stdout.decode() == prompt + stopped + "\n"
    assert stopped == full[:full.find(stop) + len(stop)] and len(stopped) < len(full)
    # The same text through lockstep.TextStream, one id at a time.
    seen = []
    lm.generate(prompt, 12, temperature=0.9, seed=7, on_token=seen.append)
    stream = tok.stream([1] + tok.encode(prompt), stop=stop)
    assert isinstance(stream, extension.TextStream) and stream.prompt_text == prompt
    pieces = [stream.push(t) for t in seen if not stream.stopped]
    assert "".join(pieces) + stream.finish() == stopped == stream.text and stream.stopped
    assert extension.Tokenizer.for_model(imported).encode(prompt) == tok.encode(prompt)
    with pytest.raises(ValueError, match="the tokenizer holds ids 0 to 49"):
        tok.decode([VOCAB])
    with pytest.raises(TypeError):
        tok.encode([1, 2])


def test_python_session_takes_text_through_the_tokenizer(extension, imported):
    """Session.append(text) on an empty session is BOS then the pieces (generate()'s prompt);
    later text appends its pieces alone."""
    lm = extension.LanguageModelInference.from_checkpoint(imported)
    s = lm.session()
    first = s.append("the lazy")
    assert s.tokens == [1] + lm.tokenizer.encode("the lazy")
    s.append(" fox")
    assert s.tokens == [1] + lm.tokenizer.encode("the lazy") + lm.tokenizer.encode(" fox")
    ids = lm.session()
    assert ids.append([1] + lm.tokenizer.encode("the lazy")).tobytes() == first.tobytes()


def test_python_refuses_text_without_a_tokenizer(extension, tmp_path):
    """A model with neither a tokenizer nor the 256 bytes takes and returns ids; text (and stop=,
    which compares text) is a ValueError saying it has no tokenizer."""
    hf = str(tmp_path / "hf")
    make_hf(hf, vocab=VOCAB, seed=5, kv_heads=2)
    out = str(tmp_path / "m")
    assert run("import", "hf", hf, "-o", out).returncode == 0
    lm = extension.LanguageModelInference.from_checkpoint(out)
    assert lm.tokenizer is None and extension.Tokenizer.for_model(out) is None
    assert b"tokenizer  none: token ids only" in run("inspect", out).stdout
    got = lm.generate([3, 14, 15], 6, output="ids")
    with pytest.raises(ValueError, match="output='text': the model has no text .*; pass output='ids'"):
        lm.generate([3, 14, 15], 6)
    done = run("generate", out, "--prompt-ids", "3,14,15", "-n", "6", "--temperature", "0")
    assert done.returncode == 0 and [3, 14, 15] + got == [int(t) for t in done.stdout.decode().split(",")]
    for text in ("hi", b"hi"):
        with pytest.raises(ValueError, match="the model has no tokenizer"):
            lm.generate(text, 4)
        with pytest.raises(ValueError, match="the model has no tokenizer"):
            lm.session().append(text)
    with pytest.raises(ValueError, match="no tokenizer"):
        lm.generate([3], 4, stop="x")


def test_sample_py_samples_through_the_tokenizer(extension, imported, tmp_path):
    """examples/sample.py over a served socket: with --model, the text through the model's
    tokenizer equals `lockstep generate`'s (with --stop too); without, a clear refusal."""
    import signal
    import sys
    sock = str(tmp_path / "s.sock")
    proc = subprocess.Popen([BINARY, "serve", imported, "--socket", sock, "--at", "--output", "logits"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("serving "), proc.stderr.read()
        sample = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "sample.py")

        def sample_py(*args):
            return subprocess.run([sys.executable, sample, "--socket", sock, *args], capture_output=True, timeout=60)

        for extra in ([], ["--stop", "e"]):
            args = ["--prompt", "the lazy fox", "--temperature", "0.9", "--top-k", "0", "--seed", "3"]
            done = sample_py(*args, "--tokens", "20", "--model", imported, *extra)
            assert done.returncode == 0, done.stderr.decode()
            want = run("generate", imported, "--prompt", "the lazy fox", "-n", "20", "--temperature", "0.9",
                       "--seed", "3", *extra)
            assert done.stdout == want.stdout
        refused = sample_py("--prompt", "x", "--tokens", "2")
        assert refused.returncode != 0 and b"give --model" in refused.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
