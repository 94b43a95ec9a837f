// forward_cuda.c: see forward_cuda.h. The CUDA twin's ops beneath the layer
// loop (layer.h), op for op the CPU twin's (forward.c):
//   begin     x = embed[ids]·embed_scale
//   attn_in   xn = RMSNorm(x)·attn_norm (straight into the 16-bit GEMM operand
//             when nothing reads xn in fp32)
//   qkv       q, k, v = xn·Wqᵀ (+b), …; q/k norm and RoPE of the layer's kind in
//             one pass (with bf16 copies for SDPA)
//   attend    dense (cuDNN SDPA in bf16 mode, else fp32; causal or in the
//             sliding window), the oracle's supports (in bf16 mode from the
//             bf16 q, k and SDPA's lse), or an indexer's
//   attn_out  x += [RMSNorm](a·Woᵀ (+b)) (the += inside the GEMM when there is
//             neither bias nor post-norm)
//   attn_out  (gated attention: a · sigmoid(xn·Wgᵀ) first)
//   linear_attn  Gated DeltaNet: the projections in the upload's precision, then
//             conv1d + SiLU, gates, the chunked gated delta rule and the gated
//             RMSNorm in fp32 (kernels/cuda/deltanet.cu), out_proj
//   mlp       x += [RMSNorm](Wdown·(act(xn·Wgateᵀ (+b)) ⊙ xn·Wupᵀ (+b)) (+b))
//   moe       router and routed experts in fp32 (kernels/cuda/moe.cu), the
//             shared expert in the upload's precision
//   finish    hidden = RMSNorm(x), or the last position's logits
// In the 16-bit modes a GEMM's fp32 input is rounded into one 16-bit scratch
// buffer just before the GEMM (once for q/k/v, once for gate/up).
#include "forward_cuda.h"

#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "indexer.h"
#include "indexer_cuda.h"
#include "layer.h"
#include "ops_cuda.h"
#include "oracle_cuda.h"
#include "rope.h"
#include "sdpa_cuda.h"

typedef struct {
    // Matrices: float* (fp32) or 16-bit (mixed, bf16), [C_out, C_in] as on the host.
    void *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down, *wq_gate;
    void *lin_qkv, *lin_z, *lin_b, *lin_a, *lin_out, *sh_gate, *sh_up, *sh_down;
    // Always fp32; NULL where the checkpoint has none.
    float *attn_norm, *mlp_norm, *q_norm, *k_norm, *post_attn_norm, *post_mlp_norm;
    float *bq, *bk, *bv, *bo, *b_gate, *b_up, *b_down, *bq_gate;
    float *lin_conv, *lin_a_log, *lin_dt_bias, *lin_norm, *moe_router, *sh_expert_gate;
    float **exp_gate, **exp_up, **exp_down;  // E device matrices each (fp32), host arrays
} LayerDev;

struct FwdCuda {
    const Model *m;
    FwdPrecision prec;
    HalfType half;      // the 16-bit type of the layer GEMMs (mixed, bf16)
    LayerDev *layers;   // n_layers
    float *embed;       // (vocab, hidden) fp32
    float *lm_head;     // (vocab, hidden) fp32; == embed when tied
    float *final_norm;  // (hidden)
    size_t weight_bytes;
    float *stage;       // upload staging (fp32) for 16-bit conversion; only during upload
    uint64_t synth;     // synthetic weights: 0 = from the checkpoint, else the fill's seed
    // lm_head scratch, grown to the largest row chunk seen
    int lm_rows;
    float *lm_in, *lm_out;
    // RoPE tables on the device for rope_T positions (grown on demand)
    int rope_T[2];
    float *rope_cos[2], *rope_sin[2];  // per layer kind: full (0), sliding (1)
    char desc[256];
    // fwd_cuda_score scratch, sized for sc_rows rows (grown on demand): hidden
    // states [2, rows, hidden] (dense, sparse), logits [2, rows, vocab], next
    // tokens [rows], per-row results [3, rows] (nll_d, nll_s, kl) and top1 [rows]
    int sc_rows;
    float *sc_hidden, *sc_logits;
    int32_t *sc_next, *sc_top1;
    double *sc_stats;
};

const char *fwd_precision_name(FwdPrecision p) {
    return p == FWD_FP32 ? "fp32" : p == FWD_MIXED ? "mixed" : "bf16";
}

int fwd_precision_parse(const char *s, FwdPrecision *p) {
    if (!strcmp(s, "fp32")) *p = FWD_FP32;
    else if (!strcmp(s, "mixed")) *p = FWD_MIXED;
    else if (!strcmp(s, "bf16")) *p = FWD_BF16;
    else return -1;
    return 0;
}

// ---- upload ----------------------------------------------------------------------------

// What a device tensor holds when the weights are synthetic (fwd_cuda_synthetic).
typedef enum { W_MATRIX, W_NORM, W_BIAS } WRole;

// A synthetic tensor on the device, fp32: matrices uniform with sd 0.02 (so
// activations stay finite through every layer), norm gains 1, no biases.
static float *synth_f32(FwdCuda *f, int64_t n, WRole role) {
    if (role == W_BIAS) return NULL;
    float *d = cuda_malloc(sizeof(float) * (size_t)n);
    const float a = role == W_NORM ? 1.0f : 0.02f * 1.7320508f;  // uniform(−a, a) has sd a/√3
    cuda_fill_uniform(d, n, role == W_NORM ? 1.0f : -a, a, f->synth++);
    return d;
}

static float *upload_f32(FwdCuda *f, const float *h, int64_t n, WRole role) {
    float *d;
    if (f->synth) {
        if (!(d = synth_f32(f, n, role))) return NULL;
    } else {
        if (!h) return NULL;
        d = cuda_malloc(sizeof(float) * (size_t)n);
        cuda_to_device(d, h, sizeof(float) * (size_t)n);
    }
    f->weight_bytes += sizeof(float) * (size_t)n;
    return d;
}

// A layer's weight matrix: fp32 as is, or rounded to 16 bits on the device (via f->stage).
static void *upload_matrix(FwdCuda *f, const float *h, int64_t n) {
    if (f->prec == FWD_FP32) return upload_f32(f, h, n, W_MATRIX);
    void *d = cuda_malloc(2 * (size_t)n);
    if (f->synth) cuda_fill_uniform(f->stage, n, -0.02f * 1.7320508f, 0.02f * 1.7320508f, f->synth++);
    else cuda_to_device(f->stage, h, sizeof(float) * (size_t)n);
    cuda_f32_to_half(d, f->stage, n, f->half);
    cuda_sync();  // the stage is overwritten by the next upload
    f->weight_bytes += 2 * (size_t)n;
    return d;
}

