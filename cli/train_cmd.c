// train_cmd.c: `spindle train` and `spindle export`.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backbone.h"
#include "cli_util.h"
#include "commands.h"
#include "export.h"
#include "indexer_ops.h"
#include "npy.h"
#include "model.h"
#include "shard.h"
#include "trainer.h"

#define CMD "train"

// "0,3,5" → layer indices (0 allowed), at most TRAIN_MAX_LAYERS. -1 after a message.
static int parse_layers(const char *value, int *out, int *n) {
    *n = 0;
    for (const char *p = value; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 100000 || (*end && *end != ',') || *n == TRAIN_MAX_LAYERS) {
            fprintf(stderr, "spindle " CMD ": --layers must be comma-separated layer indices (got \"%s\")\n", value);
            return -1;
        }
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return *n ? 0 : -1;
}

int cmd_train(int argc, char **argv) {
    Flag flags[] = {
        {"--model", 1, "the frozen checkpoint the shards came from", NULL},
        {"--shards", 1, "teacher shards folder (spindle teacher --out)", NULL},
        {"--out", 1, "run folder: config.json, checkpoints/, log.jsonl, metrics.csv", NULL},
        {"--heldout", 1, "held-out shards folder for recall@k every --eval-every steps", NULL},
        {"--layers", 1, "layers to train (default: every layer in the shards)", NULL},
        {"--steps", 1, "optimizer steps, one teacher sequence each (default 200)", NULL},
        {"--lr", 1, "peak learning rate (default 3e-3)", NULL},
        {"--warmup", 1, "linear warm-up steps (default 20), then cosine to --min-lr-frac", NULL},
        {"--min-lr-frac", 1, "final learning rate / peak (default 0.1)", NULL},
        {"--weight-decay", 1, "AdamW decoupled weight decay on the projections (default 0.01)", NULL},
        {"--clip", 1, "gradient-norm clip per layer (default 1.0; 0 = off)", NULL},
        {"--seed", 1, "seed of the initialisation and the query sampling (default 1)", NULL},
        {"--query-frac", 1, "fraction of positions >= --min-pos sampled per step (default 0.25)", NULL},
        {"--min-pos", 1, "first position that can be sampled (default 16)", NULL},
        {"--variant", 1, "collapsed (default) or expanded", NULL},
        {"--d-index", 1, "d_I (default 128)", NULL},
        {"--d-rope", 1, "RoPE dims of q^I/k^I (default 64; 0 = none)", NULL},
        {"--heads", 1, "H^I of the expanded variant (default 4)", NULL},
        {"--key-norm", 1, "none, rms or layer (default layer)", NULL},
        {"--eval-every", 1, "held-out recall every N steps (default 50)", NULL},
        {"--recall-k", 1, "k of the held-out recall (default 256)", NULL},
        {"--ckpt-every", 1, "checkpoint every N steps (default 25; always at the end)", NULL},
        {"--resume", 0, "continue the run in --out from its newest checkpoint", NULL},
        {"--threads", 1, "OpenMP threads (default: all cores)", NULL},
        {"--device", 1, "cpu (default) or cuda: where the loss, gradients and AdamW run", NULL},
        {"--teacher-precision", 1, "fp32 (default) or bf16: with --device cuda, the teacher's P from bf16 q, k on "
                                   "tensor cores (not yet run on a GPU)", NULL},
        {"--stop-after", 1, "testing aid: stop (as if killed) after N steps of this process", NULL},
    };
    const int nf = N_FLAGS(flags);
    int rc = cli_parse(argc, argv, flags, nf, CMD, (const char *const[]){"--model", "--shards", "--out", NULL});
    if (rc) return rc;
    if ((rc = cli_threads(CMD, args_get(flags, nf, "--threads")))) return rc;
    int use_cuda, prec;
    if ((rc = backbone_flags(CMD, args_get(flags, nf, "--device"), NULL, &use_cuda, &prec))) return rc;
    int bf16_teacher = 0;
    const char *tp = args_get(flags, nf, "--teacher-precision");
    if (tp && strcmp(tp, "fp32") && strcmp(tp, "bf16")) {
        fprintf(stderr, "spindle " CMD ": --teacher-precision must be fp32 or bf16 (got \"%s\")\n", tp);
        return 2;
    }
    if (tp && !strcmp(tp, "bf16")) {
        if (!use_cuda) {
            fprintf(stderr, "spindle " CMD ": --teacher-precision bf16 needs --device cuda\n");
            return 2;
        }
        bf16_teacher = 1;
    }
    Status st;
    ModelConfig mc;
    if (config_load(&mc, args_get(flags, nf, "--model"), &st)) return cli_fail(CMD, &st);
    TrainConfig tc = train_config_default();
    tc.model_dir = args_get(flags, nf, "--model");
    tc.shards_dir = args_get(flags, nf, "--shards");
    tc.run_dir = args_get(flags, nf, "--out");
    tc.heldout_dir = args_get(flags, nf, "--heldout");
    tc.use_cuda = use_cuda;
    tc.bf16_teacher = bf16_teacher;
    tc.icfg = indexer_config_default(mc.hidden);
    tc.icfg.rope_theta = 10000.0f;
    config_free(&mc);
    const char *v;
    int iv;
    double dv;
#define INT_FLAG(name, field) \
    if ((v = args_get(flags, nf, name))) { if (cli_positive(CMD, name, v, &iv)) return 1; field = iv; }
#define NUM_FLAG(name, field, lo, hi) \
    if ((v = args_get(flags, nf, name))) { if (cli_double(CMD, name, v, lo, hi, &dv)) return 1; field = dv; }
    INT_FLAG("--steps", tc.steps);
    INT_FLAG("--d-index", tc.icfg.d_index);
    INT_FLAG("--heads", tc.icfg.n_heads);
    INT_FLAG("--eval-every", tc.eval_every);
    INT_FLAG("--recall-k", tc.recall_k);
    INT_FLAG("--ckpt-every", tc.ckpt_every);
    INT_FLAG("--stop-after", tc.stop_after);
    INT_FLAG("--seed", tc.seed);
    NUM_FLAG("--lr", tc.lr, 1e-9, 10);
    NUM_FLAG("--min-lr-frac", tc.min_lr_frac, 0, 1);
    NUM_FLAG("--weight-decay", tc.weight_decay, 0, 10);
    NUM_FLAG("--clip", tc.clip, 0, 1e9);
    NUM_FLAG("--query-frac", tc.query_frac, 1e-6, 1);
    NUM_FLAG("--warmup", tc.warmup, 0, 1e9);
    NUM_FLAG("--min-pos", tc.min_pos, 0, 1e9);
    NUM_FLAG("--d-rope", tc.icfg.d_rope, 0, 1e6);
#undef INT_FLAG
#undef NUM_FLAG
    if ((v = args_get(flags, nf, "--variant"))) {
        if (!strcmp(v, "collapsed")) tc.icfg.variant = INDEXER_COLLAPSED, tc.icfg.n_heads = 1;
        else if (!strcmp(v, "expanded")) {
            tc.icfg.variant = INDEXER_EXPANDED;
            if (!args_get(flags, nf, "--heads")) tc.icfg.n_heads = 4;
        } else {
            fprintf(stderr, "spindle " CMD ": --variant must be collapsed or expanded (got \"%s\")\n", v);
            return 1;
        }
    }
    if ((v = args_get(flags, nf, "--key-norm"))) {
        if (!strcmp(v, "none")) tc.icfg.key_norm = INDEXER_NORM_NONE;
        else if (!strcmp(v, "rms")) tc.icfg.key_norm = INDEXER_NORM_RMS;
        else if (!strcmp(v, "layer")) tc.icfg.key_norm = INDEXER_NORM_LAYER;
        else {
            fprintf(stderr, "spindle " CMD ": --key-norm must be none, rms or layer (got \"%s\")\n", v);
            return 1;
        }
    }
    if ((v = args_get(flags, nf, "--layers"))) {
        if (parse_layers(v, tc.layers, &tc.n_layers)) return 1;
    } else {  // every layer the shards hold
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
        tc.n_layers = h->n_layers < TRAIN_MAX_LAYERS ? h->n_layers : TRAIN_MAX_LAYERS;
        memcpy(tc.layers, h->layers, sizeof(int) * (size_t)tc.n_layers);
        shard_close(r);
    }
    tc.progress = isatty(2);
    if (tc.use_cuda && tc.icfg.variant == INDEXER_EXPANDED) {
        fprintf(stderr, "spindle " CMD ": --variant expanded trains on the CPU twin only (drop --device cuda)\n");
        return 2;
    }
    if (train_run(&tc, args_get(flags, nf, "--resume") != NULL, &st)) return cli_fail(CMD, &st);
    fprintf(stderr, "spindle " CMD ": %s: %ld steps, %d layer(s)\n", tc.run_dir, tc.steps, tc.n_layers);
    return 0;
}

