// sparse_attention_tc.cu: attention over block-shared supports on tensor cores
// (support_attention_block_tc_cuda, oracle_cuda.h). Same semantics as
// support_attention_cuda / support_attention_cpu for bsel > 1: row b = t / bsel
// of sel holds n_sel[b] sorted key indices; query t attends with every head to
// those ≤ t, or to {t} alone when there is none. q, k, v are bf16, the output
// and every accumulation fp32. Statistics (SupportStatsDev, oracle_cuda.h): each
// row's mass Σ_{j∈S_t} exp(s·q·k − lse) comes from its final maximum m and sum l
// (l·2^(m − lse·log2 e): the same bf16-rounded weights the output is made of), and
// support_attention_counts_cuda adds their head average to recall and |S_t| to
// support, as support_attention_cuda does. Judged against the CPU twin on bf16-rounded inputs
// by tests/twins/oracle.c ("support_attention_block_tc"). The bf16 forward
// uses it for block-shared supports. The output is fp32, bf16 or f16 (DType).
//
// Shapes: the kernel takes dh ∈ {64, 128, 256} and bsel a multiple of 16 up to
// 128. At dh 64 / 128 two thread blocks share an SM; at dh 256 (Gemma 3,
// Qwen3.5) one does: a lane's 16 × 256 fp32 O accumulators are 128 registers,
// which only fit under the 255-register cap of one 256-thread block per SM,
// and its shared memory is 198 KiB (Qs and the double-buffered K/V tiles at
// 264 bf16 a row). Every other call — bsel 1,
// other bsel, unaligned rows — is served by support_attention_cuda on fp32
// copies of q, k, v (the same function of the bf16 values, without the bf16
// rounding of the weights), the output converted when it is 16-bit: the op
// never declines. support_attention_block_tc_takes says which path runs.
//
// Why tensor cores fit here: every query of a block shares one key set, so the
// block is a dense (bsel × |S_B|) attention problem over gathered keys — the
// shape of a flash-attention tile, with the causal mask replaced by "key index
// ≤ query position" (keys are sorted, so every row sees a prefix of the set).
//
// One thread block per (block b, KV head, group of HPC query heads of that KV
// head): its rows are HPC × bsel (query head major), at most 128, one warp per
// 16 rows. The HPC heads share every gathered K/V tile, so a tile is gathered
// once per HPC heads instead of once per head (HPC = the largest divisor of the
// group size with HPC·bsel ≤ 128: 2 for Qwen3-8B's and Qwen3.5's groups of 4 at
// bsel 64).
//
// The warps work in registers, flash-attention-2 style, with mma.sync
// m16n8k16 (bf16 in, fp32 accumulate; fragment layouts in mma.cuh):
//   - the warp's 16 q rows are read as A fragments (ldmatrix.x4) from Qs per
//     tile, two k-steps at a time (keeping them all in registers would cost 32
//     more per thread, and one thread block per SM instead of two);
//   - per tile of 64 gathered keys, S = Q·Kᵀ is 8 C fragments (B fragments
//     straight from the row-major K tile with ldmatrix: a K row is a column of
//     Kᵀ); the online softmax runs on them with the quad of 4 lanes that share
//     a row (shuffles), in log2 units (s = scale·log2(e)·q·k);
//   - P = bf16(2^(s − m)) is packed from the C fragments of S directly into
//     the A fragments of the P·V product (the C layout of two n-tiles is the A
//     layout of one k-step), and l sums the rounded weights, so a row is an
//     exact convex combination of its value rows up to that rounding;
//   - O (16 × D fp32) stays in C fragments; α = 2^(m_old − m_new) rescales
//     them in place (each lane knows its rows);
//   - V's B fragments come from the row-major V tile with ldmatrix.trans.
// K and V tiles are double-buffered in shared memory (cp.async, 16-byte
// chunks; rows past the last key are zero, so a masked weight 0 never meets a
// NaN): tile i + 1 is in flight while tile i is computed. Shared memory:
// Qs [rows][D+8] (only to feed ldmatrix) + 2 × (Ks, Vs) [64][D+8] bf16 =
// 104,448 bytes at rows = 128, D = 128; the 8-element row padding shifts
// consecutive rows by 4 banks, so ldmatrix's 8 row reads hit distinct banks.
// Causal skipping: a warp whose 16 rows see no key of a tile skips its
// arithmetic (it still takes part in the copies and barriers).
// Finally out = O / l, or, for a row with no visible key, the value row of t
// itself (weight 1, fp32 of the bf16 v).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_pipeline_primitives.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "env.h"
#include "mma.cuh"
#include "ops_cuda.h"
#include "oracle_cuda.h"
#include "sparse_attention_tile.cuh"

