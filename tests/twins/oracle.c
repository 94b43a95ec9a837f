// oracle.c: twin checks of the GPU oracle (kernels/oracle_cuda.h) against the
// CPU twins (kernels/cpu/topk.c, kernels/cpu/oracle_cpu.c).
//
//   topk_rows          vs topk_support row by row: exact (same indices, same
//                      order, −1 padding, n_sel). Normal values, values
//                      quantised to 4 levels (massive ties: the lowest indices
//                      must win), all-equal rows, ±0 mixed (−0 ties +0), k = 1,
//                      len = 1, k > len, rows of 100000 with k = 2048.
//   oracle_select      vs a host reference: P from fp32 scores (cblas) and a
//                      double softmax per head, block sums in double, then
//                      topk_support. Compared as sets. The GPU's P differs from
//                      the host's by fp32 rounding (~1e-6 relative), so a key
//                      may differ only where its value is within a relative
//                      1e-5 of the k-th value (a tie up to rounding); counted
//                      and reported, anything else fails.
//   oracle_attention   vs oracle_attention_cpu: out, recall, support (recall and
//                      support start at 0.25 to check they accumulate). Rows
//                      whose k-th and (k+1)-th values are within 1e-5 (either
//                      twin may flip them) or where the GPU picked a tied key
//                      are left out of that comparison, and then attention on
//                      the host reference's supports is compared instead
//                      (support_attention_cuda vs support_attention_cpu).
//   support_attention  vs support_attention_cpu on random given supports,
//                      including empty rows and rows whose keys are all after
//                      the block's first queries (the {t} fallback); once with
//                      recall/support/lse NULL.
//   support_attention_block_tc
//                      the bf16 op (tensor cores for bsel > 1 at dh 64 / 128 / 256)
//                      vs support_attention_cpu on the same bf16-rounded q, k,
//                      v and random supports as above; tolerance derived at
//                      check_support_block_tc; bf16 and f16 outputs bit for bit
//                      against the fp32 output rounded. Shapes the kernel does
//                      not take (dh 80, bsel 1 and 24) are judged the same
//                      way: the op falls back
//                      inside; support_attention_block_tc_takes must say which.
//   support_attention_block_wg
//                      the same op and judgement with SPINDLE_SPARSE_WGMMA=1: the
//                      warpgroup-MMA kernel (sparse_attention_wg.cu) on the
//                      shapes it takes, after a check that it launches here;
//   support_attention_block_wg1
//                      the same with SPINDLE_SPARSE_WGMMA=2 (its kernel of one
//                      thread block an SM).
//   oracle_select bf16 the same judgement as oracle_select, on bf16-rounded
//                      layers, at dh 64 / 128 / 256 (Gemma 3 270M's 4 / 1 heads:
//                      tensor cores per query and bsel 16 / 64, the fp32
//                      fallback at bsel 128), and oracle_select_tc_takes.
// Tolerances: fp32 ops (F32_NMSE, F32_MAX, see test_cuda_twins.c); support
// counts are exact.
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/topk.h"
#include "ops.h"
#include "ops_cuda.h"
#include "oracle_cuda.h"
#include "twins.h"

enum { SENTINEL = 0x7fffffff };  // poison of int outputs (−1 is a legal padding value)
#define TIE_REL 1e-5

static void *zalloc(size_t n, size_t size) {
    void *p = calloc(n > 0 ? n : 1, size);
    if (!p) abort();
    return p;
}

static int32_t *dev_sentinel_i32(int64_t n) {
    int32_t *h = zalloc((size_t)n, sizeof *h);
    for (int64_t i = 0; i < n; i++) h[i] = SENTINEL;
    int32_t *d = dev_from_i32(h, n);
    free(h);
    return d;
}

// ---- topk_rows ------------------------------------------------------------------------

enum { VAL_NORMAL, VAL_LEVELS, VAL_EQUAL, VAL_ZEROS };
static const char *val_name[] = {"normal", "4 levels", "all equal", "+-0 and few positives"};

static void check_topk_rows(int rows, int64_t ld, int len0, int step, int cap, int k, int kind) {
    char shape[128];
    snprintf(shape, sizeof shape, "rows=%d len=%d+r*%d<=%d k=%d %s", rows, len0, step, cap, k, val_name[kind]);
    const int64_t n = rows * ld;
    float *score = host_alloc(n);
    for (int64_t i = 0; i < n; i++) {
        const float x = normal();
        const float level = fminf(fmaxf(floorf(x), -2.0f), 1.0f);  // -2, -1, 0, 1
        score[i] = kind == VAL_NORMAL ? x
                   : kind == VAL_LEVELS ? level
                   : kind == VAL_EQUAL ? 0.5f
                   : x > 2.0f ? x
                   : (twins_u64() & 1) ? -0.0f
                                       : 0.0f;
    }
    int32_t *ref = zalloc((size_t)rows * k, sizeof *ref), *ref_n = zalloc((size_t)rows, sizeof *ref_n);
    int *tmp = zalloc((size_t)(cap > 0 ? cap : 1), sizeof *tmp);
    for (int r = 0; r < rows; r++) {
        int64_t len = (int64_t)len0 + (int64_t)r * step;
        len = len < 0 ? 0 : len > cap ? cap : len;
        const int m = topk_support(tmp, score + r * ld, (int)len, k);
        for (int i = 0; i < k; i++) ref[(int64_t)r * k + i] = i < m ? tmp[i] : -1;
        ref_n[r] = m;
    }
    float *d_score = dev_from(score, n);
    int32_t *d_sel = dev_sentinel_i32((int64_t)rows * k), *d_n = dev_sentinel_i32(rows);
    topk_rows_cuda(d_sel, d_n, d_score, rows, ld, len0, step, cap, k);
    int32_t *got = host_from_dev_i32(d_sel, (int64_t)rows * k), *got_n = host_from_dev_i32(d_n, rows);
    int bad = 0, first = -1;
    for (int r = 0; r < rows; r++) {
        const int same = got_n[r] == ref_n[r] &&
                         memcmp(got + (int64_t)r * k, ref + (int64_t)r * k, sizeof(int32_t) * (size_t)k) == 0;
        if (!same && bad++ == 0) first = r;
    }
    char detail[256];
    if (bad == 0) snprintf(detail, sizeof detail, "%d rows identical", rows);
    else {
        const int32_t *g = got + (int64_t)first * k, *e = ref + (int64_t)first * k;
        int i = 0;
        while (i < k && g[i] == e[i]) i++;
        snprintf(detail, sizeof detail, "%d of %d rows differ; row %d: n %d vs %d, slot %d: %d vs %d", bad, rows,
                 first, got_n[first], ref_n[first], i < k ? i : 0, g[i < k ? i : 0], e[i < k ? i : 0]);
    }
    record("topk_rows", shape, bad == 0, detail);
    cuda_free(d_score), cuda_free(d_sel), cuda_free(d_n);
    free(score), free(ref), free(ref_n), free(tmp), free(got), free(got_n);
}

// ---- a random layer and its reference P ----------------------------------------------

typedef struct {
    int T, Hq, Hkv, dh;
    float scale;
    float *q, *k, *v;           // host [T, H·dh]
    double *P;                  // host [T, T]: P_t(j) for j ≤ t, 0 after
    float *d_q, *d_k, *d_v;     // device copies
    float *d_lse;               // device [Hq, T] from attention_forward_cuda
} Layer;

