// deltanet.c: twin checks (see twins.h) of the Gated DeltaNet ops
// (kernels/cuda/deltanet.cu) against their CPU twins (kernels/cpu/deltanet_cpu.c):
//
//   deltanet o / S       gated_delta_rule_chunked_cuda's output and final state
//                        against the sequential CPU recurrence (the reference)
//                        and the chunked CPU form. T ∈ {1, 63, 64, 65, 130, 257}
//                        (inside, at and across chunk boundaries, a partial last
//                        chunk), dk = dv ∈ {32, 48, 64, 128}, heads Hk = Hv = 1,
//                        Hk = Hv = 3 and GQA 1 → 3, with and without an initial
//                        state (state_out aliasing state_in, as a layer's cache
//                        is updated), fp32 and bf16 inputs. Then single cases:
//                        dk ≠ dv, dk = dv = 256, d = 33, chunk 16 and 1, a
//                        segmented pass (2 chunks per segment, the state carried
//                        between segments), no L2 norm, g = 0 and strong decay,
//                        f16 inputs, T = 0, state_out NULL, T = 2000 (not quick).
//                        The state pass's 16- and 32-column tiles (BV) both, at
//                        every (T, d) of the grid; the op's own choice elsewhere.
//                        --quick (the sanitizers): T ∈ {1, 64, 65, 130}, d ∈ {48,
//                        128}, heads 1 and 1 → 3, and the single cases.
//   conv1d, l2norm, gated rmsnorm, gates   the small ops, aliased outputs included.
//
// Tolerances: max|err| ≤ F32_MAX·max(1, max|ref|) (2e-5) and nmse ≤ 1e-9, for
// bf16 and f16 inputs too (the small ops: F32_NMSE, F32_MAX). Both
// twins are fp32 with an fp32 state; they differ in summation order, in the
// triangular solve's order, and in expf/sqrtf by a few ulp. The CPU chunked
// form agrees with the recurrence to 1.2e-6 relative (tests/test_deltanet.c),
// the CUDA kernels run on host threads to 2.5e-7 (o) and 1.7e-6 (S) of the
// bound's scale (scripts/emulate-cuda.sh deltanet --twins), so 2e-5 of
// max(1, max|ref|) leaves a margin of 10 or more while an indexing,
// masking or decay error is of order 1e-2..1. 16-bit inputs are rounded on the
// host (bf16_round / f16_round) and the CPU twins get the rounded values: the
// kernel widens them exactly, so the check stays an fp32 one. The nmse bound is
// looser than F32_NMSE because nmse is relative to Σ ref², and where o is small
// next to its terms it measures cancellation, not the kernel: at T = 1 without a
// state o = β (q·k) v, and q·k, a sum of dk terms, cancels to about 1/√dk of
// their size: a relative rms error near 5e-6
// on both twins (nmse 2e-11 on the host-thread emulation); 1e-9 leaves 40×, and
// an indexing, masking or decay error gives nmse of order 1e-4..1. Some draws
// cancel much further (a bf16 case at d 128 reached nmse 2.4e-9 with max|err|
// 1.7e-9 on an H200), so at T = 1 without a state the nmse is taken against
// the size of q·k's terms (compare_floor), which the cancellation does not shrink.
#define DN_NMSE 1e-9
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ops_cuda.h"
#include "twins.h"

static float *uniform(int64_t n, float lo, float hi) {
    float *x = host_alloc(n);
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)uniform01();
    return x;
}

// A 16-bit device copy (type dt) of the host array x, which is rounded in place
// to what the device holds; for DT_F32 a plain copy.
static void *dev_input(float *x, int64_t n, DType dt) {
    if (dt == DT_F32) return dev_from(x, n);
    for (int64_t i = 0; i < n; i++) x[i] = dt == DT_BF16 ? bf16_round(x[i]) : f16_round(x[i]);
    float *d = dev_from(x, n);
    void *h = cuda_malloc(2 * (size_t)(n > 0 ? n : 1));
    cuda_f32_to_half(h, d, n, dt == DT_BF16 ? HALF_BF16 : HALF_F16);
    cuda_free(d);
    return h;
}

typedef struct {
    int T, Hk, Hv, dk, dv;
    int state;      // 0: no initial state, 1: state_in, with state_out aliasing it
    int out_state;  // 0: state_out NULL
    DType dt;
    int chunk, segment, l2;
    float glo, ghi;
    int tile;  // the state pass's column tile: 16, 32, 0 (the op's choice)
} GdrCase;

