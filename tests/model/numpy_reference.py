#!/usr/bin/env python3
"""An independent float64 implementation of lockstep's decoder in NumPy, used as a check on the
reference logits. It reads the model directory with its own safetensors parser and knows nothing
of lockstep's code: only the architecture as docs/ARITHMETIC.md describes it.

usage: numpy_reference.py MODEL_DIR IDS_FILE LOGITS_FILE ROWS COLS [LENGTHS...]
IDS_FILE holds int32 [ROWS, COLS]; LOGITS_FILE float32 [ROWS, COLS, vocab] from lockstep.
Exits 0 when every real position agrees within the tolerance, 1 otherwise; prints the errors.
"""
import json
import struct
import sys

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", entry
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[base + begin : base + end], dtype="<f4")
        tensors[name] = array.reshape(entry["shape"]).astype(np.float64)
    return tensors


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, theta):
    """x [T, heads, head_dim]: rotate interleaved pairs (2i, 2i+1) by pos * theta^(-2i/head_dim)."""
    t, _, hd = x.shape
    freq = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    angle = np.arange(t, dtype=np.float64)[:, None] * freq[None, :]
    c, s = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * c - x1 * s
    out[..., 1::2] = x0 * s + x1 * c
    return out


def forward(p, cfg, ids):
    """Logits [T, vocab] of one row of token ids."""
    d, h, kvh = cfg["d_model"], cfg["n_heads"], cfg["n_kv_heads"]
    hd = d // h
    eps, theta = cfg["norm_eps"], cfg["rope_theta"]
    t = len(ids)
    x = p["embed"][ids]
    mask = np.triu(np.full((t, t), -np.inf), k=1)
    for layer in range(cfg["n_layers"]):
        w = lambda name: p[f"layers.{layer}.{name}"]
        a = rmsnorm(x, w("attn_norm"), eps)
        q = rope((a @ w("wq")).reshape(t, h, hd), theta)
        k = rope((a @ w("wk")).reshape(t, kvh, hd), theta)
        v = (a @ w("wv")).reshape(t, kvh, hd)
        k = np.repeat(k, h // kvh, axis=1)
        v = np.repeat(v, h // kvh, axis=1)
        scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        att = np.einsum("hts,shd->thd", probs, v).reshape(t, h * hd)
        x = x + att @ w("wo")
        m = rmsnorm(x, w("mlp_norm"), eps)
        g, u = m @ w("w_gate"), m @ w("w_up")
        x = x + (g / (1.0 + np.exp(-g)) * u) @ w("w_down")
    return rmsnorm(x, p["final_norm"], eps) @ p["head"]


def main():
    model_dir, ids_file, logits_file = sys.argv[1:4]
    rows, cols = int(sys.argv[4]), int(sys.argv[5])
    lengths = [int(v) for v in sys.argv[6:]] or [cols] * rows
    cfg = json.load(open(f"{model_dir}/model.json"))["config"]
    params = load_safetensors(f"{model_dir}/params.safetensors")
    ids = np.fromfile(ids_file, dtype="<i4").reshape(rows, cols)
    got = np.fromfile(logits_file, dtype="<f4").reshape(rows, cols, cfg["vocab_size"]).astype(np.float64)
    # Tolerance. Each f32 matmul output is a chain of K rounded fmas, whose error is at most
    # about K * 2^-24 times the sum of |products| (Higham's bound); with K <= 96 here that is
    # under 6e-6 of the products' magnitude, and the exp, log and rsqrt steps add about one ulp
    # each. Through a few layers the logits then carry relative errors near 1e-5 of their
    # scale (about 1e-6 is what these models show). 5e-5 of the largest |logit| leaves a 5x
    # margin over that estimate, while any error of formula (a wrong RoPE pairing, a missing
    # residual, a mis-scaled score) moves the logits by far more, percents of their scale.
    worst = 0.0
    scale = 0.0
    for b in range(rows):
        n = lengths[b]
        want = forward(params, cfg, ids[b, :n])
        scale = max(scale, float(np.abs(want).max()))
        worst = max(worst, float(np.abs(got[b, :n] - want).max()))
        if np.any(got[b, n:] != 0.0):
            print(f"row {b}: padding positions are not zero")
            return 1
    tolerance = 5e-5 * max(scale, 1.0)
    print(f"max |f32 - f64| = {worst:.3e}, logit scale {scale:.3f}, tolerance {tolerance:.3e}")
    return 0 if worst <= tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
