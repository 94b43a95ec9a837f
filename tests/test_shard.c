// test_shard: teacher shards (data/shard.h) and what `spindle teacher` wrote.
//   test_shard unit TMP_DIR
//       writer/reader round trip (float32 bit-exact; bfloat16 = float32 rounded
//       to nearest even), listing, version 1 files (no checksum block), and
//       every refusal: another checkpoint, truncated or byte-flipped file, NaN,
//       wrong shapes and attributes, a shard that disagrees with the model
//       (layers it lacks, other d_model / n_heads with datasets to match), array
//       string attributes, n_seq 0, a buffer smaller than a row, a write that
//       hits the file-size limit.
//   test_shard seeds DIR
//       writes the seed corpus of tests/fuzz/fuzz_shard.c: valid tiny shards
//       (float32, bfloat16) and refuse-* variants of the
//       reader's findings (a layer the model lacks, another d_model, n_seq 0,
//       an array string attribute, a flipped byte).
//   test_shard verify MODEL_DIR SHARD_DIR IDS_FILE
//       every stored sequence against the model: tokens = the ids file's
//       windows; x and lse = a fresh dense forward's; and lse recomputed from
//       the stored x (forward_layer_qk, then log Σ_{j≤t} exp(s·q·k) in double).
#include <hdf5.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fingerprint.h"
#include "forward.h"
#include "ids.h"
#include "model.h"
#include "ops.h"
#include "rope.h"
#include "shard.h"

#include "expect.h"

static const char *tmp;
static const char *FP_A = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
static const char *FP_B = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

enum { T_ = 5, D_ = 3, HQ_ = 2, NSEQ = 3, NL = 2 };

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
// Random finite floats across magnitudes, signs, -0 and subnormals: a lossy
// path anywhere would change some bit.
static float rand_float(void) {
    for (;;) {
        uint32_t u = next_u32() ^ (next_u32() << 16);
        float f;
        memcpy(&f, &u, 4);
        if (isfinite(f)) return f;
    }
}

typedef struct {
    int32_t tokens[NSEQ][T_];
    float x[NSEQ][NL][T_ * D_];
    float lse[NSEQ][NL][HQ_ * T_];
} Data;

// The model the tiny shards belong to: 4 layers, d_model 3, heads 2/1, head_dim 4.
static LayerKind tiny_kinds[4] = {LAYER_FULL_ATTENTION, LAYER_FULL_ATTENTION, LAYER_FULL_ATTENTION,
                                  LAYER_FULL_ATTENTION};
static ModelConfig tiny_model(void) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.hidden = D_, c.n_layers = 4, c.n_heads = HQ_, c.n_kv_heads = 1, c.head_dim = 4;
    c.vocab = 50000, c.max_pos = 64, c.layer_kinds = tiny_kinds;
    return c;
}

static ShardHeader tiny_header(void) {
    ShardHeader h;
    memset(&h, 0, sizeof h);
    h.x_dtype = SHARD_X_F32;
    snprintf(h.fingerprint, sizeof h.fingerprint, "%s", FP_A);
    snprintf(h.model_type, sizeof h.model_type, "llama");
    h.ctx = T_, h.d_model = D_, h.n_heads = HQ_, h.n_kv_heads = 1, h.head_dim = 4;
    h.n_layers = NL, h.layers[0] = 1, h.layers[1] = 3;
    h.seqs_per_shard = NSEQ, h.first_seq = 6, h.token_begin = 30;
    snprintf(h.source, sizeof h.source, "ids:/nowhere/ids.txt");
    return h;
}

static void fill(Data *d) {
    for (int s = 0; s < NSEQ; s++) {
        for (int t = 0; t < T_; t++) d->tokens[s][t] = (int32_t)(next_u32() % 50000);
        for (int l = 0; l < NL; l++) {
            for (int i = 0; i < T_ * D_; i++) d->x[s][l][i] = rand_float();
            for (int i = 0; i < HQ_ * T_; i++) d->lse[s][l][i] = rand_float();
        }
    }
    d->x[0][0][0] = -0.0f;
    d->x[0][0][1] = 1e-42f;  // subnormal
}

// Writes d as a complete shard at path. Returns 0 on success.
static int write_shard(const char *path, const ShardHeader *h, const Data *d, Status *st) {
    ShardWriter *w;
    if (shard_writer_open(&w, path, h, st)) return -1;
    for (int s = 0; s < NSEQ; s++) {
        const float *xs[NL], *ls[NL];
        for (int l = 0; l < NL; l++) xs[l] = d->x[s][l], ls[l] = d->lse[s][l];
        if (shard_writer_append(w, d->tokens[s], xs, ls, st)) {
            shard_writer_abort(w);
            return -1;
        }
    }
    return shard_writer_close(w, st);
}

static int exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void copy_file(const char *from, const char *to, long limit) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int c;
    long n = 0;
    while ((limit < 0 || n < limit) && (c = fgetc(a)) != EOF) fputc(c, b), n++;
    fclose(a), fclose(b);
}

// Expects shard_open(path), checked against the tiny model, to fail with a
// message containing want (and the path).
static void expect_refused(const char *path, const char *fp, const char *want, const char *what) {
    ShardReader *r = NULL;
    Status st = {{0}};
    ModelConfig mc = tiny_model();
    int rc = shard_open(&r, path, fp, &mc, &st);
    EXPECT(rc == -1 && r == NULL, "%s: accepted", what);
    EXPECT(strstr(st.msg, want) != NULL, "%s: message lacks \"%s\": %s", what, want, st.msg);
    EXPECT(strstr(st.msg, path) != NULL, "%s: message does not name the shard: %s", what, st.msg);
    if (rc == 0) shard_close(r);
    else printf("  refused as expected (%s): %s\n", what, st.msg);
}

// ---- edits with the raw HDF5 API, to make bad shards

static hid_t open_rw(const char *path) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f < 0) fprintf(stderr, "cannot reopen %s\n", path), exit(1);
    return f;
}

// Closes f and writes path's checksum block for its new contents, so that the
// reader's attribute and shape checks (not the checksum) meet the edit.
static void close_sealed(hid_t f, const char *path) {
    Status st;
    if (H5Fclose(f) < 0 || shard_seal(path, &st)) fprintf(stderr, "cannot reseal %s\n", path), exit(1);
}

