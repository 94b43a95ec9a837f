// attention_cpu.c: causal GQA attention, CPU twin, flash style, with an
// optional sliding window (window W > 0: key j is visible to query t iff
// t − W < j ≤ t; W = 0 or W ≥ T: plain causal).
//
// For each (query head, tile of BQ queries) the keys are streamed in tiles of
// BK: S = scale·Q·Kᵀ (one small GEMM), an online softmax keeps each row's
// running max m and sum l, and acc += exp(S − m)·V (a second GEMM). Memory is
// O(BQ·BK) per thread whatever T is. With a window, key tiles wholly before
// the first row's window are skipped and each row's scores outside its band
// are weight 0.
#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "fastexp.h"
#include "ops.h"
#include "status.h"

enum { BQ = 64, BK = 128 };

void attention_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v,
                           int T, int Hq, int Hkv, int dh, float scale, int window) {
    const int W = window > 0 && window < T ? window : 0;  // 0: causal
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
            const int jlo = W && t0 - W + 1 > 0 ? t0 - W + 1 : 0;  // first key any row here sees
            for (int j0 = jlo; j0 < t0 + nt; j0 += BK) {
                const int nk = t0 + nt - j0 < BK ? t0 + nt - j0 : BK;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nt, nk, dh, scale, Q, (int)nq,
                            k + j0 * nkv + (int64_t)kh * dh, (int)nkv, 0.0f, S, BK);
                for (int i = 0; i < nt; i++) {
                    float *s = S + i * BK;
                    int nv = t0 + i - j0 + 1;  // keys j0..t0+i are causal
                    if (nv > nk) nv = nk;
                    int lo = W ? t0 + i - W + 1 - j0 : 0;  // keys before j0+lo are outside the window
                    if (lo < 0) lo = 0;
                    if (nv <= lo) {
                        for (int j = 0; j < nk; j++) s[j] = 0.0f;
                        continue;
                    }
                    float mx = m[i];
#pragma omp simd reduction(max : mx)
                    for (int j = lo; j < nv; j++) mx = s[j] > mx ? s[j] : mx;
                    const float corr = expf(m[i] - mx);
                    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                    for (int j = lo; j < nv; j++) sum += (s[j] = fast_expf(s[j] - mx));
                    for (int j = 0; j < lo; j++) s[j] = 0.0f;
                    for (int j = nv; j < nk; j++) s[j] = 0.0f;
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

// Decoding attention over a cache: n new queries at positions p0..p0+n−1, keys
// and values of positions 0..p0+n−1 in the cache (the new ones already
// appended). Plain loops with a two-pass softmax per (query, head): n is small
// (1 per generated token), the cost is the O(p0·dh) read of the cache.
void attention_cached_cpu(float *out, const float *q, const float *k_cache, const float *v_cache, int p0, int n,
                          int Hq, int Hkv, int dh, float scale, int window) {
    const int G = Hq / Hkv;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    const int L = p0 + n;
    float *S = xmalloc(sizeof(float) * (size_t)L * n * Hq);
#pragma omp parallel for collapse(2) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int h = 0; h < Hq; h++) {
            const int t = p0 + i, kh = h / G;
            const int lo = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;  // keys lo..t are visible
            const float *qv = q + i * nq + (int64_t)h * dh;
            float *s = S + ((int64_t)i * Hq + h) * L;
            float mx = -INFINITY;
            for (int j = lo; j <= t; j++) {  // s_j = scale · q·k_j
                const float *kv = k_cache + j * nkv + (int64_t)kh * dh;
                float dot = 0.0f;
                for (int d = 0; d < dh; d++) dot += qv[d] * kv[d];
                s[j] = scale * dot;
                mx = s[j] > mx ? s[j] : mx;
            }
            float sum = 0.0f;
            for (int j = lo; j <= t; j++) sum += (s[j] = fast_expf(s[j] - mx));
            float *o = out + i * nq + (int64_t)h * dh;
            for (int d = 0; d < dh; d++) o[d] = 0.0f;
            for (int j = lo; j <= t; j++) {  // o = Σ_j softmax_j · v_j
                const float *vv = v_cache + j * nkv + (int64_t)kh * dh, w = s[j] / sum;
                for (int d = 0; d < dh; d++) o[d] += w * vv[d];
            }
        }
    }
    free(S);
}