enum {
    TC_BK = 64,       // gathered keys per tile
    TC_MAX_ROWS = 128, // query rows (heads × bsel) per thread block; also the largest bsel
    TC_WIDE_ROWS = 256, // the wide variant's rows (SPINDLE_TC_ROWS=256, d_h ≤ 128)
};

// Rows a thread block takes at head size D: TC_MAX_ROWS, or TC_WIDE_ROWS where
// SPINDLE_TC_ROWS=256 asks for it and the tiles fit (d_h ≤ 128: Qs and the K/V
// double buffer are 139 KB at d_h 128). The wide variant runs one thread block
// of 16 warps an SM instead of two of 8 — the same warps, and the same register
// cap of 128 a thread — and each gathered K/V tile serves twice the query heads
// (GQA groups of 4 at b_sel 64: every tile gathered once per KV head instead of
// twice). A variant for the bench to compare; results are the same function of
// the inputs (the heads of a thread block do not interact).
static int tc_rows(int D) {
    const char *e = getenv("SPINDLE_TC_ROWS");
    return D <= 128 && e && !strcmp(e, "256") ? TC_WIDE_ROWS : TC_MAX_ROWS;
}

// ---- kernel ---------------------------------------------------------------------------

// Thread block: (block b, KV head kh, head group hg) from blockIdx.x with b the
// slowest; hpc heads × bsel rows, warp w: head kh·G + hg·hpc + w / (bsel/16),
// rows 16·(w % (bsel/16)) … + 15 of the block. scale_log2 = scale·log2(e).

// The union path's arrays (U = true), all device, made by union_build: block b
// of bsel queries gathers the n_union[b] sorted keys at keys + koff[b]; query
// row r of the block sees union key u when bit u of its mask row
// mask + moff[b] + r·mw[b] (mw[b] words, two per tile of 64 keys) is set; n_vis[t]
// counts query t's visible keys (0: it attends to {t} alone).
struct UnionArgs {
    const int32_t *keys, *n_union, *mw, *n_vis;
    const int64_t *koff, *moff;
    const uint32_t *mask;
};

// Statistics: mass[t, h] = Σ_{j∈S_t} exp(s·q·k − lse[h, t]) for this lane's rows a, b (head h, queries
// t0 + ra, t0 + rb below nt), from the row's final maximum m (log2 units) and sum l of its bf16-rounded
// weights: l·2^(m − lse·log2 e). A row with no visible key attends to t alone: exp(s·q_t·k_t − lse), its
// score a dot product of the bf16 rows that the quad of lanes sharing the row splits four ways (taken for
// both rows whatever they need, so that the quad's shuffles see all four lanes). Lane c = 0 writes.
template <int D>
static __device__ void tc_store_mass(float *mass, const float *lse, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                     int T, int Hq, int t0, int nt, int ra, int rb, int nv_a, int nv_b, float m_a,
                                     float m_b, float l_a, float l_b, int h, int kh, int64_t nq, int64_t nkv,
                                     float scale_log2) {
    const int c = threadIdx.x % 4;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = half ? rb : ra, t = t0 + min(r, nt - 1);  // rows past the block read a valid row, write nothing
        const __nv_bfloat16 *qr = q + (int64_t)t * nq + (int64_t)h * D, *kr = k + (int64_t)t * nkv + (int64_t)kh * D;
        float dot = 0.0f;
        for (int d = c; d < D; d += 4) dot = fmaf(__bfloat162float(qr[d]), __bfloat162float(kr[d]), dot);
        dot = quad_sum(dot);
        if (r >= nt || c != 0) continue;
        const float l2 = lse[(int64_t)h * T + t] * LOG2E;
        const float w = (half ? nv_b : nv_a) == 0 ? exp2f(dot * scale_log2 - l2)
                                                   : (half ? l_b : l_a) * exp2f((half ? m_b : m_a) - l2);
        mass[(int64_t)t * Hq + h] = w;
    }
}