static void set_attr_i64(const char *path, const char *name, int64_t v) {
    hid_t f = open_rw(path);
    if (H5Adelete(f, name) < 0) exit(1);
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &v) < 0) exit(1);
    H5Aclose(a), H5Sclose(sp);
    close_sealed(f, path);
}

static void set_attr_i32_array(const char *path, const char *name, const int32_t *v, hsize_t n) {
    hid_t f = open_rw(path);
    if (H5Adelete(f, name) < 0) exit(1);
    hid_t sp = H5Screate_simple(1, &n, NULL), a = H5Acreate2(f, name, H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, H5T_NATIVE_INT32, v) < 0) exit(1);
    H5Aclose(a), H5Sclose(sp);
    close_sealed(f, path);
}

// A string attribute that is an array of n strings (variable length, or fixed
// length of `fixed` bytes each), every element the same long string.
static void set_attr_str_array(const char *path, const char *name, hsize_t n, size_t fixed) {
    hid_t f = open_rw(path);
    if (H5Adelete(f, name) < 0) exit(1);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, fixed ? fixed : H5T_VARIABLE);
    static char elem[200];
    memset(elem, 'z', sizeof elem - 1);
    const char **vs = malloc(sizeof *vs * n);
    char *fs = calloc(n, fixed ? fixed : 1);
    for (hsize_t i = 0; i < n; i++) vs[i] = elem;
    for (hsize_t i = 0; fixed && i < n; i++) memset(fs + i * fixed, 'z', fixed);
    hid_t sp = H5Screate_simple(1, &n, NULL), a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, t, fixed ? (const void *)fs : (const void *)vs) < 0) exit(1);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t);
    free(vs), free(fs);
    close_sealed(f, path);
}

static void set_attr_str(const char *path, const char *name, const char *v) {
    hid_t f = open_rw(path);
    if (H5Adelete(f, name) < 0) exit(1);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, t, &v) < 0) exit(1);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t);
    close_sealed(f, path);
}

static void delete_object(const char *path, const char *name, int is_attr) {
    hid_t f = open_rw(path);
    if ((is_attr ? H5Adelete(f, name) : H5Ldelete(f, name, H5P_DEFAULT)) < 0) exit(1);
    close_sealed(f, path);
}

static void poke_float(const char *path, const char *dset, hsize_t s, hsize_t i, hsize_t j, float v) {
    hid_t f = open_rw(path), d = H5Dopen2(f, dset, H5P_DEFAULT), fs = H5Dget_space(d);
    hsize_t start[3] = {s, i, j}, one[3] = {1, 1, 1};
    hid_t ms = H5Screate_simple(3, one, NULL);
    if (d < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL) < 0 ||
        H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &v) < 0)
        exit(1);
    H5Sclose(ms), H5Sclose(fs), H5Dclose(d);
    close_sealed(f, path);
}

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

// Copies every attribute of src's root group into dst's root.
static herr_t copy_attr_cb(hid_t loc, const char *name, const H5A_info_t *info, void *dst) {
    (void)info;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT), t = H5Aget_type(a), sp = H5Aget_space(a);
    hid_t mt = H5Tget_native_type(t, H5T_DIR_ASCEND);
    if (H5Tget_class(t) == H5T_STRING) mt = H5Tcopy(t);
    size_t n = (size_t)H5Sget_simple_extent_npoints(sp), sz = H5Tget_size(mt);
    void *buf = calloc(n, sz);
    hid_t b = H5Acreate2(*(hid_t *)dst, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (H5Aread(a, mt, buf) < 0 || b < 0 || H5Awrite(b, mt, buf) < 0) exit(1);
    if (H5Tis_variable_str(t) > 0) H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, buf);
    free(buf);
    H5Aclose(b), H5Tclose(mt), H5Tclose(t), H5Sclose(sp), H5Aclose(a);
    return 0;
}

static herr_t copy_obj_cb(hid_t loc, const char *name, const H5L_info_t *info, void *dst) {
    (void)info;
    return H5Ocopy(loc, name, *(hid_t *)dst, name, H5P_DEFAULT, H5P_DEFAULT) < 0 ? -1 : 0;
}

// dst = src as format_version 1 wrote it: the same objects, no checksum block.
static void make_version1(const char *src, const char *dst) {
    hid_t s = H5Fopen(src, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Fcreate(dst, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (s < 0 || d < 0) exit(1);
    hid_t sr = H5Gopen2(s, "/", H5P_DEFAULT), dr = H5Gopen2(d, "/", H5P_DEFAULT);
    if (H5Aiterate2(sr, H5_INDEX_NAME, H5_ITER_INC, NULL, copy_attr_cb, &dr) < 0 ||
        H5Literate(sr, H5_INDEX_NAME, H5_ITER_INC, NULL, copy_obj_cb, &dr) < 0)
        exit(1);
    H5Gclose(sr), H5Gclose(dr), H5Fclose(s), H5Fclose(d);
    hid_t f = H5Fopen(dst, H5F_ACC_RDWR, H5P_DEFAULT);
    if (H5Adelete(f, "format_version") < 0) exit(1);
    int32_t one = 1;
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, "format_version", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, H5T_NATIVE_INT32, &one) < 0) exit(1);
    H5Aclose(a), H5Sclose(sp), H5Fclose(f);
}

// bfloat16 rounding as the writer does it (nearest, ties to even), back to float.
static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

