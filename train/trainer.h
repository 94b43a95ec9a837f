// trainer.h: `spindle train` — distil each chosen layer's head-averaged
// attention mass into its indexer from teacher shards (DESIGN.md "Loss").
#pragma once
#include <stdint.h>

#include "indexer.h"
#include "status.h"

enum { TRAIN_MAX_LAYERS = 256 };

typedef struct {
    const char *model_dir, *shards_dir, *run_dir;
    const char *heldout_dir;  // shards for the periodic recall check (NULL: none)
    IndexerConfig icfg;
    int layers[TRAIN_MAX_LAYERS];  // model layers to train (each stored in the shards)
    int n_layers;
    long steps, warmup;
    double lr, min_lr_frac, weight_decay, beta1, beta2, eps, clip;
    uint64_t seed;
    double query_frac;  // fraction of the positions ≥ min_pos sampled per step
    int min_pos;
    int eval_every, recall_k, eval_queries;  // held-out recall@k every N steps, on this many queries
    int ckpt_every, keep_ckpts;
    int progress;       // progress line on stderr
    int use_cuda;       // the step on GPU 0 (fp32; not part of the run's config: a run may move between devices)
    int bf16_teacher;   // with use_cuda: the teacher's P on bf16 tensor cores (indexer_kl_loss_cuda); not in the config either
    long stop_after;    // testing aid: exit (as if killed) after this many steps of this process (0: off)
} TrainConfig;

// Default hyperparameters (the caller fills paths and layers).
TrainConfig train_config_default(void);

// Trains to tc->steps. Fresh (resume = 0): refuses a non-empty run folder.
// resume = 1: continues from the newest complete checkpoint; the run's stored
// config.json must agree with tc.
int train_run(const TrainConfig *tc, int resume, Status *st);
