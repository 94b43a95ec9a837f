// forward_cuda.c: see forward_cuda.h. The layer is forward.c's, op for op:
//   x = embed[ids]
//   per layer: xn = RMSNorm(x); q, k, v = xn·Wqᵀ (+b), xn·Wkᵀ (+b), xn·Wvᵀ (+b)
//     [qwen3] q, k = per-head RMSNorm; q, k = RoPE(q), RoPE(k)
//     x += Attention(q, k, v)·Woᵀ (+b)
//     xn = RMSNorm(x); x += Wdown·(silu(xn·Wgateᵀ (+b)) ⊙ xn·Wupᵀ (+b)) (+b)
//   hidden = RMSNorm(x)
// In bf16 mode a GEMM's fp32 input is rounded into one bf16 scratch buffer
// just before the GEMM (once for q/k/v, once for gate/up); see the header for
// what is bf16 and what is not.
#include "forward_cuda.h"

#include <string.h>

#include "ops_cuda.h"
#include "rope.h"

typedef struct {
    // Matrices: float* (fp32 mode) or bf16 (bf16 mode), [C_out, C_in] as on the host.
    void *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
    // Always fp32; NULL where the checkpoint has none.
    float *attn_norm, *mlp_norm, *q_norm, *k_norm;
    float *bq, *bk, *bv, *bo, *b_gate, *b_up, *b_down;
} LayerDev;

struct FwdCuda {
    const Model *m;
    int bf16;
    LayerDev *layers;   // n_layers
    void *embed;        // (vocab, hidden), fp32 or bf16
    void *lm_head;      // (vocab, hidden); == embed when tied
    float *final_norm;  // (hidden)
    size_t weight_bytes;
    float *stage;       // upload staging (fp32) for bf16 conversion; only during upload
    // lm_head scratch, grown to the largest row chunk seen
    int lm_rows;
    float *lm_in, *lm_out;
    void *lm_in_bf;
};

// ---- upload ----------------------------------------------------------------------------

static float *upload_f32(FwdCuda *f, const float *h, int64_t n) {
    if (!h) return NULL;
    float *d = cuda_malloc(sizeof(float) * (size_t)n);
    cuda_to_device(d, h, sizeof(float) * (size_t)n);
    f->weight_bytes += sizeof(float) * (size_t)n;
    return d;
}

// A weight matrix: fp32 as is, or rounded to bf16 on the device (via f->stage).
static void *upload_matrix(FwdCuda *f, const float *h, int64_t n) {
    if (!f->bf16) return upload_f32(f, h, n);
    void *d = cuda_malloc(2 * (size_t)n);
    cuda_to_device(f->stage, h, sizeof(float) * (size_t)n);
    cuda_f32_to_bf16(d, f->stage, n);
    cuda_sync();  // the stage is overwritten by the next upload
    f->weight_bytes += 2 * (size_t)n;
    return d;
}

int fwd_cuda_upload(const Model *m, int bf16, FwdCuda **out, Status *st) {
    *out = NULL;
    char why[256];
    if (cuda_available(why, sizeof why) == 0) return status_fail(st, "no usable GPU (%s)", why);
    const ModelConfig *c = &m->cfg;
    if (c->head_dim > 256)
        return status_fail(st, "head_dim %d: the CUDA attention kernel takes head_dim <= 256", c->head_dim);
    const int64_t H = c->hidden, I = c->intermediate, V = c->vocab;
    const int64_t nq = (int64_t)c->n_heads * c->head_dim, nkv = (int64_t)c->n_kv_heads * c->head_dim;

    FwdCuda *f = xcalloc(1, sizeof *f);
    f->m = m;
    f->bf16 = bf16 ? 1 : 0;
    f->layers = xcalloc((size_t)c->n_layers, sizeof *f->layers);
    if (f->bf16) {
        int64_t big = V * H;
        const int64_t sizes[] = {nq * H, nkv * H, H * nq, I * H};
        for (int i = 0; i < 4; i++) big = sizes[i] > big ? sizes[i] : big;
        f->stage = cuda_malloc(sizeof(float) * (size_t)big);
    }
    f->embed = upload_matrix(f, m->embed, V * H);
    f->lm_head = m->lm_head == m->embed ? f->embed : upload_matrix(f, m->lm_head, V * H);
    f->final_norm = upload_f32(f, m->final_norm, H);
    for (int l = 0; l < c->n_layers; l++) {
        const LayerWeights *w = &m->layers[l];
        LayerDev *d = &f->layers[l];
        d->attn_norm = upload_f32(f, w->attn_norm, H);
        d->wq = upload_matrix(f, w->wq, nq * H);
        d->wk = upload_matrix(f, w->wk, nkv * H);
        d->wv = upload_matrix(f, w->wv, nkv * H);
        d->wo = upload_matrix(f, w->wo, H * nq);
        d->bq = upload_f32(f, w->bq, nq);
        d->bk = upload_f32(f, w->bk, nkv);
        d->bv = upload_f32(f, w->bv, nkv);
        d->bo = upload_f32(f, w->bo, H);
        if (c->qk_norm) {
            d->q_norm = upload_f32(f, w->q_norm, c->head_dim);
            d->k_norm = upload_f32(f, w->k_norm, c->head_dim);
        }
        d->mlp_norm = upload_f32(f, w->mlp_norm, H);
        d->w_gate = upload_matrix(f, w->w_gate, I * H);
        d->w_up = upload_matrix(f, w->w_up, I * H);
        d->w_down = upload_matrix(f, w->w_down, H * I);
        d->b_gate = upload_f32(f, w->b_gate, I);
        d->b_up = upload_f32(f, w->b_up, I);
        d->b_down = upload_f32(f, w->b_down, H);
    }
    cuda_sync();
    cuda_free(f->stage);
    f->stage = NULL;
    *out = f;
    return 0;
}

