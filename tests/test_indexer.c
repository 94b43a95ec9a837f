// test_indexer: the indexer's CPU twin against naive double-precision
// references that materialise the full T×T scores, P and Q.
//   (a) projections, scores and lse vs a naive forward — both variants, key norms
//       none/rms/layer, d_rope 0 and > 0;
//   (b) the KL loss vs a naive reference;
//   (c) the gradient of every parameter tensor vs central finite differences of
//       the double reference (T = 1, 7, 70; GQA and MHA; query subsets with t = 0);
//       the comparator is itself checked to flag a flipped sign and a shifted index;
//   (d) supports (per query and per block) vs a naive sort; the tie rule; k ≥ t+1;
//   (e) mass recall vs the naive one;
//   (f) the block-aware objectives (block, mix): both loss parts vs the naive
//       reference, gradients vs central FD of it, identities with the per-query
//       loss, thread counts.
// Prints the max error of each check; exits 1 on any failure.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "indexer.h"
#include "indexer_ops.h"

#include "expect.h"

// ---- deterministic random numbers ----
static uint64_t rng_state = 12345;
static uint64_t rng_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return ((rng_u64() >> 11) + 1) * 0x1.0p-53; }
static double rng_normal(void) { return sqrt(-2.0 * log(rng_uniform())) * cos(2.0 * M_PI * rng_uniform()); }

static void *xalloc(size_t n) {
    void *p = calloc(n ? n : 1, 1);
    if (!p) abort();
    return p;
}

// ---- one test case: config, inputs, and the teacher P in double ----
typedef struct {
    IndexerConfig cfg;
    int T, Hq, Hkv, dh;
    float scale;
    int64_t np;
    float *params, *x, *tq, *tk, *tlse;
    double *P;  // [T, T] teacher, from the float tq/tk/tlse in double
} Case;

static void case_free(Case *c) {
    free(c->params), free(c->x), free(c->tq), free(c->tk), free(c->tlse), free(c->P);
}

static Case case_make(IndexerConfig cfg, int T, int Hq, int Hkv, int dh, double tsig, uint64_t seed) {
    Case c = {0};
    c.cfg = cfg, c.T = T, c.Hq = Hq, c.Hkv = Hkv, c.dh = dh, c.scale = 1.0f / sqrtf((float)dh);
    rng_state = seed;
    c.np = indexer_n_params(&cfg);
    c.params = xalloc(sizeof(float) * c.np);
    indexer_init(&cfg, c.params, seed);
    IndexerLayout L = indexer_layout(&cfg);
    // Generic norm parameters, so that g and b gradients are not at a special point.
    if (L.k_norm >= 0)
        for (int i = 0; i < cfg.d_index; i++) c.params[L.k_norm + i] = (float)(1.0 + 0.3 * rng_normal());
    if (L.k_norm_bias >= 0)
        for (int i = 0; i < cfg.d_index; i++) c.params[L.k_norm_bias + i] = (float)(0.3 * rng_normal());
    const int dm = cfg.d_model;
    c.x = xalloc(sizeof(float) * T * dm);
    for (int i = 0; i < T * dm; i++) c.x[i] = (float)rng_normal();
    c.tq = xalloc(sizeof(float) * T * Hq * dh);
    c.tk = xalloc(sizeof(float) * T * Hkv * dh);
    for (int i = 0; i < T * Hq * dh; i++) c.tq[i] = (float)(tsig * rng_normal());
    for (int i = 0; i < T * Hkv * dh; i++) c.tk[i] = (float)(tsig * rng_normal());
    // Teacher lse in double, stored fp32 (what a shard holds); P from these floats.
    const int G = Hq / Hkv;
    c.tlse = xalloc(sizeof(float) * Hq * T);
    c.P = xalloc(sizeof(double) * T * T);
    double *a = xalloc(sizeof(double) * T);
    for (int h = 0; h < Hq; h++)
        for (int t = 0; t < T; t++) {
            double mx = -INFINITY, sum = 0.0;
            for (int j = 0; j <= t; j++) {
                double d = 0.0;
                for (int e = 0; e < dh; e++)
                    d += (double)c.tq[(t * Hq + h) * dh + e] * c.tk[(j * Hkv + h / G) * dh + e];
                a[j] = (double)c.scale * d;
                mx = a[j] > mx ? a[j] : mx;
            }
            for (int j = 0; j <= t; j++) sum += exp(a[j] - mx);
            c.tlse[h * T + t] = (float)(mx + log(sum));
            for (int j = 0; j <= t; j++) c.P[t * T + j] += exp(a[j] - (double)c.tlse[h * T + t]) / Hq;
        }
    free(a);
    return c;
}

// ---- the naive double-precision reference ----

static void ref_rope(double *v, int t, const IndexerConfig *cfg) {
    const int half = cfg->d_rope / 2;
    for (int i = 0; i < half; i++) {
        // The angle as indexer.h defines it: fp32 inv_freq, fp32 product.
        const float inv_freq = (float)(1.0 / pow((double)cfg->rope_theta, (2.0 * i) / cfg->d_rope));
        const double ang = (double)((float)t * inv_freq), cs = cos(ang), sn = sin(ang);
        const double a = v[i], b = v[i + half];
        v[i] = a * cs - b * sn;
        v[i + half] = b * cs + a * sn;
    }
}