static void test_round_trip(const Data *d, const char *good) {
    ShardHeader h = tiny_header();
    ModelConfig mc = tiny_model();
    Status st;
    EXPECT(write_shard(good, &h, d, &st) == 0, "write: %s", st.msg);
    char tmpname[4300];
    snprintf(tmpname, sizeof tmpname, "%s.tmp", good);
    EXPECT(exists(good) && !exists(tmpname), "close must rename .tmp into place");

    ShardReader *r;
    if (shard_open(&r, good, FP_A, &mc, &st)) {
        EXPECT(0, "open: %s", st.msg);
        return;
    }
    const ShardHeader *g = shard_header(r);
    EXPECT(g->ctx == T_ && g->d_model == D_ && g->n_heads == HQ_ && g->n_kv_heads == 1 && g->head_dim == 4,
           "dims differ");
    EXPECT(g->n_layers == NL && g->layers[0] == 1 && g->layers[1] == 3, "layers differ");
    EXPECT(g->n_seq == NSEQ && g->first_seq == 6 && g->seqs_per_shard == NSEQ, "n_seq/first_seq differ");
    EXPECT(g->token_begin == 30 && g->token_end == 30 + NSEQ * T_, "token range [%lld, %lld)",
           (long long)g->token_begin, (long long)g->token_end);
    EXPECT(!strcmp(g->fingerprint, FP_A) && !strcmp(g->model_type, "llama") && !strcmp(g->source, "ids:/nowhere/ids.txt"),
           "strings differ");
    EXPECT(g->x_dtype == SHARD_X_F32 && g->format_version == SHARD_FORMAT_VERSION, "x_dtype %d, version %d",
           g->x_dtype, g->format_version);
    int exact = 1;
    for (int s = 0; s < NSEQ; s++)
        for (int l = 0; l < NL; l++) {
            int32_t tok[T_];
            float x[T_ * D_], lse[HQ_ * T_];
            if (shard_read(r, s, h.layers[l], tok, T_, x, T_ * D_, lse, HQ_ * T_, &st)) {
                EXPECT(0, "read seq %d layer %d: %s", s, h.layers[l], st.msg);
                continue;
            }
            exact &= !memcmp(tok, d->tokens[s], sizeof tok) && !memcmp(x, d->x[s][l], sizeof x) &&
                     !memcmp(lse, d->lse[s][l], sizeof lse);
        }
    EXPECT(exact, "round trip is not bit-exact");
    EXPECT(shard_read(r, NSEQ, 1, NULL, 0, NULL, 0, NULL, 0, &st) == -1, "sequence out of range accepted");
    float x[T_ * D_ + 1], lse[HQ_ * T_];
    int32_t tok[T_];
    EXPECT(shard_read(r, 0, 2, NULL, 0, x, T_ * D_, NULL, 0, &st) == -1 && strstr(st.msg, "layer 2"),
           "absent layer accepted: %s", st.msg);
    // A buffer smaller than a row is refused before anything is read.
    x[T_ * D_ - 1] = 12345.0f;
    EXPECT(shard_read(r, 0, 1, NULL, 0, x, T_ * D_ - 1, NULL, 0, &st) == -1 && strstr(st.msg, "does not fit") &&
               x[T_ * D_ - 1] == 12345.0f,
           "x buffer one short accepted: %s", st.msg);
    EXPECT(shard_read(r, 0, 1, NULL, 0, NULL, 0, lse, HQ_ * T_ - 1, &st) == -1 && strstr(st.msg, "does not fit"),
           "lse buffer one short accepted: %s", st.msg);
    EXPECT(shard_read(r, 0, 1, tok, T_ - 1, NULL, 0, NULL, 0, &st) == -1 && strstr(st.msg, "does not fit"),
           "tokens buffer one short accepted: %s", st.msg);
    printf("  refused as expected (a buffer one element short): %s\n", st.msg);
    EXPECT(shard_read(r, 0, 1, NULL, 0, x, T_ * D_ + 1, NULL, 0, &st) == 0, "a larger buffer: %s", st.msg);
    shard_close(r);
    // Any fingerprint and no model check when none is given.
    EXPECT(shard_open(&r, good, NULL, NULL, &st) == 0, "open without fingerprint: %s", st.msg);
    if (!failures) shard_close(r);
    printf("round trip: %d sequences x %d layers bit-exact\n", NSEQ, NL);
}

// x stored as bfloat16: half the bytes, read back as float32 equal to the
// float32 input rounded to nearest even; values past the bfloat16 range are refused.
static void test_bf16(const Data *d, const char *good_f32) {
    char path[4200];
    snprintf(path, sizeof path, "%s/bf16.h5", tmp);
    ShardHeader h = tiny_header();
    h.x_dtype = SHARD_X_BF16;
    Data *b = malloc(sizeof *b);
    memcpy(b, d, sizeof *b);
    for (int s = 0; s < NSEQ; s++)
        for (int l = 0; l < NL; l++)
            for (int i = 0; i < T_ * D_; i++)
                if (fabsf(b->x[s][l][i]) > 1e38f) b->x[s][l][i] *= 1e-10f;  // inside the bfloat16 range
    b->x[1][1][2] = 1.00390625f;   // 1 + 2^-8: a tie, rounds to even (1.0)
    b->x[1][1][3] = 1.01171875f;   // 1 + 3·2^-8: a tie, rounds to even (1 + 2^-6)
    Status st;
    ModelConfig mc = tiny_model();
    EXPECT(write_shard(path, &h, b, &st) == 0, "bf16 write: %s", st.msg);
    ShardReader *r;
    if (shard_open(&r, path, FP_A, &mc, &st) == 0) {
        EXPECT(shard_header(r)->x_dtype == SHARD_X_BF16, "x_dtype not bf16");
        int exact = 1;
        double worst = 0;
        for (int s = 0; s < NSEQ; s++)
            for (int l = 0; l < NL; l++) {
                float x[T_ * D_], lse[HQ_ * T_];
                EXPECT(shard_read(r, s, h.layers[l], NULL, 0, x, T_ * D_, lse, HQ_ * T_, &st) == 0, "read: %s", st.msg);
                for (int i = 0; i < T_ * D_; i++) {
                    float want = bf16_round(b->x[s][l][i]);
                    exact &= !memcmp(&want, &x[i], 4);
                    if (isnormal(b->x[s][l][i]))
                        worst = fmax(worst, fabs((double)x[i] - b->x[s][l][i]) / fabs((double)b->x[s][l][i]));
                }
                exact &= !memcmp(lse, b->lse[s][l], sizeof lse);  // lse stays float32
            }
        float x[T_ * D_];
        shard_read(r, 1, 3, NULL, 0, x, T_ * D_, NULL, 0, &st);
        EXPECT(x[2] == 1.0f && x[3] == 1.015625f, "ties to even: %.9g %.9g", x[2], x[3]);
        EXPECT(exact, "bf16 round trip differs from round-to-nearest-even of the input");
        EXPECT(worst <= 1.0 / 256, "relative error %g beyond 2^-8", worst);
        shard_close(r);
        printf("bf16: x = round-to-nearest-even of the input, max relative error %.3g\n", worst);
    } else
        EXPECT(0, "bf16 open: %s", st.msg);
    struct stat a, c;
    stat(path, &a), stat(good_f32, &c);
    printf("bf16: %lld bytes, float32: %lld bytes\n", (long long)a.st_size, (long long)c.st_size);
    // Beyond the bfloat16 range: refused, nothing written.
    b->x[2][0][0] = 3.3999e38f;
    unlink(path);
    EXPECT(write_shard(path, &h, b, &st) == -1 && strstr(st.msg, "bfloat16 range"), "huge x accepted: %s", st.msg);
    EXPECT(!exists(path), "a refused write left a file");
    free(b);
}

