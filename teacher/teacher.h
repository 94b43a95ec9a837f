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
    int resume;                // continue the shards in out
    int use_cuda, precision;   // where the backbone runs (model/backbone.h)
    ShardXDtype x_dtype;       // storage of x (lse is always fp32)
} TeacherOpts;

// Runs the teacher stage. Notes, progress and a summary go to stderr as
// "spindle teacher: ...". Returns 0, or -1 with st naming the file and the
// problem; nothing partial is left (no .tmp shard, no empty folder it made).
int teacher_run(const TeacherOpts *o, Status *st);
