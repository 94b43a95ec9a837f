// ops.h: the twin API. Each op has a readable CPU twin (fp32, OpenMP, GEMMs
// through OpenBLAS's cblas) named *_cpu; CUDA twins keep the same names with
// _cuda. Arguments go outputs → inputs → dimensions. Row-major throughout:
// activations are [T, C] with T tokens of C channels.
#pragma once
#include <stdint.h>

// out[T, C_out] = in[T, C_in] · w[C_out, C_in]ᵀ (+ bias[C_out] if not NULL).
void matmul_forward_cpu(float *out, const float *in, const float *w, const float *bias, int T,
                        int C_in, int C_out);

// out[r, :] = in[r, :] / sqrt(mean(in[r, :]²) + eps) · w, for rows r < R. out may alias in.
void rmsnorm_forward_cpu(float *out, const float *in, const float *w, int R, int C, float eps);

// Rotates x[T, H, dh] in place with the HF "rotate half" layout: for i < rot/2 the
// pair (i, i + rot/2) turns by angle t·inv_freq[i]; cos/sin are [T, rot/2] tables
// (already multiplied by the RoPE attention factor). Dims ≥ rot pass through.
void rope_forward_cpu(float *x, const float *cos, const float *sin, int T, int H, int dh, int rot);

// RoPE tables on the host, shared by the model's RoPE (model/rope.c), the
// indexer's (kernels/cpu/indexer.c) and what the CUDA twins upload.
// Default frequencies inv_freq[i] = theta^(−2i/dim), i < dim/2, formed in double
// and rounded to fp32 as transformers forms them.
void rope_default_inv_freq(float *inv_freq, double theta, int dim);
// cos_t/sin_t [T, half] for positions 0..T-1: cos/sin(t·inv_freq[i]) · scale,
// the angle an fp32 product (as transformers forms it).
void rope_tables_from_freq(float *cos_t, float *sin_t, const float *inv_freq, int half, float scale, int T);

// The activation of a gated MLP: silu(x) = x / (1 + exp(−x)) (SwiGLU), or
// gelu_tanh(x) = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) (GeGLU, torch's
// approximate="tanh").
typedef enum { ACT_SILU, ACT_GELU_TANH } Act;

// out[i] = act(gate[i]) · up[i]. out may alias gate.
void glu_forward_cpu(float *out, const float *gate, const float *up, int64_t n, Act act);

// x[i] = cap · tanh(x[i] / cap) in place (logit soft-capping), cap > 0.
void softcap_forward_cpu(float *x, int64_t n, float cap);

// Causal GQA attention, tiled (flash style: online softmax over key tiles, no
// T×T buffer). q [T, Hq·dh], k/v [T, Hkv·dh], out [T, Hq·dh]; query head h reads
// key/value head h / (Hq/Hkv). lse [Hq, T] (may be NULL) receives each row's
// log-sum-exp of scale·q·k, the teacher statistic. window 0: causal (key j
// visible to query t iff j ≤ t); window W > 0: sliding window, key j visible
// iff t − W < j ≤ t (W ≥ T is causal).
void attention_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v,
                           int T, int Hq, int Hkv, int dh, float scale, int window);

// Attention of n new queries at positions p0..p0+n−1 over a decoding cache:
// k_cache/v_cache [p0+n, Hkv·dh] hold every position up to the last query (the
// new rows included), q and out [n, Hq·dh]. Query p0+i sees keys j ≤ p0+i
// (window W > 0: p0+i − W < j ≤ p0+i), as attention_forward_cpu over the whole
// sequence would.
void attention_cached_cpu(float *out, const float *q, const float *k_cache, const float *v_cache, int p0, int n,
                          int Hq, int Hkv, int dh, float scale, int window);

// Gated DeltaNet (linear attention) ops, kernels/cpu/deltanet_cpu.c; HF transformers'
// modeling_qwen3_next.py is the reference.
//
// Causal depthwise conv1d over time (HF's nn.Conv1d(groups=C, padding=K−1), first T
// outputs): x, out [T, C], w [C, K] (conv1d.weight [C, 1, K]), bias [C] or NULL:
//   out[t, c] = bias[c] + Σ_{j<K} w[c, j] · x[t − K + 1 + j, c]   (x rows < 0 are zero),
// then out = silu(out) when apply_silu. out must not alias x.
void causal_conv1d_cpu(float *out, const float *x, const float *w, const float *bias, int T, int C,
                       int K, int apply_silu);

