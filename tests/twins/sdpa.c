// sdpa.c: twin checks (see twins.h) of the bf16 dense causal attention through
// cuDNN's fused SDPA (kernels/sdpa_cuda.h) against attention_forward_cpu, both
// fed the same bf16-rounded q, k, v (so only cuDNN's own rounding is measured).
// Shapes: T ∈ {1, 7, 130, 1000} (quick: ≤ 130) × {MHA 8:8, GQA 16:2, GQA 32:4}
// × d_h ∈ {64, 128, 256}, and T = 4096 for GQA 32:4 (the long-sequence tiles;
// only one head layout there, as the fp32 CPU twin is slow at that length),
// and T = 1025 (padded to a 2048-row plan; the short T pad to 1024 and 4096
// runs in place: sdpa.cu "Lengths in buckets"; SPINDLE_SDPA_BUCKET=1 runs
// every case on its own exact plan).
//
// Tolerances (a case fails beyond either; compare() in common.c):
//   out: nmse ≤ 2e-5, max|err| ≤ 2⁻⁶·max(1, max|cpu|). cuDNN rounds twice to
//     bf16 (8 significant bits, unit roundoff 2⁻⁸): the probabilities P before
//     the P·V tensor-core GEMM, and the output. Rounding x = 2^e·m (m ∈ [1, 2))
//     to nearest bf16 leaves a relative error δ = u·2⁻⁷/m, u uniform in ±1/2,
//     so |δ| ≤ 2⁻⁸ and E[δ²] = 2⁻¹⁴/12·E[1/m²] ≈ 2.75e-6 (E[1/m²] ≈ 0.54 for
//     log-uniform m). The output rounding adds that to the nmse; rounding P
//     gives Σ_j p_j δ_j v_j, whose variance relative to that of Σ_j p_j v_j is
//     again E[δ²]. Expected nmse ≈ 5.5e-6; 2e-5 leaves ~3.6× for sampling
//     noise (T = 7 has few rows). Max: the output rounding is ≤ 2⁻⁸·|out|; the
//     P part is a sum of independent errors, typically far below that; the
//     tolerance is 4× the former. (Only if every δ_j had the same sign could
//     the P part reach 2⁻⁸·max|v|.) T = 1 is exact (P = 1, v already bf16). A
//     masking or head-mapping bug gives nmse of order 1e-2 to 1.
//   lse: nmse ≤ 1e-9, max|err| ≤ 1e-4·max(1, max|cpu|) (≤ ~1e-3 absolute here).
//     cuDNN's Stats are fp32 (max + log Σ exp, natural log): bf16 products are
//     exact in fp32, so only the accumulation order, the fused exp2/scale
//     arithmetic and ex2/lg2 approximations (a few ulp) differ: ~1e-5 absolute
//     at |s| ~ 10 expected. A log2-vs-ln mismatch (×1.44) or a mask bug fails.
// Each case also runs once with lse = NULL (cuDNN's Stats go to scratch) and
// checks the output again. Sliding windows (the band mask in the cuDNN graph):
// W = 1, W = 45 (not a multiple of any tile), W = T (causal), at T = 130 and
// 1000, Gemma 3 270M's heads 4 / 1 with d_h 256 and GQA 16:2 with d_h 128, and
// W = 512 at T = 4096; d_h 36 (never cuDNN's: the fallback, causal and W = 45).
// A shape sdpa_supported rejects is recorded with the
// reason ("not supported by cuDNN: ..."): a failure for causal d_h 64 and 128,
// which must be supported, a note (not a failure) otherwise — and the op is
// run and judged either way, as it then takes its fp32 fallback (which rounds
// only the output: within the same tolerances).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops.h"
#include "ops_cuda.h"
#include "sdpa_cuda.h"
#include "twins.h"

#define SDPA_OUT_NMSE 2e-5
#define SDPA_OUT_MAX 0.015625  // 2⁻⁶
#define SDPA_LSE_NMSE 1e-9
#define SDPA_LSE_MAX 1e-4