template <int D, typename OutT, bool U, int MAXR>
__global__ void __launch_bounds__(MAXR * 2, D > 128 || MAXR > TC_MAX_ROWS ? 1 : 2)
    support_attention_block_tc_kernel2(OutT *out, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                       const __nv_bfloat16 *v, int T, int Hq, int Hkv, int hpc, float scale_log2,
                                       int topk, int bsel, const int32_t *sel, const int32_t *n_sel, UnionArgs ua,
                                       float *mass, const float *lse, int b_first) {
    constexpr int LDH = D + TILE_PAD;  // Qs, Ks, Vs rows (bf16 elements)
    constexpr int ND = D / 8;        // n-tiles of O
    constexpr int NS = TC_BK / 8;    // n-tiles of S per key tile

    DYNAMIC_SMEM_AS(unsigned char, tc_smem);
    const int rows = hpc * bsel;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)tc_smem;
    __nv_bfloat16 *Ks0 = Qs + rows * LDH, *Vs0 = Ks0 + TC_BK * LDH;
    __nv_bfloat16 *Ks1 = Vs0 + TC_BK * LDH, *Vs1 = Ks1 + TC_BK * LDH;

    const int G = Hq / Hkv, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    int b, kh, hg, h, r0, t0, nt;
    sa_block(T, Hq, Hkv, hpc, bsel, b_first, &b, &kh, &hg, &h, &r0, &t0, &nt);
    const int64_t nq = (int64_t)Hq * D, nkv = (int64_t)Hkv * D;
    const int32_t *keys = U ? ua.keys + ua.koff[b] : sel + (int64_t)b * topk;
    const int n_all = U ? ua.n_union[b] : min(max(n_sel[b], 0), topk);
    const int n_keys = U ? n_all : count_le(keys, n_all, t0 + nt - 1);  // keys visible to some row here

    // Stage the q rows (zero rows past T), start the first tile.
    sa_stage_q<D>(Qs, q, rows, t0, nt, nq, kh, G, hg, hpc, bsel);
    if (n_keys > 0) {
        cp_async_rows<D, TC_BK, true>(Ks0, k + (int64_t)kh * D, nkv, keys, min(TC_BK, n_keys));
        cp_async_rows<D, TC_BK, true>(Vs0, v + (int64_t)kh * D, nkv, keys, min(TC_BK, n_keys));
    }
    __pipeline_commit();
    __syncthreads();

    // This lane's rows: r0 + g and r0 + g + 8; their visible prefix of the keys.
    const int ra = r0 + g, rb = r0 + g + 8;
    // (U: their counts of visible keys, and their mask rows.)
    const int nv_a = ra < nt ? (U ? ua.n_vis[t0 + ra] : count_le(keys, n_all, t0 + ra)) : 0;
    const int nv_b = rb < nt ? (U ? ua.n_vis[t0 + rb] : count_le(keys, n_all, t0 + rb)) : 0;
    const int nv_warp = warp_max(max(nv_a, nv_b));
    // The fewest keys a row of the warp sees (rows past the block: 0): a tile ending at or below it is
    // visible to every row of the warp (sa_softmax_tile's FULL). Warp-uniform.
    const int nv_min = U ? 0 : warp_min(min(nv_a, nv_b));
    const uint32_t *mrow_a = NULL, *mrow_b = NULL;
    if (U) {
        const int64_t mb = ua.moff[b];
        const int w = ua.mw[b];
        if (ra < nt) mrow_a = ua.mask + mb + (int64_t)ra * w;
        if (rb < nt) mrow_b = ua.mask + mb + (int64_t)rb * w;
    }

    // This lane's ldmatrix row of the warp's q rows (A fragments, re-read per tile).
    const __nv_bfloat16 *qrow = Qs + (warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

    const int n_tiles = (n_keys + TC_BK - 1) / TC_BK;
    for (int it = 0; it < n_tiles; it++) {
        const int c0 = it * TC_BK;
        __nv_bfloat16 *Ks = (it & 1) ? Ks1 : Ks0, *Vs = (it & 1) ? Vs1 : Vs0;
        if (it + 1 < n_tiles) {  // the next tile into the other buffers (free since the last barrier)
            const int nk1 = min(TC_BK, n_keys - c0 - TC_BK);
            cp_async_rows<D, TC_BK, true>((it & 1) ? Ks0 : Ks1, k + (int64_t)kh * D, nkv, keys + c0 + TC_BK, nk1);
            cp_async_rows<D, TC_BK, true>((it & 1) ? Vs0 : Vs1, v + (int64_t)kh * D, nkv, keys + c0 + TC_BK, nk1);
        }
        __pipeline_commit();        // possibly empty: keeps the group count uniform
        __pipeline_wait_prior(1);   // this tile's group has landed (this thread's copies) …
        __syncthreads();            // … and every thread's

        // U: the rows' membership bits of this tile's 64 keys (bit i: key c0 + i).
        uint64_t bits_a = 0, bits_b = 0;
        if (U) {
            if (mrow_a) bits_a = (uint64_t)mrow_a[2 * it] | (uint64_t)mrow_a[2 * it + 1] << 32;
            if (mrow_b) bits_b = (uint64_t)mrow_b[2 * it] | (uint64_t)mrow_b[2 * it + 1] << 32;
        }
        // Warp-uniform: some row of the warp sees a key of this tile.
        const bool live = U ? __any_sync(0xffffffffu, (bits_a | bits_b) != 0) : c0 < nv_warp;
        if (live) {
            // S = Q·Kᵀ over the 64 keys: n-tile j holds keys c0 + 8j … + 7.
            float s[NS][4];
            mma_qk_tile<D, NS>(s, qrow, Ks, LDH);
            // Online softmax on rows a (elements 0, 1) and b (2, 3); P as A fragments, one per 16 keys.
            uint32_t pf[TC_BK / 16][4];
            float al_a, al_b;
            if (!U && c0 + TC_BK <= nv_min)  // warp-uniform
                sa_softmax_tile<NS, U, true>(s, pf, c0, nv_a, nv_b, bits_a, bits_b, scale_log2, &m_a, &m_b, &l_a, &l_b,
                                             &al_a, &al_b);
            else
                sa_softmax_tile<NS, U>(s, pf, c0, nv_a, nv_b, bits_a, bits_b, scale_log2, &m_a, &m_b, &l_a, &l_b,
                                       &al_a, &al_b);
            sa_rescale<ND>(o, al_a, al_b);
            // O += P·V: k-step kk = keys 16kk … 16kk+15; one ldmatrix.x4.trans gives the
            // B fragments of d columns 16p … 16p+7 and 16p+8 … 16p+15.
#pragma unroll
            for (int kk = 0; kk < TC_BK / 16; kk++) {
                const __nv_bfloat16 *vrow = Vs + (16 * kk + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);
#pragma unroll
                for (int p = 0; p < ND / 2; p++) {
                    uint32_t bv[4];
                    ldsm_x4_trans(bv, vrow + 16 * p);
                    mma_bf16(o[2 * p], pf[kk], bv[0], bv[1]);
                    mma_bf16(o[2 * p + 1], pf[kk], bv[2], bv[3]);
                }
            }
        }
        __syncthreads();  // every warp is done with this tile's buffers before they are refilled
    }
    __pipeline_wait_prior(0);  // nothing real is in flight here; no copy outlives the block

    // out = O / l; a row with no visible key attends to t alone.
    sa_store_rows<D, OutT>(out, v, o, t0, nt, ra, rb, nv_a, nv_b, l_a, l_b, h, kh, nq, nkv);
    if (mass) tc_store_mass<D>(mass, lse, q, k, T, Hq, t0, nt, ra, rb, nv_a, nv_b, m_a, m_b, l_a, l_b, h, kh, nq, nkv,
                               scale_log2);
}

