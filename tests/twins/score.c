// score.c: twin checks (see twins.h) of the next-token scoring of `spindle eval`:
//
//   next_token_stats   next_token_stats_cuda (kernels/cuda/score.cu) vs
//                      next_token_stats_cpu (kernels/cpu/score_cpu.c) on the
//                      same random logits, V = 1000 and V = 49152, 300 rows
//                      (quick: 40), paired and dense only (ls = NULL). Row
//                      kinds: sparse equal to dense (KL exactly 0, top1 1),
//                      near (+ noise of sd 1e-3: KL ~ 1e-6), apart (+ noise of
//                      sd 0.3), independent, dense shifted by +1000 (large
//                      magnitudes), a constant row (every index ties; the
//                      argmax is 0), and rows whose dense maximum ties at
//                      four indices spread over threads and warps (3, 35,
//                      259, V − 1) with the sparse maximum at 3 (top1 must be
//                      1: the lowest index wins) or at V − 1 (top1 must be 0).
//   backbone_score     on the GPU (fwd_cuda_score: upload, lm_head GEMM, the
//                      kernel, in row chunks) vs on the CPU (forward_lm_head,
//                      next_token_stats_cpu), 1100 rows (two GPU chunks of up
//                      to 1024; quick: 130) at V = 49152 and 300 at V = 1000,
//                      hidden 64. Hidden states are multiples of 1/4 in
//                      [−2, 2] and the lm_head's entries −1/8, 0, 1/8, so every
//                      logit is a multiple of 1/32 below 16 in magnitude: exact
//                      in fp32 on both twins whatever the GEMM's order (and
//                      ties for a row's maximum are common). Also the same
//                      upload in bf16 precision: the lm_head is fp32 in every
//                      precision, so the results must be bit-identical.
//
// Tolerances: nll and KL: |gpu − cpu| ≤ 1e-6·|cpu| + 1e-10 per row, any
//   non-finite value fails; top1: identical. Both twins compute in double from
//   the same fp32 logits and differ only in the order of the sums (a thread's
//   strided partial sums, then a fixed-order block sum, against one running
//   sum) and in the KL's form (A/S_d − (lse_d − lse_s) against Σ p_d·(log p_d −
//   log p_s), equal in exact arithmetic): ~1e-15 relative for the sums, and for
//   KL an absolute error of a few ulp of lse (~1e-14), which is 1e-8 of the
//   smallest KL here (~1e-6). An error of fp32 accumulation or an fp32 exp
//   would show at 1e-7..1e-5; an indexing or max bug at order 1.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backbone.h"
#include "forward_cuda.h"
#include "ops.h"
#include "ops_cuda.h"
#include "twins.h"

#define SCORE_REL 1e-6
#define SCORE_ABS 1e-10

// Records gpu vs ref (n doubles) under the tolerance above; the detail names
// the worst row (the first non-finite one, if any).
static void compare_d(const char *op, const char *shape, const double *gpu, const double *ref, int n) {
    double worst = 0;
    int at = 0, bad = 0, nonfinite = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(gpu[i])) {
            if (!nonfinite++) at = i;
            continue;
        }
        const double err = fabs(gpu[i] - ref[i]), lim = SCORE_REL * fabs(ref[i]) + SCORE_ABS;
        bad += err > lim;
        if (!nonfinite && err / lim > worst) worst = err / lim, at = i;
    }
    char detail[200];
    snprintf(detail, sizeof detail, "max err/tol %.3g, %d over, %d non-finite; row %d: gpu %.17g cpu %.17g", worst,
             bad, nonfinite, at, n > 0 ? gpu[at] : 0.0, n > 0 ? ref[at] : 0.0);
    record(op, shape, bad == 0 && nonfinite == 0, detail);
}

static void compare_top1(const char *op, const char *shape, const int32_t *gpu, const int32_t *ref, int n) {
    int bad = 0, first = -1;
    for (int i = 0; i < n; i++)
        if (gpu[i] != ref[i]) bad++, first = first < 0 ? i : first;
    char detail[160];
    snprintf(detail, sizeof detail, "%d of %d rows differ%s", bad, n, bad ? " (first shown)" : "");
    if (bad) snprintf(detail + strlen(detail), sizeof detail - strlen(detail), ": row %d gpu %d cpu %d", first,
                      gpu[first], ref[first]);
    record(op, shape, bad == 0, detail);
}

static double *dev_doubles(int n) {
    double *d = cuda_malloc(sizeof(double) * (size_t)n);
    cuda_memset(d, 0xFF, sizeof(double) * (size_t)n);  // NaN
    return d;
}

static double *host_doubles(const double *d, int n) {
    double *h = malloc(sizeof(double) * (size_t)n);
    if (!h) abort();
    cuda_sync();
    cuda_to_host(h, d, sizeof(double) * (size_t)n);
    return h;
}

