// forward.h: the CPU forward pass of a backbone (layer.h's loop over the CPU twin's ops), fp32.
#pragma once
#include <stdint.h>

#include "model.h"
#include "status.h"

// Seconds spent per part of the last forward (for `--profile` and docs).
// attention: the attend op of full / sliding layers; linear: the whole mixer of
// the Gated DeltaNet layers (their projections included). select: the part of
// attention that chose the sparse supports — the indexer's selection, or the
// oracle's (with the dense pass for its statistics) — timed by the CUDA twin
// only (the CPU oracle selects inside its attention; there it stays 0).
typedef struct {
    double gemm, attention, linear, other, lm_head, select;
} ForwardProfile;

// Sparse attention at every full-attention layer (NULL: dense everywhere).
typedef struct {
    int topk;  // keys kept per support
    int bsel;  // queries sharing one support (1 = per query)
    // Hybrid supports (docs/design.md "Hybrid supports"): each query also keeps
    // its own recent most recent keys and the first sinks keys (0, 0: the
    // top-k support alone). The CPU twin only: the GPU forward takes 0, 0.
    int recent, sinks;
    // Per-query supports (bsel 1) on the GPU in bf16: > 1 executes them in
    // blocks of this many queries, each block's union of supports as dense
    // tensor-core tiles with a per-query membership mask
    // (support_attention_union_tc_cuda); the result is per-query attention
    // either way, so the CPU twin ignores it. 0: per-query gathers.
    int exec_block;
    // Per-layer budgets (docs/design.md "Per-layer budgets"): layer_topk[l] keys
    // per support at model layer l instead of topk (indexed by model layer;
    // entries of layers that do not run sparse are not read). NULL: topk at
    // every layer. The CPU twin only: the GPU forward sizes its supports by topk,
    // so its callers refuse per-layer budgets.
    const int *layer_topk;
    // Two-stage supports (docs/design.md "Two-stage supports"; indexer layers,
    // bsel > 1): > 0 makes each block of bsel queries take this many candidate
    // keys by its aggregate A_B, then each query the top-k of those by its own
    // score — per-query supports drawn from a block's candidates. 0: off. The
    // GPU forward executes them as per-query supports (in unions of exec_block
    // queries, else of bsel, in bf16 without statistics).
    int refine;
} Sparsity;

// Rows of supports a pass selects: T per query (bsel 1, or two-stage supports),
// else one per block of bsel queries.
static inline int sparsity_rows(const Sparsity *sp, int T) {
    return sp->refine > 0 && sp->bsel > 1 ? T : (T + sp->bsel - 1) / sp->bsel;
}

// Keys per support at model layer l (Sparsity.layer_topk, else topk).
static inline int sparsity_topk(const Sparsity *sp, int l) { return sp->layer_topk ? sp->layer_topk[l] : sp->topk; }

// What the sparse supports kept, summed over the full-attention layers (either
// may be NULL): recall[t] += Σ_{j∈S_t} P_t(j), support[t] += |S_t|, per layer;
// a full-attention layer the pass leaves dense (no indexer for it) adds 1 and
// t + 1: it keeps every key. Sliding-window layers add nothing.
// union_bsel > 0 (the CPU twin, per-query supports, b_sel 1): at every sparse
// full-attention layer, each block of union_bsel consecutive queries (a divisor
// of 64) adds the size of the union of its queries' supports to union_keys and
// 1 to union_blocks (SupportUnion, kernels/ops.h): what a block-wise execution
// of per-query supports must load.
// layer_recall / layer_support (the CPU twin; either may be NULL): the same
// sums per model layer, over positions: layer_recall[l] += Σ_t Σ_{j∈S_t} P_t(j),
// layer_support[l] += Σ_t |S_t|, at the layers whose supports were computed
// (a full-attention layer left dense adds nothing there).
typedef struct {
    float *recall;   // [T]
    float *support;  // [T]
    int union_bsel;
    double union_keys, union_blocks;
    double *layer_recall, *layer_support;  // [n_layers]
} SparseStats;

