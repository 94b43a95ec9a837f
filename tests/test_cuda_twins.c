// test_cuda_twins.c: every CUDA twin (ops_cuda.h) against its CPU twin (ops.h)
// on fresh random inputs of awkward sizes: T = 1, 7, 130, 1000; MHA and GQA 8:1;
// d_h 64/128/256; partial RoPE; aliased outputs. Each case prints the max
// absolute error and the normalised MSE (Σ(gpu − cpu)² / Σ cpu²); outputs are
// poisoned with NaN before every op, so an unwritten element fails.
//
// Tolerances (a case fails beyond either):
//   fp32 ops: nmse ≤ 1e-10 and max|err| ≤ 2e-5·max(1, max|cpu|). Both twins are
//     fp32; they differ only in summation order and in expf/sqrtf rounding
//     (a few ulp), which over sums of ≤ 4096 terms leaves a relative error near
//     1e-6 at worst; an indexing or masking bug gives errors of order 1.
//   bf16 matmul, same operands (the CPU twin fed the bf16-rounded inputs):
//     nmse ≤ 1e-9, max|err| ≤ 1e-4·max(1, max|cpu|): only the accumulation
//     differs (tensor-core fp32 accumulation), so this checks "fp32 accumulate".
//   bf16 matmul vs the fp32 inputs: nmse ≤ 1e-4. Rounding each operand to bf16
//     (8 bits of mantissa) gives a relative error with variance ≈ 2·(2⁻⁹)²/3
//     ≈ 2.5e-6 per product, so nmse ≈ 2.5e-6 expected; 1e-4 leaves 40×.
//   bf16 conversion: exact (round to nearest even on both sides).
//   glu (SiLU and GELU-tanh) bf16 / f16 out: exact against glu then the
//     conversion kernel; softcap: fp32 (tanhf on both sides).
//   f16 matmul, same operands, and f16 conversion: as for bf16 (the GEMM of
//     the mixed mode on an F16 checkpoint).
//   embedding gather (fp32 table; bf16 table vs the bf16-rounded table; scale
//     1 and sqrt(640)) and residual add: exact (a copy and one fp32 multiply,
//     one fp32 add), aliased outputs included.
//   attention: causal and sliding windows (W = 1, 7, 45, T, T + 3; W = 512 at
//     T = 2048), fp32 tolerances for out and lse.
//   attention_cached: decoding queries over a cache (1–3 queries, caches of 0
//     to 20,000 rows, windows), fp32 tolerances.
//
// The other parts live in tests/twins/ (twins.h lists them); each documents
// its own tolerances.
//
// Exit: 0 all pass, 1 a failure, 77 (CTest: skipped) without a usable GPU,
// 1 without one when SPINDLE_REQUIRE_GPU=1 (scripts/device-check.sh sets it).
// `test_cuda_twins --quick` keeps T ≤ 130 (for compute-sanitizer runs);
// `--part backbone,sdpa,oracle,indexer,score,deltanet,hybrid,wgmma` runs only the parts named (to find
// which part a sanitizer fails in). Output is line-buffered, so a run that dies
// in a device fault still shows the last check that finished.
// SPINDLE_SEED=N repeats a run; the seed is printed either way.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"
#include "ops.h"
#include "ops_cuda.h"
#include "twins.h"

// ---- per-op checks ------------------------------------------------------------------