// The upload of fwd_cuda_upload (synth = 0) and fwd_cuda_synthetic (synth = seed).
static int upload(const Model *m, FwdPrecision prec, uint64_t synth, FwdCuda **out, Status *st) {
    *out = NULL;
    char why[256];
    if (cuda_available(why, sizeof why) == 0) return status_fail(st, "no usable GPU (%s)", why);
    const ModelConfig *c = &m->cfg;
    if (c->head_dim > 256)
        return status_fail(st, "head_dim %d: the CUDA attention kernels take head_dim <= 256", c->head_dim);
    if (c->lin.n_v_heads && (c->lin.k_dim > 256 || c->lin.v_dim > 256))
        return status_fail(st, "linear_key_head_dim %d / linear_value_head_dim %d: the CUDA gated delta rule takes "
                               "head dims <= 256", c->lin.k_dim, c->lin.v_dim);
    const int64_t H = c->hidden, I = c->intermediate, V = c->vocab;
    const int64_t nq = (int64_t)c->n_heads * c->head_dim, nkv = (int64_t)c->n_kv_heads * c->head_dim;

    FwdCuda *f = xcalloc(1, sizeof *f);
    f->m = m;
    f->prec = prec;
    f->synth = synth;
    // The checkpoint's 16-bit type: f16 when its layer matrices are stored F16.
    const StTensor *probe = st_find(&m->st, "model.layers.0.self_attn.q_proj.weight");
    f->half = probe && probe->dtype == ST_F16 ? HALF_F16 : HALF_BF16;
    f->layers = xcalloc((size_t)c->n_layers, sizeof *f->layers);
    const LinearAttnConfig *la = &c->lin;
    const int64_t kd = (int64_t)la->n_k_heads * la->k_dim, vd = (int64_t)la->n_v_heads * la->v_dim;
    const int64_t C = 2 * kd + vd, Hv = la->n_v_heads, E = c->moe.n_experts, Im = c->moe.intermediate;
    const int64_t Is = c->moe.shared_intermediate;
    if (prec != FWD_FP32) {
        int64_t big = 0;
        const int64_t sizes[] = {nq * H, nkv * H, H * nq, I * H, C * H, vd * H, Is * H};
        for (int i = 0; i < 7; i++) big = sizes[i] > big ? sizes[i] : big;
        f->stage = cuda_malloc(sizeof(float) * (size_t)big);
    }
    f->embed = upload_f32(f, m->embed, V * H, W_MATRIX);
    const int tied = synth ? c->tie_embeddings : m->lm_head == m->embed;
    f->lm_head = tied ? f->embed : upload_f32(f, m->lm_head, V * H, W_MATRIX);
    f->final_norm = upload_f32(f, m->final_norm, H, W_NORM);
    for (int l = 0; l < c->n_layers; l++) {
        static const LayerWeights none = {0};  // a synthetic model has no host weights
        const LayerWeights *w = m->layers ? &m->layers[l] : &none;
        LayerDev *d = &f->layers[l];
        const int lin = c->layer_kinds[l] == LAYER_LINEAR_ATTENTION, moe = c->layer_moe && c->layer_moe[l];
        d->attn_norm = upload_f32(f, w->attn_norm, H, W_NORM);
        if (lin) {
            d->lin_qkv = upload_matrix(f, w->lin_qkv, C * H);
            d->lin_z = upload_matrix(f, w->lin_z, vd * H);
            d->lin_b = upload_matrix(f, w->lin_b, Hv * H);
            d->lin_a = upload_matrix(f, w->lin_a, Hv * H);
            d->lin_out = upload_matrix(f, w->lin_out, H * vd);
            d->lin_conv = upload_f32(f, w->lin_conv, C * la->conv_kernel, W_MATRIX);
            d->lin_a_log = upload_f32(f, w->lin_a_log, Hv, W_NORM);  // synthetic: A = e, a moderate decay
            d->lin_dt_bias = upload_f32(f, w->lin_dt_bias, Hv, W_NORM);
            d->lin_norm = upload_f32(f, w->lin_norm, la->v_dim, W_NORM);
        } else {
            d->wq = upload_matrix(f, w->wq, nq * H);
            d->wk = upload_matrix(f, w->wk, nkv * H);
            d->wv = upload_matrix(f, w->wv, nkv * H);
            d->wo = upload_matrix(f, w->wo, H * nq);
            d->bq = upload_f32(f, w->bq, nq, W_BIAS);
            d->bk = upload_f32(f, w->bk, nkv, W_BIAS);
            d->bv = upload_f32(f, w->bv, nkv, W_BIAS);
            d->bo = upload_f32(f, w->bo, H, W_BIAS);
            if (c->attn_out_gate) {
                d->wq_gate = upload_matrix(f, w->wq_gate, nq * H);
                d->bq_gate = upload_f32(f, w->bq_gate, nq, W_BIAS);
            }
            if (c->qk_norm) {
                d->q_norm = upload_f32(f, w->q_norm, c->head_dim, W_NORM);
                d->k_norm = upload_f32(f, w->k_norm, c->head_dim, W_NORM);
            }
        }
        d->mlp_norm = upload_f32(f, w->mlp_norm, H, W_NORM);
        if (c->post_norms) {
            d->post_attn_norm = upload_f32(f, w->post_attn_norm, H, W_NORM);
            d->post_mlp_norm = upload_f32(f, w->post_mlp_norm, H, W_NORM);
        }
        if (moe) {
            d->moe_router = upload_f32(f, w->moe_router, E * H, W_MATRIX);
            d->exp_gate = xcalloc((size_t)E, sizeof *d->exp_gate);
            d->exp_up = xcalloc((size_t)E, sizeof *d->exp_up);
            d->exp_down = xcalloc((size_t)E, sizeof *d->exp_down);
            for (int64_t e = 0; e < E; e++) {
                d->exp_gate[e] = upload_f32(f, w->exp_gate ? w->exp_gate[e] : NULL, Im * H, W_MATRIX);
                d->exp_up[e] = upload_f32(f, w->exp_up ? w->exp_up[e] : NULL, Im * H, W_MATRIX);
                d->exp_down[e] = upload_f32(f, w->exp_down ? w->exp_down[e] : NULL, H * Im, W_MATRIX);
            }
            if (Is > 0) {
                d->sh_gate = upload_matrix(f, w->sh_gate, Is * H);
                d->sh_up = upload_matrix(f, w->sh_up, Is * H);
                d->sh_down = upload_matrix(f, w->sh_down, H * Is);
                d->sh_expert_gate = upload_f32(f, w->sh_expert_gate, H, W_MATRIX);
            }
        } else {
            d->w_gate = upload_matrix(f, w->w_gate, I * H);
            d->w_up = upload_matrix(f, w->w_up, I * H);
            d->w_down = upload_matrix(f, w->w_down, H * I);
            d->b_gate = upload_f32(f, w->b_gate, I, W_BIAS);
            d->b_up = upload_f32(f, w->b_up, I, W_BIAS);
            d->b_down = upload_f32(f, w->b_down, H, W_BIAS);
        }
    }
    cuda_sync();
    cuda_free(f->stage);
    f->stage = NULL;
    const char *gemm = prec == FWD_FP32 ? "fp32 GEMMs" : f->half == HALF_F16 ? "f16 GEMMs" : "bf16 GEMMs";
    snprintf(f->desc, sizeof f->desc, "%s: %s, %s dense attention%s", fwd_precision_name(prec), gemm,
             prec == FWD_BF16 ? "cuDNN SDPA bf16" : "fp32",
             prec == FWD_BF16 ? "; indexer scores on TF32 tensor cores; block-shared sparse attention on "
                                "bf16 tensor cores (without statistics)"
                              : "");
    *out = f;
    return 0;
}

int fwd_cuda_upload(const Model *m, FwdPrecision prec, FwdCuda **out, Status *st) {
    return upload(m, prec, 0, out, st);
}

int fwd_cuda_synthetic(const Model *m, FwdPrecision prec, uint64_t seed, FwdCuda **out, Status *st) {
    return upload(m, prec, seed | 1, out, st);
}

void fwd_cuda_free(FwdCuda *f) {
    if (!f) return;
    for (int l = 0; l < f->m->cfg.n_layers; l++) {
        LayerDev *d = &f->layers[l];
        void *ps[] = {d->wq, d->wk, d->wv, d->wo, d->w_gate, d->w_up, d->w_down, d->attn_norm, d->mlp_norm,
                      d->q_norm, d->k_norm, d->post_attn_norm, d->post_mlp_norm, d->bq, d->bk, d->bv, d->bo,
                      d->b_gate, d->b_up, d->b_down, d->wq_gate, d->bq_gate, d->lin_qkv, d->lin_z, d->lin_b,
                      d->lin_a, d->lin_out, d->lin_conv, d->lin_a_log, d->lin_dt_bias, d->lin_norm, d->moe_router,
                      d->sh_gate, d->sh_up, d->sh_down, d->sh_expert_gate};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) cuda_free(ps[i]);
        for (int e = 0; d->exp_gate && e < f->m->cfg.moe.n_experts; e++)
            cuda_free(d->exp_gate[e]), cuda_free(d->exp_up[e]), cuda_free(d->exp_down[e]);
        free(d->exp_gate), free(d->exp_up), free(d->exp_down);
    }
    if (f->lm_head != f->embed) cuda_free(f->lm_head);
    cuda_free(f->embed);
    cuda_free(f->final_norm);
    cuda_free(f->lm_in);
    cuda_free(f->lm_out);
    for (int kind = 0; kind < 2; kind++) cuda_free(f->rope_cos[kind]), cuda_free(f->rope_sin[kind]);
    cuda_free(f->sc_hidden);
    cuda_free(f->sc_logits);
    cuda_free(f->sc_next);
    cuda_free(f->sc_top1);
    cuda_free(f->sc_stats);
    free(f->layers);
    free(f);
}

size_t fwd_cuda_weight_bytes(const FwdCuda *f) { return f->weight_bytes; }
const char *fwd_cuda_describe(const FwdCuda *f) { return f->desc; }

// ---- forward ---------------------------------------------------------------------------

// The operand a layer GEMM reads: in itself (fp32) or in rounded into hb (16-bit).
static const void *gemm_input(const FwdCuda *f, const float *in, void *hb, int64_t n) {
    if (f->prec == FWD_FP32) return in;
    cuda_f32_to_half(hb, in, n, f->half);
    return hb;
}

// RMSNorm(x)·w as a layer GEMM's operand: into xn (fp32) and then rounded into
// hb, or, in the 16-bit modes when nothing else reads xn (keep_fp32 = 0),
// straight into hb (the same bits, without xn's round trip through memory).
static const void *norm_input(const FwdCuda *f, float *xn, void *hb, const float *x, const float *w, int T, int H,
                              float eps, int keep_fp32) {
    if (f->prec != FWD_FP32 && !keep_fp32) {
        rmsnorm_forward_half_cuda(hb, x, w, T, H, eps, f->half);
        return hb;
    }
    rmsnorm_forward_cuda(xn, x, w, T, H, eps);
    return gemm_input(f, xn, hb, (int64_t)T * H);
}

// out[T, C_out] = in[T, C_in] · wᵀ (+ bias), in the upload's precision.
static void gemm(const FwdCuda *f, float *out, const void *in, const void *w, const float *bias, int T, int C_in,
                 int C_out) {
    if (f->prec == FWD_FP32) matmul_forward_cuda(out, (const float *)in, (const float *)w, bias, T, C_in, C_out);
    else matmul_forward_half_cuda(out, in, w, bias, T, C_in, C_out, f->half);
}

