"""End of sequence: `lockstep import hf` keeps a checkpoint's eos_token_id (generation_config.json's
over config.json's, one id or a list) as model.json's `eos_token_ids`, checked against the
vocabulary; LanguageModelInference.generate() and `lockstep generate` stop right after an end id
(in the ids, not in the text) unless ignore_eos=True / --ignore-eos, which give the tokens of the
model without end ids, bit for bit. docs/FORMAT.md, "Hugging Face import"."""

import json
import os
import shutil

import pytest

from conftest import init_model
from test_import_hf import make_hf, run


def first_new(seq, start=2):
    for k in range(start, len(seq)):
        if seq[k] not in seq[:k]:
            return k
    raise AssertionError(f"{seq!r} repeats itself from step {start} on")


def with_ends(model, path, ends):
    shutil.copytree(model, path)
    meta = json.load(open(os.path.join(path, "model.json")))
    meta["eos_token_ids"] = ends
    json.dump(meta, open(os.path.join(path, "model.json"), "w"), indent=2)
    return str(path)


def imported(tmp_path, name, generation_config=None, **config):
    hf = str(tmp_path / (name + "-hf"))
    make_hf(hf, vocab=40, seed=6, extra_config=config)
    if generation_config is not None:
        json.dump(generation_config, open(os.path.join(hf, "generation_config.json"), "w"))
    out = str(tmp_path / name)
    return run("import", "hf", hf, "-o", out, "--length", "16"), out


def eos_field(out):
    return json.load(open(os.path.join(out, "model.json"))).get("eos_token_ids")


def test_import_keeps_the_end_ids(tmp_path):
    done, out = imported(tmp_path, "both", {"eos_token_id": [5, 7, 5]}, eos_token_id=2)
    assert done.returncode == 0, done.stderr
    assert eos_field(out) == [5, 7], "generation_config.json's over config.json's, each once"
    assert b"end of sequence: 5, 7" in done.stdout
    done, out = imported(tmp_path, "config", {"bos_token_id": 1}, eos_token_id=3)
    assert done.returncode == 0, done.stderr
    assert eos_field(out) == [3]
    done, out = imported(tmp_path, "null", {"eos_token_id": None}, eos_token_id=[4])
    assert done.returncode == 0, done.stderr
    assert eos_field(out) == [4]
    done, out = imported(tmp_path, "none")
    assert done.returncode == 0, done.stderr
    assert "eos_token_ids" not in json.load(open(os.path.join(out, "model.json"))), "as today"


@pytest.mark.parametrize("generation_config, config, message", [
    ({"eos_token_id": [2, 40]}, {}, b"generation_config.json: 'eos_token_id'[1] is 40, outside the vocabulary (vocab_size 40)"),
    (None, {"eos_token_id": -1}, b"config.json: 'eos_token_id' is -1, outside the vocabulary"),
    ({"eos_token_id": "2"}, {}, b"generation_config.json: 'eos_token_id' is \"2\", not a token id"),
])
def test_import_refuses_an_end_id_outside_the_vocabulary(tmp_path, generation_config, config, message):
    done, out = imported(tmp_path, "bad", generation_config, **config)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert not os.path.exists(out)


def test_an_imported_model_stops_at_its_end_id(tmp_path):
    done, plain = imported(tmp_path, "plain")
    assert done.returncode == 0, done.stderr
    full = run("generate", plain, "--prompt-ids", "1,2", "-n", "10")
    assert full.returncode == 0, full.stderr
    ids = [int(t) for t in full.stdout.decode().strip().split(",")][2:]
    k = first_new(ids)
    done, ended = imported(tmp_path, "ended", {"eos_token_id": ids[k]})
    assert done.returncode == 0, done.stderr
    got = run("generate", ended, "--prompt-ids", "1,2", "-n", "10")
    assert got.stdout.decode() == ",".join(map(str, [1, 2] + ids[:k])) + "\n", "nothing printed for the end id"
    assert run("generate", ended, "--prompt-ids", "1,2", "-n", "10", "--ignore-eos").stdout == full.stdout


