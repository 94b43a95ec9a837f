// device_util.cuh: small device helpers shared by the kernels: a binary search
// over sorted key lists, warp-wide reductions (xor shuffles, every lane gets
// the result), a thread block's sum in double in a fixed order, and the fp32
// flash-attention step of one query row over a staged key tile, a store that
// rounds fp32 to the destination's type, 2^x on the special-function unit; on
// the host, the grid size of a grid-stride launch, a checked launch and a
// device attribute.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_check.cuh"

// A kernel's dynamic shared memory as float *name, and a launch checked right
// after it. Under SPINDLE_CUDA_EMULATION (tests/emu: the kernels on host
// threads, one thread per CUDA thread) both go through the emulation's
// stand-ins, so a kernel written with them runs there unchanged.
// DYNAMIC_SMEM_AS(T, name): the same as T *name, 128-byte aligned.
#ifdef SPINDLE_CUDA_EMULATION
#define DYNAMIC_SMEM(name) float *name = (float *)emu_dynamic_smem()
#define DYNAMIC_SMEM_AS(T, name) T *name = (T *)emu_dynamic_smem()
#else
#define DYNAMIC_SMEM(name)                 \
    extern __shared__ float4 name##_f4[]; \
    float *name = (float *)name##_f4
#define DYNAMIC_SMEM_AS(T, name) extern __shared__ __align__(128) T name[]
#endif

#ifndef SPINDLE_CUDA_EMULATION
// The stream spindle's launches go to (cuda_stream_use, ops_cuda.h; common.cu).
cudaStream_t cuda_launch_stream(void);
#endif

template <typename... P, typename... A>
static void launch_checked(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A... args) {
#ifdef SPINDLE_CUDA_EMULATION
    emu_launch(kernel, grid, block, smem, args...);
#else
    kernel<<<grid, block, smem, cuda_launch_stream()>>>(args...);
#endif
    CUDA_CHECK(cudaGetLastError());
}

// One attribute of the current device (host).
static inline int device_attr(cudaDeviceAttr attr) {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, dev));
    return v;
}

// Thread blocks of `block` threads for a grid-stride loop over n elements: one
// element per thread, at most 65535·16 blocks, at least one.
static inline int grid_for(int64_t n, int block) {
    const int64_t g = (n + block - 1) / block;
    return (int)(g < 65535 * 16 ? (g > 0 ? g : 1) : 65535 * 16);
}

// *p = v in p's type: fp32 as is, bf16 / f16 rounded to nearest even (the
// bits cuda_f32_to_half gives), so a kernel can write the next GEMM's 16-bit
// operand in place of an fp32 result that would only be converted.
static __device__ __forceinline__ void store_as(float *p, float v) { *p = v; }
static __device__ __forceinline__ void store_as(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
static __device__ __forceinline__ void store_as(__half *p, float v) { *p = __float2half_rn(v); }
// Two adjacent values (p 4- or 8-byte aligned): fp32, or rounded to bf16 / f16 (nearest even).
static __device__ __forceinline__ void store2(float *p, float a, float b) { *(float2 *)p = make_float2(a, b); }
static __device__ __forceinline__ void store2(__nv_bfloat16 *p, float a, float b) {
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
}
static __device__ __forceinline__ void store2(__half *p, float a, float b) { *(__half2 *)p = __floats2half2_rn(a, b); }

// log2 e: e^x = 2^(x·LOG2E).
static constexpr float LOG2E = 1.4426950408889634f;

// 2^x on the special-function unit alone (ex2.approx.ftz): exp2f adds a range test and two predicated
// multiplies to keep results below 2^-126 subnormal; here they are 0, as are the inputs below −126. The
// softmax-style loops use it for attention weights and probabilities, where a term under 2^-126 is lost
// in any fp32 sum beside the row's largest (1 after the max is taken out, or a probability of 1/T or
// more). The same approximation as exp2f otherwise (its 2 ulp).
static __device__ __forceinline__ float fast_exp2(float x) {
#ifdef SPINDLE_CUDA_EMULATION
    const float r = exp2f(x);
    return r < 1.17549435e-38f ? 0.0f : r;  // FLT_MIN: a subnormal result flushed to zero
#else
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#endif
}

// Number of entries ≤ t in the ascending keys[0..n).
static __device__ __forceinline__ int count_le(const int32_t *keys, int n, int t) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (keys[mid] <= t) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

template <typename F>
static __device__ __forceinline__ F warp_sum(F x) {
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

static __device__ __forceinline__ float warp_max(float x) {
    for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

static __device__ __forceinline__ int warp_max(int x) {
    for (int off = 16; off > 0; off >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

static __device__ __forceinline__ int warp_min(int x) {
    for (int off = 16; off > 0; off >>= 1) x = min(x, __shfl_xor_sync(0xffffffffu, x, off));
    return x;
}

// Σ v over the thread block (blockDim.x a multiple of 32): warp sums, then
// warp 0's … last warp's in that order by thread 0, which alone gets the
// result. red: blockDim.x / 32 doubles of shared memory. Contains a barrier.
static __device__ __forceinline__ double block_sum(double v, double *red) {
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    double s = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < (int)blockDim.x / 32; w++) s += red[w];
    return s;
}

// One warp's online-softmax step for one query row over the first nv ≥ 1 keys
// of a staged fp32 tile (all of them visible to the row): lane j < nv scores
// key j, s = scale·(qrow · Ks[j·ks_stride …]); the row's running max m and sum
// l are updated (m = −∞, l = 0 before its first keys), the lane's output dims
// acc[r] (d = lane + 32·r < dh) are rescaled and get Σ_j p_j·Vs[j·dh + d].
// Returns the lane's s (−∞ for lanes ≥ nv), e.g. for attention-mass sums.
template <int NR>
static __device__ __forceinline__ float flash_row_tile(const float *qrow, const float *Ks, int ks_stride,
                                                       const float *Vs, int dh, int nv, float scale, float &m,
                                                       float &l, float acc[NR]) {
    const int lane = threadIdx.x % 32;
    float s = -INFINITY;
    if (lane < nv) {
        const float *kr = Ks + lane * ks_stride;
        float dot = 0.0f;
        for (int d = 0; d < dh; d++) dot += qrow[d] * kr[d];
        s = scale * dot;
    }
    const float m_new = fmaxf(m, warp_max(s));  // finite: lane 0's key is visible
    const float corr = expf(m - m_new);          // 0 on the row's first keys (m = −∞)
    const float p = lane < nv ? expf(s - m_new) : 0.0f;
    l = l * corr + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] *= corr;
    for (int j = 0; j < nv; j++) {
        const float pj = __shfl_sync(0xffffffffu, p, j);
        const float *vr = Vs + j * dh;
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const int d = lane + 32 * r;
            if (d < dh) acc[r] += pj * vr[d];
        }
    }
    return s;
}
