// model.c: see model.h. Every tensor's shape is checked against what
// config.json implies, so a checkpoint whose head counts disagree with its
// weights is refused with both numbers in the message.
#include "model.h"

#include <stdint.h>
#include <string.h>

#include "family.h"
#include "fileio.h"

// A Model-owned buffer of n floats, freed by model_free.
static float *owned_buf(Model *m, int64_t n) {
    float *buf = xmalloc((size_t)n * sizeof(float));
    m->owned = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *m->owned);
    SPINDLE_CHECK(m->owned);
    m->owned[m->n_owned++] = buf;
    return buf;
}

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
        const ModelConfig *c = &m->cfg;
        char extra[160] = "";
        if (c->lin.n_v_heads)
            snprintf(extra, sizeof extra, ", linear key/value heads %d/%d, linear head dims %d/%d, conv %d",
                     c->lin.n_k_heads, c->lin.n_v_heads, c->lin.k_dim, c->lin.v_dim, c->lin.conv_kernel);
        if (c->moe.n_experts)
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", experts %d (FFN %d, shared %d)",
                     c->moe.n_experts, c->moe.intermediate, c->moe.shared_intermediate);
        return status_fail(st, "%s: \"%s\" has shape [%s] but config.json implies [%s] (hidden_size=%d, heads=%d, kv_heads=%d, head_dim=%d%s)",
                           st_path(&m->st, t), name, got, exp, c->hidden, c->n_heads, c->n_kv_heads, c->head_dim,
                           extra);
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return status_fail(st, "%s: \"%s\" has dtype %s (supported: F32, BF16, F16)", st_path(&m->st, t),
                           name, t->dtype_name);
    if (t->dtype == ST_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = (const float *)(const void *)t->data;
        return 0;
    }
    float *buf = owned_buf(m, t->numel);
    st_to_f32(t, buf);
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
    case ROLE_LIN_QKV: return &w->lin_qkv;
    case ROLE_LIN_Z: return &w->lin_z;
    case ROLE_LIN_B: return &w->lin_b;
    case ROLE_LIN_A: return &w->lin_a;
    case ROLE_LIN_QKVZ: case ROLE_LIN_BA: return NULL;  // split by split_fused into the four above
    case ROLE_LIN_CONV: return &w->lin_conv;
    case ROLE_LIN_A_LOG: return &w->lin_a_log;
    case ROLE_LIN_DT_BIAS: return &w->lin_dt_bias;
    case ROLE_LIN_NORM: return &w->lin_norm;
    case ROLE_LIN_OUT: return &w->lin_out;
    case ROLE_MOE_ROUTER: return &w->moe_router;
    case ROLE_SH_GATE: return &w->sh_gate;
    case ROLE_SH_UP: return &w->sh_up;
    case ROLE_SH_DOWN: return &w->sh_down;
    case ROLE_SH_EXPERT_GATE: return &w->sh_expert_gate;
    case ROLE_COUNT: break;
    }
    SPINDLE_CHECK(!"unknown layer role");
    return NULL;
}

