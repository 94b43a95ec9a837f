// emu_deltanet.cpp: the kernels of kernels/cuda/deltanet.cu run on host threads
// (the CUDA stand-ins of tests/emu/cuda_runtime.h) against the CPU twins of
// kernels/cpu/deltanet_cpu.c. It checks the kernels' indexing, bounds, barriers
// and algebra where there is no GPU; it says nothing about the GPU's speed, its
// memory model beyond the barriers, or races the barriers do not order.
// Build and run: scripts/emulate-cuda.sh deltanet [--quick] [--twins] (--twins: the
// DeltaNet part of test_cuda_twins, tests/twins/deltanet.c, on the emulated kernels).
#include <cstdio>

#include "deltanet.cu"

#include "emu_harness.h"

extern "C" {
void twins_seed(uint64_t seed);
void twins_deltanet(int quick);
int twins_summary(void);
}

static void check_gdr(int T, int Hk, int Hv, int dk, int dv, int with_state, int bf16, int chunk, int l2,
                      int seg, float glo, float ghi, int tile = 0) {
    const int64_t nq = (int64_t)T * Hk * dk, nv = (int64_t)T * Hv * dv, ng = (int64_t)T * Hv,
                  ns = (int64_t)Hv * dk * dv, no = (int64_t)T * Hv * dv;
    auto q = fill(nq, -1, 1), k = fill(nq, -1, 1), v = fill(nv, -1, 1);
    auto g = fill(ng, glo, ghi), beta = fill(ng, 0.05f, 0.95f), S0 = fill(ns, -0.5f, 0.5f);
    if (!l2)
        for (auto &x : k) x /= sqrtf((float)dk);
    if (bf16)
        for (auto *a : {&q, &k, &v})
            for (auto &x : *a) x = bf16r(x);
    std::vector<float> o_seq(no + 1), S_seq(ns), o_ch(no + 1), S_ch(ns);
    const float *s0 = with_state ? S0.data() : nullptr;
    gated_delta_rule_cpu(o_seq.data(), S_seq.data(), q.data(), k.data(), v.data(), g.data(), beta.data(), s0, T, Hk,
                         Hv, dk, dv, 0.0f, l2);
    gated_delta_rule_chunked_cpu(o_ch.data(), S_ch.data(), q.data(), k.data(), v.data(), g.data(), beta.data(), s0,
                                 T, Hk, Hv, dk, dv, 0.0f, l2, chunk);
    // "device" copies
    float *d_o = (float *)cuda_malloc(sizeof(float) * (no + 1)), *d_S = (float *)cuda_malloc(sizeof(float) * ns);
    std::vector<__nv_bfloat16> qb(nq + 1), kb(nq + 1), vb(nv + 1);
    const void *dq = q.data(), *dk_ = k.data(), *dv_ = v.data();
    if (bf16) {
        for (int64_t i = 0; i < nq; i++) qb[i] = __float2bfloat16_rn(q[i]), kb[i] = __float2bfloat16_rn(k[i]);
        for (int64_t i = 0; i < nv; i++) vb[i] = __float2bfloat16_rn(v[i]);
        dq = qb.data(), dk_ = kb.data(), dv_ = vb.data();
    }
    // with a state: state_out aliases state_in (the layer's cache updated in place)
    float *d_S0 = d_S;
    if (with_state) memcpy(d_S, S0.data(), sizeof(float) * ns);
    gated_delta_rule_cuda_tune(seg, tile);
    gated_delta_rule_chunked_cuda(d_o, d_S, dq, dk_, dv_, g.data(), beta.data(), with_state ? d_S0 : nullptr, T, Hk,
                                  Hv, dk, dv, 0.0f, l2, chunk, bf16 ? DT_BF16 : DT_F32);
    gated_delta_rule_cuda_tune(0, 0);
    char what[160];
    snprintf(what, sizeof what, "gdr T %d Hk %d Hv %d dk %d dv %d S0 %d %s C %d l2 %d seg %d g [%g,%g] BV %d", T, Hk,
             Hv, dk, dv, with_state, bf16 ? "bf16" : "f32", chunk, l2, seg, glo, ghi, tile);
    const double e1 = std::max(rel_err(d_o, o_seq.data(), no), rel_err(d_S, S_seq.data(), ns));
    const double e2 = std::max(rel_err(d_o, o_ch.data(), no), rel_err(d_S, S_ch.data(), ns));
    expect(what, std::max(e1, e2), 2e-5);
    cuda_free(d_o), cuda_free(d_S);
}