// A format_version 1 shard (no checksum block, x float32) is still read.
static void test_version1(const Data *d, const char *good) {
    char v1[4200];
    snprintf(v1, sizeof v1, "%s/v1.h5", tmp);
    make_version1(good, v1);
    ModelConfig mc = tiny_model();
    ShardReader *r;
    Status st;
    if (shard_open(&r, v1, FP_A, &mc, &st) == 0) {
        float x[T_ * D_];
        EXPECT(shard_header(r)->format_version == 1, "version %d", shard_header(r)->format_version);
        EXPECT(shard_read(r, 2, 3, NULL, 0, x, T_ * D_, NULL, 0, &st) == 0 && !memcmp(x, d->x[2][1], sizeof x),
               "version 1 read: %s", st.msg);
        shard_close(r);
        printf("version 1 (no checksum block): read\n");
    } else
        EXPECT(0, "version 1 open: %s", st.msg);
    // Version 2 claims without the block, and bfloat16 in version 1, are refused.
    hid_t f = open_rw(v1);
    H5Adelete(f, "format_version");
    int32_t two = 2;
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, "format_version", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT32, &two);
    H5Aclose(a), H5Sclose(sp), H5Fclose(f);
    expect_refused(v1, NULL, "without a checksum block", "version 2 without its checksum block");
}

