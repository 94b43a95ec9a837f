// indexer.h: the indexer of one full-attention layer — its configuration, its
// flat parameter buffer, the per-token projections (CPU, fp32), and the set of
// trained indexers of a model that the forward passes read.
//
// Definitions (docs/design.md, "Indexer"). x_t = the layer's normed attention input
// [d_model]; d_I = d_index; H = n_heads (1 for the head-collapsed form).
//   q^I_t     = R_t(W_q x_t)                      [H, d_I]  (collapsed: H = 1)
//   k^I_j     = R_j(N(W_k x_j))                   [d_I]     one key per token
//   collapsed score_{t,j} = q^I_t·k^I_j / sqrt(d_I)
//   expanded  score_{t,j} = Σ_h w_{t,h}·ReLU(q^I_{t,h}·k^I_j),  w_t = W_w x_t  [H]
//   Q_t(j)    = softmax over j ≤ t of score_{t,j}
// N is the key norm: none, RMSNorm  N(u) = u / sqrt(mean(u²) + eps) ⊙ g, or
// LayerNorm  N(u) = (u − mean(u)) / sqrt(var(u) + eps) ⊙ g + b (biased variance).
//
// RoPE (our choice, fixed here): the HF "rotate half" layout on the first d_rope
// dims of every q^I head and of k^I; dims ≥ d_rope pass through. With
// half = d_rope/2, pair (i, i + half) for i < half turns by angle t·inv_freq[i],
//   inv_freq[i] = rope_theta^(−2i/d_rope)   (computed in double, stored fp32)
//   angle       = (float)t · inv_freq[i]    (fp32 product, cosf/sinf)
//   v'[i]       = v[i]·cos − v[i+half]·sin,  v'[i+half] = v[i+half]·cos + v[i]·sin
// which is how transformers forms cos/sin for a default-RoPE model (and how
// model/rope.c does it for the backbone), so a PyTorch twin matches.
//
// Parameter layout: one flat fp32 buffer, tensors in this order, row-major,
// each starting where the previous one ends (gradients use the same layout):
//   wq          [H·d_I, d_model]   row h·d_I + c is channel c of head h
//   wk          [d_I, d_model]
//   k_norm      [d_I]              present unless key_norm = NONE (the gain g)
//   k_norm_bias [d_I]              present only for LayerNorm (the bias b)
//   ww          [H, d_model]       present only for the expanded variant
//
// Projection functions follow the twin convention: outputs → inputs → dims;
// parameter gradients accumulate (+=) into a buffer of the parameter layout.
#pragma once
#include <stdint.h>

#include "status.h"

typedef enum { INDEXER_COLLAPSED = 0, INDEXER_EXPANDED = 1 } IndexerVariant;
typedef enum { INDEXER_NORM_NONE = 0, INDEXER_NORM_RMS = 1, INDEXER_NORM_LAYER = 2 } IndexerNorm;

typedef struct {
    IndexerVariant variant;  // INDEXER_COLLAPSED (default) | INDEXER_EXPANDED
    int d_model;             // width of x (the backbone's hidden size)
    int d_index;             // d_I: channels of each q^I head and of k^I
    int d_rope;              // leading dims of q^I/k^I that get RoPE (0 = none; even, ≤ d_index)
    int n_heads;             // H^I (must be 1 for the collapsed variant)
    IndexerNorm key_norm;    // N on the key: NONE | RMS | LAYER
    float norm_eps;          // eps of the key norm
    float rope_theta;        // RoPE base
} IndexerConfig;

// What the distillation loss matches (docs/design.md "Loss"). With 𝒯 the
// sampled queries (ascending) and 𝒯_B = {t ∈ 𝒯 : ⌊t/s⌋ = b} the ones in block
// B = [b·s, (b+1)·s) (s = bsel), n_B = |𝒯_B|, ℬ = the blocks with n_B ≥ 1:
//   L_query = (1/|𝒯|) Σ_{t∈𝒯} KL(P_t ‖ Q_t)
//   L_block = (1/|ℬ|) Σ_{B∈ℬ} KL(Ā_B ‖ Q̄_B),
//     Ā_B(j) = (1/n_B) Σ_{t∈𝒯_B, t≥j} P_t(j),  Q̄_B(j) = (1/n_B) Σ_{t∈𝒯_B, t≥j} Q_t(j),  j ≤ max 𝒯_B
// (causal inside a block: key j counts only for the queries t ≥ j that see it,
// as the block-shared selection aggregates; each sums to 1, so 1/n_B is the
// normalisation). QUERY: L = L_query; BLOCK: L = L_block; MIX: L = L_query +
// block_weight·L_block. With 𝒯 every position ≥ min_pos of whole blocks,
// Ā_B is the deployed block aggregate A_B / n_B.
typedef enum { INDEXER_OBJ_QUERY = 0, INDEXER_OBJ_BLOCK = 1, INDEXER_OBJ_MIX = 2 } IndexerObjectiveKind;
typedef struct {
    IndexerObjectiveKind kind;
    int bsel;             // s of the block term (≥ 1; unused by QUERY)
    double block_weight;  // w of MIX (≥ 0)
} IndexerObjective;

