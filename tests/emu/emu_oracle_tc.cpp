// emu_oracle_tc.cpp: the attention-mass oracle's selection on tensor cores (kernels/cuda/oracle_tc.cu,
// oracle_select_bf16_cuda, with the exact row top-k of kernels/cuda/topk.cu) run on host threads
// (tests/emu/cuda_runtime.h; ldmatrix and mma.sync as warp exchanges, tests/emu/emu_mma.h) against the
// definition in double on the same bf16 q and k:
//   P_t(j) = (1/Hq) Σ_h exp(s·q_{h,t}·k_{h/G,j} − lse_{h,t}), j ≤ t;
//   per query the top k of P_t, block-shared the top k of A_B(j) = Σ_{t ∈ B, t ≥ j} P_t(j), j < end(B)
// (larger value first, then the lower index; ascending, −1 padded). The kernel's products of bf16 values
// are exact in fp32 and its sums fp32, so a row must give the reference's set, except where the k-th
// and the next value lie within 1e-4 of each other (either may be picked): there every pick must be
// within that of the k-th value. Per query and b_sel 16 / 32 / 64, head sizes 64, 128 and 256, groups
// of 1 to 6 query heads per KV head, rows shorter than k (they take every key), several key tiles and
// key ranges (grid y), each kernel (per query: the key-split one and the one with one warp per 16 rows;
// in blocks: keys-major and query-major). Indexing, masks, barriers and the fragment algebra without a GPU, nothing about
// speed. Build and run: scripts/emulate-cuda.sh oracle_tc [--quick].
#include <cstdio>

#include "oracle_tc.cu"
#include "topk.cu"

#include "emu_harness.h"

// The fp32 oracle serves the shapes the tensor-core kernel does not take; none here does.
extern "C" void oracle_select_cuda(int32_t *, int32_t *, const float *, const float *, const float *, int, int, int,
                                   int, float, int, int) {
    fprintf(stderr, "emu_oracle_tc: the fp32 fallback was called: a shape the kernel should take\n");
    abort();
}
extern "C" void cuda_bf16_to_f32(float *dst, const void *src, int64_t n) { cuda_half_to_f32(dst, src, n, HALF_BF16); }

