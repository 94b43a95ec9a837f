// main.c: spindle's entry point. It only picks the subcommand and dispatches.
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "ops.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"info", cmd_info, "print a checkpoint's architecture, layer kinds and parameter count"},
    {"tokenize", cmd_tokenize, "encode a text file with the checkpoint's tokenizer.json"},
    {"logits", cmd_logits, "run the forward pass (dense, oracle or indexer) and write float32 logits [T, vocab] as .npy"},
    {"teacher", cmd_teacher, "write teacher shards (HDF5): per sequence, x and lse of the chosen layers"},
    {"train", cmd_train, "distil indexers from teacher shards (AdamW, checkpoints, --resume)"},
    {"export", cmd_export, "export a run's indexers as safetensors + config.json"},
    {"scores", cmd_scores, "one layer's exported-indexer scores on a teacher-shard sequence (.npy)"},
    {"eval", cmd_eval, "dense vs the oracle (and an indexer) on held-out text: NLL, KL, top-1, recall, sparsity"},
    {"bench", cmd_bench, "time the GPU twin: kernels of one layer and time to first token (CUDA builds)"},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void usage(FILE *f) {
    fprintf(f, "usage: spindle COMMAND [flags]     spindle COMMAND --help lists a command's flags\n"
               "       spindle help [COMMAND]      spindle --version\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nflags: --flag VALUE or --flag=VALUE. exit status: 0 success, 1 bad input or runtime failure, "
               "2 usage error.\n");
}

static int find_command(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(name, commands[i].name)) return i;
    return -1;
}

int main(int argc, char **argv) {
    blas_ensure_core(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *a = argv[1];
    if (!strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "help")) {
        if (argc > 2 && !strcmp(a, "help")) {  // spindle help CMD = spindle CMD --help
            const int c = find_command(argv[2]);
            if (c < 0) {
                fprintf(stderr, "spindle: unknown command \"%s\"\n", argv[2]);
                usage(stderr);
                return 2;
            }
            char *sub[] = {argv[0], argv[2], "--help", NULL};
            return commands[c].run(3, sub);
        }
        usage(stdout);
        return 0;
    }
    if (!strcmp(a, "--version") || !strcmp(a, "version")) {
        printf("spindle %s\n", spindle_version());
        return 0;
    }
    const int c = find_command(a);
    if (c >= 0) return commands[c].run(argc, argv);
    fprintf(stderr, "spindle: unknown command \"%s\"", a);
    // The closest command name, as for flags.
    Flag names[N_COMMANDS];
    for (int i = 0; i < N_COMMANDS; i++) names[i] = (Flag){commands[i].name, 0, "", NULL, NULL, 0};
    const char *s = args_suggest(a, names, N_COMMANDS);
    if (s) fprintf(stderr, "; did you mean %s?", s);
    fprintf(stderr, "\n");
    usage(stderr);
    return 2;
}