// x += in·wᵀ (+ bias), the residual update: inside the GEMM (β = 1) unless
// there is a bias, which goes through scratch and residual_forward (the CPU
// twin's order of additions, x + (in·wᵀ + b)).
static void gemm_residual(const FwdCuda *f, float *x, float *scratch, const void *in, const void *w,
                          const float *bias, int T, int C_in, int C_out) {
    if (bias) {
        gemm(f, scratch, in, w, bias, T, C_in, C_out);
        residual_forward_cuda(x, x, scratch, (int64_t)T * C_out);
    } else if (f->prec == FWD_FP32) {
        matmul_accumulate_cuda(x, (const float *)in, (const float *)w, T, C_in, C_out);
    } else {
        matmul_accumulate_half_cuda(x, in, w, T, C_in, C_out, f->half);
    }
}

// RoPE tables of layer kind `kind` (0 full, 1 sliding) on the device covering
// at least T positions (NULL when the model has no RoPE). Row t does not
// depend on T, so the tables are built once, kept in f, and rebuilt only when
// a longer pass comes: the trainer asks for them per layer and step, and a
// forward pass per call.
static void rope_tables_dev(FwdCuda *f, int kind, int T, const float **cos_d, const float **sin_d) {
    const ModelConfig *c = &f->m->cfg;
    const int half = rope_rot_dims(c) / 2;
    *cos_d = *sin_d = NULL;
    if (half <= 0) return;
    if (T > f->rope_T[kind]) {
        cuda_free(f->rope_cos[kind]);
        cuda_free(f->rope_sin[kind]);
        const size_t n = (size_t)T * half;
        float *cos_h = xmalloc(sizeof(float) * n), *sin_h = xmalloc(sizeof(float) * n);
        rope_tables_kind(c, kind ? LAYER_SLIDING_ATTENTION : LAYER_FULL_ATTENTION, T, cos_h, sin_h);
        f->rope_cos[kind] = cuda_malloc(sizeof(float) * n);
        f->rope_sin[kind] = cuda_malloc(sizeof(float) * n);
        cuda_to_device(f->rope_cos[kind], cos_h, sizeof(float) * n);
        cuda_to_device(f->rope_sin[kind], sin_h, sizeof(float) * n);
        free(cos_h);
        free(sin_h);
        f->rope_T[kind] = T;
    }
    *cos_d = f->rope_cos[kind];
    *sin_d = f->rope_sin[kind];
}

// How the indexer scores keys: o->indexer_scores when set; else fp32 in the
// fp32 and mixed modes, and in bf16 the fused bf16 tensor-core block sums for
// block-shared supports (no score buffer) and TF32 tensor cores per query.
static IndexerScores indexer_scores_mode(FwdPrecision prec, const ForwardOpts *o) {
    if (o->indexer_scores > 0) return (IndexerScores)(o->indexer_scores - 1);
    return prec == FWD_BF16 ? IX_SCORES_BF16 : IX_SCORES_FP32;
}

// q, k of one layer from xn: projections (in = xn in the GEMM's precision),
// then q/k norm and RoPE in one pass, which also writes bf16 copies into qb,
// kb when they are not NULL (the bf16 attention kernels' operands).
static void layer_qk(const FwdCuda *f, const LayerDev *w, const void *in, int T, const float *cos_t,
                     const float *sin_t, float *q, float *k, void *qb, void *kb) {
    const ModelConfig *c = &f->m->cfg;
    const int H = c->hidden, dh = c->head_dim, Hq = c->n_heads, Hkv = c->n_kv_heads, rot = rope_rot_dims(c);
    const float eps = (float)c->rms_eps;
    gemm(f, q, in, w->wq, w->bq, T, H, Hq * dh);
    gemm(f, k, in, w->wk, w->bk, T, H, Hkv * dh);
    if (c->qk_norm || rot > 0 || qb) {
        head_norm_rope_cuda(q, qb, c->qk_norm ? w->q_norm : NULL, cos_t, sin_t, T, Hq, dh, rot, eps, HALF_BF16);
        head_norm_rope_cuda(k, kb, c->qk_norm ? w->k_norm : NULL, cos_t, sin_t, T, Hkv, dh, rot, eps, HALF_BF16);
    }
}

void fwd_cuda_layer_qk(FwdCuda *f, int layer, const float *xn, int T, float *q, float *k) {
    if (T <= 0) return;
    const ModelConfig *c = &f->m->cfg;
    const float *cos_t, *sin_t;
    rope_tables_dev(f, c->layer_kinds[layer] == LAYER_SLIDING_ATTENTION, T, &cos_t, &sin_t);
    void *hb = f->prec == FWD_FP32 ? NULL : cuda_malloc(2 * (size_t)T * c->hidden);
    layer_qk(f, &f->layers[layer], gemm_input(f, xn, hb, (int64_t)T * c->hidden), T, cos_t, sin_t, q, k, NULL,
             NULL);
    if (f->prec == FWD_BF16) {  // the bf16 pass attends over bf16 q, k: the teacher's P and lse are theirs
        const int64_t nq = (int64_t)T * c->n_heads * c->head_dim, nk = (int64_t)T * c->n_kv_heads * c->head_dim;
        void *r = cuda_malloc(2 * (size_t)(nq > nk ? nq : nk));
        cuda_f32_to_bf16(r, q, nq), cuda_bf16_to_f32(q, r, nq);
        cuda_f32_to_bf16(r, k, nk), cuda_bf16_to_f32(k, r, nk);
        cuda_sync();
        cuda_free(r);
    }
    cuda_sync();
    cuda_free(hb);
}

// logits[rows, vocab] = hidden[rows, hidden] · lm_headᵀ (device in and out), fp32 in
// every precision, soft-capped when the config says so (cap·tanh(logits / cap)).
static void lm_head_logits(const FwdCuda *f, float *logits, const float *hidden, int rows) {
    const ModelConfig *c = &f->m->cfg;
    matmul_forward_cuda(logits, hidden, f->lm_head, NULL, rows, c->hidden, c->vocab);
    if (c->final_softcap > 0) softcap_forward_cuda(logits, (int64_t)rows * c->vocab, (float)c->final_softcap);
}

// ---- the CUDA twin's ops beneath the layer loop (layer.h) ------------------------------

// Rows per chunk of a pass's row-local work: 65536, or SPINDLE_ROW_CHUNK (a
// positive integer; the tests set small odd values so that every op crosses
// chunk boundaries). A pass of T ≤ that many tokens runs in one chunk.
static int row_chunk(int T) {
    const long rc = env_long("SPINDLE_ROW_CHUNK", 65536, 1, INT_MAX);
    return rc < T ? (int)rc : T;
}

// One pass's device scratch. last_logits: the pass ends in the last position's
// logits (time to first token) instead of the hidden states.
//
// Memory: only what some op reads across positions spans all T rows — the
// residual stream x, the attention operands (bf16 q, k, v and output in the
// bf16 mode; fp32 q, k, v, output and lse where an fp32 kernel, the oracle,
// statistics or the tap read them), the normed attention input xn_all when an
// indexer or the tap reads it, and the supports. Everything row-local (the
// projections' outputs, the MLP's gate and up, the DeltaNet and MoE scratch)
// is rc rows, and the ops loop over the chunks of rc rows: a 1M-token pass of
// Qwen3.5-9B's shape holds about 36 GB of [T, ·] buffers instead of 360 GB.
// A DeltaNet layer carries its recurrent state and the last K − 1 rows of its
// conv input from one chunk to the next, so chunking changes no result beyond
// the GEMMs' rounding.
typedef struct {
    FwdCuda *f;
    int T, rc;          // tokens; rows per chunk
    float *hidden_host, *last_logits_host;
    int bf16_attn;      // bf16 mode: dense attention through cuDNN SDPA (the op falls back where cuDNN declines)
    int f32_attn;       // q, k, v, att are [T, ·] fp32 (else rc rows: GEMM outputs and the gate's product)
    double union_keys, union_blocks;  // per-query supports run as block unions: Σ |U_b|, Σ blocks (all layers)
    int union_stat;     // > 0: also count those unions for blocks of this many queries (statistics, indexer rows)
    int union_refused;  // layers whose unions were too long to count (support_union_keys_cuda returned −1)
    int att_bf16;       // the layer's attention output is in ob (else in att)
    int xn_layer;       // the layer whose normed attention input xn_all holds (−1: none)
    int pos0;           // position of the pass's first token (a decoding cache's length, else 0)
    int32_t *d_ids;
    float *x, *xn_all, *q, *k, *v, *att, *lse;
    void *qb, *kb, *vb, *ob;           // bf16 attention operands [T, ·] (bf16_attn)
    float *xn;                         // [rc, hidden]: norms and post-norm products
    void *hb;                          // [rc, widest] 16-bit GEMM operand
    float *gate, *up, *agate;          // MLP products, gated attention's gate logits
    // Gated DeltaNet: conv input and output with K − 1 rows of history in front,
    // the history carried between chunks, q, k, v, z, a, b, o of the chunk, state
    float *lin_x, *lin_c, *lin_halo, *lin_q, *lin_k, *lin_v, *lin_z, *lin_a, *lin_b, *lin_o, *lin_state;
    float *moe_logits, *moe_wt, *moe_y, *moe_sg;  // router logits, top-k weights, routed sum, shared gate
    int *moe_idx;
    float *d_rec, *d_sup;              // sparse statistics on the device
    int32_t *sel, *n_sel;              // indexer supports
    float **ip;                        // indexer parameters per layer on the device
    float *h_xn, *h_q, *h_k, *h_lse;   // host copies for the tap
    IndexerScores scores;
    ForwardProfile *prof;              // the caller's profile (NULL: not profiling)
} CudaPass;

