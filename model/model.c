// model.c: see model.h. Every tensor's shape is checked against what
// config.json implies, so a checkpoint whose head counts disagree with its
// weights is refused with both numbers in the message.
#include "model.h"

#include <stdint.h>
#include <string.h>

#include "fileio.h"

// Looks up name, checks its shape against want[0..ndim), and returns fp32 data.
static int take(Model *m, const char *name, int ndim, const int64_t *want, int optional,
                const float **out, Status *st) {
    *out = NULL;
    const StTensor *t = st_find(&m->st, name);
    if (!t) {
        if (optional) return 0;
        return status_fail(st, "%s: missing weight \"%s\"",
                           m->st.n_files ? m->st.files[0].path : "checkpoint", name);
    }
    int ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char got[128] = "", exp[128] = "";
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        for (int i = 0; i < ndim; i++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? ", " : "", (long long)want[i]);
        return status_fail(st, "%s: \"%s\" has shape [%s] but config.json implies [%s] (hidden_size=%d, heads=%d, kv_heads=%d, head_dim=%d)",
                           st_path(&m->st, t), name, got, exp, m->cfg.hidden, m->cfg.n_heads,
                           m->cfg.n_kv_heads, m->cfg.head_dim);
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return status_fail(st, "%s: \"%s\" has dtype %s (supported: F32, BF16, F16)", st_path(&m->st, t),
                           name, t->dtype_name);
    if (t->dtype == ST_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = (const float *)(const void *)t->data;
        return 0;
    }
    float *buf = xmalloc((size_t)t->numel * sizeof(float));
    st_to_f32(t, buf);
    m->owned = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *m->owned);
    SPINDLE_CHECK(m->owned);
    m->owned[m->n_owned++] = buf;
    *out = buf;
    return 0;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...) (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
#define TAKE(name, opt, dst, ...) \
    if (take(m, name, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), opt, dst, st)) goto fail

int model_load(Model *m, const char *dir, Status *st) {
    memset(m, 0, sizeof *m);
    if (!path_is_dir(dir)) return status_fail(st, "%s: no such model folder", dir);
    if (config_load(&m->cfg, dir, st)) return -1;
    if (st_open(&m->st, dir, st)) goto fail;
    const ModelConfig *c = &m->cfg;
    const int64_t H = c->hidden, I = c->intermediate, V = c->vocab, dh = c->head_dim;
    const int64_t nq = (int64_t)c->n_heads * dh, nkv = (int64_t)c->n_kv_heads * dh;
    char name[256];

    TAKE("model.embed_tokens.weight", 0, &m->embed, V, H);
    TAKE("model.norm.weight", 0, &m->final_norm, H);
    TAKE("lm_head.weight", c->tie_embeddings, &m->lm_head, V, H);
    if (!m->lm_head) m->lm_head = m->embed;

    m->layers = xcalloc((size_t)c->n_layers, sizeof *m->layers);
    for (int l = 0; l < c->n_layers; l++) {
        LayerWeights *w = &m->layers[l];
#define N(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), name)
        TAKE(N("input_layernorm.weight"), 0, &w->attn_norm, H);
        TAKE(N("post_attention_layernorm.weight"), 0, &w->mlp_norm, H);
        TAKE(N("self_attn.q_proj.weight"), 0, &w->wq, nq, H);
        TAKE(N("self_attn.k_proj.weight"), 0, &w->wk, nkv, H);
        TAKE(N("self_attn.v_proj.weight"), 0, &w->wv, nkv, H);
        TAKE(N("self_attn.o_proj.weight"), 0, &w->wo, H, nq);
        if (c->attention_bias) {
            TAKE(N("self_attn.q_proj.bias"), 0, &w->bq, nq);
            TAKE(N("self_attn.k_proj.bias"), 0, &w->bk, nkv);
            TAKE(N("self_attn.v_proj.bias"), 0, &w->bv, nkv);
        }
        if (c->o_bias) TAKE(N("self_attn.o_proj.bias"), 0, &w->bo, H);
        if (c->qk_norm) {
            TAKE(N("self_attn.q_norm.weight"), 0, &w->q_norm, dh);
            TAKE(N("self_attn.k_norm.weight"), 0, &w->k_norm, dh);
        }
        TAKE(N("mlp.gate_proj.weight"), 0, &w->w_gate, I, H);
        TAKE(N("mlp.up_proj.weight"), 0, &w->w_up, I, H);
        TAKE(N("mlp.down_proj.weight"), 0, &w->w_down, H, I);
        if (c->mlp_bias) {
            TAKE(N("mlp.gate_proj.bias"), 0, &w->b_gate, I);
            TAKE(N("mlp.up_proj.bias"), 0, &w->b_up, I);
            TAKE(N("mlp.down_proj.bias"), 0, &w->b_down, H);
        }
#undef N
    }
    for (int i = 0; i < m->st.n_tensors; i++) m->n_params += m->st.tensors[i].numel;
    return 0;
fail:
    model_free(m);
    return -1;
}

void model_free(Model *m) {
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    st_close(&m->st);
    config_free(&m->cfg);
    memset(m, 0, sizeof *m);
}
