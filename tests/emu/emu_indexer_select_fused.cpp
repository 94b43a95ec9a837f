// emu_indexer_select_fused.cpp: the per-query indexer selection fused with its scores
// (kernels/cuda/indexer_select_fused.cu, indexer_select_fused_bf16_cuda) run on host threads
// (tests/emu/cuda_runtime.h; ldmatrix and mma.sync as warp exchanges, tests/emu/emu_mma.h) against
// the definition in double on the same bf16 q and k: row t takes the top k of s_{t,j} = c·q_t·k_j over
// j ≤ t (larger value first, then the lower index; ascending, −1 padded; n_sel = min(k, t + 1)).
// Random inputs: the kernel's products of bf16 values are exact in fp32 and its sums fp32, so a row
// must give the reference's set, except where the k-th and the next value lie within tol of each
// other (either may be picked): there every pick must be within tol of the k-th value, tol = D·2⁻²³·
// c·Σ_i |q_{t,i}|·max |k| (a bound of the fp32 sum's error); the same × 256, for scores past the first
// sweep's window. Integer q, k (in −2 … 2, or mostly 0): every score is an exact multiple of c, so
// many are equal and the result must be the tie rule's, exactly. T from 1 to 3000 (one and many
// 64-key tiles and thread blocks of rows, a partial last block), k from 1 to past T (rows shorter than
// k take every key), d_I 32, 64, 128 and 256; rows resolved by a candidate list, by taking a whole
// range and by value after five histogram sweeps; the shapes it declines.
// Indexing, masks, barriers, the passes and the fragment algebra without a GPU, nothing about speed.
// Build and run: scripts/emulate-cuda.sh indexer_select_fused [--quick].
#include <cstdio>

#include "indexer_select_fused.cu"
#include "ops_cuda.h"

#include "emu_harness.h"

