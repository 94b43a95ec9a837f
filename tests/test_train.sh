#!/usr/bin/env bash
# test_train.sh SPINDLE GOLDENS WORK: teacher -> train -> export on a tiny
# golden checkpoint, and the resume promise: a run stopped at a random step,
# or killed with SIGKILL at a random moment, then resumed, ends with the same
# bytes (parameters, AdamW moments, step, PRNG, cursor) as an uninterrupted run.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
g=$goldens/llama_f32_default
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
for i in 1 2 3 4 5 6; do cat "$g/ids.txt"; done >"$work/ids.txt"
"$bin" teacher --model "$g" --ids "$work/ids.txt" --ctx 48 --out "$work/shards" --seqs-per-shard 2 2>/dev/null
"$bin" teacher --model "$g" --ids "$g/ids.txt" --ctx 48 --out "$work/held" 2>/dev/null
steps=${STEPS:-1500}
# The same run settings every time. (A function would put a shell between
# `&` and spindle, and kill -9 would hit the shell: exec replaces it.)
args=(train --model "$g" --shards "$work/shards" --heldout "$work/held" --steps "$steps" --d-index 16 --d-rope 8
      --recall-k 8 --eval-every 50 --ckpt-every 3 --min-pos 4 --query-frac 0.5 --lr 1e-2 --warmup 10 --threads 2)
train() { local run=$1; shift; exec "$bin" "${args[@]}" --out "$run" "$@"; }
(train "$work/full") 2>"$work/full.log"
final=$(printf 'ckpt-%08d.bin' "$steps")
check "uninterrupted run reaches step $steps" "[ -s '$work/full/checkpoints/$final' ]"

# The loss went down: mean KL of the last 10 steps < 0.8 x that of the first 10.
check "training lowers the KL" "awk -F, -v s=$steps 'NR>1 && \$1<=10 {a+=\$3; na++} NR>1 && \$1>s-10 {b+=\$3; nb++} END {exit !(b/nb < 0.8*a/na)}' '$work/full/metrics.csv'"

# Stopped after a random number of steps, then resumed.
r=$((RANDOM % (steps - 1) + 1))
(train "$work/stop" --stop-after "$r") 2>/dev/null
(train "$work/stop" --resume) 2>/dev/null
check "stop at step $r + resume == uninterrupted (bytes)" "cmp -s '$work/full/checkpoints/$final' '$work/stop/checkpoints/$final'"

# SIGKILL at random moments within the run's duration, resuming each time,
# until the run is complete; at least 2 kills must land before the end.
ms() { date +%s%3N; }
t0=$(ms); (train "$work/time") 2>/dev/null; dur=$(( $(ms) - t0 ))
kills=0 tries=0
while [ ! -s "$work/kill/checkpoints/$final" ] && [ "$tries" -lt 20 ]; do
  tries=$((tries + 1))
  if [ -d "$work/kill" ]; then (train "$work/kill" --resume) 2>/dev/null & else (train "$work/kill") 2>/dev/null & fi
  pid=$!
  if [ "$kills" -lt 3 ]; then
    sleep "$(awk -v d="$dur" -v r="$RANDOM" 'BEGIN { printf "%.3f", d * (0.05 + 0.3 * r / 32768) / 1000 }')"
    kill -9 "$pid" 2>/dev/null && [ ! -s "$work/kill/checkpoints/$final" ] && kills=$((kills + 1))
  fi
  wait "$pid" 2>/dev/null
done
echo "killed $kills time(s) mid-run (a run takes $dur ms)"
check "at least 2 SIGKILLs landed mid-run" "[ $kills -ge 2 ]"
check "SIGKILL x$kills + resume == uninterrupted (bytes)" "cmp -s '$work/full/checkpoints/$final' '$work/kill/checkpoints/$final'"
check "resumed logs hold each step once" "[ \$(grep -c '\"layer\":0,' '$work/kill/log.jsonl') = $steps ]"

# Resuming with other settings is refused.
(train "$work/full" --resume --clip 0.5) 2>"$work/err"; rc=$?
check "resume with a different --clip is refused (exit 1)" "[ $rc = 1 ] && grep -q '\"clip\" is 1 in the run but 0.5 now' '$work/err'"
(train "$work/full") 2>"$work/err"; rc=$?
check "a fresh run into a used folder is refused" "[ $rc = 1 ] && grep -q 'not empty' '$work/err'"