static void check(int T, int Hq, int Hkv, int dh, int topk, int bsel) {
    const int G = Hq / Hkv, nq = Hq * dh, nkv = Hkv * dh, rows = (T + bsel - 1) / bsel;
    const float scale = 1.0f / sqrtf((float)dh);
    auto q = fill((int64_t)T * nq, -1.5, 1.5), k = fill((int64_t)T * nkv, -1.5, 1.5);
    for (auto *x : {&q, &k})
        for (auto &e : *x) e = bf16r(e);
    // Scores in double, then lse [Hq, T] (as the bf16 pass's SDPA gives it, fp32) and P [T][j ≤ t].
    std::vector<double> P((size_t)T * T, 0.0);
    std::vector<float> lse((size_t)Hq * T);
    std::vector<double> s((size_t)T);
    for (int h = 0; h < Hq; h++)
        for (int t = 0; t < T; t++) {
            double m = -INFINITY, l = 0;
            for (int j = 0; j <= t; j++) {
                double d = 0;
                for (int e = 0; e < dh; e++)
                    d += (double)q[(size_t)t * nq + h * dh + e] * k[(size_t)j * nkv + (h / G) * dh + e];
                s[j] = scale * d, m = std::max(m, s[j]);
            }
            for (int j = 0; j <= t; j++) l += exp(s[j] - m);
            lse[(size_t)h * T + t] = (float)(m + log(l));
            for (int j = 0; j <= t; j++) P[(size_t)t * T + j] += exp(s[j] - lse[(size_t)h * T + t]) / Hq;
        }
    std::vector<__nv_bfloat16> qb(q.size()), kb(k.size());
    cuda_f32_to_half(qb.data(), q.data(), (int64_t)q.size(), HALF_BF16);
    cuda_f32_to_half(kb.data(), k.data(), (int64_t)k.size(), HALF_BF16);
    std::vector<int32_t> sel((size_t)rows * topk, 7777), n_sel((size_t)rows, 7777);
    const int takes = oracle_select_tc_takes(Hq, Hkv, dh, topk, bsel);
    oracle_select_bf16_cuda(sel.data(), n_sel.data(), qb.data(), kb.data(), lse.data(), T, Hq, Hkv, dh, scale, topk,
                            bsel);
    const double TIE = 1e-4;
    int bad = 0, tied = 0;
    std::vector<double> row((size_t)T);
    std::vector<int> idx((size_t)T);
    for (int b = 0; b < rows; b++) {
        const int len = bsel == 1 ? b + 1 : std::min(T, (b + 1) * bsel);
        for (int j = 0; j < len; j++) {
            row[j] = 0;
            if (bsel == 1) row[j] = P[(size_t)b * T + j];
            else
                for (int t = std::max(j, b * bsel); t < len; t++) row[j] += P[(size_t)t * T + j];
            idx[j] = j;
        }
        std::sort(idx.begin(), idx.begin() + len, [&](int a, int c) { return row[a] != row[c] ? row[a] > row[c] : a < c; });
        const int m = std::min(len, topk);
        std::vector<int> want(idx.begin(), idx.begin() + m);
        std::sort(want.begin(), want.end());
        const int32_t *got = sel.data() + (size_t)b * topk;
        bool ok = n_sel[b] == m;
        for (int i = 0; ok && i < topk; i++) ok = i < m ? got[i] >= 0 && got[i] < len && (i == 0 || got[i] > got[i - 1]) : got[i] == -1;
        if (ok && !std::equal(want.begin(), want.end(), got)) {
            const double vk = row[idx[m - 1]], next = m < len ? row[idx[m]] : -INFINITY;
            ok = vk - next <= TIE * vk;  // a near-tie at the k-th value: either key may be picked
            for (int i = 0; ok && i < m; i++) ok = row[got[i]] >= vk * (1 - TIE);
            tied += ok;
        }
        bad += !ok;
    }
    char what[160];
    const char *hs = getenv("SPINDLE_ORACLE_HEADS"), *hw = getenv("SPINDLE_ORACLE_WARP_HEADS");
    const int hk = oracle_select_tc_head_groups(Hq, Hkv, dh, bsel);
    const int ks = oracle_select_tc_key_split(Hq, Hkv, dh, bsel);
    char kern[40] = "";
    if (bsel > 1) snprintf(kern, sizeof kern, hk ? " keys-major, %d head group%s" : " query-major", hk, hk == 1 ? "" : "s");
    else snprintf(kern, sizeof kern, ks ? " keys split over %d warp%s" : " whole tiles", ks, ks == 1 ? "" : "s");
    snprintf(what, sizeof what, "oracle_tc T %d Hq %d Hkv %d dh %d k %d bsel %d%s%s%s%s%s: %d of %d rows differ (%d near-ties)%s",
             T, Hq, Hkv, dh, topk, bsel, kern, hs ? " heads/stage " : "", hs ? hs : "", hw ? " warps/heads " : "", hw ? hw : "",
             bad, rows, tied, takes ? "" : " (not taken!)");
    expect(what, takes ? (double)bad : 1.0, 0.0);
}