// A host array of n normals of sd, rounded to bf16.
static float *randn_bf16(int64_t n, float sd) {
    float *x = randn(n, sd);
    for (int64_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
    return x;
}

// A device bf16 copy of a host array whose values are already bf16 (exact).
static void *dev_bf16_from(const float *h, int64_t n) {
    float *d = dev_from(h, n);
    void *b = cuda_malloc(2 * (size_t)n);
    cuda_f32_to_bf16(b, d, n);
    cuda_sync();
    cuda_free(d);
    return b;
}

// Host fp32 copy of a device bf16 array.
static float *host_from_dev_bf16(const void *b, int64_t n) {
    float *d = cuda_malloc(sizeof(float) * (size_t)n);
    cuda_bf16_to_f32(d, b, n);
    float *h = host_from_dev(d, n);
    cuda_free(d);
    return h;
}

static void check_sdpa(int T, int Hq, int Hkv, int dh, int W) {
    char shape[96], why[256], detail[320];
    snprintf(shape, sizeof shape, "T=%d Hq=%d Hkv=%d dh=%d W=%d", T, Hq, Hkv, dh, W);
    if (!sdpa_supported(T, Hq, Hkv, dh, W, why, sizeof why)) {
        const int required = (dh == 64 || dh == 128) && (W == 0 || W >= T);
        snprintf(detail, sizeof detail, "not supported by cuDNN: %s%s", why,
                 required ? " (causal d_h 64/128 must be supported)" : "; the op takes its fp32 fallback");
        record("sdpa bf16 (cuDNN)", shape, !required, detail);
        if (required) return;
    }
    const int64_t nq = (int64_t)T * Hq * dh, nkv = (int64_t)T * Hkv * dh, nl = (int64_t)Hq * T;
    const float scale = 1.0f / sqrtf((float)dh);
    // q has sd 2 so that the softmax rows are peaked, not flat (as check_attention).
    float *q = randn_bf16(nq, 2.0f), *k = randn_bf16(nkv, 1.0f), *v = randn_bf16(nkv, 1.0f);
    float *ref = host_alloc(nq), *ref_lse = host_alloc(nl);
    attention_forward_cpu(ref, ref_lse, q, k, v, T, Hq, Hkv, dh, scale, W);

    void *b_q = dev_bf16_from(q, nq), *b_k = dev_bf16_from(k, nkv), *b_v = dev_bf16_from(v, nkv);
    void *b_out = cuda_malloc(2 * (size_t)nq);
    float *d_lse = dev_poisoned(nl);
    cuda_memset(b_out, 0xFF, 2 * (size_t)nq);  // bf16 0xFFFF is a NaN
    attention_forward_bf16_cuda(b_out, d_lse, b_q, b_k, b_v, T, Hq, Hkv, dh, scale, W);
    float *got = host_from_dev_bf16(b_out, nq), *got_lse = host_from_dev(d_lse, nl);
    compare("sdpa bf16 out", shape, got, ref, nq, SDPA_OUT_NMSE, SDPA_OUT_MAX);
    compare("sdpa bf16 lse", shape, got_lse, ref_lse, nl, SDPA_LSE_NMSE, SDPA_LSE_MAX);
    free(got);

    // Without lse.
    cuda_memset(b_out, 0xFF, 2 * (size_t)nq);
    attention_forward_bf16_cuda(b_out, NULL, b_q, b_k, b_v, T, Hq, Hkv, dh, scale, W);
    got = host_from_dev_bf16(b_out, nq);
    compare("sdpa bf16 out (lse=NULL)", shape, got, ref, nq, SDPA_OUT_NMSE, SDPA_OUT_MAX);

    free(got);
    free(got_lse);
    cuda_free(b_q);
    cuda_free(b_k);
    cuda_free(b_v);
    cuda_free(b_out);
    cuda_free(d_lse);
    free(q);
    free(k);
    free(v);
    free(ref);
    free(ref_lse);
}

void twins_sdpa(int quick) {
    const int Ts[] = {1, 7, 130, 1000};
    const int heads[][2] = {{8, 8}, {16, 2}, {32, 4}};  // MHA, GQA 8:1, GQA 8:1
    const int nT = quick ? 3 : 4;
    for (int ti = 0; ti < nT; ti++)
        for (int hi = 0; hi < 3; hi++)
            for (int dh = 64; dh <= 256; dh *= 2) check_sdpa(Ts[ti], heads[hi][0], heads[hi][1], dh, 0);
    // Sliding windows: W = 1, 45, T.
    for (int ti = 2; ti < nT; ti++) {
        const int T = Ts[ti], windows[] = {1, 45, T};
        for (int wi = 0; wi < 3; wi++) {
            check_sdpa(T, 4, 1, 256, windows[wi]);
            check_sdpa(T, 16, 2, 128, windows[wi]);
        }
    }
    check_sdpa(7, 4, 1, 256, 3);
    // d_h 36 is not a multiple of 8: cuDNN never takes it, so the op's own
    // fallback runs here whatever cuDNN does with the windowed graphs above.
    check_sdpa(130, 4, 2, 36, 0);
    check_sdpa(130, 4, 2, 36, 45);
    if (!quick) {
        for (int dh = 64; dh <= 256; dh *= 2) check_sdpa(4096, 32, 4, dh, 0);
        check_sdpa(4096, 4, 1, 256, 512);  // Gemma 3 270M's sliding layers
        // Past a bucket (sdpa.cu "Lengths in buckets"): 1025 runs padded to 2048 rows,
        // 4096 above in place; the short T all pad to 1024 (SPINDLE_SDPA_BUCKET=1: exactly).
        check_sdpa(1025, 16, 2, 128, 0);
        check_sdpa(1025, 4, 1, 256, 512);
    }
}
