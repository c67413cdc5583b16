"""`lockstep import hf`: a random small Hugging Face Llama directory written here with NumPy
(config.json and safetensors: F32, F16 or BF16, one file or shards with an index, MHA or GQA,
tied embeddings or an lm_head) is imported, and lockstep's logits (`lockstep call`) are compared
with an independent float64 forward pass written here the way Hugging Face's LlamaForCausalLM
computes it (rotate_half RoPE): the largest absolute difference over the largest absolute logit
stays below 1e-5. Qwen2ForCausalLM (biases on q, k and v), Llama with attention_bias (and on o)
and Llama 3's rope_scaling (rope_type "llama3") are checked the same way. Refusals name the field.
docs/FORMAT.md, "Hugging Face import"."""

import json
import os
import struct
import subprocess

import numpy as np
import pytest

from conftest import BINARY

DTYPES = {"F32": "<f4", "F16": "<f2"}


def bf16_bits(values):
    """f32 -> bfloat16 bits, rounded to nearest even."""
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def stored(values, dtype):
    """(the bytes of `values` in `dtype`, the f64 values those bytes hold)."""
    if dtype == "BF16":
        bits = bf16_bits(values)
        back = (bits.astype(np.uint32) << 16).view(np.float32)
        return bits.astype("<u2").tobytes(), back.astype(np.float64)
    arr = np.asarray(values, dtype=DTYPES[dtype])
    return arr.tobytes(), arr.astype(np.float64)