int main(int argc, char **argv) {
    const bool quick = emu_quick(argc, argv, "emu_oracle_tc");
    check(70, 2, 1, 64, 16, 1);      // per query: rows shorter than k take every key
    check(100, 4, 2, 128, 24, 16);   // block-shared, a partial last block, two key tiles
    check(90, 6, 1, 64, 20, 32);     // a group of 6 query heads per KV head
    // Per query, each key tile split over KS warps per 16 rows (SPINDLE_ORACLE_KEY_SPLIT; the default kernel per
    // query): rows shorter than k, an odd T (the buffer's rows padded to an even stride), tiles wholly before a
    // warp's rows (no mask, float2 accesses) and on the diagonal, a partial last block of rows, two key ranges
    // (grid y: 2048 keys each), groups of 1 to 6, d_h 64 to 256, heads staged in two stages.
    for (const char *ks : {"1", "2", "4"}) {
        setenv("SPINDLE_ORACLE_KEY_SPLIT", ks, 1);
        check(70, 2, 1, 64, 16, 1);
        check(101, 4, 2, 128, 24, 1);
        check(300, 6, 1, 64, 40, 1);
        check(130, 12, 2, 128, 40, 1);
        if (!quick) check(2200, 2, 1, 64, 64, 1);
    }
    check(80, 4, 1, 256, 16, 1);
    setenv("SPINDLE_ORACLE_HEADS", "3", 1);
    check(130, 12, 2, 128, 40, 1);
    unsetenv("SPINDLE_ORACLE_HEADS");
    unsetenv("SPINDLE_ORACLE_KEY_SPLIT");
    expect("key split by default: Qwen3-8B's 32:8 at d_h 128 2, Qwen2.5's 12:2 4, Gemma 3's 4:1 at d_h 256 4, "
           "SmolLM2's 9:3 at d_h 64 1, in blocks 0",
           (oracle_select_tc_key_split(32, 8, 128, 1) != 2) + (oracle_select_tc_key_split(12, 2, 128, 1) != 4) +
               (oracle_select_tc_key_split(4, 1, 256, 1) != 4) + (oracle_select_tc_key_split(9, 3, 64, 1) != 1) +
               (oracle_select_tc_key_split(32, 8, 128, 64) != 0),
           0.0);
    // The kernel with one warp per 16 rows (SPINDLE_ORACLE_KEY_SPLIT=0) from here on, per query.
    setenv("SPINDLE_ORACLE_KEY_SPLIT", "0", 1);
    // The heads staged HS at a time (SPINDLE_ORACLE_HEADS): the group in G/HS stages, per query and per block.
    setenv("SPINDLE_ORACLE_HEADS", "3", 1);
    check(90, 6, 1, 64, 20, 32);
    check(130, 12, 2, 128, 40, 1);
    setenv("SPINDLE_ORACLE_HEADS", "1", 1);
    check(100, 4, 2, 128, 24, 16);
    unsetenv("SPINDLE_ORACLE_HEADS");
    // The staged heads split over HW warps per 16 rows (SPINDLE_ORACLE_WARP_HEADS): per query (partial sums
    // through shared memory) and per block (every warp's column sums), with and without staging.
    setenv("SPINDLE_ORACLE_WARP_HEADS", "3", 1);
    check(130, 12, 2, 128, 40, 1);
    check(90, 6, 1, 64, 20, 32);
    setenv("SPINDLE_ORACLE_WARP_HEADS", "2", 1);
    check(100, 4, 2, 128, 24, 16);
    setenv("SPINDLE_ORACLE_HEADS", "2", 1);
    check(130, 12, 2, 128, 40, 1);
    unsetenv("SPINDLE_ORACLE_HEADS");
    // 16:2 per query over 4 warps would need 235,520 bytes of shared memory: 2 warps take 4 heads each; 6:1
    // asked for 6 takes 3 per query (the partial sums of 5 warps would not fit) and 6 in blocks of 16.
    setenv("SPINDLE_ORACLE_WARP_HEADS", "4", 1);
    check(70, 16, 2, 128, 16, 1);
    setenv("SPINDLE_ORACLE_WARP_HEADS", "6", 1);
    check(70, 6, 1, 128, 16, 1);
    check(70, 6, 1, 128, 16, 16);
    expect("warps/heads asked 6: 6:1 per query takes 3, in blocks of 16 takes 6, 12:2 in blocks of 64 takes 3",
           (oracle_select_tc_warp_heads(6, 1, 128, 1) != 3) + (oracle_select_tc_warp_heads(6, 1, 128, 16) != 6) +
               (oracle_select_tc_warp_heads(12, 2, 128, 64) != 3),
           0.0);
    setenv("SPINDLE_ORACLE_WARP_HEADS", "4", 1);
    expect("warps/heads asked 4: 16:2 per query takes 2", oracle_select_tc_warp_heads(16, 2, 128, 1) != 2, 0.0);
    unsetenv("SPINDLE_ORACLE_WARP_HEADS");
    expect("warps/heads unset: 3 where 6 heads are staged, else 1",
           (oracle_select_tc_warp_heads(12, 2, 128, 1) != 3) + (oracle_select_tc_warp_heads(6, 1, 128, 16) != 3) +
               (oracle_select_tc_warp_heads(16, 2, 128, 1) != 1) + (oracle_select_tc_warp_heads(4, 1, 256, 16) != 1),
           0.0);
    setenv("SPINDLE_ORACLE_HEADS", "3", 1);
    expect("warps/heads unset, 3 of 6 heads staged: 1", oracle_select_tc_warp_heads(12, 2, 128, 1) != 1, 0.0);
    unsetenv("SPINDLE_ORACLE_HEADS");
    setenv("SPINDLE_ORACLE_WARP_HEADS", "1", 1);  // a group of 6 without the split (the default splits it)
    check(90, 6, 1, 64, 20, 32);
    check(130, 12, 2, 128, 40, 1);
    unsetenv("SPINDLE_ORACLE_WARP_HEADS");
    // The block-shared keys-major kernel (the default in blocks): its head groups over the warps, each tile's
    // sums through the slots (HK > 1) or stored by the warp itself (HK = 1), several tiles and key ranges,
    // blocks of 48 and 128 (a partial and two query chunks), heads staged in two stages; then the
    // query-major block kernel (SPINDLE_ORACLE_BLOCK_ROWS=1) with its warp split.
    for (const char *hk : {"1", "2", "3", "4"}) {
        setenv("SPINDLE_ORACLE_HEAD_GROUPS", hk, 1);
        check(130, 12, 2, 128, 40, 64);
        check(150, 4, 2, 64, 24, 16);
    }
    setenv("SPINDLE_ORACLE_HEAD_GROUPS", "2", 1);
    check(600, 4, 1, 64, 64, 64);
    unsetenv("SPINDLE_ORACLE_HEAD_GROUPS");
    check(2200, 2, 1, 64, 64, 64);  // two key ranges (grid y: 2048 keys each)
    check(300, 4, 2, 64, 40, 48);
    check(300, 2, 1, 64, 40, 128);
    setenv("SPINDLE_ORACLE_HEADS", "3", 1);
    check(130, 12, 2, 128, 40, 64);
    unsetenv("SPINDLE_ORACLE_HEADS");
    expect("head groups by default: Qwen3-8B's 32:8 in blocks of 64 2, Qwen2.5's 12:2 3, Gemma 3's 4:1 at d_h 256 4, "
           "32:8 in blocks of 16 1, per query 0",
           (oracle_select_tc_head_groups(32, 8, 128, 64) != 2) + (oracle_select_tc_head_groups(12, 2, 128, 64) != 3) +
               (oracle_select_tc_head_groups(4, 1, 256, 64) != 4) + (oracle_select_tc_head_groups(32, 8, 128, 16) != 1) +
               (oracle_select_tc_head_groups(32, 8, 128, 1) != 0),
           0.0);
    setenv("SPINDLE_ORACLE_HEAD_GROUPS", "4", 1);
    expect("head groups asked 4: a group of 6 takes 3", oracle_select_tc_head_groups(12, 2, 128, 64) != 3, 0.0);
    unsetenv("SPINDLE_ORACLE_HEAD_GROUPS");
    setenv("SPINDLE_ORACLE_BLOCK_ROWS", "1", 1);
    expect("SPINDLE_ORACLE_BLOCK_ROWS=1: no head groups", oracle_select_tc_head_groups(12, 2, 128, 64) != 0, 0.0);
    check(100, 4, 2, 128, 24, 16);
    check(300, 2, 1, 64, 40, 128);
    setenv("SPINDLE_ORACLE_WARP_HEADS", "3", 1);
    check(90, 6, 1, 64, 20, 32);
    setenv("SPINDLE_ORACLE_WARP_HEADS", "6", 1);
    check(70, 6, 1, 128, 16, 16);
    unsetenv("SPINDLE_ORACLE_WARP_HEADS");
    unsetenv("SPINDLE_ORACLE_BLOCK_ROWS");
    if (!quick) {
        check(130, 12, 2, 128, 40, 1);   // Qwen2.5's 12:2, one warp per 16 rows
        check(600, 2, 1, 64, 64, 64);    // two key ranges (grid y: 512 keys each)
        check(80, 4, 1, 256, 16, 16);    // Gemma 3's 4:1, d_h 256
    }
    unsetenv("SPINDLE_ORACLE_KEY_SPLIT");
    printf("emu_oracle_tc: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
