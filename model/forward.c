// forward.c: see forward.h. The CPU twin's ops beneath the layer loop
// (layer.h), fp32 throughout, each the plain kernels/cpu op:
//   attn_in   xn = RMSNorm(x)·attn_norm
//   qkv       q, k, v = xn·Wqᵀ (+b), xn·Wkᵀ (+b), xn·Wvᵀ (+b); q/k norm; RoPE of the layer's kind
//   attend    dense (causal, or in the sliding window), the oracle's supports, or an indexer's
//   attn_out  x += [RMSNorm](a·Woᵀ (+b))
//   mlp       x += [RMSNorm](Wdown·(act(xn·Wgateᵀ) ⊙ xn·Wupᵀ)), xn = RMSNorm(x)·mlp_norm
#include "forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "indexer.h"
#include "indexer_ops.h"
#include "layer.h"
#include "ops.h"
#include "rope.h"

void forward_layer_qk(const Model *m, int layer, const float *xn, int T, const float *cos_t, const float *sin_t,
                      float *q, float *k) {
    const ModelConfig *c = &m->cfg;
    const LayerWeights *w = &m->layers[layer];
    const int H = c->hidden, dh = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads, rot = rope_rot_dims(c);
    matmul_forward_cpu(q, xn, w->wq, w->bq, T, H, Hq * dh);
    matmul_forward_cpu(k, xn, w->wk, w->bk, T, H, Hkv * dh);
    if (c->qk_norm) {
        rmsnorm_forward_cpu(q, q, w->q_norm, T * Hq, dh, (float)c->rms_eps);
        rmsnorm_forward_cpu(k, k, w->k_norm, T * Hkv, dh, (float)c->rms_eps);
    }
    rope_forward_cpu(q, cos_t, sin_t, T, Hq, dh, rot);
    rope_forward_cpu(k, cos_t, sin_t, T, Hkv, dh, rot);
}

// One pass's scratch.
typedef struct {
    const Model *m;
    float *out;  // hidden [T, hidden]: the residual stream lives in the output buffer
    int T;
    float *xn, *q, *k, *v, *att, *gate, *up, *lse;
    float *cos_t[2], *sin_t[2];  // RoPE tables of full (0) and sliding (1) layers
    int *sel, *n_sel;            // indexer supports [rows, topk] and their sizes
    SparseStats stats;           // the pass's recall / support sums (o->stats or none)
} CpuPass;

typedef struct {
    const Model *m;
    float *hidden;
} CpuTwin;

static void *cpu_begin(void *twin, const int32_t *ids, int T, const ForwardOpts *o) {
    const CpuTwin *tw = twin;
    const Model *m = tw->m;
    const ModelConfig *c = &m->cfg;
    const size_t H = (size_t)c->hidden, nq = (size_t)c->n_heads * c->head_dim;
    const size_t nkv = (size_t)c->n_kv_heads * c->head_dim, TT = (size_t)T;
    CpuPass *p = xcalloc(1, sizeof *p);
    p->m = m;
    p->out = tw->hidden;
    p->T = T;
    p->xn = xmalloc(sizeof(float) * TT * H);
    p->q = xmalloc(sizeof(float) * TT * nq);
    p->k = xmalloc(sizeof(float) * TT * nkv);
    p->v = xmalloc(sizeof(float) * TT * nkv);
    p->att = xmalloc(sizeof(float) * TT * nq);
    p->gate = xmalloc(sizeof(float) * TT * c->intermediate);
    p->up = xmalloc(sizeof(float) * TT * c->intermediate);
    if (o->tap && !o->sparse) p->lse = xmalloc(sizeof(float) * TT * c->n_heads);
    const size_t half = (size_t)(rope_rot_dims(c) / 2);
    for (int kind = 0; kind < (c->sliding_window ? 2 : 1); kind++) {  // sliding tables only where layers slide
        p->cos_t[kind] = xmalloc(sizeof(float) * (TT * half + 1));
        p->sin_t[kind] = xmalloc(sizeof(float) * (TT * half + 1));
        rope_tables_kind(c, kind ? LAYER_SLIDING_ATTENTION : LAYER_FULL_ATTENTION, T, p->cos_t[kind],
                         p->sin_t[kind]);
    }
    const Sparsity *sp = o->sparse;
    if (sp && o->indexer && sp->topk < T) {
        const size_t rows = (size_t)(T + sp->bsel - 1) / sp->bsel;
        p->sel = xmalloc(sizeof(int) * rows * sp->topk);
        p->n_sel = xmalloc(sizeof(int) * rows);
    }
    if (sp && o->stats) p->stats = *o->stats;
    for (int t = 0; t < T; t++) {
        float *row = p->out + (size_t)t * H;
        memcpy(row, m->embed + (size_t)ids[t] * H, sizeof(float) * H);
        if (c->embed_scale != 1.0f)
            for (size_t i = 0; i < H; i++) row[i] *= c->embed_scale;
    }
    return p;
}

static void cpu_attn_in(void *tw, int l, int keep_fp32) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    rmsnorm_forward_cpu(p->xn, p->out, p->m->layers[l].attn_norm, p->T, c->hidden, (float)c->rms_eps);
}

