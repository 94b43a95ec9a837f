// run_state.c: see run_state.h. Header: 16 little-endian int64 slots.
//   0 magic "SPNDLRUN"  1 version  2 step  3 rng  4 cursor  5 tokens
//   6 n_layers  7 n_params  8..15 reserved (0)
// then for each layer: params, m, v (float32, n_params each).
#include "run_state.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

#define RUN_MAGIC 0x4e55524c444e5053ull  // "SPNDLRUN" read as little-endian bytes

static void ckpt_path(char *buf, size_t len, const char *run_dir, int64_t step) {
    snprintf(buf, len, "%s/checkpoints/ckpt-%08" PRId64 ".bin", run_dir, step);
}

// Steps of the complete checkpoints in RUN/checkpoints, ascending (*steps malloc'ed).
static int list_steps(const char *run_dir, int64_t **steps, int *n) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int cap = 0;
    while ((e = readdir(d))) {
        // ckpt-<digits>.bin exactly (a .bin.tmp is an unfinished write)
        const char *name = e->d_name;
        size_t len = strlen(name), nd = 0;
        while (5 + nd < len && name[5 + nd] >= '0' && name[5 + nd] <= '9') nd++;
        if (strncmp(name, "ckpt-", 5) || nd == 0 || strcmp(name + 5 + nd, ".bin")) continue;
        long long s = strtoll(name + 5, NULL, 10);
        {
            if (*n == cap) *steps = realloc(*steps, sizeof **steps * (size_t)(cap = cap ? 2 * cap : 16));
            SPINDLE_CHECK(*steps);
            (*steps)[(*n)++] = s;
        }
    }
    closedir(d);
    for (int i = 1; i < *n; i++)  // insertion sort: a handful of files
        for (int j = i; j > 0 && (*steps)[j - 1] > (*steps)[j]; j--) {
            int64_t t = (*steps)[j];
            (*steps)[j] = (*steps)[j - 1];
            (*steps)[j - 1] = t;
        }
    return 0;
}

int run_state_save(const char *run_dir, const RunState *rs, int keep, Status *st) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return status_fail(st, "%s: cannot create (%s)", dir, strerror(errno));
    ckpt_path(path, sizeof path, run_dir, rs->step);
    int64_t h[16] = {(int64_t)RUN_MAGIC, RUN_STATE_VERSION, rs->step, (int64_t)rs->rng, rs->cursor, rs->tokens,
                     rs->n_layers, rs->n_params};
    AtomicFile af;
    if (atomic_open(&af, path, st)) return -1;
    int rc = atomic_write(&af, h, sizeof h, st);
    const size_t bytes = sizeof(float) * (size_t)rs->n_params;
    for (int l = 0; !rc && l < rs->n_layers; l++) {
        rc = atomic_write(&af, rs->params[l], bytes, st);
        if (!rc) rc = atomic_write(&af, rs->m[l], bytes, st);
        if (!rc) rc = atomic_write(&af, rs->v[l], bytes, st);
    }
    if (rc) {
        atomic_abort(&af);
        return -1;
    }
    if (atomic_commit(&af, st)) return -1;
    int64_t *steps;
    int n;
    list_steps(run_dir, &steps, &n);
    for (int i = 0; i < n - keep; i++) {
        if (steps[i] == 0) continue;
        ckpt_path(path, sizeof path, run_dir, steps[i]);
        unlink(path);
    }
    free(steps);
    return 0;
}

int run_state_latest(const char *run_dir, int64_t *step, Status *st) {
    int64_t *steps;
    int n;
    list_steps(run_dir, &steps, &n);
    if (n == 0) {
        free(steps);
        return 1;
    }
    *step = steps[n - 1];
    free(steps);
    return 0;
}

int run_state_load(const char *run_dir, int64_t step, RunState *rs, Status *st) {
    char path[4200];
    ckpt_path(path, sizeof path, run_dir, step);
    FILE *f = fopen(path, "rb");
    if (!f) return status_fail(st, "%s: cannot open (%s)", path, strerror(errno));
    int64_t h[16];
    int rc = 0;
    if (fread(h, sizeof h, 1, f) != 1 || (uint64_t)h[0] != RUN_MAGIC)
        rc = status_fail(st, "%s: not a spindle run checkpoint", path);
    else if (h[1] != RUN_STATE_VERSION)
        rc = status_fail(st, "%s: checkpoint version %" PRId64 ", this spindle reads %d", path, h[1], RUN_STATE_VERSION);
    else if (h[6] != rs->n_layers || h[7] != rs->n_params)
        rc = status_fail(st, "%s: holds %" PRId64 " layers x %" PRId64 " parameters, the run config implies %d x %" PRId64,
                         path, h[6], h[7], rs->n_layers, rs->n_params);
    const size_t n = (size_t)rs->n_params;
    for (int l = 0; !rc && l < rs->n_layers; l++)
        if (fread(rs->params[l], sizeof(float), n, f) != n || fread(rs->m[l], sizeof(float), n, f) != n ||
            fread(rs->v[l], sizeof(float), n, f) != n)
            rc = status_fail(st, "%s: truncated", path);
    if (!rc && fgetc(f) != EOF) rc = status_fail(st, "%s: longer than its header says", path);
    fclose(f);
    if (rc) return -1;
    rs->step = h[2];
    rs->rng = (uint64_t)h[3];
    rs->cursor = h[4];
    rs->tokens = h[5];
    return 0;
}
