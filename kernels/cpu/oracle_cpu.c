// oracle_cpu.c: attention restricted to the attention-mass oracle's support,
// CPU twin. Definitions (docs/design.md "Oracle", normative):
//   a_{h,t}(j) = softmax_{j≤t}(s·q_{h,t}·k_{h/G,j}),  P_t(j) = (1/Hq) Σ_h a_{h,t}(j)
//   per query (bsel = 1): S_t = top-k of P_t over j ≤ t (all when t+1 ≤ k)
//   block-shared (bsel = s): B = [b·s, min((b+1)·s, T)), A_B(j) = Σ_{t∈B, t≥j} P_t(j),
//     S_B = top-k of A_B over j < end(B) (all when end(B) ≤ k);
//     query t attends to S_B ∩ [0, t], or to {t} alone if that is empty.
//   hybrid (recent W, sinks S; docs/design.md "Hybrid supports"): query t attends to
//     that set ∪ {max(0, t−W+1)..t} ∪ {0..min(S, t+1)−1}, each key once.
// Every head then attends with the softmax restricted to the support.
//
// Work is split into tasks of whole blocks (about 64 queries each). A task
// holds the P rows and each head's attention rows a_{h,t} of its queries over
// keys [0, end): O(Hq·64·T) floats per thread, never T×T. The restricted
// softmax of a head is its full softmax renormalised over the support, so the
// sparse attention only gathers v rows.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "fastexp.h"
#include "ops.h"
#include "topk.h"
#include "status.h"

// Unnormalised softmax weights w[i] of scale·q·k_{keys[i]} from the scores
// themselves, and their sum: for a support whose full-softmax probabilities
// all underflowed (a head that attends far from the chosen keys).
static void support_softmax(float *w, const float *qv, const float *kb, const int *keys, int n, int dh,
                            int64_t nkv, float scale, float *sum) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) {
        const float *kv = kb + keys[i] * nkv;
        float d = 0.0f;
        for (int c = 0; c < dh; c++) d += qv[c] * kv[c];
        w[i] = d * scale;
        mx = w[i] > mx ? w[i] : mx;
    }
    *sum = 0.0f;
    for (int i = 0; i < n; i++) *sum += (w[i] = expf(w[i] - mx));
}

// The hybrid support of query t in keys[] (sorted, each key once): the sinks
// [0, z1), the base keys base[0..n) (sorted) outside the two ranges, then the
// window [max(r0, z1), t]. Membership in the ranges is two comparisons, so the
// union costs O(n + W + S) and no bitmap. Returns its size.
static int hybrid_union(int *keys, const int *base, int n, int t, int recent, int sinks) {
    const int z1 = sinks < t + 1 ? sinks : t + 1;
    const int r0 = recent > 0 ? (t - recent + 1 > 0 ? t - recent + 1 : 0) : t + 1;  // t + 1: no window
    int m = 0;
    for (int j = 0; j < z1; j++) keys[m++] = j;
    for (int i = 0; i < n; i++)
        if (base[i] >= z1 && base[i] < r0) keys[m++] = base[i];
    for (int j = r0 > z1 ? r0 : z1; j <= t && recent > 0; j++) keys[m++] = j;
    return m;
}

void oracle_attention_cpu(float *out, float *recall, float *support, const float *q, const float *k,
                          const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel) {
    hybrid_attention_cpu(out, recall, support, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, 0, 0, NULL, NULL, NULL);
}

void support_attention_cpu(float *out, float *recall, float *support, const float *q, const float *k,
                           const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel,
                           const int *given_sel, const int *given_n) {
    hybrid_attention_cpu(out, recall, support, q, k, v, T, Hq, Hkv, dh, scale, topk, bsel, 0, 0, given_sel, given_n, NULL);
}

