#!/usr/bin/env bash
# Two-stage supports on SmolLM2 at 2K (CPU): the "plain" indexer of ../2026-12-01-cpu-smollm2-retrieval-mix (X/idx_plain), k 128.
set -u
S=${S:-../build/spindle} M=${M:-../models/smollm2} X=${X:-.}
cd "${OUT:-.}"
$S eval --model $M --ids $X/heldout.ids --ctx 2048 --n-seq 4 --k 128 --bsel 1,64 --union-bsel 64 --indexer $X/idx_plain \
   --threads 2 --json r0.json --md r0.md > r0.log 2>&1
for c in 256 512 1024; do
  $S eval --model $M --ids $X/heldout.ids --ctx 2048 --n-seq 4 --k 128 --bsel 64 --refine $c --union-bsel 64 \
     --indexer $X/idx_plain --threads 2 --json r$c.json --md r$c.md > r$c.log 2>&1
done
echo done > DONE
