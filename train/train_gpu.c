// train_gpu.c: see train_gpu.h.
#include "train_gpu.h"

#ifdef SPINDLE_HAVE_CUDA
#include <math.h>
#include <omp.h>
#include <string.h>

#include "fileio.h"
#include "forward.h"
#include "indexer_cuda.h"
#include "ops_cuda.h"
#include "status.h"

void gpu_indexers_open(GpuIndexers *g, const IndexerConfig *cfg, const IndexerObjective *obj, const RunState *rs,
                       const unsigned char *decay, int max_T) {
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    g->obj = obj ? *obj : indexer_objective_default();
    g->parts = xcalloc((size_t)(rs->n_layers > 0 ? rs->n_layers : 1), sizeof *g->parts);
    g->n_layers = rs->n_layers, g->np = rs->n_params;
    const size_t np = (size_t)rs->n_params;
    g->grads = cuda_malloc(sizeof(float) * np);
    g->queries = cuda_malloc(sizeof(int32_t) * (size_t)(max_T > 0 ? max_T : 1));
    g->decay = cuda_malloc(np);
    if (decay) cuda_to_device(g->decay, decay, np);
    else cuda_memset(g->decay, 1, np);
    g->params = xcalloc((size_t)g->n_layers, sizeof(float *));
    g->m = xcalloc((size_t)g->n_layers, sizeof(float *));
    g->v = xcalloc((size_t)g->n_layers, sizeof(float *));
    for (int i = 0; i < g->n_layers; i++) {
        float **dst[3] = {&g->params[i], &g->m[i], &g->v[i]};
        const float *src[3] = {rs->params[i], rs->m[i], rs->v[i]};
        for (int a = 0; a < 3; a++) {
            *dst[a] = cuda_malloc(sizeof(float) * np);
            cuda_to_device(*dst[a], src[a], sizeof(float) * np);
        }
    }
}

void gpu_indexers_download(const GpuIndexers *g, RunState *rs) {
    const size_t bytes = sizeof(float) * (size_t)g->np;
    cuda_sync();
    for (int i = 0; i < g->n_layers; i++) {
        cuda_to_host(rs->params[i], g->params[i], bytes);
        cuda_to_host(rs->m[i], g->m[i], bytes);
        cuda_to_host(rs->v[i], g->v[i], bytes);
    }
}

void gpu_indexers_accumulators(GpuIndexers *g) {
    if (g->acc) return;
    g->acc = xcalloc((size_t)g->n_layers, sizeof(float *));
    for (int i = 0; i < g->n_layers; i++) {
        g->acc[i] = cuda_malloc(sizeof(float) * (size_t)g->np);
        cuda_memset(g->acc[i], 0, sizeof(float) * (size_t)g->np);
    }
    g->row0 = cuda_malloc(sizeof(int32_t));
    cuda_memset(g->row0, 0, sizeof(int32_t));
}

void gpu_indexers_set_queries(GpuIndexers *g, const int *queries, int n) {
    SPINDLE_CHECK(sizeof(int) == sizeof(int32_t));
    cuda_to_device(g->queries, queries, sizeof(int32_t) * (size_t)n);
}

void gpu_indexers_close(GpuIndexers *g) {
    if (!g->grads) return;
    for (int i = 0; i < g->n_layers; i++) cuda_free(g->params[i]), cuda_free(g->m[i]), cuda_free(g->v[i]);
    for (int i = 0; g->acc && i < g->n_layers; i++) cuda_free(g->acc[i]);
    free(g->acc), cuda_free(g->row0);
    free(g->params), free(g->m), free(g->v), free(g->parts);
    cuda_free(g->grads), cuda_free(g->queries), cuda_free(g->decay);
    memset(g, 0, sizeof *g);
}

// Seconds since *t0 once the device is idle, then *t0 = now.
static double lap(double *t0) {
    cuda_sync();
    const double now = omp_get_wtime(), d = now - *t0;
    *t0 = now;
    return d;
}