def write_safetensors(path, tensors):
    """tensors: {name: (dtype, shape, bytes)} in the order given."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def make_hf(path, *, vocab=40, hidden=32, inter=48, heads=4, kv_heads=4, layers=2, max_pos=16,
            theta=10000.0, eps=1e-5, tied=False, dtype="F32", shards=1, seed=0, extra_config=None,
            extra_tensors=None, arch="llama", attention_bias=False, rope_scaling=None):
    """Writes a random LlamaForCausalLM (arch "llama") or Qwen2ForCausalLM ("qwen2": biases on q,
    k and v) directory; returns the config and the f64 weights as stored, by HF name.
    attention_bias (llama): biases on q, k, v and o."""
    rng = np.random.default_rng(seed)
    hd = hidden // heads
    shapes = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (heads * hd, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * hd, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * hd, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * hd),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        })
        if arch == "qwen2" or attention_bias:
            shapes.update({p + "self_attn.q_proj.bias": (heads * hd,), p + "self_attn.k_proj.bias": (kv_heads * hd,),
                           p + "self_attn.v_proj.bias": (kv_heads * hd,)})
        if attention_bias:
            shapes[p + "self_attn.o_proj.bias"] = (hidden,)
    shapes["model.norm.weight"] = (hidden,)
    if not tied:
        shapes["lm_head.weight"] = (vocab, hidden)
    weights, raw = {}, {}
    for name, shape in shapes.items():
        if name.endswith(".bias"):
            v = 0.5 * rng.standard_normal(shape)
        elif len(shape) == 1:
            v = 1.0 + 0.2 * rng.standard_normal(shape)
        elif name == "model.embed_tokens.weight":
            v = rng.standard_normal(shape)
        else:
            v = rng.standard_normal(shape) * (1.0 / np.sqrt(shape[1]))
        raw[name], weights[name] = stored(v.astype(np.float32), dtype)
    for name, (dt, shape, data) in (extra_tensors or {}).items():
        raw[name] = data
        shapes[name] = shape
    names = list(shapes)
    os.makedirs(path)
    dtype_of = lambda n: (extra_tensors or {}).get(n, (dtype,))[0]
    if shards == 1:
        write_safetensors(os.path.join(path, "model.safetensors"),
                          {n: (dtype_of(n), shapes[n], raw[n]) for n in names})
    else:
        weight_map = {}
        for s in range(shards):
            file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = names[s::shards]
            write_safetensors(os.path.join(path, file), {n: (dtype_of(n), shapes[n], raw[n]) for n in part})
            weight_map.update({n: file for n in part})
        json.dump({"metadata": {}, "weight_map": weight_map},
                  open(os.path.join(path, "model.safetensors.index.json"), "w"))
    config = {
        "architectures": ["Qwen2ForCausalLM" if arch == "qwen2" else "LlamaForCausalLM"], "model_type": arch,
        "hidden_act": "silu",
        "hidden_size": hidden, "intermediate_size": inter, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "num_hidden_layers": layers, "vocab_size": vocab,
        "max_position_embeddings": max_pos, "rms_norm_eps": eps, "rope_theta": theta,
        "rope_scaling": rope_scaling, "tie_word_embeddings": tied, "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
    }
    if arch == "qwen2":  # as Qwen2's config.json has them: a window it does not use
        config.update({"use_sliding_window": False, "sliding_window": 32768, "max_window_layers": 28})
    else:
        config.update({"attention_bias": attention_bias, "mlp_bias": False})
    config.update(extra_config or {})
    json.dump(config, open(os.path.join(path, "config.json"), "w"))
    return config, weights


def hf_forward(config, w, ids):
    """LlamaForCausalLM's forward in float64, written from its definition: RMSNorm, rotate_half
    RoPE over the two halves of each head, GQA by repeating key/value heads, causal softmax
    attention, SwiGLU, the final norm, lm_head (or the embedding, tied)."""
    hidden, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    hd, eps, T = hidden // heads, config["rms_norm_eps"], len(ids)

    def rmsnorm(x, weight):
        return weight * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))

    def rotate_half(x):
        half = x.shape[-1] // 2
        return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)

    inv_freq = 1.0 / (config["rope_theta"] ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    scaling = config.get("rope_scaling")
    if scaling:  # Llama 3: slow the long wavelengths by `factor`, keep the short, blend between
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * np.pi / inv_freq
        smooth = (old / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = np.where(wavelen > old / low, inv_freq / factor,
                            np.where(wavelen < old / high, inv_freq, blended))
    qwen2 = config["model_type"] == "qwen2"
    qkv_bias, o_bias = qwen2 or config.get("attention_bias"), not qwen2 and config.get("attention_bias")
    bias = lambda name, n: w[name] if n else 0.0
    freqs = np.arange(T, dtype=np.float64)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)  # [T, hd]
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    mask = np.triu(np.full((T, T), -np.inf), 1)

    x = w["model.embed_tokens.weight"][ids]
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rmsnorm(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T + bias(p + "self_attn.q_proj.bias", qkv_bias)).reshape(T, heads, hd)
        k = (h @ w[p + "self_attn.k_proj.weight"].T + bias(p + "self_attn.k_proj.bias", qkv_bias)).reshape(T, kv, hd)
        v = (h @ w[p + "self_attn.v_proj.weight"].T + bias(p + "self_attn.v_proj.bias", qkv_bias)).reshape(T, kv, hd)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, heads // kv, axis=1)  # repeat_kv: head h reads key/value head h // n_rep
        v = np.repeat(v, heads // kv, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        att = np.einsum("hts,shd->thd", probs, v).reshape(T, heads * hd)
        x = x + (att @ w[p + "self_attn.o_proj.weight"].T + bias(p + "self_attn.o_proj.bias", o_bias))
        h = rmsnorm(x, w[p + "post_attention_layernorm.weight"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        up = h @ w[p + "mlp.up_proj.weight"].T
        x = x + ((gate / (1.0 + np.exp(-gate))) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if config["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def run(*args):
    return subprocess.run([BINARY, *args], capture_output=True)


def lockstep_logits(model, ids, vocab):
    done = subprocess.run([BINARY, "call", model, "--output", "logits"], input=np.asarray(ids, "<i4").tobytes(),
                          capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    return np.frombuffer(done.stdout, dtype="<f4").reshape(len(ids), vocab).astype(np.float64)


CASES = {
    "f32-mha-untied": dict(dtype="F32"),
    "f16-gqa-tied": dict(dtype="F16", kv_heads=2, tied=True, seed=1),
    "bf16-gqa-sharded": dict(dtype="BF16", kv_heads=1, heads=4, shards=3, seed=2, layers=3, theta=500000.0),
    "f32-gqa-tied-sharded": dict(dtype="F32", kv_heads=2, tied=True, shards=2, seed=3, hidden=64, inter=96,
                                 heads=4, max_pos=64, eps=1e-6),
    # Llama 3 scaling, head_dim 16 (wavelengths 6.3 kept, 19.9 and 63 blended, 199 and up slowed).
    "f32-llama3-scaling": dict(dtype="F32", kv_heads=2, seed=6, hidden=64, inter=96, heads=4, max_pos=32,
                               theta=10000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                            "high_freq_factor": 4.0,
                                                            "original_max_position_embeddings": 64}),
    "bf16-llama3-scaling-sharded": dict(dtype="BF16", kv_heads=1, seed=7, shards=2, hidden=64, heads=2, max_pos=24,
                                        theta=500000.0, rope_scaling={"factor": 32.0, "low_freq_factor": 1.0,
                                                                      "high_freq_factor": 4.0, "type": "llama3",
                                                                      "original_max_position_embeddings": 128}),
    "f32-qwen2": dict(arch="qwen2", dtype="F32", kv_heads=2, seed=8, theta=1000000.0, eps=1e-6),
    "bf16-qwen2-tied": dict(arch="qwen2", dtype="BF16", kv_heads=1, seed=9, tied=True, layers=3),
    "f16-llama-attention-bias-llama3": dict(dtype="F16", kv_heads=2, seed=10, attention_bias=True,
                                            rope_scaling={"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                                                          "high_freq_factor": 2.0,
                                                          "original_max_position_embeddings": 32}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_hugging_face(tmp_path, case):
    opts = CASES[case]
    hf = str(tmp_path / "hf")
    config, weights = make_hf(hf, **opts)
    out = str(tmp_path / "imported")
    length = 24 if opts.get("max_pos", 16) > 24 else None
    done = run("import", "hf", hf, "-o", out, *(["--length", str(length)] if length else []))
    assert done.returncode == 0, done.stderr.decode()
    text = done.stdout.decode()
    assert "tokenizer  none: token ids only (no tokenizer for its " in text
    meta = json.load(open(os.path.join(out, "model.json")))
    c = meta["config"]
    assert c["length"] == (length or config["max_position_embeddings"])
    assert (c["d_model"], c["n_heads"], c["n_kv_heads"], c["d_ff"], c["n_layers"], c["vocab_size"]) == (
        config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"],
        config["intermediate_size"], config["num_hidden_layers"], config["vocab_size"])
    ids = np.random.default_rng(7).integers(0, config["vocab_size"], size=c["length"])
    want = hf_forward(config, weights, ids)
    got = lockstep_logits(out, ids, config["vocab_size"])
    err = np.abs(got - want).max() / np.abs(want).max()
    print(f"{case}: max |diff| / max |logit| = {err:.3g}")
    assert err < 1e-5, f"{case}: max |diff| / max |logit| = {err:.3g}"


def test_the_permutation_matters(tmp_path):
    """The check above sees a missing permutation: lockstep without it would compute the Hugging
    Face model whose q and k rows are reordered, whose logits are far from these."""
    hf = str(tmp_path / "hf")
    config, weights = make_hf(hf, seed=4)
    out = str(tmp_path / "imported")
    assert run("import", "hf", hf, "-o", out).returncode == 0
    ids = np.arange(16) % config["vocab_size"]
    got = lockstep_logits(out, ids, config["vocab_size"])
    wrong = dict(weights)
    for i in range(config["num_hidden_layers"]):
        for proj in ("q_proj", "k_proj"):
            name = f"model.layers.{i}.self_attn.{proj}.weight"
            hd = config["hidden_size"] // config["num_attention_heads"]
            rows = weights[name].reshape(-1, 2, hd // 2, config["hidden_size"])
            wrong[name] = rows.swapaxes(1, 2).reshape(weights[name].shape)
    bad = hf_forward(config, wrong, ids)
    assert np.abs(got - bad).max() / np.abs(bad).max() > 1e-3


@pytest.mark.parametrize("case", ["f32-llama3-scaling", "f32-qwen2", "f16-llama-attention-bias-llama3"])
def test_scaling_and_biases_matter(tmp_path, case):
    """The checks above see each new part: the logits without the scaling, or without any one
    bias, are far from lockstep's; and the imported model.json records the parts."""
    hf = str(tmp_path / "hf")
    config, weights = make_hf(hf, **CASES[case])
    out = str(tmp_path / "imported")
    assert run("import", "hf", hf, "-o", out).returncode == 0
    c = json.load(open(os.path.join(out, "model.json")))["config"]
    assert c.get("qkv_bias", False) == (config["model_type"] == "qwen2" or config.get("attention_bias", False))
    assert c.get("o_bias", False) == (config["model_type"] == "llama" and config.get("attention_bias", False))
    if config["rope_scaling"]:
        s = config["rope_scaling"]
        assert c["rope_scaling"] == {"type": "llama3", "factor": s["factor"], "low_freq_factor": s["low_freq_factor"],
                                     "high_freq_factor": s["high_freq_factor"],
                                     "original_max_position_embeddings": s["original_max_position_embeddings"]}
    else:
        assert "rope_scaling" not in c
    ids = np.random.default_rng(3).integers(0, config["vocab_size"], size=c["length"])
    got = lockstep_logits(out, ids, config["vocab_size"])
    variants = []
    if config["rope_scaling"]:
        variants.append(("no scaling", dict(config, rope_scaling=None), weights))
    for name in weights:
        if name.endswith(".bias"):
            variants.append((name, config, dict(weights, **{name: np.zeros_like(weights[name])})))
    assert variants
    for what, cfg, w in variants:
        bad = hf_forward(cfg, w, ids)
        assert np.abs(got - bad).max() / np.abs(bad).max() > 1e-4, what