int cmd_export(int argc, char **argv) {
    Flag flags[] = {
        {"--run", 1, "run folder (spindle train --out)", NULL},
        {"--out", 1, "indexer folder to create: model.safetensors + config.json", NULL},
        {"--k", 1, "default k written to config.json (default 256)", NULL},
        {"--bsel", 1, "default b_sel written to config.json (default 1)", NULL},
        {"--step", 1, "export this checkpoint's step (default: the newest; 0 = the untrained initialisation)", NULL},
    };
    const int nf = N_FLAGS(flags);
    int rc = cli_parse(argc, argv, flags, nf, "export", (const char *const[]){"--run", "--out", NULL});
    if (rc) return rc;
    int k = 256, bsel = 1, step = -1;
    const char *v;
    if (((v = args_get(flags, nf, "--k")) && cli_positive("export", "--k", v, &k)) ||
        ((v = args_get(flags, nf, "--bsel")) && cli_positive("export", "--bsel", v, &bsel)))
        return 1;
    if ((v = args_get(flags, nf, "--step")) && (sscanf(v, "%d", &step) != 1 || step < 0)) {
        fprintf(stderr, "spindle export: --step must be a non-negative integer (got \"%s\")\n", v);
        return 1;
    }
    Status st;
    if (export_indexer(flags[0].value, flags[1].value, step, k, bsel, &st)) return cli_fail("export", &st);
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
    };
    const int nf = N_FLAGS(flags);
    int rc = cli_parse(argc, argv, flags, nf, "scores",
                       (const char *const[]){"--indexer", "--shard", "--layer", "--positions", "--out", NULL});
    if (rc) return rc;
    int seq = 0, layer, pos[64], n_pos;
    const char *v;
    if (((v = args_get(flags, nf, "--seq")) && sscanf(v, "%d", &seq) != 1) ||
        sscanf(args_get(flags, nf, "--layer"), "%d", &layer) != 1 ||
        cli_list("scores", "--positions", args_get(flags, nf, "--positions"), 0, pos, &n_pos)) {
        fprintf(stderr, "spindle scores: bad --seq, --layer or --positions\n");
        return 1;
    }
    Status st;
    ShardReader *r = NULL;
    IndexerSet set = {0};
    float *x = NULL, *scores = NULL;
    rc = 1;
    if (shard_open(&r, args_get(flags, nf, "--shard"), NULL, NULL, &st)) goto done;
    const ShardHeader *h = shard_header(r);
    if (indexer_set_load(&set, flags[0].value, 1 << 20, h->fingerprint, &st)) goto done;
    if (set.cfg.d_model != h->d_model) {  // the indexer reads rows of x as wide as its d_model
        status_fail(&st, "%s: d_model %d differs from the indexer's %d (%s)", args_get(flags, nf, "--shard"),
                    h->d_model, set.cfg.d_model, flags[0].value);
        goto done;
    }
    if (layer < 0 || layer >= set.n_model_layers || !set.params[layer]) {
        status_fail(&st, "%s: no indexer for layer %d", flags[0].value, layer);
        goto done;
    }
    for (int i = 0; i < n_pos; i++)
        if (pos[i] >= h->ctx) {
            status_fail(&st, "--positions: %d is beyond the shard's ctx %d", pos[i], h->ctx);
            goto done;
        }
    x = xmalloc(sizeof(float) * (size_t)h->ctx * h->d_model);
    if (shard_read(r, seq, layer, NULL, 0, x, (size_t)h->ctx * h->d_model, NULL, 0, &st)) goto done;
    scores = xmalloc(sizeof(float) * (size_t)n_pos * h->ctx);
    indexer_forward_cpu(scores, NULL, &set.cfg, set.params[layer], x, h->ctx, pos, n_pos);
    NpyWriter w;
    if (npy_writer_open(&w, flags[5].value, n_pos, h->ctx, &st)) goto done;
    if (npy_writer_rows(&w, scores, n_pos, &st)) {
        npy_writer_abort(&w);
        goto done;
    }
    if (npy_writer_close(&w, &st)) goto done;
    rc = 0;
done:
    if (rc) cli_fail("scores", &st);
    if (r) shard_close(r);
    indexer_set_free(&set);
    free(x), free(scores);
    return rc;
}
