// test_hybrid_supports: hybrid supports (docs/design.md "Hybrid supports"):
// H_t = base_t ∪ {t−W+1..t} ∪ {0..S−1}, each query restricted to j ≤ t.
//   test_hybrid_supports GOLDEN_CASE_DIR
// 1. a hand-built block support whose unions are written out by hand (sizes);
// 2. hybrid_attention_cpu against a naive per-query masked softmax in double
//    (the oracle's supports and given ones, per query and block-shared);
// 3. W = S = 0 is oracle_attention_cpu / support_attention_cpu bit for bit,
//    W ≥ T is dense attention within 1e-5;
// 4. on a golden model: the forward with W = S = 0 is the plain oracle forward
//    bit for bit, W ≥ T the dense forward within 1e-5, and the statistics
//    count the union.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "forward.h"
#include "model.h"
#include "ops.h"

static void fill(float *x, size_t n, unsigned *seed, float div) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(rand_r(seed) % 2001 - 1000) / div;
}

// Naive reference: P in double, the base support per block (the oracle's by a
// full sort of A_B, or the given one), then per query the mask
// in[j] = base ∪ window ∪ sinks over j ≤ t and a masked softmax per head.
static void hybrid_naive(float *out, float *recall, float *support, const float *q, const float *k, const float *v,
                         int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel, int W, int S,
                         const int *given_sel, const int *given_n) {
    const int G = Hq / Hkv;
    double *P = calloc((size_t)T * T, sizeof(double)), *A = malloc(sizeof(double) * T);
    int *order = malloc(sizeof(int) * T), *sel_in = malloc(sizeof(int) * T), *in = malloc(sizeof(int) * T);
    double *w = malloc(sizeof(double) * T), *acc = malloc(sizeof(double) * dh);
    for (int h = 0; h < Hq; h++)
        for (int t = 0; t < T; t++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= t; j++) {
                double d = 0;
                for (int c = 0; c < dh; c++) d += (double)q[(t * Hq + h) * dh + c] * k[(j * Hkv + h / G) * dh + c];
                w[j] = d * scale, mx = fmax(mx, w[j]);
            }
            for (int j = 0; j <= t; j++) sum += (w[j] = exp(w[j] - mx));
            for (int j = 0; j <= t; j++) P[(size_t)t * T + j] += w[j] / sum / Hq;
        }
    for (int b0 = 0; b0 < T; b0 += bsel) {
        const int b1 = b0 + bsel < T ? b0 + bsel : T;
        for (int j = 0; j < T; j++) sel_in[j] = 0;
        if (given_sel) {
            for (int i = 0; i < given_n[b0 / bsel]; i++) sel_in[given_sel[(b0 / bsel) * topk + i]] = 1;
        } else {
            for (int j = 0; j < b1; j++) {
                A[j] = 0;
                for (int t = b0; t < b1; t++) A[j] += P[(size_t)t * T + j];
                order[j] = j;
            }
            const int n = b1 <= topk ? b1 : topk;
            for (int r = 0; r < n; r++) {
                int best = r;
                for (int j = r + 1; j < b1; j++)
                    if (A[order[j]] > A[order[best]]) best = j;
                const int tmp = order[r];
                order[r] = order[best], order[best] = tmp;
                sel_in[order[r]] = 1;
            }
        }
        for (int t = b0; t < b1; t++) {
            int cnt = 0;
            for (int j = 0; j <= t; j++) cnt += sel_in[j];
            int n = 0;
            double mass = 0;
            for (int j = 0; j <= t; j++) {
                in[j] = (cnt ? sel_in[j] : j == t) || j > t - W || j < S;
                n += in[j];
                if (in[j]) mass += P[(size_t)t * T + j];
            }
            recall[t] = (float)mass, support[t] = (float)n;
            for (int h = 0; h < Hq; h++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    if (!in[j]) continue;
                    double d = 0;
                    for (int c = 0; c < dh; c++) d += (double)q[(t * Hq + h) * dh + c] * k[(j * Hkv + h / G) * dh + c];
                    w[j] = d * scale, mx = fmax(mx, w[j]);
                }
                for (int j = 0; j <= t; j++) sum += in[j] ? (w[j] = exp(w[j] - mx)) : 0;
                for (int c = 0; c < dh; c++) acc[c] = 0;
                for (int j = 0; j <= t; j++)
                    if (in[j])
                        for (int c = 0; c < dh; c++) acc[c] += w[j] / sum * v[(j * Hkv + h / G) * dh + c];
                for (int c = 0; c < dh; c++) out[(t * Hq + h) * dh + c] = (float)acc[c];
            }
        }
    }
    free(P), free(A), free(order), free(sel_in), free(in), free(w), free(acc);
}

