// main.c: spindle's entry point. It only picks the subcommand and dispatches.
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "ops.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"info", cmd_info, "print a checkpoint's architecture, layer kinds and parameter count"},
    {"tokenize", cmd_tokenize, "encode a text file with the checkpoint's tokenizer.json"},
    {"logits", cmd_logits, "run the forward pass (dense or oracle) and write float32 logits [T, vocab] as .npy"},
    {"teacher", cmd_teacher, "write teacher shards (HDF5): per sequence, x and lse of the chosen layers"},
    {"train", cmd_train, "distil indexers from teacher shards (AdamW, checkpoints, --resume)"},
    {"export", cmd_export, "export a run's indexers as safetensors + config.json"},
    {"scores", cmd_scores, "one layer's exported-indexer scores on a teacher-shard sequence (.npy)"},
    {"bench", cmd_bench, "time the GPU twin: kernels of one layer and time to first token (--device cuda)"},
    {"eval", cmd_eval, "dense vs the attention-mass oracle on held-out text: NLL, KL, top-1, recall, sparsity"},
};

static void usage(void) {
    fprintf(stderr, "usage: spindle COMMAND [flags]   (spindle COMMAND --help for flags)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(stderr, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    blas_ensure_core(argv);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc, argv);
    fprintf(stderr, "spindle: unknown command \"%s\"\n", argv[1]);
    usage();
    return 2;
}
