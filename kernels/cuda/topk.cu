// topk.cu: exact top-k of many rows (topk_rows_cuda, oracle_cuda.h), the CUDA
// twin of topk_support (kernels/cpu/topk.c): the same set under the same tie
// rule (larger value first, then lower index), written ascending, −1 padded.
//
// One thread block per row (blocks loop over rows). Each float maps to a
// uint32 key whose unsigned order is the float order (negatives: all bits
// flipped; the rest: the sign bit set; −0 counts as +0 since the CPU twin's
// comparison does too). Then:
//   1. radix select, 4 passes of 8 bits from the top: a shared-memory
//      histogram of the next digit over the keys that match the digits chosen
//      so far; warp 0 walks the 256 bins from the largest digit and finds the
//      one that holds the k-th largest key, leaving kr = its rank among the
//      keys that share the final 32-bit prefix. After pass 4 the prefix is the
//      k-th largest key thr: k − kr keys are > thr, and the kr lowest-index
//      keys equal to thr complete the top k (the tie rule).
//   2. an ordered scan over the row, one tile of blockDim indices at a time:
//      ballots and per-warp counts give every index the number of selected
//      indices before it (keys > thr, plus the equal ones capped at kr), which
//      is its output slot, so the selection comes out ascending without a sort.
// The row is read 5 times (4 histograms, 1 scan); a row of 256K floats is
// 1 MB, so this is bandwidth-bound and cheap next to the scores it selects
// from. Rows with len ≤ k skip all of it: they take 0..len−1.
#include <stdint.h>

#include "cuda_check.cuh"
#include "oracle_cuda.h"

enum { TOPK_THREADS = 512, TOPK_WARPS = TOPK_THREADS / 32 };

// ---- kernels ------------------------------------------------------------------------

// Order-preserving key: a > b as floats iff key(a) > key(b) as uint32 (no NaNs).
__device__ __forceinline__ uint32_t order_key(float x) {
    uint32_t u = __float_as_uint(x);
    if (x == 0.0f) u = 0u;  // −0 ranks as +0 (equal values: the lower index wins)
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void __launch_bounds__(TOPK_THREADS)
    topk_rows_kernel1(int32_t *sel, int32_t *n_sel, const float *score, int rows, int64_t ld, int len0, int step,
                      int cap, int k) {
    __shared__ int hist[256];
    __shared__ int warp_gt[TOPK_WARPS], warp_eq[TOPK_WARPS];
    __shared__ uint32_t s_digit;
    __shared__ int s_kr;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const uint32_t lane_lt = (1u << lane) - 1u;

    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const int64_t lenl = (int64_t)len0 + (int64_t)r * step;
        const int len = (int)(lenl < cap ? (lenl > 0 ? lenl : 0) : cap);
        int32_t *out = sel + (int64_t)r * k;
        if (len <= k) {  // every candidate is selected
            for (int i = tid; i < k; i += TOPK_THREADS) out[i] = i < len ? i : -1;
            if (tid == 0) n_sel[r] = len;
            continue;
        }
        const float *row = score + (int64_t)r * ld;

        // 1. Radix select of the k-th largest key.
        uint32_t prefix = 0u, mask = 0u;
        int kr = k;  // rank (from 1) of the wanted key among keys matching prefix
        for (int shift = 24; shift >= 0; shift -= 8) {
            __syncthreads();  // the previous row / pass is done with hist
            for (int i = tid; i < 256; i += TOPK_THREADS) hist[i] = 0;
            __syncthreads();
            for (int j = tid; j < len; j += TOPK_THREADS) {
                const uint32_t key = order_key(row[j]);
                if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
            }
            __syncthreads();
            if (warp == 0) {
                // Lane l holds digits 255−8l … 248−8l (descending), so an inclusive
                // scan over lanes counts the keys with a digit ≥ each of them.
                int c[8], s = 0;
#pragma unroll
                for (int i = 0; i < 8; i++) s += (c[i] = hist[255 - 8 * lane - i]);
                int incl = s;
#pragma unroll
                for (int off = 1; off < 32; off <<= 1) {
                    const int y = __shfl_up_sync(0xffffffffu, incl, off);
                    if (lane >= off) incl += y;
                }
                int cum = incl - s;
                if (cum < kr && kr <= incl) {  // exactly one lane: the k-th key's digit is here
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        if (cum + c[i] >= kr) {
                            s_digit = (uint32_t)(255 - 8 * lane - i);
                            s_kr = kr - cum;
                            break;
                        }
                        cum += c[i];
                    }
                }
            }
            __syncthreads();
            prefix |= s_digit << shift;
            mask |= 255u << shift;
            kr = s_kr;
        }
        const uint32_t thr = prefix;  // the k-th largest key; k − kr keys are larger

        // 2. Ordered scan: slot of index j = (# keys > thr before j) + min(# keys == thr before j, kr).
        int base_gt = 0, base_eq = 0;
        for (int j0 = 0; j0 < len; j0 += TOPK_THREADS) {
            const int j = j0 + tid;
            const uint32_t key = j < len ? order_key(row[j]) : 0u;
            const bool gt = j < len && key > thr, eq = j < len && key == thr;
            const uint32_t mg = __ballot_sync(0xffffffffu, gt), me = __ballot_sync(0xffffffffu, eq);
            __syncthreads();  // the previous tile is done with warp_gt / warp_eq
            if (lane == 0) {
                warp_gt[warp] = __popc(mg);
                warp_eq[warp] = __popc(me);
            }
            __syncthreads();
            int before_gt = base_gt + __popc(mg & lane_lt), before_eq = base_eq + __popc(me & lane_lt);
            for (int w = 0; w < TOPK_WARPS; w++) {
                const int g = warp_gt[w], e = warp_eq[w];
                if (w < warp) before_gt += g, before_eq += e;
                base_gt += g, base_eq += e;
            }
            if (gt || (eq && before_eq < kr)) out[before_gt + min(before_eq, kr)] = j;
            if (base_gt + min(base_eq, kr) >= k) break;  // uniform: all k are written
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
    topk_rows_kernel1<<<grid, TOPK_THREADS>>>(sel, n_sel, score, rows, ld, len0, step, cap, k);
    CUDA_CHECK(cudaGetLastError());
}