// 1. One block of 10 queries sharing the support {2, 5, 8}, W = 2, S = 1:
// |H_t| written out by hand. t = 0, 1: base ∩ [0, t] empty → {t}; ∪ {t−1, t} ∪ {0}.
static void test_hand_built(void) {
    const int T = 10, Hq = 2, Hkv = 1, dh = 4, K = 3, B = 10;
    const int sel[3] = {2, 5, 8}, nsel[1] = {3};
    // t = 0, 1: base ∩ [0, t] is empty, so {t}; t = 4: {0} ∪ {2} ∪ {3, 4}; t = 6: {0} ∪ {2, 5} ∪ {5, 6};
    // t = 9: {0} ∪ {2, 5, 8} ∪ {8, 9}.
    //                      t: 0  1  2  3  4  5  6  7  8  9
    const float want[10] = {1, 2, 3, 3, 4, 4, 4, 5, 5, 5};
    unsigned seed = 3;
    float q[10 * 2 * 4], k[10 * 4], v[10 * 4], o1[80], o2[80], r1[10] = {0}, s1[10] = {0}, r2[10], s2[10];
    fill(q, 80, &seed, 300), fill(k, 40, &seed, 300), fill(v, 40, &seed, 1000);
    hybrid_attention_cpu(o1, r1, s1, q, k, v, T, Hq, Hkv, dh, 0.5f, K, B, 2, 1, sel, nsel, NULL);
    hybrid_naive(o2, r2, s2, q, k, v, T, Hq, Hkv, dh, 0.5f, K, B, 2, 1, sel, nsel);
    double eo = 0;
    for (int i = 0; i < 80; i++) eo = fmax(eo, fabs(o1[i] - o2[i]));
    for (int t = 0; t < T; t++) {
        EXPECT(s1[t] == want[t], "hand-built union: |H_%d| = %g, want %g", t, s1[t], want[t]);
        EXPECT(s2[t] == want[t], "hand-built union (reference): |H_%d| = %g, want %g", t, s2[t], want[t]);
        EXPECT(fabsf(r1[t] - r2[t]) < 1e-5f, "hand-built union: recall[%d] %g vs reference %g", t, r1[t], r2[t]);
    }
    EXPECT(eo < 1e-5, "hand-built union: out err %.3g", eo);
}