// ---- launcher ---------------------------------------------------------------------------

// The query blocks a launch takes: [b0, b0 + nb); nb < 0: b0 to the last.
struct BlockRange {
    int b0, nb;
};

template <int D, typename OutT, bool U, int MAXR>
static int support_attention_block_tc_launch(OutT *out, const void *q, const void *k, const void *v, int T, int Hq,
                                             int Hkv, float scale, int topk, int bsel, const int32_t *sel,
                                             const int32_t *n_sel, UnionArgs ua, float *mass, const float *lse,
                                             BlockRange br) {
    const int G = Hq / Hkv;
    int hpc = 1;  // heads per thread block: the largest divisor of G with hpc·bsel ≤ MAXR
    for (int d = 1; d <= G; d++)
        if (G % d == 0 && d * bsel <= MAXR) hpc = d;
    const int rows = hpc * bsel;
    const size_t smem = sizeof(__nv_bfloat16) * (size_t)(rows + 4 * TC_BK) * (D + TILE_PAD);
    if (smem > (size_t)device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin)) return -1;
    const int64_t n_all = (T + (int64_t)bsel - 1) / bsel, n_blocks = br.nb < 0 ? n_all - br.b0 : br.nb;
    const int64_t grid = n_blocks * Hkv * (G / hpc);
    if (grid > INT_MAX) return -1;
    if (grid <= 0) return 0;
    CUDA_CHECK(cudaFuncSetAttribute(support_attention_block_tc_kernel2<D, OutT, U, MAXR>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    launch_checked(support_attention_block_tc_kernel2<D, OutT, U, MAXR>, dim3((unsigned)grid), dim3(32 * (rows / 16)),
                   smem, out, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, T, Hq,
                   Hkv, hpc, scale * LOG2E, topk, bsel, sel, n_sel, ua, mass, lse, br.b0);
    return 0;
}

// The launch for head size D with the output type chosen at run time.
template <int D, bool U, int MAXR>
static int tc_launch_dt(void *out, DType out_type, const void *q, const void *k, const void *v, int T, int Hq, int Hkv,
                        float scale, int topk, int bsel, const int32_t *sel, const int32_t *n_sel, UnionArgs ua,
                        float *mass, const float *lse, BlockRange br) {
    if (out_type == DT_F32)
        return support_attention_block_tc_launch<D, float, U, MAXR>((float *)out, q, k, v, T, Hq, Hkv, scale, topk,
                                                                    bsel, sel, n_sel, ua, mass, lse, br);
    if (out_type == DT_BF16)
        return support_attention_block_tc_launch<D, __nv_bfloat16, U, MAXR>((__nv_bfloat16 *)out, q, k, v, T, Hq, Hkv,
                                                                            scale, topk, bsel, sel, n_sel, ua, mass,
                                                                            lse, br);
    return support_attention_block_tc_launch<D, __half, U, MAXR>((__half *)out, q, k, v, T, Hq, Hkv, scale, topk, bsel,
                                                                 sel, n_sel, ua, mass, lse, br);
}

// The rows variant (tc_rows) for head size D.
template <int D, bool U>
static int tc_launch_rows(void *out, DType out_type, const void *q, const void *k, const void *v, int T, int Hq,
                          int Hkv, float scale, int topk, int bsel, const int32_t *sel, const int32_t *n_sel,
                          UnionArgs ua, float *mass, const float *lse, BlockRange br) {
    if (tc_rows(D) == TC_WIDE_ROWS)  // the ternary keeps d_h 256 from instantiating the wide kernel
        return tc_launch_dt<D, U, (D <= 128 ? TC_WIDE_ROWS : TC_MAX_ROWS)>(out, out_type, q, k, v, T, Hq, Hkv, scale,
                                                                           topk, bsel, sel, n_sel, ua, mass, lse, br);
    return tc_launch_dt<D, U, TC_MAX_ROWS>(out, out_type, q, k, v, T, Hq, Hkv, scale, topk, bsel, sel, n_sel, ua, mass,
                                           lse, br);
}

// The launch for the head size dh (64, 128 or 256).
template <bool U>
static int tc_launch_dh(void *out, DType out_type, const void *q, const void *k, const void *v, int T, int Hq, int Hkv,
                        int dh, float scale, int topk, int bsel, const int32_t *sel, const int32_t *n_sel,
                        UnionArgs ua, float *mass, const float *lse, BlockRange br = BlockRange{0, -1}) {
#define TC_ROWS(D) \
    tc_launch_rows<D, U>(out, out_type, q, k, v, T, Hq, Hkv, scale, topk, bsel, sel, n_sel, ua, mass, lse, br)
    if (dh == 64) return TC_ROWS(64);
    if (dh == 128) return TC_ROWS(128);
    return TC_ROWS(256);
#undef TC_ROWS
}

// The shape checks of the kernel: 1 when it takes the call.
static int tc_takes(int Hq, int Hkv, int dh, int topk, int bsel) {
    return (dh == 64 || dh == 128 || dh == 256) && bsel >= 16 && bsel <= TC_MAX_ROWS && bsel % 16 == 0 && Hkv > 0 && Hq > 0 &&
           Hq % Hkv == 0 && topk >= 1;
}

extern "C" int support_attention_block_tc_takes(int Hq, int Hkv, int dh, int topk, int bsel) {
    return tc_takes(Hq, Hkv, dh, topk, bsel);
}

// The calls the kernel does not take: support_attention_cuda on fp32 copies (with st: its statistics).
static void tc_widened(void *out, DType out_type, const void *q, const void *k, const void *v, int T, int Hq, int Hkv,
                       int dh, float scale, int topk, int bsel, const int32_t *sel, const int32_t *n_sel,
                       const SupportStatsDev *st) {
    const int64_t nq = (int64_t)T * Hq * dh, nkv = (int64_t)T * Hkv * dh;
    float *q32 = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    float *k32 = (float *)cuda_malloc(sizeof(float) * (size_t)nkv);
    float *v32 = (float *)cuda_malloc(sizeof(float) * (size_t)nkv);
    float *o32 = out_type == DT_F32 ? (float *)out : (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    cuda_bf16_to_f32(q32, q, nq);
    cuda_bf16_to_f32(k32, k, nkv);
    cuda_bf16_to_f32(v32, v, nkv);
    support_attention_cuda(o32, st ? st->recall : NULL, st ? st->support : NULL, q32, k32, v32, st ? st->lse : NULL, T,
                           Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);
    if (out_type != DT_F32) {
        cuda_f32_to_half(out, o32, nq, out_type == DT_BF16 ? HALF_BF16 : HALF_F16);
        cuda_free(o32);
    }
    cuda_free(q32), cuda_free(k32), cuda_free(v32);  // stream-ordered: after the kernels that read them
}

// The statistics of a tensor-core run from its rows' masses [T, Hq] (bsel 1: per-query supports), the
// scratch freed after the kernel that reads it.
static void tc_stats(const SupportStatsDev *st, float *mass, int T, int Hq, int topk, int bsel, const int32_t *sel,
                     const int32_t *n_sel) {
    support_attention_counts_cuda(st->recall, st->support, mass, T, Hq, topk, bsel, sel, n_sel);
    cuda_free(mass);
}

// A [T, Hq] scratch for the rows' masses when st asks for recall (which needs st->lse), else NULL.
static float *tc_mass(const SupportStatsDev *st, int T, int Hq) {
    if (!st || !st->recall) return NULL;
    if (!st->lse) {
        fprintf(stderr, "spindle: tensor-core support attention: recall needs lse (%s:%d)\n", __FILE__, __LINE__);
        abort();
    }
    return (float *)cuda_malloc(sizeof(float) * (size_t)T * Hq);
}

extern "C" void support_attention_block_tc_cuda(void *out, const void *q, const void *k, const void *v, int T, int Hq,
                                                int Hkv, int dh, float scale, int topk, int bsel, const int32_t *sel,
                                                const int32_t *n_sel, DType out_type, const SupportStatsDev *st) {
    if (T <= 0) return;
    // cp.async and the uint4 loads of q need 16-byte aligned rows (cudaMalloc gives 256).
    const int aligned = !(((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15);
    int rc = -1;
    if (aligned && tc_takes(Hq, Hkv, dh, topk, bsel)) {
        // SPINDLE_SPARSE_WGMMA=1 (2: its one-block variant): the warpgroup-MMA kernel (sparse_attention_wg.cu)
        // where it takes the shape; not for statistics, which the mma.sync kernel keeps.
        if (!st && env_long("SPINDLE_SPARSE_WGMMA", 0, 0, 2) >= 1)
            rc = support_attention_block_wg_cuda(out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);
        if (rc != 0) {
            float *mass = tc_mass(st, T, Hq);
            rc = tc_launch_dh<false>(out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel, UnionArgs{},
                                     mass, st ? st->lse : NULL);
            if (rc == 0 && st) tc_stats(st, mass, T, Hq, topk, bsel, sel, n_sel);
            else cuda_free(mass);
        }
    }
    if (rc != 0) tc_widened(out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel, st);
}

extern "C" int support_attention_block_tc_range_cuda(void *out, const void *q, const void *k, const void *v, int T,
                                                    int Hq, int Hkv, int dh, float scale, int topk, int bsel,
                                                    const int32_t *sel, const int32_t *n_sel, DType out_type, int b0,
                                                    int nb) {
    const int n_blocks = T > 0 && bsel > 0 ? (T + bsel - 1) / bsel : 0;
    if (b0 < 0 || nb < 0 || b0 + (int64_t)nb > n_blocks) {
        fprintf(stderr, "spindle: %s: blocks [%d, %d + %d) outside the %d of T = %d, bsel = %d\n", __func__, b0, b0, nb,
                n_blocks, T, bsel);
        abort();
    }
    if (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15 || !tc_takes(Hq, Hkv, dh, topk, bsel)) return -1;
    if (nb == 0) return 0;
    return tc_launch_dh<false>(out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel, UnionArgs{},
                               NULL, NULL, BlockRange{b0, nb});
}

// ---- per-query supports as block unions --------------------------------------------------

// The visible keys of block b's queries (query t's keys ≤ t) into the bitmap
// bm over keys [0, t0 + nt − 1] (shared memory, zeroed), once per key; with
// count, n_vis[t] += query t's visible keys.
static __device__ void union_mark(uint32_t *bm, const int32_t *sel, const int32_t *n_sel, int t0, int nt, int topk) {
    for (int64_t e = threadIdx.x; e < (int64_t)nt * topk; e += blockDim.x) {
        const int r = (int)(e / topk), i = (int)(e % topk), t = t0 + r;
        if (i >= min(max(n_sel[t], 0), topk)) continue;
        const int j = sel[(int64_t)t * topk + i];
        if (j >= 0 && j <= t) atomicOr(&bm[j >> 5], 1u << (j & 31));
    }
}

static __device__ void union_bitmap(uint32_t *bm, int W, const int32_t *sel, const int32_t *n_sel, int t0, int nt,
                                    int topk) {
    for (int w = threadIdx.x; w < W; w += blockDim.x) bm[w] = 0;
    __syncthreads();
    union_mark(bm, sel, n_sel, t0, nt, topk);
    __syncthreads();
}

// n_union[b] = |∪_{t ∈ block b} {j ∈ S_t : j ≤ t}|. One thread block per block.
// with_self: a query with no visible key counts as {t} (what it attends to; the
// statistics' convention, support_attention_cpu's SupportUnion), else it adds
// nothing (the union path attends to t alone outside the union).
__global__ void union_count_kernel(int32_t *n_union, const int32_t *sel, const int32_t *n_sel, int T, int topk,
                                   int B, int with_self) {
    DYNAMIC_SMEM_AS(uint32_t, ubm);
    __shared__ int total;
    const int b = blockIdx.x, t0 = b * B, nt = min(B, T - t0), W = (t0 + nt - 1) / 32 + 1;
    if (threadIdx.x == 0) total = 0;
    union_bitmap(ubm, W, sel, n_sel, t0, nt, topk);
    if (with_self) {
        for (int r = threadIdx.x; r < nt; r += blockDim.x) {
            const int t = t0 + r;
            if (count_le(sel + (int64_t)t * topk, min(max(n_sel[t], 0), topk), t) == 0)
                atomicOr(&ubm[t >> 5], 1u << (t & 31));
        }
        __syncthreads();
    }
    int cnt = 0;
    for (int w = threadIdx.x; w < W; w += blockDim.x) cnt += __popc(ubm[w]);
    atomicAdd(&total, cnt);
    __syncthreads();
    if (threadIdx.x == 0) n_union[b] = total;
}

// The union's sorted keys at keys + koff[b], each query's membership bits
// (mask zeroed before) and n_vis (zeroed before). Shared memory: the bitmap and
// the exclusive prefix of its words' popcounts (a key's rank in the union).
__global__ void union_fill_kernel(int32_t *keys, uint32_t *mask, int32_t *n_vis, const int64_t *koff,
                                  const int64_t *moff, const int32_t *mw, const int32_t *sel, const int32_t *n_sel,
                                  int T, int topk, int B) {
    DYNAMIC_SMEM_AS(uint32_t, ubm);
    __shared__ int part[256];
    const int b = blockIdx.x, t0 = b * B, nt = min(B, T - t0), W = (t0 + nt - 1) / 32 + 1;
    uint32_t *pre = ubm + W;
    union_bitmap(ubm, W, sel, n_sel, t0, nt, topk);
    // pre[w] = Σ_{w' < w} popc(bm[w']): each thread a run of words, the runs' sums scanned by one thread.
    const int per = (W + blockDim.x - 1) / blockDim.x, w0 = min(W, (int)threadIdx.x * per), w1 = min(W, w0 + per);
    int run = 0;
    for (int w = w0; w < w1; w++) run += __popc(ubm[w]);
    part[threadIdx.x] = run;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int i = 0, acc = 0; i < (int)blockDim.x; i++) {
            const int x = part[i];
            part[i] = acc, acc += x;
        }
    __syncthreads();
    run = part[threadIdx.x];
    for (int w = w0; w < w1; w++) pre[w] = run, run += __popc(ubm[w]);
    __syncthreads();
    int32_t *kb = keys + koff[b];
    for (int w = threadIdx.x; w < W; w += blockDim.x) {
        uint32_t bits = ubm[w];
        int p = pre[w];
        while (bits) {
            kb[p++] = 32 * w + __ffs(bits) - 1;
            bits &= bits - 1;
        }
    }
    uint32_t *mb = mask + moff[b];
    const int words = mw[b];
    for (int64_t e = threadIdx.x; e < (int64_t)nt * topk; e += blockDim.x) {
        const int r = (int)(e / topk), i = (int)(e % topk), t = t0 + r;
        if (i >= min(max(n_sel[t], 0), topk)) continue;
        const int j = sel[(int64_t)t * topk + i];
        if (j < 0 || j > t) continue;
        const int u = pre[j >> 5] + __popc(ubm[j >> 5] & ((1u << (j & 31)) - 1u));
        atomicOr(&mb[(int64_t)r * words + (u >> 5)], 1u << (u & 31));
        atomicAdd(&n_vis[t], 1);
    }
}

// The bitmap and its prefix for T keys: 8 bytes per 32 keys.
static size_t union_smem(int T) { return 8 * (size_t)((T - 1) / 32 + 1); }

// Whether a union kernel's dynamic shared memory of bytes fits this device (2 KiB kept for its static part).
static int union_smem_fits(size_t bytes) {
    return bytes <= (size_t)device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin) - 2048;
}

extern "C" int support_attention_union_tc_takes(int T, int Hq, int Hkv, int dh, int topk, int ublock) {
    return T > 0 && tc_takes(Hq, Hkv, dh, topk, ublock) && union_smem_fits(union_smem(T));
}

extern "C" void support_attention_union_tc_cuda(void *out, const void *q, const void *k, const void *v, int T, int Hq,
                                                int Hkv, int dh, float scale, int topk, int ublock,
                                                const int32_t *sel, const int32_t *n_sel, DType out_type,
                                                const SupportStatsDev *st, int64_t *union_keys) {
    if (union_keys) *union_keys = 0;
    if (T <= 0) return;
    const int aligned = !(((uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 15);
    if (!aligned || !support_attention_union_tc_takes(T, Hq, Hkv, dh, topk, ublock)) {
        tc_widened(out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, 1, sel, n_sel, st);
        return;
    }
    const int nb = (T + ublock - 1) / ublock;
    const size_t smem = union_smem(T);
    CUDA_CHECK(cudaFuncSetAttribute(union_count_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem / 2));
    CUDA_CHECK(cudaFuncSetAttribute(union_fill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int32_t *d_nu = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)nb);
    launch_checked(union_count_kernel, dim3(nb), dim3(256), smem / 2, d_nu, sel, n_sel, T, topk, ublock, 0);
    // Offsets on the host: the keys' (Σ |U_b|) and the masks' (ublock rows of
    // two words per 64-key tile each).
    int32_t *nu = (int32_t *)malloc(sizeof(int32_t) * (size_t)nb * 2);
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * (size_t)nb * 2);
    if (!nu || !off) abort();
    int32_t *mw = nu + nb;
    cuda_to_host(nu, d_nu, sizeof(int32_t) * (size_t)nb);
    int64_t nk = 0, nm = 0;
    for (int b = 0; b < nb; b++) {
        mw[b] = 2 * ((nu[b] + TC_BK - 1) / TC_BK);
        off[b] = nk, off[nb + b] = nm;
        nk += nu[b], nm += (int64_t)ublock * mw[b];
    }
    int32_t *d_keys = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)(nk > 0 ? nk : 1));
    uint32_t *d_mask = (uint32_t *)cuda_malloc(sizeof(uint32_t) * (size_t)(nm > 0 ? nm : 1));
    int32_t *d_vis = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)T);
    int32_t *d_mw = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)nb);
    int64_t *d_off = (int64_t *)cuda_malloc(sizeof(int64_t) * (size_t)nb * 2);
    cuda_memset(d_mask, 0, sizeof(uint32_t) * (size_t)(nm > 0 ? nm : 1));
    cuda_memset(d_vis, 0, sizeof(int32_t) * (size_t)T);
    cuda_to_device(d_mw, mw, sizeof(int32_t) * (size_t)nb);
    cuda_to_device(d_off, off, sizeof(int64_t) * (size_t)nb * 2);
    launch_checked(union_fill_kernel, dim3(nb), dim3(256), smem, d_keys, d_mask, d_vis, (const int64_t *)d_off,
                   (const int64_t *)(d_off + nb), (const int32_t *)d_mw, sel, n_sel, T, topk, ublock);
    UnionArgs ua = {d_keys, d_nu, d_mw, d_vis, d_off, d_off + nb, d_mask};
    float *mass = tc_mass(st, T, Hq);
    if (tc_launch_dh<true>(out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, ublock, sel, n_sel, ua, mass,
                           st ? st->lse : NULL) != 0) {
        cuda_free(mass);
        tc_widened(out, out_type, q, k, v, T, Hq, Hkv, dh, scale, topk, 1, sel, n_sel, st);
    } else if (st) {
        tc_stats(st, mass, T, Hq, topk, 1, sel, n_sel);
    }
    if (union_keys) *union_keys = nk;
    cuda_free(d_nu), cuda_free(d_keys), cuda_free(d_mask), cuda_free(d_vis), cuda_free(d_mw), cuda_free(d_off);
    free(nu), free(off);
}

extern "C" int64_t support_union_keys_cuda(const int32_t *sel, const int32_t *n_sel, int T, int topk, int ublock) {
    if (T <= 0 || ublock < 1) return 0;
    const int nb = (T + ublock - 1) / ublock;
    const size_t smem = union_smem(T) / 2;  // the bitmap alone
    if (!union_smem_fits(smem)) return -1;   // T past ~1.8M keys on an H200
    CUDA_CHECK(cudaFuncSetAttribute(union_count_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int32_t *d_nu = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)nb);
    launch_checked(union_count_kernel, dim3(nb), dim3(256), smem, d_nu, sel, n_sel, T, topk, ublock, 1);
    int32_t *nu = (int32_t *)malloc(sizeof(int32_t) * (size_t)nb);
    if (!nu) abort();
    cuda_to_host(nu, d_nu, sizeof(int32_t) * (size_t)nb);
    int64_t keys = 0;
    for (int b = 0; b < nb; b++) keys += nu[b];
    cuda_free(d_nu);
    free(nu);
    return keys;
}
