// indexer_cpu.c: the indexer's pairwise ops, CPU twin (see indexer_ops.h).
//
// Everything works on tiles of BQ query rows × BK keys. A score tile is one
// small GEMM (collapsed) or H of them (expanded: D_h = Q_h·Kᵀ, then
// S = Σ_h w_h ⊙ ReLU(D_h)). Per-query-tile work runs in parallel (OpenMP,
// OpenBLAS held to one thread inside the region).
//
// The loss, per tile of sampled queries (flash style, never a T×T buffer):
//   pass 1: the indexer's own log-sum-exp lse^I_t over key tiles (online max/sum);
//   pass 2: per key tile, log Q = score − lse^I; P from the teacher, one GEMM per
//           head: P = (1/Hq) Σ_h exp(s·q_h·k_{h/G}ᵀ − lse_h); the loss
//           Σ P·(log P − log Q) (P = 0 terms skipped) and G = (Q − P)/|𝒯|; then
//     collapsed: dq^I += G·K/√d_I,          dk^I += Gᵀ·Q^I/√d_I
//     expanded:  dw_h += rowsum(G ⊙ ReLU(D_h)),  E_h = G ⊙ w_h ⊙ [D_h > 0],
//                dq^I_h += E_h·K,  dk^I += E_hᵀ·Q^I_h
// Query rows belong to one tile, so dq^I and dw are written without races; dk^I
// is summed in a per-thread buffer (tiles go round-robin to threads, schedule
// static) and the buffers are added in thread order: for a fixed thread count
// the result is bitwise reproducible. Finally the projections' backward
// (kernels/cpu/indexer.c) takes dq^I, dw, dk^I through RoPE, the key norm and the
// GEMMs into dW_q, dW_w, dW_k and the norm's parameters.
//
// The block objectives (indexer_objective_loss_cpu) work per block of sampled
// queries instead of per tile: the same two passes in chunks of BQ of the
// block's queries, summing P and Q by column into Ā_B, Q̄_B (one vector of
// keys each, per thread), then two more passes over the scores for c_t and the
// block term's gradient G = Q·(c_t − ρ)/(n_B·|ℬ|), with the same backward.
// Blocks go round-robin to threads as the tiles do.
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "fastexp.h"
#include "indexer_ops.h"
#include "status.h"
#include "topk.h"

enum { BQ = 32, BK = 64 };

// ---- projections and score tiles ----

// One sequence's indexer projections: q^I (and w) of the query rows, k^I of
// keys 0..n_keys-1.
typedef struct {
    const IndexerConfig *cfg;
    int H, dI;
    float *q;  // [rows, H·d_I]
    float *w;  // [rows, H] (expanded) or NULL
    float *k;  // [n_keys, d_I]
} Proj;

// Projects the query rows at positions pos[0..n) and the keys 0..n_keys-1.
// With u/stat not NULL the keys' forward saves what their backward needs.
static Proj proj_build(const IndexerConfig *cfg, const float *params, const float *x, const int *pos, int n,
                       int n_keys, float *u, float *stat) {
    Proj p = {cfg, cfg->n_heads, cfg->d_index, NULL, NULL, NULL};
    const int dm = cfg->d_model;
    float *xq = xmalloc(sizeof(float) * (size_t)n * dm);
    for (int r = 0; r < n; r++) memcpy(xq + (int64_t)r * dm, x + (int64_t)pos[r] * dm, sizeof(float) * dm);
    p.q = xmalloc(sizeof(float) * (size_t)n * p.H * p.dI);
    p.w = cfg->variant == INDEXER_EXPANDED ? xmalloc(sizeof(float) * (size_t)n * p.H) : NULL;
    p.k = xmalloc(sizeof(float) * (size_t)n_keys * p.dI);
    indexer_queries_forward(p.q, p.w, cfg, params, xq, pos, n);
    indexer_keys_forward(p.k, u, stat, cfg, params, x, n_keys);
    free(xq);
    return p;
}

static void proj_free(Proj *p) { free(p->q), free(p->w), free(p->k); }

// S[i·ld + j] = score of query row r0+i against key j0+j, i < nr, j < nk (no
// causal mask). Expanded: D [H, nr·BK] receives D_h = Q_h·Kᵀ (row stride BK),
// which the backward reuses; unused when collapsed.
static void score_tile(float *S, int ld, float *D, const Proj *p, int r0, int nr, int j0, int nk) {
    const int H = p->H, dI = p->dI;
    const float *K = p->k + (int64_t)j0 * dI;
    if (p->cfg->variant == INDEXER_COLLAPSED) {  // S = Q·Kᵀ / √d_I
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, dI, 1.0f / sqrtf((float)dI),
                    p->q + (int64_t)r0 * dI, dI, K, dI, 0.0f, S, ld);
        return;
    }
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < nk; j++) S[(int64_t)i * ld + j] = 0.0f;
    for (int h = 0; h < H; h++) {  // S += w_h ⊙ ReLU(Q_h·Kᵀ)
        float *Dh = D + (int64_t)h * BQ * BK;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, dI, 1.0f, p->q + (int64_t)r0 * H * dI + h * dI,
                    H * dI, K, dI, 0.0f, Dh, BK);
        for (int i = 0; i < nr; i++) {
            const float wh = p->w[(int64_t)(r0 + i) * H + h];
            float *s = S + (int64_t)i * ld;
            const float *d = Dh + (int64_t)i * BK;
#pragma omp simd
            for (int j = 0; j < nk; j++) s[j] += wh * (d[j] > 0.0f ? d[j] : 0.0f);
        }
    }
}

