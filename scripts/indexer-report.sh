#!/usr/bin/env bash
# indexer-report.sh: the indexer-gap report (docs/results.md, section "Indexer gap").
# SmolLM2-135M, indexers for all 30 layers distilled on corpus/train at 2K tokens,
# evaluated on corpus/heldout next to dense and the oracle of the same run:
#  - the head-collapsed default (d_I 128, d_rope 64, LayerNorm key) at k in {64,128,256,512}, b_sel in {1,64};
#  - its untrained initialisation (the floor);
#  - ablations at k = 256: d_I 32 and 64, and head-expanded (H^I = 3, d_I = 64: 149K vs 148K parameters/layer);
#  - training curves (docs/img/indexer_training.png).
# Everything lands in results/indexer/ (shards, runs, exports, JSON/CSV/MD) and
# the generated tables in docs/results.md between the INDEXER-REPORT markers.
# Sizes (env): CTX=2048 TRAIN_SEQ=48 STEPS=96 ABL_STEPS=48 EVAL_SEQ=2.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin=${BIN:-build/spindle} model=models/smollm2 out=${OUT_DIR:-results/indexer} doc=${DOC:-docs/results.md}
CTX=${CTX:-2048} TRAIN_SEQ=${TRAIN_SEQ:-48} STEPS=${STEPS:-96} ABL_STEPS=${ABL_STEPS:-48} EVAL_SEQ=${EVAL_SEQ:-2}
[ -x "$bin" ] || scripts/build.sh build
[ -d "$model" ] || scripts/get-smollm2.sh
[ -d corpus/train ] || scripts/get-corpus.sh
mkdir -p "$out" docs/img
start=$(date +%s)
stamp() { echo "indexer-report: $* ($(( $(date +%s) - start )) s)"; }

# 1. Teacher shards (resumable).
for part in train:$TRAIN_SEQ heldout:2; do
  name=${part%%:*} n=${part#*:}
  flag=""; [ -d "$out/shards_$name" ] && flag=--resume
  "$bin" teacher --model "$model" --text "corpus/$name" --ctx "$CTX" --max-seq "$n" --seqs-per-shard 8 \
    --out "$out/shards_$name" $flag 2>>"$out/teacher.log"
done
stamp "teacher shards"

# 2. Training runs (resumable) and exports.
train() {  # train NAME STEPS [indexer flags]
  local name=$1 steps=$2; shift 2
  local flag=""; [ -d "$out/run_$name" ] && flag=--resume
  "$bin" train --model "$model" --shards "$out/shards_train" --heldout "$out/shards_heldout" --out "$out/run_$name" \
    --steps "$steps" --warmup $(( steps / 10 )) --lr 3e-3 --eval-every $(( steps / 6 )) --recall-k 256 \
    --ckpt-every 8 $flag "$@" 2>>"$out/train_$name.log"
  [ -d "$out/idx_$name" ] || "$bin" export --run "$out/run_$name" --out "$out/idx_$name" 2>/dev/null
  stamp "trained $name"
}
train main "$STEPS" --d-index 128 --d-rope 64
[ -d "$out/idx_init" ] || "$bin" export --run "$out/run_main" --out "$out/idx_init" --step 0 2>/dev/null
train di32 "$ABL_STEPS" --d-index 32 --d-rope 32
train di64 "$ABL_STEPS" --d-index 64 --d-rope 64
train main_short "$ABL_STEPS" --d-index 128 --d-rope 64
train expanded "$ABL_STEPS" --variant expanded --heads 3 --d-index 64 --d-rope 64

# 3. Evaluation on held-out text, same sequences for every row.
ev() {  # ev NAME INDEXER K BSEL
  [ -s "$out/eval_$1.json" ] || "$bin" eval --model "$model" --text corpus/heldout --ctx "$CTX" --n-seq "$EVAL_SEQ" \
    --k "$3" --bsel "$4" --indexer "$out/idx_$2" --json "$out/eval_$1.json" 2>>"$out/eval.log"
  stamp "evaluated $1"
}
ev main main 64,128,256,512 1,64
ev init init 256 1,64
for a in di32 di64 main_short expanded; do ev "$a" "$a" 256 1,64; done
python3 scripts/plot-train.py "${PLOT:-docs/img/indexer_training.png}" "d_I 128 ($STEPS steps)=$out/run_main" \
  "d_I 128 ($ABL_STEPS)=$out/run_main_short" "d_I 64=$out/run_di64" "d_I 32=$out/run_di32" \
  "expanded H3 d_I 64=$out/run_expanded"
total=$(( $(date +%s) - start ))
python3 scripts/indexer-section.py "$out" "$total" "$CTX" "$TRAIN_SEQ" "$STEPS" "$ABL_STEPS" "$EVAL_SEQ" >"$out/section.md"
python3 scripts/replace-section.py INDEXER-REPORT "$out/section.md" "$doc"
stamp "done; docs/results.md and docs/img/indexer_training.png updated"
