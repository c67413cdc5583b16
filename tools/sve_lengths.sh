#!/usr/bin/env bash
# Runs a cross-built aarch64 build's exactness and golden tests (tests/test_arm) under qemu-user at
# SVE vector lengths (issue 21; README, "Running on Arm"): -cpu max (SVE2) with sve-max-vq=N and
# the default length set to the maximum (sve-default-vector-length=-1), so that the process runs
# at N x 128 bits rather than qemu's default of 512. Each length first checks that the best
# target saw that length (the Targets test with LOCKSTEP_EXPECT_VECTOR_BITS prints every target's
# length), then runs the kernel sweeps and the golden hashes on the SVE targets this length runs:
#   128 bits (vq 1): SVE2_128, SVE2, SVE     256 bits (vq 2): SVE_256, SVE2, SVE
#   512 bits (vq 4): SVE2, SVE               2048 bits (vq 16): SVE2, SVE
# (NEON and the portable fallback are the Arm stage's own runs.)
#   tools/sve_lengths.sh BUILD_DIR [VQ ...]      e.g. tools/sve_lengths.sh build-aarch64 1 2 4 16
# Environment: SVE_KERNELS_FILTER, SVE_MODEL_FILTER (gtest filters), SVE_TARGETS (a
# LOCKSTEP_TEST_TARGETS list for every length instead of the ones above), SVE_SECONDS (a bound
# for each length; past it the run fails).
# qemu 7.2 has a reported SVE bug at 1024 bits and more (QEMU issue 1737): a mismatch only at 16
# is checked against it before the kernel is blamed.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
dir=$1
shift
vqs=("$@")
[ ${#vqs[@]} -gt 0 ] || vqs=(1 2 4 16)
kernels_filter=${SVE_KERNELS_FILTER:-Matmul.EqualsReferenceForEveryShapeAndTarget:MatmulQ8.*:MatmulQ4.*:RmsNorm.*:Rope.*:Attention.EqualsReferenceWithTransposedKeys:Elementwise.*:CrossEntropy.*}
model_filter=${SVE_MODEL_FILTER:-Golden.LogitsAndLossBitsArePinned}
seconds=${SVE_SECONDS:-0}
status=0
for vq in "${vqs[@]}"; do
  bits=$((vq * 128))
  case $vq in
    1) targets=SVE2_128,SVE2,SVE ;;
    2) targets=SVE_256,SVE2,SVE ;;
    *) targets=SVE2,SVE ;;
  esac
  targets=${SVE_TARGETS:-$targets}
  # The arm64 loader and libc from / (cmake/aarch64-linux-gnu.cmake says why not the cross sysroot).
  qemu=(qemu-aarch64-static -cpu "max,sve-max-vq=$vq,sve-default-vector-length=-1" -L /)
  bound=()
  [ "$seconds" -gt 0 ] && bound=(timeout "$seconds")
  began=$SECONDS
  echo "sve_lengths: $bits-bit SVE (sve-max-vq=$vq), targets $targets"
  LOCKSTEP_EXPECT_VECTOR_BITS=$bits LOCKSTEP_TEST_TARGETS=$targets "${bound[@]}" "${qemu[@]}" "$dir/tests/test_arm" \
    --gtest_filter="Targets.*:$kernels_filter:$model_filter" --gtest_brief=1 || { status=$?; echo "sve_lengths: $bits-bit SVE FAILED (status $status)"; }
  echo "sve_lengths: $bits-bit SVE: $((SECONDS - began)) s"
done
exit "$status"
