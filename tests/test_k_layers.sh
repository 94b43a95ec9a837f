#!/usr/bin/env bash
# test_k_layers.sh SPINDLE GOLDENS WORK SOURCE_DIR: per-layer budgets (`eval --k-layers`) on
# the CPU twin. Uniform weights (any scale) give the same numbers as no file; a skewed file
# keeps round(k*w_l) keys at layer l, and each layer's sparsity is then exactly that of its own
# k; the hybrid Gemma 3 golden takes one weight per full-attention layer only; malformed files
# are refused with exit 1 naming the file; scripts/calibrate-k-layers.py turns an eval's
# per-layer recall into a file of mean 1 that eval reads.
set -u
bin=$1 goldens=$2 work=$3 src=$4
rm -rf "$work" && mkdir -p "$work"
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
g=$goldens/llama_f32_default
for i in 1 2 3 4 5 6; do cat "$g/ids.txt"; done >"$work/ids.txt"
ev0() { "$bin" eval --model "$g" --ids "$work/ids.txt" --ctx 64 --threads 2 "$@"; }
ev() { ev0 --k 8,16 --bsel 1,8 "$@"; }

ev --json "$work/none.json" 2>/dev/null
echo '{"weights": [1, 1]}' >"$work/uniform.json"
echo '{"weights": [3, 3]}' >"$work/scaled.json"
echo '{"weights": [0.25, 1.75]}' >"$work/skewed.json"
ev --k-layers "$work/uniform.json" --json "$work/uni.json" 2>/dev/null
ev --k-layers "$work/scaled.json" --json "$work/sca.json" 2>"$work/sca.log"
check "weights of mean 3 are divided by it, saying so" "grep -q 'mean is 3' '$work/sca.log'"
ev --k-layers "$work/skewed.json" --json "$work/skw.json" 2>"$work/skw.log"
check "the per-layer k are printed" "grep -q 'k 8 keeps 2,14 keys at layers 0,1' '$work/skw.log'"
check "uniform weights: the same numbers as no file; a skewed file: each layer's own k" "python3 - '$work' <<'PY'
import json, sys
w = sys.argv[1]
load = lambda n: json.load(open(f'{w}/{n}.json'))
none, uni, sca, skw = load('none'), load('uni'), load('sca'), load('skw')
keys = ['nll', 'dnll', 'logit_kl', 'top1_agree', 'mass_recall', 'sparsity', 'layer_mass_recall', 'layer_sparsity']
for a, b, c in zip(none, uni, sca):
    for k in keys:
        assert a.get(k) == b.get(k) == c.get(k), (a['mode'], a['k'], a['bsel'], k, a.get(k), b.get(k), c.get(k))
    if a['mode'] != 'dense':
        assert b['layer_k'] == [a['k']] * 2 and c['layer_k'] == [a['k']] * 2, (b['layer_k'], c['layer_k'])
        assert 'layer_k' not in a
assert uni[0]['provenance']['k_layers'].endswith('uniform.json')
assert none[0]['provenance']['k_layers'] is None
assert sca[0]['provenance']['k_layer_weights'] == [1, 1]
T = 64
causal = T * (T + 1) / 2
for r in skw:
    if r['mode'] == 'dense':
        continue
    want = [round(r['k'] * 0.25), round(r['k'] * 1.75)]
    assert r['layer_k'] == want, (r['k'], r['layer_k'], want)
    if r['bsel'] == 1:  # per query: |S_t| = min(k_l, t + 1)
        for j, kl in enumerate(want):
            s = 1 - sum(min(kl, t + 1) for t in range(T)) / causal
            assert abs(r['layer_sparsity'][j] - s) < 1e-5, (j, r['layer_sparsity'][j], s)
    # fewer keys: less recall at layer 0, more at layer 1, than the uniform row of the same k
    u = next(x for x in none if x['mode'] == r['mode'] and x['k'] == r['k'] and x['bsel'] == r['bsel'])
    assert r['layer_mass_recall'][0] < u['layer_mass_recall'][0] and r['layer_mass_recall'][1] > u['layer_mass_recall'][1]
    assert r['dnll'] != u['dnll']
    # the layer-averaged fields are the means of the per-layer ones
    assert abs(sum(r['layer_mass_recall']) / 2 - r['mass_recall']) < 1e-4, (r['layer_mass_recall'], r['mass_recall'])
    assert abs(sum(r['layer_sparsity']) / 2 - r['sparsity']) < 1e-4, (r['layer_sparsity'], r['sparsity'])
PY"

# Indexer rows (an indexer of a few steps: its supports, not its quality, are checked): the same per-layer k.
"$bin" teacher --model "$g" --ids "$work/ids.txt" --ctx 64 --out "$work/shards" 2>/dev/null &&
  "$bin" train --model "$g" --shards "$work/shards" --steps 4 --d-index 8 --d-rope 4 --recall-k 8 --eval-every 4 \
    --threads 2 --out "$work/run" 2>/dev/null && "$bin" export --run "$work/run" --out "$work/idx" 2>/dev/null
check "a tiny indexer to evaluate" "[ -s '$work/idx/model.safetensors' ]"
ev --indexer "$work/idx" --json "$work/ix_none.json" 2>/dev/null
ev --indexer "$work/idx" --k-layers "$work/uniform.json" --json "$work/ix_uni.json" 2>/dev/null
ev --indexer "$work/idx" --k-layers "$work/skewed.json" --json "$work/ix_skw.json" 2>/dev/null
check "indexer rows: uniform weights give the no-file numbers, a skewed file each layer's own k" "python3 - '$work' <<'PY'
import json, sys
w = sys.argv[1]
none, uni, skw = (json.load(open(f'{w}/ix_{n}.json')) for n in ('none', 'uni', 'skw'))
for a, b in zip(none, uni):
    for k in ('nll', 'dnll', 'mass_recall', 'sparsity', 'layer_mass_recall', 'layer_sparsity'):
        assert a.get(k) == b.get(k), (a['mode'], a['k'], a['bsel'], k)