def test_export_gguf_writes_qwen2_and_llama3_scaling_back(tmp_path):
    """export-gguf writes a Qwen2 as llama.cpp's qwen2 architecture (NeoX rows, biases) and Llama
    3's scaling as rope_freqs; import gguf reads either back to the very parameters import hf gave
    (vocab 256: a byte-level model carries its bytes as the vocabulary). Llama's output bias has no
    GGUF architecture: refused by name, nothing written."""
    llama3 = dict(CASES["f32-llama3-scaling"], vocab=256,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192})
    for case, spec, arch in [("qwen2", dict(CASES["f32-qwen2"], vocab=256), b"qwen2 architecture"),
                             ("llama3", llama3, b"llama architecture")]:
        hf, out, back = (str(tmp_path / (case + s)) for s in ("-hf", "-m", "-back"))
        make_hf(hf, **spec)
        assert run("import", "hf", hf, "-o", out).returncode == 0
        done = run("export-gguf", out, "-o", str(tmp_path / (case + ".gguf")))
        assert done.returncode == 0 and arch in done.stdout, done.stderr.decode()
        again = run("import", "gguf", str(tmp_path / (case + ".gguf")), "-o", back)
        assert again.returncode == 0, again.stderr.decode()
        with open(os.path.join(out, "params.safetensors"), "rb") as a, open(os.path.join(back, "params.safetensors"), "rb") as b:
            assert a.read() == b.read(), case
        shown = run("inspect", back)
        assert (b"biases     q, k, v" if case == "qwen2" else b"llama3 scaling: factor 8") in shown.stdout, shown.stdout
    hf, out = str(tmp_path / "obias-hf"), str(tmp_path / "obias-m")
    make_hf(hf, **CASES["f16-llama-attention-bias-llama3"])
    assert run("import", "hf", hf, "-o", out).returncode == 0
    done = run("export-gguf", out, "-o", str(tmp_path / "x.gguf"))
    assert done.returncode != 0 and "attention output bias (o_bias)" in done.stderr.decode(), done.stderr.decode()
    assert not os.path.exists(tmp_path / "x.gguf")