static void test_refusals(const Data *d, const char *good) {
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/bad.h5", tmp);

    expect_refused(good, FP_B, FP_B, "another checkpoint (expected fingerprint in message)");
    expect_refused(good, FP_B, FP_A, "another checkpoint (shard fingerprint in message)");

    struct stat sb;
    stat(good, &sb);
    copy_file(good, bad, sb.st_size / 2);
    expect_refused(bad, NULL, "truncated", "truncated to half");
    copy_file(good, bad, 100);
    expect_refused(bad, NULL, "", "truncated to 100 bytes");
    copy_file(good, bad, 0);
    expect_refused(bad, NULL, "empty file", "empty file");
    snprintf(bad + strlen(bad), 8, ".none");
    expect_refused(bad, NULL, "cannot open", "missing file");
    snprintf(bad, sizeof bad, "%s/bad.h5", tmp);

    // A flipped byte anywhere: the checksum block catches it before HDF5 parses the file.
    const long offs[] = {SHARD_USERBLOCK, SHARD_USERBLOCK + 8, SHARD_USERBLOCK + 100, (long)sb.st_size / 2,
                         (long)sb.st_size - 1};
    for (int i = 0; i < 5; i++) {
        copy_file(good, bad, -1);
        flip_byte(bad, offs[i]);
        expect_refused(bad, NULL, "checksum mismatch", "a flipped byte in the HDF5 part");
    }
    copy_file(good, bad, -1);
    flip_byte(bad, 30);
    expect_refused(bad, NULL, "checksum block is damaged", "a flipped byte in the checksum digits");
    copy_file(good, bad, -1);
    flip_byte(bad, 3);
    expect_refused(bad, NULL, "no checksum block", "a flipped byte in the checksum magic");
    copy_file(good, bad, -1);
    flip_byte(bad, 300);
    expect_refused(bad, NULL, "checksum block is damaged", "a flipped byte in the block's padding");

    copy_file(good, bad, -1);
    set_attr_i64(bad, "d_model", D_ + 1);
    expect_refused(bad, NULL, "shape", "d_model attribute disagrees with x");
    copy_file(good, bad, -1);
    set_attr_i64(bad, "n_seq", NSEQ + 1);
    expect_refused(bad, NULL, "inconsistent", "n_seq disagrees with token_end");
    copy_file(good, bad, -1);
    set_attr_i64(bad, "ctx", T_ + 1);
    expect_refused(bad, NULL, "inconsistent", "ctx disagrees");
    copy_file(good, bad, -1);
    set_attr_i64(bad, "format_version", 3);
    expect_refused(bad, NULL, "format_version 3", "future version");
    copy_file(good, bad, -1);
    set_attr_str(bad, "format", "something-else");
    expect_refused(bad, NULL, "format", "other format");
    copy_file(good, bad, -1);
    set_attr_str(bad, "x_dtype", "float16");
    expect_refused(bad, NULL, "dtypes", "unsupported x dtype");
    copy_file(good, bad, -1);
    set_attr_str(bad, "x_dtype", "bfloat16");
    expect_refused(bad, NULL, "is not uint16", "x_dtype bfloat16 over float32 data");
    copy_file(good, bad, -1);
    delete_object(bad, "fingerprint", 1);
    expect_refused(bad, NULL, "\"fingerprint\" is missing", "missing fingerprint");
    copy_file(good, bad, -1);
    delete_object(bad, "layer_3/lse", 0);
    expect_refused(bad, NULL, "layer_3/lse\" is missing", "missing dataset");
    copy_file(good, bad, -1);
    delete_object(bad, "tokens", 0);
    expect_refused(bad, NULL, "\"tokens\" is missing", "missing tokens");

    // String attributes that are arrays: H5Aread would write every element.
    copy_file(good, bad, -1);
    set_attr_str_array(bad, "format", 64, 0);
    expect_refused(bad, NULL, "not a single string", "format as an array of 64 variable-length strings");
    copy_file(good, bad, -1);
    set_attr_str_array(bad, "x_dtype", 1000, 31);
    expect_refused(bad, NULL, "not a single string", "x_dtype as an array of 1000 fixed-length strings");
    copy_file(good, bad, -1);
    set_attr_str_array(bad, "model_type", 2, 8);
    expect_refused(bad, NULL, "not a single string", "model_type as an array of 2 short strings");

    // n_seq 0 (with token_end to match): refused at open.
    copy_file(good, bad, -1);
    set_attr_i64(bad, "n_seq", 0);
    set_attr_i64(bad, "token_end", 30);
    expect_refused(bad, NULL, "no sequence (n_seq 0)", "a shard of 0 sequences");
    // ... and never written.
    {
        ShardHeader h0 = tiny_header();
        ShardWriter *w0;
        Status st0;
        char p0[4300];
        snprintf(p0, sizeof p0, "%s/empty.h5", tmp);
        EXPECT(shard_writer_open(&w0, p0, &h0, &st0) == 0, "open: %s", st0.msg);
        EXPECT(shard_writer_close(w0, &st0) == -1 && strstr(st0.msg, "no sequence"), "an empty shard was written");
        char t0[4400];
        snprintf(t0, sizeof t0, "%s.tmp", p0);
        EXPECT(!exists(p0) && !exists(t0), "an empty shard left a file");
    }

    // The shard against the model.
    copy_file(good, bad, -1);
    set_attr_i32_array(bad, "layers", (const int32_t[]){1, 7}, 2);
    expect_refused(bad, NULL, "names layer 7; the model has 4 layers", "layers naming a layer the model lacks");
    copy_file(good, bad, -1);
    set_attr_str(bad, "model_type", "qwen2");
    expect_refused(bad, NULL, "model_type \"qwen2\"", "another model_type");
    {
        // Self-consistent shards of another width / head count: datasets shaped to
        // match their attributes, so only the model check can tell.
        const struct {
            int d_model, n_heads, n_kv;
            const char *what;
        } alt[] = {{D_ + 2, HQ_, 1, "wider d_model"}, {D_ - 1, HQ_, 1, "narrower d_model"},
                   {D_, HQ_ * 2, 1, "more heads"}, {D_, HQ_, 2, "other kv heads"}};
        for (int i = 0; i < 4; i++) {
            ShardHeader ha = tiny_header();
            ha.d_model = alt[i].d_model, ha.n_heads = alt[i].n_heads, ha.n_kv_heads = alt[i].n_kv;
            ShardWriter *wa;
            Status sa;
            static float xa[T_ * (D_ + 2)], la[T_ * HQ_ * 2];
            for (int j = 0; j < T_ * (D_ + 2); j++) xa[j] = 0.5f;
            const float *xs[NL] = {xa, xa}, *ls[NL] = {la, la};
            unlink(bad);
            int rc = shard_writer_open(&wa, bad, &ha, &sa);
            for (int s = 0; rc == 0 && s < NSEQ; s++) rc = shard_writer_append(wa, d->tokens[s], xs, ls, &sa);
            if (rc == 0) rc = shard_writer_close(wa, &sa);
            else shard_writer_abort(wa);
            EXPECT(rc == 0, "write %s: %s", alt[i].what, sa.msg);
            expect_refused(bad, NULL, "differ from the model's config.json", alt[i].what);
            ShardReader *r;
            EXPECT(shard_open(&r, bad, NULL, NULL, &sa) == 0, "%s without a model: %s", alt[i].what, sa.msg);
            if (r) shard_close(r);
        }
    }
    {
        ModelConfig mc = tiny_model();
        mc.max_pos = T_ - 1;
        ShardReader *r = NULL;
        Status sm;
        EXPECT(shard_open(&r, good, NULL, &mc, &sm) == -1 && strstr(sm.msg, "max_position_embeddings"),
               "ctx beyond max_pos accepted: %s", sm.msg);
        mc = tiny_model();
        mc.vocab = 100;  // the stored tokens go up to 50000
        EXPECT(shard_open(&r, good, NULL, &mc, &sm) == 0, "open: %s", sm.msg);
        int32_t tk[T_];
        EXPECT(r && shard_read(r, 0, 1, tk, T_, NULL, 0, NULL, 0, &sm) == -1 && strstr(sm.msg, "vocab_size 100"),
               "tokens beyond vocab accepted: %s", sm.msg);
        if (r) shard_close(r);
    }

    // NaN / Inf inside a stored dataset: open is fine, reading that sequence is not.
    copy_file(good, bad, -1);
    poke_float(bad, "layer_3/x", 1, 2, 0, NAN);
    poke_float(bad, "layer_1/lse", 2, 1, 4, INFINITY);
    ShardReader *r;
    Status st;
    ModelConfig mc = tiny_model();
    if (shard_open(&r, bad, FP_A, &mc, &st) == 0) {
        float x[T_ * D_], lse[HQ_ * T_];
        EXPECT(shard_read(r, 0, 3, NULL, 0, x, T_ * D_, lse, HQ_ * T_, &st) == 0, "clean sequence: %s", st.msg);
        int rc = shard_read(r, 1, 3, NULL, 0, x, T_ * D_, NULL, 0, &st);
        EXPECT(rc == -1 && strstr(st.msg, "layer 3") && strstr(st.msg, "sequence 7") && strstr(st.msg, bad),
               "NaN in x: %s", rc ? st.msg : "accepted");
        printf("  refused as expected (NaN in x): %s\n", st.msg);
        rc = shard_read(r, 2, 1, NULL, 0, NULL, 0, lse, HQ_ * T_, &st);
        EXPECT(rc == -1 && strstr(st.msg, "layer 1") && strstr(st.msg, "sequence 8"), "Inf in lse: %s",
               rc ? st.msg : "accepted");
        shard_close(r);
    } else
        EXPECT(0, "open after poke: %s", st.msg);

    // The writer refuses non-finite values up front.
    ShardHeader h = tiny_header();
    ShardWriter *w;
    snprintf(bad, sizeof bad, "%s/nan.h5", tmp);
    if (shard_writer_open(&w, bad, &h, &st) == 0) {
        float x0[T_ * D_], l0[HQ_ * T_];
        memcpy(x0, d->x[0][1], sizeof x0);
        memcpy(l0, d->lse[0][1], sizeof l0);
        x0[4] = NAN;
        const float *xs[NL] = {d->x[0][0], x0}, *ls[NL] = {d->lse[0][0], l0};
        EXPECT(shard_writer_append(w, d->tokens[0], xs, ls, &st) == -1 && strstr(st.msg, "layer 3"),
               "writer accepted NaN");
        shard_writer_abort(w);
        char t2[4200];
        snprintf(t2, sizeof t2, "%s.tmp", bad);
        EXPECT(!exists(bad) && !exists(t2), "abort must leave nothing");
    } else
        EXPECT(0, "writer open: %s", st.msg);

    // A header the writer must not accept.
    h.layers[1] = 1;
    EXPECT(shard_writer_open(&w, bad, &h, &st) == -1, "duplicate layers accepted");
}