def test_generate_stops_after_the_end_id(extension, tmp_path):
    plain = init_model(tmp_path / "plain", seed=5)
    lm = extension.LanguageModelInference.from_checkpoint(plain)
    for options in (dict(), dict(temperature=1.0, seed=3)):
        today = lm.generate(b"xy", 16, output="ids", **options)
        k = first_new(today, 3)
        ended = extension.LanguageModelInference.from_checkpoint(
            with_ends(plain, tmp_path / f"ended-{len(options)}", [today[k]]))
        seen = []
        ids = ended.generate(b"xy", 16, output="ids", on_token=seen.append, **options)
        assert ids == seen == today[:k + 1], "the end id is the last id given"
        # Its text is the text of the k tokens before it (the end id adds none).
        assert ended.generate(b"xy", 16, output="bytes", **options) == lm.generate(b"xy", k, output="bytes", **options)
        assert ended.generate(b"xy", 16, **options) == lm.generate(b"xy", k, **options)
        # ignore_eos: the model without end ids' tokens, bit for bit.
        assert ended.generate(b"xy", 16, output="ids", ignore_eos=True, **options) == today
        assert ended.generate(b"xy", 16, output="bytes", ignore_eos=True, **options) == \
            lm.generate(b"xy", 16, output="bytes", **options)
        assert lm.generate(b"xy", 16, output="ids", ignore_eos=True, **options) == today


def test_an_end_id_outside_the_vocabulary_is_refused_at_load(extension, tmp_path):
    plain = init_model(tmp_path / "plain", seed=5)
    bad = with_ends(plain, tmp_path / "bad", [3, 256])
    with pytest.raises(Exception, match=r"eos_token_ids\[1\] = 256 is outside the vocabulary"):
        extension.LanguageModelInference.from_checkpoint(bad)


def test_a_model_with_a_tokenizer_stops_at_its_end_id(extension, tmp_path):
    if shutil.which("spm_train") is None:
        pytest.skip("spm_train (Debian's sentencepiece) is not installed")
    import subprocess
    text = tmp_path / "text.txt"
    text.write_text("".join(f"the quick brown fox jumps over the lazy dog number {i}\n"
                            "a stitch in time saves nine, said the old tailor\n" for i in range(40)))
    done = subprocess.run(["spm_train", f"--input={text}", f"--model_prefix={tmp_path / 'sp'}", "--vocab_size=50",
                           "--model_type=unigram"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    def imported_with_tokenizer(name, generation_config=None):
        hf = str(tmp_path / (name + "-hf"))
        make_hf(hf, vocab=50, seed=3, kv_heads=2)
        shutil.copy(tmp_path / "sp.model", os.path.join(hf, "tokenizer.model"))
        if generation_config is not None:
            json.dump(generation_config, open(os.path.join(hf, "generation_config.json"), "w"))
        done = run("import", "hf", hf, "-o", str(tmp_path / name), "--length", "32")
        assert done.returncode == 0, done.stderr
        return extension.LanguageModelInference.from_checkpoint(str(tmp_path / name))

    lm = imported_with_tokenizer("plain")
    today = lm.generate("the quick", 16, output="ids")
    k = first_new(today)
    ended = imported_with_tokenizer("ended", {"eos_token_id": today[k]})
    assert ended.generate("the quick", 16, output="ids") == today[:k + 1]
    assert ended.generate("the quick", 16) == lm.generate("the quick", k), "the end piece adds no text"
    assert ended.generate("the quick", 16, ignore_eos=True) == lm.generate("the quick", 16)
    out = run("generate", str(tmp_path / "ended"), "--prompt", "the quick", "-n", "16")
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode() == "the quick" + lm.generate("the quick", k) + "\n"
