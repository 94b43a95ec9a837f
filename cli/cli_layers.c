// cli_layers.c: see cli_layers.h.
#include "cli_layers.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

int cli_check_layers(const char *cmd, const char *flag, const int *layers, int n, const LayerKind *kinds,
                     int n_layers) {
    for (int i = 0; i < n; i++) {
        const int l = layers[i];
        if (l < 0 || l >= n_layers) {
            fprintf(stderr, "spindle %s: %s: layer %d does not exist (the model has %d layers, 0..%d)\n", cmd, flag, l,
                    n_layers, n_layers - 1);
            return -1;
        }
        if (kinds[l] != LAYER_FULL_ATTENTION) {
            fprintf(stderr, "spindle %s: %s: layer %d is a %s layer; the method acts at full_attention layers only "
                            "(this model's: ", cmd, flag, l, config_layer_kind_name(kinds[l]));
            int first = 1;
            for (int j = 0; j < n_layers; j++)
                if (kinds[j] == LAYER_FULL_ATTENTION) fprintf(stderr, "%s%d", first ? "" : ",", j), first = 0;
            fprintf(stderr, "%s)\n", first ? "none" : "");
            return -1;
        }
    }
    return 0;
}

int cli_layers(const char *cmd, const char *flag, const char *value, const LayerKind *kinds, int n_layers, int max,
               int *out, int *n) {
    *n = 0;
    if (!value) {
        const int nf = config_full_layers(kinds, n_layers, NULL);
        if (nf == 0) {
            fprintf(stderr, "spindle %s: the model has no full_attention layer: nothing to act on\n", cmd);
            return -1;
        }
        if (nf > max) {
            fprintf(stderr, "spindle %s: the model has %d full_attention layers, more than the %d supported\n", cmd,
                    nf, max);
            return -1;
        }
        *n = config_full_layers(kinds, n_layers, out);
        return 0;
    }
    char *seen = xcalloc((size_t)(n_layers > 0 ? n_layers : 1), 1);
    int rc = -1;
    for (const char *p = value; *p;) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b = a;
        if (end != p && *end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q) b = -1;
        }
        if (end == p || errno || *p == '-' || *p == '+' || a < 0 || b < a || (*end && *end != ',') ||
            (*end == ',' && !end[1])) {
            fprintf(stderr, "spindle %s: %s must be comma-separated layer indices or ranges like 4-7 (got \"%s\")\n",
                    cmd, flag, value);
            goto done;
        }
        for (long l = a; l <= b; l++) {
            if (l >= n_layers) {
                fprintf(stderr, "spindle %s: %s: layer %ld does not exist (the model has %d layers, 0..%d)\n", cmd,
                        flag, l, n_layers, n_layers - 1);
                goto done;
            }
            const int li = (int)l;
            if (cli_check_layers(cmd, flag, &li, 1, kinds, n_layers)) goto done;
            seen[l] = 1;
        }
        p = *end ? end + 1 : end;
    }
    for (int l = 0; l < n_layers; l++)
        if (seen[l]) {
            if (*n == max) {
                fprintf(stderr, "spindle %s: %s names more than %d layers\n", cmd, flag, max);
                goto done;
            }
            out[(*n)++] = l;
        }
    if (!*n) {
        fprintf(stderr, "spindle %s: %s is empty\n", cmd, flag);
        goto done;
    }
    rc = 0;
done:
    free(seen);
    return rc;
}
