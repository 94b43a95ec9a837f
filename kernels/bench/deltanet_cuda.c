// deltanet_cuda.c: times gated_delta_rule_chunked_cuda (kernels/cuda/deltanet.cu)
// at the linear-attention shapes of Qwen3.5 (bf16 q, k, v; fp32 g, beta, output
// and final state; chunk 64; L2-normalised q and k, as the model calls it).
// First the kernel is validated against the CPU twins on a small case of each
// shape's heads (a failure exits 1 before anything is timed), then each
// (shape, T) is timed with CUDA events: warm-up calls, then the median of reps,
// once with each of the state pass's column tiles (BV = 32 and 16; the op
// itself picks 16 when 32 would give fewer blocks than half the SMs).
//
//   bench_deltanet_cuda [--T 32768,131072] [--shapes qwen3.5-9b,qwen3.5-0.8b]
//                       [--reps 5] [--json OUT.json]
//
// Shapes (HF Qwen3_5TextConfig's linear_* fields): qwen3.5-9b: 16 key heads,
// 32 value heads, dk = dv = 128 (the config's defaults); qwen3.5-0.8b: 16 and 16,
// 128. Effective GB/s counts the bytes the op must move at least once: q, k, v
// in, g, beta in, o out, the final state out (the workspace it writes and reads
// back is not counted). Exit 0, 1 on a failed validation or a missing GPU, 2 on
// a usage error.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "ops.h"
#include "ops_cuda.h"

typedef struct {
    const char *name;
    int Hk, Hv, dk, dv;
} Shape;

static const Shape shapes[] = {
    {"qwen3.5-9b", 16, 32, 128, 128},
    {"qwen3.5-0.8b", 16, 16, 128, 128},
};
enum { N_SHAPES = 2 };

typedef struct {
    float *o, *S, *g, *beta;
    void *q, *k, *v;
    int T, Hk, Hv, dk, dv;
} Run;

static void run_once(void *p) {
    Run *r = p;
    gated_delta_rule_chunked_cuda(r->o, r->S, r->q, r->k, r->v, r->g, r->beta, NULL, r->T, r->Hk, r->Hv, r->dk,
                                  r->dv, 0.0f, 1, 64, DT_BF16);
}

static float bf16r(float x) {  // round to nearest even, as the device conversion
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float urand(float lo, float hi) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (float)((rng >> 40) / 16777216.0);
}

// max |a − b| / max(1, max |b|), NaN → infinity.
static double err_of(const float *a, const float *b, int64_t n) {
    double d = 0.0, m = 1.0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = isnan(e) ? INFINITY : e;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return d / m;
}