double gpu_layer_step(GpuIndexers *g, int i, const float *x, const float *tq, const float *tk, const float *lse,
                      int T, const GpuTeacher *te, int n_queries, const AdamW *opt, long t, double clip,
                      double *grad_norm, GpuStepTimes *tm) {
    double t0 = 0;
    if (tm) t0 = omp_get_wtime(), lap(&t0);  // the work queued before this step is not the step's
    const size_t np = (size_t)g->np;
    cuda_memset(g->grads, 0, sizeof(float) * np);
    const double kl = indexer_objective_loss_cuda(g->grads, g->parts[i], &g->cfg, &g->obj, g->params[i], x, tq, tk,
                                                  lse, T, te->Hq, te->Hkv, te->dh, te->scale, g->queries, n_queries,
                                                  te->bf16_teacher);
    if (tm) tm->loss += lap(&t0);
    if (g->dist) {  // every rank, even after a non-finite loss: the others wait in the collective
        dist_allreduce_mean(g->dist, g->grads, np);
        if (tm) tm->comm += lap(&t0);
    }
    *grad_norm = NAN;
    if (!isfinite(kl)) return kl;
    *grad_norm = grad_clip_cuda(g->grads, np, clip);
    adamw_step_cuda(opt->lr, opt->beta1, opt->beta2, opt->eps, opt->weight_decay, t, g->params[i], g->grads, g->m[i],
                    g->v[i], np, g->decay);
    if (tm) tm->opt += lap(&t0);
    return kl;
}

double gpu_layer_accumulate(GpuIndexers *g, int i, const float *x, const float *tq, const float *tk, const float *lse,
                            int T, const GpuTeacher *te, int n_queries, GpuStepTimes *tm) {
    SPINDLE_CHECK(g->acc);
    double t0 = 0;
    if (tm) t0 = omp_get_wtime(), lap(&t0);
    const double kl = indexer_objective_loss_cuda(g->acc[i], g->parts[i], &g->cfg, &g->obj, g->params[i], x, tq, tk,
                                                  lse, T, te->Hq, te->Hkv, te->dh, te->scale, g->queries, n_queries,
                                                  te->bf16_teacher);
    if (tm) tm->loss += lap(&t0);
    return kl;
}

double gpu_layer_apply(GpuIndexers *g, int i, int n_seq, int finite, const AdamW *opt, long t, double clip,
                       GpuStepTimes *tm) {
    SPINDLE_CHECK(g->acc && n_seq >= 1);
    double t0 = 0;
    if (tm) t0 = omp_get_wtime(), lap(&t0);
    const size_t np = (size_t)g->np;
    // grads = acc × (1/n_seq): the embedding gather of row 0 of a one-row
    // "table" (acc) with its scale, which is exactly one fp32 multiply per
    // element (kernels/ops_cuda.h), as the CPU twin's mean.
    embedding_forward_cuda(g->grads, g->row0, g->acc[i], 1, (int)np, (float)(1.0 / n_seq));
    cuda_memset(g->acc[i], 0, sizeof(float) * np);
    if (g->dist) {
        dist_allreduce_mean(g->dist, g->grads, np);
        if (tm) tm->comm += lap(&t0);
    }
    if (!finite) return NAN;
    const double norm = grad_clip_cuda(g->grads, np, clip);
    adamw_step_cuda(opt->lr, opt->beta1, opt->beta2, opt->eps, opt->weight_decay, t, g->params[i], g->grads, g->m[i],
                    g->v[i], np, g->decay);
    if (tm) tm->opt += lap(&t0);
    return norm;
}

// ---- online: the tap ------------------------------------------------------------------------

