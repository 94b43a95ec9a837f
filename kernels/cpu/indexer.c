// indexer.c: see indexer.h. Configuration, the flat parameter layout, seeded
// initialisation, and the per-token projections with their backward twins.
// Parameter gradients accumulate (+=); activation gradients are assigned (=).
#include "indexer.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "ops.h"
#include "rng.h"

IndexerConfig indexer_config_default(int d_model) {
    IndexerConfig c = {0};
    c.variant = INDEXER_COLLAPSED;
    c.d_model = d_model;
    c.d_index = 128;
    c.d_rope = 64;
    c.n_heads = 1;
    c.key_norm = INDEXER_NORM_LAYER;
    c.norm_eps = 1e-6f;
    c.rope_theta = 10000.0f;
    return c;
}

IndexerObjective indexer_objective_default(void) {
    IndexerObjective o = {INDEXER_OBJ_QUERY, 64, 1.0};
    return o;
}

static const char *const objective_names[3] = {"query", "block", "mix"};

const char *indexer_objective_name(IndexerObjectiveKind kind) {
    return kind >= INDEXER_OBJ_QUERY && kind <= INDEXER_OBJ_MIX ? objective_names[kind] : NULL;
}

int indexer_objective_parse(const char *name) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, objective_names[i])) return i;
    return -1;
}

int indexer_config_check(const IndexerConfig *c, Status *st) {
    if (c->variant != INDEXER_COLLAPSED && c->variant != INDEXER_EXPANDED)
        return status_fail(st, "indexer: variant %d is neither collapsed (0) nor expanded (1)", (int)c->variant);
    if (c->d_model <= 0 || c->d_model > INDEXER_MAX_D_MODEL)
        return status_fail(st, "indexer: d_model must be in [1, %d] (got %d)", INDEXER_MAX_D_MODEL, c->d_model);
    if (c->d_index <= 0 || c->d_index > INDEXER_MAX_D_INDEX)
        return status_fail(st, "indexer: d_index must be in [1, %d] (got %d)", INDEXER_MAX_D_INDEX, c->d_index);
    if (c->d_rope < 0 || c->d_rope > c->d_index || c->d_rope > INDEXER_MAX_D_ROPE || c->d_rope % 2)
        return status_fail(st, "indexer: d_rope must be even and in [0, %d] (d_index %d; got %d)",
                           c->d_index < INDEXER_MAX_D_ROPE ? c->d_index : INDEXER_MAX_D_ROPE, c->d_index, c->d_rope);
    if (c->n_heads < 1 || c->n_heads > INDEXER_MAX_HEADS)
        return status_fail(st, "indexer: n_heads must be in [1, %d] (got %d)", INDEXER_MAX_HEADS, c->n_heads);
    if (c->variant == INDEXER_COLLAPSED && c->n_heads != 1)
        return status_fail(st, "indexer: the head-collapsed variant has n_heads = 1 (got %d)", c->n_heads);
    if (c->key_norm != INDEXER_NORM_NONE && c->key_norm != INDEXER_NORM_RMS && c->key_norm != INDEXER_NORM_LAYER)
        return status_fail(st, "indexer: key_norm %d is not none (0), rms (1) or layer (2)", (int)c->key_norm);
    if (c->key_norm != INDEXER_NORM_NONE && !(c->norm_eps > 0.0f && c->norm_eps <= 1.0f))
        return status_fail(st, "indexer: norm_eps must be in (0, 1] (got %g)", (double)c->norm_eps);
    if (c->d_rope > 0 && !(c->rope_theta >= 1.0f && c->rope_theta <= 1e12f))
        return status_fail(st, "indexer: rope_theta must be in [1, 1e12] (got %g)", (double)c->rope_theta);
    return 0;
}

IndexerLayout indexer_layout(const IndexerConfig *c) {
    IndexerLayout L;
    const int64_t dm = c->d_model, dI = c->d_index, H = c->n_heads;
    int64_t off = 0;
    L.wq = off, off += H * dI * dm;
    L.wk = off, off += dI * dm;
    L.k_norm = -1, L.k_norm_bias = -1, L.ww = -1;
    if (c->key_norm != INDEXER_NORM_NONE) L.k_norm = off, off += dI;
    if (c->key_norm == INDEXER_NORM_LAYER) L.k_norm_bias = off, off += dI;
    if (c->variant == INDEXER_EXPANDED) L.ww = off, off += H * dm;
    L.n = off;
    return L;
}

