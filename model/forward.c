// forward.c: see forward.h. The CPU twin's ops beneath the layer loop
// (layer.h), fp32 throughout, each the plain kernels/cpu op:
//   attn_in   xn = RMSNorm(x)·attn_norm
//   qkv       q, k, v = xn·Wqᵀ (+b), xn·Wkᵀ (+b), xn·Wvᵀ (+b); q/k norm; RoPE of the layer's kind
//   attend    dense (causal, or in the sliding window), the oracle's supports, or an indexer's
//   attn_out  x += [RMSNorm]((a [· sigmoid(xn·Wgᵀ)])·Woᵀ (+b))
//   linear_attn  x += Gated DeltaNet(xn): projections, causal conv + SiLU, gates,
//            the chunked gated delta rule, gated RMSNorm, out_proj
//   mlp       x += [RMSNorm](Wdown·(act(xn·Wgateᵀ) ⊙ xn·Wupᵀ)), xn = RMSNorm(x)·mlp_norm
//   moe       x += routed experts(xn) + sigmoid(xn·w_sgᵀ) · shared expert(xn)
#include "forward.h"

#include <math.h>
#include <omp.h>
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
    float *agate;                // [T, Hq·dh] the attention output gate's logits (attn_out_gate)
    float *lin_x, *lin_c, *lin_q, *lin_k, *lin_v, *lin_z, *lin_a, *lin_b, *lin_o;  // Gated DeltaNet scratch
    float *moe_logits, *moe_wt, *moe_y, *moe_sg;  // router logits [T, E], top-k weights [T, k],
                                                  // routed output [T, H], shared-expert gate [T]
    int *moe_idx;                // top-k experts [T, k]
    float *cos_t[2], *sin_t[2];  // RoPE tables of full (0) and sliding (1) layers
    int own_tables;              // 0: the tables are rows of a decoding cache's
    int pos0;                    // the pass's first position (a decoding cache's len, else 0)
    int *sel, *n_sel;            // indexer supports [rows, topk] and their sizes
    SparseStats stats;           // the pass's recall / support sums (o->stats or none)
    SparseStats *stats_out;      // o->stats (its union sums are added to directly)
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
    size_t inter = (size_t)c->intermediate;  // room for the dense MLP and the shared expert
    if ((size_t)c->moe.shared_intermediate > inter) inter = (size_t)c->moe.shared_intermediate;
    p->gate = xmalloc(sizeof(float) * TT * inter);
    p->up = xmalloc(sizeof(float) * TT * inter);
    if (c->attn_out_gate) p->agate = xmalloc(sizeof(float) * TT * nq);
    int n_lin = 0;
    for (int l = 0; l < c->n_layers; l++) n_lin += c->layer_kinds[l] == LAYER_LINEAR_ATTENTION;
    if (n_lin) {
        const LinearAttnConfig *la = &c->lin;
        const size_t kd = (size_t)la->n_k_heads * la->k_dim, vd = (size_t)la->n_v_heads * la->v_dim;
        p->lin_x = xmalloc(sizeof(float) * TT * (2 * kd + vd));
        p->lin_c = xmalloc(sizeof(float) * TT * (2 * kd + vd));
        p->lin_q = xmalloc(sizeof(float) * TT * kd);
        p->lin_k = xmalloc(sizeof(float) * TT * kd);
        p->lin_v = xmalloc(sizeof(float) * TT * vd);
        p->lin_z = xmalloc(sizeof(float) * TT * vd);
        p->lin_o = xmalloc(sizeof(float) * TT * vd);
        p->lin_a = xmalloc(sizeof(float) * TT * la->n_v_heads);
        p->lin_b = xmalloc(sizeof(float) * TT * la->n_v_heads);
    }
    if (c->layer_moe) {
        p->moe_logits = xmalloc(sizeof(float) * TT * c->moe.n_experts);
        p->moe_wt = xmalloc(sizeof(float) * TT * c->moe.top_k);
        p->moe_idx = xmalloc(sizeof(int) * TT * c->moe.top_k);
        p->moe_y = xmalloc(sizeof(float) * TT * H);
        p->moe_sg = xmalloc(sizeof(float) * TT);
    }
    if (o->tap && !o->sparse) p->lse = xmalloc(sizeof(float) * TT * c->n_heads);
    const size_t half = (size_t)(rope_rot_dims(c) / 2);
    SPINDLE_CHECK(!o->kv || !o->kv->device);  // a GPU cache belongs to the CUDA twin
    p->own_tables = !o->kv;
    p->pos0 = o->kv ? o->kv->len : 0;
    for (int kind = 0; kind < (c->sliding_window ? 2 : 1); kind++) {  // sliding tables only where layers slide
        if (o->kv) {  // positions pos0.. of the cache's tables
            p->cos_t[kind] = o->kv->cos_t[kind] + (size_t)p->pos0 * half;
            p->sin_t[kind] = o->kv->sin_t[kind] + (size_t)p->pos0 * half;
            continue;
        }
        p->cos_t[kind] = xmalloc(sizeof(float) * (TT * half + 1));
        p->sin_t[kind] = xmalloc(sizeof(float) * (TT * half + 1));
        rope_tables_kind(c, kind ? LAYER_SLIDING_ATTENTION : LAYER_FULL_ATTENTION, T, p->cos_t[kind],
                         p->sin_t[kind]);
    }
    const Sparsity *sp = o->sparse;
    int sel_k = 0;  // the largest support an indexer layer selects (k < T; per-layer budgets differ)
    for (int l = 0; sp && o->indexer && l < c->n_layers; l++) {
        const int kl = sparsity_topk(sp, l);
        if (kl < T && kl > sel_k) sel_k = kl;
    }
    if (sel_k > 0) {
        const size_t rows = (size_t)sparsity_rows(sp, T);
        p->sel = xmalloc(sizeof(int) * rows * (size_t)sel_k);
        p->n_sel = xmalloc(sizeof(int) * rows);
    }
    if (sp && o->stats) p->stats = *o->stats, p->stats_out = o->stats;
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
    if (w->wq_gate) matmul_forward_cpu(p->agate, p->xn, w->wq_gate, w->bq_gate, p->T, c->hidden, c->n_heads * c->head_dim);
}

