// sparse_attention_wg.cu: attention over block-shared supports on Hopper's warpgroup MMA
// (support_attention_block_wg_cuda, oracle_cuda.h) — the same function as sparse_attention_tc.cu's
// kernel (block b's queries attend with every head to the sorted keys of sel row b that are ≤ their
// position, or to themselves alone), with both products on wgmma (kernels/cuda/wgmma.cuh) instead of
// mma.sync. Opt-in while it is measured: support_attention_block_tc_cuda runs it under
// SPINDLE_SPARSE_WGMMA=1 for the shapes it takes (d_h 64 or 128, head rows hpc·bsel a multiple of 64).
//
// One thread block per (block b, KV head, group of hpc query heads), rows hpc·bsel ≤ 128 (query head
// major) as in the mma.sync kernel, one warpgroup (4 warps) per 64 rows; warp w still owns rows
// 16w … 16w + 15, whose fragments are those of mma.sync (wgmma's per-warp layouts are the same), so the
// online softmax, the P packing and the output are that kernel's (sparse_attention_tile.cuh). Per tile of 64
// gathered keys:
//   S = Q·Kᵀ: D/16 m64n64k16 steps, Q's A fragments from Qs by ldmatrix (all of them loaded before the
//     first step: wgmma reads register operands asynchronously), K as B from shared memory, K-major;
//   O += P·V: 4 k-steps of 16 keys × D/64 column halves, P's A fragments packed from S's accumulators,
//     V as B, MN-major.
// K and V tiles are staged by cp.async in 16-byte chunks straight into wgmma's core-matrix layout without
// swizzling: key j's chunk ch (d 8ch … 8ch + 7) at byte (j / 8)·16·D + 128·ch + 16·(j % 8) in both —
// for K (B[d][key], K-major) core matrices step 128 bytes along d (LBO) and 16·D along keys (SBO); for V
// (B[key][d], MN-major) 16·D along keys (LBO) and 128 along d (SBO). Double-buffered; every thread fences
// its landed copies into the async proxy before the tile's barrier. A warpgroup skips a tile none of
// its 64 rows sees (the instruction is collective over the warpgroup). Shared memory: Qs [rows][D + 8]
// + 4 tiles of 64 × D bf16 = 99,328 bytes at rows 128, D 128; two thread blocks of 8 warps an SM
// (MINB 2; ptxas, nvcc 13: 128 registers at D 128, no spills). At that budget ptxas serializes the
// wgmma instructions (its C7520: they sit under the warpgroup's skip, a branch it cannot prove uniform).
// MINB 1 (SPINDLE_SPARSE_WGMMA=2): one thread block an SM, up to 255 registers (155 at D 128), and no
// skip — every warpgroup takes every tile of the block, a tile none of its rows sees adding zero
// weights — so nothing is serialized. Measured slower (H100, 128K: 32.6 against 22.7 ms,
// docs/performance.md): half the warps an SM hide less latency than the unserialized products gain. It
// stays as the baseline for a pipelined version with a producer warp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline_primitives.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "env.h"
#include "mma.cuh"
#include "oracle_cuda.h"
#include "sparse_attention_tile.cuh"
#include "wgmma.cuh"

enum {
    WG_BK = 64,        // gathered keys per tile
    WG_MAX_ROWS = 128, // query rows per thread block (two warpgroups)
};

// Stages key rows keys[0 … n) of src (row stride `stride` elements) as a 64 × D tile in the core-matrix
// layout above; rows j ≥ n are zero. Every thread of the block takes part; not waited for.
template <int D>
static __device__ __forceinline__ void wg_stage_rows(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int64_t stride,
                                                     const int32_t *keys, int n) {
    constexpr int CH = D / 8;
    for (int e = threadIdx.x; e < WG_BK * CH; e += blockDim.x) {
        const int j = e / CH, ch = e % CH;
        __nv_bfloat16 *d = dst + (j / 8) * 8 * D + 64 * ch + 8 * (j % 8);
        if (j < n) __pipeline_memcpy_async(d, src + (int64_t)keys[j] * stride + 8 * ch, 16);
        else *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u);
    }
}