# Export, and its safetensors read back.
"$bin" export --run "$work/full" --out "$work/idx" 2>/dev/null
check "export wrote model.safetensors + config.json" "[ -s '$work/idx/model.safetensors' ] && [ -s '$work/idx/config.json' ]"
"$bin" export --run "$work/full" --out "$work/idx" 2>"$work/err"; rc=$?
check "export refuses an existing --out" "[ $rc = 1 ]"
here=$(cd "$(dirname "$0")/.." && pwd)
check "another stack (numpy + safetensors + h5py) recomputes the exported scores" \
  "python3 '$here/scripts/check-export.py' '$bin' '$work/idx' '$work/held/shard-00000.h5' 1"
"$bin" train --model "$g" --shards "$work/shards" --out "$work/exp" --steps 5 --d-index 16 --d-rope 8 \
  --variant expanded --heads 2 --key-norm rms 2>/dev/null
"$bin" export --run "$work/exp" --out "$work/idx_exp" 2>/dev/null
check "... and the expanded variant's" \
  "python3 '$here/scripts/check-export.py' '$bin' '$work/idx_exp' '$work/held/shard-00000.h5' 0"

# The export at inference: k >= T is dense exactly; another checkpoint is refused.
"$bin" logits --model "$g" --ids "$g/ids.txt" --out "$work/dense.npy" 2>/dev/null
"$bin" logits --model "$g" --ids "$g/ids.txt" --out "$work/ix.npy" --indexer "$work/idx" --k 48 2>/dev/null
check "logits --indexer with k >= T == dense (bytes)" "cmp -s '$work/dense.npy' '$work/ix.npy'"
"$bin" logits --model "$g" --ids "$g/ids.txt" --out "$work/ix8.npy" --indexer "$work/idx" --k 8 --bsel 4 2>/dev/null
check "logits --indexer with k = 8 differs from dense" "[ -s '$work/ix8.npy' ] && ! cmp -s '$work/dense.npy' '$work/ix8.npy'"
"$bin" logits --model "$goldens/qwen3_qknorm" --ids "$g/ids.txt" --out "$work/x.npy" --indexer "$work/idx" 2>"$work/err"; rc=$?
check "an indexer of another checkpoint is refused" "[ $rc = 1 ] && grep -q 'another checkpoint' '$work/err' && [ ! -e '$work/x.npy' ]"
"$bin" eval --model "$g" --ids "$work/ids.txt" --ctx 48 --k 8 --bsel 1 --indexer "$work/idx" --json "$work/ev.json" 2>/dev/null
check "eval --indexer adds indexer rows" "grep -q '\"mode\":.*\"indexer\"' '$work/ev.json'"
# An indexer for one of the two layers: the other layer stays dense, and its
# keys count as kept. The rows say so: the indexer row ran sparse at layer 0
# only, the oracle row at both; per-query top-k keeps min(t+1, k) keys in a
# sparse layer, so the indexer row's sparsity is exactly half the oracle's, and
# over its sparse layer alone (sparsity_sparse_layers) the oracle's.
one_args=("${args[@]}")
one_args[8]=2  # the value of --steps
"$bin" "${one_args[@]}" --out "$work/one" --layers 0 2>/dev/null
"$bin" export --run "$work/one" --out "$work/idx_one" 2>/dev/null
"$bin" eval --model "$g" --ids "$work/ids.txt" --ctx 48 --k 8 --bsel 1 --indexer "$work/idx_one" --json "$work/ev1.json" 2>/dev/null
check "eval of a one-layer indexer: sparse at layer 0 only, the dense layer counted whole (sparsity half the oracle's)" \
  "python3 -c \"import json,sys; r={x['mode']: x for x in json.load(open('$work/ev1.json'))}; i, o = r['indexer'], r['oracle']; sys.exit(not (i['sparse_layers'] == [0] and o['sparse_layers'] == [0, 1] and i['provenance']['indexer_layers'] == [0] and abs(i['sparsity'] - o['sparsity'] / 2) < 1e-6 and abs(i['sparsity_sparse_layers'] - o['sparsity']) < 1e-6 and i['mass_recall'] >= 0.5 and abs(2 * i['mass_recall'] - 1 - i['mass_recall_sparse_layers']) < 1e-5))\""

[ "$fails" = 0 ] && echo "all train checks passed"
[ "$fails" = 0 ]
