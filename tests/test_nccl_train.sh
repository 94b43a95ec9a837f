#!/usr/bin/env bash
# test_nccl_train.sh SPINDLE GOLDENS WORK: the data-parallel path (a build with
# -DSPINDLE_NCCL=ON) on one GPU. `mpirun -np 1 spindle train --device cuda ...`
# sets up MPI and NCCL and all-reduces every layer's gradients through NCCL
# (ncclAvg over one rank: the values themselves); the same command without
# mpirun runs one plain process. On the tiny golden llama (ctx 48: one block of
# the loss kernel, so the GPU's gradient sums repeat to the bit) both end with
# the same checkpoint bytes, online and from shards; the mpirun run says it is
# data parallel and how many bytes it all-reduces per step; a stop + resume
# under mpirun ends with the same bytes too.
# Exit 0 all pass, 1 a failure, 77 (CTest: skipped) without a GPU or mpirun.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
g=$goldens/llama_f32_default
if ! "$bin" logits --model "$g" --ids "$g/ids.txt" --out "$work/probe.npy" --device cuda >/dev/null 2>"$work/probe.err"; then
    if grep -qE "no usable GPU|built without CUDA" "$work/probe.err"; then
        [ "${SPINDLE_REQUIRE_GPU:-0}" = 1 ] && { echo "FAIL: SPINDLE_REQUIRE_GPU=1 but: $(cat "$work/probe.err")"; exit 1; }
        echo "skipped: $(cat "$work/probe.err")"
        exit 77
    fi
    echo "FAIL: spindle logits --device cuda: $(cat "$work/probe.err")"
    exit 1
fi
command -v mpirun >/dev/null || { echo "skipped: no mpirun (Debian: openmpi-bin)"; exit 77; }
mpi=(mpirun -np 1)
[ "$(id -u)" = 0 ] && mpi+=(--allow-run-as-root)
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
for i in 1 2 3 4 5 6; do cat "$g/ids.txt"; done >"$work/ids.txt"
"$bin" teacher --model "$g" --ids "$work/ids.txt" --ctx 48 --seqs-per-shard 2 --x-dtype fp32 --out "$work/sh" 2>/dev/null
args=(train --model "$g" --device cuda --steps 12 --d-index 16 --d-rope 8 --min-pos 4 --query-frac 0.5 --lr 1e-2
      --warmup 2 --ckpt-every 4)
final=ckpt-00000012.bin
"$bin" "${args[@]}" --ids "$work/ids.txt" --ctx 48 --out "$work/plain" 2>"$work/plain.log"
"${mpi[@]}" "$bin" "${args[@]}" --ids "$work/ids.txt" --ctx 48 --out "$work/nccl" 2>"$work/nccl.log"
check "mpirun -np 1: exit 0, data parallel over NCCL with the all-reduce bytes per step" \
  "[ -s '$work/nccl/checkpoints/$final' ] && grep -q 'data parallel: 1 rank(s) over NCCL, 1 sequence(s) per step' '$work/nccl.log' &&
   grep -q 'gradients all-reduced: [0-9]* bytes per rank per step' '$work/nccl.log'"
check "the plain run does not go through NCCL" "! grep -q 'data parallel' '$work/plain.log'"
check "online: mpirun -np 1 == the plain run (checkpoint bytes)" "cmp -s '$work/plain/checkpoints/$final' '$work/nccl/checkpoints/$final'"
"$bin" "${args[@]}" --shards "$work/sh" --out "$work/plain_sh" 2>/dev/null
"${mpi[@]}" "$bin" "${args[@]}" --shards "$work/sh" --out "$work/nccl_sh" 2>/dev/null
check "shards: mpirun -np 1 == the plain run (checkpoint bytes)" \
  "[ -s '$work/nccl_sh/checkpoints/$final' ] && cmp -s '$work/plain_sh/checkpoints/$final' '$work/nccl_sh/checkpoints/$final'"
"${mpi[@]}" "$bin" "${args[@]}" --ids "$work/ids.txt" --ctx 48 --out "$work/stop" --stop-after 5 2>/dev/null
"${mpi[@]}" "$bin" train --out "$work/stop" --resume 2>/dev/null
check "mpirun: stop after 5 + resume == uninterrupted (checkpoint bytes)" "cmp -s '$work/nccl/checkpoints/$final' '$work/stop/checkpoints/$final'"
grep 'data parallel' "$work/nccl.log"
echo "$fails failure(s)"
[ "$fails" = 0 ]
