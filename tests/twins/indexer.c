// indexer.c: twin checks of the indexer on the GPU (kernels/indexer_cuda.h)
// against the CPU twin (kernels/indexer_ops.h, kernels/cpu/indexer.c, train/adamw.c).
//
// Inputs: x ~ N(0, 1); parameters from indexer_init with the norm's gain and
// bias perturbed (so their gradients are not trivially those of g = 1, b = 0);
// a teacher q, k ~ N(0, 1.5²) (s·q·k has sd ≈ 2.3, so P is peaked, with many
// keys near 0 and many P = 0 terms after underflow at long rows) and its
// log-sum-exp from attention_forward_cpu. Query sets: every position, and a
// seeded sparse subset (each position with probability 0.3).
//
// Checks and tolerances (derivation: both twins are fp32 and differ only in
// summation order and in exp/log rounding; the GPU's expf is ≤ 2 ulp, the
// CPU's fast_expf ≤ 1.5 ulp, so each P, Q carries a relative error ≈ 1e-6):
//   loss: |gpu − cpu| ≤ 1e-5·|cpu| + 1e-6 (the loss is a double sum of
//     float terms of relative error ~1e-6; the absolute floor covers T = 1,
//     where the loss is 0 and both twins return rounding noise ~1e-7). The
//     loss without gradients must equal it to the same tolerance.
//   gradients, one compare per tensor (wq, wk, k_norm, k_norm_bias):
//     nmse ≤ 1e-9. G = (Q − P)/|𝒯| has an absolute error ≈ 1e-6·max(P, Q);
//     with an untrained indexer Q is far from P, so G's nmse is ≈ 1e-12, and
//     the sums that follow (over ≤ 1000 keys/queries, then through the norm
//     and the GEMMs) keep that order: 1e-9 leaves 1000×, while a wrong index,
//     mask, sign or missed tile gives nmse ≥ 1e-3. The nmse is relative to the
//     larger of Σ g_ref² and Σ g_nat², g_nat being the same gradient with every
//     position as a query: the rounding error of both twins is proportional to
//     the terms they sum (per query, (Q − P)/|𝒯| times the indexer's q, k, x),
//     not to their sum, and a sparse query set can make that sum cancel to
//     rounding level — e.g. 𝒯 = {0}, where P = Q = 1 and the gradient is 0 in
//     exact arithmetic (on the H200, seed 1796113199 draws T = 7 with |𝒯| = 1 and a loss of ~1e-7:
//     max|err| 1.7e-7, nmse 2.25 against the bare reference, 1.5e-12 against
//     the natural size). A real defect (wrong index,
//     mask, sign) is as large as the terms themselves and still fails. For a
//     dense query set g_nat is g_ref, so nothing changes there. With T = 1 the gradient is
//     exactly 0 in exact arithmetic (P = Q = 1), so only max|g| ≤ 1e-5 is
//     asked. Calling the GPU loss a second time into the same buffer must give
//     2·gradient (parameter gradients accumulate).
//   block objectives (block, mix: indexer_objective_loss_*): the loss, both
//     parts and the gradients with the loss's and the gradients' tolerances
//     above (see check_objective);
//   recall: per query, nmse ≤ 1e-9 and max|err| ≤ 1e-4 (float sums of
//     Hq·k exps); the mean, relative 1e-5. A near tie at the top-k boundary
//     (the twins' scores differ by ~1e-7 relative: GEMM summation order) can
//     swap one key, and did on the H200 (2026-11-29: one row of 1000, recall
//     off by 2.2e-3). So rows whose k-th and (k+1)-th CPU scores are within
//     1e-5·(1 + |score|) are left out of the per-row comparison (the count is
//     printed) and their differences are added to the mean's allowance.
//   select: each GPU row must be a valid top-k of the reference values (the CPU
//     twin's scores, indexer_forward_cpu; for b_sel > 1 A_B computed in double
//     from them): n_sel = min(len, k), ascending, distinct, in range, −1
//     padded, and no selected key below the k-th largest value minus a tie
//     tolerance of 1e-5·(1 + |value|). Rows that differ from the CPU twin's
//     selection are counted and printed (expected 0; ties make a few legal).
//   fused per-query selection (indexer_select_fused_bf16_cuda): on bf16-rounded
//     q, k against the top k of the scores in double, the reference's set
//     exactly except at near ties within the fp32 sums' error bound (see
//     check_select_fused); through indexer_select_cuda (SPINDLE_FUSED_SELECT=1)
//     by check_select's bf16 rule.
//   the block-shared selection overlapped with the sparse attention
//     (indexer_select_blocks_overlap_cuda, chunks on side streams): its
//     selection and bf16 attention output equal the sequential path's bit for
//     bit, for 1, 3 and more chunks than blocks, from block 0 and from a later
//     block on (check_select_overlap).
//   AdamW: parameters, m and v within 1 ulp of the CPU twin (the kernel repeats
//     its operations with explicit rounding, so 0 ulp is expected: the count of
//     inexact values is printed). grad_clip: the norm relative 1e-12 (double
//     sums in another order), clipped gradients nmse ≤ 1e-13 (the scale may
//     differ in its last bit).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adamw.h"
#include "indexer.h"
#include "indexer_cuda.h"
#include "indexer_ops.h"
#include "ops.h"
#include "ops_cuda.h"
#include "oracle_cuda.h"
#include "twins.h"

#define GRAD_NMSE 1e-9
#define GRAD_MAX 1e-4
#define LOSS_REL 1e-5
#define LOSS_ABS 1e-6

// One indexer + teacher setup.
typedef struct {
    int T, Hq, Hkv, dh, dm, dI, d_rope, sparse;
    IndexerNorm norm;
} Case;

static const char *norm_name(IndexerNorm n) { return n == INDEXER_NORM_NONE ? "none" : n == INDEXER_NORM_RMS ? "rms" : "ln"; }

typedef struct {
    IndexerConfig cfg;
    float *params, *x, *tq, *tk, *tlse;  // host
    float *d_params, *d_x, *d_tq, *d_tk, *d_tlse;
    int *queries, nq;
    int32_t *d_queries;
    int64_t n_params;
    float scale;
    char shape[128];
} Setup;

static Setup setup_build(const Case *c) {
    Setup s;
    memset(&s, 0, sizeof s);
    s.cfg = indexer_config_default(c->dm);
    s.cfg.d_index = c->dI, s.cfg.d_rope = c->d_rope, s.cfg.key_norm = c->norm;
    s.n_params = indexer_n_params(&s.cfg);
    s.params = host_alloc(s.n_params);
    indexer_init(&s.cfg, s.params, twins_u64());
    const IndexerLayout L = indexer_layout(&s.cfg);
    for (int i = 0; L.k_norm >= 0 && i < c->dI; i++) s.params[L.k_norm + i] = 1.0f + 0.2f * normal();
    for (int i = 0; L.k_norm_bias >= 0 && i < c->dI; i++) s.params[L.k_norm_bias + i] = 0.2f * normal();
    const int T = c->T;
    s.x = randn((int64_t)T * c->dm, 1.0f);
    s.tq = randn((int64_t)T * c->Hq * c->dh, 1.5f);
    s.tk = randn((int64_t)T * c->Hkv * c->dh, 1.5f);
    s.tlse = host_alloc((int64_t)c->Hq * T);
    s.scale = 1.0f / sqrtf((float)c->dh);
    float *scratch = host_alloc((int64_t)T * c->Hq * c->dh);
    attention_forward_cpu(scratch, s.tlse, s.tq, s.tk, s.tk, T, c->Hq, c->Hkv, c->dh, s.scale, 0);
    free(scratch);
    s.queries = malloc(sizeof(int) * T);
    for (int t = 0; t < T; t++)
        if (!c->sparse || uniform01() < 0.3 || (s.nq == 0 && t == T - 1)) s.queries[s.nq++] = t;
    s.d_params = dev_from(s.params, s.n_params);
    s.d_x = dev_from(s.x, (int64_t)T * c->dm);
    s.d_tq = dev_from(s.tq, (int64_t)T * c->Hq * c->dh);
    s.d_tk = dev_from(s.tk, (int64_t)T * c->Hkv * c->dh);
    s.d_tlse = dev_from(s.tlse, (int64_t)c->Hq * T);
    s.d_queries = dev_from_i32(s.queries, s.nq);
    snprintf(s.shape, sizeof s.shape, "T=%d %d/%d dh=%d dm=%d dI=%d rope=%d %s %s", T, c->Hq, c->Hkv, c->dh, c->dm,
             c->dI, c->d_rope, norm_name(c->norm), c->sparse ? "sparse" : "all");
    return s;
}