void fwd_cuda_free(FwdCuda *f) {
    if (!f) return;
    for (int l = 0; l < f->m->cfg.n_layers; l++) {
        LayerDev *d = &f->layers[l];
        void *ps[] = {d->wq, d->wk, d->wv, d->wo, d->w_gate, d->w_up, d->w_down, d->attn_norm, d->mlp_norm,
                      d->q_norm, d->k_norm, d->bq, d->bk, d->bv, d->bo, d->b_gate, d->b_up, d->b_down};
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) cuda_free(ps[i]);
    }
    if (f->lm_head != f->embed) cuda_free(f->lm_head);
    cuda_free(f->embed);
    cuda_free(f->final_norm);
    cuda_free(f->lm_in);
    cuda_free(f->lm_out);
    cuda_free(f->lm_in_bf);
    free(f->layers);
    free(f);
}

size_t fwd_cuda_weight_bytes(const FwdCuda *f) { return f->weight_bytes; }

// ---- forward ---------------------------------------------------------------------------

// The operand a GEMM reads: in itself (fp32 mode) or in rounded into bf (bf16 mode).
static const void *gemm_input(const FwdCuda *f, const float *in, void *bf, int64_t n) {
    if (!f->bf16) return in;
    cuda_f32_to_bf16(bf, in, n);
    return bf;
}

// out[T, C_out] = in[T, C_in] · wᵀ (+ bias), in the upload's precision.
static void gemm(const FwdCuda *f, float *out, const void *in, const void *w, const float *bias, int T, int C_in,
                 int C_out) {
    if (f->bf16) matmul_forward_bf16_cuda(out, in, w, bias, T, C_in, C_out);
    else matmul_forward_cuda(out, (const float *)in, (const float *)w, bias, T, C_in, C_out);
}

