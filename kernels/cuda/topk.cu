// topk.cu: exact top-k of many rows (topk_rows_cuda, oracle_cuda.h), the CUDA
// twin of topk_support (kernels/cpu/topk.c): the same set under the same tie
// rule (larger value first, then lower index), written ascending, −1 padded.
//
// One thread block per row (blocks loop over rows). Each float maps to a
// uint32 key whose unsigned order is the float order (negatives: all bits
// flipped; the rest: the sign bit set; −0 counts as +0 since the CPU twin's
// comparison does too). A row of 128K floats is 512 KB and does not stay in
// L2 from one pass to the next, so the cost is the number of times the row is
// read from DRAM. The common case reads it twice:
//   1. a histogram of the top 12 key bits in 4096 shared bins; a block-wide
//      scan from the largest bin finds the bin b that holds the k-th largest
//      key and kr, that key's rank inside b: the k − kr keys in bins above b
//      are sure, and the kr best keys of b complete the top k.
//   2. an ordered scan over the row, 2048 indices at a time: ballots and
//      per-warp counts give every index its rank among the sure keys and among
//      the candidates (the keys in b). Sure indices go, ascending, to the front
//      of the output row; candidate (key, index) pairs, ascending, to shared
//      memory.
// The rest stays in shared memory: the same radix select over the candidates'
// 20 low bits yields the k-th largest key thr and how many keys equal to thr
// to take (the lowest indices: the tie rule); an ordered scan over the
// candidates compacts the chosen ones; and the two ascending lists are merged
// in place in the output row, each element's slot being its rank in its own
// list plus a binary search in the other.
// When b holds more candidates than shared memory takes (flat rows, heavy
// ties), further histogram passes over the row refine the low bits (12, then
// 8) until b fits or the key is whole. A whole key thr needs no candidates: an
// ordered scan writes the indices > thr and the kr lowest ones == thr straight
// to their slots. So a row is read 2 times, at most 4 (3 histograms, 1 scan).
// Rows with len ≤ k skip all of it: they take 0..len−1.
#include <stdint.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "oracle_cuda.h"

enum {
    TOPK_THREADS = 512,
    TOPK_WARPS = TOPK_THREADS / 32,
    TOPK_UNROLL = 4,  // loads in flight per thread: one row pass per block must keep DRAM busy
    TOPK_TILE = TOPK_THREADS * TOPK_UNROLL,
    TOPK_BITS = 12,
    TOPK_BINS = 1 << TOPK_BITS,
    TOPK_BINS_PER_THREAD = TOPK_BINS / TOPK_THREADS,
    // Candidates kept in shared memory (past this the bin is refined instead):
    // as many as let 3 blocks share an SM, the most that 40 registers allow.
    TOPK_CAND = 7168,
};

// Dynamic shared memory of one block (72 KB, past the static limit).
typedef struct {
    int hist[TOPK_BINS];
    uint32_t cand_key[TOPK_CAND];
    int32_t cand_idx[TOPK_CAND];
    int warp_sum[TOPK_WARPS];  // radix_pick: bin counts per warp
    // ordered_scan: (# gt) | (# eq) << 16 per warp, double-buffered so that
    // one barrier a tile suffices: tile t+2 writes what tile t read before
    // tile t+1's barrier.
    unsigned warp_cnt[2][TOPK_WARPS];
    int pick_bin, pick_kr, pick_cnt;
} TopkSmem;

// ---- kernels ------------------------------------------------------------------------