// bf16 = 1: q, k, v rounded to bf16 first (for the bf16 tensor-core oracle,
// whose products of bf16 values are then exact on both sides).
static Layer layer_new(int T, int Hq, int Hkv, int dh, int bf16) {
    Layer L = {T, Hq, Hkv, dh, 1.0f / sqrtf((float)dh), NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    L.q = randn(T * nq, 1.5f), L.k = randn(T * nkv, 1.0f), L.v = randn(T * nkv, 1.0f);
    for (int64_t i = 0; bf16 && i < T * nq; i++) L.q[i] = bf16_round(L.q[i]);
    for (int64_t i = 0; bf16 && i < T * nkv; i++) L.k[i] = bf16_round(L.k[i]), L.v[i] = bf16_round(L.v[i]);
    // P: fp32 scores (as the CPU twin's sgemm), softmax per head in double.
    L.P = zalloc((size_t)T * T, sizeof(double));
    float *S = host_alloc((int64_t)T * T);
    for (int h = 0; h < Hq; h++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, dh, L.scale, L.q + (int64_t)h * dh, (int)nq,
                    L.k + (int64_t)(h / (Hq / Hkv)) * dh, (int)nkv, 0.0f, S, T);
        for (int t = 0; t < T; t++) {
            const float *s = S + (int64_t)t * T;
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j <= t; j++) mx = s[j] > mx ? s[j] : mx;
            for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
            for (int j = 0; j <= t; j++) L.P[(int64_t)t * T + j] += exp(s[j] - mx) / sum / Hq;
        }
    }
    free(S);
    L.d_q = dev_from(L.q, T * nq), L.d_k = dev_from(L.k, T * nkv), L.d_v = dev_from(L.v, T * nkv);
    L.d_lse = dev_poisoned((int64_t)Hq * T);
    float *d_out = dev_poisoned(T * nq);
    attention_forward_cuda(d_out, L.d_lse, L.d_q, L.d_k, L.d_v, T, Hq, Hkv, dh, L.scale, 0);
    cuda_free(d_out);
    return L;
}

static void layer_free(Layer *L) {
    free(L->q), free(L->k), free(L->v), free(L->P);
    cuda_free(L->d_q), cuda_free(L->d_k), cuda_free(L->d_v), cuda_free(L->d_lse);
}

// Row b of the oracle's scores (bsel = 1: P_b; else A_B) into A[0..len); returns len.
static int reference_row(const Layer *L, int bsel, int b, double *A) {
    const int T = L->T, t0 = b * bsel, t1 = t0 + bsel < T ? t0 + bsel : T;
    for (int j = 0; j < t1; j++) A[j] = 0.0;
    for (int t = t0; t < t1; t++)
        for (int j = 0; j <= t; j++) A[j] += L->P[(int64_t)t * T + j];
    return t1;
}

// ---- oracle_select and oracle_attention ------------------------------------------------

// Values (out, recall, support) of the queries with keep[t], compacted.
static void compare_queries(const char *op_out, const char *op_rec, const char *op_sup, const char *shape,
                            const float *out_g, const float *out_c, const float *rec_g, const float *rec_c,
                            const float *sup_g, const float *sup_c, const char *keep, int T, int64_t nq) {
    int n = 0;
    for (int t = 0; t < T; t++) n += keep[t] != 0;
    if (n == 0) return;
    float *og = host_alloc(n * nq), *oc = host_alloc(n * nq), *rg = host_alloc(n), *rc = host_alloc(n),
          *sg = host_alloc(n), *sc = host_alloc(n);
    int i = 0;
    for (int t = 0; t < T; t++) {
        if (!keep[t]) continue;
        memcpy(og + i * nq, out_g + t * nq, sizeof(float) * (size_t)nq);
        memcpy(oc + i * nq, out_c + t * nq, sizeof(float) * (size_t)nq);
        rg[i] = rec_g[t], rc[i] = rec_c[t], sg[i] = sup_g[t], sc[i] = sup_c[t];
        i++;
    }
    compare(op_out, shape, og, oc, n * nq, F32_NMSE, F32_MAX);
    compare(op_rec, shape, rg, rc, n, F32_NMSE, F32_MAX);
    compare(op_sup, shape, sg, sc, n, 0.0, 0.0);
    free(og), free(oc), free(rg), free(rc), free(sg), free(sc);
}

// One GPU run over the given supports (device sel/n_sel), judged against the
// CPU's out_c / rec_c / sup_c: tile = 0 support_attention_cuda, 1 the shared-tile
// per-query kernel (support_attention_query_tile_cuda, bsel 1).
static void judge_support_attention(const Layer *L, int topk, int bsel, const int32_t *d_sel, const int32_t *d_n,
                                    int stats, int tile, const char *shape, const float *out_c, const float *rec_c,
                                    const float *sup_c) {
    const int T = L->T;
    const int64_t nq = (int64_t)L->Hq * L->dh;
    float *init = host_alloc(T);
    for (int t = 0; t < T; t++) init[t] = 0.25f;
    float *d_out = dev_poisoned(T * nq), *d_rec = dev_from(init, T), *d_sup = dev_from(init, T);
    float *rec = stats ? d_rec : NULL, *sup = stats ? d_sup : NULL;
    const float *lse = stats ? L->d_lse : NULL;
    if (tile)
        support_attention_query_tile_cuda(d_out, rec, sup, L->d_q, L->d_k, L->d_v, lse, T, L->Hq, L->Hkv, L->dh,
                                          L->scale, topk, d_sel, d_n);
    else
        support_attention_cuda(d_out, rec, sup, L->d_q, L->d_k, L->d_v, lse, T, L->Hq, L->Hkv, L->dh, L->scale, topk,
                               bsel, d_sel, d_n);
    const char *op = tile ? "support_attention_tile" : "support_attention";
    char name[64];
    float *out_g = host_from_dev(d_out, T * nq);
    snprintf(name, sizeof name, "%s out", op);
    compare(name, shape, out_g, out_c, T * nq, F32_NMSE, F32_MAX);
    if (stats) {
        float *rec_g = host_from_dev(d_rec, T), *sup_g = host_from_dev(d_sup, T);
        snprintf(name, sizeof name, "%s recall", op);
        compare(name, shape, rec_g, rec_c, T, F32_NMSE, F32_MAX);
        snprintf(name, sizeof name, "%s support", op);
        compare(name, shape, sup_g, sup_c, T, 0.0, 0.0);
        free(rec_g), free(sup_g);
    }
    cuda_free(d_out), cuda_free(d_rec), cuda_free(d_sup);
    free(out_g), free(init);
}

