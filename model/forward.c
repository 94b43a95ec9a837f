// forward.c: see forward.h. One decoder layer, as transformers runs it:
//   xn = RMSNorm(x);  q, k, v = xn·Wqᵀ (+b), xn·Wkᵀ (+b), xn·Wvᵀ (+b)
//   [qwen3] q, k = per-head RMSNorm(q), RMSNorm(k);  q, k = RoPE(q), RoPE(k)
//   x += Attention(q, k, v)·Woᵀ (+b)      (dense, or over the oracle's support)
//   x += Wdown·(silu(xn2·Wgateᵀ) ⊙ xn2·Wupᵀ), xn2 = RMSNorm(x)
#include "forward.h"

#include <omp.h>
#include <string.h>

#include "indexer.h"
#include "indexer_ops.h"
#include "ops.h"
#include "rope.h"

#define TIMED(slot, stmt)                         \
    do {                                          \
        double t0_ = omp_get_wtime();             \
        stmt;                                     \
        if (prof) prof->slot += omp_get_wtime() - t0_; \
    } while (0)

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

void forward_hidden(const Model *m, const int32_t *ids, int T, float *hidden, const ForwardOpts *o) {
    static const ForwardOpts none = {0};
    if (!o) o = &none;
    const Sparsity *sp = o->sparse;
    SparseStats *stats = o->stats;
    ForwardProfile *prof = o->prof;
    const ModelConfig *c = &m->cfg;
    const int H = c->hidden, I = c->intermediate, dh = c->head_dim;
    const int Hq = c->n_heads, Hkv = c->n_kv_heads, nq = Hq * dh, nkv = Hkv * dh;
    const int rot = rope_rot_dims(c);
    const float eps = (float)c->rms_eps;
    if (prof) memset(prof, 0, sizeof *prof);

    float *x = hidden;  // the residual stream lives in the output buffer
    float *xn = xmalloc(sizeof(float) * (size_t)T * H);
    float *q = xmalloc(sizeof(float) * (size_t)T * nq);
    float *k = xmalloc(sizeof(float) * (size_t)T * nkv);
    float *v = xmalloc(sizeof(float) * (size_t)T * nkv);
    float *att = xmalloc(sizeof(float) * (size_t)T * nq);
    float *gate = xmalloc(sizeof(float) * (size_t)T * I);
    float *up = xmalloc(sizeof(float) * (size_t)T * I);
    float *cos_t = xmalloc(sizeof(float) * (size_t)T * (rot / 2));
    float *sin_t = xmalloc(sizeof(float) * (size_t)T * (rot / 2));
    float *lse = o->tap && !sp ? xmalloc(sizeof(float) * (size_t)T * Hq) : NULL;  // only a tap reads it
    int *sel = NULL, *n_sel = NULL;  // indexer supports: [rows, topk] and their sizes
    if (sp && o->indexer && sp->topk < T) {
        const int rows = (T + sp->bsel - 1) / sp->bsel;
        sel = xmalloc(sizeof(int) * (size_t)rows * sp->topk);
        n_sel = xmalloc(sizeof(int) * (size_t)rows);
    }

    int n_dense_sparse = 0;  // layers left dense in a sparse pass (their stats: every key kept)
    double t_start = omp_get_wtime();
    rope_tables(c, T, cos_t, sin_t);
    for (int t = 0; t < T; t++) memcpy(x + (size_t)t * H, m->embed + (size_t)ids[t] * H, sizeof(float) * H);

    const int n_run = o->stop_after_tap > 0 && o->stop_after_tap < c->n_layers ? o->stop_after_tap : c->n_layers;
    int stopped = 0;
    for (int l = 0; l < n_run; l++) {
        const LayerWeights *w = &m->layers[l];
        rmsnorm_forward_cpu(xn, x, w->attn_norm, T, H, eps);
        TIMED(gemm, forward_layer_qk(m, l, xn, T, cos_t, sin_t, q, k));
        TIMED(gemm, matmul_forward_cpu(v, xn, w->wv, w->bv, T, H, nkv));
        float *rec = stats ? stats->recall : NULL, *sup = stats ? stats->support : NULL;
        const float *ip = sp && o->indexer ? o->indexer->params[l] : NULL;
        if (ip && sp->topk < T) {  // the trained indexer picks the support
            TIMED(attention, indexer_select_cpu(sel, n_sel, &o->indexer->cfg, ip, xn, T, sp->topk, sp->bsel));
            TIMED(attention, support_attention_cpu(att, rec, sup, q, k, v, T, Hq, Hkv, dh, (float)c->attn_scale,
                                                   sp->topk, sp->bsel, sel, n_sel));
        } else if (sp && (ip || !o->indexer))  // the oracle (k ≥ T: every key, i.e. dense exactly)
            TIMED(attention, oracle_attention_cpu(att, rec, sup, q, k, v, T, Hq, Hkv, dh, (float)c->attn_scale,
                                                  sp->topk, sp->bsel));
        else {
            TIMED(attention, attention_forward_cpu(att, lse, q, k, v, T, Hq, Hkv, dh, (float)c->attn_scale, 0));
            n_dense_sparse += sp != NULL;  // a layer without an indexer keeps every key
        }
        if (o->tap) o->tap->fn(o->tap->ctx, l, xn, q, k, sp ? NULL : lse, T);
        if (o->stop_after_tap > 0 && l + 1 >= o->stop_after_tap) {  // nothing downstream is wanted
            stopped = 1;
            break;
        }
        TIMED(gemm, matmul_forward_cpu(xn, att, w->wo, w->bo, T, nq, H));
        for (size_t i = 0; i < (size_t)T * H; i++) x[i] += xn[i];

        rmsnorm_forward_cpu(xn, x, w->mlp_norm, T, H, eps);
        TIMED(gemm, matmul_forward_cpu(gate, xn, w->w_gate, w->b_gate, T, H, I));
        TIMED(gemm, matmul_forward_cpu(up, xn, w->w_up, w->b_up, T, H, I));
        glu_forward_cpu(gate, gate, up, (int64_t)T * I, c->act);
        TIMED(gemm, matmul_forward_cpu(xn, gate, w->w_down, w->b_down, T, I, H));
        for (size_t i = 0; i < (size_t)T * H; i++) x[i] += xn[i];
    }
    if (!stopped) rmsnorm_forward_cpu(x, x, m->final_norm, T, H, eps);
    for (int t = 0; stats && n_dense_sparse && t < T; t++) {
        if (stats->recall) stats->recall[t] += (float)n_dense_sparse;
        if (stats->support) stats->support[t] += (float)n_dense_sparse * (float)(t + 1);
    }
    if (prof) prof->other = omp_get_wtime() - t_start - prof->gemm - prof->attention;

    free(xn), free(q), free(k), free(v), free(att), free(gate), free(up), free(cos_t), free(sin_t), free(lse), free(sel), free(n_sel);
}

void forward_lm_head(const Model *m, const float *hidden, int rows, float *logits) {
    matmul_forward_cpu(logits, hidden, m->lm_head, NULL, rows, m->cfg.hidden, m->cfg.vocab);
    if (m->cfg.final_softcap > 0)  // Gemma's final_logit_softcapping
        softcap_forward_cpu(logits, (int64_t)rows * m->cfg.vocab, (float)m->cfg.final_softcap);
}
