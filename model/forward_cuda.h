// forward_cuda.h: the backbone forward pass on the GPU (only with
// SPINDLE_HAVE_CUDA), the CUDA twin of forward_hidden / forward_lm_head
// (model/forward.h): same layers, same order, same options (dense, the
// attention-mass oracle, trained indexers, sparse statistics, a tap for teacher
// emission), built from kernels/ops_cuda.h, oracle_cuda.h, indexer_cuda.h and
// sdpa_cuda.h.
//
// Three precisions, chosen when the weights are uploaded:
//   fp32  every weight and activation fp32, fp32 GEMMs (TF32 off), fp32
//         attention. The reference mode: it matches the CPU twin to fp32 rounding.
//   mixed the layers' weight matrices (q/k/v/o, gate/up/down) and the
//         activations feeding them are 16-bit, rounded (nearest even) right
//         before each GEMM, which accumulates in fp32 and writes fp32. The
//         16-bit type is the checkpoint's own: f16 for an F16 checkpoint
//         (rounding its weights to bf16 would throw away 3 of their mantissa
//         bits), bf16 otherwise. Everything else stays fp32: the embedding
//         table and the LM head (the logits are the output), the residual
//         stream, norms, biases, RoPE, attention, SwiGLU.
//   bf16  mixed, plus dense attention in bf16 through cuDNN's fused SDPA
//         (q, k, v and the output rounded to bf16; fp32 softmax statistics),
//         and the gate and up projections written in 16 bits by their GEMMs
//         (fp32 accumulation, one rounding; as a bf16 model computes them):
//         the serving configuration whose time-to-first-token is benchmarked.
//         Where cuDNN does not take the shape, attention stays fp32.
// The oracle attends in fp32 in every precision; an indexer's per-query
// supports too, and its block-shared supports on bf16 tensor cores in the
// bf16 mode (without recall / support statistics: with them, fp32).
// docs/performance.md gives each mode's measured distance from the HF
// transformers references: fp32 and mixed meet the bounds on every
// golden; bf16 attention costs more on the tiny random-weight goldens.
//
// The weights live on the device from fwd_cuda_upload to fwd_cuda_free; a
// tied lm_head shares the embedding's copy. Activations are allocated per call
// and sized O(T·max(hidden, Hq·dh, intermediate)) plus, for sparse attention, a
// row chunk × T score buffer: never a T×T buffer. The RoPE tables stay on the
// device for the longest pass seen (their rows do not depend on T).
#pragma once
#include <stdint.h>

#include "forward.h"
#include "model.h"
#include "status.h"

typedef enum { FWD_FP32 = 0, FWD_MIXED = 1, FWD_BF16 = 2 } FwdPrecision;

// "fp32" | "mixed" | "bf16" -> *p; -1 for anything else.
int fwd_precision_parse(const char *s, FwdPrecision *p);
const char *fwd_precision_name(FwdPrecision p);

typedef struct FwdCuda FwdCuda;

// Uploads m's weights to GPU 0 in precision prec. m must outlive the FwdCuda
// (its config is read, not copied). Returns 0 and *out, or -1 with st saying
// why (no usable GPU; a head_dim the attention kernels do not take) and
// *out = NULL. Caller frees with fwd_cuda_free.
int fwd_cuda_upload(const Model *m, FwdPrecision prec, FwdCuda **out, Status *st);
// A synthetic model of m's configuration (m->cfg only; m holds no weights):
// every matrix uniform with sd 0.02 from a hash of seed, norm gains 1, no
// biases, filled on the device (nothing crosses the bus). For benchmarks.
int fwd_cuda_synthetic(const Model *m, FwdPrecision prec, uint64_t seed, FwdCuda **out, Status *st);
void fwd_cuda_free(FwdCuda *f);
// Bytes of device memory the uploaded weights take.
size_t fwd_cuda_weight_bytes(const FwdCuda *f);
// A one-line description of the precision and attention path (for logs).
const char *fwd_cuda_describe(const FwdCuda *f);

// forward_hidden on the GPU: ids[0..T) (host, each < vocab) ->
// hidden_host[T, hidden], the final normed hidden states. o as for
// forward_hidden (may be NULL): o->stats arrays and the tap's arguments are
// host memory (the tap sees host copies of each layer's tensors); o->prof gets
// wall-clock seconds per part (the device is synchronised around each part
// only when o->prof is set).
void fwd_cuda_hidden(FwdCuda *f, const int32_t *ids, int T, float *hidden_host, const ForwardOpts *o);

// Time to first token: the same forward pass, then only the last position's
// logits (last_logits_host [vocab]), computed on the device; the hidden
// states never leave it.
void fwd_cuda_ttft(FwdCuda *f, const int32_t *ids, int T, const ForwardOpts *o, float *last_logits_host);

// Greedy decoding on the GPU (forward_generate's contract, model/forward.h):
// the prefill under o's options (dense, oracle or indexer supports, in the
// upload's precision), then dense cached steps in fp32 over a device cache
// of fp32 k and v (fwd_cuda_kvcache_new). Returns the count, or -1 with st
// saying why (a model kvcache_check refuses).
int fwd_cuda_generate(FwdCuda *f, const int32_t *ids, int T, const ForwardOpts *o, int max_new, const int32_t *stop,
                      int n_stop, int32_t *out, float *logits, GenTiming *tm, Status *st);
// A device cache for up to max_len positions of f's model (KvCache.device set;
// k, v device arrays), and its release.
int fwd_cuda_kvcache_new(FwdCuda *f, int max_len, KvCache **out, Status *st);
void fwd_cuda_kvcache_free(KvCache *kv);

// forward_lm_head on the GPU: logits_host[rows, vocab] =
// hidden_host[rows, hidden] · lm_headᵀ (host in, host out; call it per row
// chunk). fp32 in every precision.
void fwd_cuda_lm_head(FwdCuda *f, const float *hidden_host, int rows, float *logits_host);

// forward_layer_qk on the GPU, device in and out: q [T, Hq·dh], k [T, Hkv·dh]
// of layer `layer` from its normed input xn [T, hidden] (the teacher's q and k
// as attention uses them), in the upload's precision.
void fwd_cuda_layer_qk(FwdCuda *f, int layer, const float *xn, int T, float *q, float *k);

// backbone_score on the GPU (model/backbone.h): host in, host out. Row chunks
// (up to 1024 rows; fewer for a vocab over 131072, so the two logits buffers
// stay under 1 GiB) of hd (and hs) are uploaded, their logits formed on the
// device in fp32 as fwd_cuda_lm_head does (every precision), and
// next_token_stats_cuda reduces each row there: only the per-row results come
// back, never a [rows, vocab] buffer.
void fwd_cuda_score(FwdCuda *f, const float *hd, const float *hs, int rows, const int32_t *next, double *nll_d,
                    double *nll_s, double *kl, int32_t *top1);
