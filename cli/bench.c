// bench.c: `spindle bench` — GPU timings (docs/performance.md): per-kernel times of one
// layer (dense attention, indexer score + top-k, sparse attention, oracle
// selection, GEMMs, the fused distillation step) and the time to first token
// of a whole model (dense, indexer per query, indexer block-shared, oracle),
// for a checkpoint or a synthetic random-weight model by name, at each --ctx.
//
// Timing: CUDA events around each call on the default stream, one untimed
// warm-up call (it also builds cuBLAS/cuDNN plans for the shape), then the
// median of repeats chosen so each measurement takes about a second (at least
// one). Inputs are random (uniform, not zeros). Memory: the peak of spindle's
// own device allocations (kernels/ops_cuda.h: cuBLAS and cuDNN workspaces, and
// what the stream-ordered pool keeps after a free, not counted).
// Results: JSON (schema "spindle-bench/1", one object per measurement) and a
// table on stdout. scripts/bench-report.py sets them against the anchors.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backbone.h"
#include "cli_util.h"
#include "commands.h"
#include "export.h"
#include "fileio.h"
#include "indexer.h"
#include "model.h"
#include "progress.h"

#define CMD "bench"
#define SYNTHETIC_NAMES "qwen3-8b, qwen3-1.7b, qwen2.5-1.5b, smollm2-135m, qwen3.5-9b, qwen3.5-0.8b"

// The flags, one list for both builds (a CPU build still answers --help).
#define BENCH_FLAGS \
    { \
        {"--model", 1, "checkpoint folder (or --synthetic)", NULL}, \
        {"--synthetic", 1, "random-weight model by name: " SYNTHETIC_NAMES, NULL}, \
        {"--ctx", 1, "lengths, comma-separated (e.g. 8192,32768,131072)", NULL}, \
        {"--k", 1, "keys kept per support (default 2048); a comma list times the TTFT runs at each (the kernels " \
                   "at the first)", NULL}, \
        {"--bsel", 1, "queries per shared support for the block-shared runs (default 64); a comma list times the " \
                      "block-shared TTFT runs at each (b_sel 1 among several is the per-query runs')", NULL}, \
        {"--device", 1, "cuda (the only device bench runs on)", NULL}, \
        {"--json", 1, "results as JSON", NULL}, \
        {"--layers", 1, "run only the first N layers of the model in the TTFT and --train-online runs", NULL}, \
        {"--no-ttft", 0, "kernels only", NULL}, \
        {"--no-kernels", 0, "TTFT only", NULL}, \
        {"--ttft", 1, "which TTFT runs, comma-separated: dense, indexer, indexer_block, oracle (default: these four), " \
                      "indexer_union (per-query supports run as block unions on tensor cores), indexer_refine " \
                      "(two-stage supports, run the same way), oracle_block (the oracle block-shared) and " \
                      "oracle_union (the oracle per query, run as block unions: what eval --exec-block runs; " \
                      "the oracle runs up to --max-oracle-ttft-ctx)", NULL}, \
        {"--max-reps", 1, "at most this many timed repeats per kernel (default 20)", NULL}, \
        {"--ttft-reps", 1, "timed repeats per TTFT (default 3; 1 past 64K)", NULL}, \
        {"--ttft-profile", 0, "after each TTFT run's timed passes, one more timed op by op (a sync after each op): " \
                              "the supports' selection, the attention over them, GEMMs and the rest", NULL}, \
        {"--max-fp32-ctx", 1, "longest ctx for our fp32 dense kernel (default 32768)", NULL}, \
        {"--max-oracle-ctx", 1, "longest ctx for the oracle-selection kernel (default 32768)", NULL}, \
        {"--max-train-ctx", 1, "longest ctx for the training-step kernel (default 32768)", NULL}, \
        {"--max-oracle-ttft-ctx", 1, "longest ctx for the oracle TTFT (default 8192)", NULL}, \
        {"--ttft-warmup-ctx", 1, "warm up a TTFT run on at most this many tokens (default: the run's own ctx)", NULL}, \
        {"--indexer-scores", 1, "how the TTFT runs' indexer scores keys: fp32, tf32 or bf16 (default: bf16's, i.e. " \
                                "tf32 per query and fused bf16 block sums block-shared)", NULL}, \
        {"--train-online", 0, "online training throughput instead of kernels and TTFT: the bf16 backbone pass with " \
                              "every full-attention layer's indexer step inside it, split into backbone forward, " \
                              "teacher statistics, loss + gradients and optimizer", NULL}, \
        {"--query-frac", 1, "with --train-online: fraction of positions >= 16 sampled per step (default 0.25, as " \
                            "spindle train)", NULL}, \
        {"--teacher-precision", 1, "with --train-online: fp32 (default) or bf16, as spindle train", NULL}, \
        {"--train-tokens", 1, "with --train-online: tokens of the training run whose GPU-hours are reported " \
                              "(default 2.1e9, DeepSeek-V3.2's indexer warm-up)", NULL}, \
        {"--union-block", 1, "queries per block of the indexer_union, oracle_union and indexer_refine TTFT runs " \
                             "(default 16)", NULL}, \
        {"--refine", 1, "candidates per block of --bsel queries in the indexer_refine TTFT run (default 4 x --k)", NULL}, \
        {"--decode", 1, "also greedy decoding after a dense prefill at each ctx (what eval --tasks-file runs per task): " \
                        "the prefill of a prompt length not run before, the same again, and N dense cached steps " \
                        "(ms per token, then split op by op)", NULL}, \
    }
static const char *const BENCH_REQUIRED[] = {"--ctx", "--json", NULL};
#define BENCH_NO_CUDA "spindle " CMD ": built without CUDA; bench needs a build configured with -DSPINDLE_CUDA=ON"

// The TTFT runs, in order; --ttft picks a subset by these names.
static const char *const TTFT_RUNS[] = {"dense", "indexer", "indexer_block", "oracle", "indexer_union",
                                        "indexer_refine", "oracle_block", "oracle_union"};
enum { N_TTFT_RUNS = 8, N_TTFT_DEFAULT = 4 };  // the runs after the first four only when named
// The synthetic models by name (synthetic_config).
static const char *const SYNTHETIC[] = {"qwen3-8b", "qwen3-1.7b", "qwen2.5-1.5b", "smollm2-135m",
                                          "qwen3.5-9b", "qwen3.5-0.8b"};
enum { N_SYNTHETIC = 6 };

typedef struct {
    const char *model_dir, *synth;
    int ctxs[64], n_ctx, n_layers, max_reps, ttft_reps;
    int ks[64], n_k, bsels[64], n_bsel;  // --k, --bsel as lists (the kernels run at the first of each)
    int max_fp32, max_oracle, max_train, max_oracle_ttft;
    int warmup_ctx;  // 0: warm each TTFT run up at its own ctx
    int union_block; // queries per block of the indexer_union and indexer_refine runs
    int refine;      // candidates per block of the indexer_refine run (0: 4·k)
    int ix_scores;  // FwdIndexerScores of the TTFT runs (model/forward.h)
    int want_ttft[N_TTFT_RUNS];
    int train_online, bf16_teacher;  // --train-online and its teacher precision
    double query_frac, train_tokens;
    int decode;  // --decode: cached steps after the dense prefill (0: no decoding runs)
    int ttft_profile;  // --ttft-profile: each TTFT run once more, op by op
} BenchArgs;

