// test_cli_layers.c: the layer selection every command shares (cli/cli_layers.h)
// on a faked hybrid stack — Gemma 3 270M's 18 layers, full attention at 5, 11
// and 17, sliding window elsewhere — and on a dense one: the default is every
// full-attention layer, and a --layers list naming another kind is refused
// with a message that names the layer and its kind.
//   test_cli_layers TMP_DIR
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_layers.h"
#include "expect.h"

static char tmp_path[4096];

// Runs cli_layers with stderr captured into msg. Returns its result.
static int run(const char *value, const LayerKind *kinds, int n_layers, int max, int *out, int *n, char *msg,
               size_t msg_size) {
    fflush(stderr);
    const int saved = dup(2);
    FILE *f = fopen(tmp_path, "w+");
    if (!f || saved < 0) abort();
    dup2(fileno(f), 2);
    const int rc = cli_layers("test", "--layers", value, kinds, n_layers, max, out, n);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    const size_t len = fread(msg, 1, msg_size - 1, f);
    msg[len] = 0;
    fclose(f);
    return rc;
}

static int same(const int *a, int na, const int *b, int nb) {
    return na == nb && !memcmp(a, b, sizeof(int) * (size_t)na);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_cli_layers TMP_DIR\n");
        return 2;
    }
    snprintf(tmp_path, sizeof tmp_path, "%s/cli_layers_stderr.txt", argv[1]);
    LayerKind gemma[18];
    for (int l = 0; l < 18; l++) gemma[l] = (l + 1) % 6 == 0 ? LAYER_FULL_ATTENTION : LAYER_SLIDING_ATTENTION;
    int out[32], n = -1;
    char msg[4096];

    EXPECT(!strcmp(config_layer_kind_name(LAYER_FULL_ATTENTION), "full_attention"), "kind name");
    EXPECT(!strcmp(config_layer_kind_name(LAYER_SLIDING_ATTENTION), "sliding_attention"), "kind name");
    EXPECT(config_full_layers(gemma, 18, NULL) == 3, "3 full-attention layers counted");
    EXPECT(config_full_layers(gemma, 18, out) == 3 && same(out, 3, (int[]){5, 11, 17}, 3), "the full layers 5, 11, 17");

    // The default: every full-attention layer.
    EXPECT(run(NULL, gemma, 18, 32, out, &n, msg, sizeof msg) == 0 && same(out, n, (int[]){5, 11, 17}, 3),
           "default on the hybrid: 5, 11, 17 (got %d layers)", n);
    EXPECT(run("17,5", gemma, 18, 32, out, &n, msg, sizeof msg) == 0 && same(out, n, (int[]){5, 17}, 2),
           "explicit full layers, sorted");
    EXPECT(run("11-11,11", gemma, 18, 32, out, &n, msg, sizeof msg) == 0 && same(out, n, (int[]){11}, 1),
           "a range and a duplicate");

    // Another kind, named in the refusal with its kind.
    EXPECT(run("4", gemma, 18, 32, out, &n, msg, sizeof msg) != 0, "layer 4 (sliding) refused");
    EXPECT(strstr(msg, "layer 4 is a sliding_attention layer") && strstr(msg, "5,11,17"),
           "the refusal names the layer, its kind and the full layers: %s", msg);
    EXPECT(run("5-7", gemma, 18, 32, out, &n, msg, sizeof msg) != 0 && strstr(msg, "layer 6 is a sliding_attention"),
           "a range over a sliding layer refused at layer 6: %s", msg);
    EXPECT(run("5,0", gemma, 18, 32, out, &n, msg, sizeof msg) != 0 && strstr(msg, "layer 0 is a sliding_attention"),
           "a list with a sliding layer refused: %s", msg);
    EXPECT(run("18", gemma, 18, 32, out, &n, msg, sizeof msg) != 0 && strstr(msg, "layer 18 does not exist"),
           "past the model: %s", msg);
    EXPECT(run("100-200", gemma, 18, 32, out, &n, msg, sizeof msg) != 0 && strstr(msg, "layer 100 does not exist"),
           "a range past the model: %s", msg);
    const char *malformed[] = {"", "a", "5,", ",5", "5,,11", "-1", "7-5", "5-", "5 "};
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++)
        EXPECT(run(malformed[i], gemma, 18, 32, out, &n, msg, sizeof msg) != 0, "\"%s\" refused", malformed[i]);
    EXPECT(run("5,11,17", gemma, 18, 2, out, &n, msg, sizeof msg) != 0, "more than max refused");
    EXPECT(cli_check_layers("test", "--layers", (int[]){5, 11}, 2, gemma, 18) == 0, "check: full layers pass");

    // A dense stack: every layer, as before.
    LayerKind dense[4] = {LAYER_FULL_ATTENTION, LAYER_FULL_ATTENTION, LAYER_FULL_ATTENTION, LAYER_FULL_ATTENTION};
    EXPECT(run(NULL, dense, 4, 32, out, &n, msg, sizeof msg) == 0 && same(out, n, (int[]){0, 1, 2, 3}, 4),
           "default on a dense stack: every layer");
    EXPECT(run("3,0-1", dense, 4, 32, out, &n, msg, sizeof msg) == 0 && same(out, n, (int[]){0, 1, 3}, 3),
           "dense: a list");
    // No full-attention layer at all: nothing to act on.
    LayerKind local[3] = {LAYER_SLIDING_ATTENTION, LAYER_SLIDING_ATTENTION, LAYER_SLIDING_ATTENTION};
    EXPECT(run(NULL, local, 3, 32, out, &n, msg, sizeof msg) != 0 && strstr(msg, "no full_attention layer"),
           "no full-attention layer: %s", msg);
    unlink(tmp_path);
    if (failures) fprintf(stderr, "test_cli_layers: %d failure(s)\n", failures);
    else printf("test_cli_layers: ok\n");
    return failures != 0;
}