static void cpu_attend(void *tw, int l, const AttendPlan *a) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    const int T = p->T, Hq = c->n_heads, Hkv = c->n_kv_heads, dh = c->head_dim;
    const float s = (float)c->attn_scale;
    float *rec = a->stats ? p->stats.recall : NULL, *sup = a->stats ? p->stats.support : NULL;
    SupportUnion un = {a->stats && p->stats_out ? p->stats_out->union_bsel : 0, 0, 0};
    SupportUnion *u = un.bsel > 0 && (a->bsel == 1 || a->refine > 0) ? &un : NULL;  // per-query supports
    // Per-layer sums: this layer's additions to the per-position sums.
    double *lrec = a->stats && p->stats_out && rec ? p->stats_out->layer_recall : NULL;
    double *lsup = a->stats && p->stats_out && sup ? p->stats_out->layer_support : NULL;
    double rec0 = 0, sup0 = 0;
    for (int t = 0; (lrec || lsup) && t < T; t++) rec0 += lrec ? rec[t] : 0, sup0 += lsup ? sup[t] : 0;
    if (a->mode == ATTEND_INDEXER && a->refine > 0) {  // two-stage: per-query rows from the block's candidates
        indexer_select_refined_cpu(p->sel, p->n_sel, a->ix_cfg, a->ix_params, p->xn, T, a->topk, a->bsel, a->refine);
        hybrid_attention_cpu(p->att, rec, sup, p->q, p->k, p->v, T, Hq, Hkv, dh, s, a->topk, 1, a->recent, a->sinks,
                             p->sel, p->n_sel, u);
    } else if (a->mode == ATTEND_INDEXER) {
        indexer_select_cpu(p->sel, p->n_sel, a->ix_cfg, a->ix_params, p->xn, T, a->topk, a->bsel);
        hybrid_attention_cpu(p->att, rec, sup, p->q, p->k, p->v, T, Hq, Hkv, dh, s, a->topk, a->bsel, a->recent,
                             a->sinks, p->sel, p->n_sel, u);
    } else if (a->mode == ATTEND_ORACLE) {
        hybrid_attention_cpu(p->att, rec, sup, p->q, p->k, p->v, T, Hq, Hkv, dh, s, a->topk, a->bsel, a->recent,
                             a->sinks, NULL, NULL, u);
    } else {
        attention_forward_cpu(p->att, a->lse ? p->lse : NULL, p->q, p->k, p->v, T, Hq, Hkv, dh, s, a->window);
    }
    if (u) p->stats_out->union_keys += un.keys, p->stats_out->union_blocks += un.blocks;
    if (lrec || lsup) {
        double rec1 = 0, sup1 = 0;
        for (int t = 0; t < T; t++) rec1 += lrec ? rec[t] : 0, sup1 += lsup ? sup[t] : 0;
        if (lrec) lrec[l] += rec1 - rec0;
        if (lsup) lsup[l] += sup1 - sup0;
    }
}

