#!/usr/bin/env bash
# test_train_synth.sh SPINDLE GOLDENS WORK: online training on a synthetic
# model (train --synthetic tiny: random weights built in memory, no folder) with
# --random-ids (token windows drawn from --seed), and --batch, on the CPU.
# - a synthetic run records its model ({name, seed}) and its random stream in
#   config.json, so `train --out RUN --resume` alone rebuilds both: stopped
#   after a random step (--stop-after) or killed with SIGKILL once a checkpoint
#   exists, the resumed run ends with the same checkpoint bytes as an
#   uninterrupted one; --random-ids gives other windows with another --seed.
#   (Resumes name the run's --threads: the CPU loss sums its gradients over
#   thread chunks, so another thread count may change the last bits.)
# - --batch 2: stop + resume == uninterrupted (bytes), the data cursor moves 2
#   sequences per step (the tokens in log and checkpoint); the step takes the
#   mean of the sequences' gradients: on a stream whose windows are all the same
#   with every position sampled (--query-frac 1) a --batch 2 run logs the KL and
#   gradient norm of the --batch 1 run at every step and layer (a sum would
#   double the norm); control: on distinct windows they differ. --batch 1 and no
#   --batch write the same bytes.
# - refused: --synthetic with --model / --shards / --text / --heldout, an unknown
#   name, --random-ids with --ids, --batch 0, a resume naming another
#   --synthetic, --batch or --ids (exit 2); a model too large for the CPU twin
#   (exit 1, no run folder).
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
cd "$work" || exit 1
common=(train --synthetic tiny --ctx 64 --min-pos 4 --warmup 2 --threads 2 --ckpt-every 3)
steps=12
final=$(printf 'ckpt-%08d.bin' $steps)

# --- synthetic + random ids: run, stop/resume, SIGKILL/resume.
"$bin" "${common[@]}" --random-ids --steps $steps --out full 2>full.log
check "synthetic tiny with --random-ids reaches step $steps" "[ -s full/checkpoints/$final ]"
check "config.json records the synthetic model and the random stream (no model folder)" \
  "grep -q '\"synthetic\":' full/config.json && grep -q '\"name\":[[:space:]]*\"tiny\"' full/config.json &&
   grep -q '\"source\":[[:space:]]*\"random\"' full/config.json && grep -q '\"model\":[[:space:]]*\"\"' full/config.json &&
   grep -q '\"batch\":[[:space:]]*1' full/config.json"
check "the online note names the random stream and the synthetic model" \
  "grep -q 'online: random token ids (seed 1, vocabulary 1024), windows of 64 tokens; synthetic model tiny' full.log"
r=$((RANDOM % (steps - 1) + 1))
"$bin" "${common[@]}" --random-ids --steps $steps --out stop --stop-after $r 2>/dev/null
"$bin" train --out stop --resume --threads 2 2>/dev/null
check "stop after step $r + \`train --out RUN --resume\` alone == uninterrupted (checkpoint bytes)" \
  "cmp -s full/checkpoints/$final stop/checkpoints/$final"
"$bin" "${common[@]}" --random-ids --steps $steps --seed 2 --out seed2 2>/dev/null
check "another --seed: other weights" "! cmp -s full/checkpoints/$final seed2/checkpoints/$final"
# SIGKILL: a slower run (ctx 1024, one thread), killed once its step-3 checkpoint exists.
slow=(train --synthetic tiny --ctx 1024 --min-pos 4 --warmup 2 --threads 1 --ckpt-every 3 --random-ids --steps 60)
"$bin" "${slow[@]}" --out slowfull 2>/dev/null
"$bin" "${slow[@]}" --out killed 2>/dev/null &
pid=$!
for _ in $(seq 1 600); do [ -e killed/checkpoints/ckpt-00000003.bin ] && break; sleep 0.01; done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
killed_early=no
[ -e killed/checkpoints/ckpt-00000060.bin ] || killed_early=yes
"$bin" train --out killed --resume --threads 1 2>killed.log
check "SIGKILL after the step-3 checkpoint (before the end: $killed_early) + resume == uninterrupted (bytes)" \
  "[ $killed_early = yes ] && grep -q 'resuming killed at step' killed.log && cmp -s slowfull/checkpoints/ckpt-00000060.bin killed/checkpoints/ckpt-00000060.bin"