static void setup_free(Setup *s) {
    free(s->params), free(s->x), free(s->tq), free(s->tk), free(s->tlse), free(s->queries);
    cuda_free(s->d_params), cuda_free(s->d_x), cuda_free(s->d_tq), cuda_free(s->d_tk), cuda_free(s->d_tlse);
    cuda_free(s->d_queries);
}

static int loss_close(double gpu, double cpu) { return fabs(gpu - cpu) <= LOSS_REL * fabs(cpu) + LOSS_ABS; }

// ---- the loss and its gradients --------------------------------------------------------

// The op name of a parameter tensor's gradient (a literal: the summary keeps the pointer).
static const char *grad_op(const char *tensor) {
    if (strcmp(tensor, "wq") == 0) return "indexer grad wq";
    if (strcmp(tensor, "wk") == 0) return "indexer grad wk";
    if (strcmp(tensor, "k_norm") == 0) return "indexer grad k_norm";
    if (strcmp(tensor, "k_norm_bias") == 0) return "indexer grad k_norm_bias";
    return "indexer grad ww";
}

// bf16_teacher = 1: the teacher's q, k are rounded to bf16 first (for both
// twins), and the GPU rebuilds P on tensor cores from them: products of bf16
// values are exact in fp32, so the same tolerances hold; the loss and all the
// gradients are checked as two ops of their own.
static void check_loss(const Case *c, int bf16_teacher) {
    Setup s = setup_build(c);
    const int T = c->T;
    if (bf16_teacher) {
        const int64_t nq_t = (int64_t)T * c->Hq * c->dh, nk_t = (int64_t)T * c->Hkv * c->dh;
        for (int64_t i = 0; i < nq_t; i++) s.tq[i] = bf16_round(s.tq[i]);
        for (int64_t i = 0; i < nk_t; i++) s.tk[i] = bf16_round(s.tk[i]);
        cuda_free(s.d_tq), cuda_free(s.d_tk);
        s.d_tq = dev_from(s.tq, nq_t), s.d_tk = dev_from(s.tk, nk_t);
    }
    float *g_cpu = calloc((size_t)s.n_params, sizeof(float));
    const double l_cpu = indexer_kl_loss_cpu(g_cpu, &s.cfg, s.params, s.x, s.tq, s.tk, s.tlse, T, c->Hq, c->Hkv,
                                             c->dh, s.scale, s.queries, s.nq);
    float *d_g = dev_poisoned(s.n_params);
    cuda_memset(d_g, 0, sizeof(float) * s.n_params);
    const double l_gpu = indexer_kl_loss_cuda(d_g, &s.cfg, s.d_params, s.d_x, s.d_tq, s.d_tk, s.d_tlse, T, c->Hq,
                                              c->Hkv, c->dh, s.scale, s.d_queries, s.nq, bf16_teacher);
    // The gradient's natural size: the same gradient with every position as a
    // query (for a dense query set, the reference itself). See the header.
    float *g_nat = g_cpu;
    if (s.nq < T) {
        int *all = malloc(sizeof(int) * T);
        for (int t = 0; t < T; t++) all[t] = t;
        g_nat = calloc((size_t)s.n_params, sizeof(float));
        indexer_kl_loss_cpu(g_nat, &s.cfg, s.params, s.x, s.tq, s.tk, s.tlse, T, c->Hq, c->Hkv, c->dh, s.scale, all,
                            T);
        free(all);
    }
    char detail[160];
    const double tol_nmse = T == 1 ? INFINITY : GRAD_NMSE, tol_max = T == 1 ? 1e-5 : GRAD_MAX;
    if (bf16_teacher) {
        snprintf(detail, sizeof detail, "gpu %.9g cpu %.9g (|𝒯| = %d)", l_gpu, l_cpu, s.nq);
        record("indexer kl loss (bf16 teacher)", s.shape, loss_close(l_gpu, l_cpu), detail);
        float *got = host_from_dev(d_g, s.n_params);
        compare_floor("indexer grads (bf16 teacher)", s.shape, got, g_cpu, s.n_params, tol_nmse, tol_max,
                      sum_sq(g_nat, s.n_params));
        if (g_nat != g_cpu) free(g_nat);
        free(got), free(g_cpu);
        cuda_free(d_g);
        setup_free(&s);
        return;
    }
    const double l_only = indexer_kl_loss_cuda(NULL, &s.cfg, s.d_params, s.d_x, s.d_tq, s.d_tk, s.d_tlse, T, c->Hq,
                                               c->Hkv, c->dh, s.scale, s.d_queries, s.nq, 0);
    snprintf(detail, sizeof detail, "gpu %.9g cpu %.9g (|𝒯| = %d)", l_gpu, l_cpu, s.nq);
    record("indexer kl loss", s.shape, loss_close(l_gpu, l_cpu), detail);
    snprintf(detail, sizeof detail, "loss only %.9g vs with grads %.9g", l_only, l_gpu);
    record("indexer kl loss (no grads)", s.shape, loss_close(l_only, l_gpu), detail);

    // Per tensor; then a second call must double every gradient (+=).
    IndexerTensor ts[INDEXER_MAX_TENSORS];
    const int nt = indexer_param_tensors(ts, &s.cfg);
    float *got = host_from_dev(d_g, s.n_params);
    for (int a = 0; a < nt; a++) {
        const int64_t n = ts[a].ndim == 2 ? ts[a].shape[0] * ts[a].shape[1] : ts[a].shape[0];
        compare_floor(grad_op(ts[a].name), s.shape, got + ts[a].offset, g_cpu + ts[a].offset, n, tol_nmse, tol_max,
                      sum_sq(g_nat + ts[a].offset, n));
    }
    free(got);
    indexer_kl_loss_cuda(d_g, &s.cfg, s.d_params, s.d_x, s.d_tq, s.d_tk, s.d_tlse, T, c->Hq, c->Hkv, c->dh, s.scale,
                         s.d_queries, s.nq, 0);
    got = host_from_dev(d_g, s.n_params);
    const double nat_sq = sum_sq(g_nat, s.n_params);  // before the doubling: g_nat may be g_cpu
    for (int64_t i = 0; i < s.n_params; i++) g_cpu[i] *= 2.0f;
    compare_floor("indexer grad accumulate (2x)", s.shape, got, g_cpu, s.n_params, tol_nmse, tol_max,
                  4.0 * nat_sq);
    if (g_nat != g_cpu) free(g_nat);
    free(got), free(g_cpu);
    cuda_free(d_g);
    setup_free(&s);
}

// ---- the block-aware objectives (block, mix) ----------------------------------------------