// support_attention_cuda vs support_attention_cpu on the given supports (host
// sel/n_sel); stats: recall and support too (else NULL, lse NULL). Per query
// also the shared-tile kernel, and the unions of blocks of 4 and 64 queries'
// supports (eval --union-bsel, support_union_keys_cuda): exact counts.
static void check_support_attention(const Layer *L, int topk, int bsel, const int32_t *sel, const int32_t *n_sel,
                                    int stats, const char *what) {
    const int T = L->T, rows = (T + bsel - 1) / bsel;
    const int64_t nq = (int64_t)L->Hq * L->dh;
    char shape[160];
    snprintf(shape, sizeof shape, "T=%d Hq=%d Hkv=%d dh=%d k=%d bsel=%d %s", T, L->Hq, L->Hkv, L->dh, topk, bsel,
             what);
    float *out_c = host_alloc(T * nq), *rec_c = host_alloc(T), *sup_c = host_alloc(T);
    for (int t = 0; t < T; t++) rec_c[t] = sup_c[t] = 0.25f;
    int32_t *d_sel = dev_from_i32(sel, (int64_t)rows * topk), *d_n = dev_from_i32(n_sel, rows);
    support_attention_cpu(out_c, stats ? rec_c : NULL, stats ? sup_c : NULL, L->q, L->k, L->v, T, L->Hq, L->Hkv,
                          L->dh, L->scale, topk, bsel, sel, n_sel);
    judge_support_attention(L, topk, bsel, d_sel, d_n, stats, 0, shape, out_c, rec_c, sup_c);
    if (bsel == 1) {
        judge_support_attention(L, topk, bsel, d_sel, d_n, stats, 1, shape, out_c, rec_c, sup_c);
        for (int ub = 4; ub <= 64; ub *= 16) {
            SupportUnion uni = {ub, 0, 0};
            float *tmp = host_alloc(T * nq);
            hybrid_attention_cpu(tmp, NULL, NULL, L->q, L->k, L->v, T, L->Hq, L->Hkv, L->dh, L->scale, topk, 1, 0, 0,
                                 sel, n_sel, &uni);
            const float got = (float)support_union_keys_cuda(d_sel, d_n, T, topk, ub), want = (float)uni.keys;
            char w2[200];
            snprintf(w2, sizeof w2, "%s union of %d", shape, ub);
            compare("support_union_keys", w2, &got, &want, 1, 0.0, 0.0);
            free(tmp);
        }
    }
    cuda_free(d_sel), cuda_free(d_n);
    free(out_c), free(rec_c), free(sup_c);
}

// bf16 = 1: oracle_select_bf16_cuda on bf16 copies of the layer's (bf16-rounded)
// q, k, with the same lse and the same judgement; no oracle_attention part.
static void check_oracle(const Layer *L, int topk, int bsel, int bf16) {
    const int T = L->T, Hq = L->Hq, Hkv = L->Hkv, dh = L->dh, rows = (T + bsel - 1) / bsel;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    char shape[160];
    const char *hs = bf16 ? getenv("SPINDLE_ORACLE_HEADS") : NULL, *hw = bf16 ? getenv("SPINDLE_ORACLE_WARP_HEADS") : NULL;
    const int hk = bf16 ? oracle_select_tc_head_groups(Hq, Hkv, dh, bsel) : 0;
    const int ks = bf16 ? oracle_select_tc_key_split(Hq, Hkv, dh, bsel) : 0;
    char kern[40] = "";
    if (bf16 && bsel > 1) snprintf(kern, sizeof kern, hk ? " keys-major/%d" : " query-major", hk);
    else if (bf16) snprintf(kern, sizeof kern, ks ? " key-split/%d" : " whole-tiles", ks);
    snprintf(shape, sizeof shape, "T=%d Hq=%d Hkv=%d dh=%d k=%d bsel=%d%s%s%s%s%s", T, Hq, Hkv, dh, topk, bsel, kern,
             hs ? " heads/stage " : "", hs ? hs : "", hw ? " warps/heads " : "", hw ? hw : "");

    // Host reference supports, and the rows whose k-th and (k+1)-th values are
    // within TIE_REL (ambiguous: either twin may pick either key).
    int32_t *ref = zalloc((size_t)rows * topk, sizeof *ref), *ref_n = zalloc((size_t)rows, sizeof *ref_n);
    double *kth = zalloc((size_t)rows, sizeof *kth), *A = zalloc((size_t)T, sizeof *A);
    float *Af = host_alloc(T);
    int *tmp = zalloc((size_t)T, sizeof *tmp), *in_ref = zalloc((size_t)T, sizeof *in_ref),
        *in_gpu = zalloc((size_t)T, sizeof *in_gpu);
    char *ambiguous = zalloc((size_t)rows, 1), *differs = zalloc((size_t)rows, 1);
    int n_ambiguous = 0;
    for (int b = 0; b < rows; b++) {
        const int len = reference_row(L, bsel, b, A);
        for (int j = 0; j < len; j++) Af[j] = (float)A[j];
        const int m = topk_support(tmp, Af, len, topk);
        for (int i = 0; i < topk; i++) ref[(int64_t)b * topk + i] = i < m ? tmp[i] : -1;
        ref_n[b] = m;
        if (len <= topk) continue;
        double vk = INFINITY, vnext = -INFINITY;
        for (int i = 0; i < m; i++) vk = A[tmp[i]] < vk ? A[tmp[i]] : vk, in_ref[tmp[i]] = b + 1;
        for (int j = 0; j < len; j++)
            if (in_ref[j] != b + 1 && A[j] > vnext) vnext = A[j];
        kth[b] = vk;
        if (vk - vnext <= TIE_REL * vk) ambiguous[b] = 1, n_ambiguous++;
    }

    // oracle_select_cuda: same sets, up to ties within TIE_REL of the k-th value.
    int32_t *d_sel = dev_sentinel_i32((int64_t)rows * topk), *d_n = dev_sentinel_i32(rows);
    if (bf16) {
        void *bq = cuda_malloc(2 * (size_t)(T * nq)), *bk = cuda_malloc(2 * (size_t)(T * nkv));
        cuda_f32_to_bf16(bq, L->d_q, T * nq), cuda_f32_to_bf16(bk, L->d_k, T * nkv);
        oracle_select_bf16_cuda(d_sel, d_n, bq, bk, L->d_lse, T, Hq, Hkv, dh, L->scale, topk, bsel);
        cuda_free(bq), cuda_free(bk);
        if (!oracle_select_tc_takes(Hq, Hkv, dh, topk, bsel))
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " (fp32 fallback)");
    } else {
        oracle_select_cuda(d_sel, d_n, L->d_q, L->d_k, L->d_lse, T, Hq, Hkv, dh, L->scale, topk, bsel);
    }
    int32_t *got = host_from_dev_i32(d_sel, (int64_t)rows * topk), *got_n = host_from_dev_i32(d_n, rows);
    int identical = 0, tied = 0, bad = 0;
    char detail[256] = "";
    for (int b = 0; b < rows; b++) {
        const int32_t *g = got + (int64_t)b * topk, *e = ref + (int64_t)b * topk;
        if (got_n[b] == ref_n[b] && memcmp(g, e, sizeof(int32_t) * (size_t)topk) == 0) {
            identical++;
            continue;
        }
        const int len = reference_row(L, bsel, b, A), stamp = -(b + 1);
        int ok = got_n[b] == ref_n[b] && len > topk;  // rows with len ≤ topk must match exactly
        for (int i = 0; ok && i < topk; i++) {
            if (i >= got_n[b]) ok = g[i] == -1;
            else ok = g[i] >= 0 && g[i] < len && (i == 0 || g[i] > g[i - 1]);
        }
        if (ok) {
            for (int i = 0; i < ref_n[b]; i++) in_ref[e[i]] = stamp;
            for (int i = 0; i < got_n[b]; i++) in_gpu[g[i]] = stamp;
            for (int j = 0; ok && j < len; j++)
                if ((in_ref[j] == stamp) != (in_gpu[j] == stamp))
                    ok = fabs(A[j] - kth[b]) <= TIE_REL * kth[b] + 1e-30;
        }
        if (ok) tied++, differs[b] = 1;
        else if (bad++ == 0)
            snprintf(detail, sizeof detail, "row %d: n %d vs %d; a differing key is not a tie of the k-th value",
                     b, got_n[b], ref_n[b]);
    }
    char summary[320];
    snprintf(summary, sizeof summary, "rows %d: identical %d, tie differences %d, wrong %d%s%s", rows, identical, tied,
             bad, bad ? "; " : "", detail);
    record(bf16 ? "oracle_select bf16" : "oracle_select", shape, bad == 0, summary);
    if (bf16) {
        cuda_free(d_sel), cuda_free(d_n);
        free(ref), free(ref_n), free(kth), free(A), free(Af), free(tmp), free(in_ref), free(in_gpu), free(ambiguous),
            free(differs), free(got), free(got_n);
        return;
    }

    // oracle_attention_cuda vs oracle_attention_cpu.
    float *out_c = host_alloc(T * nq), *rec_c = host_alloc(T), *sup_c = host_alloc(T);
    for (int t = 0; t < T; t++) rec_c[t] = sup_c[t] = 0.25f;
    float *d_out = dev_poisoned(T * nq), *d_rec = dev_from(rec_c, T), *d_sup = dev_from(sup_c, T);
    oracle_attention_cuda(d_out, d_rec, d_sup, L->d_q, L->d_k, L->d_v, T, Hq, Hkv, dh, L->scale, topk, bsel);
    oracle_attention_cpu(out_c, rec_c, sup_c, L->q, L->k, L->v, T, Hq, Hkv, dh, L->scale, topk, bsel);
    float *out_g = host_from_dev(d_out, T * nq), *rec_g = host_from_dev(d_rec, T), *sup_g = host_from_dev(d_sup, T);
    char *keep = zalloc((size_t)T, 1);
    int n_keep = 0;
    for (int t = 0; t < T; t++) {
        keep[t] = !ambiguous[t / bsel] && !differs[t / bsel];
        n_keep += keep[t];
    }
    if (n_keep == T) {
        compare_queries("oracle_attention out", "oracle_attention recall", "oracle_attention support", shape, out_g,
                        out_c, rec_g, rec_c, sup_g, sup_c, keep, T, nq);
    } else {
        char sub[256];
        snprintf(sub, sizeof sub, "%s (%d of %d queries: %d ambiguous, %d tied rows left out)", shape, n_keep, T,
                 n_ambiguous, tied);
        compare_queries("oracle_attention out", "oracle_attention recall", "oracle_attention support", sub, out_g,
                        out_c, rec_g, rec_c, sup_g, sup_c, keep, T, nq);
        // All queries, on the host reference's supports.
        check_support_attention(L, topk, bsel, ref, ref_n, 1, "(oracle ref supports)");
    }
    cuda_free(d_sel), cuda_free(d_n), cuda_free(d_out), cuda_free(d_rec), cuda_free(d_sup);
    free(ref), free(ref_n), free(kth), free(A), free(Af), free(tmp), free(in_ref), free(in_gpu), free(ambiguous),
        free(differs), free(got), free(got_n), free(out_c), free(rec_c), free(sup_c), free(out_g), free(rec_g),
        free(sup_g), free(keep);
}

