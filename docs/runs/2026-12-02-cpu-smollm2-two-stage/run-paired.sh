#!/usr/bin/env bash
# Two-stage supports with the per-query row in the same call: the realization gap paired per position.
set -u
S=${S:-../build/spindle} M=${M:-../models/smollm2} X=${X:-.}
cd "${OUT:-.}"
for c in 1024 512; do
  $S eval --model $M --ids $X/heldout.ids --ctx 2048 --n-seq 4 --k 128 --bsel 1,64 --refine $c --indexer $X/idx_plain \
     --threads 2 --json p2k_$c.json --md p2k_$c.md > p2k_$c.log 2>&1
  $S eval --model $M --ids $X/heldout.ids --ctx 4096 --n-seq 2 --k 128 --bsel 1,64 --refine $c --indexer $X/idx_plain \
     --threads 2 --json p4k_$c.json --md p4k_$c.md > p4k_$c.log 2>&1
done
echo done > DONE