// 2 and 3 on random q, k, v.
static void test_random(void) {
    const int cases[][8] = {  // T, Hq, Hkv, dh, k, bsel, W, S
        {37, 4, 2, 16, 5, 1, 3, 0},    {37, 4, 2, 16, 5, 4, 0, 2},    {37, 4, 2, 16, 5, 8, 6, 2},
        {130, 6, 2, 32, 17, 16, 32, 4}, {130, 3, 3, 16, 40, 64, 1, 1}, {130, 8, 1, 16, 1, 7, 9, 9},
        {200, 4, 1, 32, 64, 64, 64, 4}, {200, 4, 1, 32, 16, 64, 250, 0}, {50, 2, 1, 16, 4, 16, 0, 60}};
    unsigned seed = 17;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int T = cases[c][0], Hq = cases[c][1], Hkv = cases[c][2], dh = cases[c][3], K = cases[c][4];
        const int B = cases[c][5], W = cases[c][6], S = cases[c][7], nb = (T + B - 1) / B;
        const size_t nq = (size_t)T * Hq * dh, nkv = (size_t)T * Hkv * dh;
        float *q = malloc(4 * nq), *k = malloc(4 * nkv), *v = malloc(4 * nkv), *o1 = malloc(4 * nq);
        float *o2 = malloc(4 * nq), *r1 = calloc(T, 4), *r2 = calloc(T, 4), *s1 = calloc(T, 4), *s2 = calloc(T, 4);
        int *sel = malloc(sizeof(int) * nb * K), *n = malloc(sizeof(int) * nb);
        fill(q, nq, &seed, 300), fill(k, nkv, &seed, 300), fill(v, nkv, &seed, 1000);
        const float scale = 1.0f / sqrtf((float)dh);
        // The oracle's supports.
        hybrid_attention_cpu(o1, r1, s1, q, k, v, T, Hq, Hkv, dh, scale, K, B, W, S, NULL, NULL, NULL);
        hybrid_naive(o2, r2, s2, q, k, v, T, Hq, Hkv, dh, scale, K, B, W, S, NULL, NULL);
        double eo = 0, er = 0, es = 0;
        for (size_t i = 0; i < nq; i++) eo = fmax(eo, fabs(o1[i] - o2[i]));
        for (int t = 0; t < T; t++) {
            er = fmax(er, fabs(r1[t] - r2[t])), es = fmax(es, fabs(s1[t] - s2[t]));
            EXPECT(s1[t] <= K + W + S && s1[t] <= t + 1, "oracle hybrid: |H_%d| = %g exceeds min(k+W+S, t+1)", t, s1[t]);
        }
        EXPECT(eo < 2e-5 && er < 1e-5 && es == 0,
               "oracle hybrid T=%d Hq=%d Hkv=%d k=%d bsel=%d W=%d S=%d: out err %.3g recall err %.3g support err %.3g",
               T, Hq, Hkv, K, B, W, S, eo, er, es);
        // Given supports (random sorted distinct keys below each block's end).
        for (int b = 0; b < nb; b++) {
            const int end = (b + 1) * B < T ? (b + 1) * B : T;
            int cnt = 0;
            for (int j = 0; j < end && cnt < K; j++)
                if (rand_r(&seed) % 3 == 0) sel[b * K + cnt++] = j;
            n[b] = cnt;
        }
        memset(r1, 0, 4 * T), memset(s1, 0, 4 * T);
        hybrid_attention_cpu(o1, r1, s1, q, k, v, T, Hq, Hkv, dh, scale, K, B, W, S, sel, n, NULL);
        hybrid_naive(o2, r2, s2, q, k, v, T, Hq, Hkv, dh, scale, K, B, W, S, sel, n);
        eo = er = es = 0;
        for (size_t i = 0; i < nq; i++) eo = fmax(eo, fabs(o1[i] - o2[i]));
        for (int t = 0; t < T; t++) er = fmax(er, fabs(r1[t] - r2[t])), es = fmax(es, fabs(s1[t] - s2[t]));
        EXPECT(eo < 2e-5 && er < 1e-5 && es == 0,
               "given hybrid T=%d k=%d bsel=%d W=%d S=%d: out err %.3g recall err %.3g support err %.3g", T, K, B, W,
               S, eo, er, es);
        // W = S = 0: the plain kernels bit for bit (out, recall, support).
        float *r3 = calloc(T, 4), *s3 = calloc(T, 4);
        memset(r1, 0, 4 * T), memset(s1, 0, 4 * T);
        hybrid_attention_cpu(o1, r1, s1, q, k, v, T, Hq, Hkv, dh, scale, K, B, 0, 0, NULL, NULL, NULL);
        oracle_attention_cpu(o2, r3, s3, q, k, v, T, Hq, Hkv, dh, scale, K, B);
        EXPECT(!memcmp(o1, o2, 4 * nq) && !memcmp(r1, r3, 4 * T) && !memcmp(s1, s3, 4 * T),
               "W = S = 0 is not oracle_attention_cpu bit for bit (T=%d k=%d bsel=%d)", T, K, B);
        hybrid_attention_cpu(o1, NULL, NULL, q, k, v, T, Hq, Hkv, dh, scale, K, B, 0, 0, sel, n, NULL);
        support_attention_cpu(o2, NULL, NULL, q, k, v, T, Hq, Hkv, dh, scale, K, B, sel, n);
        EXPECT(!memcmp(o1, o2, 4 * nq), "W = S = 0 is not support_attention_cpu bit for bit (T=%d)", T);
        // W ≥ T: every causal key, i.e. dense within rounding; the statistics say so.
        memset(r1, 0, 4 * T), memset(s1, 0, 4 * T);
        hybrid_attention_cpu(o1, r1, s1, q, k, v, T, Hq, Hkv, dh, scale, K, B, T, S, NULL, NULL, NULL);
        attention_forward_cpu(o2, NULL, q, k, v, T, Hq, Hkv, dh, scale, 0);
        eo = 0;
        for (size_t i = 0; i < nq; i++) eo = fmax(eo, fabs(o1[i] - o2[i]));
        int stats_ok = 1;
        for (int t = 0; t < T; t++) stats_ok &= s1[t] == t + 1 && fabsf(r1[t] - 1.0f) < 1e-5f;
        EXPECT(eo < 1e-5 && stats_ok, "W >= T T=%d k=%d bsel=%d: out err %.3g vs dense, stats ok %d", T, K, B, eo,
               stats_ok);
        free(q), free(k), free(v), free(o1), free(o2), free(r1), free(r2), free(s1), free(s2), free(r3), free(s3);
        free(sel), free(n);
    }
}