// The kernel against the sequential CPU recurrence on bf16-rounded inputs, at
// the shape's heads and dims, T = 200 (three full chunks and a partial one),
// with an initial state. Returns the error (the twin test's tolerance is 2e-5).
static double validate(const Shape *s) {
    const int T = 200, Hk = s->Hk, Hv = s->Hv, dk = s->dk, dv = s->dv;
    const int64_t nq = (int64_t)T * Hk * dk, nv = (int64_t)T * Hv * dv, ng = (int64_t)T * Hv;
    const int64_t ns = (int64_t)Hv * dk * dv, no = nv;
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nq), *v = malloc(sizeof(float) * nv);
    float *g = malloc(sizeof(float) * ng), *beta = malloc(sizeof(float) * ng), *S0 = malloc(sizeof(float) * ns);
    float *o = malloc(sizeof(float) * no), *S = malloc(sizeof(float) * ns);
    float *o_ref = malloc(sizeof(float) * no), *S_ref = malloc(sizeof(float) * ns);
    if (!q || !k || !v || !g || !beta || !S0 || !o || !S || !o_ref || !S_ref) abort();
    for (int64_t i = 0; i < nq; i++) q[i] = bf16r(urand(-1, 1)), k[i] = bf16r(urand(-1, 1));
    for (int64_t i = 0; i < nv; i++) v[i] = bf16r(urand(-1, 1));
    for (int64_t i = 0; i < ng; i++) g[i] = urand(-1, 0), beta[i] = urand(0.05f, 0.95f);
    for (int64_t i = 0; i < ns; i++) S0[i] = urand(-0.5f, 0.5f);
    gated_delta_rule_cpu(o_ref, S_ref, q, k, v, g, beta, S0, T, Hk, Hv, dk, dv, 0.0f, 1);

    float *f = cuda_malloc(sizeof(float) * (nq > nv ? nq : nv));
    void *d_q = cuda_malloc(2 * nq), *d_k = cuda_malloc(2 * nq), *d_v = cuda_malloc(2 * nv);
    cuda_to_device(f, q, sizeof(float) * nq), cuda_f32_to_bf16(d_q, f, nq);
    cuda_to_device(f, k, sizeof(float) * nq), cuda_f32_to_bf16(d_k, f, nq);
    cuda_to_device(f, v, sizeof(float) * nv), cuda_f32_to_bf16(d_v, f, nv);
    float *d_g = cuda_malloc(sizeof(float) * ng), *d_b = cuda_malloc(sizeof(float) * ng);
    float *d_S = cuda_malloc(sizeof(float) * ns), *d_o = cuda_malloc(sizeof(float) * no);
    cuda_to_device(d_g, g, sizeof(float) * ng), cuda_to_device(d_b, beta, sizeof(float) * ng);
    cuda_to_device(d_S, S0, sizeof(float) * ns);
    cuda_memset(d_o, 0xFF, sizeof(float) * no);
    gated_delta_rule_chunked_cuda(d_o, d_S, d_q, d_k, d_v, d_g, d_b, d_S, T, Hk, Hv, dk, dv, 0.0f, 1, 64, DT_BF16);
    cuda_sync();
    cuda_to_host(o, d_o, sizeof(float) * no), cuda_to_host(S, d_S, sizeof(float) * ns);
    const double eo = err_of(o, o_ref, no), es = err_of(S, S_ref, ns);
    cuda_free(f), cuda_free(d_q), cuda_free(d_k), cuda_free(d_v), cuda_free(d_g), cuda_free(d_b);
    cuda_free(d_S), cuda_free(d_o);
    free(q), free(k), free(v), free(g), free(beta), free(S0), free(o), free(S), free(o_ref), free(S_ref);
    return eo > es ? eo : es;
}