// Checks every flag value (the same on CPU and CUDA builds). Returns -1 after
// a message: a usage error.
static int bench_args(const Flag *flags, int nf, BenchArgs *a) {
    a->model_dir = args_get(flags, nf, "--model"), a->synth = args_get(flags, nf, "--synthetic");
    if (!a->model_dir == !a->synth) {
        fprintf(stderr, "spindle " CMD ": give exactly one of --model or --synthetic\n");
        return -1;
    }
    const char *dev = args_get(flags, nf, "--device"), *v0;
    if (dev && strcmp(dev, "cuda")) {
        fprintf(stderr, "spindle " CMD ": --device must be cuda (got \"%s\"): bench times the GPU twin\n", dev);
        return -1;
    }
    for (int r = 0; r < N_TTFT_RUNS; r++) a->want_ttft[r] = r < N_TTFT_DEFAULT;
    if ((v0 = args_get(flags, nf, "--ttft")) && cli_names(CMD, "--ttft", v0, TTFT_RUNS, N_TTFT_RUNS, a->want_ttft))
        return -1;
    a->union_block = 16, a->refine = 0;
    if ((v0 = args_get(flags, nf, "--union-block")) && cli_positive(CMD, "--union-block", v0, &a->union_block))
        return -1;
    if ((v0 = args_get(flags, nf, "--refine")) && cli_positive(CMD, "--refine", v0, &a->refine)) return -1;
    a->ttft_profile = args_get(flags, nf, "--ttft-profile") != NULL;
    a->decode = 0;
    if ((v0 = args_get(flags, nf, "--decode")) && cli_positive(CMD, "--decode", v0, &a->decode)) return -1;
    if (a->decode && (args_get(flags, nf, "--no-ttft") || args_get(flags, nf, "--train-online"))) {
        fprintf(stderr, "spindle " CMD ": --decode runs with the TTFT runs (not with --no-ttft or --train-online)\n");
        return -1;
    }
    a->ks[0] = 2048, a->n_k = 1, a->bsels[0] = 64, a->n_bsel = 1, a->n_layers = 0;
    a->max_fp32 = 32768, a->max_oracle = 32768, a->max_train = 32768, a->max_oracle_ttft = 8192, a->warmup_ctx = 0;
    long long reps_max = 20, reps_ttft = 3;  // repeats: at most 60 per kernel, 16 per TTFT (all[16])
    const char *v;
    if (cli_list(CMD, "--ctx", args_get(flags, nf, "--ctx"), 1, a->ctxs, &a->n_ctx) ||
        ((v = args_get(flags, nf, "--k")) && cli_list(CMD, "--k", v, 1, a->ks, &a->n_k)) ||
        ((v = args_get(flags, nf, "--bsel")) && cli_list(CMD, "--bsel", v, 1, a->bsels, &a->n_bsel)) ||
        ((v = args_get(flags, nf, "--layers")) && cli_positive(CMD, "--layers", v, &a->n_layers)) ||
        ((v = args_get(flags, nf, "--max-reps")) && cli_int(CMD, "--max-reps", v, 1, 60, &reps_max)) ||
        ((v = args_get(flags, nf, "--ttft-reps")) && cli_int(CMD, "--ttft-reps", v, 1, 16, &reps_ttft)) ||
        ((v = args_get(flags, nf, "--max-fp32-ctx")) && cli_positive(CMD, "--max-fp32-ctx", v, &a->max_fp32)) ||
        ((v = args_get(flags, nf, "--max-oracle-ctx")) && cli_positive(CMD, "--max-oracle-ctx", v, &a->max_oracle)) ||
        ((v = args_get(flags, nf, "--max-train-ctx")) && cli_positive(CMD, "--max-train-ctx", v, &a->max_train)) ||
        ((v = args_get(flags, nf, "--max-oracle-ttft-ctx")) &&
         cli_positive(CMD, "--max-oracle-ttft-ctx", v, &a->max_oracle_ttft)) ||
        ((v = args_get(flags, nf, "--ttft-warmup-ctx")) && cli_positive(CMD, "--ttft-warmup-ctx", v, &a->warmup_ctx)))
        return -1;
    if (cli_indexer_scores(CMD, args_get(flags, nf, "--indexer-scores"), &a->ix_scores)) return -1;
    for (int i = 0; i < a->n_k; i++)
        if (a->refine && a->refine < a->ks[i]) {
            fprintf(stderr, "spindle " CMD ": --refine %d: the candidates per block must be at least --k (%d)\n",
                    a->refine, a->ks[i]);
            return -1;
        }
    a->train_online = args_get(flags, nf, "--train-online") != NULL;
    a->query_frac = 0.25, a->train_tokens = 2.1e9, a->bf16_teacher = 0;
    const char *qf = args_get(flags, nf, "--query-frac"), *tp = args_get(flags, nf, "--teacher-precision");
    const char *tt = args_get(flags, nf, "--train-tokens");
    if ((qf || tp || tt) && !a->train_online) {
        fprintf(stderr, "spindle " CMD ": --query-frac, --teacher-precision and --train-tokens go with --train-online\n");
        return -1;
    }
    if ((qf && cli_double(CMD, "--query-frac", qf, 1e-6, 1, &a->query_frac)) ||
        (tt && cli_double(CMD, "--train-tokens", tt, 1, 1e15, &a->train_tokens)))
        return -1;
    if (tp && strcmp(tp, "fp32") && strcmp(tp, "bf16")) {
        fprintf(stderr, "spindle " CMD ": --teacher-precision must be fp32 or bf16 (got \"%s\")\n", tp);
        return -1;
    }
    a->bf16_teacher = tp && !strcmp(tp, "bf16");
    a->max_reps = (int)reps_max, a->ttft_reps = (int)reps_ttft;
    int max_ctx = 0;
    for (int i = 0; i < a->n_ctx; i++) max_ctx = a->ctxs[i] > max_ctx ? a->ctxs[i] : max_ctx;
    for (int i = 0; i < a->n_bsel; i++)
        if (a->bsels[i] > max_ctx) {
            fprintf(stderr, "spindle " CMD ": --bsel %d is longer than the longest --ctx %d\n", a->bsels[i], max_ctx);
            return -1;
        }
    int known = !a->synth;
    for (int i = 0; i < N_SYNTHETIC && !known; i++) known = !strcmp(a->synth, SYNTHETIC[i]);
    if (!known) {
        fprintf(stderr, "spindle " CMD ": --synthetic must be one of " SYNTHETIC_NAMES " (got \"%s\")\n",
                a->synth);
        return -1;
    }
    return 0;
}

#ifndef SPINDLE_HAVE_CUDA
// The flags are parsed as on a CUDA build (so --help lists them and usage
// errors exit 2); then the command says it needs CUDA.
int cmd_bench(int argc, char **argv) {
    Flag flags[] = BENCH_FLAGS;
    const int rc = cli_parse_ex(argc, argv, flags, N_FLAGS(flags), CMD, BENCH_REQUIRED, BENCH_NO_CUDA ".");
    if (rc) return rc;
    BenchArgs a;
    if (bench_args(flags, N_FLAGS(flags), &a)) return 2;
    fprintf(stderr, BENCH_NO_CUDA "\n");
    return 1;
}
#else
#include "forward_cuda.h"
#include "indexer_cuda.h"
#include "ops_cuda.h"
#include "oracle_cuda.h"
#include "sdpa_cuda.h"
#include "rng.h"
#include "synthetic.h"
#include "train_gpu.h"

extern char **environ;  // POSIX: the process's environment, for the SPINDLE_* knobs a run was given

// ---- timing ----------------------------------------------------------------------------

typedef struct {
    cJSON *results;
    int max_reps;
    cJSON *env;        // written with the results
    const char *json;  // rewritten (atomically) after every measurement, so a
                       // run cut short keeps what it measured
    Progress pr;       // one item per measurement (base/progress.h)
    int64_t done;
} Bench;

static void save(const Bench *b) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "spindle-bench/1");
    cJSON_AddItemReferenceToObject(root, "env", b->env);
    cJSON_AddItemReferenceToObject(root, "results", b->results);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    Status st;
    if (atomic_write_file(b->json, text, strlen(text), &st)) fprintf(stderr, "spindle " CMD ": %s\n", st.msg);
    free(text);
}

// One warm-up call, then the median of reps calls (reps so that the timed work
// is about a second: 1..max_reps). Returns the median; *reps and all[] filled.
static double measure(const Bench *b, void (*fn)(void *), void *ctx, double *all, int *reps) {
    const double first = cuda_time_ms(fn, ctx, 0, 1, NULL);
    int n = first > 0 ? (int)(1000.0 / first) : b->max_reps;
    n = n < 1 ? 1 : n > b->max_reps ? b->max_reps : n;
    *reps = n;
    return cuda_time_ms(fn, ctx, 0, n, all);
}

// Appends one measurement (tflops ≤ 0: not applicable) and prints its line.
static void record(Bench *b, const char *name, int T, double ms, const double *all, int reps, double flops,
                   int k, int bsel, const char *notes) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddNumberToObject(o, "ctx", T);
    cJSON_AddNumberToObject(o, "ms_median", ms);
    cJSON_AddItemToObject(o, "ms_all", cJSON_CreateDoubleArray(all, reps));
    cJSON_AddNumberToObject(o, "reps", reps);
    const double tf = flops > 0 && ms > 0 ? flops / (ms * 1e9) : 0;
    if (tf > 0) cJSON_AddNumberToObject(o, "tflops", tf);
    else cJSON_AddNullToObject(o, "tflops");
    cJSON_AddNumberToObject(o, "peak_mem_bytes", (double)cuda_mem_peak());
    cJSON_AddNumberToObject(o, "k", k);
    cJSON_AddNumberToObject(o, "bsel", bsel);
    cJSON_AddStringToObject(o, "notes", notes ? notes : "");
    cJSON_AddNullToObject(o, "error");
    cJSON_AddItemToArray(b->results, o);
    printf("%-24s %7d %10.3f ms %9s %8.2f GB  %s\n", name, T, ms, tf > 0 ? "" : "-", cuda_mem_peak() / 1e9,
           notes ? notes : "");
    if (tf > 0) printf("%-24s %7s %10s    %6.1f TFLOP/s\n", "", "", "", tf);
    fflush(stdout);
    save(b);
    progress_update(&b->pr, ++b->done, "%s ctx %d: %.3f ms", name, T, ms);
}

static void record_skip(Bench *b, const char *name, int T, const char *why) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddNumberToObject(o, "ctx", T);
    cJSON_AddNullToObject(o, "ms_median");
    cJSON_AddStringToObject(o, "error", why);
    cJSON_AddItemToArray(b->results, o);
    printf("%-24s %7d  not measured: %s\n", name, T, why);
    save(b);
    progress_update(&b->pr, ++b->done, "%s ctx %d: not measured", name, T);
}

// ---- one layer's kernels -------------------------------------------------------------------

// Keys two supports share: a and b ascending, each up to k keys, −1 after its last.
static int support_common(const int32_t *a, const int32_t *b, int k) {
    int n = 0;
    for (int x = 0, y = 0; x < k && y < k && a[x] >= 0 && b[y] >= 0;) {
        if (a[x] == b[y]) n++, x++, y++;
        else if (a[x] < b[y]) x++;
        else y++;
    }
    return n;
}

// A variant timed beside the default: the environment variable name set to value (NULL: left as it is), its
// earlier value (NULL: unset) returned for env_restore.
static char *env_override(const char *name, const char *value) {
    const char *prev = getenv(name);
    char *saved = prev ? strdup(prev) : NULL;
    if (value) setenv(name, value, 1);
    return saved;
}

