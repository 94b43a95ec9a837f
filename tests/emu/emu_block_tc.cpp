// emu_block_tc.cpp: the bf16 tensor-core attention over supports (kernels/cuda/sparse_attention_tc.cu)
// run on host threads (tests/emu/cuda_runtime.h; ldmatrix and mma.sync as warp exchanges,
// tests/emu/emu_mma.h) against support_attention_cpu (kernels/cpu/oracle_cpu.c) on the same
// bf16-rounded q, k, v:
//   support_attention_block_tc_cuda   block-shared supports (b_sel 16, 32, 64), head sizes 64, 128 and 256,
//                                     1 to 8 heads per thread block, supports of one and of several
//                                     64-key tiles, keys past a query (each sees a prefix), empty rows
//                                     (the {t} fallback);
//   support_attention_union_tc_cuda   per-query supports executed as the unions of blocks of 16 queries,
//                                     with the union sizes it reports checked exactly;
//   both with statistics              (SupportStatsDev) recall and support against the CPU twin's, the output
//                                     unchanged bit for bit;
//   the same with SPINDLE_TC_ROWS=256 (the wide variant: up to 256 rows a thread block);
//   support_attention_block_wg_cuda   the warpgroup-MMA kernel (SPINDLE_SPARSE_WGMMA=1, and its one-block-an-SM
//                                     variant, =2; wgmma emulated by tests/emu/emu_wgmma.h) on block-shared
//                                     supports.
// Tolerance as the GPU twin test's (tests/twins/oracle.c, "support_attention_block_tc"): nmse 2e-5 and
// max |err| 2⁻⁶·max(1, max |cpu|) — the kernel rounds its softmax weights to bf16 before P·V. Indexing,
// masks, barriers and the fragment algebra without a GPU, nothing about speed. Build and run:
// scripts/emulate-cuda.sh block_tc [--quick].
#include <cstdio>
#include <cstdlib>

#include "sparse_attention.cu"
#include "sparse_attention_tc.cu"
#include "sparse_attention_wg.cu"

#include "emu_harness.h"

extern "C" {
void attention_forward_cpu(float *out, float *lse, const float *q, const float *k, const float *v, int T, int Hq,
                           int Hkv, int dh, float scale, int window);
void support_attention_cpu(float *out, float *recall, float *support, const float *q, const float *k,
                           const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel,
                           const int *given_sel, const int *given_n);
}
extern "C" void cuda_bf16_to_f32(float *dst, const void *src, int64_t n) { cuda_half_to_f32(dst, src, n, HALF_BF16); }

static double nmse(const float *a, const float *b, int64_t n) {
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) e += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), s += (double)b[i] * b[i];
    return s > 0 ? e / s : e;
}