static void cpu_qkv(void *tw, int l) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    const LayerWeights *w = &p->m->layers[l];
    const int kind = c->layer_kinds[l] == LAYER_SLIDING_ATTENTION;
    forward_layer_qk(p->m, l, p->xn, p->T, p->cos_t[kind], p->sin_t[kind], p->q, p->k);
    matmul_forward_cpu(p->v, p->xn, w->wv, w->bv, p->T, c->hidden, c->n_kv_heads * c->head_dim);
}

static void cpu_attend(void *tw, int l, const AttendPlan *a) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    const int T = p->T, Hq = c->n_heads, Hkv = c->n_kv_heads, dh = c->head_dim;
    const float s = (float)c->attn_scale;
    float *rec = a->stats ? p->stats.recall : NULL, *sup = a->stats ? p->stats.support : NULL;
    if (a->mode == ATTEND_INDEXER) {
        indexer_select_cpu(p->sel, p->n_sel, a->ix_cfg, a->ix_params, p->xn, T, a->topk, a->bsel);
        support_attention_cpu(p->att, rec, sup, p->q, p->k, p->v, T, Hq, Hkv, dh, s, a->topk, a->bsel, p->sel,
                              p->n_sel);
    } else if (a->mode == ATTEND_ORACLE) {
        oracle_attention_cpu(p->att, rec, sup, p->q, p->k, p->v, T, Hq, Hkv, dh, s, a->topk, a->bsel);
    } else {
        attention_forward_cpu(p->att, a->lse ? p->lse : NULL, p->q, p->k, p->v, T, Hq, Hkv, dh, s, a->window);
    }
}

static void cpu_tap(void *tw, int l, const ForwardTap *tap) {
    CpuPass *p = tw;
    const unsigned w = tap->wants ? tap->wants : TAP_ALL;
    tap->fn(tap->ctx, l, w & TAP_XN ? p->xn : NULL, w & TAP_Q ? p->q : NULL, w & TAP_K ? p->k : NULL,
            w & TAP_LSE ? p->lse : NULL, p->T);
}

// x += [RMSNorm(·)·post](y), y already in p->xn.
static void add_block(CpuPass *p, const float *post) {
    const ModelConfig *c = &p->m->cfg;
    const size_t n = (size_t)p->T * c->hidden;
    if (post) rmsnorm_forward_cpu(p->xn, p->xn, post, p->T, c->hidden, (float)c->rms_eps);
    for (size_t i = 0; i < n; i++) p->out[i] += p->xn[i];
}

static void cpu_attn_out(void *tw, int l) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    const LayerWeights *w = &p->m->layers[l];
    matmul_forward_cpu(p->xn, p->att, w->wo, w->bo, p->T, c->n_heads * c->head_dim, c->hidden);
    add_block(p, w->post_attn_norm);
}

static void cpu_mlp(void *tw, int l) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    const LayerWeights *w = &p->m->layers[l];
    const int T = p->T, H = c->hidden, I = c->intermediate;
    rmsnorm_forward_cpu(p->xn, p->out, w->mlp_norm, T, H, (float)c->rms_eps);
    matmul_forward_cpu(p->gate, p->xn, w->w_gate, w->b_gate, T, H, I);
    matmul_forward_cpu(p->up, p->xn, w->w_up, w->b_up, T, H, I);
    glu_forward_cpu(p->gate, p->gate, p->up, (int64_t)T * I, c->act);
    matmul_forward_cpu(p->xn, p->gate, w->w_down, w->b_down, T, I, H);
    add_block(p, w->post_mlp_norm);
}

static void cpu_finish(void *tw, int stopped, const ForwardOpts *o) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    if (!stopped) rmsnorm_forward_cpu(p->out, p->out, p->m->final_norm, p->T, c->hidden, (float)c->rms_eps);
    free(p->xn), free(p->q), free(p->k), free(p->v), free(p->att), free(p->gate), free(p->up), free(p->lse);
    for (int kind = 0; kind < 2; kind++) free(p->cos_t[kind]), free(p->sin_t[kind]);
    free(p->sel), free(p->n_sel);
    free(p);
}

static const LayerOps cpu_ops = {
    .begin = cpu_begin,
    .attn_in = cpu_attn_in,
    .qkv = cpu_qkv,
    .attend = cpu_attend,
    .tap = cpu_tap,
    .attn_out = cpu_attn_out,
    .mlp = cpu_mlp,
    .sync = NULL,
    .finish = cpu_finish,
};

void forward_hidden(const Model *m, const int32_t *ids, int T, float *hidden, const ForwardOpts *o) {
    CpuTwin tw = {m, hidden};
    layer_loop(&cpu_ops, &tw, &m->cfg, ids, T, o);
}

void forward_lm_head(const Model *m, const float *hidden, int rows, float *logits) {
    matmul_forward_cpu(logits, hidden, m->lm_head, NULL, rows, m->cfg.hidden, m->cfg.vocab);
    if (m->cfg.final_softcap > 0)
        softcap_forward_cpu(logits, (int64_t)rows * m->cfg.vocab, (float)m->cfg.final_softcap);
}