// Sees each full-attention layer's attention inputs during a forward pass
// (teacher emission; sliding-window layers are not tapped):
// xn [T, hidden] the layer's normed attention input (what its q/k/v projections
// read), q [T, Hq·dh] and k [T, Hkv·dh] exactly as attention uses them (after
// bias, q/k norm and RoPE), and lse [Hq, T] the per-head log-sum-exp of the
// dense attention scores (NULL when the oracle replaces attention).
// wants says which of the four fn reads: a forward passes NULL for the others
// and need not produce them for the tap (the GPU forward then skips their copy
// to the host). 0 means all four, so a tap that does not say gets everything.
// TAP_DEVICE (GPU forward only): fn gets the CUDA twin's own device arrays
// instead of host copies — nothing crosses the bus and nothing waits; fn's
// kernels queue behind the pass's on the default stream, and the arrays are
// overwritten by the next layer, so fn must be done with them (in stream
// order) when it returns. The CPU twin ignores the bit (its arrays are host
// arrays anyway).
enum { TAP_XN = 1u, TAP_Q = 2u, TAP_K = 4u, TAP_LSE = 8u, TAP_ALL = 15u, TAP_DEVICE = 16u };
typedef struct {
    void (*fn)(void *ctx, int layer, const float *xn, const float *q, const float *k, const float *lse, int T);
    void *ctx;
    unsigned wants;  // TAP_XN | TAP_Q | TAP_K | TAP_LSE; 0: TAP_ALL
} ForwardTap;

struct IndexerSet;  // kernels/indexer.h

// How a trained indexer scores keys in the GPU forward (ForwardOpts.indexer_scores):
// FWD_IX_SCORES_DEFAULT (0, what a zero-initialised ForwardOpts holds) is the
// precision's default — fp32 in the fp32 and mixed modes; in bf16, TF32 tensor
// cores per query and fused bf16 tensor-core block sums block-shared. The others
// are 1 + the IndexerScores value of kernels/indexer_cuda.h:
// (IndexerScores)(v − 1) for v > 0. The CPU twin always scores in fp32.
typedef enum {
    FWD_IX_SCORES_DEFAULT = 0,
    FWD_IX_SCORES_FP32 = 1,  // 1 + IX_SCORES_FP32
    FWD_IX_SCORES_TF32 = 2,  // 1 + IX_SCORES_TF32: TF32 score GEMM (+ block aggregation for blocks)
    FWD_IX_SCORES_BF16 = 3,  // 1 + IX_SCORES_BF16
} FwdIndexerScores;

// A decoding cache (ForwardOpts.kv): each attention layer's k and v, exactly as
// its attention used them (after bias, q/k norm and RoPE), for positions
// 0..len−1, and the RoPE tables of both layer kinds for max_len positions.
// Sliding-window layers keep every position too (their attention reads only
// the window). Linear-attention (Gated DeltaNet) layers have no cache here:
// kvcache_new refuses such models.
typedef struct KvCache {
    int max_len, len;
    int n_layers, nkv;           // nkv = Hkv·dh, a row of k or v
    float **k, **v;              // [n_layers] → [max_len, nkv]: host arrays, device arrays when device
    float *cos_t[2], *sin_t[2];  // [max_len, rot/2]: full (0) and sliding (1) layers' tables (host caches)
    int device;                  // a GPU cache (fwd_cuda_kvcache_new; the CUDA twin keeps its own RoPE tables)
} KvCache;

// Whether m's layers can be decoded with a cache: 0, or -1 with st saying why
// (a linear-attention layer, whose recurrent state no cache carries yet).
int kvcache_check(const Model *m, Status *st);
// A host cache for up to max_len positions of m (kvcache_check first). Returns
// 0, or -1 with st saying why. Caller frees with kvcache_free.
int kvcache_new(KvCache **out, const Model *m, int max_len, Status *st);
void kvcache_free(KvCache *kv);
// What both twins' caches share: the struct and each layer's k, v arrays of
// max_len rows from alloc (xmalloc, cuda_malloc), no RoPE tables; released
// with the matching release (free, cuda_free), the host tables freed too.
KvCache *kvcache_alloc(const Model *m, int max_len, void *(*alloc)(size_t bytes));
void kvcache_release(KvCache *kv, void (*release)(void *p));

