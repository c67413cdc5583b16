#!/usr/bin/env python3
"""Turns the Google Benchmark JSON files bench/run.sh wrote into the tables and ratios of
bench/README.md. Figures of other programs quoted from the issues are labelled as such; every
ratio that matters is against a baseline measured in the same run (the FMA peak, one thread)."""
import json
import os
import sys

# Measured by the author on a 2-core machine of this kind (not in this run): llama.cpp F32
# prefill of a 256-token window, tokens/s, and llama.cpp / PyTorch figures for decode and training.
LLAMA_PREFILL = {"s256": (3071, 4222), "l768": (263, 469)}
LLAMA_DECODE = {"s256": (None, 803), "l768": (35.1, 57.4)}
TORCH_TRAIN = (1173, 1872)

# Flops per token of a full 256-token forward: 2 per weight of every matmul, plus attention's
# QK^T and PV over 255/2 keys on average.
SHAPES = {"s256": dict(d=256, layers=6, ff=768, vocab=256), "l768": dict(d=768, layers=12, ff=2048, vocab=256)}


def forward_flops_per_token(shape, window=256):
    s = SHAPES[shape]
    d, ff, layers, vocab = s["d"], s["ff"], s["layers"], s["vocab"]
    matmul = 2 * (layers * (4 * d * d + 3 * d * ff) + d * vocab)
    attention = layers * 2 * 2 * d * (window - 1) / 2
    return matmul + attention