void fwd_cuda_hidden(FwdCuda *f, const int32_t *ids, int T, float *hidden_host) {
    if (T <= 0) return;
    const ModelConfig *c = &f->m->cfg;
    const int H = c->hidden, I = c->intermediate, dh = c->head_dim;
    const int Hq = c->n_heads, Hkv = c->n_kv_heads, nq = Hq * dh, nkv = Hkv * dh;
    const int rot = rope_rot_dims(c), half = rot / 2;
    const float eps = (float)c->rms_eps;
    const size_t TT = (size_t)T;

    float *cos_h = xmalloc(sizeof(float) * TT * (half > 0 ? half : 1));
    float *sin_h = xmalloc(sizeof(float) * TT * (half > 0 ? half : 1));
    if (half > 0) rope_tables(c, T, cos_h, sin_h);

    int32_t *d_ids = cuda_malloc(sizeof(int32_t) * TT);
    float *x = cuda_malloc(sizeof(float) * TT * H);
    float *xn = cuda_malloc(sizeof(float) * TT * H);
    float *q = cuda_malloc(sizeof(float) * TT * nq);
    float *k = cuda_malloc(sizeof(float) * TT * nkv);
    float *v = cuda_malloc(sizeof(float) * TT * nkv);
    float *att = cuda_malloc(sizeof(float) * TT * nq);
    float *gate = cuda_malloc(sizeof(float) * TT * I);
    float *up = cuda_malloc(sizeof(float) * TT * I);
    float *cos_t = half > 0 ? cuda_malloc(sizeof(float) * TT * half) : NULL;
    float *sin_t = half > 0 ? cuda_malloc(sizeof(float) * TT * half) : NULL;
    int64_t widest = H > nq ? H : nq;
    widest = I > widest ? I : widest;
    void *bf = f->bf16 ? cuda_malloc(2 * TT * (size_t)widest) : NULL;  // the GEMM operand in bf16

    cuda_to_device(d_ids, ids, sizeof(int32_t) * TT);
    if (half > 0) {
        cuda_to_device(cos_t, cos_h, sizeof(float) * TT * half);
        cuda_to_device(sin_t, sin_h, sizeof(float) * TT * half);
    }
    if (f->bf16) embedding_forward_bf16_cuda(x, d_ids, f->embed, T, H);
    else embedding_forward_cuda(x, d_ids, (const float *)f->embed, T, H);

    for (int l = 0; l < c->n_layers; l++) {
        const LayerDev *w = &f->layers[l];
        rmsnorm_forward_cuda(xn, x, w->attn_norm, T, H, eps);
        const void *in = gemm_input(f, xn, bf, (int64_t)T * H);
        gemm(f, q, in, w->wq, w->bq, T, H, nq);
        gemm(f, k, in, w->wk, w->bk, T, H, nkv);
        gemm(f, v, in, w->wv, w->bv, T, H, nkv);
        if (c->qk_norm) {
            rmsnorm_forward_cuda(q, q, w->q_norm, T * Hq, dh, eps);
            rmsnorm_forward_cuda(k, k, w->k_norm, T * Hkv, dh, eps);
        }
        if (rot > 0) {
            rope_forward_cuda(q, cos_t, sin_t, T, Hq, dh, rot);
            rope_forward_cuda(k, cos_t, sin_t, T, Hkv, dh, rot);
        }
        attention_forward_cuda(att, NULL, q, k, v, T, Hq, Hkv, dh, (float)c->attn_scale);
        gemm(f, xn, gemm_input(f, att, bf, (int64_t)T * nq), w->wo, w->bo, T, nq, H);
        residual_forward_cuda(x, x, xn, (int64_t)T * H);

        rmsnorm_forward_cuda(xn, x, w->mlp_norm, T, H, eps);
        in = gemm_input(f, xn, bf, (int64_t)T * H);
        gemm(f, gate, in, w->w_gate, w->b_gate, T, H, I);
        gemm(f, up, in, w->w_up, w->b_up, T, H, I);
        swiglu_forward_cuda(gate, gate, up, (int64_t)T * I);
        gemm(f, xn, gemm_input(f, gate, bf, (int64_t)T * I), w->w_down, w->b_down, T, I, H);
        residual_forward_cuda(x, x, xn, (int64_t)T * H);
    }
    rmsnorm_forward_cuda(x, x, f->final_norm, T, H, eps);
    cuda_sync();
    cuda_to_host(hidden_host, x, sizeof(float) * TT * H);

    void *ds[] = {d_ids, x, xn, q, k, v, att, gate, up, cos_t, sin_t, bf};
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) cuda_free(ds[i]);
    free(cos_h);
    free(sin_h);
}

void fwd_cuda_lm_head(FwdCuda *f, const float *hidden_host, int rows, float *logits_host) {
    if (rows <= 0) return;
    const int H = f->m->cfg.hidden, V = f->m->cfg.vocab;
    if (rows > f->lm_rows) {  // grow the scratch to this chunk
        cuda_free(f->lm_in);
        cuda_free(f->lm_out);
        cuda_free(f->lm_in_bf);
        f->lm_in = cuda_malloc(sizeof(float) * (size_t)rows * H);
        f->lm_out = cuda_malloc(sizeof(float) * (size_t)rows * V);
        f->lm_in_bf = f->bf16 ? cuda_malloc(2 * (size_t)rows * H) : NULL;
        f->lm_rows = rows;
    }
    cuda_to_device(f->lm_in, hidden_host, sizeof(float) * (size_t)rows * H);
    gemm(f, f->lm_out, gemm_input(f, f->lm_in, f->lm_in_bf, (int64_t)rows * H), f->lm_head, NULL, rows, H, V);
    cuda_sync();
    cuda_to_host(logits_host, f->lm_out, sizeof(float) * (size_t)rows * V);
}
