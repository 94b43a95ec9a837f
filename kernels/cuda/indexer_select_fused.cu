// indexer_select_fused.cu: the per-query (b_sel = 1) indexer selection with
// the scores computed where they are selected (indexer_select_fused_bf16_cuda,
// indexer_cuda.h): the top-k of row t of s_{t,j} = c·q_t·k_j over j ≤ t,
// larger value first, equal values → the lower index, −0 as +0 (the rule of
// topk_support and topk_rows_cuda), from bf16 q, k on tensor cores with fp32
// sums. No score leaves the chip.
//
// Why: the buffered path writes every causal score row (T²·4 B, 68.7 GB at
// 128K) and the top-k reads it back, 137 GB of HBM traffic, three times the
// time budget before any arithmetic (docs/performance.md, "Indexer selection
// (GPU)"). Recomputing the scores is cheaper: one sweep over the causal
// pairs is T²/2·2·d_I FLOP, 2.2 TFLOP at 128K, a few ms on tensor cores.
//
// One thread block per ROWS consecutive query rows (128 for d_I ≤ 128, 64 for
// d_I 256; one warp per 16 rows), the longest rows first. A sweep streams the
// key tiles j ≤ the block's last row (64 keys each, cp.async double buffer,
// zero rows past the end) through mma.sync m16n8k16 (mma.cuh); a score is
// c·acc in fp32, the same bits in every sweep (same operands, same order).
// Each score maps to the uint32 key whose unsigned order is the float order
// (fs_order_key below). Per row the selection keeps a key range [lo, hi] that
// holds the k-th largest key, its rank kr inside the range and the range's
// count cnt (to start: everything, kr = k, cnt = t + 1), and sweeps until
// every row is resolved:
//   histogram sweeps: per row 256 shared-memory bins over the range. The
//     first sweep's bins are eighths of a binade over the positive scores
//     from about 2^-16 to 2^16 (bin 0 everything below, bin 255 everything
//     above), which puts the usual k-th value (a top 1–2% of spread-out
//     scores) into a bin of about 1% of the row; later sweeps split the
//     range into 256 equal parts of the key. Bin 0 is never
//     counted (it is cnt minus the others: most keys of a row fall below the
//     threshold, so this saves most atomics of the first sweep). A warp per
//     row then scans the bins from the top and narrows the range to the bin
//     of the kr-th key.
//   A row is resolved when its range is one key (lo = hi), when all of the
//     range is taken (cnt = kr), or when the range fits the row's list of 128
//     candidates in shared memory.
//   the final sweep, in key order (each warp's 16 rows × 64 keys of a tile: a
//     row's keys lie in one quad of lanes, so a 64-bit mask per row and
//     popcounts give every key its rank in the tile, plus running counts):
//     keys above hi are sure and go, ascending, to the row's output; a row
//     resolved by value or by its whole range also writes the first kr keys
//     of the range (the tie rule; all of them) to their final slots; a
//     candidate row appends the range's
//     (key, index) pairs, ascending, to its list. Then per candidate row a
//     warp ranks the list (key descending, then index), keeps the kr best,
//     and merges them with the sure keys already in the output row.
// Long rows of spread-out scores resolve after two histogram sweeps (three
// sweeps in all), rows of at most 128 keys after none; flat rows, heavy ties
// and k-th values at or below 0 take up to five. Rows t < k take
// every key 0 … t and are written by a separate fill kernel without scoring.
// The selected set is exactly the top k of the kernel's own fp32 scores.
#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "indexer_cuda.h"
#include "mma.cuh"

enum {
    FS_BK = 64,     // keys per tile
    FS_BINS = 256,  // histogram bins per row
    FS_CAP = 128,   // candidates per row (the list takes the row's histogram space)
    // The first sweep's bins: key >> 20 (sign, exponent, 3 mantissa bits)
    // minus the key of 2^-16 >> 20, so bins 1 … 254 are [1.125·2^-16,
    // 1.875·2^15) in eighths of a binade.
    FS_WINDOW_BASE = 0xB78,
};

