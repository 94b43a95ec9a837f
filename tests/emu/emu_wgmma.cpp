// emu_wgmma.cpp: the warpgroup MMA pieces (kernels/cuda/wgmma.cuh) through their check kernel
// (kernels/cuda/wgmma_check.cu, wgmma_check_cuda) on host threads (tests/emu/emu_wgmma.h: the
// instruction as warp exchanges plus the descriptor's address arithmetic over shared memory) against
// C = A·B in double on the same bf16 values: K 16 … 256, B staged K-major (C = A·Bᵀ of a [64][K] B) and
// MN-major (C = A·B of a [K][64] B). The products of bf16 values are exact in fp32 and the sums fp32:
// tolerance max |err| ≤ 1e-5 · max |C| and nmse ≤ 1e-10. A wrong stride, core-matrix order or fragment
// layout moves whole entries (order-1 errors). What this cannot see: whether the hardware reads the
// descriptor as emu_wgmma.h does — the twin test's wgmma part judges the same kernel on an sm_90 GPU.
// Build and run: scripts/emulate-cuda.sh wgmma [--quick].
#include <cstdio>

#include "wgmma_check.cu"
#include "ops_cuda.h"

#include "emu_harness.h"

static void check(int K, int trans_b) {
    auto a = fill((int64_t)64 * K, -2, 2), b = fill((int64_t)64 * K, -2, 2);
    for (auto *x : {&a, &b})
        for (auto &e : *x) e = bf16r(e);
    std::vector<__nv_bfloat16> ab(a.size()), bb(b.size());
    cuda_f32_to_half(ab.data(), a.data(), (int64_t)a.size(), HALF_BF16);
    cuda_f32_to_half(bb.data(), b.data(), (int64_t)b.size(), HALF_BF16);
    float *C = (float *)cuda_malloc(sizeof(float) * 64 * 64);
    const int rc = wgmma_check_cuda(C, ab.data(), bb.data(), K, trans_b);
    double err = 0, mx = 0, e2 = 0, s2 = 0;
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 64; n++) {
            double want = 0;
            for (int k = 0; k < K; k++)
                want += (double)a[(size_t)m * K + k] * (trans_b ? b[(size_t)k * 64 + n] : b[(size_t)n * K + k]);
            const double e = fabs((double)C[m * 64 + n] - want);
            if (!(e <= err)) err = e;
            mx = std::max(mx, fabs(want)), e2 += e * e, s2 += want * want;
        }
    char what[96];
    snprintf(what, sizeof what, "wgmma m64n64 K %d, B %s", K, trans_b ? "MN-major" : "K-major");
    const double n = s2 > 0 ? e2 / s2 : 1.0;
    expect(what, rc == 0 && n == n ? std::max(err / mx / 1e-5, n / 1e-10) : 2.0, 1.0);
    cuda_free(C);
}

int main(int argc, char **argv) {
    const bool quick = emu_quick(argc, argv, "emu_wgmma");
    for (int tb = 0; tb < 2; tb++) {
        check(16, tb);
        check(48, tb);
        if (!quick) check(256, tb);
    }
    printf("emu_wgmma: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
