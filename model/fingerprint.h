// fingerprint.h: a checkpoint's identity, cheap to compute on any size.
//
// fingerprint = SHA-256, as 64 lowercase hex digits, over
//   1. the bytes of DIR/config.json, exactly as stored, then
//   2. for every tensor of the checkpoint, in byte order of the names (strcmp),
//      one line  "NAME DTYPE D0,D1,...\n"  (DTYPE as safetensors writes it:
//      F32, BF16, F16, ...; the shape in decimal, comma-separated, empty for a
//      scalar).
// The tensor data is not hashed, so a 16 GB checkpoint takes milliseconds; two
// checkpoints that differ only in weight values with identical config and
// headers share a fingerprint (docs/formats.md says so). Teacher shards record
// it and readers refuse a shard made from another checkpoint.
#pragma once
#include "safetensors.h"
#include "status.h"

// Writes the fingerprint of the checkpoint in model_dir (whose tensors are
// `tensors`, e.g. Model.st) to out_hex (64 hex digits + NUL). Returns 0, or -1
// with st naming the file and the problem (an unreadable config.json).
int model_fingerprint(const char *model_dir, const SafeTensors *tensors, char out_hex[65], Status *st);

// Whether the checkpoint in model_dir (tensors model_tensors) is the one in
// base_dir with another RoPE scaling: the same tensors (names, dtypes, shapes)
// and config.json equal key by key apart from rope_scaling, rope_parameters,
// rope_theta and max_position_embeddings (e.g. a YaRN folder over the same
// weights). Returns 0 with base_fp = base_dir's fingerprint (the one an indexer
// trained on base_dir names), or -1 with st naming the folders or the first key
// that differs.
int model_rope_variant_of(const char *model_dir, const SafeTensors *model_tensors, const char *base_dir,
                          char base_fp[65], Status *st);