// indexer_objective_loss_cuda against indexer_objective_loss_cpu: the loss and
// both parts (the loss tolerance of check_loss), the loss without gradients,
// the gradients of every parameter (nmse against the natural size: the same
// objective with every position as a query), the same bits on a second run,
// and their accumulation (+=). The
// block term's G = Q·(c_t − ρ_B)/(n_B·|ℬ|) carries the relative rounding of
// the column sums Ā, Q̄ (summed in another order: ~1e-6), the same order as
// (Q − P), so check_loss's tolerances hold. bf16_teacher as check_loss.
static void check_objective(const Case *c, IndexerObjectiveKind kind, int bsel, int bf16_teacher) {
    Setup s = setup_build(c);
    const int T = c->T;
    if (bf16_teacher) {
        const int64_t nq_t = (int64_t)T * c->Hq * c->dh, nk_t = (int64_t)T * c->Hkv * c->dh;
        for (int64_t i = 0; i < nq_t; i++) s.tq[i] = bf16_round(s.tq[i]);
        for (int64_t i = 0; i < nk_t; i++) s.tk[i] = bf16_round(s.tk[i]);
        cuda_free(s.d_tq), cuda_free(s.d_tk);
        s.d_tq = dev_from(s.tq, nq_t), s.d_tk = dev_from(s.tk, nk_t);
    }
    const IndexerObjective o = {kind, bsel, 0.5};
    const int mix = kind == INDEXER_OBJ_MIX;
    char shape[192];
    snprintf(shape, sizeof shape, "%s %s bsel=%d%s", s.shape, mix ? "mix(0.5)" : "block", bsel,
             bf16_teacher ? " bf16 teacher" : "");
    double pc[2], pg[2], pn[2];
    float *g_cpu = calloc((size_t)s.n_params, sizeof(float));
    const double l_cpu = indexer_objective_loss_cpu(g_cpu, pc, &s.cfg, &o, s.params, s.x, s.tq, s.tk, s.tlse, T, c->Hq,
                                                    c->Hkv, c->dh, s.scale, s.queries, s.nq);
    float *d_g = dev_poisoned(s.n_params);
    cuda_memset(d_g, 0, sizeof(float) * s.n_params);
    const double l_gpu = indexer_objective_loss_cuda(d_g, pg, &s.cfg, &o, s.d_params, s.d_x, s.d_tq, s.d_tk, s.d_tlse,
                                                     T, c->Hq, c->Hkv, c->dh, s.scale, s.d_queries, s.nq, bf16_teacher);
    const double l_only = indexer_objective_loss_cuda(NULL, pn, &s.cfg, &o, s.d_params, s.d_x, s.d_tq, s.d_tk,
                                                      s.d_tlse, T, c->Hq, c->Hkv, c->dh, s.scale, s.d_queries, s.nq,
                                                      bf16_teacher);
    float *g_nat = g_cpu;
    if (s.nq < T) {
        int *all = malloc(sizeof(int) * T);
        for (int t = 0; t < T; t++) all[t] = t;
        g_nat = calloc((size_t)s.n_params, sizeof(float));
        indexer_objective_loss_cpu(g_nat, NULL, &s.cfg, &o, s.params, s.x, s.tq, s.tk, s.tlse, T, c->Hq, c->Hkv, c->dh,
                                   s.scale, all, T);
        free(all);
    }
    char detail[256];
    snprintf(detail, sizeof detail, "gpu %.9g (%.9g, %.9g) cpu %.9g (%.9g, %.9g); loss only %.9g (|𝒯| = %d)", l_gpu,
             pg[0], pg[1], l_cpu, pc[0], pc[1], l_only, s.nq);
    const int ok = loss_close(l_gpu, l_cpu) && loss_close(pg[0], pc[0]) && loss_close(pg[1], pc[1]) &&
                   loss_close(l_only, l_gpu) && loss_close(pn[1], pg[1]);
    record(mix ? "indexer objective mix: loss, parts" : "indexer objective block: loss, parts", shape, ok, detail);
    const double tol_nmse = T == 1 ? INFINITY : GRAD_NMSE, tol_max = T == 1 ? 1e-5 : GRAD_MAX;
    float *got = host_from_dev(d_g, s.n_params);
    compare_floor(mix ? "indexer objective mix: grads" : "indexer objective block: grads", shape, got, g_cpu,
                  s.n_params, tol_nmse, tol_max, sum_sq(g_nat, s.n_params));
    {  // no float atomics: a second run gives the same loss and gradient bits
        float *d_g2 = dev_poisoned(s.n_params);
        cuda_memset(d_g2, 0, sizeof(float) * s.n_params);
        double p2[2];
        const double l2 = indexer_objective_loss_cuda(d_g2, p2, &s.cfg, &o, s.d_params, s.d_x, s.d_tq, s.d_tk,
                                                      s.d_tlse, T, c->Hq, c->Hkv, c->dh, s.scale, s.d_queries, s.nq,
                                                      bf16_teacher);
        float *got2 = host_from_dev(d_g2, s.n_params);
        const int same = l2 == l_gpu && p2[0] == pg[0] && p2[1] == pg[1] &&
                         !memcmp(got2, got, sizeof(float) * (size_t)s.n_params);
        record("indexer objective: a second run, the same bits", shape, same, same ? "loss, parts and gradients equal"
                                                                                  : "they differ");
        free(got2);
        cuda_free(d_g2);
    }
    free(got);
    indexer_objective_loss_cuda(d_g, NULL, &s.cfg, &o, s.d_params, s.d_x, s.d_tq, s.d_tk, s.d_tlse, T, c->Hq, c->Hkv,
                                c->dh, s.scale, s.d_queries, s.nq, bf16_teacher);
    got = host_from_dev(d_g, s.n_params);
    const double nat_sq = sum_sq(g_nat, s.n_params);
    for (int64_t i = 0; i < s.n_params; i++) g_cpu[i] *= 2.0f;
    compare_floor("indexer objective grad accumulate (2x)", shape, got, g_cpu, s.n_params, tol_nmse, tol_max,
                  4.0 * nat_sq);
    if (g_nat != g_cpu) free(g_nat);
    free(got), free(g_cpu);
    cuda_free(d_g);
    setup_free(&s);
}

// ---- recall -------------------------------------------------------------------------------

static int cmp_desc_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void check_recall(const Case *c, int k) {
    Setup s = setup_build(c);
    char shape[200];
    float *r_cpu = host_alloc(s.nq);
    const double m_cpu = indexer_mass_recall_cpu(r_cpu, &s.cfg, s.params, s.x, s.tq, s.tk, s.tlse, c->T, c->Hq,
                                                 c->Hkv, c->dh, s.scale, s.queries, s.nq, k);
    float *d_r = dev_poisoned(s.nq);
    const double m_gpu = indexer_mass_recall_cuda(d_r, &s.cfg, s.d_params, s.d_x, s.d_tq, s.d_tk, s.d_tlse, c->T,
                                                  c->Hq, c->Hkv, c->dh, s.scale, s.d_queries, s.nq, k);
    float *got = host_from_dev(d_r, s.nq);
    // Rows whose k-th and (k+1)-th scores (the CPU twin's) are within the tie
    // tolerance may keep a different key on each twin: they are left out of
    // the per-row comparison, and their differences bound the mean's.
    float *score = host_alloc((int64_t)s.nq * c->T), *row = host_alloc(c->T);
    indexer_forward_cpu(score, NULL, &s.cfg, s.params, s.x, c->T, s.queries, s.nq);
    float *g_kept = host_alloc(s.nq), *c_kept = host_alloc(s.nq);
    int n_kept = 0, n_tie = 0;
    double tie_slack = 0;
    for (int r = 0; r < s.nq; r++) {
        const int len = s.queries[r] + 1;
        int tie = 0;
        if (len > k) {
            memcpy(row, score + (int64_t)r * c->T, sizeof(float) * len);
            qsort(row, len, sizeof(float), cmp_desc_f);
            tie = row[k - 1] - row[k] <= 1e-5f * (1.0f + fabsf(row[k - 1]));
        }
        if (tie) {
            n_tie++;
            tie_slack += fabs((double)got[r] - r_cpu[r]) / s.nq;
        } else
            g_kept[n_kept] = got[r], c_kept[n_kept++] = r_cpu[r];
    }
    snprintf(shape, sizeof shape, "%s k=%d (%d tie row%s left out)", s.shape, k, n_tie, n_tie == 1 ? "" : "s");
    compare("indexer mass recall", shape, g_kept, c_kept, n_kept, GRAD_NMSE, GRAD_MAX);
    char detail[160];
    snprintf(detail, sizeof detail, "mean gpu %.9g cpu %.9g (tie rows allow %.2g)", m_gpu, m_cpu, tie_slack);
    record("indexer mass recall (mean)", shape,
           fabs(m_gpu - m_cpu) <= LOSS_REL * fabs(m_cpu) + LOSS_ABS + tie_slack + 1e-12, detail);
    free(got), free(r_cpu), free(score), free(row), free(g_kept), free(c_kept);
    cuda_free(d_r);
    setup_free(&s);
}

