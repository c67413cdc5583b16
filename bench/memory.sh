#!/usr/bin/env bash
# Resident memory of `lockstep serve` per model: VmRSS once it listens (what it holds while
# serving) and VmHWM (its peak, loading included), from /proc/PID/status.
#   bench/memory.sh LOCKSTEP MODEL_DIR[:bf16] ...
# A `:bf16` suffix serves the model with --precision bf16. Prints one line per model, in MB
# (10^6 bytes). Linux only; the socket lives in a temporary directory removed at exit.
set -euo pipefail
lockstep=$1
shift
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
mb() { awk -v k="$1" '$1 == k":" { printf "%.0f", $2 * 1024 / 1e6 }' "/proc/$pid/status"; }
printf '%-40s %10s %10s\n' model 'VmRSS MB' 'VmHWM MB'
for spec in "$@"; do
  dir=${spec%:bf16}
  extra=()
  [ "$dir" != "$spec" ] && extra=(--precision bf16)
  sock=$tmp/s
  rm -f "$sock"
  "$lockstep" serve "$dir" --socket "$sock" --no-cache "${extra[@]}" >"$tmp/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 6000); do  # up to 10 minutes on a loaded machine
    [ -S "$sock" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/log" >&2; exit 1; }
    sleep 0.1
  done
  [ -S "$sock" ] || { echo "memory.sh: $spec: no socket after 10 minutes" >&2; exit 1; }
  printf '%-40s %10s %10s\n' "$spec" "$(mb VmRSS)" "$(mb VmHWM)"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
done