static void env_restore(const char *name, char *saved) {
    if (saved) setenv(name, saved, 1);
    else unsetenv(name);
    free(saved);
}

typedef struct {
    const ModelConfig *c;
    int T, k, bsel;
    int bf16_teacher;  // k_train: the teacher's P on tensor cores
    float scale;
    float *q, *k_, *v, *out, *lse, *x, *params, *grads;
    void *qb, *kb, *vb, *ob;
    int32_t *sel, *n_sel, *sel_b, *n_sel_b, *queries;
    IndexerConfig icfg;
    // GEMMs of one layer: 16-bit operands and weights, fp32 out
    void *xh, *ah, *gh, *wq, *wk, *wv, *wo, *wg, *wu, *wd;
    float *gout;
} Layer;

static void k_sdpa(void *p) {
    Layer *L = p;
    attention_forward_bf16_cuda(L->ob, NULL, L->qb, L->kb, L->vb, L->T, L->c->n_heads, L->c->n_kv_heads,
                                L->c->head_dim, L->scale, 0);
}
static void k_sdpa_lse(void *p) {
    Layer *L = p;
    attention_forward_bf16_cuda(L->ob, L->lse, L->qb, L->kb, L->vb, L->T, L->c->n_heads, L->c->n_kv_heads,
                                L->c->head_dim, L->scale, 0);
}
static void k_att32(void *p) {
    Layer *L = p;
    attention_forward_cuda(L->out, NULL, L->q, L->k_, L->v, L->T, L->c->n_heads, L->c->n_kv_heads, L->c->head_dim,
                           L->scale, 0);
}
// One greedy decoding step's attention: the last query over a cache of T keys (fp32, as the decoder's).
static void k_att_cached(void *p) {
    Layer *L = p;
    attention_cached_cuda(L->out, L->q, L->k_, L->v, L->T - 1, 1, L->c->n_heads, L->c->n_kv_heads, L->c->head_dim,
                          L->scale, 0);
}
static void k_ix_select(void *p) {
    Layer *L = p;
    indexer_select_cuda(L->sel, L->n_sel, &L->icfg, L->params, L->x, L->T, L->k, 1, IX_SCORES_FP32);
}
static void k_ix_select_tf32(void *p) {
    Layer *L = p;
    indexer_select_cuda(L->sel, L->n_sel, &L->icfg, L->params, L->x, L->T, L->k, 1, IX_SCORES_TF32);
}
// The same with SPINDLE_FUSED_SELECT=1 (set around the measurement): bf16 scores and selection fused.
static void k_ix_select_fused(void *p) {
    Layer *L = p;
    indexer_select_cuda(L->sel, L->n_sel, &L->icfg, L->params, L->x, L->T, L->k, 1, IX_SCORES_BF16);
}
static void k_ix_select_block(void *p) {
    Layer *L = p;
    indexer_select_cuda(L->sel_b, L->n_sel_b, &L->icfg, L->params, L->x, L->T, L->k, L->bsel, IX_SCORES_FP32);
}
static void k_ix_select_block_tf32(void *p) {
    Layer *L = p;
    indexer_select_cuda(L->sel_b, L->n_sel_b, &L->icfg, L->params, L->x, L->T, L->k, L->bsel, IX_SCORES_TF32);
}
static void k_ix_select_block_bf16(void *p) {
    Layer *L = p;
    indexer_select_cuda(L->sel_b, L->n_sel_b, &L->icfg, L->params, L->x, L->T, L->k, L->bsel, IX_SCORES_BF16);
}
static void k_sparse(void *p) {
    Layer *L = p;
    support_attention_cuda(L->out, NULL, NULL, L->q, L->k_, L->v, NULL, L->T, L->c->n_heads, L->c->n_kv_heads,
                           L->c->head_dim, L->scale, L->k, 1, L->sel, L->n_sel);
}
static void k_sparse_tile(void *p) {
    Layer *L = p;
    support_attention_query_tile_cuda(L->out, NULL, NULL, L->q, L->k_, L->v, NULL, L->T, L->c->n_heads,
                                      L->c->n_kv_heads, L->c->head_dim, L->scale, L->k, L->sel, L->n_sel);
}
static void k_sparse_block(void *p) {
    Layer *L = p;
    support_attention_cuda(L->out, NULL, NULL, L->q, L->k_, L->v, NULL, L->T, L->c->n_heads, L->c->n_kv_heads,
                           L->c->head_dim, L->scale, L->k, L->bsel, L->sel_b, L->n_sel_b);
}
static void k_sparse_block_tc(void *p) {
    Layer *L = p;
    support_attention_block_tc_cuda(L->out, L->qb, L->kb, L->vb, L->T, L->c->n_heads, L->c->n_kv_heads,
                                    L->c->head_dim, L->scale, L->k, L->bsel, L->sel_b, L->n_sel_b, DT_F32, NULL);
}
static int sparse_block_wg(Layer *L, int minb) {  // the warpgroup-MMA kernel itself, minb thread blocks an SM
    return support_attention_block_wg_minb_cuda(minb, L->out, DT_F32, L->qb, L->kb, L->vb, L->T, L->c->n_heads,
                                                L->c->n_kv_heads, L->c->head_dim, L->scale, L->k, L->bsel, L->sel_b,
                                                L->n_sel_b);
}
static void k_sparse_block_wg(void *p) { sparse_block_wg(p, 2); }   // the caller checked that it launches
static void k_sparse_block_wg1(void *p) { sparse_block_wg(p, 1); }  // the variant (SPINDLE_SPARSE_WGMMA=2)
static void k_oracle(void *p) {
    Layer *L = p;
    oracle_select_cuda(L->sel, L->n_sel, L->q, L->k_, L->lse, L->T, L->c->n_heads, L->c->n_kv_heads,
                       L->c->head_dim, L->scale, L->k, 1);
}
static void k_oracle_bf16(void *p) {
    Layer *L = p;
    oracle_select_bf16_cuda(L->sel, L->n_sel, L->qb, L->kb, L->lse, L->T, L->c->n_heads, L->c->n_kv_heads,
                            L->c->head_dim, L->scale, L->k, 1);
}
static void k_oracle_bf16_block(void *p) {
    Layer *L = p;
    oracle_select_bf16_cuda(L->sel_b, L->n_sel_b, L->qb, L->kb, L->lse, L->T, L->c->n_heads, L->c->n_kv_heads,
                            L->c->head_dim, L->scale, L->k, L->bsel);
}
static void k_gemms(void *p) {
    Layer *L = p;
    const ModelConfig *c = L->c;
    const int H = c->hidden, I = c->intermediate, nq = c->n_heads * c->head_dim, nkv = c->n_kv_heads * c->head_dim;
    matmul_forward_half_cuda(L->gout, L->xh, L->wq, NULL, L->T, H, nq, HALF_BF16);
    matmul_forward_half_cuda(L->gout, L->xh, L->wk, NULL, L->T, H, nkv, HALF_BF16);
    matmul_forward_half_cuda(L->gout, L->xh, L->wv, NULL, L->T, H, nkv, HALF_BF16);
    matmul_forward_half_cuda(L->gout, L->ah, L->wo, NULL, L->T, nq, H, HALF_BF16);
    matmul_forward_half_cuda(L->gout, L->xh, L->wg, NULL, L->T, H, I, HALF_BF16);
    matmul_forward_half_cuda(L->gout, L->xh, L->wu, NULL, L->T, H, I, HALF_BF16);
    matmul_forward_half_cuda(L->gout, L->gh, L->wd, NULL, L->T, I, H, HALF_BF16);
}
static void k_train(void *p) {
    Layer *L = p;
    cuda_memset(L->grads, 0, sizeof(float) * (size_t)indexer_n_params(&L->icfg));
    indexer_kl_loss_cuda(L->grads, &L->icfg, L->params, L->x, L->q, L->k_, L->lse, L->T, L->c->n_heads,
                         L->c->n_kv_heads, L->c->head_dim, L->scale, L->queries, L->T, L->bf16_teacher);
}

// A random device array of n floats, uniform with sd about sd.
static float *rand_dev(int64_t n, float sd, uint64_t seed) {
    float *d = cuda_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    cuda_fill_uniform(d, n, -1.7320508f * sd, 1.7320508f * sd, seed);
    return d;
}

static void *rand_half(int64_t n, float sd, uint64_t seed) {
    float *f = rand_dev(n, sd, seed);
    void *h = cuda_malloc(2 * (size_t)(n > 0 ? n : 1));
    cuda_f32_to_bf16(h, f, n);
    cuda_sync();
    cuda_free(f);
    return h;
}

// The notes of the oracle pairs' rows, each written with its variant's environment set (v 0: the first kernel,
// 1: the second), so that what it names is what runs.
static void note_oracle_query(char *note, size_t n, const Layer *L, int v) {
    const int Hq = L->c->n_heads, Hkv = L->c->n_kv_heads, dh = L->c->head_dim;
    const char *hs = getenv("SPINDLE_ORACLE_HEADS");
    if (v == 0) {
        const int m = snprintf(note, n, "P from bf16 q, k on tensor cores (mma.sync), lse given, + top-k; each key "
                               "tile over %d warp(s) per 16 rows", oracle_select_tc_key_split(Hq, Hkv, dh, 1));
        if (hs) snprintf(note + m, n - (size_t)m, "; SPINDLE_ORACLE_HEADS=%.20s", hs);
    } else {
        snprintf(note, n, "one warp per 16 rows (SPINDLE_ORACLE_KEY_SPLIT=0), the staged heads over %d warp(s)",
                 oracle_select_tc_warp_heads(Hq, Hkv, dh, 1));
    }
}

