#!/usr/bin/env python3
"""Prints how prefill and end-of-window decode fall as the window grows, from the Google
Benchmark JSON files of BM_WindowPrefill and BM_WindowDecode (bench/window_bench.cpp) given as
arguments: tokens/s at each window, and the ratio to the same shape's window of 256 in the same
run. With several repetitions (or files), the fastest of each benchmark counts. Rates come both
from wall time and from the process's CPU time: on a machine shared with other jobs, CPU time
is the steadier of the two (neighbours stretch the wall time of a one-thread run)."""
import json
import statistics
import sys


def load(paths):
    best = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            if b.get("run_type") == "aggregate" or "error_occurred" in b:
                continue
            parts = b["name"].split("/")
            if parts[0] not in ("BM_WindowPrefill", "BM_WindowDecode", "BM_WindowAttention"):
                continue
            key = tuple(parts[:4] if parts[0] == "BM_WindowAttention" else parts[:3])
            if key not in best or b["cpu_time"] < best[key]["cpu_time"]:
                best[key] = b
    return best


def rounds(paths):
    """Each file's repetitions as rounds: {(file, repetition): {(bench, shape, length): run}}. A
    round's points ran one after the other, so a ratio within a round sees the machine's load of
    a few minutes rather than of the whole run."""
    out = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            if b.get("run_type") == "aggregate" or "error_occurred" in b:
                continue
            parts = b["name"].split("/")
            if parts[0] in ("BM_WindowPrefill", "BM_WindowDecode"):
                out.setdefault((path, b.get("repetition_index", 0)), {})[tuple(parts[:3])] = b
    return out


def per_second(b, tokens):
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
    return tokens / (b["real_time"] * scale), tokens / (b["cpu_time"] * scale)


def main():
    best = load(sys.argv[1:])
    shapes = {"0": "s256", "1": "l768"}
    print("| shape | window | prefill tok/s (wall / CPU) | vs 256 (wall / CPU) | decode tok/s (wall / CPU) | vs 256 (wall / CPU) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for shape, name in shapes.items():
        base = {}
        for length in ("256", "1024", "2048", "4096"):
            cells = []
            for bench, tokens in (("BM_WindowPrefill", int(length)), ("BM_WindowDecode", 16)):
                b = best.get((bench, shape, length))
                if b is None:
                    cells += ["-", "-"]
                    continue
                wall, cpu = per_second(b, tokens)
                if length == "256":
                    base[bench] = (wall, cpu)
                cells.append(f"{wall:,.1f} / {cpu:,.1f}")
                if bench in base:
                    cells.append(f"{wall / base[bench][0]:.2f} / {cpu / base[bench][1]:.2f}")
                else:
                    cells.append("-")
            print(f"| {name} | {length} | " + " | ".join(cells) + " |")
    # Ratios within each round (CPU time), their median and range over the rounds.
    by_round = rounds(sys.argv[1:])
    if len(by_round) > 1:
        print()
        print(f"Within each of {len(by_round)} rounds (CPU time), median [range] of the ratio to window 256:")
        print("| shape | window | prefill | decode |")
        print("| --- | --- | --- | --- |")
        for shape, name in shapes.items():
            for length in ("1024", "2048", "4096"):
                cells = []
                for bench in ("BM_WindowPrefill", "BM_WindowDecode"):
                    ratios = []
                    for points in by_round.values():
                        a, b = points.get((bench, shape, "256")), points.get((bench, shape, length))
                        if a and b:
                            tokens = (int(length), 256) if bench == "BM_WindowPrefill" else (16, 16)
                            ratios.append(per_second(b, tokens[0])[1] / per_second(a, tokens[1])[1])
                    cells.append(f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
                                 if ratios else "-")
                print(f"| {name} | {length} | " + " | ".join(cells) + " |")
    attention = sorted(k for k in best if k[0] == "BM_WindowAttention")
    if attention:
        print()
        print("| attention layer | queries per call | CPU ms | GFLOP/s (CPU) |")
        print("| --- | --- | --- | --- |")
        for key in attention:
            b = best[key]
            print(f"| {shapes.get(key[1], key[1])} window {key[2]} | {key[3]} | {b['cpu_time']:.1f} | "
                  f"{float(b.get('flops', 0)) / 1e9:.1f} |")


if __name__ == "__main__":
    main()
