// emu_attention_cached.cpp: the decoding-cache attention of
// kernels/cuda/attention_cached.cu (split over chunks of keys, then merged) run
// on host threads (tests/emu/cuda_runtime.h) against its CPU twin
// attention_cached_cpu (kernels/cpu/attention_cpu.c): chunk edges, windows that
// start inside a chunk, several queries, head groups of 1 to 16 (more than one
// group of 8 per KV head), head sizes that are not multiples of 32. Like
// emu_deltanet.cpp it checks indexing, bounds, barriers and algebra without a
// GPU, nothing about speed. Build and run: scripts/emulate-cuda.sh attention_cached [--quick].
#include <cstdio>

#include "attention_cached.cu"

#include "emu_harness.h"

extern "C" void attention_cached_cpu(float *out, const float *q, const float *k_cache, const float *v_cache, int p0,
                                     int n, int Hq, int Hkv, int dh, float scale, int window);

static void check(int p0, int n, int Hq, int Hkv, int dh, int window) {
    const int64_t L = (int64_t)p0 + n, nq = (int64_t)n * Hq * dh, nkv = L * Hkv * dh;
    const float scale = 1.0f / sqrtf((float)dh);
    auto q = fill(nq, -2, 2), k = fill(nkv, -1.5f, 1.5f), v = fill(nkv, -1, 1);
    std::vector<float> ref((size_t)nq);
    attention_cached_cpu(ref.data(), q.data(), k.data(), v.data(), p0, n, Hq, Hkv, dh, scale, window);
    float *d_out = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    attention_cached_cuda(d_out, q.data(), k.data(), v.data(), p0, n, Hq, Hkv, dh, scale, window);
    char what[160];
    snprintf(what, sizeof what, "attention_cached p0 %d n %d Hq %d Hkv %d dh %d W %d", p0, n, Hq, Hkv, dh, window);
    expect(what, rel_err(d_out, ref.data(), nq), 1e-5);  // fp32: summation order and expf vs fast_expf
    cuda_free(d_out);
}

int main(int argc, char **argv) {
    const bool quick = emu_quick(argc, argv, "emu_attention_cached");
    check(0, 1, 8, 8, 64, 0);        // one key
    check(255, 1, 9, 3, 64, 0);      // exactly one chunk of 256
    check(256, 1, 9, 3, 64, 0);      // one key into the second chunk
    check(300, 2, 12, 2, 128, 0);    // Qwen2.5's 12:2, two queries
    check(600, 3, 4, 1, 80, 300);    // a window starting inside a chunk, per query
    check(700, 1, 20, 2, 96, 0);     // 10 heads a KV head: groups of 8 and 2
    check(7, 1, 16, 2, 64, 512);     // a window longer than the cache
    if (!quick) {
        check(1500, 2, 32, 2, 128, 0);   // 16 heads a KV head
        check(999, 3, 4, 1, 256, 45);    // dh 256, a short window
        check(2100, 1, 32, 8, 128, 0);   // Qwen3-8B's 32:8, 9 chunks
    }
    printf("emu_attention_cached: %s (%d failure%s)\n", failures ? "FAIL" : "PASS", failures, failures == 1 ? "" : "s");
    return failures ? 1 : 0;
}