// Per-row selection state (shared memory): the range [lo, hi] of keys that
// holds the kr-th largest of the row's keys in it, cnt keys in the range.
struct FsRow {
    uint32_t lo, hi;
    int kr, cnt;
};

// Order-preserving key: a > b as floats iff key(a) > key(b) as uint32 (no
// NaNs); −0 is +0 (so equal values tie, and the lower index wins).
static __device__ __forceinline__ uint32_t fs_order_key(float x) {
    uint32_t u = __float_as_uint(x);
    if (x == 0.0f) u = 0u;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// A row is resolved (no more histograms) when the final sweep can finish it.
static __device__ __forceinline__ bool fs_resolved(const FsRow &r) {
    return r.lo == r.hi || r.cnt == r.kr || r.cnt <= FS_CAP;
}

// The bin width of a range after the first sweep: the least shift that maps
// [lo, hi] into 256 bins.
static __device__ __forceinline__ int fs_shift(uint32_t lo, uint32_t hi) {
    int s = 0;
    while (((hi - lo) >> s) >= (uint32_t)FS_BINS) s++;
    return s;
}

// The bin of key in a row's histogram: -1 when the key is outside the range
// or in bin 0 (never counted). window: the first sweep's mapping.
static __device__ __forceinline__ int fs_bin(uint32_t key, uint32_t lo, uint32_t hi, int shift, bool window) {
    if (window) {
        const int b = (int)(key >> 20) - FS_WINDOW_BASE;
        return b <= 0 ? -1 : b > FS_BINS - 1 ? FS_BINS - 1 : b;
    }
    if (key < lo || key > hi) return -1;
    const int b = (int)((key - lo) >> shift);
    return b == 0 ? -1 : b;
}

// Warp: narrows row r's range to the bin that holds its kr-th key (hist: the
// row's bins, bin 0 not counted). Returns whether it needs another histogram.
static __device__ bool fs_pick(FsRow *st, const uint32_t *hist) {
    const int lane = threadIdx.x % 32;
    FsRow r = *st;
    const bool window = r.lo == 0u && r.hi == 0xFFFFFFFFu;
    const int shift = window ? 0 : fs_shift(r.lo, r.hi);
    // Lane l holds bins 255 − 8l … 248 − 8l, so lane order is bin order from the top.
    int c[8], sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int b = FS_BINS - 1 - 8 * lane - i;
        c[i] = b > 0 ? (int)hist[b] : 0;
        sum += c[i];
    }
    const int total = __reduce_add_sync(0xffffffffu, sum);
    if (lane == 31) c[7] = r.cnt - total, sum += c[7];  // bin 0: the rest of the range
    int incl = sum;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += y;
    }
    int cum = incl - sum;  // keys in the bins above this lane's
    bool open = false;
    if (cum < r.kr && r.kr <= cum + sum) {  // exactly one lane
        int pick = 0, above = cum, in_bin = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {  // unrolled: c[] stays in registers
            if (cum < r.kr && r.kr <= cum + c[i]) pick = i, above = cum, in_bin = c[i];
            cum += c[i];
        }
        const uint32_t b = (uint32_t)(FS_BINS - 1 - 8 * lane - pick);
        FsRow n;
        if (window) {
            n.lo = b == 0 ? 0u : (FS_WINDOW_BASE + b) << 20;
            n.hi = b == FS_BINS - 1 ? 0xFFFFFFFFu : ((FS_WINDOW_BASE + b + 1) << 20) - 1u;
        } else {
            n.lo = r.lo + (b << shift);
            const uint32_t w = (1u << shift) - 1u;  // the last bin may end past hi (and past 2^32)
            n.hi = r.hi - n.lo <= w ? r.hi : n.lo + w;
        }
        n.kr = r.kr - above, n.cnt = in_bin;
        *st = n;
        open = !fs_resolved(n);
    }
    return __any_sync(0xffffffffu, open) != 0;
}

