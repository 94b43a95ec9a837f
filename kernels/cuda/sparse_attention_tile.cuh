// sparse_attention_tile.cuh: the pieces of the block-shared sparse attention that do not depend on which
// tensor-core instruction computes the products — shared by the mma.sync kernel (sparse_attention_tc.cu)
// and the warpgroup-MMA one (sparse_attention_wg.cu), whose per-warp fragments are the same: a warp owns
// 16 rows, its lane (g = lane / 4, c = lane % 4) rows ra = r0 + g and rb = r0 + g + 8; s[j] is the C
// fragment of keys c0 + 8j … + 7 (elements 0, 1: row a, columns 2c, 2c + 1; 2, 3: row b); o[n] the same for
// output columns 8n … 8n + 7.
#pragma once

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "device_util.cuh"
#include "mma.cuh"

// Where a thread block and this thread stand: thread block blockIdx.x is (query block *b, KV head *kh, head
// group *hg) with b the slowest, counted from query block b_first; its rows are hpc·bsel (query head major),
// warp w's 16 of them head *h, rows *r0 … *r0 + 15 of the block's *nt queries from *t0; G = Hq / Hkv.
static __device__ __forceinline__ void sa_block(int T, int Hq, int Hkv, int hpc, int bsel, int b_first, int *b, int *kh,
                                                int *hg, int *h, int *r0, int *t0, int *nt) {
    const int G = Hq / Hkv, n_hg = G / hpc, warp = threadIdx.x / 32, strips = bsel / 16;
    *b = b_first + blockIdx.x / (Hkv * n_hg);
    const int rest = blockIdx.x % (Hkv * n_hg);
    *kh = rest / n_hg, *hg = rest % n_hg;
    *h = *kh * G + *hg * hpc + warp / strips, *r0 = 16 * (warp % strips);
    *t0 = *b * bsel, *nt = min(bsel, T - *t0);
}

// The q rows of a thread block (rows = hpc·bsel, query head major: row rr is head kh·G + hg·hpc + rr / bsel,
// query t0 + rr % bsel; zero past T) into Qs [rows][D + TILE_PAD].
template <int D>
static __device__ __forceinline__ void sa_stage_q(__nv_bfloat16 *Qs, const __nv_bfloat16 *q, int rows, int t0, int nt,
                                                  int64_t nq, int kh, int G, int hg, int hpc, int bsel) {
    constexpr int LDH = D + TILE_PAD, CH = D / 8;
    for (int e = threadIdx.x; e < rows * CH; e += blockDim.x) {
        const int rr = e / CH, ch = e % CH, hh = kh * G + hg * hpc + rr / bsel, r = rr % bsel;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < nt) val = *(const uint4 *)(q + (int64_t)(t0 + r) * nq + (int64_t)hh * D + 8 * ch);
        *(uint4 *)(Qs + rr * LDH + 8 * ch) = val;
    }
}

