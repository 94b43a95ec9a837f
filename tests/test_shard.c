// test_shard: teacher shards (data/shard.h) and what `spindle teacher` wrote.
//   test_shard unit TMP_DIR
//       writer/reader round trip (bit-exact), listing, and every refusal:
//       another checkpoint, truncated file, NaN, wrong shapes and attributes,
//       a write that hits the file-size limit.
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

static ShardHeader tiny_header(void) {
    ShardHeader h;
    memset(&h, 0, sizeof h);
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

// Expects shard_open(path) to fail with a message containing want (and the path).
static void expect_refused(const char *path, const char *fp, const char *want, const char *what) {
    ShardReader *r = NULL;
    Status st = {{0}};
    int rc = shard_open(&r, path, fp, &st);
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

static void set_attr_i64(const char *path, const char *name, int64_t v) {
    hid_t f = open_rw(path);
    if (H5Adelete(f, name) < 0) exit(1);
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &v) < 0) exit(1);
    H5Aclose(a), H5Sclose(sp), H5Fclose(f);
}

static void set_attr_str(const char *path, const char *name, const char *v) {
    hid_t f = open_rw(path);
    if (H5Adelete(f, name) < 0) exit(1);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0 || H5Awrite(a, t, &v) < 0) exit(1);
    H5Aclose(a), H5Sclose(sp), H5Tclose(t), H5Fclose(f);
}

static void delete_object(const char *path, const char *name, int is_attr) {
    hid_t f = open_rw(path);
    if ((is_attr ? H5Adelete(f, name) : H5Ldelete(f, name, H5P_DEFAULT)) < 0) exit(1);
    H5Fclose(f);
}

static void poke_float(const char *path, const char *dset, hsize_t s, hsize_t i, hsize_t j, float v) {
    hid_t f = open_rw(path), d = H5Dopen2(f, dset, H5P_DEFAULT), fs = H5Dget_space(d);
    hsize_t start[3] = {s, i, j}, one[3] = {1, 1, 1};
    hid_t ms = H5Screate_simple(3, one, NULL);
    if (d < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL) < 0 ||
        H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, &v) < 0)
        exit(1);
    H5Sclose(ms), H5Sclose(fs), H5Dclose(d), H5Fclose(f);
}

