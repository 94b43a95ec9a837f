// test_units: the small pieces, each against an independent reference.
//   test_units TMP_DIR
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backbone.h"
#include "config.h"
#include "ids.h"
#include "npy.h"
#include "ops.h"
#include "safetensors.h"

#include "expect.h"

static const char *tmp;

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

static void test_half_floats(void) {
    EXPECT(st_f16_to_f32(0x3C00) == 1.0f, "f16 1.0");
    EXPECT(st_f16_to_f32(0xC000) == -2.0f, "f16 -2.0");
    EXPECT(st_f16_to_f32(0x7BFF) == 65504.0f, "f16 max");
    EXPECT(st_f16_to_f32(0x0001) == ldexpf(1.0f, -24), "f16 smallest subnormal");
    EXPECT(st_f16_to_f32(0x83FF) == -1023.0f * ldexpf(1.0f, -24), "f16 largest negative subnormal");
    EXPECT(isinf(st_f16_to_f32(0x7C00)) && isnan(st_f16_to_f32(0x7E00)), "f16 inf/nan");
    EXPECT(st_bf16_to_f32(0x3F80) == 1.0f && st_bf16_to_f32(0xC0A0) == -5.0f, "bf16");
}

// Naive GQA attention with a full score row per query, in double: the
// reference. Query t sees keys lo..t, lo = 0 (window 0) or max(0, t − window + 1).
static void attention_naive(float *out, float *lse, const float *q, const float *k, const float *v,
                            int T, int Hq, int Hkv, int dh, float scale, int window) {
    double *p = calloc((size_t)T, sizeof(double));
    for (int h = 0; h < Hq; h++) {
        int kh = h / (Hq / Hkv);
        for (int t = 0; t < T; t++) {
            const int lo = window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
            double mx = -INFINITY, sum = 0;
            for (int j = lo; j <= t; j++) {
                double s = 0;
                for (int d = 0; d < dh; d++) s += (double)q[(t * Hq + h) * dh + d] * k[(j * Hkv + kh) * dh + d];
                p[j] = s * scale;
                mx = p[j] > mx ? p[j] : mx;
            }
            for (int j = lo; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
            for (int d = 0; d < dh; d++) {
                double a = 0;
                for (int j = lo; j <= t; j++) a += p[j] * v[(j * Hkv + kh) * dh + d];
                out[(t * Hq + h) * dh + d] = (float)(a / sum);
            }
            lse[h * T + t] = (float)(mx + log(sum));
        }
    }
    free(p);
}

static void test_attention(void) {
    const int cases[][4] = {{1, 4, 4, 16}, {5, 8, 2, 16}, {64, 3, 3, 64}, {130, 8, 1, 32}, {300, 4, 2, 64}};
    unsigned seed = 7;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int T = cases[c][0], Hq = cases[c][1], Hkv = cases[c][2], dh = cases[c][3];
        size_t nq = (size_t)T * Hq * dh, nkv = (size_t)T * Hkv * dh;
        float *q = malloc(4 * nq), *k = malloc(4 * nkv), *v = malloc(4 * nkv);
        float *o1 = malloc(4 * nq), *o2 = malloc(4 * nq), *l1 = malloc(4 * Hq * T), *l2 = malloc(4 * Hq * T);
        for (size_t i = 0; i < nq; i++) q[i] = (float)(rand_r(&seed) % 2001 - 1000) / 250.0f;
        for (size_t i = 0; i < nkv; i++) k[i] = (float)(rand_r(&seed) % 2001 - 1000) / 250.0f;
        for (size_t i = 0; i < nkv; i++) v[i] = (float)(rand_r(&seed) % 2001 - 1000) / 1000.0f;
        float scale = 1.0f / sqrtf((float)dh);
        attention_forward_cpu(o1, l1, q, k, v, T, Hq, Hkv, dh, scale, 0);
        attention_naive(o2, l2, q, k, v, T, Hq, Hkv, dh, scale, 0);
        double eo = 0, el = 0;
        for (size_t i = 0; i < nq; i++) eo = fmax(eo, fabs(o1[i] - o2[i]));
        for (int i = 0; i < Hq * T; i++) el = fmax(el, fabs(l1[i] - l2[i]) / fmax(1.0, fabs(l2[i])));
        EXPECT(eo < 2e-5 && el < 2e-6, "attention T=%d Hq=%d Hkv=%d dh=%d: max out err %.3g, lse err %.3g",
               T, Hq, Hkv, dh, eo, el);
        free(q), free(k), free(v), free(o1), free(o2), free(l1), free(l2);
    }
}

