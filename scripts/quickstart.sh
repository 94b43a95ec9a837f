#!/usr/bin/env bash
# quickstart.sh: the main job end to end on the default real model, SmolLM2-135M-Instruct.
#
#   set-up   dependencies (scripts/setup.sh), the build, the model (scripts/get-smollm2.sh) and the
#            text corpus (scripts/get-corpus.sh); each does nothing when already done
#   1        teacher shards of corpus/train (all 30 layers) and of a little of corpus/heldout
#   2        spindle train: one head-collapsed indexer per layer, distilled from the shards
#   3        spindle export of the trained indexer, and of its untrained initialisation (step 0, the floor)
#   4        scripts/check-export.py: numpy + safetensors + h5py recompute the export's scores
#   5        spindle logits with and without the indexer on a held-out file
#   6        spindle eval on corpus/heldout: dense, the attention-mass oracle, the trained indexer and the
#            floor at the same k and b_sel
#   then     a table (ΔNLL, mass recall, top-1 agreement) and a check: the script fails unless the
#            trained indexer's ΔNLL is below half the floor's
#
# About 5 minutes on 2 CPU cores after set-up (4 min 33 s measured), 1.4 GB of disk. With a GPU (nvidia-smi lists one and nvcc
# is found) it builds build-cuda/ and runs every step with --device cuda; --device cpu forces the CPU.
# Results land in results/quickstart/ (logs in results/quickstart/logs/). A rerun reuses what is
# complete there and continues what was interrupted; --clean starts over.
#
#   scripts/quickstart.sh [--clean] [--device auto|cpu|cuda]
#
# Sizes (env; a rerun with other sizes needs --clean): CTX=1024 TRAIN_SEQ=32 STEPS=256 LR=6e-3 K=128
# BSEL=1 EVAL_SEQ=4.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "quickstart: ERROR: $*" >&2; exit 1; }
trap 'echo "quickstart: ERROR: line $LINENO failed (exit $?): $BASH_COMMAND" >&2' ERR
clean=0 device=auto
while (($#)); do
  case "$1" in
    --clean) clean=1 ;;
    --device) (($# >= 2)) || { echo "quickstart: --device needs auto, cpu or cuda" >&2; exit 2; }
              device=$2; shift ;;
    --device=*) device=${1#--device=} ;;
    -h|--help) usage; exit 0 ;;
    *) echo "quickstart: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$device" in auto|cpu|cuda) ;; *) echo "quickstart: --device $device: expected auto, cpu or cuda" >&2; exit 2 ;; esac

CTX=${CTX:-1024} TRAIN_SEQ=${TRAIN_SEQ:-32} STEPS=${STEPS:-256} LR=${LR:-6e-3} K=${K:-128} BSEL=${BSEL:-1}
EVAL_SEQ=${EVAL_SEQ:-4}
HELD_SEQ=2  # held-out shards: train's held-out recall and check-export.py read them
model=models/smollm2 out=results/quickstart
log=$out/logs

# --- timing ------------------------------------------------------------------------------------------
t_all=$(date +%s)
times=()
step_t0=0
begin() { step_t0=$(date +%s); echo "quickstart: $*" >&2; }
end() {  # end NAME [note]
  local s=$(( $(date +%s) - step_t0 ))
  times+=("$(printf '%-34s %4d s%s' "$1" "$s" "${2:+  ($2)}")")
  echo "quickstart: $1 done in $s s${2:+ ($2)}" >&2
}
# run NAME CMD...: stderr to the terminal and to logs/NAME.log; on failure, says where the log is.
run() {
  local name=$1; shift
  if ! { "$@" 2>&1 1>&3 | tee -a "$log/$name.log" >&2; } 3>&1; then
    die "$name failed (exit status above; log: $log/$name.log; command: $*)"
  fi
}

# --- set-up ------------------------------------------------------------------------------------------
begin "set-up: dependencies, build, model, corpus"
t_setup=$(date +%s)
exec 4>&1 1>&2  # set-up chatter goes to stderr: stdout carries only the result table
scripts/setup.sh
if [ "$device" = auto ]; then
  device=cpu
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
      device=cuda
    else
      echo "quickstart: a GPU is present but nvcc is not (PATH, /usr/local/cuda/bin): running on the CPU" >&2
    fi
  fi
