#!/usr/bin/env python3
"""The PyTorch baseline for training speed: the s256 model (d_model 256, 6 layers, 8 heads, d_ff
768, vocab 256, window 256; lockstep's architecture: RMSNorm, interleaved-pair RoPE, SwiGLU, untied
head, no biases) trained with AdamW on batch 8 x 256, timed on 1 and 2 threads: the mean over
the steps and the fastest step. Debian's python3-torch uses the system BLAS; install
libopenblas0-pthread so it is OpenBLAS, not the reference BLAS (the script reports which it
found). Writes {"1": tok/s, "1_fastest_step": tok/s, "2": ..., ...} as JSON."""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

D, LAYERS, HEADS, FF, VOCAB, T, BATCH = 256, 6, 8, 768, 256, 256, 8


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = torch.nn.Parameter(torch.ones(D))
        self.mlp_norm = torch.nn.Parameter(torch.ones(D))
        self.wqkv = torch.nn.Linear(D, 3 * D, bias=False)
        self.wo = torch.nn.Linear(D, D, bias=False)
        self.w_gate = torch.nn.Linear(D, FF, bias=False)
        self.w_up = torch.nn.Linear(D, FF, bias=False)
        self.w_down = torch.nn.Linear(FF, D, bias=False)


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def rope(x, cos, sin):  # x [B, H, T, hd], interleaved pairs
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, D)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.final_norm = torch.nn.Parameter(torch.ones(D))
        self.head = torch.nn.Linear(D, VOCAB, bias=False)
        hd = D // HEADS
        freq = 10000.0 ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        angle = torch.arange(T, dtype=torch.float32)[:, None] * freq[None, :]
        self.register_buffer("cos", angle.cos())
        self.register_buffer("sin", angle.sin())

    def forward(self, ids):
        b, t = ids.shape
        x = self.embed(ids)
        hd = D // HEADS
        for blk in self.blocks:
            a = rmsnorm(x, blk.attn_norm)
            q, k, v = blk.wqkv(a).view(b, t, 3, HEADS, hd).permute(2, 0, 3, 1, 4)
            q, k = rope(q, self.cos, self.sin), rope(k, self.cos, self.sin)
            att = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + blk.wo(att.transpose(1, 2).reshape(b, t, D))
            m = rmsnorm(x, blk.mlp_norm)
            x = x + blk.w_down(torch.nn.functional.silu(blk.w_gate(m)) * blk.w_up(m))
        return self.head(rmsnorm(x, self.final_norm))


def tokens_per_second(threads, steps):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randint(0, VOCAB, (BATCH, T + 1))
    def step():
        logits = model(data[:, :T])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    step()  # warm-up
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    # The mean over the steps, and the fastest step (a shared machine's neighbours only slow a
    # step down; lockstep's BM_TrainStep reports the same two).
    return steps * BATCH * T / sum(seconds), BATCH * T / min(seconds)


def blas_name():
    """The BLAS torch's matmuls reach: Debian builds torch against the system libblas.so.3
    (BLAS_INFO=generic), which the alternatives system points at OpenBLAS or the reference BLAS."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        maps = ""
    if "openblas" in maps:
        return "OpenBLAS"
    info = torch.__config__.show()
    if "BLAS_INFO=mkl" in info:
        return "MKL"
    if "libblas" in maps:
        return "reference BLAS"
    return "unknown BLAS"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, help="(internal) measure one thread count in this process")
    args = parser.parse_args()
    if args.threads is None:
        # Each thread count in a process of its own, with every library's pool sized to it:
        # OpenBLAS fixes its thread count when it loads, so one process cannot measure both.
        out = {}
        for threads in (1, 2):
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                       MKL_NUM_THREADS=str(threads))
            part = args.out + f".{threads}"
            subprocess.run([sys.executable, __file__, "--out", part, "--steps", str(args.steps), "--threads",
                            str(threads)], env=env, check=True)
            with open(part) as f:
                out.update(json.load(f))
            os.remove(part)
        with open(args.out, "w") as f:
            json.dump(out, f)
        return
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        def sdpa(q, k, v, is_causal=True):
            s = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
            mask = torch.triu(torch.ones(s.shape[-1], s.shape[-1], dtype=torch.bool), 1)
            return s.masked_fill(mask, float("-inf")).softmax(-1) @ v
        torch.nn.functional.scaled_dot_product_attention = sdpa
    mean, fastest = tokens_per_second(args.threads, args.steps)
    out = {"version": torch.__version__, str(args.threads): mean, f"{args.threads}_fastest_step": fastest}
    out["blas"] = blas_name()
    with open(args.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
