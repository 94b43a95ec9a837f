#!/usr/bin/env bash
set -u
S=${S:-../build/spindle} M=${M:-../models/smollm2} X=${X:-.}
cd "${OUT:-.}"
while [ ! -f DONE ]; do sleep 5; done   # after run-2k.sh
$S eval --model $M --ids $X/heldout.ids --ctx 4096 --n-seq 2 --k 128 --bsel 1,64 --union-bsel 64 --indexer $X/idx_plain \
   --threads 2 --json q0.json --md q0.md > q0.log 2>&1
for c in 512 1024; do
  $S eval --model $M --ids $X/heldout.ids --ctx 4096 --n-seq 2 --k 128 --bsel 64 --refine $c --union-bsel 64 \
     --indexer $X/idx_plain --threads 2 --json q$c.json --md q$c.md > q$c.log 2>&1
done
echo done > DONE4K