// Sliding-window attention (key j visible to query t iff t − W < j ≤ t) against
// the naive reference: W = 1 (each query sees itself), windows that do not
// divide the tile sizes (BQ 64, BK 128), W = T − 1, W ≥ T (= causal, bit for bit).
static void test_attention_window(void) {
    const int cases[][5] = {{300, 4, 2, 32, 1},   {300, 4, 2, 32, 2},   {300, 4, 2, 32, 7},
                            {300, 4, 1, 64, 100}, {300, 2, 2, 16, 129}, {300, 4, 2, 32, 299},
                            {300, 4, 2, 32, 300}, {77, 3, 1, 16, 1000}, {1, 2, 1, 8, 1},
                            {513, 4, 1, 256, 64}, {200, 8, 2, 16, 64}};
    unsigned seed = 11;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int T = cases[c][0], Hq = cases[c][1], Hkv = cases[c][2], dh = cases[c][3], W = cases[c][4];
        size_t nq = (size_t)T * Hq * dh, nkv = (size_t)T * Hkv * dh;
        float *q = malloc(4 * nq), *k = malloc(4 * nkv), *v = malloc(4 * nkv);
        float *o1 = malloc(4 * nq), *o2 = malloc(4 * nq), *o3 = malloc(4 * nq);
        float *l1 = malloc(4 * Hq * T), *l2 = malloc(4 * Hq * T), *l3 = malloc(4 * Hq * T);
        for (size_t i = 0; i < nq; i++) q[i] = (float)(rand_r(&seed) % 2001 - 1000) / 250.0f;
        for (size_t i = 0; i < nkv; i++) k[i] = (float)(rand_r(&seed) % 2001 - 1000) / 250.0f;
        for (size_t i = 0; i < nkv; i++) v[i] = (float)(rand_r(&seed) % 2001 - 1000) / 1000.0f;
        float scale = 1.0f / sqrtf((float)dh);
        attention_forward_cpu(o1, l1, q, k, v, T, Hq, Hkv, dh, scale, W);
        attention_naive(o2, l2, q, k, v, T, Hq, Hkv, dh, scale, W);
        double eo = 0, el = 0;
        for (size_t i = 0; i < nq; i++) eo = fmax(eo, fabs(o1[i] - o2[i]));
        for (int i = 0; i < Hq * T; i++) el = fmax(el, fabs(l1[i] - l2[i]) / fmax(1.0, fabs(l2[i])));
        EXPECT(eo < 2e-5 && el < 2e-6, "window %d attention T=%d Hq=%d Hkv=%d dh=%d: max out err %.3g, lse err %.3g",
               W, T, Hq, Hkv, dh, eo, el);
        if (W == 1) {  // one visible key: out = v of the query's own position, lse = its score
            double e1 = 0;
            for (int t = 0; t < T; t++)
                for (int h = 0; h < Hq; h++)
                    for (int d = 0; d < dh; d++)
                        e1 = fmax(e1, fabs(o1[((size_t)t * Hq + h) * dh + d] -
                                           v[((size_t)t * Hkv + h / (Hq / Hkv)) * dh + d]));
            EXPECT(e1 < 1e-6, "window 1: out differs from v by %.3g", e1);
        }
        attention_forward_cpu(o3, l3, q, k, v, T, Hq, Hkv, dh, scale, 0);
        if (W >= T)
            EXPECT(!memcmp(o1, o3, 4 * nq) && !memcmp(l1, l3, 4 * Hq * T),
                   "window %d >= T=%d is not bit-identical to causal", W, T);
        else if (T > 1) {  // the window must matter: the last query's row differs from causal
            double diff = 0;
            for (int i = 0; i < Hq * dh; i++) diff = fmax(diff, fabs(o1[(size_t)(T - 1) * Hq * dh + i] - o3[(size_t)(T - 1) * Hq * dh + i]));
            EXPECT(diff > 1e-4, "window %d < T=%d gives the causal result (max diff %.3g)", W, T, diff);
        }
        free(q), free(k), free(v), free(o1), free(o2), free(o3), free(l1), free(l2), free(l3);
    }
}

