// progress.h: progress lines for long work, on stderr, also into logs.
//
// One line per report, in one grep-friendly shape for every command:
//   spindle CMD: progress WHAT DONE/TOTAL (PCT%) elapsed 12.3 s eta 40.1 s[; extra]
// A report is printed when at least `interval` seconds have passed since the
// last one (1 s on a terminal, 10 s otherwise), and always for the first item
// and the last. Lines are whole lines (no carriage returns), so a log read
// later shows the same thing the terminal did.
#pragma once
#include <stdint.h>

typedef struct {
    const char *cmd;   // "train"
    const char *what;  // "step", "sequence", ...
    int64_t total;     // 0 when unknown
    double t0, last;   // wall-clock seconds
    double interval;   // seconds between reports
    int64_t base;      // items done before the clock started (a resumed run): the eta counts from there
} Progress;

// Starts the clock (base 0). what and cmd must outlive p.
void progress_start(Progress *p, const char *cmd, const char *what, int64_t total);
// Reports done items (1-based count) if the interval has passed or done is the
// first or the last item; extra (printf-style, may be NULL) follows a "; ".
void progress_update(Progress *p, int64_t done, const char *extra_fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Seconds since progress_start.
double progress_elapsed(const Progress *p);
// Wall-clock seconds (monotonic).
double progress_now(void);
