#!/usr/bin/env bash
# Compares builds on a shared, noisy machine: runs one Google Benchmark filter on each of several
# lockstep_bench binaries in rounds, rotating which goes first, and prints per benchmark the
# median of each binary's per-round ratio to the first binary. Pairs always run in one order
# showed false 5-7% differences here (the machine drifts within a round); rotating cancels it.
#   bench/ab.sh FILTER ROUNDS BIN_A BIN_B [BIN ...]
#   e.g. bench/ab.sh 'BM_TrainStep/0/2' 10 /tmp/old_bench build/bench/lockstep_bench
# The counter compared is the benchmark's rate counter (tokens, flops or params per second);
# copy each build's bench/lockstep_bench aside first (it is statically linked to lockstep).
# Environment: AB_MIN_TIME (default 2) seconds per benchmark run.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
FILTER=$1
ROUNDS=$2
shift 2
BINS=("$@")
for b in "${BINS[@]}"; do [ -x "$b" ] || { echo "bench/ab.sh: '$b' is not an executable" >&2; exit 2; }; done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
K=${#BINS[@]}
for ((r = 0; r < ROUNDS; r++)); do
  for ((j = 0; j < K; j++)); do
    i=$(((j + r) % K))
    "${BINS[$i]}" --benchmark_filter="$FILTER" --benchmark_min_time="${AB_MIN_TIME:-2}" --benchmark_format=json \
      --benchmark_out="$OUT/r${r}_b${i}.json" --benchmark_out_format=json >/dev/null
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" "${BINS[@]}" <<'PY'
import json, os, statistics, sys

folder, rounds, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
RATES = ("tokens", "flops", "params", "weights")


def rates(path):
    out = {}
    for b in json.load(open(path)).get("benchmarks", []):
        counter = next((c for c in RATES if c in b), None)
        out[b["name"]] = float(b[counter]) if counter else 1.0 / float(b["real_time"])
    return out


runs = [[rates(os.path.join(folder, f"r{r}_b{i}.json")) for i in range(len(bins))] for r in range(rounds)]
for name in sorted(runs[0][0]):
    print(name)
    for i, b in enumerate(bins):
        values = [run[i][name] for run in runs if name in run[i]]
        ratios = [run[i][name] / run[0][name] for run in runs if name in run[i] and name in run[0]]
        print(f"  {b}: median {statistics.median(values):.4g}, ratio to the first {statistics.median(ratios):.3f} "
              f"(rounds {min(ratios):.2f}-{max(ratios):.2f})")
PY