static void check_matmul(int T, int C_in, int C_out, int with_bias) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d C_in=%d C_out=%d%s", T, C_in, C_out, with_bias ? " +bias" : "");
    const int64_t n_in = (int64_t)T * C_in, n_w = (int64_t)C_out * C_in, n_out = (int64_t)T * C_out;
    float *in = randn(n_in, 1.0f), *w = randn(n_w, 1.0f / sqrtf((float)C_in)), *bias = randn(C_out, 1.0f);
    float *ref = host_alloc(n_out);
    matmul_forward_cpu(ref, in, w, with_bias ? bias : NULL, T, C_in, C_out);

    float *d_in = dev_from(in, n_in), *d_w = dev_from(w, n_w), *d_b = dev_from(bias, C_out);
    float *d_out = dev_poisoned(n_out);
    matmul_forward_cuda(d_out, d_in, d_w, with_bias ? d_b : NULL, T, C_in, C_out);
    float *got = host_from_dev(d_out, n_out);
    compare("matmul fp32", shape, got, ref, n_out, F32_NMSE, F32_MAX);
    free(got);

    // bf16 storage: the device rounds in and w; the CPU twin gets the same
    // rounded operands (same-operand check) and the original fp32 ones.
    void *b_in = cuda_malloc(2 * (size_t)n_in), *b_w = cuda_malloc(2 * (size_t)n_w);
    cuda_f32_to_bf16(b_in, d_in, n_in);
    cuda_f32_to_bf16(b_w, d_w, n_w);
    cuda_memset(d_out, 0xFF, sizeof(float) * n_out);
    matmul_forward_bf16_cuda(d_out, b_in, b_w, with_bias ? d_b : NULL, T, C_in, C_out);
    got = host_from_dev(d_out, n_out);
    float *in_r = host_alloc(n_in), *w_r = host_alloc(n_w), *ref_r = host_alloc(n_out);
    for (int64_t i = 0; i < n_in; i++) in_r[i] = bf16_round(in[i]);
    for (int64_t i = 0; i < n_w; i++) w_r[i] = bf16_round(w[i]);
    matmul_forward_cpu(ref_r, in_r, w_r, with_bias ? bias : NULL, T, C_in, C_out);
    compare("matmul bf16 (same operands)", shape, got, ref_r, n_out, BF_SAME_NMSE, BF_SAME_MAX);
    compare("matmul bf16 (vs fp32)", shape, got, ref, n_out, BF_F32_NMSE, INFINITY);
    free(got);
    // bf16 out (gate and up in the bf16 forward): the same-operand product
    // rounded once to bf16; a different fp32 summation order may land a value
    // on the other side of a rounding boundary (one bf16 ulp, 2^-8 relative).
    {
        void *b_out = cuda_malloc(2 * (size_t)n_out);
        float *d_wide = dev_poisoned(n_out), *ref16 = host_alloc(n_out);
        matmul_forward_half_out_cuda(b_out, b_in, b_w, T, C_in, C_out, HALF_BF16);
        cuda_bf16_to_f32(d_wide, b_out, n_out);
        matmul_forward_cpu(ref16, in_r, w_r, NULL, T, C_in, C_out);
        for (int64_t i = 0; i < n_out; i++) ref16[i] = bf16_round(ref16[i]);
        got = host_from_dev(d_wide, n_out);
        compare("matmul bf16 out (same operands)", shape, got, ref16, n_out, 1e-5, 8e-3);
        free(got), free(ref16);
        cuda_free(b_out), cuda_free(d_wide);
    }

    // The conversion itself, round trip, exact.
    float *d_back = dev_poisoned(n_in);
    cuda_bf16_to_f32(d_back, b_in, n_in);
    got = host_from_dev(d_back, n_in);
    compare("bf16 conversion", shape, got, in_r, n_in, 0.0, 0.0);
    free(got);

    // The f16 GEMM (the mixed mode of an F16 checkpoint): same-operand check and
    // the conversion round trip, as for bf16 (the operands are sd ≤ 1, in range).
    cuda_f32_to_half(b_in, d_in, n_in, HALF_F16);
    cuda_f32_to_half(b_w, d_w, n_w, HALF_F16);
    cuda_memset(d_out, 0xFF, sizeof(float) * n_out);
    matmul_forward_half_cuda(d_out, b_in, b_w, with_bias ? d_b : NULL, T, C_in, C_out, HALF_F16);
    got = host_from_dev(d_out, n_out);
    for (int64_t i = 0; i < n_in; i++) in_r[i] = f16_round(in[i]);
    for (int64_t i = 0; i < n_w; i++) w_r[i] = f16_round(w[i]);
    matmul_forward_cpu(ref_r, in_r, w_r, with_bias ? bias : NULL, T, C_in, C_out);
    compare("matmul f16 (same operands)", shape, got, ref_r, n_out, BF_SAME_NMSE, BF_SAME_MAX);
    free(got);
    cuda_memset(d_back, 0xFF, sizeof(float) * n_in);
    cuda_half_to_f32(d_back, b_in, n_in, HALF_F16);
    got = host_from_dev(d_back, n_in);
    compare("f16 conversion", shape, got, in_r, n_in, 0.0, 0.0);
    free(got);

    // x += in·wᵀ in the GEMM (the residual update): against x plus the CPU
    // product, fp32 and bf16 (same operands).
    float *x0 = randn(n_out, 1.0f), *ref_x = host_alloc(n_out);
    float *d_x = dev_from(x0, n_out);
    matmul_accumulate_cuda(d_x, d_in, d_w, T, C_in, C_out);
    matmul_forward_cpu(ref_x, in, w, NULL, T, C_in, C_out);
    for (int64_t i = 0; i < n_out; i++) ref_x[i] += x0[i];
    got = host_from_dev(d_x, n_out);
    compare("matmul accumulate fp32", shape, got, ref_x, n_out, F32_NMSE, F32_MAX);
    free(got);
    cuda_free(d_x);
    d_x = dev_from(x0, n_out);
    cuda_f32_to_bf16(b_in, d_in, n_in);
    cuda_f32_to_bf16(b_w, d_w, n_w);
    matmul_accumulate_half_cuda(d_x, b_in, b_w, T, C_in, C_out, HALF_BF16);
    for (int64_t i = 0; i < n_in; i++) in_r[i] = bf16_round(in[i]);
    for (int64_t i = 0; i < n_w; i++) w_r[i] = bf16_round(w[i]);
    matmul_forward_cpu(ref_x, in_r, w_r, NULL, T, C_in, C_out);
    for (int64_t i = 0; i < n_out; i++) ref_x[i] += x0[i];
    got = host_from_dev(d_x, n_out);
    compare("matmul accumulate bf16 (same operands)", shape, got, ref_x, n_out, BF_SAME_NMSE, BF_SAME_MAX);
    free(got), free(x0), free(ref_x);
    cuda_free(d_x);

    cuda_free(d_back);
    cuda_free(b_in);
    cuda_free(b_w);
    cuda_free(d_in);
    cuda_free(d_w);
    cuda_free(d_b);
    cuda_free(d_out);
    free(in);
    free(w);
    free(bias);
    free(ref);
    free(in_r);
    free(w_r);
    free(ref_r);
}