// A write that hits RLIMIT_FSIZE (a full disk, as the process sees it).
static void test_full_disk(const Data *d) {
    char path[4200], t2[4300];
    snprintf(path, sizeof path, "%s/full.h5", tmp);
    snprintf(t2, sizeof t2, "%s.tmp", path);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    // Bigger sequences than the limit allows: a fresh header with ctx 512.
    ShardHeader h = tiny_header();
    h.ctx = 512;
    float *x = malloc(sizeof(float) * 512 * D_), *l = malloc(sizeof(float) * 512 * HQ_);
    int32_t tok[512] = {0};
    for (int i = 0; i < 512 * D_; i++) x[i] = rand_float();
    for (int i = 0; i < 512 * HQ_; i++) l[i] = rand_float();
    const float *xs[NL] = {x, x}, *ls[NL] = {l, l};
    Status st = {{0}};
    ShardWriter *w;
    int rc = shard_writer_open(&w, path, &h, &st);
    for (int s = 0; s < 4 && rc == 0; s++) rc = shard_writer_append(w, tok, xs, ls, &st);
    if (rc == 0) rc = shard_writer_close(w, &st);
    else if (w) shard_writer_abort(w);
    setrlimit(RLIMIT_FSIZE, &old);
    EXPECT(rc == -1, "a write past the file-size limit succeeded");
    EXPECT(strstr(st.msg, "full.h5") != NULL, "message does not name the shard: %s", st.msg);
    EXPECT(!exists(path) && !exists(t2), "a failed write left a file behind");
    printf("  refused as expected (file-size limit): %s\n", st.msg);
    free(x), free(l);
    (void)d;
}

static void test_list(const char *good) {
    char dir[4200], p[4400];
    snprintf(dir, sizeof dir, "%s/list", tmp);
    mkdir(dir, 0777);
    const char *names[] = {"shard-00000.h5", "shard-00002.h5", "shard-00010.h5", "shard-00001.h5.tmp",
                           "shard-00003.h5.tmp", "notes.txt", "shard-x.h5", "shard-00004.h5x"};
    for (int i = 0; i < 8; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        copy_file(good, p, -1);
    }
    char **paths;
    int n;
    Status st;
    EXPECT(shard_list(dir, &paths, &n, &st) == 0, "list: %s", st.msg);
    EXPECT(n == 3, "expected 3 complete shards, got %d", n);
    const char *want[] = {"shard-00000.h5", "shard-00002.h5", "shard-00010.h5"};
    for (int i = 0; i < n && i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, want[i]);
        EXPECT(!strcmp(paths[i], p), "list[%d] = %s, expected %s", i, paths[i], p);
    }
    shard_free_list(paths, n);
    snprintf(p, sizeof p, "%s/absent", tmp);
    EXPECT(shard_list(p, &paths, &n, &st) == -1 && strstr(st.msg, "absent"), "listing a missing folder");
}

static int run_unit(void) {
    mkdir(tmp, 0777);
    Data *d = calloc(1, sizeof *d);
    fill(d);
    char good[4200];
    snprintf(good, sizeof good, "%s/good.h5", tmp);
    test_round_trip(d, good);
    test_bf16(d, good);
    test_version1(d, good);
    test_refusals(d, good);
    test_full_disk(d);
    test_list(good);
    free(d);
    printf(failures ? "FAILED: %d check(s)\n" : "all shard checks passed\n", failures);
    return failures ? 1 : 0;
}

// ---- seeds: the fuzz target's corpus

static int run_seeds(const char *dir) {
    mkdir(dir, 0777);
    Data *d = calloc(1, sizeof *d);
    fill(d);
    for (int s = 0; s < NSEQ; s++)  // inside the bfloat16 range, so every seed writes in both dtypes
        for (int l = 0; l < NL; l++)
            for (int i = 0; i < T_ * D_; i++)
                if (fabsf(d->x[s][l][i]) > 1e38f) d->x[s][l][i] = 1.0f;
    char p[4200], q[4200];
    Status st;
    ShardHeader h = tiny_header();
    snprintf(p, sizeof p, "%s/fp32.h5", dir);
    EXPECT(write_shard(p, &h, d, &st) == 0, "%s", st.msg);
    h.x_dtype = SHARD_X_BF16;
    snprintf(p, sizeof p, "%s/bf16.h5", dir);
    EXPECT(write_shard(p, &h, d, &st) == 0, "%s", st.msg);
    const char *edits[] = {"refuse-layers7.h5", "refuse-dmodel4.h5", "refuse-nseq0.h5", "refuse-format-array.h5",
                           "refuse-flipped.h5"};
    for (int i = 0; i < 5; i++) {
        snprintf(q, sizeof q, "%s/%s", dir, edits[i]);
        copy_file(p, q, -1);
    }
    snprintf(q, sizeof q, "%s/refuse-layers7.h5", dir);
    set_attr_i32_array(q, "layers", (const int32_t[]){1, 7}, 2);
    snprintf(q, sizeof q, "%s/refuse-dmodel4.h5", dir);
    set_attr_i64(q, "d_model", D_ + 1);
    snprintf(q, sizeof q, "%s/refuse-nseq0.h5", dir);
    set_attr_i64(q, "n_seq", 0);
    set_attr_i64(q, "token_end", 30);
    snprintf(q, sizeof q, "%s/refuse-format-array.h5", dir);
    set_attr_str_array(q, "format", 4, 0);
    snprintf(q, sizeof q, "%s/refuse-flipped.h5", dir);
    flip_byte(q, SHARD_USERBLOCK + 200);
    free(d);
    return failures ? 1 : 0;
}