// gelu_tanh (torch's approximate="tanh") at values computed in double from the
// formula 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))); silu beside it; and
// the soft-cap cap·tanh(x/cap).
static void test_glu_softcap(void) {
    const float x[] = {0.0f, 1.0f, -1.0f, 2.0f, -3.0f, 0.5f, -0.25f, 5.0f, -8.0f, 20.0f, -20.0f};
    // 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x**3))) in Python floats (double):
    const double want[] = {0.0, 0.8411919906082768, -0.15880800939172324, 1.954597694087775,
                           -0.0036373920817729943, 0.34571400982514394, -0.100324649298315,
                           4.999999770820381, -0.0, 20.0, -0.0};
    enum { N = sizeof x / sizeof x[0] };
    float up[N], out[N], gate[N];
    for (int i = 0; i < N; i++) up[i] = 1.0f, gate[i] = x[i];
    glu_forward_cpu(out, gate, up, N, ACT_GELU_TANH);
    for (int i = 0; i < N; i++)
        EXPECT(fabs(out[i] - want[i]) <= 2e-7 * fmax(1.0, fabs(want[i])), "gelu_tanh(%g) = %.9g, want %.9g", x[i],
               out[i], want[i]);
    for (int i = 0; i < N; i++) up[i] = -2.0f;
    glu_forward_cpu(gate, gate, up, N, ACT_GELU_TANH);  // out aliasing gate
    for (int i = 0; i < N; i++)
        EXPECT(fabs(gate[i] + 2 * want[i]) <= 4e-7 * fmax(1.0, fabs(want[i])), "gelu_tanh(%g)·up aliased: %.9g", x[i],
               gate[i]);
    for (int i = 0; i < N; i++) gate[i] = x[i], up[i] = 0.5f;
    glu_forward_cpu(out, gate, up, N, ACT_SILU);
    for (int i = 0; i < N; i++) {
        double s = x[i] / (1.0 + exp(-(double)x[i])) * 0.5;
        EXPECT(fabs(out[i] - s) <= 2e-7 * fmax(1.0, fabs(s)), "silu(%g)·0.5 = %.9g, want %.9g", x[i], out[i], s);
    }
    float y[N + 2];
    for (int i = 0; i < N; i++) y[i] = x[i] * 7.0f;
    y[N] = 1e6f, y[N + 1] = -1e30f;
    const float cap = 30.0f;
    softcap_forward_cpu(y, N + 2, cap);
    for (int i = 0; i < N + 2; i++) {
        double in = i < N ? x[i] * 7.0 : i == N ? 1e6 : -1e30, w = cap * tanh(in / cap);
        EXPECT(fabs(y[i] - w) <= 4e-6 * fmax(1.0, fabs(w)) && fabs(y[i]) <= cap, "softcap(%g) = %.9g, want %.9g", in,
               y[i], w);
    }
}