// A fused kernel's 16-bit output (fused16, type h) against the fp32 result
// d_ref (device) rounded by the conversion kernel: equal bit for bit (both
// widened back to fp32 to compare).
static void check_half_out(const char *op, const char *shape, const void *fused16, const float *d_ref, int64_t n,
                           HalfType h) {
    void *conv = cuda_malloc(2 * (size_t)n);
    float *d_a = dev_poisoned(n), *d_b = dev_poisoned(n);
    cuda_f32_to_half(conv, d_ref, n, h);
    cuda_half_to_f32(d_a, fused16, n, h);
    cuda_half_to_f32(d_b, conv, n, h);
    float *a = host_from_dev(d_a, n), *b = host_from_dev(d_b, n);
    compare(op, shape, a, b, n, 0.0, 0.0);
    free(a), free(b);
    cuda_free(conv), cuda_free(d_a), cuda_free(d_b);
}

static void check_rmsnorm(int R, int C, int alias) {
    char shape[96];
    snprintf(shape, sizeof shape, "R=%d C=%d%s", R, C, alias ? " out=in" : "");
    const int64_t n = (int64_t)R * C;
    float *in = randn(n, 2.0f), *w = randn(C, 1.0f), *ref = host_alloc(n);
    const float eps = 1e-6f;
    rmsnorm_forward_cpu(ref, in, w, R, C, eps);
    float *d_in = dev_from(in, n), *d_w = dev_from(w, C);
    float *d_out = alias ? d_in : dev_poisoned(n);
    rmsnorm_forward_cuda(d_out, d_in, d_w, R, C, eps);
    float *got = host_from_dev(d_out, n);
    compare("rmsnorm", shape, got, ref, n, F32_NMSE, F32_MAX);
    free(got);
    // 16-bit out: the fp32 result rounded by the conversion kernel, bit for bit.
    for (int h = 0; !alias && h < 2; h++) {
        void *fused = cuda_malloc(2 * (size_t)n);
        rmsnorm_forward_half_cuda(fused, d_in, d_w, R, C, eps, (HalfType)h);
        check_half_out(h == HALF_BF16 ? "rmsnorm bf16 out" : "rmsnorm f16 out", shape, fused, d_out, n, (HalfType)h);
        cuda_free(fused);
    }
    if (!alias) cuda_free(d_out);
    cuda_free(d_in);
    cuda_free(d_w);
    free(in);
    free(w);
    free(ref);
}