// Kinds of (dense, sparse) logits rows.
enum { K_EQUAL, K_NEAR, K_APART, K_INDEP, K_SHIFT, K_TIE_LOW, K_TIE_HIGH, K_CONST, K_KINDS };

static void check_stats(int rows, int V) {
    char shape[96];
    snprintf(shape, sizeof shape, "rows=%d V=%d", rows, V);
    const int64_t n = (int64_t)rows * V;
    float *ld = randn(n, 3.0f), *ls = host_alloc(n);
    int32_t *next = malloc(sizeof(int32_t) * (size_t)rows), *top1 = malloc(sizeof(int32_t) * (size_t)rows);
    double *nd = malloc(sizeof(double) * (size_t)rows), *ns = malloc(sizeof(double) * (size_t)rows);
    double *kl = malloc(sizeof(double) * (size_t)rows), *nd_only = malloc(sizeof(double) * (size_t)rows);
    if (!next || !top1 || !nd || !ns || !kl || !nd_only) abort();
    const int ties[4] = {V - 1, 259, 35, 3};  // the lowest, 3, must win
    for (int r = 0; r < rows; r++) {
        float *d = ld + (int64_t)r * V, *s = ls + (int64_t)r * V;
        const int kind = r % K_KINDS;
        next[r] = r == 0 ? 0 : r == 1 ? V - 1 : (int32_t)(twins_u64() % (uint64_t)V);
        if (kind == K_CONST)
            for (int j = 0; j < V; j++) d[j] = 0.5f;
        if (kind == K_TIE_LOW || kind == K_TIE_HIGH) {
            float mx = d[0];
            for (int j = 1; j < V; j++) mx = d[j] > mx ? d[j] : mx;
            for (int t = 0; t < 4; t++) d[ties[t]] = mx + 1.0f;
        }
        for (int j = 0; j < V; j++) {
            switch (kind) {
            case K_NEAR: s[j] = d[j] + 1e-3f * normal(); break;
            case K_APART: s[j] = d[j] + 0.3f * normal(); break;
            case K_INDEP: s[j] = 3.0f * normal(); break;
            case K_SHIFT: s[j] = d[j] + 1000.0f; break;
            default: s[j] = d[j];  // K_EQUAL, K_CONST, and the tie rows before their sparse maximum
            }
        }
        if (kind == K_TIE_LOW) s[3] += 1.0f;       // sparse argmax 3 = dense argmax: top1 1
        if (kind == K_TIE_HIGH) s[V - 1] += 1.0f;  // sparse argmax V − 1: top1 0
    }
    next_token_stats_cpu(nd, ns, kl, top1, ld, ls, next, rows, V);
    next_token_stats_cpu(nd_only, NULL, NULL, NULL, ld, NULL, next, rows, V);

    float *d_ld = dev_from(ld, n), *d_ls = dev_from(ls, n);
    int32_t *d_next = dev_from_i32(next, rows);
    double *g_nd = dev_doubles(rows), *g_ns = dev_doubles(rows), *g_kl = dev_doubles(rows);
    int32_t *g_top1 = cuda_malloc(sizeof(int32_t) * (size_t)rows);
    cuda_memset(g_top1, 0xFF, sizeof(int32_t) * (size_t)rows);
    next_token_stats_cuda(g_nd, g_ns, g_kl, g_top1, d_ld, d_ls, d_next, rows, V);
    double *h_nd = host_doubles(g_nd, rows), *h_ns = host_doubles(g_ns, rows), *h_kl = host_doubles(g_kl, rows);
    int32_t *h_top1 = host_from_dev_i32(g_top1, rows);
    compare_d("score nll_d", shape, h_nd, nd, rows);
    compare_d("score nll_s", shape, h_ns, ns, rows);
    compare_d("score kl", shape, h_kl, kl, rows);
    compare_top1("score top1", shape, h_top1, top1, rows);

    // What the rows were built to show, on both twins.
    int zero_bad = 0, tie_bad = 0;
    for (int r = 0; r < rows; r++) {
        const int kind = r % K_KINDS;
        if (kind == K_EQUAL || kind == K_CONST)
            zero_bad += kl[r] != 0 || h_kl[r] != 0 || top1[r] != 1 || h_top1[r] != 1;
        if (kind == K_TIE_LOW) tie_bad += top1[r] != 1 || h_top1[r] != 1;
        if (kind == K_TIE_HIGH) tie_bad += top1[r] != 0 || h_top1[r] != 0;
    }
    char detail[160];
    snprintf(detail, sizeof detail, "%d equal rows with KL != 0 or top1 != 1 (either twin)", zero_bad);
    record("score row kinds", shape, zero_bad == 0, detail);
    snprintf(detail, sizeof detail, "%d tie rows where the lowest index did not win (either twin)", tie_bad);
    record("score row kinds", shape, tie_bad == 0, detail);
    free(h_nd), free(h_ns), free(h_kl);

    // Dense only: ls = NULL, the other outputs NULL.
    cuda_memset(g_nd, 0xFF, sizeof(double) * (size_t)rows);
    next_token_stats_cuda(g_nd, NULL, NULL, NULL, d_ld, NULL, d_next, rows, V);
    h_nd = host_doubles(g_nd, rows);
    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " dense only");
    compare_d("score nll_d", shape, h_nd, nd_only, rows);
    free(h_nd);

    cuda_free(d_ld), cuda_free(d_ls), cuda_free(d_next);
    cuda_free(g_nd), cuda_free(g_ns), cuda_free(g_kl), cuda_free(g_top1);
    free(ld), free(ls), free(next), free(top1), free(nd), free(ns), free(kl), free(nd_only), free(h_top1);
}