// Naive oracle with full P rows (fine at test sizes): the reference for
// oracle_attention_cpu. Support chosen by sorting all candidates.
static void oracle_naive(float *out, float *recall, float *support, const float *q, const float *k,
                         const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel) {
    int G = Hq / Hkv;
    double *P = calloc((size_t)T * T, sizeof(double)), *A = malloc(sizeof(double) * T);
    int *order = malloc(sizeof(int) * T), *in = malloc(sizeof(int) * T);
    for (int h = 0; h < Hq; h++)
        for (int t = 0; t < T; t++) {
            double mx = -INFINITY, sum = 0, *s = malloc(sizeof(double) * (t + 1));
            for (int j = 0; j <= t; j++) {
                double d = 0;
                for (int c = 0; c < dh; c++) d += (double)q[(t * Hq + h) * dh + c] * k[(j * Hkv + h / G) * dh + c];
                s[j] = d * scale, mx = fmax(mx, s[j]);
            }
            for (int j = 0; j <= t; j++) sum += (s[j] = exp(s[j] - mx));
            for (int j = 0; j <= t; j++) P[(size_t)t * T + j] += s[j] / sum / Hq;
            free(s);
        }
    for (int b0 = 0; b0 < T; b0 += bsel) {
        int b1 = b0 + bsel < T ? b0 + bsel : T;
        for (int j = 0; j < b1; j++) {
            A[j] = 0;
            for (int t = b0; t < b1; t++) A[j] += P[(size_t)t * T + j];
        }
        // rank candidates 0..b1-1 by A descending (selection sort: tiny sizes)
        for (int j = 0; j < b1; j++) order[j] = j, in[j] = 0;
        int n = b1 <= topk ? b1 : topk;
        for (int r = 0; r < n; r++) {
            int best = r;
            for (int j = r + 1; j < b1; j++)
                if (A[order[j]] > A[order[best]]) best = j;
            int tmp = order[r]; order[r] = order[best]; order[best] = tmp;
            in[order[r]] = 1;
        }
        for (int t = b0; t < b1; t++) {
            int cnt = 0;
            for (int j = 0; j <= t; j++) cnt += in[j];
            double mass = 0;
            for (int j = 0; j <= t; j++) mass += (cnt ? in[j] : j == t) * P[(size_t)t * T + j];
            recall[t] = (float)mass, support[t] = (float)(cnt ? cnt : 1);
            for (int h = 0; h < Hq; h++) {
                double mx = -INFINITY, sum = 0, acc[256] = {0}, *w = malloc(sizeof(double) * (t + 1));
                for (int j = 0; j <= t; j++) {
                    if (cnt ? !in[j] : j != t) { w[j] = -INFINITY; continue; }
                    double d = 0;
                    for (int c = 0; c < dh; c++) d += (double)q[(t * Hq + h) * dh + c] * k[(j * Hkv + h / G) * dh + c];
                    w[j] = d * scale, mx = fmax(mx, w[j]);
                }
                for (int j = 0; j <= t; j++) sum += (w[j] = exp(w[j] - mx));
                for (int j = 0; j <= t; j++)
                    for (int c = 0; c < dh; c++) acc[c] += w[j] / sum * v[(j * Hkv + h / G) * dh + c];
                for (int c = 0; c < dh; c++) out[(t * Hq + h) * dh + c] = (float)acc[c];
                free(w);
            }
        }
    }
    free(P), free(A), free(order), free(in);
}

static void test_oracle(void) {
    const int cases[][6] = {  // T, Hq, Hkv, dh, k, bsel
        {1, 2, 1, 16, 1, 1},   {37, 4, 2, 16, 5, 1},  {37, 4, 2, 16, 5, 4},   {37, 4, 2, 16, 5, 37},
        {130, 6, 2, 32, 17, 1}, {130, 6, 2, 32, 17, 16}, {130, 3, 3, 16, 40, 64}, {130, 8, 1, 16, 1, 7},
        {200, 4, 1, 32, 64, 128}};
    unsigned seed = 11;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int T = cases[c][0], Hq = cases[c][1], Hkv = cases[c][2], dh = cases[c][3], K = cases[c][4], B = cases[c][5];
        size_t nq = (size_t)T * Hq * dh, nkv = (size_t)T * Hkv * dh;
        float *q = malloc(4 * nq), *k = malloc(4 * nkv), *v = malloc(4 * nkv), *o1 = malloc(4 * nq), *o2 = malloc(4 * nq);
        float *r1 = calloc(T, 4), *r2 = calloc(T, 4), *s1 = calloc(T, 4), *s2 = calloc(T, 4);
        for (size_t i = 0; i < nq; i++) q[i] = (float)(rand_r(&seed) % 2001 - 1000) / 300.0f;
        for (size_t i = 0; i < nkv; i++) k[i] = (float)(rand_r(&seed) % 2001 - 1000) / 300.0f;
        for (size_t i = 0; i < nkv; i++) v[i] = (float)(rand_r(&seed) % 2001 - 1000) / 1000.0f;
        float scale = 1.0f / sqrtf((float)dh);
        oracle_attention_cpu(o1, r1, s1, q, k, v, T, Hq, Hkv, dh, scale, K, B);
        oracle_naive(o2, r2, s2, q, k, v, T, Hq, Hkv, dh, scale, K, B);
        double eo = 0, er = 0, es = 0;
        for (size_t i = 0; i < nq; i++) eo = fmax(eo, fabs(o1[i] - o2[i]));
        for (int t = 0; t < T; t++) er = fmax(er, fabs(r1[t] - r2[t])), es = fmax(es, fabs(s1[t] - s2[t]));
        EXPECT(eo < 2e-5 && er < 1e-5 && es == 0, "oracle T=%d Hq=%d Hkv=%d k=%d bsel=%d: out err %.3g recall err %.3g support err %.3g",
               T, Hq, Hkv, K, B, eo, er, es);
        // k >= T: exactly the dense kernel.
        oracle_attention_cpu(o1, NULL, NULL, q, k, v, T, Hq, Hkv, dh, scale, T, B);
        attention_forward_cpu(o2, NULL, q, k, v, T, Hq, Hkv, dh, scale, 0);
        EXPECT(!memcmp(o1, o2, 4 * nq), "oracle with k >= T is not bit-identical to dense (T=%d)", T);
        free(q), free(k), free(v), free(o1), free(o2), free(r1), free(r2), free(s1), free(s2);
    }
}