static void check_rope(int T, int H, int dh, int rot) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d H=%d dh=%d rot=%d", T, H, dh, rot);
    const int64_t n = (int64_t)T * H * dh;
    const int half = rot / 2;
    float *x = randn(n, 1.0f), *cs = host_alloc((int64_t)T * half), *sn = host_alloc((int64_t)T * half);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double ang = t * pow(10000.0, -2.0 * i / rot);
            cs[(int64_t)t * half + i] = (float)cos(ang);
            sn[(int64_t)t * half + i] = (float)sin(ang);
        }
    float *d_x = dev_from(x, n), *d_c = dev_from(cs, (int64_t)T * half), *d_s = dev_from(sn, (int64_t)T * half);
    rope_forward_cpu(x, cs, sn, T, H, dh, rot);  // x is now the reference
    rope_forward_cuda(d_x, d_c, d_s, T, H, dh, rot);
    float *got = host_from_dev(d_x, n);
    compare("rope", shape, got, x, n, F32_NMSE, F32_MAX);
    free(got);
    cuda_free(d_x);
    cuda_free(d_c);
    cuda_free(d_s);
    free(x);
    free(cs);
    free(sn);
}

// The fused per-head norm + RoPE (+ bf16 copy) against the CPU twins in turn:
// rmsnorm over the T·H head rows, then RoPE.
static void check_head_norm_rope(int T, int H, int dh, int rot, int with_norm) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d H=%d dh=%d rot=%d%s", T, H, dh, rot, with_norm ? " +norm" : "");
    const int64_t n = (int64_t)T * H * dh;
    const int half = rot / 2;
    float *x = randn(n, 1.5f), *w = randn(dh, 1.0f), *ref = host_alloc(n);
    float *cs = host_alloc((int64_t)T * (half > 0 ? half : 1)), *sn = host_alloc((int64_t)T * (half > 0 ? half : 1));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const double ang = t * pow(10000.0, -2.0 * i / rot);
            cs[(int64_t)t * half + i] = (float)cos(ang), sn[(int64_t)t * half + i] = (float)sin(ang);
        }
    if (with_norm) rmsnorm_forward_cpu(ref, x, w, T * H, dh, 1e-6f);
    else memcpy(ref, x, sizeof(float) * (size_t)n);
    if (rot > 0) rope_forward_cpu(ref, cs, sn, T, H, dh, rot);
    float *d_x = dev_from(x, n), *d_w = dev_from(w, dh);
    float *d_c = dev_from(cs, (int64_t)T * (half > 0 ? half : 1)), *d_s = dev_from(sn, (int64_t)T * (half > 0 ? half : 1));
    void *x16 = cuda_malloc(2 * (size_t)n);
    head_norm_rope_cuda(d_x, x16, with_norm ? d_w : NULL, d_c, d_s, T, H, dh, rot, 1e-6f, HALF_BF16);
    float *got = host_from_dev(d_x, n);
    compare("head norm + rope", shape, got, ref, n, F32_NMSE, F32_MAX);
    float *d_wide = dev_poisoned(n);
    cuda_bf16_to_f32(d_wide, x16, n);
    float *wide = host_from_dev(d_wide, n);
    for (int64_t i = 0; i < n; i++) got[i] = bf16_round(got[i]);
    compare("head norm + rope bf16 copy", shape, wide, got, n, 0.0, 0.0);
    free(got), free(wide), free(x), free(w), free(ref), free(cs), free(sn);
    cuda_free(d_x), cuda_free(d_w), cuda_free(d_c), cuda_free(d_s), cuda_free(x16), cuda_free(d_wide);
}

