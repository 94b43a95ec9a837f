// oracle_tc.cu: the attention-mass oracle's selection on tensor cores
// (oracle_select_bf16_cuda, oracle_cuda.h), for bf16 q and k as the bf16
// forward holds them. Same definitions as oracle_select_cuda (oracle.cu):
//   P_t(j) = (1/Hq) Σ_h exp(s·q_{h,t}·k_{h/G,j} − lse_{h,t}),  j ≤ t
//   per query (bsel = 1): row t = P_t over j ≤ t
//   block-shared (bsel = s): row b = A_B(j) = Σ_{t∈B, t≥j} P_t(j) over j < end(B)
// then the exact top-k of each row (topk_rows_cuda). lse is given (fp32,
// [Hq, T], natural log of s·q·k sums, as attention_forward_bf16_cuda writes it).
//
// Shapes: dh ∈ {64, 128, 256}, bsel = 1 or a multiple of 16 up to 128, and
// the G heads' staged q rows in shared memory (at dh 256 and G = 4: per query
// and bsel ≤ 64, not 128). Any other call (or unaligned q, k) is served by
// oracle_select_cuda on fp32 copies of q and k — the same rows up to the
// summation order, so the same function of the bf16 values; the op never
// declines. oracle_select_tc_takes says which path a shape takes.
//
// Why: the fp32 oracle spends 4.4 TFLOP of CUDA-core FMAs at 32K on the Hq
// per-head products (293 ms, 20× cuDNN attention; docs/performance.md); on
// bf16 mma.sync the same products take a few ms and the exponentials as long.
//
// Three kernels. In blocks (bsel > 1) the default is oracle_block_keys_kernel
// (below): S transposed, keys × the block's queries, so that a key's sum over
// queries and heads stays in registers. Per query the default is
// oracle_query_tc_kernel (below): the layout of the next one with each 64-key
// tile split over 1, 2 or 4 warps per 16 rows, so that an SM holds 16 warps.
// With SPINDLE_ORACLE_KEY_SPLIT=0 per query, and in blocks with
// SPINDLE_ORACLE_BLOCK_ROWS=1, oracle_scores_tc_kernel1, query-major:
// one thread block per 64 query rows (per query) or per query block of bsel
// rows (a multiple of 16, at most 128); one warp per 16 rows. Loop order: KV
// head kh outer — the G query heads of kh have their q rows staged in shared
// memory once per kh, with their lse — then key tiles of 64 rows of k (kv head
// kh, cp.async double buffer, zero rows past the block's last query).
// SPINDLE_ORACLE_HEADS = HS (a divisor of G) stages HS of the G heads at a
// time instead: the group in G/HS stages, each its own pass over the key
// tiles, and less shared memory a thread block. SPINDLE_ORACLE_WARP_HEADS = HW
// (a divisor of the staged heads) splits them over HW warps per 16 rows: HW
// times the warps a thread block, each summing G/HW heads (see the kernel).
// Per tile each warp forms S = q_h·kᵀ for its 16 rows and each staged head
// (mma_qk_tile, mma.cuh) and sums p = 2^(s·scale·log2 e − lse·log2 e) over
// them in registers (masked to 0 for j > t). Per query the sum, divided by
// Hq, is stored into the row buffer R on the first stage and added on the
// others, by the thread that owns the element each time (so in stage order,
// deterministically; the earlier value is loaded before the tile's products);
// per block the warp's rows are summed per column (shuffles, then shared
// memory in warp order) and the block's row of A is stored or added the same
// way. Only j ≤ t (per query) or j < end (blocks) is written: topk_rows_cuda
// reads nothing past a row's length.
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "env.h"
#include "mma.cuh"
#include "ops_cuda.h"
#include "oracle_cuda.h"

enum {
    OT_BK = 64,        // keys per tile
    OT_QROWS = 64,     // query rows per thread block, per query
    OT_MAX_ROWS = 128, // bsel limit
    OT_SPLIT = 8,      // key tiles per thread block (grid y: 512-key ranges)
    OK_SPLIT = 32,     // the same for the keys-major block kernel (2048-key ranges: its q rows staged less often)
};
static const int64_t OT_BUFFER_FLOATS = (int64_t)128 << 20;  // 512 MB of scores per chunk

enum {
    OT_MAX_THREADS = 512,    // with the staged heads split over the warps (HW > 1)
    OT_PART_LD = OT_BK + 8,  // row stride of the per-query partial sums in shared memory (floats)
};

// Bytes of shared memory for M rows, G staged heads (a KV group's, or HS of them), head dim D, and the staged
// heads split over HW warps per 16 rows (HW = 1: one warp takes all of them): the staged q rows, two key
// tiles, the rows' lse, a column-sum row per warp and, per query with HW > 1, the partial sums of the HW
// warps of each row group.
static size_t ot_smem(int M, int G, int D, int HW, int block) {
    return sizeof(__nv_bfloat16) * ((size_t)G * M + 2 * OT_BK) * (D + TILE_PAD) + sizeof(float) * (size_t)G * M +
           sizeof(float) * (size_t)(M / 16) * HW * OT_BK +
           (block || HW == 1 ? 0 : sizeof(float) * (size_t)HW * M * OT_PART_LD);
}

