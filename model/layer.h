// layer.h: the backbone's one layer loop, over layer kinds, and the ops a twin
// supplies beneath it.
//
// The recipe (layer.c) is written once. Per layer it reads the layer's kind
// from the config and picks the token mixer — full GQA attention (dense, over
// the attention-mass oracle's supports, or over a trained indexer's),
// sliding-window attention (always dense, in its window) or Gated DeltaNet
// linear attention (a recurrence: nothing to select) — and the MLP module
// (dense or mixture of experts), then runs
//   attention block:  xn = RMSNorm(x); q, k, v = proj(xn) (+ q/k norm, RoPE of
//                     the kind; [gate = xn·Wgᵀ]); a = Attention(q, k, v); [tap];
//                     x += [post-norm]((a [· sigmoid(gate)])·Woᵀ (+b))
//   linear block:     xn = RMSNorm(x); x += out_proj(GatedDeltaNet(xn))
//   MLP block:        xn = RMSNorm(x); x += [post-norm](down(act(gate) ⊙ up))
//                     or x += MoE(xn)
// with the family's choices carried by the config and weights (which norms
// exist, the activation, the embedding scale), never by a branch on the family.
// The CPU twin (forward.c, fp32) and the CUDA twin (forward_cuda.c, fp32 /
// mixed / bf16) each fill a LayerOps table; how an op reaches its result —
// which kernel, which precision, which fallback when a kernel does not take a
// shape — is the op's business, not the recipe's.
#pragma once
#include <stdint.h>

#include "forward.h"
#include "indexer.h"
#include "model.h"

typedef enum { ATTEND_DENSE, ATTEND_ORACLE, ATTEND_INDEXER } AttendMode;

// How one layer attends.
typedef struct {
    AttendMode mode;
    int window;               // 0: every causal key; W > 0: keys t − W < j ≤ t (sliding layers)
    int topk, bsel;           // ORACLE, INDEXER: the supports
    int recent, sinks;        // ORACLE, INDEXER: each query's window and sink keys added to its support
    int exec_block;           // INDEXER, bsel 1: Sparsity's exec_block (how the GPU runs the supports)
    int refine;               // INDEXER, bsel > 1: Sparsity's refine (two-stage supports, per query)
    int stats;                // add recall / support of this layer's supports into the pass's sums
    int lse;                  // DENSE: write the per-head log-sum-exp (the tap reads it)
    const IndexerConfig *ix_cfg;  // INDEXER: the indexers' shape
    const float *ix_params;       // INDEXER: the layer's indexer parameters (host)
} AttendPlan;

// A twin's ops. tw is the twin's state for one pass (from begin to finish).
typedef struct {
    // Scratch for T tokens and x = embed[ids] · embed_scale. The options tell
    // which optional buffers the pass needs (tap copies, statistics, supports).
    void *(*begin)(void *twin, const int32_t *ids, int T, const ForwardOpts *o);
    // xn = RMSNorm(x)·attn_norm, the operand of the q/k/v projections;
    // keep_fp32: xn is also read in fp32 (by an indexer or the tap).
    void (*attn_in)(void *tw, int l, int keep_fp32);
    // q, k, v of layer l from that operand: projections (+bias), q/k norm,
    // RoPE with the tables of the layer's kind.
    void (*qkv)(void *tw, int l);
    // The layer's attention output from q, k, v (and xn for an indexer).
    void (*attend)(void *tw, int l, const AttendPlan *p);
    // Hands xn, q, k and lse of layer l to tap->fn, as host arrays (lse only in a
    // dense pass: begin keeps a buffer for it exactly then).
    void (*tap)(void *tw, int l, const ForwardTap *tap);
    // x += [post_attn_norm]((a [· sigmoid(gate)])·Woᵀ (+b)).
    void (*attn_out)(void *tw, int l);
    // A linear_attention layer's whole mixer from attn_in's operand (docs/design.md,
    // "Gated DeltaNet"): x += out_proj(gated_rmsnorm(DeltaRule(conv(qkv)), z)).
    void (*linear_attn)(void *tw, int l);
    // x += [post_mlp_norm](down(act(xn·Wgateᵀ) ⊙ xn·Wupᵀ)), xn = RMSNorm(x)·mlp_norm.
    void (*mlp)(void *tw, int l);
    // x += routed experts(xn) + sigmoid(xn·w_sgᵀ) · shared expert(xn), xn = RMSNorm(x)·mlp_norm.
    void (*moe)(void *tw, int l);
    // Decoding cache (ForwardOpts.kv; NULL in a twin without one, which then
    // refuses a pass with kv). kv_store: appends layer l's k and v of this
    // pass at rows kv->len.. of its cache. kv_attend: the pass's queries attend
    // densely over the cache's rows 0..kv->len + T − 1 (p->window for sliding
    // layers).
    void (*kv_store)(void *tw, int l, KvCache *kv);
    void (*kv_attend)(void *tw, int l, const AttendPlan *p, const KvCache *kv);
    // Waits until the twin's queued work is done (profiling; NULL: nothing to wait for).
    void (*sync)(void);
    // stopped = 0: final norm, then the pass's output (hidden states, or the
    // last position's logits); adds the pass's statistics into o->stats.
    // Frees tw either way.
    void (*finish)(void *tw, int stopped, const ForwardOpts *o);
} LayerOps;

// Runs the recipe over ids[0..T) with the twin's ops (twin: its upload or
// model state, handed to begin).
void layer_loop(const LayerOps *ops, void *twin, const ModelConfig *c, const int32_t *ids, int T,
                const ForwardOpts *o);
