#!/usr/bin/env python3
# Writes the seed corpus of fuzz_gguf (fuzz/corpus/gguf/): GGUF files of a tiny llama (d 32, one
# layer, 2 heads, d_ff 32, vocab 5) in Q8_0, Q4_0, Q5_0 and F32/F16, a tied one, a qwen2 one with
# biases, one with Llama 3's rope_freqs, three with a K-quant ffn_down, and one of each refusal.
# Usage: python3 fuzz/gguf_seeds.py fuzz/corpus/gguf
import os, random, struct, sys

out = sys.argv[1]
D, FF, V = 32, 32, 5
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 6: (32, 22), 8: (32, 34), 12: (256, 144), 13: (256, 176), 14: (256, 210),
         30: (1, 2)}

def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b

def kv_u32(k, v): return s(k) + struct.pack("<II", 4, v)
def kv_f32(k, v): return s(k) + struct.pack("<If", 6, v)
def kv_str(k, v): return s(k) + struct.pack("<I", 8) + s(v)

def kv_bool(k, v): return s(k) + struct.pack("<I?", 7, v)
def kv_strs(k, v): return s(k) + struct.pack("<IIQ", 9, 8, len(v)) + b"".join(s(x) for x in v)
def kv_i32s(k, v): return s(k) + struct.pack("<IIQ", 9, 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)
def kv_f32s(k, v): return s(k) + struct.pack("<IIQ", 9, 6, len(v)) + b"".join(struct.pack("<f", x) for x in v)

# Vocabularies of V = 5 tokens as llama.cpp's converter writes them: byte-level BPE (gpt2, Llama 3's
# pre-tokenizer, a merge, a control token and a chat template) and SentencePiece (llama).
GPT2_VOCAB = [kv_str("tokenizer.ggml.model", "gpt2"), kv_str("tokenizer.ggml.pre", "llama-bpe"),
              kv_strs("tokenizer.ggml.tokens", ["a", "b", "ab", "\u0120", "<|eot_id|>"]),
              kv_i32s("tokenizer.ggml.token_type", [1, 1, 1, 1, 3]), kv_strs("tokenizer.ggml.merges", ["a b"]),
              kv_u32("tokenizer.ggml.eos_token_id", 4), kv_bool("tokenizer.ggml.add_bos_token", False),
              kv_str("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}")]
