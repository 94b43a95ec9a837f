// common.c: the twin-test harness (twins.h).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_cuda.h"
#include "twins.h"

// ---- random inputs ------------------------------------------------------------------

static uint64_t rng_state;

void twins_seed(uint64_t seed) { rng_state = seed; }

uint64_t twins_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double uniform01(void) { return ((twins_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

float normal(void) {
    return (float)(sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()));
}

float *randn(int64_t n, float sd) {
    float *x = malloc(sizeof(float) * (n > 0 ? n : 1));
    if (!x) abort();
    for (int64_t i = 0; i < n; i++) x[i] = sd * normal();
    return x;
}

float *host_alloc(int64_t n) {
    float *x = malloc(sizeof(float) * (n > 0 ? n : 1));
    if (!x) abort();
    return x;
}

// Device copy of a host array.
float *dev_from(const float *h, int64_t n) {
    float *d = cuda_malloc(sizeof(float) * n);
    cuda_to_device(d, h, sizeof(float) * n);
    return d;
}

// A poisoned (all-NaN) device array of n floats.
float *dev_poisoned(int64_t n) {
    float *d = cuda_malloc(sizeof(float) * n);
    cuda_memset(d, 0xFF, sizeof(float) * n);
    return d;
}

float *host_from_dev(const float *d, int64_t n) {
    float *h = host_alloc(n);
    cuda_sync();
    cuda_to_host(h, d, sizeof(float) * n);
    return h;
}

// bf16 round to nearest even, as __float2bfloat16_rn (inputs here are finite).
float f16_round(float x) { return (float)(_Float16)x; }

float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

int32_t *dev_from_i32(const int32_t *h, int64_t n) {
    int32_t *d = cuda_malloc(sizeof(int32_t) * (n > 0 ? n : 1));
    if (n > 0) cuda_to_device(d, h, sizeof(int32_t) * n);
    return d;
}

int32_t *host_from_dev_i32(const int32_t *d, int64_t n) {
    int32_t *h = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
    if (!h) abort();
    cuda_sync();
    if (n > 0) cuda_to_host(h, d, sizeof(int32_t) * n);
    return h;
}

// ---- comparison ------------------------------------------------------------------

typedef struct {
    const char *op;
    double worst_max, worst_nmse;
    int cases, fails;
} OpStats;

enum { MAX_OPS = 160 };
static OpStats stats[MAX_OPS];
static int n_ops = 0, failures = 0;

static OpStats *op_stats(const char *op) {
    for (int i = 0; i < n_ops; i++)
        if (strcmp(stats[i].op, op) == 0) return &stats[i];
    if (n_ops == MAX_OPS) {
        fprintf(stderr, "test_cuda_twins: more than %d op names\n", MAX_OPS);
        abort();
    }
    stats[n_ops] = (OpStats){op, 0, 0, 0, 0};
    return &stats[n_ops++];
}

double sum_sq(const float *v, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)v[i] * v[i];
    return s;
}

int compare(const char *op, const char *shape, const float *gpu, const float *ref, int64_t n, double tol_nmse,
            double tol_rel_max) {
    return compare_floor(op, shape, gpu, ref, n, tol_nmse, tol_rel_max, 0.0);
}

int compare_floor(const char *op, const char *shape, const float *gpu, const float *ref, int64_t n,
                  double tol_nmse, double tol_rel_max, double ref_sq_floor) {
    double max_err = 0.0, max_ref = 0.0, se = 0.0, sr = 0.0;
    int64_t nonfinite = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(gpu[i]) && !(isinf(gpu[i]) && gpu[i] == ref[i])) {
            nonfinite++;
            continue;
        }
        if (isinf(gpu[i])) continue;  // the same infinity on both sides
        double e = fabs((double)gpu[i] - ref[i]);
        if (e > max_err) max_err = e;
        if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
        se += e * e;
        sr += (double)ref[i] * ref[i];
    }
    const int floored = ref_sq_floor > sr * (1.0 + 1e-9);  // not for a floor equal to Σ ref² but for rounding
    if (floored) sr = ref_sq_floor;
    double nmse = sr > 0 ? se / sr : se;
    double tol_max = tol_rel_max * (max_ref > 1.0 ? max_ref : 1.0);
    int ok = nonfinite == 0 && nmse <= tol_nmse && max_err <= tol_max;
    OpStats *s = op_stats(op);
    s->cases++;
    if (max_err > s->worst_max) s->worst_max = max_err;
    if (nmse > s->worst_nmse) s->worst_nmse = nmse;
    if (!ok) {
        s->fails++;
        failures++;
    }
    printf("%-4s %-28s %-40s max|err| %.3e (tol %.1e)  nmse %.3e (tol %.0e)%s%s\n", ok ? "ok" : "FAIL", s->op,
           shape, max_err, tol_max, nmse, tol_nmse, floored ? " vs natural size" : "",
           nonfinite ? "  NON-FINITE OUTPUT" : "");
    if (nonfinite) printf("     %lld non-finite values (unwritten or NaN)\n", (long long)nonfinite);
    return ok;
}

void record(const char *op, const char *shape, int ok, const char *detail) {
    OpStats *s = op_stats(op);
    s->cases++;
    if (!ok) {
        s->fails++;
        failures++;
    }
    printf("%-4s %-28s %-40s %s\n", ok ? "ok" : "FAIL", op, shape, detail);
}

int twins_summary(void) {
    printf("\n%-28s %6s %6s %12s %12s\n", "op", "cases", "fails", "worst max", "worst nmse");
    for (int i = 0; i < n_ops; i++)
        printf("%-28s %6d %6d %12.3e %12.3e\n", stats[i].op, stats[i].cases, stats[i].fails, stats[i].worst_max,
               stats[i].worst_nmse);
    return failures;
}