// Visible keys of a row at position t in the key tile starting at j0 (of nk):
// j0 + j ≤ t.
static inline int n_visible(int t, int j0, int nk) {
    const int nv = t - j0 + 1;
    return nv < 0 ? 0 : nv > nk ? nk : nv;
}

// lse[i] = log Σ_{j≤pos[i]} exp(score) for query rows r0..r0+nr-1 (positions
// pos[0..nr), ascending not required), over key tiles with an online max/sum.
static void tile_lse(float *lse, float *S, float *D, const Proj *p, const int *pos, int r0, int nr) {
    float m[BQ], l[BQ];
    int kend = 0;
    for (int i = 0; i < nr; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
        if (pos[i] + 1 > kend) kend = pos[i] + 1;
    }
    for (int j0 = 0; j0 < kend; j0 += BK) {
        const int nk = kend - j0 < BK ? kend - j0 : BK;
        score_tile(S, BK, D, p, r0, nr, j0, nk);
        for (int i = 0; i < nr; i++) {
            const int nv = n_visible(pos[i], j0, nk);
            if (nv == 0) continue;
            const float *s = S + (int64_t)i * BK;
            float mx = m[i], sum = 0.0f;
            for (int j = 0; j < nv; j++) mx = s[j] > mx ? s[j] : mx;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < nv; j++) sum += fast_expf(s[j] - mx);
            l[i] = l[i] * expf(m[i] - mx) + sum;
            m[i] = mx;
        }
    }
    for (int i = 0; i < nr; i++) lse[i] = m[i] + logf(l[i]);
}

// The parameters' gradient from ∂L/∂q^I (dq, dw) and the per-thread ∂L/∂k^I
// (dk_thr: summed in thread order into dk_thr[0]; threads that ran no tile
// left NULL), through the query and key projections: the last phase of both
// fused losses below.
static void params_backward(float *grads, float **dk_thr, int n_threads, const float *dq, const float *dw,
                            const IndexerConfig *cfg, const float *params, const float *x, const float *u,
                            const float *stat, int n_keys, const int *queries, int nq) {
    float *dk = dk_thr[0];
    for (int th = 1; th < n_threads; th++) {
        if (!dk_thr[th]) continue;
        for (int64_t i = 0; i < (int64_t)n_keys * cfg->d_index; i++) dk[i] += dk_thr[th][i];
    }
    float *xq = xmalloc(sizeof(float) * (size_t)nq * cfg->d_model);
    for (int r = 0; r < nq; r++)
        memcpy(xq + (int64_t)r * cfg->d_model, x + (int64_t)queries[r] * cfg->d_model, sizeof(float) * cfg->d_model);
    indexer_queries_backward(grads, dq, dw, cfg, xq, queries, nq);
    indexer_keys_backward(grads, dk, cfg, params, x, u, stat, n_keys);
    free(xq);
}

// Backward of one score tile: G [nr, BK] (row stride BK, 0 past each row's
// visible keys) = ∂L/∂score of query rows r0.. against keys j0..j0+nk-1 into
// dq^I (+=), dw (+=, expanded), dk^I (+=, a thread's buffer). D holds the
// tile's D_h from score_tile (expanded; overwritten by E_h).
//   collapsed: dq^I += G·K/√d_I,  dk^I += Gᵀ·Q^I/√d_I
//   expanded:  dw_h += rowsum(G ⊙ ReLU(D_h)),  E_h = G ⊙ w_h ⊙ [D_h > 0],
//              dq^I_h += E_h·K,  dk^I += E_hᵀ·Q^I_h
static void tile_backward(float *dq, float *dw, float *dk, const float *S, float *D, const Proj *p, int r0, int nr,
                          int j0, int nk) {
    const int H = p->H, dI = p->dI;
    const float *K = p->k + (int64_t)j0 * dI;
    if (p->cfg->variant == INDEXER_COLLAPSED) {
        const float c_col = 1.0f / sqrtf((float)dI);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, dI, nk, c_col, S, BK, K, dI, 1.0f,
                    dq + (int64_t)r0 * dI, dI);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, dI, nr, c_col, S, BK, p->q + (int64_t)r0 * dI, dI,
                    1.0f, dk + (int64_t)j0 * dI, dI);
        return;
    }
    for (int h = 0; h < H; h++) {
        float *Dh = D + (int64_t)h * BQ * BK;
        for (int i = 0; i < nr; i++) {
            const float *g = S + i * BK;
            float *d = Dh + i * BK, acc = 0.0f;
            const float wh = p->w[(int64_t)(r0 + i) * H + h];
            for (int j = 0; j < nk; j++) {
                const int on = d[j] > 0.0f;
                acc += on ? g[j] * d[j] : 0.0f;
                d[j] = on ? g[j] * wh : 0.0f;
            }
            dw[(int64_t)(r0 + i) * H + h] += acc;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, dI, nk, 1.0f, Dh, BK, K, dI, 1.0f,
                    dq + (int64_t)r0 * H * dI + h * dI, H * dI);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, dI, nr, 1.0f, Dh, BK, p->q + (int64_t)r0 * H * dI + h * dI,
                    H * dI, 1.0f, dk + (int64_t)j0 * dI, dI);
    }
}