// q [T, H, d_I], w [T, H], k [T, d_I] from double params p and float x.
static void ref_project(double *q, double *w, double *k, const IndexerConfig *cfg, const double *p, const float *x,
                        int T) {
    const int dm = cfg->d_model, dI = cfg->d_index, H = cfg->n_heads;
    // The layout, spelled out (independent of indexer_layout).
    const double *wq = p, *wk = p + H * dI * dm, *after = wk + dI * dm;
    const double *g = cfg->key_norm != INDEXER_NORM_NONE ? after : NULL;
    const double *b = cfg->key_norm == INDEXER_NORM_LAYER ? after + dI : NULL;
    const double *ww = after + (cfg->key_norm == INDEXER_NORM_NONE ? 0 : cfg->key_norm == INDEXER_NORM_RMS ? dI : 2 * dI);
    for (int t = 0; t < T; t++) {
        const float *xt = x + t * dm;
        for (int h = 0; h < H; h++) {
            double *qh = q + (t * H + h) * dI;
            for (int c = 0; c < dI; c++) {
                double s = 0.0;
                for (int e = 0; e < dm; e++) s += wq[(h * dI + c) * dm + e] * xt[e];
                qh[c] = s;
            }
            ref_rope(qh, t, cfg);
            if (cfg->variant == INDEXER_EXPANDED) {
                double s = 0.0;
                for (int e = 0; e < dm; e++) s += ww[h * dm + e] * xt[e];
                w[t * H + h] = s;
            }
        }
        double *kt = k + t * dI;
        for (int c = 0; c < dI; c++) {
            double s = 0.0;
            for (int e = 0; e < dm; e++) s += wk[c * dm + e] * xt[e];
            kt[c] = s;
        }
        if (cfg->key_norm != INDEXER_NORM_NONE) {
            double mean = 0.0, var = 0.0;
            if (cfg->key_norm == INDEXER_NORM_LAYER) {
                for (int c = 0; c < dI; c++) mean += kt[c];
                mean /= dI;
            }
            for (int c = 0; c < dI; c++) var += (kt[c] - mean) * (kt[c] - mean);
            const double rstd = 1.0 / sqrt(var / dI + (double)cfg->norm_eps);
            for (int c = 0; c < dI; c++) kt[c] = (kt[c] - mean) * rstd * g[c] + (b ? b[c] : 0.0);
        }
        ref_rope(kt, t, cfg);
    }
}

// S [T, T] (j ≤ t; −inf above), lse [T].
static void ref_scores(double *S, double *lse, const IndexerConfig *cfg, const double *p, const float *x, int T) {
    const int dI = cfg->d_index, H = cfg->n_heads;
    double *q = xalloc(sizeof(double) * T * H * dI), *w = xalloc(sizeof(double) * T * H);
    double *k = xalloc(sizeof(double) * T * dI);
    ref_project(q, w, k, cfg, p, x, T);
    for (int t = 0; t < T; t++) {
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < T; j++) {
            double s = -INFINITY;
            if (j <= t) {
                s = 0.0;
                for (int h = 0; h < H; h++) {
                    double d = 0.0;
                    for (int c = 0; c < dI; c++) d += q[(t * H + h) * dI + c] * k[j * dI + c];
                    s += cfg->variant == INDEXER_COLLAPSED ? d / sqrt((double)dI) : w[t * H + h] * (d > 0 ? d : 0);
                }
                mx = s > mx ? s : mx;
            }
            S[t * T + j] = s;
        }
        for (int j = 0; j <= t; j++) sum += exp(S[t * T + j] - mx);
        lse[t] = mx + log(sum);
    }
    free(q), free(w), free(k);
}

// The objective's loss (kernels/indexer.h, IndexerObjective; NULL: per query)
// from the full T×T P and Q: L_query, and for BLOCK/MIX the blocks of the
// sampled queries, Ā_B and Q̄_B summed over their queries t ≥ j, KL(Ā ‖ Q̄).
static double ref_loss_obj(const Case *c, const double *p, const int *qs, int nq, const IndexerObjective *obj,
                           double *parts) {
    const int T = c->T;
    double *S = xalloc(sizeof(double) * T * T), *lse = xalloc(sizeof(double) * T);
    ref_scores(S, lse, &c->cfg, p, c->x, T);
    double L = 0.0;
    for (int r = 0; r < nq; r++) {
        const int t = qs[r];
        for (int j = 0; j <= t; j++) {
            const double P = c->P[t * T + j], logQ = S[t * T + j] - lse[t];
            if (P > 0) L += P * (log(P) - logQ);
        }
    }
    L /= nq;
    double Lb = 0.0;
    int n_blocks = 0;
    if (obj && obj->kind != INDEXER_OBJ_QUERY) {
        double *a = xalloc(sizeof(double) * T), *q = xalloc(sizeof(double) * T);
        for (int r0 = 0; r0 < nq;) {
            int r1 = r0;
            while (r1 < nq && qs[r1] / obj->bsel == qs[r0] / obj->bsel) r1++;
            const int nb = r1 - r0, end = qs[r1 - 1] + 1;
            for (int j = 0; j < end; j++) {
                a[j] = q[j] = 0.0;
                for (int r = r0; r < r1; r++)
                    if (qs[r] >= j) a[j] += c->P[qs[r] * T + j] / nb, q[j] += exp(S[qs[r] * T + j] - lse[qs[r]]) / nb;
                if (a[j] > 0) Lb += a[j] * (log(a[j]) - log(q[j]));
            }
            n_blocks++;
            r0 = r1;
        }
        Lb /= n_blocks;
        free(a), free(q);
    }
    free(S), free(lse);
    if (parts) parts[0] = L, parts[1] = Lb;
    if (!obj || obj->kind == INDEXER_OBJ_QUERY) return L;
    return obj->kind == INDEXER_OBJ_BLOCK ? Lb : L + obj->block_weight * Lb;
}


static double *to_double(const float *v, int64_t n) {
    double *d = xalloc(sizeof(double) * n);
    for (int64_t i = 0; i < n; i++) d[i] = v[i];
    return d;
}

static double max_abs_diff_rel(const float *a, const double *b, int64_t n) {
    double e = 0.0, m = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        if (isinf(b[i])) {
            if (!(isinf(a[i]) && a[i] < 0)) return INFINITY;
            continue;
        }
        e = fmax(e, fabs(a[i] - b[i]));
        m = fmax(m, fabs(b[i]));
    }
    return e / m;
}

static const char *variant_name(const IndexerConfig *c) { return c->variant == INDEXER_COLLAPSED ? "coll" : "exp"; }
static const char *norm_name(const IndexerConfig *c) {
    return c->key_norm == INDEXER_NORM_NONE ? "none" : c->key_norm == INDEXER_NORM_RMS ? "rms" : "layer";
}

static IndexerConfig small_cfg(IndexerVariant v, IndexerNorm n, int d_rope) {
    IndexerConfig c = indexer_config_default(24);
    c.variant = v, c.key_norm = n, c.d_rope = d_rope;
    c.d_index = 16;
    c.n_heads = v == INDEXER_EXPANDED ? 3 : 1;
    c.norm_eps = 1e-5f;
    c.rope_theta = 100.0f;  // short wavelengths, so small T still turns every pair
    return c;
}

