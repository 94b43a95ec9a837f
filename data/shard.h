// shard.h: teacher shards, the HDF5 files `spindle teacher` writes and the
// trainer reads (schema: docs/formats.md).
//
// A shard holds n_seq sequences of ctx tokens and, for each trained layer l,
// the layer's normed attention input x [ctx, d_model] and the per-head
// log-sum-exp lse [n_heads, ctx] of its dense scores: with forward_layer_qk the
// trainer rebuilds q, k from x and hence the teacher distribution P exactly.
//
// Writers create PATH.tmp and rename it to PATH only when every byte is on the
// disk, so a file named shard-NNNNN.h5 is always complete. Readers validate the
// format, version, fingerprint, every shape and dtype before handing out data,
// and refuse non-finite values. Every function that can fail returns 0 or -1
// with a Status naming the shard and the problem.
#pragma once
#include <stdint.h>

#include "status.h"

#define SHARD_FORMAT "spindle-teacher"
#define SHARD_FORMAT_VERSION 1
#define SHARD_MAX_LAYERS 1024

// The root attributes of a shard (docs/formats.md).
typedef struct {
    char fingerprint[65];  // model_fingerprint of the checkpoint
    char model_type[32];   // config.json model_type
    int ctx;               // tokens per sequence
    int n_layers;          // entries of layers
    int layers[SHARD_MAX_LAYERS];  // model layer indices stored, ascending, distinct
    int d_model, n_heads, n_kv_heads, head_dim;
    int seqs_per_shard;    // the run's setting (the last shard of a run may hold fewer)
    int64_t n_seq;         // sequences in this shard (writer: counted by append)
    int64_t first_seq;     // global index of the first sequence (window of the source stream)
    int64_t token_begin;   // token cursor range [token_begin, token_end) of the source stream
    int64_t token_end;     // (writer: token_begin + n_seq·ctx, set at close)
    char source[2048];     // "ids:PATH" or "text:PATH[;PATH...]"
} ShardHeader;

typedef struct ShardWriter ShardWriter;
typedef struct ShardReader ShardReader;

// Creates path.tmp with h's attributes and empty datasets. On failure *w is NULL.
int shard_writer_open(ShardWriter **w, const char *path, const ShardHeader *h, Status *st);
// Appends one sequence: tokens [ctx]; for i < h.n_layers, x[i] [ctx, d_model]
// and lse[i] [n_heads, ctx] of layer h.layers[i]. Non-finite values are refused.
// After a failure the writer can only be aborted.
int shard_writer_append(ShardWriter *w, const int32_t *tokens, const float *const *x, const float *const *lse,
                        Status *st);
// Writes n_seq, flushes, closes, syncs and renames path.tmp to path. Frees w.
// Any failure (a full disk, ...) removes path.tmp and names path in st.
int shard_writer_close(ShardWriter *w, Status *st);
// Closes and removes path.tmp. Frees w (NULL is fine).
void shard_writer_abort(ShardWriter *w);

// Opens and validates a shard. expect_fingerprint NULL accepts any checkpoint;
// otherwise a shard with another fingerprint is refused (the message names the
// shard and both fingerprints). Release with shard_close. On failure *r is NULL.
int shard_open(ShardReader **r, const char *path, const char *expect_fingerprint, Status *st);
const ShardHeader *shard_header(const ShardReader *r);
const char *shard_path(const ShardReader *r);
// Reads sequence seq (0 ≤ seq < n_seq, local to the shard) into tokens [ctx]
// and, of model layer `layer` (one of the header's layers), x [ctx, d_model]
// and lse [n_heads, ctx]. Any of the three may be NULL (layer is ignored when
// x and lse are). NaN/Inf in x or lse is an error naming shard, layer and sequence.
int shard_read(ShardReader *r, int64_t seq, int layer, int32_t *tokens, float *x, float *lse, Status *st);
void shard_close(ShardReader *r);

// Lists the complete shards of dir, DIR/shard-NNNNN.h5 (decimal NNNNN, any
// number of digits), ordered by number; *.tmp and other files are ignored.
// *paths is malloc'ed (caller frees with shard_free_list); *n may be 0.
int shard_list(const char *dir, char ***paths, int *n, Status *st);
void shard_free_list(char **paths, int n);
// dir/shard-%05d.h5 into out.
void shard_name(char *out, size_t size, const char *dir, int index);