// ublock 0: block-shared supports of bsel queries; ublock > 0: per-query supports in blocks of ublock.
static void check(int T, int Hq, int Hkv, int dh, int topk, int bsel, int ublock) {
    const int per = ublock > 0 ? 1 : bsel;
    const int64_t nq = (int64_t)T * Hq * dh, nkv = (int64_t)T * Hkv * dh;
    const float scale = 1.0f / sqrtf((float)dh);
    auto q = fill(nq, -2, 2), k = fill(nkv, -1, 1), v = fill(nkv, -1, 1);
    for (auto *x : {&q, &k, &v})
        for (auto &e : *x) e = bf16r(e);
    std::vector<int32_t> sel, n_sel;
    random_supports(sel, n_sel, T, topk, per);
    std::vector<float> ref((size_t)nq), rec_c((size_t)T, 0.25f), sup_c((size_t)T, 0.25f);
    support_attention_cpu(ref.data(), rec_c.data(), sup_c.data(), q.data(), k.data(), v.data(), T, Hq, Hkv, dh, scale,
                          topk, per, sel.data(), n_sel.data());
    std::vector<__nv_bfloat16> qb((size_t)nq), kb((size_t)nkv), vb((size_t)nkv);
    cuda_f32_to_half(qb.data(), q.data(), nq, HALF_BF16);
    cuda_f32_to_half(kb.data(), k.data(), nkv, HALF_BF16);
    cuda_f32_to_half(vb.data(), v.data(), nkv, HALF_BF16);
    float *out = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    int64_t got_union = -1;
    const int takes = ublock > 0 ? support_attention_union_tc_takes(T, Hq, Hkv, dh, topk, ublock)
                                 : support_attention_block_tc_takes(Hq, Hkv, dh, topk, bsel);
    if (ublock > 0)
        support_attention_union_tc_cuda(out, qb.data(), kb.data(), vb.data(), T, Hq, Hkv, dh, scale, topk, ublock,
                                        sel.data(), n_sel.data(), DT_F32, NULL, &got_union);
    else
        support_attention_block_tc_cuda(out, qb.data(), kb.data(), vb.data(), T, Hq, Hkv, dh, scale, topk, bsel,
                                        sel.data(), n_sel.data(), DT_F32, NULL);
    double mx = 1.0, err = 0.0;  // max |err| against max(1, max |cpu|); a NaN fails
    for (int64_t i = 0; i < nq; i++) {
        mx = std::max(mx, (double)fabsf(ref[i]));
        const double e = fabs((double)out[i] - ref[i]);
        if (!(e <= err)) err = e;
    }
    char what[160];
    snprintf(what, sizeof what, "%s T %d Hq %d Hkv %d dh %d k %d %s %d%s", ublock ? "union_tc" : "block_tc", T, Hq,
             Hkv, dh, topk, ublock ? "ublock" : "bsel", ublock ? ublock : bsel, takes ? "" : " (not taken!)");
    const double e_max = err / mx;
    // A case the kernel does not take would be judged on the fp32 fallback: a failure here.
    const double e_n = nmse(out, ref.data(), nq);
    expect(what, takes && e_n == e_n ? std::max(e_n / 2e-5, e_max * 64) : 2.0, 1.0);
    if (ublock > 0) {  // the union sizes: Σ_b |∪_{t ∈ b} {j ∈ S_t : j ≤ t}|, exactly
        int64_t want = 0;
        for (int t0 = 0; t0 < T; t0 += ublock) {
            std::vector<char> seen((size_t)T, 0);
            for (int t = t0; t < std::min(T, t0 + ublock); t++)
                for (int i = 0; i < n_sel[t]; i++) {
                    const int j = sel[(size_t)t * topk + i];
                    if (j >= 0 && j <= t && !seen[j]) seen[j] = 1, want++;
                }
        }
        snprintf(what + strlen(what), sizeof what - strlen(what), ": union keys %lld, expected %lld",
                 (long long)got_union, (long long)want);
        expect(what, got_union == want ? 0.0 : 1.0, 0.0);
    }
    // With statistics (lse from the CPU twin of dense attention; recall and support start at 0.25, added to): the same
    // output bit for bit, recall within 2⁻⁶ of the CPU twin's (the weights' bf16 rounding), |S_t| exactly.
    // Statistics always run the mma.sync kernel: the warpgroup-MMA cases stop here.
    if (getenv("SPINDLE_SPARSE_WGMMA")) {
        cuda_free(out);
        return;
    }
    std::vector<float> lse((size_t)Hq * T), dense((size_t)nq), rec((size_t)T, 0.25f), sup((size_t)T, 0.25f);
    attention_forward_cpu(dense.data(), lse.data(), q.data(), k.data(), v.data(), T, Hq, Hkv, dh, scale, 0);
    const SupportStatsDev st = {rec.data(), sup.data(), lse.data()};
    float *out2 = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    if (ublock > 0)
        support_attention_union_tc_cuda(out2, qb.data(), kb.data(), vb.data(), T, Hq, Hkv, dh, scale, topk, ublock,
                                        sel.data(), n_sel.data(), DT_F32, &st, NULL);
    else
        support_attention_block_tc_cuda(out2, qb.data(), kb.data(), vb.data(), T, Hq, Hkv, dh, scale, topk, bsel,
                                        sel.data(), n_sel.data(), DT_F32, &st);
    int same = 1;
    double e_rec = 0, e_sup = 0;
    for (int64_t i = 0; i < nq; i++) same &= memcmp(&out[i], &out2[i], sizeof(float)) == 0;
    for (int t = 0; t < T; t++) {
        const double er = fabs((double)rec[t] - rec_c[t]), es = fabs((double)sup[t] - sup_c[t]);
        if (!(er <= e_rec)) e_rec = er;
        if (!(es <= e_sup)) e_sup = es;
    }
    char sw[200];
    snprintf(sw, sizeof sw, "%s: statistics (output %s, max |recall err| %.2e, max |support err| %g)", what,
             same ? "bit-equal" : "DIFFERS", e_rec, e_sup);
    expect(sw, same && e_sup == 0 ? e_rec * 64 : 2.0, 1.0);
    cuda_free(out2);
    cuda_free(out);
}

