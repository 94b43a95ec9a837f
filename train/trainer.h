// trainer.h: `spindle train` — distil each chosen layer's head-averaged
// attention mass into its indexer (docs/design.md, "Loss"), from teacher
// shards or online: the frozen backbone runs over each step's sequence and a
// tap hands the step the trained layers' x, lse and teacher q and k from that
// pass (on the GPU, the pass's own device arrays: the step runs in the tap).
#pragma once
#include <stdint.h>

#include "indexer.h"
#include "status.h"

enum { TRAIN_MAX_LAYERS = 256, TRAIN_MAX_TEXT = 16, TRAIN_MAX_BATCH = 4096 };
enum { TRAIN_PREC_FP32 = 0, TRAIN_PREC_MIXED = 1, TRAIN_PREC_BF16 = 2 };
// "fp32" | "mixed" | "bf16" -> 0 | 1 | 2; -1 for anything else.
int train_prec_parse(const char *s);
const char *train_prec_name(int p);
struct TrainConfig;
// tc->backbone_prec, or when -1 the mode's default: bf16 online (the pass is
// the teacher), fp32 from shards (the q/k rebuild of the CPU twin).
int train_backbone_prec(const struct TrainConfig *tc);

// A token stream by its paths, read and windowed as `spindle teacher` does
// (teacher_stream_load): text files/folders, or one ids file; neither: none.
// Or random (training only): window c holds ctx token ids uniform in
// [0, vocab) from splitmix64 seeded by (random_seed, c), an endless stream.
typedef struct {
    const char *text[TRAIN_MAX_TEXT];
    int n_text;
    const char *ids_path;
    int random;
    uint64_t random_seed;
    int bos;  // each window the model's BOS then ctx − 1 tokens of the stream (train --bos; teacher_stream_load)
    char store[TRAIN_MAX_TEXT][4096];  // the paths read from a run's config.json
} TrainStream;

typedef struct TrainConfig {
    const char *model_dir, *shards_dir, *run_dir;  // paths (train_config_load points them into path_store)
    // Instead of model_dir: the random-weight model of this name
    // (model/synthetic.h), built in memory from synthetic_seed — on the GPU by
    // fwd_cuda_synthetic (bench's model), on the CPU with host weights. Online only.
    const char *synthetic;
    uint64_t synthetic_seed;
    char synthetic_store[64];  // the name read from a run's config.json
    // Online mode (shards_dir NULL): the token stream `spindle teacher` reads
    // (text files/folders tokenized and concatenated, or an ids file), cut into
    // the same non-overlapping windows of ctx tokens; the step with data
    // cursor c (sequences consumed so far) trains on window c mod their count.
    TrainStream online;
    int ctx;  // online only (shard mode: the shards' ctx)
    // Held-out recall from a stream instead of heldout_dir: its window 0 runs
    // through the backbone once, tapped like a training window.
    TrainStream heldout_stream;
    const char *heldout_dir;  // shards for the periodic recall check (NULL: none)
    IndexerConfig icfg;
    int layers[TRAIN_MAX_LAYERS];  // model layers to train (each stored in the shards)
    int n_layers;
    long steps, warmup;
    long schedule_steps;  // horizon of the cosine: --steps of the fresh run, kept when a resume extends steps
    double lr, min_lr_frac, weight_decay, beta1, beta2, eps, clip;
    uint64_t seed;
    double query_frac;  // fraction of the positions ≥ min_pos sampled per step (block objectives: of the blocks)
    // Online, per-query objective: the fraction of windows replaced by a kv
    // retrieval task (data/retrieval.h) built over that window's own text
    // ("retrieval_mix" in the run's config; 0: none). Which windows, the needle
    // depth and the task's seed come from (seed, window) alone, so a resumed run
    // sees the same windows. A mixed window's question and answer positions are
    // all in the step's query set besides the sampled ones: the positions where
    // the teacher looks up one needle among its look-alikes.
    double retrieval_mix;
    IndexerObjective objective;  // what the loss matches ("objective" in the run's config)
    int min_pos;
    int eval_every, recall_k, eval_queries;  // held-out recall@k every N steps, on this many queries
    int ckpt_every, keep_ckpts;
    // The step on GPU 0 ("device" in the run's config): fp32 loss, gradients and
    // AdamW; online, inside the pass of the backbone uploaded once in bf16
    // (train_gpu.h); from shards, q/k rebuilt from x by an fp32 upload.
    int use_cuda;
    // With use_cuda: the precision of the backbone's upload ("backbone_precision"
    // in the run's config; the values of model/forward_cuda.h's FwdPrecision).
    // Online its pass gives the teacher; from shards it rebuilds q/k from x.
    // -1: the mode's default (train_backbone_prec).
    int backbone_prec;
    int bf16_teacher;   // with use_cuda: the teacher's P on bf16 tensor cores ("teacher_precision")
    long stop_after;    // testing aid: exit (as if killed) after this many steps of this process (0: off)
    // Sequences per optimizer step ("batch" in the run's config; ≥ 1): the
    // step with data cursor c trains on sequences c .. c + batch − 1, each with
    // its own sampled queries (drawn in that order), and AdamW sees the mean of
    // their gradients — so --lr and --clip mean what they mean for one
    // sequence. Data parallel (dist, train/dist.h; NULL: one process): batch
    // is the global batch, a multiple of the N ranks; rank r trains on the
    // sequences c + r, c + r + N, ... (its batch / N of them), takes the mean of
    // its gradients, and the ranks average those over NCCL before the clip, so
    // N ranks compute the one-rank step up to rounding. Rank 0 alone writes the
    // run folder. Multi-rank runs are GPU only.
    int batch;
    const struct Dist *dist;
    char path_store[3][4096];  // model, shards, held-out paths read from a run's config.json
} TrainConfig;

// Default hyperparameters (the caller fills paths and layers).
TrainConfig train_config_default(void);

// Reads RUN/config.json (run_dir) into tc: paths, layers, every
// hyper-parameter, the indexer configuration, device and teacher precision.
// Returns 0, 1 when the file does not exist, -1 (st naming the file) when it
// is not a complete spindle run config of this version.
int train_config_load(TrainConfig *tc, const char *run_dir, Status *st);

// Removes the *.tmp files of a killed run from RUN and RUN/checkpoints,
// naming each on stderr ("spindle CMD: removed stale FILE"). Returns how many.
int train_remove_stale_tmp(const char *run_dir, const char *cmd);

// Trains to tc->steps. Everything is checked (model, shards or token stream, layers, sizes)
// before the run folder is created or touched, so a refused run leaves
// nothing behind. Fresh (resume = 0): refuses a non-empty run folder and
// writes config.json. resume = 1: the run's config.json must agree with tc
// (tc normally comes from train_config_load) except for steps, which may grow
// (the new total is written back and noted in log.jsonl); continues from the
// newest valid checkpoint. Prints progress lines and, at the end, each
// layer's final KL and held-out recall and the checkpoint path.
int train_run(const TrainConfig *tc, int resume, Status *st);
