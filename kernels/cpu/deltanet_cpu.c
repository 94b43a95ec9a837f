// deltanet_cpu.c: the ops of a Gated DeltaNet (linear attention) layer, CPU twin:
// the causal depthwise conv1d, the row L2 norm, the gated RMSNorm, the decay and
// write gates, and the
// gated delta rule in two forms: the sequential recurrence (the reference) and
// the chunked form (WY/UT transform inside a chunk, state carried across
// chunks), which must agree with it to fp32 rounding.
//
// The semantics follow HF transformers' modeling_qwen3_next.py:
// torch_recurrent_gated_delta_rule / torch_chunk_gated_delta_rule with
// use_qk_l2norm_in_kernel, l2norm, Qwen3NextRMSNormGated, and the layer's
// conv1d (padding K − 1, then the first T outputs). All arithmetic is fp32,
// the recurrent state included.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "ops.h"
#include "status.h"

static inline float silu(float x) { return x / (1.0f + expf(-x)); }

void causal_conv1d_cpu(float *out, const float *x, const float *w, const float *bias, int T, int C,
                       int K, int apply_silu) {
#pragma omp parallel for
    for (int t = 0; t < T; t++) {
        float *y = out + (int64_t)t * C;
        for (int c = 0; c < C; c++) y[c] = bias ? bias[c] : 0.0f;
        for (int j = 0; j < K; j++) {
            const int s = t - (K - 1) + j;  // the input row tap j reads; < 0 is the zero padding
            if (s < 0) continue;
            const float *xs = x + (int64_t)s * C;
            for (int c = 0; c < C; c++) y[c] += w[(int64_t)c * K + j] * xs[c];
        }
        if (apply_silu)
            for (int c = 0; c < C; c++) y[c] = silu(y[c]);
    }
}

static void l2norm_row(float *y, const float *x, int C, float eps) {
    float ss = 0.0f;
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    const float inv = 1.0f / sqrtf(ss + eps);
    for (int c = 0; c < C; c++) y[c] = x[c] * inv;
}

void l2norm_rows_cpu(float *x, int rows, int C, float eps) {
#pragma omp parallel for
    for (int r = 0; r < rows; r++) l2norm_row(x + (int64_t)r * C, x + (int64_t)r * C, C, eps);
}

void gated_rmsnorm_cpu(float *out, const float *x, const float *z, const float *w, int rows, int C,
                       float eps) {
#pragma omp parallel for
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (int64_t)r * C, *zr = z + (int64_t)r * C;
        float *y = out + (int64_t)r * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += xr[c] * xr[c];
        const float rstd = 1.0f / sqrtf(ss / C + eps);
        for (int c = 0; c < C; c++) y[c] = w[c] * (xr[c] * rstd) * silu(zr[c]);
    }
}

void deltanet_gates_cpu(float *g, float *beta, const float *a, const float *b, const float *A_log,
                        const float *dt_bias, int T, int Hv) {
#pragma omp parallel for
    for (int t = 0; t < T; t++)
        for (int h = 0; h < Hv; h++) {
            const int64_t i = (int64_t)t * Hv + h;
            const float x = a[i] + dt_bias[h];
            const float sp = x > 20.0f ? x : log1pf(expf(x));
            g[i] = -expf(A_log[h]) * sp;
            beta[i] = 1.0f / (1.0f + expf(-b[i]));
        }
}

// S [dk, dv] = value head h's initial state: state_in's, or zeros without one.
static void state_start(float *S, const float *state_in, int h, int dk, int dv) {
    if (state_in)
        memcpy(S, state_in + (int64_t)h * dk * dv, sizeof(float) * dk * dv);
    else
        memset(S, 0, sizeof(float) * dk * dv);
}

// q or k of token t, head kh, into dst (dk floats): L2-normalised (HF's
// l2norm, eps 1e-6) when asked, then multiplied by mul.
static void load_qk(float *dst, const float *src, int l2, float mul, int dk) {
    if (l2)
        l2norm_row(dst, src, dk, 1e-6f);
    else
        memcpy(dst, src, sizeof(float) * dk);
    if (mul != 1.0f)
        for (int i = 0; i < dk; i++) dst[i] *= mul;
}