# --- --batch.
"$bin" "${common[@]}" --random-ids --steps $steps --batch 2 --out b2 2>b2.log
"$bin" "${common[@]}" --random-ids --steps $steps --batch 2 --out b2stop --stop-after $r 2>/dev/null
"$bin" train --out b2stop --resume --threads 2 2>/dev/null
check "--batch 2: stop after step $r + resume == uninterrupted (checkpoint bytes)" \
  "[ -s b2/checkpoints/$final ] && cmp -s b2/checkpoints/$final b2stop/checkpoints/$final"
check "--batch 2: config.json holds batch 2, the log says 2 sequence(s) per step" \
  "grep -q '\"batch\":[[:space:]]*2' b2/config.json && grep -q '2 sequence(s) per step' b2.log"
# The checkpoint's data cursor and tokens (int64 slots 4 and 5 of the header: bytes 32 and 40): 2 sequences of 64 per step.
cursor=$(od -An -tu8 -j32 -N8 b2/checkpoints/$final | tr -d ' ') tokens=$(od -An -tu8 -j40 -N8 b2/checkpoints/$final | tr -d ' ')
check "--batch 2: the checkpoint's data cursor is $((2 * steps)) sequences, $((2 * steps * 64)) tokens (got $cursor, $tokens)" \
  "[ '$cursor' = $((2 * steps)) ] && [ '$tokens' = $((2 * steps * 64)) ]"
check "--batch 2 trains other weights than --batch 1 on the same stream" "! cmp -s full/checkpoints/$final b2/checkpoints/$final"
"$bin" "${common[@]}" --random-ids --steps $steps --batch 1 --out b1 2>/dev/null
check "--batch 1 == no --batch (checkpoint bytes)" "cmp -s full/checkpoints/$final b1/checkpoints/$final"
# The mean: 4 copies of one window (ids < 1024), every position sampled.
awk 'BEGIN {for (r = 0; r < 4; r++) for (i = 0; i < 64; i++) printf "%d ", (i * 37 + 11) % 1024; print ""}' >rep.txt
awk 'BEGIN {for (i = 0; i < 256; i++) printf "%d ", (i * i * 7 + 3 * i + 5) % 1024; print ""}' >distinct.txt
mean=(train --synthetic tiny --ctx 64 --min-pos 4 --warmup 1 --threads 2 --query-frac 1 --steps 6)
for s in rep distinct; do
  "$bin" "${mean[@]}" --ids $s.txt --out ${s}1 2>/dev/null
  "$bin" "${mean[@]}" --ids $s.txt --batch 2 --out ${s}2 2>/dev/null
done
# agree A B: every row's kl and grad_norm (metrics.csv columns 3, 5) within a relative 1e-4.
agree() {
  paste -d, <(cut -d, -f3,5 "$1") <(cut -d, -f3,5 "$2") | awk -F, 'NR > 1 {n++; for (c = 1; c <= 2; c++) {
    a = $c; b = $(c + 2); d = a - b; if (d < 0) d = -d; s = a < 0 ? -a : a; if (d > 1e-4 * s + 1e-12) bad++}}
    END {exit !(n > 0 && bad == 0)}'
}
check "--batch 2 of one window twice == --batch 1 (KL and grad norm at every step and layer: the mean)" \
  "[ \$(wc -l <rep2/metrics.csv) = 25 ] && agree rep1/metrics.csv rep2/metrics.csv"
check "control: on distinct windows --batch 2 logs another KL / grad norm than --batch 1" \
  "! agree distinct1/metrics.csv distinct2/metrics.csv"
