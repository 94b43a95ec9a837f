// expect.h: the check every test binary uses. A failed EXPECT prints the file,
// line and message and counts into `failures`; main returns non-zero if any.
#pragma once
#include <stdio.h>

static int failures = 0;
#define EXPECT(cond, ...)                                        \
    do {                                                         \
        if (!(cond)) {                                           \
            failures++;                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fprintf(stderr, "\n");                               \
        }                                                        \
    } while (0)