// ---- (a) forward ----
static double worst_fwd = 0.0;
static void check_forward(const Case *c) {
    const IndexerConfig *cfg = &c->cfg;
    const int T = c->T, dI = cfg->d_index, H = cfg->n_heads;
    double *p = to_double(c->params, c->np);
    double *q = xalloc(sizeof(double) * T * H * dI), *w = xalloc(sizeof(double) * T * H);
    double *k = xalloc(sizeof(double) * T * dI);
    ref_project(q, w, k, cfg, p, c->x, T);
    float *fq = xalloc(sizeof(float) * T * H * dI), *fw = xalloc(sizeof(float) * T * H);
    float *fk = xalloc(sizeof(float) * T * dI);
    indexer_queries_forward(fq, fw, cfg, c->params, c->x, NULL, T);
    indexer_keys_forward(fk, NULL, NULL, cfg, c->params, c->x, T);
    double eq = max_abs_diff_rel(fq, q, (int64_t)T * H * dI), ek = max_abs_diff_rel(fk, k, (int64_t)T * dI);
    double ew = cfg->variant == INDEXER_EXPANDED ? max_abs_diff_rel(fw, w, (int64_t)T * H) : 0.0;
    // Scores and lse for all queries, listed in reverse (any order is allowed).
    double *S = xalloc(sizeof(double) * T * T), *lse = xalloc(sizeof(double) * T);
    ref_scores(S, lse, cfg, p, c->x, T);
    int *qs = xalloc(sizeof(int) * T);
    for (int r = 0; r < T; r++) qs[r] = T - 1 - r;
    float *fs = xalloc(sizeof(float) * T * T), *fl = xalloc(sizeof(float) * T);
    indexer_forward_cpu(fs, fl, cfg, c->params, c->x, T, qs, T);
    double *Sr = xalloc(sizeof(double) * T * T), *lr = xalloc(sizeof(double) * T);
    for (int r = 0; r < T; r++) {
        memcpy(Sr + r * T, S + qs[r] * T, sizeof(double) * T);
        lr[r] = lse[qs[r]];
    }
    double es = max_abs_diff_rel(fs, Sr, (int64_t)T * T), el = max_abs_diff_rel(fl, lr, T);
    double e = fmax(fmax(eq, ek), fmax(ew, fmax(es, el)));
    worst_fwd = fmax(worst_fwd, e);
    EXPECT(e < 2e-5, "forward %s/%s/rope%d T=%d: q %.2e k %.2e w %.2e score %.2e lse %.2e", variant_name(cfg),
           norm_name(cfg), cfg->d_rope, T, eq, ek, ew, es, el);
    free(p), free(q), free(w), free(k), free(fq), free(fw), free(fk), free(S), free(lse), free(qs), free(fs),
        free(fl), free(Sr), free(lr);
}

// ---- (b), (c) loss and gradients ----

// Comparator: max |a − fd| / max |fd| (absolute max |a| when fd is all ~0).
static double grad_err(const float *a, const double *fd, const int *idx, int n) {
    double e = 0.0, m = 0.0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs(fd[i]));
    for (int i = 0; i < n; i++) e = fmax(e, fabs(a[idx[i]] - fd[i]));
    return m > 1e-9 ? e / m : e;
}
#define GRAD_TOL 2e-4

static double worst_loss = 0.0, worst_loss_abs = 0.0, worst_grad = 0.0, worst_accum = 0.0;
static int n_grad_checked = 0, comparator_fail = 0;

// The loss under test: indexer_kl_loss_cpu (obj NULL) or indexer_objective_loss_cpu.
static double loss_call(float *g, double *parts, const Case *c, const int *qs, int nq, const IndexerObjective *obj) {
    if (!obj)
        return indexer_kl_loss_cpu(g, &c->cfg, c->params, c->x, c->tq, c->tk, c->tlse, c->T, c->Hq, c->Hkv, c->dh,
                                   c->scale, qs, nq);
    return indexer_objective_loss_cpu(g, parts, &c->cfg, obj, c->params, c->x, c->tq, c->tk, c->tlse, c->T, c->Hq,
                                      c->Hkv, c->dh, c->scale, qs, nq);
}

static double worst_block_loss = 0.0, worst_block_grad = 0.0;
static int n_block_grad_checked = 0;