static void note_oracle_block(char *note, size_t n, const Layer *L, int v) {
    if (v == 0)
        snprintf(note, n, "block-shared, keys-major: key sums in registers, %d head group(s) of 4 warps, lse given, "
                 "+ top-k", oracle_select_tc_head_groups(L->c->n_heads, L->c->n_kv_heads, L->c->head_dim, L->bsel));
    else
        snprintf(note, n, "block-shared, query-major: column sums through shared memory (SPINDLE_ORACLE_BLOCK_ROWS=1), "
                 "lse given, + top-k");
}

// The oracle's bf16 selection timed twice in one run, by two kernels: per query (block 0) or in blocks of the
// bench's b_sel (block 1), with the environment variable env at value[0] (NULL: as the caller has it) as
// name[0], then at value[1] as name[1]; describe writes each row's note, and the second's also gives the share
// of its selected keys the first selected too (the kernels sum in different orders: the same supports up to
// near-ties at the k-th value). The caller's value of env is restored after.
static void oracle_pair(Bench *b, Layer *L, int block, const char *env, const char *const value[2],
                        const char *const name[2], void (*describe)(char *, size_t, const Layer *, int),
                        double flops) {
    const int T = L->T, k = L->k, bsel = block ? L->bsel : 1;
    const int Hq = L->c->n_heads, Hkv = L->c->n_kv_heads, dh = L->c->head_dim, rows = (T + bsel - 1) / bsel;
    const int64_t n_sel = (int64_t)rows * k;
    char *saved = env_override(env, value[0]);
    int32_t *first = NULL;
    for (int v = 0; v < 2; v++) {
        if (v > 0) setenv(env, value[v], 1);
        if (block && bsel <= 1) {
            record_skip(b, name[v], T, "b_sel 1");
            continue;
        }
        if (!oracle_select_tc_takes(Hq, Hkv, dh, k, bsel)) {  // it would time the fp32 fallback
            record_skip(b, name[v], T, "the tensor-core oracle does not take this shape");
            continue;
        }
        double all[64];
        int reps = 0;
        const double ms = measure(b, block ? k_oracle_bf16_block : k_oracle_bf16, L, all, &reps);
        int32_t *got = xmalloc(sizeof(int32_t) * (size_t)n_sel);
        cuda_to_host(got, block ? L->sel_b : L->sel, sizeof(int32_t) * (size_t)n_sel);
        char note[300];
        describe(note, sizeof note, L, v);
        if (v == 0) {
            first = got;
        } else {
            if (first) {
                int64_t same = 0, n_valid = 0;
                for (int r = 0; r < rows; r++) same += support_common(got + (int64_t)r * k, first + (int64_t)r * k, k);
                for (int64_t i = 0; i < n_sel; i++) n_valid += got[i] >= 0;
                const size_t len = strlen(note);
                snprintf(note + len, sizeof note - len, "; supports %.6f the same as %s's",
                         n_valid ? (double)same / (double)n_valid : 1.0, name[0]);
            }
            free(got);
        }
        record(b, name[v], T, ms, all, reps, flops, k, bsel, note);
    }
    free(first);
    env_restore(env, saved);
}

