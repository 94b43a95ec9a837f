// teacher_cmd.c: `spindle teacher` — its flags and their checks; the stage
// itself is teacher/teacher.h.
#include <stdio.h>
#include <string.h>

#include "backbone.h"
#include "cli_util.h"
#include "commands.h"
#include "config.h"
#include "cli_layers.h"
#include "teacher.h"

#define CMD "teacher"

int cmd_teacher(int argc, char **argv) {
    Flag flags[] = {
        {"--model", 1, "model folder (config.json + safetensors [+ tokenizer.json for --text])", NULL},
        {"--text", 2, "text file(s) or folder(s), tokenized and concatenated (docs/data.md)", NULL},
        {"--ids", 1, "token ids file instead of --text", NULL},
        {"--ctx", 1, "tokens per sequence (non-overlapping windows of the stream)", NULL},
        {"--out", 1, "shard folder: shard-00000.h5, shard-00001.h5, ...", NULL},
        {"--layers", 1, "full-attention layers to store, e.g. 0,4,8-11 (default: every full-attention layer)", NULL},
        {"--seqs-per-shard", 1, "sequences per shard file (default 8)", NULL},
        {"--max-seq", 1, "stop after this many sequences (default: every full window)", NULL},
        {"--resume", 0, "continue after the last complete shard of --out (an empty or missing --out starts fresh)", NULL},
        {"--threads", 1, "OpenMP threads (default: all cores)", NULL},
        {"--device", 1, "cpu (default) or cuda: where the backbone runs (the shards are the same)", NULL},
        {"--precision", 1, "with --device cuda: fp32 (default: the teacher of the CPU twin), mixed or bf16", NULL},
        {"--x-dtype", 1, "storage of x: bf16 (default, half the disk) or fp32 (also f32; lse is always fp32)", NULL},
        {"--bos", 0, "each sequence is the model's BOS token (tokenizer_config.json bos_token) then ctx - 1 tokens of the stream (Gemma 3: add_bos_token)", NULL},
    };
    const int nf = N_FLAGS(flags);
    int rc = cli_parse(argc, argv, flags, nf, CMD, (const char *const[]){"--model", "--ctx", "--out", NULL});
    if (rc) return rc;
    const Flag *text = &flags[1];
    TeacherOpts o = {.model_dir = flags[0].value, .ids_path = flags[2].value, .out = flags[4].value,
                     .seqs_per_shard = 8, .resume = flags[8].value != NULL, .x_dtype = SHARD_X_BF16,
                     .bos = flags[13].value != NULL};
    if (!text->value == !o.ids_path) {
        fprintf(stderr, "spindle " CMD ": give exactly one of --text or --ids\n");
        return 2;
    }
    if (text->value) o.text = (const char *const *)text->values, o.n_text = text->n_values;
    const char *v;
    if (cli_positive(CMD, "--ctx", flags[3].value, &o.ctx) ||
        ((v = flags[6].value) && cli_positive(CMD, "--seqs-per-shard", v, &o.seqs_per_shard)) ||
        ((v = flags[7].value) && cli_positive(CMD, "--max-seq", v, &o.max_seq)))
        return 2;
    if ((v = flags[12].value)) {
        if (!strcmp(v, "fp32") || !strcmp(v, "f32") || !strcmp(v, "float32")) o.x_dtype = SHARD_X_F32;
        else if (strcmp(v, "bf16") && strcmp(v, "bfloat16")) {
            fprintf(stderr, "spindle " CMD ": --x-dtype must be bf16 or fp32 (got \"%s\")\n", v);
            return 2;
        }
    }
    if ((rc = cli_threads(CMD, flags[9].value))) return rc;
    if ((rc = backbone_flags(CMD, flags[10].value, flags[11].value, &o.use_cuda, &o.precision))) return rc;

    // --layers and --ctx against the model's config.json: usage errors.
    Status st;
    ModelConfig mc;
    if (config_load(&mc, o.model_dir, &st)) return cli_fail(CMD, &st);
    static int layers[SHARD_MAX_LAYERS];
    int n_layers = 0;
    rc = 0;
    if (flags[5].value &&
        cli_layers(CMD, "--layers", flags[5].value, mc.layer_kinds, mc.n_layers, SHARD_MAX_LAYERS, layers, &n_layers))
        rc = 2;
    else if (o.ctx > mc.max_pos) {
        fprintf(stderr, "spindle " CMD ": --ctx %d is longer than the model supports (%s/config.json: "
                        "max_position_embeddings %d)\n", o.ctx, o.model_dir, mc.max_pos);
        rc = 2;
    } else if (!config_full_layers(mc.layer_kinds, mc.n_layers, NULL)) {
        fprintf(stderr, "spindle " CMD ": %s/config.json: the model has no full-attention layer: nothing to store\n",
                o.model_dir);
        rc = 1;
    }
    config_free(&mc);
    if (rc) return rc;
    o.layers = n_layers ? layers : NULL, o.n_layers = n_layers;
    return teacher_run(&o, &st) ? cli_fail(CMD, &st) : 0;
}
