"""`lockstep import gguf` turns a GGUF file's vocabulary into the model's tokenizer
(docs/FORMAT.md, "GGUF import"). The GGUF files are written here by a writer of this test's own,
their tokenizer.ggml.* keys made from a tokenizer the way llama.cpp's convert_hf_to_gguf.py makes
them (get_vocab_base for byte-level BPE, _create_vocab_sentencepiece for SentencePiece):
- `gpt2`: from the tokenizer.json styles of hf_styles (GPT-2, Llama 3, SmolLM, Qwen2), the
  imported model's ids equal the original tokenizer.json's, through lockstep's reader (itself held
  to Hugging Face's by hf_tokenizer_oracle) and through Hugging Face's own code (the npm package
  `tokenizers`, where npm is here), over texts with spaces, digits, emoji, CJK and special tokens;
- `llama`: from a SentencePiece BPE model trained here as Llama's are (byte fallback, identity
  normalization, whitespace kept), the imported model's ids equal libsentencepiece's (Python's
  sentencepiece) on the original model;
- the chat template is kept, and a bad vocabulary (lengths that disagree, a merge of unknown
  tokens, an id out of range, tokens that are not strings, an unknown pre or model, a template the
  interpreter cannot run) is refused naming what is wrong, with nothing written."""
import json
import os
import random
import shutil
import struct
import subprocess

import pytest

import hf_corpus
import hf_styles
import npm_oracle
from conftest import BINARY
from test_hf_tokenizer import model_dir, run_oracle

lockstep = pytest.importorskip("lockstep")
try:
    import sentencepiece as spm
except ImportError:
    spm = None

ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle")

# ---- a GGUF writer of the test's own (ggml's docs/gguf.md) ----

U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
D, FF = 32, 32


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def value(vtype, v):
    if vtype == STRING:
        return s(v)
    if vtype == ARRAY:
        etype, items = v
        return struct.pack("<IQ", etype, len(items)) + b"".join(value(etype, x) for x in items)
    return struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "<?"}[vtype], v)


def gguf(vocab_keys, n_vocab):
    """A tiny llama (d 32, one layer, F32) with `vocab_keys` {key: (type, value)}."""
    rng = random.Random(5)
    kv = {"general.architecture": (STRING, "llama"), "llama.context_length": (U32, 64),
          "llama.embedding_length": (U32, D), "llama.block_count": (U32, 1), "llama.feed_forward_length": (U32, FF),
          "llama.attention.head_count": (U32, 2), "llama.attention.head_count_kv": (U32, 1)}
    kv.update(vocab_keys)
    shapes = [("token_embd.weight", [D, n_vocab]), ("blk.0.attn_norm.weight", [D]), ("blk.0.attn_q.weight", [D, D]),
              ("blk.0.attn_k.weight", [D, 16]), ("blk.0.attn_v.weight", [D, 16]), ("blk.0.attn_output.weight", [D, D]),
              ("blk.0.ffn_norm.weight", [D]), ("blk.0.ffn_gate.weight", [D, FF]), ("blk.0.ffn_up.weight", [D, FF]),
              ("blk.0.ffn_down.weight", [FF, D]), ("output_norm.weight", [D])]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(shapes), len(kv))
    out += b"".join(s(k) + struct.pack("<I", t) + value(t, v) for k, (t, v) in kv.items())
    datas, offset = [], 0
    for name, ne in shapes:
        n = 1
        for x in ne:
            n *= x
        data = struct.pack(f"<{n}f", *[rng.uniform(-0.1, 0.1) for _ in range(n)])
        out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", 0, offset)
        datas.append(data)
        offset += (len(data) + 31) // 32 * 32
    out += b"\0" * (-len(out) % 32)
    for data in datas:
        out += data + b"\0" * (-len(data) % 32)
    return out


def read_keys(path):
    """The key-value pairs of a GGUF file, {key: value} (arrays as lists)."""
    data, at = open(path, "rb").read(), 24
    assert data[:4] == b"GGUF"

    def take(fmt):
        nonlocal at
        (v,) = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return v

    def one(vtype):
        nonlocal at
        if vtype == STRING:
            n = take("<Q")
            at += n
            return data[at - n:at].decode()
        if vtype == ARRAY:
            etype, n = take("<I"), take("<Q")
            return [one(etype) for _ in range(n)]
        return take({0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}[vtype])

    out = {}
    for _ in range(struct.unpack_from("<Q", data, 16)[0]):
        key = one(STRING)
        out[key] = one(take("<I"))
    return out