void hybrid_attention_cpu(float *out, float *recall, float *support, const float *q, const float *k,
                          const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel,
                          int recent, int sinks, const int *given_sel, const int *given_n, SupportUnion *uni) {
    SPINDLE_CHECK(recent >= 0 && sinks >= 0);
    const int ub = uni && bsel == 1 ? uni->bsel : 0;  // union blocks: whole ones inside each task of 64 queries
    SPINDLE_CHECK(ub >= 0 && (ub == 0 || 64 % ub == 0));
    double u_keys = 0, u_blocks = 0;
    if (!given_sel && topk >= T) {  // every support is the full causal set: dense, bit for bit
        attention_forward_cpu(out, NULL, q, k, v, T, Hq, Hkv, dh, scale, 0);
        for (int t = 0; t < T; t++) {
            if (recall) recall[t] += 1.0f;
            if (support) support[t] += (float)(t + 1);
        }
        for (int b0 = 0; ub && b0 < T; b0 += ub) {  // a block's union: every key up to its last query
            uni->keys += b0 + ub < T ? b0 + ub : T;
            uni->blocks += 1;
        }
        return;
    }
    const int G = Hq / Hkv;
    const int64_t nq = (int64_t)Hq * dh, nkv = (int64_t)Hkv * dh;
    const int per_task = bsel >= 64 ? bsel : (64 / bsel) * bsel;  // whole blocks, ~64 queries
    const int n_tasks = (T + per_task - 1) / per_task;
    int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel reduction(+ : u_keys, u_blocks)
    {
        float *P = xmalloc(sizeof(float) * (size_t)per_task * T);       // P rows of the task's queries
        float *S = xmalloc(sizeof(float) * (size_t)Hq * per_task * T);  // a_{h,t}(j) per head
        float *A = xmalloc(sizeof(float) * (size_t)T);                  // block aggregate
        float *w = xmalloc(sizeof(float) * (size_t)T);                  // weights over the support
        int *sel = xmalloc(sizeof(int) * (size_t)T);
        int *uni = recent || sinks ? xmalloc(sizeof(int) * (size_t)T) : NULL;  // one query's hybrid support
        int *mark = ub ? xcalloc((size_t)T, sizeof(int)) : NULL;  // key j is in the current union block iff mark[j] == stamp
        int stamp = 0, u_n = 0;
#pragma omp for schedule(dynamic, 1)
        for (int task = n_tasks - 1; task >= 0; task--) {  // long rows first
            const int q0 = task * per_task, q1 = q0 + per_task < T ? q0 + per_task : T, nt = q1 - q0;
            const int64_t hs = (int64_t)nt * q1;  // one head's rows in S
            // a_{h,t}(j) for queries q0..q1-1 over keys 0..q1-1, and their head average P
            // (zero above the diagonal).
            memset(P, 0, sizeof(float) * (size_t)hs);
            for (int h = 0; h < Hq; h++) {
                float *Sh = S + h * hs;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nt, q1, dh, scale, q + q0 * nq + (int64_t)h * dh,
                            (int)nq, k + (int64_t)(h / G) * dh, (int)nkv, 0.0f, Sh, q1);
                for (int i = 0; i < nt; i++) {
                    const int t = q0 + i;
                    float *s = Sh + (int64_t)i * q1, *p = P + (int64_t)i * q1;
                    float mx = -INFINITY, sum = 0.0f;
#pragma omp simd reduction(max : mx)
                    for (int j = 0; j <= t; j++) mx = s[j] > mx ? s[j] : mx;
#pragma omp simd reduction(+ : sum)
                    for (int j = 0; j <= t; j++) sum += (s[j] = fast_expf(s[j] - mx));
                    const float inv = 1.0f / sum, inv_h = 1.0f / Hq;
#pragma omp simd
                    for (int j = 0; j <= t; j++) p[j] += (s[j] *= inv) * inv_h;
                }
            }
            for (int b0 = q0; b0 < q1; b0 += bsel) {
                const int b1 = b0 + bsel < q1 ? b0 + bsel : q1;
                int n_sel;
                if (given_sel) {  // supports chosen elsewhere (the indexer)
                    n_sel = given_n[b0 / bsel];
                    memcpy(sel, given_sel + (int64_t)(b0 / bsel) * topk, sizeof(int) * (size_t)n_sel);
                } else if (bsel == 1) {
                    n_sel = topk_support(sel, P + (int64_t)(b0 - q0) * q1, b0 + 1, topk);
                } else {
                    memset(A, 0, sizeof(float) * (size_t)b1);
                    for (int t = b0; t < b1; t++) {
                        const float *p = P + (int64_t)(t - q0) * q1;
                        for (int j = 0; j <= t; j++) A[j] += p[j];
                    }
                    n_sel = topk_support(sel, A, b1, topk);
                }
                for (int t = b0; t < b1; t++) {
                    const float *p = P + (int64_t)(t - q0) * q1;
                    // Support of query t: the block's keys that are ≤ t (sel is sorted).
                    int n = 0;
                    while (n < n_sel && sel[n] <= t) n++;
                    const int *keys = sel, self[1] = {t};
                    if (n == 0) keys = self, n = 1;
                    if (uni) n = hybrid_union(uni, keys, n, t, recent, sinks), keys = uni;
                    if (ub) {  // this query's keys into its block's union
                        if (t % ub == 0) stamp++, u_n = 0;
                        for (int i = 0; i < n; i++)
                            if (mark[keys[i]] != stamp) mark[keys[i]] = stamp, u_n++;
                        if (t % ub == ub - 1 || t == T - 1) u_keys += u_n, u_blocks += 1;
                    }
                    if (recall) {
                        float mass = 0.0f;
                        for (int i = 0; i < n; i++) mass += p[keys[i]];
                        recall[t] += mass;
                    }
                    if (support) support[t] += (float)n;
                    for (int h = 0; h < Hq; h++) {
                        // The softmax restricted to the support is a_{h,t} renormalised over it.
                        const float *a = S + h * hs + (int64_t)(t - q0) * q1;
                        float sum = 0.0f;
                        for (int i = 0; i < n; i++) sum += (w[i] = a[keys[i]]);
                        if (!(sum > 1e-30f)) support_softmax(w, q + t * nq + (int64_t)h * dh,
                                                             k + (int64_t)(h / G) * dh, keys, n, dh, nkv, scale, &sum);
                        const float *vb = v + (int64_t)(h / G) * dh;
                        float *o = out + t * nq + (int64_t)h * dh;
                        for (int c = 0; c < dh; c++) o[c] = 0.0f;
                        const float inv = 1.0f / sum;
                        for (int i = 0; i < n; i++) {
                            const float *vv = vb + keys[i] * nkv, wi = w[i] * inv;
#pragma omp simd
                            for (int c = 0; c < dh; c++) o[c] += wi * vv[c];
                        }
                    }
                }
            }
        }
        free(P), free(S), free(A), free(w), free(sel), free(uni), free(mark);
    }
    openblas_set_num_threads(blas_threads);
    if (ub) uni->keys += u_keys, uni->blocks += u_blocks;
}