static void check_small_ops() {
    const int T = 37, C = 77, K = 4, Hv = 5;
    auto x = fill((int64_t)T * C, -2, 2), w = fill((int64_t)C * K, -1, 1), b = fill(C, -1, 1);
    std::vector<float> ref((size_t)T * C), got((size_t)T * C);
    for (int act = 0; act < 2; act++) {
        causal_conv1d_cpu(ref.data(), x.data(), w.data(), b.data(), T, C, K, act);
        causal_conv1d_cuda(got.data(), x.data(), w.data(), b.data(), T, C, K, act);
        expect(act ? "conv1d silu" : "conv1d", rel_err(got.data(), ref.data(), (int64_t)T * C), 1e-6);
    }
    ref = x, got = x;
    l2norm_rows_cpu(ref.data(), T, C, 1e-6f);
    l2norm_rows_cuda(got.data(), T, C, 1e-6f);
    expect("l2norm", rel_err(got.data(), ref.data(), (int64_t)T * C), 1e-6);
    auto z = fill((int64_t)T * C, -3, 3), gw = fill(C, 0.5f, 1.5f);
    gated_rmsnorm_cpu(ref.data(), x.data(), z.data(), gw.data(), T, C, 1e-6f);
    got = x;
    gated_rmsnorm_cuda(got.data(), got.data(), z.data(), gw.data(), T, C, 1e-6f);  // out aliasing x
    expect("gated rmsnorm (out = x)", rel_err(got.data(), ref.data(), (int64_t)T * C), 1e-6);
    auto a = fill((int64_t)T * Hv, -30, 30), bb = fill((int64_t)T * Hv, -5, 5), Al = fill(Hv, -1, 1),
         dt = fill(Hv, -1, 1);
    std::vector<float> g1((size_t)T * Hv), b1((size_t)T * Hv);
    deltanet_gates_cpu(g1.data(), b1.data(), a.data(), bb.data(), Al.data(), dt.data(), T, Hv);
    auto g2 = a, b2 = bb;
    deltanet_gates_cuda(g2.data(), b2.data(), g2.data(), b2.data(), Al.data(), dt.data(), T, Hv);  // aliased
    expect("gates g", rel_err(g2.data(), g1.data(), (int64_t)T * Hv), 1e-6);
    expect("gates beta", rel_err(b2.data(), b1.data(), (int64_t)T * Hv), 1e-6);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool quick = false, twins = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--twins")) twins = true;
        else {
            fprintf(stderr, "usage: emu_deltanet [--quick] [--twins]\n");
            return 2;
        }
    }
    if (twins) {  // tests/twins/deltanet.c as test_cuda_twins runs it, kernels emulated
        twins_seed(12345);
        twins_deltanet(quick);
        const int f = twins_summary();
        printf("emu_deltanet --twins: %s (%d failures)\n", f ? "FAIL" : "PASS", f);
        return f ? 1 : 0;
    }
    check_small_ops();
    check_gdr(1, 1, 1, 32, 32, 0, 0, 64, 1, 0, -1, 0);
    check_gdr(65, 1, 1, 32, 32, 1, 0, 64, 1, 0, -1, 0);
    check_gdr(130, 1, 3, 48, 40, 1, 1, 64, 1, 0, -1, 0);
    check_gdr(100, 2, 4, 20, 33, 1, 0, 16, 1, 2, -1, 0);  // chunk 16, segments of 2 chunks, odd dv
    check_gdr(70, 1, 1, 17, 9, 0, 0, 64, 0, 1, -0.3f, 0);  // no l2 norm, segments of 1 chunk
    check_gdr(0, 1, 2, 32, 32, 1, 0, 64, 1, 0, -1, 0);
    check_gdr(130, 1, 3, 48, 40, 1, 1, 64, 1, 0, -1, 0, 32);
    check_gdr(100, 2, 4, 20, 33, 1, 0, 16, 1, 2, -1, 0, 32);
    check_gdr(70, 1, 1, 128, 72, 1, 0, 64, 1, 0, -1, 0, 16);
    if (!quick) {
        check_gdr(257, 1, 3, 128, 128, 1, 1, 64, 1, 0, -1, 0);
        check_gdr(257, 1, 3, 128, 128, 1, 1, 64, 1, 0, -1, 0, 32);
        check_gdr(129, 1, 1, 256, 256, 1, 0, 64, 1, 2, -1, 0);
        check_gdr(129, 1, 1, 256, 256, 1, 0, 64, 1, 2, -1, 0, 32);
        check_gdr(64, 1, 1, 256, 64, 0, 0, 64, 1, 0, 0, 0);
        check_gdr(63, 3, 3, 64, 128, 1, 0, 64, 1, 0, -5, -1);
    }
    // dk = 256 with a smaller shared-memory cap: K_d shares W's buffer in the state kernel
    emu_smem_optin = 200 * 1024;
    check_gdr(90, 1, 1, 256, 100, 1, 0, 64, 1, 0, -1, 0, 32);
    printf("emu_deltanet: %s (%d failure%s); largest dynamic shared memory %d bytes\n", failures ? "FAIL" : "PASS",
           failures, failures == 1 ? "" : "s", emu_smem_limit_seen);
    return failures ? 1 : 0;
}
