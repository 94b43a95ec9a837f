// eval.h: quality of sparse attention against dense, on the same sequences.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "backbone.h"
#include "forward.h"
#include "model.h"
#include "retrieval.h"
#include "tokenizer.h"

typedef enum { EVAL_DENSE, EVAL_ORACLE, EVAL_INDEXER } EvalMode;

struct IndexerSet;

// A metric's mean over scored positions and the half-width of its 95%
// interval (batch means: positions are grouped into runs of EVAL_BATCH
// consecutive positions, whose means are treated as independent samples).
typedef struct {
    double mean, ci95;
} Stat;

enum { EVAL_BATCH = 64 };

// Per-layer fields of a row are kept for at most this many full-attention layers.
enum { EVAL_MAX_LAYER_STATS = 128 };

typedef struct {
    EvalMode mode;
    int k, bsel;  // 0, 0 for dense
    int recent, sinks;  // hybrid supports: each query's window and sink keys (0, 0: none, and for dense)
    int refine;         // two-stage supports: candidates per block (0: none; indexer rows at b_sel > 1)
    int ctx, n_seq;
    int64_t n_scored;   // next-token positions scored (ctx − 1 per sequence)
    Stat nll;           // nats/token
    Stat dnll;          // nll − dense nll, paired per position
    Stat logit_kl;      // KL(dense ‖ sparse) of the next-token distributions
    Stat top1_agree;    // argmax equal to dense's
    Stat mass_recall;   // Σ_{j∈S_t} P_t(j), averaged over layers and positions
    Stat sparsity;      // 1 − Σ|S_t| / Σ(t+1), over layers and positions (per sequence)
    // The same two over the layers that ran sparse only (an indexer row's
    // dense layers count as whole in mass_recall and sparsity); a dense row: 1, 0.
    int n_sparse_layers;
    Stat mass_recall_sparse, sparsity_sparse;
    // Per-query rows (b_sel 1) with EvalOpts.union_bsel (CPU twin): the mean size
    // of the union of union_bsel consecutive queries' supports, over the sparse
    // layers' blocks, and that over k (0, 0: not measured).
    int union_bsel;
    double union_keys, union_ratio;
    // Sparse language-modelling rows at b_sel > 1 whose mode has the b_sel 1 row
    // of the same k (and recent, sinks) in the same call: the realization gap
    // NLL(this row) − NLL(that row), paired per position (docs/design.md
    // "Evidence decomposition"). has_realization 0: no such row.
    int has_realization;
    Stat realization;
    // Per full-attention layer (the j-th of the model's full-attention layers,
    // in order), language-modelling sparse rows on the CPU twin: mass recall
    // (mean over positions of Σ_{j∈S_t} P_t(j)) and sparsity (1 − Σ|S_t| / Σ(t+1));
    // a layer the row leaves dense has 1 and 0. n_layer_stats 0: not measured.
    int n_layer_stats;
    float layer_recall[EVAL_MAX_LAYER_STATS], layer_sparsity[EVAL_MAX_LAYER_STATS];
    // With EvalOpts.layer_weights: the keys per support at each of those layers.
    int has_layer_k;
    int layer_k[EVAL_MAX_LAYER_STATS];
    // Retrieval rows (task ≥ 0): n_seq task instances at this depth; accuracy is
    // the exact-match rate with a Wilson 95% interval [acc_lo, acc_hi].
    int task;           // RetrievalKind, or -1 for a language-modelling row
    double depth;
    double accuracy, acc_lo, acc_hi;
} EvalResult;

