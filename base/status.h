// status.h: the error channel for everything a user can get wrong.
//
// Loaders and parsers return 0 on success and -1 on failure; on failure they
// fill a Status with a message that names the file and the problem. Device
// faults and broken invariants do not come through here: they abort with the
// statement, file and line (see SPINDLE_CHECK below).
#pragma once
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    char msg[1024];
} Status;

// Formats a message into st (may be NULL) and returns -1, so that
// `return status_fail(st, "...")` is one line at every error site.
static inline int status_fail(Status *st, const char *fmt, ...) {
    if (st) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->msg, sizeof st->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// Broken invariant (our bug, not the user's): abort with the statement and place.
#define SPINDLE_CHECK(cond)                                                       \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "spindle: internal error: %s at %s:%d (%s)\n", #cond, \
                    __FILE__, __LINE__, __func__);                                \
            abort();                                                              \
        }                                                                         \
    } while (0)

// malloc that aborts on exhaustion, with the size and the place.
#define xmalloc(n) spindle_xmalloc((n), __FILE__, __LINE__)
#define xcalloc(n, s) spindle_xcalloc((n), (s), __FILE__, __LINE__)
static inline void *spindle_xmalloc(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "spindle: out of memory (%zu bytes) at %s:%d\n", n, file, line);
        abort();
    }
    return p;
}
static inline void *spindle_xcalloc(size_t n, size_t s, const char *file, int line) {
    void *p = calloc(n ? n : 1, s ? s : 1);
    if (!p) {
        fprintf(stderr, "spindle: out of memory (%zu x %zu bytes) at %s:%d\n", n, s, file, line);
        abort();
    }
    return p;
}
