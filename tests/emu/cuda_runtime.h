// cuda_runtime.h (emulation): just enough of the CUDA runtime for the kernels of
// kernels/cuda/deltanet.cu to compile as C++ and run on host threads, one thread
// per CUDA thread, the blocks of a launch one after another. __syncthreads is a
// barrier of the block's threads, a warp shuffle an exchange through memory
// between two barriers of the warp's 32 threads. Dynamic shared memory and
// every cuda_malloc'd buffer start as NaN, so a read of something never written
// shows in the results. Slow, for small cases: it checks the kernels' indexing,
// bounds and barriers without a GPU (tests/emu/emu_deltanet.cpp).
#pragma once
#define SPINDLE_CUDA_EMULATION 1

#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// A kernel's static shared variable: one object for every thread of the launch, which is what a
// thread block's shared memory is when the blocks run one after another (not poisoned between them).
#define __shared__ static

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct emu_uint3 {
    unsigned x, y, z;
};
inline thread_local emu_uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }

// CUDA's integer min / max (device built-ins).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }

typedef int cudaError_t;
enum { cudaSuccess = 0 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
                      cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81 };
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributePreferredSharedMemoryCarveout = 9,
       cudaSharedmemCarveoutMaxShared = 100 };
inline const char *cudaGetErrorName(cudaError_t) { return "emulation"; }
inline const char *cudaGetErrorString(cudaError_t) { return "emulation"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
// Copies: device memory is host memory (the stream argument is ignored).
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, int = 0) {
    memcpy(d, s, n);
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
// Events: kernels run to completion at launch here, so an event is the host's clock when recorded.
typedef double *cudaEvent_t;
inline cudaError_t cudaEventCreate(cudaEvent_t *e) { *e = new double(0.0); return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t e, int = 0) {
    *e = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) { *ms = (float)(*b - *a); return cudaSuccess; }
inline int emu_smem_optin = 232448;  // an H100 / H200's 227 KiB
inline cudaError_t cudaDeviceGetAttribute(int *v, int attr, int) {
    // an H200's SMs and shared memory per SM; the opt-in limit a thread block may ask for
    *v = attr == cudaDevAttrMultiProcessorCount ? 132 : attr == cudaDevAttrMaxSharedMemoryPerMultiprocessor ? 233472 : emu_smem_optin;
    return cudaSuccess;
}
inline int emu_smem_limit_seen;  // the largest dynamic shared memory asked for
template <typename F>
cudaError_t cudaFuncSetAttribute(F, int attr, int bytes) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // the carveout: nothing to do
    if (bytes > emu_smem_limit_seen) emu_smem_limit_seen = bytes;
    return bytes <= emu_smem_optin ? cudaSuccess : 1;
}

// ---- the running block ----
inline std::barrier<> *emu_block_bar;
inline std::vector<std::barrier<> *> emu_warp_bar;
inline uint64_t emu_xchg[1024];
inline float *emu_dyn;
inline size_t emu_dyn_bytes;
inline float *emu_dynamic_smem() { return emu_dyn; }

inline int emu_tid() { return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); }
inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }

template <typename T>
T emu_exchange(T v, int src) {
    const int t = emu_tid();
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    emu_xchg[t] = u;
    emu_warp_bar[t / 32]->arrive_and_wait();
    T r;
    memcpy(&r, &emu_xchg[(t / 32) * 32 + src], sizeof r);
    emu_warp_bar[t / 32]->arrive_and_wait();
    return r;
}
template <typename T>
T __shfl_xor_sync(unsigned, T v, int off, int = 32) { return emu_exchange(v, (emu_tid() % 32) ^ off); }
template <typename T>
T __shfl_sync(unsigned, T v, int src, int = 32) { return emu_exchange(v, src % 32); }

// Every lane's value (at most 32 bytes: a word, a pointer, an mma fragment), gathered (two barriers of
// the warp): all[l] = lane l's v.
inline unsigned char emu_gather_buf[1024][32];
template <typename T>
void emu_warp_all(const T &v, T *all) {
    static_assert(sizeof(T) <= sizeof emu_gather_buf[0], "emu_warp_all: at most 32 bytes a lane");
    const int t = emu_tid(), w0 = (t / 32) * 32;
    memcpy(emu_gather_buf[t], &v, sizeof v);
    emu_warp_bar[t / 32]->arrive_and_wait();
    for (int l = 0; l < 32; l++) memcpy(&all[l], emu_gather_buf[w0 + l], sizeof(T));
    emu_warp_bar[t / 32]->arrive_and_wait();
}
// Warp votes and reductions over all 32 lanes (the kernels here pass the full mask).
inline unsigned __ballot_sync(unsigned, int pred) {
    int all[32];
    emu_warp_all(pred ? 1 : 0, all);
    unsigned b = 0;
    for (int l = 0; l < 32; l++) b |= (unsigned)all[l] << l;
    return b;
}
inline int __any_sync(unsigned m, int pred) { return __ballot_sync(m, pred) != 0; }
// A barrier of the warp's 32 threads (the kernels here pass the full mask).
inline void __syncwarp(unsigned = 0xffffffffu) { emu_warp_bar[emu_tid() / 32]->arrive_and_wait(); }
template <typename T>
T __reduce_add_sync(unsigned, T v) {
    T all[32], s = 0;
    emu_warp_all(v, all);
    for (int l = 0; l < 32; l++) s += all[l];
    return s;
}
template <typename T>
T __shfl_up_sync(unsigned, T v, unsigned d, int = 32) {
    const int lane = emu_tid() % 32;
    const T r = emu_exchange(v, lane >= (int)d ? lane - (int)d : lane);
    return r;
}
inline unsigned __float_as_uint(float x) {
    unsigned u;
    memcpy(&u, &x, 4);
    return u;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
// fp32 arithmetic rounded once per operation (as the _rn intrinsics: the host compiler does not fuse them).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
// Atomics on shared or global memory (host memory here), for the kernels that count and mark.
template <typename T>
T atomicAdd(T *p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
inline unsigned atomicOr(unsigned *p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_or(v); }

inline void emu_poison(float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = std::numeric_limits<float>::quiet_NaN();
}

template <typename... P, typename... A>
void emu_launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A... args) {
    const int nt = (int)(block.x * block.y * block.z);
    if (nt % 32 != 0 || nt > 1024) abort();
    if (smem > (size_t)emu_smem_optin) abort();
    blockDim = block, gridDim = grid;
    std::vector<float4> dyn(smem / sizeof(float4) + 1);
    emu_dyn = (float *)dyn.data(), emu_dyn_bytes = smem;
    std::barrier<> bar(nt);
    emu_block_bar = &bar;
    emu_warp_bar.clear();
    for (int w = 0; w < nt / 32; w++) emu_warp_bar.push_back(new std::barrier<>(32));
    emu_poison(emu_dyn, dyn.size() * 4);
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++)
        th.emplace_back([&, t]() {
            threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
            for (unsigned bz = 0; bz < grid.z; bz++)
                for (unsigned by = 0; by < grid.y; by++)
                    for (unsigned bx = 0; bx < grid.x; bx++) {
                        blockIdx = {bx, by, bz};
                        kernel(args...);
                        bar.arrive_and_wait();
                        if (t == 0) emu_poison(emu_dyn, dyn.size() * 4);
                        bar.arrive_and_wait();
                    }
        });
    for (auto &x : th) x.join();
    for (auto *b : emu_warp_bar) delete b;
    emu_warp_bar.clear();
}
