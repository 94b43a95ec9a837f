// env.h: integer knobs from the environment (debugging and tuning switches; README "Environment variables").
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// The value of the environment variable name as a decimal integer in [lo, hi], or def when it is unset or
// empty; anything else is said on stderr ("spindle: NAME=VALUE is not an integer in [lo, hi]; using def")
// and def is returned.
long env_long(const char *name, long def, long lo, long hi);

#ifdef __cplusplus
}
#endif
