// eval.c: see eval.h. Per sequence: one dense forward, then one forward per
// sparse configuration; backbone_score compares the two position by position
// (logits in row chunks, on the GPU when the passes run there: never a
// [T, vocab] buffer per configuration).
#include "corpus.h"
#include "eval.h"
#include "export.h"
#include "progress.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

// Per-position samples of one configuration's metrics, in order of position.
enum { M_NLL, M_DNLL, M_KL, M_TOP1, M_RECALL, M_SPARSE, M_RECALL_S, M_SPARSE_S, M_COUNT };
typedef struct {
    double *v[M_COUNT];
    int64_t n[M_COUNT];
} Samples;

static Stat stat_of(const double *x, int64_t n) {
    Stat s = {0, 0};
    if (n == 0) return s;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    s.mean = sum / n;
    int64_t nb = n / EVAL_BATCH;
    if (nb < 2) return s;  // too few batches for an interval
    double m = 0, ss = 0;
    for (int64_t b = 0; b < nb; b++) {
        double bm = 0;
        for (int i = 0; i < EVAL_BATCH; i++) bm += x[b * EVAL_BATCH + i];
        bm /= EVAL_BATCH;
        double d = bm - m;
        m += d / (b + 1);
        ss += d * (bm - m);
    }
    s.ci95 = 1.96 * sqrt(ss / (nb - 1) / nb);
    return s;
}

// Configurations: 0 is dense, then the oracle at each (k, bsel, recent, sinks)
// with sinks varying fastest, then (with an indexer) the indexer at the same grid.
static int n_recent(const EvalOpts *o) { return o->recents && o->n_recent > 0 ? o->n_recent : 1; }
static int n_sinks(const EvalOpts *o) { return o->sinks && o->n_sinks > 0 ? o->n_sinks : 1; }
static int n_grid(const EvalOpts *o) { return o->n_k * o->n_bsel * n_recent(o) * n_sinks(o); }
static int n_configs(const EvalOpts *o) { return 1 + n_grid(o) * (o->indexer ? 2 : 1); }

static EvalMode mode_of(const EvalOpts *o, int c) {
    return c == 0 ? EVAL_DENSE : c <= n_grid(o) ? EVAL_ORACLE : EVAL_INDEXER;
}

static Sparsity config_of(const EvalOpts *o, int c) {
    Sparsity sp = {0, 0, 0, 0};
    if (c == 0) return sp;
    int g = (c - 1) % n_grid(o);
    const int ns = n_sinks(o), nr = n_recent(o);
    sp.sinks = o->sinks && o->n_sinks > 0 ? o->sinks[g % ns] : 0, g /= ns;
    sp.recent = o->recents && o->n_recent > 0 ? o->recents[g % nr] : 0, g /= nr;
    sp.bsel = o->bsels[g % o->n_bsel], g /= o->n_bsel;
    sp.topk = o->ks[g];
    if (mode_of(o, c) == EVAL_INDEXER && sp.bsel > 1) sp.refine = o->refine;
    if (sp.bsel == 1) sp.exec_block = o->exec_block;
    return sp;
}

// The full-attention layers of the model: the only ones the method acts at
// (docs/design.md, "Hybrid stacks"); the forward's SparseStats sum over them.
static int n_full_layers(const Model *m) { return config_full_layers(m->cfg.layer_kinds, m->cfg.n_layers, NULL); }

// The layers that run sparse in configuration c: none (dense), every
// full-attention layer (the oracle), the full-attention layers the indexer covers.
static int n_sparse_layers(const Model *m, const EvalOpts *o, int c) {
    const EvalMode mode = mode_of(o, c);
    if (mode == EVAL_DENSE) return 0;
    if (mode == EVAL_ORACLE) return n_full_layers(m);
    int n = 0;
    for (int l = 0; l < m->cfg.n_layers && l < o->indexer->n_model_layers; l++)
        n += o->indexer->params[l] != NULL && m->cfg.layer_kinds[l] == LAYER_FULL_ATTENTION;
    return n;
}

int eval_layer_k(int k, double w) {
    const long v = lround((double)k * w);
    return v < 1 ? 1 : v > 1000000000L ? 1000000000 : (int)v;
}

// Whether model layer l runs sparse in configuration c (see n_sparse_layers).
static int layer_sparse(const Model *m, const EvalOpts *o, int c, int l) {
    const EvalMode mode = mode_of(o, c);
    if (mode == EVAL_DENSE || m->cfg.layer_kinds[l] != LAYER_FULL_ATTENTION) return 0;
    return mode == EVAL_ORACLE || (l < o->indexer->n_model_layers && o->indexer->params[l] != NULL);
}

