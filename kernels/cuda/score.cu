// score.cu: next-token statistics of logits rows (the scoring of `spindle
// eval`), CUDA twin of next_token_stats_cpu (kernels/cpu/score_cpu.c).
// One thread block per row, two passes over the row in global memory:
//   1. the maximum m and its lowest index (the argmax), of the dense row and,
//      paired, of the sparse row: a strided scan per thread, then warp shuffles
//      and shared memory, every thread gets the result;
//   2. in double: S_d = Σ exp(d − m_d), S_s = Σ exp(s − m_s) and
//      A = Σ exp(d − m_d)·(d − s), per thread, then block_sum in a fixed order.
// Thread 0 writes lse = m + log S, nll = lse − row[next], and
//   KL(d ‖ s) = Σ p_d·((d − lse_d) − (s − lse_s)) = A / S_d − (lse_d − lse_s)
// (Σ p_d = 1), clamped at 0 as the CPU twin does. A row whose dense and sparse
// logits are equal gives A = 0 and identical sums, so KL = 0 exactly. Only the
// per-row results are written: the logits never leave the device.
#include <math.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "ops_cuda.h"

enum { SCORE_THREADS = 256, SCORE_WARPS = SCORE_THREADS / 32 };

// ---- kernels ------------------------------------------------------------------------

// (v, i) ← the larger of (v, i) and (v2, i2); of equal values the lower index
// (the first maximum, as the CPU twin's `>` scan finds it). i < 0: no value yet.
static __device__ __forceinline__ void argmax_merge(float &v, int &i, float v2, int i2) {
    if (i2 >= 0 && (i < 0 || v2 > v || (v2 == v && i2 < i))) {
        v = v2;
        i = i2;
    }
}

// The maximum of row[0..V) and its lowest index, to every thread of the block.
// sv, si: SCORE_WARPS entries of shared memory each, used by this call only.
// Contains a barrier.
static __device__ __forceinline__ void block_argmax(const float *row, int V, float *sv, int *si, float &m,
                                                    int &a) {
    float v = -INFINITY;
    int i = -1;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const float x = row[j];
        if (i < 0 || x > v) v = x, i = j;
    }
    for (int off = 16; off > 0; off >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, v, off);
        const int i2 = __shfl_xor_sync(0xffffffffu, i, off);
        argmax_merge(v, i, v2, i2);
    }
    if (threadIdx.x % 32 == 0) sv[threadIdx.x / 32] = v, si[threadIdx.x / 32] = i;
    __syncthreads();
    v = sv[0], i = si[0];
    for (int w = 1; w < SCORE_WARPS; w++) argmax_merge(v, i, sv[w], si[w]);
    m = v, a = i;
}

// Block r scores row r of ld (and, PAIRED, of ls).
template <bool PAIRED>
__global__ void __launch_bounds__(SCORE_THREADS)
    next_token_stats_kernel1(double *nll_d, double *nll_s, double *kl, int32_t *top1, const float *ld,
                             const float *ls, const int32_t *next, int V) {
    __shared__ float sv[2][SCORE_WARPS];
    __shared__ int si[2][SCORE_WARPS];
    __shared__ double red[3][SCORE_WARPS];
    const int64_t r = blockIdx.x;
    const float *d = ld + r * V;
    const float *s = PAIRED ? ls + r * V : nullptr;

    float m_d, m_s = 0.0f;
    int a_d, a_s = 0;
    block_argmax(d, V, sv[0], si[0], m_d, a_d);
    if (PAIRED) block_argmax(s, V, sv[1], si[1], m_s, a_s);

    double sum_d = 0.0, sum_s = 0.0, cross = 0.0;
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        const double xd = d[j], ed = exp(xd - m_d);
        sum_d += ed;
        if (PAIRED) {
            const double xs = s[j];
            sum_s += exp(xs - m_s);
            cross += ed * (xd - xs);
        }
    }
    sum_d = block_sum(sum_d, red[0]);
    if (PAIRED) {
        sum_s = block_sum(sum_s, red[1]);
        cross = block_sum(cross, red[2]);
    }
    if (threadIdx.x != 0) return;
    const int nx = next[r];
    const double lse_d = m_d + log(sum_d);
    nll_d[r] = lse_d - d[nx];
    if (PAIRED) {
        const double lse_s = m_s + log(sum_s);
        const double k = cross / sum_d - (lse_d - lse_s);
        nll_s[r] = lse_s - s[nx];
        kl[r] = k > 0.0 ? k : 0.0;
        top1[r] = a_d == a_s;
    }
}

// ---- launcher ------------------------------------------------------------------------

extern "C" void next_token_stats_cuda(double *nll_d, double *nll_s, double *kl, int32_t *top1, const float *ld,
                                      const float *ls, const int32_t *next, int rows, int V) {
    if (rows <= 0) return;
    if (ls) next_token_stats_kernel1<true><<<rows, SCORE_THREADS>>>(nll_d, nll_s, kl, top1, ld, ls, next, V);
    else next_token_stats_kernel1<false><<<rows, SCORE_THREADS>>>(nll_d, nll_s, kl, top1, ld, ls, next, V);
    CUDA_CHECK(cudaGetLastError());
}