// block = 0: thread block x covers query rows t0 = trow0 + 64·x … (+63, < tend),
//            R row t − trow0 at R + (t − trow0)·ld.
// block = 1: thread block x is query block b = brow0 + x (rows b·bsel …), A row
//            x at R + x·ld.
// Thread block y covers key tiles OT_SPLIT·y … (+OT_SPLIT − 1) only: the
// elements it writes are its own (rows × that key range), so the split
// changes neither the sums nor their order; without it the per-query grid of
// a chunk would be 32 thread blocks at 32K (a quarter of the SMs).
// HW > 1 (SPINDLE_ORACLE_WARP_HEADS): the staged heads are split over HW warps per 16 rows — warp w takes
// rows 16·(w mod M/16) and the heads (w div M/16)·G/HW … of the stage — so that a thread block has HW
// times the warps for the same shared q rows and key tiles (the latency the tensor cores and MUFU wait on
// is hidden by more resident warps). Per query the warps of one row group leave their partial sums in
// shared memory, and each then adds them up in head-group order for every HW-th column fragment and
// updates those elements of R (the row buffer's read-modify-write shared out over the warps); per block
// every warp's column sums are added in warp order. NT: the thread-block size the kernel is compiled
// for, OT_MAX_THREADS for the split (HW > 1) and 256 without it.
template <int D, int NT>
__global__ void __launch_bounds__(NT)
    oracle_scores_tc_kernel1(float *R, int64_t ld, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                             const float *lse, int T, int Hq, int Hkv, float scale_log2, int block, int bsel,
                             int row0, int tend, int HS, int HW) {
    constexpr int LDH = D + TILE_PAD, CH = D / 8, NS = OT_BK / 8;
    DYNAMIC_SMEM_AS(unsigned char, ot_smem_raw);
    // G = HS staged heads at a time: a KV group's G heads, or HS of them (a divisor), the group then in G/HS stages.
    const int G = HS, stages = Hq / Hkv / HS, W = blockDim.x / 32, WR = W / HW, M = 16 * WR, GH = G / HW;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)ot_smem_raw;  // [G][M][LDH]
    __nv_bfloat16 *Kb = Qs + (size_t)G * M * LDH;       // two key tiles
    float *lse2 = (float *)(Kb + 2 * OT_BK * LDH);      // [G][M], log2 units
    float *colsum = lse2 + G * M;                       // [W][64]
    float *part = colsum + W * OT_BK;                   // per query, HW > 1: [HW][M][OT_PART_LD]
    constexpr bool HEAD_SPLIT = NT == OT_MAX_THREADS;   // launched with HW > 1 (ot_launch)

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int wr = warp % WR, hg = warp / WR;  // the warp's row group and head group
    const int t0 = block ? (row0 + blockIdx.x) * bsel : row0 + OT_QROWS * blockIdx.x;
    const int t1 = block ? min(t0 + bsel, T) : min(t0 + OT_QROWS, tend);  // rows t0 … t1 − 1
    const int nt = t1 - t0, n_tiles = (t1 + OT_BK - 1) / OT_BK;
    const int kt0 = OT_SPLIT * blockIdx.y, kt1 = min(n_tiles, kt0 + OT_SPLIT);  // this block's key tiles
    if (kt0 >= kt1) return;  // the range starts after the last row (whole block)
    const int64_t nq = (int64_t)Hq * D, nkv = (int64_t)Hkv * D;
    const float inv_h = 1.0f / Hq;

    const int r0 = 16 * wr;
    const int ta = r0 + g < nt ? t0 + r0 + g : -1, tb = r0 + g + 8 < nt ? t0 + r0 + g + 8 : -1;
    const int t_warp = r0 < nt ? t0 + min(r0 + 15, nt - 1) : -1;
    const int qoff = (r0 + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);
    float *arow = block ? R + (int64_t)blockIdx.x * ld : NULL;

    for (int st = 0; st < Hkv * stages; st++) {
        const int kh = st / stages, h0 = st * G;  // KV head, first staged head (heads are in KV-head order)
        // The G staged heads' q rows and lse (zero / +∞ past the rows).
        for (int e = threadIdx.x; e < G * M * CH; e += blockDim.x) {
            const int hh = e / (M * CH), r = (e / CH) % M, ch = e % CH;
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (r < nt) val = *(const uint4 *)(q + (int64_t)(t0 + r) * nq + (int64_t)(h0 + hh) * D + 8 * ch);
            *(uint4 *)(Qs + ((size_t)hh * M + r) * LDH + 8 * ch) = val;
        }
        for (int e = threadIdx.x; e < G * M; e += blockDim.x) {
            const int hh = e / M, r = e % M;
            lse2[e] = r < nt ? lse[(int64_t)(h0 + hh) * T + t0 + r] * LOG2E : INFINITY;
        }
        cp_async_rows<D, OT_BK, false>(Kb + (kt0 & 1) * OT_BK * LDH, k + (int64_t)kt0 * OT_BK * nkv + (int64_t)kh * D,
                                       nkv, NULL, t1 - kt0 * OT_BK);
        __pipeline_commit();
        for (int it = kt0; it < kt1; it++) {
            const int c0 = it * OT_BK;
            if (it + 1 < kt1)
                cp_async_rows<D, OT_BK, false>(Kb + ((it + 1) & 1) * OT_BK * LDH, k + (c0 + OT_BK) * nkv + (int64_t)kh * D, nkv,
                                        NULL, t1 - c0 - OT_BK);
            __pipeline_commit();       // possibly empty: keeps the group count uniform
            __pipeline_wait_prior(1);  // this tile's copies (this thread's) …
            __syncthreads();           // … and everyone's; Qs and lse2 on the first tile
            const __nv_bfloat16 *Ks = Kb + (it & 1) * OT_BK * LDH;
            const bool active = c0 <= t_warp;  // warp-uniform
            // Per query, after the first stage: this lane's elements of R as the
            // earlier heads left them, loaded before the products so that the
            // loads are in flight while the tensor cores work (read right
            // before the store, they stalled every warp on global memory:
            // ncu's long-scoreboard stalls, docs/performance.md).
            float prev[NS][4];
            const bool add = !HEAD_SPLIT && !block && st > 0 && active;
#pragma unroll
            for (int j = 0; j < NS; j++) {
                const int col = c0 + 8 * j + 2 * c;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int t = e < 2 ? ta : tb, jj = col + (e & 1);
                    prev[j][e] = add && jj <= t ? R[(int64_t)(t - row0) * ld + jj] : 0.0f;
                }
            }
            float p[NS][4];
#pragma unroll
            for (int j = 0; j < NS; j++) p[j][0] = p[j][1] = p[j][2] = p[j][3] = 0.0f;
            if (active) {
                for (int hh = hg * GH; hh < (hg + 1) * GH; hh++) {
                    float s[NS][4];
                    mma_qk_tile<D, NS>(s, Qs + (size_t)hh * M * LDH + qoff, Ks, LDH);
                    const float la = lse2[hh * M + r0 + g], lb = lse2[hh * M + r0 + g + 8];
#pragma unroll
                    for (int j = 0; j < NS; j++) {
                        const int col = c0 + 8 * j + 2 * c;
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            if (col + e <= ta) p[j][e] += fast_exp2(fmaf(s[j][e], scale_log2, -la));
                            if (col + e <= tb) p[j][2 + e] += fast_exp2(fmaf(s[j][2 + e], scale_log2, -lb));
                        }
                    }
                }
            }
            if (!block && !HEAD_SPLIT) {
                if (active) {
#pragma unroll
                    for (int j = 0; j < NS; j++) {
                        const int col = c0 + 8 * j + 2 * c;
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int t = e < 2 ? ta : tb, jj = col + (e & 1);
                            if (jj > t) continue;  // also t = −1: a row past the chunk
                            R[(int64_t)(t - row0) * ld + jj] = prev[j][e] + p[j][e] * inv_h;  // prev 0 on stage 0
                        }
                    }
                }
            } else if (!block) {  // the row group's sums: each warp adds them up for every HW-th fragment
                if (active) {
                    float *pp = part + ((size_t)hg * M + r0 + g) * OT_PART_LD + 2 * c;
#pragma unroll
                    for (int j = 0; j < NS; j++) {
                        *(float2 *)(pp + 8 * j) = make_float2(p[j][0], p[j][1]);
                        *(float2 *)(pp + 8 * OT_PART_LD + 8 * j) = make_float2(p[j][2], p[j][3]);
                    }
                }
                __syncthreads();
                if (active) {
#pragma unroll
                    for (int j = 0; j < NS; j++) {
                        if (j % HW != hg) continue;
                        const int col = c0 + 8 * j + 2 * c;
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int t = e < 2 ? ta : tb, jj = col + (e & 1);
                            if (jj > t) continue;  // also t = −1: a row past the chunk
                            const float *pp =
                                part + (size_t)(r0 + g + 8 * (e / 2)) * OT_PART_LD + 8 * j + 2 * c + (e & 1);
                            float sum = 0.0f;
                            for (int o = 0; o < HW; o++) sum += pp[(size_t)o * M * OT_PART_LD];
                            float *out = R + (int64_t)(t - row0) * ld + jj;
                            *out = (st > 0 ? *out : 0.0f) + sum * inv_h;
                        }
                    }
                }
            } else {
#pragma unroll
                for (int j = 0; j < NS; j++) {
                    warp_colsum_store(colsum + warp * OT_BK, j, p[j][0] + p[j][2], p[j][1] + p[j][3]);
                }
                __syncthreads();  // every warp's column sums are in
                for (int col = threadIdx.x; col < OT_BK && c0 + col < t1; col += blockDim.x) {
                    float a = 0.0f;
                    for (int w = 0; w < W; w++) a += colsum[w * OT_BK + col];
                    arow[c0 + col] = st == 0 ? a * inv_h : arow[c0 + col] + a * inv_h;
                }
            }
            __syncthreads();  // the tile's buffer (and colsum) are free for reuse
        }
        __pipeline_wait_prior(0);
        __syncthreads();  // Qs and lse2 are refilled for the next stage
    }
}

