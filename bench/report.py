#!/usr/bin/env python3
"""Turns the Google Benchmark JSON files bench/run.sh wrote into the tables and ratios of
bench/README.md. A table compares only figures measured in this run: lockstep against the FMA
peak, one thread, or PyTorch where it is installed and ran beside it. Figures measured on other
machines are not divided by (bench/README.md quotes them, with what is known of where)."""
import json
import os
import sys

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
              "GFLOP/s 1t (of peak)")
        for idx, shape in enumerate(("s256", "l768")):
            ref = rate(fwd.get(f"BM_Forward/{idx}/0"), "tokens")
            one = rate(fwd.get(f"BM_Forward/{idx}/1"), "tokens")
            two = rate(fwd.get(f"BM_Forward/{idx}/2"), "tokens")
            gf = one * forward_flops_per_token(shape) / 1e9 if one else None
            print(f"  {shape:<38} {fmt(ref):>9} {fmt(one):>9} {fmt(two):>9}   {fmt(two / one if one and two else None)}x"
                  f"   {fmt(gf)} ({fmt(100 * gf * 1e9 / peak1 if gf and peak1 else None)}%)")
    if dec:
        print("\n200-token session loop  tokens/s:  1 thread   2 threads   2t/1t")
        for idx, shape in enumerate(("s256", "l768")):
            one = rate(dec.get(f"BM_Decode/{idx}/1"), "tokens")
            two = rate(dec.get(f"BM_Decode/{idx}/2"), "tokens")
            print(f"  {shape:<31} {fmt(one):>9} {fmt(two):>11}   {fmt(two / one if one and two else None)}x")
    st = load(folder, "structured")
    if st:
        print("\nstructured output, 64-token decode  tokens/s (CPU time):  no schema   schema   ratio")
        for idx, shape in enumerate(("fortunes (256 bytes)", "SmolLM2-135M shape (49,152 tokens)")):
            plain = rate(st.get(f"BM_StructuredDecode/{idx}/0"), "tokens")
            held = rate(st.get(f"BM_StructuredDecode/{idx}/1"), "tokens")
            print(f"  {shape:<46} {fmt(plain):>9} {fmt(held):>8}   {fmt(held / plain if plain and held else None)}x")
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
        else:
            print("  (no PyTorch run beside it: python3-torch is not installed, or its run failed)")
        flops = 3 * forward_flops_per_token("s256")  # a training step's, per token
        if peak1 and one:
            print(f"  training GFLOP/s on 1 thread: {one * flops / 1e9:.1f} ({100 * one * flops / peak1:.1f}% of the FMA peak)"
                  + (f"; fastest step {fast1 * flops / 1e9:.1f} ({100 * fast1 * flops / peak1:.1f}%)" if fast1 else ""))
        avx2 = rate(trn.get("BM_TrainStepAvx2"), "tokens")
        avx2_fast = fastest_step(folder, "BM_TrainStepAvx2")
        avx2_peak = rate(trn.get("BM_FmaPeakAvx2"), "flops")
        if avx2 and avx2_peak:
            # The library's AVX2 code on this CPU, against the peak of AVX2's vectors: what an AVX2
            # CPU's share would be, as far as the instructions decide it.
            print(f"  the AVX2 code on this CPU, 1 thread: {avx2:,.0f} tokens/s, {avx2 * flops / 1e9:.1f} GFLOP/s "
                  f"({100 * avx2 * flops / avx2_peak:.1f}% of the AVX2 FMA peak, {avx2_peak / 1e9:.1f})"
                  + (f"; fastest step {100 * avx2_fast * flops / avx2_peak:.1f}%" if avx2_fast else ""))
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

    busy_report(folder)


def busy_report(folder):
    """2 threads against 1 (bench/run.sh busy): each pair timed in one process, medians of the
    pairs' ratios, without (quiet.json) and with (busy.json) a busy loop pinned to CPU 0."""
    runs = {name: {bench: b for bench, b in repetitions(folder, name)} for name in ("quiet", "busy")}
    if not any(runs.values()):
        return
    print("\n2 threads / 1 thread, pairs timed in one process (median of 9 pairs, [min-max]);"
          "\n  'neighbour': a busy loop pinned to CPU 0 during the pairs")
    print(f"  {'':<16} {'machine as it is':>26} {'beside a neighbour':>26}   tokens/s 1t / 2t beside it")
    names = sorted(set(runs["quiet"]) | set(runs["busy"]))
    for name in names:
        label = (runs["quiet"].get(name) or runs["busy"].get(name)).get("label", name)
        cells = []
        for kind in ("quiet", "busy"):
            b = runs[kind].get(name)
            if b and "ratio_2t_1t" in b:
                cells.append(f"{b['ratio_2t_1t']:.2f}x [{b['ratio_min']:.2f}-{b['ratio_max']:.2f}]")
            else:
                cells.append("-")
        nb = runs["busy"].get(name)
        speeds = f"{fmt(rate(nb, 'tokens_1t'))} / {fmt(rate(nb, 'tokens_2t'))}" if nb else "-"
        print(f"  {label:<16} {cells[0]:>26} {cells[1]:>26}   {speeds}")


if __name__ == "__main__":
    main()
