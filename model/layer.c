// layer.c: the layer loop (layer.h), shared by the CPU and CUDA twins.
#include "layer.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "indexer.h"

// How layer l attends in this pass, and whether it is a full-attention layer
// that a sparse pass leaves dense (its statistics: every key kept).
static AttendPlan plan_layer(const ModelConfig *c, int l, int T, const ForwardOpts *o, int *dense_full) {
    AttendPlan p = {.mode = ATTEND_DENSE};
    *dense_full = 0;
    if (c->layer_kinds[l] == LAYER_SLIDING_ATTENTION) {  // local layers run as they are
        p.window = c->sliding_window;
        return p;
    }
    if (o->kv && o->kv->len > 0) return p;  // a decoding step: dense over the cache
    const Sparsity *sp = o->sparse;
    const IndexerSet *ix = sp ? o->indexer : NULL;
    const float *ip = ix && l < ix->n_model_layers ? ix->params[l] : NULL;
    const int want_stats = sp && o->stats && (o->stats->recall || o->stats->support);
    const int topk = sp ? sparsity_topk(sp, l) : 0;
    if (ip && topk < T) {  // a trained indexer picks the supports
        p.mode = ATTEND_INDEXER;
        p.ix_cfg = &ix->cfg;
        p.ix_params = ip;
    } else if (sp && (ip || !ix)) {  // the oracle (k ≥ T: every key, i.e. dense exactly)
        p.mode = ATTEND_ORACLE;
    } else {
        *dense_full = sp != NULL;
        p.lse = o->tap && !sp;
        return p;
    }
    p.topk = topk;
    p.bsel = sp->bsel;
    p.recent = sp->recent;
    p.sinks = sp->sinks;
    p.exec_block = sp->exec_block;
    p.refine = p.mode == ATTEND_INDEXER && sp->bsel > 1 ? sp->refine : 0;
    p.stats = want_stats;
    return p;
}

// Seconds since *t0 once the twin is idle, then *t0 = now (profiling only).
static double lap(const LayerOps *ops, double *t0) {
    if (ops->sync) ops->sync();
    const double now = omp_get_wtime(), d = now - *t0;
    *t0 = now;
    return d;
}

void layer_loop(const LayerOps *ops, void *twin, const ModelConfig *c, const int32_t *ids, int T,
                const ForwardOpts *o) {
    static const ForwardOpts none = {0};
    if (!o) o = &none;
    if (T <= 0) return;
    KvCache *kv = o->kv;
    if (kv && (!ops->kv_store || !ops->kv_attend)) {
        fprintf(stderr, "spindle: this forward has no decoding cache (greedy decoding runs on the CPU twin)\n");
        abort();
    }
    if (kv) SPINDLE_CHECK(!o->tap && !o->stop_after_tap && kv->len + T <= kv->max_len);
    const int decoding = kv && kv->len > 0;
    ForwardProfile *prof = o->prof;
    if (prof) memset(prof, 0, sizeof *prof);
    double t0 = omp_get_wtime();
    void *tw = ops->begin(twin, ids, T, o);
    if (prof) prof->other += lap(ops, &t0);

    int n_dense_full = 0, stopped = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const int full = c->layer_kinds[l] == LAYER_FULL_ATTENTION;
        if (c->layer_kinds[l] == LAYER_LINEAR_ATTENTION) {
            ops->attn_in(tw, l, 0);
            ops->linear_attn(tw, l);
            if (prof) prof->linear += lap(ops, &t0);
        } else {
            int dense_full;
            const AttendPlan p = plan_layer(c, l, T, o, &dense_full);
            n_dense_full += dense_full;
            const int tap = o->tap && full;  // the tap sees the layers the method acts on
            ops->attn_in(tw, l, p.mode == ATTEND_INDEXER || tap);
            ops->qkv(tw, l);
            if (kv) ops->kv_store(tw, l, kv);
            if (prof) prof->gemm += lap(ops, &t0);
            if (decoding) ops->kv_attend(tw, l, &p, kv);
            else ops->attend(tw, l, &p);
            if (prof) prof->attention += lap(ops, &t0);
            if (tap) {
                ops->tap(tw, l, o->tap);
                if (prof) prof->other += lap(ops, &t0);
            }
            if (o->stop_after_tap > 0 && l + 1 >= o->stop_after_tap) {  // nothing downstream is wanted
                stopped = 1;
                break;
            }
            ops->attn_out(tw, l);
        }
        if (c->layer_moe && c->layer_moe[l]) ops->moe(tw, l);
        else ops->mlp(tw, l);
        if (prof) prof->gemm += lap(ops, &t0);
    }
    ops->finish(tw, stopped, o);
    if (kv) kv->len += T;
    SparseStats *st = o->sparse && !decoding ? o->stats : NULL;
    for (int t = 0; st && n_dense_full && t < T; t++) {
        if (st->recall) st->recall[t] += (float)n_dense_full;
        if (st->support) st->support[t] += (float)n_dense_full * (float)(t + 1);
    }
    if (prof) prof->other += lap(ops, &t0);
}