// ---- verify: stored shards against the model

static float max_abs_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

// Captures every stored layer's x and lse during a fresh forward.
typedef struct {
    const ShardHeader *h;
    float *x, *l;  // [n_layers, T, D], [n_layers, Hq, T]
    int D, Hq;
} Cap;

static void cap_fn(void *ctx, int layer, const float *xn, const float *q, const float *k, const float *lse, int T) {
    Cap *c = ctx;
    (void)q, (void)k;
    for (int li = 0; li < c->h->n_layers; li++)
        if (c->h->layers[li] == layer) {
            memcpy(c->x + (size_t)li * T * c->D, xn, sizeof(float) * (size_t)T * c->D);
            memcpy(c->l + (size_t)li * T * c->Hq, lse, sizeof(float) * (size_t)T * c->Hq);
        }
}

// Two shard folders of the same run settings (e.g. written on the CPU and on
// the GPU): the same tokens, and every layer's x and lse within tol relative to
// the largest magnitude of each (x) or in absolute terms (lse).
static int run_compare(const char *dir_a, const char *dir_b, double tol) {
    Status st;
    char **pa, **pb;
    int na, nb;
    if (shard_list(dir_a, &pa, &na, &st) || shard_list(dir_b, &pb, &nb, &st))
        return fprintf(stderr, "%s\n", st.msg), 1;
    EXPECT(na > 0 && na == nb, "%d shards in %s, %d in %s", na, dir_a, nb, dir_b);
    double worst_x = 0, worst_lse = 0;
    for (int i = 0; i < na && i < nb; i++) {
        ShardReader *ra, *rb;
        if (shard_open(&ra, pa[i], NULL, NULL, &st)) return fprintf(stderr, "%s\n", st.msg), 1;
        if (shard_open(&rb, pb[i], NULL, NULL, &st)) return fprintf(stderr, "%s\n", st.msg), 1;
        const ShardHeader *ha = shard_header(ra), *hb = shard_header(rb);
        EXPECT(ha->n_seq == hb->n_seq && ha->ctx == hb->ctx && ha->d_model == hb->d_model &&
                   ha->n_heads == hb->n_heads && ha->n_layers == hb->n_layers &&
                   !memcmp(ha->layers, hb->layers, sizeof(int) * (size_t)ha->n_layers),
               "%s and %s: other shapes or layers", pa[i], pb[i]);
        const size_t T = (size_t)ha->ctx, nx = T * (size_t)ha->d_model, nl = T * (size_t)ha->n_heads;
        int32_t *ta = malloc(sizeof(int32_t) * T), *tb = malloc(sizeof(int32_t) * T);
        float *xa = malloc(sizeof(float) * nx), *xb = malloc(sizeof(float) * nx);
        float *la = malloc(sizeof(float) * nl), *lb = malloc(sizeof(float) * nl);
        for (int64_t sq = 0; sq < ha->n_seq && !failures; sq++)
            for (int li = 0; li < ha->n_layers; li++) {
                const int l = ha->layers[li];
                if (shard_read(ra, sq, l, ta, T, xa, nx, la, nl, &st) || shard_read(rb, sq, l, tb, T, xb, nx, lb, nl, &st))
                    return fprintf(stderr, "%s\n", st.msg), 1;
                EXPECT(!memcmp(ta, tb, sizeof(int32_t) * T), "%s seq %lld: tokens differ", pa[i], (long long)sq);
                double m = 0, e = 0, el = 0;
                for (size_t j = 0; j < nx; j++) {
                    m = fmax(m, fabs(xa[j]));
                    e = fmax(e, fabs((double)xa[j] - xb[j]));
                    if (!isfinite(xb[j])) e = INFINITY;
                }
                for (size_t j = 0; j < nl; j++) el = isfinite(lb[j]) ? fmax(el, fabs((double)la[j] - lb[j])) : INFINITY;
                worst_x = fmax(worst_x, e / (m > 0 ? m : 1)), worst_lse = fmax(worst_lse, el);
            }
        free(ta), free(tb), free(xa), free(xb), free(la), free(lb);
        shard_close(ra), shard_close(rb);
    }
    printf("compare: max |x_a - x_b| / max |x_a| = %.3e, max |lse_a - lse_b| = %.3e (tol %.1e)\n", worst_x,
           worst_lse, tol);
    EXPECT(worst_x <= tol && worst_lse <= tol, "shards differ by more than %g", tol);
    shard_free_list(pa, na), shard_free_list(pb, nb);
    return failures ? 1 : 0;
}

