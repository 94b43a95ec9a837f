// train_cmd.c: `spindle train`, `spindle export` and `spindle scores`.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backbone.h"
#include "cli_layers.h"
#include "cli_util.h"
#include "commands.h"
#include "dist.h"
#include "export.h"
#include "fileio.h"
#include "indexer_ops.h"
#include "npy.h"
#include "model.h"
#include "shard.h"
#include "synthetic.h"
#include "trainer.h"

#define CMD "train"

// "0,3,5" → distinct layer indices (0 allowed), at most TRAIN_MAX_LAYERS. 2 after a message.
static int parse_layers(const char *value, int *out, int *n) {
    *n = 0;
    for (const char *p = value; *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        int dup = 0;
        for (int i = 0; i < *n; i++) dup |= out[i] == v;
        if (end == p || errno || v < 0 || v > 100000 || (*end && *end != ',') || *n == TRAIN_MAX_LAYERS || dup) {
            fprintf(stderr, "spindle " CMD ": --layers must be distinct comma-separated layer indices (got \"%s\")\n",
                    value);
            return 2;
        }
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (!*n) fprintf(stderr, "spindle " CMD ": --layers is empty\n");
    return *n ? 0 : 2;
}

// An integer flag value in [lo, hi], decimal, nothing after it. -1 after a message.
static int flag_int(const char *cmd, const char *flag, const char *value, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    if (!*value || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "spindle %s: %s must be an integer in [%ld, %ld] (got \"%s\")\n", cmd, flag, lo, hi, value);
        return -1;
    }
    *out = v;
    return 0;
}

// The run settings that flags set, applied onto tc (the defaults for a fresh
// run, the run's config.json for a resume). Returns 0 or the exit code 2.
static int apply_flags(TrainConfig *tc, const Flag *flags, int nf) {
    const char *v;
    long lv;
    double dv;
#define INT_FLAG(name, field, lo, hi) \
    if ((v = args_get(flags, nf, name))) { if (flag_int(CMD, name, v, lo, hi, &lv)) return 2; field = lv; }
#define NUM_FLAG(name, field, lo, hi) \
    if ((v = args_get(flags, nf, name))) { if (cli_double(CMD, name, v, lo, hi, &dv)) return 2; field = dv; }
    INT_FLAG("--steps", tc->steps, 1, 1 << 30);
    INT_FLAG("--d-index", tc->icfg.d_index, 1, INDEXER_MAX_D_INDEX);
    INT_FLAG("--d-rope", tc->icfg.d_rope, 0, INDEXER_MAX_D_ROPE);
    INT_FLAG("--heads", tc->icfg.n_heads, 1, INDEXER_MAX_HEADS);
    INT_FLAG("--eval-every", tc->eval_every, 1, 1 << 30);
    INT_FLAG("--recall-k", tc->recall_k, 1, 1 << 30);
    INT_FLAG("--ckpt-every", tc->ckpt_every, 1, 1 << 30);
    INT_FLAG("--seed", tc->seed, 1, 1 << 30);
    INT_FLAG("--warmup", tc->warmup, 0, 1 << 30);
    INT_FLAG("--min-pos", tc->min_pos, 0, 1 << 30);
    INT_FLAG("--batch", tc->batch, 1, TRAIN_MAX_BATCH);
    NUM_FLAG("--lr", tc->lr, 1e-9, 10);
    NUM_FLAG("--min-lr-frac", tc->min_lr_frac, 0, 1);
    NUM_FLAG("--weight-decay", tc->weight_decay, 0, 10);
    NUM_FLAG("--clip", tc->clip, 0, 1e9);
    NUM_FLAG("--query-frac", tc->query_frac, 1e-6, 1);
    NUM_FLAG("--retrieval-mix", tc->retrieval_mix, 0, 1);
    if ((v = args_get(flags, nf, "--variant"))) {
        if (!strcmp(v, "collapsed")) tc->icfg.variant = INDEXER_COLLAPSED, tc->icfg.n_heads = 1;
        else if (!strcmp(v, "expanded")) {
            if (!args_get(flags, nf, "--heads") && tc->icfg.variant != INDEXER_EXPANDED) tc->icfg.n_heads = 4;
            tc->icfg.variant = INDEXER_EXPANDED;
        } else {
            fprintf(stderr, "spindle " CMD ": --variant must be collapsed or expanded (got \"%s\")\n", v);
            return 2;
        }
    }
    if ((v = args_get(flags, nf, "--key-norm"))) {
        if (!strcmp(v, "none")) tc->icfg.key_norm = INDEXER_NORM_NONE;
        else if (!strcmp(v, "rms")) tc->icfg.key_norm = INDEXER_NORM_RMS;
        else if (!strcmp(v, "layer")) tc->icfg.key_norm = INDEXER_NORM_LAYER;
        else {
            fprintf(stderr, "spindle " CMD ": --key-norm must be none, rms or layer (got \"%s\")\n", v);
            return 2;
        }
    }
    if ((v = args_get(flags, nf, "--layers")) && parse_layers(v, tc->layers, &tc->n_layers)) return 2;
    if ((v = args_get(flags, nf, "--objective"))) {
        const int k = indexer_objective_parse(v);
        if (k < 0) {
            fprintf(stderr, "spindle " CMD ": --objective must be query, block or mix (got \"%s\")\n", v);
            return 2;
        }
        tc->objective.kind = (IndexerObjectiveKind)k;
    }
    INT_FLAG("--objective-bsel", tc->objective.bsel, 1, 1 << 20);
    NUM_FLAG("--block-weight", tc->objective.block_weight, 0, 1e6);
    if (args_get(flags, nf, "--block-weight") && tc->objective.kind != INDEXER_OBJ_MIX) {
        fprintf(stderr, "spindle " CMD ": --block-weight weighs the block term of --objective mix only\n");
        return 2;
    }
    if (args_get(flags, nf, "--objective-bsel") && tc->objective.kind == INDEXER_OBJ_QUERY) {
        fprintf(stderr, "spindle " CMD ": --objective-bsel needs --objective block or mix\n");
        return 2;
    }
#undef INT_FLAG
#undef NUM_FLAG
    int use_cuda, prec, rc;
    if ((v = args_get(flags, nf, "--device"))) {
        if ((rc = backbone_flags(CMD, v, NULL, &use_cuda, &prec)) == 2) return 2;
        tc->use_cuda = !strcmp(v, "cuda");
    }
    if ((v = args_get(flags, nf, "--teacher-precision"))) {
        if (strcmp(v, "fp32") && strcmp(v, "bf16")) {
            fprintf(stderr, "spindle " CMD ": --teacher-precision must be fp32 or bf16 (got \"%s\")\n", v);
            return 2;
        }
        tc->bf16_teacher = !strcmp(v, "bf16");
    }
    if ((v = args_get(flags, nf, "--backbone-precision")) && (tc->backbone_prec = train_prec_parse(v)) < 0) {
        fprintf(stderr, "spindle " CMD ": --backbone-precision must be bf16, mixed or fp32 (got \"%s\")\n", v);
        return 2;
    }
    return 0;
}

