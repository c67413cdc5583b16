#!/usr/bin/env bash
# Data-parallel training against threads on one machine (issue 20's goal: 2 ranks x 1 thread
# at least 0.9 of 1 rank x 2 threads in tokens/s, s256, batch 8 x 256). Also checks that both
# wrote the same checkpoint bits, and prints the bytes rank 0 sent per step and the seconds it
# waited for the other rank. Run it on a quiet machine with at least 2 cores.
#   bench/mpi_scaling.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-10}
BIN="$BUILD/src/lockstep"
[ -x "$BIN" ] || { echo "bench/mpi_scaling.sh: $BIN is not built (./run build)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench/mpi_scaling.sh: mpirun is missing (apt-get install openmpi-bin)" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
# 4 MB of text-like bytes: the fortunes when installed, else a fixed pseudo-random word salad.
if [ -r /usr/share/games/fortunes/fortunes ]; then
  for _ in $(seq 8); do cat /usr/share/games/fortunes/fortunes; done | head -c 4000000 > "$OUT/data.txt"
else
  /usr/bin/python3 -c "
import random
random.seed(1)
w = ['the ', 'of ', 'and ', 'to ', 'in ', 'is ', 'that ', 'for ', 'it ', 'as ']
open('$OUT/data.txt', 'w').write(''.join(random.choice(w) for _ in range(1100000))[:4000000])"
fi
cat > "$OUT/s256.sx" <<RUN
(defrun s256-mpi-bench
  :data "$OUT/data.txt"
  :length 256 :d-model 256 :n-layers 6 :n-heads 8 :d-ff 768 :batch 8
  :steps $STEPS :warmup 2 :checkpoint-every 0 :eval-every 0)
RUN
MPI=(mpirun --oversubscribe --mca btl self,vader --mca oob_tcp_if_include lo)
[ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
tokens() { tail -n 1 "$1/metrics.jsonl" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_second"])'; }

# LOCKSTEP_PHASE_TIMES=1: each process prints where its time went (wall/cpu seconds per phase).
LOCKSTEP_PHASE_TIMES=1 "$BIN" train "$OUT/s256.sx" --checkpoint-dir "$OUT/threads" --cpu-cores 2 > /dev/null \
  2> "$OUT/threads.err"
LOCKSTEP_PHASE_TIMES=1 "${MPI[@]}" -x LOCKSTEP_PHASE_TIMES -np 2 "$BIN" train "$OUT/s256.sx" \
  --checkpoint-dir "$OUT/ranks" --cpu-cores 1 > "$OUT/ranks.txt" 2> "$OUT/ranks.err"
t_threads=$(tokens "$OUT/threads")
t_ranks=$(tokens "$OUT/ranks")
same=$(cd "$OUT" && if diff -r -x metrics.jsonl threads ranks > /dev/null; then echo same; else echo DIFFERENT; fi)
echo "s256, $STEPS steps of 8 x 256 tokens:"
echo "  1 rank x 2 threads: $t_threads tokens/s"
echo "  2 ranks x 1 thread: $t_ranks tokens/s"
/usr/bin/python3 -c "print('  ratio (goal >= 0.9): %.3f' % ($t_ranks / $t_threads))"
grep "ranks " "$OUT/ranks.txt" | sed "s/^ */  /; s/\$/ over $STEPS steps/"
echo "  checkpoints: $same bits"
echo "  phase seconds over the run, wall/cpu (worker 0 of each process):"
for f in threads ranks; do
  grep "phase seconds" "$OUT/$f.err" | sort | sed "s/^lockstep train: /    $f: /; s/ phase seconds (wall\/cpu)//"
done
