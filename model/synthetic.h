// synthetic.h: random-weight models by name, built in memory (no checkpoint
// on disk): the architectures of released checkpoints (their config.json
// values) and one tiny shape for tests. `spindle bench --synthetic` and
// `spindle train --synthetic` use them.
//
// The weights: on the GPU, fwd_cuda_synthetic fills them on the device from a
// seed (model/forward_cuda.h). On the CPU, synthetic_model with host weights
// fills every tensor the dense forward reads (model/forward.h) the same way in
// distribution — matrices uniform with sd 0.02, norm gains 1, no biases — from
// splitmix64 (base/rng.h) seeded per tensor; the values are not the GPU's.
#pragma once
#include <stdint.h>

#include "model.h"
#include "status.h"

// The names synthetic_config knows, for messages.
#define SYNTHETIC_ALL_NAMES "qwen3-8b, qwen3-1.7b, qwen2.5-1.5b, smollm2-135m, qwen3.5-9b, qwen3.5-0.8b, tiny"

// The architecture of model `name` into c (release with config_free). Returns
// 0, or -1 (c untouched but zeroed) for an unknown name.
int synthetic_config(const char *name, ModelConfig *c);

// m = model `name`: its configuration and, with host_weights, every tensor of
// the dense CPU forward filled from seed (freed by model_free). Host weights
// exist for the dense families only (no Gated DeltaNet or MoE layer) and up to
// SYNTHETIC_MAX_HOST_PARAMS parameters; -1 with st saying why otherwise, and
// for an unknown name. Without host_weights m holds the configuration alone
// (what fwd_cuda_synthetic reads).
enum { SYNTHETIC_MAX_HOST_PARAMS = 1 << 30 };
int synthetic_model(Model *m, const char *name, uint64_t seed, int host_weights, Status *st);

// The identity a run records for model `name` and seed (64 chars at most + NUL):
// "synthetic:NAME:SEED".
void synthetic_fingerprint(char out[65], const char *name, uint64_t seed);
