// fuzz_shard: one file through the teacher-shard reader (data/shard.h), opened
// as a shard of a fixed tiny model (4 layers, d_model 3, heads 2/1, head_dim 4,
// vocab 50000, max_position_embeddings 64: the model of the seed corpus, which
// `test_shard seeds DIR` writes). Accepted: the header agrees with the model and
// with itself, and every row of every stored layer reads into buffers of exactly
// the row's size (or is refused with a message naming the file). Refused: the
// message names the file.
//
// Inputs meet the checksum block first, as every shard does. An input laid
// out as a format_version 1 file (HDF5's signature at offset 0, no checksum
// block) is skipped unless SPINDLE_FUZZ_SHARD_LEGACY=1: the reader hands such a
// file straight to libhdf5, whose 1.10.8 parser hangs, leaks or crashes on some
// damaged files (docs/formats.md, "Residual risk"); this target fuzzes our
// code, not libhdf5's. With
// SPINDLE_FUZZ_SHARD_SEAL=1 an input that has an HDF5 superblock after its
// 512-byte block is also sealed (its checksum written for its contents) and
// opened again, so mutations reach HDF5's parser and the attribute checks
// behind it. That mode is off by default: libhdf5 1.10.8 itself crashes on
// some damaged files (docs/formats.md, "Residual risk"), which is why shards
// carry the checksum.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "shard.h"

static LayerKind kinds[4] = {LAYER_FULL_ATTENTION, LAYER_FULL_ATTENTION, LAYER_FULL_ATTENTION,
                             LAYER_FULL_ATTENTION};

static ModelConfig tiny_model(void) {
    ModelConfig c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.hidden = 3, c.n_layers = 4, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 4;
    c.vocab = 50000, c.max_pos = 64, c.layer_kinds = kinds;
    return c;
}

// Opens path as a shard of the tiny model; 1 if it was accepted.
static int open_and_read(const char *path) {
    ModelConfig c = tiny_model();
    ShardReader *r = NULL;
    Status st = {{0}};
    if (shard_open(&r, path, NULL, &c, &st)) {
        FUZZ_CHECK(r == NULL, "refused but returned a reader");
        FUZZ_CHECK(strstr(st.msg, path) != NULL, "message does not name the file: %s", st.msg);
        return 0;
    }
    const ShardHeader *h = shard_header(r);
    FUZZ_CHECK(h->d_model == c.hidden && h->n_heads == c.n_heads && h->n_kv_heads == c.n_kv_heads &&
                   h->head_dim == c.head_dim,
               "shapes d %d heads %d/%d dh %d", h->d_model, h->n_heads, h->n_kv_heads, h->head_dim);
    FUZZ_CHECK(h->ctx >= 1 && h->ctx <= c.max_pos, "ctx %d", h->ctx);
    FUZZ_CHECK(h->n_seq >= 1 && h->n_seq <= h->seqs_per_shard, "n_seq %lld of %d", (long long)h->n_seq,
               h->seqs_per_shard);
    FUZZ_CHECK(h->n_layers >= 1 && h->n_layers <= c.n_layers, "n_layers %d", h->n_layers);
    for (int i = 0; i < h->n_layers; i++)
        FUZZ_CHECK(h->layers[i] >= 0 && h->layers[i] < c.n_layers && (i == 0 || h->layers[i] > h->layers[i - 1]),
                   "layers[%d] = %d", i, h->layers[i]);
    const size_t T = (size_t)h->ctx, nx = T * (size_t)h->d_model, nl = T * (size_t)h->n_heads;
    // Exact-size buffers, so ASan sees any write past a row.
    int32_t *tok = malloc(sizeof(int32_t) * T);
    float *x = malloc(sizeof(float) * nx), *lse = malloc(sizeof(float) * nl);
    for (int64_t s = 0; s < h->n_seq && s < 8; s++) {
        if (shard_read(r, s, h->layers[0], tok, T, NULL, 0, NULL, 0, &st) == 0)
            for (size_t j = 0; j < T; j++) FUZZ_CHECK(tok[j] >= 0 && tok[j] < c.vocab, "token %d", tok[j]);
        for (int i = 0; i < h->n_layers; i++)
            if (shard_read(r, s, h->layers[i], NULL, 0, x, nx, lse, nl, &st) == 0) {
                for (size_t j = 0; j < nx; j++) FUZZ_CHECK(isfinite(x[j]), "x[%zu] not finite", j);
                for (size_t j = 0; j < nl; j++) FUZZ_CHECK(isfinite(lse[j]), "lse[%zu] not finite", j);
            } else
                FUZZ_CHECK(strstr(st.msg, path) != NULL, "read message does not name the file: %s", st.msg);
        // One element short is always refused.
        FUZZ_CHECK(shard_read(r, s, h->layers[0], NULL, 0, x, nx - 1, NULL, 0, &st) == -1, "short x accepted");
    }
    free(tok), free(x), free(lse);
    shard_close(r);
    return 1;
}

static int env_on(const char *name) {
    const char *v = getenv(name);
    return v && !strcmp(v, "1");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int seal = -1, legacy = -1;
    if (seal < 0) seal = env_on("SPINDLE_FUZZ_SHARD_SEAL"), legacy = env_on("SPINDLE_FUZZ_SHARD_LEGACY");
    static const uint8_t sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    if (!legacy && size >= 8 && !memcmp(data, sig, 8)) {
        fuzz_refused = 1;
        return 0;
    }
    const char *path = fuzz_write_file("shard.h5", data, size);
    fuzz_refused = !open_and_read(path);
    if (seal && size > SHARD_USERBLOCK + 8 && !memcmp(data + SHARD_USERBLOCK, sig, 8)) {
        Status st;
        const char *sealed = fuzz_write_file("sealed.h5", data, size);
        if (shard_seal(sealed, &st) == 0) open_and_read(sealed);
    }
    return 0;
}