typedef struct {
    int ctx;
    const int *ks;
    int n_k;
    const int *bsels;
    int n_bsel;
    const struct IndexerSet *indexer;  // not NULL: indexer rows at every (k, bsel) too
    int max_seq;   // sequences taken from the token stream (non-overlapping windows)
    int progress;  // print progress lines to stderr (base/progress.h)
    // Retrieval (optional): n_tasks kinds × n_depths depths × task_n seeded
    // instances, haystacks from the same token stream; needs tok.
    const Tokenizer *tok;
    const RetrievalKind *tasks;
    int n_tasks;
    const double *depths;
    int n_depths;
    int task_n;
    uint64_t seed;
    struct FwdCuda *gpu;  // not NULL: every forward pass runs on the GPU (model/backbone.h)
    int indexer_scores;   // the indexer rows' ForwardOpts.indexer_scores (0: the precision's default)
    // Hybrid supports (docs/design.md "Hybrid supports"): every sparse row at
    // each recent × sinks pair; NULL / 0: the single pair (0, 0).
    const int *recents;
    int n_recent;
    const int *sinks;
    int n_sinks;
    int union_bsel;  // > 0: measure the union of per-query supports over blocks of this many queries (a divisor of 64)
    // Per-layer budgets (docs/design.md "Per-layer budgets"; CPU twin only):
    // weights by model layer (those of the full-attention layers are read, each
    // > 0, their mean 1); a row of k keeps eval_layer_k(k, w_l) keys per support
    // at layer l. NULL: k at every layer.
    const double *layer_weights;
    // Two-stage supports (docs/design.md "Two-stage supports"; CPU twin only):
    // > 0 runs the indexer rows at b_sel > 1 as per-query supports drawn from
    // this many candidates per block (Sparsity.refine). 0: block-shared.
    int refine;
    // > 0 (GPU, bf16): the per-query rows (b_sel 1) run as the unions of the supports of blocks of this
    // many queries on tensor cores (Sparsity.exec_block): the same per-query attention. 0: per-query gathers.
    int exec_block;
    // Windows that start with the tokenizer's BOS (eval --bos): each window is
    // bos_id followed by the next ctx − 1 tokens of the stream (models such as
    // Gemma 3 are trained on text that starts with it). 0: plain ctx-token windows.
    int bos_windows;
    int32_t bos_id;
} EvalOpts;

// The keys per support at a layer of weight w in a row of k: round(k·w), at least 1.
int eval_layer_k(int k, double w);

// Evaluates dense and the oracle at every (k, bsel) on windows of ids. Results
// (1 + n_k·n_bsel language-modelling rows, dense first, then as many rows per
// retrieval task and depth) go to *out (caller frees).
int eval_run(const Model *m, const int32_t *ids, size_t n_ids, const EvalOpts *o, EvalResult **out,
             int *n_out, Status *st);

// Where a set of results came from, recorded in every output (report.c).
typedef struct {
    const char *model;              // the model folder as given
    const char *model_fingerprint;  // model/fingerprint.h
    int n_layers;                   // the model's layers
    const int *full_layers;         // its full-attention layers (where the oracle runs)
    int n_full_layers;
    const char *indexer;            // the indexer folder, or NULL
    const int *indexer_layers;      // the layers it covers (where indexer rows run sparse)
    int n_indexer_layers;
    const char *input_kind;         // "text" or "ids"
    const char *const *inputs;      // the files read (a --text folder expanded), in reading order
    const char *const *input_sha256;
    int n_inputs;
    const int *ks, *bsels;          // the grid asked for
    int n_k, n_bsel;
    int ctx;
    const char *device, *precision;
    const char *command;            // the command line, shell-quoted
    const char *version;            // spindle_version()
    const char *date;               // UTC, ISO 8601
    const int *recents, *sinks;     // the hybrid-support grid (NULL / 0: the single pair 0, 0)
    int n_recent, n_sinks;
    const char *k_layers;           // the per-layer budget file (--k-layers), or NULL
    const double *k_layer_weights;  // its weights, one per full-attention layer, normalised to mean 1
    int window_bos;                 // ≥ 0: every window starts with this token id (eval --bos); -1: plain windows
    const char *execution;          // how the GPU ran the sparse rows and their statistics (NULL: the CPU twin)
} EvalProvenance;

// The layers that ran sparse in a row of this mode (dense: none, oracle: every
// full-attention layer, indexer: the layers the indexer covers). Returns their
// count and points *layers at them.
int eval_sparse_layers(const EvalProvenance *p, EvalMode mode, const int **layers);

// Writes results as JSON (docs/design.md, "Eval results"; every row also carries
// sparse_layers, n_sparse_layers, n_layers and the provenance object), CSV
// (the same columns, provenance last) and a Markdown table (a sparse-layers
// column, the provenance below); each path may be NULL. Files are written atomically.
int eval_write(const EvalResult *r, int n, const EvalProvenance *p, const char *json, const char *csv,
               const char *md, Status *st);