// ---- select -------------------------------------------------------------------------------

static int cmp_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// Is (sel[0..k), n) a valid top-k of v[0..len): ascending, −1 padded, and no
// selected value below the k-th largest by more than tol·(1 + |k-th|)?
static int valid_topk(const int32_t *sel, int n, const double *v, int len, int k, double tol, double *tmp) {
    const int want = len < k ? len : k;
    if (n != want) return 0;
    for (int a = 0; a < k; a++) {
        if (a >= n) {
            if (sel[a] != -1) return 0;
            continue;
        }
        if (sel[a] < 0 || sel[a] >= len || (a > 0 && sel[a] <= sel[a - 1])) return 0;
    }
    if (n == len) return 1;
    memcpy(tmp, v, sizeof(double) * len);
    qsort(tmp, (size_t)len, sizeof(double), cmp_desc);
    const double kth = tmp[k - 1];
    for (int a = 0; a < n; a++)
        if (v[sel[a]] < kth - tol * (1.0 + fabs(kth))) return 0;
    return 1;
}

// The CPU twin's scores of every query against every key, and each query's lse (host, caller frees).
static void reference_scores(const Setup *s, int T, float **score, float **lse) {
    int *all = malloc(sizeof(int) * T);
    for (int t = 0; t < T; t++) all[t] = t;
    *score = host_alloc((int64_t)T * T), *lse = host_alloc(T);
    indexer_forward_cpu(*score, *lse, &s->cfg, s->params, s->x, T, all, T);
    free(all);
}

// The reduced-precision modes are judged by the same rule against the CPU
// twin's fp32 values, with a wider tolerance, and not compared row by row:
// TF32 (1e-2: it rounds q and k to 2⁻¹¹ relative, so a score s = c·Σ q_i k_i
// moves by up to ~2⁻¹⁰·c·Σ|q_i k_i|, a few 1e-3 on these inputs) and, for
// blocks, the fused bf16 block sums (5e-2: bf16 q, k move a score by up to
// ~2⁻⁸·c·Σ|q_i k_i|, ~1e-2 here, so P and A by ~1% relative; the kernel itself
// is checked tightly on bf16-rounded inputs by check_block_scores_bf16).
static void check_select(const Case *c, int k, int bsel, IndexerScores mode) {
    static const char *const suffix[] = {"", " tf32", " bf16"};
    static const double tol[] = {1e-5, 1e-2, 5e-2};
    static const char *const op_q[] = {"indexer select", "indexer select tf32", "indexer select bf16"};
    static const char *const op_b[] = {"indexer select (blocks)", "indexer select tf32 (blocks)",
                                       "indexer select bf16 (blocks)"};
    Setup s = setup_build(c);
    const int T = c->T, rows = (T + bsel - 1) / bsel;
    char shape[160];
    snprintf(shape, sizeof shape, "T=%d dm=%d dI=%d rope=%d %s k=%d bsel=%d%s", T, c->dm, c->dI, c->d_rope,
             norm_name(c->norm), k, bsel, suffix[mode]);
    int *sel_cpu = malloc(sizeof(int) * (size_t)rows * k), *n_cpu = malloc(sizeof(int) * rows);
    indexer_select_cpu(sel_cpu, n_cpu, &s.cfg, s.params, s.x, T, k, bsel);
    int32_t *d_sel = (int32_t *)dev_poisoned((int64_t)rows * k), *d_n = (int32_t *)dev_poisoned(rows);
    indexer_select_cuda(d_sel, d_n, &s.cfg, s.d_params, s.d_x, T, k, bsel, mode);
    int32_t *sel = host_from_dev_i32(d_sel, (int64_t)rows * k), *nsel = host_from_dev_i32(d_n, rows);

    // Reference values: the CPU twin's scores (and lse), A_B in double from them.
    float *score, *lse;
    reference_scores(&s, T, &score, &lse);
    double *v = malloc(sizeof(double) * T), *tmp = malloc(sizeof(double) * T);
    int bad = 0, differ = 0, first_bad = -1;
    for (int r = 0; r < rows; r++) {
        int len;
        if (bsel == 1) {
            len = r + 1;
            for (int j = 0; j < len; j++) v[j] = score[(int64_t)r * T + j];
        } else {
            const int tb = r * bsel, te = tb + bsel < T ? tb + bsel : T;
            len = te;
            for (int j = 0; j < len; j++) v[j] = 0.0;
            for (int t = tb; t < te; t++)
                for (int j = 0; j <= t; j++) v[j] += exp((double)score[(int64_t)t * T + j] - lse[t]);
        }
        if (!valid_topk(sel + (int64_t)r * k, nsel[r], v, len, k, tol[mode], tmp)) {
            bad++;
            if (first_bad < 0) first_bad = r;
        }
        if (nsel[r] != n_cpu[r] || memcmp(sel + (int64_t)r * k, sel_cpu + (int64_t)r * k, sizeof(int) * k) != 0)
            differ++;
    }
    char detail[160];
    snprintf(detail, sizeof detail, "%d of %d rows invalid (first %d); %d differ from the CPU twin", bad, rows,
             first_bad, differ);
    record(bsel == 1 ? op_q[mode] : op_b[mode], shape, bad == 0, detail);
    free(sel_cpu), free(n_cpu), free(sel), free(nsel), free(score), free(lse), free(v), free(tmp);
    cuda_free(d_sel), cuda_free(d_n);
    setup_free(&s);
}

