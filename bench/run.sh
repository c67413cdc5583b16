#!/usr/bin/env bash
# Prints lockstep's performance figures as ratios measured in one run (the machines are shared
# and noisy, so absolute numbers move; ratios to a baseline measured beside them move less).
#   bench/run.sh [BUILD_DIR] [forward|decode|train|serve|http|all] [--quick]
# forward: the FMA peak, the matmul kernel, full-window (256) forward tokens/s of s256 and l768
#          (reference, fast path on 1 and 2 threads); decode: a 200-token session loop;
#          train: training tokens/s of s256 (batch 8 x 256), beside PyTorch where installed, and
#          the attention kernels forward and backward, and the optimizer's pass (SIMD / ref);
#          serve: bench/serve_bench.py (socket round trips, batching);
#          http: bench/http_bench.py (streamed tokens/s of 1, 8, 32 HTTP clients on s256 and l768
#          against in-process generate, time to first token p50/p99).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
WHAT=${2:-all}
QUICK=${3:-}
BIN="$BUILD/bench/lockstep_bench"
[ -x "$BIN" ] || { echo "bench/run.sh: $BIN is not built (./run build)" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
min_time=2
[ "$QUICK" = "--quick" ] && min_time=0.5

run_filter() {  # name, filter; three repetitions, the report keeps the fastest of each
  "$BIN" --benchmark_filter="$2" --benchmark_min_time="$min_time" --benchmark_repetitions=3 --benchmark_format=json \
    --benchmark_out="$OUT/$1.json" --benchmark_out_format=json >/dev/null
}

case "$WHAT" in
  forward|all) run_filter forward 'BM_FmaPeak|BM_Matmul|BM_Forward' ;;&
  decode|all) run_filter decode 'BM_FmaPeak/1|BM_Decode' ;;&
  train|all)
    run_filter train 'BM_FmaPeak/1|BM_TrainStep|BM_Attention|BM_OptimizerPass'
    if /usr/bin/python3 -c "import torch" 2>/dev/null; then
      /usr/bin/python3 bench/torch_train.py --out "$OUT/torch.json" || echo "bench/run.sh: the PyTorch baseline failed" >&2
    fi
    ;;&
  serve|all) /usr/bin/python3 bench/serve_bench.py --build "$BUILD" ;;&
  http|all)
    if [ "$QUICK" = "--quick" ]; then /usr/bin/python3 bench/http_bench.py --build "$BUILD" --seconds 3 --tokens 100
    else /usr/bin/python3 bench/http_bench.py --build "$BUILD"; fi
    ;;&
  *) ;;
esac
/usr/bin/python3 bench/report.py "$OUT"
