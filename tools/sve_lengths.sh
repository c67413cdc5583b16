#!/usr/bin/env bash
# Runs a cross-built aarch64 build's exactness and golden tests under qemu-user at each SVE vector
# length (issue 21; README, "Running on Arm"): -cpu max (SVE2) with sve-max-vq=N, N = 1, 2, 4, 16
# for 128, 256, 512 and 2048 bits, the default length set to the maximum so the process runs at N.
# Each run first checks that the best target saw that length (Targets test with
# LOCKSTEP_EXPECT_VECTOR_BITS), then runs the subset below on every target the emulated CPU
# supports (SVE2_128 at 128 bits, SVE_256 at 256, SVE2 and SVE at every length, NEON, portable).
#   tools/sve_lengths.sh BUILD_DIR [VQ ...]      e.g. tools/sve_lengths.sh build-aarch64 1 2 4 16
# qemu 7.2 has a reported SVE bug at 1024 bits and more (QEMU issue 1737): a mismatch only at 16
# is checked against it before the kernel is blamed.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
dir=$1
shift
vqs=("$@")
[ ${#vqs[@]} -gt 0 ] || vqs=(1 2 4 16)
kernels_filter=${SVE_KERNELS_FILTER:-Targets.*:Matmul.*:MatmulTransposed.*:RmsNorm.*:Attention.*}
model_filter=${SVE_MODEL_FILTER:-Golden.*:FastPath.LogitsHiddenAndLossEqualTheReference}
status=0
for vq in "${vqs[@]}"; do
  bits=$((vq * 128))
  qemu=(qemu-aarch64-static -cpu "max,sve-max-vq=$vq,sve-default-vector-length=-1" -L /usr/aarch64-linux-gnu)
  echo "sve_lengths: $bits-bit SVE (sve-max-vq=$vq)"
  LOCKSTEP_EXPECT_VECTOR_BITS=$bits "${qemu[@]}" "$dir/tests/test_kernels" --gtest_filter="$kernels_filter" \
    --gtest_brief=1 || status=1
  "${qemu[@]}" "$dir/tests/test_model" --gtest_filter="$model_filter" --gtest_brief=1 || status=1
done
exit "$status"