typedef struct {
    FwdCuda *f;
    float *hidden_host, *last_logits_host;
} CudaTwin;

static void *cuda_begin(void *twin, const int32_t *ids, int T, const ForwardOpts *o) {
    const CudaTwin *tw = twin;
    FwdCuda *f = tw->f;
    const ModelConfig *c = &f->m->cfg;
    const int H = c->hidden, I = c->intermediate, dh = c->head_dim;
    const int Hq = c->n_heads, Hkv = c->n_kv_heads, nq = Hq * dh, nkv = Hkv * dh;
    const size_t TT = (size_t)T;
    const Sparsity *sp = o->sparse;
    const IndexerSet *ix = sp ? o->indexer : NULL;
    CudaPass *p = xcalloc(1, sizeof *p);
    p->f = f;
    p->T = T;
    p->rc = row_chunk(T);
    p->xn_layer = -1;
    if (o->kv && !o->kv->device) {
        fprintf(stderr, "spindle: the GPU forward needs a GPU decoding cache (fwd_cuda_kvcache_new) (%s:%d)\n",
                __FILE__, __LINE__);
        abort();
    }
    p->pos0 = o->kv ? o->kv->len : 0;
    p->prof = o->prof;
    p->hidden_host = tw->hidden_host;
    p->last_logits_host = tw->last_logits_host;
    p->scores = indexer_scores_mode(f->prec, o);
    p->bf16_attn = f->prec == FWD_BF16;
    const int want_stats = sp && o->stats && (o->stats->recall || o->stats->support);
    const int need_lse = (o->tap && !sp) || want_stats;
    // fp32 operands across T: fp32 kernels, the tap, statistics, the oracle, the
    // fp32 indexer path (per query, or k ≥ T), an f16 model's widened output.
    p->f32_attn = !p->bf16_attn || o->tap || o->kv ||  // a cache stores, and a decoding step reads, fp32 k, v, q
                  (sp && (!ix || sp->topk >= T || (sp->bsel <= 1 && sp->exec_block <= 1) || want_stats ||
                          f->half != HALF_BF16));
    const size_t RC = (size_t)p->rc, RA = p->f32_attn ? TT : RC;

    p->d_ids = cuda_malloc(sizeof(int32_t) * TT);
    p->x = cuda_malloc(sizeof(float) * TT * H);
    if (o->tap || (ix && sp->topk < T)) p->xn_all = cuda_malloc(sizeof(float) * TT * H);
    p->xn = cuda_malloc(sizeof(float) * RC * H);
    p->q = cuda_malloc(sizeof(float) * RA * nq);
    p->k = cuda_malloc(sizeof(float) * RA * nkv);
    p->v = cuda_malloc(sizeof(float) * RA * nkv);
    p->att = cuda_malloc(sizeof(float) * RA * nq);
    const int Is = c->moe.shared_intermediate, Imlp = I > Is ? I : Is;
    p->gate = cuda_malloc(sizeof(float) * RC * Imlp);
    p->up = cuda_malloc(sizeof(float) * RC * Imlp);
    p->lse = need_lse ? cuda_malloc(sizeof(float) * TT * Hq) : NULL;
    if (c->attn_out_gate) p->agate = cuda_malloc(sizeof(float) * RC * nq);
    const LinearAttnConfig *la = &c->lin;
    const int kd = la->n_k_heads * la->k_dim, vd = la->n_v_heads * la->v_dim;
    int n_lin = 0;
    for (int l = 0; l < c->n_layers; l++) n_lin += c->layer_kinds[l] == LAYER_LINEAR_ATTENTION;
    if (n_lin) {
        const size_t C = 2 * (size_t)kd + vd, Kh = (size_t)(la->conv_kernel > 1 ? la->conv_kernel - 1 : 0);
        p->lin_x = cuda_malloc(sizeof(float) * (RC + Kh) * C), p->lin_c = cuda_malloc(sizeof(float) * (RC + Kh) * C);
        if (Kh) p->lin_halo = cuda_malloc(sizeof(float) * Kh * C);
        p->lin_q = cuda_malloc(sizeof(float) * RC * kd), p->lin_k = cuda_malloc(sizeof(float) * RC * kd);
        p->lin_v = cuda_malloc(sizeof(float) * RC * vd), p->lin_z = cuda_malloc(sizeof(float) * RC * vd);
        p->lin_o = cuda_malloc(sizeof(float) * RC * vd);
        p->lin_a = cuda_malloc(sizeof(float) * RC * la->n_v_heads);
        p->lin_b = cuda_malloc(sizeof(float) * RC * la->n_v_heads);
        p->lin_state = cuda_malloc(sizeof(float) * (size_t)la->n_v_heads * la->k_dim * la->v_dim);
    }
    if (c->layer_moe) {
        p->moe_logits = cuda_malloc(sizeof(float) * RC * c->moe.n_experts);
        p->moe_wt = cuda_malloc(sizeof(float) * RC * c->moe.top_k);
        p->moe_idx = cuda_malloc(sizeof(int) * RC * c->moe.top_k);
        p->moe_y = cuda_malloc(sizeof(float) * RC * H);
        p->moe_sg = cuda_malloc(sizeof(float) * RC);
    }
    int64_t widest = H > nq ? H : nq;
    widest = Imlp > widest ? Imlp : widest;
    widest = n_lin && vd > widest ? vd : widest;
    if (f->prec != FWD_FP32) p->hb = cuda_malloc(2 * RC * (size_t)widest);
    if (p->bf16_attn) {
        p->qb = cuda_malloc(2 * TT * nq), p->kb = cuda_malloc(2 * TT * nkv), p->vb = cuda_malloc(2 * TT * nkv);
        p->ob = cuda_malloc(2 * TT * nq);
    }
    if (want_stats) {
        p->union_stat = o->stats->union_bsel;
        p->d_rec = cuda_malloc(sizeof(float) * TT), p->d_sup = cuda_malloc(sizeof(float) * TT);
        cuda_memset(p->d_rec, 0, sizeof(float) * TT);
        cuda_memset(p->d_sup, 0, sizeof(float) * TT);
    }
    if (ix && sp->topk < T) {
        const int rows = sparsity_rows(sp, T);
        p->sel = cuda_malloc(sizeof(int32_t) * (size_t)rows * sp->topk);
        p->n_sel = cuda_malloc(sizeof(int32_t) * (size_t)rows);
        p->ip = xcalloc((size_t)c->n_layers, sizeof *p->ip);
        const int64_t np = indexer_n_params(&ix->cfg);
        for (int l = 0; l < c->n_layers && l < ix->n_model_layers; l++)
            if (ix->params[l]) {
                p->ip[l] = cuda_malloc(sizeof(float) * (size_t)np);
                cuda_to_device(p->ip[l], ix->params[l], sizeof(float) * (size_t)np);
            }
    }
    if (o->tap && !(o->tap->wants & TAP_DEVICE)) {
        const unsigned w = o->tap->wants & TAP_ALL ? o->tap->wants & TAP_ALL : TAP_ALL;
        if (w & TAP_XN) p->h_xn = xmalloc(sizeof(float) * TT * H);
        if (w & TAP_Q) p->h_q = xmalloc(sizeof(float) * TT * nq);
        if (w & TAP_K) p->h_k = xmalloc(sizeof(float) * TT * nkv);
        if ((w & TAP_LSE) && !sp) p->h_lse = xmalloc(sizeof(float) * TT * Hq);
    }
    cuda_to_device(p->d_ids, ids, sizeof(int32_t) * TT);
    embedding_forward_cuda(p->x, p->d_ids, f->embed, T, H, c->embed_scale);
    return p;
}

// The rows of the chunk that starts at t0: rc, or what is left of T.
static int chunk_rows(const CudaPass *p, int t0) { return p->T - t0 < p->rc ? p->T - t0 : p->rc; }

// The first row chunk layer l's work after its attention has to produce: 0, except in the last layer of
// a pass that ends in the last position's logits (time to first token, and the prefill of greedy
// decoding), where only the chunk holding that position reaches the logits. Its o-projection, MLP and
// norms are then the very calls the whole pass makes for that chunk, so the logits are the same bits;
// the earlier rows of that layer are never formed (their k, v, in a decoding cache, are). Returns a
// chunk start (a multiple of p->rc). Opt-in while it is measured: SPINDLE_TTFT_LAST_CHUNK=1.
static int rows_from(const CudaPass *p, int l) {
    if (!p->last_logits_host || l != p->f->m->cfg.n_layers - 1 || !env_long("SPINDLE_TTFT_LAST_CHUNK", 0, 0, 1))
        return 0;
    return (p->T - 1) / p->rc * p->rc;
}

