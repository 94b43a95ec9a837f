// test_gpu_ttft.c: the GPU's time-to-first-token pass (fwd_cuda_ttft, also the
// prefill of greedy decoding) against the last row of the whole pass
// (fwd_cuda_hidden, then fwd_cuda_lm_head). The first carries its last layer on
// for the last row chunk alone (o-projection, MLP, final norm of the last row),
// and a block-shared indexer there selects and attends for those rows' blocks
// alone; the logits must be the whole pass's bits, not merely close. For a
// model folder and its ids file, in fp32 and bf16, the first P ids:
//   dense; the oracle per query and block-shared; a random indexer (d_index 64)
//   per query and block-shared (with head sizes 64 / 128 / 256, the bf16 pass's
//   block-shared indexer is the overlapped selection and attention of
//   indexer_select_blocks_overlap_cuda).
// Run it with SPINDLE_ROW_CHUNK smaller than P so that the last layer's rows are
// cut (ctest does); the row chunk in use is printed. It sets SPINDLE_TTFT_LAST_CHUNK=1
// and SPINDLE_ATTEND_OVERLAP=3 itself (both opt-in while they are measured).
// Usage: test_gpu_ttft MODEL_DIR IDS_FILE P. Exit 0 pass, 1 fail, 77 (skipped)
// without a usable GPU or in a build without CUDA (SPINDLE_REQUIRE_GPU=1: fail).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "forward.h"
#include "forward_cuda.h"
#include "ids.h"
#include "indexer.h"
#include "model.h"
#include "ops.h"
#include "ops_cuda.h"
#include "test_model.h"

static void check(FwdCuda *f, const Model *m, const int32_t *ids, int P, const ForwardOpts *o, const char *what) {
    const int V = m->cfg.vocab, H = m->cfg.hidden;
    float *hidden = malloc(sizeof(float) * (size_t)P * H), *whole = malloc(sizeof(float) * (size_t)V);
    float *first = malloc(sizeof(float) * (size_t)V);
    if (!hidden || !whole || !first) abort();
    fwd_cuda_hidden(f, ids, P, hidden, o);
    fwd_cuda_lm_head(f, hidden + (size_t)(P - 1) * H, 1, whole);
    fwd_cuda_ttft(f, ids, P, o, first);
    int differ = 0, finite = 1;
    for (int j = 0; j < V; j++) {
        differ += memcmp(&whole[j], &first[j], sizeof(float)) != 0;
        finite &= isfinite(first[j]);
    }
    printf("%-40s %d of %d logits differ from the whole pass's last row\n", what, differ, V);
    EXPECT(differ == 0 && finite, "%s: %d of %d logits differ from the whole pass's last row (finite: %d)", what,
           differ, V, finite);
    free(hidden), free(whole), free(first);
}

int main(int argc, char **argv) {
    blas_ensure_core(argv);
    if (argc != 4) {
        fprintf(stderr, "usage: test_gpu_ttft MODEL_DIR IDS_FILE P\n");
        return 2;
    }
    const char *req = getenv("SPINDLE_REQUIRE_GPU");
    const int require = req && !strcmp(req, "1");
    char why[256];
    if (!cuda_available(why, sizeof why)) {
        printf("%s: no usable GPU (%s)\n", require ? "FAIL" : "skipped", why);
        return require ? 1 : 77;
    }
    Status st;
    Model m;
    int32_t *ids;
    size_t n_ids;
    if (load_model_and_ids(&m, argv[1], argv[2], &ids, &n_ids)) return 1;
    const int P = atoi(argv[3]);
    if (P < 2 || (size_t)P > n_ids) {
        fprintf(stderr, "test_gpu_ttft: P %d with %zu ids\n", P, n_ids);
        return 2;
    }
    setenv("SPINDLE_TTFT_LAST_CHUNK", "1", 1);
    setenv("SPINDLE_ATTEND_OVERLAP", "3", 1);
    const char *rc = getenv("SPINDLE_ROW_CHUNK");
    printf("%s, %d ids, SPINDLE_ROW_CHUNK=%s\n", argv[1], P, rc ? rc : "(unset: one chunk)");
    IndexerSet set = random_indexer_set(&m, 64, 16, 11);  // d_index 64: the bf16 block kernel takes it
    const int k = P / 4 > 1 ? P / 4 : 1;
    const Sparsity per_query = {.topk = k, .bsel = 1}, blocks = {.topk = k, .bsel = 16};
    for (int prec = 0; prec < 2; prec++) {
        FwdCuda *f;
        if (fwd_cuda_upload(&m, prec ? FWD_BF16 : FWD_FP32, &f, &st)) {
            fprintf(stderr, "%s\n", st.msg);
            return 1;
        }
        char what[80];
        const char *pn = prec ? "bf16" : "fp32";
        snprintf(what, sizeof what, "%s dense", pn);
        check(f, &m, ids, P, NULL, what);
        snprintf(what, sizeof what, "%s oracle k %d per query", pn, k);
        check(f, &m, ids, P, &(ForwardOpts){.sparse = &per_query}, what);
        snprintf(what, sizeof what, "%s oracle k %d b_sel 16", pn, k);
        check(f, &m, ids, P, &(ForwardOpts){.sparse = &blocks}, what);
        snprintf(what, sizeof what, "%s indexer k %d per query", pn, k);
        check(f, &m, ids, P, &(ForwardOpts){.sparse = &per_query, .indexer = &set}, what);
        snprintf(what, sizeof what, "%s indexer k %d b_sel 16", pn, k);
        check(f, &m, ids, P, &(ForwardOpts){.sparse = &blocks, .indexer = &set}, what);
        fwd_cuda_free(f);
    }
    random_indexer_free(&set);
    free(ids);
    model_free(&m);
    printf("test_gpu_ttft: %s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
