// schedule.h: the learning-rate schedule (the trainer's random numbers come from
// base/rng.h).
#pragma once

// Linear warm-up over `warmup` steps to lr_max, then cosine decay to
// lr_max·min_frac at step `total` (steps count from 1).
double lr_at(long step, long warmup, long total, double lr_max, double min_frac);