# ---- tokenizer.ggml.* as convert_hf_to_gguf.py writes them ----

def looks_special(token):  # its does_token_look_special
    return token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (token.startswith("<|") and token.endswith("|>")) or \
        (token.startswith("<unused") and token.endswith(">"))


# pre name, then the bos / eos / eot tokens and add_bos_token of each style (the models' own files)
STYLE_KEYS = {"gpt2": ("gpt-2", "<|endoftext|>", "<|endoftext|>", None, False),
              "llama3": ("llama-bpe", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", True),
              "smollm": ("smollm", "<|endoftext|>", "<|endoftext|>", None, False),
              "qwen2": ("qwen2", "<|endoftext|>", "<|endoftext|>", None, False)}
PADDING = 3  # unused ids past the tokenizer's, as a padded embedding has (Qwen2's)


def gpt2_keys(doc, style):
    """get_vocab_base: every id by its token (an added token's content), [PADi] where none;
    special or special-looking added tokens control (3), other added ones user-defined (4)."""
    vocab = dict(doc["model"]["vocab"])
    added = {t["content"]: t for t in doc["added_tokens"]}
    vocab.update({t["content"]: t["id"] for t in doc["added_tokens"]})
    reverse = {i: t for t, i in vocab.items()}
    n = max(reverse) + 1 + PADDING
    tokens, types = [], []
    for i in range(n):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(5)
            continue
        token = reverse[i]
        if token in added:
            if added[token]["special"] or looks_special(token):
                types.append(3)
            else:
                token = token.replace("\u2581", " ")
                types.append(4)
        else:
            types.append(1)
        tokens.append(token)
    pre, bos, eos, eot, add_bos = STYLE_KEYS[style]
    keys = {"tokenizer.ggml.model": (STRING, "gpt2"), "tokenizer.ggml.pre": (STRING, pre),
            "tokenizer.ggml.tokens": (ARRAY, (STRING, tokens)), "tokenizer.ggml.token_type": (ARRAY, (I32, types)),
            "tokenizer.ggml.merges": (ARRAY, (STRING, [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]])),
            "tokenizer.ggml.bos_token_id": (U32, vocab[bos]), "tokenizer.ggml.eos_token_id": (U32, vocab[eos]),
            "tokenizer.ggml.add_bos_token": (BOOL, add_bos), "tokenizer.ggml.add_eos_token": (BOOL, False)}
    if eot:
        keys["tokenizer.ggml.eot_token_id"] = (U32, vocab[eot])
    return keys, n


def import_gguf(data, path, *extra):
    with open(str(path) + ".gguf", "wb") as f:
        f.write(data)
    return subprocess.run([BINARY, "import", "gguf", str(path) + ".gguf", "-o", str(path), *extra], capture_output=True, text=True)


@pytest.fixture(scope="module")
def trained():
    return hf_styles.train(hf_corpus.training_text())


@pytest.fixture(scope="module")
def texts():
    rng = random.Random(39)
    return hf_corpus.fortunes(120_000) + hf_corpus.generated(1500, rng) + ["a xylophone", "xylophone xylophones"]


def style_doc(style, trained):
    doc = hf_styles.style(style, *trained)
    # A GGUF vocabulary has no lstrip / rstrip / single_word (llama.cpp's converter drops them):
    # GPT-2's <mask> is taken without them on both sides.
    for t in doc["added_tokens"]:
        t["lstrip"] = t["rstrip"] = t["single_word"] = False
    if style == "llama3":  # a word that is a token but no merge makes: ignore_merges takes it whole
        vocab = doc["model"]["vocab"]
        vocab["\u0120xylophone"] = len(vocab)  # the added tokens' ids move up one (Hugging Face numbers them after)
        for t in doc["added_tokens"]:
            t["id"] += 1
        for entry in doc["post_processor"]["processors"][1]["special_tokens"].values():
            entry["ids"] = [i + 1 for i in entry["ids"]]
    return doc


LLAMA3_TEMPLATE = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_templates",
                                    "llama-3.2-instruct.jinja")).read()


