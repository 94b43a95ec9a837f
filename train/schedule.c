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