// P [nr, BK] (row stride BK) = Hq·P_t(j) = Σ_h exp(s·q_{h,t}·k_{h/G,j} − lse_{h,t})
// for the rows at positions pos[0..nr) against keys j0..j0+nk-1, 0 where
// j > t; one GEMM per head into A. tqr holds the rows' teacher q (stride Hq·dh).
static void teacher_tile(float *P, float *A, const float *tqr, const float *tk, const float *tlse, const int *pos,
                         int nr, int j0, int nk, int T, int Hq, int Hkv, int dh, float scale) {
    const int G = Hq / Hkv;
    const int64_t tqs = (int64_t)Hq * dh, tks = (int64_t)Hkv * dh;
    for (int i = 0; i < nr * BK; i++) P[i] = 0.0f;
    for (int h = 0; h < Hq; h++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, dh, scale, tqr + (int64_t)h * dh, (int)tqs,
                    tk + j0 * tks + (int64_t)(h / G) * dh, (int)tks, 0.0f, A, BK);
        for (int i = 0; i < nr; i++) {
            const int nv = n_visible(pos[i], j0, nk);
            const float lh = tlse[(int64_t)h * T + pos[i]];
            const float *a = A + i * BK;
            float *pp = P + i * BK;
#pragma omp simd
            for (int j = 0; j < nv; j++) pp[j] += fast_expf(a[j] - lh);
        }
    }
}

// ---- forward (inspection) ----

void indexer_forward_cpu(float *score, float *lse, const IndexerConfig *cfg, const float *params, const float *x,
                         int T, const int *queries, int n_queries) {
    if (n_queries <= 0) return;
    int kend = 0;
    for (int r = 0; r < n_queries; r++) {
        SPINDLE_CHECK(queries[r] >= 0 && queries[r] < T);
        if (queries[r] + 1 > kend) kend = queries[r] + 1;
    }
    Proj p = proj_build(cfg, params, x, queries, n_queries, kend, NULL, NULL);
    const int n_tiles = (n_queries + BQ - 1) / BQ;
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel
    {
        float *rows = score ? NULL : xmalloc(sizeof(float) * (size_t)BQ * T);
        float *D = cfg->variant == INDEXER_EXPANDED ? xmalloc(sizeof(float) * (size_t)p.H * BQ * BK) : NULL;
#pragma omp for schedule(dynamic, 1)
        for (int tile = 0; tile < n_tiles; tile++) {
            const int r0 = tile * BQ, nr = n_queries - r0 < BQ ? n_queries - r0 : BQ;
            const int *pos = queries + r0;
            float *R = score ? score + (int64_t)r0 * T : rows;  // this tile's score rows, stride T
            int tend = 0;
            for (int i = 0; i < nr; i++) tend = pos[i] + 1 > tend ? pos[i] + 1 : tend;
            for (int j0 = 0; j0 < tend; j0 += BK)
                score_tile(R + j0, T, D, &p, r0, nr, j0, tend - j0 < BK ? tend - j0 : BK);
            for (int i = 0; i < nr; i++) {
                float *s = R + (int64_t)i * T;
                const int t = pos[i];
                for (int j = t + 1; j < T; j++) s[j] = -INFINITY;  // causal mask
                if (!lse) continue;
                float mx = -INFINITY;
                double sum = 0.0;
                for (int j = 0; j <= t; j++) mx = s[j] > mx ? s[j] : mx;
                for (int j = 0; j <= t; j++) sum += exp((double)s[j] - mx);
                lse[r0 + i] = mx + (float)log(sum);
            }
        }
        free(rows), free(D);
    }
    openblas_set_num_threads(blas_threads);
    proj_free(&p);
}

// ---- the loss ----