static void test_round_trip(const Data *d, const char *good) {
    ShardHeader h = tiny_header();
    Status st;
    EXPECT(write_shard(good, &h, d, &st) == 0, "write: %s", st.msg);
    char tmpname[4300];
    snprintf(tmpname, sizeof tmpname, "%s.tmp", good);
    EXPECT(exists(good) && !exists(tmpname), "close must rename .tmp into place");

    ShardReader *r;
    if (shard_open(&r, good, FP_A, &st)) {
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
    int exact = 1;
    for (int s = 0; s < NSEQ; s++)
        for (int l = 0; l < NL; l++) {
            int32_t tok[T_];
            float x[T_ * D_], lse[HQ_ * T_];
            if (shard_read(r, s, h.layers[l], tok, x, lse, &st)) {
                EXPECT(0, "read seq %d layer %d: %s", s, h.layers[l], st.msg);
                continue;
            }
            exact &= !memcmp(tok, d->tokens[s], sizeof tok) && !memcmp(x, d->x[s][l], sizeof x) &&
                     !memcmp(lse, d->lse[s][l], sizeof lse);
        }
    EXPECT(exact, "round trip is not bit-exact");
    EXPECT(shard_read(r, NSEQ, 1, NULL, NULL, NULL, &st) == -1, "sequence out of range accepted");
    float x[T_ * D_];
    EXPECT(shard_read(r, 0, 2, NULL, x, NULL, &st) == -1 && strstr(st.msg, "layer 2"), "absent layer accepted: %s",
           st.msg);
    shard_close(r);
    // Any fingerprint is fine when none is expected.
    EXPECT(shard_open(&r, good, NULL, &st) == 0, "open without fingerprint: %s", st.msg);
    if (!failures) shard_close(r);
    printf("round trip: %d sequences x %d layers bit-exact\n", NSEQ, NL);
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
    expect_refused(bad, NULL, "not an HDF5 file", "empty file");
    snprintf(bad + strlen(bad), 8, ".none");
    expect_refused(bad, NULL, "cannot open", "missing file");
    snprintf(bad, sizeof bad, "%s/bad.h5", tmp);

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
    set_attr_i64(bad, "format_version", 2);
    expect_refused(bad, NULL, "format_version 2", "future version");
    copy_file(good, bad, -1);
    set_attr_str(bad, "format", "something-else");
    expect_refused(bad, NULL, "format", "other format");
    copy_file(good, bad, -1);
    set_attr_str(bad, "x_dtype", "bfloat16");
    expect_refused(bad, NULL, "dtypes", "unsupported x dtype");
    copy_file(good, bad, -1);
    delete_object(bad, "fingerprint", 1);
    expect_refused(bad, NULL, "\"fingerprint\" is missing", "missing fingerprint");
    copy_file(good, bad, -1);
    delete_object(bad, "layer_3/lse", 0);
    expect_refused(bad, NULL, "layer_3/lse\" is missing", "missing dataset");
    copy_file(good, bad, -1);
    delete_object(bad, "tokens", 0);
    expect_refused(bad, NULL, "\"tokens\" is missing", "missing tokens");

    // NaN / Inf inside a stored dataset: open is fine, reading that sequence is not.
    copy_file(good, bad, -1);
    poke_float(bad, "layer_3/x", 1, 2, 0, NAN);
    poke_float(bad, "layer_1/lse", 2, 1, 4, INFINITY);
    ShardReader *r;
    Status st;
    if (shard_open(&r, bad, FP_A, &st) == 0) {
        float x[T_ * D_], lse[HQ_ * T_];
        EXPECT(shard_read(r, 0, 3, NULL, x, lse, &st) == 0, "clean sequence: %s", st.msg);
        int rc = shard_read(r, 1, 3, NULL, x, NULL, &st);
        EXPECT(rc == -1 && strstr(st.msg, "layer 3") && strstr(st.msg, "sequence 7") && strstr(st.msg, bad),
               "NaN in x: %s", rc ? st.msg : "accepted");
        printf("  refused as expected (NaN in x): %s\n", st.msg);
        rc = shard_read(r, 2, 1, NULL, NULL, lse, &st);
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
    test_refusals(d, good);
    test_full_disk(d);
    test_list(good);
    free(d);
    printf(failures ? "FAILED: %d check(s)\n" : "all shard checks passed\n", failures);
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
    float e_x = 0, e_lse = 0, e_naive = 0;
    int64_t n_checked = 0, next_seq = 0;
    for (int i = 0; i < n; i++) {
        ShardReader *r;
        if (shard_open(&r, paths[i], fp, &st)) {
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
            if (shard_read(r, s, h->layers[0], tok, NULL, NULL, &st)) {
                EXPECT(0, "%s", st.msg);
                continue;
            }
            EXPECT((size_t)(g + 1) * T <= n_ids && !memcmp(tok, ids + g * T, sizeof(int32_t) * T),
                   "%s: tokens of sequence %lld are not window %lld of %s", paths[i], (long long)g, (long long)g,
                   ids_path);
            // A fresh dense forward, capturing every stored layer.
            Cap cap = {h, fx, fl, D, Hq};
            ForwardTap tap = {cap_fn, &cap};
            forward_hidden(&m, tok, T, hidden, &(ForwardOpts){.tap = &tap});
            for (int li = 0; li < h->n_layers; li++) {
                int l = h->layers[li];
                if (shard_read(r, s, l, NULL, x, lse, &st)) {
                    EXPECT(0, "%s", st.msg);
                    continue;
                }
                e_x = fmaxf(e_x, max_abs_diff(x, fx + (size_t)li * T * D, (size_t)T * D));
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
    EXPECT(e_naive <= 1e-5f, "lse differs from the naive recomputation by %g (relative)", e_naive);
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
    if (argc == 5 && !strcmp(argv[1], "verify")) return run_verify(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: test_shard unit TMP_DIR | test_shard verify MODEL_DIR SHARD_DIR IDS_FILE\n");
    return 2;
}