// A stage's start in the keys-major and the key-split kernels: the first key tile (kt0, KV head kh, zero rows
// from t1) and the G staged heads' q rows (heads h0 …, rows t0 … t0 + M − 1, zero from t1) copied with cp.async
// in one group, and those rows' lse in log2 units (+∞ past the rows) stored while the copies are in flight.
template <int D>
static __device__ __forceinline__ void ot_stage_begin(__nv_bfloat16 *Kb, __nv_bfloat16 *Qs, float *lse2,
                                                      const __nv_bfloat16 *q, const __nv_bfloat16 *k, const float *lse,
                                                      int T, int Hq, int Hkv, int kt0, int kh, int h0, int G, int M,
                                                      int t0, int t1) {
    constexpr int LDH = D + TILE_PAD, CH = D / 8;
    const int64_t nq = (int64_t)Hq * D, nkv = (int64_t)Hkv * D;
    const int nt = t1 - t0;
    cp_async_rows<D, OT_BK, false>(Kb + (kt0 & 1) * OT_BK * LDH, k + (int64_t)kt0 * OT_BK * nkv + (int64_t)kh * D, nkv,
                                   NULL, t1 - kt0 * OT_BK);
    for (int e = threadIdx.x; e < G * M * CH; e += blockDim.x) {
        const int hh = e / (M * CH), r = (e / CH) % M, ch = e % CH;
        __nv_bfloat16 *dst = Qs + ((size_t)hh * M + r) * LDH + 8 * ch;
        if (r < nt) __pipeline_memcpy_async(dst, q + (int64_t)(t0 + r) * nq + (int64_t)(h0 + hh) * D + 8 * ch, 16);
        else *(uint4 *)dst = make_uint4(0u, 0u, 0u, 0u);
    }
    __pipeline_commit();
    for (int e = threadIdx.x; e < G * M; e += blockDim.x) {
        const int hh = e / M, r = e % M;
        lse2[e] = r < nt ? lse[(int64_t)(h0 + hh) * T + t0 + r] * LOG2E : INFINITY;
    }
}

