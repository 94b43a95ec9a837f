#!/usr/bin/env bash
# test_train_online.sh SPINDLE GOLDENS WORK: online training (no shards: the
# frozen backbone runs over each step's window and a tap hands the step x, lse
# and the teacher q/k) on tiny golden checkpoints, on the CPU.
# - online vs shard training on the same windows, seed and settings: the
#   shards hold x in fp32 (teacher --x-dtype fp32), so both steps see the same
#   fp32 x and lse, and the teacher q/k of the tap come from the same
#   projection code the shard path calls on the stored x (forward_layer_qk).
#   The exported weights must agree to a max |difference| / max |weight| of at
#   most 1e-5 (a few fp32 roundings; the printed value is what was measured,
#   0 when the bytes are identical). Control: shards with bf16 x (the default)
#   must give measurably different weights (the comparison can fail).
# - resume: an online run stopped after a random step (--stop-after) and
#   continued with `train --out RUN --resume` alone ends with the same
#   checkpoint bytes as an uninterrupted run; a resume naming another --ctx,
#   --ids or --shards is refused (exit 2).
# - held-out recall computed online (--heldout-ids / --heldout-text: window 0
#   of that stream, one tapped forward) equals the recall on fp32-x held-out
#   shards of the same ids.
# - bad usage: --shards with --text/--ids, --ctx with --shards, online without
#   --ctx, --text with --ids, --backbone-precision off the GPU: exit 2 with a
#   message; a missing text / ids file:
#   exit 1 naming it, and no run folder is left.
# - hybrid: on qwen3_next_moe_f32 (Gated DeltaNet, full, Gated DeltaNet, full)
#   online training trains layers 1 and 3 only, lowers their KL, equals shard
#   training there too, and --layers naming a linear layer is exit 2.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
# floats FILE: a safetensors file's tensor data, one float per line (the JSON
# header's length is the file's first 8 bytes, little-endian).
floats() { local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' '); od -An -v -tf4 -w4 -j $((8 + n)) "$1"; }
# maxrel A B: max |a − b| / max |a| over the two exports' weights (same names, same order).
maxrel() {
  paste <(floats "$1") <(floats "$2") | awk '{d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1;
    if (d > md) md = d; if (a > ma) ma = a; n++} END {if (n == 0 || ma == 0) print "nan"; else printf "%.3g\n", md / ma}'
}

# --- llama_f32_default: 6 windows of 48 tokens; 40 steps wrap the windows more than 6 times.
g=$goldens/llama_f32_default
w=$work/llama
mkdir -p "$w"
for i in 1 2 3 4 5 6; do cat "$g/ids.txt"; done >"$w/ids.txt"
"$bin" teacher --model "$g" --ids "$w/ids.txt" --ctx 48 --out "$w/sh32" --seqs-per-shard 2 --x-dtype fp32 2>/dev/null
"$bin" teacher --model "$g" --ids "$w/ids.txt" --ctx 48 --out "$w/sh16" --seqs-per-shard 2 2>/dev/null
"$bin" teacher --model "$g" --ids "$g/ids.txt" --ctx 48 --out "$w/held" 2>/dev/null
"$bin" teacher --model "$g" --ids "$g/ids.txt" --ctx 48 --out "$w/held32" --x-dtype fp32 2>/dev/null
steps=40
common=(--model "$g" --steps $steps --d-index 16 --d-rope 8 --recall-k 8 --eval-every 20 --ckpt-every 3 --min-pos 4
        --query-frac 0.5 --lr 1e-2 --warmup 10 --threads 2)
online=(train "${common[@]}" --ids "$w/ids.txt" --ctx 48 --heldout "$w/held")
"$bin" "${online[@]}" --out "$w/online" 2>"$w/online.log"
"$bin" train "${common[@]}" --shards "$w/sh32" --heldout "$w/held" --out "$w/shard32" 2>/dev/null
"$bin" train "${common[@]}" --shards "$w/sh16" --heldout "$w/held" --out "$w/shard16" 2>/dev/null
final=$(printf 'ckpt-%08d.bin' $steps)
check "online run reaches step $steps" "[ -s '$w/online/checkpoints/$final' ]"
for r in online shard32 shard16; do "$bin" export --run "$w/$r" --out "$w/x_$r" 2>/dev/null; done
rel32=$(maxrel "$w/x_shard32/model.safetensors" "$w/x_online/model.safetensors")
rel16=$(maxrel "$w/x_shard16/model.safetensors" "$w/x_online/model.safetensors")
same=no
cmp -s "$w/x_shard32/model.safetensors" "$w/x_online/model.safetensors" && same=yes
echo "online vs shard training (x fp32): max |dw| / max |w| = $rel32 (bytes identical: $same); vs shards with bf16 x: $rel16"
check "online == shard training with fp32 x (max rel. difference $rel32 <= 1e-5)" \
  "awk -v r='$rel32' 'BEGIN {exit !(r + 0 <= 1e-5 && r != \"nan\")}'"
