// cli_util.h: what every subcommand does with its flags and errors.
//
// Exit codes: 0 success; 2 usage error (unknown, missing, malformed or
// out-of-range flag values, conflicting flags); 1 bad input file or runtime
// failure. The value parsers below print "spindle CMD: --flag ..." and return
// -1; the caller returns 2.
#pragma once
#include <stdint.h>

#include "args.h"
#include "status.h"

#define N_FLAGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

// Prints "spindle CMD: <message>" and returns the exit code 1.
int cli_fail(const char *cmd, const Status *st);
// Parses argv[2..] into flags and checks the NULL-terminated list of required
// flags (marked in --help). Returns 0, or the exit code 2 after a message.
int cli_parse(int argc, char **argv, Flag *flags, int n, const char *cmd, const char *const *required);
// cli_parse with a note printed at the end of --help (NULL: none).
int cli_parse_ex(int argc, char **argv, Flag *flags, int n, const char *cmd, const char *const *required,
                 const char *note);
// A positive integer flag value (≤ 2^30), decimal, nothing after it. Returns -1 after a message.
int cli_positive(const char *cmd, const char *flag, const char *value, int *out);
// A decimal integer flag value in [lo, hi], nothing after it. Returns -1 after a message.
int cli_int(const char *cmd, const char *flag, const char *value, long long lo, long long hi, long long *out);
// "32,64,128": integers ≥ min_value (0 or 1), at most 64. Returns -1 after a message.
int cli_list(const char *cmd, const char *flag, const char *value, int min_value, int *out, int *n);
// "a,c": names out of known[0..n_known); want[i] = 1 for each named, 0 for the
// rest. Returns -1 after a message naming the first unknown one.
int cli_names(const char *cmd, const char *flag, const char *value, const char *const *known, int n_known,
              int *want);
// The largest --threads accepted: 4 × the processors OpenMP sees, at least 16.
int cli_max_threads(void);
// --threads N (value may be NULL: nothing to do), 1 ≤ N ≤ cli_max_threads().
// Returns 0, or 2 after a message.
int cli_threads(const char *cmd, const char *value);
// A number flag value in [lo, hi]. Returns -1 after a message.
int cli_double(const char *cmd, const char *flag, const char *value, double lo, double hi, double *out);
// The version baked in at build time (`git describe`; "unknown" outside a git checkout).
const char *spindle_version(void);
// --indexer-scores VALUE (fp32 | tf32 | bf16) into *out, a FwdIndexerScores
// (model/forward.h); value NULL: 0, the precision's default. Returns -1 after a
// message: the caller exits 2.
int cli_indexer_scores(const char *cmd, const char *value, int *out);
// The name of a FwdIndexerScores value as the flag spells it ("default" for 0).
const char *cli_indexer_scores_name(int v);