def test_python_sees_biases_and_scaling(extension, tmp_path):
    import pickle
    for case in ("f16-llama-attention-bias-llama3", "f32-qwen2"):
        hf = str(tmp_path / case)
        config, weights = make_hf(hf, **CASES[case])
        extension.import_hf(hf, str(tmp_path / (case + "-m")))
        lm = extension.LanguageModelInference.from_checkpoint(str(tmp_path / (case + "-m")))
        c = lm.shape
        assert c.qkv_bias and c.o_bias == (case != "f32-qwen2")
        if case == "f32-qwen2":
            assert c.rope_scaling is None and "rope_scaling" not in repr(c)
        else:
            assert c.rope_scaling == {"type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 2.0,
                                      "original_max_position_embeddings": 32}
            assert "rope_scaling=" in repr(c) and "o_bias=True" in repr(c)
        back = pickle.loads(pickle.dumps(c))
        assert back == c and hash(back) == hash(c) and repr(back) == repr(c)
        plain = extension.LanguageModelConfig(vocab_size=c.vocab_size, length=c.length, d_model=c.d_model,
                                              n_layers=c.n_layers, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads,
                                              d_ff=c.d_ff, norm_eps=c.norm_eps, rope_theta=c.rope_theta, batch=c.batch)
        assert plain != c and not plain.qkv_bias and plain.rope_scaling is None