static void bench_layer(Bench *b, const ModelConfig *c, int T, int k, int bsel, int max_dense_fp32, int max_oracle,
                        int max_train) {
    Layer L = {0};
    L.c = c, L.T = T, L.k = k, L.bsel = bsel, L.scale = (float)c->attn_scale;
    const int Hq = c->n_heads, Hkv = c->n_kv_heads, dh = c->head_dim, H = c->hidden, I = c->intermediate;
    const int64_t nq = (int64_t)T * Hq * dh, nkv = (int64_t)T * Hkv * dh;
    cuda_mem_peak_reset();
    L.q = rand_dev(nq, 1.0f, 11), L.k_ = rand_dev(nkv, 1.0f, 12), L.v = rand_dev(nkv, 1.0f, 13);
    L.out = cuda_malloc(sizeof(float) * (size_t)nq);
    L.lse = cuda_malloc(sizeof(float) * (size_t)T * Hq);
    L.qb = cuda_malloc(2 * (size_t)nq), L.kb = cuda_malloc(2 * (size_t)nkv), L.vb = cuda_malloc(2 * (size_t)nkv);
    L.ob = cuda_malloc(2 * (size_t)nq);
    cuda_f32_to_bf16(L.qb, L.q, nq), cuda_f32_to_bf16(L.kb, L.k_, nkv), cuda_f32_to_bf16(L.vb, L.v, nkv);
    L.x = rand_dev((int64_t)T * H, 1.0f, 14);
    L.icfg = indexer_config_default(H);
    const int64_t np = indexer_n_params(&L.icfg);
    float *ph = xmalloc(sizeof(float) * (size_t)np);
    indexer_init(&L.icfg, ph, 7);
    L.params = cuda_malloc(sizeof(float) * (size_t)np);
    cuda_to_device(L.params, ph, sizeof(float) * (size_t)np);
    free(ph);
    L.grads = cuda_malloc(sizeof(float) * (size_t)np);
    const int rows_b = (T + bsel - 1) / bsel;
    L.sel = cuda_malloc(sizeof(int32_t) * (size_t)T * k), L.n_sel = cuda_malloc(sizeof(int32_t) * (size_t)T);
    L.sel_b = cuda_malloc(sizeof(int32_t) * (size_t)rows_b * k);
    L.n_sel_b = cuda_malloc(sizeof(int32_t) * (size_t)rows_b);
    double all[64];
    int reps;
    char note[160];
    const double att_flops = 2.0 * T * (double)T * dh * Hq;  // causal: 4·T²·d_h·Hq / 2

    double ms = measure(b, k_sdpa, &L, all, &reps);
    record(b, "attention_sdpa_bf16", T, ms, all, reps, att_flops, 0, 0, "cuDNN fused SDPA, bf16, causal GQA");
    ms = measure(b, k_sdpa_lse, &L, all, &reps);
    record(b, "lse_sdpa", T, ms, all, reps, att_flops, 0, 0, "the same with softmax stats (the oracle's lse)");
    if (T <= max_dense_fp32) {
        ms = measure(b, k_att32, &L, all, &reps);
        record(b, "attention_fp32", T, ms, all, reps, att_flops, 0, 0, "our fp32 flash kernel (CUDA cores)");
    } else
        record_skip(b, "attention_fp32", T, "longer than --max-fp32-ctx");
    ms = measure(b, k_att_cached, &L, all, &reps);
    snprintf(note, sizeof note, "one decoding query over a %d-key fp32 cache: %.0f GB/s of K and V", T,
             ms > 0 ? 2.0 * T * Hkv * dh * sizeof(float) / (ms * 1e6) : 0.0);
    record(b, "attention_cached", T, ms, all, reps, 0, 0, 0, note);

    snprintf(note, sizeof note, "d_I %d, d_rope %d, LayerNorm key; projections + scores + top-k", L.icfg.d_index,
             L.icfg.d_rope);
    ms = measure(b, k_ix_select, &L, all, &reps);
    record(b, "indexer_select", T, ms, all, reps, 0, k, 1, note);
    ms = measure(b, k_ix_select_block, &L, all, &reps);
    record(b, "indexer_select_block", T, ms, all, reps, 0, k, bsel, note);
    // TF32 projections and score GEMM: the bf16 forward's per-query selection.
    char note2[320];
    snprintf(note2, sizeof note2, "%s; projections and scores on TF32 tensor cores", note);
    ms = measure(b, k_ix_select_tf32, &L, all, &reps);
    record(b, "indexer_select_tf32", T, ms, all, reps, 0, k, 1, note2);
    // The per-query selection fused with its bf16 scores (no score buffer), and its set overlap with
    // the TF32 selection just made, on up to 1024 evenly spaced rows longer than k. L.sel keeps the
    // fused selection (the sparse attention below runs over it: as many keys per row).
    {
        const int n_cmp = T - k < 1024 ? T - k : 1024;
        int32_t *tf = n_cmp > 0 ? xmalloc(sizeof(int32_t) * (size_t)n_cmp * k) : NULL;
        int32_t *fu = n_cmp > 0 ? xmalloc(sizeof(int32_t) * (size_t)n_cmp * k) : NULL;
        for (int i = 0; i < n_cmp; i++) {
            const int64_t t = k + (int64_t)i * (T - k) / n_cmp;
            cuda_to_host(tf + (size_t)i * k, L.sel + t * k, sizeof(int32_t) * (size_t)k);
        }
        char *saved = env_override("SPINDLE_FUSED_SELECT", "1");
        ms = measure(b, k_ix_select_fused, &L, all, &reps);
        env_restore("SPINDLE_FUSED_SELECT", saved);
        double overlap = 0.0;
        char note3[400];
        for (int i = 0; i < n_cmp; i++) {
            const int64_t t = k + (int64_t)i * (T - k) / n_cmp;
            cuda_to_host(fu + (size_t)i * k, L.sel + t * k, sizeof(int32_t) * (size_t)k);
            overlap += (double)support_common(tf + (size_t)i * k, fu + (size_t)i * k, k) / k;  // k keys each
        }
        if (n_cmp > 0)
            snprintf(note3, sizeof note3, "%s; bf16 scores fused with the selection (SPINDLE_FUSED_SELECT=1), no "
                     "score buffer; mean |fused & tf32| / k %.4f over %d rows", note, overlap / n_cmp, n_cmp);
        else
            snprintf(note3, sizeof note3, "%s; bf16 scores fused with the selection (SPINDLE_FUSED_SELECT=1), no "
                     "score buffer; every row takes every key", note);
        record(b, "indexer_select_fused", T, ms, all, reps, 0, k, 1, note3);
        free(tf), free(fu);
    }
    ms = measure(b, k_ix_select_block_tf32, &L, all, &reps);
    record(b, "indexer_select_block_tf32", T, ms, all, reps, 0, k, bsel, note2);
    // What the bf16 forward's block-shared TTFT uses: fused bf16 block sums, no score buffer.
    snprintf(note2, sizeof note2, "%s; block sums on bf16 tensor cores, no score buffer", note);
    ms = measure(b, k_ix_select_block_bf16, &L, all, &reps);
    record(b, "indexer_select_block_bf16", T, ms, all, reps, 0, k, bsel, note2);
    // The same with the block sums on the warpgroup-MMA kernel (SPINDLE_SELECT_WGMMA=1) where it takes the
    // shape (b_sel 64, d_I 64 / 128), with the agreement of its selected sets with the mma.sync kernel's.
    if (bsel != 64 || (L.icfg.d_index != 64 && L.icfg.d_index != 128)) {
        record_skip(b, "indexer_select_block_wg", T, "the warpgroup-MMA block sums take b_sel 64 at d_I 64 / 128");
    } else {
        const int n_cmp = rows_b < 1024 ? rows_b : 1024;
        int32_t *sa = xmalloc(sizeof(int32_t) * (size_t)n_cmp * k), *sw = xmalloc(sizeof(int32_t) * (size_t)n_cmp * k);
        int32_t *na = xmalloc(sizeof(int32_t) * (size_t)n_cmp), *nw = xmalloc(sizeof(int32_t) * (size_t)n_cmp);
        cuda_to_host(sa, L.sel_b, sizeof(int32_t) * (size_t)n_cmp * k);
        cuda_to_host(na, L.n_sel_b, sizeof(int32_t) * (size_t)n_cmp);
        char *saved = env_override("SPINDLE_SELECT_WGMMA", "1");
        k_ix_select_block_bf16(&L);
        cuda_to_host(sw, L.sel_b, sizeof(int32_t) * (size_t)n_cmp * k);
        cuda_to_host(nw, L.n_sel_b, sizeof(int32_t) * (size_t)n_cmp);
        double agree = 0;
        int64_t keys = 0;
        for (int i = 0; i < n_cmp; i++) {
            agree += support_common(sa + (size_t)i * k, sw + (size_t)i * k, k);  // rows end at −1
            keys += na[i] > nw[i] ? na[i] : nw[i];
        }
        ms = measure(b, k_ix_select_block_bf16, &L, all, &reps);
        env_restore("SPINDLE_SELECT_WGMMA", saved);
        snprintf(note2, sizeof note2, "%s; block sums on bf16 wgmma (SPINDLE_SELECT_WGMMA=1); sets %.6f the same as "
                 "mma.sync's over %d rows", note, keys > 0 ? agree / (double)keys : 1.0, n_cmp);
        record(b, "indexer_select_block_wg", T, ms, all, reps, 0, k, bsel, note2);
        free(sa), free(sw), free(na), free(nw);
    }
    // Sparse attention over those supports: 4·|S|·d_h·Hq per query (QK and PV).
    const double sp_flops = 4.0 * (double)dh * Hq * (T <= k ? T * (T + 1.0) / 2 : (double)T * k);
    ms = measure(b, k_sparse, &L, all, &reps);
    record(b, "sparse_attention", T, ms, all, reps, sp_flops, k, 1,
           "per-query supports, fp32: a warp per head, shuffle-reduced dot products");
    ms = measure(b, k_sparse_tile, &L, all, &reps);
    record(b, "sparse_attention_tile", T, ms, all, reps, sp_flops, k, 1,
           "per-query supports, fp32: a thread block per (query, KV head), the group's heads sharing its staged "
           "key tiles");
    ms = measure(b, k_sparse_block, &L, all, &reps);
    record(b, "sparse_attention_block", T, ms, all, reps, sp_flops, k, bsel, "block-shared supports, fp32");
    if (!support_attention_block_tc_takes(Hq, Hkv, dh, k, bsel)) {  // it would time the fp32 fallback
        snprintf(note, sizeof note, "the tensor-core kernel does not take d_h %d, b_sel %d", dh, bsel);
        record_skip(b, "sparse_attention_block_tc", T, note);
    } else {
        ms = measure(b, k_sparse_block_tc, &L, all, &reps);
        record(b, "sparse_attention_block_tc", T, ms, all, reps, sp_flops, k, bsel,
               "block-shared supports, bf16 tensor cores (mma.sync), fp32 accumulate");
    }
    // The same op on the warpgroup-MMA kernel (SPINDLE_SPARSE_WGMMA=1) and its one-block-an-SM variant
    // (SPINDLE_SPARSE_WGMMA=2) where they take the shape and device.
    for (int wv = 0; wv < 2; wv++) {
        void (*kern)(void *) = wv ? k_sparse_block_wg1 : k_sparse_block_wg;
        const char *name = wv ? "sparse_attention_block_wg1" : "sparse_attention_block_wg";
        if (sparse_block_wg(&L, wv ? 1 : 2) != 0) {
            record_skip(b, name, T, "the warpgroup-MMA kernel does not take this shape or device");
            continue;
        }
        // Its output against the mma.sync kernel's on the first 2^24 values (both round P to bf16: ~1e-3).
        const int64_t n_out = (int64_t)T * Hq * dh, n_cmp = n_out < ((int64_t)1 << 24) ? n_out : (int64_t)1 << 24;
        float *o_wg = xmalloc(sizeof(float) * (size_t)n_cmp), *o_tc = xmalloc(sizeof(float) * (size_t)n_cmp);
        cuda_to_host(o_wg, L.out, sizeof(float) * (size_t)n_cmp);
        k_sparse_block_tc(&L);
        cuda_to_host(o_tc, L.out, sizeof(float) * (size_t)n_cmp);
        double dmax = 0, amax = 0;
        for (int64_t i = 0; i < n_cmp; i++) {
            const double d = fabs((double)o_wg[i] - o_tc[i]);
            if (!(d <= dmax)) dmax = d;  // a NaN shows
            if (fabs(o_tc[i]) > amax) amax = fabs(o_tc[i]);
        }
        free(o_wg), free(o_tc);
        ms = measure(b, kern, &L, all, &reps);
        snprintf(note, sizeof note,
                 "block-shared supports, bf16 wgmma (SPINDLE_SPARSE_WGMMA=%d%s); max|wg - mma.sync| / max|mma.sync| "
                 "%.1e on %lld outputs",
                 wv + 1, wv ? ": one thread block an SM" : "", amax > 0 ? dmax / amax : dmax, (long long)n_cmp);
        record(b, name, T, ms, all, reps, sp_flops, k, bsel, note);
    }
    if (T <= max_oracle) {
        k_sdpa_lse(&L);
        ms = measure(b, k_oracle, &L, all, &reps);
        record(b, "oracle_select", T, ms, all, reps, att_flops / 2, k, 1, "P from q, k, lse (given) + top-k, fp32");
        // Per query: the key-split kernel (the default), then the one with one warp per 16 rows
        // (SPINDLE_ORACLE_KEY_SPLIT=0); in blocks: the keys-major kernel (the default), then the query-major one.
        oracle_pair(b, &L, 0, "SPINDLE_ORACLE_KEY_SPLIT", (const char *[]){NULL, "0"},
                    (const char *[]){"oracle_select_bf16", "oracle_select_bf16_whole_tiles"}, note_oracle_query,
                    att_flops / 2);
        oracle_pair(b, &L, 1, "SPINDLE_ORACLE_BLOCK_ROWS", (const char *[]){"0", "1"},
                    (const char *[]){"oracle_select_bf16_block", "oracle_select_bf16_block_rows"}, note_oracle_block,
                    att_flops / 2);
    } else {
        record_skip(b, "oracle_select", T, "longer than --max-oracle-ctx");
        record_skip(b, "oracle_select_bf16", T, "longer than --max-oracle-ctx");
        record_skip(b, "oracle_select_bf16_whole_tiles", T, "longer than --max-oracle-ctx");
        record_skip(b, "oracle_select_bf16_block", T, "longer than --max-oracle-ctx");
        record_skip(b, "oracle_select_bf16_block_rows", T, "longer than --max-oracle-ctx");
    }
    if (T <= max_train) {
        k_sdpa_lse(&L);
        int32_t *qh = xmalloc(sizeof(int32_t) * (size_t)T);
        for (int t = 0; t < T; t++) qh[t] = t;
        L.queries = cuda_malloc(sizeof(int32_t) * (size_t)T);
        cuda_to_device(L.queries, qh, sizeof(int32_t) * (size_t)T);
        free(qh);
        ms = measure(b, k_train, &L, all, &reps);
        record(b, "train_step_layer", T, ms, all, reps, 0, 0, 0, "fused KL loss + gradients, all T queries, fp32");
        L.bf16_teacher = 1;
        ms = measure(b, k_train, &L, all, &reps);
        L.bf16_teacher = 0;
        record(b, "train_step_layer_bf16", T, ms, all, reps, 0, 0, 0,
               "the same with the teacher's P from bf16 q, k on tensor cores");
    } else {
        record_skip(b, "train_step_layer", T, "longer than --max-train-ctx");
        record_skip(b, "train_step_layer_bf16", T, "longer than --max-train-ctx");
    }

    // One layer's GEMMs in bf16 (q, k, v, o, gate, up, down).
    const int nqd = Hq * dh, nkd = Hkv * dh;
    L.xh = rand_half((int64_t)T * H, 1.0f, 21), L.ah = rand_half((int64_t)T * nqd, 1.0f, 22);
    L.gh = rand_half((int64_t)T * I, 1.0f, 23);
    L.wq = rand_half((int64_t)nqd * H, 0.02f, 24), L.wk = rand_half((int64_t)nkd * H, 0.02f, 25);
    L.wv = rand_half((int64_t)nkd * H, 0.02f, 26), L.wo = rand_half((int64_t)H * nqd, 0.02f, 27);
    L.wg = rand_half((int64_t)I * H, 0.02f, 28), L.wu = rand_half((int64_t)I * H, 0.02f, 29);
    L.wd = rand_half((int64_t)H * I, 0.02f, 30);
    L.gout = cuda_malloc(sizeof(float) * (size_t)T * (I > H ? I : H));
    const double gemm_flops = 2.0 * T * ((double)nqd * H + 2.0 * nkd * H + (double)H * nqd + 3.0 * I * H);
    ms = measure(b, k_gemms, &L, all, &reps);
    record(b, "gemm_layer_bf16", T, ms, all, reps, gemm_flops, 0, 0, "cuBLAS bf16 in, fp32 accumulate and out");

    void *ps[] = {L.q, L.k_, L.v, L.out, L.lse, L.qb, L.kb, L.vb, L.ob, L.x, L.params, L.grads, L.sel, L.n_sel,
                  L.sel_b, L.n_sel_b, L.queries, L.xh, L.ah, L.gh, L.wq, L.wk, L.wv, L.wo, L.wg, L.wu, L.wd, L.gout};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) cuda_free(ps[i]);
}