// ---- support_attention on random supports -----------------------------------------------

// n distinct random keys from [lo, hi), ascending, into out (scratch: hi − lo ints).
static void random_keys(int32_t *out, int n, int lo, int hi, int *scratch) {
    const int m = hi - lo;
    for (int i = 0; i < m; i++) scratch[i] = lo + i;
    for (int i = 0; i < n; i++) {
        const int j = i + (int)(twins_u64() % (uint64_t)(m - i)), x = scratch[i];
        scratch[i] = scratch[j], scratch[j] = x;
    }
    // insertion sort of the n picks (n ≤ a few hundred here)
    for (int i = 1; i < n; i++) {
        const int x = scratch[i];
        int j = i - 1;
        while (j >= 0 && scratch[j] > x) scratch[j + 1] = scratch[j], j--;
        scratch[j + 1] = x;
    }
    for (int i = 0; i < n; i++) out[i] = scratch[i];
}

// Random supports for T queries in blocks of bsel into sel [rows, topk] and
// n_sel [rows]: 1 row in 8 empty, 1 in 4 drawn only from its block's second
// half (the block's first queries see none of them and fall back to {t}).
static void random_supports(int32_t *sel, int32_t *n_sel, int T, int topk, int bsel) {
    const int rows = (T + bsel - 1) / bsel;
    int *scratch = zalloc((size_t)T, sizeof *scratch);
    for (int b = 0; b < rows; b++) {
        const int t0 = b * bsel, len = t0 + bsel < T ? t0 + bsel : T;
        // Keys from the whole causal range, or (1 row in 4) only from the block's
        // second half, so its first queries see none and fall back to {t}.
        const int lo = (twins_u64() % 4 == 0) ? t0 + (len - t0) / 2 : 0;
        const int cap = topk < len - lo ? topk : len - lo;
        const int n = twins_u64() % 8 == 0 ? 0 : 1 + (int)(twins_u64() % (uint64_t)cap);
        random_keys(sel + (int64_t)b * topk, n, lo, len, scratch);
        for (int i = n; i < topk; i++) sel[(int64_t)b * topk + i] = -1;
        n_sel[b] = n;
    }
    free(scratch);
}

static void check_support_random(const Layer *L, int topk, int bsel, int stats) {
    const int T = L->T, rows = (T + bsel - 1) / bsel;
    int32_t *sel = zalloc((size_t)rows * topk, sizeof *sel), *n_sel = zalloc((size_t)rows, sizeof *n_sel);
    random_supports(sel, n_sel, T, topk, bsel);
    check_support_attention(L, topk, bsel, sel, n_sel, stats, stats ? "(random supports)" : "(random, out only)");
    free(sel), free(n_sel);
}

// ---- support_attention_block_tc (bf16 tensor cores) ----------------------------------------

// Tolerance. Both twins see the same bf16-rounded q, k, v, so the products in
// the scores are exact on both sides and the scores, maxima and exponentials
// agree to fp32 rounding (~1e-7 relative). The one deliberate difference: the
// GPU rounds each unnormalised weight p_j ∈ (0, 1] to bf16 before P·V (8
// significant bits: p̃_j = p_j(1 + δ_j), |δ_j| ≤ 2⁻⁸) and divides by Σ p̃_j. With
// w_j the exact weights and δ̄ = Σ w_j δ_j, the output error is
//     Σ w_j (δ_j − δ̄)(v_j − out) / (1 + δ̄),
// a sum of independent rounding errors: E δ² ≈ (2⁻¹⁶/3)·E[1/m²] ≈ 2.8e-6 for
// significands m spread over [1, 2), and E[Σ w_j²(v_j − out)²] ≤ E[out²] for the
// diffuse rows (weights ~1/n, v ~ N(0, 1)) that dominate it, so nmse ≈ 3e-6 at
// worst (peaked rows contribute less: the top weight is 1 exactly). Tolerance
// 2e-5, ~7× that. Per element the standard deviation is
// 1.7e-3·sqrt(Σ w_j²(v_j − out)²): for a row split evenly between two keys 5
// apart, 1.7e-3·2.5 ≈ 4e-3, against a bound of at least 2⁻⁶ ≈ 0.016 (about 0.05
// in practice: rows that fall back to {t} or hold one key copy a v row, so
// max|ref| is the largest of hundreds of normals). The worst case, every δ_j at
// 2⁻⁸ with the sign of v_j − out, is 2⁻⁷·max|v_j − out|: not a realistic event.
#define TC_NMSE 2e-5
#define TC_MAX (1.0 / 64)

