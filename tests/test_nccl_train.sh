#!/usr/bin/env bash
# test_nccl_train.sh SPINDLE GOLDENS WORK: the data-parallel path (a build with
# -DSPINDLE_NCCL=ON) on one GPU. `mpirun -np 1 spindle train --device cuda ...`
# sets up MPI and NCCL and all-reduces every layer's gradients through NCCL
# (ncclAvg over one rank: the values themselves); the same command without
# mpirun runs one plain process. On the tiny golden llama (ctx 48: one block of
# the loss kernel, so the GPU's gradient sums repeat to the bit) both end with
# the same checkpoint bytes, online and from shards; the mpirun run says it is
# data parallel and how many bytes it all-reduces per step; a stop + resume
# under mpirun ends with the same bytes too. --batch 2 (two sequences per step,
# AdamW on the mean of their gradients, summed on the device and scaled before
# the all-reduce): mpirun -np 1 == the plain run (bytes).
# With 2 or more GPUs (nvidia-smi -L) also mpirun -np 2: --batch 2 over two
# ranks (rank r takes sequence r of each step) against one rank with --batch 2
# (another summation order: the exported weights within ‖dw‖/‖w‖ ≤ 1e-3 — AdamW's
# first steps move a weight by about ±lr whatever its gradient's size, so an
# element that rounding moves across zero differs by 2·lr and the max difference
# is not rounding-sized; the norm is), a
# resume of the 2-rank run's checkpoint on one rank, and one rank SIGKILLed
# mid-run: the job ends (no hang, within 120 s, non-zero), and
# `mpirun -np 2 ... --resume` from the last complete checkpoint ends with the
# uninterrupted 2-rank run's bytes.
# Exit 0 all pass, 1 a failure, 77 (CTest: skipped) without a GPU or mpirun.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
g=$goldens/llama_f32_default
. "$(dirname "${BASH_SOURCE[0]}")/gpu_probe.sh"
gpu_probe "$bin" "$g" "$work"
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
# --batch 2: the step's two sequences summed on the device, × 1/2, then (mpirun) the all-reduce.
"$bin" "${args[@]}" --ids "$work/ids.txt" --ctx 48 --batch 2 --out "$work/plain_b2" 2>/dev/null
"${mpi[@]}" "$bin" "${args[@]}" --ids "$work/ids.txt" --ctx 48 --batch 2 --out "$work/nccl_b2" 2>"$work/nccl_b2.log"
check "--batch 2: mpirun -np 1 == the plain run (checkpoint bytes), 2 sequence(s) per step" \
  "[ -s '$work/nccl_b2/checkpoints/$final' ] && cmp -s '$work/plain_b2/checkpoints/$final' '$work/nccl_b2/checkpoints/$final' &&
   grep -q 'data parallel: 1 rank(s) over NCCL, 2 sequence(s) per step' '$work/nccl_b2.log'"
check "--batch 2 trains other weights than one sequence per step" "! cmp -s '$work/plain/checkpoints/$final' '$work/plain_b2/checkpoints/$final'"