static void check_gdr(GdrCase c) {
    const char *dts = c.dt == DT_F32 ? "f32" : c.dt == DT_BF16 ? "bf16" : "f16";
    char shape[128];
    snprintf(shape, sizeof shape, "T=%d H=%d/%d d=%d/%d S0=%d %s C=%d BV=%d%s%s%s", c.T, c.Hk, c.Hv, c.dk, c.dv,
             c.state == 1, dts, c.chunk, c.tile, c.segment ? " seg" : "", c.l2 ? "" : " no-l2",
             c.glo == 0.0f && c.ghi == 0.0f ? " g=0" : c.ghi < -0.5f ? " strong" : "");
    const int64_t nq = (int64_t)c.T * c.Hk * c.dk, nv = (int64_t)c.T * c.Hv * c.dv, ng = (int64_t)c.T * c.Hv;
    const int64_t ns = (int64_t)c.Hv * c.dk * c.dv, no = (int64_t)c.T * c.Hv * c.dv;
    float *q = randn(nq, 1.0f), *k = randn(nq, 1.0f), *v = randn(nv, 1.0f);
    if (!c.l2)  // unnormalised keys of norm about 1/2 keep the recurrence contractive
        for (int64_t i = 0; i < nq; i++) k[i] *= 0.5f / sqrtf((float)c.dk), q[i] /= sqrtf((float)c.dk);
    float *g = uniform(ng, c.glo, c.ghi), *beta = uniform(ng, 0.05f, 0.95f), *S0 = randn(ns, 0.5f);
    void *d_q = dev_input(q, nq, c.dt), *d_k = dev_input(k, nq, c.dt), *d_v = dev_input(v, nv, c.dt);
    float *d_g = dev_from(g, ng), *d_beta = dev_from(beta, ng);
    float *d_o = dev_poisoned(no), *d_S = c.state == 1 ? dev_from(S0, ns) : dev_poisoned(ns);

    const float *s0 = c.state == 1 ? S0 : NULL;
    float *o_seq = host_alloc(no), *S_seq = host_alloc(ns), *o_ch = host_alloc(no), *S_ch = host_alloc(ns);
    gated_delta_rule_cpu(o_seq, S_seq, q, k, v, g, beta, s0, c.T, c.Hk, c.Hv, c.dk, c.dv, 0.0f, c.l2);
    gated_delta_rule_chunked_cpu(o_ch, S_ch, q, k, v, g, beta, s0, c.T, c.Hk, c.Hv, c.dk, c.dv, 0.0f, c.l2, c.chunk);

    gated_delta_rule_cuda_tune(c.segment, c.tile);
    gated_delta_rule_chunked_cuda(d_o, c.out_state ? d_S : NULL, d_q, d_k, d_v, d_g, d_beta,
                                  c.state == 1 ? d_S : NULL, c.T, c.Hk, c.Hv, c.dk, c.dv, 0.0f, c.l2, c.chunk, c.dt);
    gated_delta_rule_cuda_tune(0, 0);
    float *o = host_from_dev(d_o, no), *S = host_from_dev(d_S, ns);
    // At T = 1 without a state o = β·scale·(q·k)·v, and q·k can cancel to far below its terms for some
    // draws: nmse is then taken against the size of those terms, β·scale·Σ_i |q_i k_i|·v (q, k after the
    // l2 norm when it applies), the scale of the summation's rounding.
    double nat = 0.0;
    if (c.T == 1 && c.state != 1) {
        const int G = c.Hv / c.Hk;
        for (int h = 0; h < c.Hv; h++) {
            const float *qa = q + (int64_t)(h / G) * c.dk, *ka = k + (int64_t)(h / G) * c.dk;
            double m = 0.0, nqq = 0.0, nkk = 0.0;
            for (int i = 0; i < c.dk; i++)
                m += fabs((double)qa[i] * ka[i]), nqq += (double)qa[i] * qa[i], nkk += (double)ka[i] * ka[i];
            if (c.l2) m /= sqrt(nqq + 1e-6) * sqrt(nkk + 1e-6);
            m *= beta[h] / sqrt((double)c.dk);
            for (int j = 0; j < c.dv; j++) nat += (m * v[(int64_t)h * c.dv + j]) * (m * v[(int64_t)h * c.dv + j]);
        }
    }
    compare_floor("deltanet o (vs sequential)", shape, o, o_seq, no, DN_NMSE, F32_MAX, nat);
    compare_floor("deltanet o (vs chunked)", shape, o, o_ch, no, DN_NMSE, F32_MAX, nat);
    if (c.out_state) {
        compare("deltanet S (vs sequential)", shape, S, S_seq, ns, DN_NMSE, F32_MAX);
        compare("deltanet S (vs chunked)", shape, S, S_ch, ns, DN_NMSE, F32_MAX);
    }
    free(o), free(S), free(o_seq), free(S_seq), free(o_ch), free(S_ch);
    free(q), free(k), free(v), free(g), free(beta), free(S0);
    cuda_free(d_q), cuda_free(d_k), cuda_free(d_v), cuda_free(d_g), cuda_free(d_beta), cuda_free(d_o), cuda_free(d_S);
}