double indexer_kl_loss_cpu(float *grads, const IndexerConfig *cfg, const float *params, const float *x,
                           const float *tq, const float *tk, const float *tlse, int T, int Hq, int Hkv, int dh,
                           float scale, const int *queries, int n_queries) {
    if (n_queries <= 0) return 0.0;
    SPINDLE_CHECK(Hq % Hkv == 0);
    for (int r = 0; r < n_queries; r++)
        SPINDLE_CHECK(queries[r] >= 0 && queries[r] < T && (r == 0 || queries[r] > queries[r - 1]));
    const int H = cfg->n_heads, dI = cfg->d_index, nq = n_queries;
    const int expanded = cfg->variant == INDEXER_EXPANDED;
    const int64_t tqs = (int64_t)Hq * dh;    // teacher q row stride
    const int n_keys = queries[nq - 1] + 1;  // keys any query sees
    const float inv_n = 1.0f / nq, inv_hq = 1.0f / Hq;

    float *u = grads ? xmalloc(sizeof(float) * (size_t)n_keys * dI) : NULL;
    float *stat = grads ? xmalloc(sizeof(float) * (size_t)n_keys * 2) : NULL;
    Proj p = proj_build(cfg, params, x, queries, nq, n_keys, u, stat);
    float *dq = grads ? xcalloc((size_t)nq * H * dI, sizeof(float)) : NULL;            // ∂L/∂q^I
    float *dw = grads && expanded ? xcalloc((size_t)nq * H, sizeof(float)) : NULL;     // ∂L/∂w
    const int n_threads = omp_get_max_threads();
    float **dk_thr = xcalloc((size_t)n_threads, sizeof(float *));                     // ∂L/∂k^I per thread
    const int n_tiles = (nq + BQ - 1) / BQ;
    double *kl_tile = xcalloc((size_t)n_tiles, sizeof(double));

    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel num_threads(n_threads)
    {
        float *dk = NULL;
        if (grads) dk = dk_thr[omp_get_thread_num()] = xcalloc((size_t)n_keys * dI, sizeof(float));
        float *S = xmalloc(sizeof(float) * BQ * BK);                            // scores, then G
        float *A = xmalloc(sizeof(float) * BQ * BK);                            // one teacher head's s·q·k
        float *P = xmalloc(sizeof(float) * BQ * BK);                            // teacher P
        float *D = expanded ? xmalloc(sizeof(float) * (size_t)H * BQ * BK) : NULL;  // D_h = Q_h·Kᵀ
        float *tqr = xmalloc(sizeof(float) * (size_t)BQ * tqs);                 // teacher q rows of the tile
        float lse_i[BQ];
#pragma omp for schedule(static, 1)
        for (int tile = 0; tile < n_tiles; tile++) {
            const int r0 = tile * BQ, nr = nq - r0 < BQ ? nq - r0 : BQ;
            const int *pos = queries + r0;
            const int kend = pos[nr - 1] + 1;
            for (int i = 0; i < nr; i++) memcpy(tqr + i * tqs, tq + pos[i] * tqs, sizeof(float) * tqs);
            // Pass 1: lse^I_t.
            tile_lse(lse_i, S, D, &p, pos, r0, nr);
            // Pass 2: P and Q tiles, the loss, G = ∂L/∂score, and its backward.
            double kl = 0.0;
            for (int j0 = 0; j0 < kend; j0 += BK) {
                const int nk = kend - j0 < BK ? kend - j0 : BK;
                score_tile(S, BK, D, &p, r0, nr, j0, nk);
                teacher_tile(P, A, tqr, tk, tlse, pos, nr, j0, nk, T, Hq, Hkv, dh, scale);
                // KL terms and G = (Q − P)/|𝒯| (0 for j > t), written over S.
                for (int i = 0; i < nr; i++) {
                    const int nv = n_visible(pos[i], j0, nk);
                    float *s = S + i * BK;
                    const float *pp = P + i * BK;
                    float row = 0.0f;
                    for (int j = 0; j < nv; j++) {
                        const float pj = pp[j] * inv_hq, lq = s[j] - lse_i[i], qj = fast_expf(lq);
                        if (pj > 0.0f) row += pj * (logf(pj) - lq);
                        s[j] = (qj - pj) * inv_n;
                    }
                    for (int j = nv; j < nk; j++) s[j] = 0.0f;
                    kl += row;
                }
                if (grads) tile_backward(dq, dw, dk, S, D, &p, r0, nr, j0, nk);
            }
            kl_tile[tile] = kl;
        }
        free(S), free(A), free(P), free(D), free(tqr);
    }
    openblas_set_num_threads(blas_threads);

    double loss = 0.0;
    for (int tile = 0; tile < n_tiles; tile++) loss += kl_tile[tile];
    loss /= nq;
    if (grads) params_backward(grads, dk_thr, n_threads, dq, dw, cfg, params, x, u, stat, n_keys, queries, nq);
    for (int th = 0; th < n_threads; th++) free(dk_thr[th]);
    free(dk_thr), free(kl_tile), free(dq), free(dw), free(u), free(stat);
    proj_free(&p);
    return loss;
}

// ---- the block-aware objectives ----