// This lane's part of S = c·Q·Kᵀ for its warp's 16 rows × the 64 keys at c0:
// s[j][e] is key c0 + 8j + 2c + (e & 1) of row ta (e < 2) or tb, as the order
// key; keys after a row's position get no valid flag (bit 4j + e of *valid).
template <int D>
static __device__ __forceinline__ void fs_keys(uint32_t key[FS_BK / 8][4], uint32_t *valid,
                                               const __nv_bfloat16 *qrow, const __nv_bfloat16 *Ks, int c0, int ta,
                                               int tb, float c_col) {
    constexpr int NS = FS_BK / 8;
    const int c = threadIdx.x % 4;
    float s[NS][4];
    mma_qk_tile<D, NS>(s, qrow, Ks, D + TILE_PAD);
    uint32_t v = 0u;
#pragma unroll
    for (int j = 0; j < NS; j++) {
        const int col = c0 + 8 * j + 2 * c;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            key[j][e] = fs_order_key(s[j][e] * c_col);
            if (col + (e & 1) <= (e < 2 ? ta : tb)) v |= 1u << (4 * j + e);
        }
    }
    *valid = v;
}

// OR over the quad of lanes that share a row.
static __device__ __forceinline__ unsigned long long quad_or(unsigned long long m) {
    m |= __shfl_xor_sync(0xffffffffu, m, 1);
    return m | __shfl_xor_sync(0xffffffffu, m, 2);
}

// Per candidate row, after the final sweep (one warp): the list cand_key /
// cand_idx [cnt] (ascending index) keeps its kr best (key descending, then
// index), which are merged with the n_sure sure indices at out[0 … n_sure)
// (ascending) into out[0 … n_sure + kr).
static __device__ void fs_finish_row(int32_t *out, uint32_t *cand_key, int32_t *cand_idx, int cnt, int kr,
                                     int n_sure) {
    const int lane = threadIdx.x % 32;
    constexpr int PER = FS_CAP / 32;
    bool keep[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = lane + 32 * u;
        keep[u] = false;
        if (i < cnt) {
            const uint32_t ki = cand_key[i];
            int rank = 0;
            for (int j = 0; j < cnt; j++) {
                const uint32_t kj = cand_key[j];
                rank += kj > ki || (kj == ki && j < i);
            }
            keep[u] = rank < kr;
        }
    }
    int32_t mine[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) mine[u] = lane + 32 * u < cnt ? cand_idx[lane + 32 * u] : 0;
    __syncwarp();  // every rank is taken before the list is overwritten
    // The kept indices, compacted in order, into cand_idx; their final slots
    // (rank among the kept + the sure indices below them) into cand_key.
    int base = 0;
    const uint32_t lane_lt = (1u << lane) - 1u;
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const uint32_t m = __ballot_sync(0xffffffffu, keep[u]);
        if (keep[u]) {
            const int q = base + __popc(m & lane_lt);
            cand_idx[q] = mine[u];
            int lo = 0, hi = n_sure;  // sure indices below mine[u]
            while (lo < hi) {
                const int mid = (lo + hi) / 2;
                if (out[mid] < mine[u]) lo = mid + 1;
                else hi = mid;
            }
            cand_key[q] = (uint32_t)(q + lo);
        }
        base += __popc(m);
    }
    __syncwarp();
    // Sure indices move up by the kept ones below them: top chunk first, each
    // chunk read before any of it is written.
    for (int c0 = (n_sure - 1) / 32 * 32; n_sure > 0 && c0 >= 0; c0 -= 32) {
        const int p = c0 + lane;
        const int32_t v = p < n_sure ? out[p] : 0;
        __syncwarp();
        if (p < n_sure) {
            int lo = 0, hi = kr;
            while (lo < hi) {
                const int mid = (lo + hi) / 2;
                if (cand_idx[mid] < v) lo = mid + 1;
                else hi = mid;
            }
            out[p + lo] = v;
        }
        __syncwarp();
    }
    for (int q = lane; q < kr; q += 32) out[cand_key[q]] = cand_idx[q];
}