SPM_VOCAB = [kv_str("tokenizer.ggml.model", "llama"), kv_strs("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "\u2581", "\u2581a"]),
             kv_f32s("tokenizer.ggml.scores", [0, 0, 0, -1.5, 0]), kv_i32s("tokenizer.ggml.token_type", [2, 3, 3, 1, 1]),
             kv_u32("tokenizer.ggml.bos_token_id", 1), kv_u32("tokenizer.ggml.eos_token_id", 2)]

def llama3_divisors(factor, pairs=8, head_dim=16, theta=10000.0, L=8192, low=1.0, high=4.0):
    out = []
    for i in range(pairs):
        wavelen = 2 * 3.141592653589793 * theta ** (2 * i / head_dim)
        if wavelen < L / high: out.append(1.0)
        elif wavelen > L / low: out.append(factor)
        else:
            smooth = (L / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return struct.pack("<8f", *out)

ROPE_FREQS = llama3_divisors(8.0)

def tensor_bytes(rng, ttype, ne):
    per, size = BLOCK.get(ttype, (1, 4))
    n = ne[0] // per * size
    for d in ne[1:]: n *= d
    data = bytearray(rng.getrandbits(8) for _ in range(n))
    if ttype in (2, 6, 8):  # a finite f16 scale per block
        for at in range(0, n, size): data[at:at + 2] = struct.pack("<e", rng.uniform(-0.05, 0.05))
    elif ttype in (12, 13):  # finite f16 d and dmin per super-block
        for at in range(0, n, size): data[at:at + 4] = struct.pack("<ee", rng.uniform(0, 0.001), rng.uniform(0, 0.001))
    elif ttype == 14:  # a finite f16 d at the super-block's end
        for at in range(0, n, size): data[at + 208:at + 210] = struct.pack("<e", rng.uniform(0, 0.0002))
    elif ttype == 0:
        data = bytearray(struct.pack(f"<{n // 4}f", *[rng.uniform(-1, 1) for _ in range(n // 4)]))
    elif ttype in (1, 30):
        data = bytearray(struct.pack(f"<{n // 2}e", *[rng.uniform(-1, 1) for _ in range(n // 2)]))
    return bytes(data)

def model(mtype, tied=False, mutate=None, version=3, vocab=(), arch="llama", d=D, ff=FF, extra=()):
    rng = random.Random(1)
    a = arch + "."
    kvs = [kv_str("general.architecture", arch), kv_u32("general.alignment", 32), kv_u32(a + "context_length", 8),
           kv_u32(a + "embedding_length", d), kv_u32(a + "block_count", 1), kv_u32(a + "feed_forward_length", ff),
           kv_u32(a + "attention.head_count", 2), kv_u32(a + "attention.head_count_kv", 1),
           kv_f32(a + "rope.freq_base", 10000.0), kv_f32(a + "attention.layer_norm_rms_epsilon", 1e-5)] + list(vocab)
    types = mtype if isinstance(mtype, dict) else {}
    t = lambda name: types.get(name, mtype if not types else 0)
    ts = [("token_embd.weight", t("embd"), [d, V]), ("blk.0.attn_norm.weight", 0, [d]),
          ("blk.0.attn_q.weight", t("q"), [d, d]), ("blk.0.attn_k.weight", t("kv"), [d, d // 2]),
          ("blk.0.attn_v.weight", t("kv"), [d, d // 2]), ("blk.0.attn_output.weight", t("q"), [d, d]),
          ("blk.0.ffn_norm.weight", 0, [d]), ("blk.0.ffn_gate.weight", t("ffn"), [d, ff]),
          ("blk.0.ffn_up.weight", t("ffn"), [d, ff]), ("blk.0.ffn_down.weight", t("down"), [ff, d]),
          ("output_norm.weight", 0, [d])]
    if not tied: ts.append(("output.weight", t("head"), [d, V]))
    ts += list(extra)
    ts = [(n, t, ne, ROPE_FREQS if n == "rope_freqs.weight" else tensor_bytes(rng, t, ne)) for n, t, ne in ts]
    if mutate: ts = mutate(ts)
    head = b"GGUF" + struct.pack("<IQQ", version, len(ts), len(kvs)) + b"".join(kvs)
    infos, offset, offsets = b"", 0, []
    for n, t, ne, data in ts:
        infos += s(n) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", t, offset)
        offsets.append(offset)
        offset = (offset + len(data) + 31) // 32 * 32
    body = head + infos
    body += b"\0" * (-len(body) % 32)
    data = bytearray()
    for (n, t, ne, d), o in zip(ts, offsets):
        data += b"\0" * (o - len(data)) + d
    return body + bytes(data)

os.makedirs(out, exist_ok=True)
seeds = {
    "q8_0.gguf": model(8), "q4_0.gguf": model(2), "q5_0.gguf": model(6), "f32.gguf": model(0), "f16.gguf": model(1),
    "bf16.gguf": model(30), "q8_0_tied.gguf": model(8, tied=True), "version2.gguf": model(2, version=2),
    "q4_k.gguf": model(8, mutate=lambda ts: [(n, 12 if "ffn_up" in n else t, ne, d) for n, t, ne, d in ts]),
    "missing.gguf": model(8, mutate=lambda ts: ts[:-2]),
    # d_ff 256: ffn_down's rows are one super-block, the K-quant it holds widened (the rest Q8_0).
    "q4_k_down.gguf": model({"embd": 8, "q": 8, "kv": 8, "ffn": 8, "down": 12, "head": 8}, ff=256),
    "q5_k_down.gguf": model({"embd": 8, "q": 8, "kv": 8, "ffn": 8, "down": 13, "head": 8}, ff=256),
    "q6_k_down.gguf": model({"embd": 8, "q": 8, "kv": 8, "ffn": 8, "down": 14, "head": 8}, ff=256),
    "qwen2.gguf": model(8, arch="qwen2", extra=[("blk.0.attn_q.bias", 0, [D]), ("blk.0.attn_k.bias", 0, [D // 2]),
                                                ("blk.0.attn_v.bias", 0, [D // 2])]),
    # Llama 3's divisors for head dimension 16, theta 10000, factor 8 (pairs 0-5: 1; 6: the blend; 7: 8).
    "rope_freqs.gguf": model(8, extra=[("rope_freqs.weight", 0, [8])]),
    "vocab_gpt2.gguf": model(0, vocab=GPT2_VOCAB), "vocab_llama.gguf": model(8, vocab=SPM_VOCAB),
}
seeds["truncated.gguf"] = seeds["q8_0.gguf"][:-7]
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f: f.write(data)
