// cli_util.h: what every subcommand does with its flags and errors.
#pragma once
#include "args.h"
#include "status.h"

#define N_FLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

// Prints "spindle CMD: <message>" and returns the exit code 1.
int cli_fail(const char *cmd, const Status *st);
// Parses argv[2..] into flags and checks the NULL-terminated list of required
// flags. Returns 0, or the exit code 2 after a usage message.
int cli_parse(int argc, char **argv, Flag *flags, int n, const char *cmd, const char *const *required);
// A positive integer flag value (≤ 2^30). Returns -1 after a message.
int cli_positive(const char *cmd, const char *flag, const char *value, int *out);
// "32,64,128": integers ≥ min_value (0 or 1), at most 64. Returns -1 after a message.
int cli_list(const char *cmd, const char *flag, const char *value, int min_value, int *out, int *n);
// "a,c": names out of known[0..n_known); want[i] = 1 for each named, 0 for the
// rest. Returns -1 after a message naming the first unknown one.
int cli_names(const char *cmd, const char *flag, const char *value, const char *const *known, int n_known,
              int *want);
// --threads N (value may be NULL: nothing to do). Returns 0, or 2 after a message.
int cli_threads(const char *cmd, const char *value);
// A number flag value in [lo, hi]. Returns -1 after a message.
int cli_double(const char *cmd, const char *flag, const char *value, double lo, double hi, double *out);
