// run_state.c: see run_state.h. Format version 2, all little-endian:
//   header: 16 int64 slots
//     0 magic "SPNDLRUN"  1 version  2 step  3 rng  4 cursor  5 tokens
//     6 n_layers  7 n_params  8..15 reserved (0)
//   payload: for each layer params, m, v (float32, n_params each)
//   trailer: SHA-256 (32 bytes) of header + payload
#include "run_state.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

#define RUN_MAGIC 0x4e55524c444e5053ull  // "SPNDLRUN" read as little-endian bytes
enum { DIGEST_BYTES = 32 };

void run_state_path(char *buf, size_t len, const char *run_dir, int64_t step) {
    snprintf(buf, len, "%s/checkpoints/ckpt-%08" PRId64 ".bin", run_dir, step);
}

// Steps of the checkpoint files in RUN/checkpoints, ascending (*steps malloc'ed).
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
        // ckpt-<digits>.bin exactly (a .bin.tmp is an unfinished write, .bin.invalid a refused one)
        const char *name = e->d_name;
        size_t len = strlen(name), nd = 0;
        while (5 + nd < len && name[5 + nd] >= '0' && name[5 + nd] <= '9') nd++;
        if (strncmp(name, "ckpt-", 5) || nd == 0 || nd > 18 || strcmp(name + 5 + nd, ".bin")) continue;
        if (*n == cap) *steps = realloc(*steps, sizeof **steps * (size_t)(cap = cap ? 2 * cap : 16));
        SPINDLE_CHECK(*steps);
        (*steps)[(*n)++] = strtoll(name + 5, NULL, 10);
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
    run_state_path(path, sizeof path, run_dir, rs->step);
    int64_t h[16] = {(int64_t)RUN_MAGIC, RUN_STATE_VERSION, rs->step, (int64_t)rs->rng, rs->cursor, rs->tokens,
                     rs->n_layers, rs->n_params};
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    SPINDLE_CHECK(md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1);
    AtomicFile af;
    if (atomic_open(&af, path, st)) {
        EVP_MD_CTX_free(md);
        return -1;
    }
    int rc = atomic_write(&af, h, sizeof h, st);
    SPINDLE_CHECK(EVP_DigestUpdate(md, h, sizeof h) == 1);
    const size_t bytes = sizeof(float) * (size_t)rs->n_params;
    for (int l = 0; !rc && l < rs->n_layers; l++) {
        const float *parts[3] = {rs->params[l], rs->m[l], rs->v[l]};
        for (int a = 0; !rc && a < 3; a++) {
            rc = atomic_write(&af, parts[a], bytes, st);
            SPINDLE_CHECK(EVP_DigestUpdate(md, parts[a], bytes) == 1);
        }
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int dlen = 0;
    SPINDLE_CHECK(EVP_DigestFinal_ex(md, digest, &dlen) == 1 && dlen == DIGEST_BYTES);
    EVP_MD_CTX_free(md);
    if (!rc) rc = atomic_write(&af, digest, DIGEST_BYTES, st);
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
        run_state_path(path, sizeof path, run_dir, steps[i]);
        unlink(path);
    }
    free(steps);
    return 0;
}