// x[r, :] ← x[r, :] / sqrt(Σ_c x[r, c]² + eps) in place (HF's l2norm; eps 1e-6 there).
void l2norm_rows_cpu(float *x, int rows, int C, float eps);

// Qwen3NextRMSNormGated: out[r, c] = w[c] · x[r, c] / sqrt(mean(x[r, :]²) + eps) · silu(z[r, c]).
// The weight is w itself (initialised to ones; not 1 + w), the norm comes before
// the gate. out may alias x or z.
void gated_rmsnorm_cpu(float *out, const float *x, const float *z, const float *w, int rows, int C,
                       float eps);

// The per-token gates of a Gated DeltaNet layer from its projections a, b [T, Hv]
// (Qwen3NextGatedDeltaNet.forward): g = −exp(A_log[h]) · softplus(a + dt_bias[h]) (the
// log decay, ≤ 0; torch's softplus: x for x > 20, else log1p(exp(x))) and
// beta = sigmoid(b). g and beta [T, Hv]; g may alias a, beta may alias b.
void deltanet_gates_cpu(float *g, float *beta, const float *a, const float *b, const float *A_log,
                        const float *dt_bias, int T, int Hv);

// The gated delta rule (HF's torch_recurrent_gated_delta_rule), sequential, fp32
// state. q, k [T, Hk, dk]; v [T, Hv, dv]; g [T, Hv] log decays (≤ 0); beta [T, Hv];
// o [T, Hv, dv]. Value head h reads key head h / (Hv/Hk) (HF's repeat_interleave).
// With qk_l2norm (HF's use_qk_l2norm_in_kernel=True, as the model calls it) q_t and
// k_t are first L2-normalised (eps 1e-6); then q_t is multiplied by scale
// (0: 1/sqrt(dk)). Per value head, with S [dk, dv] from state_in [Hv, dk, dv] (NULL: zeros):
//   S_t = e^{g_t} S_{t−1} + β_t k_t (v_t − (e^{g_t} S_{t−1})ᵀ k_t)ᵀ,   o_t = S_tᵀ q_t
// state_out [Hv, dk, dv] (may be NULL, may alias state_in) receives S_T.
void gated_delta_rule_cpu(float *o, float *state_out, const float *q, const float *k, const float *v,
                          const float *g, const float *beta, const float *state_in, int T, int Hk,
                          int Hv, int dk, int dv, float scale, int qk_l2norm);

// The same outputs by the chunked form (HF's torch_chunk_gated_delta_rule, chunk
// tokens per chunk, e.g. 64; any T ≥ 0 and chunk ≥ 1): within a chunk the WY/UT
// transform (a unit lower-triangular solve), across chunks the state carry.
// Agrees with gated_delta_rule_cpu to fp32 rounding.
void gated_delta_rule_chunked_cpu(float *o, float *state_out, const float *q, const float *k,
                                  const float *v, const float *g, const float *beta,
                                  const float *state_in, int T, int Hk, int Hv, int dk, int dv,
                                  float scale, int qk_l2norm, int chunk);

// Sigmoid gates (Qwen3-Next / Qwen3.5, kernels/cpu/moe_cpu.c):
// x[i] ← x[i] · sigmoid(g[i]) (the attention output gate);
void sigmoid_mul_cpu(float *x, const float *g, int64_t n);
// x[r, :] ← x[r, :] · sigmoid(g[r]) (the shared expert's gate), x [rows, cols].
void sigmoid_scale_rows_cpu(float *x, const float *g, int rows, int cols);