// ---- time to first token ---------------------------------------------------------------------

typedef struct {
    FwdCuda *f;
    const int32_t *ids;
    int T;
    ForwardOpts o;
    float *logits;
} Ttft;

static void k_ttft(void *p) {
    Ttft *t = p;
    fwd_cuda_ttft(t->f, t->ids, t->T, &t->o, t->logits);
}

static void annotate(Bench *b, const char *key, double v);

// The TTFT runs of (ks[ki], bsels[bi]) when --k and --bsel are lists: dense
// once (at the first pair), the per-query runs (indexer, oracle,
// indexer_union, oracle_union) once per k (at the first b_sel), the block-shared runs
// (indexer_block, indexer_refine) at every pair except a b_sel of 1 among
// several (skip_block: that is the per-query runs' configuration). Returns how
// many of want[] are set.
static int ttft_runs_at(int want[N_TTFT_RUNS], const int asked[N_TTFT_RUNS], int ki, int bi, int skip_block) {
    static const int per_query[N_TTFT_RUNS] = {0, 1, 0, 1, 1, 0, 0, 1}, block[N_TTFT_RUNS] = {0, 0, 1, 0, 0, 1, 1, 0};
    int n = 0;
    for (int r = 0; r < N_TTFT_RUNS; r++) {
        const int at = r == 0 ? ki == 0 && bi == 0 : per_query[r] ? bi == 0 : block[r] ? !skip_block : 1;
        want[r] = asked[r] && at;
        n += want[r];
    }
    return n;
}

// want[r]: run TTFT_RUNS[r] (the others are not recorded at all).
static void bench_ttft(Bench *b, FwdCuda *f, const ModelConfig *c, const IndexerSet *ix, int T, int k, int bsel,
                       int max_oracle_ttft, int ttft_reps, int warmup_ctx, const int want[N_TTFT_RUNS],
                       int ix_scores, int union_block, int refine, int profile) {
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)T);
    uint64_t z = 12345;
    for (int t = 0; t < T; t++) z = z * 6364136223846793005ull + 1442695040888963407ull, ids[t] = (int32_t)((z >> 33) % (uint64_t)c->vocab);
    float *logits = xmalloc(sizeof(float) * (size_t)c->vocab);
    Sparsity per_query = {k, 1}, block = {k, bsel}, unioned = {.topk = k, .bsel = 1, .exec_block = union_block};
    Sparsity refined = {.topk = k, .bsel = bsel, .exec_block = union_block, .refine = refine > 0 ? refine : 4 * k};
    SparseStats us = {0};  // the union run's Σ |U_b| and blocks
    struct {
        const char *name;
        ForwardOpts o;
        int k, bsel, on;
        const char *note;
    } runs[] = {
        {"ttft_dense", {0}, 0, 0, 1, "bf16 GEMMs + cuDNN SDPA"},
        {"ttft_indexer", {.sparse = &per_query, .indexer = ix, .indexer_scores = ix_scores}, k, 1, 1,
         "indexer per query, every full-attention layer"},
        {"ttft_indexer_block", {.sparse = &block, .indexer = ix, .indexer_scores = ix_scores}, k, bsel, 1,
         "indexer block-shared (tensor-core sparse attention), every full-attention layer"},
        {"ttft_oracle", {.sparse = &per_query}, k, 1, T <= max_oracle_ttft,
         "attention-mass oracle per query (per-query gathers, fp32), every full-attention layer"},
        {"ttft_indexer_union", {.sparse = &unioned, .indexer = ix, .indexer_scores = ix_scores, .stats = &us}, k, 1, 1,
         "indexer per query, run as block unions on tensor cores, every full-attention layer"},
        {"ttft_indexer_refine", {.sparse = &refined, .indexer = ix, .indexer_scores = ix_scores, .stats = &us}, k,
         bsel, 1, "indexer two-stage (per query from each block's candidates), run as block unions on tensor cores, "
         "every full-attention layer"},
        {"ttft_oracle_block", {.sparse = &block}, k, bsel, T <= max_oracle_ttft,
         "attention-mass oracle block-shared (tensor-core sparse attention), every full-attention layer"},
        {"ttft_oracle_union", {.sparse = &unioned, .stats = &us}, k, 1, T <= max_oracle_ttft,
         "attention-mass oracle per query, run as block unions on tensor cores, every full-attention layer"},
    };
    const int hybrid = config_full_layers(c->layer_kinds, c->n_layers, NULL) < c->n_layers;
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        if (!want[r]) continue;
        if (!runs[r].on) {
            record_skip(b, runs[r].name, T, "longer than --max-oracle-ttft-ctx");
            continue;
        }
        if (r > 0 && k >= T) {  // a support of every key: dense under a sparse name (eval refuses such a k)
            record_skip(b, runs[r].name, T, "k is not below ctx: every key would be kept (dense)");
            continue;
        }
        Ttft t = {f, ids, T, runs[r].o, logits};
        cuda_mem_peak_reset();
        double all[16];
        // Warm-up: cuBLAS / cuDNN plans, the allocator's pool. A shorter warm-up
        // (--ttft-warmup-ctx) plans the same row-chunk GEMMs; only the attention
        // kernels' plans for T are then built inside the timed call.
        Ttft w = t;
        if (warmup_ctx > 0 && warmup_ctx < T) w.T = warmup_ctx;
        k_ttft(&w);
        us.union_keys = us.union_blocks = 0;  // the timed passes' sums only
        const double ms = cuda_time_ms(k_ttft, &t, 0, ttft_reps, all);
        int finite = 1;
        for (int i = 0; i < c->vocab; i++) finite &= isfinite(logits[i]);
        char note[320];
        snprintf(note, sizeof note, "%s, %d layers%s", runs[r].note, c->n_layers, finite ? "" : "; NON-FINITE LOGITS");
        const int is_union = runs[r].o.sparse == &unioned || runs[r].o.sparse == &refined;
        const double per_block = us.union_blocks > 0 ? us.union_keys / us.union_blocks : 0;  // Σ |U_b| / blocks
        if (runs[r].o.sparse == &refined)
            snprintf(note + strlen(note), sizeof note - strlen(note), "; %d candidates per block of %d", refined.refine,
                     bsel);
        if (is_union)
            snprintf(note + strlen(note), sizeof note - strlen(note), "; blocks of %d queries, union %.0f keys per "
                     "block = %.2f k", union_block, per_block, per_block / k);
        record(b, runs[r].name, T, ms, all, ttft_reps, 0, runs[r].k, runs[r].bsel, note);
        if (runs[r].o.sparse == &refined) annotate(b, "refine", refined.refine);
        if (is_union) {
            annotate(b, "union_block", union_block);
            annotate(b, "union_keys_per_block", per_block);
        }
        if (profile || (r == 0 && hybrid)) {
            // One more pass, timed op by op (a sync after each): with --ttft-profile where the run's time
            // goes (the supports' selection against the attention over them); for a hybrid's dense run
            // always, the share the full-attention layers' attention takes (what sparsity there can win
            // at most). Slower than the timed passes by the syncs.
            ForwardProfile pr = {0};
            Ttft tp = t;
            tp.o.prof = &pr;
            k_ttft(&tp);
            const double tot = pr.gemm + pr.attention + pr.linear + pr.other;
            if (r == 0 && hybrid)
                snprintf(note, sizeof note, "dense, op by op: softmax-attention attend %.1f%%, Gated DeltaNet mixers "
                         "%.1f%%, GEMMs %.1f%%, rest %.1f%% (of %.1f ms)", 100 * pr.attention / tot,
                         100 * pr.linear / tot, 100 * pr.gemm / tot, 100 * pr.other / tot, 1e3 * tot);
            else
                snprintf(note, sizeof note, "%s op by op: selection %.1f ms, attention over the supports %.1f ms, "
                         "GEMMs %.1f ms, Gated DeltaNet mixers %.1f ms, rest %.1f ms", runs[r].name + 5,
                         1e3 * pr.select, 1e3 * (pr.attention - pr.select), 1e3 * pr.gemm, 1e3 * pr.linear,
                         1e3 * pr.other);
            char name[64];
            snprintf(name, sizeof name, "%s_profile", runs[r].name);
            double one = 1e3 * tot;
            record(b, name, T, 1e3 * tot, &one, 1, 0, runs[r].k, runs[r].bsel, note);
            annotate(b, "select_ms", 1e3 * pr.select);
            annotate(b, "attend_ms", 1e3 * (pr.attention - pr.select));
            annotate(b, "gemm_ms", 1e3 * pr.gemm);
            annotate(b, "linear_ms", 1e3 * pr.linear);
            annotate(b, "other_ms", 1e3 * pr.other);
        }
    }
    free(ids);
    free(logits);
}

