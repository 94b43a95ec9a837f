// score_cpu.c: next-token statistics of logits rows (the scoring of `spindle
// eval`), CPU twin; the reference of kernels/cuda/score.cu. Each row in double,
// the way it reads: a scan for the maximum, Σ exp(x − max), then the KL sum
// term by term. Rows in parallel (OpenMP).
#include <math.h>

#include "ops.h"

// Log-sum-exp and argmax of one row (argmax: the first index of the maximum).
static void row_stats(const float *row, int V, double *lse, int *argmax) {
    int a = 0;
    for (int j = 1; j < V; j++)
        if (row[j] > row[a]) a = j;
    double sum = 0;
    for (int j = 0; j < V; j++) sum += exp((double)row[j] - row[a]);
    *lse = row[a] + log(sum);
    *argmax = a;
}

void next_token_stats_cpu(double *nll_d, double *nll_s, double *kl, int32_t *top1, const float *ld,
                          const float *ls, const int32_t *next, int rows, int V) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < rows; i++) {
        const float *rd = ld + (int64_t)i * V;
        double lse_d;
        int arg_d;
        row_stats(rd, V, &lse_d, &arg_d);
        nll_d[i] = lse_d - rd[next[i]];
        if (!ls) continue;
        const float *rs = ls + (int64_t)i * V;
        double lse_s;
        int arg_s;
        row_stats(rs, V, &lse_s, &arg_s);
        nll_s[i] = lse_s - rs[next[i]];
        // KL(d ‖ s) = Σ_j p_d(j)·(log p_d(j) − log p_s(j))
        double sum = 0;
        for (int j = 0; j < V; j++) {
            const double lpd = rd[j] - lse_d, lps = rs[j] - lse_s;
            sum += exp(lpd) * (lpd - lps);
        }
        kl[i] = sum > 0 ? sum : 0;
        top1[i] = arg_d == arg_s;
    }
}
