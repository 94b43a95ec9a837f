// shard.h: teacher shards, the HDF5 files `spindle teacher` writes and the
// trainer reads (schema: docs/formats.md).
//
// A shard holds n_seq sequences of ctx tokens and, for each trained layer l,
// the layer's normed attention input x [ctx, d_model] and the per-head
// log-sum-exp lse [n_heads, ctx] of its dense scores: with forward_layer_qk the
// trainer rebuilds q, k from x and hence the teacher distribution P exactly.
//
// Writers create PATH.tmp and rename it to PATH only when every byte is on the
// disk, so a file named shard-NNNNN.h5 is always complete. The file opens with
// a 512-byte checksum block (an HDF5 user block: h5py and every HDF5 reader skip
// it) holding the SHA-256 of the rest, and readers verify it before HDF5 parses
// anything, so a damaged file is refused by us, not met by libhdf5's parser.
// Readers then validate the format, version, fingerprint, every attribute and
// dataset shape against each other and against the model (ModelConfig), and
// refuse non-finite values; a row is read only into a buffer that says how much
// it holds. Every function that can fail returns 0 or -1 with a Status naming
// the shard and the problem.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "status.h"

#define SHARD_FORMAT "spindle-teacher"
// 2: checksum block, x in bfloat16 or float32. 1 (read, no longer written):
// no checksum block, x in float32.
#define SHARD_FORMAT_VERSION 2
#define SHARD_MAX_LAYERS 1024
#define SHARD_USERBLOCK 512  // bytes of the checksum block before the HDF5 superblock

// How x is stored; readers return float32 either way.
typedef enum { SHARD_X_BF16 = 0, SHARD_X_F32 = 1 } ShardXDtype;
// "bfloat16" / "float32" (the x_dtype attribute).
const char *shard_x_dtype_name(ShardXDtype d);
// Bytes per stored x element (2 or 4).
int shard_x_dtype_bytes(ShardXDtype d);

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
    ShardXDtype x_dtype;   // storage of x (lse and tokens: float32, int32)
    int format_version;    // reader: the file's (1 or 2); the writer writes SHARD_FORMAT_VERSION
} ShardHeader;

typedef struct ShardWriter ShardWriter;
typedef struct ShardReader ShardReader;

// Creates path.tmp with h's attributes and empty datasets. On failure *w is NULL.
int shard_writer_open(ShardWriter **w, const char *path, const ShardHeader *h, Status *st);
// Appends one sequence: tokens [ctx]; for i < h.n_layers, x[i] [ctx, d_model]
// and lse[i] [n_heads, ctx] of layer h.layers[i]. Non-finite values are refused
// (also an x that rounds to ±inf in bfloat16: |x| above 3.39e38). bfloat16 x is
// float32 rounded to nearest, ties to even. After a failure the writer can only
// be aborted.
int shard_writer_append(ShardWriter *w, const int32_t *tokens, const float *const *x, const float *const *lse,
                        Status *st);
// Writes n_seq, flushes, closes, writes the checksum block, syncs and renames
// path.tmp to path. Frees w. A writer with no sequence appended is refused (a
// shard holds at least one). Any failure (a full disk, ...) removes path.tmp
// and names path in st.
int shard_writer_close(ShardWriter *w, Status *st);
// Closes and removes path.tmp. Frees w (NULL is fine).
void shard_writer_abort(ShardWriter *w);
// Writes the checksum block of path anew from its current contents (the writer
// does this before renaming; also after editing a shard with another HDF5 tool,
// which keeps the user block). path must have an HDF5 superblock at offset
// SHARD_USERBLOCK. Returns 0, or -1 with st naming the file.
int shard_seal(const char *path, Status *st);

// Opens and validates a shard: the checksum block first (version 2; a version 1
// file has none and goes straight to HDF5), then every attribute and dataset.
// expect_fingerprint NULL accepts any checkpoint; otherwise a shard with another
// fingerprint is refused (the message names the shard and both fingerprints).
// model NULL checks the shard against itself only (for inspecting a shard);
// otherwise d_model, n_heads, n_kv_heads, head_dim, model_type must equal the
// model's, every stored layer must be one of its full-attention layers, and ctx
// at most its max_position_embeddings. Release with shard_close. On failure *r is NULL.
int shard_open(ShardReader **r, const char *path, const char *expect_fingerprint, const ModelConfig *model,
               Status *st);
const ShardHeader *shard_header(const ShardReader *r);
const char *shard_path(const ShardReader *r);
// Reads sequence seq (0 ≤ seq < n_seq, local to the shard) into tokens [ctx]
// and, of model layer `layer` (one of the header's layers), x [ctx, d_model]
// and lse [n_heads, ctx], each as float32 whatever the storage. Any of the three
// may be NULL (layer is ignored when x and lse are). n_tokens, n_x, n_lse say
// how many elements each buffer holds: a buffer smaller than the row is refused
// before anything is read. NaN/Inf in x or lse is an error naming shard, layer
// and sequence.
int shard_read(ShardReader *r, int64_t seq, int layer, int32_t *tokens, size_t n_tokens, float *x, size_t n_x,
               float *lse, size_t n_lse, Status *st);
void shard_close(ShardReader *r);

// Lists the complete shards of dir, DIR/shard-NNNNN.h5 (decimal NNNNN, any
// number of digits), ordered by number; *.tmp and other files are ignored.
// *paths is malloc'ed (caller frees with shard_free_list); *n may be 0.
int shard_list(const char *dir, char ***paths, int *n, Status *st);
void shard_free_list(char **paths, int n);
// dir/shard-%05d.h5 into out.
void shard_name(char *out, size_t size, const char *dir, int index);