template <int D, typename OutT, int MINB>
__global__ void __launch_bounds__(WG_MAX_ROWS * 2, MINB)
    support_attention_block_wg_kernel(OutT *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                      const __nv_bfloat16 *v, int T, int Hq, int Hkv, int hpc, float scale_log2,
                                      int topk, int bsel, const int32_t *sel, const int32_t *n_sel) {
    constexpr int LDH = D + TILE_PAD, ND = D / 8, NO = D / 64, NS = WG_BK / 8, KQ = D / 16;
    constexpr uint32_t CORE = 128, OCT = 16 * D;  // core-matrix strides: along d, along keys (bytes)
    DYNAMIC_SMEM_AS(unsigned char, wg_smem);
    __shared__ int warp_nv[WG_MAX_ROWS / 16];
    const int rows = hpc * bsel;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)wg_smem;
    __nv_bfloat16 *Ks0 = Qs + rows * LDH, *Vs0 = Ks0 + WG_BK * D;
    __nv_bfloat16 *Ks1 = Vs0 + WG_BK * D, *Vs1 = Ks1 + WG_BK * D;

    const int G = Hq / Hkv, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    int b, kh, hg, h, r0, t0, nt;
    sa_block(T, Hq, Hkv, hpc, bsel, 0, &b, &kh, &hg, &h, &r0, &t0, &nt);
    const int64_t nq = (int64_t)Hq * D, nkv = (int64_t)Hkv * D;
    const int32_t *keys = sel + (int64_t)b * topk;
    const int n_all = min(max(n_sel[b], 0), topk);
    const int n_keys = count_le(keys, n_all, t0 + nt - 1);  // keys visible to some row here

    sa_stage_q<D>(Qs, q, rows, t0, nt, nq, kh, G, hg, hpc, bsel);
    if (n_keys > 0) {
        wg_stage_rows<D>(Ks0, k + (int64_t)kh * D, nkv, keys, min(WG_BK, n_keys));
        wg_stage_rows<D>(Vs0, v + (int64_t)kh * D, nkv, keys, min(WG_BK, n_keys));
    }
    __pipeline_commit();

    // This lane's rows r0 + g, r0 + g + 8 and their visible prefixes; the warpgroup's longest.
    const int ra = r0 + g, rb = r0 + g + 8;
    const int nv_a = ra < nt ? count_le(keys, n_all, t0 + ra) : 0;
    const int nv_b = rb < nt ? count_le(keys, n_all, t0 + rb) : 0;
    const int nv_warp = warp_max(max(nv_a, nv_b));
    if (lane == 0) warp_nv[warp] = nv_warp;
    __syncthreads();
    const int w0 = warp & ~3;
    const int nv_group = max(max(warp_nv[w0], warp_nv[w0 + 1]), max(warp_nv[w0 + 2], warp_nv[w0 + 3]));

    const __nv_bfloat16 *qrow = Qs + (warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);
    float o[ND][4];  // column half hh of O is o[8hh … 8hh + 7]: one wgmma accumulator of 32
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

    const int n_tiles = (n_keys + WG_BK - 1) / WG_BK;
    for (int it = 0; it < n_tiles; it++) {
        const int c0 = it * WG_BK;
        __nv_bfloat16 *Ks = (it & 1) ? Ks1 : Ks0, *Vs = (it & 1) ? Vs1 : Vs0;
        if (it + 1 < n_tiles) {  // the next tile into the other buffers (free since the last barrier)
            const int nk1 = min(WG_BK, n_keys - c0 - WG_BK);
            wg_stage_rows<D>((it & 1) ? Ks0 : Ks1, k + (int64_t)kh * D, nkv, keys + c0 + WG_BK, nk1);
            wg_stage_rows<D>((it & 1) ? Vs0 : Vs1, v + (int64_t)kh * D, nkv, keys + c0 + WG_BK, nk1);
        }
        __pipeline_commit();
        __pipeline_wait_prior(1);  // this tile's copies by this thread have landed …
        wg_fence_proxy();          // … are visible to wgmma's reads …
        __syncthreads();           // … and so are every thread's

        if (MINB == 1 || c0 < nv_group) {  // warpgroup-uniform
            // S = Q·Kᵀ over the tile's 64 keys: s[j] as the mma.sync kernel's (keys c0 + 8j …).
            uint32_t qa[KQ][4];
#pragma unroll
            for (int kk = 0; kk < KQ; kk++) ldsm_x4(qa[kk], qrow + 16 * kk);
            float s[NS][4];
            const WgDesc kd = wg_desc(Ks, CORE, OCT);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < KQ; kk++)
                wgmma_m64n64k16<0>(&s[0][0], qa[kk], wg_desc_add(kd, 2 * CORE * kk), kk > 0);
            wg_commit();
            wg_wait<0>();
            wg_pin(&s[0][0], 32);
            wg_pin(&qa[0][0], 4 * KQ);
            uint32_t pf[WG_BK / 16][4];  // P as A fragments, one per 16 keys
            float al_a, al_b;
            sa_softmax_tile<NS, false>(s, pf, c0, nv_a, nv_b, 0, 0, scale_log2, &m_a, &m_b, &l_a, &l_b, &al_a, &al_b);
            sa_rescale<ND, false>(o, al_a, al_b);
            // O += P·V: k-step kk = keys 16kk … 16kk + 15 (two key octets), column half hh = d 64hh ….
            const WgDesc vd = wg_desc(Vs, OCT, CORE);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < WG_BK / 16; kk++)