// Two-stage supports: indexer_select_refined_cuda against indexer_select_refined_cpu, in fp32
// scores. A row that differs must still be a valid two-stage row by the CPU twin's values (A_B from
// its scores in double, then the query's scores), with the tolerance of fp32 summation order: its
// keys ≤ t, each an admissible candidate (A_B within tol of the cand-th value or above) whose score
// is within tol of the k-th best among the candidates that are certain (above the cand-th by more
// than tol), and as many keys as those rules allow.
static void check_select_refined(const Case *c, int k, int bsel, int cand) {
    Setup s = setup_build(c);
    const int T = c->T;
    const double tol = 1e-5;
    char shape[160];
    snprintf(shape, sizeof shape, "T=%d dm=%d dI=%d rope=%d %s k=%d bsel=%d cand=%d", T, c->dm, c->dI, c->d_rope,
             norm_name(c->norm), k, bsel, cand);
    int *sel_cpu = malloc(sizeof(int) * (size_t)T * k), *n_cpu = malloc(sizeof(int) * T);
    indexer_select_refined_cpu(sel_cpu, n_cpu, &s.cfg, s.params, s.x, T, k, bsel, cand);
    int32_t *d_sel = (int32_t *)dev_poisoned((int64_t)T * k), *d_n = (int32_t *)dev_poisoned(T);
    indexer_select_refined_cuda(d_sel, d_n, &s.cfg, s.d_params, s.d_x, T, k, bsel, cand, IX_SCORES_FP32);
    int32_t *sel = host_from_dev_i32(d_sel, (int64_t)T * k), *nsel = host_from_dev_i32(d_n, T);
    float *score, *lse;
    reference_scores(&s, T, &score, &lse);
    double *A = malloc(sizeof(double) * T), *tmp = malloc(sizeof(double) * T);
    int bad = 0, differ = 0, first_bad = -1;
    for (int b = 0; b * bsel < T; b++) {
        const int tb = b * bsel, te = tb + bsel < T ? tb + bsel : T;
        for (int j = 0; j < te; j++) A[j] = 0.0;
        for (int t = tb; t < te; t++)
            for (int j = 0; j <= t; j++) A[j] += exp((double)score[(int64_t)t * T + j] - lse[t]);
        memcpy(tmp, A, sizeof(double) * te);
        qsort(tmp, (size_t)te, sizeof(double), cmp_desc);
        const double athr = te > cand ? tmp[cand - 1] : -INFINITY, atol = tol * (1.0 + fabs(athr));
        for (int t = tb; t < te; t++) {
            const int same = nsel[t] == n_cpu[t] && !memcmp(sel + (int64_t)t * k, sel_cpu + (int64_t)t * k,
                                                            sizeof(int) * k);
            if (same) continue;
            differ++;
            // Certain and admissible candidates visible to t; the k-th best score among the certain.
            int n_sure = 0, n_adm = 0;
            for (int j = 0; j <= t; j++) {
                if (A[j] > athr + atol) tmp[n_sure++] = score[(int64_t)t * T + j];
                if (A[j] >= athr - atol) n_adm++;
            }
            qsort(tmp, (size_t)n_sure, sizeof(double), cmp_desc);
            const double sthr = n_sure >= k ? tmp[k - 1] : -INFINITY;
            int ok = nsel[t] >= (n_sure < k ? n_sure : k) && nsel[t] <= (n_adm < k ? n_adm : k);
            for (int a = 0; ok && a < k; a++) {
                const int j = sel[(int64_t)t * k + a];
                if (a >= nsel[t]) {
                    ok = j == -1;
                    continue;
                }
                ok = j >= 0 && j <= t && (a == 0 || j > sel[(int64_t)t * k + a - 1]) && A[j] >= athr - atol &&
                     score[(int64_t)t * T + j] >= sthr - tol * (1.0 + fabs(sthr));
            }
            if (!ok) {
                bad++;
                if (first_bad < 0) first_bad = t;
            }
        }
    }
    char detail[160];
    snprintf(detail, sizeof detail, "%d of %d rows invalid (first %d); %d differ from the CPU twin", bad, T, first_bad,
             differ);
    record("indexer select two-stage", shape, bad == 0, detail);
    free(sel_cpu), free(n_cpu), free(sel), free(nsel), free(score), free(lse), free(A), free(tmp);
    cuda_free(d_sel), cuda_free(d_n);
    setup_free(&s);
}

// ---- fused bf16 block sums -------------------------------------------------------------------

// indexer_block_scores_bf16_cuda against the same sums in double over the same
// bf16-rounded q, k (so the products agree exactly and only fp32 summation and
// exp2 differ: nmse 1e-9, max 1e-4 relative). Blocks b0 … b0 + nb − 1.
static const char *block_sums_op = "indexer block sums bf16";  // the warpgroup-MMA cases set their own
static void check_block_scores_bf16(int T, int dI, int bsel, int b0, int nb) {
    char shape[160];
    snprintf(shape, sizeof shape, "T=%d dI=%d bsel=%d blocks %d..%d", T, dI, bsel, b0, b0 + nb - 1);
    float *q = randn((int64_t)T * dI, 1.0f), *k = randn((int64_t)T * dI, 1.0f);
    for (int64_t i = 0; i < (int64_t)T * dI; i++) q[i] = bf16_round(q[i]), k[i] = bf16_round(k[i]);
    const float c_col = 1.0f / sqrtf((float)dI);
    float *ref = host_alloc((int64_t)nb * T);
    double *srow = malloc(sizeof(double) * T), *acc = malloc(sizeof(double) * T);
    for (int bi = 0; bi < nb; bi++) {
        const int t0 = (b0 + bi) * bsel, end = t0 + bsel < T ? t0 + bsel : T;
        for (int j = 0; j < T; j++) acc[j] = 0.0;
        for (int t = t0; t < end; t++) {
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j <= t; j++) {
                double d = 0.0;
                for (int i = 0; i < dI; i++) d += (double)q[(int64_t)t * dI + i] * k[(int64_t)j * dI + i];
                srow[j] = c_col * d;
                mx = srow[j] > mx ? srow[j] : mx;
            }
            for (int j = 0; j <= t; j++) sum += exp(srow[j] - mx);
            const double lse = mx + log(sum);
            for (int j = 0; j <= t; j++) acc[j] += exp(srow[j] - lse);
        }
        for (int j = 0; j < T; j++) ref[(int64_t)bi * T + j] = j < end ? (float)acc[j] : 0.0f;
    }
    float *d_q = dev_from(q, (int64_t)T * dI), *d_k = dev_from(k, (int64_t)T * dI);
    void *b_q = cuda_malloc(2 * (size_t)T * dI), *b_k = cuda_malloc(2 * (size_t)T * dI);
    cuda_f32_to_bf16(b_q, d_q, (int64_t)T * dI), cuda_f32_to_bf16(b_k, d_k, (int64_t)T * dI);
    float *d_A = dev_poisoned((int64_t)nb * T);
    const int rc = indexer_block_scores_bf16_cuda(d_A, T, b_q, b_k, T, dI, c_col, bsel, b0, nb);
    if (rc != 0) {
        record(block_sums_op, shape, 0, "returned -1 for a shape it should take");
    } else {
        float *A = host_from_dev(d_A, (int64_t)nb * T);
        for (int bi = 0; bi < nb; bi++) {  // past end(B) the kernel writes nothing: compare there as 0
            const int end = (b0 + bi + 1) * bsel < T ? (b0 + bi + 1) * bsel : T;
            for (int j = end; j < T; j++) A[(int64_t)bi * T + j] = 0.0f;
        }
        compare(block_sums_op, shape, A, ref, (int64_t)nb * T, 1e-9, 1e-4);
        free(A);
    }
    const int refused = indexer_block_scores_bf16_cuda(NULL, T, NULL, NULL, T, 96, c_col, 16, 0, 1) == -1 &&
                        indexer_block_scores_bf16_cuda(NULL, T, NULL, NULL, T, dI, c_col, 24, 0, 1) == -1 &&
                        indexer_block_scores_bf16_cuda(NULL, T, NULL, NULL, T, dI, c_col, 256, 0, 1) == -1;
    if (b0 == 0) record("indexer block sums bf16", "refuses d_I 96, bsel 24 / 256", refused, refused ? "-1" : "launched");
    cuda_free(d_q), cuda_free(d_k), cuda_free(b_q), cuda_free(b_k), cuda_free(d_A);
    free(q), free(k), free(ref), free(srow), free(acc);
}

// ---- fused per-query selection --------------------------------------------------------------