check "control: shards with bf16 x train to different weights ($rel16 > 1e-7)" \
  "awk -v r='$rel16' 'BEGIN {exit !(r + 0 > 1e-7 && r != \"nan\")}'"
check "online training lowers the KL" "awk -F, -v s=$steps 'NR>1 && \$1<=5 {a+=\$3; na++} NR>1 && \$1>s-5 {b+=\$3; nb++} END {exit !(b/nb < 0.8*a/na)}' '$w/online/metrics.csv'"
check "online: progress lines with tokens/s, the online note, held-out recall per layer" \
  "grep -q '^spindle train: progress step 1/$steps (.*) elapsed .* s eta .* s; loss .*, lr .*, .* tokens/s' '$w/online.log' &&
   grep -q '^spindle train: online: 6 window(s) of 48 tokens from ids:' '$w/online.log' &&
   [ \$(grep -c '^spindle train: layer [01]: final KL [0-9.]* (mean of the last 10 steps), held-out recall@8 [0-9.]*\$' '$w/online.log') = 2 ] &&
   grep -q '\"tokens_per_s\":' '$w/online/log.jsonl'"
check "config.json records the online source (ids path, ctx, windows, cursor) and no shards" \
  "grep -q '\"shards\":[[:space:]]*\"\"' '$w/online/config.json' && grep -q '\"source\":[[:space:]]*\"ids\"' '$w/online/config.json' &&
   grep -q '\"windows\":[[:space:]]*6' '$w/online/config.json' && grep -q '\"cursor\":' '$w/online/config.json' &&
   grep -q \"\\\"$(cd "$w" && pwd -P)/ids.txt\\\"\" '$w/online/config.json'"

# Held-out recall computed online (--heldout-ids: window 0 of the stream) == from fp32-x held-out shards:
# the same KL and recall columns (tokens/s aside), in online and in shard training.
"$bin" train "${common[@]}" --ids "$w/ids.txt" --ctx 48 --heldout-ids "$g/ids.txt" --out "$w/hon" 2>"$w/hon.log"
"$bin" train "${common[@]}" --ids "$w/ids.txt" --ctx 48 --heldout "$w/held32" --out "$w/hsh" 2>/dev/null
"$bin" train "${common[@]}" --shards "$w/sh32" --heldout-ids "$g/ids.txt" --out "$w/shon" 2>/dev/null
cols() { cut -d, -f1-5,7 "$1"; }
check "online held-out recall (--heldout-ids) == recall on fp32-x held-out shards, measured at steps 20 and 40" \
  "[ \"\$(cols '$w/hon/metrics.csv')\" = \"\$(cols '$w/hsh/metrics.csv')\" ] && [ \$(awk -F, 'NR > 1 && \$7 != \"\"' '$w/hon/metrics.csv' | wc -l) = 4 ] &&
   grep -q 'held-out recall on window 0 of ids:' '$w/hon.log'"
check "shard training with --heldout-ids == online training with it (same columns)" \
  "[ \"\$(cols '$w/hon/metrics.csv')\" = \"\$(cols '$w/shon/metrics.csv')\" ]"
check "config.json records heldout_online and no held-out shards" \
  "grep -q '\"heldout_online\":' '$w/hon/config.json' && grep -q '\"heldout\":[[:space:]]*\"\"' '$w/hon/config.json'"
"$bin" train --out "$w/hon" --resume --heldout-ids "$w/ids.txt" 2>"$w/err"; rc=$?
check "resume with another --heldout-ids is refused (exit 2)" "[ $rc = 2 ] && grep -q -- '--heldout-ids is .* in the run but' '$w/err'"
"$bin" train "${common[@]}" --ids "$w/ids.txt" --ctx 48 --heldout "$w/held" --heldout-ids "$g/ids.txt" --out "$w/bad" 2>"$w/err"; rc=$?
check "--heldout with --heldout-ids: exit 2" "[ $rc = 2 ] && grep -q -- 'one of --heldout (shards), --heldout-text or --heldout-ids' '$w/err'"
"$bin" train "${common[@]}" --ids "$w/ids.txt" --ctx 48 --heldout-text "$w/missing.txt" --out "$w/bad" 2>"$w/err"; rc=$?
check "a missing --heldout-text: exit 1 naming it, no run folder" "[ $rc = 1 ] && grep -q -- '$w/missing.txt: cannot read the held-out text' '$w/err' && [ ! -e '$w/bad' ]"
"$bin" train "${common[@]}" --ids "$w/ids.txt" --ctx 96 --heldout-ids "$g/ids.txt" --out "$w/bad" 2>"$w/err"; rc=$?
check "a held-out stream shorter than one window: exit 1 naming it, no run folder" \
  "[ $rc = 1 ] && grep -q -- '$g/ids.txt: 48 tokens, fewer than one window of --ctx 96' '$w/err' && [ ! -e '$w/bad' ]"