// Greedy decoding as `eval --tasks-file` runs it for each task instance: a dense
// prefill of T − 1 tokens (a prompt length this process has not run: the plans
// cuBLAS and cuDNN build for a new shape are inside that prefill's time, as they
// are in every instance of a tasks file, whose prompts differ in length), the
// same generation again (plans built), and its n_new − 1 cached steps; then once
// more with the steps timed op by op (a sync after each op). Wall-clock times of
// single runs (fwd_cuda_generate's GenTiming), not medians.
static void bench_decode(Bench *b, FwdCuda *f, const ModelConfig *c, int T, int n_new) {
    const int P = T > 1 ? T - 1 : T;
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)P), *out = xmalloc(sizeof(int32_t) * (size_t)n_new);
    uint64_t z = 777;
    for (int t = 0; t < P; t++) z = z * 6364136223846793005ull + 1442695040888963407ull, ids[t] = (int32_t)((z >> 33) % (uint64_t)c->vocab);
    GenTiming cold = {0}, warm = {0}, prof = {.profile_steps = 1};
    Status st;
    cuda_mem_peak_reset();
    if (fwd_cuda_generate(f, ids, P, NULL, n_new, NULL, 0, out, NULL, &cold, &st) < 0) {
        record_skip(b, "generate_prefill_new_length", P, st.msg);
        goto out;
    }
    // No stop ids: every generation runs its n_new − 1 cached steps.
    fwd_cuda_generate(f, ids, P, NULL, n_new, NULL, 0, out, NULL, &warm, &st);
    fwd_cuda_generate(f, ids, P, NULL, n_new, NULL, 0, out, NULL, &prof, &st);
    char note[320];
    double ms = 1e3 * cold.prefill_s;
    record(b, "generate_prefill_new_length", P, ms, &ms, 1, 0, 0, 0,
           "dense prefill of a prompt length not run before in this process (its cuBLAS / cuDNN plans built inside)");
    ms = 1e3 * warm.prefill_s;
    record(b, "generate_prefill", P, ms, &ms, 1, 0, 0, 0, "the same prefill again (plans built)");
    const int steps = n_new > 1 ? n_new - 1 : 1;
    const ForwardProfile *sp = &prof.step;
    snprintf(note, sizeof note, "dense cached step over the fp32 KV cache, mean of %d; op by op (a sync after each "
             "op, %.3f ms a step): projections + MLP %.3f, attention %.3f, the rest (norms, lm_head, copies) %.3f ms",
             n_new - 1, 1e3 * (sp->gemm + sp->attention + sp->other + sp->linear) / steps, 1e3 * sp->gemm / steps,
             1e3 * sp->attention / steps, 1e3 * (sp->other + sp->linear) / steps);
    ms = 1e3 * warm.decode_s / steps;
    record(b, "decode_token", P, ms, &ms, 1, 0, 0, 0, note);
out:
    free(ids);
    free(out);
}

// ---- online training ------------------------------------------------------------------------

// Adds key = v to the last measurement (and rewrites the JSON).
static void annotate(Bench *b, const char *key, double v) {
    cJSON *last = cJSON_GetArrayItem(b->results, cJSON_GetArraySize(b->results) - 1);
    if (last) cJSON_AddNumberToObject(last, key, v);
    save(b);
}

typedef struct {
    GpuOnline *on;
    const int32_t *ids;
    int T, nq;
    const AdamW *opt;
    long t;
} TrainPass;

static void k_online_forward(void *p) {
    TrainPass *tp = p;
    gpu_online_forward(tp->on, tp->ids, tp->T);
}
static void k_online_teacher(void *p) {
    TrainPass *tp = p;
    gpu_online_teacher(tp->on, tp->ids, tp->T);
}
static void k_online_train(void *p) {
    TrainPass *tp = p;
    gpu_online_train(tp->on, tp->ids, tp->T, tp->nq, tp->opt, tp->t++, 1.0);
}

// One online training step of spindle train --device cuda (train_gpu.h) at ctx
// T with an indexer at every full-attention layer: the plain bf16 forward to
// the deepest one (no tap), the same pass tapped (the teacher's statistics:
// lse from the attention, fp32 xn kept), and the training pass, once as it runs
// and once with the device synchronised around each layer's loss and
// optimizer to split them out. Recorded: each part's milliseconds per step,
// tokens/s, GPU-hours for train_tokens, the peak memory (weights included).
static void bench_train_online(Bench *b, FwdCuda *f, const ModelConfig *c, int T, const BenchArgs *a) {
    int layers[1024];
    const int L = config_full_layers(c->layer_kinds, c->n_layers, NULL);
    SPINDLE_CHECK(L > 0 && L <= 1024);
    config_full_layers(c->layer_kinds, c->n_layers, layers);
    const IndexerConfig icfg = indexer_config_default(c->hidden);
    const int64_t np = indexer_n_params(&icfg);
    RunState rs = {.n_layers = L, .n_params = np};
    rs.params = xcalloc((size_t)L, sizeof(float *)), rs.m = xcalloc((size_t)L, sizeof(float *));
    rs.v = xcalloc((size_t)L, sizeof(float *));
    for (int i = 0; i < L; i++) {
        rs.params[i] = xmalloc(sizeof(float) * (size_t)np);
        rs.m[i] = xcalloc((size_t)np, sizeof(float)), rs.v[i] = xcalloc((size_t)np, sizeof(float));
        indexer_init(&icfg, rs.params[i], 1000003ull + (uint64_t)layers[i]);
    }
    cuda_mem_peak_reset();
    GpuIndexers gi;
    gpu_indexers_open(&gi, &icfg, NULL, &rs, NULL, T);
    GpuOnline on;
    const GpuTeacher te = {c->n_heads, c->n_kv_heads, c->head_dim, (float)c->attn_scale, a->bf16_teacher};
    gpu_online_init(&on, &gi, f, c, layers, L, &te);
    // The step's data: random ids, the positions ≥ 16 sampled as spindle train does.
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)T);
    int *queries = xmalloc(sizeof(int) * (size_t)T);
    uint64_t z = 12345, rng = 1;
    for (int t = 0; t < T; t++) z = z * 6364136223846793005ull + 1442695040888963407ull, ids[t] = (int32_t)((z >> 33) % (uint64_t)c->vocab);
    int nq = 0;
    for (int t = 16 < T ? 16 : 0; t < T; t++)
        if (rng_uniform(&rng) < a->query_frac) queries[nq++] = t;
    if (nq == 0) queries[nq++] = T - 1;
    gpu_indexers_set_queries(&gi, queries, nq);
    const AdamW opt = {1e-3, 0.9, 0.95, 1e-8, 0.01};
    TrainPass tp = {&on, ids, T, nq, &opt, 1};
    const int reps = T > 65536 ? 1 : a->ttft_reps;
    double all[16], allf[16], allt[16];

    // Warm-up (plans for this shape, the pool's buffers): a training step, or
    // past 64K, where one step takes a minute or more, the forward alone.
    if (T > 65536) k_online_forward(&tp);
    else k_online_train(&tp);
    const double ms_fwd = cuda_time_ms(k_online_forward, &tp, 0, reps, allf);
    const double ms_teach = cuda_time_ms(k_online_teacher, &tp, 0, reps, allt);
    const double ms_step = cuda_time_ms(k_online_train, &tp, 0, reps, all);
    GpuStepTimes tm = {0};
    on.times = &tm;
    for (int r = 0; r < reps; r++) k_online_train(&tp);
    on.times = NULL;
    const double ms_loss = 1e3 * tm.loss / reps, ms_opt = 1e3 * tm.opt / reps;
    double kl = 0;
    int finite = 1;
    for (int i = 0; i < L; i++) kl += on.kl[i] / L, finite &= isfinite(on.kl[i]) && isfinite(on.gn[i]);
    const double tps = ms_step > 0 ? T / (ms_step * 1e-3) : 0, hours = tps > 0 ? a->train_tokens / tps / 3600 : 0;
    const double ms_ix = (ms_teach - ms_fwd) + ms_loss + ms_opt;
    char note[400];
    snprintf(note, sizeof note, "bf16 backbone forward to layer %d (no tap), %d layers", on.deepest, on.deepest + 1);
    record(b, "train_online_forward", T, ms_fwd, allf, reps, 0, 0, 0, note);
    snprintf(note, sizeof note, "teacher statistics: the same pass tapped at %d layers (lse, fp32 xn), minus the "
             "forward (%.1f ms tapped)", L, ms_teach);
    double d = ms_teach - ms_fwd;
    record(b, "train_online_teacher", T, d, &d, 1, 0, 0, 0, note);
    snprintf(note, sizeof note, "fused KL loss + gradients, %d layers x %d queries (query_frac %g), teacher P %s", L,
             nq, a->query_frac, a->bf16_teacher ? "bf16 tensor cores" : "fp32");
    record(b, "train_online_loss", T, ms_loss, &ms_loss, 1, 0, 0, 0, note);
    snprintf(note, sizeof note, "gradient clip + AdamW, %d layers x %lld parameters", L, (long long)np);
    record(b, "train_online_optimizer", T, ms_opt, &ms_opt, 1, 0, 0, 0, note);
    snprintf(note, sizeof note, "one step: %.0f tokens/s, %.0f GPU-hours for %.3g tokens; indexer side %.0f ms = %.2fx "
             "the forward; mean KL %.4f%s", tps, hours, a->train_tokens, ms_ix, ms_fwd > 0 ? ms_ix / ms_fwd : 0, kl,
             finite ? "" : "; NON-FINITE LOSS");
    record(b, "train_online_step", T, ms_step, all, reps, 0, 0, 0, note);
    annotate(b, "tokens_per_s", tps);
    annotate(b, "gpu_hours", hours);
    annotate(b, "train_tokens", a->train_tokens);
    annotate(b, "indexer_over_forward", ms_fwd > 0 ? ms_ix / ms_fwd : 0);
    annotate(b, "layers", L);
    annotate(b, "queries", nq);
    annotate(b, "weight_bytes", (double)fwd_cuda_weight_bytes(f));
    annotate(b, "device_used_bytes", (double)cuda_mem_device_used());
    gpu_online_free(&on);
    gpu_indexers_close(&gi);
    for (int i = 0; i < L; i++) free(rs.params[i]), free(rs.m[i]), free(rs.v[i]);
    free(rs.params), free(rs.m), free(rs.v), free(ids), free(queries);
}