static void check_loss_grad_obj(const Case *c, const int *qs, int nq, const char *qname, int fd,
                                const IndexerObjective *obj) {
    const IndexerConfig *cfg = &c->cfg;
    double *p = to_double(c->params, c->np);
    double ref_parts[2], parts[2] = {NAN, NAN};
    const double ref = ref_loss_obj(c, p, qs, nq, obj, ref_parts);
    float *g = xalloc(sizeof(float) * c->np);
    const double L = loss_call(g, parts, c, qs, nq, obj);
    const double L0 = loss_call(NULL, NULL, c, qs, nq, obj);
    if (obj && obj->kind != INDEXER_OBJ_QUERY) {
        // Both parts, and L from them.
        const double e0 = fabs(parts[0] - ref_parts[0]), e1 = fabs(parts[1] - ref_parts[1]);
        const double want = obj->kind == INDEXER_OBJ_BLOCK ? parts[1] : parts[0] + obj->block_weight * parts[1];
        worst_block_loss = fmax(worst_block_loss, fmax(e0, e1));
        EXPECT(e0 <= 1e-5 * fabs(ref_parts[0]) + 5e-7 && e1 <= 1e-5 * fabs(ref_parts[1]) + 5e-7 &&
                   fabs(L - want) <= 1e-12 * fabs(want),
               "objective %s bsel %d T=%d q=%s: parts %.9g %.9g vs ref %.9g %.9g, L %.9g", indexer_objective_name(obj->kind),
               obj->bsel, c->T, qname, parts[0], parts[1], ref_parts[0], ref_parts[1], L);
    }
    // fp32 sums of P·log P over a row have an absolute floor of a few ulp of 1
    // (a one-key row has KL 0 but P = 1 − O(1e-7)), so: relative 1e-5 plus 5e-7.
    const double el = fabs(L - ref) / fabs(ref), ea0 = fabs(L - ref);
    if (ea0 > 5e-7) worst_loss = fmax(worst_loss, el);
    worst_loss_abs = fmax(worst_loss_abs, ea0);
    EXPECT(ea0 <= 1e-5 * fabs(ref) + 5e-7 && L == L0,
           "loss %s/%s/rope%d T=%d Hq=%d Hkv=%d q=%s: %.9g vs ref %.9g (rel %.2e), loss-only %.9g", variant_name(cfg),
           norm_name(cfg), cfg->d_rope, c->T, c->Hq, c->Hkv, qname, L, ref, el, L0);
    // Gradients accumulate: a second call on the same buffer doubles them.
    float *g2 = xalloc(sizeof(float) * c->np);
    memcpy(g2, g, sizeof(float) * c->np);
    loss_call(g2, NULL, c, qs, nq, obj);
    double ea = 0.0, gm = 1e-30;
    for (int64_t i = 0; i < c->np; i++) ea = fmax(ea, fabs(g2[i] - 2.0 * g[i])), gm = fmax(gm, fabs(g[i]));
    worst_accum = fmax(worst_accum, ea / gm);
    EXPECT(ea / gm < 1e-5, "gradients do not accumulate (+=): %.2e", ea / gm);
    if (fd) {
        IndexerTensor ts[INDEXER_MAX_TENSORS];
        const int nt = indexer_param_tensors(ts, cfg);
        for (int ti = 0; ti < nt; ti++) {
            const int64_t size = ts[ti].shape[0] * (ts[ti].ndim == 2 ? ts[ti].shape[1] : 1);
            // All entries of a small tensor; else 200 random ones plus the first and last.
            const int n = size <= 250 ? (int)size : 202;
            int *idx = xalloc(sizeof(int) * n);
            double *fdv = xalloc(sizeof(double) * n);
            for (int i = 0; i < n; i++)
                idx[i] = (int)(ts[ti].offset + (size <= 250 ? i : i == 0 ? 0 : i == 1 ? size - 1 : (int64_t)(rng_u64() % size)));
            for (int i = 0; i < n; i++) {
                const double h = 1e-6, keep = p[idx[i]];
                p[idx[i]] = keep + h;
                const double lp = ref_loss_obj(c, p, qs, nq, obj, NULL);
                p[idx[i]] = keep - h;
                const double lm = ref_loss_obj(c, p, qs, nq, obj, NULL);
                p[idx[i]] = keep;
                fdv[i] = (lp - lm) / (2 * h);
            }
            const double e = grad_err(g, fdv, idx, n);
            if (obj) worst_block_grad = fmax(worst_block_grad, e), n_block_grad_checked += n;
            else worst_grad = fmax(worst_grad, e), n_grad_checked += n;
            EXPECT(e < GRAD_TOL, "grad %s %s/%s/rope%d T=%d Hq=%d Hkv=%d q=%s%s%s: err %.2e over %d entries",
                   ts[ti].name, variant_name(cfg), norm_name(cfg), cfg->d_rope, c->T, c->Hq, c->Hkv,
                   qname, obj ? " objective " : "", obj ? indexer_objective_name(obj->kind) : "", e, n);
            // The comparator must flag a broken gradient: a flipped sign on the
            // largest entry, and every entry read one index off.
            double m = 0.0;
            int im = 0;
            for (int i = 0; i < n; i++)
                if (fabs(fdv[i]) > m) m = fabs(fdv[i]), im = i;
            if (m > 1e-6) {
                float keep = g[idx[im]];
                g[idx[im]] = -keep;
                const double e_sign = grad_err(g, fdv, idx, n);
                g[idx[im]] = keep;
                int *off = xalloc(sizeof(int) * n);
                for (int i = 0; i < n; i++) off[i] = idx[i] + 1 < ts[ti].offset + size ? idx[i] + 1 : idx[i] - 1;
                const double e_shift = grad_err(g, fdv, off, n);
                free(off);
                if (!(e_sign > 10 * GRAD_TOL && e_shift > 10 * GRAD_TOL)) comparator_fail++;
                EXPECT(e_sign > 10 * GRAD_TOL && e_shift > 10 * GRAD_TOL,
                       "comparator too lenient on %s: sign-flip %.2e, shift %.2e", ts[ti].name, e_sign, e_shift);
            }
            free(idx), free(fdv);
        }
    }
    free(p), free(g), free(g2);
}

static void check_loss_grad(const Case *c, const int *qs, int nq, const char *qname, int fd) {
    check_loss_grad_obj(c, qs, nq, qname, fd, NULL);
}

// ---- (f) block-aware objectives: identities against the per-query loss ----

// QUERY through indexer_objective_loss_cpu is indexer_kl_loss_cpu bit for bit;
// BLOCK with bsel 1 is the per-query loss (Ā = P, Q̄ = Q) up to rounding;
// MIX with weight 0 is the per-query loss; parts[0] of BLOCK is the per-query KL.
static void check_objective_identities(const Case *c, const int *qs, int nq) {
    float *g0 = xalloc(sizeof(float) * c->np), *g1 = xalloc(sizeof(float) * c->np);
    float *g2 = xalloc(sizeof(float) * c->np), *g3 = xalloc(sizeof(float) * c->np);
    const double l0 = loss_call(g0, NULL, c, qs, nq, NULL);
    IndexerObjective o = indexer_objective_default();
    double parts[2];
    const double l1 = loss_call(g1, parts, c, qs, nq, &o);
    EXPECT(l1 == l0 && !memcmp(g0, g1, sizeof(float) * c->np) && isnan(parts[1]),
           "objective query differs from indexer_kl_loss_cpu (%.9g vs %.9g)", l1, l0);
    o.kind = INDEXER_OBJ_BLOCK, o.bsel = 1;
    const double l2 = loss_call(g2, parts, c, qs, nq, &o);
    o.kind = INDEXER_OBJ_MIX, o.bsel = 5, o.block_weight = 0.0;
    const double l3 = loss_call(g3, NULL, c, qs, nq, &o);
    double e2 = 0.0, e3 = 0.0, m = 1e-30;
    for (int64_t i = 0; i < c->np; i++)
        e2 = fmax(e2, fabs(g2[i] - g0[i])), e3 = fmax(e3, fabs(g3[i] - g0[i])), m = fmax(m, fabs(g0[i]));
    EXPECT(fabs(l2 - l0) <= 1e-5 * fabs(l0) + 5e-7 && fabs(parts[0] - l0) <= 1e-6 * fabs(l0) + 1e-9 && e2 / m < 1e-4,
           "block bsel 1 vs per query T=%d: loss %.9g vs %.9g (parts[0] %.9g), grads %.2e", c->T, l2, l0, parts[0], e2 / m);
    EXPECT(fabs(l3 - l0) <= 1e-6 * fabs(l0) + 1e-9 && e3 / m < 1e-5,
           "mix with weight 0 vs per query T=%d: loss %.9g vs %.9g, grads %.2e", c->T, l3, l0, e3 / m);
    free(g0), free(g1), free(g2), free(g3);
}