// Order-preserving key: a > b as floats iff key(a) > key(b) as uint32 (no NaNs).
__device__ __forceinline__ uint32_t order_key(float x) {
    uint32_t u = __float_as_uint(x);
    if (x == 0.0f) u = 0u;  // −0 ranks as +0 (equal values: the lower index wins)
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Where a pass reads its (key, index) pairs: the row in global memory, or the
// candidates in shared memory. load() is split from key() so that a load can
// be issued a tile ahead and converted only once it is used.
struct RowSrc {
    const float *row;
    __device__ __forceinline__ float load(int j) const { return row[j]; }
    __device__ __forceinline__ uint32_t key(float x) const { return order_key(x); }
    __device__ __forceinline__ int32_t idx(int j) const { return j; }
};
struct CandSrc {
    const uint32_t *ck;
    const int32_t *ci;
    __device__ __forceinline__ uint32_t load(int j) const { return ck[j]; }
    __device__ __forceinline__ uint32_t key(uint32_t k) const { return k; }
    __device__ __forceinline__ int32_t idx(int j) const { return ci[j]; }
};

// The digits go 12, 12, 8 bits from the top; the last one takes 12 bits too,
// but its top 4 are fixed by the prefix, so it only ever fills 256 bins.
__device__ __forceinline__ int next_shift(uint32_t mask) {
    return mask == 0u ? 20 : mask == 0xFFF00000u ? 8 : 0;
}

// Block-wide: the bin holding the kr-th largest of the keys counted in hist.
// Appends its digit to prefix / mask, makes kr the wanted key's rank inside
// the bin and returns the bin's count. Ends with every thread past a barrier.
__device__ int radix_pick(TopkSmem *s, int shift, uint32_t *prefix, uint32_t *mask, int *kr) {
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    // Thread t holds bins 4095−8t … 4088−8t, so the block's running sum in
    // thread order counts keys from the largest digit down.
    int c[TOPK_BINS_PER_THREAD], sum = 0;
#pragma unroll
    for (int i = 0; i < TOPK_BINS_PER_THREAD; i++)
        sum += (c[i] = s->hist[TOPK_BINS - 1 - TOPK_BINS_PER_THREAD * tid - i]);
    int incl = sum;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += y;
    }
    if (lane == 31) s->warp_sum[warp] = incl;
    __syncthreads();
    const int ws = lane < TOPK_WARPS ? s->warp_sum[lane] : 0;
    int cum = incl - sum + __reduce_add_sync(0xffffffffu, lane < warp ? ws : 0);
    if (cum < *kr && *kr <= cum + sum) {  // exactly one thread: the wanted key's bin is here
#pragma unroll
        for (int i = 0; i < TOPK_BINS_PER_THREAD; i++) {
            if (cum + c[i] >= *kr) {
                s->pick_bin = TOPK_BINS - 1 - TOPK_BINS_PER_THREAD * tid - i;
                s->pick_kr = *kr - cum;
                s->pick_cnt = c[i];
                break;
            }
            cum += c[i];
        }
    }
    __syncthreads();
    *prefix |= (uint32_t)s->pick_bin << shift;
    *mask |= (uint32_t)(TOPK_BINS - 1) << shift;
    *kr = s->pick_kr;
    return s->pick_cnt;
}

// One radix select step over the n keys of src: histogram of the next digit of
// the keys that match prefix on mask, then radix_pick. Returns the count of
// keys that match the longer prefix.
template <class Src>
__device__ int radix_pass(TopkSmem *s, Src src, int n, uint32_t *prefix, uint32_t *mask, int *kr) {
    const int tid = threadIdx.x, shift = next_shift(*mask);
    const uint32_t p = *prefix, m = *mask;
    __syncthreads();  // the previous pass (or row) is done with hist
    for (int i = tid; i < TOPK_BINS; i += TOPK_THREADS) s->hist[i] = 0;
    __syncthreads();
    for (int j = tid; j < n; j += TOPK_TILE) {
        uint32_t key[TOPK_UNROLL];
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++)
            key[u] = j + u * TOPK_THREADS < n ? src.key(src.load(j + u * TOPK_THREADS)) : 0u;
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++)
            if (j + u * TOPK_THREADS < n && (key[u] & m) == p)
                atomicAdd(&s->hist[(key[u] >> shift) & (TOPK_BINS - 1)], 1);
    }
    __syncthreads();
    return radix_pick(s, shift, prefix, mask, kr);
}

