// fuzz_util.h: what the fuzz targets share. The parsers read files by path, so a
// target writes its input to a file in a private temporary folder (made once per
// process, removed at exit) and hands the parser that path.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// A violated invariant is a crash the fuzzer reports, with the reason.
#define FUZZ_CHECK(cond, ...)                                                        \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "fuzz: invariant failed: %s (%s:%d): ", #cond, __FILE__, \
                    __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                            \
            fprintf(stderr, "\n");                                                   \
            abort();                                                                 \
        }                                                                            \
    } while (0)

// Set by a target to 1 when the parser refused the input (0 when it accepted
// it). tests/fuzz/driver.c reads it to check the committed corpus: inputs named
// refuse-* must be refused, the other named inputs accepted.
int fuzz_refused;

static char fuzz_dir_[256];
static char fuzz_names_[8][64];
static int fuzz_n_names_;

static void fuzz_cleanup_(void) {
    char path[1024];
    for (int i = 0; i < fuzz_n_names_; i++) {
        snprintf(path, sizeof path, "%s/%s", fuzz_dir_, fuzz_names_[i]);
        unlink(path);
    }
    if (fuzz_dir_[0]) rmdir(fuzz_dir_);
}

// The private folder (created on first use).
static const char *fuzz_dir(void) {
    if (!fuzz_dir_[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(fuzz_dir_, sizeof fuzz_dir_, "%s/spindle-fuzz-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(fuzz_dir_)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_cleanup_);
    }
    return fuzz_dir_;
}

// Writes data to DIR/name (replacing it) and returns the path (static storage).
static const char *fuzz_write_file(const char *name, const void *data, size_t size) {
    static char path[1024];
    const char *dir = fuzz_dir();
    int known = 0;
    for (int i = 0; i < fuzz_n_names_ && !known; i++) known = !strcmp(fuzz_names_[i], name);
    if (!known && fuzz_n_names_ < 8) snprintf(fuzz_names_[fuzz_n_names_++], 64, "%s", name);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f)) {
        perror("fuzz: writing the input file");
        abort();
    }
    return path;
}