// Rows [t0, t0 + n) of an [T, C] array of 4-byte (fp32) or 2-byte (16-bit) elements.
static float *rows_f32(float *a, int t0, int C) { return a + (size_t)t0 * C; }
static void *rows_16(void *a, int t0, int C) { return (char *)a + 2 * (size_t)t0 * C; }

// The operand of layer l's attention-input projections for rows [t0, t0 + n):
// from xn_all when attn_in kept it for this layer, else RMSNorm of those rows
// of x (not yet updated by the layer), in the GEMM's precision.
static const void *attn_operand(CudaPass *p, int l, int t0, int n) {
    const FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const int H = c->hidden;
    if (p->xn_layer == l) return gemm_input(f, rows_f32(p->xn_all, t0, H), p->hb, (int64_t)n * H);
    return norm_input(f, p->xn, p->hb, rows_f32(p->x, t0, H), f->layers[l].attn_norm, n, H, (float)c->rms_eps, 0);
}

static void cuda_attn_in(void *tw, int l, int keep_fp32) {
    CudaPass *p = tw;
    const ModelConfig *c = &p->f->m->cfg;
    p->xn_layer = -1;
    if (keep_fp32) {  // the indexer or the tap reads xn across T (begin sized xn_all for them)
        rmsnorm_forward_cuda(p->xn_all, p->x, p->f->layers[l].attn_norm, p->T, c->hidden, (float)c->rms_eps);
        p->xn_layer = l;
    }
}

static void cuda_qkv(void *tw, int l) {
    CudaPass *p = tw;
    const FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const LayerDev *w = &f->layers[l];
    const int nq = c->n_heads * c->head_dim, nkv = c->n_kv_heads * c->head_dim, half = rope_rot_dims(c) / 2;
    const float *cos_t, *sin_t;
    rope_tables_dev(p->f, c->layer_kinds[l] == LAYER_SLIDING_ATTENTION, p->pos0 + p->T, &cos_t, &sin_t);
    for (int t0 = 0; t0 < p->T; t0 += p->rc) {
        const int n = chunk_rows(p, t0), r = p->f32_attn ? t0 : 0;
        const void *in = attn_operand(p, l, t0, n);
        float *q = rows_f32(p->q, r, nq), *k = rows_f32(p->k, r, nkv), *v = rows_f32(p->v, r, nkv);
        const size_t at = (size_t)(p->pos0 + t0) * half;  // RoPE rows of positions pos0 + t0 …
        layer_qk(f, w, in, n, cos_t ? cos_t + at : NULL, sin_t ? sin_t + at : NULL, q,
                 k, p->bf16_attn ? rows_16(p->qb, t0, nq) : NULL, p->bf16_attn ? rows_16(p->kb, t0, nkv) : NULL);
        gemm(f, v, in, w->wv, w->bv, n, c->hidden, nkv);
        if (p->bf16_attn) cuda_f32_to_bf16(rows_16(p->vb, t0, nkv), v, (int64_t)n * nkv);
    }
}

// Attention over supports sel, n_sel (a's k and b_sel; the indexer's or the
// oracle's): the bf16 mode without statistics runs bf16 operands through the
// tensor-core kernels (which keep no recall / support, and handle shapes they do
// not take themselves), straight into ob for a bf16 model; otherwise the fp32
// kernel over p->q, p->k, p->v (recall from lse).
static void attend_supports(CudaPass *p, const AttendPlan *a, const int32_t *sel, const int32_t *n_sel,
                            const float *lse, float *rec, float *sup) {
    const FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const int T = p->T, Hq = c->n_heads, Hkv = c->n_kv_heads, dh = c->head_dim;
    const float scale = (float)c->attn_scale;
    // Statistics in the bf16 mode come from the tensor-core kernels themselves (recall from each row's
    // final maximum and sum, i.e. from the bf16-rounded weights the output is made of: the deployed
    // kernels' numbers), unless SPINDLE_STATS_FP32=1 keeps them on the fp32 kernel over q, k widened from
    // the same bf16 values (fp32 weights; about 10× slower at 64K and beyond).
    const SupportStatsDev st = {rec, sup, lse};
    const int tc = p->bf16_attn && (!a->stats || !env_long("SPINDLE_STATS_FP32", 0, 0, 1));
    if (tc && a->bsel == 1 && a->exec_block > 1) {
        // Per-query supports in blocks of exec_block queries: their union as tensor-core tiles.
        p->att_bf16 = f->half == HALF_BF16;
        int64_t uk = 0;
        support_attention_union_tc_cuda(p->att_bf16 ? p->ob : (void *)p->att, p->qb, p->kb, p->vb, T, Hq, Hkv,
                                        dh, scale, a->topk, a->exec_block, sel, n_sel, p->att_bf16 ? DT_BF16 : DT_F32,
                                        a->stats ? &st : NULL, &uk);
        if (!a->stats) p->union_keys += (double)uk, p->union_blocks += (T + a->exec_block - 1) / a->exec_block;
    } else if (tc && a->bsel > 1) {
        p->att_bf16 = f->half == HALF_BF16;
        support_attention_block_tc_cuda(p->att_bf16 ? p->ob : (void *)p->att, p->qb, p->kb, p->vb, T, Hq, Hkv,
                                        dh, scale, a->topk, a->bsel, sel, n_sel, p->att_bf16 ? DT_BF16 : DT_F32,
                                        a->stats ? &st : NULL);
    } else {
        support_attention_cuda(p->att, rec, sup, p->q, p->k, p->v, lse, T, Hq, Hkv, dh, scale, a->topk, a->bsel, sel,
                               n_sel);
    }
    // Statistics of per-query supports: the union each block of union_stat queries would load
    // (SparseStats.union_bsel), from the indexer's selection.
    if (a->mode == ATTEND_INDEXER && a->stats && a->bsel == 1 && p->union_stat > 0) {
        const int64_t uk = support_union_keys_cuda(sel, n_sel, T, a->topk, p->union_stat);
        if (uk >= 0) p->union_keys += (double)uk, p->union_blocks += (T + p->union_stat - 1) / p->union_stat;
        else if (!p->union_refused++)  // the row then carries no union fields; say why, once a pass
            fprintf(stderr, "spindle: union statistics not counted: %d keys are more than the union's bitmap "
                            "holds in this GPU's shared memory\n", T);
    }
}

// The bf16 pass's own attention as the fp32 support kernel needs it: lse from
// cuDNN's SDPA over qb, kb, vb (ob: scratch), and q, k widened from those bf16
// roundings, so that a recall Σ exp(s·q·k − lse) and the attention over a support
// use the q, k the pass's dense attention used (v stays fp32). The unrounded fp32
// q, k would attend differently where logits are large: Qwen2's layer-0 key bias
// puts them in the thousands, and bf16 moves them by units (cuda_tap says the same).
static void bf16_pass_operands(CudaPass *p, float *lse) {
    const ModelConfig *c = &p->f->m->cfg;
    const int T = p->T, Hq = c->n_heads, Hkv = c->n_kv_heads, dh = c->head_dim;
    if (lse) attention_forward_bf16_cuda(p->ob, lse, p->qb, p->kb, p->vb, T, Hq, Hkv, dh, (float)c->attn_scale, 0);
    cuda_bf16_to_f32(p->q, p->qb, (int64_t)T * Hq * dh);
    cuda_bf16_to_f32(p->k, p->kb, (int64_t)T * Hkv * dh);
}

// The oracle in the bf16 mode: its P is the bf16 pass's own attention, the
// supports selected from the same bf16 q, k on tensor cores
// (oracle_select_bf16_cuda) — where oracle_attention_cuda rebuilds P in fp32
// with the fp32 flash kernel (at 32K about 6× the time of the whole bf16
// selection). Attention over the supports as the indexer's path runs it: bf16
// tensor-core tiles block-shared without statistics, else the fp32 kernel.
// Profiling: the seconds since t0 (the attend op's start) once the queued work is done, counted as the
// supports' selection.
static void select_lap(CudaPass *p, double t0) {
    if (!p->prof) return;
    cuda_sync();
    p->prof->select += omp_get_wtime() - t0;
}

static void oracle_attend_bf16(CudaPass *p, const AttendPlan *a, float *rec, float *sup, double t0) {
    const FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const int T = p->T, Hq = c->n_heads, Hkv = c->n_kv_heads, dh = c->head_dim;
    const float scale = (float)c->attn_scale;
    const int rows = (T + a->bsel - 1) / a->bsel;
    float *lse = p->lse ? p->lse : cuda_malloc(sizeof(float) * (size_t)Hq * T);
    int32_t *sel = cuda_malloc(sizeof(int32_t) * (size_t)rows * a->topk);
    int32_t *n_sel = cuda_malloc(sizeof(int32_t) * (size_t)rows);
    bf16_pass_operands(p, lse);  // q, k widened for the fp32 kernel, when it runs
    oracle_select_bf16_cuda(sel, n_sel, p->qb, p->kb, lse, T, Hq, Hkv, dh, scale, a->topk, a->bsel);
    select_lap(p, t0);
    attend_supports(p, a, sel, n_sel, lse, rec, sup);
    if (lse != p->lse) cuda_free(lse);
    cuda_free(sel);
    cuda_free(n_sel);
}