// Block-shared, keys-major (the default for bsel > 1; SPINDLE_ORACLE_BLOCK_ROWS=1 runs the query-major
// kernel above instead). Per tile, warp w takes the 16 keys 16·(w mod 4) … of the 64 and the head group
// w div 4 (HK groups of G/HK staged heads): S is formed transposed, keys × the block's queries (k the A
// operand, the staged q rows the B operand, up to 64 queries at a time), so that a key's sum over the
// block's queries is a row sum of the warp's C fragments — in registers across the n-tiles and heads,
// then over the quad's 4 lanes. No column sums through shared memory and no second barrier per tile.
// With HK > 1 each head group leaves its 64 key sums in a slot of shared memory for the tile's parity;
// after the next tile's barrier the warps of group 0 add the HK slots in group order and store the row
// of A (the last tile after the stage's loop), so the sums and their order do not depend on timing.
// Tiles wholly before the block's first query skip the causal mask. One barrier per tile: the next
// tile's copy is issued after it, into the buffer every warp has finished with. The sums over a chunk of
// queries are key_sums_chunk's (mma.cuh), as in the indexer's block selection.

// The stage's sums of one tile (key c0 …) from the HK slots, in group order, into A (stored on stage 0,
// added after): warps of head group 0, lane g of each quad taking keys 16·(w mod 4) + g and + 8.
static __device__ __forceinline__ void ok_flush(float *arow, const float *slot, int HK, int c0, int t1, int first,
                                                float inv_h) {
    const int lane = threadIdx.x % 32, kg = threadIdx.x / 32 % (OT_BK / 16);
    if (lane % 4) return;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int key = 16 * kg + lane / 4 + 8 * e;
        if (c0 + key >= t1) continue;
        float v = 0.0f;
        for (int o = 0; o < HK; o++) v += slot[o * OT_BK + key];
        arow[c0 + key] = first ? v * inv_h : arow[c0 + key] + v * inv_h;
    }
}

// Grid (query blocks, 2048-key ranges); thread block x is query block row0 + x, A row x at A + x·ld.
// 4·HK warps.
template <int D>
__global__ void __launch_bounds__(OT_MAX_THREADS)
    oracle_block_keys_kernel(float *A, int64_t ld, const __nv_bfloat16 *q, const __nv_bfloat16 *k, const float *lse,
                             int T, int Hq, int Hkv, float scale_log2, int bsel, int row0, int HS, int HK) {
    constexpr int LDH = D + TILE_PAD, KG = OT_BK / 16;
    DYNAMIC_SMEM_AS(unsigned char, ok_smem_raw);
    const int G = HS, stages = Hq / Hkv / HS, M = bsel, GH = G / HK;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)ok_smem_raw;  // [G][M][LDH]
    __nv_bfloat16 *Kb = Qs + (size_t)G * M * LDH;       // two key tiles
    float *lse2 = (float *)(Kb + 2 * OT_BK * LDH);      // [G][M], log2 units; +∞ past the rows
    float *slots = lse2 + G * M;                        // [2][HK][OT_BK]: a tile's key sums per head group

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int kg = warp % KG, hg = warp / KG;
    const int t0 = (row0 + blockIdx.x) * bsel, t1 = min(t0 + bsel, T);  // rows t0 … t1 − 1
    const int nt = t1 - t0, n_tiles = (t1 + OT_BK - 1) / OT_BK;
    const int kt0 = OK_SPLIT * blockIdx.y, kt1 = min(n_tiles, kt0 + OK_SPLIT);
    if (kt0 >= kt1) return;
    const int64_t nkv = (int64_t)Hkv * D;
    const float inv_h = 1.0f / Hq;
    float *arow = A + (int64_t)blockIdx.x * ld;
    const int koff = (16 * kg + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);

    for (int st = 0; st < Hkv * stages; st++) {
        const int kh = st / stages, h0 = st * G;
        ot_stage_begin<D>(Kb, Qs, lse2, q, k, lse, T, Hq, Hkv, kt0, kh, h0, G, M, t0, t1);
        for (int it = kt0; it < kt1; it++) {
            const int c0 = it * OT_BK;
            __pipeline_wait_prior(0);  // this tile's copies (this thread's) …
            __syncthreads();           // … and everyone's; every warp is done with tile it − 1 (its buffer, slot)
            if (it + 1 < kt1) {
                cp_async_rows<D, OT_BK, false>(Kb + ((it + 1) & 1) * OT_BK * LDH, k + (c0 + OT_BK) * nkv + (int64_t)kh * D,
                                               nkv, NULL, t1 - c0 - OT_BK);
                __pipeline_commit();
            }
            if (HK > 1 && hg == 0 && it > kt0)
                ok_flush(arow, slots + ((it - 1) & 1) * HK * OT_BK, HK, c0 - OT_BK, t1, st == 0, inv_h);
            const __nv_bfloat16 *krow = Kb + (it & 1) * OT_BK * LDH + koff;
            const int k0 = c0 + 16 * kg, ka = k0 + g, kb = k0 + g + 8;
            float sum_a = 0.0f, sum_b = 0.0f;
            if (k0 < t1) {  // warp-uniform: some query of the block sees these keys
                const bool mask = k0 + 15 > t0;  // some key after the block's first query
                for (int hh = hg * GH; hh < (hg + 1) * GH; hh++) {
                    for (int qc = 0; qc < M && qc < nt; qc += 64) {
                        const int n = min(64, M - qc), tq0 = t0 + qc;
                        if (tq0 + n - 1 < k0) continue;  // every query of the chunk precedes the keys
                        const __nv_bfloat16 *Qh = Qs + ((size_t)hh * M + qc) * LDH;
                        const float *lh = lse2 + hh * M + qc;
                        key_sums_chunk<D>(&sum_a, &sum_b, krow, Qh, lh, n, tq0, ka, kb, scale_log2, mask);
                    }
                }
            }
            sum_a = quad_sum(sum_a), sum_b = quad_sum(sum_b);
            if (c == 0) {
                if (HK == 1) {
                    if (ka < t1) arow[ka] = st == 0 ? sum_a * inv_h : arow[ka] + sum_a * inv_h;
                    if (kb < t1) arow[kb] = st == 0 ? sum_b * inv_h : arow[kb] + sum_b * inv_h;
                } else {
                    float *slot = slots + ((it & 1) * HK + hg) * OT_BK + 16 * kg + g;
                    slot[0] = sum_a, slot[8] = sum_b;
                }
            }
        }
        __syncthreads();  // the last tile's slots are in; Qs, lse2 are refilled for the next stage
        if (HK > 1 && hg == 0) ok_flush(arow, slots + ((kt1 - 1) & 1) * HK * OT_BK, HK, (kt1 - 1) * OT_BK, t1, st == 0, inv_h);
        __syncthreads();
    }
}

