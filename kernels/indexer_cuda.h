// indexer_cuda.h: the indexer on the GPU (only with SPINDLE_HAVE_CUDA), the
// CUDA twins of kernels/indexer_ops.h and train/adamw.h with the same
// semantics, argument order and definitions (kernels/indexer.h; docs/design.md
// "Indexer", "Loss"). Pointers are device pointers unless named *_host;
// cfg is a host struct. params/grads use the flat layout of kernels/indexer.h.
// x [T, d_model] is the layer's normed attention input; tq [T, Hq·dh],
// tk [T, Hkv·dh] the teacher's q, k as attention uses them; tlse [Hq, T].
// No T×T buffer: the loss is fused flash style over key tiles; inference
// scores a chunk of query rows × T at a time and selects from it.
//
// Head-collapsed variant only (kernels/cuda/indexer.cu): with the expanded
// variant every indexer function here prints a message and aborts; the CPU
// twin serves that ablation. The loss's parameter gradients are summed with
// atomics, so they match the CPU twin to fp32 rounding but are not bitwise
// reproducible run to run; the loss value is (per-block partials added on the
// host in a fixed order). queries is a device array; the loss and recall copy
// it to the host once per call to check it (a synchronisation).
// Note for C++/CUDA callers: indexer.h has no extern "C" of its own, so a .cu
// file includes it inside extern "C" { } before this header.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "indexer.h"