// indexer_select_fused_bf16_cuda against the top k of the scores in double over
// the same bf16-rounded q, k: the products agree exactly and only the fp32 sums
// differ, by at most tol = d_I·2⁻²³·c·Σ_i |q_{t,i}|·max |k|. A row must be the
// reference's set (ascending, −1 padded, n_sel = min(k, t + 1)) unless its k-th
// and next values lie within tol (either may be picked; every pick must then
// be within tol of the k-th). ints: q, k integers in −2 … 2, so every score is
// c times an exact integer: many ties, no tolerance, the tie rule exactly.
// The block-shared selection overlapped with the attention over its supports
// (indexer_select_blocks_overlap_cuda + support_attention_block_tc_range_cuda, what the bf16 forward
// runs for a block-shared indexer): sel, n_sel and the bf16 output must be the sequential path's
// (indexer_select_cuda, IX_SCORES_BF16, then support_attention_block_tc_cuda) bit for bit, for any
// number of chunks (one; several; more than there are blocks), from block 0 or from block b_first on
// (the rows of a TTFT pass's last layer; the earlier blocks' rows are not compared).
typedef struct {
    void *out;
    const void *q, *k, *v;
    const int32_t *sel, *n_sel;
    int T, Hq, Hkv, dh, topk, bsel, fails;
    float scale;
} OverlapArgs;

static void overlap_chunk(void *ctx, int b0, int nb) {
    OverlapArgs *o = ctx;
    o->fails += support_attention_block_tc_range_cuda(o->out, o->q, o->k, o->v, o->T, o->Hq, o->Hkv, o->dh, o->scale,
                                                      o->topk, o->bsel, o->sel, o->n_sel, DT_BF16, b0, nb) != 0;
}

static void check_select_overlap(const Case *c, int k, int bsel, int chunks, int b_first) {
    const char *op = "indexer select bf16 (blocks) overlapped with attention";
    char shape[160];
    snprintf(shape, sizeof shape, "T=%d Hq=%d Hkv=%d dh=%d dI=%d k=%d bsel=%d chunks=%d from block %d", c->T, c->Hq,
             c->Hkv, c->dh, c->dI, k, bsel, chunks, b_first);
    Setup s = setup_build(c);
    const int T = c->T, rows = (T + bsel - 1) / bsel;
    const int64_t nq = (int64_t)T * c->Hq * c->dh, nkv = (int64_t)T * c->Hkv * c->dh;
    float *hq = randn(nq, 1.0f), *hk = randn(nkv, 1.0f), *hv = randn(nkv, 1.0f);
    float *dq = dev_from(hq, nq), *dk = dev_from(hk, nkv), *dv = dev_from(hv, nkv);
    void *bq = cuda_malloc(2 * (size_t)nq), *bk = cuda_malloc(2 * (size_t)nkv), *bv = cuda_malloc(2 * (size_t)nkv);
    cuda_f32_to_bf16(bq, dq, nq), cuda_f32_to_bf16(bk, dk, nkv), cuda_f32_to_bf16(bv, dv, nkv);
    const float scale = 1.0f / sqrtf((float)c->dh);
    // Sequential.
    int32_t *sel1 = (int32_t *)dev_poisoned((int64_t)rows * k), *n1 = (int32_t *)dev_poisoned(rows);
    void *out1 = cuda_malloc(2 * (size_t)nq), *out2 = cuda_malloc(2 * (size_t)nq);
    cuda_memset(out1, 0xFF, 2 * (size_t)nq), cuda_memset(out2, 0xFF, 2 * (size_t)nq);
    indexer_select_cuda(sel1, n1, &s.cfg, s.d_params, s.d_x, T, k, bsel, IX_SCORES_BF16);
    support_attention_block_tc_cuda(out1, bq, bk, bv, T, c->Hq, c->Hkv, c->dh, scale, k, bsel, sel1, n1, DT_BF16, NULL);
    // Overlapped.
    int32_t *sel2 = (int32_t *)dev_poisoned((int64_t)rows * k), *n2 = (int32_t *)dev_poisoned(rows);
    OverlapArgs o = {out2, bq, bk, bv, sel2, n2, T, c->Hq, c->Hkv, c->dh, k, bsel, 0, scale};
    const int rc = indexer_select_blocks_overlap_cuda(sel2, n2, &s.cfg, s.d_params, s.d_x, T, k, bsel, b_first,
                                                      chunks, overlap_chunk, &o);
    cuda_sync();
    int32_t *hs1 = host_from_dev_i32(sel1, (int64_t)rows * k), *hs2 = host_from_dev_i32(sel2, (int64_t)rows * k);
    int32_t *hn1 = host_from_dev_i32(n1, rows), *hn2 = host_from_dev_i32(n2, rows);
    uint16_t *ho1 = malloc(2 * (size_t)nq), *ho2 = malloc(2 * (size_t)nq);
    if (!ho1 || !ho2) abort();
    cuda_to_host(ho1, out1, 2 * (size_t)nq), cuda_to_host(ho2, out2, 2 * (size_t)nq);
    int64_t sel_diff = 0, out_diff = 0;
    for (int64_t i = (int64_t)b_first * k; i < (int64_t)rows * k; i++) sel_diff += hs1[i] != hs2[i];
    for (int r = b_first; r < rows; r++) sel_diff += hn1[r] != hn2[r];
    for (int64_t i = (int64_t)b_first * bsel * c->Hq * c->dh; i < nq; i++) out_diff += ho1[i] != ho2[i];
    char detail[200];
    snprintf(detail, sizeof detail, "rc %d, %d chunk launches declined; %lld selection entries and %lld outputs differ",
             rc, o.fails, (long long)sel_diff, (long long)out_diff);
    record(op, shape, rc == 0 && o.fails == 0 && sel_diff == 0 && out_diff == 0, detail);
    free(hq), free(hk), free(hv), free(hs1), free(hs2), free(hn1), free(hn2), free(ho1), free(ho2);
    cuda_free(dq), cuda_free(dk), cuda_free(dv), cuda_free(bq), cuda_free(bk), cuda_free(bv);
    cuda_free(sel1), cuda_free(n1), cuda_free(sel2), cuda_free(n2), cuda_free(out1), cuda_free(out2);
    setup_free(&s);
}

