#!/usr/bin/env bash
# emulate-cuda.sh KERNEL [ARGS...]: builds tests/emu/emu_KERNEL.cpp (CUDA kernels
# on host threads, the stand-ins of tests/emu/cuda_runtime.h: no GPU or nvcc
# needed) into build-emu/ with the CPU twins it checks against, and runs it
# with ARGS. KERNEL:
#   deltanet           kernels/cuda/deltanet.cu against kernels/cpu/deltanet_cpu.c;
#                      [--quick] [--twins] (--twins: the DeltaNet part of test_cuda_twins,
#                      tests/twins/deltanet.c, on the emulated kernels)
#   attention_cached   kernels/cuda/attention_cached.cu (the decoding step's attention)
#                      against attention_cached_cpu (kernels/cpu/attention_cpu.c); [--quick]
#   support_attention  kernels/cuda/sparse_attention.cu (attention over given supports, per query
#                      and block-shared) against support_attention_cpu; [--quick]
#   refine             kernels/cuda/indexer_refine.cu (the second stage of two-stage supports)
#                      against dot products in double and kernels/cpu/topk.c; [--quick]
#   block_tc           kernels/cuda/sparse_attention_tc.cu (bf16 tensor-core attention over block-shared
#                      supports and over per-query supports as block unions; ldmatrix and mma.sync
#                      emulated, tests/emu/emu_mma.h) against support_attention_cpu; [--quick]
#   indexer_block_tc   kernels/cuda/indexer_block_tc.cu (the block-shared selection's ranking values on
#                      tensor cores) against their definition in double; [--quick]
#   oracle_tc          kernels/cuda/oracle_tc.cu + topk.cu (the oracle's selection from bf16 q, k on tensor
#                      cores, then the exact row top-k) against the definition in double; [--quick]
#   indexer_select_fused  kernels/cuda/indexer_select_fused.cu (the per-query indexer selection with
#                      its bf16 tensor-core scores, no score buffer) against the top-k of the scores in
#                      double; [--quick]
#   wgmma              kernels/cuda/wgmma.cuh through kernels/cuda/wgmma_check.cu (Hopper's warpgroup MMA,
#                      B through a shared-memory descriptor; emulated, tests/emu/emu_wgmma.h) against
#                      A·B in double; [--quick]
#   indexer            kernels/cuda/indexer.cu, host code and kernels (the fused distillation loss and its
#                      gradients, the block objectives, recall, selection; cuBLAS through
#                      tests/emu/cublas_v2.h) against the CPU twin (kernels/cpu/indexer_cpu.c); [--quick]
# EMU_OUT=DIR builds there (default build-emu/). Exit 0 when every case passes,
# 77 (CTest: skipped) without g++ or pkg-config's openblas, 2 for an unknown KERNEL.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${EMU_OUT:-$root/build-emu}"
kernel="${1:-}"
shift || true
case "$kernel" in
deltanet) cpu=(deltanet_cpu) twins=(twins/common twins/deltanet) ;;
attention_cached) cpu=(attention_cpu) twins=() ;;
support_attention) cpu=(attention_cpu oracle_cpu topk) twins=() ;;
refine) cpu=(topk) twins=() ;;
block_tc) cpu=(attention_cpu oracle_cpu topk base/env) twins=() ;;
indexer_block_tc) cpu=(base/env) twins=() ;;
oracle_tc) cpu=(base/env) twins=() ;;
indexer_select_fused) cpu=() twins=() ;;
wgmma) cpu=() twins=() ;;
indexer) cpu=(indexer indexer_cpu topk blas_init ops_cpu base/env base/rng model/rope) twins=() ;;
*) echo "usage: scripts/emulate-cuda.sh deltanet|attention_cached|support_attention|refine|block_tc|indexer_block_tc|oracle_tc|indexer_select_fused|wgmma|indexer [ARGS...]" >&2; exit 2 ;;
esac
if ! command -v g++ >/dev/null || ! pkg-config --exists openblas; then
    echo "emulate-cuda: skipped: needs g++ and openblas (pkg-config)"
    exit 77
fi
mkdir -p "$out"
inc=(-I"$root/tests/emu" -I"$root/kernels" -I"$root/kernels/cuda" -I"$root/kernels/cpu" -I"$root/base")
objs=()
for c in "${cpu[@]}"; do  # kernels/cpu/NAME.c, or a path from the root (base/env)
    src=$root/kernels/cpu/$c.c
    [[ $c == */* ]] && src=$root/$c.c
    gcc -std=c11 -O2 -fopenmp -D_GNU_SOURCE "${inc[@]}" -I"$root/model" $(pkg-config --cflags openblas) -c "$src" -o "$out/$(basename $c).o"
    objs+=("$out/$(basename $c).o")
done
for f in "${twins[@]}"; do
    gcc -std=c11 -O2 -D_GNU_SOURCE "${inc[@]}" -I"$root/tests/twins" -c "$root/tests/$f.c" -o "$out/$(basename $f).o"
    objs+=("$out/$(basename $f).o")
done
g++ -std=c++20 -O1 -g -pthread -fno-strict-aliasing -Wall -Wno-unused-parameter -Wno-unused-function -Wno-unknown-pragmas -Wno-sign-compare "${inc[@]}" \
    -x c++ "$root/tests/emu/emu_$kernel.cpp" -x none "${objs[@]}" -fopenmp $(pkg-config --libs openblas) -lm -o "$out/emu_$kernel"
exec "$out/emu_$kernel" "$@"
