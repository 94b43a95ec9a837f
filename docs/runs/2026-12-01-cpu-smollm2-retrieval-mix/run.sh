#!/usr/bin/env bash
set -u
S=build/spindle M=models/smollm2
for r in plain:0 mix25:0.25; do
  name=${r%%:*} mix=${r##*:}
  extra=(); [ "$mix" != 0 ] && extra=(--retrieval-mix "$mix")
  $S train --model $M --ids train.ids --ctx 2048 --steps 150 --warmup 15 --lr 6e-3 --ckpt-every 50 --eval-every 1000 \
     --heldout-ids heldout.ids --threads 2 "${extra[@]}" --out run_$name > train_$name.log 2>&1
  $S export --run run_$name --out idx_$name >> train_$name.log 2>&1
done
for name in plain mix25; do
  $S eval --model $M --ids heldout.ids --ctx 2048 --n-seq 4 --k 128 --bsel 1,64 --indexer idx_$name \
     --tasks passkey,multikey --depths 0.1,0.5,0.9 --task-n 4 --threads 2 --json eval_$name.json > eval_$name.log 2>&1
done
echo done > DONE