fi
if [ "$device" = cuda ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
  scripts/build.sh build-cuda -DSPINDLE_CUDA=ON || die "the CUDA build failed (build-cuda/); --device cpu runs on the CPU"
  bin=build-cuda/spindle
  nvidia-smi -L >/dev/null 2>&1 || die "--device cuda: nvidia-smi lists no GPU"
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | awk 'NR == 1')
  where="GPU ($gpu), --device cuda"
else
  scripts/build.sh build
  bin=build/spindle
  where="CPU, $(nproc) cores"
fi
scripts/get-smollm2.sh
# corpus/ appears only when complete (get-corpus.sh builds corpus.tmp/ and renames it).
[ -d corpus/train ] && [ -d corpus/heldout ] || scripts/get-corpus.sh
exec 1>&4 4>&-
dev=(--device "$device")
end "set-up"
setup_s=$(( $(date +%s) - t_setup ))
echo "quickstart: running on the $where; binary $bin; results in $out/" >&2

# --- the results folder: reused when its settings match, else refused (use --clean) -------------------
settings="model=$model ctx=$CTX train_seq=$TRAIN_SEQ held_seq=$HELD_SEQ steps=$STEPS lr=$LR k=$K bsel=$BSEL eval_seq=$EVAL_SEQ"
if ((clean)) && [ -e "$out" ]; then
  echo "quickstart: --clean: removing $out" >&2
  rm -rf -- "$out"
fi
if [ -f "$out/settings.txt" ]; then
  [ "$(cat "$out/settings.txt")" = "$settings" ] ||
    die "$out holds results of other settings ($(cat "$out/settings.txt")); rerun with --clean to start over"
  echo "quickstart: reusing what is complete in $out (--clean starts over)" >&2
