// rng.h: the one pseudo-random generator, splitmix64 (Steele, Lea, Flood 2014).
//
// Its whole state is one uint64_t, so a run checkpoint can store it and resume
// bit-exactly, and it gives the same stream on every machine (no libc rand).
// Every seeded stream of spindle comes from here: indexer initialisation, the
// trainer's query sampling, the retrieval tasks' needles and haystacks.
#pragma once
#include <stdint.h>

// One step: the state advances by the golden-ratio increment and is mixed.
uint64_t rng_next(uint64_t *state);

// Uniform double in [0, 1): the top 53 bits of one step.
double rng_uniform(uint64_t *state);

// Uniform double in (0, 1]: the top 53 bits shifted off zero, so log() of it is
// finite.
double rng_uniform_open(uint64_t *state);

// N(0, 1) by Box-Muller from two rng_uniform_open draws, u1 first:
// sqrt(−2·log u1)·cos(2π·u2). Only the cosine branch is kept, so every draw
// consumes exactly two steps.
double rng_normal(uint64_t *state);

// Uniform in [0, n), n > 0, without modulo bias: steps that land in the top
// partial block of 2^64 mod n values are rejected and drawn again.
uint64_t rng_below(uint64_t *state, uint64_t n);