// Per query, the keys split over the warps (the default per query; SPINDLE_ORACLE_KEY_SPLIT=0 runs the kernel
// above). Thread block x covers query rows t0 = row0 + 64·x … (+63, < tend), grid y its range of OQ_SPLIT key
// tiles; 4·KS warps, KS = 8/NS: warp w takes rows 16·(w mod 4) … and keys 8·NS·(w div 4) … of each 64-key tile.
// Each element of R thus belongs to one thread, which sums the stage's staged heads for it in registers and
// stores the sum (stage 0) or adds it to the value it loaded before the tile's products (the same arithmetic, in
// the same order, as the kernel above with one warp per 16 rows). The warps split the keys, not the heads: KS
// times the warps for the same staged q rows and no partial sums through shared memory, so an SM holds 16 warps
// where the kernel above holds 4 or 8 (by shared memory and registers). One barrier a tile (the next tile's copy
// is issued after it); no causal mask, and float2 accesses of R, where a warp's keys all precede its first row.
enum { OQ_SPLIT = 32 };  // key tiles per thread block (2048-key ranges: the q rows staged a quarter as often)

// One warp's part of one tile: keys k0 … k0 + 8·NS − 1 for its rows ta, tb (−1: past the chunk; rows Ra, Rb of
// R). MASK: only j ≤ t is read, summed and written; without it every key precedes both rows.
template <int D, int NS, bool MASK>
static __device__ __forceinline__ void oq_tile(float *Ra, float *Rb, int ta, int tb, int k0, const __nv_bfloat16 *qrow,
                                               const __nv_bfloat16 *Ks, const float *lse2, int G, int M, bool add,
                                               float scale_log2, float inv_h) {
    constexpr int LDH = D + TILE_PAD;
    const int c = threadIdx.x % 4;
    float prev[NS][4];
#pragma unroll
    for (int j = 0; j < NS; j++) {
        const int col = k0 + 8 * j + 2 * c;
        if (MASK) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                prev[j][e] = add && col + e <= ta ? Ra[col + e] : 0.0f;
                prev[j][2 + e] = add && col + e <= tb ? Rb[col + e] : 0.0f;
            }
        } else {
            const float2 a = add ? *(const float2 *)(Ra + col) : make_float2(0.0f, 0.0f);
            const float2 b = add ? *(const float2 *)(Rb + col) : make_float2(0.0f, 0.0f);
            prev[j][0] = a.x, prev[j][1] = a.y, prev[j][2] = b.x, prev[j][3] = b.y;
        }
    }
    float p[NS][4];
#pragma unroll
    for (int j = 0; j < NS; j++) p[j][0] = p[j][1] = p[j][2] = p[j][3] = 0.0f;
    for (int hh = 0; hh < G; hh++) {
        float s[NS][4];
        mma_qk_tile<D, NS>(s, qrow + (size_t)hh * M * LDH, Ks, LDH);
        const float la = lse2[hh * M], lb = lse2[hh * M + 8];
#pragma unroll
        for (int j = 0; j < NS; j++) {
            const int col = k0 + 8 * j + 2 * c;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                if (!MASK || col + e <= ta) p[j][e] += fast_exp2(fmaf(s[j][e], scale_log2, -la));
                if (!MASK || col + e <= tb) p[j][2 + e] += fast_exp2(fmaf(s[j][2 + e], scale_log2, -lb));
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NS; j++) {
        const int col = k0 + 8 * j + 2 * c;
        if (MASK) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                if (col + e <= ta) Ra[col + e] = prev[j][e] + p[j][e] * inv_h;  // prev 0 on stage 0
                if (col + e <= tb) Rb[col + e] = prev[j][2 + e] + p[j][2 + e] * inv_h;
            }
        } else {
            *(float2 *)(Ra + col) = make_float2(prev[j][0] + p[j][0] * inv_h, prev[j][1] + p[j][1] * inv_h);
            *(float2 *)(Rb + col) = make_float2(prev[j][2] + p[j][2] * inv_h, prev[j][3] + p[j][3] * inv_h);
        }
    }
}

