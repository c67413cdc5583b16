#!/usr/bin/env bash
# Prints lockstep's performance figures as ratios measured in one run (the machines are shared
# and noisy, so absolute numbers move; ratios to a baseline measured beside them move less).
#   bench/run.sh [BUILD_DIR] [forward|decode|structured|train|busy|serve|http|cluster|window|all] [--quick]
# forward: the FMA peak, the matmul kernel, full-window (256) forward tokens/s of s256 and l768
#          (reference, fast path on 1 and 2 threads); decode: a 200-token session loop, and
#          decode by storage (f32, bf16, q8, q4) of l768 and m1024 (300 M parameters) beside
#          the DRAM read bandwidth;
#          structured: decode tokens/s with a JSON Schema against without (bench/README.md,
#          "Structured output"), on the fortunes model and a SmolLM2-135M-shaped one;
#          train: training tokens/s of s256 (batch 8 x 256), beside PyTorch where installed, and
#          the attention kernels forward and backward, and the optimizer's pass (SIMD / ref);
#          busy: 2 threads against 1 (decode, prefill, a training step), each pair timed in one
#          process, without and then with a busy neighbour process pinned to CPU 0;
#          serve: bench/serve_bench.py (socket round trips, batching);
#          http: bench/http_bench.py (streamed tokens/s of 1, 8, 32 HTTP clients on s256 and l768
#          against in-process generate, time to first token p50/p99, CPU per token of the server's
#          event loop, its model threads and the client; answers asked again alone must match);
#          cluster: bench/cluster_bench.py (requests/s and tokens/s of s256 through HAProxy with 1
#          and 2 one-core replicas against one 2-core server; HAProxy's cost on one request's p50).
#          window (not part of all: minutes on a 2-core machine): prefill and end-of-window
#          decode of s256 and l768 at windows 256, 1024, 2048, 4096 and one layer's attention,
#          with the ratios to window 256 (bench/window_report.py).
# Each stage prints a line when it starts and one per benchmark as it finishes; the tables
# (bench/report.py) come at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
WHAT=${2:-all}
QUICK=${3:-}
BIN="$BUILD/bench/lockstep_bench"
[ -x "$BIN" ] || { echo "bench/run.sh: $BIN is not built (./run build)" >&2; exit 1; }
OUT=$(mktemp -d)
NEIGHBOUR=
cleanup() {
  if [ -n "$NEIGHBOUR" ]; then kill "$NEIGHBOUR" 2>/dev/null || true; fi
  rm -rf "$OUT"
}
trap cleanup EXIT
min_time=2
[ "$QUICK" = "--quick" ] && min_time=0.5
START=$SECONDS

stage() {  # a progress line on stderr: the stage and the time since the start
  echo "bench/run.sh: [$((SECONDS - START)) s] $*" >&2
}

# Google Benchmark's console lines, one per repetition as it finishes, without the aggregates;
# its stderr without the machine description it prints at every start (errors still show).
progress() {
  grep --line-buffered -E '^BM_' | grep --line-buffered -vE '_(mean|median|stddev|cv) ' | sed -u 's/^/  /' >&2 || true
}
context() {
  grep --line-buffered -vE '^(Run on|CPU Caches|  L[123] |Load Average|Running |\*\*\*WARNING|[0-9]{4}-[0-9]{2}-[0-9]{2}T)' >&2 || true
}

run_filter() {  # name, filter; three repetitions, the report keeps the fastest of each
  "$BIN" --benchmark_filter="$2" --benchmark_min_time="$min_time" --benchmark_repetitions=3 \
    --benchmark_out="$OUT/$1.json" --benchmark_out_format=json --benchmark_color=false 2> >(context) | progress
}

run_busy() {  # name; the BM_TwoThreadsVsOne pairs (fixed iterations, medians of the pairs)
  "$BIN" --benchmark_filter='BM_TwoThreadsVsOne' --benchmark_out="$OUT/$1.json" --benchmark_out_format=json \
    --benchmark_color=false 2> >(context) | progress
}