// glu_forward in its three precisions for one activation.
static void check_glu(int64_t n, int alias, Act act) {
    const char *an = act == ACT_GELU_TANH ? "gelu_tanh" : "silu";
    char shape[96];
    snprintf(shape, sizeof shape, "n=%lld %s%s", (long long)n, an, alias ? " out=gate" : "");
    float *gate = randn(n, 3.0f), *up = randn(n, 1.0f), *ref = host_alloc(n);
    glu_forward_cpu(ref, gate, up, n, act);
    float *d_g = dev_from(gate, n), *d_u = dev_from(up, n);
    float *d_out = alias ? d_g : dev_poisoned(n);
    glu_forward_cuda(d_out, d_g, d_u, n, act);
    float *got = host_from_dev(d_out, n);
    compare("glu", shape, got, ref, n, F32_NMSE, F32_MAX);
    free(got);
    // The fused 16-bit output must equal the fp32 result rounded by the
    // conversion kernel, bit for bit (both widened back to fp32 to compare).
    for (int h = 0; !alias && h < 2; h++) {
        void *fused = cuda_malloc(2 * (size_t)n);
        glu_forward_half_cuda(fused, d_g, d_u, n, act, (HalfType)h);
        check_half_out(h == HALF_BF16 ? "glu bf16 out" : "glu f16 out", shape, fused, d_out, n, (HalfType)h);
        cuda_free(fused);
        float *d_a = dev_poisoned(n), *a;
        // 16-bit gate and up in as well: the CPU twin on the rounded inputs,
        // rounded (expf / tanhf may differ by an fp32 ulp: at most one 16-bit ulp).
        float *g_r = host_alloc(n), *u_r = host_alloc(n), *ref_h = host_alloc(n);
        for (int64_t i = 0; i < n; i++)
            g_r[i] = h == HALF_BF16 ? bf16_round(gate[i]) : f16_round(gate[i]),
            u_r[i] = h == HALF_BF16 ? bf16_round(up[i]) : f16_round(up[i]);
        glu_forward_cpu(ref_h, g_r, u_r, n, act);
        for (int64_t i = 0; i < n; i++) ref_h[i] = h == HALF_BF16 ? bf16_round(ref_h[i]) : f16_round(ref_h[i]);
        void *g16 = cuda_malloc(2 * (size_t)n), *u16 = cuda_malloc(2 * (size_t)n);
        cuda_f32_to_half(g16, d_g, n, (HalfType)h);
        cuda_f32_to_half(u16, d_u, n, (HalfType)h);
        glu_forward_half_in_cuda(g16, g16, u16, n, act, (HalfType)h);  // out aliasing gate
        cuda_half_to_f32(d_a, g16, n, (HalfType)h);
        a = host_from_dev(d_a, n);
        compare(h == HALF_BF16 ? "glu bf16 in/out" : "glu f16 in/out", shape, a, ref_h, n, 1e-7,
                h == HALF_BF16 ? 8e-3 : 1e-3);
        free(a), free(g_r), free(u_r), free(ref_h);
        cuda_free(g16), cuda_free(u16), cuda_free(d_a);
    }
    if (!alias) cuda_free(d_out);
    cuda_free(d_g);
    cuda_free(d_u);
    free(gate);
    free(up);
    free(ref);
}

// x = cap·tanh(x / cap) in place, inputs spread well past ±cap.
static void check_softcap(int64_t n, float cap) {
    char shape[96];
    snprintf(shape, sizeof shape, "n=%lld cap=%g", (long long)n, cap);
    float *x = randn(n, 2.0f * cap), *ref = host_alloc(n);
    memcpy(ref, x, sizeof(float) * (size_t)n);
    softcap_forward_cpu(ref, n, cap);
    float *d_x = dev_from(x, n);
    softcap_forward_cuda(d_x, n, cap);
    float *got = host_from_dev(d_x, n);
    compare("softcap", shape, got, ref, n, F32_NMSE, F32_MAX);
    free(got), free(x), free(ref);
    cuda_free(d_x);
}