// R rows at R + (t − row0)·ld, ld even (the float2 accesses). 16 warps an SM at most: 128 registers a thread.
template <int D, int NS>
__global__ void __launch_bounds__(32 * 4 * (8 / NS), NS == 8 ? 4 : NS == 4 ? 2 : 1)
    oracle_query_tc_kernel(float *R, int64_t ld, const __nv_bfloat16 *q, const __nv_bfloat16 *k, const float *lse,
                           int T, int Hq, int Hkv, float scale_log2, int row0, int tend, int HS) {
    constexpr int LDH = D + TILE_PAD, KW = 8 * NS;  // KW: the keys a warp takes of each tile
    DYNAMIC_SMEM_AS(unsigned char, oq_smem_raw);
    const int G = HS, stages = Hq / Hkv / HS, M = OT_QROWS;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)oq_smem_raw;  // [G][M][LDH]
    __nv_bfloat16 *Kb = Qs + (size_t)G * M * LDH;       // two key tiles
    float *lse2 = (float *)(Kb + 2 * OT_BK * LDH);      // [G][M], log2 units; +∞ past the rows

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int r0 = 16 * (warp % 4), kw = warp / 4;
    const int t0 = row0 + M * blockIdx.x, t1 = min(t0 + M, tend), nt = t1 - t0;
    const int n_tiles = (t1 + OT_BK - 1) / OT_BK, kt0 = OQ_SPLIT * blockIdx.y, kt1 = min(n_tiles, kt0 + OQ_SPLIT);
    if (kt0 >= kt1) return;  // the range starts after the last row (whole block)
    const int64_t nkv = (int64_t)Hkv * D;
    const float inv_h = 1.0f / Hq;
    const int ta = r0 + g < nt ? t0 + r0 + g : -1, tb = r0 + g + 8 < nt ? t0 + r0 + g + 8 : -1;
    const int t_last = r0 < nt ? t0 + min(r0 + 15, nt - 1) : -1;  // the warp's last row (−1: none)
    const int t_first = r0 + 16 <= nt ? t0 + r0 : -1;             // its first row where all 16 are in, else −1
    float *Ra = R + (int64_t)((ta >= 0 ? ta : row0) - row0) * ld, *Rb = R + (int64_t)((tb >= 0 ? tb : row0) - row0) * ld;
    const int qoff = (r0 + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);

    for (int st = 0; st < Hkv * stages; st++) {
        const int kh = st / stages, h0 = st * G;  // KV head, first staged head (heads are in KV-head order)
        ot_stage_begin<D>(Kb, Qs, lse2, q, k, lse, T, Hq, Hkv, kt0, kh, h0, G, M, t0, t1);
        for (int it = kt0; it < kt1; it++) {
            const int c0 = it * OT_BK, k0 = c0 + KW * kw;  // k0: the warp's first key
            __pipeline_wait_prior(0);  // this tile's copies (this thread's) …
            __syncthreads();           // … and everyone's; every warp is done with tile it − 1 (its buffer)
            if (it + 1 < kt1) {
                cp_async_rows<D, OT_BK, false>(Kb + ((it + 1) & 1) * OT_BK * LDH, k + (c0 + OT_BK) * nkv + (int64_t)kh * D,
                                               nkv, NULL, t1 - c0 - OT_BK);
                __pipeline_commit();
            }
            if (k0 > t_last) continue;  // warp-uniform: no row of the warp sees these keys
            const __nv_bfloat16 *Ks = Kb + (it & 1) * OT_BK * LDH + KW * kw * LDH;
            if (t_first >= 0 && k0 + KW - 1 <= t_first)
                oq_tile<D, NS, false>(Ra, Rb, ta, tb, k0, Qs + qoff, Ks, lse2 + r0 + g, G, M, st > 0, scale_log2, inv_h);
            else
                oq_tile<D, NS, true>(Ra, Rb, ta, tb, k0, Qs + qoff, Ks, lse2 + r0 + g, G, M, st > 0, scale_log2, inv_h);
        }
        __pipeline_wait_prior(0);
        __syncthreads();  // Qs and lse2 are refilled for the next stage
    }
}

template <int D>
static void ot_launch(float *R, int64_t ld, const void *q, const void *k, const float *lse, int T, int Hq, int Hkv,
                      float scale, int block, int bsel, int row0, int n_ctas, int tend, size_t smem, int HS, int HW) {
    const int M = block ? bsel : OT_QROWS;
    const int key_end = block ? (int)((int64_t)(row0 + n_ctas) * bsel < T ? (int64_t)(row0 + n_ctas) * bsel : T) : tend;
    const int n_split = ((key_end + OT_BK - 1) / OT_BK + OT_SPLIT - 1) / OT_SPLIT;
    // HW = 1 keeps the kernel compiled for 256 threads (its registers unconstrained); HW > 1 the 512-thread one.
    const auto kern =
        HW > 1 ? oracle_scores_tc_kernel1<D, OT_MAX_THREADS> : oracle_scores_tc_kernel1<D, OT_MAX_ROWS * 2>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    launch_checked(kern, dim3(n_ctas, n_split), dim3(32 * (M / 16) * HW), smem, R, ld, (const __nv_bfloat16 *)q,
                   (const __nv_bfloat16 *)k, lse, T, Hq, Hkv, scale * LOG2E, block, bsel, row0, tend, HS,
                   HW);
}

// Heads staged at a time: the KV group's G, or SPINDLE_ORACLE_HEADS = HS, a divisor of G (fewer staged q rows,
// so more thread blocks fit an SM, for G/HS passes over the key tiles and the row buffer per KV head; a
// variant for the bench to compare: the same sums, the heads added to R in groups of HS).
static int ot_heads(int G) {
    const long hs = env_long("SPINDLE_ORACLE_HEADS", 0, 0, 1L << 20);
    return hs > 0 && G % hs == 0 ? (int)hs : G;
}

// The device's shared memory: what one thread block may opt in to, and what an SM holds (the thread blocks
// that fit an SM side by side).
static size_t ot_max_smem(void) { return (size_t)device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin); }
static int ot_sm_smem(void) { return device_attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor); }

// Warps per 16 rows over which the HS staged heads are split: the largest divisor of HS up to
// SPINDLE_ORACLE_WARP_HEADS with (M/16)·HW ≤ 16 warps (M: 64 per query, bsel per block) whose partial sums
// fit the shared memory with the rest. One setting serves every shape: 6 for Qwen2.5's group of 6 gives 3
// per query (12 warps) and 6 in blocks of 16 (6 warps a thread block of 16 rows). The default is 3 where
// 6 heads are staged (Qwen2.5-1.5B on an H100: the oracle's TTFT at 32K 1.57x faster in blocks of 64, 8%
// per query; docs/performance.md) and 1 elsewhere (4 heads a group: the split was slower).
static int ot_warp_heads(int HS, int M, int D, int block) {
    const long want = env_long("SPINDLE_ORACLE_WARP_HEADS", HS == 6 ? 3 : 1, 1, 1L << 20);
    const size_t max_smem = want > 1 ? ot_max_smem() : 0;
    for (int hw = want < HS ? (int)want : HS; hw > 1; hw--)
        if (HS % hw == 0 && (M / 16) * hw * 32 <= OT_MAX_THREADS && ot_smem(M, HS, D, hw, block) <= max_smem)
            return hw;
    return 1;
}