@pytest.mark.parametrize("style", list(STYLE_KEYS))
def test_gpt2_vocabulary_gives_the_original_ids(style, trained, texts, tmp_path):
    doc = style_doc(style, trained)
    original = lockstep.Tokenizer.for_model(model_dir(str(tmp_path / "original"), doc))
    keys, n = gpt2_keys(doc, style)
    if style == "llama3":
        keys["tokenizer.chat_template"] = (STRING, LLAMA3_TEMPLATE)
    done = import_gguf(gguf(keys, n), tmp_path / "m")
    assert done.returncode == 0, done.stderr
    assert f"(from the file's 'gpt2' vocabulary, pre '{STYLE_KEYS[style][0]}'" in done.stdout, done.stdout
    meta = json.load(open(tmp_path / "m" / "model.json"))
    assert meta["tokenizer"]["type"] == "huggingface" and meta["tokenizer"]["file"] == "tokenizer.json"
    tok = lockstep.Tokenizer.for_model(str(tmp_path / "m"))
    assert len(tok) == n
    mismatches = []
    for text in texts:
        for special in (False, True):
            if tok.encode(text, add_special_tokens=special) != original.encode(text, add_special_tokens=special):
                mismatches.append((special, text[:120]))
    rng = random.Random(len(style))
    for _ in range(2000):
        ids = [rng.randrange(len(original)) for _ in range(rng.randint(1, 20))]
        if tok.decode(ids) != original.decode(ids):
            mismatches.append(("decode", ids))
    assert not mismatches, mismatches[:5]
    _, bos, eos, eot, _ = STYLE_KEYS[style]
    ids = dict(zip(keys["tokenizer.ggml.tokens"][1][1], range(n)))
    assert meta["eos_token_ids"] == [ids[eos]] + ([ids[eot]] if eot else [])
    if style == "llama3":  # the template, with the bos and eos strings, pinned in model.json
        kept = json.load(open(tmp_path / "m" / "chat_template.json"))
        assert kept == {"chat_template": LLAMA3_TEMPLATE, "bos_token": bos, "eos_token": eos}
        assert "chat_template" in meta
    else:
        assert not os.path.exists(tmp_path / "m" / "chat_template.json")


