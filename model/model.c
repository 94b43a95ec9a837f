// model.c: see model.h. Every tensor's shape is checked against what
// config.json implies, so a checkpoint whose head counts disagree with its
// weights is refused with both numbers in the message.
#include "model.h"

#include <stdint.h>
#include <string.h>

#include "family.h"
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

// The LayerWeights slot of a role.
static const float **role_slot(LayerWeights *w, LayerRole r) {
    switch (r) {
    case ROLE_ATTN_NORM: return &w->attn_norm;
    case ROLE_POST_ATTN_NORM: return &w->post_attn_norm;
    case ROLE_MLP_NORM: return &w->mlp_norm;
    case ROLE_POST_MLP_NORM: return &w->post_mlp_norm;
    case ROLE_WQ: return &w->wq;
    case ROLE_BQ: return &w->bq;
    case ROLE_WK: return &w->wk;
    case ROLE_BK: return &w->bk;
    case ROLE_WV: return &w->wv;
    case ROLE_BV: return &w->bv;
    case ROLE_WO: return &w->wo;
    case ROLE_BO: return &w->bo;
    case ROLE_Q_NORM: return &w->q_norm;
    case ROLE_K_NORM: return &w->k_norm;
    case ROLE_W_GATE: return &w->w_gate;
    case ROLE_B_GATE: return &w->b_gate;
    case ROLE_W_UP: return &w->w_up;
    case ROLE_B_UP: return &w->b_up;
    case ROLE_W_DOWN: return &w->w_down;
    case ROLE_B_DOWN: return &w->b_down;
    case ROLE_COUNT: break;
    }
    SPINDLE_CHECK(!"unknown layer role");
    return NULL;
}

// Whether config c has the role's tensor in every layer, and its shape.
static int role_shape(const ModelConfig *c, LayerRole r, int64_t shape[2], int *ndim) {
    const int64_t H = c->hidden, I = c->intermediate, dh = c->head_dim;
    const int64_t nq = (int64_t)c->n_heads * dh, nkv = (int64_t)c->n_kv_heads * dh;
    int on = 1;
    *ndim = 1;
    switch (r) {
    case ROLE_ATTN_NORM: case ROLE_MLP_NORM: shape[0] = H; break;
    case ROLE_POST_ATTN_NORM: case ROLE_POST_MLP_NORM: shape[0] = H, on = c->post_norms; break;
    case ROLE_WQ: *ndim = 2, shape[0] = nq, shape[1] = H; break;
    case ROLE_WK: case ROLE_WV: *ndim = 2, shape[0] = nkv, shape[1] = H; break;
    case ROLE_WO: *ndim = 2, shape[0] = H, shape[1] = nq; break;
    case ROLE_BQ: shape[0] = nq, on = c->attention_bias; break;
    case ROLE_BK: case ROLE_BV: shape[0] = nkv, on = c->attention_bias; break;
    case ROLE_BO: shape[0] = H, on = c->o_bias; break;
    case ROLE_Q_NORM: case ROLE_K_NORM: shape[0] = dh, on = c->qk_norm; break;
    case ROLE_W_GATE: case ROLE_W_UP: *ndim = 2, shape[0] = I, shape[1] = H; break;
    case ROLE_W_DOWN: *ndim = 2, shape[0] = H, shape[1] = I; break;
    case ROLE_B_GATE: case ROLE_B_UP: shape[0] = I, on = c->mlp_bias; break;
    case ROLE_B_DOWN: shape[0] = H, on = c->mlp_bias; break;
    case ROLE_COUNT: SPINDLE_CHECK(!"unknown layer role");
    }
    return on;
}

static int role_is_norm(LayerRole r) {
    return r == ROLE_ATTN_NORM || r == ROLE_POST_ATTN_NORM || r == ROLE_MLP_NORM || r == ROLE_POST_MLP_NORM ||
           r == ROLE_Q_NORM || r == ROLE_K_NORM;
}

// *w (n floats) replaced by a Model-owned copy holding 1 + w (fp32, as the
// family's norm computes it).
static void fold_plus_one(Model *m, const float **w, int64_t n) {
    float *buf = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) buf[i] = 1.0f + (*w)[i];
    m->owned = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *m->owned);
    SPINDLE_CHECK(m->owned);
    m->owned[m->n_owned++] = buf;
    *w = buf;
}

