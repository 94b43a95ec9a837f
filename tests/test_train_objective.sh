#!/usr/bin/env bash
# test_train_objective.sh SPINDLE GOLDENS WORK: `spindle train --objective`
# (query | block | mix, docs/design.md "Loss") on a tiny golden checkpoint:
# the run's config.json and the export carry the objective; the block term
# falls during training; a stopped block run resumes to the same bytes and
# keeps its objective; bad values and conflicting flags exit 2; a run config
# without "objective" (written before it was recorded) resumes per query.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
g=$goldens/llama_f32_default
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
for i in 1 2 3 4 5 6; do cat "$g/ids.txt"; done >"$work/ids.txt"
"$bin" teacher --model "$g" --ids "$work/ids.txt" --ctx 48 --out "$work/shards" --seqs-per-shard 2 2>/dev/null
args=(train --model "$g" --shards "$work/shards" --d-index 16 --d-rope 8 --recall-k 8 --ckpt-every 7
      --min-pos 4 --query-frac 0.5 --lr 1e-2 --warmup 5 --threads 2)

"$bin" "${args[@]}" --steps 60 --out "$work/block" --objective block --objective-bsel 8 2>"$work/block.log"
check "block run completes" "[ -s '$work/block/checkpoints/ckpt-00000060.bin' ]"
check "config.json carries the objective" "tr -d ' \n\t' <'$work/block/config.json' | grep -q '\"objective\":{\"kind\":\"block\",\"bsel\":8,\"block_weight\":1}'"
check "log.jsonl carries both parts" "grep -q '\"kl_query\":[0-9.e-]*,\"kl_block\":' '$work/block/log.jsonl'"
# The block term falls: mean kl of the last 10 steps < 0.8 x the first 10 (kl = L_block here).
check "training lowers the block KL" "awk -F, 'NR>1 && \$1<=10 {a+=\$3; na++} NR>1 && \$1>50 {b+=\$3; nb++} END {exit !(b/nb < 0.8*a/na)}' '$work/block/metrics.csv'"
# Whole blocks are sampled: every step's query count is a sum of block sizes (positions ≥ 4 of blocks of 8).
check "queries come in whole blocks" "! grep -o '\"queries\":[0-9]*' '$work/block/log.jsonl' | awk -F: '\$2 % 8 != 4 && \$2 % 8 != 0 {bad=1} END {exit !bad}'"

"$bin" "${args[@]}" --steps 60 --out "$work/stop" --objective block --objective-bsel 8 --stop-after 23 2>/dev/null
"$bin" train --out "$work/stop" --resume 2>/dev/null
check "block run stopped at 23 and resumed == uninterrupted (bytes)" "cmp -s '$work/block/checkpoints/ckpt-00000060.bin' '$work/stop/checkpoints/ckpt-00000060.bin'"

"$bin" "${args[@]}" --out "$work/mix" --objective mix --objective-bsel 8 --block-weight 0.5 --steps 10 2>/dev/null
check "mix run: kl = kl_query + 0.5 kl_block" "grep '\"step\":10,' '$work/mix/log.jsonl' | head -1 | sed 's/[{}\"]//g' | awk -F'[:,]' '{for (i=1;i<NF;i+=2) v[\$i]=\$(i+1); n++} END {d=v[\"kl\"]-(v[\"kl_query\"]+0.5*v[\"kl_block\"]); exit !(n==1 && v[\"kl_block\"]>0 && d<1e-4 && d>-1e-4)}'"
"$bin" export --run "$work/block" --out "$work/idx" 2>/dev/null
check "export's config.json carries the objective" "tr -d ' \n\t' <'$work/idx/config.json' | grep -q '\"objective\":{\"kind\":\"block\",\"bsel\":8'"

# Refusals: exit 2 with a message.
"$bin" train --out "$work/block" --resume --steps 70 --objective query 2>"$work/err"; rc=$?
check "resume with another --objective is refused (exit 2)" "[ $rc = 2 ] && grep -q -- '--objective is block in the run but query' '$work/err'"
"$bin" train --out "$work/block" --resume --steps 70 --objective-bsel 16 2>"$work/err"; rc=$?
check "resume with another --objective-bsel is refused (exit 2)" "[ $rc = 2 ] && grep -q -- '--objective-bsel is 8 in the run but 16' '$work/err'"
for bad in "--objective foo" "--objective block --objective-bsel 0" "--objective mix --block-weight -1" \
           "--objective block --block-weight 2" "--objective-bsel 8"; do
  # shellcheck disable=SC2086
  "$bin" "${args[@]}" --steps 60 --out "$work/bad" $bad 2>"$work/err"; rc=$?
  check "$bad: exit 2, nothing created" "[ $rc = 2 ] && [ ! -e '$work/bad' ] && [ -s '$work/err' ]"
done

# A query run; its config without "objective" (as written before) resumes per query.
"$bin" "${args[@]}" --out "$work/query" --steps 10 2>/dev/null
check "query run's config.json says query" "tr -d ' \n\t' <'$work/query/config.json' | grep -q '\"objective\":{\"kind\":\"query\"'"
awk 'BEGIN {skip=0} /"objective":/ {skip=1; next} skip && /}/ {skip=0; next} !skip' "$work/query/config.json" >"$work/cfg" &&
  mv "$work/cfg" "$work/query/config.json"
check "config without objective (test setup)" "[ -s '$work/query/config.json' ] && ! grep -q '\"objective\"' '$work/query/config.json'"
"$bin" train --out "$work/query" --resume --steps 12 2>"$work/err"; rc=$?
check "a run config without objective resumes per query" "[ $rc = 0 ] && [ -s '$work/query/checkpoints/ckpt-00000012.bin' ] && tr -d ' \n\t' <'$work/query/config.json' | grep -q '\"objective\":{\"kind\":\"query\"'"
"$bin" train --out "$work/query" --resume --steps 14 --objective block 2>"$work/err"; rc=$?
check "...and refuses to switch to block (exit 2)" "[ $rc = 2 ] && grep -q -- '--objective is query in the run but block' '$work/err'"

[ "$fails" = 0 ] && echo "test_train_objective: all passed" || { echo "test_train_objective: $fails failure(s)"; exit 1; }
