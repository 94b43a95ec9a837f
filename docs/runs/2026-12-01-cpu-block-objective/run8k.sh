#!/usr/bin/env bash
set -u
cd /work/wt/i18
B=/tmp/i18m/spindle R=results/blockobj
while ! grep -q '^done' $R/times.txt; do sleep 5; done
for name in query block mix; do
  t0=$(date +%s)
  $B eval --model models/smollm2 --text corpus/heldout --ctx 8192 --n-seq 1 --k 256 --bsel 1,64 --indexer $R/idx_$name \
    --threads 2 --json $R/eval_${name}_8192.json > $R/eval_${name}_8192.log 2>&1
  echo "eval $name 8192: rc $? $(( $(date +%s) - t0 )) s" >> $R/times.txt
done
echo done8k >> $R/times.txt