// How a checkpoint names the decoder's tensors: as the family does ("model.…",
// "lm_head.weight"), or wrapped in a multimodal model (Gemma 3's
// ForConditionalGeneration) as transformers ≥ 4.52 saves it ("model." becomes
// "model.language_model."; lm_head unchanged) or as older versions did (every
// name under "language_model.").
typedef enum { WRAP_NONE, WRAP_MODEL_LANGUAGE_MODEL, WRAP_LANGUAGE_MODEL } NameWrap;

static const char *wrapped(char *buf, size_t n, const char *name, NameWrap wrap) {
    if (wrap == WRAP_LANGUAGE_MODEL) snprintf(buf, n, "language_model.%s", name);
    else if (wrap == WRAP_MODEL_LANGUAGE_MODEL && !strncmp(name, "model.", 6))
        snprintf(buf, n, "model.language_model.%s", name + 6);
    else snprintf(buf, n, "%s", name);
    return buf;
}

// The order layers' tensors are looked up in (the first missing one is reported).
static const LayerRole load_order[] = {
    ROLE_ATTN_NORM, ROLE_MLP_NORM, ROLE_POST_ATTN_NORM, ROLE_POST_MLP_NORM, ROLE_WQ, ROLE_WK, ROLE_WV, ROLE_WO,
    ROLE_BQ, ROLE_BK, ROLE_BV, ROLE_BO, ROLE_Q_NORM, ROLE_K_NORM, ROLE_W_GATE, ROLE_W_UP, ROLE_W_DOWN,
    ROLE_B_GATE, ROLE_B_UP, ROLE_B_DOWN,
};
_Static_assert(sizeof load_order / sizeof load_order[0] == ROLE_COUNT, "load_order lists every role once");

int model_load(Model *m, const char *dir, Status *st) {
    memset(m, 0, sizeof *m);
    if (!path_is_dir(dir)) return status_fail(st, "%s: no such model folder", dir);
    if (config_load(&m->cfg, dir, st)) return -1;
    if (st_open(&m->st, dir, st)) goto fail;
    const ModelConfig *c = &m->cfg;
    const FamilySpec *fam = family_of(c->family);
    const int64_t H = c->hidden, V = c->vocab;
    char name[256], full[300];
    NameWrap wrap = WRAP_NONE;
    for (int w = WRAP_MODEL_LANGUAGE_MODEL; w <= WRAP_LANGUAGE_MODEL && wrap == WRAP_NONE && !st_find(&m->st, fam->embed); w++)
        if (st_find(&m->st, wrapped(full, sizeof full, fam->embed, (NameWrap)w))) wrap = (NameWrap)w;
#define NAME(n) wrapped(full, sizeof full, n, wrap)

    if (take(m, NAME(fam->embed), 2, (const int64_t[]){V, H}, 0, &m->embed, st)) goto fail;
    if (take(m, NAME(fam->final_norm), 1, (const int64_t[]){H}, 0, &m->final_norm, st)) goto fail;
    if (fam->norm_plus_one) fold_plus_one(m, &m->final_norm, H);
    if (take(m, NAME(fam->lm_head), 2, (const int64_t[]){V, H}, c->tie_embeddings, &m->lm_head, st)) goto fail;
    if (!m->lm_head) m->lm_head = m->embed;

    m->layers = xcalloc((size_t)c->n_layers, sizeof *m->layers);
    for (int l = 0; l < c->n_layers; l++) {
        for (int i = 0; i < ROLE_COUNT; i++) {
            const LayerRole r = load_order[i];
            int64_t shape[2];
            int ndim;
            if (!role_shape(c, r, shape, &ndim)) continue;
            SPINDLE_CHECK(fam->layer[r]);  // the family names every tensor its config implies
            snprintf(name, sizeof name, "model.layers.%d.%s", l, fam->layer[r]);
            const float **dst = role_slot(&m->layers[l], r);
            if (take(m, NAME(name), ndim, shape, 0, dst, st)) goto fail;
            if (fam->norm_plus_one && role_is_norm(r)) fold_plus_one(m, dst, shape[0]);
        }
    }
#undef NAME
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