// The block-shared indexer's selection overlapped with the attention over its supports
// (indexer_select_blocks_overlap_cuda): both kernels are latency-bound at a few thread blocks an SM
// (docs/performance.md), and a chunk's attention can share the SMs with the next chunk's selection.
// SPINDLE_ATTEND_OVERLAP = the number of chunks (0: one after the other, as with statistics or
// profiling, which time the two apart; the default while it is measured). The results are the
// sequential path's, bit for bit.
typedef struct {
    CudaPass *p;
    const AttendPlan *a;
} OverlapCtx;

static void overlap_attend_chunk(void *ctx, int b0, int nb) {
    const OverlapCtx *o = ctx;
    CudaPass *p = o->p;
    const ModelConfig *c = &p->f->m->cfg;
    if (support_attention_block_tc_range_cuda(p->att_bf16 ? p->ob : (void *)p->att, p->qb, p->kb, p->vb, p->T,
                                              c->n_heads, c->n_kv_heads, c->head_dim, (float)c->attn_scale,
                                              o->a->topk, o->a->bsel, p->sel, p->n_sel,
                                              p->att_bf16 ? DT_BF16 : DT_F32, b0, nb) != 0) {
        fprintf(stderr, "spindle: the tensor-core sparse attention declined a shape it was checked to take\n");
        abort();
    }
}

static int attend_overlapped(CudaPass *p, int l, const AttendPlan *a) {
    const ModelConfig *c = &p->f->m->cfg;
    const int chunks = (int)env_long("SPINDLE_ATTEND_OVERLAP", 0, 0, 1 << 20);
    if (chunks == 0 || a->stats || p->prof || a->recent || a->sinks || !p->bf16_attn || a->bsel <= 1 ||
        p->scores != IX_SCORES_BF16 || env_long("SPINDLE_SPARSE_WGMMA", 0, 0, 2) != 0 ||
        !support_attention_block_tc_takes(c->n_heads, c->n_kv_heads, c->head_dim, a->topk, a->bsel))
        return -1;
    p->att_bf16 = p->f->half == HALF_BF16;
    OverlapCtx o = {p, a};
    // The last layer of a time-to-first-token pass: only the blocks of the rows that reach the logits.
    const int rc = indexer_select_blocks_overlap_cuda(p->sel, p->n_sel, a->ix_cfg, p->ip[l], p->xn_all, p->T, a->topk,
                                                      a->bsel, rows_from(p, l) / a->bsel, chunks,
                                                      overlap_attend_chunk, &o);
    if (rc != 0) p->att_bf16 = 0;
    return rc;
}

static void cuda_attend(void *tw, int l, const AttendPlan *a) {
    CudaPass *p = tw;
    const FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const int T = p->T, Hq = c->n_heads, Hkv = c->n_kv_heads, dh = c->head_dim;
    const float scale = (float)c->attn_scale;
    float *rec = a->stats ? p->d_rec : NULL, *sup = a->stats ? p->d_sup : NULL;
    p->att_bf16 = 0;
    const double t0 = p->prof ? omp_get_wtime() : 0;  // the layer loop's lap left the device idle
    if (a->mode == ATTEND_INDEXER) {
        if (a->stats && p->bf16_attn) bf16_pass_operands(p, p->lse);  // P's lse: the pass's own attention
        else if (a->stats) attention_forward_cuda(p->att, p->lse, p->q, p->k, p->v, T, Hq, Hkv, dh, scale, 0);
        if (a->refine > 0) {
            // Two-stage: per-query supports from each block's candidates, executed like per-query ones
            // (as unions of blocks of exec_block queries, else of b_sel: at most refine keys a block).
            indexer_select_refined_cuda(p->sel, p->n_sel, a->ix_cfg, p->ip[l], p->xn_all, T, a->topk, a->bsel,
                                        a->refine, p->scores);
            select_lap(p, t0);
            const AttendPlan per_query = {.mode = ATTEND_INDEXER, .topk = a->topk, .bsel = 1,
                                          .exec_block = a->exec_block > 1 ? a->exec_block : a->bsel,
                                          .stats = a->stats};
            attend_supports(p, &per_query, p->sel, p->n_sel, p->lse, rec, sup);
            return;
        }
        if (attend_overlapped(p, l, a) == 0) return;
        indexer_select_cuda(p->sel, p->n_sel, a->ix_cfg, p->ip[l], p->xn_all, T, a->topk, a->bsel, p->scores);
        select_lap(p, t0);
        attend_supports(p, a, p->sel, p->n_sel, p->lse, rec, sup);
    } else if (a->mode == ATTEND_ORACLE && p->bf16_attn && a->topk < T) {
        oracle_attend_bf16(p, a, rec, sup, t0);
    } else if (a->mode == ATTEND_ORACLE) {
        if (p->bf16_attn) bf16_pass_operands(p, NULL);  // k ≥ T: every key, P from the pass's q, k
        oracle_attention_cuda(p->att, rec, sup, p->q, p->k, p->v, T, Hq, Hkv, dh, scale, a->topk, a->bsel);
    } else if (p->bf16_attn) {
        attention_forward_bf16_cuda(p->ob, a->lse ? p->lse : NULL, p->qb, p->kb, p->vb, T, Hq, Hkv, dh, scale,
                                    a->window);
        p->att_bf16 = 1;
    } else {
        attention_forward_cuda(p->att, a->lse ? p->lse : NULL, p->q, p->k, p->v, T, Hq, Hkv, dh, scale, a->window);
    }
}

// The decoding cache (layer.h): this pass's k, v rows appended at kv->len, and a
// decoding step's queries over the cache (fp32: attention_cached_cuda).
static void cuda_kv_store(void *tw, int l, KvCache *kv) {
    CudaPass *p = tw;
    cuda_copy_cols(kv->k[l] + (size_t)kv->len * kv->nkv, p->k, p->T, kv->nkv, 0, kv->nkv);
    cuda_copy_cols(kv->v[l] + (size_t)kv->len * kv->nkv, p->v, p->T, kv->nkv, 0, kv->nkv);
}

static void cuda_kv_attend(void *tw, int l, const AttendPlan *a, const KvCache *kv) {
    CudaPass *p = tw;
    const ModelConfig *c = &p->f->m->cfg;
    attention_cached_cuda(p->att, p->q, kv->k[l], kv->v[l], kv->len, p->T, c->n_heads, c->n_kv_heads, c->head_dim,
                          (float)c->attn_scale, a->window);
    p->att_bf16 = 0;
}

static void cuda_tap(void *tw, int l, const ForwardTap *tap) {
    CudaPass *p = tw;
    const ModelConfig *c = &p->f->m->cfg;
    const size_t TT = (size_t)p->T;
    const unsigned w = tap->wants & TAP_ALL ? tap->wants & TAP_ALL : TAP_ALL;  // only what the tap reads crosses the bus
    // A bf16 pass attended over the bf16 roundings qb, kb, and its lse is
    // theirs: the tap gets those q, k (widened), so that a teacher's P rebuilt
    // from them sums to one. The unrounded fp32 q, k do not match that lse where
    // logits are large (e.g. Qwen2's layer-0 key bias, |b| up to 354: logits in
    // the thousands, bf16's rounding moves them by units). Nothing after the tap
    // reads p->q, p->k of this layer.
    if (p->bf16_attn && (w & TAP_Q)) cuda_bf16_to_f32(p->q, p->qb, (int64_t)TT * c->n_heads * c->head_dim);
    if (p->bf16_attn && (w & TAP_K)) cuda_bf16_to_f32(p->k, p->kb, (int64_t)TT * c->n_kv_heads * c->head_dim);
    if (tap->wants & TAP_DEVICE) {  // the device arrays themselves, in stream order
        tap->fn(tap->ctx, l, w & TAP_XN ? p->xn_all : NULL, w & TAP_Q ? p->q : NULL, w & TAP_K ? p->k : NULL,
                w & TAP_LSE ? p->lse : NULL, p->T);
        return;
    }
    cuda_sync();
    if (w & TAP_XN) cuda_to_host(p->h_xn, p->xn_all, sizeof(float) * TT * c->hidden);
    if (w & TAP_Q) cuda_to_host(p->h_q, p->q, sizeof(float) * TT * c->n_heads * c->head_dim);
    if (w & TAP_K) cuda_to_host(p->h_k, p->k, sizeof(float) * TT * c->n_kv_heads * c->head_dim);
    if (p->h_lse) cuda_to_host(p->h_lse, p->lse, sizeof(float) * TT * c->n_heads);  // wanted, dense pass
    tap->fn(tap->ctx, l, w & TAP_XN ? p->h_xn : NULL, w & TAP_Q ? p->h_q : NULL, w & TAP_K ? p->h_k : NULL,
            p->h_lse, p->T);
}

// Rows [t0, t0 + n) of x += [RMSNorm(·)·post](in·wᵀ (+ bias)): without a
// post-norm the residual update of gemm_residual; with one, the product into
// xn, normed there, added.
static void block_out(CudaPass *p, int t0, int n, const void *in, const void *w, const float *bias,
                      const float *post, int C_in) {
    const FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const int H = c->hidden;
    float *x = rows_f32(p->x, t0, H);
    if (!post) {
        gemm_residual(f, x, p->xn, in, w, bias, n, C_in, H);
        return;
    }
    gemm(f, p->xn, in, w, bias, n, C_in, H);
    rmsnorm_forward_cuda(p->xn, p->xn, post, n, H, (float)c->rms_eps);
    residual_forward_cuda(x, x, p->xn, (int64_t)n * H);
}