// One configuration's forward pass.
static void run_config(const Model *m, const EvalOpts *o, int c, const int32_t *ids, int T, float *hidden,
                       SparseStats *stats) {
    Sparsity sp = config_of(o, c);
    const EvalMode mode = mode_of(o, c);
    int layer_topk[CONFIG_MAX_LAYERS];
    if (o->layer_weights && mode != EVAL_DENSE) {
        for (int l = 0; l < m->cfg.n_layers; l++)
            layer_topk[l] = m->cfg.layer_kinds[l] == LAYER_FULL_ATTENTION ? eval_layer_k(sp.topk, o->layer_weights[l])
                                                                           : sp.topk;
        sp.layer_topk = layer_topk;
    }
    const Backbone bb = {m, o->gpu};
    backbone_hidden(&bb, ids, T, hidden, &(ForwardOpts){.sparse = mode == EVAL_DENSE ? NULL : &sp,
                                                       .indexer = mode == EVAL_INDEXER ? o->indexer : NULL,
                                                       .stats = stats, .indexer_scores = o->indexer_scores});
}

// Wilson score interval for k successes in n trials (95%).
static void wilson(int k, int n, double *lo, double *hi) {
    const double z = 1.96, p = (double)k / n, d = 1 + z * z / n;
    const double c = (p + z * z / (2.0 * n)) / d, h = z * sqrt(p * (1 - p) / n + z * z / (4.0 * n * n)) / d;
    *lo = c - h > 0 ? c - h : 0;
    *hi = c + h < 1 ? c + h : 1;
}

// Retrieval rows: for each task kind and depth, task_n seeded instances, each
// run dense and at every configuration of the LM rows (res[0..n_cfg)), scored
// by teacher-forced exact match on the answer tokens. Appends to *res.
static int eval_retrieval(const Model *m, const int32_t *hay, size_t n_hay, const EvalOpts *o,
                          EvalResult **res, int *n_res, Status *st) {
    const int T = o->ctx, H = m->cfg.hidden, V = m->cfg.vocab, n_cfg = n_configs(o);
    const int n_rows = o->n_tasks * o->n_depths * n_cfg, base = *n_res;
    EvalResult *r = realloc(*res, sizeof *r * (size_t)(base + n_rows));
    SPINDLE_CHECK(r);
    *res = r;
    float *hidden = xmalloc(sizeof(float) * (size_t)T * H);
    float *logits = NULL;
    int *hits = xcalloc((size_t)n_rows, sizeof *hits);
    Progress pr;
    const int64_t total = (int64_t)o->n_tasks * o->n_depths * o->task_n * n_cfg;
    int64_t done = 0;
    if (o->progress) progress_start(&pr, "eval", "retrieval-forward", total);
    for (int ti = 0; ti < o->n_tasks; ti++)
        for (int di = 0; di < o->n_depths; di++)
            for (int i = 0; i < o->task_n; i++) {
                RetrievalTask task;
                if (retrieval_make(o->tok, hay, n_hay, o->tasks[ti], T, o->depths[di], o->seed + (uint64_t)i, &task, st)) {
                    free(hidden), free(logits), free(hits);
                    return -1;
                }
                logits = realloc(logits, sizeof(float) * (size_t)task.ans_len * V);
                SPINDLE_CHECK(logits);
                for (int c = 0; c < n_cfg; c++) {
                    run_config(m, o, c, task.ids, T, hidden, NULL);
                    const int first = task.ans_start - 1;
                    backbone_lm_head(&(Backbone){m, o->gpu}, hidden + (size_t)first * H, task.ans_len, logits);
                    hits[(ti * o->n_depths + di) * n_cfg + c] += retrieval_exact_match(&task, logits, first, V);
                    done++;
                    if (o->progress) {
                        const double el = progress_elapsed(&pr);
                        progress_update(&pr, done, "%s depth %.2f, instance %d/%d, configuration %d/%d, %.0f tokens/s",
                                        retrieval_kind_name(o->tasks[ti]), o->depths[di], i + 1, o->task_n, c + 1,
                                        n_cfg, el > 0 ? (double)done * T / el : 0.0);
                    }
                }
                retrieval_free(&task);
            }
    for (int ti = 0; ti < o->n_tasks; ti++)
        for (int di = 0; di < o->n_depths; di++)
            for (int c = 0; c < n_cfg; c++) {
                const int row = (ti * o->n_depths + di) * n_cfg + c;
                EvalResult *e = &r[base + row];
                memset(e, 0, sizeof *e);
                const Sparsity sp = config_of(o, c);
                e->mode = mode_of(o, c), e->k = sp.topk, e->bsel = sp.bsel, e->ctx = T;
                e->recent = sp.recent, e->sinks = sp.sinks, e->refine = sp.refine;
                e->n_sparse_layers = n_sparse_layers(m, o, c);
                e->n_seq = o->task_n;
                e->task = (int)o->tasks[ti];
                e->depth = o->depths[di];
                e->accuracy = (double)hits[row] / o->task_n;
                wilson(hits[row], o->task_n, &e->acc_lo, &e->acc_hi);
            }
    *n_res = base + n_rows;
    free(hidden), free(logits), free(hits);
    return 0;
}