int64_t indexer_n_params(const IndexerConfig *c) { return indexer_layout(c).n; }

int indexer_param_tensors(IndexerTensor out[INDEXER_MAX_TENSORS], const IndexerConfig *c) {
    const IndexerLayout L = indexer_layout(c);
    const int64_t dm = c->d_model, dI = c->d_index, H = c->n_heads;
    int n = 0;
    out[n++] = (IndexerTensor){"wq", L.wq, 2, {H * dI, dm}};
    out[n++] = (IndexerTensor){"wk", L.wk, 2, {dI, dm}};
    if (L.k_norm >= 0) out[n++] = (IndexerTensor){"k_norm", L.k_norm, 1, {dI, 0}};
    if (L.k_norm_bias >= 0) out[n++] = (IndexerTensor){"k_norm_bias", L.k_norm_bias, 1, {dI, 0}};
    if (L.ww >= 0) out[n++] = (IndexerTensor){"ww", L.ww, 2, {H, dm}};
    return n;
}

void indexer_init(const IndexerConfig *c, float *params, uint64_t seed) {
    const IndexerLayout L = indexer_layout(c);
    const int64_t dm = c->d_model, dI = c->d_index, H = c->n_heads;
    const double std = 1.0 / sqrt((double)dm);
    uint64_t s = seed;
    for (int64_t i = 0; i < H * dI * dm; i++) params[L.wq + i] = (float)(std * rng_normal(&s));
    for (int64_t i = 0; i < dI * dm; i++) params[L.wk + i] = (float)(std * rng_normal(&s));
    if (L.k_norm >= 0)
        for (int64_t i = 0; i < dI; i++) params[L.k_norm + i] = 1.0f;
    if (L.k_norm_bias >= 0)
        for (int64_t i = 0; i < dI; i++) params[L.k_norm_bias + i] = 0.0f;
    if (L.ww >= 0)
        for (int64_t i = 0; i < H * dm; i++) params[L.ww + i] = (float)(std * rng_normal(&s));
}

void indexer_rope(float *v, const IndexerConfig *c, const int *pos, int n, int H, int inverse) {
    const int dI = c->d_index, half = c->d_rope / 2;
    if (half == 0) return;
    float inv_freq[512];
    SPINDLE_CHECK(half <= 512);
    rope_default_inv_freq(inv_freq, (double)c->rope_theta, c->d_rope);
    const float sgn = inverse ? -1.0f : 1.0f;
#pragma omp parallel for
    for (int r = 0; r < n; r++) {
        const int t = pos ? pos[r] : r;
        for (int i = 0; i < half; i++) {
            const float ang = (float)t * inv_freq[i];
            const float cs = cosf(ang), sn = sgn * sinf(ang);
            for (int h = 0; h < H; h++) {
                float *x = v + ((int64_t)r * H + h) * dI;
                const float a = x[i], b = x[i + half];
                x[i] = a * cs - b * sn;
                x[i + half] = b * cs + a * sn;
            }
        }
    }
}

void indexer_queries_forward(float *q, float *w, const IndexerConfig *c, const float *params, const float *x,
                             const int *pos, int n) {
    const IndexerLayout L = indexer_layout(c);
    const int dm = c->d_model, H = c->n_heads, dI = c->d_index;
    if (n <= 0) return;
    matmul_forward_cpu(q, x, params + L.wq, NULL, n, dm, H * dI);  // W_q x_t
    indexer_rope(q, c, pos, n, H, 0);                               // R_t(·)
    if (c->variant == INDEXER_EXPANDED) matmul_forward_cpu(w, x, params + L.ww, NULL, n, dm, H);  // w_t = W_w x_t
}