#ifdef __cplusplus
extern "C" {
#endif

// indexer_kl_loss_cpu on the GPU: returns the mean KL over the queries and
// accumulates (+=) the parameter gradients into grads (NULL: loss only).
// queries: device array of n_queries distinct ascending positions in [0, T).
// bf16_teacher = 1 (dh 64, 128 or 256; ignored otherwise): the teacher's P is
// rebuilt from bf16 copies of tq, tk on tensor cores (mma.sync; fp32 sums and
// exponentials), the rest unchanged: the CPU twin's function of bf16-rounded
// tq, tk, up to summation order (tests/twins/indexer.c checks it against the
// CPU twin on bf16-rounded teacher inputs).
double indexer_kl_loss_cuda(float *grads, const IndexerConfig *cfg, const float *params, const float *x,
                            const float *tq, const float *tk, const float *tlse, int T, int Hq, int Hkv, int dh,
                            float scale, const int32_t *queries, int n_queries, int bf16_teacher);

// indexer_objective_loss_cpu on the GPU (QUERY: indexer_kl_loss_cuda). BLOCK
// and MIX: the kl kernel over tiles that never straddle two blocks also writes
// each tile's column sums of P and Q; a block kernel adds a block's tiles in
// order into Ā, Q̄, its KL terms and ρ = Ā/Q̄ (ragged vectors of max 𝒯_B + 1
// floats per block); then c_t and the block term's gradient, two passes over
// the scores. parts as the CPU twin's; bf16_teacher as indexer_kl_loss_cuda.
double indexer_objective_loss_cuda(float *grads, double *parts, const IndexerConfig *cfg, const IndexerObjective *obj,
                                   const float *params, const float *x, const float *tq, const float *tk,
                                   const float *tlse, int T, int Hq, int Hkv, int dh, float scale,
                                   const int32_t *queries, int n_queries, int bf16_teacher);

// indexer_mass_recall_cpu on the GPU (recall [n_queries] device, may be NULL).
double indexer_mass_recall_cuda(float *recall, const IndexerConfig *cfg, const float *params, const float *x,
                                const float *tq, const float *tk, const float *tlse, int T, int Hq, int Hkv,
                                int dh, float scale, const int32_t *queries, int n_queries, int k);

// indexer_select_cpu on the GPU: sel [rows, k] ascending then −1, n_sel [rows];
// rows = T (bsel = 1) or ceil(T/bsel), block rows aggregate Q like the oracle.
// scores = IX_SCORES_FP32: fp32 scores (the twin's function, up to summation
// order). IX_SCORES_TF32: the projections and the score GEMM on TF32 tensor
// cores (operands rounded to 10-bit mantissas inside each product, fp32
// accumulate). IX_SCORES_BF16:
// for bsel > 1, q and k rounded to bf16 and the block sums computed on tensor
// cores without a score buffer (indexer_block_scores_bf16_cuda; TF32 where it
// declines the shape, and for bsel = 1; with SPINDLE_FUSED_SELECT=1, bsel = 1
// goes through indexer_select_fused_bf16_cuda). The last two are for the bf16
// forward, whose q and k carry little more precision than that: the selection
// is a top-k of slightly perturbed values, so keys near the k-th may swap.
typedef enum { IX_SCORES_FP32 = 0, IX_SCORES_TF32 = 1, IX_SCORES_BF16 = 2 } IndexerScores;
void indexer_select_cuda(int32_t *sel, int32_t *n_sel, const IndexerConfig *cfg, const float *params,
                         const float *x, int T, int k, int bsel, IndexerScores scores);

// indexer_select_cuda for bsel > 1 with IX_SCORES_BF16, overlapped with the
// work that reads its rows: the projections on the default stream, then the
// query blocks b_first … (the rows of the earlier ones are left as they are) in
// n_chunks chunks of equal size, each chunk's ranking values and
// top-k on side stream 1 (ops_cuda.h, cuda_stream_use), after which
// attend(ctx, b0, nb) is called on the host with side stream 2 current and
// ordered after that chunk's rows of sel, n_sel — so the callback's launches
// for chunk c run while stream 1 computes chunk c + 1. The same sel, n_sel as
// indexer_select_cuda (every block's values come from the same kernel and
// order). Returns with the default stream current, everything queued; -1, with
// nothing done, where the block kernel does not take the shape (d_index 64 or
// 128, bsel a multiple of 16 up to 128). (indexer.cu)
int indexer_select_blocks_overlap_cuda(int32_t *sel, int32_t *n_sel, const IndexerConfig *cfg, const float *params,
                                       const float *x, int T, int k, int bsel, int b_first, int n_chunks,
                                       void (*attend)(void *ctx, int b0, int nb), void *ctx);

// indexer_select_refined_cpu on the GPU (two-stage supports, docs/design.md):
// C_B = indexer_select_cuda's block rows at k = cand (the same scores mode),
// then each query's top-k of its fp32 scores over C_B ∩ [0, t]; sel [T, k],
// n_sel [T]. cand ≥ k. (indexer.cu, with the second stage's kernels of
// indexer_refine.cu)
void indexer_select_refined_cuda(int32_t *sel, int32_t *n_sel, const IndexerConfig *cfg, const float *params,
                                 const float *x, int T, int k, int bsel, int cand, IndexerScores scores);

// The second stage's kernels (indexer_refine.cu), for the blocks b0 … b0 + nb − 1
// of bsel queries with candidates csel [blocks, cand] (ascending, cn[b] of them):
// R[(t − b0·bsel)·ld + i] = c_col·q_t·kk_{C_b[i]} for C_b[i] ≤ t, −∞ elsewhere;
// then, for rows t0 … t0 + rows − 1 with the top-k positions pos [rows, k] (pn
// of them, ascending) of those R rows, sel[t] = the candidates at the positions
// that are ≤ t, n_sel[t] their count.
void indexer_refine_scores_cuda(float *R, int64_t ld, const float *q, const float *kk, int dI, float c_col,
                                const int32_t *csel, const int32_t *cn, int cand, int T, int bsel, int b0, int nb);
void indexer_refine_rows_cuda(int32_t *sel, int32_t *n_sel, const int32_t *pos, const int32_t *pn,
                              const int32_t *csel, const int32_t *cn, int cand, int k, int bsel, int t0, int rows);

// A[(b − b0)·ld + j] = Σ_{t∈B, t≥j} exp(c_col·q_t·k_j − lse_t) for the query
// blocks b = b0 … b0 + nb − 1 of bsel rows and j < end(B) = min((b+1)·bsel, T)
// (lse_t over j ≤ t): the block-shared ranking values of indexer_select_cpu,
// from bf16 q, k [T, d_index] (device, 16-byte aligned) on tensor cores, with
// no [rows, T] score buffer. Takes d_index 64 or 128 and bsel a multiple of 16
// up to 128; returns -1 without launching for anything else, 0 when launched.
// Judged by tests/twins/indexer.c against a double-precision sum over the same
// bf16-rounded q, k. (indexer_block_tc.cu)
int indexer_block_scores_bf16_cuda(float *A, int64_t ld, const void *q, const void *k, int T, int d_index,
                                   float c_col, int bsel, int b0, int nb);
// The same values on Hopper's warpgroup MMA (indexer_block_wg.cu, sm_90a), what
// indexer_block_scores_bf16_cuda runs under SPINDLE_SELECT_WGMMA=1 where this takes the call: d_index 64
// or 128, bsel 64 (the TTFT's shape), 16-byte aligned q, k, an sm_90 device; −1 without launching
// otherwise, 0 when launched. Same function, the same fp32 sums in another order inside the tensor cores.
int indexer_block_scores_wg_cuda(float *A, int64_t ld, const void *q, const void *k, int T, int d_index,
                                 float c_col, int bsel, int b0, int nb);

// The per-query selection (bsel = 1) with no score buffer: sel [T, kk]
// ascending then −1, n_sel [T] = min(kk, t + 1), row t the top kk of
// s_{t,j} = c_col·q_t·k_j over j ≤ t (larger value first, equal values → the
// lower index, −0 as +0: topk_support's rule), from bf16 q, k [T, d_index]
// (device, 16-byte aligned) on tensor cores with fp32 sums. The scores are
// computed again in each of a few sweeps of a radix select (the same bits each
// time); the set is exactly the top kk of those fp32 scores. Takes d_index 32,
// 64, 128 or 256; returns -1 without launching for anything else, 0 when
// launched. Judged by tests/twins/indexer.c against the top kk of the scores
// in double over the same bf16-rounded q, k. (indexer_select_fused.cu)
int indexer_select_fused_bf16_cuda(int32_t *sel, int32_t *n_sel, const void *q, const void *k, int T, int d_index,
                                   float c_col, int kk);

// adamw_step on the GPU (t counts from 1); decay_mask device bytes or NULL.
void adamw_step_cuda(double lr, double beta1, double beta2, double eps, double weight_decay, long t, float *params,
                     const float *grads, float *m, float *v, size_t n, const unsigned char *decay_mask);

// grad_clip on the GPU: returns the global L2 norm before clipping and scales
// grads to max_norm when above it (max_norm ≤ 0: no clipping).
double grad_clip_cuda(float *grads, size_t n, double max_norm);

#ifdef __cplusplus
}
#endif