static void cuda_attn_out(void *tw, int l) {
    CudaPass *p = tw;
    const FwdCuda *f = p->f;
    const LayerDev *w = &f->layers[l];
    const ModelConfig *c = &f->m->cfg;
    const int nq = c->n_heads * c->head_dim;
    for (int t0 = rows_from(p, l); t0 < p->T; t0 += p->rc) {
        const int n = chunk_rows(p, t0);
        const int64_t m = (int64_t)n * nq;
        const void *in;
        if (p->att_bf16 && !w->wq_gate && f->half == HALF_BF16) {
            in = rows_16(p->ob, t0, nq);  // the bf16 kernels' output is the o-projection's operand
        } else {
            float *a = p->att_bf16 ? p->att : rows_f32(p->att, t0, nq);  // att spans T unless ob holds the output
            if (p->att_bf16) cuda_bf16_to_f32(a, rows_16(p->ob, t0, nq), m);
            if (w->wq_gate) {  // a · sigmoid(xn·Wgᵀ (+b)) in fp32
                gemm(f, p->agate, attn_operand(p, l, t0, n), w->wq_gate, w->bq_gate, n, c->hidden, nq);
                sigmoid_mul_cuda(a, p->agate, m);
            }
            in = gemm_input(f, a, p->hb, m);
        }
        block_out(p, t0, n, in, w->wo, w->bo, w->post_attn_norm, nq);
    }
}

static void cuda_linear_attn(void *tw, int l) {
    CudaPass *p = tw;
    const FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const LayerDev *w = &f->layers[l];
    const LinearAttnConfig *la = &c->lin;
    const int H = c->hidden, Hk = la->n_k_heads, Hv = la->n_v_heads, dk = la->k_dim, dv = la->v_dim;
    const int kd = Hk * dk, vd = Hv * dv, C = 2 * kd + vd, Kh = la->conv_kernel > 1 ? la->conv_kernel - 1 : 0;
    for (int t0 = 0; t0 < p->T; t0 += p->rc) {
        const int n = chunk_rows(p, t0);
        const void *in = attn_operand(p, l, t0, n);
        // Conv input rows: Kh rows of history (zeros before the first token), then the chunk's.
        if (Kh) {
            if (t0 == 0) cuda_memset(p->lin_x, 0, sizeof(float) * (size_t)Kh * C);
            else cuda_copy_cols(p->lin_x, p->lin_halo, Kh, C, 0, C);
        }
        float *xc = rows_f32(p->lin_x, Kh, C);
        gemm(f, xc, in, w->lin_qkv, NULL, n, H, C);
        gemm(f, p->lin_z, in, w->lin_z, NULL, n, H, vd);
        gemm(f, p->lin_b, in, w->lin_b, NULL, n, H, Hv);
        gemm(f, p->lin_a, in, w->lin_a, NULL, n, H, Hv);
        causal_conv1d_cuda(p->lin_c, p->lin_x, w->lin_conv, NULL, n + Kh, C, la->conv_kernel, 1);
        if (Kh && t0 + n < p->T) cuda_copy_cols(p->lin_halo, rows_f32(p->lin_x, n, C), Kh, C, 0, C);
        const float *cc = rows_f32(p->lin_c, Kh, C);
        cuda_copy_cols(p->lin_q, cc, n, C, 0, kd);
        cuda_copy_cols(p->lin_k, cc, n, C, kd, kd);
        cuda_copy_cols(p->lin_v, cc, n, C, 2 * kd, vd);
        deltanet_gates_cuda(p->lin_a, p->lin_b, p->lin_a, p->lin_b, w->lin_a_log, w->lin_dt_bias, n, Hv);
        // The state carries from chunk to chunk: the result is that of one pass over T.
        gated_delta_rule_chunked_cuda(p->lin_o, n < p->T ? p->lin_state : NULL, p->lin_q, p->lin_k, p->lin_v,
                                      p->lin_a, p->lin_b, t0 ? p->lin_state : NULL, n, Hk, Hv, dk, dv, 0, 1, 64,
                                      DT_F32);
        gated_rmsnorm_cuda(p->lin_o, p->lin_o, p->lin_z, w->lin_norm, n * Hv, dv, (float)c->rms_eps);
        block_out(p, t0, n, gemm_input(f, p->lin_o, p->hb, (int64_t)n * vd), w->lin_out, NULL, NULL, vd);
    }
}

static void cuda_mlp(void *tw, int l) {
    CudaPass *p = tw;
    const FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const LayerDev *w = &f->layers[l];
    const int H = c->hidden, I = c->intermediate;
    for (int t0 = rows_from(p, l); t0 < p->T; t0 += p->rc) {
        const int n = chunk_rows(p, t0);
        const void *in = norm_input(f, p->xn, p->hb, rows_f32(p->x, t0, H), w->mlp_norm, n, H, (float)c->rms_eps, 0);
        const void *down_in = p->hb;  // the down projection's operand
        if (f->prec == FWD_BF16 && !w->b_gate && !w->b_up) {
            // gate and up in 16 bits, as a bf16 model computes them: half the
            // traffic of the two widest tensors of the layer.
            matmul_forward_half_out_cuda(p->gate, in, w->w_gate, n, H, I, f->half);
            matmul_forward_half_out_cuda(p->up, in, w->w_up, n, H, I, f->half);
            glu_forward_half_in_cuda(p->hb, p->gate, p->up, (int64_t)n * I, c->act, f->half);
        } else {
            gemm(f, p->gate, in, w->w_gate, w->b_gate, n, H, I);
            gemm(f, p->up, in, w->w_up, w->b_up, n, H, I);
            if (f->prec == FWD_FP32) {
                glu_forward_cuda(p->gate, p->gate, p->up, (int64_t)n * I, c->act);
                down_in = p->gate;
            } else {  // straight into the 16-bit operand (the same bits as gemm_input of the fp32 result)
                glu_forward_half_cuda(p->hb, p->gate, p->up, (int64_t)n * I, c->act, f->half);
            }
        }
        block_out(p, t0, n, down_in, w->w_down, w->b_down, w->post_mlp_norm, I);
    }
}

static void cuda_moe(void *tw, int l) {
    CudaPass *p = tw;
    const FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const LayerDev *w = &f->layers[l];
    const MoeConfig *mo = &c->moe;
    const int H = c->hidden, E = mo->n_experts, k = mo->top_k, Is = mo->shared_intermediate;
    for (int t0 = rows_from(p, l); t0 < p->T; t0 += p->rc) {
        const int n = chunk_rows(p, t0);
        float *x = rows_f32(p->x, t0, H);
        const void *in = norm_input(f, p->xn, p->hb, x, w->mlp_norm, n, H, (float)c->rms_eps, 1);  // xn in fp32 too
        matmul_forward_cuda(p->moe_logits, p->xn, w->moe_router, NULL, n, H, E);
        moe_route_cuda(p->moe_idx, p->moe_wt, p->moe_logits, n, E, k, mo->norm_topk_prob);
        moe_experts_cuda(p->moe_y, p->xn, p->moe_idx, p->moe_wt, (const float *const *)w->exp_gate,
                         (const float *const *)w->exp_up, (const float *const *)w->exp_down, n, H, E,
                         mo->intermediate, k, c->act);
        if (Is > 0) {  // + sigmoid(xn·w_sgᵀ) · shared expert(xn), as the CPU twin adds them
            matmul_forward_cuda(p->moe_sg, p->xn, w->sh_expert_gate, NULL, n, H, 1);
            gemm(f, p->gate, in, w->sh_gate, NULL, n, H, Is);
            gemm(f, p->up, in, w->sh_up, NULL, n, H, Is);
            glu_forward_cuda(p->gate, p->gate, p->up, (int64_t)n * Is, c->act);
            gemm(f, p->xn, gemm_input(f, p->gate, p->hb, (int64_t)n * Is), w->sh_down, NULL, n, Is, H);
            sigmoid_scale_rows_cuda(p->xn, p->moe_sg, n, H);
            residual_forward_cuda(p->xn, p->xn, p->moe_y, (int64_t)n * H);
        } else {
            cuda_copy_cols(p->xn, p->moe_y, n, H, 0, H);
        }
        if (w->post_mlp_norm) rmsnorm_forward_cuda(p->xn, p->xn, w->post_mlp_norm, n, H, (float)c->rms_eps);
        residual_forward_cuda(x, x, p->xn, (int64_t)n * H);
    }
}