// 3b. The union of per-query supports over blocks of ub queries (SupportUnion):
// ub = 1 is each query's own support (the support statistic's sum); a block's
// union lies between its largest support and the sum of its supports; given
// supports {0..K−1} make every block's union exactly min(end, K); k ≥ T (dense)
// makes it every key up to the block's last query.
static void test_union(void) {
    const int T = 200, Hq = 4, Hkv = 2, dh = 16, K = 10;
    const size_t nq = (size_t)T * Hq * dh, nkv = (size_t)T * Hkv * dh;
    unsigned seed = 5;
    float *q = malloc(4 * nq), *k = malloc(4 * nkv), *v = malloc(4 * nkv), *o = malloc(4 * nq);
    float *r = calloc(T, 4), *sp = calloc(T, 4);
    fill(q, nq, &seed, 300), fill(k, nkv, &seed, 300), fill(v, nkv, &seed, 1000);
    const float scale = 1.0f / sqrtf((float)dh);
    SupportUnion u1 = {1, 0, 0}, u16 = {16, 0, 0};
    hybrid_attention_cpu(o, r, sp, q, k, v, T, Hq, Hkv, dh, scale, K, 1, 3, 1, NULL, NULL, &u1);
    double sum = 0, lo = 0;
    for (int t = 0; t < T; t++) sum += sp[t];
    for (int b0 = 0; b0 < T; b0 += 16) {
        float mx = 0;
        for (int t = b0; t < b0 + 16 && t < T; t++) mx = sp[t] > mx ? sp[t] : mx;
        lo += mx;
    }
    EXPECT(u1.keys == sum && u1.blocks == T, "union of single queries: %g keys over %g blocks, supports sum %g", u1.keys,
           u1.blocks, sum);
    hybrid_attention_cpu(o, NULL, NULL, q, k, v, T, Hq, Hkv, dh, scale, K, 1, 3, 1, NULL, NULL, &u16);
    EXPECT(u16.blocks == 13 && u16.keys >= lo && u16.keys <= sum,
           "union over 16 queries: %g keys over %g blocks (bounds %g..%g)", u16.keys, u16.blocks, lo, sum);
    int *sel = malloc(sizeof(int) * T * K), *n = malloc(sizeof(int) * T);
    for (int t = 0; t < T; t++) {
        n[t] = K;
        for (int i = 0; i < K; i++) sel[t * K + i] = i;
    }
    SupportUnion ug = {16, 0, 0}, ud = {16, 0, 0};
    hybrid_attention_cpu(o, NULL, NULL, q, k, v, T, Hq, Hkv, dh, scale, K, 1, 0, 0, sel, n, &ug);
    double want = 0, want_d = 0;
    for (int b0 = 0; b0 < T; b0 += 16) {
        const int end = b0 + 16 < T ? b0 + 16 : T;
        want += end < K ? end : K, want_d += end;
    }
    EXPECT(ug.keys == want && ug.blocks == 13, "given supports {0..K-1}: union %g, want %g", ug.keys, want);
    hybrid_attention_cpu(o, NULL, NULL, q, k, v, T, Hq, Hkv, dh, scale, T, 1, 0, 0, NULL, NULL, &ud);
    EXPECT(ud.keys == want_d && ud.blocks == 13, "k >= T: union %g, want %g", ud.keys, want_d);
    free(q), free(k), free(v), free(o), free(r), free(sp), free(sel), free(n);
}

