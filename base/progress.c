// progress.c: see progress.h.
#include "progress.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

double progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_start(Progress *p, const char *cmd, const char *what, int64_t total) {
    p->cmd = cmd;
    p->what = what;
    p->total = total;
    p->t0 = progress_now();
    p->last = -1e30;
    p->interval = isatty(2) ? 1.0 : 10.0;
    p->base = 0;
}

double progress_elapsed(const Progress *p) { return progress_now() - p->t0; }

void progress_update(Progress *p, int64_t done, const char *extra_fmt, ...) {
    const double now = progress_now();
    const int edge = done <= p->base + 1 || (p->total > 0 && done >= p->total);
    if (!edge && now - p->last < p->interval) return;
    p->last = now;
    const double el = now - p->t0;
    char extra[512] = "";
    if (extra_fmt) {
        va_list ap;
        va_start(ap, extra_fmt);
        extra[0] = ';', extra[1] = ' ';
        vsnprintf(extra + 2, sizeof extra - 2, extra_fmt, ap);
        va_end(ap);
    }
    if (p->total > 0) {
        const double eta = done > p->base ? el * (double)(p->total - done) / (double)(done - p->base) : 0.0;
        fprintf(stderr, "spindle %s: progress %s %lld/%lld (%.0f%%) elapsed %.1f s eta %.1f s%s\n", p->cmd, p->what,
                (long long)done, (long long)p->total, 100.0 * (double)done / (double)p->total, el, eta, extra);
    } else {
        fprintf(stderr, "spindle %s: progress %s %lld elapsed %.1f s%s\n", p->cmd, p->what, (long long)done, el,
                extra);
    }
    fflush(stderr);
}
