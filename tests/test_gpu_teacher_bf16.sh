#!/usr/bin/env bash
# test_gpu_teacher_bf16.sh SPINDLE GOLDENS WORK: the teacher of a bf16 GPU pass is
# the attention that pass computed. The bf16 pass attends over bf16 roundings of
# q and k, and the log-sum-exp it hands the trainer is theirs; a teacher P
# rebuilt from any other q, k does not sum to one where logits are large. Qwen2
# checkpoints have such logits: Qwen2.5-1.5B's layer-0 key bias reaches 354, so
# the query-key logits run into the thousands and bf16's rounding moves them by
# whole units (e^units of mass). Here the tiny qwen2 golden gets a layer-0 key bias
# of up to 300 and query bias of up to 30, and one online training step on the
# GPU (bf16 backbone) reports each layer's KL twice: with the fp32 teacher
# (P from the tapped q, k in fp32 arithmetic) and with the bf16 teacher (P on
# tensor cores from q, k rounded to bf16 inside the loss). Both read the same
# pass; they agree only if the tapped q, k are the ones the pass attended over.
# The same holds for eval's rows with statistics in a bf16 pass: at k = ctx − 1
# per query every scored position keeps all its keys, so the oracle's and the
# indexer's rows must give dense's logits up to the rounding of v and P — not
# those of attention over the unrounded q, k.
# Exit 0 pass, 1 a failure, 77 (CTest: skipped) without a usable GPU or python3.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
g=$goldens/qwen2_bias_legacy
. "$(dirname "${BASH_SOURCE[0]}")/gpu_probe.sh"
gpu_probe "$bin" "$g" "$work"
command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }
m=$work/bigbias
mkdir -p "$m" && cp "$g"/config.json "$g"/generation_config.json "$m"/
# The same tensors, the layer-0 q/k biases scaled (float32 little-endian, standard library only).
python3 - "$g/model.safetensors" "$m/model.safetensors" <<'PY' || { echo "FAIL: writing the big-bias copy"; exit 1; }
import array, json, struct, sys
src, dst = sys.argv[1:3]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
body = bytearray(raw[8 + n:])
for name, peak in (("model.layers.0.self_attn.k_proj.bias", 300.0), ("model.layers.0.self_attn.q_proj.bias", 30.0)):
    a, b = head[name]["data_offsets"]
    v = array.array("f", bytes(body[a:b]))
    s = peak / max(abs(x) for x in v)
    body[a:b] = array.array("f", [x * s for x in v]).tobytes()
open(dst, "wb").write(raw[:8 + n] + bytes(body))
PY
for i in 1 2 3 4; do cat "$g/ids.txt"; done >"$work/ids.txt"
args=(train --model "$m" --device cuda --ids "$work/ids.txt" --ctx 48 --steps 1 --d-index 16 --d-rope 8 --min-pos 4
      --query-frac 0.5 --lr 1e-3 --warmup 1 --ckpt-every 1)
fails=0
"$bin" "${args[@]}" --out "$work/t32" 2>"$work/t32.log" || { echo "FAIL: train (fp32 teacher): $(tail -2 "$work/t32.log")"; exit 1; }
"$bin" "${args[@]}" --teacher-precision bf16 --out "$work/t16" 2>"$work/t16.log" ||
    { echo "FAIL: train (bf16 teacher): $(tail -2 "$work/t16.log")"; exit 1; }
# metrics.csv: step,layer,kl,...; one step, one row per layer.
while IFS=, read -r layer a b; do
    ok=$(awk -v a="$a" -v b="$b" 'BEGIN {d = a - b; if (d < 0) d = -d; print (a >= 0 && b >= 0 && d <= 1e-3 * b + 1e-4) ? 1 : 0}')
    echo "layer $layer: step-1 KL with the fp32 teacher $a, with the bf16 teacher $b"
    [ "$ok" = 1 ] || { echo "FAIL: layer $layer: the two teachers of one bf16 pass disagree"; fails=$((fails + 1)); }
done < <(paste -d, <(tail -n +2 "$work/t32/metrics.csv" | cut -d, -f2,3) <(tail -n +2 "$work/t16/metrics.csv" | cut -d, -f3))
[ "$(tail -n +2 "$work/t32/metrics.csv" | wc -l)" = 2 ] || { echo "FAIL: expected 2 layers in metrics.csv"; fails=$((fails + 1)); }

"$bin" export --run "$work/t16" --out "$work/ix" 2>"$work/export.log" || { echo "FAIL: export: $(tail -1 "$work/export.log")"; exit 1; }
"$bin" eval --model "$m" --ids "$work/ids.txt" --ctx 48 --k 47 --bsel 1 --indexer "$work/ix" --device cuda --precision bf16 \
    --json "$work/e.json" 2>"$work/eval.log" || { echo "FAIL: eval: $(tail -2 "$work/eval.log")"; exit 1; }
python3 - "$work/e.json" <<'PY'
import json, sys
rows = {r["mode"]: r for r in json.load(open(sys.argv[1]))}
bad = 0
for mode in ("oracle", "indexer"):
    r = rows[mode]
    ok = abs(r["dnll"]) <= 1e-3 and r["logit_kl"] <= 1e-4
    print(f"eval bf16, {mode} k 47 of 48 per query: dNLL {r['dnll']:+.2e}, logit KL {r['logit_kl']:.2e} against dense")
    if not ok:
        print(f"FAIL: the {mode} row with statistics does not attend as the bf16 pass does")
        bad += 1
sys.exit(bad)
PY
fails=$((fails + $?))
echo "$fails failure(s)"
[ "$fails" = 0 ]