# Resume: stop after a random step, continue from config.json alone.
r=$((RANDOM % (steps - 1) + 1))
"$bin" "${online[@]}" --out "$w/stop" --stop-after "$r" 2>/dev/null
"$bin" train --out "$w/stop" --resume 2>"$w/resume.log"
check "online: stop after step $r + \`train --out RUN --resume\` alone == uninterrupted (checkpoint bytes)" \
  "cmp -s '$w/online/checkpoints/$final' '$w/stop/checkpoints/$final'"
check "resumed online logs hold each step once" "[ \$(grep -c '\"layer\":0,' '$w/stop/log.jsonl') = $steps ]"
"$bin" train --out "$w/online" --resume --ctx 24 2>"$w/err"; rc=$?
check "resume with another --ctx is refused (exit 2, both values)" "[ $rc = 2 ] && grep -q -- '--ctx is 48 in the run but 24' '$w/err'"
"$bin" train --out "$w/online" --resume --ids "$g/ids.txt" 2>"$w/err"; rc=$?
check "resume with another --ids is refused (exit 2)" "[ $rc = 2 ] && grep -q -- '--ids is .*/ids.txt in the run but' '$w/err'"
"$bin" train --out "$w/online" --resume --shards "$w/sh32" 2>"$w/err"; rc=$?
check "resume of an online run with --shards is refused (exit 2)" "[ $rc = 2 ] && grep -q -- '--shards is not set (the run trains online)' '$w/err'"
"$bin" train --out "$w/online" --resume --ids "$w/ids.txt" --ctx 48 2>"$w/err"; rc=$?
check "resume of a complete online run with agreeing --ids/--ctx: exit 0" "[ $rc = 0 ] && grep -q 'already complete at step $steps' '$w/err'"

# Bad usage (exit 2, a message) and bad input (exit 1, naming the file).
"$bin" train --model "$g" --shards "$w/sh32" --text "$w/ids.txt" --ctx 48 --out "$w/bad" 2>"$w/err"; rc=$?
check "--shards with --text: exit 2, they exclude each other" "[ $rc = 2 ] && grep -q -- '--shards and --text exclude each other' '$w/err' && [ ! -e '$w/bad' ]"
"$bin" train --model "$g" --shards "$w/sh32" --ids "$w/ids.txt" --out "$w/bad" 2>"$w/err"; rc=$?
check "--shards with --ids: exit 2" "[ $rc = 2 ] && grep -q -- '--shards and --ids exclude each other' '$w/err'"
"$bin" train --model "$g" --shards "$w/sh32" --ctx 48 --out "$w/bad" 2>"$w/err"; rc=$?
check "--ctx with --shards: exit 2" "[ $rc = 2 ] && grep -q -- '--ctx is for online training' '$w/err'"
"$bin" train --model "$g" --ids "$w/ids.txt" --out "$w/bad" 2>"$w/err"; rc=$?
check "online without --ctx: exit 2" "[ $rc = 2 ] && grep -q -- 'needs --ctx' '$w/err'"
"$bin" train --model "$g" --ids "$w/ids.txt" --text "$w/ids.txt" --ctx 48 --out "$w/bad" 2>"$w/err"; rc=$?
check "--text with --ids: exit 2" "[ $rc = 2 ] && grep -q -- 'one of --text or --ids' '$w/err'"
"$bin" train --model "$g" --ids "$w/ids.txt" --ctx 48 --backbone-precision bf16 --out "$w/bad" 2>"$w/err"; rc=$?
check "--backbone-precision without --device cuda: exit 2" "[ $rc = 2 ] && grep -q -- '--backbone-precision needs --device cuda' '$w/err' && [ ! -e '$w/bad' ]"
"$bin" train --model "$g" --shards "$w/sh32" --backbone-precision fp32 --out "$w/bad" 2>"$w/err"; rc=$?
check "  ... also with --shards" "[ $rc = 2 ] && grep -q -- '--backbone-precision needs --device cuda' '$w/err' && [ ! -e '$w/bad' ]"
"$bin" train --model "$g" --ids "$w/ids.txt" --ctx 0 --out "$w/bad" 2>"$w/err"; rc=$?
check "--ctx 0: exit 2" "[ $rc = 2 ] && grep -q -- '--ctx' '$w/err'"
"$bin" train --model "$g" --ids "$w/ids.txt" --ctx 4096 --out "$w/bad" 2>"$w/err"; rc=$?
check "--ctx past max_position_embeddings: exit 2" "[ $rc = 2 ] && grep -q -- 'max_position_embeddings 512' '$w/err'"
"$bin" train --model "$g" --text "$w/missing.txt" --ctx 48 --out "$w/bad" 2>"$w/err"; rc=$?
check "a missing --text file: exit 1 naming it, no run folder" "[ $rc = 1 ] && grep -q -- '$w/missing.txt: cannot read' '$w/err' && [ ! -e '$w/bad' ]"
"$bin" train --model "$g" --ids "$w/missing.ids" --ctx 48 --out "$w/bad" 2>"$w/err"; rc=$?
check "a missing --ids file: exit 1 naming it" "[ $rc = 1 ] && grep -q -- '$w/missing.ids: cannot read' '$w/err' && [ ! -e '$w/bad' ]"
"$bin" train --model "$g" --ids "$w/ids.txt" --ctx 400 --out "$w/bad" 2>"$w/err"; rc=$?
check "fewer tokens than one window: exit 1 naming the ids file, no run folder" \
  "[ $rc = 1 ] && grep -q -- 'ids.txt: 288 tokens, fewer than one window of --ctx 400' '$w/err' && [ ! -e '$w/bad' ]"