// Sequential recurrence, one value head at a time (heads in parallel). The
// state S [dk, dv] stays fp32; per token, two passes over it: decay and read
// kv = Sᵀk, then the rank-1 update and the read-out o = Sᵀq.
void gated_delta_rule_cpu(float *o, float *state_out, const float *q, const float *k,
                          const float *v, const float *g, const float *beta, const float *state_in,
                          int T, int Hk, int Hv, int dk, int dv, float scale, int qk_l2norm) {
    SPINDLE_CHECK(Hk > 0 && Hv % Hk == 0);
    if (scale == 0.0f) scale = 1.0f / sqrtf((float)dk);
    const int G = Hv / Hk;
#pragma omp parallel
    {
        float *S = xmalloc(sizeof(float) * dk * dv);
        float *qt = xmalloc(sizeof(float) * dk), *kt = xmalloc(sizeof(float) * dk);
        float *kv = xmalloc(sizeof(float) * dv);
#pragma omp for schedule(static)
        for (int h = 0; h < Hv; h++) {
            const int kh = h / G;
            state_start(S, state_in, h, dk, dv);
            for (int t = 0; t < T; t++) {
                load_qk(qt, q + ((int64_t)t * Hk + kh) * dk, qk_l2norm, scale, dk);
                load_qk(kt, k + ((int64_t)t * Hk + kh) * dk, qk_l2norm, 1.0f, dk);
                const float *vt = v + ((int64_t)t * Hv + h) * dv;
                const float a = expf(g[(int64_t)t * Hv + h]), b = beta[(int64_t)t * Hv + h];
                for (int j = 0; j < dv; j++) kv[j] = 0.0f;
                for (int i = 0; i < dk; i++) {  // S ← e^g S; kv = Sᵀ k
                    float *Si = S + (int64_t)i * dv;
                    const float ki = kt[i];
#pragma omp simd
                    for (int j = 0; j < dv; j++) {
                        Si[j] *= a;
                        kv[j] += Si[j] * ki;
                    }
                }
                for (int j = 0; j < dv; j++) kv[j] = (vt[j] - kv[j]) * b;  // δ = β (v − kv)
                float *ot = o + ((int64_t)t * Hv + h) * dv;
                for (int j = 0; j < dv; j++) ot[j] = 0.0f;
                for (int i = 0; i < dk; i++) {  // S ← S + k δᵀ; o = Sᵀ q
                    float *Si = S + (int64_t)i * dv;
                    const float ki = kt[i], qi = qt[i];
#pragma omp simd
                    for (int j = 0; j < dv; j++) {
                        Si[j] += ki * kv[j];
                        ot[j] += Si[j] * qi;
                    }
                }
            }
            if (state_out) memcpy(state_out + (int64_t)h * dk * dv, S, sizeof(float) * dk * dv);
        }
        free(S);
        free(qt);
        free(kt);
        free(kv);
    }
}

