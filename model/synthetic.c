// synthetic.c: see synthetic.h.
#include "synthetic.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "rng.h"

int synthetic_config(const char *name, ModelConfig *c) {
    memset(c, 0, sizeof *c);
    c->rope.type = ROPE_DEFAULT, c->rope.partial_rotary_factor = 1.0, c->rope.attention_factor = -1;
    if (!strcmp(name, "qwen3-8b")) {
        c->family = FAMILY_QWEN3, c->hidden = 4096, c->n_layers = 36, c->n_heads = 32, c->n_kv_heads = 8;
        c->head_dim = 128, c->intermediate = 12288, c->vocab = 151936, c->rms_eps = 1e-6, c->qk_norm = 1;
        c->rope.theta = 1e6, c->tie_embeddings = 0;
    } else if (!strcmp(name, "qwen3-1.7b")) {
        c->family = FAMILY_QWEN3, c->hidden = 2048, c->n_layers = 28, c->n_heads = 16, c->n_kv_heads = 8;
        c->head_dim = 128, c->intermediate = 6144, c->vocab = 151936, c->rms_eps = 1e-6, c->qk_norm = 1;
        c->rope.theta = 1e6, c->tie_embeddings = 1;
    } else if (!strcmp(name, "qwen2.5-1.5b")) {
        // Qwen2.5(-Coder)-1.5B's shape (docs/qwen25coder.md): Hq 12 / Hkv 2, so a KV group holds 6 query
        // heads. Its q/k/v biases are left out (no synthetic model has biases).
        c->family = FAMILY_QWEN2, c->hidden = 1536, c->n_layers = 28, c->n_heads = 12, c->n_kv_heads = 2;
        c->head_dim = 128, c->intermediate = 8960, c->vocab = 151936, c->rms_eps = 1e-6;
        c->rope.theta = 1e6, c->tie_embeddings = 0;
    } else if (!strcmp(name, "smollm2-135m")) {
        c->family = FAMILY_LLAMA, c->hidden = 576, c->n_layers = 30, c->n_heads = 9, c->n_kv_heads = 3;
        c->head_dim = 64, c->intermediate = 1536, c->vocab = 49152, c->rms_eps = 1e-5;
        c->rope.theta = 1e5, c->tie_embeddings = 1;
    } else if (!strcmp(name, "tiny")) {
        // A Qwen3-shaped model small enough for CPU tests (head_dim 64, which
        // every attention kernel of the GPU twin takes).
        c->family = FAMILY_QWEN3, c->hidden = 128, c->n_layers = 4, c->n_heads = 2, c->n_kv_heads = 1;
        c->head_dim = 64, c->intermediate = 256, c->vocab = 1024, c->rms_eps = 1e-6, c->qk_norm = 1;
        c->rope.theta = 1e4, c->tie_embeddings = 1;
    } else if (!strcmp(name, "qwen3.5-9b") || !strcmp(name, "qwen3.5-0.8b")) {
        // The hybrid of the source report: Gated DeltaNet layers with every 4th layer gated full
        // attention (d_h 256, partial RoPE 0.25, theta 1e7); 9B: Hq 16 / Hkv 4 and the rest as
        // transformers' Qwen3_5TextConfig defaults; 0.8B: Hq 8 / Hkv 2, hidden 1024, 24 layers.
        const int big = !strcmp(name, "qwen3.5-9b");
        c->family = FAMILY_QWEN3_5, c->hidden = big ? 4096 : 1024, c->n_layers = big ? 32 : 24;
        c->n_heads = big ? 16 : 8, c->n_kv_heads = big ? 4 : 2, c->head_dim = 256;
        c->intermediate = big ? 12288 : 3584, c->vocab = 248320, c->rms_eps = 1e-6, c->qk_norm = 1;
        c->attn_out_gate = 1, c->rope.theta = 1e7, c->rope.partial_rotary_factor = 0.25, c->tie_embeddings = !big;
        c->lin.n_k_heads = 16, c->lin.n_v_heads = big ? 32 : 16, c->lin.k_dim = 128, c->lin.v_dim = 128;
        c->lin.conv_kernel = 4;
    } else
        return -1;
    snprintf(c->model_type, sizeof c->model_type, "%s",
             c->family == FAMILY_QWEN3     ? "qwen3"
             : c->family == FAMILY_QWEN2   ? "qwen2"
             : c->family == FAMILY_QWEN3_5 ? "qwen3_5_text"
                                           : "llama");
    c->max_pos = 1 << 20;
    c->attn_scale = 1.0 / sqrt((double)c->head_dim);
    c->act = ACT_SILU, c->embed_scale = 1.0f;  // a plain dense decoder, as config_load leaves one
    c->rope_local = c->rope;
    c->layer_kinds = xcalloc((size_t)c->n_layers, sizeof *c->layer_kinds);
    if (c->lin.n_v_heads) config_layer_kinds_periodic(c->layer_kinds, c->n_layers, 4, LAYER_LINEAR_ATTENTION);
    return 0;
}

