// train_gpu.h: the indexer training step on the GPU (only with
// SPINDLE_HAVE_CUDA; a CPU build sees nothing here). The trained layers'
// parameters, AdamW moments, one gradient buffer and the step's sampled query
// positions live on the device for the whole run; a RunState holds copies only
// when a checkpoint is written (gpu_indexers_download).
//
// One layer's step (gpu_layer_step) takes device arrays: the layer's normed
// attention input x, the teacher's q, k and lse. It is the fused KL loss and
// gradients (indexer_kl_loss_cuda), the global-norm clip (grad_clip_cuda) and
// AdamW (adamw_step_cuda): the CPU step of train/trainer.c, operation for
// operation.
//
// Online training (gpu_online_train) runs the frozen backbone's forward once
// per sequence (model/forward_cuda.h, the bf16 upload) with a TAP_DEVICE tap:
// at each trained full-attention layer the tap gets that pass's own device xn,
// q, k and lse [Hq, T] in stream order and runs the layer's step right there,
// before the next layer overwrites them; the pass ends after the deepest
// trained layer. Nothing crosses the bus but the scalars the step returns (the
// loss, the gradient norm) and the query check of the loss; no activation is
// kept past its layer.
//
// Several sequences per step and rank (--batch): each sequence's pass only adds
// every trained layer's gradients into that layer's sum on the device
// (gpu_online_accumulate, gpu_layer_accumulate); after the last pass
// gpu_layer_apply takes the mean, all-reduces it over the ranks and runs the
// clip and AdamW, layer by layer.
#pragma once
#ifdef SPINDLE_HAVE_CUDA
#include <stdint.h>

#include "adamw.h"
#include "config.h"
#include "dist.h"
#include "forward_cuda.h"
#include "indexer.h"
#include "run_state.h"

typedef struct {
    IndexerConfig cfg;
    int n_layers;
    int64_t np;                // parameters per layer
    float **params, **m, **v;  // [n_layers] device arrays of np floats
    float *grads;              // device [np]
    int32_t *queries;          // device [max_T]: the positions of the current step
    unsigned char *decay;      // device [np]: 1 where weight decay applies
    const Dist *dist;          // data parallel: gradients averaged over the ranks before the clip (NULL: one process)
    IndexerObjective obj;      // the run's objective (per query or block-aware)
    double (*parts)[2];        // [n_layers] the last step's kl_query, kl_block per layer
    // Several sequences per step and rank (gpu_indexers_accumulators): per
    // layer the gradient sum over them, device [np] each; NULL: one sequence.
    float **acc;
    int32_t *row0;             // device [1] = {0}: the row index of the mean's scaling (gpu_layer_apply)
} GpuIndexers;

// Uploads rs->params/m/v (rs->n_layers layers of rs->n_params) and decay
// [n_params] (NULL: everything decays); queries hold up to max_T positions;
// obj the objective of every step (NULL: per query). Device faults abort.
// Free with gpu_indexers_close.
void gpu_indexers_open(GpuIndexers *g, const IndexerConfig *cfg, const IndexerObjective *obj, const RunState *rs,
                       const unsigned char *decay, int max_T);
// Copies the device's parameters and moments into rs (before a checkpoint).
void gpu_indexers_download(const GpuIndexers *g, RunState *rs);
// Allocates g->acc (zeroed): for runs with several sequences per step and rank.
void gpu_indexers_accumulators(GpuIndexers *g);
// queries[0..n) (host; ascending, distinct, each below the pass's T) onto the device.
void gpu_indexers_set_queries(GpuIndexers *g, const int *queries, int n);
void gpu_indexers_close(GpuIndexers *g);

// The teacher's shape: the model's attention heads and score scale; bf16_teacher
// as for indexer_kl_loss_cuda.
typedef struct {
    int Hq, Hkv, dh;
    float scale;
    int bf16_teacher;
} GpuTeacher;

// Seconds spent per part, added to when given to a step (the device is
// synchronised around each part then; NULL: no synchronisation of our own).
typedef struct {
    double loss;  // the fused KL loss and gradients
    double comm;  // data parallel: the gradients' all-reduce
    double opt;   // clip + AdamW
} GpuStepTimes;

