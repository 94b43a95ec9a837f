// indexer_ops.h: the indexer's pairwise ops (query × key), CPU twin. Names end
// in _cpu; a CUDA twin keeps the names with _cuda. Arguments go outputs →
// inputs → dimensions; parameter gradients accumulate (+=) into a buffer of
// the layout in kernels/indexer.h. Definitions of q^I, k^I, w, score and Q are
// in kernels/indexer.h; the teacher (docs/design.md
// "Teacher distribution") is
//   a_{h,t}(j) = exp(s·q_{h,t}·k_{h/G,j} − lse_{h,t}),  P_t(j) = (1/Hq) Σ_h a_{h,t}(j),  j ≤ t
// rebuilt tile by tile from the teacher q [T, Hq·dh], k [T, Hkv·dh] and
// lse [Hq, T]. No op allocates a T×T buffer: work goes in tiles of queries ×
// keys, and the widest buffer is a tile of queries × all keys (O(32·T) floats
// per thread) in the inference ops.
//
// Tie rule of every top-k: larger value first, then lower index (the oracle's,
// kernels/cpu/oracle_cpu.c). Selections are returned sorted ascending.
#pragma once
#include "indexer.h"

// Forward for inspection and tests: for each of the n_queries positions
// queries[r] (any order), score[r, j] = score_{t,j} for j ≤ t and −inf for
// j > t (row length T), and lse[r] = log Σ_{j≤t} exp(score_{t,j}) (the
// statistic the loss saves). Costs O(n_queries·T) memory in score: pick few
// queries at long context. Either output may be NULL.
void indexer_forward_cpu(float *score, float *lse, const IndexerConfig *cfg, const float *params, const float *x,
                         int T, const int *queries, int n_queries);

// The distillation loss and its gradients, fused (flash style, two passes
// over key tiles per tile of sampled queries):
//   L = (1/|𝒯|) Σ_{t∈𝒯} Σ_{j≤t} P_t(j)·(log P_t(j) − log Q_t(j))   (P = 0 terms are 0)
//   ∂L/∂score_{t,j} = (Q_t(j) − P_t(j)) / |𝒯|
// and back through the scores, RoPE, the key norm and the projections into
// grads (+=, same layout as params; NULL for the loss alone). x [T, d_model]
// the layer's normed attention input; tq [T, Hq·dh], tk [T, Hkv·dh] the
// teacher's q, k as attention uses them; tlse [Hq, T]; scale = s.
// queries[0..n_queries) = 𝒯, sorted ascending, distinct, in [0, T).
// Returns the mean KL over the queries (0 when n_queries = 0). For a fixed
// OMP thread count the result and the gradients are bitwise reproducible.
double indexer_kl_loss_cpu(float *grads, const IndexerConfig *cfg, const float *params, const float *x,
                           const float *tq, const float *tk, const float *tlse, int T, int Hq, int Hkv, int dh,
                           float scale, const int *queries, int n_queries);

// The training objective (kernels/indexer.h, IndexerObjective), fused: QUERY
// is indexer_kl_loss_cpu itself (same bits); BLOCK and MIX take, per block of
// sampled queries, one pass for lse^I, one that rebuilds P and Q tiles and sums
// their columns into Ā_B, Q̄_B (vectors of max 𝒯_B + 1 floats: no T×T buffer)
// and, for MIX, adds the per-query term's gradient, then two passes over the
// scores for the block term's gradient
//   ∂L_block/∂score_{t,i} = Q_t(i)·(c_t − ρ_B(i)) / (n_B·|ℬ|),
//   ρ_B(i) = Ā_B(i)/Q̄_B(i),  c_t = Σ_{j≤t} Q_t(j)·ρ_B(j)
// (ρ = 1 everywhere when Q̄_B = Ā_B: no gradient; with bsel 1 it is Q − P).
// parts (NULL, or [2]) receives L_query and L_block over the same queries
// (L_block NaN for QUERY, which does not compute it). Returns L. Other
// arguments, the gradient layout and reproducibility as indexer_kl_loss_cpu.
double indexer_objective_loss_cpu(float *grads, double *parts, const IndexerConfig *cfg, const IndexerObjective *obj,
                                  const float *params, const float *x, const float *tq, const float *tk,
                                  const float *tlse, int T, int Hq, int Hkv, int dh, float scale, const int *queries,
                                  int n_queries);

// Attention-mass recall of the indexer's per-query top-k: for each query t,
// recall[r] = Σ_{j∈TopK(score_t)} P_t(j) (all keys 0..t when t+1 ≤ k), ranked
// by score (the order of Q_t). recall [n_queries] may be NULL. Returns the mean
// over the queries (0 when n_queries = 0). Arguments as indexer_kl_loss_cpu.
double indexer_mass_recall_cpu(float *recall, const IndexerConfig *cfg, const float *params, const float *x,
                               const float *tq, const float *tk, const float *tlse, int T, int Hq, int Hkv,
                               int dh, float scale, const int *queries, int n_queries, int k);

// The indexer's supports at inference (docs/design.md "Indexer at inference"),
// k ≥ 1, bsel ≥ 1:
//   bsel = 1: row t (T rows) = top-k of score_{t,j} over j ≤ t (all when t+1 ≤ k);
//   bsel = s: row b (ceil(T/s) rows) for block B = [b·s, min((b+1)·s, T)) =
//             top-k of A_B(j) = Σ_{t∈B, t≥j} Q_t(j) over j < end(B) (all when end(B) ≤ k).
// sel [rows, k]: row r holds n_sel[r] ≤ k key indices sorted ascending, then −1.
// Attention then uses S_B ∩ [0, t] (or {t} if empty), as the oracle does.
void indexer_select_cpu(int *sel, int *n_sel, const IndexerConfig *cfg, const float *params, const float *x, int T,
                        int k, int bsel);

// Two-stage supports (docs/design.md "Two-stage supports"), per query, cand ≥ k:
// each block B of bsel queries takes the candidates C_B = top-cand of A_B (as
// indexer_select_cpu's block rows), then each query t ∈ B its own top-k of
// score_{t,j} over j ∈ C_B, j ≤ t (all of those when k or fewer). sel [T, k],
// n_sel [T] as indexer_select_cpu's bsel-1 rows. cand ≥ T: the per-query supports.
void indexer_select_refined_cpu(int *sel, int *n_sel, const IndexerConfig *cfg, const float *params, const float *x,
                                int T, int k, int bsel, int cand);