// The default objective: per query (bsel 64, weight 1 for when a flag switches it).
IndexerObjective indexer_objective_default(void);
// "query" | "block" | "mix"; NULL for an unknown kind.
const char *indexer_objective_name(IndexerObjectiveKind kind);
// The kind of a name, or -1.
int indexer_objective_parse(const char *name);

// The default: head-collapsed, d_I = 128, d_rope = 64, LayerNorm on the key
// (eps 1e-6), θ = 10000.
IndexerConfig indexer_config_default(int d_model);

// Bounds of a usable configuration (what indexer_config_check enforces): the
// RoPE tables hold at most INDEXER_MAX_D_ROPE/2 frequencies, and the other
// bounds keep one layer's parameters, moments and scratch within a few GB.
enum {
    INDEXER_MAX_D_MODEL = 1 << 16,
    INDEXER_MAX_D_INDEX = 4096,
    INDEXER_MAX_D_ROPE = 1024,
    INDEXER_MAX_HEADS = 64,
};

// 0 if cfg is usable, else -1 with a message naming the bad field: the
// variant and key norm are known, 1 ≤ d_model ≤ INDEXER_MAX_D_MODEL,
// 1 ≤ d_index ≤ INDEXER_MAX_D_INDEX, d_rope even in [0, min(d_index,
// INDEXER_MAX_D_ROPE)], 1 ≤ n_heads ≤ INDEXER_MAX_HEADS (1 when collapsed),
// norm_eps in (0, 1] with a key norm, rope_theta in [1, 1e12] with RoPE.
int indexer_config_check(const IndexerConfig *cfg, Status *st);

// Offsets of each tensor in the flat buffer (−1 when absent) and the total.
typedef struct {
    int64_t wq, wk, k_norm, k_norm_bias, ww;
    int64_t n;
} IndexerLayout;

IndexerLayout indexer_layout(const IndexerConfig *cfg);

// Number of floats in the flat parameter buffer.
int64_t indexer_n_params(const IndexerConfig *cfg);

// One tensor of the buffer, for export: name ("wq", "wk", "k_norm",
// "k_norm_bias", "ww"), offset in floats, shape (ndim 1 or 2).
enum { INDEXER_MAX_TENSORS = 5 };
typedef struct {
    const char *name;
    int64_t offset;
    int ndim;
    int64_t shape[2];
} IndexerTensor;

// Fills out[0..n) with the tensors of cfg in layout order; returns n.
int indexer_param_tensors(IndexerTensor out[INDEXER_MAX_TENSORS], const IndexerConfig *cfg);

// Seeded initialisation (own PRNG: splitmix64 + Box-Muller, so it does not
// depend on libc): projections wq, wk, ww ~ N(0, 1/d_model); k_norm = 1,
// k_norm_bias = 0. Same seed, same buffer, on every platform.
void indexer_init(const IndexerConfig *cfg, float *params, uint64_t seed);

// In-place RoPE on v[n, H, d_I] (first d_rope dims of each head), row r at
// position pos[r] (pos NULL: r). inverse ≠ 0 applies the transpose R_tᵀ (the
// rotation by −angle), which is what the backward needs.
void indexer_rope(float *v, const IndexerConfig *cfg, const int *pos, int n, int H, int inverse);

// q[n, H·d_I] = R_pos(x[n, d_model]·W_qᵀ); w[n, H] = x·W_wᵀ for the expanded
// variant (w may be NULL otherwise). x holds the n query rows (already
// gathered); pos[r] is row r's position (NULL: r).
void indexer_queries_forward(float *q, float *w, const IndexerConfig *cfg, const float *params, const float *x,
                             const int *pos, int n);

// k[T, d_I] = R_j(N(u_j)), u = x[T, d_model]·W_kᵀ for positions 0..T-1. Saves
// what the backward needs (either may be NULL when there is no backward):
// u [T, d_I] the pre-norm projection and stat [T, 2] = (mean, rstd) of each row
// (mean 0 for RMSNorm; unused without a norm).
void indexer_keys_forward(float *k, float *u, float *stat, const IndexerConfig *cfg, const float *params,
                          const float *x, int T);

// Backward of indexer_queries_forward: grads.wq += (R_posᵀ dq)ᵀ·x and, for the
// expanded variant, grads.ww += dwᵀ·x. dq [n, H·d_I], dw [n, H] (NULL when
// collapsed); x, pos as in the forward. dq is not modified.
void indexer_queries_backward(float *grads, const float *dq, const float *dw, const IndexerConfig *cfg,
                              const float *x, const int *pos, int n);

// Backward of indexer_keys_forward: from dk [T, d_I] (not modified),
// du = N'ᵀ(R_jᵀ dk); grads.wk += duᵀ·x, grads.k_norm (+ k_norm_bias) += their
// parts. u and stat are what the forward saved.
void indexer_keys_backward(float *grads, const float *dk, const IndexerConfig *cfg, const float *params,
                           const float *x, const float *u, const float *stat, int T);

// The trained indexers of one model: one configuration, and per model layer a
// flat parameter buffer or NULL where the layer has none. Built by
// indexer_set_load (checkpoints/export.h), read by the forward passes.
typedef struct IndexerSet {
    IndexerConfig cfg;
    char fingerprint[65];
    int n_model_layers;  // the base model's layer count (params is indexed by model layer)
    float **params;      // [n_model_layers]; NULL where a layer has no indexer
    int default_k, default_bsel;
} IndexerSet;