typedef struct {
    const Sparsity *sparse;  // NULL: dense attention everywhere
    // With sparse: trained indexers choose the supports of the layers they
    // cover (other layers stay dense); NULL: the attention-mass oracle does.
    const struct IndexerSet *indexer;
    SparseStats *stats;      // with sparse: what the supports kept (may be NULL)
    ForwardProfile *prof;    // may be NULL
    const ForwardTap *tap;   // may be NULL
    // > 0: teacher emission up to layer stop_after_tap − 1. The pass ends right
    // after that layer's tap (its o-projection and MLP, every later layer, the
    // final norm and anything downstream are skipped), so its cost follows the
    // deepest stored layer; hidden is then left unspecified. 0: the whole pass.
    int stop_after_tap;
    // How the GPU scores an indexer's keys: 0 the precision's default, else
    // 1 + an IndexerScores value (kernels/indexer_cuda.h). The CPU twin scores in fp32.
    int indexer_scores;
    // A decoding cache (NULL: none): the pass covers positions kv->len ..
    // kv->len + T − 1, appends their k and v and advances kv->len by T.
    // kv->len = 0 is a prefill, attending as the options say (dense, oracle or
    // indexer supports); kv->len > 0 is a decoding step: dense attention over
    // the cache at every layer, whatever sparse says (the sparse prefill is
    // what is measured; decoding is dense). No tap, no stop_after_tap with kv.
    // The CPU twin only: a twin without the cache ops refuses the pass.
    KvCache *kv;
} ForwardOpts;

// Runs the backbone over ids[0..T) and writes the final normed hidden states
// hidden[T, hidden_size]. With o->sparse the attention-mass oracle picks each
// layer's support along the sparse trajectory. o may be NULL (dense, nothing else).
void forward_hidden(const Model *m, const int32_t *ids, int T, float *hidden, const ForwardOpts *o);

// One layer's teacher q [T, Hq·dh] and k [T, Hkv·dh] from its normed input xn,
// as its attention uses them: projection (+bias), q/k norm, RoPE. cos_t/sin_t
// are the rope_tables of the model for T positions.
void forward_layer_qk(const Model *m, int layer, const float *xn, int T, const float *cos_t, const float *sin_t,
                      float *q, float *k);

// logits[rows, vocab] = hidden[rows, hidden_size] · lm_headᵀ, then soft-capped
// (cap·tanh(logits/cap)) when cfg.final_softcap > 0.
void forward_lm_head(const Model *m, const float *hidden, int rows, float *logits);

// Where a greedy generation's time went (generate_greedy fills it; may be NULL).
// Wall-clock seconds: the prefill up to its last logits on the host (so it
// includes what a new prompt length costs the first time: cuBLAS and cuDNN
// plans for the shape), and the cached steps after it.
typedef struct {
    double prefill_s, decode_s;  // the decoding is the generation's n − 1 cached steps (n: its return value)
    int profile_steps;     // in: nonzero times the steps op by op (a sync after each op: slower)
    ForwardProfile step;   // out, with profile_steps: the steps' sums
} GenTiming;

// Greedy decoding on the CPU twin: prefill of ids[0..T) under o (its sparse /
// indexer settings; o may be NULL: dense), then up to max_new tokens, each the
// argmax of the last logits (ties: the lowest id), fed back through a dense
// cached step. Stops after emitting a token of stop[0..n_stop). out[max_new]
// gets the tokens (the stop token included); logits (NULL or [max_new, vocab])
// the logits each token was picked from. Returns the count, or -1 with st
// saying why (a model kvcache_new refuses). tm (may be NULL): GenTiming.
int forward_generate(const Model *m, const int32_t *ids, int T, const ForwardOpts *o, int max_new,
                     const int32_t *stop, int n_stop, int32_t *out, float *logits, GenTiming *tm, Status *st);

// The greedy loop behind forward_generate and its GPU twin (fwd_cuda_generate):
// last_logits(ctx, ids, n, opts, row) runs one pass of n tokens through the
// twin with opts (carrying kv) and writes the last position's logits [vocab];
// the prefill gets o's options plus kv, each step a dense cached pass of one
// token. Returns the count of tokens written to out.
typedef void (*LastLogitsFn)(void *ctx, const int32_t *ids, int n, const ForwardOpts *opts, float *row);
int generate_greedy(LastLogitsFn last_logits, void *ctx, KvCache *kv, int vocab, const int32_t *ids, int T,
                    const ForwardOpts *o, int max_new, const int32_t *stop, int n_stop, int32_t *out, float *logits,
                    GenTiming *tm);