REFUSALS = [
    (dict(extra_config={"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}), "'rope_scaling'"),
    (dict(extra_config={"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}), "'rope_scaling'"),
    (dict(extra_config={"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
                                         "beta": 1}}), "'rope_scaling' has 'beta'"),
    (dict(extra_config={"attention_bias": True}), "self_attn.q_proj.bias"),
    (dict(arch="qwen2", extra_config={"use_sliding_window": True}), "'use_sliding_window'"),
    (dict(arch="qwen2", attention_bias=True), "'model.layers.0.self_attn.o_proj.bias' is a bias"),
    (dict(extra_config={"mlp_bias": True}), "'mlp_bias'"),
    (dict(extra_config={"hidden_act": "gelu"}), "'hidden_act'"),
    (dict(extra_config={"sliding_window": 4096}), "'sliding_window'"),
    (dict(extra_config={"architectures": ["MistralForCausalLM"]}), "'architectures'"),
    (dict(extra_config={"head_dim": 16}), "'head_dim'"),
    (dict(extra_config={"max_position_embeddings": 131072}), "'max_position_embeddings' is 131072"),
    (dict(extra_tensors={"model.layers.0.self_attn.q_proj.bias": ("F32", (32,), bytes(128))}), "is a bias"),
    (dict(extra_tensors={"model.extra.weight": ("F32", (2,), bytes(8))}), "'model.extra.weight' is not part"),
]


@pytest.mark.parametrize("index", range(len(REFUSALS)))
def test_refusals_name_the_field(tmp_path, index):
    opts, needle = REFUSALS[index]
    hf = str(tmp_path / "hf")
    make_hf(hf, **opts)
    out = str(tmp_path / "imported")
    done = run("import", "hf", hf, "-o", out)
    assert done.returncode != 0
    assert needle in done.stderr.decode(), done.stderr.decode()
    assert not os.path.exists(out)
    assert [n for n in os.listdir(tmp_path) if n != "hf"] == []  # no temporary left


def test_length_and_tokenizer_files(tmp_path):
    hf = str(tmp_path / "hf")
    make_hf(hf, extra_config={"max_position_embeddings": 131072})
    done = run("import", "hf", hf, "-o", str(tmp_path / "a"), "--length", "12")
    assert done.returncode == 0, done.stderr.decode()
    assert json.load(open(tmp_path / "a" / "model.json"))["config"]["length"] == 12

    open(os.path.join(hf, "tokenizer.json"), "w").write("{}")  # Llama 3 ships only this
    done = run("import", "hf", hf, "-o", str(tmp_path / "b"), "--length", "12")
    assert done.returncode != 0 and b"tokenizer.json" in done.stderr
    assert run("import", "hf", hf, "-o", str(tmp_path / "b"), "--length", "12", "--ids-only").returncode == 0

    open(os.path.join(hf, "tokenizer.model"), "wb").write(b"\0")  # not a SentencePiece model
    done = run("import", "hf", hf, "-o", str(tmp_path / "c"), "--length", "12")
    assert done.returncode != 0 and b"tokenizer.model: not a SentencePiece model" in done.stderr
    assert not os.path.exists(tmp_path / "c")
    done = run("import", "hf", hf, "-o", str(tmp_path / "c"), "--length", "12", "--ids-only")
    assert done.returncode == 0 and b"no tokenizer" in done.stdout


def test_missing_and_misshapen_tensors(tmp_path):
    hf = str(tmp_path / "hf")
    make_hf(hf, extra_config={"num_hidden_layers": 3})  # config says 3 layers, the weights hold 2
    done = run("import", "hf", hf, "-o", str(tmp_path / "x"))
    assert done.returncode != 0 and b"model.layers.2." in done.stderr
    hf2 = str(tmp_path / "hf2")
    make_hf(hf2, extra_config={"intermediate_size": 40})
    done = run("import", "hf", hf2, "-o", str(tmp_path / "y"))
    assert done.returncode != 0 and b"has shape [48, 32], expected [40, 32]" in done.stderr


def test_generate_takes_and_prints_ids(tmp_path):
    """A model without a tokenizer (vocabulary 40) generates from --prompt-ids and prints ids:
    greedy, each the argmax of lockstep's own logits for the context so far; text is refused."""
    hf = str(tmp_path / "hf")
    config, _ = make_hf(hf, seed=5, kv_heads=2)
    out = str(tmp_path / "m")
    assert run("import", "hf", hf, "-o", out).returncode == 0
    done = run("generate", out, "--prompt-ids", "3, 14,15", "-n", "6", "--temperature", "0")
    assert done.returncode == 0, done.stderr.decode()
    assert b"no tokenizer" in done.stderr and b"printing token ids" in done.stderr
    ids = [int(t) for t in done.stdout.decode().strip().split(",")]
    assert ids[:3] == [3, 14, 15] and len(ids) == 9
    for t in range(3, 9):  # positions past t do not change position t - 1's logits (causal)
        padded = np.zeros(16, dtype=np.int64)
        padded[:t] = ids[:t]
        logits = lockstep_logits(out, padded, config["vocab_size"])
        assert ids[t] == int(np.argmax(logits[t - 1])), t
    for bad, needle in [(["--prompt", "hi"], b"give the prompt as --prompt-ids"),
                        (["--prompt-ids", "1,40"], b"prompt token 1 is 40"),
                        (["--prompt-ids", "1,,2"], b"entry 1"),
                        (["--prompt-ids", "1", "--stop", "x"], b"--stop compares text")]:
        done = run("generate", out, *bad)
        assert done.returncode != 0 and needle in done.stderr and done.stdout == b"", bad


def test_python_binding(extension, tmp_path):
    hf = str(tmp_path / "hf")
    make_hf(hf, dtype="BF16", tied=True)
    info = extension.import_hf(hf, str(tmp_path / "py"), length=8)
    assert info["dtypes"] == ["BF16"] and info["tied"] and info["length"] == 8
    assert run("import", "hf", hf, "-o", str(tmp_path / "cli"), "--length", "8").returncode == 0
    for name in ("model.json", "params.safetensors"):
        assert open(tmp_path / "py" / name, "rb").read() == open(tmp_path / "cli" / name, "rb").read()
    with pytest.raises(RuntimeError, match="rope_scaling"):
        make_hf(str(tmp_path / "hf2"), extra_config={"rope_scaling": {"factor": 2.0}})
        extension.import_hf(str(tmp_path / "hf2"), str(tmp_path / "x"))


def test_import_and_inspect_say_one_rule_for_how_text_becomes_ids(tmp_path):
    """A 256-id model without a tokenizer: import said "no tokenizer: the model takes token ids"
    while inspect said bytes and generate --prompt took text (issue 42). Both print the same line;
    a model of another vocabulary takes ids only, said the same way by both."""
    for vocab, want in ((256, "tokenizer  bytes (the ids are the text's UTF-8 bytes)"),
                        (40, "tokenizer  none: token ids only (no tokenizer for its 40 ids; text is refused)")):
        hf, out = str(tmp_path / f"hf{vocab}"), str(tmp_path / f"m{vocab}")
        make_hf(hf, vocab=vocab)
        done = run("import", "hf", hf, "-o", out)
        assert done.returncode == 0, done.stderr.decode()
        said = [l for l in done.stdout.decode().splitlines() if l.startswith("tokenizer")]
        shown = [l for l in run("inspect", out).stdout.decode().splitlines() if l.startswith("tokenizer")]
        assert said == shown == [want], (said, shown)
        if vocab == 256:
            assert run("generate", out, "--prompt", "hi", "-n", "3", "--temperature", "0").returncode == 0