// Ordered scan over the n keys of src, comparing key & mask with prefix. Each
// warp takes 128 consecutive indices of a tile, so a lane's rank is the tile's
// base, the counts of the warps before it, its own warp's earlier ballots and
// the lanes below it. DIRECT: the indices > prefix and the kr first == prefix
// go to out[rank among them], ascending. Otherwise the > ones go to
// out[rank among them] and the == ones to the candidate buffer. Stops once
// n_gt keys > prefix and need_eq keys == prefix have been seen.
// out may be cand_idx itself (DIRECT over the candidates): a slot is never
// past the position it is written from, a tile is read before its barrier and
// written after it, so the compaction runs in place.
template <bool DIRECT, class Src>
__device__ void ordered_scan(TopkSmem *s, Src src, int n, uint32_t prefix, uint32_t mask, int kr, int n_gt,
                             int need_eq, int32_t *out) {
    typedef decltype(src.load(0)) Raw;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const uint32_t lane_lt = (1u << lane) - 1u;
    int base_gt = 0, base_eq = 0, buf = 0;
    // Each tile's loads are issued before the previous tile's barrier, so that
    // their latency overlaps the barrier and the ranking instead of following it.
    Raw raw[TOPK_UNROLL];
    int32_t idx[TOPK_UNROLL];
#pragma unroll
    for (int u = 0; u < TOPK_UNROLL; u++) {
        const int j = warp * 32 * TOPK_UNROLL + lane + 32 * u;
        if (j < n) raw[u] = src.load(j), idx[u] = src.idx(j);
    }
    for (int j0 = 0; j0 < n; j0 += TOPK_TILE, buf ^= 1) {
        const int jl = j0 + warp * 32 * TOPK_UNROLL + lane;
        uint32_t key[TOPK_UNROLL];
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) key[u] = jl + 32 * u < n ? src.key(raw[u]) : 0u;
        // The ballots are taken twice (counts now, ranks after the barrier):
        // cheaper than holding 2·TOPK_UNROLL masks across it.
        unsigned cnt = 0u;  // (# gt) | (# eq) << 16, each ≤ 32·TOPK_UNROLL
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) {
            const bool in = jl + 32 * u < n;
            cnt += __popc(__ballot_sync(0xffffffffu, in && (key[u] & mask) > prefix));
            cnt += __popc(__ballot_sync(0xffffffffu, in && (key[u] & mask) == prefix)) << 16;
        }
        if (lane == 0) s->warp_cnt[buf][warp] = cnt;
        int32_t cur_idx[TOPK_UNROLL];
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) {
            const int j = jl + TOPK_TILE + 32 * u;
            cur_idx[u] = idx[u];
            if (j < n) raw[u] = src.load(j), idx[u] = src.idx(j);
        }
        __syncthreads();
        const unsigned c = lane < TOPK_WARPS ? s->warp_cnt[buf][lane] : 0u;
        const unsigned before = __reduce_add_sync(0xffffffffu, lane < warp ? c : 0u);
        const unsigned total = __reduce_add_sync(0xffffffffu, c);
        int bg = base_gt + (int)(before & 0xffffu), be = base_eq + (int)(before >> 16);
        base_gt += (int)(total & 0xffffu), base_eq += (int)(total >> 16);
#pragma unroll
        for (int u = 0; u < TOPK_UNROLL; u++) {
            const bool in = jl + 32 * u < n;
            const bool gt = in && (key[u] & mask) > prefix, eq = in && (key[u] & mask) == prefix;
            const uint32_t mg = __ballot_sync(0xffffffffu, gt), me = __ballot_sync(0xffffffffu, eq);
            const int pg = bg + __popc(mg & lane_lt), pe = be + __popc(me & lane_lt);
            if (DIRECT) {
                if (gt || (eq && pe < kr)) out[pg + min(pe, kr)] = cur_idx[u];
            } else if (gt) {
                out[pg] = cur_idx[u];
            } else if (eq) {
                s->cand_key[pe] = key[u];
                s->cand_idx[pe] = cur_idx[u];
            }
            bg += __popc(mg), be += __popc(me);
        }
        if (base_gt >= n_gt && base_eq >= need_eq) break;  // uniform: nothing left to place
    }
}