// A block-shared case on the warpgroup-MMA kernel: it must take the shape (else the mma.sync kernel would
// be judged), then check() judges the output.
static void check_wg(int T, int Hq, int Hkv, int dh, int topk, int bsel) {
    char what[96];
    snprintf(what, sizeof what, "block_wg takes Hq %d Hkv %d dh %d bsel %d", Hq, Hkv, dh, bsel);
    expect(what, support_attention_block_wg_takes(Hq, Hkv, dh, bsel) ? 0.0 : 1.0, 0.0);
    check(T, Hq, Hkv, dh, topk, bsel, 0);
}

int main(int argc, char **argv) {
    const bool quick = emu_quick(argc, argv, "emu_block_tc");
    check(40, 2, 1, 64, 16, 16, 0);     // 2 heads a thread block, one 64-key tile
    check(70, 4, 2, 128, 40, 16, 0);    // GQA 2:1, a partial last block
    check(64, 12, 2, 128, 24, 32, 0);   // Qwen2.5's 12:2 (6 heads: 3 a thread block of 2 × 32 rows)
    check(96, 2, 1, 64, 100, 32, 0);    // two key tiles
    check(50, 4, 2, 64, 8, 16, 16);     // per query, unions of 16
    check(300, 2, 1, 64, 250, 64, 0);   // key tiles below every row's visible keys (the softmax without the mask)
    if (!quick) {
        check(130, 8, 8, 64, 70, 64, 0);
        check(80, 4, 1, 256, 30, 16, 0);  // Gemma 3's 4:1, d_h 256
        check(100, 16, 2, 128, 150, 64, 0);
        check(130, 12, 2, 128, 40, 16, 16);
    }
    // The wide variant (SPINDLE_TC_ROWS=256: up to 256 rows, 16 warps a thread block, d_h ≤ 128).
    setenv("SPINDLE_TC_ROWS", "256", 1);
    check(64, 12, 2, 128, 24, 32, 0);   // 6 heads × 32 rows in one thread block (3 × 32 in two before)
    check(70, 16, 2, 64, 40, 16, 16);   // unions: 8 heads × 16 rows
    if (!quick) {
        check(100, 16, 2, 128, 150, 64, 0);  // 4 heads × 64 rows
        check(80, 4, 1, 256, 30, 16, 0);     // d_h 256 keeps 128 rows
    }
    unsetenv("SPINDLE_TC_ROWS");
    // The warpgroup-MMA kernel (SPINDLE_SPARSE_WGMMA=1, sparse_attention_wg.cu; wgmma emulated,
    // tests/emu/emu_wgmma.h) on the shapes it takes: rows of 64 (one warpgroup) and 128 (two).
    // Both of its kernels: two thread blocks an SM (=1, a warpgroup skips the tiles none of its rows sees)
    // and one (=2, every warpgroup takes every tile).
    for (const char *wv : {"1", "2"}) {
        setenv("SPINDLE_SPARSE_WGMMA", wv, 1);
        check_wg(40, 8, 2, 64, 16, 16);     // 4 heads × 16 rows: one warpgroup, one key tile
        check_wg(70, 4, 2, 128, 100, 32);   // 2 heads × 32 rows, two key tiles, a partial last block
        check_wg(130, 8, 8, 64, 70, 64);    // MHA, 1 head × 64 rows
        check_wg(250, 2, 1, 128, 200, 128); // 128 queries a block: its two warpgroups see different key counts
        if (!quick) {
            check_wg(100, 16, 2, 128, 150, 64);  // 2 heads × 64 rows: two warpgroups, three key tiles
            check_wg(90, 12, 2, 128, 40, 32);    // Qwen2.5's 12:2 at b_sel 32: 2 heads × 32 rows (b_sel 16 is not taken)
        }
    }
    unsetenv("SPINDLE_SPARSE_WGMMA");
    printf("emu_block_tc: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