// window 0: causal; W > 0: sliding window (t − W < j ≤ t).
static void check_attention(int T, int Hq, int Hkv, int dh, int window) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d Hq=%d Hkv=%d dh=%d W=%d", T, Hq, Hkv, dh, window);
    const int64_t nq = (int64_t)T * Hq * dh, nkv = (int64_t)T * Hkv * dh, nl = (int64_t)Hq * T;
    const float scale = 1.0f / sqrtf((float)dh);
    // q has sd 2 so that the softmax rows are peaked, not flat.
    float *q = randn(nq, 2.0f), *k = randn(nkv, 1.0f), *v = randn(nkv, 1.0f);
    float *ref = host_alloc(nq), *ref_lse = host_alloc(nl);
    attention_forward_cpu(ref, ref_lse, q, k, v, T, Hq, Hkv, dh, scale, window);
    float *d_q = dev_from(q, nq), *d_k = dev_from(k, nkv), *d_v = dev_from(v, nkv);
    float *d_out = dev_poisoned(nq), *d_lse = dev_poisoned(nl);
    attention_forward_cuda(d_out, d_lse, d_q, d_k, d_v, T, Hq, Hkv, dh, scale, window);
    float *got = host_from_dev(d_out, nq), *got_lse = host_from_dev(d_lse, nl);
    compare("attention out", shape, got, ref, nq, F32_NMSE, F32_MAX);
    compare("attention lse", shape, got_lse, ref_lse, nl, F32_NMSE, F32_MAX);
    free(got);
    free(got_lse);
    cuda_free(d_q);
    cuda_free(d_k);
    cuda_free(d_v);
    cuda_free(d_out);
    cuda_free(d_lse);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(ref_lse);
}

// n decoding queries at positions p0.. over a cache of p0 + n rows (the
// decoding step of the GPU twin), window 0 or W.
static void check_attention_cached(int p0, int n, int Hq, int Hkv, int dh, int window) {
    char shape[96];
    snprintf(shape, sizeof shape, "p0=%d n=%d Hq=%d Hkv=%d dh=%d W=%d", p0, n, Hq, Hkv, dh, window);
    const int64_t L = (int64_t)p0 + n, nq = (int64_t)n * Hq * dh, nkv = L * Hkv * dh;
    const float scale = 1.0f / sqrtf((float)dh);
    float *q = randn(nq, 2.0f), *k = randn(nkv, 1.0f), *v = randn(nkv, 1.0f), *ref = host_alloc(nq);
    attention_cached_cpu(ref, q, k, v, p0, n, Hq, Hkv, dh, scale, window);
    float *d_q = dev_from(q, nq), *d_k = dev_from(k, nkv), *d_v = dev_from(v, nkv), *d_out = dev_poisoned(nq);
    attention_cached_cuda(d_out, d_q, d_k, d_v, p0, n, Hq, Hkv, dh, scale, window);
    float *got = host_from_dev(d_out, nq);
    compare("attention_cached", shape, got, ref, nq, F32_NMSE, F32_MAX);
    free(got), free(q), free(k), free(v), free(ref);
    cuda_free(d_q), cuda_free(d_k), cuda_free(d_v), cuda_free(d_out);
}

