// shard.c: see shard.h. HDF5 C API; every return value is checked, and HDF5's
// own error printing is switched off: failures come back as a Status whose
// message names the shard and carries HDF5's innermost reason.
#include "shard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHUNK_BYTES (1 << 20)  // target chunk size: one sequence, split when larger
#define DEFLATE_LEVEL 4

// The checksum block: this line, then zeros up to SHARD_USERBLOCK bytes.
#define SEAL_MAGIC "spindle-shard-sha256 "
static const unsigned char HDF5_SIGNATURE[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

struct ShardWriter {
    ShardHeader h;
    char path[4096], tmp[4200];
    hid_t file, tokens;
    hid_t x[SHARD_MAX_LAYERS], lse[SHARD_MAX_LAYERS];
    uint16_t *xb;  // [ctx, d_model]: one layer's x in bfloat16 (x_dtype bf16)
    int64_t n_seq;
    int failed;
};

struct ShardReader {
    ShardHeader h;
    char path[4096];
    int vocab;  // the model's vocab_size (0: tokens unchecked)
    hid_t file, tokens;
    hid_t x[SHARD_MAX_LAYERS], lse[SHARD_MAX_LAYERS];
};

const char *shard_x_dtype_name(ShardXDtype d) { return d == SHARD_X_F32 ? "float32" : "bfloat16"; }
int shard_x_dtype_bytes(ShardXDtype d) { return d == SHARD_X_F32 ? 4 : 2; }

// float32 -> bfloat16 bits, round to nearest, ties to even (finite input).
static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// ---------------------------------------------------------------- HDF5 errors

static herr_t innermost_cb(unsigned n, const H5E_error2_t *e, void *data) {
    if (n == 0 && e->desc) snprintf((char *)data, 256, "%s", e->desc);
    return 0;
}

// HDF5's innermost error description, shortened to the OS reason when there is one.
static const char *h5_reason(char buf[256]) {
    buf[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_cb, buf);
    const char *m = strstr(buf, "error message = '");
    if (m) {
        memmove(buf, m + 17, strlen(m + 17) + 1);
        char *q = strchr(buf, '\'');
        if (q) *q = 0;
    }
    if (!buf[0]) snprintf(buf, 256, "HDF5 error");
    H5Eclear2(H5E_DEFAULT);
    return buf;
}

// Called first by every public entry point. HDF5's own error printing goes off
// (failures come back as a Status). And HDF5 1.10 cannot close a file whose
// flush once failed (a full disk): its metadata cache is left inconsistent
// ("slist already enabled"), H5Fclose fails forever and the library's atexit
// cleanup then crashes on that file. So, when we are the first HDF5 user of the
// process, that cleanup is switched off: every file here is closed explicitly,
// and a failed one is discarded (see shard_writer_abort), so nothing is lost.
static void h5_quiet(void) {
    static int once = 0;
    if (!once) {
        once = 1;
        // Fails (harmlessly) when another module initialised HDF5 first.
        if (H5dont_atexit() < 0) H5Eclear2(H5E_DEFAULT);
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

// ---------------------------------------------------------------- attributes

static int attr_write(hid_t loc, const char *name, hid_t ftype, hid_t mtype, int rank, hsize_t n, const void *v) {
    hid_t sp = rank ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
    if (sp < 0) return -1;
    hid_t a = H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    int bad = a < 0 || H5Awrite(a, mtype, v) < 0;
    if (a >= 0 && H5Aclose(a) < 0) bad = 1;
    if (H5Sclose(sp) < 0) bad = 1;
    return bad ? -1 : 0;
}

static int attr_i64(hid_t loc, const char *name, int64_t v) {
    return attr_write(loc, name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, 1, &v);
}

static int attr_str(hid_t loc, const char *name, const char *v) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    int bad = H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0 ||
              attr_write(loc, name, t, t, 0, 1, &v) < 0;
    if (H5Tclose(t) < 0) bad = 1;
    return bad ? -1 : 0;
}

// Reads integer attribute `name` (any integer type, scalar) into *v.
static int read_i64(hid_t loc, const char *path, const char *name, int64_t *v, Status *st) {
    char why[256];
    htri_t ex = H5Aexists(loc, name);
    if (ex <= 0) return status_fail(st, "%s: not a teacher shard: attribute \"%s\" is missing", path, name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return status_fail(st, "%s: cannot read attribute \"%s\" (%s)", path, name, h5_reason(why));
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    int ok = t >= 0 && sp >= 0 && H5Tget_class(t) == H5T_INTEGER && H5Sget_simple_extent_npoints(sp) == 1 &&
             H5Aread(a, H5T_NATIVE_INT64, v) >= 0;
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    H5Aclose(a);
    H5Eclear2(H5E_DEFAULT);
    return ok ? 0 : status_fail(st, "%s: attribute \"%s\" is not a single integer", path, name);
}

static int read_int(hid_t loc, const char *path, const char *name, int *v, int64_t lo, int64_t hi, Status *st) {
    int64_t x;
    if (read_i64(loc, path, name, &x, st)) return -1;
    if (x < lo || x > hi)
        return status_fail(st, "%s: attribute %s = %lld is out of range [%lld, %lld]", path, name, (long long)x,
                           (long long)lo, (long long)hi);
    *v = (int)x;
    return 0;
}

// Reads a string attribute (variable or fixed length) into out[size].
static int read_str(hid_t loc, const char *path, const char *name, char *out, size_t size, Status *st) {
    char why[256];
    out[0] = 0;
    if (H5Aexists(loc, name) <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return status_fail(st, "%s: not a teacher shard: attribute \"%s\" is missing", path, name);
    }
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return status_fail(st, "%s: cannot read attribute \"%s\" (%s)", path, name, h5_reason(why));
    hid_t t = H5Aget_type(a), mt = -1, sp = H5Aget_space(a);
    int ok = 0;
    // Exactly one element: H5Aread writes every element of the attribute, and
    // the buffers below hold one.
    const int one = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1;
    if (sp >= 0) H5Sclose(sp);
    if (one && t >= 0 && H5Tget_class(t) == H5T_STRING) {
        htri_t var = H5Tis_variable_str(t);
        mt = H5Tcopy(H5T_C_S1);
        if (var > 0 && mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Tset_cset(mt, H5Tget_cset(t)) >= 0) {
            char *p = NULL;
            if (H5Aread(a, mt, &p) >= 0 && p) {
                ok = strlen(p) < size;
                if (ok) snprintf(out, size, "%s", p);
                H5free_memory(p);
            }
        } else if (var == 0 && mt >= 0) {
            size_t n = H5Tget_size(t);
            if (n > 0 && n < size && H5Tset_size(mt, n + 1) >= 0 && H5Aread(a, mt, out) >= 0) ok = 1, out[n] = 0;
        }
    }
    if (mt >= 0) H5Tclose(mt);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    H5Eclear2(H5E_DEFAULT);
    return ok ? 0 : status_fail(st, "%s: attribute \"%s\" is not a single string (of at most %zu bytes)", path, name, size - 1);
}

// ---------------------------------------------------------------- writer

// Chunk dims for a per-sequence block [1, a, b] of e-byte values: the whole
// block when it is at most CHUNK_BYTES, else whole rows of b, else part of a row.
static void chunk_dims(hsize_t c[3], hsize_t a, hsize_t b, hsize_t e) {
    c[0] = 1;
    if (a * b * e <= CHUNK_BYTES) c[1] = a, c[2] = b;
    else if (b * e <= CHUNK_BYTES) c[1] = CHUNK_BYTES / (b * e), c[2] = b;
    else c[1] = 1, c[2] = CHUNK_BYTES / e;
}

// An empty, extendible dataset [0, a, b] (rank 3) or [0, a] (rank 2).
static hid_t create_dataset(hid_t loc, const char *name, hid_t ftype, int rank, hsize_t a, hsize_t b) {
    hsize_t dims[3] = {0, a, b}, maxd[3] = {H5S_UNLIMITED, a, b}, chunk[3];
    chunk_dims(chunk, a, rank == 3 ? b : 1, H5Tget_size(ftype));
    if (rank == 2) chunk[1] = a;  // tokens: one sequence per chunk
    hid_t sp = H5Screate_simple(rank, dims, maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = -1;
    if (sp >= 0 && dcpl >= 0 && H5Pset_chunk(dcpl, rank, chunk) >= 0 && H5Pset_shuffle(dcpl) >= 0 &&
        H5Pset_deflate(dcpl, DEFLATE_LEVEL) >= 0 && H5Pset_obj_track_times(dcpl, 0) >= 0)
        d = H5Dcreate2(loc, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    return d;
}

// Writes one sequence (row n) of a [n, a, b] / [n, a] dataset after growing it.
static int append_row(hid_t d, int rank, hsize_t n, hsize_t a, hsize_t b, hid_t mtype, const void *data) {
    hsize_t ext[3] = {n + 1, a, b}, start[3] = {n, 0, 0}, count[3] = {1, a, b};
    if (H5Dset_extent(d, ext) < 0) return -1;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(rank, count, NULL);
    int bad = fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
              H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, data) < 0;
    if (fs >= 0 && H5Sclose(fs) < 0) bad = 1;
    if (ms >= 0 && H5Sclose(ms) < 0) bad = 1;
    return bad ? -1 : 0;
}

static int write_header_attrs(hid_t f, const ShardHeader *h) {
    int32_t layers[SHARD_MAX_LAYERS];
    for (int i = 0; i < h->n_layers; i++) layers[i] = h->layers[i];
    int32_t version = SHARD_FORMAT_VERSION;
    const char *xd = shard_x_dtype_name(h->x_dtype);
    return attr_str(f, "format", SHARD_FORMAT) || attr_write(f, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT32, 0, 1, &version) ||
           attr_str(f, "fingerprint", h->fingerprint) || attr_str(f, "model_type", h->model_type) ||
           attr_i64(f, "ctx", h->ctx) ||
           attr_write(f, "layers", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, (hsize_t)h->n_layers, layers) ||
           attr_i64(f, "d_model", h->d_model) || attr_i64(f, "n_heads", h->n_heads) ||
           attr_i64(f, "n_kv_heads", h->n_kv_heads) || attr_i64(f, "head_dim", h->head_dim) ||
           attr_str(f, "tokens_dtype", "int32") || attr_str(f, "x_dtype", xd) ||
           attr_str(f, "lse_dtype", "float32") || attr_i64(f, "seqs_per_shard", h->seqs_per_shard) ||
           attr_i64(f, "first_seq", h->first_seq) || attr_str(f, "source", h->source) ||
           attr_i64(f, "token_begin", h->token_begin)
               ? -1
               : 0;
}

static int header_check(const ShardHeader *h, const char *path, Status *st) {
    if (h->ctx < 1 || h->d_model < 1 || h->n_heads < 1 || h->n_kv_heads < 1 || h->head_dim < 1 ||
        h->n_layers < 1 || h->n_layers > SHARD_MAX_LAYERS || h->seqs_per_shard < 1 || h->first_seq < 0 ||
        h->token_begin < 0 || strlen(h->fingerprint) != 64 || (h->x_dtype != SHARD_X_BF16 && h->x_dtype != SHARD_X_F32))
        return status_fail(st, "%s: invalid shard header (dimensions, layers or fingerprint)", path);
    for (int i = 0; i < h->n_layers; i++)
        if (h->layers[i] < 0 || (i && h->layers[i] <= h->layers[i - 1]))
            return status_fail(st, "%s: shard layers must be distinct, ascending and >= 0", path);
    return 0;
}

int shard_writer_open(ShardWriter **out, const char *path, const ShardHeader *h, Status *st) {
    *out = NULL;
    char why[256];
    h5_quiet();
    if (strlen(path) >= 4096) return status_fail(st, "%s: path too long", path);
    if (header_check(h, path, st)) return -1;
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) <= 0 || H5Zfilter_avail(H5Z_FILTER_SHUFFLE) <= 0)
        return status_fail(st, "%s: this HDF5 library lacks the deflate or shuffle filter", path);
    ShardWriter *w = xcalloc(1, sizeof *w);
    w->h = *h;
    w->tokens = w->file = -1;
    for (int i = 0; i < SHARD_MAX_LAYERS; i++) w->x[i] = w->lse[i] = -1;
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path);
    unlink(w->tmp);  // a stale partial file is never reused
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (fapl < 0 || fcpl < 0 || H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        H5Pset_userblock(fcpl, SHARD_USERBLOCK) < 0) {
        if (fapl >= 0) H5Pclose(fapl);
        if (fcpl >= 0) H5Pclose(fcpl);
        free(w);
        return status_fail(st, "%s: HDF5 property setup failed (%s)", path, h5_reason(why));
    }
    w->file = H5Fcreate(w->tmp, H5F_ACC_EXCL, fcpl, fapl);
    H5Pclose(fcpl);
    if (w->file < 0) {
        status_fail(st, "%s: cannot create (%s)", w->tmp, h5_reason(why));
        H5Pclose(fapl);
        free(w);
        return -1;
    }
    if (h->x_dtype == SHARD_X_BF16) w->xb = xmalloc(sizeof(uint16_t) * (size_t)h->ctx * (size_t)h->d_model);
    if (H5Pclose(fapl) < 0) {
        status_fail(st, "%s: HDF5 property list close failed (%s)", path, h5_reason(why));
        shard_writer_abort(w);
        return -1;
    }
    const hsize_t T = (hsize_t)h->ctx;
    int bad = write_header_attrs(w->file, h) < 0;
    if (!bad) bad = (w->tokens = create_dataset(w->file, "tokens", H5T_STD_I32LE, 2, T, 1)) < 0;
    for (int i = 0; i < h->n_layers && !bad; i++) {
        char name[64];
        snprintf(name, sizeof name, "layer_%d", h->layers[i]);
        hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
        hid_t g = gcpl >= 0 && H5Pset_obj_track_times(gcpl, 0) >= 0
                      ? H5Gcreate2(w->file, name, H5P_DEFAULT, gcpl, H5P_DEFAULT)
                      : -1;
        if (gcpl >= 0) H5Pclose(gcpl);
        if (g < 0) {
            bad = 1;
            break;
        }
        w->x[i] = create_dataset(g, "x", h->x_dtype == SHARD_X_F32 ? H5T_IEEE_F32LE : H5T_STD_U16LE, 3, T,
                                 (hsize_t)h->d_model);
        w->lse[i] = create_dataset(g, "lse", H5T_IEEE_F32LE, 3, (hsize_t)h->n_heads, T);
        if (H5Gclose(g) < 0 || w->x[i] < 0 || w->lse[i] < 0) bad = 1;
    }
    if (bad) {
        status_fail(st, "%s: cannot write the shard layout (%s)", w->tmp, h5_reason(why));
        shard_writer_abort(w);
        return -1;
    }
    *out = w;
    return 0;
}

int shard_writer_append(ShardWriter *w, const int32_t *tokens, const float *const *x, const float *const *lse,
                        Status *st) {
    char why[256];
    if (w->failed) return status_fail(st, "%s: writer already failed", w->tmp);
    const ShardHeader *h = &w->h;
    const size_t T = (size_t)h->ctx, nx = T * (size_t)h->d_model, nl = T * (size_t)h->n_heads;
    for (int i = 0; i < h->n_layers; i++) {
        for (size_t j = 0; j < nx; j++) {
            if (!isfinite(x[i][j]))
                return status_fail(st, "%s: non-finite x at layer %d, sequence %lld (token %zu); not written", w->path,
                                   h->layers[i], (long long)(h->first_seq + w->n_seq), j / (size_t)h->d_model);
            if (w->xb && (bf16_bits(x[i][j]) & 0x7f80u) == 0x7f80u)  // rounds to ±inf
                return status_fail(st, "%s: x at layer %d, sequence %lld (token %zu) is beyond the bfloat16 range "
                                       "(store x as float32); not written",
                                   w->path, h->layers[i], (long long)(h->first_seq + w->n_seq), j / (size_t)h->d_model);
        }
        for (size_t j = 0; j < nl; j++)
            if (!isfinite(lse[i][j]))
                return status_fail(st, "%s: non-finite lse at layer %d, sequence %lld (head %zu); not written",
                                   w->path, h->layers[i], (long long)(h->first_seq + w->n_seq), j / T);
    }
    hsize_t n = (hsize_t)w->n_seq;
    int bad = append_row(w->tokens, 2, n, T, 1, H5T_NATIVE_INT32, tokens) < 0;
    for (int i = 0; i < h->n_layers && !bad; i++) {
        if (w->xb) {
            for (size_t j = 0; j < nx; j++) w->xb[j] = bf16_bits(x[i][j]);
            bad = append_row(w->x[i], 3, n, T, (hsize_t)h->d_model, H5T_NATIVE_UINT16, w->xb) < 0;
        } else
            bad = append_row(w->x[i], 3, n, T, (hsize_t)h->d_model, H5T_NATIVE_FLOAT, x[i]) < 0;
        bad = bad || append_row(w->lse[i], 3, n, (hsize_t)h->n_heads, T, H5T_NATIVE_FLOAT, lse[i]) < 0;
    }
    if (bad) {
        w->failed = 1;
        return status_fail(st, "%s: write failed (%s)", w->path, h5_reason(why));
    }
    w->n_seq++;
    return 0;
}

// ---------------------------------------------------------------- checksum block

// SHA-256 of fd's bytes from offset `from` to EOF as 64 hex digits; *n their count.
static int sha256_tail(int fd, off_t from, char hex[65], uint64_t *n) {
    enum { BUF = 1 << 20 };
    unsigned char *buf = xmalloc(BUF), md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    *n = 0;
    for (off_t off = from; ok;) {
        ssize_t got = pread(fd, buf, BUF, off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) ok = 0;
        if (got <= 0) break;
        ok = EVP_DigestUpdate(ctx, buf, (size_t)got) == 1;
        off += got, *n += (uint64_t)got;
    }
    ok = ok && EVP_DigestFinal_ex(ctx, md, &md_len) == 1 && md_len == 32;
    for (unsigned i = 0; ok && i < md_len; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    EVP_MD_CTX_free(ctx);
    free(buf);
    return ok ? 0 : -1;
}

int shard_seal(const char *path, Status *st) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return status_fail(st, "%s: cannot open (%s)", path, strerror(errno));
    unsigned char block[SHARD_USERBLOCK] = {0}, sig[8] = {0};
    char hex[65];
    uint64_t n = 0;
    int bad = pread(fd, sig, 8, SHARD_USERBLOCK) != 8 || memcmp(sig, HDF5_SIGNATURE, 8);
    if (bad) {
        close(fd);
        return status_fail(st, "%s: no HDF5 superblock after a %d-byte user block; cannot seal", path, SHARD_USERBLOCK);
    }
    if (sha256_tail(fd, SHARD_USERBLOCK, hex, &n)) {
        int e = errno;
        close(fd);
        return status_fail(st, "%s: cannot checksum (%s)", path, strerror(e));
    }
    snprintf((char *)block, sizeof block, SEAL_MAGIC "%s %llu\n", hex, (unsigned long long)n);
    if (pwrite(fd, block, sizeof block, 0) != (ssize_t)sizeof block) {
        int e = errno;
        close(fd);
        return status_fail(st, "%s: cannot write the checksum block (%s)", path, strerror(e ? e : EIO));
    }
    if (close(fd) != 0) return status_fail(st, "%s: cannot write the checksum block (%s)", path, strerror(errno));
    return 0;
}

// Verifies the checksum block of fd (size bytes) before HDF5 reads the file:
// *legacy = 1 for a file without one (HDF5's signature at offset 0: format 1).
static int unseal(int fd, off_t size, const char *path, int *legacy, Status *st) {
    unsigned char block[SHARD_USERBLOCK + 1] = {0};
    *legacy = 0;
    if (size == 0) return status_fail(st, "%s: empty file, not a teacher shard", path);
    ssize_t got = pread(fd, block, SHARD_USERBLOCK, 0);
    if (got < 0) return status_fail(st, "%s: cannot read (%s)", path, strerror(errno));
    if (got >= 8 && !memcmp(block, HDF5_SIGNATURE, 8)) {
        *legacy = 1;
        return 0;
    }
    const size_t ml = strlen(SEAL_MAGIC);
    if (got < SHARD_USERBLOCK || memcmp(block, SEAL_MAGIC, ml))
        return status_fail(st, "%s: not a teacher shard: no checksum block and no HDF5 signature at its start "
                               "(truncated or corrupt file?)", path);
    // SEAL_MAGIC, 64 lowercase hex digits, ' ', decimal byte count, '\n', zeros.
    const char *p = (const char *)block + ml;
    int ok = 1;
    for (int i = 0; i < 64; i++) ok &= (p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f');
    ok &= p[64] == ' ';
    const char *q = p + 65;
    uint64_t want_n = 0;
    int digits = 0;
    for (; ok && *q >= '0' && *q <= '9' && digits < 19; q++, digits++) want_n = want_n * 10 + (uint64_t)(*q - '0');
    ok &= digits > 0 && *q == '\n';
    for (const char *z = q + 1; ok && z < (const char *)block + SHARD_USERBLOCK; z++) ok &= *z == 0;
    if (!ok) return status_fail(st, "%s: the checksum block is damaged (corrupt file)", path);
    if ((uint64_t)(size - SHARD_USERBLOCK) != want_n)
        return status_fail(st, "%s: the file holds %llu bytes after its checksum block, which records %llu "
                               "(truncated or corrupt file)", path, (unsigned long long)(size - SHARD_USERBLOCK),
                           (unsigned long long)want_n);
    char hex[65];
    uint64_t n = 0;
    if (sha256_tail(fd, SHARD_USERBLOCK, hex, &n)) return status_fail(st, "%s: cannot read (%s)", path, strerror(errno));
    if (n != want_n || memcmp(hex, p, 64))
        return status_fail(st, "%s: content checksum mismatch: the file is corrupt (SHA-256 %s, recorded %.64s)", path,
                           hex, p);
    return 0;
}

// Closes every HDF5 object of w; returns -1 if any close failed.
static int writer_close_all(ShardWriter *w) {
    int bad = 0;
    for (int i = 0; i < SHARD_MAX_LAYERS; i++) {
        if (w->x[i] >= 0 && H5Dclose(w->x[i]) < 0) bad = 1;
        if (w->lse[i] >= 0 && H5Dclose(w->lse[i]) < 0) bad = 1;
        w->x[i] = w->lse[i] = -1;
    }
    if (w->tokens >= 0 && H5Dclose(w->tokens) < 0) bad = 1;
    if (w->file >= 0 && H5Fclose(w->file) < 0) bad = 1;
    w->tokens = w->file = -1;
    return bad ? -1 : 0;
}

int shard_writer_close(ShardWriter *w, Status *st) {
    char why[256];
    if (w->failed) {
        status_fail(st, "%s: writer already failed; nothing written", w->path);
        shard_writer_abort(w);
        return -1;
    }
    if (w->n_seq == 0) {
        status_fail(st, "%s: no sequence appended (a shard holds at least one); nothing written", w->path);
        shard_writer_abort(w);
        return -1;
    }
    // Everything dirty reaches the file here, while a failure can still be
    // discarded cleanly (see shard_writer_abort); the closes after it write nothing new.
    if (attr_i64(w->file, "n_seq", w->n_seq) < 0 ||
        attr_i64(w->file, "token_end", w->h.token_begin + w->n_seq * w->h.ctx) < 0 ||
        H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0) {
        status_fail(st, "%s: write failed (%s); nothing written", w->path, h5_reason(why));
        shard_writer_abort(w);
        return -1;
    }
    if (writer_close_all(w) < 0) {
        status_fail(st, "%s: write failed while closing (%s); nothing written", w->path, h5_reason(why));
        unlink(w->tmp);
        free(w->xb), free(w);
        return -1;
    }
    Status seal;
    if (shard_seal(w->tmp, &seal)) {
        status_fail(st, "%s: write failed (%s); nothing written", w->path, seal.msg);
        unlink(w->tmp);
        free(w->xb), free(w);
        return -1;
    }
    // HDF5 has written everything; make it durable before the name says "complete".
    int fd = open(w->tmp, O_RDONLY);
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL)) {
        int e = errno;
        if (fd >= 0) close(fd);
        status_fail(st, "%s: write failed (%s); nothing written", w->path, strerror(e));
        shard_writer_abort(w);
        return -1;
    }
    close(fd);
    if (rename(w->tmp, w->path) != 0) {
        status_fail(st, "%s: cannot rename %s into place (%s); nothing written", w->path, w->tmp, strerror(errno));
        shard_writer_abort(w);
        return -1;
    }
    free(w->xb), free(w);
    return 0;
}

