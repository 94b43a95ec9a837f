#!/usr/bin/env bash
# test_export_layouts.sh SPINDLE GOLDENS WORK [names]: exports other stacks can run.
# Two tiny indexers trained here on the tiny llama golden (head-expanded with a
# LayerNorm key; head-collapsed with an RMSNorm key) are exported in every
# layout that can express them (spindle + dsa; spindle + qsa); the numpy path of
# python/spindle_indexer.py (its own safetensors reader) must reproduce
# spindle's supports (`spindle scores --dump-selection`: per query and
# block-shared, k 8 and 24, both layers, two sequences) for >= 99.9% of the
# selected keys, ties aside, and its scores within 1e-4; a negated weight must
# make that check fail; variants a layout cannot express, and unknown layouts,
# are refused without leaving a folder. With `names`: instead, each layout's
# file loads with the `safetensors` package and holds exactly the tensors its
# config.json names (exit 77, skipped, without the package).
set -u
bin=$1 goldens=$2 work=$3 mode=${4:-selections}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
chk="$here/tests/check_export_layouts.py"
rm -rf "$work" && mkdir -p "$work"
python3 -c "import numpy, h5py" 2>/dev/null || { echo "skipped: python3 with numpy and h5py is needed (scripts/setup.sh)"; exit 77; }
g=$goldens/llama_f32_default
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
for i in 1 2 3 4 5 6; do cat "$g/ids.txt"; done >"$work/ids.txt"
"$bin" teacher --model "$g" --ids "$work/ids.txt" --ctx 96 --out "$work/shards" 2>/dev/null
shard=$work/shards/shard-00000.h5
common=(train --model "$g" --shards "$work/shards" --d-index 16 --d-rope 8 --recall-k 8 --lr 1e-2
        --warmup 5 --threads 2)
"$bin" "${common[@]}" --out "$work/runE" --steps 40 --variant expanded --heads 3 2>/dev/null
"$bin" "${common[@]}" --out "$work/runC" --steps 40 --key-norm rms 2>/dev/null
"$bin" "${common[@]}" --out "$work/runD" --steps 3 2>/dev/null  # the default: collapsed, LayerNorm key
"$bin" "${common[@]}" --out "$work/runF" --steps 3 --variant expanded --heads 2 --key-norm rms 2>/dev/null
for r in runE runC runD runF; do check "$r trained" "[ -s '$work/$r/config.json' ]"; done

ex() { "$bin" export --run "$work/$1" --out "$work/$2" --k 24 --bsel 4 --layout "$3" 2>"$work/$2.err"; }
for l in spindle dsa; do check "expanded + LayerNorm key exports as $l" "ex runE E-$l $l"; done
for l in spindle qsa; do check "collapsed + RMSNorm key exports as $l" "ex runC C-$l $l"; done

if [ "$mode" = names ]; then
  for d in E-spindle E-dsa C-spindle C-qsa; do
    python3 "$chk" names "$work/$d"
    rc=$?
    [ $rc = 77 ] && exit 77
    check "$d: the safetensors package names exactly the tensors of config.json" "[ $rc = 0 ]"
  done
  echo "$fails failure(s)"
  [ "$fails" = 0 ]
  exit
fi

# Refusals: exit 1 naming the run's config.json and what the layout lacks, exit 2 for an unknown layout; no folder.
refused() {  # run out layout rc pattern
  "$bin" export --run "$work/$1" --out "$work/$2" --layout "$3" 2>"$work/$2.err"
  local rc=$?
  [ $rc = "$4" ] && grep -q "$5" "$work/$2.err" && [ ! -e "$work/$2" ] && [ ! -e "$work/$2.tmp" ]
}
check "dsa refuses a head-collapsed indexer (exit 1)" "refused runC no1 dsa 1 'config.json: --layout dsa cannot express a head-collapsed'"
check "dsa refuses an RMSNorm key (exit 1)" "refused runF no2 dsa 1 'config.json: --layout dsa cannot express key_norm rms'"
check "qsa refuses a head-expanded indexer (exit 1)" "refused runE no3 qsa 1 'config.json: --layout qsa cannot express a head-expanded'"
check "qsa refuses a LayerNorm key (exit 1)" "refused runD no4 qsa 1 'cannot express key_norm layer'"
check "an unknown layout is a usage error (exit 2)" "refused runE no5 mla 2 'layout must be spindle, dsa or qsa'"
check "spindle's own loader refuses a dsa export by name" \
  "! '$bin' logits --model '$g' --ids '$g/ids.txt' --out '$work/l.npy' --indexer '$work/E-dsa' 2>'$work/l.err' && grep -q 'exported with --layout dsa' '$work/l.err' && [ ! -e '$work/l.npy' ]"
