// attention_cpu.c: causal or sliding-window GQA attention, CPU twin, flash style.
//
// For each (query head, tile of BQ queries) the keys are streamed in tiles of
// BK: S = scale·Q·Kᵀ (one small GEMM), an online softmax keeps each row's
// running max m and sum l, and acc += exp(S − m)·V (a second GEMM). Memory is
// O(BQ·BK) per thread whatever T is. Query t sees keys lo(t) ≤ j ≤ t with
// lo(t) = 0 (causal) or t − W + 1 (window W); the key tiles of a query tile
// start at lo of its first query, so a window reads about (W + BQ)·T keys.
#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "fastexp.h"
#include "ops.h"
#include "status.h"

enum { BQ = 64, BK = 128 };

void attention_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v,
                           int T, int Hq, int Hkv, int dh, float scale, int window) {
    const int G = Hq / Hkv;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    const int n_qt = (T + BQ - 1) / BQ;
    // Each thread runs its own small GEMMs: keep OpenBLAS from spawning more.
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel
    {
        float *S = xmalloc(sizeof(float) * BQ * BK);
        float *acc = xmalloc(sizeof(float) * BQ * dh);
        float m[BQ], l[BQ];
#pragma omp for schedule(dynamic, 1)
        for (int task = 0; task < Hq * n_qt; task++) {
            const int h = task / n_qt, qt = n_qt - 1 - task % n_qt;  // long rows first
            const int t0 = qt * BQ, nt = T - t0 < BQ ? T - t0 : BQ, kh = h / G;
            const float *Q = q + t0 * nq + (int64_t)h * dh;
            for (int i = 0; i < nt; i++) m[i] = -INFINITY, l[i] = 0.0f;
            for (int64_t i = 0; i < (int64_t)nt * dh; i++) acc[i] = 0.0f;
            const int k_lo = window > 0 && t0 - window + 1 > 0 ? t0 - window + 1 : 0;
            for (int j0 = k_lo; j0 < t0 + nt; j0 += BK) {
                const int nk = t0 + nt - j0 < BK ? t0 + nt - j0 : BK;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nt, nk, dh, scale, Q, (int)nq,
                            k + j0 * nkv + (int64_t)kh * dh, (int)nkv, 0.0f, S, BK);
                for (int i = 0; i < nt; i++) {
                    float *s = S + i * BK;
                    // Row i sees the tile's columns [j_a, j_b): keys max(lo, j0)..t0+i.
                    int j_b = t0 + i - j0 + 1, j_a = 0;
                    if (j_b > nk) j_b = nk;
                    if (window > 0 && t0 + i - window + 1 > j0) j_a = t0 + i - window + 1 - j0;
                    if (j_b <= j_a) {
                        for (int j = 0; j < nk; j++) s[j] = 0.0f;
                        continue;
                    }
                    float mx = m[i];
#pragma omp simd reduction(max : mx)
                    for (int j = j_a; j < j_b; j++) mx = s[j] > mx ? s[j] : mx;
                    const float corr = expf(m[i] - mx);
                    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                    for (int j = j_a; j < j_b; j++) sum += (s[j] = fast_expf(s[j] - mx));
                    for (int j = 0; j < j_a; j++) s[j] = 0.0f;
                    for (int j = j_b; j < nk; j++) s[j] = 0.0f;
                    l[i] = l[i] * corr + sum;
                    m[i] = mx;
                    float *a = acc + (int64_t)i * dh;
                    for (int d = 0; d < dh; d++) a[d] *= corr;
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nt, dh, nk, 1.0f, S, BK,
                            v + j0 * nkv + (int64_t)kh * dh, (int)nkv, 1.0f, acc, dh);
            }
            for (int i = 0; i < nt; i++) {
                float *o = out + (t0 + i) * nq + (int64_t)h * dh;
                const float inv = 1.0f / l[i];
                for (int d = 0; d < dh; d++) o[d] = acc[(int64_t)i * dh + d] * inv;
                if (lse) lse[(int64_t)h * T + t0 + i] = m[i] + logf(l[i]);
            }
        }
        free(S);
        free(acc);
    }
    openblas_set_num_threads(blas_threads);
}