static GdrCase gdr(int T, int Hk, int Hv, int dk, int dv, int state, DType dt) {
    GdrCase c = {T, Hk, Hv, dk, dv, state, 1, dt, 64, 0, 1, -1.0f, 0.0f, 0};
    return c;
}

static void check_conv1d(int T, int C, int K, int with_bias, int act) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d C=%d K=%d%s%s", T, C, K, with_bias ? " +bias" : "", act ? " silu" : "");
    const int64_t n = (int64_t)T * C;
    float *x = randn(n, 1.0f), *w = randn((int64_t)C * K, 0.5f), *b = randn(C, 1.0f), *ref = host_alloc(n);
    causal_conv1d_cpu(ref, x, w, with_bias ? b : NULL, T, C, K, act);
    float *d_x = dev_from(x, n), *d_w = dev_from(w, (int64_t)C * K), *d_b = dev_from(b, C), *d_o = dev_poisoned(n);
    causal_conv1d_cuda(d_o, d_x, d_w, with_bias ? d_b : NULL, T, C, K, act);
    float *got = host_from_dev(d_o, n);
    compare("conv1d", shape, got, ref, n, F32_NMSE, F32_MAX);
    free(got), free(x), free(w), free(b), free(ref);
    cuda_free(d_x), cuda_free(d_w), cuda_free(d_b), cuda_free(d_o);
}

static void check_norms(int rows, int C) {
    char shape[96];
    snprintf(shape, sizeof shape, "rows=%d C=%d", rows, C);
    const int64_t n = (int64_t)rows * C;
    float *x = randn(n, 2.0f), *z = randn(n, 2.0f), *w = randn(C, 1.0f), *ref = host_alloc(n);
    memcpy(ref, x, sizeof(float) * (size_t)n);
    l2norm_rows_cpu(ref, rows, C, 1e-6f);
    float *d_x = dev_from(x, n);
    l2norm_rows_cuda(d_x, rows, C, 1e-6f);
    float *got = host_from_dev(d_x, n);
    compare("l2norm", shape, got, ref, n, F32_NMSE, F32_MAX);
    free(got);
    // gated RMSNorm: a fresh out, out = x, out = z
    gated_rmsnorm_cpu(ref, x, z, w, rows, C, 1e-6f);
    for (int alias = 0; alias < 3; alias++) {
        cuda_free(d_x);
        d_x = dev_from(x, n);
        float *d_z = dev_from(z, n), *d_w = dev_from(w, C);
        float *d_o = alias == 1 ? d_x : alias == 2 ? d_z : dev_poisoned(n);
        gated_rmsnorm_cuda(d_o, d_x, d_z, d_w, rows, C, 1e-6f);
        got = host_from_dev(d_o, n);
        char sh[128];
        snprintf(sh, sizeof sh, "%s%s", shape, alias == 1 ? " out=x" : alias == 2 ? " out=z" : "");
        compare("gated rmsnorm", sh, got, ref, n, F32_NMSE, F32_MAX);
        free(got);
        if (!alias) cuda_free(d_o);
        cuda_free(d_z), cuda_free(d_w);
    }
    cuda_free(d_x);
    free(x), free(z), free(w), free(ref);
}