// Per-query supports for the union op: each query t's sorted keys from
// [lo, hi): mostly the causal range [0, t], for 1 query in 4 reaching up to 40
// keys past t (which it must not see), 1 in 8 empty, 1 in 8 only keys after t
// (the {t} fallback); the queries of a block overlap as much as chance makes them.
static void random_query_supports(int32_t *sel, int32_t *n_sel, int T, int topk) {
    int *scratch = zalloc((size_t)T + 64, sizeof *scratch);
    for (int t = 0; t < T; t++) {
        const int kind = (int)(twins_u64() % 8);
        int lo = 0, hi = t + 1;
        if (kind == 1 || kind == 2) hi = t + 41 < T ? t + 41 : T;
        if (kind == 3) lo = t + 1, hi = t + 41 < T ? t + 41 : T;
        const int cap = topk < hi - lo ? topk : hi - lo;
        const int n = kind == 4 || cap <= 0 ? 0 : 1 + (int)(twins_u64() % (uint64_t)cap);
        random_keys(sel + (int64_t)t * topk, n, lo, hi, scratch);
        for (int i = n; i < topk; i++) sel[(int64_t)t * topk + i] = -1;
        n_sel[t] = n;
    }
    free(scratch);
}

// Σ_b |∪_{t ∈ block b} {j ∈ S_t : j ≤ t}| over blocks of ublock queries.
static int64_t union_total(const int32_t *sel, const int32_t *n_sel, int T, int topk, int ublock) {
    unsigned char *seen = zalloc((size_t)T, 1);
    int64_t total = 0;
    for (int t0 = 0; t0 < T; t0 += ublock) {
        memset(seen, 0, (size_t)T);
        for (int t = t0; t < t0 + ublock && t < T; t++)
            for (int i = 0; i < n_sel[t]; i++) {
                const int j = sel[(int64_t)t * topk + i];
                if (j >= 0 && j <= t && !seen[j]) seen[j] = 1, total++;
            }
    }
    free(seen);
    return total;
}

// The name block-shared cases are recorded under: the warpgroup-MMA section sets its own.
static const char *block_tc_op = "support_attention_block_tc";

// ublock 0: support_attention_block_tc_cuda on block-shared supports (bsel);
// ublock > 0: support_attention_union_tc_cuda on per-query supports run in
// blocks of ublock queries (bsel is 1 then), against the per-query CPU twin.
static void check_support_block_tc(int T, int Hq, int Hkv, int dh, int topk, int bsel, int ublock) {
    if (ublock > 0) bsel = 1;
    const int rows = (T + bsel - 1) / bsel;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    const float scale = 1.0f / sqrtf((float)dh);
    const char *op = ublock > 0 ? "support_attention_union_tc" : block_tc_op;
    char shape[160], name[80];
    if (ublock > 0)
        snprintf(shape, sizeof shape, "T=%d Hq=%d Hkv=%d dh=%d k=%d per query, blocks of %d (bf16 in)", T, Hq, Hkv, dh,
                 topk, ublock);
    else
        snprintf(shape, sizeof shape, "T=%d Hq=%d Hkv=%d dh=%d k=%d bsel=%d (random supports, bf16 in)", T, Hq, Hkv,
                 dh, topk, bsel);
    float *q = randn(T * nq, 1.5f), *k = randn(T * nkv, 1.0f), *v = randn(T * nkv, 1.0f);
    for (int64_t i = 0; i < T * nq; i++) q[i] = bf16_round(q[i]);
    for (int64_t i = 0; i < T * nkv; i++) k[i] = bf16_round(k[i]), v[i] = bf16_round(v[i]);
    int32_t *sel = zalloc((size_t)rows * topk, sizeof *sel), *n_sel = zalloc((size_t)rows, sizeof *n_sel);
    if (ublock > 0) random_query_supports(sel, n_sel, T, topk);
    else random_supports(sel, n_sel, T, topk, bsel);
    float *out_c = host_alloc(T * nq), *rec_c = host_alloc(T), *sup_c = host_alloc(T);
    for (int t = 0; t < T; t++) rec_c[t] = sup_c[t] = 0.25f;
    support_attention_cpu(out_c, rec_c, sup_c, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, sel, n_sel);

    float *d_q = dev_from(q, T * nq), *d_k = dev_from(k, T * nkv), *d_v = dev_from(v, T * nkv);
    void *b_q = cuda_malloc(2 * (size_t)(T * nq)), *b_k = cuda_malloc(2 * (size_t)(T * nkv)),
         *b_v = cuda_malloc(2 * (size_t)(T * nkv));
    cuda_f32_to_bf16(b_q, d_q, T * nq), cuda_f32_to_bf16(b_k, d_k, T * nkv), cuda_f32_to_bf16(b_v, d_v, T * nkv);
    int32_t *d_sel = dev_from_i32(sel, (int64_t)rows * topk), *d_n = dev_from_i32(n_sel, rows);
    const int takes = ublock > 0 ? support_attention_union_tc_takes(T, Hq, Hkv, dh, topk, ublock)
                                 : support_attention_block_tc_takes(Hq, Hkv, dh, topk, bsel);
    if (!takes) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " (fp32 fallback)");
    float *d_out = dev_poisoned(T * nq);
    int64_t got_union = -1;
    if (ublock > 0)
        support_attention_union_tc_cuda(d_out, b_q, b_k, b_v, T, Hq, Hkv, dh, scale, topk, ublock, d_sel, d_n, DT_F32,
                                        NULL, &got_union);
    else
        support_attention_block_tc_cuda(d_out, b_q, b_k, b_v, T, Hq, Hkv, dh, scale, topk, bsel, d_sel, d_n, DT_F32,
                                        NULL);
    float *out_g = host_from_dev(d_out, T * nq);
    compare(op, shape, out_g, out_c, T * nq, TC_NMSE, TC_MAX);
    // With statistics (lse from the fp32 flash kernel over the same values; recall and support start at
    // 0.25 and are added to): the same output bit for bit; recall as the CPU twin's within the bf16
    // rounding of the weights (≤ 2⁻⁸ relative each: TC_MAX absolute on a head-averaged mass ≤ 1);
    // |S_t| exactly.
    {
        float *init = host_alloc(T);
        for (int t = 0; t < T; t++) init[t] = 0.25f;
        float *d_lse = dev_poisoned((int64_t)Hq * T), *d_tmp = dev_poisoned(T * nq), *d_out2 = dev_poisoned(T * nq);
        float *d_rec = dev_from(init, T), *d_sup = dev_from(init, T);
        attention_forward_cuda(d_tmp, d_lse, d_q, d_k, d_v, T, Hq, Hkv, dh, scale, 0);
        const SupportStatsDev st = {d_rec, d_sup, d_lse};
        int64_t u2 = -1;
        if (ublock > 0)
            support_attention_union_tc_cuda(d_out2, b_q, b_k, b_v, T, Hq, Hkv, dh, scale, topk, ublock, d_sel, d_n,
                                            DT_F32, &st, &u2);
        else
            support_attention_block_tc_cuda(d_out2, b_q, b_k, b_v, T, Hq, Hkv, dh, scale, topk, bsel, d_sel, d_n,
                                            DT_F32, &st);
        float *out2 = host_from_dev(d_out2, T * nq), *rec_g = host_from_dev(d_rec, T), *sup_g = host_from_dev(d_sup, T);
        snprintf(name, sizeof name, "%s stats out", op);
        compare(name, shape, out2, out_g, T * nq, 0.0, 0.0);
        snprintf(name, sizeof name, "%s recall", op);
        compare(name, shape, rec_g, rec_c, T, TC_NMSE, TC_MAX);
        snprintf(name, sizeof name, "%s support", op);
        compare(name, shape, sup_g, sup_c, T, 0.0, 0.0);
        if (ublock > 0) {
            char got[96];
            snprintf(got, sizeof got, "Σ|U_b| with statistics %lld, without %lld", (long long)u2, (long long)got_union);
            record(op, shape, u2 == got_union, got);
        }
        cuda_free(d_lse), cuda_free(d_tmp), cuda_free(d_out2), cuda_free(d_rec), cuda_free(d_sup);
        free(out2), free(rec_g), free(sup_g), free(init);
    }
    if (ublock > 0 && takes) {  // the keys the blocks gathered: the exact union sizes
        const int64_t want = union_total(sel, n_sel, T, topk, ublock);
        char got[96];
        snprintf(got, sizeof got, "Σ|U_b| %lld, expected %lld", (long long)got_union, (long long)want);
        record(op, shape, got_union == want, got);
    }
    // 16-bit outputs: the same values rounded to bf16 / f16, bit for bit.
    for (int h = 0; h < 2; h++) {
        void *b_out = cuda_malloc(2 * (size_t)(T * nq));
        float *d_wide = dev_poisoned(T * nq), *want = host_alloc(T * nq);
        cuda_memset(b_out, 0xFF, 2 * (size_t)(T * nq));  // a NaN in either type
        if (ublock > 0)
            support_attention_union_tc_cuda(b_out, b_q, b_k, b_v, T, Hq, Hkv, dh, scale, topk, ublock, d_sel, d_n,
                                            h == 0 ? DT_BF16 : DT_F16, NULL, NULL);
        else
            support_attention_block_tc_cuda(b_out, b_q, b_k, b_v, T, Hq, Hkv, dh, scale, topk, bsel, d_sel, d_n,
                                            h == 0 ? DT_BF16 : DT_F16, NULL);
        cuda_half_to_f32(d_wide, b_out, T * nq, h == 0 ? HALF_BF16 : HALF_F16);
        float *out_16 = host_from_dev(d_wide, T * nq);
        for (int64_t i = 0; i < T * nq; i++) want[i] = h == 0 ? bf16_round(out_g[i]) : f16_round(out_g[i]);
        snprintf(name, sizeof name, "%s %s out", op, h == 0 ? "bf16" : "f16");
        compare(name, shape, out_16, want, T * nq, 0.0, 0.0);
        cuda_free(b_out), cuda_free(d_wide);
        free(out_16), free(want);
    }
    free(out_g);
    cuda_free(d_q), cuda_free(d_k), cuda_free(d_v), cuda_free(b_q), cuda_free(b_k), cuda_free(b_v);
    cuda_free(d_sel), cuda_free(d_n), cuda_free(d_out);
    free(q), free(k), free(v), free(sel), free(n_sel), free(out_c), free(rec_c), free(sup_c);
}