static void cpu_kv_store(void *tw, int l, KvCache *kv) {
    CpuPass *p = tw;
    const size_t row = (size_t)kv->nkv, at = (size_t)kv->len * row, n = (size_t)p->T * row;
    memcpy(kv->k[l] + at, p->k, sizeof(float) * n);
    memcpy(kv->v[l] + at, p->v, sizeof(float) * n);
}

static void cpu_kv_attend(void *tw, int l, const AttendPlan *a, const KvCache *kv) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    attention_cached_cpu(p->att, p->q, kv->k[l], kv->v[l], kv->len, p->T, c->n_heads, c->n_kv_heads, c->head_dim,
                         (float)c->attn_scale, a->window);
}

static void cpu_tap(void *tw, int l, const ForwardTap *tap) {
    CpuPass *p = tw;
    const unsigned w = tap->wants & TAP_ALL ? tap->wants & TAP_ALL : TAP_ALL;
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
    if (w->wq_gate) sigmoid_mul_cpu(p->att, p->agate, (int64_t)p->T * c->n_heads * c->head_dim);
    matmul_forward_cpu(p->xn, p->att, w->wo, w->bo, p->T, c->n_heads * c->head_dim, c->hidden);
    add_block(p, w->post_attn_norm);
}

// Columns [c0, c0 + n) of x [T, C] into dst [T, n].
static void take_cols(float *dst, const float *x, int T, int C, int c0, int n) {
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * n, x + (size_t)t * C + c0, sizeof(float) * (size_t)n);
}

static void cpu_linear_attn(void *tw, int l) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    const LayerWeights *w = &p->m->layers[l];
    const LinearAttnConfig *la = &c->lin;
    const int T = p->T, H = c->hidden, Hk = la->n_k_heads, Hv = la->n_v_heads, dk = la->k_dim, dv = la->v_dim;
    const int kd = Hk * dk, vd = Hv * dv, C = 2 * kd + vd;
    matmul_forward_cpu(p->lin_x, p->xn, w->lin_qkv, NULL, T, H, C);
    matmul_forward_cpu(p->lin_z, p->xn, w->lin_z, NULL, T, H, vd);
    matmul_forward_cpu(p->lin_b, p->xn, w->lin_b, NULL, T, H, Hv);
    matmul_forward_cpu(p->lin_a, p->xn, w->lin_a, NULL, T, H, Hv);
    causal_conv1d_cpu(p->lin_c, p->lin_x, w->lin_conv, NULL, T, C, la->conv_kernel, 1);
    take_cols(p->lin_q, p->lin_c, T, C, 0, kd);
    take_cols(p->lin_k, p->lin_c, T, C, kd, kd);
    take_cols(p->lin_v, p->lin_c, T, C, 2 * kd, vd);
    deltanet_gates_cpu(p->lin_a, p->lin_b, p->lin_a, p->lin_b, w->lin_a_log, w->lin_dt_bias, T, Hv);
    gated_delta_rule_chunked_cpu(p->lin_o, NULL, p->lin_q, p->lin_k, p->lin_v, p->lin_a, p->lin_b, NULL, T, Hk, Hv,
                                 dk, dv, 0, 1, 64);
    gated_rmsnorm_cpu(p->lin_o, p->lin_o, p->lin_z, w->lin_norm, T * Hv, dv, (float)c->rms_eps);
    matmul_forward_cpu(p->xn, p->lin_o, w->lin_out, NULL, T, vd, H);
    add_block(p, NULL);
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

