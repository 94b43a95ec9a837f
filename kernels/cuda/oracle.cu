// oracle.cu: the attention-mass oracle on the GPU (oracle_select_cuda,
// oracle_attention_cuda in oracle_cuda.h), the CUDA twin of the selection
// inside oracle_attention_cpu (kernels/cpu/oracle_cpu.c). Definitions
// (docs/design.md "Oracle", normative):
//   P_t(j) = (1/Hq) Σ_h exp(s·q_{h,t}·k_{h/G,j} − lse_{h,t}),  j ≤ t
//   per query (bsel = 1): row t = P_t over j ≤ t
//   block-shared (bsel = s): row b = A_B(j) = Σ_{t∈B, t≥j} P_t(j) over j < end(B)
//   S_row = top-k of the row (all of it when its length ≤ k).
//
// Never T×T: rows are scored a chunk at a time into a [chunk, T] fp32 buffer
// (≤ 256 MB), then topk_rows_cuda (topk.cu) selects from the chunk. Leading
// rows whose length is ≤ k need no scores at all (they take every key).
//
// Scores (oracle_scores_kernel1): one thread block = one key tile of
// OR_BK = 64 keys × one group of rows. A group is OR_BQ = 64 queries, i.e.
// 64 rows for bsel = 1, 64/bsel whole blocks for bsel < 64, or one block of
// bsel queries (several query tiles, visited in order) for bsel ≥ 64. For each
// query tile the block forms the P tile [64 queries × 64 keys] in registers
// (each of 256 threads owns a 4×4 micro-tile): per head, q·k by a plain
// shared-memory SGEMM over dh in slices of OR_DK = 32, then exp(s·q·k − lse)
// added with weight 1/Hq, masked to 0 where j > t. The P tile goes to shared
// memory, and each thread adds its (row, key) pairs' column sums over the
// row's queries in the tile into registers. Query order is ascending (as the
// CPU twin's block sum) and no atomics are used, so scores are deterministic.
// Cost: T²/2·Hq·dh FMAs, fp32 CUDA cores; a tensor-core version is later work
// and will be judged against this one.
//
// oracle_attention_cuda chains attention_forward_cuda (for lse; its output
// goes to out, overwritten later), oracle_select_cuda and
// support_attention_cuda (sparse_attention.cu). With topk ≥ T it is dense
// attention, bit for bit, with recall += 1 and support += t + 1, as the CPU twin.
#include <math.h>
#include <stdint.h>

#include "cuda_check.cuh"
#include "oracle_cuda.h"
#include "ops_cuda.h"

enum {
    OR_BQ = 64,     // queries per tile
    OR_BK = 64,     // keys per tile
    OR_DK = 32,     // dh slice staged in shared memory
    OR_THREADS = 256,
    OR_NACC = OR_BQ * OR_BK / OR_THREADS,  // (row, key) accumulators per thread
};
static const int64_t OR_BUFFER_FLOATS = (int64_t)64 << 20;  // 256 MB of scores per chunk

// ---- kernels ------------------------------------------------------------------------