@pytest.mark.parametrize("style", list(STYLE_KEYS))
def test_export_gguf_writes_the_vocabulary_back(style, trained, texts, tmp_path):
    """export-gguf of the imported model writes the file's vocabulary keys again (the pre name
    found from the tokenizer.json's stages), and that file imports to the same ids."""
    keys, n = gpt2_keys(style_doc(style, trained), style)
    if style == "llama3":
        keys["tokenizer.chat_template"] = (STRING, LLAMA3_TEMPLATE)
    assert import_gguf(gguf(keys, n), tmp_path / "m").returncode == 0
    done = subprocess.run([BINARY, "export-gguf", str(tmp_path / "m"), "-o", str(tmp_path / "again.gguf")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    kv = read_keys(str(tmp_path / "again.gguf"))
    same = ["model", "pre", "tokens", "token_type", "merges", "eos_token_id", "eot_token_id", "add_bos_token", "add_eos_token"]
    if keys["tokenizer.ggml.add_bos_token"][1]:
        same.append("bos_token_id")
    for key in ["tokenizer.ggml." + k for k in same] + ["tokenizer.chat_template"]:
        want = keys.get(key)
        got = kv.get(key)
        assert (want[1][1] if want and want[0] == ARRAY else want and want[1]) == got, key
    assert import_gguf(open(tmp_path / "again.gguf", "rb").read(), tmp_path / "again").returncode == 0
    first, again = (lockstep.Tokenizer.for_model(str(tmp_path / d)) for d in ("m", "again"))
    for text in texts[::10]:
        assert first.encode(text, add_special_tokens=True) == again.encode(text, add_special_tokens=True), text[:80]


def test_export_gguf_refuses_what_gguf_cannot_say(trained, tmp_path):
    """A tokenizer.json whose stages are no pre name llama.cpp knows, or an added token with
    lstrip, is refused by name (the `mixed` style has both)."""
    vocab, merges = trained
    hf = str(tmp_path / "hf")
    from test_import_hf import make_hf  # python/tests: a random LlamaForCausalLM directory
    make_hf(hf, vocab=len(vocab) + 5)
    with open(os.path.join(hf, "tokenizer.json"), "w") as f:
        json.dump(hf_styles.style("mixed", vocab, merges), f)
    assert subprocess.run([BINARY, "import", "hf", hf, "-o", str(tmp_path / "m"), "--length", "12"]).returncode == 0
    done = subprocess.run([BINARY, "export-gguf", str(tmp_path / "m"), "-o", str(tmp_path / "x.gguf")],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "tokenizer.json: its normalizer, pre_tokenizer and model.ignore_merges are not those of " \
        "a tokenizer.ggml.pre llama.cpp names" in done.stderr, done.stderr
    assert not os.path.exists(tmp_path / "x.gguf")


def test_gpt2_vocabulary_against_hugging_face(trained, texts, tmp_path):
    """The imported tokenizers' ids are Hugging Face's on the original tokenizer.json files, and
    Hugging Face's on the tokenizer.json files import gguf wrote."""
    npm_oracle.install_or_skip(ORACLE, "tokenizers", "the GGUF vocabulary oracle test")
    for style in STYLE_KEYS:
        doc = style_doc(style, trained)
        path = model_dir(str(tmp_path / style), doc)
        keys, n = gpt2_keys(doc, style)
        assert import_gguf(gguf(keys, n), tmp_path / f"{style}-m").returncode == 0
        tok = lockstep.Tokenizer.for_model(str(tmp_path / f"{style}-m"))
        answer = run_oracle(ORACLE, os.path.join(path, "tokenizer.json"), texts, [], str(tmp_path))
        bad = [t[:80] for t, plain, special in zip(texts, answer["plain"], answer["special"])
               if tok.encode(t) != plain or tok.encode(t, add_special_tokens=True) != special]
        # The tokenizer.json written is one Hugging Face reads to the same ids too.
        written = run_oracle(ORACLE, str(tmp_path / f"{style}-m" / "tokenizer.json"), texts, [], str(tmp_path))
        bad += [t[:80] for t, a, b in zip(texts, written["special"], answer["special"]) if a != b]
        print(f"\n{style}: {len(texts)} texts, {len(bad)} mismatches")
        assert not bad, (style, bad[:5])


# ---- llama: a SentencePiece model as Llama's ----

@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    if spm is None or shutil.which("spm_train") is None:
        pytest.skip("SKIPPED: spm_train or python3-sentencepiece (Debian's sentencepiece) is not installed")
    d = tmp_path_factory.mktemp("spm")
    with open(d / "text.txt", "w") as f:
        f.write("\n".join(hf_corpus.fortunes(200_000)))
    done = subprocess.run(["spm_train", f"--input={d / 'text.txt'}", f"--model_prefix={d / 'sp'}", "--vocab_size=600",
                           "--model_type=bpe", "--byte_fallback=true", "--normalization_rule_name=identity",
                           "--remove_extra_whitespaces=false", "--split_digits=true", "--allow_whitespace_only_pieces=true",
                           "--character_coverage=0.9995", "--max_sentence_length=100000"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return str(d / "sp.model")


def llama_keys(model):
    """_create_vocab_sentencepiece: pieces, scores and types from the model, [PADi] past it, and
    tokenizer_config.json's special tokens (Llama 2's <unk>, <s>, </s>) made control, score -1000."""
    sp = spm.SentencePieceProcessor(model_file=model)
    n = sp.vocab_size() + PADDING
    tokens = [f"[PAD{i}]" for i in range(n)]
    scores, types = [-10000.0] * n, [5] * n
    for i in range(sp.vocab_size()):
        tokens[i], scores[i] = sp.id_to_piece(i), sp.get_score(i)
        types[i] = 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i) else 6 if sp.is_byte(i) else 1
    for i in (sp.unk_id(), sp.bos_id(), sp.eos_id()):
        types[i], scores[i] = 3, -1000.0
    return {"tokenizer.ggml.model": (STRING, "llama"), "tokenizer.ggml.pre": (STRING, "default"),
            "tokenizer.ggml.tokens": (ARRAY, (STRING, tokens)), "tokenizer.ggml.scores": (ARRAY, (F32, scores)),
            "tokenizer.ggml.token_type": (ARRAY, (I32, types)), "tokenizer.ggml.bos_token_id": (U32, sp.bos_id()),
            "tokenizer.ggml.eos_token_id": (U32, sp.eos_id()), "tokenizer.ggml.unknown_token_id": (U32, sp.unk_id()),
            "tokenizer.ggml.add_bos_token": (BOOL, True), "tokenizer.ggml.add_eos_token": (BOOL, False)}, n


def test_llama_vocabulary_gives_sentencepieces_ids(spm_model, texts, tmp_path):
    keys, n = llama_keys(spm_model)
    keys["tokenizer.chat_template"] = (STRING, open(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                 "chat_templates", "tinyllama-chat-v1.0.jinja")).read())
    done = import_gguf(gguf(keys, n), tmp_path / "m")
    assert done.returncode == 0, done.stderr
    meta = json.load(open(tmp_path / "m" / "model.json"))
    assert meta["tokenizer"]["type"] == "sentencepiece" and meta["tokenizer"]["file"] == "tokenizer.model"
    assert json.load(open(tmp_path / "m" / "chat_template.json"))["bos_token"] == "<s>"
    tok = lockstep.Tokenizer.for_model(str(tmp_path / "m"))
    sp = spm.SentencePieceProcessor(model_file=spm_model)
    assert len(tok) == n and tok.bos == sp.bos_id() and tok.eos == sp.eos_id()
    bad, checked = [], 0
    for text in texts:
        if any(c in text for c in ("<s>", "</s>", "<unk>")):
            continue  # lockstep splits those strings out as their ids; SentencePiece's encode does not
        checked += 1
        want = sp.encode(text)
        if tok.encode(text) != want or tok.encode(text, add_special_tokens=True) != [sp.bos_id()] + want:
            bad.append(text[:100])
    rng = random.Random(2)
    for _ in range(1000):
        ids = [rng.randrange(3, sp.vocab_size()) for _ in range(rng.randint(1, 20))]
        if tok.decode(ids) != sp.decode(ids):
            bad.append(("decode", ids))
    print(f"\nllama: {checked} texts, {len(bad)} mismatches")
    assert checked > 1000 and not bad, bad[:5]


# ---- refusals ----

def expect_refused(cases, n, tmp_path):
    """Each (keys, needle): refused, the message holding needle, nothing written."""
    for index, (keys, needle) in enumerate(cases):
        target = tmp_path / f"bad{index}"
        done = import_gguf(gguf(keys, n), target)
        assert done.returncode != 0, needle
        assert needle in done.stderr, (needle, done.stderr)
        assert not os.path.exists(target), needle
    assert not [f for f in os.listdir(tmp_path) if not f.endswith(".gguf")]


def test_bad_vocabularies_are_refused_and_nothing_is_written(trained, tmp_path):
    doc = style_doc("llama3", trained)
    good, n = gpt2_keys(doc, "llama3")
    tokens = good["tokenizer.ggml.tokens"][1][1]

    def changed(**changes):
        keys = dict(good)
        for k, v in changes.items():
            key = "tokenizer.ggml." + k if k != "chat_template" else "tokenizer.chat_template"
            if v is None:
                del keys[key]
            else:
                keys[key] = v
        return keys

    cases = [
        (changed(token_type=(ARRAY, (I32, [1] * (n - 1)))), "key 'tokenizer.ggml.token_type' has %d elements but "
                                                             "tokenizer.ggml.tokens has %d" % (n - 1, n)),
        (changed(token_type=(ARRAY, (I32, [1] * (n - 1) + [9]))), "tokenizer.ggml.token_type[%d] is 9" % (n - 1)),
        (changed(merges=(ARRAY, (STRING, good["tokenizer.ggml.merges"][1][1] + ["zq\u0120 xy"]))),
         "('zq\u0120 xy') names 'zq\u0120', which is not a token of the BPE vocabulary"),
        (changed(merges=(ARRAY, (STRING, ["nospace"]))), "tokenizer.ggml.merges[0] ('nospace') is not two tokens"),
        (changed(merges=None), "has a vocabulary but no key 'tokenizer.ggml.merges'"),
        (changed(bos_token_id=(U32, n)), "key 'tokenizer.ggml.bos_token_id' is %d, not a token id" % n),
        (changed(eot_token_id=(U32, n + 5)), "key 'tokenizer.ggml.eot_token_id' is %d, not a token id" % (n + 5)),
        (changed(tokens=(ARRAY, (I32, list(range(n))))), "key 'tokenizer.ggml.tokens' is not an array of strings"),
        (changed(tokens=(ARRAY, (STRING, tokens[:-1]))), "tokenizer.ggml.tokens has %d tokens but the model's vocabulary" % (n - 1)),
        (changed(tokens=(ARRAY, (STRING, tokens[:5] + [tokens[3]] + tokens[6:]))), "tokenizer.ggml.tokens[5] ('%s') is also token 3" % tokens[3]),
        (changed(pre=(STRING, "falcon")), "tokenizer.ggml.pre 'falcon' is not a pre-tokenizer lockstep converts"),
        (changed(model=(STRING, "bert")), "tokenizer.ggml.model 'bert'; lockstep converts 'gpt2'"),
        (changed(add_bos_token=(U32, 1)), "key 'tokenizer.ggml.add_bos_token' is not a bool"),
        (changed(chat_template=(STRING, "{% filter upper %}{{ messages }}{% endfilter %}")),
         ".gguf: key 'tokenizer.chat_template' line 1: the tag {% filter %} is not supported"),
    ]
    expect_refused(cases, n, tmp_path)
    # What lockstep does not convert imports with --ids-only, as the refusal says.
    assert "--ids-only" in import_gguf(gguf(changed(model=(STRING, "bert")), n), tmp_path / "x").stderr
    done = import_gguf(gguf(changed(model=(STRING, "bert")), n), tmp_path / "ids", "--ids-only")
    assert done.returncode == 0 and "vocabulary was left out: --ids-only" in done.stdout, done.stderr


def test_bad_llama_vocabularies_are_refused(spm_model, tmp_path):
    spm_keys, spm_n = llama_keys(spm_model)
    cases = [
        (dict(spm_keys, **{"tokenizer.ggml.scores": (ARRAY, (F32, [0.0] * (spm_n - 2)))}), "key 'tokenizer.ggml.scores' has"),
        ({k: v for k, v in spm_keys.items() if k != "tokenizer.ggml.scores"}, "no key 'tokenizer.ggml.scores'"),
        ({k: v for k, v in spm_keys.items() if k != "tokenizer.ggml.unknown_token_id"}, "without an unknown token"),
        (dict(spm_keys, **{"tokenizer.ggml.token_type": (ARRAY, (I32, [6] * spm_n))}), "has token_type 6 (byte) but is not"),
        (dict(spm_keys, **{"tokenizer.ggml.token_type": (ARRAY, (I32, [1 if t == "<0x41>" else x for t, x in zip(
            spm_keys["tokenizer.ggml.tokens"][1][1], spm_keys["tokenizer.ggml.token_type"][1][1])]))}),
         "has 255 byte tokens (token_type 6); a byte-fallback vocabulary has all 256"),
        (dict(spm_keys, **{"tokenizer.ggml.add_eos_token": (BOOL, True)}), "tokenizer.ggml.add_eos_token is true"),
    ]
    expect_refused(cases, spm_n, tmp_path)


def test_a_byte_vocabulary_imports_as_bytes(tmp_path):
    """lockstep's own export of a byte model (256 byte strings, no merges) comes back as bytes."""
    table = hf_styles.byte_chars()
    keys = {"tokenizer.ggml.model": (STRING, "gpt2"), "tokenizer.ggml.pre": (STRING, "default"),
            "tokenizer.ggml.tokens": (ARRAY, (STRING, [table[b] for b in range(256)])),
            "tokenizer.ggml.token_type": (ARRAY, (I32, [1] * 256)), "tokenizer.ggml.merges": (ARRAY, (STRING, []))}
    done = import_gguf(gguf(keys, 256), tmp_path / "m")
    assert done.returncode == 0, done.stderr
    assert "tokenizer  bytes" in done.stdout
    assert "tokenizer" not in json.load(open(tmp_path / "m" / "model.json"))
    # With a chat template, the template alone is kept beside the bytes.
    keys["tokenizer.chat_template"] = (STRING, "{% for m in messages %}{{ m.content }}\n{% endfor %}")
    done = import_gguf(gguf(keys, 256), tmp_path / "t")
    assert done.returncode == 0, done.stderr
    meta = json.load(open(tmp_path / "t" / "model.json"))
    assert "tokenizer" not in meta and meta["chat_template"]["file"] == "chat_template.json"
    assert json.load(open(tmp_path / "t" / "chat_template.json"))["chat_template"] == keys["tokenizer.chat_template"][1]
