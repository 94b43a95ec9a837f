// cli_util.c: see cli_util.h.
#include "cli_util.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_fail(const char *cmd, const Status *st) {
    fprintf(stderr, "spindle %s: %s\n", cmd, st->msg);
    return 1;
}

int cli_parse(int argc, char **argv, Flag *flags, int n, const char *cmd, const char *const *required) {
    if (args_parse(argc, argv, 2, flags, n, cmd)) return 2;
    for (; *required; required++)
        if (!args_get(flags, n, *required)) {
            fprintf(stderr, "spindle %s: %s is required\n", cmd, *required);
            args_usage(cmd, flags, n);
            return 2;
        }
    return 0;
}

int cli_positive(const char *cmd, const char *flag, const char *value, int *out) {
    char *end;
    errno = 0;
    long n = strtol(value, &end, 10);
    if (!*value || *end || errno || n < 1 || n > 1 << 30) {
        fprintf(stderr, "spindle %s: %s must be a positive integer (got \"%s\")\n", cmd, flag, value);
        return -1;
    }
    *out = (int)n;
    return 0;
}

int cli_list(const char *cmd, const char *flag, const char *value, int min_value, int *out, int *n) {
    *n = 0;
    const char *p = value;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < min_value || v > 1 << 30 || (*end && *end != ',') || *n == 64) {
            fprintf(stderr, "spindle %s: %s must be a comma-separated list of %s integers (got \"%s\")\n",
                    cmd, flag, min_value > 0 ? "positive" : "non-negative", value);
            return -1;
        }
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0) {
        fprintf(stderr, "spindle %s: %s is empty\n", cmd, flag);
        return -1;
    }
    return 0;
}

int cli_names(const char *cmd, const char *flag, const char *value, const char *const *known, int n_known,
              int *want) {
    for (int i = 0; i < n_known; i++) want[i] = 0;
    for (const char *p = value;;) {
        const size_t len = strcspn(p, ",");
        int found = 0;
        for (int i = 0; i < n_known; i++)
            if (strlen(known[i]) == len && !strncmp(p, known[i], len)) want[i] = found = 1;
        if (!found) {
            fprintf(stderr, "spindle %s: %s: unknown name \"%.*s\" (one of:", cmd, flag, (int)len, p);
            for (int i = 0; i < n_known; i++) fprintf(stderr, " %s", known[i]);
            fprintf(stderr, ")\n");
            return -1;
        }
        if (!p[len]) return 0;
        p += len + 1;
    }
}

int cli_threads(const char *cmd, const char *value) {
    int n;
    if (!value) return 0;
    if (cli_positive(cmd, "--threads", value, &n)) return 2;
    omp_set_num_threads(n);
    return 0;
}

int cli_double(const char *cmd, const char *flag, const char *value, double lo, double hi, double *out) {
    char *end;
    double v = strtod(value, &end);
    if (!*value || *end || !(v >= lo && v <= hi)) {
        fprintf(stderr, "spindle %s: %s must be a number in [%g, %g] (got \"%s\")\n", cmd, flag, lo, hi, value);
        return -1;
    }
    *out = v;
    return 0;
}