// A flag of a resumed run whose value differs from the run's: exit code 2.
static int refuse(const char *run_dir, const char *flag, const char *in_run, const char *given) {
    fprintf(stderr,
            "spindle " CMD ": %s/config.json: %s is %s in the run but %s on the command line; resume without it "
            "(or start a new run)\n",
            run_dir, flag, in_run, given);
    return 2;
}

static void fmt_num(char *buf, size_t n, double v, double other) {
    char a[64], b[64];
    snprintf(a, sizeof a, "%g", v), snprintf(b, sizeof b, "%g", other);
    snprintf(buf, n, strcmp(a, b) ? "%g" : "%.17g", v);
}

static void fmt_layers(char *buf, size_t n, const int *layers, int nl) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < nl && used + 16 < n; i++) used += (size_t)snprintf(buf + used, n - used, "%s%d", i ? "," : "", layers[i]);
}

static const Flag *flag_named(const Flag *flags, int nf, const char *name) {
    for (int i = 0; i < nf; i++)
        if (!strcmp(flags[i].name, name)) return &flags[i];
    SPINDLE_CHECK(0);
    return NULL;
}

// Whether the stream of the flags text (several values) or ids names the
// paths of the run's stream rs (by real path). a, b [n]: the run's paths and
// the given ones, space-separated, for the message.
static int same_stream(const TrainStream *rs, const Flag *text, const char *ids, char *a, char *b, size_t n) {
    const int n_given = ids ? 1 : text->n_values, n_run = rs->ids_path ? 1 : rs->n_text;
    size_t la = 0, lb = 0;
    a[0] = b[0] = 0;
    for (int i = 0; i < n_run; i++)
        la += (size_t)snprintf(a + la, la < n ? n - la : 0, "%s%s", i ? " " : "", rs->ids_path ? rs->ids_path : rs->text[i]);
    for (int i = 0; i < n_given; i++) {
        char rv[4096];
        const char *v = ids ? ids : text->values[i];
        lb += (size_t)snprintf(b + lb, lb < n ? n - lb : 0, "%s%s", i ? " " : "", realpath(v, rv) ? rv : v);
    }
    return !ids == !rs->ids_path && !strcmp(a, b);
}