void indexer_keys_forward(float *k, float *u, float *stat, const IndexerConfig *c, const float *params,
                          const float *x, int T) {
    const IndexerLayout L = indexer_layout(c);
    const int dm = c->d_model, dI = c->d_index;
    if (T <= 0) return;
    matmul_forward_cpu(k, x, params + L.wk, NULL, T, dm, dI);  // u_j = W_k x_j
    if (u) memcpy(u, k, sizeof(float) * (size_t)T * dI);
    const float *g = L.k_norm >= 0 ? params + L.k_norm : NULL;
    const float *b = L.k_norm_bias >= 0 ? params + L.k_norm_bias : NULL;
    if (c->key_norm != INDEXER_NORM_NONE) {
#pragma omp parallel for
        for (int j = 0; j < T; j++) {
            float *y = k + (int64_t)j * dI;
            float mean = 0.0f, var = 0.0f;
            if (c->key_norm == INDEXER_NORM_LAYER) {
                for (int i = 0; i < dI; i++) mean += y[i];
                mean /= dI;
            }
            for (int i = 0; i < dI; i++) var += (y[i] - mean) * (y[i] - mean);
            const float rstd = 1.0f / sqrtf(var / dI + c->norm_eps);
            // RMS: y = u·rstd ⊙ g;  Layer: y = (u − mean)·rstd ⊙ g + b
            for (int i = 0; i < dI; i++) y[i] = (y[i] - mean) * rstd * g[i] + (b ? b[i] : 0.0f);
            if (stat) stat[2 * j] = mean, stat[2 * j + 1] = rstd;
        }
    }
    indexer_rope(k, c, NULL, T, 1, 0);  // R_j(·)
}

void indexer_queries_backward(float *grads, const float *dq, const float *dw, const IndexerConfig *c,
                              const float *x, const int *pos, int n) {
    const IndexerLayout L = indexer_layout(c);
    const int dm = c->d_model, H = c->n_heads, dI = c->d_index;
    if (n <= 0) return;
    // d(W_q x_t) = R_tᵀ dq_t; grads.wq[H·d_I, d_model] += d(W_q x)ᵀ·x
    float *dp = xmalloc(sizeof(float) * (size_t)n * H * dI);
    memcpy(dp, dq, sizeof(float) * (size_t)n * H * dI);
    indexer_rope(dp, c, pos, n, H, 1);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H * dI, dm, n, 1.0f, dp, H * dI, x, dm, 1.0f,
                grads + L.wq, dm);
    free(dp);
    // grads.ww[H, d_model] += dwᵀ·x
    if (c->variant == INDEXER_EXPANDED)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, dm, n, 1.0f, dw, H, x, dm, 1.0f, grads + L.ww, dm);
}

void indexer_keys_backward(float *grads, const float *dk, const IndexerConfig *c, const float *params,
                           const float *x, const float *u, const float *stat, int T) {
    const IndexerLayout L = indexer_layout(c);
    const int dm = c->d_model, dI = c->d_index;
    if (T <= 0) return;
    // dn_j = R_jᵀ dk_j: the gradient at the norm's output.
    float *du = xmalloc(sizeof(float) * (size_t)T * dI);
    memcpy(du, dk, sizeof(float) * (size_t)T * dI);
    indexer_rope(du, c, NULL, T, 1, 1);
    if (c->key_norm != INDEXER_NORM_NONE) {
        const int layer = c->key_norm == INDEXER_NORM_LAYER;
        const float *g = params + L.k_norm;
        float *dg = grads + L.k_norm, *db = layer ? grads + L.k_norm_bias : NULL;
        // Row by row, in order (the norm-parameter gradients are sums over rows).
        // With x̂ = (u − mean)·rstd (mean = 0 for RMS) and ĝ = g ⊙ dn:
        //   dg += dn ⊙ x̂,  db += dn (LayerNorm)
        //   RMS:   du = rstd·(ĝ − x̂·mean(ĝ ⊙ x̂))
        //   Layer: du = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ ⊙ x̂))
        for (int j = 0; j < T; j++) {
            float *d = du + (int64_t)j * dI;
            const float *uj = u + (int64_t)j * dI;
            const float mean = stat[2 * j], rstd = stat[2 * j + 1];
            float mg = 0.0f, mgx = 0.0f;
            for (int i = 0; i < dI; i++) {
                const float xh = (uj[i] - mean) * rstd, gh = g[i] * d[i];
                dg[i] += d[i] * xh;
                if (db) db[i] += d[i];
                mg += gh;
                mgx += gh * xh;
            }
            mg = layer ? mg / dI : 0.0f;
            mgx /= dI;
            for (int i = 0; i < dI; i++) {
                const float xh = (uj[i] - mean) * rstd;
                d[i] = rstd * (g[i] * d[i] - mg - xh * mgx);
            }
        }
    }
    // grads.wk[d_I, d_model] += duᵀ·x
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dI, dm, T, 1.0f, du, dI, x, dm, 1.0f, grads + L.wk, dm);
    free(du);
}