// The block-shared kernel: keys-major (oracle_block_keys_kernel) unless SPINDLE_ORACLE_BLOCK_ROWS=1 asks for
// the query-major one (oracle_scores_tc_kernel1 with block = 1), kept for the bench to compare.
static int ot_block_rows(void) { return env_long("SPINDLE_ORACLE_BLOCK_ROWS", 0, 0, 1) != 0; }

// Bytes of shared memory of the keys-major kernel: the staged q rows, two key tiles, the rows' lse and the
// head groups' key sums for two tiles.
static size_t ok_smem(int M, int G, int D, int HK) {
    return sizeof(__nv_bfloat16) * ((size_t)G * M + 2 * OT_BK) * (D + TILE_PAD) + sizeof(float) * (size_t)G * M +
           sizeof(float) * 2 * (size_t)HK * OT_BK;
}

// Head groups HK of the keys-major kernel (4·HK warps a thread block, ≤ 16): SPINDLE_ORACLE_HEAD_GROUPS, or
// the largest divisor of the staged heads up to it that fits; by default the fewest groups that give an SM
// 16 resident warps (thread blocks by shared memory; 128 registers a thread leave room for 16 warps), else
// the most: Qwen3-8B's 4 heads in blocks of 64 take 2 (two thread blocks of 8 warps an SM), Qwen2.5's 6
// take 3 (one of 12), Gemma 3's 4 at d_h 256 take 4 (one of 16), blocks of 16 take 1.
static int ok_head_groups(int HS, int M, int D) {
    const long want = env_long("SPINDLE_ORACLE_HEAD_GROUPS", 0, 0, 1L << 20);
    const size_t max_smem = ot_max_smem();
    const int per_sm = ot_sm_smem();
    int best = 1;
    for (int hk = 1; hk <= 4 && hk <= HS; hk++) {
        if (HS % hk || ok_smem(M, HS, D, hk) > max_smem) continue;
        if (want > 0) {
            if (hk <= want) best = hk;
            continue;
        }
        best = hk;
        const int ctas = per_sm / (int)(ok_smem(M, HS, D, hk) + 1024), per_warps = 16 / (4 * hk);
        if ((ctas < per_warps ? ctas : per_warps) * 4 * hk >= 16) break;
    }
    return best;
}

// Bytes of shared memory of the per-query key-split kernel: the staged q rows, two key tiles, the rows' lse.
static size_t oq_smem(int G, int D) {
    return sizeof(__nv_bfloat16) * ((size_t)G * OT_QROWS + 2 * OT_BK) * (D + TILE_PAD) + sizeof(float) * (size_t)G * OT_QROWS;
}

// Warps per 16 rows over which the per-query kernel splits each key tile (KS ∈ {1, 2, 4}: 4·KS warps a thread
// block), or 0 for the kernel with one warp per 16 rows (oracle_scores_tc_kernel1, its heads split by
// SPINDLE_ORACLE_WARP_HEADS): SPINDLE_ORACLE_KEY_SPLIT, else the fewest that give an SM 16 resident warps
// (thread blocks by shared memory): Qwen3-8B's 4 heads a group at d_h 128 take 2 (two thread blocks of 8
// warps), Qwen2.5's 6 and Gemma 3's 4 at d_h 256 take 4 (one of 16), SmolLM2's 3 at d_h 64 take 1.
static int oq_key_split(int HS, int D) {
    const long want = env_long("SPINDLE_ORACLE_KEY_SPLIT", -1, -1, 4);
    if (want == 0) return 0;
    if (want > 0) return want >= 4 ? 4 : want >= 2 ? 2 : 1;
    const int ctas = ot_sm_smem() / (int)(oq_smem(HS, D) + 1024);
    for (int ks = 1; ks < 4; ks *= 2)
        if ((ctas < 4 / ks ? ctas : 4 / ks) * 4 * ks >= 16) return ks;
    return 4;
}

extern "C" int oracle_select_tc_takes(int Hq, int Hkv, int dh, int topk, int bsel) {
    if ((dh != 64 && dh != 128 && dh != 256) || Hkv <= 0 || Hq <= 0 || Hq % Hkv != 0 || topk < 1) return 0;
    if (bsel != 1 && (bsel < 16 || bsel > OT_MAX_ROWS || bsel % 16 != 0)) return 0;
    const int M = bsel > 1 ? bsel : OT_QROWS, G = ot_heads(Hq / Hkv);
    if (bsel > 1 && !ot_block_rows()) return ok_smem(M, G, dh, ok_head_groups(G, M, dh)) <= ot_max_smem();
    if (bsel == 1 && oq_key_split(G, dh)) return oq_smem(G, dh) <= ot_max_smem();
    return ot_smem(M, G, dh, ot_warp_heads(G, M, dh, bsel > 1), bsel > 1) <= ot_max_smem();
}

extern "C" int oracle_select_tc_warp_heads(int Hq, int Hkv, int dh, int bsel) {
    const int M = bsel > 1 ? bsel : OT_QROWS;
    if (bsel == 1 && oq_key_split(ot_heads(Hq / Hkv), dh)) return 1;  // the key-split kernel splits no heads
    return ot_warp_heads(ot_heads(Hq / Hkv), M, dh, bsel > 1);
}

extern "C" int oracle_select_tc_key_split(int Hq, int Hkv, int dh, int bsel) {
    return bsel == 1 ? oq_key_split(ot_heads(Hq / Hkv), dh) : 0;
}

extern "C" int oracle_select_tc_head_groups(int Hq, int Hkv, int dh, int bsel) {
    if (bsel <= 1 || ot_block_rows()) return 0;
    return ok_head_groups(ot_heads(Hq / Hkv), bsel, dh);
}

