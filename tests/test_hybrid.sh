#!/usr/bin/env bash
# test_hybrid.sh SPINDLE GOLDENS WORK: the method on a hybrid stack, end to end
# on the CPU, on the tiny Gemma 3 golden gemma3_legacy_w4 (layers sliding,
# full, sliding, full; window 4): teacher -> train -> export -> info -> eval.
# The teacher stores the full-attention layers only (1 and 3) by default, the
# indexers cover exactly those, training lowers the KL, the eval's oracle and
# indexer rows are sparse at those 2 of 4 layers with recall and sparsity
# averaged over them, and a sliding layer is refused as --layers.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
g=$goldens/gemma3_legacy_w4
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
for i in 1 2 3 4 5 6 7 8; do cat "$g/ids.txt"; done >"$work/ids.txt"
"$bin" teacher --model "$g" --ids "$work/ids.txt" --ctx 48 --out "$work/shards" 2>"$work/teacher.log"
check "teacher on the hybrid stack" "[ -s '$work/shards/shard-00000.h5' ]"
"$bin" teacher --model "$g" --ids "$g/ids.txt" --ctx 48 --out "$work/held" 2>/dev/null
"$bin" teacher --model "$g" --ids "$g/ids.txt" --ctx 48 --layers 0 --out "$work/bad" 2>"$work/bad.log"
check "--layers naming a sliding layer is a usage error (exit 2)" "[ $? -eq 2 ] && grep -q sliding_attention '$work/bad.log'"
"$bin" train --model "$g" --shards "$work/shards" --heldout "$work/held" --steps 200 --d-index 16 --d-rope 8 \
  --recall-k 8 --eval-every 50 --min-pos 4 --lr 1e-2 --warmup 10 --threads 2 --out "$work/run" 2>"$work/train.log"
check "train on the teacher's layers" "[ -s '$work/run/checkpoints/ckpt-00000200.bin' ]"
check "training lowers the KL at both full-attention layers" "awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) c[\$i] = i; next}
  {l = \$c[\"layer\"]; if (\$1 <= 10) {a[l] += \$c[\"kl\"]; na[l]++} if (\$1 > 190) {b[l] += \$c[\"kl\"]; nb[l]++}}
  END {n = 0; for (l in a) {n++; if (!(b[l] / nb[l] < 0.8 * a[l] / na[l])) exit 1} exit n != 2}' '$work/run/metrics.csv'"
"$bin" export --run "$work/run" --out "$work/idx" 2>/dev/null
check "export" "[ -s '$work/idx/model.safetensors' ]"
"$bin" info --model "$g" --indexer "$work/idx" >"$work/info.txt" 2>&1
check "info: the layer kinds" "grep -q 'layer kinds    S F S F' '$work/info.txt'"
check "info: the indexer covers full-attention layers 1 and 3" "grep -q '2 of 2 full-attention layers: 1 3' '$work/info.txt'"
"$bin" eval --model "$g" --ids "$work/ids.txt" --ctx 48 --k 8 --bsel 1,8 --indexer "$work/idx" \
  --json "$work/eval.json" 2>"$work/eval.log"
check "eval with the indexer" "[ -s '$work/eval.json' ]"
check "eval: oracle and indexer rows sparse at the 2 full-attention layers, recall and sparsity in range" \
  "python3 - '$work/eval.json' <<'PY'
import json, math, sys
rows = json.load(open(sys.argv[1]))
modes = {r['mode'] for r in rows}
assert modes == {'dense', 'oracle', 'indexer'}, modes
for r in rows:
    if r['mode'] == 'dense':
        continue
    assert r['n_sparse_layers'] == 2 and r['n_layers'] == 4, (r['n_sparse_layers'], r['n_layers'])
    # averaged over the 2 full-attention layers: a sum over 4 would halve or double it
    assert 0.3 < r['mass_recall'] <= 1.0 + 1e-6, r['mass_recall']
    assert 0.5 < r['sparsity'] < 1.0, r['sparsity']   # over 4 layers (2 dense) it would be < 0.35
    if r['mode'] == 'oracle' and r['bsel'] == 1:
        # per query: |S_t| = min(k, t + 1) at each full-attention layer, so
        # sparsity = 1 - sum_t min(8, t + 1) / sum_t (t + 1) = 1 - 356/1176 exactly
        assert abs(r['sparsity'] - (1 - 356 / 1176)) < 1e-4, r['sparsity']
    assert math.isfinite(r['dnll'])
PY"
echo "test_hybrid: $fails failure(s)"
[ "$fails" -eq 0 ]