// ---- (d) supports, (e) mass recall ----

static const double *cmp_val;
static int cmp_rank(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    if (cmp_val[i] != cmp_val[j]) return cmp_val[i] > cmp_val[j] ? -1 : 1;
    return i - j;
}
static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

// The naive support: sort candidates 0..n-1 by (value desc, index asc), keep k, sort by index.
static int naive_topk(int *out, const double *val, int n, int k) {
    for (int j = 0; j < n; j++) out[j] = j;
    cmp_val = val;
    qsort(out, n, sizeof(int), cmp_rank);
    const int m = n < k ? n : k;
    qsort(out, m, sizeof(int), cmp_int);
    return m;
}

// Sets equal, or differ only where the reference itself has a near-tie at the boundary.
static int same_support(const int *got, int ng, const int *want, int nw, const double *val, double tol, int *near) {
    if (ng != nw) return 0;
    int diff = 0;
    for (int a = 0; a < ng; a++) diff |= got[a] != want[a];
    if (!diff) return 1;
    double kth = INFINITY;  // the smallest selected reference value
    for (int a = 0; a < nw; a++) kth = fmin(kth, val[want[a]]);
    for (int a = 0; a < ng; a++)
        if (fabs(val[got[a]] - kth) > tol && val[got[a]] < kth) return 0;
    (*near)++;
    return 1;
}

static int n_sel_checked = 0, n_near = 0;
static void check_select(const Case *c, int k, int bsel, int zero_wq) {
    const IndexerConfig *cfg = &c->cfg;
    const int T = c->T;
    float *prm = xalloc(sizeof(float) * c->np);
    memcpy(prm, c->params, sizeof(float) * c->np);
    if (zero_wq)  // every score exactly 0: the tie rule alone decides (lowest indices)
        memset(prm + indexer_layout(cfg).wq, 0, sizeof(float) * cfg->n_heads * cfg->d_index * cfg->d_model);
    double *p = to_double(prm, c->np);
    double *S = xalloc(sizeof(double) * T * T), *lse = xalloc(sizeof(double) * T);
    ref_scores(S, lse, cfg, p, c->x, T);
    const int rows = bsel == 1 ? T : (T + bsel - 1) / bsel;
    int *sel = xalloc(sizeof(int) * rows * k), *ns = xalloc(sizeof(int) * rows), *want = xalloc(sizeof(int) * T);
    double *A = xalloc(sizeof(double) * T);
    indexer_select_cpu(sel, ns, cfg, prm, c->x, T, k, bsel);
    for (int r = 0; r < rows; r++) {
        const int b0 = r * bsel, end = b0 + bsel < T ? b0 + bsel : T;
        double amax = 0.0;
        for (int j = 0; j < end; j++) {
            A[j] = 0.0;
            for (int t = b0 > j ? b0 : j; t < end; t++)
                A[j] += bsel == 1 ? S[t * T + j] : exp(S[t * T + j] - lse[t]);  // per query: the score itself
            amax = fmax(amax, fabs(A[j]));
        }
        const int nw = naive_topk(want, A, end, k);
        int ok = 1;
        for (int a = ns[r]; a < k; a++) ok &= sel[r * k + a] == -1;
        ok &= same_support(sel + r * k, ns[r], want, nw, A, 1e-5 * amax, &n_near);
        if (zero_wq)
            for (int a = 0; a < ns[r]; a++) ok &= sel[r * k + a] == a;  // lowest indices
        if (end <= k) ok &= ns[r] == end;                           // k ≥ end: every key
        n_sel_checked++;
        EXPECT(ok, "select %s/%s/rope%d T=%d k=%d bsel=%d%s row %d: got %d keys (%d %d ...), want %d (%d %d ...)",
               variant_name(cfg), norm_name(cfg), cfg->d_rope, T, k, bsel, zero_wq ? " (all-zero scores)" : "", r,
               ns[r], sel[r * k], ns[r] > 1 ? sel[r * k + 1] : -1, nw, want[0], nw > 1 ? want[1] : -1);
    }
    free(prm), free(p), free(S), free(lse), free(sel), free(ns), free(want), free(A);
}

// Two-stage supports (indexer_select_refined_cpu): each row t holds the top-k of
// S[t, ·] over the block's candidates C_B ∩ [0, t], C_B taken from the block
// rows indexer_select_cpu gives at k = cand (checked above against the naive
// sort); with cand ≥ T the rows are the per-query ones exactly.
static int n_refined_checked = 0;
static void check_select_refined(const Case *c, int k, int bsel, int cand) {
    const IndexerConfig *cfg = &c->cfg;
    const int T = c->T, nb = (T + bsel - 1) / bsel;
    double *p = to_double(c->params, c->np);
    double *S = xalloc(sizeof(double) * T * T), *lse = xalloc(sizeof(double) * T), *v = xalloc(sizeof(double) * T);
    ref_scores(S, lse, cfg, p, c->x, T);
    int *sel = xalloc(sizeof(int) * T * k), *ns = xalloc(sizeof(int) * T);
    int *C = xalloc(sizeof(int) * nb * cand), *nc = xalloc(sizeof(int) * nb), *pq = xalloc(sizeof(int) * T * k),
        *npq = xalloc(sizeof(int) * T), *want = xalloc(sizeof(int) * T), *cand_t = xalloc(sizeof(int) * T);
    indexer_select_refined_cpu(sel, ns, cfg, c->params, c->x, T, k, bsel, cand);
    indexer_select_cpu(C, nc, cfg, c->params, c->x, T, cand, bsel);
    indexer_select_cpu(pq, npq, cfg, c->params, c->x, T, k, 1);
    for (int t = 0; t < T; t++) {
        const int b = t / bsel;
        int m = 0;
        for (int a = 0; a < nc[b]; a++)
            if (C[b * cand + a] <= t) cand_t[m++] = C[b * cand + a];
        for (int a = 0; a < m; a++) v[a] = S[t * T + cand_t[a]];
        const int nw = naive_topk(want, v, m, k);
        for (int a = 0; a < nw; a++) want[a] = cand_t[want[a]];
        for (int j = 0; j < T; j++) v[j] = S[t * T + j];  // by key, for the near-tie rule
        int ok = 1;
        for (int a = ns[t]; a < k; a++) ok &= sel[t * k + a] == -1;
        ok &= same_support(sel + t * k, ns[t], want, nw, v, 1e-5 * (fabs(S[t * T + t]) + 1.0), &n_near);
        if (cand >= T) {
            ok &= ns[t] == npq[t];
            for (int a = 0; a < ns[t]; a++) ok &= sel[t * k + a] == pq[t * k + a];
        }
        n_refined_checked++;
        EXPECT(ok, "select refined %s/%s T=%d k=%d bsel=%d cand=%d row %d: got %d keys (%d ...), want %d (%d ...)",
               variant_name(cfg), norm_name(cfg), T, k, bsel, cand, t, ns[t], sel[t * k], nw, nw ? want[0] : -1);
    }
    free(p), free(S), free(lse), free(v), free(sel), free(ns), free(C), free(nc), free(pq), free(npq), free(want),
        free(cand_t);
}