// One key tile's online-softmax step for this lane's rows a, b: s (raw q·k) masked to the visible keys
// (U: bits of the tile's 64 keys, else the first nv of the block's keys, tile start c0); the running maxima
// m (log2 units) and sums l updated; P = bf16(2^(s·scale_log2 − m)) packed into pf, the A fragments of the
// P·V product (the C layout of two n-tiles is the A layout of one k-step; l sums the rounded weights);
// *al_a, *al_b the factors the O accumulators are to be rescaled by (exactly 1 where the maximum did not
// move). A row that has seen nothing yet keeps m = −∞, α = 1 and weights 0. FULL: the caller knows every
// key of the tile is visible to both rows (not U; c0 + 8·NS ≤ nv_a, nv_b), so the mask, a no-op there, is
// not evaluated. The softmax's element-wise work bounds these kernels, so a score costs one max, one fused
// multiply-add and one 2^x on the special-function unit (fast_exp2): the maximum is taken over the raw
// scores and scaled once (scale_log2 > 0, so it commutes with the scaling).
template <int NS, bool U, bool FULL = false>
static __device__ __forceinline__ void sa_softmax_tile(float s[NS][4], uint32_t pf[NS / 2][4], int c0, int nv_a,
                                                       int nv_b, uint64_t bits_a, uint64_t bits_b, float scale_log2,
                                                       float *m_a, float *m_b, float *l_a, float *l_b, float *al_a,
                                                       float *al_b) {
    const int c = threadIdx.x % 4;
    float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
    for (int j = 0; j < NS; j++) {
        const int col = c0 + 8 * j + 2 * c;
#pragma unroll
        for (int e = 0; e < 2; e++) {
            if (!FULL) {
                const int i = 8 * j + 2 * c + e;
                const bool va = U ? (bits_a >> i) & 1 : col + e < nv_a;
                const bool vb = U ? (bits_b >> i) & 1 : col + e < nv_b;
                if (!va) s[j][e] = -INFINITY;
                if (!vb) s[j][2 + e] = -INFINITY;
            }
            mx_a = fmaxf(mx_a, s[j][e]);
            mx_b = fmaxf(mx_b, s[j][2 + e]);
        }
    }
    const float mn_a = fmaxf(*m_a, quad_max(mx_a) * scale_log2), mn_b = fmaxf(*m_b, quad_max(mx_b) * scale_log2);
    *al_a = mn_a == *m_a ? 1.0f : fast_exp2(*m_a - mn_a);  // m = −∞ before: 2^−∞ = 0, nothing to keep
    *al_b = mn_b == *m_b ? 1.0f : fast_exp2(*m_b - mn_b);
    const float nbase_a = mn_a == -INFINITY ? 0.0f : -mn_a, nbase_b = mn_b == -INFINITY ? 0.0f : -mn_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int j = 0; j < NS; j++) {
        float p0, p1, p2, p3;
        const uint32_t lo = pack_bf16(fast_exp2(fmaf(s[j][0], scale_log2, nbase_a)),
                                      fast_exp2(fmaf(s[j][1], scale_log2, nbase_a)), &p0, &p1);
        const uint32_t hi = pack_bf16(fast_exp2(fmaf(s[j][2], scale_log2, nbase_b)),
                                      fast_exp2(fmaf(s[j][3], scale_log2, nbase_b)), &p2, &p3);
        sum_a += p0 + p1, sum_b += p2 + p3;
        pf[j / 2][(j % 2) * 2 + 0] = lo;  // rows g: a0a1 (j even), a4a5 (j odd)
        pf[j / 2][(j % 2) * 2 + 1] = hi;  // rows g+8: a2a3, a6a7
    }
    *l_a = *l_a * *al_a + quad_sum(sum_a), *l_b = *l_b * *al_b + quad_sum(sum_b);
    *m_a = mn_a, *m_b = mn_b;
}

// O's rows a, b rescaled by al_a, al_b. SKIP: not at all (warp-uniform) where every row of the warp kept
// its maximum, α = 1 exactly: the same values without the D/2 multiplies a thread (the wgmma kernel
// rescales always: the branch there costs spills).
template <int ND, bool SKIP = true>
static __device__ __forceinline__ void sa_rescale(float o[ND][4], float al_a, float al_b) {
    if (SKIP && !__any_sync(0xffffffffu, al_a != 1.0f || al_b != 1.0f)) return;
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] *= al_a, o[n][1] *= al_a, o[n][2] *= al_b, o[n][3] *= al_b;
}

// out = O / l for this lane's rows (head h, queries t0 + ra, t0 + rb below nt); a row with no visible key
// attends to its own position alone (the fp32 of its bf16 value row, exact for fp32 and bf16 out).
template <int D, typename OutT>
static __device__ __forceinline__ void sa_store_rows(OutT *out, const __nv_bfloat16 *v, const float o[D / 8][4],
                                                     int t0, int nt, int ra, int rb, int nv_a, int nv_b, float l_a,
                                                     float l_b, int h, int kh, int64_t nq, int64_t nkv) {
    const int c = threadIdx.x % 4;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? rb : ra;
        if (r >= nt) continue;
        const int t = t0 + r;
        OutT *orow = out + (int64_t)t * nq + (int64_t)h * D;
        if ((half ? nv_b : nv_a) == 0) {
            const __nv_bfloat16 *vr = v + (int64_t)t * nkv + (int64_t)kh * D;
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                const int d = 8 * n + 2 * c;
                store2(orow + d, __bfloat162float(vr[d]), __bfloat162float(vr[d + 1]));
            }
            continue;
        }
        const float inv = 1.0f / (half ? l_b : l_a);  // l ≥ 1: the row's maximum has weight bf16(1) = 1
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const int d = 8 * n + 2 * c;
            store2(orow + d, o[n][2 * half] * inv, o[n][2 * half + 1] * inv);
        }
    }
}
