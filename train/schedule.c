// schedule.c: see schedule.h.
#include "schedule.h"

#include <math.h>

double lr_at(long step, long warmup, long total, double lr_max, double min_frac) {
    if (warmup > 0 && step <= warmup) return lr_max * (double)step / (double)warmup;
    if (total <= warmup) return lr_max;
    double progress = (double)(step - warmup) / (double)(total - warmup);
    if (progress > 1) progress = 1;
    const double cosine = 0.5 * (1.0 + cos(M_PI * progress));
    return lr_max * (min_frac + (1.0 - min_frac) * cosine);
}

uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rng_uniform(uint64_t *state) { return (double)(rng_next(state) >> 11) * 0x1.0p-53; }
