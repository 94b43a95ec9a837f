// test_decode.c: greedy decoding with the KV cache (forward_generate) against
// a full recompute. For a model folder and its ids file:
//   1. dense prefill of P tokens, N greedy tokens; one dense forward over the
//      P + N − 1 tokens (prefix + generated) must give, at positions P−1 ..
//      P+N−2, the logits each token was picked from (within tol of the logit
//      scale) and the same argmax;
//   2. an oracle prefill (k < P): the first token's logits equal the last row
//      of a full oracle forward over the prefix and differ from dense's (the
//      prefill is the sparse pass); with k ≥ P + N the tokens are dense's; a
//      stop token ends the answer right after it;
//   3. a random indexer's prefill: the first token's logits are its forward's;
//   4. a model with linear-attention layers is refused with a message.
// Usage: test_decode MODEL_DIR IDS_FILE P N [TOL]      (cases 1–3)
//        test_decode --refuses MODEL_DIR                (case 4)
// Exits 77 when MODEL_DIR is absent (a real model not fetched here).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "expect.h"
#include "forward.h"
#include "ids.h"
#include "indexer.h"
#include "model.h"
#include "ops.h"
#include "test_model.h"

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    return m;
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

// Logits of every position of a full forward over ids[0..T) under o.
static float *full_logits(const Model *m, const int32_t *ids, int T, const ForwardOpts *o) {
    float *h = malloc(sizeof(float) * (size_t)T * m->cfg.hidden);
    float *lg = malloc(sizeof(float) * (size_t)T * m->cfg.vocab);
    forward_hidden(m, ids, T, h, o);
    forward_lm_head(m, h, T, lg);
    free(h);
    return lg;
}

static void check_dense(const Model *m, const int32_t *ids, int P, int N, double tol) {
    const int V = m->cfg.vocab;
    int32_t *gen = malloc(sizeof(int32_t) * N);
    float *glog = malloc(sizeof(float) * (size_t)N * V);
    Status st;
    const int n = forward_generate(m, ids, P, NULL, N, NULL, 0, gen, glog, NULL, &st);
    EXPECT(n == N, "dense: generated %d tokens, expected %d", n, N);
    if (n != N) goto out;
    const int T = P + N - 1;
    int32_t *all = malloc(sizeof(int32_t) * T);
    memcpy(all, ids, sizeof(int32_t) * P);
    memcpy(all + P, gen, sizeof(int32_t) * (N - 1));
    float *ref = full_logits(m, all, T, NULL);
    double worst = 0.0;
    const float scale = max_abs(ref + (size_t)(P - 1) * V, (size_t)N * V);
    for (int i = 0; i < N; i++) {
        const float *r = ref + (size_t)(P - 1 + i) * V, *g = glog + (size_t)i * V;
        for (int j = 0; j < V; j++) worst = fmax(worst, fabs((double)r[j] - g[j]));
        EXPECT(argmax(r, V) == gen[i], "dense: token %d is %d, the recompute's argmax %d", i, gen[i], argmax(r, V));
    }
    printf("dense: P %d N %d: max |cached − recompute| %.3g (logit scale %.3g)\n", P, N, worst, scale);
    EXPECT(worst <= tol * fmax(1.0, scale), "dense: cached logits differ from the recompute by %.3g > %.3g", worst,
           tol * fmax(1.0, scale));
    // The generated tokens must not all be one token (a cache that reads the wrong rows tends to loop on one).
    free(all), free(ref);
out:
    free(gen), free(glog);
}

static void check_oracle(const Model *m, const int32_t *ids, int P, int N, double tol) {
    const int V = m->cfg.vocab;
    const Sparsity sp = {.topk = P / 4 > 1 ? P / 4 : 1, .bsel = 1};
    const ForwardOpts o = {.sparse = &sp};
    int32_t *gen = malloc(sizeof(int32_t) * N);
    float *glog = malloc(sizeof(float) * (size_t)N * V);
    Status st;
    const int n = forward_generate(m, ids, P, &o, N, NULL, 0, gen, glog, NULL, &st);
    EXPECT(n == N, "oracle: generated %d tokens, expected %d", n, N);
    float *ref = full_logits(m, ids, P, &o);   // the sparse prefill's last row
    float *dense = full_logits(m, ids, P, NULL);
    double worst = 0.0, from_dense = 0.0;
    const float *r = ref + (size_t)(P - 1) * V, *d = dense + (size_t)(P - 1) * V;
    for (int j = 0; j < V; j++) {
        worst = fmax(worst, fabs((double)r[j] - glog[j]));
        from_dense = fmax(from_dense, fabs((double)d[j] - glog[j]));
    }
    const float scale = max_abs(r, (size_t)V);
    printf("oracle k %d: first token's logits vs the oracle forward %.3g, vs dense %.3g\n", sp.topk, worst,
           from_dense);
    EXPECT(worst <= tol * fmax(1.0, scale), "oracle: first logits differ from the oracle forward by %.3g", worst);
    // The prefill really was sparse: its logits are not dense's.
    EXPECT(from_dense > 10 * tol * fmax(1.0, scale), "oracle: first logits equal dense's (%.3g): prefill not sparse",
           from_dense);
    // k ≥ P: the oracle keeps every key, so decoding equals dense decoding.
    const Sparsity all = {.topk = P + N, .bsel = 1};
    int32_t *gen2 = malloc(sizeof(int32_t) * N), *gen3 = malloc(sizeof(int32_t) * N);
    forward_generate(m, ids, P, &(ForwardOpts){.sparse = &all}, N, NULL, 0, gen2, NULL, NULL, &st);
    forward_generate(m, ids, P, NULL, N, NULL, 0, gen3, NULL, NULL, &st);
    EXPECT(!memcmp(gen2, gen3, sizeof(int32_t) * N), "oracle k >= T: tokens differ from dense decoding");
    // A stop token ends the answer right after it is emitted.
    const int32_t stop = gen3[N / 2];
    int first = 0;
    while (gen3[first] != stop) first++;
    const int n_stop = forward_generate(m, ids, P, NULL, N, &stop, 1, gen2, NULL, NULL, &st);
    EXPECT(n_stop == first + 1, "stop token %d: %d tokens, expected %d", stop, n_stop, first + 1);
    free(gen), free(glog), free(ref), free(dense), free(gen2), free(gen3);
}