static void check_select_fused(int T, int dI, int k, int ints) {
    char shape[160];
    snprintf(shape, sizeof shape, "T=%d dI=%d k=%d%s", T, dI, k, ints ? " ints" : "");
    float *q = randn((int64_t)T * dI, 1.0f), *kv = randn((int64_t)T * dI, 1.0f);
    for (int64_t i = 0; i < (int64_t)T * dI; i++) {
        q[i] = ints ? fminf(2.0f, fmaxf(-2.0f, rintf(q[i]))) + 0.0f : bf16_round(q[i]);
        kv[i] = ints ? fminf(2.0f, fmaxf(-2.0f, rintf(kv[i]))) + 0.0f : bf16_round(kv[i]);
    }
    const float c_col = 1.0f / sqrtf((float)dI);
    float *d_q = dev_from(q, (int64_t)T * dI), *d_k = dev_from(kv, (int64_t)T * dI);
    void *b_q = cuda_malloc(2 * (size_t)T * dI), *b_k = cuda_malloc(2 * (size_t)T * dI);
    cuda_f32_to_bf16(b_q, d_q, (int64_t)T * dI), cuda_f32_to_bf16(b_k, d_k, (int64_t)T * dI);
    int32_t *d_sel = (int32_t *)dev_poisoned((int64_t)T * k), *d_n = (int32_t *)dev_poisoned(T);
    const int rc = indexer_select_fused_bf16_cuda(d_sel, d_n, b_q, b_k, T, dI, c_col, k);
    if (rc != 0) {
        record("indexer select fused bf16", shape, 0, "returned -1 for a shape it should take");
    } else {
        int32_t *sel = host_from_dev_i32(d_sel, (int64_t)T * k), *nsel = host_from_dev_i32(d_n, T);
        double kmax = 0.0;
        for (int64_t i = 0; i < (int64_t)T * dI; i++) kmax = fabs(kv[i]) > kmax ? fabs(kv[i]) : kmax;
        double *v = malloc(sizeof(double) * T), *tmp = malloc(sizeof(double) * T);
        int bad = 0, tied = 0, first_bad = -1;
        for (int t = 0; t < T; t++) {
            const int len = t + 1, m = len < k ? len : k;
            double qabs = 0.0;
            for (int i = 0; i < dI; i++) qabs += fabs(q[(int64_t)t * dI + i]);
            for (int j = 0; j < len; j++) {
                double d = 0.0;
                for (int i = 0; i < dI; i++) d += (double)q[(int64_t)t * dI + i] * kv[(int64_t)j * dI + i];
                v[j] = c_col * d;
            }
            const double tol = ints ? 0.0 : dI * ldexp(1.0, -23) * c_col * qabs * kmax;
            const int32_t *got = sel + (int64_t)t * k;
            int ok = nsel[t] == m;
            for (int a = 0; ok && a < k; a++)
                ok = a < m ? got[a] >= 0 && got[a] < len && (a == 0 || got[a] > got[a - 1]) : got[a] == -1;
            if (ok && m < len) {
                memcpy(tmp, v, sizeof(double) * len);
                qsort(tmp, (size_t)len, sizeof(double), cmp_desc);
                const double kth = tmp[m - 1], next = tmp[m];
                // The reference set: every value above the k-th, then the lowest indices equal to it.
                int above = 0;
                for (int a = 0; a < m; a++) above += tmp[a] > kth;
                int exact = 1, n_eq = 0;
                for (int a = 0; a < m; a++) {
                    const double x = v[got[a]];
                    if (x == kth) n_eq++;
                    exact = exact && x >= kth;
                }
                if (exact) {  // the right values; ties at the k-th must be the lowest indices
                    int seen = 0;
                    for (int j = 0; j < len && seen < m - above; j++)
                        if (v[j] == kth) {
                            int found = 0;
                            for (int a = 0; a < m && !found; a++) found = got[a] == j;
                            exact = exact && found;
                            seen++;
                        }
                    exact = exact && n_eq == m - above;
                }
                if (!exact) {
                    ok = !ints && kth - next <= tol;  // a near tie at the k-th value
                    for (int a = 0; ok && a < m; a++) ok = v[got[a]] >= kth - tol;
                    tied += ok;
                }
            }
            if (!ok && first_bad < 0) first_bad = t;
            bad += !ok;
        }
        char detail[160];
        snprintf(detail, sizeof detail, "%d of %d rows wrong (first %d); %d near ties", bad, T, first_bad, tied);
        record("indexer select fused bf16", shape, bad == 0, detail);
        free(sel), free(nsel), free(v), free(tmp);
    }
    const int refused = indexer_select_fused_bf16_cuda(d_sel, d_n, b_q, b_k, T, 48, c_col, k) == -1 &&
                        indexer_select_fused_bf16_cuda(d_sel, d_n, b_q, b_k, T, 512, c_col, k) == -1;
    if (T == 1) record("indexer select fused bf16", "refuses d_I 48 / 512", refused, refused ? "-1" : "launched");
    cuda_free(d_q), cuda_free(d_k), cuda_free(b_q), cuda_free(b_k), cuda_free(d_sel), cuda_free(d_n);
    free(q), free(kv);
}

// ---- AdamW and grad clip -------------------------------------------------------------------

// Distance in ulps between two finite floats of the same sign region.
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4), memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return llabs((int64_t)ia - ib);
}

static void check_ulps(const char *op, const char *shape, const float *got, const float *ref, int64_t n) {
    int64_t worst = 0, inexact = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t u = isfinite(got[i]) ? ulps(got[i], ref[i]) : INT64_MAX;
        worst = u > worst ? u : worst;
        inexact += u != 0;
    }
    char detail[128];
    snprintf(detail, sizeof detail, "max %lld ulp, %lld of %lld inexact", (long long)worst, (long long)inexact,
             (long long)n);
    record(op, shape, worst <= 1, detail);
}

static void check_adamw(int64_t n, long t, int masked) {
    char shape[96];
    snprintf(shape, sizeof shape, "n=%lld t=%ld%s", (long long)n, t, masked ? " mask" : "");
    const AdamW opt = {1e-3, 0.9, 0.999, 1e-8, 0.1};
    float *p = randn(n, 0.05f), *g = randn(n, 0.01f), *m = randn(n, 0.001f), *v = randn(n, 1e-4f);
    for (int64_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    unsigned char *mask = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) mask[i] = (unsigned char)(twins_u64() & 1);
    float *d_p = dev_from(p, n), *d_g = dev_from(g, n), *d_m = dev_from(m, n), *d_v = dev_from(v, n);
    unsigned char *d_mask = cuda_malloc((size_t)n);
    cuda_to_device(d_mask, mask, (size_t)n);
    adamw_step(&opt, t, p, g, m, v, (size_t)n, masked ? mask : NULL);
    adamw_step_cuda(opt.lr, opt.beta1, opt.beta2, opt.eps, opt.weight_decay, t, d_p, d_g, d_m, d_v, (size_t)n,
                    masked ? d_mask : NULL);
    float *gp = host_from_dev(d_p, n), *gm = host_from_dev(d_m, n), *gv = host_from_dev(d_v, n);
    check_ulps("adamw params", shape, gp, p, n);
    check_ulps("adamw m", shape, gm, m, n);
    check_ulps("adamw v", shape, gv, v, n);
    free(p), free(g), free(m), free(v), free(mask), free(gp), free(gm), free(gv);
    cuda_free(d_p), cuda_free(d_g), cuda_free(d_m), cuda_free(d_v), cuda_free(d_mask);
}

static void check_grad_clip(int64_t n, double rel_max) {
    char shape[96];
    snprintf(shape, sizeof shape, "n=%lld max=%.2f·norm", (long long)n, rel_max);
    float *g = randn(n, 0.3f);
    float *d_g = dev_from(g, n);
    double norm0 = 0.0;
    for (int64_t i = 0; i < n; i++) norm0 += (double)g[i] * g[i];
    const double max_norm = rel_max * sqrt(norm0);
    const double n_cpu = grad_clip(g, (size_t)n, max_norm), n_gpu = grad_clip_cuda(d_g, (size_t)n, max_norm);
    char detail[128];
    snprintf(detail, sizeof detail, "norm gpu %.17g cpu %.17g", n_gpu, n_cpu);
    record("grad clip norm", shape, fabs(n_gpu - n_cpu) <= 1e-12 * n_cpu, detail);
    float *got = host_from_dev(d_g, n);
    compare("grad clip", shape, got, g, n, 1e-13, 1e-6);
    free(got), free(g);
    cuda_free(d_g);
}

// ---- the cases ---------------------------------------------------------------------------