int eval_run(const Model *m, const int32_t *ids, size_t n_ids, const EvalOpts *o, EvalResult **out,
             int *n_out, Status *st) {
    *out = NULL;
    *n_out = 0;
    // Layer-averaged statistics average over the full-attention layers: the
    // forward's SparseStats sum over those only.
    const int T = o->ctx, H = m->cfg.hidden, L = n_full_layers(m);
    if (L < 1) return status_fail(st, "the model has no full-attention layer: nothing to evaluate sparse");
    // The GPU forward does not take hybrid supports (Sparsity.recent / sinks): it would run the plain ones.
    for (int c = 1; o->gpu && c < n_configs(o); c++) {
        const Sparsity sp = config_of(o, c);
        if (sp.recent || sp.sinks)
            return status_fail(st, "hybrid supports (recent %d, sinks %d) run on the CPU twin only", sp.recent,
                               sp.sinks);
    }
    // Nor per-layer budgets: it sizes every layer's supports by the row's k.
    if (o->gpu && o->layer_weights) return status_fail(st, "per-layer budgets run on the CPU twin only");
    SPINDLE_CHECK(m->cfg.n_layers <= CONFIG_MAX_LAYERS);
    int full[CONFIG_MAX_LAYERS];
    config_full_layers(m->cfg.layer_kinds, m->cfg.n_layers, full);
    const int n_lstat = o->gpu || L > EVAL_MAX_LAYER_STATS ? 0 : L;  // per-layer fields: the CPU twin's stats
    // The windows: ctx tokens of the stream each, or (--bos) the BOS and ctx − 1 tokens each, laid out
    // one after the other (corpus_bos_windows) so that window s is lm[s·T ..) either way.
    const size_t max_seq = o->max_seq > 0 ? (size_t)o->max_seq : 0;
    int n_seq = (int)(o->bos_windows ? corpus_bos_windows(ids, n_ids, T, o->bos_id, max_seq, NULL)
                                     : corpus_windows(ids, n_ids, T, max_seq, NULL));
    if (n_seq < 1 && !o->bos_windows) return status_fail(st, "the text has %zu tokens, fewer than --ctx %d", n_ids, T);
    if (n_seq < 1)
        return status_fail(st, "the text has %zu tokens, fewer than the %d a window of --ctx %d takes after its BOS",
                           n_ids, T - 1, T);
    int32_t *bos_lm = NULL;
    if (o->bos_windows) {
        bos_lm = xmalloc(sizeof(int32_t) * (size_t)n_seq * T);
        corpus_bos_windows(ids, n_ids, T, o->bos_id, max_seq, bos_lm);
    }
    const int32_t *lm = bos_lm ? bos_lm : ids;
    const int n_cfg = n_configs(o);
    EvalResult *res = xcalloc((size_t)n_cfg, sizeof *res);
    Samples *smp = xcalloc((size_t)n_cfg, sizeof *smp);
    const int64_t cap = (int64_t)n_seq * T;
    for (int c = 0; c < n_cfg; c++)
        for (int k = 0; k < M_COUNT; k++) smp[c].v[k] = xmalloc(sizeof(double) * (size_t)cap);
    for (int c = 0; c < n_cfg; c++) {
        EvalResult *r = &res[c];
        const Sparsity sp = config_of(o, c);
        r->mode = mode_of(o, c);
        r->k = sp.topk;
        r->bsel = sp.bsel;
        r->recent = sp.recent;
        r->sinks = sp.sinks;
        r->refine = sp.refine;
        r->ctx = T;
        r->n_seq = n_seq;
        r->task = -1;
        r->n_sparse_layers = n_sparse_layers(m, o, c);
        if (o->layer_weights && c && L <= EVAL_MAX_LAYER_STATS) {
            r->has_layer_k = 1;
            for (int j = 0; j < L; j++) r->layer_k[j] = eval_layer_k(sp.topk, o->layer_weights[full[j]]);
        }
    }
    const int NL = m->cfg.n_layers;
    // Per configuration and model layer: Σ recall and Σ |S_t| over positions and sequences.
    double *lrec = xcalloc((size_t)n_cfg * NL, sizeof(double)), *lsup = xcalloc((size_t)n_cfg * NL, sizeof(double));

    const Backbone bb = {m, o->gpu};
    float *hd = xmalloc(sizeof(float) * (size_t)T * H), *hs = xmalloc(sizeof(float) * (size_t)T * H);
    float *recall = xmalloc(sizeof(float) * T), *support = xmalloc(sizeof(float) * T);
    // Per position t < T − 1 (the token after it is x[t + 1]): dense and sparse
    // NLL, KL(dense ‖ sparse), argmax agreement.
    double *nll_d = xmalloc(sizeof(double) * T), *nll_s = xmalloc(sizeof(double) * T);
    double *kl = xmalloc(sizeof(double) * T);
    int32_t *top1 = xmalloc(sizeof(int32_t) * T);
    double *union_sum = xcalloc(2 * (size_t)n_cfg, sizeof(double));  // per configuration: keys, blocks
    // Progress: one item per forward pass (a sequence under one configuration).
    Progress pr;
    if (o->progress) progress_start(&pr, "eval", "forward", (int64_t)n_seq * n_cfg);
    int64_t tokens = 0;
    for (int s = 0; s < n_seq; s++) {
        const int32_t *x = lm + (size_t)s * T;
        backbone_hidden(&bb, x, T, hd, NULL);
        tokens += T;
        for (int c = 0; c < n_cfg; c++) {
            Samples *sm = &smp[c];
            if (c) {
                memset(recall, 0, sizeof(float) * T);
                memset(support, 0, sizeof(float) * T);
                SparseStats ss = {recall, support, o->union_bsel, 0, 0};
                if (n_lstat) ss.layer_recall = lrec + (size_t)c * NL, ss.layer_support = lsup + (size_t)c * NL;
                run_config(m, o, c, x, T, hs, &ss);
                tokens += T;
                union_sum[2 * c] += ss.union_keys, union_sum[2 * c + 1] += ss.union_blocks;
                // The dense full-attention layers of the pass add 1 to recall[t] and t + 1 to
                // support[t] each (L: the full-attention layers).
                const int ns = res[c].n_sparse_layers, nd = L - ns;
                double kept = 0, kept_s = 0, causal = 0;
                for (int t = 0; t < T; t++) {
                    sm->v[M_RECALL][sm->n[M_RECALL]++] = recall[t] / L;
                    sm->v[M_RECALL_S][sm->n[M_RECALL_S]++] = ns ? (recall[t] - nd) / ns : 1.0;
                    kept += support[t] / L, causal += t + 1;
                    kept_s += ns ? (support[t] - (double)nd * (t + 1)) / ns : t + 1;
                }
                sm->v[M_SPARSE][sm->n[M_SPARSE]++] = 1.0 - kept / causal;
                sm->v[M_SPARSE_S][sm->n[M_SPARSE_S]++] = 1.0 - kept_s / causal;
            } else {
                for (int t = 0; t < T; t++) sm->v[M_RECALL][sm->n[M_RECALL]++] = 1.0;
                for (int t = 0; t < T; t++) sm->v[M_RECALL_S][sm->n[M_RECALL_S]++] = 1.0;
                sm->v[M_SPARSE][sm->n[M_SPARSE]++] = 0.0;
                sm->v[M_SPARSE_S][sm->n[M_SPARSE_S]++] = 0.0;
            }
            if (!c) {
                backbone_score(&bb, hd, NULL, T - 1, x + 1, nll_d, NULL, NULL, NULL);
                for (int t = 0; t < T - 1; t++) {
                    sm->v[M_NLL][sm->n[M_NLL]++] = nll_d[t];
                    sm->v[M_DNLL][sm->n[M_DNLL]++] = 0;
                    sm->v[M_KL][sm->n[M_KL]++] = 0;
                    sm->v[M_TOP1][sm->n[M_TOP1]++] = 1;
                }
            } else {
                backbone_score(&bb, hd, hs, T - 1, x + 1, nll_d, nll_s, kl, top1);
                for (int t = 0; t < T - 1; t++) {
                    sm->v[M_NLL][sm->n[M_NLL]++] = nll_s[t];
                    sm->v[M_DNLL][sm->n[M_DNLL]++] = nll_s[t] - nll_d[t];
                    sm->v[M_KL][sm->n[M_KL]++] = kl[t];
                    sm->v[M_TOP1][sm->n[M_TOP1]++] = top1[t];
                }
            }
            if (o->progress) {
                const Sparsity sp = config_of(o, c);
                const EvalMode md = mode_of(o, c);
                const double el = progress_elapsed(&pr);
                char what[96] = "dense";
                if (md != EVAL_DENSE)
                    snprintf(what, sizeof what, "%s k %d b_sel %d recent %d sinks %d",
                             md == EVAL_ORACLE ? "oracle" : "indexer", sp.topk, sp.bsel, sp.recent, sp.sinks);
                progress_update(&pr, (int64_t)s * n_cfg + c + 1, "sequence %d/%d, configuration %d/%d (%s), %.0f tokens/s",
                                s + 1, n_seq, c + 1, n_cfg, what, el > 0 ? (double)tokens / el : 0.0);
            }
        }
    }
    free(bos_lm);
    // Realization gaps: a b_sel > 1 row against its mode's b_sel 1 row of the same k, paired per position.
    double *gap = xmalloc(sizeof(double) * (size_t)cap);
    for (int c = 1; c < n_cfg; c++) {
        const Sparsity sc = config_of(o, c);
        if (sc.bsel <= 1) continue;
        for (int c1 = 1; c1 < n_cfg; c1++) {
            const Sparsity s1 = config_of(o, c1);
            if (mode_of(o, c1) != mode_of(o, c) || s1.bsel != 1 || s1.topk != sc.topk || s1.recent != sc.recent ||
                s1.sinks != sc.sinks || smp[c1].n[M_NLL] != smp[c].n[M_NLL])
                continue;
            for (int64_t i = 0; i < smp[c].n[M_NLL]; i++) gap[i] = smp[c].v[M_NLL][i] - smp[c1].v[M_NLL][i];
            res[c].has_realization = 1;
            res[c].realization = stat_of(gap, smp[c].n[M_NLL]);
            break;
        }
    }
    free(gap);
    for (int c = 0; c < n_cfg; c++) {
        EvalResult *r = &res[c];
        Samples *sm = &smp[c];
        r->n_scored = sm->n[M_NLL];
        r->nll = stat_of(sm->v[M_NLL], sm->n[M_NLL]);
        r->dnll = stat_of(sm->v[M_DNLL], sm->n[M_DNLL]);
        r->logit_kl = stat_of(sm->v[M_KL], sm->n[M_KL]);
        r->top1_agree = stat_of(sm->v[M_TOP1], sm->n[M_TOP1]);
        r->mass_recall = stat_of(sm->v[M_RECALL], sm->n[M_RECALL]);
        r->sparsity = stat_of(sm->v[M_SPARSE], sm->n[M_SPARSE]);
        r->mass_recall_sparse = stat_of(sm->v[M_RECALL_S], sm->n[M_RECALL_S]);
        r->sparsity_sparse = stat_of(sm->v[M_SPARSE_S], sm->n[M_SPARSE_S]);
        if (union_sum[2 * c + 1] > 0) {
            r->union_bsel = o->union_bsel;
            r->union_keys = union_sum[2 * c] / union_sum[2 * c + 1];
            r->union_ratio = r->union_keys / r->k;
        }
        for (int k = 0; k < M_COUNT; k++) free(sm->v[k]);
        if (c && n_lstat) {
            const double pos = (double)n_seq * T, causal = (double)n_seq * T * (T + 1) / 2;
            r->n_layer_stats = n_lstat;
            for (int j = 0; j < n_lstat; j++) {
                const int l = full[j], sparse = layer_sparse(m, o, c, l);
                r->layer_recall[j] = sparse ? (float)(lrec[(size_t)c * NL + l] / pos) : 1.0f;
                r->layer_sparsity[j] = sparse ? (float)(1.0 - lsup[(size_t)c * NL + l] / causal) : 0.0f;
            }
        }
    }
    free(union_sum), free(lrec), free(lsup);
    free(smp), free(hd), free(hs), free(recall), free(support), free(nll_d), free(nll_s), free(kl), free(top1);
    int n_res = n_cfg;
    if (o->n_tasks > 0 && eval_retrieval(m, ids, n_ids, o, &res, &n_res, st)) {
        free(res);
        return -1;
    }
    *out = res;
    *n_out = n_res;
    return 0;
}
