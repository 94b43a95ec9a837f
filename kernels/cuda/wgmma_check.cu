// wgmma_check.cu: the check of wgmma.cuh's pieces (wgmma_check_cuda, ops_cuda.h): one warpgroup computes
// C[64][64] = A[64][K] · B with m64n64k16 steps, A's fragments loaded from global memory into registers,
// B staged in shared memory in the core-matrix layout of either major-ness, so that the descriptor's
// strides, the fragment layouts and the fences are judged against a product on the CPU before a kernel
// is built on them. Compiled for sm_90a only (its own CMake target): elsewhere the launcher says so.
#include <cuda_bf16.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "ops_cuda.h"
#include "wgmma.cuh"

// Grid 1, 128 threads. A [64][K] bf16 row-major; B [64][K] (TRANS_B 0: B(k, n) = Bm[n][k]) or [K][64]
// (TRANS_B 1: B(k, n) = Bm[k][n]); C [64][64] fp32. K a multiple of 16, at most 256. The whole of B is
// staged once: K-major, core matrix (n/8, k/8) at (n/8)·SBO + (k/8)·LBO with LBO 128 and SBO 16·K
// (a core row of n holds all of K); MN-major, LBO 1024 and SBO 128 (a core row of k holds all of N).
template <int TRANS_B>
__global__ void __launch_bounds__(128) wgmma_check_kernel(float *C, const __nv_bfloat16 *A, const __nv_bfloat16 *Bm,
                                                          int K) {
    DYNAMIC_SMEM_AS(__nv_bfloat16, Bs);
    const uint32_t lbo = TRANS_B ? 1024u : 128u, sbo = TRANS_B ? 128u : 16u * (uint32_t)K;
    for (int e = threadIdx.x; e < 64 * K; e += blockDim.x) {
        const int n = TRANS_B ? e % 64 : e / K, k = TRANS_B ? e / 64 : e % K;  // Bm read in its own order
        const int row = TRANS_B ? k % 8 : n % 8, col = TRANS_B ? n % 8 : k % 8;
        const uint32_t off = (uint32_t)(n / 8) * sbo + (uint32_t)(k / 8) * lbo + 16u * row + 2u * col;
        Bs[off / 2] = Bm[e];
    }
    wg_fence_proxy();
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int ra = 16 * warp + g, rb = ra + 8;
    float d[32];
#pragma unroll
    for (int i = 0; i < 32; i++) d[i] = 0.0f;
    WgDesc desc = wg_desc(Bs, lbo, sbo);
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4];
        const int rows[4] = {ra, rb, ra, rb}, cols[4] = {2 * c, 2 * c, 2 * c + 8, 2 * c + 8};
#pragma unroll
        for (int i = 0; i < 4; i++) a[i] = *(const uint32_t *)(A + (int64_t)rows[i] * K + k0 + cols[i]);
        wg_fence();
        wgmma_m64n64k16<TRANS_B>(d, a, desc, k0 > 0);
        wg_commit();
        wg_wait<0>();
        desc = wg_desc_add(desc, 2 * lbo);  // two core matrices along K
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int col = 8 * j + 2 * c;
        C[ra * 64 + col] = d[4 * j], C[ra * 64 + col + 1] = d[4 * j + 1];
        C[rb * 64 + col] = d[4 * j + 2], C[rb * 64 + col + 1] = d[4 * j + 3];
    }
}

extern "C" int wgmma_check_cuda(float *C, const void *A, const void *B, int K, int trans_b) {
    if (K <= 0 || K % 16 || K > 256) return -1;
    if (!wg_device_ok()) return -2;  // the code is sm_90a's only
    const size_t smem = (size_t)64 * K * 2;
    if (trans_b)
        launch_checked(wgmma_check_kernel<1>, dim3(1), dim3(128), smem, C, (const __nv_bfloat16 *)A,
                       (const __nv_bfloat16 *)B, K);
    else
        launch_checked(wgmma_check_kernel<0>, dim3(1), dim3(128), smem, C, (const __nv_bfloat16 *)A,
                       (const __nv_bfloat16 *)B, K);
    return 0;
}