// Discarding a shard: HDF5 flushes its caches on close, and after a write
// error (a full disk) those writes would fail again. So the file descriptor is
// first pointed at /dev/null: nothing more reaches the disk, and the .tmp is
// removed. (After a failed flush HDF5 1.10 may still refuse to close the file
// — see h5_quiet; the id then leaks, harmlessly.)
void shard_writer_abort(ShardWriter *w) {
    if (!w) return;
    void *handle = NULL;
    if (w->file >= 0 && H5Fget_vfd_handle(w->file, H5P_DEFAULT, &handle) >= 0 && handle) {
        int nul = open("/dev/null", O_WRONLY);
        if (nul >= 0) {
            dup2(nul, *(int *)handle);
            close(nul);
        }
    }
    writer_close_all(w);
    H5Eclear2(H5E_DEFAULT);
    unlink(w->tmp);
    free(w->xb), free(w);
}

// ---------------------------------------------------------------- reader

// Opens dataset `name` under loc and checks its rank, dims, class, element size
// (and, for integers, signedness: sign) against what the attributes say.
static hid_t open_checked(hid_t loc, const char *path, const char *name, int rank, const hsize_t *dims,
                          H5T_class_t cls, size_t size, H5T_sign_t sign, const char *type_name, Status *st) {
    htri_t ex = H5Lexists(loc, name, H5P_DEFAULT);
    if (ex <= 0) {
        H5Eclear2(H5E_DEFAULT);
        status_fail(st, "%s: dataset \"%s\" is missing", path, name);
        return -1;
    }
    char why[256];
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) {
        status_fail(st, "%s: cannot open dataset \"%s\" (%s)", path, name, h5_reason(why));
        return -1;
    }
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    hsize_t got[8] = {0};
    int r = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    if (r >= 0 && r <= 8) H5Sget_simple_extent_dims(sp, got, NULL);
    int type_ok = t >= 0 && H5Tget_class(t) == cls && H5Tget_size(t) == size &&
                  (cls != H5T_INTEGER || H5Tget_sign(t) == sign);
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    H5Eclear2(H5E_DEFAULT);
    char want[128] = "", have[128] = "";
    for (int i = 0, n = 0; i < rank; i++)
        n += snprintf(want + n, sizeof want - (size_t)n, "%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
    for (int i = 0, n = 0; i < r && i < 8; i++)
        n += snprintf(have + n, sizeof have - (size_t)n, "%s%llu", i ? ", " : "", (unsigned long long)got[i]);
    int shape_ok = r == rank;
    for (int i = 0; shape_ok && i < rank; i++) shape_ok = got[i] == dims[i];
    if (!shape_ok) {
        H5Dclose(d);
        status_fail(st, "%s: dataset \"%s\" has shape [%s], the attributes say [%s]", path, name, have, want);
        return -1;
    }
    if (!type_ok) {
        H5Dclose(d);
        status_fail(st, "%s: dataset \"%s\" is not %s", path, name, type_name);
        return -1;
    }
    return d;
}