// Layer i's step on the n_queries positions set last (gpu_indexers_set_queries):
// grads = ∂L/∂params of the objective g->obj (its parts into g->parts[i]) (with g->dist: averaged over the ranks, each on its own
// sequence), clipped to clip (≤ 0: no clipping), AdamW at step t (from 1). Returns the KL; *grad_norm gets the norm before clipping. A
// non-finite KL leaves the parameters and moments untouched (the caller fails).
double gpu_layer_step(GpuIndexers *g, int i, const float *x, const float *tq, const float *tk, const float *lse,
                      int T, const GpuTeacher *te, int n_queries, const AdamW *opt, long t, double clip,
                      double *grad_norm, GpuStepTimes *tm);

// Several sequences per step: layer i's loss of one sequence on the n_queries
// positions set last, its gradients added (+=) into g->acc[i] (parts into
// g->parts[i]). Returns the KL. No all-reduce, no step: gpu_layer_apply.
double gpu_layer_accumulate(GpuIndexers *g, int i, const float *x, const float *tq, const float *tk, const float *lse,
                            int T, const GpuTeacher *te, int n_queries, GpuStepTimes *tm);
// After n_seq gpu_layer_accumulate calls for layer i: grads = acc[i] × (1/n_seq)
// (one fp32 multiply each: the mean), with g->dist averaged over the ranks
// (always, so no rank is left waiting in the collective), then — when finite —
// clipped to clip and AdamW at step t; acc[i] is zeroed for the next step.
// Returns the norm before clipping (NaN when not finite).
double gpu_layer_apply(GpuIndexers *g, int i, int n_seq, int finite, const AdamW *opt, long t, double clip,
                       GpuStepTimes *tm);

// Online training on one upload of the backbone (f, any precision; training
// uses FWD_BF16): the tap, which layers it trains, and what the last pass gave.
typedef enum { GPU_PASS_TRAIN = 0, GPU_PASS_RECALL = 1, GPU_PASS_TEACHER = 2, GPU_PASS_ACCUMULATE = 3 } GpuPassMode;
typedef struct {
    GpuIndexers *g;
    FwdCuda *f;
    const ModelConfig *c;
    GpuTeacher te;
    int *slot;        // [c->n_layers] trained index of a model layer, -1: not trained
    int deepest;      // the deepest trained layer (the pass stops after it)
    double *kl, *gn;  // [n_layers] the last training pass's loss and gradient norm per trained layer
    double *rec;      // [n_layers] the last recall pass's recall@k per trained layer
    GpuStepTimes *times;  // NULL, or the parts' seconds added to by each pass
    // set per pass
    GpuPassMode mode;
    int n_queries, recall_k;
    const AdamW *opt;
    long t;
    double clip;
} GpuOnline;

// layers[0..n) ascending full-attention layers of c (n = g->n_layers).
void gpu_online_init(GpuOnline *o, GpuIndexers *g, FwdCuda *f, const ModelConfig *c, const int *layers, int n,
                     const GpuTeacher *te);
void gpu_online_free(GpuOnline *o);
// One training pass over ids[0..T) (host): every trained layer's step at
// optimizer step t on the n_queries positions set last; o->kl, o->gn filled.
void gpu_online_train(GpuOnline *o, const int32_t *ids, int T, int n_queries, const AdamW *opt, long t, double clip);
// A pass of a step with several sequences per rank: every trained layer's loss
// on the n_queries positions set last, its gradients added into g->acc
// (gpu_layer_accumulate); o->kl filled. The step itself: gpu_layer_apply.
void gpu_online_accumulate(GpuOnline *o, const int32_t *ids, int T, int n_queries);
// One pass that only measures: o->rec[i] = recall@k of layer i's indexer on
// the n_queries positions set last (indexer_mass_recall_cuda).
void gpu_online_recall(GpuOnline *o, const int32_t *ids, int T, int n_queries, int k);
// The same pass with a tap that takes the teacher's arrays and does nothing
// with them (timing the teacher's statistics against a plain forward).
void gpu_online_teacher(GpuOnline *o, const int32_t *ids, int T);
// The plain forward the training pass is built on: no tap (no lse, no fp32
// xn kept), stopping after the same layer.
void gpu_online_forward(GpuOnline *o, const int32_t *ids, int T);
#endif