int run_state_latest(const char *run_dir, int64_t *step, Status *st) {
    (void)st;
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

int64_t run_state_file_bytes(int n_layers, int64_t n_params) {
    return 16 * 8 + (int64_t)n_layers * 3 * n_params * (int64_t)sizeof(float) + DIGEST_BYTES;
}

int run_state_sizes_fit(const char *run_dir, int64_t step, int n_layers, int64_t n_params, Status *st) {
    int64_t *steps;
    int n;
    list_steps(run_dir, &steps, &n);
    const int64_t want = run_state_file_bytes(n_layers, n_params);
    int fit = 0;
    for (int i = 0; i < n && !fit; i++) {
        if (step >= 0 && steps[i] != step) continue;
        char path[4200];
        struct stat sb;
        run_state_path(path, sizeof path, run_dir, steps[i]);
        fit = stat(path, &sb) == 0 && (int64_t)sb.st_size == want;
    }
    free(steps);
    if (fit) return 0;
    return status_fail(st, "%s/checkpoints: no checkpoint%s of the size the run config implies (%d layers x %lld parameters)",
                       run_dir, step >= 0 ? " of that step" : "", n_layers, (long long)n_params);
}

// fread of n bytes into dst, hashed. 0 on success.
static int read_hashed(FILE *f, void *dst, size_t n, EVP_MD_CTX *md) {
    if (fread(dst, 1, n, f) != n) return -1;
    SPINDLE_CHECK(EVP_DigestUpdate(md, dst, n) == 1);
    return 0;
}

int run_state_load(const char *run_dir, int64_t step, RunState *rs, Status *st) {
    char path[4200];
    run_state_path(path, sizeof path, run_dir, step);
    FILE *f = fopen(path, "rb");
    if (!f) return status_fail(st, "%s: cannot open (%s)", path, strerror(errno));
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    SPINDLE_CHECK(md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1);
    int64_t h[16];
    int rc = 0;
    if (read_hashed(f, h, sizeof h, md) || (uint64_t)h[0] != RUN_MAGIC)
        rc = status_fail(st, "%s: not a spindle run checkpoint", path);
    else if (h[1] != RUN_STATE_VERSION)
        rc = status_fail(st, "%s: checkpoint version %" PRId64 ", this spindle reads %d", path, h[1], RUN_STATE_VERSION);
    else if (h[6] != rs->n_layers || h[7] != rs->n_params)
        rc = status_fail(st, "%s: holds %" PRId64 " layers x %" PRId64 " parameters, the run config implies %d x %" PRId64,
                         path, h[6], h[7], rs->n_layers, rs->n_params);
    const size_t bytes = sizeof(float) * (size_t)rs->n_params;
    for (int l = 0; !rc && l < rs->n_layers; l++)
        if (read_hashed(f, rs->params[l], bytes, md) || read_hashed(f, rs->m[l], bytes, md) ||
            read_hashed(f, rs->v[l], bytes, md))
            rc = status_fail(st, "%s: truncated", path);
    unsigned char want[EVP_MAX_MD_SIZE], have[DIGEST_BYTES];
    unsigned int dlen = 0;
    SPINDLE_CHECK(EVP_DigestFinal_ex(md, want, &dlen) == 1 && dlen == DIGEST_BYTES);
    EVP_MD_CTX_free(md);
    if (!rc && fread(have, 1, DIGEST_BYTES, f) != DIGEST_BYTES) rc = status_fail(st, "%s: truncated (no checksum)", path);
    if (!rc && fgetc(f) != EOF) rc = status_fail(st, "%s: longer than its header says", path);
    if (!rc && memcmp(want, have, DIGEST_BYTES))
        rc = status_fail(st, "%s: checksum mismatch (the file is corrupted)", path);
    if (!rc && h[2] != step)
        rc = status_fail(st, "%s: header says step %" PRId64 ", the file name step %" PRId64, path, h[2], step);
    if (!rc && (h[4] < 0 || h[5] < 0))
        rc = status_fail(st, "%s: negative data cursor or token count", path);
    fclose(f);
    if (rc) return -1;
    rs->step = h[2];
    rs->rng = (uint64_t)h[3];
    rs->cursor = h[4];
    rs->tokens = h[5];
    return 0;
}

int run_state_load_newest(const char *run_dir, const char *cmd, int64_t max_step, int quarantine, RunState *rs,
                          int64_t *step, Status *st) {
    int64_t *steps;
    int n;
    list_steps(run_dir, &steps, &n);
    if (n == 0) {
        free(steps);
        return 1;
    }
    Status first = {0};
    int rc = -1;
    for (int i = n - 1; i >= 0; i--) {
        char path[4200];
        run_state_path(path, sizeof path, run_dir, steps[i]);
        if (max_step >= 0 && steps[i] > max_step)
            status_fail(st, "%s: step %" PRId64 " is beyond the run's %" PRId64 " steps", path, steps[i], max_step);
        else if (run_state_load(run_dir, steps[i], rs, st) == 0) {
            *step = steps[i];
            rc = 0;
            break;
        }
        if (!first.msg[0]) first = *st;
        const char *then = i > 0 ? "falling back to an older checkpoint" : "no older checkpoint";
        char bad[4300];
        snprintf(bad, sizeof bad, "%s.invalid", path);
        if (quarantine && rename(path, bad) == 0)
            fprintf(stderr, "spindle %s: %s; renamed it %s, %s\n", cmd, st->msg, bad, then);
        else
            fprintf(stderr, "spindle %s: %s; %s\n", cmd, st->msg, then);
    }
    free(steps);
    if (rc) status_fail(st, "%s/checkpoints: no valid checkpoint (the newest: %s)", run_dir, first.msg);
    return rc;
}