// The shard's dimensions against the model it is read for.
static int check_model(const ShardHeader *h, const ModelConfig *c, const char *path, Status *st) {
    if (h->d_model != c->hidden || h->n_heads != c->n_heads || h->n_kv_heads != c->n_kv_heads ||
        h->head_dim != c->head_dim)
        return status_fail(st, "%s: shard shapes (d_model %d, heads %d/%d, head_dim %d) differ from the model's "
                               "config.json (hidden_size %d, heads %d/%d, head_dim %d)",
                           path, h->d_model, h->n_heads, h->n_kv_heads, h->head_dim, c->hidden, c->n_heads,
                           c->n_kv_heads, c->head_dim);
    if (strcmp(h->model_type, c->model_type))
        return status_fail(st, "%s: model_type \"%s\" differs from the model's \"%s\"", path, h->model_type,
                           c->model_type);
    if (h->ctx > c->max_pos)
        return status_fail(st, "%s: ctx %d is longer than the model's max_position_embeddings %d", path, h->ctx,
                           c->max_pos);
    for (int i = 0; i < h->n_layers; i++) {
        if (h->layers[i] >= c->n_layers)
            return status_fail(st, "%s: attribute \"layers\" names layer %d; the model has %d layers", path,
                               h->layers[i], c->n_layers);
        if (c->layer_kinds[h->layers[i]] != LAYER_FULL_ATTENTION)
            return status_fail(st, "%s: attribute \"layers\" names layer %d, not a full-attention layer", path,
                               h->layers[i]);
    }
    return 0;
}

