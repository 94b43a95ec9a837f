// run_state.h: step-numbered run checkpoints, written atomically.
//
// RUN/checkpoints/ckpt-SSSSSSSS.bin holds everything a resumed run needs to
// continue bit for bit: a fixed-slot header (magic, version, step, RNG state,
// data cursor, sizes) and, per trained layer, the indexer parameters and the
// AdamW moments m and v. The file appears under its final name only once it
// is complete (PATH.tmp + rename), so any ckpt-*.bin is a complete one.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum { RUN_STATE_VERSION = 1 };

typedef struct {
    int64_t step;          // optimizer steps done
    uint64_t rng;          // trainer PRNG state after `step` steps
    int64_t cursor;        // global index of the next training sequence
    int64_t tokens;        // teacher tokens consumed so far
    int n_layers;          // trained layers
    int64_t n_params;      // parameters per layer (all layers share a config)
    float **params, **m, **v;  // [n_layers][n_params], owned by the caller
} RunState;

// Writes RUN/checkpoints/ckpt-<step>.bin and keeps only the newest `keep`
// (step 0, the initialisation, is always kept).
int run_state_save(const char *run_dir, const RunState *rs, int keep, Status *st);
// Finds the newest checkpoint in RUN/checkpoints (returns 0 and sets *step, or
// 1 when there is none).
int run_state_latest(const char *run_dir, int64_t *step, Status *st);
// Loads the checkpoint of `step` into rs, whose n_layers, n_params and buffers
// the caller has set up; a mismatch in sizes is an error naming the file.
int run_state_load(const char *run_dir, int64_t step, RunState *rs, Status *st);