static double worst_recall = 0.0;
static void check_recall(const Case *c, const int *qs, int nq, int k) {
    const IndexerConfig *cfg = &c->cfg;
    const int T = c->T;
    double *p = to_double(c->params, c->np);
    double *S = xalloc(sizeof(double) * T * T), *lse = xalloc(sizeof(double) * T);
    ref_scores(S, lse, cfg, p, c->x, T);
    int *want = xalloc(sizeof(int) * T);
    float *rec = xalloc(sizeof(float) * nq);
    const double got = indexer_mass_recall_cpu(rec, cfg, c->params, c->x, c->tq, c->tk, c->tlse, T, c->Hq, c->Hkv,
                                               c->dh, c->scale, qs, nq, k);
    double mean = 0.0, e = 0.0;
    for (int r = 0; r < nq; r++) {
        const int t = qs[r], n = naive_topk(want, S + t * T, t + 1, k);
        double m = 0.0;
        for (int a = 0; a < n; a++) m += c->P[t * T + want[a]];
        if (t + 1 <= k) EXPECT(fabs(m - 1.0) < 1e-5, "recall with k ≥ t+1 is not 1 (%.9g)", m);
        e = fmax(e, fabs(rec[r] - m));
        mean += m;
    }
    mean /= nq;
    e = fmax(e, fabs(got - mean));
    worst_recall = fmax(worst_recall, e);
    EXPECT(e < 1e-5, "mass recall %s/%s T=%d k=%d: %.9g vs ref %.9g (max err %.2e)", variant_name(cfg),
           norm_name(cfg), T, k, got, mean, e);
    free(p), free(S), free(lse), free(want), free(rec);
}

// Query subsets, each including t = 0 where T allows, sorted and distinct.
static int make_queries(int *qs, int T, int kind, const char **name) {
    int n = 0;
    switch (kind % 4) {
    case 0:
        *name = "all";
        for (int t = 0; t < T; t++) qs[n++] = t;
        break;
    case 1:
        *name = "{0}";
        qs[n++] = 0;
        break;
    case 2:
        *name = "random40%+0";
        qs[n++] = 0;
        for (int t = 1; t < T; t++)
            if (rng_uniform() < 0.4 || t == T - 1) qs[n++] = t;
        break;
    default:
        *name = "stride3+last";
        for (int t = 0; t < T; t += 3) qs[n++] = t;
        if (qs[n - 1] != T - 1) qs[n++] = T - 1;
        break;
    }
    return n;
}