case "$WHAT" in
  forward|all)
    stage "forward: FMA peak, matmul kernel, full-window forward of s256 and l768 (reference, 1 and 2 threads)"
    run_filter forward 'BM_FmaPeak|BM_Matmul|BM_Forward'
    ;;&
  decode|all)
    stage "decode: 200-token session loops of s256 and l768, l768 and m1024 (300 M) by storage, on 1 and 2 threads, beside the DRAM read bandwidth"
    run_filter decode 'BM_FmaPeak/1|BM_DramRead|BM_Decode'
    ;;&
  structured|all)
    stage "structured: decode tokens/s with a JSON Schema against without, fortunes and a SmolLM2-135M-shaped model"
    run_filter structured 'BM_StructuredDecode'
    ;;&
  train|all)
    stage "train: training steps of s256 on 1 and 2 threads (and 1 in the AVX2 code), attention kernels, optimizer pass"
    run_filter train 'BM_FmaPeak/1|BM_FmaPeakAvx2|BM_TrainStep|BM_Attention|BM_OptimizerPass'
    if /usr/bin/python3 -c "import torch" 2>/dev/null; then
      stage "train: the PyTorch baseline (bench/torch_train.py), same shape, 1 and 2 threads"
      /usr/bin/python3 bench/torch_train.py --out "$OUT/torch.json" || echo "bench/run.sh: the PyTorch baseline failed" >&2
    else
      stage "train: no PyTorch here (python3-torch); the table has lockstep's figures only"
    fi
    ;;&
  busy|all)
    stage "busy: 2 threads against 1, pairs timed in one process, machine as it is"
    run_busy quiet
    # The neighbour: one busy loop pinned to CPU 0, bounded by timeout and killed on exit.
    pin=()
    if command -v taskset >/dev/null; then pin=(taskset -c 0); fi
    timeout 1800 "${pin[@]}" sh -c 'while :; do :; done' &
    NEIGHBOUR=$!
    stage "busy: the same pairs beside a busy loop pinned to CPU 0 (pid $NEIGHBOUR)"
    run_busy busy
    kill "$NEIGHBOUR" 2>/dev/null || true
    wait "$NEIGHBOUR" 2>/dev/null || true
    NEIGHBOUR=
    ;;&
  serve|all)
    stage "serve: socket round trips and batching (bench/serve_bench.py)"
    /usr/bin/python3 bench/serve_bench.py --build "$BUILD"
    ;;&
  http|all)
    stage "http: streamed tokens/s of 1, 8 and 32 HTTP clients on s256 and l768 (bench/http_bench.py)"
    if [ "$QUICK" = "--quick" ]; then /usr/bin/python3 bench/http_bench.py --build "$BUILD" --seconds 3 --tokens 100
    else /usr/bin/python3 bench/http_bench.py --build "$BUILD"; fi
    ;;&
  cluster|all)
    stage "cluster: s256 through HAProxy, 1 and 2 one-core replicas against one 2-core server (bench/cluster_bench.py)"
    if [ "$QUICK" = "--quick" ]; then /usr/bin/python3 bench/cluster_bench.py --build "$BUILD" --seconds 3 --latency-requests 50
    else /usr/bin/python3 bench/cluster_bench.py --build "$BUILD"; fi
    ;;&
  window)
    # One thread; a window of 4096 on l768 is a long forward, so each point runs once (twice
    # without --quick) and the report keeps the fastest.
    stage "window: prefill and end-of-window decode at windows 256..4096, attention 3 queries vs tiles"
    reps=2
    [ "$QUICK" = "--quick" ] && reps=1
    "$BIN" --benchmark_filter='BM_Window' --benchmark_min_time=0.01 --benchmark_repetitions="$reps" \
      --benchmark_out="$OUT/window.json" --benchmark_out_format=json --benchmark_color=false 2> >(context) | progress
    stage "window: done; the ratios to window 256:"
    /usr/bin/python3 bench/window_report.py "$OUT/window.json"
    exit 0
    ;;
  forward|decode|structured|train|busy|serve|http|cluster|all) ;;
  *) echo "bench/run.sh: unknown stage '$WHAT' (forward, decode, structured, train, busy, serve, http, cluster, window or all)" >&2; exit 2 ;;
esac
stage "done; the tables:"
/usr/bin/python3 bench/report.py "$OUT"