int shard_open(ShardReader **out, const char *path, const char *expect_fingerprint, const ModelConfig *model,
               Status *st) {
    *out = NULL;
    char why[256];
    h5_quiet();
    if (strlen(path) >= 4096) return status_fail(st, "%s: path too long", path);
    // The checksum block, before HDF5 reads a byte of the file.
    int legacy = 0;
    {
        int fd = open(path, O_RDONLY);
        if (fd < 0) return status_fail(st, "%s: cannot open (%s)", path, strerror(errno));
        struct stat sb;
        int rc = fstat(fd, &sb) != 0 ? status_fail(st, "%s: cannot open (%s)", path, strerror(errno))
                 : !S_ISREG(sb.st_mode) ? status_fail(st, "%s: not a regular file", path)
                                         : unseal(fd, sb.st_size, path, &legacy, st);
        close(fd);
        if (rc) return -1;
    }
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0) {
        H5Eclear2(H5E_DEFAULT);
        return status_fail(st, "%s: not an HDF5 file (truncated or corrupt?)", path);
    }
    ShardReader *r = xcalloc(1, sizeof *r);
    r->tokens = -1;
    for (int i = 0; i < SHARD_MAX_LAYERS; i++) r->x[i] = r->lse[i] = -1;
    snprintf(r->path, sizeof r->path, "%s", path);
    r->vocab = model ? model->vocab : 0;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) >= 0)
        r->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    else
        r->file = -1;
    if (r->file < 0) {
        status_fail(st, "%s: cannot open as HDF5, truncated or corrupt file? (%s)", path, h5_reason(why));
        if (fapl >= 0) H5Pclose(fapl);
        free(r);
        return -1;
    }
    if (H5Pclose(fapl) < 0) {
        status_fail(st, "%s: HDF5 property list close failed (%s)", path, h5_reason(why));
        shard_close(r);
        return -1;
    }
    ShardHeader *h = &r->h;
    hid_t f = r->file;
    char format[64], xd[32], ld[32], td[32];
    int version = 0;
    if (read_str(f, path, "format", format, sizeof format, st)) goto fail;
    if (strcmp(format, SHARD_FORMAT)) {
        status_fail(st, "%s: format is \"%s\", not \"%s\"", path, format, SHARD_FORMAT);
        goto fail;
    }
    if (read_int(f, path, "format_version", &version, 0, 1 << 30, st)) goto fail;
    if (version != 1 && version != SHARD_FORMAT_VERSION) {
        status_fail(st, "%s: format_version %d is not supported (this build reads versions 1 and %d)", path, version,
                    SHARD_FORMAT_VERSION);
        goto fail;
    }
    if (legacy != (version == 1)) {
        status_fail(st, "%s: format_version %d %s a checksum block (corrupt file?)", path, version,
                    legacy ? "without" : "with");
        goto fail;
    }
    h->format_version = version;
    if (read_str(f, path, "fingerprint", h->fingerprint, sizeof h->fingerprint, st)) goto fail;
    if (expect_fingerprint && strcmp(h->fingerprint, expect_fingerprint)) {
        status_fail(st, "%s: made from another checkpoint (shard fingerprint %s, this checkpoint %s)", path,
                    h->fingerprint, expect_fingerprint);
        goto fail;
    }
    if (read_str(f, path, "model_type", h->model_type, sizeof h->model_type, st) ||
        read_str(f, path, "source", h->source, sizeof h->source, st) ||
        read_str(f, path, "x_dtype", xd, sizeof xd, st) || read_str(f, path, "lse_dtype", ld, sizeof ld, st) ||
        read_str(f, path, "tokens_dtype", td, sizeof td, st))
        goto fail;
    int xd_ok = 1;
    if (!strcmp(xd, "float32")) h->x_dtype = SHARD_X_F32;
    else if (!strcmp(xd, "bfloat16") && version >= 2) h->x_dtype = SHARD_X_BF16;
    else xd_ok = 0;
    if (!xd_ok || strcmp(ld, "float32") || strcmp(td, "int32")) {
        status_fail(st, "%s: unsupported storage dtypes (tokens %s, x %s, lse %s; format_version %d reads int32, "
                        "%s, float32)",
                    path, td, xd, ld, version, version >= 2 ? "bfloat16 or float32" : "float32");
        goto fail;
    }
    if (read_int(f, path, "ctx", &h->ctx, 1, 1 << 30, st) || read_int(f, path, "d_model", &h->d_model, 1, 1 << 20, st) ||
        read_int(f, path, "n_heads", &h->n_heads, 1, 1 << 16, st) ||
        read_int(f, path, "n_kv_heads", &h->n_kv_heads, 1, 1 << 16, st) ||
        read_int(f, path, "head_dim", &h->head_dim, 1, 1 << 16, st) ||
        read_int(f, path, "seqs_per_shard", &h->seqs_per_shard, 1, 1 << 30, st) ||
        read_i64(f, path, "n_seq", &h->n_seq, st) || read_i64(f, path, "first_seq", &h->first_seq, st) ||
        read_i64(f, path, "token_begin", &h->token_begin, st) || read_i64(f, path, "token_end", &h->token_end, st))
        goto fail;
    if (h->n_seq == 0) {
        status_fail(st, "%s: the shard holds no sequence (n_seq 0)", path);
        goto fail;
    }
    // token_begin = first_seq·ctx and token_end = token_begin + n_seq·ctx, without overflow.
    int64_t tb, tl, te;
    if (h->n_seq < 1 || h->n_seq > h->seqs_per_shard || h->first_seq < 0 ||
        __builtin_mul_overflow(h->first_seq, (int64_t)h->ctx, &tb) || tb != h->token_begin ||
        __builtin_mul_overflow(h->n_seq, (int64_t)h->ctx, &tl) || __builtin_add_overflow(tb, tl, &te) ||
        te != h->token_end || h->n_heads % h->n_kv_heads) {
        status_fail(st, "%s: inconsistent attributes (n_seq %lld of seqs_per_shard %d, first_seq %lld, tokens "
                        "[%lld, %lld), ctx %d, heads %d/%d)",
                    path, (long long)h->n_seq, h->seqs_per_shard, (long long)h->first_seq,
                    (long long)h->token_begin, (long long)h->token_end, h->ctx, h->n_heads, h->n_kv_heads);
        goto fail;
    }
    // layers: a 1-D integer array, distinct and ascending
    {
        if (H5Aexists(f, "layers") <= 0) {
            H5Eclear2(H5E_DEFAULT);
            status_fail(st, "%s: not a teacher shard: attribute \"layers\" is missing", path);
            goto fail;
        }
        hid_t a = H5Aopen(f, "layers", H5P_DEFAULT);
        hid_t t = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1;
        hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
        int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
        int32_t buf[SHARD_MAX_LAYERS];
        int ok = t >= 0 && H5Tget_class(t) == H5T_INTEGER && rank == 1 && n >= 1 && n <= SHARD_MAX_LAYERS &&
                 H5Aread(a, H5T_NATIVE_INT32, buf) >= 0;
        if (t >= 0) H5Tclose(t);
        if (sp >= 0) H5Sclose(sp);
        if (a >= 0) H5Aclose(a);
        H5Eclear2(H5E_DEFAULT);
        for (hssize_t i = 0; ok && i < n; i++) ok = buf[i] >= 0 && (i == 0 || buf[i] > buf[i - 1]);
        if (!ok) {
            status_fail(st, "%s: attribute \"layers\" must be 1 to %d distinct ascending layer indices", path,
                        SHARD_MAX_LAYERS);
            goto fail;
        }
        h->n_layers = (int)n;
        for (int i = 0; i < h->n_layers; i++) h->layers[i] = buf[i];
    }
    if (model && check_model(h, model, path, st)) goto fail;
    const hsize_t N = (hsize_t)h->n_seq, T = (hsize_t)h->ctx;
    if ((r->tokens = open_checked(f, path, "tokens", 2, (hsize_t[]){N, T}, H5T_INTEGER, 4, H5T_SGN_2, "int32", st)) < 0)
        goto fail;
    const int bf = h->x_dtype == SHARD_X_BF16;
    for (int i = 0; i < h->n_layers; i++) {
        char name[64];
        snprintf(name, sizeof name, "layer_%d/x", h->layers[i]);
        if ((r->x[i] = open_checked(f, path, name, 3, (hsize_t[]){N, T, (hsize_t)h->d_model},
                                    bf ? H5T_INTEGER : H5T_FLOAT, bf ? 2 : 4, H5T_SGN_NONE,
                                    bf ? "uint16 (bfloat16 bits)" : "float32", st)) < 0)
            goto fail;
        snprintf(name, sizeof name, "layer_%d/lse", h->layers[i]);
        if ((r->lse[i] = open_checked(f, path, name, 3, (hsize_t[]){N, (hsize_t)h->n_heads, T}, H5T_FLOAT, 4,
                                      H5T_SGN_NONE, "float32", st)) < 0)
            goto fail;
    }
    *out = r;
    return 0;
