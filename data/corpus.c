// corpus.c: see corpus.h.
#include "corpus.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"

int32_t corpus_separator_id(const Tokenizer *tok) {
    static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = tok_find(tok, names[i]);
        if (id >= 0) return id;
    }
    return -1;
}

// --- File list ------------------------------------------------------------------------------

typedef struct {
    char **v;
    int n, cap;
} StrList;

static void list_push(StrList *l, char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, sizeof *v * (size_t)l->cap);
        SPINDLE_CHECK(v != NULL);
        l->v = v;
    }
    l->v[l->n++] = s;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join_path(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = xmalloc(a + b + 2);
    memcpy(p, dir, a);
    size_t k = a;
    if (k == 0 || p[k - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

// Appends the regular files below dir (recursively, names sorted at each level).
static int walk_dir(const char *dir, StrList *out, int depth, Status *st) {
    if (depth > 64) return status_fail(st, "%s: directories nested too deep (a link loop?)", dir);
    DIR *d = opendir(dir);
    if (!d) return status_fail(st, "%s: cannot open directory (%s)", dir, strerror(errno));
    StrList names = {0};
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;  // ".", "..", hidden files
        list_push(&names, strdup(e->d_name));
    }
    closedir(d);
    if (names.n) qsort(names.v, (size_t)names.n, sizeof *names.v, cmp_str);
    int rc = 0;
    for (int i = 0; i < names.n; i++) {
        char *p = join_path(dir, names.v[i]);
        struct stat sb;
        if (stat(p, &sb) != 0) {
            rc = status_fail(st, "%s: cannot stat (%s)", p, strerror(errno));
            free(p);
        } else if (S_ISDIR(sb.st_mode)) {
            rc = walk_dir(p, out, depth + 1, st);
            free(p);
        } else if (S_ISREG(sb.st_mode)) {
            list_push(out, p);
        } else {
            free(p);  // sockets, fifos, devices: not text files
        }
        if (rc) break;
    }
    for (int i = 0; i < names.n; i++) free(names.v[i]);
    free(names.v);
    return rc;
}

void corpus_free_files(char **files, int n_files) {
    for (int i = 0; i < n_files; i++) free(files[i]);
    free(files);
}

// "a, b, c" (the first few paths) for error messages.
static void describe_paths(char *buf, size_t cap, const char *const *paths, int n_paths) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n_paths && k + 1 < cap; i++) {
        int w = snprintf(buf + k, cap - k, "%s%s", i ? ", " : "", paths[i]);
        if (w < 0) break;
        k += (size_t)w;
    }
    if (n_paths == 0) snprintf(buf, cap, "(no paths)");
}

int corpus_list_files(const char *const *paths, int n_paths, char ***files, int *n_files,
                      Status *st) {
    *files = NULL;
    *n_files = 0;
    StrList out = {0};
    for (int i = 0; i < n_paths; i++) {
        struct stat sb;
        if (stat(paths[i], &sb) != 0) {
            corpus_free_files(out.v, out.n);
            return status_fail(st, "%s: cannot open (%s)", paths[i], strerror(errno));
        }
        if (S_ISDIR(sb.st_mode)) {
            if (walk_dir(paths[i], &out, 0, st)) {
                corpus_free_files(out.v, out.n);
                return -1;
            }
        } else {
            list_push(&out, strdup(paths[i]));
        }
    }
    if (out.n == 0) {
        char what[512];
        describe_paths(what, sizeof what, paths, n_paths);
        free(out.v);
        return status_fail(st, "%s: no text files found", what);
    }
    *files = out.v;
    *n_files = out.n;
    return 0;
}

// --- Tokens ---------------------------------------------------------------------------------

int corpus_load_tokens(const Tokenizer *tok, const char *const *paths, int n_paths, int32_t **ids,
                       size_t *n, Status *st) {
    *ids = NULL;
    *n = 0;
    char **files;
    int n_files;
    if (corpus_list_files(paths, n_paths, &files, &n_files, st)) return -1;

    // Each file on its own (the tokenizer is read-only, so files go in parallel); the first
    // failure in file order is the one reported.
    int32_t **per = xcalloc((size_t)n_files, sizeof *per);
    size_t *per_n = xcalloc((size_t)n_files, sizeof *per_n);
    Status *per_st = xcalloc((size_t)n_files, sizeof *per_st);
    int *per_rc = xcalloc((size_t)n_files, sizeof *per_rc);
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n_files; i++) {
        char *text;
        size_t len;
        per_rc[i] = file_read_all(files[i], &text, &len, &per_st[i]);
        if (per_rc[i]) continue;
        per_rc[i] = tok_encode(tok, text, len, &per[i], &per_n[i], &per_st[i]);
        free(text);
        if (per_rc[i]) {
            // Make sure the message names the file, whatever the tokenizer said.
            char msg[sizeof per_st[i].msg];
            memcpy(msg, per_st[i].msg, sizeof msg);
            status_fail(&per_st[i], "%s: %s", files[i], msg);
        }
    }

    int rc = 0;
    size_t total = 0;
    for (int i = 0; i < n_files && !rc; i++) {
        if (per_rc[i]) {
            *st = per_st[i];
            rc = -1;
        }
        total += per_n[i] + 1;
    }
    int32_t sep = corpus_separator_id(tok);
    int32_t *all = NULL;
    size_t k = 0;
    if (!rc) {
        all = xmalloc(sizeof *all * (total ? total : 1));
        for (int i = 0; i < n_files; i++) {
            if (per_n[i] == 0) continue;
            if (k > 0 && sep >= 0) all[k++] = sep;
            memcpy(all + k, per[i], sizeof *all * per_n[i]);
            k += per_n[i];
        }
        if (k == 0) {
            char what[512];
            describe_paths(what, sizeof what, paths, n_paths);
            rc = status_fail(st, "%s: corpus is empty (%d files, no tokens)", what, n_files);
            free(all);
            all = NULL;
        }
    }
    for (int i = 0; i < n_files; i++) free(per[i]);
    free(per);
    free(per_n);
    free(per_st);
    free(per_rc);
    corpus_free_files(files, n_files);
    if (rc) return -1;
    *ids = all;
    *n = k;
    return 0;
}

size_t corpus_windows(const int32_t *ids, size_t n, int ctx, size_t max_seq, const int32_t **starts) {
    if (ctx <= 0) return 0;
    size_t count = n / (size_t)ctx;
    if (max_seq > 0 && count > max_seq) count = max_seq;
    if (starts)
        for (size_t i = 0; i < count; i++) starts[i] = ids + i * (size_t)ctx;
    return count;
}

size_t corpus_bos_windows(const int32_t *ids, size_t n, int ctx, int32_t bos, size_t max_seq, int32_t *out) {
    if (ctx < 2) return 0;
    const size_t body = (size_t)ctx - 1;
    size_t count = n / body;
    if (max_seq > 0 && count > max_seq) count = max_seq;
    for (size_t i = 0; out && i < count; i++) {
        out[i * (size_t)ctx] = bos;
        memcpy(out + i * (size_t)ctx + 1, ids + i * body, sizeof(int32_t) * body);
    }
    return count;
}