// Which path the two bf16 ops say they take: the tensor-core kernels' shapes
// (support attention: dh 64 / 128 / 256, bsel a multiple of 16 up to 128; the oracle:
// dh 64 / 128 / 256, bsel 1 or such a multiple, staged q rows within shared
// memory), the fallback for the rest.
static void check_tc_takes(void) {
    static const int no[][2] = {{80, 16}, {256, 1}, {32, 16}, {64, 1}, {64, 8}, {64, 24}, {128, 144}};
    static const int yes[][2] = {{64, 16}, {128, 64}, {128, 128}, {256, 16}, {256, 64}, {256, 128}};
    int ok = 1;
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) ok &= !support_attention_block_tc_takes(8, 2, no[i][0], 16, no[i][1]);
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        ok &= support_attention_block_tc_takes(8, 2, yes[i][0], 16, yes[i][1]);
    record("support_attention_block_tc", "tensor-core shapes (dh 64/128/256 × bsel 16/64/128; not dh 80/32, bsel 1/8/24/144)",
           ok, ok ? "as expected" : "a shape reported on the wrong path");
    // Gemma 3 270M (4 / 1 heads, dh 256): per query and bsel ≤ 64 fit, bsel 128 does not (338 KB of q rows).
    ok = !oracle_select_tc_takes(8, 2, 80, 16, 1) && !oracle_select_tc_takes(8, 2, 64, 16, 24) &&
         !oracle_select_tc_takes(8, 2, 64, 16, 256) && oracle_select_tc_takes(8, 2, 64, 16, 1) &&
         oracle_select_tc_takes(4, 1, 256, 16, 1) && oracle_select_tc_takes(4, 1, 256, 16, 64) &&
         !oracle_select_tc_takes(4, 1, 256, 16, 128);
    record("oracle_select bf16", "tensor-core shapes (dh 64/128/256; not dh 80, bsel 24/256, dh 256 bsel 128 at 4/1)",
           ok, ok ? "as expected" : "a shape reported on the wrong path");
}

// ---- entry ------------------------------------------------------------------------

