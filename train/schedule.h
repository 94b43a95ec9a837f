// schedule.h: learning-rate schedule and the trainer's random numbers.
#pragma once
#include <stdint.h>

// Linear warm-up over `warmup` steps to lr_max, then cosine decay to
// lr_max·min_frac at step `total` (steps count from 1).
double lr_at(long step, long warmup, long total, double lr_max, double min_frac);

// splitmix64: a tiny, fully specified PRNG whose whole state is one uint64_t,
// so run checkpoints can store it and resume bit-exactly.
uint64_t rng_next(uint64_t *state);
// Uniform double in [0, 1).
double rng_uniform(uint64_t *state);