// Grid: thread block x takes rows t0 = row0 + ROWS·(gridDim.x − 1 − x) …
// (< T), all of them t ≥ k (so longer than k); 32·ROWS/16 threads.
template <int D, int ROWS>
__global__ void __launch_bounds__(2 * ROWS)
    indexer_select_fused_kernel1(int32_t *sel, int32_t *n_sel, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                                 int T, float c_col, int kk, int row0) {
    constexpr int LDH = D + TILE_PAD, CH = D / 8, NS = FS_BK / 8;
    DYNAMIC_SMEM_AS(unsigned char, fs_smem);
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)fs_smem;        // [ROWS][LDH]
    __nv_bfloat16 *Kb = Qs + ROWS * LDH;                  // two key tiles
    uint32_t *hist = (uint32_t *)(Kb + 2 * FS_BK * LDH);  // [ROWS][FS_BINS]; the final sweep: candidates
    FsRow *st = (FsRow *)(hist + ROWS * FS_BINS);         // [ROWS]
    int *more = (int *)(st + ROWS);                       // some row needs another histogram

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int t0 = row0 + ROWS * (gridDim.x - 1 - blockIdx.x), nt = min(ROWS, T - t0), end = t0 + nt;
    const int n_tiles = (end + FS_BK - 1) / FS_BK;

    for (int e = threadIdx.x; e < ROWS * CH; e += blockDim.x) {
        const int r = e / CH, ch = e % CH;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < nt) val = *(const uint4 *)(q + (int64_t)(t0 + r) * D + 8 * ch);
        *(uint4 *)(Qs + r * LDH + 8 * ch) = val;
    }
    if (threadIdx.x == 0) *more = 0;
    for (int r = threadIdx.x; r < ROWS; r += blockDim.x) {
        FsRow s0 = {0u, 0xFFFFFFFFu, kk, r < nt ? t0 + r + 1 : 0};
        if (r >= nt) s0.lo = s0.hi = 0u, s0.kr = 0;  // no row: resolved, nothing to do
        st[r] = s0;
    }
    __syncthreads();
    for (int r = threadIdx.x; r < nt; r += blockDim.x)
        if (!fs_resolved(st[r])) *more = 1;

    const int r0 = 16 * warp, ra = r0 + g, rb = r0 + g + 8;
    const int ta = ra < nt ? t0 + ra : -1, tb = rb < nt ? t0 + rb : -1;
    const int t_warp = r0 < nt ? t0 + min(r0 + 15, nt - 1) : -1;  // the warp's last row
    const __nv_bfloat16 *qrow = Qs + (r0 + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);
    uint32_t *cand_key_a = hist + ra * FS_BINS, *cand_key_b = hist + rb * FS_BINS;
    int32_t *cand_idx_a = (int32_t *)cand_key_a + FS_CAP, *cand_idx_b = (int32_t *)cand_key_b + FS_CAP;

    for (;;) {  // histogram sweeps, then the final one
        __syncthreads();  // *more and st are final for this sweep
        const bool final_sweep = *more == 0;
        const FsRow sa = st[ra], sb = st[rb];
        __syncthreads();  // everyone has read *more
        if (!final_sweep) {
            for (int e = threadIdx.x; e < ROWS * FS_BINS; e += blockDim.x) hist[e] = 0u;
            if (threadIdx.x == 0) *more = 0;
        }
        // Histogram sweep: this lane's rows' ranges (an inactive row: resolved).
        const bool act_a = !final_sweep && ta >= 0 && !fs_resolved(sa);
        const bool act_b = !final_sweep && tb >= 0 && !fs_resolved(sb);
        const bool win_a = sa.lo == 0u && sa.hi == 0xFFFFFFFFu, win_b = sb.lo == 0u && sb.hi == 0xFFFFFFFFu;
        const int sh_a = act_a && !win_a ? fs_shift(sa.lo, sa.hi) : 0;
        const int sh_b = act_b && !win_b ? fs_shift(sb.lo, sb.hi) : 0;
        // Final sweep: direct rows write the first kr keys of the range; the
        // others (cnt ≤ FS_CAP) list the range as candidates.
        const bool dir_a = sa.lo == sa.hi || sa.cnt == sa.kr, dir_b = sb.lo == sb.hi || sb.cnt == sb.kr;
        int32_t *out_a = ta >= 0 ? sel + (int64_t)ta * kk : NULL, *out_b = tb >= 0 ? sel + (int64_t)tb * kk : NULL;
        int gt_a = 0, eq_a = 0, gt_b = 0, eq_b = 0;  // running counts of the row's keys > hi, in range

        cp_async_rows<D, FS_BK, false>(Kb, k, D, NULL, end);
        __pipeline_commit();
        for (int it = 0; it < n_tiles; it++) {
            const int c0 = it * FS_BK;
            if (it + 1 < n_tiles)
                cp_async_rows<D, FS_BK, false>(Kb + ((it + 1) & 1) * FS_BK * LDH, k + (int64_t)(c0 + FS_BK) * D, D,
                                               NULL, end - c0 - FS_BK);
            __pipeline_commit();       // possibly empty: keeps the group count uniform
            __pipeline_wait_prior(1);  // this tile's copies (this thread's) …
            __syncthreads();           // … and everyone's; Qs and the zeroed histograms on the first tile
            const __nv_bfloat16 *Ks = Kb + (it & 1) * FS_BK * LDH;
            if (c0 <= t_warp && (final_sweep || __any_sync(0xffffffffu, act_a || act_b))) {  // warp-uniform
                uint32_t key[NS][4], valid;
                fs_keys<D>(key, &valid, qrow, Ks, c0, ta, tb, c_col);
                if (!final_sweep) {
#pragma unroll
                    for (int j = 0; j < NS; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const bool a = e < 2;
                            if (!((valid >> (4 * j + e)) & 1u) || !(a ? act_a : act_b)) continue;
                            const int b = a ? fs_bin(key[j][e], sa.lo, sa.hi, sh_a, win_a)
                                            : fs_bin(key[j][e], sb.lo, sb.hi, sh_b, win_b);
                            if (b > 0) atomicAdd(&hist[(a ? ra : rb) * FS_BINS + b], 1u);
                        }
                } else {
                    // Masks of the tile's 64 keys per row (bit = key − c0): above hi, in range.
                    unsigned long long ga = 0, ea = 0, gb = 0, eb = 0;
#pragma unroll
                    for (int j = 0; j < NS; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            if (!((valid >> (4 * j + e)) & 1u)) continue;
                            const unsigned long long bit = 1ull << (8 * j + 2 * c + (e & 1));
                            const FsRow &s = e < 2 ? sa : sb;
                            const uint32_t kv = key[j][e];
                            if (kv > s.hi) (e < 2 ? ga : gb) |= bit;
                            else if (kv >= s.lo) (e < 2 ? ea : eb) |= bit;
                        }
                    ga = quad_or(ga), ea = quad_or(ea), gb = quad_or(gb), eb = quad_or(eb);
#pragma unroll
                    for (int j = 0; j < NS; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int col = 8 * j + 2 * c + (e & 1);
                            const unsigned long long bit = 1ull << col, below = bit - 1ull;
                            const bool a = e < 2;
                            const unsigned long long gm = a ? ga : gb, em = a ? ea : eb;
                            if (!((gm | em) & bit)) continue;  // most keys of most tiles: nothing to place
                            const FsRow &s = a ? sa : sb;
                            const int pg = (a ? gt_a : gt_b) + __popcll(gm & below);
                            const int pe = (a ? eq_a : eq_b) + __popcll(em & below);
                            int32_t *out = a ? out_a : out_b;
                            const int32_t j_key = c0 + col;
                            if (gm & bit) {
                                out[(a ? dir_a : dir_b) ? pg + min(pe, s.kr) : pg] = j_key;
                            } else if (em & bit) {
                                if (a ? dir_a : dir_b) {
                                    if (pe < s.kr) out[pg + pe] = j_key;
                                } else {
                                    (a ? cand_key_a : cand_key_b)[pe] = key[j][e];
                                    (a ? cand_idx_a : cand_idx_b)[pe] = j_key;
                                }
                            }
                        }
                    gt_a += __popcll(ga), eq_a += __popcll(ea), gt_b += __popcll(gb), eq_b += __popcll(eb);
                }
            }
            __syncthreads();  // the tile's buffer is free for reuse
        }
        __pipeline_wait_prior(0);
        if (final_sweep) break;
        __syncthreads();  // every histogram is complete
        for (int r = warp; r < nt; r += blockDim.x / 32)
            if (!fs_resolved(st[r]) && fs_pick(&st[r], hist + r * FS_BINS) && lane == 0) *more = 1;
    }

    // Candidate rows: the kr best of the list, merged with the sure indices.
    __syncthreads();  // every list is complete
    for (int r = warp; r < nt; r += blockDim.x / 32) {
        const FsRow s = st[r];
        int32_t *out = sel + (int64_t)(t0 + r) * kk;
        if (!(s.lo == s.hi || s.cnt == s.kr)) {
            uint32_t *ck = hist + r * FS_BINS;
            fs_finish_row(out, ck, (int32_t *)ck + FS_CAP, s.cnt, s.kr, kk - s.kr);
        }
        if (lane == 0) n_sel[t0 + r] = kk;
    }
}