static void cpu_moe(void *tw, int l) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    const LayerWeights *w = &p->m->layers[l];
    const MoeConfig *mo = &c->moe;
    const int T = p->T, H = c->hidden, E = mo->n_experts, k = mo->top_k, Is = mo->shared_intermediate;
    rmsnorm_forward_cpu(p->xn, p->out, w->mlp_norm, T, H, (float)c->rms_eps);
    matmul_forward_cpu(p->moe_logits, p->xn, w->moe_router, NULL, T, H, E);
    moe_route_cpu(p->moe_idx, p->moe_wt, p->moe_logits, T, E, k, mo->norm_topk_prob);
    moe_experts_cpu(p->moe_y, p->xn, p->moe_idx, p->moe_wt, w->exp_gate, w->exp_up, w->exp_down, T, H, E,
                    mo->intermediate, k, c->act);
    if (Is > 0) {  // + sigmoid(xn·w_sgᵀ) · shared expert(xn)
        matmul_forward_cpu(p->moe_sg, p->xn, w->sh_expert_gate, NULL, T, H, 1);
        matmul_forward_cpu(p->gate, p->xn, w->sh_gate, NULL, T, H, Is);
        matmul_forward_cpu(p->up, p->xn, w->sh_up, NULL, T, H, Is);
        glu_forward_cpu(p->gate, p->gate, p->up, (int64_t)T * Is, c->act);
        matmul_forward_cpu(p->xn, p->gate, w->sh_down, NULL, T, Is, H);
        sigmoid_scale_rows_cpu(p->xn, p->moe_sg, T, H);
        for (size_t i = 0; i < (size_t)T * H; i++) p->xn[i] += p->moe_y[i];
    } else {
        memcpy(p->xn, p->moe_y, sizeof(float) * (size_t)T * H);
    }
    add_block(p, w->post_mlp_norm);
}

static void cpu_finish(void *tw, int stopped, const ForwardOpts *o) {
    CpuPass *p = tw;
    const ModelConfig *c = &p->m->cfg;
    if (!stopped) rmsnorm_forward_cpu(p->out, p->out, p->m->final_norm, p->T, c->hidden, (float)c->rms_eps);
    free(p->xn), free(p->q), free(p->k), free(p->v), free(p->att), free(p->gate), free(p->up), free(p->lse);
    free(p->agate);
    free(p->lin_x), free(p->lin_c), free(p->lin_q), free(p->lin_k), free(p->lin_v), free(p->lin_z), free(p->lin_a);
    free(p->lin_b), free(p->lin_o);
    free(p->moe_logits), free(p->moe_wt), free(p->moe_y), free(p->moe_sg), free(p->moe_idx);
    for (int kind = 0; kind < 2 && p->own_tables; kind++) free(p->cos_t[kind]), free(p->sin_t[kind]);
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
    .linear_attn = cpu_linear_attn,
    .mlp = cpu_mlp,
    .moe = cpu_moe,
    .kv_store = cpu_kv_store,
    .kv_attend = cpu_kv_attend,
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

int kvcache_check(const Model *m, Status *st) {
    const ModelConfig *c = &m->cfg;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_kinds[l] == LAYER_LINEAR_ATTENTION)
            return status_fail(st, "greedy decoding: layer %d is a linear-attention (Gated DeltaNet) layer, whose "
                                   "recurrent state the decoding cache does not carry; hybrid DeltaNet models "
                                   "cannot be decoded yet", l);
    return 0;
}

KvCache *kvcache_alloc(const Model *m, int max_len, void *(*alloc)(size_t bytes)) {
    const ModelConfig *c = &m->cfg;
    SPINDLE_CHECK(max_len > 0);
    KvCache *kv = xcalloc(1, sizeof *kv);
    kv->max_len = max_len;
    kv->n_layers = c->n_layers;
    kv->nkv = c->n_kv_heads * c->head_dim;
    kv->k = xcalloc((size_t)c->n_layers, sizeof *kv->k);
    kv->v = xcalloc((size_t)c->n_layers, sizeof *kv->v);
    for (int l = 0; l < c->n_layers; l++) {
        kv->k[l] = alloc(sizeof(float) * (size_t)max_len * kv->nkv);
        kv->v[l] = alloc(sizeof(float) * (size_t)max_len * kv->nkv);
    }
    return kv;
}

void kvcache_release(KvCache *kv, void (*release)(void *p)) {
    if (!kv) return;
    for (int l = 0; l < kv->n_layers; l++) release(kv->k[l]), release(kv->v[l]);
    free(kv->k), free(kv->v);
    for (int kind = 0; kind < 2; kind++) free(kv->cos_t[kind]), free(kv->sin_t[kind]);
    free(kv);
}

