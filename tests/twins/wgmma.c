// wgmma.c: twin check (see twins.h) of Hopper's warpgroup MMA pieces (kernels/cuda/wgmma.cuh) through
// their check kernel (wgmma_check_cuda, kernels/cuda/wgmma_check.cu): C [64][64] = A [64][K] · B on one
// warpgroup, B staged in shared memory K-major (C = A·Bᵀ of a [64][K] B) and MN-major (C = A·B of a
// [K][64] B) and read through the matrix descriptor, against the same product of the bf16 values in
// double on the CPU. K 16, 48, 128, 256 (quick: 16, 48). The products of bf16 values are exact in fp32
// and the tensor core's sums are fp32: nmse ≤ 1e-10, max |err| ≤ 1e-5·max(1, max |C|). A wrong stride,
// core-matrix order or fragment layout moves whole entries. The emulator runs the same kernel with its
// reading of the descriptor (scripts/emulate-cuda.sh wgmma); this part is what says the hardware reads
// it the same way. Off sm_90 (the code is sm_90a's) the cases are recorded as failed with the reason.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops.h"
#include "ops_cuda.h"
#include "twins.h"

// After a failed case: for the first wrong entries of C, where their value sits in the reference (a
// stride or layout error moves whole entries, so this names the mapping the hardware used).
static void explain_mismatch(const float *got, const float *ref) {
    int shown = 0;
    for (int i = 0; i < 64 * 64 && shown < 8; i++) {
        if (fabsf(got[i] - ref[i]) <= 1e-4f * (1.0f + fabsf(ref[i]))) continue;
        int at = -1;
        for (int j = 0; j < 64 * 64 && at < 0; j++)
            if (fabsf(got[i] - ref[j]) <= 1e-4f * (1.0f + fabsf(ref[j]))) at = j;
        printf("  C[%d][%d] = %g (want %g): equals reference C[%d][%d]\n", i / 64, i % 64, got[i], ref[i],
               at < 0 ? -1 : at / 64, at < 0 ? -1 : at % 64);
        shown++;
    }
}

static void check_wgmma(int K, int trans_b) {
    float *a = randn((int64_t)64 * K, 1.0f), *b = randn((int64_t)64 * K, 1.0f);
    for (int64_t i = 0; i < (int64_t)64 * K; i++) a[i] = bf16_round(a[i]), b[i] = bf16_round(b[i]);
    float *da = dev_from(a, (int64_t)64 * K), *db = dev_from(b, (int64_t)64 * K);
    void *ab = cuda_malloc(2 * (size_t)64 * K), *bb = cuda_malloc(2 * (size_t)64 * K);
    cuda_f32_to_bf16(ab, da, (int64_t)64 * K);
    cuda_f32_to_bf16(bb, db, (int64_t)64 * K);
    float *dc = dev_poisoned(64 * 64);
    char shape[64];
    snprintf(shape, sizeof shape, "m64n64 K %d, B %s", K, trans_b ? "MN-major" : "K-major");
    const int rc = wgmma_check_cuda(dc, ab, bb, K, trans_b);
    if (rc != 0) {
        record("wgmma m64n64k16", shape, 0, rc == -2 ? "not an sm_90 device (the code is sm_90a's)" : "bad K");
    } else {
        float *got = host_from_dev(dc, 64 * 64), *ref = host_alloc(64 * 64);
        for (int m = 0; m < 64; m++)
            for (int n = 0; n < 64; n++) {
                double s = 0;
                for (int k = 0; k < K; k++)
                    s += (double)a[(int64_t)m * K + k] * (trans_b ? b[(int64_t)k * 64 + n] : b[(int64_t)n * K + k]);
                ref[m * 64 + n] = (float)s;
            }
        if (!compare("wgmma m64n64k16", shape, got, ref, 64 * 64, 1e-10, 1e-5)) explain_mismatch(got, ref);
        free(got), free(ref);
    }
    cuda_free(dc), cuda_free(ab), cuda_free(bb), cuda_free(da), cuda_free(db);
    free(a), free(b);
}

void twins_wgmma(int quick) {
    static const int ks[] = {16, 48, 128, 256};
    for (int tb = 0; tb < 2; tb++)
        for (int i = 0; i < (quick ? 2 : 4); i++) check_wgmma(ks[i], tb);
}