// Resume: every flag given must agree with the run (run) after apply_flags
// (tc); --steps may only grow. Paths compare by their real path; a path the
// run names that no longer exists may be replaced (the folder was moved).
// Returns 0 or the exit code 2.
static int check_against_run(TrainConfig *tc, const TrainConfig *run, const Flag *flags, int nf) {
    char a[4096], b[4096];
    // The data source: shards or online, and the online stream's paths and ctx.
    const Flag *text = flag_named(flags, nf, "--text");
    const char *ids = args_get(flags, nf, "--ids"), *synth = args_get(flags, nf, "--synthetic");
    const int random_ids = args_get(flags, nf, "--random-ids") != NULL;
    if (run->shards_dir && (text->value || ids || random_ids || args_get(flags, nf, "--ctx")))
        return refuse(tc->run_dir, ids ? "--ids" : text->value ? "--text" : random_ids ? "--random-ids" : "--ctx",
                      "not set (the run trains from shards)", "given");
    if (!run->shards_dir && args_get(flags, nf, "--shards"))
        return refuse(tc->run_dir, "--shards", "not set (the run trains online)", "given");
    if (!run->shards_dir && run->online.random && (text->value || ids))
        return refuse(tc->run_dir, ids ? "--ids" : "--text", "not set (the run trains on --random-ids)", "given");
    if (!run->shards_dir && !run->online.random && random_ids)
        return refuse(tc->run_dir, "--random-ids", "not set (the run reads --text/--ids)", "given");
    if (!run->shards_dir && !run->online.random && (text->value || ids) &&
        !same_stream(&run->online, text, ids, a, b, sizeof a))
        return refuse(tc->run_dir, ids ? "--ids" : "--text", a, b);
    if (args_get(flags, nf, "--bos") && !run->online.bos)
        return refuse(tc->run_dir, "--bos", "not set (its windows start without the BOS)", "given");
    if (synth && (!run->synthetic || strcmp(synth, run->synthetic)))
        return refuse(tc->run_dir, "--synthetic", run->synthetic ? run->synthetic : "not set (the run has --model)", synth);
    const Flag *htext = flag_named(flags, nf, "--heldout-text");
    const char *hids = args_get(flags, nf, "--heldout-ids");
    if ((htext->value || hids) && !same_stream(&run->heldout_stream, htext, hids, a, b, sizeof a))
        return refuse(tc->run_dir, hids ? "--heldout-ids" : "--heldout-text", a[0] ? a : "none", b);
    if (!run->shards_dir && args_get(flags, nf, "--ctx")) {
        int ctx;
        if (cli_positive(CMD, "--ctx", args_get(flags, nf, "--ctx"), &ctx)) return 2;
        snprintf(a, sizeof a, "%d", run->ctx), snprintf(b, sizeof b, "%d", ctx);
        if (ctx != run->ctx) return refuse(tc->run_dir, "--ctx", a, b);
    }
    const char *pflags[3] = {"--model", "--shards", "--heldout"};
    const char **pdst[3] = {&tc->model_dir, &tc->shards_dir, &tc->heldout_dir};
    const char *have[3] = {run->model_dir, run->shards_dir, run->heldout_dir};
    for (int i = 0; i < 3; i++) {
        const char *v = args_get(flags, nf, pflags[i]);
        if (!v) continue;
        char rv[4096];
        const char *given = realpath(v, rv) ? rv : v;
        if (have[i] && !strcmp(have[i], given)) continue;
        if (have[i] && access(have[i], F_OK) != 0) {
            fprintf(stderr, "spindle " CMD ": %s/config.json: the run's %s %s no longer exists; using %s\n", tc->run_dir,
                    pflags[i] + 2, have[i], given);
            snprintf(tc->path_store[i], sizeof tc->path_store[i], "%s", given);
            *pdst[i] = tc->path_store[i];
            continue;
        }
        return refuse(tc->run_dir, pflags[i], have[i] ? have[i] : "none", given);
    }
#define SAME(flag, field)                                                                  \
    if (args_get(flags, nf, flag) && tc->field != run->field) {                             \
        fmt_num(a, sizeof a, (double)run->field, (double)tc->field);                       \
        fmt_num(b, sizeof b, (double)tc->field, (double)run->field);                       \
        return refuse(tc->run_dir, flag, a, b);                                            \
    }
    SAME("--d-index", icfg.d_index);
    SAME("--d-rope", icfg.d_rope);
    SAME("--heads", icfg.n_heads);
    SAME("--eval-every", eval_every);
    SAME("--recall-k", recall_k);
    SAME("--ckpt-every", ckpt_every);
    SAME("--seed", seed);
    SAME("--warmup", warmup);
    SAME("--min-pos", min_pos);
    SAME("--lr", lr);
    SAME("--min-lr-frac", min_lr_frac);
    SAME("--weight-decay", weight_decay);
    SAME("--clip", clip);
    SAME("--query-frac", query_frac);
    SAME("--retrieval-mix", retrieval_mix);
    SAME("--batch", batch);
    SAME("--objective-bsel", objective.bsel);
    SAME("--block-weight", objective.block_weight);
#undef SAME
    if (args_get(flags, nf, "--objective") && tc->objective.kind != run->objective.kind)
        return refuse(tc->run_dir, "--objective", indexer_objective_name(run->objective.kind),
                      indexer_objective_name(tc->objective.kind));
    static const char *const variants[] = {"collapsed", "expanded"}, *const norms[] = {"none", "rms", "layer"};
    if (args_get(flags, nf, "--variant") && tc->icfg.variant != run->icfg.variant)
        return refuse(tc->run_dir, "--variant", variants[run->icfg.variant], variants[tc->icfg.variant]);
    if (args_get(flags, nf, "--key-norm") && tc->icfg.key_norm != run->icfg.key_norm)
        return refuse(tc->run_dir, "--key-norm", norms[run->icfg.key_norm], norms[tc->icfg.key_norm]);
    if (args_get(flags, nf, "--layers") &&
        (tc->n_layers != run->n_layers || memcmp(tc->layers, run->layers, sizeof(int) * (size_t)tc->n_layers))) {
        fmt_layers(a, sizeof a, run->layers, run->n_layers), fmt_layers(b, sizeof b, tc->layers, tc->n_layers);
        return refuse(tc->run_dir, "--layers", a, b);
    }
    if (args_get(flags, nf, "--device") && tc->use_cuda != run->use_cuda)
        return refuse(tc->run_dir, "--device", run->use_cuda ? "cuda" : "cpu", tc->use_cuda ? "cuda" : "cpu");
    if (args_get(flags, nf, "--teacher-precision") && tc->bf16_teacher != run->bf16_teacher)
        return refuse(tc->run_dir, "--teacher-precision", run->bf16_teacher ? "bf16" : "fp32",
                      tc->bf16_teacher ? "bf16" : "fp32");
    if (args_get(flags, nf, "--backbone-precision") && train_backbone_prec(tc) != train_backbone_prec(run))
        return refuse(tc->run_dir, "--backbone-precision", train_prec_name(train_backbone_prec(run)),
                      train_prec_name(train_backbone_prec(tc)));
    if (tc->steps < run->steps) {
        snprintf(a, sizeof a, "%ld", run->steps), snprintf(b, sizeof b, "%ld (a run cannot be shortened)", tc->steps);
        return refuse(tc->run_dir, "--steps", a, b);
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    Flag flags[] = {
        {"--model", 1, "the frozen checkpoint the shards came from (required unless --resume or --synthetic)", NULL},
        {"--synthetic", 1, "online training on a random-weight model built in memory instead of --model: "
                           SYNTHETIC_ALL_NAMES " (model/synthetic.h; on the CPU the dense ones of at most 2^30 "
                           "parameters); with --ids or --random-ids", NULL},
        {"--shards", 1, "teacher shards folder, spindle teacher --out (or --text/--ids: online)", NULL},
        {"--text", 2, "online training: text file(s) or folder(s), tokenized and concatenated as spindle teacher "
                      "reads them; the backbone runs in the same pass (no shards)", NULL},
        {"--ids", 1, "online training: token ids file instead of --text", NULL},
        {"--random-ids", 0, "online training: seeded random token ids instead of --text/--ids (window c from "
                            "(--seed, c): an endless stream)", NULL},
        {"--ctx", 1, "online training: tokens per sequence (the windows spindle teacher --ctx cuts)", NULL},
        {"--bos", 0, "online training on --text/--ids: each window (and the held-out one) is the model's BOS token "
                     "(tokenizer_config.json bos_token) then ctx - 1 tokens of the text, as spindle teacher --bos "
                     "cuts them (Gemma 3: add_bos_token)", NULL},
        {"--out", 1, "run folder: config.json, checkpoints/, log.jsonl, metrics.csv", NULL},
        {"--heldout", 1, "held-out shards folder for recall@k every --eval-every steps", NULL},
        {"--heldout-text", 2, "held-out text file(s)/folder(s) instead: recall@k on its first window of the "
                              "training ctx, computed online", NULL},
        {"--heldout-ids", 1, "held-out token ids file instead (as --heldout-text)", NULL},
        {"--layers", 1, "full-attention layers to train (default: every layer in the shards; online: every "
                        "full-attention layer, e.g. 0,4,8-11)", NULL},
        {"--steps", 1, "optimizer steps, --batch teacher sequences each (default 200; with --resume, larger extends the run)", NULL},
        {"--batch", 1, "sequences per optimizer step (default 1; under mpirun -np N: N), AdamW on the mean of their "
                       "gradients; under mpirun a multiple of N, rank r taking sequences r, r+N, ...", NULL},
        {"--lr", 1, "peak learning rate (default 3e-3)", NULL},
        {"--warmup", 1, "linear warm-up steps (default 20), then cosine to --min-lr-frac", NULL},
        {"--min-lr-frac", 1, "final learning rate / peak (default 0.1)", NULL},
        {"--weight-decay", 1, "AdamW decoupled weight decay on the projections (default 0.01)", NULL},
        {"--clip", 1, "gradient-norm clip per layer (default 1.0; 0 = off)", NULL},
        {"--seed", 1, "seed of the initialisation and the query sampling (default 1)", NULL},
        {"--query-frac", 1, "fraction of positions >= --min-pos sampled per step (default 0.25; --objective block/mix: of the blocks)", NULL},
        {"--retrieval-mix", 1, "online, --objective query: this fraction of the windows (seeded by --seed and the window) becomes a kv retrieval task over its own text (16 key-value needles, a question about one; eval --tasks kv), with every question and answer position in the step's queries (default 0: none)", NULL},
        {"--min-pos", 1, "first position that can be sampled (default 16)", NULL},
        {"--objective", 1, "query (default): KL(P_t || Q_t) per sampled query; block: KL of the block aggregates "
                           "(docs/design.md \"Loss\"), whole blocks sampled with probability --query-frac; mix: "
                           "query + --block-weight x block", NULL},
        {"--objective-bsel", 1, "block size of the block term (default 64: the deployed b_sel)", NULL},
        {"--block-weight", 1, "weight w of the block term in --objective mix (default 1)", NULL},
        {"--variant", 1, "collapsed (default) or expanded", NULL},
        {"--d-index", 1, "d_I (default 128, at most 4096)", NULL},
        {"--d-rope", 1, "RoPE dims of q^I/k^I (default 64; 0 = none; even, at most d_I and 1024)", NULL},
        {"--heads", 1, "H^I of the expanded variant (default 4, at most 64)", NULL},
        {"--key-norm", 1, "none, rms or layer (default layer)", NULL},
        {"--eval-every", 1, "held-out recall every N steps (default 50)", NULL},
        {"--recall-k", 1, "k of the held-out recall (default ctx/8, at most 256; below ctx/2)", NULL},
        {"--ckpt-every", 1, "checkpoint every N steps (default 25; always at the end)", NULL},
        {"--resume", 0, "continue the run in --out from its newest valid checkpoint, with the settings in its "
                        "config.json (an empty or missing --out starts fresh)", NULL},
        {"--threads", 1, "OpenMP threads (default: all cores)", NULL},
        {"--device", 1, "cpu (default) or cuda: where the loss, gradients and AdamW run", NULL},
        {"--teacher-precision", 1, "fp32 (default) or bf16: with --device cuda, the teacher's P from bf16 q, k on "
                                   "tensor cores", NULL},
        {"--backbone-precision", 1, "with --device cuda: the backbone upload's precision, bf16, mixed or fp32; "
                                    "online its pass gives the teacher (default bf16), from shards it rebuilds "
                                    "q/k from x (default fp32)", NULL},
        {"--stop-after", 1, "testing aid: stop (as if killed) after N steps of this process", NULL},
    };
    const int nf = N_FLAGS(flags);
    int rc = cli_parse(argc, argv, flags, nf, CMD, (const char *const[]){"--out", NULL});
    if (rc) return rc;
    if ((rc = cli_threads(CMD, args_get(flags, nf, "--threads")))) return rc;
    const char *out = args_get(flags, nf, "--out"), *v;
    long lv;
    static TrainConfig tc, run;  // static: each holds 12 KB of paths
    tc = train_config_default();
    Status st;
    if ((v = args_get(flags, nf, "--stop-after"))) {
        if (flag_int(CMD, "--stop-after", v, 1, 1 << 30, &lv)) return 2;
        tc.stop_after = lv;
    }
    int fresh = 1;
    if (args_get(flags, nf, "--resume")) {
        train_remove_stale_tmp(out, CMD);
        const long stop_after = tc.stop_after;
        const int lrc = train_config_load(&tc, out, &st);
        if (lrc < 0) return cli_fail(CMD, &st);
        tc.stop_after = stop_after;
        if (lrc == 0) fresh = 0;
        else if (!dir_is_empty_or_missing(out)) {
            fprintf(stderr, "spindle " CMD ": %s: holds files but no config.json: not a spindle run folder\n", out);
            return 1;
        } else
            fprintf(stderr, "spindle " CMD ": --resume: %s holds nothing to resume; starting fresh\n", out);
    }
    tc.run_dir = out;
    const Flag *text = flag_named(flags, nf, "--text"), *htext = flag_named(flags, nf, "--heldout-text");
    const char *ids = args_get(flags, nf, "--ids"), *shards = args_get(flags, nf, "--shards");
    const char *hids = args_get(flags, nf, "--heldout-ids");
    if ((htext->value && hids) || ((htext->value || hids) && args_get(flags, nf, "--heldout"))) {
        fprintf(stderr, "spindle " CMD ": give one of --heldout (shards), --heldout-text or --heldout-ids\n");
        return 2;
    }
    if (text->value && ids) {
        fprintf(stderr, "spindle " CMD ": give one of --text or --ids, not both\n");
        return 2;
    }
    if (shards && (text->value || ids)) {
        fprintf(stderr, "spindle " CMD ": --shards and --%s exclude each other: train from teacher shards, or online "
                        "from the text/ids (no shards)\n", ids ? "ids" : "text");
        return 2;
    }
    if (shards && args_get(flags, nf, "--ctx")) {
        fprintf(stderr, "spindle " CMD ": --ctx is for online training (--text/--ids); the shards fix their ctx\n");
        return 2;
    }
    const char *synth = args_get(flags, nf, "--synthetic");
    const int random_ids = args_get(flags, nf, "--random-ids") != NULL;
    if (random_ids && (text->value || ids || shards)) {
        fprintf(stderr, "spindle " CMD ": --random-ids replaces --%s (the token ids are drawn from --seed)\n",
                ids ? "ids" : text->value ? "text" : "shards");
        return 2;
    }
    if (synth && (args_get(flags, nf, "--model") || shards || text->value)) {
        fprintf(stderr, "spindle " CMD ": --synthetic %s: %s\n", synth,
                args_get(flags, nf, "--model") ? "it replaces --model (give one of them)"
                : shards ? "it trains online only (--ids or --random-ids, no --shards)"
                         : "a synthetic model has no tokenizer: give --ids or --random-ids instead of --text");
        return 2;
    }
    const int bos = args_get(flags, nf, "--bos") != NULL;
    if (bos && (shards || random_ids || synth)) {
        fprintf(stderr, "spindle " CMD ": --bos goes with online training on a model's --text/--ids (%s)\n",
                shards ? "shards hold their windows as spindle teacher cut them: teacher --bos"
                : synth ? "a synthetic model has no tokenizer" : "--random-ids draws every id");
        return 2;
    }
    if (synth && (htext->value || args_get(flags, nf, "--heldout"))) {
        fprintf(stderr, "spindle " CMD ": --synthetic %s: held-out recall from --heldout-ids only (no tokenizer, no "
                        "shards of a synthetic model)\n", synth);
        return 2;
    }
    if (fresh) {
        const int online = text->value || ids || random_ids;
        const char *model = args_get(flags, nf, "--model");
        if ((!model && !synth) || (!shards && !online)) {
            fprintf(stderr, "spindle " CMD ": %s is required to start a run (%s; --out RUN --resume alone continues one)\n",
                    !model && !synth ? "--model" : "--shards",
                    !model && !synth ? "or --synthetic NAME" : "or --text/--ids/--random-ids for online training");
            return 2;
        }
        if (online && !args_get(flags, nf, "--ctx")) {
            fprintf(stderr, "spindle " CMD ": online training (--%s) needs --ctx\n",
                    ids ? "ids" : random_ids ? "random-ids" : "text");
            return 2;
        }
        tc.model_dir = model;
        tc.synthetic = synth;
        tc.shards_dir = shards;
        tc.heldout_dir = args_get(flags, nf, "--heldout");
        tc.online.random = random_ids;
        tc.online.bos = tc.heldout_stream.bos = bos;
        if (online) {
            if (text->value && text->n_values > TRAIN_MAX_TEXT) {
                fprintf(stderr, "spindle " CMD ": --text: %d paths, at most %d (give folders)\n", text->n_values,
                        TRAIN_MAX_TEXT);
                return 2;
            }
            tc.online.ids_path = ids;
            for (int i = 0; text->value && i < text->n_values; i++) tc.online.text[tc.online.n_text++] = text->values[i];
            for (int i = 0; i < (ids ? 1 : tc.online.n_text); i++) {  // name a missing input before anything else
                const char *p = ids ? ids : tc.online.text[i];
                if (access(p, R_OK) != 0) {
                    fprintf(stderr, "spindle " CMD ": %s: cannot read the %s (%s)\n", p,
                            ids ? "token ids file" : "training text", strerror(errno));
                    return 1;
                }
            }
            if (cli_positive(CMD, "--ctx", args_get(flags, nf, "--ctx"), &tc.ctx)) return 2;
        }
        if (htext->value && htext->n_values > TRAIN_MAX_TEXT) {
            fprintf(stderr, "spindle " CMD ": --heldout-text: %d paths, at most %d (give folders)\n", htext->n_values,
                    TRAIN_MAX_TEXT);
            return 2;
        }
        tc.heldout_stream.ids_path = hids;
        for (int i = 0; htext->value && i < htext->n_values; i++)
            tc.heldout_stream.text[tc.heldout_stream.n_text++] = htext->values[i];
        for (int i = 0; i < (hids ? 1 : tc.heldout_stream.n_text); i++) {
            const char *p = hids ? hids : tc.heldout_stream.text[i];
            if (access(p, R_OK) != 0) {
                fprintf(stderr, "spindle " CMD ": %s: cannot read the held-out %s (%s)\n", p,
                        hids ? "token ids file" : "text", strerror(errno));
                return 1;
            }
        }
        ModelConfig mc;
        if (synth && synthetic_config(synth, &mc)) {
            fprintf(stderr, "spindle " CMD ": --synthetic must be one of " SYNTHETIC_ALL_NAMES " (got \"%s\")\n", synth);
            return 2;
        }
        if (!synth && config_load(&mc, tc.model_dir, &st)) return cli_fail(CMD, &st);
        tc.icfg = indexer_config_default(mc.hidden);
        rc = apply_flags(&tc, flags, nf);
        tc.online.random_seed = tc.seed;  // --random-ids: the windows come from the run's seed
        if (!rc && online) {
            // Online: --layers as spindle teacher takes it (ranges, sorted; default every full-attention layer).
            if (cli_layers(CMD, "--layers", args_get(flags, nf, "--layers"), mc.layer_kinds, mc.n_layers,
                           TRAIN_MAX_LAYERS, tc.layers, &tc.n_layers))
                rc = 2;
            else if (tc.ctx > mc.max_pos) {
                fprintf(stderr, "spindle " CMD ": --ctx %d is longer than the model supports (%s: "
                                "max_position_embeddings %d)\n", tc.ctx, synth ? synth : tc.model_dir, mc.max_pos);
                rc = 2;
            }
        }
        // Indexers are trained for full-attention layers only (a layer past the
        // model is not in the shards either: the trainer says so).
        for (int i = 0; !rc && !online && args_get(flags, nf, "--layers") && i < tc.n_layers; i++)
            if (tc.layers[i] < mc.n_layers &&
                cli_check_layers(CMD, "--layers", &tc.layers[i], 1, mc.layer_kinds, mc.n_layers))
                rc = 2;
        config_free(&mc);
        if (rc) return rc;
        tc.schedule_steps = tc.steps;
    } else {
        run = tc;
        if ((rc = apply_flags(&tc, flags, nf)) || (rc = check_against_run(&tc, &run, flags, nf))) return rc;
    }
    if (indexer_config_check(&tc.icfg, &st)) {
        fprintf(stderr, "spindle " CMD ": --d-index / --d-rope / --heads: %s\n", st.msg);
        return 2;
    }
    if (args_get(flags, nf, "--backbone-precision") && !tc.use_cuda) {
        fprintf(stderr, "spindle " CMD ": --backbone-precision needs --device cuda (the CPU twin is fp32)\n");
        return 2;
    }
    if (tc.bf16_teacher && !tc.use_cuda) {
        fprintf(stderr, "spindle " CMD ": --teacher-precision bf16 needs --device cuda\n");
        return 2;
    }
    if (tc.use_cuda && tc.icfg.variant == INDEXER_EXPANDED) {
        fprintf(stderr, "spindle " CMD ": --variant expanded trains on the CPU twin only (drop --device cuda)\n");
        return 2;
    }
    int use_cuda, prec;
    if ((rc = backbone_flags(CMD, tc.use_cuda ? "cuda" : "cpu", NULL, &use_cuda, &prec))) return rc;
    if (fresh && !tc.shards_dir) {  // online: k of the held-out recall from --ctx
        if (!args_get(flags, nf, "--recall-k")) {
            tc.recall_k = tc.ctx / 8 < 256 ? (tc.ctx / 8 > 0 ? tc.ctx / 8 : 1) : 256;
            fprintf(stderr, "spindle " CMD ": held-out recall@%d (the default: ctx %d / 8, at most 256)\n", tc.recall_k,
                    tc.ctx);
        } else if (2 * tc.recall_k >= tc.ctx) {
            fprintf(stderr, "spindle " CMD ": --recall-k %d must be below half of --ctx %d\n", tc.recall_k, tc.ctx);
            return 2;
        }
    } else if (fresh) {  // the shards' ctx and, without --layers, every layer they hold
        char **paths;
        int n;
        ShardReader *r;
        if (shard_list(tc.shards_dir, &paths, &n, &st)) return cli_fail(CMD, &st);
        if (n == 0) {
            shard_free_list(paths, n);
            fprintf(stderr, "spindle " CMD ": %s: no complete shards (shard-NNNNN.h5)\n", tc.shards_dir);
            return 1;
        }
        rc = shard_open(&r, paths[0], NULL, NULL, &st);
        shard_free_list(paths, n);
        if (rc) return cli_fail(CMD, &st);
        const ShardHeader *h = shard_header(r);
        if (!args_get(flags, nf, "--layers")) {
            tc.n_layers = h->n_layers < TRAIN_MAX_LAYERS ? h->n_layers : TRAIN_MAX_LAYERS;
            memcpy(tc.layers, h->layers, sizeof(int) * (size_t)tc.n_layers);
        }
        // The held-out recall@k means something only well below the context: k defaults to ctx/8
        // (at most 256) and is refused from ctx/2 on.
        const int ctx = h->ctx;
        shard_close(r);
        if (!args_get(flags, nf, "--recall-k")) {
            tc.recall_k = ctx / 8 < 256 ? (ctx / 8 > 0 ? ctx / 8 : 1) : 256;
            fprintf(stderr, "spindle " CMD ": held-out recall@%d (the default: ctx %d / 8, at most 256)\n", tc.recall_k,
                    ctx);
        } else if (2 * tc.recall_k >= ctx) {
            fprintf(stderr, "spindle " CMD ": --recall-k %d must be below half the shards' ctx %d (%s)\n", tc.recall_k,
                    ctx, tc.shards_dir);
            return 2;
        }
    }
    if (fresh) {
        // Only *.tmp files of a run killed before its config.json was written: remove them.
        DIR *d = opendir(out);
        int only_tmp = d != NULL, any = 0;
        for (struct dirent *e; d && (e = readdir(d));) {
            const size_t len = strlen(e->d_name);
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            any = 1;
            if (len <= 4 || strcmp(e->d_name + len - 4, ".tmp")) only_tmp = 0;
        }
        if (d) closedir(d);
        if (only_tmp && any) train_remove_stale_tmp(out, CMD);
    }
    // On the GPU, data parallel when launched by mpirun (a build with
    // -DSPINDLE_NCCL=ON; otherwise, and without mpirun, one rank).
    static Dist dist;
    if (tc.use_cuda) {
        if (dist_init(&dist, &st)) {
            rc = cli_fail(CMD, &st);
            dist_abort(&dist, rc);  // ranks already past MPI_Init may wait for this one
            return rc;
        }
        tc.dist = &dist;
    }
    // The batch: by default one sequence per rank; a multiple of the ranks (every rank checks the same).
    const int world = tc.use_cuda ? dist.world : 1;
    if (fresh && !args_get(flags, nf, "--batch")) tc.batch = world;
    if (tc.batch % world) {
        fprintf(stderr, "spindle " CMD ": %s%d sequence(s) per step do not split over %d ranks: give a --batch "
                        "that is a multiple of the mpirun -np\n", fresh ? "--batch " : "the run's batch ", tc.batch,
                world);
        if (tc.use_cuda) dist_finalize(&dist);
        return 2;
    }
    rc = train_run(&tc, !fresh, &st) ? cli_fail(CMD, &st) : 0;
    if (rc) dist_abort(&dist, rc);  // the other ranks may wait in a collective
    if (tc.use_cuda) dist_finalize(&dist);
    return rc;
}

int cmd_export(int argc, char **argv) {
    Flag flags[] = {
        {"--run", 1, "run folder (spindle train --out)", NULL},
        {"--out", 1, "indexer folder to create: model.safetensors + config.json", NULL},
        {"--k", 1, "default k written to config.json (default 256)", NULL},
        {"--bsel", 1, "default b_sel written to config.json (default 1)", NULL},
        {"--step", 1, "export this checkpoint's step (default: the newest; 0 = the untrained initialisation)", NULL},
        {"--layout", 1, "tensor names, shapes and config keys: spindle (default; what --indexer loads), dsa "
                        "(DeepSeek-V3.2's indexer; head-expanded, LayerNorm key) or qsa (Qwen4-Exp's GQA indexer; "
                        "head-collapsed, RMSNorm key)", NULL},
    };
    const int nf = N_FLAGS(flags);
    int rc = cli_parse(argc, argv, flags, nf, "export", (const char *const[]){"--run", "--out", NULL});
    if (rc) return rc;
    int k = 256, bsel = 1;
    long step = -1;
    const char *v;
    if (((v = args_get(flags, nf, "--k")) && cli_positive("export", "--k", v, &k)) ||
        ((v = args_get(flags, nf, "--bsel")) && cli_positive("export", "--bsel", v, &bsel)) ||
        ((v = args_get(flags, nf, "--step")) && flag_int("export", "--step", v, 0, LONG_MAX, &step)))
        return 2;
    int layout = EXPORT_LAYOUT_SPINDLE;
    if ((v = args_get(flags, nf, "--layout")) && (layout = export_layout_parse(v)) < 0) {
        fprintf(stderr, "spindle export: --layout must be spindle, dsa or qsa (got \"%s\")\n", v);
        return 2;
    }
    Status st;
    if (export_indexer_as(flags[0].value, flags[1].value, step, k, bsel, (ExportLayout)layout, &st))
        return cli_fail("export", &st);
    fprintf(stderr, "spindle export: %s -> %s\n", flags[0].value, flags[1].value);
    return 0;
}

// `spindle scores`: one layer's indexer scores for chosen query positions of a
// teacher-shard sequence — what scripts/check-export.py recomputes from the
// exported safetensors to show another stack reads the export the same way.
int cmd_scores(int argc, char **argv) {
    Flag flags[] = {
        {"--indexer", 1, "exported indexer folder", NULL},
        {"--shard", 1, "teacher shard (.h5) holding the layer's x", NULL},
        {"--seq", 1, "sequence within the shard (default 0)", NULL},
        {"--layer", 1, "model layer", NULL},
        {"--positions", 1, "query positions, comma-separated", NULL},
        {"--out", 1, ".npy float32 [n_positions, ctx]: score_{t,j}, -inf for j > t", NULL},
        {"--dump-selection", 1, ".npy float32 [rows, k]: the indexer's supports over the whole sequence (rows: ctx "
                                "per query, ceil(ctx/bsel) per block), key indices ascending, then -1", NULL},
        {"--k", 1, "with --dump-selection: keys per support", NULL},
        {"--bsel", 1, "with --dump-selection: queries per shared block (default 1: per query)", NULL},
    };
    const int nf = N_FLAGS(flags);
    int rc = cli_parse(argc, argv, flags, nf, "scores", (const char *const[]){"--indexer", "--shard", "--layer", NULL});
    if (rc) return rc;
    int pos[64], n_pos = 0, sel_k = 0, bsel = 1;
    long seq = 0, layer;
    const char *v, *sel_out = args_get(flags, nf, "--dump-selection");
    const char *pos_v = args_get(flags, nf, "--positions"), *out = args_get(flags, nf, "--out");
    if (!pos_v != !out || (!pos_v && !sel_out)) {
        fprintf(stderr, "spindle scores: --positions and --out go together, and one of them or --dump-selection "
                        "is needed\n");
        return 2;
    }
    if (!sel_out != !args_get(flags, nf, "--k") || (!sel_out && args_get(flags, nf, "--bsel"))) {
        fprintf(stderr, "spindle scores: --dump-selection needs --k (and takes --bsel); --k and --bsel need it\n");
        return 2;
    }
    if (((v = args_get(flags, nf, "--seq")) && flag_int("scores", "--seq", v, 0, 1 << 30, &seq)) ||
        flag_int("scores", "--layer", args_get(flags, nf, "--layer"), 0, 1 << 20, &layer) ||
        (pos_v && cli_list("scores", "--positions", pos_v, 0, pos, &n_pos)) ||
        (sel_out && cli_positive("scores", "--k", args_get(flags, nf, "--k"), &sel_k)) ||
        ((v = args_get(flags, nf, "--bsel")) && cli_positive("scores", "--bsel", v, &bsel)))
        return 2;
    Status st;
    ShardReader *r = NULL;
    IndexerSet set = {0};
    float *x = NULL, *scores = NULL, *self = NULL;
    int *sel = NULL, *n_sel = NULL;
    rc = 1;
    if (shard_open(&r, args_get(flags, nf, "--shard"), NULL, NULL, &st)) goto done;
    const ShardHeader *h = shard_header(r);
    if (indexer_set_load(&set, flags[0].value, 1 << 20, h->fingerprint, &st)) goto done;
    if (layer >= set.n_model_layers || !set.params[layer]) {
        status_fail(&st, "%s: no indexer for layer %ld", flags[0].value, layer);
        goto done;
    }
    if (set.cfg.d_model != h->d_model) {
        status_fail(&st, "%s: indexer d_model %d, but the shard %s holds x of width %d", flags[0].value,
                    set.cfg.d_model, args_get(flags, nf, "--shard"), h->d_model);
        goto done;
    }
    if (seq >= h->n_seq) {
        status_fail(&st, "%s: --seq %ld, but the shard holds %lld sequences", args_get(flags, nf, "--shard"), seq,
                    (long long)h->n_seq);
        goto done;
    }
    for (int i = 0; i < n_pos; i++)
        if (pos[i] >= h->ctx) {
            status_fail(&st, "--positions: %d is beyond the shard's ctx %d", pos[i], h->ctx);
            goto done;
        }
    x = xmalloc(sizeof(float) * (size_t)h->ctx * h->d_model);
    if (shard_read(r, seq, (int)layer, NULL, 0, x, (size_t)h->ctx * h->d_model, NULL, 0, &st)) goto done;
    NpyWriter w;
    if (out) {
        scores = xmalloc(sizeof(float) * (size_t)n_pos * h->ctx);
        indexer_forward_cpu(scores, NULL, &set.cfg, set.params[layer], x, h->ctx, pos, n_pos);
        if (npy_writer_open(&w, out, n_pos, h->ctx, &st)) goto done;
        if (npy_writer_rows(&w, scores, n_pos, &st)) {
            npy_writer_abort(&w);
            goto done;
        }
        if (npy_writer_close(&w, &st)) goto done;
    }
    if (sel_out) {  // the supports sparse prefill would use on this x (kernels/indexer_ops.h)
        const int T = h->ctx, k = sel_k < T ? sel_k : T, rows = (T + bsel - 1) / bsel;
        sel = xmalloc(sizeof(int) * (size_t)rows * k), n_sel = xmalloc(sizeof(int) * (size_t)rows);
        self = xmalloc(sizeof(float) * (size_t)rows * k);
        indexer_select_cpu(sel, n_sel, &set.cfg, set.params[layer], x, T, k, bsel);
        for (size_t i = 0; i < (size_t)rows * k; i++) self[i] = (float)sel[i];
        if (npy_writer_open(&w, sel_out, rows, k, &st)) goto done;
        if (npy_writer_rows(&w, self, rows, &st)) {
            npy_writer_abort(&w);
            goto done;
        }
        if (npy_writer_close(&w, &st)) goto done;
    }
    rc = 0;
done:
    if (rc) cli_fail("scores", &st);
    if (r) shard_close(r);
    indexer_set_free(&set);
    free(x), free(scores), free(sel), free(n_sel), free(self);
    return rc;
}