// Whether config c has the role's tensor in layer l, and its shape.
static int role_shape(const ModelConfig *c, int l, LayerRole r, int64_t shape[3], int *ndim) {
    const int64_t H = c->hidden, I = c->intermediate, dh = c->head_dim;
    const int64_t nq = (int64_t)c->n_heads * dh, nkv = (int64_t)c->n_kv_heads * dh;
    const LinearAttnConfig *la = &c->lin;
    const int64_t kd = (int64_t)la->n_k_heads * la->k_dim, vd = (int64_t)la->n_v_heads * la->v_dim;
    const int lin = c->layer_kinds[l] == LAYER_LINEAR_ATTENTION, attn = !lin;
    const int moe = c->layer_moe && c->layer_moe[l], shared = moe && c->moe.shared_intermediate > 0;
    const int64_t Ish = c->moe.shared_intermediate;
    int on = 1;
    *ndim = 1;
    switch (r) {
    case ROLE_ATTN_NORM: case ROLE_MLP_NORM: shape[0] = H; break;
    case ROLE_POST_ATTN_NORM: case ROLE_POST_MLP_NORM: shape[0] = H, on = c->post_norms; break;
    case ROLE_WQ: *ndim = 2, shape[0] = nq * (c->attn_out_gate ? 2 : 1), shape[1] = H, on = attn; break;
    case ROLE_WK: case ROLE_WV: *ndim = 2, shape[0] = nkv, shape[1] = H, on = attn; break;
    case ROLE_WO: *ndim = 2, shape[0] = H, shape[1] = nq, on = attn; break;
    case ROLE_BQ: shape[0] = nq * (c->attn_out_gate ? 2 : 1), on = attn && c->attention_bias; break;
    case ROLE_BK: case ROLE_BV: shape[0] = nkv, on = attn && c->attention_bias; break;
    case ROLE_BO: shape[0] = H, on = attn && c->o_bias; break;
    case ROLE_Q_NORM: case ROLE_K_NORM: shape[0] = dh, on = attn && c->qk_norm; break;
    case ROLE_W_GATE: case ROLE_W_UP: *ndim = 2, shape[0] = I, shape[1] = H, on = !moe; break;
    case ROLE_W_DOWN: *ndim = 2, shape[0] = H, shape[1] = I, on = !moe; break;
    case ROLE_B_GATE: case ROLE_B_UP: shape[0] = I, on = !moe && c->mlp_bias; break;
    case ROLE_B_DOWN: shape[0] = H, on = !moe && c->mlp_bias; break;
    case ROLE_LIN_QKV: *ndim = 2, shape[0] = 2 * kd + vd, shape[1] = H, on = lin && !la->fused_proj; break;
    case ROLE_LIN_Z: *ndim = 2, shape[0] = vd, shape[1] = H, on = lin && !la->fused_proj; break;
    case ROLE_LIN_B: case ROLE_LIN_A: *ndim = 2, shape[0] = la->n_v_heads, shape[1] = H, on = lin && !la->fused_proj; break;
    case ROLE_LIN_QKVZ: *ndim = 2, shape[0] = 2 * kd + 2 * vd, shape[1] = H, on = lin && la->fused_proj; break;
    case ROLE_LIN_BA: *ndim = 2, shape[0] = 2 * (int64_t)la->n_v_heads, shape[1] = H, on = lin && la->fused_proj; break;
    case ROLE_LIN_CONV: *ndim = 3, shape[0] = 2 * kd + vd, shape[1] = 1, shape[2] = la->conv_kernel, on = lin; break;
    case ROLE_LIN_A_LOG: case ROLE_LIN_DT_BIAS: shape[0] = la->n_v_heads, on = lin; break;
    case ROLE_LIN_NORM: shape[0] = la->v_dim, on = lin; break;
    case ROLE_LIN_OUT: *ndim = 2, shape[0] = H, shape[1] = vd, on = lin; break;
    case ROLE_MOE_ROUTER: *ndim = 2, shape[0] = c->moe.n_experts, shape[1] = H, on = moe; break;
    case ROLE_SH_GATE: case ROLE_SH_UP: *ndim = 2, shape[0] = Ish, shape[1] = H, on = shared; break;
    case ROLE_SH_DOWN: *ndim = 2, shape[0] = H, shape[1] = Ish, on = shared; break;
    case ROLE_SH_EXPERT_GATE: *ndim = 2, shape[0] = 1, shape[1] = H, on = shared; break;
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
    float *buf = owned_buf(m, n);
    for (int64_t i = 0; i < n; i++) buf[i] = 1.0f + (*w)[i];
    *w = buf;
}

// Qwen3-Next's fused DeltaNet projections, grouped per key head g (Hk groups,
// r = Hv / Hk value heads each): qkvz rows [q_g (dk) | k_g (dk) | v_g (r·dv) |
// z_g (r·dv)], ba rows [b_g (r) | a_g (r)] (fix_query_key_value_ordering). Split
// into w's lin_qkv = [q_0..q_{Hk−1} | k_0.. | v_0..], lin_z, lin_b, lin_a.
static void split_fused(Model *m, const ModelConfig *c, LayerWeights *w, const float *qkvz, const float *ba) {
    const LinearAttnConfig *la = &c->lin;
    const int64_t H = c->hidden, Hk = la->n_k_heads, r = la->n_v_heads / la->n_k_heads;
    const int64_t dk = la->k_dim, dv = la->v_dim, kd = Hk * dk, vd = Hk * r * dv, grp = 2 * dk + 2 * r * dv;
    float *qkv = owned_buf(m, (2 * kd + vd) * H), *z = owned_buf(m, vd * H);
    float *b = owned_buf(m, Hk * r * H), *a = owned_buf(m, Hk * r * H);
    const size_t row = sizeof(float) * (size_t)H;
    for (int64_t g = 0; g < Hk; g++) {
        const float *src = qkvz + g * grp * H;
        memcpy(qkv + g * dk * H, src, row * (size_t)dk);
        memcpy(qkv + (kd + g * dk) * H, src + dk * H, row * (size_t)dk);
        memcpy(qkv + (2 * kd + g * r * dv) * H, src + 2 * dk * H, row * (size_t)(r * dv));
        memcpy(z + g * r * dv * H, src + (2 * dk + r * dv) * H, row * (size_t)(r * dv));
        memcpy(b + g * r * H, ba + g * 2 * r * H, row * (size_t)r);
        memcpy(a + g * r * H, ba + (g * 2 * r + r) * H, row * (size_t)r);
    }
    w->lin_qkv = qkv, w->lin_z = z, w->lin_b = b, w->lin_a = a;
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

// A gated q_proj (attn_out_gate) holds per head h the rows [q_h (dh) | gate_h
// (dh)]: split into w->wq = [q_0 .. q_{Hq−1}] and w->wq_gate = [gate_0 ..], and
// the bias likewise, so each is one contiguous projection.
static void split_q_gate(Model *m, const ModelConfig *c, LayerWeights *w) {
    const int64_t Hq = c->n_heads, dh = c->head_dim, H = c->hidden;
    for (int bias = 0; bias < 2; bias++) {
        const float *src = bias ? w->bq : w->wq;
        if (!src) continue;
        const int64_t cols = bias ? 1 : H;
        float *q = owned_buf(m, Hq * dh * cols), *g = owned_buf(m, Hq * dh * cols);
        for (int64_t h = 0; h < Hq; h++) {
            memcpy(q + h * dh * cols, src + 2 * h * dh * cols, sizeof(float) * (size_t)(dh * cols));
            memcpy(g + h * dh * cols, src + (2 * h + 1) * dh * cols, sizeof(float) * (size_t)(dh * cols));
        }
        if (bias) w->bq = q, w->bq_gate = g;
        else w->wq = q, w->wq_gate = g;
    }
}

// The routed experts of layer l: the fused 3D tensors of transformers 5, else one
// tensor per expert and projection.
static int take_experts(Model *m, const FamilySpec *fam, int l, LayerWeights *w, NameWrap wrap, Status *st) {
    const ModelConfig *c = &m->cfg;
    const int64_t E = c->moe.n_experts, I = c->moe.intermediate, H = c->hidden;
    char name[256], full[300];
    w->exp_gate = xcalloc((size_t)E, sizeof *w->exp_gate);
    w->exp_up = xcalloc((size_t)E, sizeof *w->exp_up);
    w->exp_down = xcalloc((size_t)E, sizeof *w->exp_down);
    snprintf(name, sizeof name, "model.layers.%d.%s.gate_up_proj", l, fam->experts);
    if (st_find(&m->st, wrapped(full, sizeof full, name, wrap))) {
        const float *gu, *dn;
        if (take(m, full, 3, (const int64_t[]){E, 2 * I, H}, 0, &gu, st)) return -1;
        snprintf(name, sizeof name, "model.layers.%d.%s.down_proj", l, fam->experts);
        if (take(m, wrapped(full, sizeof full, name, wrap), 3, (const int64_t[]){E, H, I}, 0, &dn, st)) return -1;
        for (int64_t e = 0; e < E; e++) {
            w->exp_gate[e] = gu + e * 2 * I * H;
            w->exp_up[e] = gu + e * 2 * I * H + I * H;
            w->exp_down[e] = dn + e * H * I;
        }
        return 0;
    }
    static const char *const proj[3] = {"gate_proj", "up_proj", "down_proj"};
    for (int64_t e = 0; e < E; e++)
        for (int p = 0; p < 3; p++) {
            const float **dst = p == 0 ? &w->exp_gate[e] : p == 1 ? &w->exp_up[e] : &w->exp_down[e];
            snprintf(name, sizeof name, "model.layers.%d.%s.%lld.%s.weight", l, fam->experts, (long long)e, proj[p]);
            const int64_t *shape = p < 2 ? (const int64_t[]){I, H} : (const int64_t[]){H, I};
            if (take(m, wrapped(full, sizeof full, name, wrap), 2, shape, 0, dst, st)) return -1;
        }
    return 0;
}

// The order layers' tensors are looked up in (the first missing one is reported).
static const LayerRole load_order[] = {
    ROLE_ATTN_NORM, ROLE_MLP_NORM, ROLE_POST_ATTN_NORM, ROLE_POST_MLP_NORM, ROLE_WQ, ROLE_WK, ROLE_WV, ROLE_WO,
    ROLE_BQ, ROLE_BK, ROLE_BV, ROLE_BO, ROLE_Q_NORM, ROLE_K_NORM, ROLE_W_GATE, ROLE_W_UP, ROLE_W_DOWN,
    ROLE_B_GATE, ROLE_B_UP, ROLE_B_DOWN, ROLE_LIN_QKV, ROLE_LIN_Z, ROLE_LIN_B, ROLE_LIN_A, ROLE_LIN_QKVZ,
    ROLE_LIN_BA, ROLE_LIN_CONV, ROLE_LIN_A_LOG, ROLE_LIN_DT_BIAS, ROLE_LIN_NORM, ROLE_LIN_OUT, ROLE_MOE_ROUTER,
    ROLE_SH_GATE, ROLE_SH_UP, ROLE_SH_DOWN, ROLE_SH_EXPERT_GATE,
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
        LayerWeights *w = &m->layers[l];
        const float *qkvz = NULL, *ba = NULL;
        for (int i = 0; i < ROLE_COUNT; i++) {
            const LayerRole r = load_order[i];
            int64_t shape[3];
            int ndim;
            if (!role_shape(c, l, r, shape, &ndim)) continue;
            SPINDLE_CHECK(fam->layer[r]);  // the family names every tensor its config implies
            snprintf(name, sizeof name, "model.layers.%d.%s", l, fam->layer[r]);
            const float **dst = r == ROLE_LIN_QKVZ ? &qkvz : r == ROLE_LIN_BA ? &ba : role_slot(w, r);
            if (take(m, NAME(name), ndim, shape, 0, dst, st)) goto fail;
            if (fam->norm_plus_one && role_is_norm(r)) fold_plus_one(m, dst, shape[0]);
        }
        if (qkvz) split_fused(m, c, w, qkvz, ba);
        if (c->attn_out_gate && w->wq) split_q_gate(m, c, w);
        if (c->layer_moe && c->layer_moe[l]) {
            SPINDLE_CHECK(fam->experts);
            if (take_experts(m, fam, l, w, wrap, st)) goto fail;
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
    for (int l = 0; m->layers && l < m->cfg.n_layers; l++) {
        free((void *)m->layers[l].exp_gate);
        free((void *)m->layers[l].exp_up);
        free((void *)m->layers[l].exp_down);
    }
    free(m->layers);
    st_close(&m->st);
    config_free(&m->cfg);
    memset(m, 0, sizeof *m);
}