double indexer_objective_loss_cpu(float *grads, double *parts, const IndexerConfig *cfg, const IndexerObjective *obj,
                                  const float *params, const float *x, const float *tq, const float *tk,
                                  const float *tlse, int T, int Hq, int Hkv, int dh, float scale, const int *queries,
                                  int n_queries) {
    if (obj->kind == INDEXER_OBJ_QUERY) {
        const double l = indexer_kl_loss_cpu(grads, cfg, params, x, tq, tk, tlse, T, Hq, Hkv, dh, scale, queries,
                                             n_queries);
        if (parts) parts[0] = l, parts[1] = NAN;
        return l;
    }
    if (parts) parts[0] = parts[1] = 0.0;
    if (n_queries <= 0) return 0.0;
    SPINDLE_CHECK(Hq % Hkv == 0 && (obj->kind == INDEXER_OBJ_BLOCK || obj->kind == INDEXER_OBJ_MIX));
    SPINDLE_CHECK(obj->bsel >= 1 && obj->block_weight >= 0.0);
    for (int r = 0; r < n_queries; r++)
        SPINDLE_CHECK(queries[r] >= 0 && queries[r] < T && (r == 0 || queries[r] > queries[r - 1]));
    const int H = cfg->n_heads, dI = cfg->d_index, nq = n_queries, bsel = obj->bsel;
    const int expanded = cfg->variant == INDEXER_EXPANDED;
    const int64_t tqs = (int64_t)Hq * dh;
    const int n_keys = queries[nq - 1] + 1;
    const float inv_hq = 1.0f / Hq;
    // Weights of the two terms in L, and the per-query term's ∂L/∂score scale.
    const double w_query = obj->kind == INDEXER_OBJ_MIX ? 1.0 : 0.0;
    const double w_block = obj->kind == INDEXER_OBJ_MIX ? obj->block_weight : 1.0;
    const float g_query = (float)(w_query / nq);

    // The blocks ℬ: runs of consecutive queries with the same ⌊t/bsel⌋.
    int *seg = xmalloc(sizeof(int) * (size_t)(nq + 1)), n_seg = 0, max_nb = 0;
    for (int r = 0; r < nq; r++)
        if (r == 0 || queries[r] / bsel != queries[r - 1] / bsel) seg[n_seg++] = r;
    seg[n_seg] = nq;
    for (int b = 0; b < n_seg; b++) max_nb = seg[b + 1] - seg[b] > max_nb ? seg[b + 1] - seg[b] : max_nb;

    float *u = grads ? xmalloc(sizeof(float) * (size_t)n_keys * dI) : NULL;
    float *stat = grads ? xmalloc(sizeof(float) * (size_t)n_keys * 2) : NULL;
    Proj p = proj_build(cfg, params, x, queries, nq, n_keys, u, stat);
    float *dq = grads ? xcalloc((size_t)nq * H * dI, sizeof(float)) : NULL;
    float *dw = grads && expanded ? xcalloc((size_t)nq * H, sizeof(float)) : NULL;
    const int n_threads = omp_get_max_threads();
    float **dk_thr = xcalloc((size_t)n_threads, sizeof(float *));
    double *klq_seg = xcalloc((size_t)n_seg, sizeof(double)), *klb_seg = xcalloc((size_t)n_seg, sizeof(double));

    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel num_threads(n_threads)
    {
        float *dk = NULL;
        if (grads) dk = dk_thr[omp_get_thread_num()] = xcalloc((size_t)n_keys * dI, sizeof(float));
        float *S = xmalloc(sizeof(float) * BQ * BK);                                // scores, then G
        float *A = xmalloc(sizeof(float) * BQ * BK);                                // one teacher head's s·q·k
        float *P = xmalloc(sizeof(float) * BQ * BK);                                // teacher P·Hq
        float *D = expanded ? xmalloc(sizeof(float) * (size_t)H * BQ * BK) : NULL;  // D_h = Q_h·Kᵀ
        float *tqr = xmalloc(sizeof(float) * (size_t)BQ * tqs);
        float *lse_b = xmalloc(sizeof(float) * (size_t)max_nb);    // lse^I of the block's queries
        double *c_b = xmalloc(sizeof(double) * (size_t)BQ);        // c_t of a chunk's queries
        float *agg_p = xmalloc(sizeof(float) * (size_t)n_keys);    // Σ_t P_t(j), then Ā_B
        float *agg_q = xmalloc(sizeof(float) * (size_t)n_keys);    // Σ_t Q_t(j), then ρ_B
#pragma omp for schedule(static, 1)
        for (int b = 0; b < n_seg; b++) {
            const int ra = seg[b], rb = seg[b + 1], nb = rb - ra, kend = queries[rb - 1] + 1;
            for (int j = 0; j < kend; j++) agg_p[j] = agg_q[j] = 0.0f;
            // Passes 1-2, a chunk of ≤ BQ of the block's queries at a time: lse^I;
            // P and Q tiles, the per-query KL and (MIX) its gradient; the column
            // sums Σ_{t∈𝒯_B, t≥j} P_t(j) and Σ Q_t(j), rows in position order.
            double klq = 0.0;
            for (int c0 = ra; c0 < rb; c0 += BQ) {
                const int nr = rb - c0 < BQ ? rb - c0 : BQ, *pos = queries + c0, ckend = pos[nr - 1] + 1;
                for (int i = 0; i < nr; i++) memcpy(tqr + i * tqs, tq + pos[i] * tqs, sizeof(float) * tqs);
                float *lse_i = lse_b + (c0 - ra);
                tile_lse(lse_i, S, D, &p, pos, c0, nr);
                for (int j0 = 0; j0 < ckend; j0 += BK) {
                    const int nk = ckend - j0 < BK ? ckend - j0 : BK;
                    score_tile(S, BK, D, &p, c0, nr, j0, nk);
                    teacher_tile(P, A, tqr, tk, tlse, pos, nr, j0, nk, T, Hq, Hkv, dh, scale);
                    for (int i = 0; i < nr; i++) {
                        const int nv = n_visible(pos[i], j0, nk);
                        float *s = S + i * BK;
                        const float *pp = P + i * BK;
                        float row = 0.0f;
                        for (int j = 0; j < nv; j++) {
                            const float pj = pp[j] * inv_hq, lq = s[j] - lse_i[i], qj = fast_expf(lq);
                            if (pj > 0.0f) row += pj * (logf(pj) - lq);
                            agg_p[j0 + j] += pj;
                            agg_q[j0 + j] += qj;
                            s[j] = (qj - pj) * g_query;
                        }
                        for (int j = nv; j < nk; j++) s[j] = 0.0f;
                        klq += row;
                    }
                    if (grads && w_query > 0.0) tile_backward(dq, dw, dk, S, D, &p, c0, nr, j0, nk);
                }
            }
            // Ā_B, Q̄_B (Q̄ floored at FLT_MIN, where every Q_t(j) underflowed),
            // KL(Ā_B ‖ Q̄_B) and ρ_B = Ā_B/Q̄_B (over agg_q).
            const float inv_nb = 1.0f / nb;
            double klb = 0.0;
            for (int j = 0; j < kend; j++) {
                const float a = agg_p[j] * inv_nb, qb = fmaxf(agg_q[j] * inv_nb, FLT_MIN);
                if (a > 0.0f) klb += a * (logf(a) - logf(qb));
                agg_q[j] = a / qb;
            }
            klq_seg[b] = klq, klb_seg[b] = klb;
            if (!grads || w_block == 0.0) continue;
            // Passes 3-4 per chunk: c_t = Σ_{j≤t} Q_t(j)·ρ_B(j); then
            // G = w·Q_t(j)·(c_t − ρ_B(j)) / (n_B·|ℬ|) and its backward.
            const float coef = (float)(w_block / ((double)nb * n_seg));
            const float *rho = agg_q;
            for (int c0 = ra; c0 < rb; c0 += BQ) {
                const int nr = rb - c0 < BQ ? rb - c0 : BQ, *pos = queries + c0, ckend = pos[nr - 1] + 1;
                const float *lse_i = lse_b + (c0 - ra);
                for (int i = 0; i < nr; i++) c_b[i] = 0.0;
                for (int j0 = 0; j0 < ckend; j0 += BK) {
                    const int nk = ckend - j0 < BK ? ckend - j0 : BK;
                    score_tile(S, BK, D, &p, c0, nr, j0, nk);
                    for (int i = 0; i < nr; i++) {
                        const int nv = n_visible(pos[i], j0, nk);
                        const float *s = S + i * BK;
                        float acc = 0.0f;
                        for (int j = 0; j < nv; j++) acc += fast_expf(s[j] - lse_i[i]) * rho[j0 + j];
                        c_b[i] += acc;
                    }
                }
                for (int j0 = 0; j0 < ckend; j0 += BK) {
                    const int nk = ckend - j0 < BK ? ckend - j0 : BK;
                    score_tile(S, BK, D, &p, c0, nr, j0, nk);
                    for (int i = 0; i < nr; i++) {
                        const int nv = n_visible(pos[i], j0, nk);
                        float *s = S + i * BK;
                        const float ct = (float)c_b[i];
                        for (int j = 0; j < nv; j++) s[j] = coef * fast_expf(s[j] - lse_i[i]) * (ct - rho[j0 + j]);
                        for (int j = nv; j < nk; j++) s[j] = 0.0f;
                    }
                    tile_backward(dq, dw, dk, S, D, &p, c0, nr, j0, nk);
                }
            }
        }
        free(S), free(A), free(P), free(D), free(tqr), free(lse_b), free(c_b), free(agg_p), free(agg_q);
    }
    openblas_set_num_threads(blas_threads);

    double l_query = 0.0, l_block = 0.0;
    for (int b = 0; b < n_seg; b++) l_query += klq_seg[b], l_block += klb_seg[b];
    l_query /= nq, l_block /= n_seg;
    if (parts) parts[0] = l_query, parts[1] = l_block;
    if (grads) params_backward(grads, dk_thr, n_threads, dq, dw, cfg, params, x, u, stat, n_keys, queries, nq);
    for (int th = 0; th < n_threads; th++) free(dk_thr[th]);
    free(dk_thr), free(klq_seg), free(klb_seg), free(seg), free(dq), free(dw), free(u), free(stat);
    proj_free(&p);
    return w_query * l_query + w_block * l_block;
}

