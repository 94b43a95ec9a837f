#!/usr/bin/env bash
# device-train.sh STAGE: the GPU checks and benchmarks of online training ON the GPU machine, from the
# repository root, after scripts/device-check.sh built build-device/ (the machine keeps it, /root and
# /tmp between calls made back to back; docs/gpu.md).
#   nccl     a second build with -DSPINDLE_NCCL=ON (Open MPI and NCCL of the image) in build-device-nccl/,
#            then tests/test_nccl_train.sh: `mpirun -np 1 spindle train` over NCCL against the plain run
#            (online and from shards, and a stop + resume), checkpoint bytes compared
#   smollm2  SmolLM2-135M's GGUF from its parts in /root/spindle-parts (smol.part0..2, see
#            scripts/device-smollm2.sh), joined, checked and converted into /root/spindle-smollm2/model
#   online   tests/test_gpu_train_online.sh on that checkpoint (online vs shard training on the GPU,
#            resume after a stop and after SIGKILL, peak memory, held-out recall); TEXT_DIR holds two
#            text files over 20 KB (default .dev/t16)
#   bench    spindle bench --train-online on the synthetic Qwen3-8B: CTX_FP32 (default 32768) with the
#            fp32 teacher and CTX_BF16 (default 32768,131072) with the bf16 teacher
#   synth    tests/test_gpu_train_synth.sh: spindle train --synthetic qwen3-8b --random-ids (all 36 layers, bf16
#            backbone) at ctx 256, resume after a stop and after SIGKILL (also --batch 2) to the same bytes, then
#            a few steps at CTX_LONG (default 32768) with tokens/s and peak GPU memory
# Results in $OUT (default ./device-out).
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/device-out}
mkdir -p "$OUT"
P=/tmp/spindle-prefix
L=$P/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$L:$L/openblas-pthread:$L/hdf5/serial${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$L/pkgconfig:$P/usr/share/pkgconfig
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
B=$ROOT/build-device
say() { echo "=== $* ($(date -u +%H:%M:%S))"; }
case "${1:-}" in
nccl)
    BN=$ROOT/build-device-nccl
    PKGCONF=$(command -v pkg-config || echo "$P/usr/bin/pkgconf")
    say "configure + build with -DSPINDLE_NCCL=ON"
    { cmake -S "$ROOT" -B "$BN" -DSPINDLE_CUDA=ON -DSPINDLE_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
          -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P/usr" -DPKG_CONFIG_EXECUTABLE="$PKGCONF" &&
          cmake --build "$BN" -j16 --target spindle; } >"$OUT/build-nccl.log" 2>&1 ||
        { tail -30 "$OUT/build-nccl.log"; echo "device-train: nccl build failed"; exit 1; }
    grep -E "MPI|NCCL" "$OUT/build-nccl.log" | head -5
    say "mpirun -np 1: tests/test_nccl_train.sh"
    SPINDLE_REQUIRE_GPU=1 bash tests/test_nccl_train.sh "$BN/spindle" tests/goldens /tmp/spindle-nccl-train \
        2>&1 | tee "$OUT/nccl_train.txt"
    exit "${PIPESTATUS[0]}"
    ;;
smollm2)
    MODEL_ONLY=1 B=$B bash scripts/device-smollm2.sh
    ;;
online)
    M=/root/spindle-smollm2/model
    [ -s "$M/model.safetensors" ] || { echo "device-train: no SmolLM2 in $M (stage smollm2)"; exit 1; }
    say "tests/test_gpu_train_online.sh on $M"
    SPINDLE_SMOLLM2=$M SPINDLE_REQUIRE_GPU=1 bash tests/test_gpu_train_online.sh "$B/spindle" tests/goldens "$M" \
        "${TEXT_DIR:-$ROOT/.dev/t16}" /tmp/spindle-gpu-train-online 2>&1 | tee "$OUT/gpu_train_online.txt"
    exit "${PIPESTATUS[0]}"
    ;;
bench)
    rc=0
    say "bench --train-online, fp32 teacher, ${CTX_FP32:-32768}"
    "$B/spindle" bench --synthetic qwen3-8b --ctx "${CTX_FP32:-32768}" --train-online --device cuda \
        --json "$OUT/train-online-fp32.json" >"$OUT/train-online-fp32.txt" 2>&1 || rc=1
    tail -12 "$OUT/train-online-fp32.txt"
    say "bench --train-online, bf16 teacher, ${CTX_BF16:-32768,131072}"
    "$B/spindle" bench --synthetic qwen3-8b --ctx "${CTX_BF16:-32768,131072}" --train-online --device cuda \
        --teacher-precision bf16 --json "$OUT/train-online-bf16.json" >"$OUT/train-online-bf16.txt" 2>&1 || rc=1
    tail -16 "$OUT/train-online-bf16.txt"
    exit $rc
    ;;
synth)
    say "tests/test_gpu_train_synth.sh (synthetic qwen3-8b, ctx 256 and ${CTX_LONG:-32768})"
    SPINDLE_REQUIRE_GPU=1 CTX_LONG=${CTX_LONG:-32768} bash tests/test_gpu_train_synth.sh "$B/spindle" tests/goldens \
        /tmp/spindle-gpu-train-synth 2>&1 | tee "$OUT/gpu_train_synth.txt"
    exit "${PIPESTATUS[0]}"
    ;;
*)
    echo "usage: scripts/device-train.sh nccl|smollm2|online|bench|synth" >&2
    exit 2
    ;;
esac