elif [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then
  die "$out exists but was not made by this script (no settings.txt); move it away or rerun with --clean"
fi
mkdir -p "$log"
echo "$settings" >"$out/settings.txt"

# Disk: the shards hold, per token and layer, x (d_model bfloat16 values) and the per-head float32 lse,
# gzip-compressed to ~75% (862 B per token per layer on SmolLM2: docs/formats.md); 1000 B leaves a margin.
need_mb=$(( (CTX * (TRAIN_SEQ + HELD_SEQ) * 30 * 1000 + 500000000) / 1000000 ))
avail_mb=$(( $(df -Pk "$out" | awk 'NR==2 {print $4}') / 1024 ))
[ -d "$out/shards_train" ] || ((avail_mb >= need_mb)) ||
  die "$out: $avail_mb MB free, the quickstart needs about $need_mb MB (mostly teacher shards)"

# --- 1. teacher shards -------------------------------------------------------------------------------
begin "1/6 teacher: $TRAIN_SEQ sequences of $CTX tokens of corpus/train + $HELD_SEQ of corpus/heldout, all layers"
for part in train:$TRAIN_SEQ heldout:$HELD_SEQ; do
  name=${part%%:*} n=${part#*:}
  resume=(); [ -d "$out/shards_$name" ] && resume=(--resume)
  run teacher "$bin" teacher --model "$model" --text "corpus/$name" --ctx "$CTX" --max-seq "$n" \
    --out "$out/shards_$name" "${resume[@]}" "${dev[@]}"
done
end "1 teacher shards" "$(du -sh "$out/shards_train" | cut -f1) in $out/shards_train"

# --- 2. train ----------------------------------------------------------------------------------------
begin "2/6 train: $STEPS steps (one teacher sequence each), lr $LR, every layer in the shards"
if [ -f "$out/run/config.json" ]; then  # an interrupted run: its config.json holds every setting
  run train "$bin" train --out "$out/run" --resume
else
  run train "$bin" train --model "$model" --shards "$out/shards_train" --heldout "$out/shards_heldout" \
    --out "$out/run" --steps "$STEPS" --warmup $(( STEPS / 10 )) --lr "$LR" --eval-every $(( STEPS / 4 )) \
    --recall-k "$K" --ckpt-every $(( STEPS / 4 )) "${dev[@]}"
fi
end "2 train" "$out/run"

# --- 3. export ---------------------------------------------------------------------------------------
begin "3/6 export: the trained indexer and the untrained floor (step 0)"
[ -d "$out/indexer" ] || run export "$bin" export --run "$out/run" --out "$out/indexer" --k "$K" --bsel "$BSEL"
[ -d "$out/indexer_step0" ] ||
  run export "$bin" export --run "$out/run" --out "$out/indexer_step0" --step 0 --k "$K" --bsel "$BSEL"
end "3 export" "$out/indexer"

# --- 4. check the export with another stack ----------------------------------------------------------
begin "4/6 check-export.py: numpy recomputes the exported scores (first and last layer)"
shard=$(ls "$out"/shards_heldout/*.h5 | awk 'NR == 1')
layers=$(python3 -c 'import json,sys; l=json.load(open(sys.argv[1]))["layers"]; print(l[0], l[-1])' "$out/indexer/config.json")
for l in $layers; do run check-export python3 scripts/check-export.py "$bin" "$out/indexer" "$shard" "$l"; done
end "4 check-export"

# --- 5. logits with the indexer (sparse prefill) -----------------------------------------------------
begin "5/6 logits: one held-out file, dense and with the indexer (k $K, b_sel $BSEL)"
if [ ! -f "$out/logits_indexer.npy" ]; then
  text=$(find corpus/heldout -type f -size +16k -name '*.txt' | LC_ALL=C sort | awk 'NR == 1')
  [ -n "$text" ] || die "corpus/heldout: no file of 16 KB or more to run logits on"
  run logits "$bin" tokenize --model "$model" --text "$text" --out "$out/heldout_file.ids"
  # The first CTX ids (awk reads to the end: no SIGPIPE for set -o pipefail to trip on).
  tr ',' '\n' <"$out/heldout_file.ids" | awk -v n="$CTX" 'NF && c < n { print; c++ }' | paste -sd, >"$out/heldout.ids"
  echo "$text" >"$out/heldout.source"
  run logits "$bin" logits --model "$model" --ids "$out/heldout.ids" --out "$out/logits_dense.npy" "${dev[@]}"
  run logits "$bin" logits --model "$model" --ids "$out/heldout.ids" --out "$out/logits_indexer.npy" \
    --indexer "$out/indexer" --k "$K" --bsel "$BSEL" "${dev[@]}"
fi
end "5 logits" "$(cat "$out/heldout.source")"

# --- 6. eval -----------------------------------------------------------------------------------------
begin "6/6 eval: $EVAL_SEQ held-out sequences of $CTX tokens; dense, oracle, trained indexer, floor"
for which in indexer indexer_step0; do
  [ -s "$out/eval_$which.json" ] ||
    run eval "$bin" eval --model "$model" --text corpus/heldout --ctx "$CTX" --n-seq "$EVAL_SEQ" --k "$K" \
      --bsel "$BSEL" --indexer "$out/$which" --json "$out/eval_$which.json" "${dev[@]}"
done
end "6 eval" "$out/eval_indexer.md, $out/eval_indexer_step0.md"

# --- the table and the check -------------------------------------------------------------------------
main_s=$(( $(date +%s) - t_all - setup_s ))
echo
echo "quickstart: SmolLM2-135M-Instruct, indexers for every layer, on the $where"
set +e
python3 scripts/quickstart-table.py --eval "$out/eval_indexer.json" --floor "$out/eval_indexer_step0.json" \
  --k "$K" --bsel "$BSEL" --indexer "$out/indexer" --logits "$out/logits_dense.npy" "$out/logits_indexer.npy" \
  --md "$out/table.md"
check=$?
set -e
echo
echo "time per step:"
printf '  %s\n' "${times[@]}"
printf '  %-34s %4d s\n' "main job (steps 1-6)" "$main_s" "total" "$(( $(date +%s) - t_all ))"
printf '%s\n' "${times[@]}" >"$out/times.txt"
((check == 0)) || die "the trained indexer does not beat half the untrained floor (table above; logs in $log)"
