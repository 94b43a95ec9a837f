// indexer_refine.cu: the second stage of two-stage supports (docs/design.md
// "Two-stage supports"; indexer_select_refined_cuda in indexer.cu composes it):
// each block B of bsel queries has its candidates C_B (cand keys, ascending,
// from the block-shared selection at k = cand), and each query t ∈ B keeps the
// top-k of its own score over C_B ∩ [0, t]. Two kernels, with topk_rows_cuda
// (topk.cu) between them:
//
//   refine_scores_kernel: R[(t − t0)·ld + i] = c·q_t·k_{C_B[i]} for i < |C_B|
//     with C_B[i] ≤ t, −∞ otherwise. A thread block takes RQ = 32 queries of
//     one block B (they share C_B) and walks its candidates in tiles of RC = 32:
//     the 32 q rows and each tile's 32 gathered k rows are staged in shared
//     memory, and each of the 256 threads computes 4 of the tile's 32 × 32 dot
//     products, so a gathered key row is read once per 32 queries.
//   refine_rows_kernel: the top-k positions of a row (ascending, from
//     topk_rows_cuda over the cand columns) back to key indices. The valid
//     positions of row t are the prefix i < m_t = #{i : C_B[i] ≤ t} (C_B is
//     ascending), and every valid score outranks −∞, so the row keeps its
//     positions below m_t: n_sel[t] = min(k, m_t), sel = C_B at those positions.
//
// Under SPINDLE_CUDA_EMULATION (tests/emu) the launches and the dynamic shared
// memory go through the emulation's stand-ins (scripts/emulate-cuda.sh refine).
#include <math.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "device_util.cuh"

enum { RQ = 32, RC = 32, R_THREADS = 256 };

// grid (ceil(bsel / RQ), ceil(cand / RC), nb): blocks b0 … b0 + nb − 1; rows
// t0 = b0·bsel onwards, R row-major with leading dimension ld (≥ cand).
__global__ void refine_scores_kernel(float *R, int64_t ld, const float *q, const float *kk, int dI, float c_col,
                                     const int32_t *csel, const int32_t *cn, int cand, int T, int bsel, int b0) {
    DYNAMIC_SMEM(sm);
    float *qs = sm, *ks = sm + RQ * dI;  // [RQ][dI], [RC][dI + 1]
    const int b = b0 + (int)blockIdx.z, t0 = b0 * bsel;
    const int r0 = b * bsel + (int)blockIdx.x * RQ, rend = min(min(r0 + RQ, (b + 1) * bsel), T);
    const int i0 = (int)blockIdx.y * RC;
    if (r0 >= rend) return;
    const int32_t *C = csel + (int64_t)b * cand;
    const int nc = cn[b];
    for (int e = threadIdx.x; e < RQ * dI; e += R_THREADS) {
        const int r = e / dI, d = e % dI;
        qs[e] = r0 + r < rend ? q[(int64_t)(r0 + r) * dI + d] : 0.0f;
    }
    for (int e = threadIdx.x; e < RC * dI; e += R_THREADS) {
        const int c = e / dI, d = e % dI;
        ks[c * (dI + 1) + d] = i0 + c < nc ? kk[(int64_t)C[i0 + c] * dI + d] : 0.0f;
    }
    __syncthreads();
    const int c = threadIdx.x % RC, rb = threadIdx.x / RC;  // candidate column, first of 4 rows
    const int i = i0 + c;
    if (i >= cand) return;
    const int key = i < nc ? C[i] : INT32_MAX;
    for (int rr = rb; rr < RQ; rr += R_THREADS / RC) {
        const int t = r0 + rr;
        if (t >= rend) break;
        float s = -INFINITY;
        if (key <= t) {
            float d = 0.0f;
            for (int a = 0; a < dI; a++) d += qs[rr * dI + a] * ks[c * (dI + 1) + a];
            s = c_col * d;
        }
        R[(int64_t)(t - t0) * ld + i] = s;
    }
}

// One thread per row t ∈ [t0, t0 + rows): pos [rows, k] ascending positions
// (topk_rows_cuda's sel over the cand columns), pn its counts.
__global__ void refine_rows_kernel(int32_t *sel, int32_t *n_sel, const int32_t *pos, const int32_t *pn,
                                   const int32_t *csel, const int32_t *cn, int cand, int k, int bsel, int t0,
                                   int rows) {
    const int r = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (r >= rows) return;
    const int t = t0 + r, b = t / bsel;
    const int32_t *C = csel + (int64_t)b * cand, *P = pos + (int64_t)r * k;
    const int m = count_le(C, cn[b], t);
    int n = 0;
    while (n < pn[r] && P[n] < m) n++;
    int32_t *row = sel + (int64_t)t * k;
    for (int a = 0; a < k; a++) row[a] = a < n ? C[P[a]] : -1;
    n_sel[t] = n;
}

extern "C" void indexer_refine_scores_cuda(float *R, int64_t ld, const float *q, const float *kk, int dI, float c_col,
                                           const int32_t *csel, const int32_t *cn, int cand, int T, int bsel, int b0,
                                           int nb) {
    if (nb <= 0) return;
    const size_t smem = sizeof(float) * ((size_t)RQ * dI + (size_t)RC * (dI + 1));
    CUDA_CHECK(cudaFuncSetAttribute(refine_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)((bsel + RQ - 1) / RQ), (unsigned)((cand + RC - 1) / RC), (unsigned)nb);
    launch_checked(refine_scores_kernel, grid, dim3(R_THREADS), smem, R, ld, q, kk, dI, c_col, csel, cn, cand, T, bsel,
                   b0);
}

extern "C" void indexer_refine_rows_cuda(int32_t *sel, int32_t *n_sel, const int32_t *pos, const int32_t *pn,
                                         const int32_t *csel, const int32_t *cn, int cand, int k, int bsel, int t0,
                                         int rows) {
    if (rows <= 0) return;
    launch_checked(refine_rows_kernel, dim3((unsigned)((rows + 255) / 256)), dim3(256), 0, sel, n_sel, pos, pn, csel,
                   cn, cand, k, bsel, t0, rows);
}