int main(void) {
    omp_set_num_threads(1);
    const IndexerVariant variants[2] = {INDEXER_COLLAPSED, INDEXER_EXPANDED};
    const IndexerNorm norms[3] = {INDEXER_NORM_NONE, INDEXER_NORM_RMS, INDEXER_NORM_LAYER};
    const int ropes[2] = {0, 8};

    // Config, layout and init.
    {
        IndexerConfig cfg = small_cfg(INDEXER_EXPANDED, INDEXER_NORM_LAYER, 8);
        Status st;
        EXPECT(indexer_config_check(&cfg, &st) == 0, "expanded config rejected");
        IndexerTensor ts[INDEXER_MAX_TENSORS];
        const int nt = indexer_param_tensors(ts, &cfg);
        EXPECT(nt == 5 && !strcmp(ts[0].name, "wq") && ts[0].offset == 0 && ts[1].offset == 3 * 16 * 24 &&
                   !strcmp(ts[2].name, "k_norm") && ts[2].offset == 4 * 16 * 24 && !strcmp(ts[3].name, "k_norm_bias") &&
                   ts[4].offset == 4 * 16 * 24 + 32 && ts[4].shape[0] == 3 && ts[4].shape[1] == 24 &&
                   indexer_n_params(&cfg) == 4 * 16 * 24 + 32 + 72,
               "parameter layout");
        IndexerConfig bad = cfg;
        bad.d_rope = 7;
        EXPECT(indexer_config_check(&bad, &st) != 0, "odd d_rope accepted");
        bad = small_cfg(INDEXER_COLLAPSED, INDEXER_NORM_NONE, 0);
        bad.n_heads = 2;
        EXPECT(indexer_config_check(&bad, &st) != 0, "collapsed with 2 heads accepted");
        // Values that would abort (RoPE tables, allocations) or give NaN later.
        struct { const char *what; int d_index, d_rope, heads; float eps, theta; } out_of_range[] = {
            {"d_rope beyond the RoPE tables", INDEXER_MAX_D_INDEX, 2 * INDEXER_MAX_D_ROPE, 1, 1e-5f, 100.0f},
            {"d_rope > d_index", 16, 32, 1, 1e-5f, 100.0f},
            {"d_index 2^30", 1 << 30, 8, 1, 1e-5f, 100.0f},
            {"d_index 0", 0, 0, 1, 1e-5f, 100.0f},
            {"n_heads 2^20", 16, 8, 1 << 20, 1e-5f, 100.0f},
            {"norm_eps 0", 16, 8, 1, 0.0f, 100.0f},
            {"norm_eps NaN", 16, 8, 1, NAN, 100.0f},
            {"rope_theta 1e-30", 16, 8, 1, 1e-5f, 1e-30f},
            {"rope_theta inf", 16, 8, 1, 1e-5f, INFINITY},
        };
        for (size_t i = 0; i < sizeof out_of_range / sizeof out_of_range[0]; i++) {
            bad = small_cfg(out_of_range[i].heads > 1 ? INDEXER_EXPANDED : INDEXER_COLLAPSED, INDEXER_NORM_LAYER, 8);
            bad.d_index = out_of_range[i].d_index, bad.d_rope = out_of_range[i].d_rope;
            bad.n_heads = out_of_range[i].heads, bad.norm_eps = out_of_range[i].eps;
            bad.rope_theta = out_of_range[i].theta;
            EXPECT(indexer_config_check(&bad, &st) != 0, "%s accepted", out_of_range[i].what);
        }
        bad = small_cfg(INDEXER_COLLAPSED, INDEXER_NORM_LAYER, 8);
        bad.d_index = INDEXER_MAX_D_INDEX, bad.d_rope = INDEXER_MAX_D_ROPE;
        EXPECT(indexer_config_check(&bad, &st) == 0, "the largest allowed d_index/d_rope refused: %s", st.msg);
        float *a = xalloc(sizeof(float) * indexer_n_params(&cfg)), *b = xalloc(sizeof(float) * indexer_n_params(&cfg));
        indexer_init(&cfg, a, 7);
        indexer_init(&cfg, b, 7);
        double s2 = 0.0;
        for (int i = 0; i < 16 * 24; i++) s2 += (double)a[i] * a[i];
        EXPECT(!memcmp(a, b, sizeof(float) * indexer_n_params(&cfg)) && a[ts[2].offset] == 1.0f &&
                   a[ts[3].offset] == 0.0f && fabs(s2 / (16 * 24) - 1.0 / 24) < 0.2 / 24,
               "init: reproducible, norm 1/0, var 1/d_model (got %.4f vs %.4f)", s2 / (16 * 24), 1.0 / 24);
        indexer_init(&cfg, b, 8);
        EXPECT(memcmp(a, b, sizeof(float) * 16 * 24) != 0, "init ignores the seed");
        free(a), free(b);
    }

    const char *verdict[2] = {"ok", "FAILED"};
    int before = failures;
    // (a) forward; (b) loss; (c) gradients; over every variant × norm × rope × T × teacher.
    const int Ts[3] = {1, 7, 70};
    int combo = 0;
    for (int vi = 0; vi < 2; vi++)
        for (int ni = 0; ni < 3; ni++)
            for (int ri = 0; ri < 2; ri++)
                for (int ti = 0; ti < 3; ti++)
                    for (int mha = 0; mha < 2; mha++, combo++) {
                        const int T = Ts[ti], Hq = mha ? 3 : 4, Hkv = mha ? 3 : 2;
                        Case c = case_make(small_cfg(variants[vi], norms[ni], ropes[ri]), T, Hq, Hkv, 8, 1.5,
                                           1000 + combo);
                        if (!mha) check_forward(&c);
                        int *qs = xalloc(sizeof(int) * (T + 1));
                        const char *qname;
                        const int nq = make_queries(qs, T, combo / 2 + mha, &qname);
                        // FD on every combination at T ≤ 7, and at T = 70 for GQA (plus MHA for one norm).
                        const int fd = T <= 7 || !mha || ni == 2;
                        check_loss_grad(&c, qs, nq, qname, fd);
                        free(qs);
                        case_free(&c);
                    }
    // A peaky teacher (logits of std ~16: many P terms underflow to 0 in fp32).
    for (int vi = 0; vi < 2; vi++) {
        Case c = case_make(small_cfg(variants[vi], INDEXER_NORM_RMS, 8), 40, 4, 2, 8, 4.0, 77 + vi);
        int qs[40];
        const char *qname;
        const int nq = make_queries(qs, 40, 0, &qname);
        check_loss_grad(&c, qs, nq, "all(peaky teacher)", 1);
        case_free(&c);
    }
    // Longer: 150 positions, several query and key tiles, loss only.
    {
        Case c = case_make(small_cfg(INDEXER_EXPANDED, INDEXER_NORM_LAYER, 8), 150, 4, 2, 8, 1.5, 99);
        int qs[160];
        const char *qname;
        const int nq = make_queries(qs, 150, 3, &qname);
        check_loss_grad(&c, qs, nq, qname, 0);
        case_free(&c);
    }
    printf("config/layout/init: %s\n", verdict[before > 0]);
    printf("(a)-(c): %s\n", verdict[failures > before]);
    printf("(a) forward (q, k, w, scores, lse) vs naive double: max rel err %.2e\n", worst_fwd);
    printf("(b) loss vs naive double: max abs err %.2e, max rel err %.2e where abs > 5e-7; accumulate (+=) max rel err "
           "%.2e\n", worst_loss_abs, worst_loss, worst_accum);
    printf("(c) gradients vs central FD (double, h=1e-6): max err/max|g| %.2e over %d entries (tol %.0e); "
           "comparator flagged every sign flip and index shift: %s\n",
           worst_grad, n_grad_checked, GRAD_TOL, comparator_fail ? "NO" : "yes");

    printf("threads: ");
    // Thread count: same loss and gradients (up to summation order) with 3 threads, bitwise repeatable.
    {
        Case c = case_make(small_cfg(INDEXER_EXPANDED, INDEXER_NORM_LAYER, 8), 150, 4, 2, 8, 1.5, 5);
        int qs[150];
        for (int t = 0; t < 150; t++) qs[t] = t;
        float *g1 = xalloc(sizeof(float) * c.np), *g3 = xalloc(sizeof(float) * c.np), *g3b = xalloc(sizeof(float) * c.np);
        const double l1 = indexer_kl_loss_cpu(g1, &c.cfg, c.params, c.x, c.tq, c.tk, c.tlse, 150, 4, 2, 8, c.scale, qs, 150);
        omp_set_num_threads(3);
        const double l3 = indexer_kl_loss_cpu(g3, &c.cfg, c.params, c.x, c.tq, c.tk, c.tlse, 150, 4, 2, 8, c.scale, qs, 150);
        const double l3b = indexer_kl_loss_cpu(g3b, &c.cfg, c.params, c.x, c.tq, c.tk, c.tlse, 150, 4, 2, 8, c.scale, qs, 150);
        omp_set_num_threads(1);
        double e = 0.0, m = 1e-30;
        for (int64_t i = 0; i < c.np; i++) e = fmax(e, fabs(g1[i] - g3[i])), m = fmax(m, fabs(g1[i]));
        printf("1 vs 3 loss diff %.2e, grad max rel diff %.2e; 3-thread rerun bitwise equal: %s\n",
               fabs(l1 - l3), e / m, l3 == l3b && !memcmp(g3, g3b, sizeof(float) * c.np) ? "yes" : "NO");
        EXPECT(l1 == l3 && e / m < 1e-5, "1 vs 3 threads differ: loss %.3g vs %.3g, grads %.2e", l1, l3, e / m);
        EXPECT(l3 == l3b && !memcmp(g3, g3b, sizeof(float) * c.np), "3-thread runs are not bitwise equal");
        free(g1), free(g3), free(g3b);
        case_free(&c);
    }

    // (f) block-aware objectives: loss parts vs the naive double reference,
    // gradients vs central FD of it; identities; thread counts.
    before = failures;
    {
        const int bsels[4] = {1, 3, 16, 64};
        int combo_f = 0;
        for (int vi = 0; vi < 2; vi++)
            for (int ni = 0; ni < 3; ni += 2)
                for (int ti = 1; ti < 3; ti++)
                    for (int bi = 0; bi < 4; bi++, combo_f++) {
                        const int T = Ts[ti];
                        Case c = case_make(small_cfg(variants[vi], norms[ni], 8), T, 4, 2, 8, 1.5, 2000 + combo_f);
                        int *qs = xalloc(sizeof(int) * (T + 1));
                        const char *qname;
                        const int nq = make_queries(qs, T, combo_f, &qname);
                        IndexerObjective o = {bi % 2 ? INDEXER_OBJ_MIX : INDEXER_OBJ_BLOCK, bsels[bi], 0.7};
                        check_loss_grad_obj(&c, qs, nq, qname, T <= 7 || bi >= 1, &o);
                        if (bi == 0) check_objective_identities(&c, qs, nq);
                        free(qs);
                        case_free(&c);
                    }
        // A peaky teacher, block of the whole sequence (one block, every query).
        Case c = case_make(small_cfg(INDEXER_COLLAPSED, INDEXER_NORM_RMS, 8), 40, 4, 2, 8, 4.0, 2077);
        int qs[40];
        for (int t = 0; t < 40; t++) qs[t] = t;
        IndexerObjective o = {INDEXER_OBJ_BLOCK, 64, 1.0};
        check_loss_grad_obj(&c, qs, 40, "all(peaky teacher)", 1, &o);
        case_free(&c);
        // Thread counts: same loss and gradients with 3 threads, bitwise repeatable.
        c = case_make(small_cfg(INDEXER_EXPANDED, INDEXER_NORM_LAYER, 8), 150, 4, 2, 8, 1.5, 2078);
        int qa[150];
        for (int t = 0; t < 150; t++) qa[t] = t;
        o = (IndexerObjective){INDEXER_OBJ_MIX, 16, 2.0};
        float *g1 = xalloc(sizeof(float) * c.np), *g3 = xalloc(sizeof(float) * c.np), *g3b = xalloc(sizeof(float) * c.np);
        const double l1 = loss_call(g1, NULL, &c, qa, 150, &o);
        omp_set_num_threads(3);
        const double l3 = loss_call(g3, NULL, &c, qa, 150, &o), l3b = loss_call(g3b, NULL, &c, qa, 150, &o);
        omp_set_num_threads(1);
        double e = 0.0, m = 1e-30;
        for (int64_t i = 0; i < c.np; i++) e = fmax(e, fabs(g1[i] - g3[i])), m = fmax(m, fabs(g1[i]));
        EXPECT(l1 == l3 && e / m < 1e-5, "objective mix: 1 vs 3 threads differ: loss %.3g vs %.3g, grads %.2e", l1, l3,
               e / m);
        EXPECT(l3 == l3b && !memcmp(g3, g3b, sizeof(float) * c.np), "objective mix: 3-thread runs are not bitwise equal");
        free(g1), free(g3), free(g3b);
        case_free(&c);
    }
    printf("(f): %s\n", verdict[failures > before]);
    printf("(f) block/mix objectives: parts vs naive double max abs err %.2e; gradients vs central FD max err/max|g| "
           "%.2e over %d entries; identities (query = kl loss bitwise, block bsel 1 = per query, mix w 0 = per query) "
           "and 1 vs 3 threads checked\n", worst_block_loss, worst_block_grad, n_block_grad_checked);

    // (d) supports and (e) mass recall.
    before = failures;
    {
        const int ks[4] = {1, 4, 16, 100}, bsels[5] = {1, 3, 8, 33, 64};
        for (int vi = 0; vi < 2; vi++)
            for (int ni = 0; ni < 3; ni += 2) {
                Case c = case_make(small_cfg(variants[vi], norms[ni], 8), 70, 4, 2, 8, 1.5, 300 + vi * 3 + ni);
                for (int a = 0; a < 4; a++)
                    for (int b = 0; b < 5; b++) {
                        check_select(&c, ks[a], bsels[b], 0);
                        check_select(&c, ks[a], bsels[b], 1);
                    }
                const int refine[][3] = {{4, 8, 4}, {4, 8, 16}, {4, 33, 12}, {16, 64, 32}, {1, 3, 2}, {4, 8, 70}};
                for (int r = 0; r < 6; r++) check_select_refined(&c, refine[r][0], refine[r][1], refine[r][2]);
                int qs[70];
                const char *qname;
                const int nq = make_queries(qs, 70, 2, &qname);
                for (int a = 0; a < 4; a++) check_recall(&c, qs, nq, ks[a]);
                case_free(&c);
            }
        Case c = case_make(small_cfg(INDEXER_COLLAPSED, INDEXER_NORM_NONE, 0), 1, 4, 2, 8, 1.5, 9);
        check_select(&c, 1, 1, 0);
        check_select(&c, 3, 4, 0);
        int q0 = 0;
        check_recall(&c, &q0, 1, 1);
        case_free(&c);
    }
    printf("(d)-(e): %s\n", verdict[failures > before]);
    printf("(d) select: %d rows checked against the naive sort, the tie rule (all-zero scores) and k >= t+1; "
           "%d differed from the reference only at a near-tie; two-stage: %d rows against the naive top-k of the "
           "block's candidates (cand >= T: the per-query rows exactly)\n", n_sel_checked, n_near, n_refined_checked);
    printf("(e) mass recall vs naive double: max abs err %.2e\n", worst_recall);
    if (failures) {
        fprintf(stderr, "test_indexer: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_indexer: all passed\n");
    return 0;
}