// g and beta from a, b (aliased: g over a, beta over b, as the layer may call it);
// a spans softplus's linear branch (> 20) and its far negative tail.
static void check_gates(int T, int Hv) {
    char shape[96];
    snprintf(shape, sizeof shape, "T=%d Hv=%d (aliased)", T, Hv);
    const int64_t n = (int64_t)T * Hv;
    float *a = uniform(n, -30.0f, 30.0f), *b = randn(n, 3.0f), *A_log = randn(Hv, 1.0f), *dt = randn(Hv, 1.0f);
    float *g = host_alloc(n), *beta = host_alloc(n);
    deltanet_gates_cpu(g, beta, a, b, A_log, dt, T, Hv);
    float *d_a = dev_from(a, n), *d_b = dev_from(b, n), *d_A = dev_from(A_log, Hv), *d_dt = dev_from(dt, Hv);
    deltanet_gates_cuda(d_a, d_b, d_a, d_b, d_A, d_dt, T, Hv);
    float *got_g = host_from_dev(d_a, n), *got_b = host_from_dev(d_b, n);
    compare("deltanet gates g", shape, got_g, g, n, F32_NMSE, F32_MAX);
    compare("deltanet gates beta", shape, got_b, beta, n, F32_NMSE, F32_MAX);
    free(got_g), free(got_b), free(a), free(b), free(A_log), free(dt), free(g), free(beta);
    cuda_free(d_a), cuda_free(d_b), cuda_free(d_A), cuda_free(d_dt);
}

void twins_deltanet(int quick) {
    const int Ts[] = {1, 63, 64, 65, 130, 257}, ds[] = {32, 48, 64, 128};
    const int heads[3][2] = {{1, 1}, {3, 3}, {1, 3}};
    for (int ti = 0; ti < 6; ti++) {
        if (quick && (Ts[ti] > 130 || Ts[ti] == 63)) continue;  // quick: the sanitizers' sizes
        for (int di = 0; di < 4; di++) {
            if (quick && (ds[di] == 32 || ds[di] == 64)) continue;
            for (int hi = 0; hi < 3; hi++) {
                if (quick && hi == 1) continue;
                for (int st = 0; st < 2; st++)
                    for (int b = 0; b < 2; b++) {
                        GdrCase g = gdr(Ts[ti], heads[hi][0], heads[hi][1], ds[di], ds[di], st, b ? DT_BF16 : DT_F32);
                        g.tile = (hi + st + b) % 2 ? 32 : 16;  // both state tiles at every (T, d)
                        check_gdr(g);
                    }
            }
        }
    }
    GdrCase c;
    check_gdr(gdr(130, 2, 4, 128, 64, 1, DT_BF16));  // dk ≠ dv, GQA 2 → 4
    check_gdr(gdr(100, 1, 1, 64, 200, 1, DT_F32));
    check_gdr(gdr(130, 1, 2, 256, 256, 1, DT_BF16));  // the largest head dims
    check_gdr(gdr(77, 1, 1, 33, 33, 1, DT_F32));      // not a multiple of 4
    c = gdr(130, 1, 3, 64, 64, 1, DT_F32), c.chunk = 16, check_gdr(c);
    c = gdr(20, 1, 1, 32, 32, 1, DT_F32), c.chunk = 1, check_gdr(c);
    c = gdr(257, 1, 3, 64, 64, 1, DT_BF16), c.segment = 2, check_gdr(c);  // segments of 2 chunks
    c.tile = 32, check_gdr(c);
    c = gdr(130, 1, 2, 256, 256, 1, DT_F32), c.tile = 32, check_gdr(c);
    c = gdr(130, 1, 1, 128, 128, 1, DT_F32), c.l2 = 0, check_gdr(c);
    c = gdr(130, 1, 1, 64, 64, 1, DT_F32), c.glo = c.ghi = 0.0f, check_gdr(c);
    c = gdr(130, 1, 1, 64, 64, 1, DT_F32), c.glo = -5.0f, c.ghi = -1.0f, check_gdr(c);
    check_gdr(gdr(130, 1, 3, 128, 128, 1, DT_F16));
    check_gdr(gdr(0, 1, 2, 32, 32, 1, DT_F32));  // T = 0: the state passes through
    c = gdr(65, 1, 1, 32, 32, 0, DT_F32), c.out_state = 0, check_gdr(c);
    if (!quick) {
        check_gdr(gdr(2000, 2, 4, 128, 128, 1, DT_BF16));
        c = gdr(2000, 1, 2, 128, 128, 1, DT_F32), c.glo = -0.05f, check_gdr(c);
    }

    const int cT[] = {1, 7, 130};
    for (int i = 0; i < 3; i++) {
        check_conv1d(cT[i], 77, 4, 1, 1);
        check_conv1d(cT[i], 77, 4, 0, 0);
        check_conv1d(cT[i], 8192, 4, 1, 1);  // Qwen3.5-9B's conv channels: 2·16·128 + 32·128
        check_conv1d(cT[i], 5, 2, 1, 0);
        check_norms(cT[i] * 3, 128);
        check_norms(cT[i], 77);
        check_gates(cT[i], 32);
    }
}
