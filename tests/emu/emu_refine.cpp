// emu_refine.cpp: the second stage of two-stage supports (kernels/cuda/indexer_refine.cu) run on
// host threads (tests/emu/cuda_runtime.h): random q, k and ascending candidate lists per block of
// bsel queries (some shorter than cand, some with keys past the block's queries), the scores
// kernel against the dot products in double (fp32 sums: 1e-5 relative), every −∞ exactly where a
// candidate is missing or after the query; then the CPU top-k (kernels/cpu/topk.c, what
// topk_rows_cuda computes on a GPU) of those rows and the rows kernel against the rows built
// here from the same positions. Checks indexing, bounds and barriers without a GPU.
// Build and run: scripts/emulate-cuda.sh refine [--quick].
#include <algorithm>
#include <cstdio>

#include "indexer_refine.cu"
#include "ops_cuda.h"  // HalfType, for the harness

#include "emu_harness.h"

extern "C" int topk_support(int *sel, const float *val, int n_cand, int k);

static void check(int T, int dI, int bsel, int cand, int k, unsigned seed) {
    srand(seed);
    const int nb = (T + bsel - 1) / bsel;
    auto q = fill((int64_t)T * dI, -1, 1), kk = fill((int64_t)T * dI, -1, 1);
    std::vector<int32_t> C((size_t)nb * cand, -1), cn((size_t)nb);
    for (int b = 0; b < nb; b++) {  // a random ascending subset of the keys before the block's end
        const int end = std::min((b + 1) * bsel, T);
        std::vector<int> keys(end);
        for (int j = 0; j < end; j++) keys[j] = j;
        for (int j = end - 1; j > 0; j--) std::swap(keys[j], keys[rand() % (j + 1)]);
        int n = std::min(cand, end);
        if (b % 3 == 1 && n > 1) n -= 1 + rand() % (n / 2);  // shorter lists too
        std::sort(keys.begin(), keys.begin() + n);
        for (int a = 0; a < n; a++) C[(size_t)b * cand + a] = keys[a];
        cn[b] = n;
    }
    const float c_col = 1.0f / sqrtf((float)dI);
    float *R = (float *)cuda_malloc(sizeof(float) * (size_t)T * cand);
    // Two launches (blocks 0 … h−1, then the rest), as the caller's chunks do.
    const int h = nb / 2;
    indexer_refine_scores_cuda(R, cand, q.data(), kk.data(), dI, c_col, C.data(), cn.data(), cand, T, bsel, 0, h);
    indexer_refine_scores_cuda(R + (int64_t)h * bsel * cand, cand, q.data(), kk.data(), dI, c_col, C.data(),
                               cn.data(), cand, T, bsel, h, nb - h);
    double worst = 0;
    int wrong_inf = 0;
    for (int t = 0; t < T; t++) {
        const int b = t / bsel;
        for (int i = 0; i < cand; i++) {
            const float got = R[(int64_t)t * cand + i];
            const int key = i < cn[b] ? C[(size_t)b * cand + i] : -1;
            if (key < 0 || key > t) {
                wrong_inf += !(std::isinf(got) && got < 0);
                continue;
            }
            double d = 0;
            for (int a = 0; a < dI; a++) d += (double)q[(int64_t)t * dI + a] * kk[(int64_t)key * dI + a];
            d *= c_col;
            worst = std::max(worst, std::fabs(got - d) / (1.0 + std::fabs(d)));
        }
    }
    // The top-k positions of each row (as topk_rows_cuda), then the rows kernel.
    std::vector<int32_t> pos((size_t)T * k, -1), pn((size_t)T);
    std::vector<int> tmp((size_t)cand);
    for (int t = 0; t < T; t++) {
        const int n = topk_support(tmp.data(), R + (int64_t)t * cand, cand, k);
        for (int a = 0; a < n; a++) pos[(size_t)t * k + a] = tmp[a];
        pn[t] = n;
    }
    int32_t *sel = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)T * k);
    int32_t *ns = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)T);
    indexer_refine_rows_cuda(sel, ns, pos.data(), pn.data(), C.data(), cn.data(), cand, k, bsel, 0, T);
    int wrong_rows = 0;
    for (int t = 0; t < T; t++) {
        const int b = t / bsel;
        std::vector<int32_t> want;  // the valid keys among the chosen positions, ascending
        for (int a = 0; a < pn[t]; a++) {
            const int p = pos[(size_t)t * k + a];
            if (p < cn[b] && C[(size_t)b * cand + p] <= t) want.push_back(C[(size_t)b * cand + p]);
        }
        int m = 0;
        while (m < cn[b] && C[(size_t)b * cand + m] <= t) m++;
        bool ok = ns[t] == (int)want.size() && (int)want.size() == std::min(k, m);
        for (int a = 0; a < k; a++) ok = ok && sel[(size_t)t * k + a] == (a < (int)want.size() ? want[a] : -1);
        wrong_rows += !ok;
    }
    char what[160];
    snprintf(what, sizeof what, "refine T %d dI %d bsel %d cand %d k %d: %d misplaced -inf, %d wrong rows", T, dI,
             bsel, cand, k, wrong_inf, wrong_rows);
    expect(what, wrong_inf || wrong_rows ? 1.0 : worst, 1e-5);
    cuda_free(R), cuda_free(sel), cuda_free(ns);
}

int main(int argc, char **argv) {
    const bool quick = emu_quick(argc, argv, "emu_refine");
    check(40, 16, 8, 12, 4, 1);       // blocks narrower than a tile of 32 queries
    check(100, 64, 16, 48, 16, 2);    // candidate tiles of 32 and a partial one
    check(130, 128, 64, 40, 40, 3);   // k = cand: every valid candidate; a last partial block
    check(70, 32, 33, 70, 8, 4);      // bsel not a multiple of 32, cand past the block ends
    if (!quick) {
        check(300, 128, 64, 128, 32, 5);
        check(257, 64, 128, 96, 24, 6);
    }
    printf("emu_refine: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
