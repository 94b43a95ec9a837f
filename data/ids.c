// ids.c: see ids.h.
#include "ids.h"

#include <ctype.h>
#include <string.h>

#include "fileio.h"

int ids_read(const char *path, int vocab, int32_t **ids, size_t *n, Status *st) {
    *ids = NULL;
    *n = 0;
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, st)) return -1;
    size_t cap = 1024, cnt = 0;
    int32_t *out = xmalloc(cap * sizeof *out);
    size_t line = 1, i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n') line++;
        if (isspace(c) || c == ',') {
            i++;
            continue;
        }
        size_t start = i;
        while (i < len && !isspace((unsigned char)text[i]) && text[i] != ',') i++;
        size_t wl = i - start;
        int ok = wl > 0 && wl <= 10;
        long long v = 0;
        for (size_t k = start; ok && k < i; k++) {
            if (!isdigit((unsigned char)text[k])) ok = 0;
            else v = v * 10 + (text[k] - '0');
        }
        if (!ok) {
            int show = wl > 40 ? 40 : (int)wl;
            status_fail(st, "%s: line %zu: entry %zu \"%.*s%s\" is not a non-negative integer",
                        path, line, cnt + 1, show, text + start, wl > 40 ? "..." : "");
            goto fail;
        }
        if (v > INT32_MAX) {
            status_fail(st, "%s: line %zu: id %lld (entry %zu) is beyond the largest token id %d", path, line, v,
                        cnt + 1, INT32_MAX);
            goto fail;
        }
        if (vocab > 0 && v >= vocab) {
            status_fail(st, "%s: line %zu: id %lld (entry %zu) is out of the vocabulary [0, %d)",
                        path, line, v, cnt + 1, vocab);
            goto fail;
        }
        if (cnt == cap) {
            out = realloc(out, (cap *= 2) * sizeof *out);
            SPINDLE_CHECK(out);
        }
        out[cnt++] = (int32_t)v;
    }
    if (cnt == 0) {
        status_fail(st, "%s: no token ids (empty file)", path);
        goto fail;
    }
    free(text);
    *ids = out;
    *n = cnt;
    return 0;
fail:
    free(text);
    free(out);
    return -1;
}

int ids_write(const char *path, const int32_t *ids, size_t n, Status *st) {
    AtomicFile af;
    if (atomic_open(&af, path, st)) return -1;
    char buf[32];
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(buf, sizeof buf, "%s%d", i ? "," : "", ids[i]);
        if (atomic_write(&af, buf, (size_t)len, st)) goto fail;
    }
    if (atomic_write(&af, "\n", 1, st)) goto fail;
    return atomic_commit(&af, st);
fail:
    atomic_abort(&af);
    return -1;
}