// support_attention_cpu with given (random) supports against a naive reference.
static void test_given_supports(void) {
    const int T = 70, Hq = 4, Hkv = 2, dh = 16, K = 9, B = 8, nb = (T + B - 1) / B;
    unsigned seed = 5;
    size_t nq = (size_t)T * Hq * dh, nkv = (size_t)T * Hkv * dh;
    float *q = malloc(4 * nq), *k = malloc(4 * nkv), *v = malloc(4 * nkv), *o1 = malloc(4 * nq), *o2 = malloc(4 * nq);
    float *r1 = calloc(T, 4), *s1 = calloc(T, 4);
    int *sel = malloc(sizeof(int) * nb * K), *n = malloc(sizeof(int) * nb);
    for (size_t i = 0; i < nq; i++) q[i] = (float)(rand_r(&seed) % 2001 - 1000) / 300.0f;
    for (size_t i = 0; i < nkv; i++) k[i] = (float)(rand_r(&seed) % 2001 - 1000) / 300.0f;
    for (size_t i = 0; i < nkv; i++) v[i] = (float)(rand_r(&seed) % 2001 - 1000) / 1000.0f;
    for (int b = 0; b < nb; b++) {  // sorted distinct keys below the block's end
        int end = (b + 1) * B < T ? (b + 1) * B : T, c = 0;
        for (int j = 0; j < end && c < K; j++)
            if (rand_r(&seed) % 3 == 0) sel[b * K + c++] = j;
        n[b] = c;
    }
    const float scale = 0.25f;
    support_attention_cpu(o1, r1, s1, q, k, v, T, Hq, Hkv, dh, scale, K, B, sel, n);
    double eo = 0, er = 0, es = 0;
    for (int t = 0; t < T; t++) {
        const int b = t / B;
        int keys[64], cnt = 0;
        for (int i = 0; i < n[b]; i++)
            if (sel[b * K + i] <= t) keys[cnt++] = sel[b * K + i];
        if (!cnt) keys[cnt++] = t;
        double mass = 0;
        for (int h = 0; h < Hq; h++) {
            double full[128], mx = -INFINITY, sum = 0, wsum = 0, acc[16] = {0};
            for (int j = 0; j <= t; j++) {
                double d = 0;
                for (int c = 0; c < dh; c++) d += (double)q[(t * Hq + h) * dh + c] * k[(j * Hkv + h / 2) * dh + c];
                full[j] = d * scale, mx = fmax(mx, full[j]);
            }
            for (int j = 0; j <= t; j++) sum += (full[j] = exp(full[j] - mx));
            for (int i = 0; i < cnt; i++) mass += full[keys[i]] / sum / Hq, wsum += full[keys[i]];
            for (int i = 0; i < cnt; i++)
                for (int c = 0; c < dh; c++) acc[c] += full[keys[i]] / wsum * v[(keys[i] * Hkv + h / 2) * dh + c];
            for (int c = 0; c < dh; c++) o2[(t * Hq + h) * dh + c] = (float)acc[c];
        }
        er = fmax(er, fabs(r1[t] - mass));
        es = fmax(es, fabs(s1[t] - cnt));
    }
    for (size_t i = 0; i < nq; i++) eo = fmax(eo, fabs(o1[i] - o2[i]));
    EXPECT(eo < 2e-5 && er < 1e-5 && es == 0, "given supports: out err %.3g recall err %.3g support err %.3g", eo, er, es);
    free(q), free(k), free(v), free(o1), free(o2), free(r1), free(s1), free(sel), free(n);
}