#pragma unroll
                for (int hh = 0; hh < NO; hh++)
                    wgmma_m64n64k16<1>(&o[8 * hh][0], pf[kk], wg_desc_add(vd, 2 * OCT * kk + 8 * CORE * hh), 1);
            wg_commit();
            wg_wait<0>();
            wg_pin(&o[0][0], 4 * ND);
            wg_pin(&pf[0][0], 4 * (WG_BK / 16));
        }
        __syncthreads();  // every warp is done with this tile's buffers before they are refilled
    }
    __pipeline_wait_prior(0);

    // out = O / l; a row with no visible key attends to t alone.
    sa_store_rows<D, OutT>(out, v, o, t0, nt, ra, rb, nv_a, nv_b, l_a, l_b, h, kh, nq, nkv);
}

template <int D, typename OutT, int MINB>
static int wg_launch(OutT *out, const void *q, const void *k, const void *v, int T, int Hq, int Hkv, float scale,
                     int topk, int bsel, const int32_t *sel, const int32_t *n_sel) {
    const int G = Hq / Hkv;
    int hpc = 0;  // heads per thread block: the largest divisor of G with hpc·bsel ≤ 128 and a multiple of 64
    for (int d = 1; d <= G; d++)
        if (G % d == 0 && d * bsel <= WG_MAX_ROWS && (d * bsel) % 64 == 0) hpc = d;
    if (hpc == 0) return -1;
    const int rows = hpc * bsel;
    const size_t smem = sizeof(__nv_bfloat16) * ((size_t)rows * (D + TILE_PAD) + (size_t)4 * WG_BK * D);
    const int64_t n_blocks = (T + (int64_t)bsel - 1) / bsel, grid = n_blocks * Hkv * (G / hpc);
    if (grid > INT_MAX) return -1;
    CUDA_CHECK(cudaFuncSetAttribute(support_attention_block_wg_kernel<D, OutT, MINB>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    launch_checked(support_attention_block_wg_kernel<D, OutT, MINB>, dim3((unsigned)grid), dim3(32 * (rows / 16)), smem,
                   out, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, T, Hq, Hkv, hpc,
                   scale * LOG2E, topk, bsel, sel, n_sel);
    return 0;
}

extern "C" int support_attention_block_wg_takes(int Hq, int Hkv, int dh, int bsel) {
    if ((dh != 64 && dh != 128) || Hkv <= 0 || Hq <= 0 || Hq % Hkv || bsel < 16 || bsel > WG_MAX_ROWS || bsel % 16)
        return 0;
    const int G = Hq / Hkv;
    for (int d = 1; d <= G; d++)
        if (G % d == 0 && d * bsel <= WG_MAX_ROWS && (d * bsel) % 64 == 0) return 1;
    return 0;
}

// The kernel of MINB thread blocks an SM (2: the default; 1: the variant above).
template <int MINB>
static int wg_run(void *out, DType out_type, const void *q, const void *k, const void *v, int T, int Hq, int Hkv,
                  int dh, float scale, int topk, int bsel, const int32_t *sel, const int32_t *n_sel) {
    if (!support_attention_block_wg_takes(Hq, Hkv, dh, bsel) || topk < 1) return -1;
    if (!wg_device_ok()) return -1;  // the code is sm_90a's
#define WG_DT(D)                                                                                                   \
    (out_type == DT_F32 ? wg_launch<D, float, MINB>((float *)out, q, k, v, T, Hq, Hkv, scale, topk, bsel, sel,     \
                                                    n_sel)                                                         \
     : out_type == DT_BF16                                                                                         \
         ? wg_launch<D, __nv_bfloat16, MINB>((__nv_bfloat16 *)out, q, k, v, T, Hq, Hkv, scale, topk, bsel, sel,    \
                                             n_sel)                                                                \
         : wg_launch<D, __half, MINB>((__half *)out, q, k, v, T, Hq, Hkv, scale, topk, bsel, sel, n_sel))
    const int rc = dh == 64 ? WG_DT(64) : WG_DT(128);
#undef WG_DT
    return rc;
}

extern "C" int support_attention_block_wg_minb_cuda(int minb, void *out, DType out_type, const void *q,
                                                    const void *k, const void *v, int T, int Hq, int Hkv, int dh,
                                                    float scale, int topk, int bsel, const int32_t *sel,
                                                    const int32_t *n_sel) {
    if (minb == 1) return wg_run<1>(out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);
    if (minb == 2) return wg_run<2>(out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);
    return -1;
}

// SPINDLE_SPARSE_WGMMA=2 picks the one-block variant, anything else the default kernel.
extern "C" int support_attention_block_wg_cuda(void *out, DType out_type, const void *q, const void *k, const void *v,
                                               int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel,
                                               const int32_t *sel, const int32_t *n_sel) {
    const int minb = env_long("SPINDLE_SPARSE_WGMMA", 0, 0, 2) == 2 ? 1 : 2;
    return support_attention_block_wg_minb_cuda(minb, out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, sel,
                                                n_sel);
}