// First i in a[0..n) (ascending) with a[i] ≥ v.
__device__ __forceinline__ int lower_bound(const int32_t *a, int n, int32_t v) {
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (a[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// out[0..n_sure) and cand_idx[0..n_ch) are ascending and disjoint; leaves
// their union in out[0..n_sure + n_ch), ascending. A sure entry only moves up
// (by the chosen ones below it), so the sure list is moved one block-sized
// chunk at a time from the top, each chunk read before anything is written.
__device__ void merge_sure_chosen(TopkSmem *s, int32_t *out, int n_sure, int n_ch) {
    const int tid = threadIdx.x;
    __syncthreads();  // out[0..n_sure) and cand_idx[0..n_ch) are written
#pragma unroll 1
    for (int q = tid; q < n_ch; q += TOPK_THREADS)  // slots of the chosen, found before the sure list moves
        s->cand_key[q] = (uint32_t)(q + lower_bound(out, n_sure, s->cand_idx[q]));
#pragma unroll 1
    for (int c0 = (n_sure - 1) / TOPK_THREADS * TOPK_THREADS; n_sure > 0 && c0 >= 0; c0 -= TOPK_THREADS) {
        const int p = c0 + tid;
        const int32_t v = p < n_sure ? out[p] : 0;
        __syncthreads();  // the chunk is read (and, the first time, the chosen slots found)
        if (p < n_sure) out[p + lower_bound(s->cand_idx, n_ch, v)] = v;
    }
    __syncthreads();  // every sure entry has moved
#pragma unroll 1
    for (int q = tid; q < n_ch; q += TOPK_THREADS) out[s->cand_key[q]] = s->cand_idx[q];
}

__global__ void __launch_bounds__(TOPK_THREADS, 3)
    topk_rows_kernel2(int32_t *sel, int32_t *n_sel, const float *score, int rows, int64_t ld, int len0, int step,
                      int cap, int k) {
    DYNAMIC_SMEM_AS(unsigned char, topk_smem);
    TopkSmem *s = (TopkSmem *)topk_smem;
    const int tid = threadIdx.x;

    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t lenl = (int64_t)len0 + (int64_t)r * step;
        const int len = (int)(lenl < cap ? (lenl > 0 ? lenl : 0) : cap);
        int32_t *out = sel + (int64_t)r * k;
        if (len <= k) {  // every candidate is selected
            for (int i = tid; i < k; i += TOPK_THREADS) out[i] = i < len ? i : -1;
            if (tid == 0) n_sel[r] = len;
            continue;
        }
        const RowSrc row = {score + (int64_t)r * ld};

        // Radix select over the row until the wanted bin fits in shared memory
        // or the k-th largest key is whole: k − kr keys are > prefix on mask.
        uint32_t prefix = 0u, mask = 0u;
        int kr = k, cnt;
        do cnt = radix_pass(s, row, len, &prefix, &mask, &kr);
        while (cnt > TOPK_CAND && mask != 0xFFFFFFFFu);

        if (mask == 0xFFFFFFFFu || cnt == kr) {  // every wanted key == prefix is known: take the kr first
            ordered_scan<true>(s, row, len, prefix, mask, kr, k - kr, kr, out);
        } else {
            const int n_ch = kr, n_sure = k - kr;
            ordered_scan<false>(s, row, len, prefix, mask, 0, n_sure, cnt, out);
            const CandSrc cand = {s->cand_key, s->cand_idx};
            do radix_pass(s, cand, cnt, &prefix, &mask, &kr);
            while (mask != 0xFFFFFFFFu);
            ordered_scan<true>(s, cand, cnt, prefix, mask, kr, n_ch - kr, kr, s->cand_idx);
            merge_sure_chosen(s, out, n_sure, n_ch);
        }
        if (tid == 0) n_sel[r] = k;
    }
}

// ---- launcher ------------------------------------------------------------------------

extern "C" void topk_rows_cuda(int32_t *sel, int32_t *n_sel, const float *score, int rows, int64_t ld, int len0,
                               int step, int cap, int k) {
    if (rows <= 0) return;
    if (k < 1) {
        fprintf(stderr, "spindle: topk_rows_cuda: k = %d < 1 (%s:%d)\n", k, __FILE__, __LINE__);
        abort();
    }
    const int grid = rows < (1 << 20) ? rows : (1 << 20);
    const int smem = (int)sizeof(TopkSmem);
    CUDA_CHECK(cudaFuncSetAttribute(topk_rows_kernel2, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    // The rows stream past L1, so all of it may go to shared memory (3 blocks an SM).
    CUDA_CHECK(cudaFuncSetAttribute(topk_rows_kernel2, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
    launch_checked(topk_rows_kernel2, dim3(grid), dim3(TOPK_THREADS), (size_t)smem, sel, n_sel, score, rows, ld, len0,
                   step, cap, k);
}