fail:
    shard_close(r);
    return -1;
}

const ShardHeader *shard_header(const ShardReader *r) { return &r->h; }
const char *shard_path(const ShardReader *r) { return r->path; }

static int read_row(hid_t d, int rank, hsize_t n, hsize_t a, hsize_t b, hid_t mtype, void *out) {
    hsize_t start[3] = {n, 0, 0}, count[3] = {1, a, b};
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(rank, count, NULL);
    int bad = fs < 0 || ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
              H5Dread(d, mtype, ms, fs, H5P_DEFAULT, out) < 0;
    if (fs >= 0) H5Sclose(fs);
    if (ms >= 0) H5Sclose(ms);
    return bad ? -1 : 0;
}

int shard_read(ShardReader *r, int64_t seq, int layer, int32_t *tokens, size_t n_tokens, float *x, size_t n_x,
               float *lse, size_t n_lse, Status *st) {
    char why[256];
    const ShardHeader *h = &r->h;
    const hsize_t T = (hsize_t)h->ctx;
    const size_t nx = (size_t)h->ctx * (size_t)h->d_model, nl = (size_t)h->ctx * (size_t)h->n_heads;
    if (seq < 0 || seq >= h->n_seq)
        return status_fail(st, "%s: sequence %lld out of range (the shard holds %lld)", r->path, (long long)seq,
                           (long long)h->n_seq);
    if ((tokens && n_tokens < (size_t)h->ctx) || (x && n_x < nx) || (lse && n_lse < nl))
        return status_fail(st, "%s: a row of this shard (ctx %d, d_model %d, heads %d) does not fit the reader's "
                               "buffers (tokens %zu, x %zu, lse %zu elements)",
                           r->path, h->ctx, h->d_model, h->n_heads, tokens ? n_tokens : 0, x ? n_x : 0,
                           lse ? n_lse : 0);
    const long long gseq = (long long)(h->first_seq + seq);
    if (tokens) {
        if (read_row(r->tokens, 2, (hsize_t)seq, T, 1, H5T_NATIVE_INT32, tokens) < 0)
            return status_fail(st, "%s: cannot read tokens of sequence %lld (corrupt file? %s)", r->path, gseq,
                               h5_reason(why));
        for (size_t j = 0; r->vocab > 0 && j < (size_t)h->ctx; j++)
            if (tokens[j] < 0 || tokens[j] >= r->vocab)
                return status_fail(st, "%s: token %d at position %zu of sequence %lld is outside the model's "
                                       "vocabulary (vocab_size %d)", r->path, tokens[j], j, gseq, r->vocab);
    }
    if (!x && !lse) return 0;
    int i = 0;
    while (i < h->n_layers && h->layers[i] != layer) i++;
    if (i == h->n_layers) return status_fail(st, "%s: layer %d is not stored in this shard", r->path, layer);
    if (x) {
        const int bf = h->x_dtype == SHARD_X_BF16;
        // bfloat16: the bits land in the first half of x, then widen in place from
        // the end (element j's 4 bytes overlap only 16-bit elements ≥ j, already read).
        if (read_row(r->x[i], 3, (hsize_t)seq, T, (hsize_t)h->d_model, bf ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT,
                     x) < 0)
            return status_fail(st, "%s: cannot read x of layer %d, sequence %lld (corrupt file? %s)", r->path, layer,
                               gseq, h5_reason(why));
        if (bf) {
            const uint16_t *b = (const uint16_t *)(void *)x;
            for (size_t j = nx; j-- > 0;) {
                uint32_t u = (uint32_t)b[j] << 16;
                memcpy(&x[j], &u, 4);
            }
        }
        for (size_t j = 0; j < nx; j++)
            if (!isfinite(x[j]))
                return status_fail(st, "%s: non-finite value in x of layer %d, sequence %lld (token %zu, channel %zu)",
                                   r->path, layer, gseq, j / (size_t)h->d_model, j % (size_t)h->d_model);
    }
    if (lse) {
        if (read_row(r->lse[i], 3, (hsize_t)seq, (hsize_t)h->n_heads, T, H5T_NATIVE_FLOAT, lse) < 0)
            return status_fail(st, "%s: cannot read lse of layer %d, sequence %lld (corrupt file? %s)", r->path, layer,
                               gseq, h5_reason(why));
        for (size_t j = 0; j < nl; j++)
            if (!isfinite(lse[j]))
                return status_fail(st, "%s: non-finite value in lse of layer %d, sequence %lld (head %zu, token %zu)",
                                   r->path, layer, gseq, j / (size_t)T, j % (size_t)T);
    }
    return 0;
}