void twins_oracle(int quick) {
    // topk_rows
    check_topk_rows(1, 1, 1, 0, 1, 1, VAL_NORMAL);            // len = 1, k = 1
    check_topk_rows(37, 300, 1, 7, 300, 16, VAL_NORMAL);      // len from 1 (≤ k) to 253
    check_topk_rows(37, 300, 1, 7, 300, 1, VAL_NORMAL);       // k = 1
    check_topk_rows(5, 40, 3, 2, 40, 20, VAL_NORMAL);         // k > len on every row
    check_topk_rows(20, 5000, 3000, 100, 4500, 100, VAL_LEVELS);
    check_topk_rows(9, 3000, 2500, 50, 3000, 100, VAL_EQUAL);
    check_topk_rows(9, 3000, 2500, 50, 3000, 64, VAL_ZEROS);
    check_topk_rows(64, 1000, 900, 1, 1000, 513, VAL_LEVELS);  // k past one tile of the scan
    if (!quick) {
        check_topk_rows(6, 100000, 90000, 2000, 100000, 2048, VAL_NORMAL);
        check_topk_rows(4, 100000, 100000, 0, 100000, 2048, VAL_LEVELS);
        check_topk_rows(2, 262144, 262144, 0, 262144, 4096, VAL_NORMAL);
    }

    // oracle_select, oracle_attention, support_attention
    // (4, 1, 256): Gemma 3 270M's full-attention layers.
    static const int shapes[][3] = {{8, 8, 64}, {16, 2, 128}, {4, 1, 256}, {8, 8, 128},
                                    {16, 2, 64}, {8, 8, 256}, {16, 2, 256}};
    const int Ts[] = {1, 7, 130, 1000}, ks[] = {1, 16, 100, 1 << 30}, bsels[] = {1, 16, 64};
    const int n_T = quick ? 3 : 4, n_shapes = quick ? 2 : 7;  // quick: the sanitizers' budget
    for (int it = 0; it < n_T; it++) {
        for (int is = 0; is < n_shapes; is++) {
            const int T = Ts[it];
            Layer L = layer_new(T, shapes[is][0], shapes[is][1], shapes[is][2], 0);
            for (int ik = 0; ik < 4; ik++) {
                const int topk = ks[ik] < T ? ks[ik] : T + 3;  // k ≥ T: once per T
                if (ks[ik] >= T && ik > 0 && ks[ik - 1] >= T) continue;
                for (int ib = 0; ib < 3; ib++) check_oracle(&L, topk, bsels[ib], 0);
            }
            for (int ib = 0; ib < 3; ib++) check_support_random(&L, T < 16 ? 4 : 16, bsels[ib], 1);
            if (is == 0) check_support_random(&L, T < 16 ? 4 : 64, 1, 0);
            layer_free(&L);
        }
    }
    // Odd shapes: Hq not a multiple of the warps per block (SmolLM2's 9:3), dh
    // not a multiple of 32, block sizes that do not divide the score tile.
    {
        const int T = quick ? 130 : 700;
        Layer L = layer_new(T, 9, 3, 64, 0);
        check_oracle(&L, 32, 1, 0);
        check_oracle(&L, 32, 5, 0);
        check_oracle(&L, 32, 100, 0);
        check_support_random(&L, 24, 100, 1);
        Layer M = layer_new(T, 4, 2, 80, 0);
        check_oracle(&M, 20, 1, 0);
        check_oracle(&M, 20, 48, 0);
        check_support_random(&M, 20, 7, 1);
        // Per query (the warp kernel, and the shared-tile kernel: groups of 3 and 2 heads — a warp a head,
        // idle warps —, 6 (Qwen2.5's 12:2), and 10 (more heads than one thread block's rows: two row blocks)).
        check_support_random(&L, 24, 1, 1);
        check_support_random(&M, 20, 1, 1);
        layer_free(&L);
        layer_free(&M);
        Layer Q = layer_new(T, 12, 2, 128, 0), N = layer_new(T, 20, 2, 96, 0);
        check_support_random(&Q, 64, 1, 1);
        check_support_random(&N, 40, 1, 1);
        layer_free(&Q);
        layer_free(&N);
    }

    // oracle_select_bf16_cuda on bf16-rounded layers: per query and blocks of
    // 16 / 64, MHA and GQA (8:8, 16:2, 12:4), dh 64 / 128, T from 1 to 1000
    // (several 64-row thread blocks and key tiles, chunks starting past row k).
    {
        static const int ob_shapes[][3] = {{8, 8, 64}, {16, 2, 128}, {12, 4, 128}, {4, 1, 256}};
        const int ob_Ts[] = {1, 7, 130, 1000}, ob_ks[] = {1, 16, 100}, ob_bsels[] = {1, 16, 64};
        for (int it = 0; it < (quick ? 3 : 4); it++)
            for (int is = 0; is < 4; is++) {
                const int T = ob_Ts[it];
                Layer L = layer_new(T, ob_shapes[is][0], ob_shapes[is][1], ob_shapes[is][2], 1);
                for (int ik = 0; ik < 3; ik++)
                    for (int ib = 0; ib < 3; ib++) check_oracle(&L, ob_ks[ik] < T ? ob_ks[ik] : T + 3, ob_bsels[ib], 1);
                // The fallback inside the op: Gemma's heads at bsel 128, and dh 80 / bsel 24.
                if (is == 3 && T > 1) check_oracle(&L, 16, 128, 1);
                layer_free(&L);
            }
        const int T = quick ? 130 : 700;
        Layer M = layer_new(T, 4, 2, 80, 1);
        check_oracle(&M, 20, 1, 1);
        check_oracle(&M, 20, 24, 1);
        layer_free(&M);
        // The heads staged a divisor of the group at a time (SPINDLE_ORACLE_HEADS): 16:2 in stages of 2 heads,
        // Qwen2.5's 12:2 in stages of 3, per query and in blocks of 16.
        Layer S = layer_new(T, 16, 2, 128, 1), Q = layer_new(T, 12, 2, 128, 1);
        setenv("SPINDLE_ORACLE_HEADS", "2", 1);
        check_oracle(&S, 16, 1, 1);
        check_oracle(&S, 16, 16, 1);
        setenv("SPINDLE_ORACLE_HEADS", "3", 1);
        check_oracle(&Q, 40, 1, 1);
        check_oracle(&Q, 40, 16, 1);
        unsetenv("SPINDLE_ORACLE_HEADS");
        // Per query, each key tile split over 1, 2 and 4 warps per 16 rows (SPINDLE_ORACLE_KEY_SPLIT; the default
        // kernel per query, its split by shape: 1, 2 and 4 all ran above), 16:2 and 12:2, heads staged in stages
        // of 2; without the quick mode also T = 2500 (two 2048-key ranges).
        for (int ks = 1; ks <= 4; ks *= 2) {
            char v[4];
            snprintf(v, sizeof v, "%d", ks);
            setenv("SPINDLE_ORACLE_KEY_SPLIT", v, 1);
            check_oracle(&S, 16, 1, 1);
            check_oracle(&Q, 40, 1, 1);
            setenv("SPINDLE_ORACLE_HEADS", "2", 1);
            check_oracle(&S, 16, 1, 1);
            unsetenv("SPINDLE_ORACLE_HEADS");
            if (!quick) {
                Layer W = layer_new(2500, 8, 2, 64, 1);
                check_oracle(&W, 100, 1, 1);
                layer_free(&W);
            }
        }
        // The kernel with one warp per 16 rows (SPINDLE_ORACLE_KEY_SPLIT=0) per query from here on.
        setenv("SPINDLE_ORACLE_KEY_SPLIT", "0", 1);
        check_oracle(&S, 16, 1, 1);
        check_oracle(&Q, 40, 1, 1);
        // The staged heads split over the warps of a row group (SPINDLE_ORACLE_WARP_HEADS): 16:2 over 2 warps
        // per query and over 4 in blocks of 16, 12:2 over 3 and, in stages of 2 heads, over 2.
        setenv("SPINDLE_ORACLE_WARP_HEADS", "2", 1);
        check_oracle(&S, 16, 1, 1);
        setenv("SPINDLE_ORACLE_WARP_HEADS", "4", 1);
        check_oracle(&S, 16, 16, 1);
        setenv("SPINDLE_ORACLE_WARP_HEADS", "3", 1);
        check_oracle(&Q, 40, 1, 1);
        check_oracle(&Q, 40, 64, 1);
        setenv("SPINDLE_ORACLE_WARP_HEADS", "2", 1);
        setenv("SPINDLE_ORACLE_HEADS", "2", 1);
        check_oracle(&Q, 40, 1, 1);
        unsetenv("SPINDLE_ORACLE_HEADS");
        // 12:2 without the split, which it takes by default (6 heads staged).
        setenv("SPINDLE_ORACLE_WARP_HEADS", "1", 1);
        check_oracle(&Q, 40, 1, 1);
        check_oracle(&Q, 40, 64, 1);
        unsetenv("SPINDLE_ORACLE_WARP_HEADS");
        // Blocks, keys-major (the default) over 1 to 4 head groups, blocks of 48 and 128 (a partial and two
        // query chunks), then the query-major block kernel (SPINDLE_ORACLE_BLOCK_ROWS=1).
        for (int hk = 1; hk <= 4; hk++) {
            char v[4];
            snprintf(v, sizeof v, "%d", hk);
            setenv("SPINDLE_ORACLE_HEAD_GROUPS", v, 1);
            check_oracle(&S, 16, 64, 1);
            check_oracle(&Q, 40, 64, 1);
        }
        unsetenv("SPINDLE_ORACLE_HEAD_GROUPS");
        check_oracle(&S, 16, 48, 1);
        check_oracle(&Q, 40, 128, 1);
        setenv("SPINDLE_ORACLE_BLOCK_ROWS", "1", 1);
        check_oracle(&S, 16, 64, 1);
        check_oracle(&Q, 40, 64, 1);
        check_oracle(&Q, 40, 128, 1);
        unsetenv("SPINDLE_ORACLE_BLOCK_ROWS");
        unsetenv("SPINDLE_ORACLE_KEY_SPLIT");
        layer_free(&S);
        layer_free(&Q);
    }

    // support_attention_block_tc: the bf16 tensor-core kernel on the shapes it
    // takes (MHA, GQA 16:2 and 12:4 — 8, 2, 1 or 3 heads per thread block —,
    // dh 64, 128 and 256 (Qwen3.5-9B's 16:4 and Gemma 3's 4:1), bsel 16 and 64,
    // plus 128 and k = 300 — several key tiles — in the full run), and the ones
    // it refuses.
    {
        static const int tc_shapes[][3] = {{8, 8, 64}, {16, 2, 64}, {8, 8, 128}, {16, 2, 128}, {12, 4, 128},
                                           {16, 4, 256}, {4, 1, 256}};
        const int n_shapes = (int)(sizeof tc_shapes / sizeof tc_shapes[0]);
        const int tc_Ts[] = {7, 130, 1000}, tc_ks[] = {16, 100, 300}, tc_bsels[] = {16, 64, 128};
        const int n_T = quick ? 2 : 3;
        for (int it = 0; it < n_T; it++)
            for (int is = 0; is < n_shapes; is++)
                for (int ik = 0; ik < (tc_Ts[it] >= 1000 ? 3 : 2); ik++)
                    for (int ib = 0; ib < (quick ? 2 : 3); ib++)
                        check_support_block_tc(tc_Ts[it], tc_shapes[is][0], tc_shapes[is][1], tc_shapes[is][2],
                                               tc_ks[ik], tc_bsels[ib], 0);
        // The shapes the kernel does not take, served inside the op: per query
        // (Gemma 3's 4 / 1 heads at dh 256), dh 80, bsel 24.
        for (int it = 0; it < n_T; it++) check_support_block_tc(tc_Ts[it], 4, 1, 256, tc_ks[1], 1, 0);
        check_support_block_tc(130, 4, 2, 80, 16, 16, 0);
        check_support_block_tc(130, 8, 2, 64, 16, 24, 0);
        check_tc_takes();
        // The warpgroup-MMA kernel (sparse_attention_wg.cu, SPINDLE_SPARSE_WGMMA=1) on the shapes of the
        // list it takes (d_h 64 / 128, head rows a multiple of 64: 16:2 at bsel 16 and 64, the MHA and 12:4
        // shapes at bsel 64 and 128), the same judgement; first, that it launches on this device at all
        // (else the op would have run the mma.sync kernel and the cases would say nothing about it).
        {
            const int wg_ok = support_attention_block_wg_takes(16, 2, 128, 64) &&
                              support_attention_block_wg_takes(8, 8, 64, 64) &&
                              !support_attention_block_wg_takes(8, 8, 64, 16) &&
                              !support_attention_block_wg_takes(12, 2, 128, 16) &&
                              !support_attention_block_wg_takes(4, 1, 256, 64);
            int32_t *one = dev_from_i32((const int32_t[]){0, 1}, 2);
            void *z = cuda_malloc(2 * 64 * 16 * 128);  // q [64][16·128] bf16 zeros (k and v use its start)
            cuda_memset(z, 0, 2 * 64 * 16 * 128);
            float *o = dev_poisoned(64 * 16 * 128);
            const int rc =
                support_attention_block_wg_cuda(o, DT_F32, z, z, z, 64, 16, 2, 128, 0.1f, 2, 64, one, one + 1);
            cuda_sync();
            record("support_attention_block_wg", "launches here; takes d_h 64/128 with head rows a multiple of 64",
                   wg_ok && rc == 0,
                   rc != 0 ? "did not launch (not an sm_90 device?)"
                   : wg_ok ? "as expected"
                           : "a shape reported on the wrong path");
            cuda_free(one), cuda_free(z), cuda_free(o);
        }
        // Both of its kernels: two thread blocks an SM (SPINDLE_SPARSE_WGMMA=1) and one (=2).
        for (int wv = 1; wv <= 2; wv++) {
            setenv("SPINDLE_SPARSE_WGMMA", wv == 1 ? "1" : "2", 1);
            block_tc_op = wv == 1 ? "support_attention_block_wg" : "support_attention_block_wg1";
            for (int it = 0; it < n_T; it++)
                for (int is = 0; is < 5; is++)  // the d_h 64 / 128 shapes
                    for (int ik = 0; ik < (tc_Ts[it] >= 1000 ? 3 : 2); ik++)
                        for (int ib = 0; ib < (quick ? 2 : 3); ib++)
                            if (support_attention_block_wg_takes(tc_shapes[is][0], tc_shapes[is][1],
                                                                 tc_shapes[is][2], tc_bsels[ib]))
                                check_support_block_tc(tc_Ts[it], tc_shapes[is][0], tc_shapes[is][1],
                                                       tc_shapes[is][2], tc_ks[ik], tc_bsels[ib], 0);
        }
        block_tc_op = "support_attention_block_tc";
        unsetenv("SPINDLE_SPARSE_WGMMA");
        // Per-query supports as block unions: blocks of 16 and 64 queries (unions of up to
        // 16·k keys: several tiles), every tensor-core shape; T = 1000 crosses many blocks
        // and a partial last one; dh 80 and blocks of 24 fall back inside the op.
        for (int it = 0; it < n_T; it++)
            for (int is = 0; is < n_shapes; is++)
                for (int ik = 0; ik < (tc_Ts[it] >= 1000 ? 3 : 2); ik++)
                    for (int ub = 16; ub <= 64; ub *= 4)
                        check_support_block_tc(tc_Ts[it], tc_shapes[is][0], tc_shapes[is][1], tc_shapes[is][2],
                                               tc_ks[ik], 1, ub);
        check_support_block_tc(130, 4, 2, 80, 16, 1, 16);
        check_support_block_tc(130, 8, 2, 64, 16, 1, 24);
    }
}
