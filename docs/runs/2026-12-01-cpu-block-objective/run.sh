#!/usr/bin/env bash
# Trains query / block / mix indexers on the same shards and seed, then evaluates each at 2K and 4K.
set -u
cd /work/wt/i18
B=/tmp/i18m/spindle R=results/blockobj
common=(--model models/smollm2 --shards $R/shards_train --heldout-text corpus/heldout --steps 288 --warmup 28
        --lr 3e-3 --eval-every 48 --recall-k 256 --ckpt-every 48 --d-index 128 --d-rope 64 --seed 1 --threads 1)
one() {
  local name=$1; shift
  local t0=$(date +%s)
  $B train "${common[@]}" --out $R/run_$name "$@" > $R/train_$name.log 2>&1
  echo "train $name: rc $? $(( $(date +%s) - t0 )) s" >> $R/times.txt
  $B export --run $R/run_$name --out $R/idx_$name >> $R/train_$name.log 2>&1
}
one query & one block --objective block --objective-bsel 64 & one mix --objective mix --objective-bsel 64 --block-weight 1 &
wait
for name in query block mix; do
  for ctx in 2048 4096; do
    n=$([ $ctx = 2048 ] && echo 4 || echo 2)
    t0=$(date +%s)
    $B eval --model models/smollm2 --text corpus/heldout --ctx $ctx --n-seq $n --k 256 --bsel 1,64 --indexer $R/idx_$name \
      --threads 2 --json $R/eval_${name}_$ctx.json > $R/eval_${name}_$ctx.log 2>&1
    echo "eval $name $ctx: rc $? $(( $(date +%s) - t0 )) s" >> $R/times.txt
  done
done
echo done >> $R/times.txt