static void cuda_finish(void *tw, int stopped, const ForwardOpts *o) {
    CudaPass *p = tw;
    FwdCuda *f = p->f;
    const ModelConfig *c = &f->m->cfg;
    const int T = p->T, H = c->hidden;
    const size_t TT = (size_t)T;
    if (stopped) {  // teacher emission: the tap has everything; hidden stays unspecified
        cuda_sync();
    } else {
        if (p->last_logits_host) {  // the last row alone (RMSNorm is row-local: the same bits)
            rmsnorm_forward_cuda(p->x + (TT - 1) * H, p->x + (TT - 1) * H, f->final_norm, 1, H, (float)c->rms_eps);
            float *logits = cuda_malloc(sizeof(float) * (size_t)c->vocab);
            lm_head_logits(f, logits, p->x + (TT - 1) * H, 1);
            cuda_sync();
            cuda_to_host(p->last_logits_host, logits, sizeof(float) * (size_t)c->vocab);
            cuda_free(logits);
        } else {
            rmsnorm_forward_cuda(p->x, p->x, f->final_norm, T, H, (float)c->rms_eps);
            cuda_sync();
            cuda_to_host(p->hidden_host, p->x, sizeof(float) * TT * H);
        }
    }
    if (o->stats && p->union_blocks > 0)
        o->stats->union_keys += p->union_keys, o->stats->union_blocks += p->union_blocks;
    if (p->d_rec) {  // add this pass's sums into the caller's arrays
        float *tmp = xmalloc(sizeof(float) * TT);
        float *dst[2] = {o->stats->recall, o->stats->support}, *src[2] = {p->d_rec, p->d_sup};
        for (int i = 0; i < 2; i++)
            if (dst[i]) {
                cuda_to_host(tmp, src[i], sizeof(float) * TT);
                for (size_t t = 0; t < TT; t++) dst[i][t] += tmp[t];
            }
        free(tmp);
    }
    void *ds[] = {p->d_ids, p->x, p->xn_all, p->xn, p->q, p->k, p->v, p->att, p->gate, p->up, p->lse, p->hb,
                  p->qb, p->kb, p->vb, p->ob, p->d_rec, p->d_sup, p->sel, p->n_sel, p->agate, p->lin_x,
                  p->lin_c, p->lin_halo, p->lin_q, p->lin_k, p->lin_v, p->lin_z, p->lin_a, p->lin_b, p->lin_o,
                  p->lin_state, p->moe_logits, p->moe_wt, p->moe_y, p->moe_sg, p->moe_idx};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) cuda_free(ds[i]);
    if (p->ip) {
        for (int l = 0; l < c->n_layers; l++) cuda_free(p->ip[l]);
        free(p->ip);
    }
    free(p->h_xn), free(p->h_q), free(p->h_k), free(p->h_lse);
    free(p);
}

static const LayerOps cuda_ops = {
    .begin = cuda_begin,
    .attn_in = cuda_attn_in,
    .qkv = cuda_qkv,
    .attend = cuda_attend,
    .tap = cuda_tap,
    .attn_out = cuda_attn_out,
    .linear_attn = cuda_linear_attn,
    .mlp = cuda_mlp,
    .moe = cuda_moe,
    .kv_store = cuda_kv_store,
    .kv_attend = cuda_kv_attend,
    .sync = cuda_sync,
    .finish = cuda_finish,
};

void fwd_cuda_hidden(FwdCuda *f, const int32_t *ids, int T, float *hidden_host, const ForwardOpts *o) {
    CudaTwin tw = {f, hidden_host, NULL};
    layer_loop(&cuda_ops, &tw, &f->m->cfg, ids, T, o);
}

void fwd_cuda_ttft(FwdCuda *f, const int32_t *ids, int T, const ForwardOpts *o, float *last_logits_host) {
    CudaTwin tw = {f, NULL, last_logits_host};
    layer_loop(&cuda_ops, &tw, &f->m->cfg, ids, T, o);
}

int fwd_cuda_kvcache_new(FwdCuda *f, int max_len, KvCache **out, Status *st) {
    *out = NULL;
    if (kvcache_check(f->m, st)) return -1;
    *out = kvcache_alloc(f->m, max_len, cuda_malloc);
    (*out)->device = 1;
    // The RoPE tables for every position the cache can hold, now: each decoding
    // step reaches one position further, and growing them step by step would
    // rebuild the whole table on the host at every token (O(T) per token).
    const float *cos_d, *sin_d;
    for (int kind = 0; kind < (f->m->cfg.sliding_window ? 2 : 1); kind++)  // sliding tables only where layers slide
        rope_tables_dev(f, kind, max_len, &cos_d, &sin_d);
    return 0;
}

void fwd_cuda_kvcache_free(KvCache *kv) { kvcache_release(kv, cuda_free); }

static void cuda_last_logits(void *ctx, const int32_t *ids, int n, const ForwardOpts *opts, float *row) {
    fwd_cuda_ttft(ctx, ids, n, opts, row);
}

int fwd_cuda_generate(FwdCuda *f, const int32_t *ids, int T, const ForwardOpts *o, int max_new, const int32_t *stop,
                      int n_stop, int32_t *out, float *logits, GenTiming *tm, Status *st) {
    if (max_new <= 0 || T <= 0) return 0;
    KvCache *kv;
    if (fwd_cuda_kvcache_new(f, T + max_new, &kv, st)) return -1;
    const int n = generate_greedy(cuda_last_logits, f, kv, f->m->cfg.vocab, ids, T, o, max_new, stop, n_stop, out,
                                  logits, tm);
    fwd_cuda_kvcache_free(kv);
    return n;
}

void fwd_cuda_lm_head(FwdCuda *f, const float *hidden_host, int rows, float *logits_host) {
    if (rows <= 0) return;
    const int H = f->m->cfg.hidden, V = f->m->cfg.vocab;
    if (rows > f->lm_rows) {  // grow the scratch to this chunk
        cuda_free(f->lm_in);
        cuda_free(f->lm_out);
        f->lm_in = cuda_malloc(sizeof(float) * (size_t)rows * H);
        f->lm_out = cuda_malloc(sizeof(float) * (size_t)rows * V);
        f->lm_rows = rows;
    }
    cuda_to_device(f->lm_in, hidden_host, sizeof(float) * (size_t)rows * H);
    lm_head_logits(f, f->lm_out, f->lm_in, rows);
    cuda_sync();
    cuda_to_host(logits_host, f->lm_out, sizeof(float) * (size_t)rows * V);
}

// Row chunk of fwd_cuda_score: up to 1024 rows, fewer where the two logits
// buffers [rows, vocab] would pass 1 GiB (a vocab over 131072).
static int score_chunk(int V) {
    const int64_t cap = ((int64_t)1 << 29) / ((int64_t)sizeof(float) * V);
    return cap >= 1024 ? 1024 : cap > 0 ? (int)cap : 1;
}

void fwd_cuda_score(FwdCuda *f, const float *hd, const float *hs, int rows, const int32_t *next, double *nll_d,
                    double *nll_s, double *kl, int32_t *top1) {
    if (rows <= 0) return;
    const int H = f->m->cfg.hidden, V = f->m->cfg.vocab, chunk = score_chunk(V);
    const int n = rows < chunk ? rows : chunk;
    if (n > f->sc_rows) {  // grow the scratch to this chunk
        cuda_free(f->sc_hidden), cuda_free(f->sc_logits), cuda_free(f->sc_next);
        cuda_free(f->sc_top1), cuda_free(f->sc_stats);
        f->sc_hidden = cuda_malloc(sizeof(float) * 2 * (size_t)n * H);
        f->sc_logits = cuda_malloc(sizeof(float) * 2 * (size_t)n * V);
        f->sc_next = cuda_malloc(sizeof(int32_t) * (size_t)n);
        f->sc_top1 = cuda_malloc(sizeof(int32_t) * (size_t)n);
        f->sc_stats = cuda_malloc(sizeof(double) * 3 * (size_t)n);
        f->sc_rows = n;
    }
    const size_t cap = (size_t)f->sc_rows;
    float *in_d = f->sc_hidden, *in_s = f->sc_hidden + cap * H;
    float *lg_d = f->sc_logits, *lg_s = f->sc_logits + cap * V;
    double *o_nll_d = f->sc_stats, *o_nll_s = f->sc_stats + cap, *o_kl = f->sc_stats + 2 * cap;
    for (int r0 = 0; r0 < rows; r0 += n) {
        const int m = rows - r0 < n ? rows - r0 : n;
        cuda_to_device(in_d, hd + (size_t)r0 * H, sizeof(float) * (size_t)m * H);
        cuda_to_device(f->sc_next, next + r0, sizeof(int32_t) * (size_t)m);
        lm_head_logits(f, lg_d, in_d, m);
        if (hs) {
            cuda_to_device(in_s, hs + (size_t)r0 * H, sizeof(float) * (size_t)m * H);
            lm_head_logits(f, lg_s, in_s, m);
        }
        next_token_stats_cuda(o_nll_d, o_nll_s, o_kl, f->sc_top1, lg_d, hs ? lg_s : NULL, f->sc_next, m, V);
        cuda_sync();
        cuda_to_host(nll_d + r0, o_nll_d, sizeof(double) * (size_t)m);
        if (hs) {
            cuda_to_host(nll_s + r0, o_nll_s, sizeof(double) * (size_t)m);
            cuda_to_host(kl + r0, o_kl, sizeof(double) * (size_t)m);
            cuda_to_host(top1 + r0, f->sc_top1, sizeof(int32_t) * (size_t)m);
        }
    }
}
