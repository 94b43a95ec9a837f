// emu_support_attention.cpp: attention over given supports (kernels/cuda/sparse_attention.cu,
// support_attention_cuda and the shared-tile per-query kernel support_attention_query_tile_cuda) run
// on host threads (tests/emu/cuda_runtime.h) against support_attention_cpu
// (kernels/cpu/oracle_cpu.c): output, recall (the teacher mass kept, from the dense lse) and support
// size, per query (the shared-tile kernel with one query per thread block: groups of 1 to 10 heads
// per KV head, head sizes not multiples of 32) and block-shared. Random sorted supports with keys past
// the query (each query sees a prefix) and empty rows (the {t} fallback). Indexing, bounds, barriers
// and algebra without a GPU, nothing about speed. Build and run:
// scripts/emulate-cuda.sh support_attention [--quick].
#include <cstdio>

#include "sparse_attention.cu"

#include "emu_harness.h"

extern "C" {
void support_attention_cpu(float *out, float *recall, float *support, const float *q, const float *k,
                           const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel,
                           const int *given_sel, const int *given_n);
void attention_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v, int T, int Hq,
                           int Hkv, int dh, float scale, int window);
}

static void check(int T, int Hq, int Hkv, int dh, int topk, int bsel) {
    const int64_t nq = (int64_t)T * Hq * dh, nkv = (int64_t)T * Hkv * dh;
    const float scale = 1.0f / sqrtf((float)dh);
    auto q = fill(nq, -2, 2), k = fill(nkv, -1, 1), v = fill(nkv, -1, 1);
    std::vector<int> sel, n_sel;
    random_supports(sel, n_sel, T, topk, bsel);
    std::vector<float> out_c((size_t)nq), rec_c((size_t)T, 0.25f), sup_c((size_t)T, 0.25f), lse((size_t)T * Hq),
        dense((size_t)nq);
    support_attention_cpu(out_c.data(), rec_c.data(), sup_c.data(), q.data(), k.data(), v.data(), T, Hq, Hkv, dh,
                          scale, topk, bsel, sel.data(), n_sel.data());
    attention_forward_cpu(dense.data(), lse.data(), q.data(), k.data(), v.data(), T, Hq, Hkv, dh, scale, 0);
    for (int tile = 0; tile < (bsel == 1 ? 2 : 1); tile++) {
        float *out = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
        std::vector<float> rec((size_t)T, 0.25f), sup((size_t)T, 0.25f);
        if (tile)
            support_attention_query_tile_cuda(out, rec.data(), sup.data(), q.data(), k.data(), v.data(), lse.data(), T,
                                              Hq, Hkv, dh, scale, topk, sel.data(), n_sel.data());
        else
            support_attention_cuda(out, rec.data(), sup.data(), q.data(), k.data(), v.data(), lse.data(), T, Hq, Hkv,
                                   dh, scale, topk, bsel, sel.data(), n_sel.data());
        char what[160];
        snprintf(what, sizeof what, "%s T %d Hq %d Hkv %d dh %d k %d bsel %d", tile ? "tile kernel" : "support_attention",
                 T, Hq, Hkv, dh, topk, bsel);
        double e = rel_err(out, out_c.data(), nq);
        e = std::max(e, rel_err(rec.data(), rec_c.data(), T));
        const double es = rel_err(sup.data(), sup_c.data(), T);
        expect(what, es > 0 ? 1.0 : e, 1e-5);  // the support sizes exactly
        cuda_free(out);
    }
}

int main(int argc, char **argv) {
    const bool quick = emu_quick(argc, argv, "emu_support_attention");
    check(1, 8, 8, 64, 4, 1);
    check(40, 4, 1, 64, 8, 1);      // a group of 4: four warps, one head each
    check(70, 9, 3, 64, 16, 1);     // 3 of 4 warps
    check(50, 12, 2, 128, 40, 1);   // 6 of 8 warps (Qwen2.5's 12:2)
    check(45, 20, 2, 96, 20, 1);    // 10 heads: two row blocks of 8 warps × 2 rows
    check(60, 4, 2, 80, 12, 1);     // a group of 2, dh 80
    check(90, 8, 2, 64, 24, 16);    // block-shared
    if (!quick) {
        check(130, 16, 2, 128, 64, 1);
        check(100, 4, 1, 256, 33, 1);
        check(130, 16, 2, 128, 64, 64);
    }
    printf("emu_support_attention: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