int main(int argc, char **argv) {
    int Ts[64], nT = 2, reps = 5;
    Ts[0] = 32768, Ts[1] = 131072;
    int want[N_SHAPES] = {1, 1};
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(a, "--T") && val) {
            nT = 0;
            for (const char *p = val; *p;) {
                const long x = strtol(p, &end, 10);
                if (end == p || x < 1 || x > (1L << 24) || nT == 64 || (*end && *end != ',')) goto usage;
                Ts[nT++] = (int)x;
                p = *end ? end + 1 : end;
            }
            i++;
        } else if (!strcmp(a, "--reps") && val) {
            const long x = strtol(val, &end, 10);
            if (*end || x < 1 || x > 1000) goto usage;
            reps = (int)x, i++;
        } else if (!strcmp(a, "--shapes") && val) {
            want[0] = strstr(val, "qwen3.5-9b") != NULL, want[1] = strstr(val, "qwen3.5-0.8b") != NULL;
            if (!want[0] && !want[1]) goto usage;
            i++;
        } else if (!strcmp(a, "--json") && val) {
            json = val, i++;
        } else {
            goto usage;
        }
    }
    char why[256];
    if (cuda_available(why, sizeof why) == 0) {
        fprintf(stderr, "bench_deltanet_cuda: no usable GPU (%s)\n", why);
        return 1;
    }
    printf("bench_deltanet_cuda: %s; bf16 q/k/v, fp32 state, chunk 64, median of %d\n", why, reps);

    char *js = malloc(1 << 16);
    if (!js) abort();
    size_t jn = (size_t)snprintf(js, 1 << 16, "{\"device\": \"%s\", \"op\": \"gated_delta_rule_chunked_cuda\", "
                                              "\"inputs\": \"bf16\", \"chunk\": 64, \"reps\": %d, \"runs\": [",
                                 why, reps);
    int first = 1;
    const int tiles[2] = {32, 16};  // the state pass's column tile, both timed (the op picks one by block count)
    for (int si = 0; si < N_SHAPES; si++) {
        if (!want[si]) continue;
        const Shape *s = &shapes[si];
        double ve = 0.0;
        for (int ti = 0; ti < 2; ti++) {
            gated_delta_rule_cuda_tune(0, tiles[ti]);
            const double e = validate(s);
            gated_delta_rule_cuda_tune(0, 0);
            printf("%-13s BV %d: validation T 200 vs the CPU recurrence: max err %.2e\n", s->name, tiles[ti], e);
            if (!(e <= 2e-5)) {
                fprintf(stderr, "bench_deltanet_cuda: %s: validation failed (%.3e > 2e-5)\n", s->name, e);
                return 1;
            }
            if (e > ve) ve = e;
        }
        for (int ti = 0; ti < nT; ti++) {
            Run r = {0};
            r.T = Ts[ti], r.Hk = s->Hk, r.Hv = s->Hv, r.dk = s->dk, r.dv = s->dv;
            const int64_t nq = (int64_t)r.T * r.Hk * r.dk, nv = (int64_t)r.T * r.Hv * r.dv, ng = (int64_t)r.T * r.Hv;
            const int64_t ns = (int64_t)r.Hv * r.dk * r.dv;
            float *f = cuda_malloc(sizeof(float) * (nq > nv ? nq : nv));
            r.q = cuda_malloc(2 * nq), r.k = cuda_malloc(2 * nq), r.v = cuda_malloc(2 * nv);
            cuda_fill_uniform(f, nq, -1, 1, 1), cuda_f32_to_bf16(r.q, f, nq);
            cuda_fill_uniform(f, nq, -1, 1, 2), cuda_f32_to_bf16(r.k, f, nq);
            cuda_fill_uniform(f, nv, -1, 1, 3), cuda_f32_to_bf16(r.v, f, nv);
            cuda_free(f);
            r.g = cuda_malloc(sizeof(float) * ng), r.beta = cuda_malloc(sizeof(float) * ng);
            cuda_fill_uniform(r.g, ng, -1, 0, 4), cuda_fill_uniform(r.beta, ng, 0.05f, 0.95f, 5);
            r.o = cuda_malloc(sizeof(float) * nv), r.S = cuda_malloc(sizeof(float) * ns);
            cuda_sync();
            for (int vi = 0; vi < 2; vi++) {
                gated_delta_rule_cuda_tune(0, tiles[vi]);
                cuda_mem_peak_reset();
                const double ms = cuda_time_ms(run_once, &r, 2, reps, NULL);
                gated_delta_rule_cuda_tune(0, 0);
                const double peak_gb = (double)cuda_mem_peak() / 1e9;  // inputs, outputs and the workspace
                const double bytes = 2.0 * (2 * nq + nv) + 4.0 * (2 * ng + nv + ns);
                const double gbs = bytes / (ms * 1e-3) / 1e9;
                printf("%-13s T %7d  Hk %2d Hv %2d dk %3d dv %3d BV %2d: %9.3f ms  %8.1f GB/s effective  %7.2f Mtok/s  "
                       "peak %.2f GB\n",
                       s->name, r.T, r.Hk, r.Hv, r.dk, r.dv, tiles[vi], ms, gbs, r.T / (ms * 1e-3) / 1e6, peak_gb);
                jn += (size_t)snprintf(js + jn, (1 << 16) - jn,
                                       "%s{\"shape\": \"%s\", \"T\": %d, \"Hk\": %d, \"Hv\": %d, \"dk\": %d, \"dv\": %d, "
                                       "\"state_tile\": %d, \"ms\": %.4f, \"gb_s\": %.2f, \"bytes\": %.0f, \"peak_gb\": %.3f, "
                                       "\"validation_err\": %.3e}",
                                       first ? "" : ", ", s->name, r.T, r.Hk, r.Hv, r.dk, r.dv, tiles[vi], ms, gbs, bytes,
                                       peak_gb, ve);
                first = 0;
            }
            cuda_free(r.q), cuda_free(r.k), cuda_free(r.v), cuda_free(r.g), cuda_free(r.beta);
            cuda_free(r.o), cuda_free(r.S);
        }
    }
    jn += (size_t)snprintf(js + jn, (1 << 16) - jn, "]}\n");
    if (json) {
        Status st;
        if (atomic_write_file(json, js, jn, &st)) {
            fprintf(stderr, "bench_deltanet_cuda: %s\n", st.msg);
            return 1;
        }
        printf("bench_deltanet_cuda: wrote %s\n", json);
    }
    free(js);
    return 0;
usage:
    fprintf(stderr, "usage: bench_deltanet_cuda [--T 32768,131072] [--shapes qwen3.5-9b,qwen3.5-0.8b] [--reps N] "
                    "[--json OUT.json]\n");
    return 2;
}