// ---- inference: mass recall and supports ----

// R[i·ld + j] = score of query row r0+i against key j for j < kend (no mask),
// key tile by key tile.
static void score_rows(float *R, int ld, float *D, const Proj *p, int r0, int nr, int kend) {
    for (int j0 = 0; j0 < kend; j0 += BK) score_tile(R + j0, ld, D, p, r0, nr, j0, kend - j0 < BK ? kend - j0 : BK);
}

double indexer_mass_recall_cpu(float *recall, const IndexerConfig *cfg, const float *params, const float *x,
                               const float *tq, const float *tk, const float *tlse, int T, int Hq, int Hkv,
                               int dh, float scale, const int *queries, int n_queries, int k) {
    if (n_queries <= 0) return 0.0;
    SPINDLE_CHECK(Hq % Hkv == 0 && k >= 1);
    int n_keys = 0;
    for (int r = 0; r < n_queries; r++) {
        SPINDLE_CHECK(queries[r] >= 0 && queries[r] < T);
        if (queries[r] + 1 > n_keys) n_keys = queries[r] + 1;
    }
    const int G = Hq / Hkv;
    const int64_t tqs = (int64_t)Hq * dh, tks = (int64_t)Hkv * dh;
    Proj p = proj_build(cfg, params, x, queries, n_queries, n_keys, NULL, NULL);
    float *rec = xmalloc(sizeof(float) * (size_t)n_queries);
    const int n_tiles = (n_queries + BQ - 1) / BQ;
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel
    {
        float *R = xmalloc(sizeof(float) * (size_t)BQ * n_keys);  // a tile's score rows
        float *D = cfg->variant == INDEXER_EXPANDED ? xmalloc(sizeof(float) * (size_t)p.H * BQ * BK) : NULL;
        int *sel = xmalloc(sizeof(int) * (size_t)n_keys);
#pragma omp for schedule(dynamic, 1)
        for (int tile = 0; tile < n_tiles; tile++) {
            const int r0 = tile * BQ, nr = n_queries - r0 < BQ ? n_queries - r0 : BQ;
            int kend = 0;
            for (int i = 0; i < nr; i++) kend = queries[r0 + i] + 1 > kend ? queries[r0 + i] + 1 : kend;
            score_rows(R, n_keys, D, &p, r0, nr, kend);
            for (int i = 0; i < nr; i++) {
                const int t = queries[r0 + i];
                const int n = topk_support(sel, R + (int64_t)i * n_keys, t + 1, k);
                // Σ_{j∈S} P_t(j), P_t(j) = (1/Hq) Σ_h exp(s·q_{h,t}·k_{h/G,j} − lse_{h,t})
                float mass = 0.0f;
                for (int h = 0; h < Hq; h++) {
                    const float *qv = tq + t * tqs + (int64_t)h * dh, lh = tlse[(int64_t)h * T + t];
                    for (int a = 0; a < n; a++) {
                        const float *kv = tk + sel[a] * tks + (int64_t)(h / G) * dh;
                        float d = 0.0f;
                        for (int c = 0; c < dh; c++) d += qv[c] * kv[c];
                        mass += expf(scale * d - lh);
                    }
                }
                rec[r0 + i] = mass / Hq;
            }
        }
        free(R), free(D), free(sel);
    }
    openblas_set_num_threads(blas_threads);
    double mean = 0.0;
    for (int r = 0; r < n_queries; r++) mean += rec[r];
    if (recall) memcpy(recall, rec, sizeof(float) * (size_t)n_queries);
    free(rec);
    proj_free(&p);
    return mean / n_queries;
}

