#!/usr/bin/env python3
# Writes the seed corpus of fuzz_q8_weights (fuzz/corpus/q8_weights/): q8 weights files of the
# target's fixed configuration, valid ones and one of each refusal. Usage: python3 fuzz/q8_weights_seeds.py fuzz/corpus/q8_weights
import json, struct, random, math, os, sys
out = sys.argv[1]
V, D, L, H, KV, FF = 8, 4, 1, 2, 1, 6
hd = D // H
q, kv = H * hd, KV * hd
reg = [("embed", [V, D])]
for i in range(L):
    p = f"layers.{i}."
    reg += [(p+"attn_norm", [D]), (p+"wq", [D, q]), (p+"wk", [D, kv]), (p+"wv", [D, kv]), (p+"wo", [q, D]),
            (p+"mlp_norm", [D]), (p+"w_gate", [D, FF]), (p+"w_up", [D, FF]), (p+"w_down", [FF, D])]
reg += [("final_norm", [D]), ("head", [D, V])]

def tensors(rng, mutate=None):
    ts = []
    for name, shape in reg:
        if len(shape) == 2:
            K, N = shape
            qs = bytes((rng.randint(-127, 127)) & 0xff for _ in range(K * N))
            scale = struct.pack(f"<{N}f", *[rng.uniform(0.0, 0.05) for _ in range(N)])
            ts.append([name, "I8", shape, qs])
            ts.append([name + ".scale", "F32", [N], scale])
        else:
            ts.append([name, "F32", shape, struct.pack(f"<{shape[0]}f", *[1.0] * shape[0])])
    if mutate: ts = mutate(ts)
    return ts

def render(ts, meta=True, align=True):
    h, off, data = {}, 0, b""
    if meta: h["__metadata__"] = {"format": "lockstep", "matrix_layout": "in_out", "weights": "q8"}
    for name, dt, shape, b in ts:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b); data += b
    text = json.dumps(dict(sorted(h.items())), separators=(",", ":")).encode()
    if align: text += b" " * ((-(8 + len(text))) % 64)
    return struct.pack("<Q", len(text)) + text + data

def seed(name, ts, **kw):
    with open(os.path.join(out, name), "wb") as f: f.write(render(ts, **kw))

rng = random.Random(1)
seed("valid.safetensors", tensors(rng))
seed("valid_zero_scales.safetensors", tensors(rng, lambda ts: [[n, d, s, b if d == "I8" or not n.endswith(".scale") else bytes(len(b))] for n, d, s, b in ts]))
seed("valid_no_metadata.safetensors", tensors(rng), meta=False, align=False)
def setscale(val):
    def f(ts):
        for t in ts:
            if t[0] == "layers.0.wq.scale": t[3] = struct.pack("<f", val) + t[3][4:]
        return ts
    return f
seed("negative_scale.safetensors", tensors(rng, setscale(-0.5)))
seed("nan_scale.safetensors", tensors(rng, setscale(float("nan"))))
seed("inf_scale.safetensors", tensors(rng, setscale(float("inf"))))
seed("huge_scale.safetensors", tensors(rng, setscale(3.0e38)))  # 127 * 3e38 overflows to inf
seed("missing_scale.safetensors", tensors(rng, lambda ts: [t for t in ts if t[0] != "head.scale"]))
seed("f32_matrix.safetensors", tensors(rng, lambda ts: [[n, "F32", s, struct.pack(f"<{len(b)}f", *[0.01] * len(b))] if n == "layers.0.wo" else [n, d, s, b] for n, d, s, b in ts]))
seed("scale_wrong_shape.safetensors", tensors(rng, lambda ts: [[n, d, [s[0] - 1], b[:-4]] if n == "embed.scale" else [n, d, s, b] for n, d, s, b in ts]))
seed("scale_on_vector.safetensors", tensors(rng, lambda ts: ts + [["final_norm.scale", "F32", [1], struct.pack("<f", 1.0)]]))
seed("i8_vector.safetensors", tensors(rng, lambda ts: [[n, "I8", s, bytes(s[0])] if n == "layers.0.mlp_norm" else [n, d, s, b] for n, d, s, b in ts]))
seed("missing_parameter.safetensors", tensors(rng, lambda ts: [t for t in ts if not t[0].startswith("layers.0.w_up")]))
seed("wrong_shape.safetensors", tensors(rng, lambda ts: [[n, d, [s[1], s[0]], b] if n == "layers.0.w_gate" else [n, d, s, b] for n, d, s, b in ts]))
