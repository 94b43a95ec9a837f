// device_util.cuh: small device helpers shared by the kernels: a binary search
// over sorted key lists, warp-wide reductions (xor shuffles, every lane gets
// the result), and a thread block's sum in double in a fixed order.
#pragma once

#include <stdint.h>

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