# Two or more GPUs: two ranks.
n_gpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${n_gpu:-0}" -ge 2 ]; then
    mpi2=(mpirun -np 2)
    [ "$(id -u)" = 0 ] && mpi2+=(--allow-run-as-root)
    floats() { local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' '); od -An -v -tf4 -w4 -j $((8 + n)) "$1"; }
    l2rel() {
      paste <(floats "$1") <(floats "$2") | awk '{d = $1 - $2; dd += d * d; aa += $1 * $1; n++}
        END {if (n == 0 || aa == 0) print "nan"; else printf "%.3g\n", sqrt(dd / aa)}'
    }
    "${mpi2[@]}" "$bin" "${args[@]}" --ids "$work/ids.txt" --ctx 48 --batch 2 --out "$work/r2" 2>"$work/r2.log"
    "$bin" export --run "$work/plain_b2" --out "$work/x_plain_b2" 2>/dev/null
    "$bin" export --run "$work/plain" --out "$work/x_plain" 2>/dev/null
    "$bin" export --run "$work/r2" --out "$work/x_r2" 2>/dev/null
    rel=$(l2rel "$work/x_plain_b2/model.safetensors" "$work/x_r2/model.safetensors")
    ctl=$(l2rel "$work/x_plain_b2/model.safetensors" "$work/x_plain/model.safetensors")
    echo "mpirun -np 2 --batch 2 vs one rank --batch 2: ‖dw‖/‖w‖ = $rel (control, one sequence per step: $ctl)"
    check "mpirun -np 2 --batch 2 == one rank --batch 2 within rounding ($rel <= 1e-3; control $ctl > 1e-2)" \
      "grep -q 'data parallel: 2 rank(s) over NCCL, 2 sequence(s) per step' '$work/r2.log' &&
       awk -v r='$rel' -v c='$ctl' 'BEGIN {exit !(r != \"nan\" && r + 0 <= 1e-3 && c + 0 > 1e-2)}'"
    "${mpi2[@]}" "$bin" "${args[@]}" --ids "$work/ids.txt" --ctx 48 --batch 3 --out "$work/bad3" 2>"$work/bad3.log"; rc=$?
    check "mpirun -np 2 --batch 3: refused (exit 2), no run folder" "[ $rc = 2 ] && grep -q 'do not split over 2 ranks' '$work/bad3.log' && [ ! -e '$work/bad3' ]"
    "${mpi2[@]}" "$bin" "${args[@]}" --ids "$work/ids.txt" --ctx 48 --batch 2 --out "$work/r2to1" --stop-after 5 2>/dev/null
    "$bin" train --out "$work/r2to1" --resume 2>"$work/r2to1.log"
    "$bin" export --run "$work/r2to1" --out "$work/x_r2to1" 2>/dev/null
    rel=$(l2rel "$work/x_plain_b2/model.safetensors" "$work/x_r2to1/model.safetensors")
    check "2 ranks stopped after 5 steps, resumed on one rank: == one rank --batch 2 within rounding ($rel <= 1e-3)" \
      "grep -q 'resuming .* at step 4' '$work/r2to1.log' && awk -v r='$rel' 'BEGIN {exit !(r != \"nan\" && r + 0 <= 1e-3)}'"
    # Kill rank 1 (its process among mpirun's descendants, by OMPI_COMM_WORLD_RANK) once step 4's checkpoint exists.
    long=(train --model "$g" --device cuda --steps 400 --d-index 16 --d-rope 8 --min-pos 4 --query-frac 0.5 --lr 1e-2
          --warmup 2 --ckpt-every 4 --ids "$work/ids.txt" --ctx 48 --batch 2)
    "${mpi2[@]}" "$bin" "${long[@]}" --out "$work/r2full" 2>/dev/null
    "${mpi2[@]}" "$bin" "${long[@]}" --out "$work/r2kill" 2>"$work/r2kill.log" &
    mpipid=$!
    descendants() { local p; for p in $(ps -o pid= --ppid "$1"); do echo "$p"; descendants "$p"; done; }
    for _ in $(seq 3000); do [ -e "$work/r2kill/checkpoints/ckpt-00000004.bin" ] && break; kill -0 $mpipid 2>/dev/null || break; sleep 0.02; done
    victim=
    for p in $(descendants $mpipid); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && { victim=$p; break; }
    done
    [ -n "$victim" ] && kill -KILL "$victim"
    ended=no
    for _ in $(seq 1200); do kill -0 $mpipid 2>/dev/null || { ended=yes; break; }; sleep 0.1; done
    [ $ended = no ] && kill -KILL $mpipid 2>/dev/null
    wait $mpipid; mrc=$?
    check "rank 1 SIGKILLed (pid ${victim:-none}) mid-run: mpirun ends within 120 s, non-zero ($mrc), before the last step" \
      "[ -n '$victim' ] && [ $ended = yes ] && [ $mrc != 0 ] && [ ! -e '$work/r2kill/checkpoints/ckpt-00000400.bin' ]"
    "${mpi2[@]}" "$bin" train --out "$work/r2kill" --resume 2>"$work/r2kill_resume.log"
    check "mpirun -np 2 --resume after the kill == the uninterrupted 2-rank run (bytes; $(grep -o 'resuming .* at step [0-9]*' "$work/r2kill_resume.log"))" \
      "cmp -s '$work/r2full/checkpoints/ckpt-00000400.bin' '$work/r2kill/checkpoints/ckpt-00000400.bin'"
else
    echo "two-rank checks skipped: ${n_gpu:-0} GPU(s)"
fi
grep 'data parallel' "$work/nccl.log"
echo "$fails failure(s)"
[ "$fails" = 0 ]