// 4. The forward of a golden model: W = S = 0, W ≥ T, and the union statistics.
static void test_model(const char *dir) {
    Model m;
    Status st;
    if (model_load(&m, dir, &st)) {
        EXPECT(0, "%s: %s", dir, st.msg);
        return;
    }
    enum { T = 48 };
    int32_t ids[T];
    for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 37 + 11) % m.cfg.vocab);
    const size_t n = (size_t)T * m.cfg.hidden;
    float *h0 = malloc(4 * n), *h1 = malloc(4 * n), *hd = malloc(4 * n);
    float rec0[T] = {0}, sup0[T] = {0}, rec1[T] = {0}, sup1[T] = {0};
    const Sparsity plain = {8, 8}, zero = {8, 8, 0, 0}, hyb = {8, 8, 6, 2}, all = {8, 8, T, 0};
    SparseStats s0 = {rec0, sup0}, s1 = {rec1, sup1};
    forward_hidden(&m, ids, T, h0, &(ForwardOpts){.sparse = &plain, .stats = &s0});
    forward_hidden(&m, ids, T, h1, &(ForwardOpts){.sparse = &zero});
    EXPECT(!memcmp(h0, h1, 4 * n), "%s: the forward with recent 0, sinks 0 is not the oracle forward bit for bit", dir);
    forward_hidden(&m, ids, T, h1, &(ForwardOpts){.sparse = &hyb, .stats = &s1});
    const int L = m.cfg.n_layers;
    for (int t = 0; t < T; t++) {
        // Per layer min(W, t+1) + (sinks outside the window) ≤ |H_t| ≤ min(k + W + S, t + 1).
        const int lo = (t + 1 < 6 ? t + 1 : 6) + (t >= 6 + 2 ? 2 : t >= 6 ? t - 5 : 0);
        EXPECT(sup1[t] >= (float)L * lo && sup1[t] <= (float)L * (t + 1 < 16 ? t + 1 : 16),
               "%s: hybrid support at t=%d is %g (%d layers)", dir, t, sup1[t], L);
        EXPECT(sup0[t] <= (float)L * (t + 1 < 8 ? t + 1 : 8), "%s: plain support at t=%d is %g", dir, t, sup0[t]);
        EXPECT(rec1[t] > 0 && rec1[t] <= L * (1 + 1e-5f), "%s: hybrid recall at t=%d is %g", dir, t, rec1[t]);
    }
    // W ≥ T keeps every causal key: the statistics count the union (t + 1 keys, all the mass).
    memset(rec1, 0, sizeof rec1), memset(sup1, 0, sizeof sup1);
    forward_hidden(&m, ids, T, h1, &(ForwardOpts){.sparse = &all, .stats = &s1});
    for (int t = 0; t < T; t++)
        EXPECT(sup1[t] == (float)L * (t + 1) && fabsf(rec1[t] - L) < 1e-4f * L,
               "%s: recent >= T: support at t=%d is %g (want %d), recall %g (want %d)", dir, t, sup1[t], L * (t + 1),
               rec1[t], L);
    forward_hidden(&m, ids, T, hd, NULL);
    double e = 0;
    for (size_t i = 0; i < n; i++) e = fmax(e, fabs(h1[i] - hd[i]));
    const int V = m.cfg.vocab;
    float *l1 = malloc(sizeof(float) * (size_t)T * V), *ld = malloc(sizeof(float) * (size_t)T * V);
    forward_lm_head(&m, h1, T, l1);
    forward_lm_head(&m, hd, T, ld);
    double el = 0;
    for (size_t i = 0; i < (size_t)T * V; i++) el = fmax(el, fabs(l1[i] - ld[i]));
    EXPECT(el < 1e-5, "%s: recent >= T logits differ from dense by %.3g (hidden %.3g)", dir, el, e);
    free(h0), free(h1), free(hd), free(l1), free(ld);
    model_free(&m);
}

int main(int argc, char **argv) {
    test_hand_built();
    test_random();
    test_union();
    for (int i = 1; i < argc; i++) test_model(argv[i]);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("hybrid supports: all checks passed\n");
    return failures != 0;
}