// Rows t0 … t0 + n − 1 with t < k: every key 0 … t, then −1.
__global__ void indexer_select_fill_kernel(int32_t *sel, int32_t *n_sel, int n, int kk) {
    const int64_t total = (int64_t)n * kk;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(e / kk), i = (int)(e % kk);
        sel[e] = i <= t ? i : -1;
        if (i == 0) n_sel[t] = t + 1 < kk ? t + 1 : kk;
    }
}

template <int D, int ROWS>
static void fs_launch(int32_t *sel, int32_t *n_sel, const void *q, const void *k, int T, float c_col, int kk) {
    constexpr int LDH = D + TILE_PAD;
    const size_t smem = sizeof(__nv_bfloat16) * (size_t)(ROWS + 2 * FS_BK) * LDH +
                        sizeof(uint32_t) * (size_t)ROWS * FS_BINS + sizeof(FsRow) * ROWS + sizeof(int);
    CUDA_CHECK(cudaFuncSetAttribute(indexer_select_fused_kernel1<D, ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)smem));
    const int rows = T - kk;
    launch_checked(indexer_select_fused_kernel1<D, ROWS>, dim3((rows + ROWS - 1) / ROWS), dim3(2 * ROWS), smem, sel,
                   n_sel, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, T, c_col, kk, kk);
}