// Gather rows of a [rows, C] table by T random ids (repeats, first and last row
// included), times scale (1: the row itself; Gemma's sqrt(d_model)); the CPU
// twin is forward.c's loop. Exact (one fp32 multiply on both sides).
static void check_embedding(int T, int rows, int C, float scale) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d rows=%d C=%d scale=%g", T, rows, C, scale);
    const int64_t n_tab = (int64_t)rows * C, n_out = (int64_t)T * C;
    float *tab = randn(n_tab, 1.0f), *ref = host_alloc(n_out), *tab_r = host_alloc(n_tab), *ref_r = host_alloc(n_out);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T);
    if (!ids) abort();
    for (int t = 0; t < T; t++) ids[t] = t == 0 ? rows - 1 : t == 1 ? 0 : (int32_t)(twins_u64() % (uint64_t)rows);
    for (int64_t i = 0; i < n_tab; i++) tab_r[i] = bf16_round(tab[i]);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C; c++) {
            ref[(int64_t)t * C + c] = tab[(int64_t)ids[t] * C + c] * scale;
            ref_r[(int64_t)t * C + c] = tab_r[(int64_t)ids[t] * C + c] * scale;
        }
    int32_t *d_ids = cuda_malloc(sizeof(int32_t) * (size_t)T);
    cuda_to_device(d_ids, ids, sizeof(int32_t) * (size_t)T);
    float *d_tab = dev_from(tab, n_tab), *d_out = dev_poisoned(n_out);
    embedding_forward_cuda(d_out, d_ids, d_tab, T, C, scale);
    float *got = host_from_dev(d_out, n_out);
    compare("embedding fp32", shape, got, ref, n_out, 0.0, 0.0);
    free(got);
    void *b_tab = cuda_malloc(2 * (size_t)n_tab);
    cuda_f32_to_bf16(b_tab, d_tab, n_tab);
    cuda_memset(d_out, 0xFF, sizeof(float) * n_out);
    embedding_forward_bf16_cuda(d_out, d_ids, b_tab, T, C, scale);
    got = host_from_dev(d_out, n_out);
    compare("embedding bf16", shape, got, ref_r, n_out, 0.0, 0.0);
    free(got);
    cuda_free(b_tab);
    cuda_free(d_ids);
    cuda_free(d_tab);
    cuda_free(d_out);
    free(tab);
    free(ref);
    free(tab_r);
    free(ref_r);
    free(ids);
}

// out = a + b; alias 0: fresh out, 1: out = a (x += y, as the forward uses it), 2: out = b.
static void check_residual(int64_t n, int alias) {
    char shape[96];
    snprintf(shape, sizeof shape, "n=%lld%s", (long long)n, alias == 1 ? " out=a" : alias == 2 ? " out=b" : "");
    float *a = randn(n, 3.0f), *b = randn(n, 1.0f), *ref = host_alloc(n);
    for (int64_t i = 0; i < n; i++) ref[i] = a[i] + b[i];
    float *d_a = dev_from(a, n), *d_b = dev_from(b, n);
    float *d_out = alias == 1 ? d_a : alias == 2 ? d_b : dev_poisoned(n);
    residual_forward_cuda(d_out, d_a, d_b, n);
    float *got = host_from_dev(d_out, n);
    compare("residual add", shape, got, ref, n, 0.0, 0.0);
    free(got);
    if (!alias) cuda_free(d_out);
    cuda_free(d_a);
    cuda_free(d_b);
    free(a);
    free(b);
    free(ref);
}

// ---- main ------------------------------------------------------------------------