template <int D>
static void ok_launch(float *A, int64_t ld, const void *q, const void *k, const float *lse, int T, int Hq, int Hkv,
                      float scale, int bsel, int row0, int n_ctas, size_t smem, int HS, int HK) {
    const int key_end = (int)((int64_t)(row0 + n_ctas) * bsel < T ? (int64_t)(row0 + n_ctas) * bsel : T);
    const int n_split = ((key_end + OT_BK - 1) / OT_BK + OK_SPLIT - 1) / OK_SPLIT;
    CUDA_CHECK(cudaFuncSetAttribute(oracle_block_keys_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    launch_checked(oracle_block_keys_kernel<D>, dim3(n_ctas, n_split), dim3(32 * (OT_BK / 16) * HK), smem, A, ld,
                   (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, lse, T, Hq, Hkv, scale * LOG2E,
                   bsel, row0, HS, HK);
}

template <int D>
static void oq_launch(float *R, int64_t ld, const void *q, const void *k, const float *lse, int T, int Hq, int Hkv,
                      float scale, int row0, int n_ctas, int tend, size_t smem, int HS, int KS) {
    const int n_split = ((tend + OT_BK - 1) / OT_BK + OQ_SPLIT - 1) / OQ_SPLIT;
    const auto kern = KS == 1 ? oracle_query_tc_kernel<D, 8> : KS == 2 ? oracle_query_tc_kernel<D, 4>
                                                                         : oracle_query_tc_kernel<D, 2>;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    launch_checked(kern, dim3(n_ctas, n_split), dim3(32 * 4 * KS), smem, R, ld, (const __nv_bfloat16 *)q,
                   (const __nv_bfloat16 *)k, lse, T, Hq, Hkv, scale * LOG2E, row0, tend, HS);
}

// The shapes the kernel does not take: the fp32 oracle on widened q, k.
static void oracle_select_widened(int32_t *sel, int32_t *n_sel, const void *q, const void *k, const float *lse, int T,
                                  int Hq, int Hkv, int dh, float scale, int topk, int bsel) {
    const int64_t nq = (int64_t)T * Hq * dh, nkv = (int64_t)T * Hkv * dh;
    float *q32 = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    float *k32 = (float *)cuda_malloc(sizeof(float) * (size_t)nkv);
    cuda_bf16_to_f32(q32, q, nq);
    cuda_bf16_to_f32(k32, k, nkv);
    oracle_select_cuda(sel, n_sel, q32, k32, lse, T, Hq, Hkv, dh, scale, topk, bsel);
    cuda_free(q32), cuda_free(k32);  // stream-ordered: after the selection's kernels
}

extern "C" void oracle_select_bf16_cuda(int32_t *sel, int32_t *n_sel, const void *q, const void *k, const float *lse,
                                        int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel) {
    if (T <= 0) return;
    // cp.async and uint4 loads need 16-byte rows (cudaMalloc gives 256).
    if (!oracle_select_tc_takes(Hq, Hkv, dh, topk, bsel) || (((uintptr_t)q | (uintptr_t)k) & 15)) {
        oracle_select_widened(sel, n_sel, q, k, lse, T, Hq, Hkv, dh, scale, topk, bsel);
        return;
    }
    const int block = bsel > 1, M = block ? bsel : OT_QROWS, HS = ot_heads(Hq / Hkv);
    const int keys = block && !ot_block_rows();  // the keys-major block kernel
    const int KS = block ? 0 : oq_key_split(HS, dh);  // per query: the key-split kernel (KS > 0)
    const int HW = keys || KS ? 1 : ot_warp_heads(HS, M, dh, block), HK = keys ? ok_head_groups(HS, M, dh) : 0;
    const size_t smem = keys ? ok_smem(M, HS, dh, HK) : KS ? oq_smem(HS, dh) : ot_smem(M, HS, dh, HW, block);

    // Row r has length min((r+1)·bsel, T); rows no longer than topk take every key.
    const int rows = (T + bsel - 1) / bsel;
    const int first = T <= topk ? rows : (topk / bsel < rows ? topk / bsel : rows);
    if (first > 0) topk_rows_cuda(sel, n_sel, NULL, first, 0, bsel, bsel, T, topk);
    if (first == rows) return;
    const int64_t ld = (T + 3) / 4 * 4;     // row stride of the buffer: even, for the key-split kernel's float2
    int64_t chunk = OT_BUFFER_FLOATS / ld;  // rows per chunk (per query: a multiple of 64)
    if (!block) chunk = chunk < OT_QROWS ? (int64_t)OT_QROWS : chunk / OT_QROWS * OT_QROWS;
    chunk = chunk < 1 ? 1 : chunk;
    if (chunk > rows - first) chunk = rows - first;
    float *buf = (float *)cuda_malloc(sizeof(float) * (size_t)(chunk * ld));
    const auto launch = dh == 64 ? ot_launch<64> : dh == 128 ? ot_launch<128> : ot_launch<256>;
    const auto launch_keys = dh == 64 ? ok_launch<64> : dh == 128 ? ok_launch<128> : ok_launch<256>;
    const auto launch_query = dh == 64 ? oq_launch<64> : dh == 128 ? oq_launch<128> : oq_launch<256>;
    for (int r0 = first; r0 < rows; r0 += (int)chunk) {
        const int n = rows - r0 < chunk ? rows - r0 : (int)chunk;
        const int n_ctas = block ? n : (n + OT_QROWS - 1) / OT_QROWS;
        if (keys) launch_keys(buf, ld, q, k, lse, T, Hq, Hkv, scale, bsel, r0, n_ctas, smem, HS, HK);
        else if (KS) launch_query(buf, ld, q, k, lse, T, Hq, Hkv, scale, r0, n_ctas, r0 + n, smem, HS, KS);
        else launch(buf, ld, q, k, lse, T, Hq, Hkv, scale, block, bsel, r0, n_ctas, r0 + n, smem, HS, HW);
        topk_rows_cuda(sel + (int64_t)r0 * topk, n_sel + r0, buf, n, ld, (r0 + 1) * bsel, bsel, T, topk);
    }
    cuda_free(buf);  // freed in stream order, after the work queued on it
}