def repetitions(folder, name):
    """(benchmark name, run) for every repetition in folder/name.json, aggregates left out."""
    path = os.path.join(folder, name + ".json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        data = json.load(f)
    return [(b["name"].split("/min_time")[0].replace("/real_time", ""), b)
            for b in data.get("benchmarks", []) if b.get("run_type") != "aggregate"]


def load(folder, name):
    # With repetitions, the fastest of each: on a shared machine the slow ones measure the
    # neighbours, not the code.
    out = {}
    for bench, b in repetitions(folder, name):
        if bench not in out or b.get("real_time", 1e300) < out[bench].get("real_time", 1e300):
            out[bench] = b
    return out


def fastest_step(folder, bench):
    """The fastest single training step of any repetition of `bench` (tokens/s), or None."""
    return max((float(b["tokens_fastest_step"]) for name, b in repetitions(folder, "train")
                if name == bench and "tokens_fastest_step" in b), default=None)


def rate(b, counter):
    return float(b[counter]) if b and counter in b else None


def fmt(v, unit=""):
    return "-" if v is None else (f"{v:,.0f}{unit}" if v >= 100 else f"{v:.2f}{unit}")


def main():
    folder = sys.argv[1]
    fwd = load(folder, "forward")
    dec = load(folder, "decode")
    trn = load(folder, "train")
    peak_any = fwd or dec or trn
    peak1 = rate(peak_any.get("BM_FmaPeak/1"), "flops")
    peak2 = rate(fwd.get("BM_FmaPeak/2"), "flops")
    if peak1:
        print(f"FMA peak (independent FMA chains, this run): {peak1 / 1e9:.1f} GFLOP/s on 1 thread"
              + (f", {peak2 / 1e9:.1f} on 2" if peak2 else ""))
    if fwd:
        print("\nmatmul kernel, 1 thread (M x K x N)      GFLOP/s   of peak")
        for name, b in sorted(fwd.items()):
            if name.startswith("BM_Matmul/") or name.startswith("BM_MatmulAt/"):
                gf = rate(b, "flops") / 1e9
                label = name[10:] if name.startswith("BM_Matmul/") else name[12:] + " (a^T, gradients)"
                print(f"  {label:<36} {gf:8.1f}   {100 * gf * 1e9 / peak1:5.1f}%")
        print("\nfull-window forward (256 tokens)  tokens/s:  reference   fast 1t   fast 2t   2t/1t   "
              "GFLOP/s 1t (of peak)   vs llama.cpp 1t / 2t")
        for idx, shape in enumerate(("s256", "l768")):
            ref = rate(fwd.get(f"BM_Forward/{idx}/0"), "tokens")
            one = rate(fwd.get(f"BM_Forward/{idx}/1"), "tokens")
            two = rate(fwd.get(f"BM_Forward/{idx}/2"), "tokens")
            gf = one * forward_flops_per_token(shape) / 1e9 if one else None
            l1, l2 = LLAMA_PREFILL[shape]
            print(f"  {shape:<38} {fmt(ref):>9} {fmt(one):>9} {fmt(two):>9}   {fmt(two / one if one and two else None)}x"
                  f"   {fmt(gf)} ({fmt(100 * gf * 1e9 / peak1 if gf else None)}%)"
                  f"        {fmt(one / l1 if one else None)}x / {fmt(two / l2 if two else None)}x")
    if dec:
        print("\n200-token session loop  tokens/s:  1 thread   2 threads   vs llama.cpp 1t / 2t")
        for idx, shape in enumerate(("s256", "l768")):
            one = rate(dec.get(f"BM_Decode/{idx}/1"), "tokens")
            two = rate(dec.get(f"BM_Decode/{idx}/2"), "tokens")
            l1, l2 = LLAMA_DECODE[shape]
            print(f"  {shape:<31} {fmt(one):>9} {fmt(two):>11}   {fmt(one / l1 if one and l1 else None)}x / "
                  f"{fmt(two / l2 if two and l2 else None)}x")
    if trn:
        one = rate(trn.get("BM_TrainStep/0/1"), "tokens")
        two = rate(trn.get("BM_TrainStep/0/2"), "tokens")
        fast1 = fastest_step(folder, "BM_TrainStep/0/1")
        fast2 = fastest_step(folder, "BM_TrainStep/0/2")
        print("\ntraining s256 (batch 8 x 256, AdamW)  tokens/s:  1 thread   2 threads   2t/1t")
        def row(label, a, b, extra=""):
            print(f"  {label:<44} {fmt(a):>9} {fmt(b):>10}{extra}")
        row("lockstep, mean over steps", one, two, f"   {fmt(two / one if one and two else None)}x")
        row("lockstep, fastest step", fast1, fast2)
        torch_path = os.path.join(folder, "torch.json")
        if os.path.exists(torch_path):
            t = json.load(open(torch_path))
            label = f"PyTorch {t.get('version', '')} ({t.get('blas', '')})"
            row(label + ", mean", t.get("1"), t.get("2"))
            row(label + ", fastest", t.get("1_fastest_step"), t.get("2_fastest_step"))
            if one and t.get("1"):
                print(f"  lockstep / PyTorch, means: {one / t['1']:.2f}x on 1 thread" + (f", {two / t['2']:.2f}x on 2" if two and t.get('2') else ""))
            if fast1 and t.get("1_fastest_step"):
                print(f"  lockstep / PyTorch, fastest steps: {fast1 / t['1_fastest_step']:.2f}x on 1 thread"
                      + (f", {fast2 / t['2_fastest_step']:.2f}x on 2" if fast2 and t.get('2_fastest_step') else ""))
        print(f"  (the issue's PyTorch 1.13 + OpenBLAS figures: {TORCH_TRAIN[0]} / {TORCH_TRAIN[1]} tokens/s; "
              f"lockstep / those: means {fmt(one / TORCH_TRAIN[0] if one else None)}x / {fmt(two / TORCH_TRAIN[1] if two else None)}x, "
              f"fastest steps {fmt(fast1 / TORCH_TRAIN[0] if fast1 else None)}x / {fmt(fast2 / TORCH_TRAIN[1] if fast2 else None)}x)")
        if peak1 and one:
            flops = 3 * forward_flops_per_token("s256")
            print(f"  training GFLOP/s on 1 thread: {one * flops / 1e9:.1f} ({100 * one * flops / peak1:.1f}% of the FMA peak)"
                  + (f"; fastest step {fast1 * flops / 1e9:.1f} ({100 * fast1 * flops / peak1:.1f}%)" if fast1 else ""))
        for label, name in (("forward, 3 queries at a time (inference's prefill)", "BM_Attention/0"),
                            ("forward (training)", "BM_Attention/1"), ("backward", "BM_Attention/2")):
            gf = rate(trn.get(name), "flops")
            if gf and peak1:
                print(f"  attention {label}, one s256 layer (8 rows x 8 heads, T 256), 1 thread: {gf / 1e9:.1f} GFLOP/s "
                      f"({100 * gf / peak1:.1f}% of the FMA peak)")
        ref_pass = trn.get("BM_OptimizerPass/0")
        fast_pass = trn.get("BM_OptimizerPass/1")
        if ref_pass and fast_pass:
            print(f"  optimizer pass over s256's parameters (clip sums, AdamW, EMA), 1 thread: "
                  f"{fast_pass['real_time']:.1f} ms SIMD against {ref_pass['real_time']:.1f} ms ref "
                  f"({ref_pass['real_time'] / fast_pass['real_time']:.2f}x)")


if __name__ == "__main__":
    main()