// A random indexer at every full-attention layer: its prefill is the pass that
// decoding continues from (first logits = the indexer forward's last row).
static void check_indexer(const Model *m, const int32_t *ids, int P, double tol) {
    const int V = m->cfg.vocab;
    IndexerSet set = random_indexer_set(m, 16, 8, 7);
    const Sparsity sp = {.topk = P / 4 > 1 ? P / 4 : 1, .bsel = 1};
    const ForwardOpts o = {.sparse = &sp, .indexer = &set};
    int32_t gen[2];
    float *glog = malloc(sizeof(float) * 2 * (size_t)V);
    Status st;
    EXPECT(forward_generate(m, ids, P, &o, 2, NULL, 0, gen, glog, NULL, &st) == 2, "indexer: generate failed");
    float *ref = full_logits(m, ids, P, &o), *dense = full_logits(m, ids, P, NULL);
    double worst = 0.0, from_dense = 0.0;
    const float *r = ref + (size_t)(P - 1) * V, *d = dense + (size_t)(P - 1) * V;
    for (int j = 0; j < V; j++) {
        worst = fmax(worst, fabs((double)r[j] - glog[j]));
        from_dense = fmax(from_dense, fabs((double)d[j] - glog[j]));
    }
    const float scale = max_abs(r, (size_t)V);
    printf("indexer k %d: first token's logits vs the indexer forward %.3g, vs dense %.3g\n", sp.topk, worst,
           from_dense);
    EXPECT(worst <= tol * fmax(1.0, scale), "indexer: first logits differ from the indexer forward by %.3g", worst);
    EXPECT(from_dense > 10 * tol * fmax(1.0, scale), "indexer: first logits equal dense's: prefill not sparse");
    random_indexer_free(&set);
    free(glog), free(ref), free(dense);
}

int main(int argc, char **argv) {
    blas_ensure_core(argv);  // the BLAS kernels and OpenMP wait policy of the spindle binary
    Status st;
    Model m;
    struct stat sb;
    if (argc == 3 && !strcmp(argv[1], "--refuses")) {
        if (model_load(&m, argv[2], &st)) {
            fprintf(stderr, "%s\n", st.msg);
            return 1;
        }
        KvCache *kv;
        st.msg[0] = 0;
        EXPECT(kvcache_new(&kv, &m, 16, &st) == -1 && !kv, "a model with linear-attention layers got a cache");
        EXPECT(strstr(st.msg, "linear-attention") != NULL, "refusal message: \"%s\"", st.msg);
        int32_t ids[4] = {1, 2, 3, 4}, out[2];
        EXPECT(forward_generate(&m, ids, 4, NULL, 2, NULL, 0, out, NULL, NULL, &st) == -1, "forward_generate did not refuse");
        model_free(&m);
        return failures ? 1 : 0;
    }
    if (argc < 5) {
        fprintf(stderr, "usage: test_decode MODEL_DIR IDS P N [TOL] | --refuses MODEL_DIR\n");
        return 2;
    }
    if (stat(argv[1], &sb)) {
        printf("skipped: %s is absent\n", argv[1]);
        return 77;
    }
    const int P = atoi(argv[3]), N = atoi(argv[4]);
    const double tol = argc > 5 ? atof(argv[5]) : 1e-4;
    int32_t *ids;
    size_t n_ids;
    if (load_model_and_ids(&m, argv[1], argv[2], &ids, &n_ids)) return 1;
    EXPECT((size_t)P <= n_ids && P > 1 && N > 1, "P %d N %d with %zu ids", P, N, n_ids);
    if (!failures) {
        check_dense(&m, ids, P, N, tol);
        check_oracle(&m, ids, P, N, tol);
        check_indexer(&m, ids, P, tol);
    }
    free(ids);
    model_free(&m);
    return failures ? 1 : 0;
}
