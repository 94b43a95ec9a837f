// emu_indexer_block_tc.cpp: the block-shared indexer selection's ranking values on tensor cores
// (kernels/cuda/indexer_block_tc.cu, indexer_block_scores_bf16_cuda) run on host threads
// (tests/emu/cuda_runtime.h; ldmatrix and mma.sync as warp exchanges, tests/emu/emu_mma.h) against
// the definition in double on the same bf16 q and k:
//   A_B(j) = Σ_{t ∈ B, t ≥ j} exp(c·q_t·k_j − lse_t),  lse_t = log Σ_{j ≤ t} exp(c·q_t·k_j),  j < end(B).
// d_I 64 and 128, b_sel 16, 32, 64 and 128 (one to eight query blocks a thread block), a partial last
// block, one and several 64-key tiles, a sub-range of blocks (b0 > 0) written at a row stride ld > T.
// The kernel's products of bf16 values are exact in fp32; its sums and exp2 are fp32: tolerance
// max |err| ≤ 1e-4 · max A and nmse ≤ 1e-8. Indexing, masks, barriers and the fragment algebra without
// a GPU, nothing about speed. The same cases at b_sel 64 on the warpgroup-MMA kernel
// (SPINDLE_SELECT_WGMMA=1, indexer_block_wg.cu). Build and run: scripts/emulate-cuda.sh indexer_block_tc [--quick].
#include <cstdio>

#include "indexer_block_tc.cu"
#include "indexer_block_wg.cu"
#include "ops_cuda.h"

#include "emu_harness.h"

static void check(int T, int dI, int bsel, int b0, int nb) {
    const float c = 1.0f / sqrtf((float)dI);
    auto q = fill((int64_t)T * dI, -2, 2), k = fill((int64_t)T * dI, -2, 2);
    for (auto *x : {&q, &k})
        for (auto &e : *x) e = bf16r(e);
    std::vector<__nv_bfloat16> qb(q.size()), kb(k.size());
    cuda_f32_to_half(qb.data(), q.data(), (int64_t)q.size(), HALF_BF16);
    cuda_f32_to_half(kb.data(), k.data(), (int64_t)k.size(), HALF_BF16);
    const int64_t ld = T + 3;
    float *A = (float *)cuda_malloc(sizeof(float) * (size_t)(nb * ld));
    const int rc = indexer_block_scores_bf16_cuda(A, ld, qb.data(), kb.data(), T, dI, c, bsel, b0, nb);
    // The definition, in double.
    std::vector<double> s((size_t)T), lse((size_t)T);
    double err = 0, mx = 0, e2 = 0, s2 = 0;
    for (int b = b0; b < b0 + nb; b++) {
        const int t0 = b * bsel, end = std::min(T, t0 + bsel);
        std::vector<double> want((size_t)end, 0.0);
        for (int t = t0; t < end; t++) {
            double m = -INFINITY, l = 0;
            for (int j = 0; j <= t; j++) {
                double d = 0;
                for (int e = 0; e < dI; e++) d += (double)q[(size_t)t * dI + e] * k[(size_t)j * dI + e];
                s[j] = c * d, m = std::max(m, s[j]);
            }
            for (int j = 0; j <= t; j++) l += exp(s[j] - m);
            lse[t] = m + log(l);
            for (int j = 0; j <= t; j++) want[j] += exp(s[j] - lse[t]);
        }
        const float *got = A + (int64_t)(b - b0) * ld;
        for (int j = 0; j < end; j++) {
            const double e = fabs((double)got[j] - want[j]);
            if (!(e <= err)) err = e;
            mx = std::max(mx, want[j]), e2 += e * e, s2 += want[j] * want[j];
        }
    }
    char what[160];
    snprintf(what, sizeof what, "indexer_block_tc T %d d_I %d bsel %d blocks %d..%d", T, dI, bsel, b0, b0 + nb - 1);
    const double n = s2 > 0 ? e2 / s2 : 1.0;
    expect(what, rc == 0 && n == n ? std::max(err / mx / 1e-4, n / 1e-8) : 2.0, 1.0);
    cuda_free(A);
}

int main(int argc, char **argv) {
    const bool quick = emu_quick(argc, argv, "emu_indexer_block_tc");
    check(40, 64, 16, 0, 3);      // a partial last block, one key tile
    check(100, 128, 32, 0, 4);    // two key tiles, d_I 128
    check(130, 64, 64, 1, 2);     // b0 > 0: two blocks of 64 in one thread block
    if (!quick) {
        check(200, 128, 16, 2, 10);  // eight blocks a thread block
        check(150, 64, 128, 0, 2);   // one block of 128 a thread block
    }
    // The warpgroup-MMA kernel (SPINDLE_SELECT_WGMMA=1, indexer_block_wg.cu; wgmma emulated,
    // tests/emu/emu_wgmma.h) at b_sel 64, the shape it takes: it must take these calls, then the same check.
    setenv("SPINDLE_SELECT_WGMMA", "1", 1);
    {
        std::vector<__nv_bfloat16> z((size_t)130 * 128);
        float *A = (float *)cuda_malloc(sizeof(float) * 3 * 130);
        expect("indexer_block_wg takes d_I 64 and 128 at b_sel 64, not b_sel 32",
               indexer_block_scores_wg_cuda(A, 130, z.data(), z.data(), 130, 64, 0.1f, 64, 0, 3) == 0 &&
                       indexer_block_scores_wg_cuda(A, 130, z.data(), z.data(), 130, 128, 0.1f, 64, 0, 3) == 0 &&
                       indexer_block_scores_wg_cuda(A, 130, z.data(), z.data(), 130, 128, 0.1f, 32, 0, 3) != 0
                   ? 0.0
                   : 1.0,
               0.0);
        cuda_free(A);
    }
    check(130, 64, 64, 1, 2);     // b0 > 0: two blocks of 64 in one thread block, a partial last block
    check(100, 128, 64, 0, 2);    // d_I 128, two key tiles
    if (!quick) {
        check(300, 128, 64, 0, 5);  // an odd number of blocks: the last thread block has one
        check(200, 64, 64, 1, 3);
    }
    unsetenv("SPINDLE_SELECT_WGMMA");
    printf("emu_indexer_block_tc: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