void twins_indexer(int quick) {
    // T, Hq, Hkv, dh, d_model, d_I, d_rope, sparse, key norm
    const Case cases[] = {
        {1, 4, 4, 64, 77, 32, 16, 0, INDEXER_NORM_RMS},
        {7, 8, 1, 128, 576, 128, 64, 0, INDEXER_NORM_LAYER},
        {7, 4, 4, 64, 77, 32, 0, 1, INDEXER_NORM_NONE},
        {130, 8, 1, 64, 576, 128, 64, 0, INDEXER_NORM_LAYER},
        {130, 4, 4, 128, 77, 32, 0, 1, INDEXER_NORM_NONE},
        {130, 16, 2, 128, 576, 128, 16, 1, INDEXER_NORM_RMS},
        {1000, 16, 2, 128, 576, 128, 64, 0, INDEXER_NORM_LAYER},
        {1000, 8, 1, 64, 576, 128, 64, 1, INDEXER_NORM_LAYER},
        {1000, 4, 4, 64, 77, 32, 16, 0, INDEXER_NORM_RMS},
        // Gemma 3 270M's full-attention layers: 4 / 1 heads, d_h 256, d_model 640
        // (the fused loss's teacher tiles at dh 256, fp32 and bf16 tensor cores).
        {7, 4, 1, 256, 640, 128, 64, 0, INDEXER_NORM_RMS},
        {130, 4, 1, 256, 640, 128, 64, 0, INDEXER_NORM_RMS},
        {1000, 4, 1, 256, 640, 128, 64, 1, INDEXER_NORM_LAYER},
    };
    const int n_cases = (int)(sizeof cases / sizeof cases[0]);
    for (int a = 0; a < n_cases; a++) {
        const Case *c = &cases[a];
        if (quick && c->T > 130) continue;
        check_loss(c, 0);
        if (c->dh == 64 || c->dh == 128 || c->dh == 256) check_loss(c, 1);
        // The block objectives: blocks of 3 (several per query tile), 16 and 64
        // (several tiles per block at T = 1000 with every position a query).
        check_objective(c, INDEXER_OBJ_BLOCK, c->T >= 130 ? 64 : 3, 0);
        check_objective(c, INDEXER_OBJ_MIX, 16, 0);
        if (c->T >= 130 && (c->dh == 64 || c->dh == 128 || c->dh == 256)) check_objective(c, INDEXER_OBJ_MIX, 64, 1);
        check_recall(c, 16);
        if (c->T > 16) check_recall(c, 100);
        if (c->sparse) continue;  // select always covers every position
        for (int mode = IX_SCORES_FP32; mode <= IX_SCORES_TF32; mode++) {
            check_select(c, 8, 1, (IndexerScores)mode);
            check_select(c, 64, 1, (IndexerScores)mode);
            if (c->T > 1) {
                check_select(c, 8, 16, (IndexerScores)mode);
                check_select(c, 64, 7, (IndexerScores)mode);
            }
        }
        if (c->T > 1) {  // two-stage: candidates of 1–4× k, blocks of 16 / 64 / 7
            check_select_refined(c, 8, 16, 8);
            check_select_refined(c, 8, 16, 32);
            check_select_refined(c, 16, 64, 64);
            check_select_refined(c, 4, 7, 13);
        }
        if (c->T > 1 && (c->dI == 64 || c->dI == 128)) {  // the fused bf16 block sums (bsel 16, 64)
            check_select(c, 8, 16, IX_SCORES_BF16);
            check_select(c, 64, 64, IX_SCORES_BF16);
        }
        if (c->T > 1 && (c->dI == 64 || c->dI == 128) && (c->dh == 64 || c->dh == 128)) {
            const int rows16 = (c->T + 15) / 16;
            check_select_overlap(c, 8, 16, 1, 0);
            check_select_overlap(c, 64, 64, 3, 0);
            check_select_overlap(c, 16, 32, 1000, 0);  // more chunks than blocks: one block a chunk
            check_select_overlap(c, 8, 16, 2, rows16 / 2);  // the last blocks only
            check_select_overlap(c, 8, 16, 3, rows16 - 1);
        }
        // Per query, bf16, through the fused selection (SPINDLE_FUSED_SELECT=1): judged like the
        // block sums' bf16 mode against the CPU twin's fp32 scores.
        setenv("SPINDLE_FUSED_SELECT", "1", 1);
        check_select(c, 8, 1, IX_SCORES_BF16);
        check_select(c, 64, 1, IX_SCORES_BF16);
        unsetenv("SPINDLE_FUSED_SELECT");
    }
    // The fused per-query selection on bf16-rounded q, k: one row, rows shorter
    // than k, one and several thread blocks of rows (128; 64 at d_I 256),
    // candidate lists, refined histograms and ties resolved by value.
    check_select_fused(1, 128, 8, 0);
    check_select_fused(100, 64, 8, 0);
    check_select_fused(300, 128, 5, 1);
    check_select_fused(300, 32, 40, 0);
    check_select_fused(200, 64, 300, 0);  // k > T: every row takes every key
    check_select_fused(700, 256, 40, 0);
    check_select_fused(1000, 128, 64, 0);
    check_select_fused(1000, 64, 3, 1);
    check_select_fused(1000, 32, 600, 1);  // thresholds near 0 among hundreds of equal scores
    if (!quick) {
        check_select_fused(3000, 128, 256, 0);
        check_select_fused(5000, 128, 2048, 0);
        check_select_fused(3000, 64, 100, 1);
    }
    // Fused bf16 block sums: T = 1, one partial block, several key tiles,
    // a chunk that starts past block 0, bsel 16 / 64 / 128, d_I 64 / 128.
    check_block_scores_bf16(1, 128, 16, 0, 1);
    check_block_scores_bf16(7, 64, 16, 0, 1);
    check_block_scores_bf16(130, 128, 16, 0, 9);
    check_block_scores_bf16(130, 64, 64, 1, 2);
    check_block_scores_bf16(300, 128, 128, 0, 3);
    // Several query blocks per thread block (bsel ≤ 64), a last thread block
    // with fewer, and the query chunks of 48 and 32 rows.
    check_block_scores_bf16(200, 128, 48, 0, 5);
    check_block_scores_bf16(257, 128, 32, 2, 6);
    check_block_scores_bf16(300, 64, 96, 1, 2);
    check_block_scores_bf16(700, 64, 64, 0, 11);
    if (!quick) {
        check_block_scores_bf16(1000, 128, 64, 3, 12);
        check_block_scores_bf16(1000, 64, 16, 0, 63);
    }
    // The same sums on the warpgroup-MMA kernel (SPINDLE_SELECT_WGMMA=1, indexer_block_wg.cu) at b_sel 64,
    // after a check that it launches here (else the mma.sync kernel would be what the cases judge).
    {
        void *z = cuda_malloc(2 * 130 * 128);
        cuda_memset(z, 0, 2 * 130 * 128);
        float *d_A = dev_poisoned(3 * 130);
        const int rc = indexer_block_scores_wg_cuda(d_A, 130, z, z, 130, 128, 0.1f, 64, 0, 3);
        cuda_sync();
        record("indexer block sums wg", "launches here (d_I 128, bsel 64)", rc == 0,
               rc == 0 ? "launched" : "did not launch (not an sm_90 device?)");
        cuda_free(z), cuda_free(d_A);
        setenv("SPINDLE_SELECT_WGMMA", "1", 1);
        block_sums_op = "indexer block sums wg";
        check_block_scores_bf16(130, 64, 64, 1, 2);
        check_block_scores_bf16(700, 64, 64, 0, 11);
        check_block_scores_bf16(300, 128, 64, 0, 5);
        if (!quick) check_block_scores_bf16(1000, 128, 64, 3, 12);
        unsetenv("SPINDLE_SELECT_WGMMA");
        block_sums_op = "indexer block sums bf16";
    }
    check_adamw(10007, 1, 0);
    check_adamw(10007, 37, 1);
    if (!quick) check_adamw(3000017, 1000, 1);
    check_grad_clip(100003, 0.5);
    check_grad_clip(100003, 2.0);
    check_grad_clip(quick ? 1 : 5000011, 0.5);
}