void shard_close(ShardReader *r) {
    if (!r) return;
    for (int i = 0; i < SHARD_MAX_LAYERS; i++) {
        if (r->x[i] >= 0) H5Dclose(r->x[i]);
        if (r->lse[i] >= 0) H5Dclose(r->lse[i]);
    }
    if (r->tokens >= 0) H5Dclose(r->tokens);
    if (r->file >= 0) H5Fclose(r->file);
    H5Eclear2(H5E_DEFAULT);
    free(r);
}

// ---------------------------------------------------------------- listing

void shard_name(char *out, size_t size, const char *dir, int index) {
    snprintf(out, size, "%s/shard-%05d.h5", dir, index);
}

// The shard number of "shard-NNNNN.h5", or -1 for any other name.
static long shard_number(const char *name) {
    if (strncmp(name, "shard-", 6)) return -1;
    const char *p = name + 6;
    long v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 9; p++, digits++) v = v * 10 + (*p - '0');
    return digits && !strcmp(p, ".h5") ? v : -1;
}

typedef struct {
    long num;
    char *path;
} Entry;

static int cmp_entry(const void *a, const void *b) {
    const Entry *x = a, *y = b;
    return x->num < y->num ? -1 : x->num > y->num;
}

int shard_list(const char *dir, char ***paths, int *n, Status *st) {
    *paths = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return status_fail(st, "%s: cannot list shards (%s)", dir, strerror(errno));
    Entry *e = NULL;
    int cap = 0, cnt = 0;
    for (struct dirent *de; (de = readdir(d));) {
        long num = shard_number(de->d_name);
        if (num < 0) continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 64;
            Entry *ne = realloc(e, sizeof *e * (size_t)cap);
            SPINDLE_CHECK(ne != NULL);
            e = ne;
        }
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        e[cnt].num = num;
        e[cnt].path = xmalloc(len);
        snprintf(e[cnt].path, len, "%s/%s", dir, de->d_name);
        cnt++;
    }
    closedir(d);
    if (cnt) qsort(e, (size_t)cnt, sizeof *e, cmp_entry);  // e is NULL when cnt is 0
    *paths = xmalloc(sizeof **paths * (size_t)(cnt ? cnt : 1));
    for (int i = 0; i < cnt; i++) (*paths)[i] = e[i].path;
    *n = cnt;
    free(e);
    return 0;
}

void shard_free_list(char **paths, int n) {
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}
