// ruler.h: RULER tasks (scripts/ruler-tasks.py, from RULER's own generators)
// answered by greedy decoding after a prefill under each configuration, and
// scored as RULER scores them (eval/synthetic/constants.py of
// nvidia-long-context-eval 26.3):
//   string_match_all:  100 · (1/|refs|) Σ_r [lower(r) ⊂ lower(pred)]
//   string_match_part: 100 · max_r [lower(r) ⊂ lower(pred)]
// with pred postprocessed as its evaluate.py does: strip, every byte in
// \x00–\x1f replaced by '\n', strip again. Prefill is the subject: the prompt
// runs dense, through the oracle's or an indexer's supports; the answer tokens
// are always decoded densely from the KV cache (model/forward.h forward_generate).
#pragma once
#include <stdint.h>

#include "backbone.h"
#include "eval.h"
#include "model.h"
#include "status.h"
#include "tokenizer.h"

typedef enum { RULER_MATCH_ALL, RULER_MATCH_PART } RulerMetric;

// One task instance: a line of the tasks file.
typedef struct {
    char *task;       // RULER's task name, e.g. "niah_single_1"
    RulerMetric metric;
    int ctx;          // the length it was generated for
    int index;
    int32_t *ids;     // the prompt's token ids
    int n_ids;
    char **refs;      // the reference strings ("outputs")
    int n_refs;
    int max_new;      // tokens_to_generate
    int32_t *stop;    // the model's end-of-sequence ids
    int n_stop;
    int seed;
    char *generator;  // e.g. "nvidia-long-context-eval 26.3"
    char *splitter;   // the sentence splitter used
    char *tmpl;       // the prompt template used
} RulerTask;

// Reads a tasks file (JSON lines; scripts/ruler-tasks.py documents the keys).
// Every id must be < vocab, every prompt + max_new_tokens at most max_pos.
// On failure st names the file, the line and the problem. Free with ruler_free.
int ruler_load(const char *path, int vocab, int max_pos, RulerTask **tasks, int *n, Status *st);
void ruler_free(RulerTask *tasks, int n);

// "dense", "oracle" or "indexer".
const char *ruler_mode_name(EvalMode m);

// RULER's score (0..100) of one prediction against its references.
double ruler_score(RulerMetric metric, const char *pred, const char *const *refs, int n_refs);
// RULER's postprocess_pred, in place: strip whitespace, map \x00–\x1f to '\n', strip.
void ruler_postprocess(char *pred);

// One configuration's result on one task name (or the average over task names:
// task "average", the mean of the task means; its interval from the tasks'
// variances, as independent).
typedef struct {
    EvalMode mode;
    int k, bsel;
    const char *task;   // points into the tasks (or the literal "average")
    int ctx;            // the tasks' length (0 when they mix lengths)
    int n;              // instances scored
    double score, ci95; // RULER score mean (0..100) and the 95% half-width (normal, sample sd)
    double seconds;     // wall time of prefill + decoding, per instance
    double prefill_seconds, decode_seconds;  // its two parts (GenTiming), per instance
    double new_tokens;  // mean tokens generated
    int refine;         // two-stage supports: candidates per block (0: none)
} RulerResult;

typedef struct {
    const int *ks, *bsels;
    int n_k, n_bsel;
    const struct IndexerSet *indexer;  // not NULL: indexer rows too
    const Tokenizer *tok;              // the model's, to decode the answers
    int progress;
    // Which rows: a bitmask of 1u << EvalMode (0: all — dense, the oracle and,
    // with an indexer, the indexer); a sparse mode needs n_k > 0, the indexer
    // rows an indexer.
    unsigned modes;
    // Called (may be NULL) after each configuration with the rows and the
    // predictions so far — a prefix of ruler_run's results, whole
    // configurations only — so that a run stopped later keeps them (eval
    // writes its outputs there). Nonzero: the run stops with that failure.
    int (*on_config)(void *ctx, const RulerResult *rows, int n_rows, char *const *preds, Status *st);
    void *on_config_ctx;
    // > 0: the indexer rows at b_sel > 1 run two-stage supports with this many
    // candidates per block (Sparsity.refine; docs/design.md "Two-stage supports").
    int refine;
    // > 0: the rows at b_sel 1 execute their per-query supports as the unions of
    // blocks of this many queries (Sparsity.exec_block: the GPU in bf16).
    int exec_block;
} RulerOpts;

// The configurations ruler_run scores (dense once, then each sparse mode at
// every (k, bsel)), in its order: the rows of preds are configuration major.
int ruler_n_configs(const RulerOpts *o);

// Runs dense, then the oracle (and the indexer) at every (k, bsel) on every
// task. preds (may be NULL) gets each prediction (rows × tasks, configuration
// major; caller frees each and the array). *out: per configuration, one row per
// task name in first-seen order then the average (caller frees).
int ruler_run(const Backbone *b, const RulerTask *tasks, int n_tasks, const RulerOpts *o, RulerResult **out,
              int *n_out, char ***preds, Status *st);

// Where RULER results came from, recorded in every row.
typedef struct {
    const char *model, *model_fingerprint;
    const char *rope;        // the full-attention layers' RoPE, e.g. "yarn (factor 4, original 32768)"
    const char *tasks_file, *tasks_sha256;
    const char *indexer;     // or NULL
    const int *ks, *bsels;
    int n_k, n_bsel;
    const char *device;      // the twin that ran it (backbone_describe)
    const char *command, *version, *date;
    int exec_block;          // RulerOpts.exec_block (0: per-query gathers)
} RulerProvenance;

// Writes results as JSON (an array: one object per configuration and task,
// mode, k, bsel, ctx, task, n_seq, accuracy, accuracy_ci95, seconds_per_task,
// prefill_seconds_per_task, decode_seconds_per_task, new_tokens, and a provenance object with the tasks' generator, seeds,
// sentence splitter and template) and a Markdown table (md may be NULL);
// preds (may be NULL) as JSON lines, one per configuration and instance. Atomic.
int ruler_write(const RulerResult *r, int n, const RulerTask *tasks, int n_tasks, char *const *preds,
                const RulerProvenance *p, const char *json, const char *md, const char *preds_path, Status *st);
