// npy.c: see npy.h. Header layout: magic "\x93NUMPY", version 1.0, a u16
// header length, then a Python dict literal padded with spaces to a multiple
// of 64 bytes and ended by '\n'.
#include "npy.h"

#include <inttypes.h>
#include <string.h>

int npy_writer_open(NpyWriter *w, const char *path, int64_t rows, int64_t cols, Status *st) {
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    char dict[256];
    int dl = snprintf(dict, sizeof dict,
                      "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRId64 ", %" PRId64 "), }",
                      rows, cols);
    size_t total = 10 + (size_t)dl + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)dl + pad + 1;
    unsigned char head[512];
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (unsigned char)(hlen & 0xff);
    head[9] = (unsigned char)(hlen >> 8);
    memcpy(head + 10, dict, (size_t)dl);
    memset(head + 10 + dl, ' ', pad);
    head[10 + dl + pad] = '\n';
    if (atomic_open(&w->af, path, st)) return -1;
    if (atomic_write(&w->af, head, 10 + hlen, st)) {
        atomic_abort(&w->af);
        return -1;
    }
    return 0;
}

int npy_writer_rows(NpyWriter *w, const float *data, int64_t n_rows, Status *st) {
    SPINDLE_CHECK(w->written + n_rows <= w->rows);
    // The format is little-endian; so is every machine we build for.
    if (atomic_write(&w->af, data, (size_t)(n_rows * w->cols) * sizeof(float), st)) return -1;
    w->written += n_rows;
    return 0;
}

int npy_writer_close(NpyWriter *w, Status *st) {
    SPINDLE_CHECK(w->written == w->rows);
    return atomic_commit(&w->af, st);
}

void npy_writer_abort(NpyWriter *w) { atomic_abort(&w->af); }

// Reads a C-order array whose dtype descriptor is descr ("<f4", "<i4").
static int npy_read(const char *path, const char *descr, void **data, int64_t shape[4], int *ndim,
                    Status *st) {
    *data = NULL;
    *ndim = 0;
    char *buf;
    size_t len;
    if (file_read_all(path, &buf, &len, st)) return -1;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6)) {
        free(buf);
        return status_fail(st, "%s: not a .npy file", path);
    }
    size_t hlen, off;
    if (buf[6] == 1) hlen = (unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8, off = 10;
    else if (len >= 12) {
        hlen = (unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8 |
               (size_t)(unsigned char)buf[10] << 16 | (size_t)(unsigned char)buf[11] << 24;
        off = 12;
    } else hlen = SIZE_MAX, off = 12;
    if (hlen > len - off) {
        free(buf);
        return status_fail(st, "%s: truncated .npy header", path);
    }
    char *h = buf + off;
    char save = h[hlen - 1];
    h[hlen - 1] = 0;
    char want[16];
    snprintf(want, sizeof want, "'%s'", descr);
    int ok = strstr(h, want) && strstr(h, "'fortran_order': False");
    char *sp = strstr(h, "'shape': (");
    int64_t n = 1;
    if (ok && sp) {
        sp += 10;
        while (*sp && *sp != ')' && *ndim < 4) {
            char *end;
            long long v = strtoll(sp, &end, 10);
            if (end == sp) break;
            shape[(*ndim)++] = v;
            n *= v;
            sp = end;
            while (*sp == ',' || *sp == ' ') sp++;
        }
    } else ok = 0;
    h[hlen - 1] = save;
    size_t need = (size_t)n * sizeof(float);
    if (!ok || off + hlen + need != len) {
        free(buf);
        return status_fail(st, "%s: expected a C-order %s array whose size matches its header", path, descr);
    }
    void *out = xmalloc(need);
    memcpy(out, buf + off + hlen, need);
    free(buf);
    *data = out;
    return 0;
}

int npy_read_f32(const char *path, float **data, int64_t shape[4], int *ndim, Status *st) {
    return npy_read(path, "<f4", (void **)data, shape, ndim, st);
}

int npy_read_i32(const char *path, int32_t **data, int64_t shape[4], int *ndim, Status *st) {
    return npy_read(path, "<i4", (void **)data, shape, ndim, st);
}