// Inputs: RAND uniform in (−2, 2) rounded to bf16; BIG the same × 256 (scores past the first
// sweep's window, up to ~10⁶); INTS integers in −2 … 2 (ties); FLAT −1, 0, 1 with 0 four times in
// five (most scores exactly 0: long runs of equal keys, resolved by value).
enum { RAND, BIG, INTS, FLAT };
static void check(int T, int dI, int topk, int kind) {
    const bool ints = kind == INTS || kind == FLAT;
    const float c = 1.0f / sqrtf((float)dI);
    auto q = fill((int64_t)T * dI, -2, 2), k = fill((int64_t)T * dI, -2, 2);
    for (auto *x : {&q, &k})
        for (auto &e : *x)
            e = kind == RAND ? bf16r(e) : kind == BIG ? bf16r(256 * e) : kind == INTS ? std::min(2.0f, std::floor(e + 0.5f) + 0.0f)
                                                          : (fabsf(e) < 1.6f ? 0.0f : e > 0 ? 1.0f : -1.0f);
    std::vector<__nv_bfloat16> qb(q.size()), kb(k.size());
    cuda_f32_to_half(qb.data(), q.data(), (int64_t)q.size(), HALF_BF16);
    cuda_f32_to_half(kb.data(), k.data(), (int64_t)k.size(), HALF_BF16);
    int32_t *sel = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)T * topk);
    int32_t *n_sel = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)T);
    const int rc = indexer_select_fused_bf16_cuda(sel, n_sel, qb.data(), kb.data(), T, dI, c, topk);
    double kmax = 0;
    for (float e : k) kmax = std::max(kmax, (double)fabs(e));
    int bad = 0, tied = 0, first_bad = -1;
    std::vector<double> row((size_t)T);
    std::vector<int> idx((size_t)T);
    for (int t = 0; t < T && rc == 0; t++) {
        const int len = t + 1;
        double qabs = 0;
        for (int i = 0; i < dI; i++) qabs += fabs(q[(size_t)t * dI + i]);
        for (int j = 0; j < len; j++) {
            double d = 0;
            for (int i = 0; i < dI; i++) d += (double)q[(size_t)t * dI + i] * k[(size_t)j * dI + i];
            row[j] = c * d, idx[j] = j;
        }
        // Integer inputs: the kernel's scores are c·(exact integer) in fp32, the same order as the
        // reference's (c·n is increasing in n), so no tolerance.
        const double tol = ints ? 0.0 : dI * std::ldexp(1.0, -23) * c * qabs * kmax;
        std::sort(idx.begin(), idx.begin() + len, [&](int a, int b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
        const int m = std::min(len, topk);
        std::vector<int> want(idx.begin(), idx.begin() + m);
        std::sort(want.begin(), want.end());
        const int32_t *got = sel + (size_t)t * topk;
        bool ok = n_sel[t] == m;
        for (int i = 0; ok && i < topk; i++) ok = i < m ? got[i] >= 0 && got[i] < len && (i == 0 || got[i] > got[i - 1]) : got[i] == -1;
        if (ok && !std::equal(want.begin(), want.end(), got)) {
            const double vk = row[idx[m - 1]], next = m < len ? row[idx[m]] : -INFINITY;
            ok = !ints && vk - next <= tol;  // a near-tie at the k-th value: either key may be picked
            for (int i = 0; ok && i < m; i++) ok = row[got[i]] >= vk - tol;
            tied += ok;
        }
        if (!ok && first_bad < 0) first_bad = t;
        bad += !ok;
    }
    char what[160];
    snprintf(what, sizeof what, "select_fused T %d d_I %d k %d %s: %d rows differ (first %d; %d near-ties)%s", T, dI,
             topk, kind == RAND ? "rand" : kind == BIG ? "big" : kind == INTS ? "ints" : "flat", bad, first_bad, tied, rc ? " (declined!)" : "");
    expect(what, rc == 0 ? (double)bad : 1.0, 0.0);
    cuda_free(sel), cuda_free(n_sel);
}

int main(int argc, char **argv) {
    const bool quick = emu_quick(argc, argv, "emu_indexer_select_fused");
    // The shapes it declines: d_I not in {32, 64, 128, 256}, rows not 16-byte aligned.
    {
        alignas(16) static __nv_bfloat16 buf[1024];
        int32_t s[4], n[4];
        const bool refused = indexer_select_fused_bf16_cuda(s, n, buf, buf, 4, 48, 1.0f, 1) == -1 &&
                             indexer_select_fused_bf16_cuda(s, n, buf, buf, 4, 512, 1.0f, 1) == -1 &&
                             indexer_select_fused_bf16_cuda(s, n, buf + 1, buf, 4, 64, 1.0f, 1) == -1;
        expect("select_fused declines d_I 48, 512 and unaligned q", refused ? 0.0 : 1.0, 0.0);
    }
    check(1, 64, 1, RAND);       // one row, one key
    check(17, 64, 16, RAND);     // one row past k (t = 16), the others take every key
    check(100, 64, 8, RAND);     // two key tiles, candidate lists straight away (rows ≤ 128)
    check(300, 128, 5, INTS);    // ties: three thread blocks, a partial one, histogram sweeps
    check(300, 64, 24, RAND);    // histogram sweeps on distinct values, then candidate lists
    check(200, 64, 250, RAND);   // k > T: every row takes every key
    check(400, 32, 200, FLAT);   // thresholds at 0 with hundreds of equal keys: resolved by value
    check(300, 64, 20, BIG);     // the first sweep's top bin (≥ 2^15·1.75), then its sub-bins
    if (!quick) {
        check(15, 128, 4, RAND);
        check(16, 32, 16, RAND);     // k = T: no row is longer than k
        check(200, 32, 10, RAND);    // d_I 32, histogram sweeps
        check(256, 128, 1, RAND);    // k = 1
        check(255, 256, 40, RAND);   // d_I 256: 64 rows a thread block
        check(256, 64, 64, INTS);
        check(1000, 128, 100, RAND); // many tiles: window histogram, then refined, then candidates
        check(1000, 64, 3, INTS);    // heavy ties at small k
        check(1000, 256, 200, INTS);
        check(1000, 64, 700, FLAT);
        check(600, 64, 20, BIG);     // a second sweep inside the top bin
        check(3000, 64, 300, RAND);
    }
    printf("emu_indexer_select_fused: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures,
           failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