// xmalloc as a function (it is a macro that names the call site).
static void *host_alloc(size_t bytes) { return xmalloc(bytes); }

int kvcache_new(KvCache **out, const Model *m, int max_len, Status *st) {
    const ModelConfig *c = &m->cfg;
    *out = NULL;
    if (kvcache_check(m, st)) return -1;
    KvCache *kv = kvcache_alloc(m, max_len, host_alloc);
    const size_t half = (size_t)(rope_rot_dims(c) / 2);
    for (int kind = 0; kind < (c->sliding_window ? 2 : 1); kind++) {
        kv->cos_t[kind] = xmalloc(sizeof(float) * ((size_t)max_len * half + 1));
        kv->sin_t[kind] = xmalloc(sizeof(float) * ((size_t)max_len * half + 1));
        rope_tables_kind(c, kind ? LAYER_SLIDING_ATTENTION : LAYER_FULL_ATTENTION, max_len, kv->cos_t[kind],
                         kv->sin_t[kind]);
    }
    *out = kv;
    return 0;
}

void kvcache_free(KvCache *kv) {
    if (!kv) return;
    SPINDLE_CHECK(!kv->device);  // a GPU cache goes back through fwd_cuda_kvcache_free
    kvcache_release(kv, free);
}

// The lowest id of the largest logit.
static int32_t argmax_row(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

// One CPU pass of n tokens with opts; row = the last position's logits.
static void cpu_last_logits(void *ctx, const int32_t *ids, int n, const ForwardOpts *opts, float *row) {
    const Model *m = ctx;
    float *hidden = xmalloc(sizeof(float) * (size_t)n * m->cfg.hidden);
    forward_hidden(m, ids, n, hidden, opts);
    forward_lm_head(m, hidden + (size_t)(n - 1) * m->cfg.hidden, 1, row);
    free(hidden);
}

int generate_greedy(LastLogitsFn last_logits, void *ctx, KvCache *kv, int vocab, const int32_t *ids, int T,
                    const ForwardOpts *o, int max_new, const int32_t *stop, int n_stop, int32_t *out, float *logits,
                    GenTiming *tm) {
    ForwardOpts pre = o ? *o : (ForwardOpts){0};
    pre.kv = kv;
    pre.tap = NULL;
    pre.stop_after_tap = 0;
    ForwardProfile prof;
    const ForwardOpts step = {.kv = kv, .prof = tm && tm->profile_steps ? &prof : NULL};
    if (tm) tm->prefill_s = tm->decode_s = 0.0, tm->step = (ForwardProfile){0};
    float *row = xmalloc(sizeof(float) * (size_t)vocab);
    double t0 = omp_get_wtime();
    last_logits(ctx, ids, T, &pre, row);
    if (tm) tm->prefill_s = omp_get_wtime() - t0;
    t0 = omp_get_wtime();
    int n = 0;
    for (;;) {
        if (logits) memcpy(logits + (size_t)n * vocab, row, sizeof(float) * (size_t)vocab);
        const int32_t next = argmax_row(row, vocab);
        out[n++] = next;
        int stopped = 0;
        for (int i = 0; i < n_stop; i++) stopped |= next == stop[i];
        if (stopped || n == max_new) break;
        last_logits(ctx, &next, 1, &step, row);  // one dense cached step
        if (step.prof) {
            tm->step.gemm += prof.gemm, tm->step.attention += prof.attention, tm->step.linear += prof.linear;
            tm->step.other += prof.other, tm->step.lm_head += prof.lm_head;
        }
    }
    if (tm) tm->decode_s = omp_get_wtime() - t0;
    free(row);
    return n;
}

int forward_generate(const Model *m, const int32_t *ids, int T, const ForwardOpts *o, int max_new,
                     const int32_t *stop, int n_stop, int32_t *out, float *logits, GenTiming *tm, Status *st) {
    if (max_new <= 0 || T <= 0) return 0;
    KvCache *kv;
    if (kvcache_new(&kv, m, T + max_new, st)) return -1;
    const int n = generate_greedy(cpu_last_logits, (void *)m, kv, m->cfg.vocab, ids, T, o, max_new, stop, n_stop,
                                  out, logits, tm);
    kvcache_free(kv);
    return n;
}