// The scoring of one position as eval.c did it inline before backbone_score:
// log-sum-exp and first argmax of each row, then KL(d ‖ s) term by term.
static void score_naive(const float *rd, const float *rs, int V, int next, double *nll_d, double *nll_s,
                        double *kl, int *top1) {
    int ad = 0, as = 0;
    for (int j = 1; j < V; j++) {
        if (rd[j] > rd[ad]) ad = j;
        if (rs[j] > rs[as]) as = j;
    }
    double sd = 0, ss = 0;
    for (int j = 0; j < V; j++) sd += exp((double)rd[j] - rd[ad]), ss += exp((double)rs[j] - rs[as]);
    const double lse_d = rd[ad] + log(sd), lse_s = rs[as] + log(ss);
    double k = 0;
    for (int j = 0; j < V; j++) k += exp(rd[j] - lse_d) * ((rd[j] - lse_d) - (rs[j] - lse_s));
    *nll_d = lse_d - rd[next];
    *nll_s = lse_s - rs[next];
    *kl = k > 0 ? k : 0;
    *top1 = ad == as;
}

// backbone_score on the CPU (row chunks of 128, next_token_stats_cpu) against
// score_naive on logits formed in one piece. Hidden states are multiples of
// 1/4 and the lm_head's entries of 1/8, so every logit is exact in fp32 (no
// GEMM blocking can change it) and many rows tie for their maximum (the first
// index must win in both). Every fifth position's sparse state equals the
// dense one (KL exactly 0, top1 1); the rest differ slightly or a lot.
static void test_score(void) {
    const int H = 32, V = 1000, R = 300;
    unsigned seed = 13;
    float *w = malloc(sizeof(float) * V * H), *hd = malloc(sizeof(float) * R * H), *hs = malloc(sizeof(float) * R * H);
    float *ld = malloc(sizeof(float) * R * V), *ls = malloc(sizeof(float) * R * V);
    int32_t *next = malloc(sizeof(int32_t) * R), *top1 = malloc(sizeof(int32_t) * R);
    double *nd = malloc(sizeof(double) * R), *ns = malloc(sizeof(double) * R), *kl = malloc(sizeof(double) * R);
    double *nd_only = malloc(sizeof(double) * R);
    for (int i = 0; i < V * H; i++) w[i] = (float)(rand_r(&seed) % 3 - 1) / 8.0f;
    for (int i = 0; i < R * H; i++) hd[i] = (float)(rand_r(&seed) % 17 - 8) / 4.0f;
    for (int r = 0; r < R; r++) {
        next[r] = (int32_t)(rand_r(&seed) % V);
        const int spread = r % 5 == 0 ? 0 : r % 5 < 3 ? 1 : 8;  // equal, near, far
        for (int c = 0; c < H; c++)
            hs[r * H + c] = hd[r * H + c] + (spread ? (float)(rand_r(&seed) % (2 * spread + 1) - spread) / 4.0f : 0);
    }
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg.hidden = H, m.cfg.vocab = V, m.lm_head = w;
    const Backbone b = {&m, NULL};
    backbone_score(&b, hd, hs, R, next, nd, ns, kl, top1);
    backbone_score(&b, hd, NULL, R, next, nd_only, NULL, NULL, NULL);
    matmul_forward_cpu(ld, hd, w, NULL, R, H, V);
    matmul_forward_cpu(ls, hs, w, NULL, R, H, V);
    double err = 0;
    int top1_bad = 0, zero_bad = 0, n_tied = 0, n_agree = 0;
    for (int r = 0; r < R; r++) {
        double rnd, rns, rkl;
        int rt, first = 0, count = 0;
        score_naive(ld + (size_t)r * V, ls + (size_t)r * V, V, next[r], &rnd, &rns, &rkl, &rt);
        err = fmax(err, fabs(nd[r] - rnd) / fmax(1.0, fabs(rnd)));
        err = fmax(err, fabs(ns[r] - rns) / fmax(1.0, fabs(rns)));
        err = fmax(err, fabs(kl[r] - rkl) / fmax(1e-3, rkl));
        err = fmax(err, fabs(nd_only[r] - rnd) / fmax(1.0, fabs(rnd)));
        top1_bad += top1[r] != rt;
        zero_bad += r % 5 == 0 && (kl[r] != 0 || top1[r] != 1);
        n_agree += rt;
        for (int j = 1; j < V; j++) first = ld[(size_t)r * V + j] > ld[(size_t)r * V + first] ? j : first;
        for (int j = 0; j < V; j++) count += ld[(size_t)r * V + j] == ld[(size_t)r * V + first];
        n_tied += count > 1;
    }
    EXPECT(err < 1e-12, "backbone_score vs the inline scoring: max relative error %.3g", err);
    EXPECT(top1_bad == 0 && zero_bad == 0, "backbone_score: %d top1 mismatches, %d equal rows with KL != 0 or top1 != 1",
           top1_bad, zero_bad);
    // The data must exercise what it is meant to: ties, and both top1 outcomes.
    EXPECT(n_tied > 0 && n_agree > R / 5 && n_agree < R, "score test data: %d tied rows, %d of %d agree", n_tied,
           n_agree, R);
    free(w), free(hd), free(hs), free(ld), free(ls), free(next), free(top1), free(nd), free(ns), free(kl), free(nd_only);
}