// ---- the command ---------------------------------------------------------------------------

int cmd_bench(int argc, char **argv) {
    Flag flags[] = BENCH_FLAGS;
    const int nf = N_FLAGS(flags);
    int rc = cli_parse(argc, argv, flags, nf, CMD, BENCH_REQUIRED);
    if (rc) return rc;
    BenchArgs a;
    if (bench_args(flags, nf, &a)) return 2;
    const char *model_dir = a.model_dir, *synth = a.synth;
    int *ctxs = a.ctxs, n_ctx = a.n_ctx, k = a.ks[0], bsel = a.bsels[0], n_layers = a.n_layers, max_reps = a.max_reps;
    int ttft_reps = a.ttft_reps, max_fp32 = a.max_fp32, max_oracle = a.max_oracle, max_train = a.max_train;
    int max_oracle_ttft = a.max_oracle_ttft, *want_ttft = a.want_ttft;
    Status st;
    Model m;
    memset(&m, 0, sizeof m);
    if (synth && synthetic_config(synth, &m.cfg)) {  // a usage error: before the GPU check
        fprintf(stderr, "spindle " CMD ": --synthetic must be one of " SYNTHETIC_NAMES " (got \"%s\")\n",
                synth);
        return 2;
    }
    int use_cuda, prec;
    if ((rc = backbone_flags(CMD, "cuda", NULL, &use_cuda, &prec))) {
        if (synth) config_free(&m.cfg);
        return rc;
    }
    if (model_dir && model_load(&m, model_dir, &st)) return cli_fail(CMD, &st);
    if (n_layers > 0 && n_layers < m.cfg.n_layers) m.cfg.n_layers = n_layers;
    ModelConfig *c = &m.cfg;
    char why[256];
    if (!sdpa_supported(1024, c->n_heads, c->n_kv_heads, c->head_dim, 0, why, sizeof why))
        fprintf(stderr, "spindle " CMD ": note: cuDNN SDPA does not take this model's heads (%s)\n", why);

    char gpu[256], date[32];
    cuda_available(gpu, sizeof gpu);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON *env = cJSON_CreateObject();
    cJSON_AddStringToObject(env, "gpu", gpu);
    cJSON_AddStringToObject(env, "date_utc", date);
    cJSON_AddStringToObject(env, "model", model_dir ? model_dir : synth);
    cJSON_AddNumberToObject(env, "layers", c->n_layers);
    cJSON_AddStringToObject(env, "precision",
                            "bf16 (16-bit GEMMs + cuDNN SDPA; in the TTFT rows the indexer scores on TF32 tensor "
                            "cores per query and as fused bf16 block sums block-shared, block-shared sparse attention "
                            "on bf16 tensor cores; oracle and per-query sparse attention fp32)");
    cJSON_AddStringToObject(env, "indexer_scores", a.ix_scores ? cli_indexer_scores_name(a.ix_scores)
                                                               : "default (tf32 per query, bf16 block-shared)");
    cJSON_AddNumberToObject(env, "k", k);
    cJSON_AddNumberToObject(env, "bsel", bsel);
    cJSON_AddNumberToObject(env, "d_index", indexer_config_default(c->hidden).d_index);
    cJSON_AddStringToObject(env, "flop_convention",
                            "causal dense attention: 2*T^2*d_h*Hq; sparse: 4*|S|*d_h*Hq per query");
    // The SPINDLE_* knobs this run was given (kernel variants, workspace, limits): part of what was timed.
    cJSON *knobs = cJSON_AddObjectToObject(env, "spindle_env");
    for (char **e = environ; knobs && e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "SPINDLE_", 8) != 0 || !eq || eq - *e >= 64) continue;
        char name[64];
        memcpy(name, *e, (size_t)(eq - *e));
        name[eq - *e] = 0;
        cJSON_AddStringToObject(knobs, name, eq + 1);
    }
    Bench b = {cJSON_CreateArray(), max_reps, env, args_get(flags, nf, "--json"), {0}, 0};
    progress_start(&b.pr, CMD, "measurement", 0);
    FwdCuda *f = NULL;
    IndexerSet ix = {0};
    rc = 1;
    printf("%-24s %7s %13s %9s %8s  %s\n", "measurement", "ctx", "median", "", "peak", "notes");
    if (a.train_online) {  // online training only
        if ((model_dir ? fwd_cuda_upload(&m, FWD_BF16, &f, &st) : fwd_cuda_synthetic(&m, FWD_BF16, 1, &f, &st)))
            goto done;
        cJSON_AddStringToObject(env, "train_online", fwd_cuda_describe(f));
        for (int i = 0; i < n_ctx; i++) bench_train_online(&b, f, c, ctxs[i], &a);
    }
    if (!flags[9].value && !a.train_online)
        for (int i = 0; i < n_ctx; i++) bench_layer(&b, c, ctxs[i], k, bsel, max_fp32, max_oracle, max_train);
    if (!flags[8].value && !a.train_online) {
        if ((model_dir ? fwd_cuda_upload(&m, FWD_BF16, &f, &st) : fwd_cuda_synthetic(&m, FWD_BF16, 1, &f, &st)))
            goto done;
        // Random indexers for every full-attention layer (the timing does not depend on
        // training; other layer kinds never get one).
        ix.cfg = indexer_config_default(c->hidden);
        ix.n_model_layers = c->n_layers;
        ix.params = xcalloc((size_t)c->n_layers, sizeof(float *));
        const int64_t np = indexer_n_params(&ix.cfg);
        for (int l = 0; l < c->n_layers; l++) {
            if (c->layer_kinds[l] != LAYER_FULL_ATTENTION) continue;
            ix.params[l] = xmalloc(sizeof(float) * (size_t)np);
            indexer_init(&ix.cfg, ix.params[l], 100 + (uint64_t)l);
        }
        for (int i = 0; i < n_ctx; i++) {
            for (int ki = 0; ki < a.n_k; ki++)
                for (int bi = 0; bi < a.n_bsel; bi++) {
                    int want[N_TTFT_RUNS];
                    if (ttft_runs_at(want, want_ttft, ki, bi, a.n_bsel > 1 && a.bsels[bi] == 1))
                        bench_ttft(&b, f, c, &ix, ctxs[i], a.ks[ki], a.bsels[bi], max_oracle_ttft,
                                   ctxs[i] > 65536 ? 1 : ttft_reps, a.warmup_ctx, want, a.ix_scores, a.union_block,
                                   a.refine, a.ttft_profile);
                }
            if (a.decode) bench_decode(&b, f, c, ctxs[i], a.decode + 1);
        }
    }
    save(&b);
    fprintf(stderr, "spindle " CMD ": -> %s\n", b.json);
    rc = 0;
done:
    if (rc) cli_fail(CMD, &st);
    cJSON_Delete(b.results);
    cJSON_Delete(b.env);
    if (f) fwd_cuda_free(f);
    if (ix.params) {
        for (int l = 0; l < ix.n_model_layers; l++) free(ix.params[l]);
        free(ix.params);
    }
    if (model_dir) model_free(&m);
    else config_free(&m.cfg);
    return rc;
}
#endif
