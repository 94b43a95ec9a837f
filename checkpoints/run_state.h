// run_state.h: step-numbered run checkpoints, written atomically and checked
// on load.
//
// RUN/checkpoints/ckpt-SSSSSSSS.bin holds everything a resumed run needs to
// continue bit for bit: a fixed-slot header (magic, version, step, RNG state,
// data cursor, sizes), per trained layer the indexer parameters and the AdamW
// moments m and v, and a SHA-256 of all the bytes before it. The file appears
// under its final name only once it is complete (PATH.tmp + rename); a loader
// still trusts it only when the digest matches and the header's step is the
// one in the file name.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "status.h"

enum { RUN_STATE_VERSION = 2 };

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
// Path of the checkpoint of `step` (RUN/checkpoints/ckpt-%08d.bin).
void run_state_path(char *buf, size_t len, const char *run_dir, int64_t step);
// Finds the newest checkpoint file in RUN/checkpoints (returns 0 and sets
// *step, or 1 when there is none). The file is not checked: see
// run_state_load_newest.
int run_state_latest(const char *run_dir, int64_t *step, Status *st);
// Bytes of a checkpoint file of n_layers x n_params.
int64_t run_state_file_bytes(int n_layers, int64_t n_params);
// 0 if RUN/checkpoints holds a checkpoint file of `step` (step < 0: any) of
// exactly the size n_layers x n_params imply, else -1 with st saying so. Lets
// a caller refuse a config that disagrees with the checkpoints before it
// allocates buffers for them.
int run_state_sizes_fit(const char *run_dir, int64_t step, int n_layers, int64_t n_params, Status *st);
// Loads the checkpoint of `step` into rs, whose n_layers, n_params and buffers
// the caller has set up. Refused (-1, st naming the file): a short or long
// file, another magic or version, a digest mismatch, a header step other than
// `step`, sizes other than rs's. rs is written only on success... except its
// buffers, which hold garbage after a failure.
int run_state_load(const char *run_dir, int64_t step, RunState *rs, Status *st);
// Loads the newest checkpoint that run_state_load accepts and whose step is
// ≤ max_step (max_step < 0: any). Every newer file that is refused is named
// on stderr as "spindle CMD: FILE: why; falling back to an older checkpoint";
// with quarantine ≠ 0 it is also renamed FILE.invalid so that later saves and
// pruning never count it (train does this, export leaves the run untouched).
// Returns 0 (rs and *step set), 1 when the run has no checkpoint file at all,
// -1 when none is valid (st names the newest and why).
int run_state_load_newest(const char *run_dir, const char *cmd, int64_t max_step, int quarantine, RunState *rs,
                          int64_t *step, Status *st);