static void test_ids(void) {
    char path[4096];
    Status st;
    int32_t *ids;
    size_t n;
    snprintf(path, sizeof path, "%s/ids_ok.txt", tmp);
    write_text(path, "1, 2\n3\t4,,5\n");
    EXPECT(ids_read(path, 10, &ids, &n, &st) == 0 && n == 5 && ids[0] == 1 && ids[4] == 5, "ids parse");
    if (n == 5) free(ids);
    const char *bad[][2] = {{"", "empty"}, {"  \n, ", "empty"}, {"1 x 3", "\"x\""}, {"1 10", "out of the vocabulary"},
                            {"-1", "not a non-negative integer"}, {"99999999999", "not a non-negative integer"},
                            {"1.5", "not a non-negative integer"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/ids_bad%zu.txt", tmp, i);
        write_text(path, bad[i][0]);
        st.msg[0] = 0;
        int rc = ids_read(path, 10, &ids, &n, &st);
        EXPECT(rc == -1 && strstr(st.msg, path) && strstr(st.msg, bad[i][1]), "ids \"%s\" -> rc %d msg \"%s\"",
               bad[i][0], rc, st.msg);
    }
    snprintf(path, sizeof path, "%s/missing.txt", tmp);
    EXPECT(ids_read(path, 10, &ids, &n, &st) == -1 && strstr(st.msg, "missing.txt"), "missing ids file");
}

static void test_npy(void) {
    char path[4096];
    Status st;
    snprintf(path, sizeof path, "%s/rt.npy", tmp);
    float a[6] = {1, -2, 3.5f, 4, 5, 6e-9f};
    NpyWriter w;
    EXPECT(npy_writer_open(&w, path, 3, 2, &st) == 0, "npy open");
    npy_writer_rows(&w, a, 1, &st);
    npy_writer_rows(&w, a + 2, 2, &st);
    EXPECT(npy_writer_close(&w, &st) == 0, "npy close");
    float *b;
    int64_t shape[4];
    int nd;
    EXPECT(npy_read_f32(path, &b, shape, &nd, &st) == 0 && nd == 2 && shape[0] == 3 && shape[1] == 2 &&
               !memcmp(a, b, sizeof a),
           "npy round trip");
    free(b);
}

// st_write → st_add_file round trip: names, shapes, bits, metadata accepted.
static void test_st_write(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rt.safetensors", tmp);
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1.5f, 0, 1e-20f};
    StWriteTensor ts[2] = {{"model.layers.0.x.weight", 2, {2, 3}, a}, {"b", 1, {3}, b}};
    Status st;
    EXPECT(st_write(path, ts, 2, "{\"format\": \"pt\"}", &st) == 0, "st_write: %s", st.msg);
    SafeTensors s = {0};
    EXPECT(st_add_file(&s, path, &st) == 0, "st_write output unreadable: %s", st.msg);
    const StTensor *t0 = st_find(&s, "model.layers.0.x.weight"), *t1 = st_find(&s, "b");
    EXPECT(t0 && t1 && t0->ndim == 2 && t0->shape[0] == 2 && t0->shape[1] == 3 && t1->numel == 3, "st_write shapes");
    if (t0 && t1) {
        float x[6], y[3];
        st_to_f32(t0, x);
        st_to_f32(t1, y);
        EXPECT(!memcmp(x, a, sizeof a) && !memcmp(y, b, sizeof b), "st_write data");
    }
    st_close(&s);
}

