// teacher.h: the teacher stage — the frozen model's dense forward pass that
// writes teacher shards (data/shard.h, docs/formats.md) for indexer training.
//
// The token stream (an ids file, or text files/folders through the corpus
// reader) is cut into non-overlapping windows of ctx tokens; window i is
// sequence i. Each window runs through the dense forward; a tap keeps x (the
// normed attention input) and lse (per-head log-sum-exp) of the chosen
// full-attention layers, and every seqs_per_shard sequences become
// OUT/shard-NNNNN.h5, written as .tmp and renamed when complete. resume
// continues after the last complete shard once every existing shard has been
// checked against this run (fingerprint, ctx, layers, seqs_per_shard, x dtype,
// source, and the tokens themselves). The forward stops after the deepest
// stored layer, so the cost follows the layers stored.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "backbone.h"
#include "config.h"
#include "shard.h"
#include "status.h"

typedef struct {
    const char *model_dir;     // config.json + safetensors (+ tokenizer.json for text)
    const char *const *text;   // text files or folders, tokenized and concatenated; NULL: ids_path
    int n_text;
    const char *ids_path;      // token ids file (exactly one of text, ids_path)
    int ctx;                   // tokens per sequence, at most the model's max_position_embeddings
    const char *out;           // the shard folder (created; new or empty unless resume)
    // Full-attention layers to store, ascending and distinct; NULL (n_layers 0):
    // every full-attention layer of the model.
    const int *layers;
    int n_layers;
    int seqs_per_shard;        // ≥ 1
    int max_seq;               // stop after this many sequences; 0: every full window
    int bos;                   // each window: the model's BOS, then ctx − 1 tokens (teacher_stream_load)
    int resume;                // continue the shards in out
    int use_cuda, precision;   // where the backbone runs (model/backbone.h)
    ShardXDtype x_dtype;       // storage of x (lse is always fp32)
} TeacherOpts;

// Runs the teacher stage. Notes, progress and a summary go to stderr as
// "spindle teacher: ...". Returns 0, or -1 with st naming the file and the
// problem; nothing partial is left (no .tmp shard, no empty folder it made).
int teacher_run(const TeacherOpts *o, Status *st);

// The token stream of a teacher run cut into its windows: what teacher_run
// emits, and what online training (train/trainer.h) reads in the same order.
typedef struct {
    int32_t *ids;            // the whole stream [n_ids]
    size_t n_ids;
    const int32_t **starts;  // [n_win] window i = starts[i][0..ctx)
    size_t n_win;
    int ctx;
    int32_t bos_id;          // ≥ 0: every window starts with this token (then ctx − 1 of the stream); −1: none
    char source[sizeof(((ShardHeader *)0)->source)];  // "ids:ABS" or "text:ABS[;ABS...]" (real paths)
} TeacherStream;

// Reads the ids file (text NULL) or tokenizes the text files/folders with
// model_dir/tokenizer.json, checks every id against c->vocab and cuts the
// stream into windows of ctx tokens (at most max_seq; 0: all). bos: each
// window is instead the model's BOS token (model_dir/tokenizer_config.json
// bos_token, tok_model_bos) followed by the next ctx − 1 tokens of the stream,
// and ids holds those windows one after the other (so window i is still
// ids[i·ctx ..)); a model without a bos_token is an error. Returns 0, or
// -1 with st naming the file (also when not one window fits). Free with
// teacher_stream_free (also after a failure).
int teacher_stream_load(TeacherStream *s, const ModelConfig *c, const char *model_dir, const char *const *text,
                        int n_text, const char *ids_path, int ctx, int max_seq, int bos, Status *st);
void teacher_stream_free(TeacherStream *s);

// The per-layer tap of the teacher's forward: after teacher_tap_forward,
// x[i] [ctx, hidden] (the normed attention input), lse[i] [Hq, ctx] (the
// per-head log-sum-exp) and, when asked for, q[i] [ctx, Hq·dh], k[i]
// [ctx, Hkv·dh] of layers[i]. The forward stops after the deepest layer.
typedef struct {
    int n_layers;
    int *slot;                 // [model layers] index into the buffers, -1: not tapped
    float **x, **lse, **q, **k;  // [n_layers] each (q, k NULL without want_qk)
    float *hidden;             // the forward's output (unspecified: the pass stops early)
    int d_model, n_heads, q_dim, k_dim, missing_lse;
    ForwardTap tap;
    ForwardOpts fo;
} TeacherTap;

// layers[0..n) ascending full-attention layers of c; ctx tokens per forward.
void teacher_tap_init(TeacherTap *t, const ModelConfig *c, const int *layers, int n, int ctx, int want_qk);
// One window through the backbone: fills the buffers. Aborts if the forward
// gave no lse (a dense teacher pass always has it).
void teacher_tap_forward(TeacherTap *t, const Backbone *bb, const int32_t *ids, int ctx);
void teacher_tap_free(TeacherTap *t);
