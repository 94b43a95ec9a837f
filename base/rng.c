// rng.c: see rng.h.
#include "rng.h"

#include <math.h>

uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rng_uniform(uint64_t *state) { return (double)(rng_next(state) >> 11) * 0x1.0p-53; }

double rng_uniform_open(uint64_t *state) { return ((rng_next(state) >> 11) + 1) * 0x1.0p-53; }

double rng_normal(uint64_t *state) {
    const double u1 = rng_uniform_open(state), u2 = rng_uniform_open(state);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

uint64_t rng_below(uint64_t *state, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rng_next(state);
    while (x >= limit);
    return x % n;
}