// Agg[j] = A_B(j) = Σ_{t∈[q0,q1), t≥j} Q_t(j) for j < q1, Q_t = softmax_{j≤t}(score_t);
// the block's queries in chunks of BQ score rows (R: BQ·T floats, clobbered).
static void block_aggregate(float *Agg, float *R, float *D, const Proj *p, int T, int q0, int q1) {
    for (int j = 0; j < q1; j++) Agg[j] = 0.0f;
    for (int c0 = q0; c0 < q1; c0 += BQ) {
        const int c1 = c0 + BQ < q1 ? c0 + BQ : q1;
        score_rows(R, T, D, p, c0, c1 - c0, c1);
        for (int t = c0; t < c1; t++) {
            float *s = R + (int64_t)(t - c0) * T, mx = -INFINITY, sum = 0.0f;
            for (int j = 0; j <= t; j++) mx = s[j] > mx ? s[j] : mx;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j <= t; j++) sum += (s[j] = fast_expf(s[j] - mx));
            const float inv = 1.0f / sum;
#pragma omp simd
            for (int j = 0; j <= t; j++) Agg[j] += s[j] * inv;
        }
    }
}

// Row r of sel (width k) = the n ≤ k indices in idx, then −1.
static void put_row(int *sel, int *n_sel, int r, int k, const int *idx, int n) {
    int *row = sel + (int64_t)r * k;
    for (int a = 0; a < k; a++) row[a] = a < n ? idx[a] : -1;
    n_sel[r] = n;
}