# --- The hybrid stack: full-attention layers 1 and 3 of 4 only.
g=$goldens/qwen3_next_moe_f32
w=$work/hybrid
mkdir -p "$w"
for i in 1 2 3 4 5 6 7 8; do cat "$g/ids.txt"; done >"$w/ids.txt"
"$bin" teacher --model "$g" --ids "$w/ids.txt" --ctx 64 --out "$w/sh32" --x-dtype fp32 2>/dev/null
hargs=(--model "$g" --steps 60 --d-index 16 --d-rope 8 --min-pos 4 --lr 1e-2 --warmup 10 --threads 2)
"$bin" train "${hargs[@]}" --ids "$w/ids.txt" --ctx 64 --out "$w/online" 2>"$w/online.log"
"$bin" train "${hargs[@]}" --shards "$w/sh32" --out "$w/shard" 2>/dev/null
check "hybrid online: the run trains layers 1 and 3 (config.json, log)" \
  "tr -d ' \t\n' <'$w/online/config.json' | grep -q '\"layers\":\[1,3\]' &&
   [ \"\$(awk -F, 'NR > 1 {print \$2}' '$w/online/metrics.csv' | sort -u | tr '\n' ' ')\" = '1 3 ' ]"
check "hybrid online: the KL drops at both full-attention layers" "awk -F, 'NR == 1 {next}
  {l = \$2; if (\$1 <= 5) {a[l] += \$3; na[l]++} if (\$1 > 55) {b[l] += \$3; nb[l]++}}
  END {n = 0; for (l in a) {n++; if (!(b[l] / nb[l] < 0.9 * a[l] / na[l])) exit 1} exit n != 2}' '$w/online/metrics.csv'"
for r in online shard; do "$bin" export --run "$w/$r" --out "$w/x_$r" 2>/dev/null; done
relh=$(maxrel "$w/x_shard/model.safetensors" "$w/x_online/model.safetensors")
echo "hybrid online vs shard training (x fp32): max |dw| / max |w| = $relh"
check "hybrid: online == shard training with fp32 x (max rel. difference $relh <= 1e-5)" \
  "awk -v r='$relh' 'BEGIN {exit !(r + 0 <= 1e-5 && r != \"nan\")}'"
"$bin" info --model "$g" --indexer "$w/x_online" >"$w/info.txt" 2>&1
check "hybrid: the online indexer covers full-attention layers 1 and 3" "grep -q '2 of 2 full-attention layers: 1 3' '$w/info.txt'"
"$bin" train "${hargs[@]}" --ids "$w/ids.txt" --ctx 64 --layers 0 --out "$w/bad" 2>"$w/err"; rc=$?
check "hybrid online: --layers naming a linear layer: exit 2" "[ $rc = 2 ] && grep -q 'linear_attention' '$w/err' && [ ! -e '$w/bad' ]"

echo "$fails failure(s)"
[ "$fails" = 0 ]
