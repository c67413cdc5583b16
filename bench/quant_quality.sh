#!/usr/bin/env bash
# Quality of quantized models against the f32 model they came from (bench/README.md, "Quantized
# models: quality"): a lockstep model exported to GGUF F32, quantized by llama.cpp's own
# `llama-quantize --pure` to Q8_0 and Q4_0, imported back (`import gguf --ids-only`), and each
# compared with the f32 model by `lockstep eval MODEL --against BASE` on the held-out part of
# examples/fortunes.sx's data (the last 3% of its files, which no step trained on): mean KL
# divergence, its quantiles, top-1 agreement and both perplexities, over eval's windows and over
# llama-perplexity's chunks (--windows second-half).
#
#   LLAMA_CPP=/path/to/llama.cpp bench/quant_quality.sh [MODEL [OUT]]
#
# MODEL: a byte-level lockstep model (default examples/models/fortunes; its matrices' input
# widths must be multiples of 32 for Q8_0 and Q4_0). OUT: where the files go (default
# build/quant_quality/<model name>). LLAMA_CPP: a llama.cpp checkout with build/bin/llama-quantize
# (required: lockstep writes no Q4_0). With LLAMA_PERPLEXITY=1 the script runs llama.cpp's side
# too (llama-perplexity --kl-divergence on the same files, minutes on 2 cores); and where
# LLAMA_CPP/gguf-py is there, it writes the quantized files' weights dequantized (by gguf-py) into
# F32 GGUF files and compares those as well: the weights' rounding alone, without the
# activations' quantization. The lockstep binary is build/src/lockstep (./run build) unless
# LOCKSTEP names another.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODEL=${1:-examples/models/fortunes}
OUT=${2:-build/quant_quality/$(basename "$MODEL")}
LOCKSTEP=${LOCKSTEP:-$ROOT/build/src/lockstep}
: "${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp checkout with build/bin/llama-quantize}"
BIN=$LLAMA_CPP/build/bin
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=/usr/bin/python3
[ -x "$LOCKSTEP" ] || { echo "no lockstep binary at $LOCKSTEP: ./run build first" >&2; exit 1; }
[ -x "$BIN/llama-quantize" ] || { echo "no $BIN/llama-quantize" >&2; exit 1; }
MODEL=$(realpath "$MODEL")
rm -rf "$OUT"
mkdir -p "$OUT"
cd "$OUT"

# The held-out text: examples/fortunes.sx's :data files concatenated, their last floor(n * 3 / 100)
# bytes (its :held-out 0.03, docs/TRAINING.md "Data").
mapfile -t files < <(grep -o '"/usr/share/games/fortunes/[a-z-]*"' "$ROOT/examples/fortunes.sx" | tr -d '"')
cat "${files[@]}" > all.txt
n=$(stat -c %s all.txt)
tail -c $((n * 3 / 100)) all.txt > heldout.txt
rm all.txt
echo "held-out text: $(stat -c %s heldout.txt) bytes of $n"

"$LOCKSTEP" export-gguf "$MODEL" -o f32.gguf
for t in q8_0 q4_0; do
  "$BIN/llama-quantize" --pure f32.gguf "$t.gguf" "${t^^}" > "quantize_$t.log" 2>&1
done
kinds=(q8_0 q4_0)
if [ -d "$LLAMA_CPP/gguf-py" ]; then
  # f32.gguf's bytes with each tensor's data replaced by the quantized file's dequantized values.
  PYTHONPATH=$LLAMA_CPP/gguf-py "$PY" - <<'EOF'
from gguf import GGUFReader
from gguf.quants import dequantize
base = GGUFReader('f32.gguf')
for q in ['q8_0', 'q4_0']:
    buf = bytearray(open('f32.gguf', 'rb').read())
    src = {t.name: t for t in GGUFReader(q + '.gguf').tensors}
    for t in base.tensors:
        d = dequantize(src[t.name].data, src[t.name].tensor_type).astype('<f4').ravel()
        assert d.size == t.n_elements, t.name
        buf[t.data_offset:t.data_offset + 4 * d.size] = d.tobytes()
    open('dequantized_' + q + '.gguf', 'wb').write(buf)
EOF
  kinds+=(dequantized_q8_0 dequantized_q4_0)
fi
for t in f32 "${kinds[@]}"; do
  "$LOCKSTEP" import gguf "$t.gguf" -o "model_$t" --ids-only > "import_$t.log"
done
# The F32 file imports to the very parameters exported.
cmp "model_f32/params.safetensors" "$MODEL/params.safetensors"
echo "f32 GGUF round trip: params.safetensors identical"

for t in "${kinds[@]}"; do
  for w in every-token second-half; do
    began=$SECONDS
    "$LOCKSTEP" eval "model_$t" --against "$MODEL" --data heldout.txt --windows "$w" --progress plain \
      > "lockstep_${t}_$w.txt" 2> /dev/null
    echo "== lockstep $t against f32, --windows $w ($((SECONDS - began)) s)"
    sed -n '3,$p' "lockstep_${t}_$w.txt"
  done
done

if [ "${LLAMA_PERPLEXITY:-0}" = 1 ]; then
  ctx=$(grep -o '"length": [0-9]*' "$MODEL/model.json" | grep -o '[0-9]*$')
  "$BIN/llama-perplexity" -m f32.gguf -f heldout.txt -c "$ctx" -t 2 --kl-divergence-base base.kld > llama_f32.log 2>&1
  for t in "${kinds[@]}"; do
    "$BIN/llama-perplexity" -m "$t.gguf" -f heldout.txt -c "$ctx" -t 2 --kl-divergence-base base.kld \
      --kl-divergence > "llama_$t.log" 2>&1
    echo "== llama-perplexity $t against f32 (-c $ctx)"
    sed -n '/====== Perplexity statistics/,$p' "llama_$t.log" | grep -E 'PPL|KLD|RMS|Same top'
  done
fi