// The same RoPE written in the legacy and the transformers-5 key styles must
// parse to the same configuration.
static void test_config_styles(void) {
    char d1[4096], d2[4096], p[4200];
    snprintf(d1, sizeof d1, "%s/cfg_legacy", tmp);
    snprintf(d2, sizeof d2, "%s/cfg_new", tmp);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s'", d1, d2);
    EXPECT(system(cmd) == 0, "mkdir");
    const char *common = "\"model_type\":\"qwen3\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                         "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"intermediate_size\":96,"
                         "\"vocab_size\":100,\"max_position_embeddings\":4096";
    char text[2048];
    snprintf(p, sizeof p, "%s/config.json", d1);
    snprintf(text, sizeof text, "{%s,\"rope_theta\":500000.0,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0,"
             "\"original_max_position_embeddings\":1024}}", common);
    write_text(p, text);
    snprintf(p, sizeof p, "%s/config.json", d2);
    snprintf(text, sizeof text, "{%s,\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":500000.0,"
             "\"factor\":4.0,\"original_max_position_embeddings\":1024}}", common);
    write_text(p, text);
    ModelConfig a, b;
    Status st;
    int ra = config_load(&a, d1, &st), rb = config_load(&b, d2, &st);
    EXPECT(ra == 0 && rb == 0, "config load: %s", st.msg);
    if (ra || rb) return;
    EXPECT(a.rope.type == ROPE_YARN && b.rope.type == ROPE_YARN && a.rope.theta == 500000 &&
               b.rope.theta == 500000 && a.rope.factor == 4 && b.rope.factor == 4 &&
               a.rope.original_max_pos == 1024 && b.rope.original_max_pos == 1024 && a.rope.beta_fast == 32 &&
               b.rope.beta_slow == 1,
           "legacy and rope_parameters styles differ");
    EXPECT(a.head_dim == 128 && a.qk_norm, "qwen3 head_dim defaults to 128 and has q/k norm");
    config_free(&a);
    config_free(&b);
    // Broken JSON and an unknown family name the file.
    snprintf(p, sizeof p, "%s/config.json", d1);
    write_text(p, "{\"model_type\": \"llama\", \"hidden_size\": 6");
    EXPECT(config_load(&a, d1, &st) == -1 && strstr(st.msg, p) && strstr(st.msg, "not valid JSON"), "%s", st.msg);
    write_text(p, "{\"model_type\": \"mamba\"}");
    EXPECT(config_load(&a, d1, &st) == -1 && strstr(st.msg, "unsupported model_type \"mamba\""), "%s", st.msg);
    write_text(p, "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
                  "\"num_key_value_heads\":3,\"intermediate_size\":8,\"vocab_size\":10}");
    EXPECT(config_load(&a, d1, &st) == -1 && strstr(st.msg, "not a multiple"), "%s", st.msg);
}

int main(int argc, char **argv) {
    tmp = argc > 1 ? argv[1] : "/tmp";
    test_half_floats();
    test_attention();
    test_attention_window();
    test_glu_softcap();
    test_oracle();
    test_given_supports();
    test_score();
    test_ids();
    test_npy();
    test_st_write();
    test_config_styles();
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("all unit checks passed\n");
    return failures ? 1 : 0;
}