// A value of k/den, k uniform in [−lim, lim].
static float quantum(int lim, float den) { return (float)((int)(twins_u64() % (uint64_t)(2 * lim + 1)) - lim) / den; }

static void check_backbone_score(int rows, int V) {
    const int H = 64;
    char shape[96];
    snprintf(shape, sizeof shape, "rows=%d V=%d H=%d", rows, V, H);
    float *w = host_alloc((int64_t)V * H), *norm = host_alloc(H);
    float *hd = host_alloc((int64_t)rows * H), *hs = host_alloc((int64_t)rows * H);
    for (int64_t i = 0; i < (int64_t)V * H; i++) w[i] = quantum(1, 8.0f);
    for (int c = 0; c < H; c++) norm[c] = 1.0f;
    for (int64_t i = 0; i < (int64_t)rows * H; i++) hd[i] = quantum(8, 4.0f);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < H; c++) {  // every 4th row equal; else a few quarter steps apart (within [−2, 2])
            const int64_t i = (int64_t)r * H + c;
            float v = hd[i] + (r % 4 ? quantum(r % 4, 4.0f) : 0.0f);
            hs[i] = v > 2.0f ? 2.0f : v < -2.0f ? -2.0f : v;
        }
    int32_t *next = malloc(sizeof(int32_t) * (size_t)rows);
    if (!next) abort();
    for (int r = 0; r < rows; r++) next[r] = (int32_t)(twins_u64() % (uint64_t)V);

    // A model of the lm_head alone (no layers): all backbone_score reads.
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg.hidden = H, m.cfg.vocab = V, m.cfg.rms_eps = 1e-6, m.cfg.tie_embeddings = 1;
    m.embed = m.lm_head = w, m.final_norm = norm;

    // Per backbone (0: CPU, 1: GPU fp32, 2: GPU bf16): nll_d, nll_s, kl, top1
    // of the paired call, nll_d of the dense-only call.
    double *out[3][4];
    int32_t *t1[3];
    for (int b = 0; b < 3; b++) {
        for (int k = 0; k < 4; k++) {
            out[b][k] = malloc(sizeof(double) * (size_t)rows);
            if (!out[b][k]) abort();
        }
        t1[b] = malloc(sizeof(int32_t) * (size_t)rows);
        if (!t1[b]) abort();
    }
    for (int b = 0; b < 3; b++) {
        Backbone bb;
        Status st = {0};
        if (backbone_open(&bb, &m, b > 0, b == 2 ? FWD_BF16 : FWD_FP32, &st)) {
            record("backbone_score", shape, 0, st.msg);
            goto done;
        }
        backbone_score(&bb, hd, hs, rows, next, out[b][0], out[b][1], out[b][2], t1[b]);
        backbone_score(&bb, hd, NULL, rows, next, out[b][3], NULL, NULL, NULL);
        backbone_close(&bb);
    }
    compare_d("backbone_score nll_d", shape, out[1][0], out[0][0], rows);
    compare_d("backbone_score nll_s", shape, out[1][1], out[0][1], rows);
    compare_d("backbone_score kl", shape, out[1][2], out[0][2], rows);
    compare_top1("backbone_score top1", shape, t1[1], t1[0], rows);
    char shape1[128];
    snprintf(shape1, sizeof shape1, "%s dense only", shape);
    compare_d("backbone_score nll_d", shape1, out[1][3], out[0][3], rows);
    int same = !memcmp(t1[1], t1[2], sizeof(int32_t) * (size_t)rows);
    for (int k = 0; k < 4; k++) same &= !memcmp(out[1][k], out[2][k], sizeof(double) * (size_t)rows);
    record("backbone_score bf16", shape, same, same ? "bit-identical to fp32" : "differs from fp32");
done:
    for (int b = 0; b < 3; b++) {
        for (int k = 0; k < 4; k++) free(out[b][k]);
        free(t1[b]);
    }
    free(w), free(norm), free(hd), free(hs), free(next);
}

void twins_score(int quick) {
    printf("-- next-token scoring (kernels/cuda/score.cu, fwd_cuda_score)\n");
    const int rows = quick ? 40 : 300;
    check_stats(rows, 1000);
    check_stats(rows, 49152);
    check_backbone_score(quick ? 130 : 300, 1000);
    check_backbone_score(quick ? 130 : 1100, 49152);
}
