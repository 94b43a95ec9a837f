// wgmma.cuh: Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) for bf16 inputs and fp32 accumulators,
// with A from registers and B from shared memory through a matrix descriptor, in the layout without
// swizzling. The pieces the Hopper kernels are built on; wgmma_check.cu tests them against the CPU.
//
// A warpgroup is 4 consecutive warps whose first warp index is a multiple of 4; all 128 threads issue
// each instruction. One m64nNk16 computes D[64][N] += A[64][16] · B[16][N]:
//   A (registers, 4 × b32 a thread): warp w of the group holds rows 16w … 16w + 15 in the layout of
//     mma.m16n8k16's A fragment (mma.cuh): g = lane / 4, c = lane % 4, (g, 2c), (g+8, 2c), (g, 2c+8),
//     (g+8, 2c+8), each register a bf16 pair (the lower column in the low half);
//   D (N/2 floats a thread): warp w's rows 16w + g and 16w + g + 8; d[4j], d[4j+1] are row g, columns
//     8j + 2c and 8j + 2c + 1, d[4j+2], d[4j+3] the same columns of row g + 8 — mma's C fragment for
//     each 8-column slice j.
//   B (shared memory, 16-byte aligned): core matrices of 8 × 8 bf16, 128 contiguous bytes each. K-major
//     (TRANS_B 0: B[k][n] at n-row n, k contiguous — a row-major [n][k] tile such as K rows for Q·Kᵀ):
//     a core matrix holds n-rows n0 … n0+7, each 16 bytes of k0 … k0+7. MN-major (TRANS_B 1: n
//     contiguous — a row-major [k][n] tile such as V rows for P·V): a core matrix holds k-rows k0 … k0+7,
//     each 16 bytes of n0 … n0+7. In both, the core matrix of (n0, k0) starts at
//       start + (n0 / 8)·SBO + (k0 / 8)·LBO bytes
//     (PTX ISA, "Shared Memory Matrix Layout", the canonical layouts without swizzling: SBO steps along
//     N, LBO along K).
// The descriptor (64 bits): bits 0–13 start address >> 4, 16–29 LBO >> 4, 32–45 SBO >> 4, 62–63 swizzle
// mode (0: none). Writes to shared memory by the threads must be fenced into the async proxy
// (wg_fence_proxy) before a wgmma reads them, accumulator and A registers written by the threads need
// wg_fence before the first wgmma that uses them, and results are there after wg_commit + wg_wait<0>.
//
// Under SPINDLE_CUDA_EMULATION (tests/emu) the instruction is emulated on the warp's host threads
// (emu_wgmma.h), with the same descriptor arithmetic over host addresses.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "device_util.cuh"

#ifdef SPINDLE_CUDA_EMULATION
#include "emu_wgmma.h"
// The emulation runs whatever the launchers launch.
static inline int wg_device_ok(void) { return 1; }
#else
// 1 when the current device is an sm_90 (H100, H200): the only one sm_90a code runs on.
static inline int wg_device_ok(void) {
    return device_attr(cudaDevAttrComputeCapabilityMajor) == 9 && device_attr(cudaDevAttrComputeCapabilityMinor) == 0;
}
typedef uint64_t WgDesc;

// A descriptor for the tile at smem (16-byte aligned) with core-matrix strides lbo (along K) and sbo
// (along N), in bytes (multiples of 16), no swizzling.
static __device__ __forceinline__ WgDesc wg_desc(const void *smem, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((a & 0x3FFFFu) >> 4) | (uint64_t)((lbo & 0x3FFFFu) >> 4) << 16 |
           (uint64_t)((sbo & 0x3FFFFu) >> 4) << 32;
}

// The same descriptor moved by bytes (a multiple of 16) in shared memory: the next K step's tile.
static __device__ __forceinline__ WgDesc wg_desc_add(WgDesc d, uint32_t bytes) { return d + (bytes >> 4); }

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Compiled for a target without wgmma (anything but sm_90a): a kernel that would use it traps.
#define SPINDLE_WGMMA_ABSENT 1
#endif

static __device__ __forceinline__ void wg_fence() {
#ifndef SPINDLE_WGMMA_ABSENT
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
static __device__ __forceinline__ void wg_commit() {
#ifndef SPINDLE_WGMMA_ABSENT
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
static __device__ __forceinline__ void wg_wait() {
#ifndef SPINDLE_WGMMA_ABSENT
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Shared-memory writes of this thread made visible to the async proxy (wgmma's operand reads).
static __device__ __forceinline__ void wg_fence_proxy() {
#ifndef SPINDLE_WGMMA_ABSENT
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Keeps registers the compiler must not reuse or move while a wgmma may still read or write them (the
// instruction reads its A registers and writes its accumulators asynchronously, until wg_wait).
static __device__ __forceinline__ void wg_pin(float *x, int n) {
    for (int i = 0; i < n; i++) asm volatile("" : "+f"(x[i])::"memory");
}
static __device__ __forceinline__ void wg_pin(uint32_t *x, int n) {
    for (int i = 0; i < n; i++) asm volatile("" : "+r"(x[i])::"memory");
}

// d[32] = (accumulate ? d : 0) + A·B for m64n64k16, A from registers (a[4]), B through desc; TRANS_B 0:
// B K-major, 1: B MN-major.
template <int TRANS_B>
static __device__ __forceinline__ void wgmma_m64n64k16(float d[32], const uint32_t a[4], WgDesc b, int accumulate) {
#ifdef SPINDLE_WGMMA_ABSENT
    __trap();
#else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(TRANS_B), "r"(accumulate));
#endif
}
#endif