extern "C" int indexer_select_fused_bf16_cuda(int32_t *sel, int32_t *n_sel, const void *q, const void *k, int T,
                                              int d_index, float c_col, int kk) {
    if (d_index != 32 && d_index != 64 && d_index != 128 && d_index != 256) return -1;
    if (((uintptr_t)q | (uintptr_t)k) & 15) return -1;  // cp.async and uint4 loads: 16-byte rows
    if (kk < 1) {
        fprintf(stderr, "spindle: %s: k = %d < 1 (%s:%d)\n", __func__, kk, __FILE__, __LINE__);
        abort();
    }
    if (T <= 0) return 0;
    const int n_fill = T < kk ? T : kk;  // rows t < k
    launch_checked(indexer_select_fill_kernel, dim3(grid_for((int64_t)n_fill * kk, 256)), dim3(256), 0, sel, n_sel,
                   n_fill, kk);
    if (T <= kk) return 0;
    switch (d_index) {
    case 32: fs_launch<32, 128>(sel, n_sel, q, k, T, c_col, kk); break;
    case 64: fs_launch<64, 128>(sel, n_sel, q, k, T, c_col, kk); break;
    case 128: fs_launch<128, 128>(sel, n_sel, q, k, T, c_col, kk); break;
    default: fs_launch<256, 64>(sel, n_sel, q, k, T, c_col, kk); break;
    }
    return 0;
}