// A[(b − row0)·ld + j] = row b's score for key j, for the rows b of group
// blockIdx.y (R consecutive rows from row0 + blockIdx.y·R, capped at
// row0 + nrows) and keys j of tile blockIdx.x with j < len_b = min((b+1)·bsel, T).
__global__ void __launch_bounds__(OR_THREADS)
    oracle_scores_kernel1(float *A, int64_t ld, const float *q, const float *k, const float *lse, int T, int Hq,
                          int Hkv, int dh, float scale, int bsel, int row0, int nrows, int R) {
    __shared__ float Qs[OR_DK][OR_BQ + 1];  // +1: the transposing stores hit 32 banks
    __shared__ float Ks[OR_DK][OR_BK + 1];
    __shared__ float Ps[OR_BQ][OR_BK + 1];

    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int G = Hq / Hkv;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    const int rg0 = row0 + blockIdx.y * R, rg1 = min(rg0 + R, row0 + nrows);  // rows of this group
    const int qg0 = rg0 * bsel, qg1 = min(rg1 * bsel, T);                      // their queries
    const int j0 = blockIdx.x * OR_BK;
    if (j0 >= qg1) return;  // every key of the tile is after every query of the group
    const float inv_h = 1.0f / Hq;

    float acc[OR_NACC];
#pragma unroll
    for (int i = 0; i < OR_NACC; i++) acc[i] = 0.0f;

    for (int tq0 = qg0; tq0 < qg1; tq0 += OR_BQ) {
        if (tq0 + OR_BQ - 1 < j0) continue;  // uniform: the tile is above the diagonal
        float p[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int jj = 0; jj < 4; jj++) p[i][jj] = 0.0f;

        for (int h = 0; h < Hq; h++) {
            const int kh = h / G;
            float dot[4][4];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int jj = 0; jj < 4; jj++) dot[i][jj] = 0.0f;
            for (int d0 = 0; d0 < dh; d0 += OR_DK) {
                __syncthreads();  // the previous slice is consumed
                for (int e = tid; e < OR_BQ * OR_DK; e += OR_THREADS) {
                    const int r = e / OR_DK, d = e % OR_DK, t = tq0 + r;
                    Qs[d][r] = t < qg1 && d0 + d < dh ? q[t * nq + (int64_t)h * dh + d0 + d] : 0.0f;
                }
                for (int e = tid; e < OR_BK * OR_DK; e += OR_THREADS) {
                    const int c = e / OR_DK, d = e % OR_DK, j = j0 + c;
                    Ks[d][c] = j < qg1 && d0 + d < dh ? k[j * nkv + (int64_t)kh * dh + d0 + d] : 0.0f;
                }
                __syncthreads();
#pragma unroll 8
                for (int d = 0; d < OR_DK; d++) {
                    float a[4], b[4];
#pragma unroll
                    for (int i = 0; i < 4; i++) a[i] = Qs[d][ty + 16 * i];
#pragma unroll
                    for (int jj = 0; jj < 4; jj++) b[jj] = Ks[d][tx + 16 * jj];
#pragma unroll
                    for (int i = 0; i < 4; i++)
#pragma unroll
                        for (int jj = 0; jj < 4; jj++) dot[i][jj] += a[i] * b[jj];
                }
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int t = tq0 + ty + 16 * i;
                if (t >= qg1) continue;
                const float l = lse[(int64_t)h * T + t];
#pragma unroll
                for (int jj = 0; jj < 4; jj++) {
                    const int j = j0 + tx + 16 * jj;
                    if (j <= t) p[i][jj] += expf(scale * dot[i][jj] - l) * inv_h;
                }
            }
        }

        // Column sums of the P tile over each row's queries.
        __syncthreads();  // no thread still reads Ps from the previous tile
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int jj = 0; jj < 4; jj++) Ps[ty + 16 * i][tx + 16 * jj] = p[i][jj];
        __syncthreads();
#pragma unroll
        for (int i = 0; i < OR_NACC; i++) {
            const int e = tid + i * OR_THREADS, r = e / OR_BK, c = e % OR_BK, b = rg0 + r;
            if (b >= rg1) continue;
            const int t_lo = max(b * bsel, tq0), t_hi = min(min((b + 1) * bsel, qg1), tq0 + OR_BQ);
            for (int t = t_lo; t < t_hi; t++) acc[i] += Ps[t - tq0][c];
        }
    }

#pragma unroll
    for (int i = 0; i < OR_NACC; i++) {
        const int e = tid + i * OR_THREADS, r = e / OR_BK, c = e % OR_BK, b = rg0 + r, j = j0 + c;
        if (b < rg1 && j < min((b + 1) * bsel, T)) A[(int64_t)(b - row0) * ld + j] = acc[i];
    }
}

// Dense attention's recall and support counts: recall[t] += 1, support[t] += t + 1.
__global__ void oracle_dense_counts_kernel1(float *recall, float *support, int T) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    if (recall) recall[t] += 1.0f;
    if (support) support[t] += (float)(t + 1);
}