// Called by the CUDA forward at every full-attention layer with that pass's
// device arrays (TAP_DEVICE): the trained ones get their step (or recall).
static void online_tap(void *ctx, int layer, const float *xn, const float *q, const float *k, const float *lse, int T) {
    GpuOnline *o = ctx;
    const int i = o->slot[layer];
    if (i < 0 || o->mode == GPU_PASS_TEACHER) return;
    SPINDLE_CHECK(xn && q && k && lse);  // a dense pass taps all four
    if (o->mode == GPU_PASS_TRAIN) {
        o->kl[i] = gpu_layer_step(o->g, i, xn, q, k, lse, T, &o->te, o->n_queries, o->opt, o->t, o->clip, &o->gn[i],
                                  o->times);
        return;
    }
    if (o->mode == GPU_PASS_ACCUMULATE) {
        o->kl[i] = gpu_layer_accumulate(o->g, i, xn, q, k, lse, T, &o->te, o->n_queries, o->times);
        return;
    }
    o->rec[i] = indexer_mass_recall_cuda(NULL, &o->g->cfg, o->g->params[i], xn, q, k, lse, T, o->te.Hq, o->te.Hkv,
                                         o->te.dh, o->te.scale, o->g->queries, o->n_queries, o->recall_k);
}

void gpu_online_init(GpuOnline *o, GpuIndexers *g, FwdCuda *f, const ModelConfig *c, const int *layers, int n,
                     const GpuTeacher *te) {
    SPINDLE_CHECK(n == g->n_layers && n > 0);
    memset(o, 0, sizeof *o);
    o->g = g, o->f = f, o->c = c, o->te = *te;
    o->slot = xmalloc(sizeof(int) * (size_t)c->n_layers);
    for (int l = 0; l < c->n_layers; l++) o->slot[l] = -1;
    for (int i = 0; i < n; i++) {
        SPINDLE_CHECK(layers[i] >= 0 && layers[i] < c->n_layers && (!i || layers[i] > layers[i - 1]) &&
                      c->layer_kinds[layers[i]] == LAYER_FULL_ATTENTION);
        o->slot[layers[i]] = i;
    }
    o->deepest = layers[n - 1];
    o->kl = xcalloc((size_t)n, sizeof(double));
    o->gn = xcalloc((size_t)n, sizeof(double));
    o->rec = xcalloc((size_t)n, sizeof(double));
}

void gpu_online_free(GpuOnline *o) {
    free(o->slot), free(o->kl), free(o->gn), free(o->rec);
    memset(o, 0, sizeof *o);
}

// One forward over ids with the tap in o->mode (tapped = 0: no tap at all).
static void online_pass(GpuOnline *o, const int32_t *ids, int T, int tapped) {
    const ForwardTap tap = {online_tap, o, TAP_DEVICE | TAP_ALL};
    const ForwardOpts fo = {.tap = tapped ? &tap : NULL, .stop_after_tap = o->deepest + 1};
    // The pass always ends after the deepest trained layer (a full-attention
    // layer), so no hidden states are written.
    fwd_cuda_hidden(o->f, ids, T, NULL, &fo);
}

void gpu_online_train(GpuOnline *o, const int32_t *ids, int T, int n_queries, const AdamW *opt, long t, double clip) {
    o->mode = GPU_PASS_TRAIN, o->n_queries = n_queries, o->opt = opt, o->t = t, o->clip = clip;
    for (int i = 0; i < o->g->n_layers; i++) o->kl[i] = NAN, o->gn[i] = NAN;
    online_pass(o, ids, T, 1);
}

void gpu_online_accumulate(GpuOnline *o, const int32_t *ids, int T, int n_queries) {
    o->mode = GPU_PASS_ACCUMULATE, o->n_queries = n_queries;
    for (int i = 0; i < o->g->n_layers; i++) o->kl[i] = NAN;
    online_pass(o, ids, T, 1);
}

void gpu_online_recall(GpuOnline *o, const int32_t *ids, int T, int n_queries, int k) {
    o->mode = GPU_PASS_RECALL, o->n_queries = n_queries, o->recall_k = k;
    for (int i = 0; i < o->g->n_layers; i++) o->rec[i] = NAN;
    online_pass(o, ids, T, 1);
}

void gpu_online_teacher(GpuOnline *o, const int32_t *ids, int T) {
    o->mode = GPU_PASS_TEACHER;
    online_pass(o, ids, T, 1);
}

void gpu_online_forward(GpuOnline *o, const int32_t *ids, int T) { online_pass(o, ids, T, 0); }
#endif