T = 64
causal = T * (T + 1) / 2
rows = [r for r in skw if r['mode'] == 'indexer']
assert len(rows) == 4, len(rows)
for r in rows:
    want = [round(r['k'] * 0.25), round(r['k'] * 1.75)]
    assert r['layer_k'] == want, (r['layer_k'], want)
    if r['bsel'] == 1:
        o = next(x for x in skw if x['mode'] == 'oracle' and x['k'] == r['k'] and x['bsel'] == 1)
        for j, kl in enumerate(want):
            s = 1 - sum(min(kl, t + 1) for t in range(T)) / causal
            assert abs(r['layer_sparsity'][j] - s) < 1e-5, (j, r['layer_sparsity'][j], s)
            # the oracle keeps the most mass a support of k_l keys can
            assert r['layer_mass_recall'][j] <= o['layer_mass_recall'][j] + 1e-5, (j, r, o)
PY"

# Malformed files: exit 1, the file named.
printf '{"weights": [1, 1, 1]}' >"$work/long.json"
printf '{"weights": [1, 0]}' >"$work/zero.json"
printf '{"weights": [1, -2]}' >"$work/neg.json"
printf '{"weights": [1, "a"]}' >"$work/str.json"
printf '{"w": [1, 1]}' >"$work/nokey.json"
printf '{"weights": [1, 1' >"$work/trunc.json"
for f in long zero neg str nokey trunc missing; do
  ev --k-layers "$work/$f.json" --json "$work/bad.json" 2>"$work/bad.log"
  check "a $f weights file is refused (exit 1, named)" "[ $? -eq 1 ] && grep -q '$f.json' '$work/bad.log' && [ ! -e '$work/bad.json' ]"
done
check "the wrong length says how many layers" "ev --k-layers '$work/long.json' --json '$work/bad.json' 2>&1 | grep -q '3 entries; the model has 2 full-attention layers'"
ev --k-layers "$work/uniform.json" --device cuda --json "$work/bad.json" 2>"$work/cuda.log"
check "--k-layers with --device cuda is a usage error (exit 2)" "[ $? -eq 2 ]"

# A hybrid stack: one weight per full-attention layer (1 and 3 of 4).
h=$goldens/gemma3_legacy_w4
for i in 1 2 3 4 5 6 7 8; do cat "$h/ids.txt"; done >"$work/hids.txt"
echo '{"weights": [0.5, 1.5]}' >"$work/h2.json"
"$bin" eval --model "$h" --ids "$work/hids.txt" --ctx 48 --k 8 --bsel 1 --k-layers "$work/h2.json" --json "$work/h.json" 2>/dev/null
check "hybrid stack: two weights for its two full-attention layers" "python3 -c \"
import json; r = json.load(open('$work/h.json'))[1]
assert r['layer_k'] == [4, 12] and len(r['layer_sparsity']) == 2, r
assert r['provenance']['full_attention_layers'] == [1, 3]\""
"$bin" eval --model "$h" --ids "$work/hids.txt" --ctx 48 --k 8 --bsel 1 --k-layers "$work/uniform.json" --json "$work/h4.json" 2>/dev/null
check "hybrid stack: the uniform file of 2 weights is right for it" "[ -s '$work/h4.json' ]"
printf '{"weights": [1, 1, 1, 1]}' >"$work/h4w.json"
"$bin" eval --model "$h" --ids "$work/hids.txt" --ctx 48 --k 8 --bsel 1 --k-layers "$work/h4w.json" --json "$work/bad.json" 2>/dev/null
check "hybrid stack: a weight per layer of every kind is refused" "[ $? -eq 1 ]"

# Calibration: recall curves from an eval at several k -> a file of mean 1 that spends the budget.
ev0 --k 4,8,16,32 --bsel 1 --json "$work/calib.json" 2>/dev/null
python3 "$src/scripts/calibrate-k-layers.py" --eval "$work/calib.json" --k 8 --bsel 1 --step 1 --out "$work/cal.json" 2>"$work/cal.log"
check "calibrate-k-layers writes weights of mean 1 and the layer k summing to the budget" "python3 -c \"
import json; c = json.load(open('$work/cal.json'))
w = c['weights']; k = c['calibration']['layer_k']
assert len(w) == 2 and abs(sum(w) / 2 - 1) < 1e-9 and sum(k) == 16 and min(k) >= 4, c\""
ev0 --k 8 --bsel 1 --k-layers "$work/cal.json" --json "$work/calev.json" 2>/dev/null
check "eval reads the calibrated file" "python3 -c \"
import json; a = json.load(open('$work/cal.json')); r = json.load(open('$work/calev.json'))[1]
assert r['layer_k'] == a['calibration']['layer_k'], (r['layer_k'], a)\""
python3 "$src/scripts/calibrate-k-layers.py" --eval "$work/calib.json" --k 2 --bsel 1 --out "$work/cal2.json" 2>/dev/null
check "calibrate-k-layers refuses a k below the smallest measured" "[ $? -ne 0 ] && [ ! -e '$work/cal2.json' ]"
echo "test_k_layers: $fails failure(s)"
[ "$fails" -eq 0 ]
