"""lockstep's tokenizer.json support against Hugging Face's own code (the npm package
`tokenizers`, its Rust library through Node bindings, pinned in tests/text/oracle/package.json):
the ids of every text and the text of every id list, in four styles (tests/text/hf_styles.py),
over more than 1 MB of text (tests/text/hf_corpus.py). Skipped, saying why, where node or npm is
missing or the package cannot be installed."""
import hashlib
import json
import os
import random
import subprocess

import pytest

import hf_corpus
import hf_styles
import npm_oracle

lockstep = pytest.importorskip("lockstep")

ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle")


@pytest.fixture(scope="module")
def oracle():
    npm_oracle.install_or_skip(ORACLE, "tokenizers", "the tokenizer.json oracle test")
    r = subprocess.run(["node", "-e", "require('tokenizers')"], cwd=ORACLE, capture_output=True)
    if r.returncode != 0:
        pytest.skip("SKIPPED: the tokenizers package does not load here: " + r.stderr.decode()[-300:])
    return ORACLE


def model_dir(path, doc, vocab_size=None):
    """A directory whose model.json names `doc` as its tokenizer.json (Tokenizer.for_model needs
    no weights)."""
    os.makedirs(path, exist_ok=True)
    data = json.dumps(doc, ensure_ascii=False).encode()
    with open(os.path.join(path, "tokenizer.json"), "wb") as f:
        f.write(data)
    entry = {"type": "huggingface", "file": "tokenizer.json", "sha256": hashlib.sha256(data).hexdigest()}
    model = {"format": "lockstep.model", "tokenizer": entry}
    if vocab_size:
        model["config"] = {"vocab_size": vocab_size}
    with open(os.path.join(path, "model.json"), "w") as f:
        json.dump(model, f)
    return path


def run_oracle(oracle, tokenizer_json, texts, ids, tmp):
    request, answer = os.path.join(tmp, "request.json"), os.path.join(tmp, "answer.json")
    with open(request, "w") as f:
        json.dump({"tokenizer": tokenizer_json, "texts": texts, "ids": ids}, f)
    subprocess.run(["node", os.path.join(oracle, "oracle.js"), request, answer], check=True, cwd=oracle, timeout=600)
    with open(answer) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def trained():
    return hf_styles.train(hf_corpus.training_text())


@pytest.fixture(scope="module")
def texts():
    return hf_corpus.texts()


@pytest.mark.parametrize("style", hf_styles.STYLES)
def test_matches_hugging_face(style, oracle, trained, texts, tmp_path):
    vocab, merges = trained
    doc = hf_styles.style(style, vocab, merges)
    path = model_dir(str(tmp_path / style), doc)
    tok = lockstep.Tokenizer.for_model(path)
    size = len(vocab) + len(doc["added_tokens"])
    # Id lists: random ones (special tokens, half characters) and slices of real encodings.
    rng = random.Random(hash(style) & 0xFFFF)
    id_lists = [[rng.randrange(size) for _ in range(rng.randint(1, 24))] for _ in range(3000)]
    first = run_oracle(oracle, os.path.join(path, "tokenizer.json"), texts, id_lists, str(tmp_path))
    for ids in first["plain"][::7]:
        if len(ids) > 2:
            a = rng.randrange(len(ids))
            id_lists.append(ids[a:a + rng.randint(1, 40)])
    id_lists += first["plain"]
    answer = run_oracle(oracle, os.path.join(path, "tokenizer.json"), [], id_lists, str(tmp_path))
    mismatches, nbytes = [], 0
    for text, plain, special in zip(texts, first["plain"], first["special"]):
        nbytes += len(text.encode())
        mine = tok.encode(text)
        if mine != plain:
            mismatches.append(("encode", text[:200], mine[:40], plain[:40]))
        if tok.encode(text, add_special_tokens=True) != special:
            mismatches.append(("encode+special", text[:200]))
    for ids, text in zip(id_lists, answer["decoded"]):
        mine = tok.decode(ids)
        if mine != text:
            mismatches.append(("decode", ids[:40], mine[:100], text[:100]))
    print(f"\n{style}: {len(texts)} texts, {nbytes} bytes encoded, {len(id_lists)} id lists decoded, "
          f"{len(mismatches)} mismatches")
    assert nbytes > 1_000_000
    assert not mismatches, mismatches[:5]
    # A stream gives the whole text, even where a token is half a character.
    for ids in id_lists[-200:]:
        stream = tok.stream([])
        out = "".join(stream.push(i) for i in ids) + stream.finish()
        assert out == tok.decode(ids), ids