static int run_verify(const char *model_dir, const char *shard_dir, const char *ids_path) {
    Status st;
    Model m;
    if (model_load(&m, model_dir, &st)) return fprintf(stderr, "%s\n", st.msg), 1;
    char fp[65];
    if (model_fingerprint(model_dir, &m.st, fp, &st)) return fprintf(stderr, "%s\n", st.msg), 1;
    int32_t *ids;
    size_t n_ids;
    if (ids_read(ids_path, m.cfg.vocab, &ids, &n_ids, &st)) return fprintf(stderr, "%s\n", st.msg), 1;
    char **paths;
    int n;
    if (shard_list(shard_dir, &paths, &n, &st)) return fprintf(stderr, "%s\n", st.msg), 1;
    EXPECT(n > 0, "no shards in %s", shard_dir);
    const ModelConfig *c = &m.cfg;
    const int D = c->hidden, Hq = c->n_heads, Hkv = c->n_kv_heads, dh = c->head_dim, rot = rope_rot_dims(c);
    int bf16 = 0;  // some shard stores x in bfloat16
    float e_x = 0, e_lse = 0, e_naive = 0;
    int64_t n_checked = 0, next_seq = 0;
    for (int i = 0; i < n; i++) {
        ShardReader *r;
        if (shard_open(&r, paths[i], fp, c, &st)) {
            EXPECT(0, "%s", st.msg);
            continue;
        }
        const ShardHeader *h = shard_header(r);
        const int T = h->ctx;
        EXPECT(h->first_seq == next_seq, "%s: first_seq %lld, expected %lld", paths[i], (long long)h->first_seq,
               (long long)next_seq);
        next_seq += h->n_seq;
        int32_t *tok = malloc(sizeof(int32_t) * T);
        float *x = malloc(sizeof(float) * T * D), *lse = malloc(sizeof(float) * T * Hq);
        float *hidden = malloc(sizeof(float) * T * D);
        float *fx = malloc(sizeof(float) * T * D * h->n_layers), *fl = malloc(sizeof(float) * T * Hq * h->n_layers);
        float *q = malloc(sizeof(float) * T * Hq * dh), *k = malloc(sizeof(float) * T * Hkv * dh);
        float *cs = malloc(sizeof(float) * T * (rot / 2 + 1)), *sn = malloc(sizeof(float) * T * (rot / 2 + 1));
        rope_tables(c, T, cs, sn);
        for (int64_t s = 0; s < h->n_seq; s++) {
            int64_t g = h->first_seq + s;
            if (shard_read(r, s, h->layers[0], tok, (size_t)T, NULL, 0, NULL, 0, &st)) {
                EXPECT(0, "%s", st.msg);
                continue;
            }
            EXPECT((size_t)(g + 1) * T <= n_ids && !memcmp(tok, ids + g * T, sizeof(int32_t) * T),
                   "%s: tokens of sequence %lld are not window %lld of %s", paths[i], (long long)g, (long long)g,
                   ids_path);
            // A fresh dense forward, capturing every stored layer.
            Cap cap = {h, fx, fl, D, Hq};
            ForwardTap tap = {cap_fn, &cap, TAP_XN | TAP_LSE};
            forward_hidden(&m, tok, T, hidden, &(ForwardOpts){.tap = &tap});
            for (int li = 0; li < h->n_layers; li++) {
                int l = h->layers[li];
                if (shard_read(r, s, l, NULL, 0, x, (size_t)T * D, lse, (size_t)T * Hq, &st)) {
                    EXPECT(0, "%s", st.msg);
                    continue;
                }
                float *want_x = fx + (size_t)li * T * D;
                if (h->x_dtype == SHARD_X_BF16) {  // stored = the forward's x rounded to bfloat16
                    bf16 = 1;
                    for (size_t j = 0; j < (size_t)T * D; j++) want_x[j] = bf16_round(want_x[j]);
                }
                e_x = fmaxf(e_x, max_abs_diff(x, want_x, (size_t)T * D));
                e_lse = fmaxf(e_lse, max_abs_diff(lse, fl + (size_t)li * T * Hq, (size_t)T * Hq));
                // lse from the stored x alone: q, k as the layer uses them, then log Σ exp in double.
                forward_layer_qk(&m, l, x, T, cs, sn, q, k);
                for (int hh = 0; hh < Hq; hh++) {
                    int kh = hh / (Hq / Hkv);
                    for (int t = 0; t < T; t++) {
                        double mx = -INFINITY, sum = 0, *sc = malloc(sizeof(double) * (t + 1));
                        for (int j = 0; j <= t; j++) {
                            double a = 0;
                            for (int e = 0; e < dh; e++)
                                a += (double)q[((size_t)t * Hq + hh) * dh + e] * k[((size_t)j * Hkv + kh) * dh + e];
                            sc[j] = a * c->attn_scale;
                            mx = fmax(mx, sc[j]);
                        }
                        for (int j = 0; j <= t; j++) sum += exp(sc[j] - mx);
                        free(sc);
                        double ref = mx + log(sum), got = lse[(size_t)hh * T + t];
                        e_naive = fmaxf(e_naive, (float)(fabs(ref - got) / (1 + fabs(ref))));
                    }
                }
                n_checked++;
            }
        }
        free(tok), free(x), free(lse), free(hidden), free(fx), free(fl), free(q), free(k), free(cs), free(sn);
        shard_close(r);
    }
    printf("verify: %lld (sequence, layer) pairs in %d shard(s): max |x - forward| %g, max |lse - forward| %g, "
           "max rel |lse - naive lse from stored x| %g\n",
           (long long)n_checked, n, e_x, e_lse, e_naive);
    EXPECT(n_checked > 0, "nothing checked");
    EXPECT(e_x <= 1e-5f, "x differs from the forward by %g", e_x);
    EXPECT(e_lse <= 1e-5f, "lse differs from the forward by %g", e_lse);
    // With bfloat16 x the stored lse (from the float32 x) agrees with one rebuilt
    // from the stored x only to the rounding of x.
    const float tol_naive = bf16 ? 2e-2f : 1e-5f;
    EXPECT(e_naive <= tol_naive, "lse differs from the naive recomputation by %g (relative; tolerance %g)", e_naive,
           tol_naive);
    shard_free_list(paths, n);
    free(ids);
    model_free(&m);
    printf(failures ? "FAILED: %d check(s)\n" : "verify passed\n", failures);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    blas_ensure_core(argv);  // the same BLAS kernels as the spindle binary
    if (argc == 3 && !strcmp(argv[1], "unit")) {
        tmp = argv[2];
        return run_unit();
    }
    if (argc == 3 && !strcmp(argv[1], "seeds")) return run_seeds(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "verify")) return run_verify(argv[2], argv[3], argv[4]);
    if (argc == 5 && !strcmp(argv[1], "compare")) return run_compare(argv[2], argv[3], atof(argv[4]));
    if (argc == 4 && !strcmp(argv[1], "to-v1")) {  // an old-format copy of a float32 shard, for the readers' tests
        make_version1(argv[2], argv[3]);
        return 0;
    }
    fprintf(stderr, "usage: test_shard unit TMP_DIR | test_shard seeds DIR | test_shard verify MODEL_DIR SHARD_DIR "
                    "IDS_FILE | test_shard compare SHARD_DIR_A SHARD_DIR_B TOL | test_shard to-v1 SHARD OUT\n");
    return 2;
}
