// emu_harness.h: what the emulated kernels' host code and the checks need
// besides tests/emu/cuda_runtime.h: device memory as host memory (NaN to start
// with, so a read of something never written shows), the copies, random
// inputs, the error measure and the PASS/FAIL lines. Included once per
// emulation executable (tests/emu/emu_*.cpp), after the kernel file.
#pragma once
#include <algorithm>
#include <cstdio>
#include <vector>

// Device memory is host memory here, NaN to start with.
extern "C" void *cuda_malloc(size_t bytes) {
    void *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) abort();
    emu_poison((float *)p, bytes / 4);
    return p;
}
extern "C" void cuda_free(void *p) { free(p); }
// The rest of the harness of tests/twins (common.c) on host memory, so that the
// twin test's DeltaNet part (tests/twins/deltanet.c) runs here too (--twins).
extern "C" void cuda_to_device(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
extern "C" void cuda_to_host(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
extern "C" void cuda_memset(void *p, int value, size_t bytes) { memset(p, value, bytes); }
extern "C" void cuda_sync(void) {}
extern "C" void cuda_stream_use(int) {}  // one host thread runs every launch in order
extern "C" void cuda_stream_after(int, int) {}
extern "C" void cuda_f32_to_half(void *dst, const float *src, int64_t n, HalfType h) {
    for (int64_t i = 0; i < n; i++) {
        if (h == HALF_BF16) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
        else ((__half *)dst)[i] = __float2half_rn(src[i]);
    }
}
extern "C" void cuda_half_to_f32(float *dst, const void *src, int64_t n, HalfType h) {
    for (int64_t i = 0; i < n; i++)
        dst[i] = h == HALF_BF16 ? __bfloat162float(((const __nv_bfloat16 *)src)[i]) : __half2float(((const __half *)src)[i]);
}
static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float urand() {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / 16777216.0);
}
static std::vector<float> fill(int64_t n, float lo, float hi) {
    std::vector<float> x((size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * urand();
    return x;
}
static float bf16r(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Random supports: row b (of bsel queries) holds n ≤ topk distinct sorted keys below the row's end + 8
// (so some lie past a query: each query sees a prefix), every fifth row empty.
static void random_supports(std::vector<int> &sel, std::vector<int> &n_sel, int T, int topk, int bsel) {
    const int rows = (T + bsel - 1) / bsel;
    sel.assign((size_t)rows * topk, -1), n_sel.assign((size_t)rows, 0);
    for (int b = 0; b < rows; b++) {
        if (b % 5 == 4) continue;
        const int lim = std::min(T, (b + 1) * bsel + 8);
        std::vector<int> pool(lim);
        for (int j = 0; j < lim; j++) pool[j] = j;
        const int n = std::min(topk, 1 + (int)(urand() * topk));
        for (int i = 0; i < n && i < lim; i++) std::swap(pool[i], pool[i + (int)(urand() * (lim - i)) % (lim - i)]);
        const int m = std::min(n, lim);
        std::sort(pool.begin(), pool.begin() + m);
        for (int i = 0; i < m; i++) sel[(size_t)b * topk + i] = pool[i];
        n_sel[b] = m;
    }
}

static int failures;

// max |a − b| / max |b| (NaN counts as failure).
static double rel_err(const float *a, const float *b, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e;
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return m > 0 ? d / m : d;
}

static void expect(const char *what, double err, double tol) {
    const bool ok = err <= tol;
    if (!ok) failures++;
    printf("%s %-70s err %.2e (tol %.0e)\n", ok ? "PASS" : "FAIL", what, err, tol);
}

// The emulation programs' command line: [--quick] (else the usage line, exit 2).
static bool emu_quick(int argc, char **argv, const char *prog) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = true;
        else {
            fprintf(stderr, "usage: %s [--quick]\n", prog);
            exit(2);
        }
    }
    return quick;
}