// The projections of x at positions 0 … T−1.
static Proj proj_all(const IndexerConfig *cfg, const float *params, const float *x, int T) {
    int *pos = xmalloc(sizeof(int) * (size_t)T);
    for (int t = 0; t < T; t++) pos[t] = t;
    Proj p = proj_build(cfg, params, x, pos, T, T, NULL, NULL);
    free(pos);
    return p;
}

void indexer_select_cpu(int *sel, int *n_sel, const IndexerConfig *cfg, const float *params, const float *x, int T,
                        int k, int bsel) {
    SPINDLE_CHECK(T >= 0 && k >= 1 && bsel >= 1);
    if (T == 0) return;
    Proj p = proj_all(cfg, params, x, T);
    // Tasks: BQ queries (bsel = 1) or one block (bsel > 1), longest rows first.
    const int per_task = bsel == 1 ? BQ : bsel;
    const int n_tasks = (T + per_task - 1) / per_task;
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel
    {
        float *R = xmalloc(sizeof(float) * (size_t)BQ * T);  // score rows of up to BQ queries
        float *Agg = xmalloc(sizeof(float) * (size_t)T);     // A_B
        float *D = cfg->variant == INDEXER_EXPANDED ? xmalloc(sizeof(float) * (size_t)p.H * BQ * BK) : NULL;
        int *idx = xmalloc(sizeof(int) * (size_t)T);
#pragma omp for schedule(dynamic, 1)
        for (int task = n_tasks - 1; task >= 0; task--) {
            const int q0 = task * per_task, q1 = q0 + per_task < T ? q0 + per_task : T;
            if (bsel == 1) {
                // S_t = top-k of score_{t,·} over j ≤ t.
                score_rows(R, T, D, &p, q0, q1 - q0, q1);
                for (int t = q0; t < q1; t++)
                    put_row(sel, n_sel, t, k, idx, topk_support(idx, R + (int64_t)(t - q0) * T, t + 1, k));
                continue;
            }
            block_aggregate(Agg, R, D, &p, T, q0, q1);
            put_row(sel, n_sel, q0 / bsel, k, idx, topk_support(idx, Agg, q1, k));
        }
        free(R), free(Agg), free(D), free(idx);
    }
    openblas_set_num_threads(blas_threads);
    proj_free(&p);
}

void indexer_select_refined_cpu(int *sel, int *n_sel, const IndexerConfig *cfg, const float *params, const float *x,
                                int T, int k, int bsel, int cand) {
    SPINDLE_CHECK(T >= 0 && k >= 1 && bsel >= 1 && cand >= k);
    if (T == 0) return;
    Proj p = proj_all(cfg, params, x, T);
    const int n_blocks = (T + bsel - 1) / bsel;
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel
    {
        float *R = xmalloc(sizeof(float) * (size_t)BQ * T);
        float *Agg = xmalloc(sizeof(float) * (size_t)T);
        float *D = cfg->variant == INDEXER_EXPANDED ? xmalloc(sizeof(float) * (size_t)p.H * BQ * BK) : NULL;
        int *C = xmalloc(sizeof(int) * (size_t)T), *idx = xmalloc(sizeof(int) * (size_t)T);
        float *v = xmalloc(sizeof(float) * (size_t)T);
#pragma omp for schedule(dynamic, 1)
        for (int b = n_blocks - 1; b >= 0; b--) {
            const int q0 = b * bsel, q1 = q0 + bsel < T ? q0 + bsel : T;
            // C_B = top-cand of A_B over j < end(B), ascending.
            block_aggregate(Agg, R, D, &p, T, q0, q1);
            const int nc = topk_support(C, Agg, q1, cand);
            // S_t = top-k of score_{t,j} over j ∈ C_B, j ≤ t (all of them when k or fewer).
            for (int c0 = q0; c0 < q1; c0 += BQ) {
                const int c1 = c0 + BQ < q1 ? c0 + BQ : q1;
                score_rows(R, T, D, &p, c0, c1 - c0, c1);
                for (int t = c0; t < c1; t++) {
                    const float *s = R + (int64_t)(t - c0) * T;
                    int m = 0;
                    while (m < nc && C[m] <= t) v[m] = s[C[m]], m++;
                    const int n = topk_support(idx, v, m, k);  // positions in C, ascending, so keys ascending
                    for (int a = 0; a < n; a++) idx[a] = C[idx[a]];
                    put_row(sel, n_sel, t, k, idx, n);
                }
            }
        }
        free(R), free(Agg), free(D), free(C), free(idx), free(v);
    }
    openblas_set_num_threads(blas_threads);
    proj_free(&p);
}
