#!/usr/bin/env bash
# test_gpu_train_synth.sh SPINDLE GOLDENS WORK: online training on the GPU on
# the synthetic Qwen3-8B (train --synthetic qwen3-8b --device cuda
# --random-ids: bench's random-weight model filled on the device, bf16 backbone,
# every one of its 36 layers trained, no checkpoint or text on disk).
#  (a) ctx 256 with at most 32 sampled queries per sequence (--query-frac 0.08
#      over the 240 positions past --min-pos 16, about 19; checked from
#      log.jsonl): the loss's gradient atomics add in a fixed order there
#      (tests/test_gpu_train_online.sh says why), so a run stopped after a random
#      step (--stop-after) and one killed with SIGKILL once its step-2
#      checkpoint exists, each continued with `train --out RUN --resume` alone,
#      end with the checkpoint bytes of the uninterrupted run; the same for
#      --batch 2 (two sequences per step, --query-frac 0.04 so that both
#      together stay at most 32).
#  The mean KL of the first and last two steps is printed (on random weights it
#  need not fall in 12 steps).
#  (b) ctx 32768, a few steps (CTX_LONG, STEPS_LONG override): exit 0, and the
#      tokens/s and peak GPU memory of the last step from log.jsonl and the
#      progress line (checked to exist, printed).
# Exit 0 all pass, 1 a failure, 77 (CTest: skipped) without a usable GPU or a
# CUDA build; with SPINDLE_REQUIRE_GPU=1 no GPU is a failure.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
g=$goldens/llama_f32_default
. "$(dirname "${BASH_SOURCE[0]}")/gpu_probe.sh"
gpu_probe "$bin" "$g" "$work"
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
# maxq RUN: the most queries one step logged (log.jsonl "queries": over the step's sequences).
maxq() { grep -o '"queries":[0-9]*' "$1/log.jsonl" | cut -d: -f2 | sort -n | tail -1; }
# kill_after RUN CKPT ARGS...: starts spindle ARGS, SIGKILLs it once RUN/checkpoints/CKPT exists.
kill_after() {
    local run=$1 ckpt=$2
    shift 2
    "$bin" "$@" 2>/dev/null &
    local pid=$!
    for _ in $(seq 6000); do [ -e "$run/checkpoints/$ckpt" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.02; done
    kill -KILL $pid 2>/dev/null
    wait $pid 2>/dev/null
}
cd "$work" || exit 1

# (a) ctx 256, all 36 layers, exact resume.
steps=12
final=$(printf 'ckpt-%08d.bin' $steps)
common=(train --synthetic qwen3-8b --device cuda --random-ids --ctx 256 --steps $steps --min-pos 16 --lr 1e-2
        --warmup 2 --ckpt-every 2 --seed 7)
"$bin" "${common[@]}" --query-frac 0.08 --out full 2>full.log
check "(a) synthetic qwen3-8b at ctx 256: exit 0, $steps steps" "[ -s full/checkpoints/$final ]"
[ -s full/checkpoints/$final ] || tail -n 3 full.log  # why it stopped (out of GPU memory names the sizes)
check "(a) every layer trained, the backbone in bf16, the random stream and the synthetic model named" \
  "grep -q 'online: random token ids (seed 7, vocabulary 151936), windows of 256 tokens; synthetic model qwen3-8b; the backbone (bf16.*) runs once per sequence, tapped at 36 layer(s), stopping after layer 35' full.log"
check "(a) config.json: synthetic {qwen3-8b, seed 1}, source random" \
  "grep -q '\"name\":[[:space:]]*\"qwen3-8b\"' full/config.json && grep -q '\"source\":[[:space:]]*\"random\"' full/config.json"
q=$(maxq full)
check "(a) at most 32 sampled queries per step (max $q)" "[ '${q:-99}' -le 32 ]"
r=$((RANDOM % (steps - 1) + 1))
"$bin" "${common[@]}" --query-frac 0.08 --out stop --stop-after $r 2>/dev/null
"$bin" train --out stop --resume 2>stop_resume.log
check "(a) stop after step $r + \`train --out RUN --resume\` alone == uninterrupted (checkpoint bytes)" \
  "cmp -s full/checkpoints/$final stop/checkpoints/$final"
kill_after kill ckpt-00000002.bin "${common[@]}" --query-frac 0.08 --out kill
early=no
[ -e kill/checkpoints/$final ] || early=yes
"$bin" train --out kill --resume 2>kill_resume.log
check "(a) SIGKILL after the step-2 checkpoint (before the end: $early) + --resume == uninterrupted (bytes; $(grep -o 'resuming .* at step [0-9]*' kill_resume.log))" \
  "[ $early = yes ] && cmp -s full/checkpoints/$final kill/checkpoints/$final"
"$bin" "${common[@]}" --query-frac 0.04 --batch 2 --out b2 2>b2.log
"$bin" "${common[@]}" --query-frac 0.04 --batch 2 --out b2stop --stop-after $r 2>/dev/null
"$bin" train --out b2stop --resume 2>/dev/null
q=$(maxq b2)
check "(a) --batch 2: at most 32 queries per step over both sequences (max $q)" "[ '${q:-99}' -le 32 ]"
check "(a) --batch 2: stop after step $r + resume == uninterrupted (bytes)" \
  "[ -s b2/checkpoints/$final ] && cmp -s b2/checkpoints/$final b2stop/checkpoints/$final"
# Printed, not judged: on random weights at --lr 1e-2 (an Adam step of 1e-2 against weights
# initialised at about 1/sqrt(4096) = 0.016) the KL of 12 steps need not fall; it did not on an
# H200. The SmolLM2 test judges that training lowers the KL.
awk -F, -v s=$steps 'NR>1 && $1<=2 {a+=$3; na++} NR>1 && $1>s-2 {b+=$3; nb++}
  END {printf "measured, not judged: mean KL over the 36 layers, steps 1-2 %.4f, steps %d-%d %.4f\n", a/na, s-1, s, b/nb}' \
  full/metrics.csv

# (b) ctx 32768: tokens/s and peak memory.
ctx=${CTX_LONG:-32768} n=${STEPS_LONG:-4}
"$bin" train --synthetic qwen3-8b --device cuda --random-ids --ctx $ctx --steps $n --warmup 1 --ckpt-every 1000 \
    --out long 2>long.log
rc=$?
check "(b) synthetic qwen3-8b at ctx $ctx, $n steps, all layers: exit 0 ($rc)" "[ $rc = 0 ] && [ -s long/checkpoints/$(printf 'ckpt-%08d.bin' $n) ]"
[ $rc = 0 ] || tail -n 3 long.log
last=$(grep '"layer":0,' long/log.jsonl | tail -1)
tps=$(echo "$last" | grep -o '"tokens_per_s":[0-9.]*' | cut -d: -f2)
peak=$(echo "$last" | grep -o '"gpu_mem_peak_bytes":[0-9]*' | cut -d: -f2)
check "(b) log.jsonl: tokens_per_s ($tps) and gpu_mem_peak_bytes ($peak) of the last step" "[ -n '$tps' ] && [ -n '$peak' ] && [ '$peak' -gt 0 ]"
check "(b) the progress line carries tokens/s and the GPU's peak" \
  "grep -q '^spindle train: progress step $n/$n .*tokens/s, GPU peak [0-9.]* GB (in use [0-9.]* GB)' long.log"
echo "synthetic qwen3-8b, ctx $ctx, all 36 layers, bf16 backbone: $tps tokens/s at step $n, GPU peak $(awk -v p="${peak:-0}" 'BEGIN {printf "%.2f", p / 1e9}') GB of spindle's allocations"
grep 'GPU memory\|GPU:' long.log
echo "$fails failure(s)"
[ "$fails" = 0 ]