// ---- launchers ------------------------------------------------------------------------

static void oracle_check_shape(const char *fn, int Hq, int Hkv, int dh, int topk, int bsel) {
    if (dh <= 0 || dh > 256 || Hkv <= 0 || Hq % Hkv != 0 || topk < 1 || bsel < 1) {
        fprintf(stderr, "spindle: %s: unsupported shape Hq=%d Hkv=%d dh=%d topk=%d bsel=%d (%s:%d)\n", fn, Hq, Hkv,
                dh, topk, bsel, __FILE__, __LINE__);
        abort();
    }
}

extern "C" void oracle_select_cuda(int32_t *sel, int32_t *n_sel, const float *q, const float *k, const float *lse,
                                   int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel) {
    if (T <= 0) return;
    oracle_check_shape("oracle_select_cuda", Hq, Hkv, dh, topk, bsel);
    // Row r has length len_r = min((r+1)·bsel, T) for both modes (bsel = 1: t + 1).
    const int rows = (T + bsel - 1) / bsel;
    const int first = T <= topk ? rows : (topk / bsel < rows ? topk / bsel : rows);  // len ≤ topk
    if (first > 0)  // these rows take every key: topk_rows_cuda reads no scores for them
        topk_rows_cuda(sel, n_sel, NULL, first, 0, bsel, bsel, T, topk);
    if (first == rows) return;

    const int R = bsel >= OR_BQ ? 1 : OR_BQ / bsel;  // rows per group of the score kernel
    int64_t chunk = OR_BUFFER_FLOATS / T;
    if (chunk > (int64_t)65535 * R) chunk = (int64_t)65535 * R;  // grid.y limit
    chunk = chunk < R ? R : chunk / R * R;
    if (chunk > rows - first) chunk = rows - first;
    float *buf = (float *)cuda_malloc(sizeof(float) * (size_t)chunk * T);
    for (int r0 = first; r0 < rows; r0 += (int)chunk) {
        const int n = rows - r0 < chunk ? rows - r0 : (int)chunk;
        const int max_len = (r0 + n) * bsel < T ? (r0 + n) * bsel : T;
        dim3 grid((max_len + OR_BK - 1) / OR_BK, (n + R - 1) / R);
        oracle_scores_kernel1<<<grid, OR_THREADS>>>(buf, T, q, k, lse, T, Hq, Hkv, dh, scale, bsel, r0, n, R);
        CUDA_CHECK(cudaGetLastError());
        topk_rows_cuda(sel + (int64_t)r0 * topk, n_sel + r0, buf, n, T, (r0 + 1) * bsel, bsel, T, topk);
    }
    cuda_free(buf);  // freed in stream order, after the work queued on it
}

extern "C" void oracle_attention_cuda(float *out, float *recall, float *support, const float *q, const float *k,
                                      const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk,
                                      int bsel) {
    if (T <= 0) return;
    oracle_check_shape("oracle_attention_cuda", Hq, Hkv, dh, topk, bsel);
    if (topk >= T) {  // every support is the whole causal set: dense attention
        attention_forward_cuda(out, NULL, q, k, v, T, Hq, Hkv, dh, scale, 0);
        if (recall || support) {
            oracle_dense_counts_kernel1<<<(T + 255) / 256, 256>>>(recall, support, T);
            CUDA_CHECK(cudaGetLastError());
        }
        return;
    }
    const int rows = (T + bsel - 1) / bsel;
    float *lse = (float *)cuda_malloc(sizeof(float) * (size_t)Hq * T);
    int32_t *sel = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)rows * topk);
    int32_t *n_sel = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)rows);
    attention_forward_cuda(out, lse, q, k, v, T, Hq, Hkv, dh, scale, 0);  // out: scratch, for lse only
    oracle_select_cuda(sel, n_sel, q, k, lse, T, Hq, Hkv, dh, scale, topk, bsel);
    support_attention_cuda(out, recall, support, q, k, v, lse, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);
    cuda_free(lse);
    cuda_free(sel);
    cuda_free(n_sel);
}