// A host tensor of n floats owned by m: uniform(−a, a) with sd 0.02 for a
// matrix, 1 for a norm gain; stream `seed` advanced once per tensor.
static const float *fill(Model *m, int64_t n, int norm, uint64_t *seed) {
    float *x = xmalloc(sizeof(float) * (size_t)n);
    uint64_t s = rng_next(seed);
    const float a = 0.02f * 1.7320508f;  // uniform(−a, a) has sd a/√3
    for (int64_t i = 0; i < n; i++) x[i] = norm ? 1.0f : (float)(-a + 2.0 * a * rng_uniform(&s));
    m->owned = realloc(m->owned, sizeof(float *) * (size_t)(m->n_owned + 1));
    SPINDLE_CHECK(m->owned);
    m->owned[m->n_owned++] = x;
    m->n_params += n;
    return x;
}

int synthetic_model(Model *m, const char *name, uint64_t seed, int host_weights, Status *st) {
    memset(m, 0, sizeof *m);
    if (synthetic_config(name, &m->cfg)) return status_fail(st, "--synthetic: no model named \"%s\" (%s)", name, SYNTHETIC_ALL_NAMES);
    if (!host_weights) return 0;
    ModelConfig *c = &m->cfg;
    const int64_t D = c->hidden, qd = (int64_t)c->n_heads * c->head_dim, kd = (int64_t)c->n_kv_heads * c->head_dim;
    const int64_t per_layer = 2 * D + 2 * qd * D + 2 * kd * D + 3 * (int64_t)c->intermediate * D +
                              (c->qk_norm ? 2 * c->head_dim : 0);
    const int64_t total = (int64_t)c->vocab * D * (c->tie_embeddings ? 1 : 2) + D + per_layer * c->n_layers;
    if (c->lin.n_v_heads || c->moe.n_experts || total > SYNTHETIC_MAX_HOST_PARAMS) {
        config_free(c);
        memset(m, 0, sizeof *m);
        return status_fail(st, "--synthetic %s: the CPU twin builds dense models of at most %d parameters (this one: "
                           "%" PRId64 "%s); use --device cuda", name, SYNTHETIC_MAX_HOST_PARAMS, total,
                           c->lin.n_v_heads ? ", with Gated DeltaNet layers" : "");
    }
    uint64_t s = seed;
    m->embed = fill(m, (int64_t)c->vocab * D, 0, &s);
    m->layers = xcalloc((size_t)c->n_layers, sizeof *m->layers);
    for (int l = 0; l < c->n_layers; l++) {
        LayerWeights *w = &m->layers[l];
        w->attn_norm = fill(m, D, 1, &s);
        w->wq = fill(m, qd * D, 0, &s);
        w->wk = fill(m, kd * D, 0, &s);
        w->wv = fill(m, kd * D, 0, &s);
        w->wo = fill(m, D * qd, 0, &s);
        if (c->qk_norm) w->q_norm = fill(m, c->head_dim, 1, &s), w->k_norm = fill(m, c->head_dim, 1, &s);
        w->mlp_norm = fill(m, D, 1, &s);
        w->w_gate = fill(m, (int64_t)c->intermediate * D, 0, &s);
        w->w_up = fill(m, (int64_t)c->intermediate * D, 0, &s);
        w->w_down = fill(m, D * c->intermediate, 0, &s);
    }
    m->final_norm = fill(m, D, 1, &s);
    m->lm_head = c->tie_embeddings ? m->embed : fill(m, (int64_t)c->vocab * D, 0, &s);
    return 0;
}

void synthetic_fingerprint(char out[65], const char *name, uint64_t seed) {
    snprintf(out, 65, "synthetic:%.32s:%" PRIu64, name, seed);
}