// The backbone's ops (the forward pass of model/forward_cuda.c).
void twins_backbone(int quick) {
    const int Ts[] = {1, 7, 130, 1000};
    const int nT = quick ? 3 : 4;
    for (int ti = 0; ti < nT; ti++) {
        const int T = Ts[ti];
        check_matmul(T, 576, 1536, 1);
        check_matmul(T, 77, 129, 0);
        check_matmul(T, 1000, 33, 1);
        check_rmsnorm(T, 576, 0);
        check_rmsnorm(T, 77, 1);
        check_rmsnorm(T, 4096, 0);
        for (int dh = 64; dh <= 256; dh *= 2) {
            check_rope(T, 9, dh, dh);
            check_rope(T, 3, dh, dh / 2);
            check_head_norm_rope(T, 8, dh, dh, 1);
            check_head_norm_rope(T, 3, dh, dh / 2, 0);
            check_head_norm_rope(T, 5, dh, 0, 1);
        }
        for (int act = ACT_SILU; act <= ACT_GELU_TANH; act++) {
            check_glu((int64_t)T * 1536 + 3, 0, (Act)act);
            check_glu((int64_t)T * 77, 1, (Act)act);
        }
        check_softcap((int64_t)T * 1000 + 7, 30.0f);
        check_softcap((int64_t)T * 77, 50.0f);
        check_embedding(T, 1000, 576, 1.0f);
        check_embedding(T, 3, 77, 1.0f);
        check_embedding(T, 1000, 640, sqrtf(640.0f));  // Gemma 3 270M: × sqrt(d_model)
        for (int alias = 0; alias < 3; alias++) check_residual((int64_t)T * 576 + alias, alias);
        for (int dh = 64; dh <= 256; dh *= 2) {
            check_attention(T, 8, 8, dh, 0);   // MHA
            check_attention(T, 16, 2, dh, 0);  // GQA 8:1
        }
        // Sliding windows, Gemma 3 270M's heads (4 / 1, d_h 256) and GQA 8:1:
        // W = 1 (each query its own key), W = 7 (inside one 32-key tile), W = 45
        // (across tiles, not a multiple of them), W = T (causal) and W > T.
        const int windows[] = {1, 7, 45, T, T + 3};
        for (int wi = 0; wi < 5; wi++) {
            if (T == 1 && wi > 0) break;
            check_attention(T, 4, 1, 256, windows[wi]);
            if (wi == 2) check_attention(T, 16, 2, 64, windows[wi]);
        }
    }
    // A long sequence with Gemma 3's window: key tiles wholly outside the window are skipped.
    if (!quick) check_attention(2048, 4, 1, 256, 512);
    // Decoding steps over a cache: one query and a few, empty and long caches,
    // GQA, d_h 64 / 128 / 256, sliding windows shorter and longer than the cache.
    check_attention_cached(0, 1, 8, 8, 64, 0);
    check_attention_cached(130, 1, 12, 2, 128, 0);
    check_attention_cached(999, 3, 4, 1, 256, 0);
    check_attention_cached(999, 2, 4, 1, 256, 45);
    check_attention_cached(7, 1, 16, 2, 64, 512);
    // The split-key decoding kernel: chunk edges (256 keys), more than 8 query heads per KV head (two head
    // groups), a head size that is no multiple of 32, and a window that starts mid-chunk for each query.
    check_attention_cached(255, 1, 9, 3, 64, 0);
    check_attention_cached(256, 2, 9, 3, 80, 0);
    check_attention_cached(600, 1, 32, 2, 128, 0);
    check_attention_cached(1000, 3, 12, 2, 128, 300);
    check_attention_cached(3000, 1, 20, 2, 96, 0);
    if (!quick) check_attention_cached(20000, 1, 12, 2, 128, 0);

}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int quick = 0;
    const char *parts = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--part") && i + 1 < argc) parts = argv[++i];
        else {
            fprintf(stderr, "usage: test_cuda_twins [--quick] [--part backbone,sdpa,oracle,indexer,score,deltanet,hybrid,wgmma]\n");
            return 1;
        }
    }
    static const char *const known[] = {"backbone", "sdpa", "oracle", "indexer", "score", "deltanet", "hybrid", "wgmma"};
    int run[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    if (parts && cli_names("test_cuda_twins", "--part", parts, known, 8, run)) return 1;
    char why[256];
    if (cuda_available(why, sizeof why) == 0) {
        const char *req = getenv("SPINDLE_REQUIRE_GPU");
        if (req && strcmp(req, "1") == 0) {
            fprintf(stderr, "test_cuda_twins: FAIL: SPINDLE_REQUIRE_GPU=1 but no usable GPU (%s)\n", why);
            return 1;
        }
        printf("test_cuda_twins: skipped: no usable GPU (%s)\n", why);
        return 77;
    }
    const char *seed_env = getenv("SPINDLE_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
    twins_seed(seed);
    printf("test_cuda_twins: %s; seed %llu%s\n", why, (unsigned long long)seed, quick ? "; quick (T <= 130)" : "");

    if (run[0]) twins_backbone(quick);
    if (run[1]) twins_sdpa(quick);
    if (run[2]) twins_oracle(quick);
    if (run[3]) twins_indexer(quick);
    if (run[4]) twins_score(quick);
    if (run[5]) twins_deltanet(quick);
    if (run[6]) twins_hybrid(quick);
    if (run[7]) twins_wgmma(quick);

    int failures = twins_summary();
    printf("test_cuda_twins: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
