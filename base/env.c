// env.c: see env.h.
#include "env.h"

#include <stdio.h>
#include <stdlib.h>

long env_long(const char *name, long def, long lo, long hi) {
    const char *e = getenv(name);
    if (!e || !*e) return def;
    char *end;
    const long v = strtol(e, &end, 10);
    if (*end || v < lo || v > hi) {
        fprintf(stderr, "spindle: %s=%s is not an integer in [%ld, %ld]; using %ld\n", name, e, lo, hi, def);
        return def;
    }
    return v;
}