// The router (Qwen3NextTopKRouter): per token, softmax of logits [T, E] in fp32,
// the k largest (idx [T, k], descending; the lower index first among equal
// logits) with their probabilities wt [T, k], renormalised to sum 1 when renorm.
void moe_route_cpu(int *idx, float *wt, const float *logits, int T, int E, int k, int renorm);
// The (token, slot) pairs i = t·k + j of idx [T·k = nk] bucketed by expert
// idx[i] < E, a counting sort: expert e's pairs are slot[start[e] .. start[e+1])
// in ascending i (so ascending token). start [E + 1], slot [nk]. Both twins'
// expert dispatch uses it.
void moe_bucket_cpu(int64_t *start, int64_t *slot, const int *idx, int64_t nk, int E);
// The routed experts (Qwen3NextExperts): out[t] = Σ_j wt[t, j] · down_e(act(x[t]·gate_eᵀ) ⊙
// x[t]·up_eᵀ), e = idx[t, j]; w_gate[e], w_up[e] [inter, H], w_down[e] [H, inter]; x, out [T, H].
void moe_experts_cpu(float *out, const float *x, const int *idx, const float *wt, const float *const *w_gate,
                     const float *const *w_up, const float *const *w_down, int T, int H, int E, int inter, int k,
                     Act act);

// Re-executes the process once with OPENBLAS_CORETYPE / OMP_WAIT_POLICY set when
// they are missing and would make it slow (see blas_init.c). Call
// first thing in main.
void blas_ensure_core(char **argv);

// Attention over the attention-mass oracle's support (docs/design.md "Oracle"): per query
// (bsel = 1) or shared by blocks of bsel queries, top-k keys of the
// head-averaged attention mass P. Shapes as attention_forward_cpu. When
// recall/support [T] are not NULL, recall[t] += Σ_{j∈S_t} P_t(j) and
// support[t] += |S_t| (accumulated, so callers can sum over layers).
// With topk ≥ T this is attention_forward_cpu exactly.
void oracle_attention_cpu(float *out, float *recall, float *support, const float *q, const float *k,
                          const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel);

// Attention over supports chosen elsewhere (e.g. by a trained indexer), with
// the oracle's semantics: block b = [b·bsel, …) has given_n[b] ≤ topk sorted key
// indices at given_sel + b·topk; query t attends to those ≤ t, or to {t} alone.
// recall/support as for oracle_attention_cpu (recall measures the teacher's P
// mass the given support keeps).
void support_attention_cpu(float *out, float *recall, float *support, const float *q, const float *k,
                           const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel,
                           const int *given_sel, const int *given_n);

// Hybrid supports (docs/design.md "Hybrid supports"): the support of query t
// above (the oracle's when given_sel is NULL, else the given one; the {t}
// fallback included) ∪ its recent ≥ 0 most recent keys {max(0, t−recent+1)..t}
// ∪ the first sinks ≥ 0 keys {0..min(sinks, t+1)−1}, each key once: at most
// topk + recent + sinks keys. recall/support count the union. recent = sinks = 0
// is oracle_attention_cpu / support_attention_cpu bit for bit.
// uni (may be NULL; per-query supports, bsel = 1, only): for every block of
// uni->bsel consecutive queries (a divisor of 64, aligned to 0), the size of
// the union of their supports — the keys a block-wise execution of per-query
// supports loads once for the block — is added to uni->keys and 1 to
// uni->blocks (summed over calls: one per layer).
typedef struct {
    int bsel;
    double keys, blocks;
} SupportUnion;
void hybrid_attention_cpu(float *out, float *recall, float *support, const float *q, const float *k,
                          const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel,
                          int recent, int sinks, const int *given_sel, const int *given_n, SupportUnion *uni);

// Next-token statistics of rows positions from their logits (kernels/cpu/score_cpu.c):
// ld[rows, V] dense, ls[rows, V] sparse (NULL: dense only), next[rows] the
// token that follows each position (each < V). Per row i, in double, with
// lse = log Σ_j exp(row[j]) and argmax the lowest index of the row's maximum:
//   nll_d[i] = lse(ld_i) − ld_i[next_i]
// and when ls is given (else nll_s, kl, top1 are not touched and may be NULL):
//   nll_s[i] = lse(ls_i) − ls_i[next_i]
//   kl[i]    = KL(softmax(ld_i) ‖ softmax(ls_i)), clamped at 0 (rounding can dip below)
//   top1[i]  = argmax(ld_i) == argmax(ls_i)
void next_token_stats_cpu(double *nll_d, double *nll_s, double *kl, int32_t *top1, const float *ld,
                          const float *ls, const int32_t *next, int rows, int V);