check "the default layout's bytes: --layout spindle == no --layout" \
  "'$bin' export --run '$work/runE' --out '$work/E-plain' --k 24 --bsel 4 2>/dev/null && cmp -s '$work/E-plain/model.safetensors' '$work/E-spindle/model.safetensors' && cmp -s '$work/E-plain/config.json' '$work/E-spindle/config.json'"

# spindle's supports and scores on two sequences of the shard (each layout holds the same weights).
dump() {  # run-prefix seq
  local d=$work/dumps-$1-$2
  mkdir -p "$d"
  echo "0,1,5,31,48,95" >"$d/positions.txt"
  for l in 0 1; do
    "$bin" scores --indexer "$work/$1-spindle" --shard "$shard" --seq "$2" --layer $l --positions "$(cat "$d/positions.txt")" \
      --out "$d/scores-L$l.npy" 2>/dev/null || return 1
    for k in 8 24; do for b in 1 4 16; do
      "$bin" scores --indexer "$work/$1-spindle" --shard "$shard" --seq "$2" --layer $l --dump-selection \
        "$d/sel-L$l-k$k-b$b.npy" --k $k --bsel $b 2>/dev/null || return 1
    done; done
  done
}
usage2() {  # scores flags that are usage errors: exit 2, no output
  local a rc
  for a in "--dump-selection $work/s.npy" "--k 4" "--dump-selection $work/s.npy --k 0" "--positions 1" \
           "--dump-selection $work/s.npy --k 4 --bsel x"; do
    # shellcheck disable=SC2086
    "$bin" scores --indexer "$work/E-spindle" --shard "$shard" --layer 0 $a 2>/dev/null
    rc=$?
    [ $rc = 2 ] || { echo "  scores $a: exit $rc"; return 1; }
  done
  [ ! -e "$work/s.npy" ]
}
check "scores: --dump-selection without --k, --k without it, --k 0, --positions without --out, a bad --bsel: exit 2" usage2
for p in E C; do for s in 0 2; do check "spindle scores --dump-selection ($p, seq $s)" "dump $p $s"; done; done
export SPINDLE_INDEXER_NO_SAFETENSORS=1  # the module's own reader: the numpy-only path
for d in E-spindle E-dsa C-spindle C-qsa; do
  for s in 0 2; do
    check "$d seq $s: numpy reproduces spindle's supports and scores" \
      "python3 '$chk' selections '$work/$d' '$shard' $s '$work/dumps-${d%%-*}-$s'"
  done
done
# The check can fail: a negated key projection (or key-norm weight) changes the supports (or scores).
python3 "$chk" perturb "$work/E-dsa" "$work/E-dsa-bad" model.layers.0.self_attn.indexer.wk.weight
python3 "$chk" perturb "$work/C-qsa" "$work/C-qsa-bad" model.layers.1.self_attn.indexer.k_layernorm.weight
check "a negated dsa wk fails the check" "! python3 '$chk' selections '$work/E-dsa-bad' '$shard' 0 '$work/dumps-E-0' >'$work/bad1.log'"
check "a negated qsa k_layernorm fails the check" "! python3 '$chk' selections '$work/C-qsa-bad' '$shard' 0 '$work/dumps-C-0' >'$work/bad2.log'"
echo "$fails failure(s)"
[ "$fails" = 0 ]