# The weights: ‖dw‖/‖w‖ after export (AdamW's first steps move a weight by about ±lr whatever its gradient's
# size, so an element that rounding moves across zero differs by 2·lr: the norm is the rounding-sized measure).
floats() { local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' '); od -An -v -tf4 -w4 -j $((8 + n)) "$1"; }
l2rel() {
  paste <(floats "$1") <(floats "$2") | awk '{d = $1 - $2; dd += d * d; aa += $1 * $1; n++}
    END {if (n == 0 || aa == 0) print "nan"; else printf "%.3g\n", sqrt(dd / aa)}'
}
for r in rep1 rep2 distinct1 distinct2; do "$bin" export --run $r --out x_$r 2>/dev/null; done
rel=$(l2rel x_rep1/model.safetensors x_rep2/model.safetensors) ctl=$(l2rel x_distinct1/model.safetensors x_distinct2/model.safetensors)
echo "--batch 2 of one window twice vs --batch 1: ‖dw‖/‖w‖ = $rel (distinct windows: $ctl)"
check "--batch 2 of one window twice: the weights of --batch 1 within rounding ($rel <= 1e-3; distinct windows $ctl > 1e-2)" \
  "awk -v r='$rel' -v c='$ctl' 'BEGIN {exit !(r != \"nan\" && r + 0 <= 1e-3 && c + 0 > 1e-2)}'"

# --- refusals.
expect() {  # expect RC PATTERN ARGS...: exit RC with PATTERN on stderr, no folder bad/
  local want=$1 pat=$2
  shift 2
  rm -rf bad
  "$bin" "$@" 2>err
  local rc=$?
  check "exit $want: $pat" "[ $rc = $want ] && grep -q -- \"$pat\" err && [ ! -e bad ]"
}
g=$goldens/llama_f32_default
expect 2 "it replaces --model" train --synthetic tiny --model "$g" --random-ids --ctx 64 --out bad
expect 2 "trains online only" train --synthetic tiny --shards full --out bad
expect 2 "no tokenizer: give --ids or --random-ids" train --synthetic tiny --text rep.txt --ctx 64 --out bad
expect 2 "held-out recall from --heldout-ids only" train --synthetic tiny --random-ids --ctx 64 --heldout full --out bad
expect 2 "--synthetic must be one of" train --synthetic nope --random-ids --ctx 64 --out bad
expect 2 "--random-ids replaces --ids" train --synthetic tiny --random-ids --ids rep.txt --ctx 64 --out bad
expect 2 "--batch must be an integer" train --synthetic tiny --random-ids --ctx 64 --batch 0 --out bad
expect 2 "needs --ctx" train --synthetic tiny --random-ids --out bad
expect 1 "the CPU twin builds dense models of at most" train --synthetic qwen3-8b --random-ids --ctx 64 --out bad
"$bin" train --out full --resume --synthetic smollm2-135m 2>err; rc=$?
check "resume naming another --synthetic: exit 2" "[ $rc = 2 ] && grep -q -- '--synthetic is tiny in the run but smollm2-135m' err"
"$bin" train --out full --resume --batch 3 2>err; rc=$?
check "resume with another --batch: exit 2" "[ $rc = 2 ] && grep -q -- '--batch is 1 in the run but 3' err"
"$bin" train --out full --resume --ids rep.txt 2>err; rc=$?
check "resume of a --random-ids run with --ids: exit 2" "[ $rc = 2 ] && grep -q -- '--ids is not set (the run trains on --random-ids)' err"
"$bin" train --out rep1 --resume --random-ids 2>err; rc=$?
check "resume of an --ids run with --random-ids: exit 2" "[ $rc = 2 ] && grep -q -- '--random-ids is not set' err"
"$bin" train --out full --resume --synthetic tiny --random-ids 2>err; rc=$?
check "resume of a complete run with agreeing --synthetic/--random-ids: exit 0" "[ $rc = 0 ] && grep -q 'already complete' err"
check "no *.tmp left" "[ -z \"\$(find . -name '*.tmp')\" ]"
echo "$fails failure(s)"
[ "$fails" = 0 ]
