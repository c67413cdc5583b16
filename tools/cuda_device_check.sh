#!/usr/bin/env bash
# The cuda device's check on a lent GPU (docs/CUDA.md, "Checking on a GPU"; issue 41), in two steps:
#
#   tools/cuda_device_check.sh --prepare BUILD_DIR DIR
#       here, on the build machine: copies what the GPU machine needs into DIR (give it a folder
#       that .git/info/exclude ignores, e.g. .cuda-check, and name it in the run's `carry`):
#       test_cuda, lockstep and lockstep_cuda_peak from BUILD_DIR (a Release build with
#       LOCKSTEP_CUDA on), and the shared libraries they link but for the C library's own
#       (the GPU machine has none of lockstep's Debian libraries: libhwy, libcrypto, ...).
#   tools/cuda_device_check.sh DIR
#       there, from the repository's root: test_cuda (golden models and every test shape, logits
#       and hidden states by memcmp against the reference), then the FMA peak and the l768
#       prefill (batch 8 x 256) on the device, with its FLOP/s and its share of the peak.
#       Writes each log and a summary to $OUT (else ./cuda-check-out); exits non-zero when
#       test_cuda fails or skips (a skip there means the GPU was not seen).
set -euo pipefail

if [ "${1:-}" = "--prepare" ]; then
  build=${2:?usage: $0 --prepare BUILD_DIR DIR} dir=${3:?usage: $0 --prepare BUILD_DIR DIR}
  mkdir -p "$dir/lib"
  for f in tests/test_cuda src/lockstep bench/lockstep_cuda_peak; do
    [ -x "$build/$f" ] || { echo "cuda_device_check: $build/$f is missing (build it with LOCKSTEP_CUDA on)"; exit 1; }
    cp "$build/$f" "$dir/"
    # Every library it links, but glibc's own (the GPU machine's loader must match its libc).
    ldd "$build/$f" | awk '$3 ~ /^\// {print $3}' |
      grep -Ev '/(libc|libm|libdl|librt|libpthread|ld-linux[^/]*)\.so' | while read -r lib; do
        cp -L "$lib" "$dir/lib/"
      done
  done
  du -sh "$dir"
  exit 0
fi

dir=${1:?usage: $0 DIR (made by --prepare)}
out=${OUT:-cuda-check-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

say "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi: none')"

status=0
say "== test_cuda"
"$dir/test_cuda" 2>&1 | tee "$out/test_cuda.log" | grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]|^cuda ' || true
if grep -q '^\[  FAILED  \]' "$out/test_cuda.log" || ! grep -q '^\[  PASSED  \]' "$out/test_cuda.log"; then
  say "test_cuda: FAILED"; status=1
elif grep -q '^\[  SKIPPED \]' "$out/test_cuda.log"; then
  say "test_cuda: SKIPPED (the GPU was not seen): $(grep -m1 'no GPU' "$out/test_cuda.log")"; status=1
else
  say "test_cuda: passed"
fi

say "== peak"
"$dir/lockstep_cuda_peak" | tee -a "$summary"
peak=$(awk '/TFLOP/ {for (i = 1; i <= NF; ++i) if ($(i + 1) == "TFLOP/s") print $i}' "$summary" | tail -1)

say "== l768 prefill, batch 8 x 256"
model=$(mktemp -d)/l768
"$dir/lockstep" init --seed 1 -o "$model" --d-model 768 --n-layers 12 --n-heads 12 --d-ff 2048 --length 256 >/dev/null
"$dir/lockstep" bench "$model" --device cuda --batch 8 --seconds 3 | tee "$out/bench.log" | tee -a "$summary"
rate=$(awk '/forward, cuda/ {for (i = 1; i <= NF; ++i) if ($(i + 1) == "tokens/s") print $i}' "$out/bench.log")
# FLOP per token of l768 at window 256: the matmuls (2 per multiply-add over every weight matrix
# and the head) and the attention's two products over the (t + 1) keys, on average 128.5.
awk -v rate="$rate" -v peak="${peak:-0}" 'BEGIN {
  d = 768; L = 12; ff = 2048; vocab = 256; T = 256
  matmul = 2 * (L * (d * 3 * d + d * d + d * 2 * ff + ff * d) + d * vocab)
  attention = L * 4 * d * (T + 1) / 2
  tflops = rate * (matmul + attention) / 1e12
  printf "l768 prefill: %.0f tokens/s = %.2f TFLOP/s f32", rate, tflops
  if (peak > 0) printf ", %.1f%% of the measured FMA peak (%.2f TFLOP/s)", 100 * tflops / peak, peak
  printf "\n"
}' | tee -a "$summary"
exit "$status"