// Chunked form. For a chunk of n ≤ C tokens with in-chunk cumulative log
// decays γ_i = Σ_{m≤i} g_m, and state S entering the chunk:
//   L[i][j] = β_i (k_i·k_j) e^{γ_i − γ_j}  (j < i),   Tm = (I + L)⁻¹ (unit lower triangular)
//   U = Tm (β ⊙ V),   W = Tm (β e^{γ} ⊙ K)              the WY/UT transform
//   V' = U − W S                                          the chunk's corrected values
//   O  = (e^{γ} ⊙ Q) S + (Q Kᵀ ⊙ e^{γ_i − γ_j}, j ≤ i) V'
//   S ← e^{γ_n} S + (e^{γ_n − γ} ⊙ K)ᵀ V'
// (Q already scaled; ⊙ scales row i). The GEMMs go through cblas, one thread
// each, heads in parallel; a short last chunk is handled by its own n (no padding).
void gated_delta_rule_chunked_cpu(float *o, float *state_out, const float *q, const float *k,
                                  const float *v, const float *g, const float *beta,
                                  const float *state_in, int T, int Hk, int Hv, int dk, int dv,
                                  float scale, int qk_l2norm, int chunk) {
    SPINDLE_CHECK(Hk > 0 && Hv % Hk == 0 && chunk > 0);
    if (scale == 0.0f) scale = 1.0f / sqrtf((float)dk);
    const int G = Hv / Hk, Cn = chunk;
    const int64_t ldo = (int64_t)Hv * dv;
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel
    {
        float *S = xmalloc(sizeof(float) * dk * dv);
        float *Q = xmalloc(sizeof(float) * Cn * dk), *K = xmalloc(sizeof(float) * Cn * dk);
        float *Wk = xmalloc(sizeof(float) * Cn * dk);  // β e^γ K, then W
        float *Vb = xmalloc(sizeof(float) * Cn * dv), *U = xmalloc(sizeof(float) * Cn * dv);
        float *A = xmalloc(sizeof(float) * Cn * Cn), *Tm = xmalloc(sizeof(float) * Cn * Cn);
        float *gam = xmalloc(sizeof(float) * Cn), *bt = xmalloc(sizeof(float) * Cn);
        float *Wt = xmalloc(sizeof(float) * Cn * dk);
#pragma omp for schedule(static)
        for (int h = 0; h < Hv; h++) {
            const int kh = h / G;
            state_start(S, state_in, h, dk, dv);
            for (int t0 = 0; t0 < T; t0 += Cn) {
                const int n = T - t0 < Cn ? T - t0 : Cn;
                float acc = 0.0f;
                for (int i = 0; i < n; i++) {
                    const int64_t t = t0 + i;
                    load_qk(Q + (int64_t)i * dk, q + (t * Hk + kh) * dk, qk_l2norm, scale, dk);
                    load_qk(K + (int64_t)i * dk, k + (t * Hk + kh) * dk, qk_l2norm, 1.0f, dk);
                    acc += g[t * Hv + h];
                    gam[i] = acc;
                    bt[i] = beta[t * Hv + h];
                    const float *vt = v + (t * Hv + h) * dv;
                    for (int j = 0; j < dv; j++) Vb[(int64_t)i * dv + j] = bt[i] * vt[j];
                    const float s = bt[i] * expf(gam[i]);
                    for (int c = 0; c < dk; c++)
                        Wk[(int64_t)i * dk + c] = s * K[(int64_t)i * dk + c];
                }
                // A = K Kᵀ; L = β_i e^{γ_i − γ_j} A (strictly lower); Tm = (I + L)⁻¹ by
                // forward substitution: Tm[i][j] = −Σ_{j≤m<i} L[i][m] Tm[m][j].
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, dk, 1.0f, K, dk, K, dk,
                            0.0f, A, Cn);
                for (int i = 0; i < n; i++) {
                    float *Ti = Tm + (int64_t)i * Cn;
                    float *Li = A + (int64_t)i * Cn;
                    for (int j = 0; j < i; j++) Li[j] *= bt[i] * expf(gam[i] - gam[j]);
                    for (int j = 0; j < n; j++) Ti[j] = 0.0f;
                    Ti[i] = 1.0f;
                    for (int m = 0; m < i; m++) {  // Ti[0..m] −= L[i][m] Tm[m][0..m]
                        const float l = Li[m];
                        const float *Tmr = Tm + (int64_t)m * Cn;
                        for (int j = 0; j <= m; j++) Ti[j] -= l * Tmr[j];
                    }
                }
                // U = Tm Vb, W = Tm Wk.
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, n, 1.0f, Tm, Cn, Vb,
                            dv, 0.0f, U, dv);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dk, n, 1.0f, Tm, Cn, Wk,
                            dk, 0.0f, Wt, dk);
                // V' = U − W S (in U).
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, dk, -1.0f, Wt, dk, S,
                            dv, 1.0f, U, dv);
                // P = Q Kᵀ ⊙ e^{γ_i − γ_j} for j ≤ i (in A), then O = (e^γ Q) S + P V'.
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, dk, 1.0f, Q, dk, K, dk,
                            0.0f, A, Cn);
                for (int i = 0; i < n; i++) {
                    float *Pi = A + (int64_t)i * Cn;
                    for (int j = 0; j <= i; j++) Pi[j] *= expf(gam[i] - gam[j]);
                    for (int j = i + 1; j < n; j++) Pi[j] = 0.0f;
                    const float e = expf(gam[i]);
                    for (int c = 0; c < dk; c++) Q[(int64_t)i * dk + c] *= e;
                }
                float *Ob = o + ((int64_t)t0 * Hv + h) * dv;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, dk, 1.0f, Q, dk, S,
                            dv, 0.0f, Ob, (int)ldo);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, n, 1.0f, A, Cn, U, dv,
                            1.0f, Ob, (int)ldo);
                // S ← e^{γ_n} S + (e^{γ_n − γ} K)ᵀ V'.
                const float gn = gam[n - 1], en = expf(gn);
                for (int64_t i = 0; i < (int64_t)dk * dv; i++) S[i] *= en;
                for (int i = 0; i < n; i++) {
                    const float e = expf(gn - gam[i]);
                    for (int c = 0; c < dk; c++) K[(int64_t)i * dk + c] *= e;
                }
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dk, dv, n, 1.0f, K, dk, U, dv,
                            1.0f, S, dv);
            }
            if (state_out) memcpy(state_out + (int64_t)h * dk * dv, S, sizeof(float) * dk * dv);
        }
        free(S);
        free(Q);
        free(K);
        free(Wk);
        free(Vb);
        free(U);
        free(A);
        free(Tm);
        free(gam);
        free(bt);
        free(Wt);
    }
    openblas_set_num_threads(blas_threads);
}
