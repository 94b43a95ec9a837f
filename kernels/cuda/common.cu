// common.cu: helpers of the CUDA twin: device query, memory, bf16 conversion,
// and the shared cuBLAS handle. Every CUDA call is checked (cuda_check.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>

#include "cublas_check.cuh"
#include "cuda_check.cuh"
#include "device_util.cuh"
#include "env.h"
#include "ops_cuda.h"

// ---- kernels --------------------------------------------------------------------

__global__ void f32_to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void bf16_to_f32_kernel(float *dst, const __nv_bfloat16 *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

__global__ void f32_to_f16_kernel(__half *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

__global__ void f16_to_f32_kernel(float *dst, const __half *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = __half2float(src[i]);
}

// x[i] = lo + (hi − lo)·u_i, u_i uniform in [0, 1) from a hash of (seed, i):
// reproducible, no state, any grid.
__global__ void fill_uniform_kernel(float *x, int64_t n, float lo, float hi, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        x[i] = lo + (hi - lo) * (float)((z >> 40) * (1.0 / 16777216.0));
    }
}

// ---- launchers and helpers ---------------------------------------------------------

extern "C" int cuda_available(char *why, size_t len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        // Without a driver this is cudaErrorInsufficientDriver or
        // cudaErrorNoDevice; clear it so later calls do not see it.
        if (why) snprintf(why, len, "%s", err == cudaSuccess ? "no CUDA device found" : cudaGetErrorString(err));
        (void)cudaGetLastError();
        return 0;
    }
    if (why) {
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
        snprintf(why, len, "%s (sm_%d%d, %d SMs)", p.name, p.major, p.minor, p.multiProcessorCount);
    }
    return n;
}

// Bytes handed out by cuda_malloc and not yet freed, and their peak. Sizes are
// looked up at free time with cuMemGetAddressRange-free bookkeeping: a small
// open-addressing table from pointer to size (device allocations are few).
static size_t g_live = 0, g_peak = 0;
enum { MEM_SLOTS = 1 << 14 };
static struct { void *p; size_t n; } g_sizes[MEM_SLOTS];

static size_t mem_slot(void *p) { return ((uintptr_t)p >> 8) * 0x9E3779B97F4A7C15ull >> 50; }

// Allocations are stream-ordered (cudaMallocAsync / cudaFreeAsync on the
// default stream, the only one spindle uses) from the device's default pool,
// told to keep what is freed: a free no longer waits for the device, and a
// buffer freed by one layer is handed to the next without a new mapping. A
// device without memory pools gets cudaMalloc / cudaFree.
static int g_pool = -1;  // -1 not yet asked, 0 no pools, 1 pools

static int use_pool(void) {
    if (g_pool < 0) {
        int dev = 0, ok = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&ok, cudaDevAttrMemoryPoolsSupported, dev));
        if (ok) {
            cudaMemPool_t pool;
            uint64_t keep = UINT64_MAX;
            CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
            CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
        }
        g_pool = ok != 0;
    }
    return g_pool;
}

static cudaError_t device_alloc(void **p, size_t bytes) {
    return use_pool() ? cudaMallocAsync(p, bytes, 0) : cudaMalloc(p, bytes);
}

// SPINDLE_GPU_MEM_LIMIT (GiB, may be fractional): the most spindle's own
// allocations may hold at once, for sharing a card; 0 or unset: no limit.
static double mem_limit_gib(void) {
    static double gib = -1;
    if (gib < 0) {
        const char *v = getenv("SPINDLE_GPU_MEM_LIMIT");
        char *end = NULL;
        const double g = v && *v ? strtod(v, &end) : 0;
        if (v && *v && (*end || !(g >= 0))) {
            fprintf(stderr, "spindle: SPINDLE_GPU_MEM_LIMIT=%s is not a number of GiB\n", v);
            exit(2);
        }
        gib = g;
    }
    return gib;
}

// A request the card cannot hold is the machine's state (often another process
// on the card, or a --ctx too long for it), not a fault in spindle: the pool
// first gives back the memory it keeps for reuse and the request is tried once
// more; if it still fails, spindle ends with exit 1 and the sizes.
static void *alloc_or_exit(size_t bytes) {
    void *p = NULL;
    const double gib = mem_limit_gib();
    const int over = gib > 0 && (double)(g_live + bytes) > gib * 1073741824.0;
    cudaError_t err = over ? cudaErrorMemoryAllocation : device_alloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation && !over && use_pool()) {
        (void)cudaGetLastError();
        int dev = 0;
        cudaMemPool_t pool;
        CUDA_CHECK(cudaDeviceSynchronize());  // frees still queued on the stream count as unused after this
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
        CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
        err = device_alloc(&p, bytes);
    }
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        const double gb = 1e9;
        fprintf(stderr,
                "spindle: out of GPU memory: %.3f GB asked while spindle holds %.2f GB (peak %.2f GB); "
                "the device has %.2f GB free of %.2f GB",
                bytes / gb, g_live / gb, g_peak / gb, free_b / gb, total_b / gb);
        if (over) fprintf(stderr, "; SPINDLE_GPU_MEM_LIMIT is %g GiB", gib);
        fprintf(stderr, ". Another process may be using the card; a shorter --ctx needs less.\n");
        exit(1);
    }
    CUDA_CHECK(err);
    return p;
}

extern "C" void *cuda_malloc(size_t bytes) {
    void *p = alloc_or_exit(bytes ? bytes : 1);
    for (size_t i = mem_slot(p), k = 0; k < MEM_SLOTS; i = (i + 1) % MEM_SLOTS, k++)
        if (!g_sizes[i].p) {
            g_sizes[i].p = p, g_sizes[i].n = bytes;
            g_live += bytes;
            if (g_live > g_peak) g_peak = g_live;
            break;
        }
    return p;
}

extern "C" void cuda_free(void *p) {
    if (!p) return;
    for (size_t i = mem_slot(p), k = 0; k < MEM_SLOTS; i = (i + 1) % MEM_SLOTS, k++)
        if (g_sizes[i].p == p) {
            g_live -= g_sizes[i].n;
            // Backward-shift deletion keeps every probe chain unbroken.
            size_t j = i;
            for (;;) {
                g_sizes[i].p = NULL;
                for (;;) {
                    j = (j + 1) % MEM_SLOTS;
                    if (!g_sizes[j].p) goto done;
                    size_t h = mem_slot(g_sizes[j].p);
                    if (i <= j ? (i < h && h <= j) : (i < h || h <= j)) continue;
                    break;
                }
                g_sizes[i] = g_sizes[j];
                i = j;
            }
        }
done:
    if (use_pool()) CUDA_CHECK(cudaFreeAsync(p, 0));
    else CUDA_CHECK(cudaFree(p));
}

extern "C" size_t cuda_mem_live(void) { return g_live; }
extern "C" size_t cuda_mem_peak(void) { return g_peak; }
extern "C" void cuda_mem_peak_reset(void) { g_peak = g_live; }

extern "C" size_t cuda_mem_device_used(void) {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

// Median milliseconds of reps calls of fn(ctx) after warmup calls, each timed
// with a pair of CUDA events on the default stream; all[reps] (may be NULL)
// gets every sample in call order.
extern "C" double cuda_time_ms(void (*fn)(void *), void *ctx, int warmup, int reps, double *all) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < warmup; i++) fn(ctx);
    double *ms = (double *)malloc(sizeof(double) * (reps > 0 ? reps : 1));
    for (int i = 0; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(a));
        fn(ctx);
        CUDA_CHECK(cudaEventRecord(b));
        CUDA_CHECK(cudaEventSynchronize(b));
        float f;
        CUDA_CHECK(cudaEventElapsedTime(&f, a, b));
        ms[i] = f;
        if (all) all[i] = f;
    }
    // median (insertion sort: reps is small)
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
            double t = ms[j];
            ms[j] = ms[j - 1], ms[j - 1] = t;
        }
    double med = reps <= 0 ? 0 : reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    free(ms);
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    return med;
}

extern "C" void cuda_to_device(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

extern "C" void cuda_to_host(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

extern "C" void cuda_copy_cols(float *dst, const float *src, int rows, int C, int c0, int n) {
    if (rows <= 0 || n <= 0) return;
    CUDA_CHECK(cudaMemcpy2DAsync(dst, sizeof(float) * (size_t)n, src + c0, sizeof(float) * (size_t)C,
                                 sizeof(float) * (size_t)n, (size_t)rows, cudaMemcpyDeviceToDevice, 0));
}

extern "C" void cuda_memset(void *p, int value, size_t bytes) { CUDA_CHECK(cudaMemset(p, value, bytes)); }

extern "C" void cuda_sync(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

// The side streams (ops_cuda.h), created on first use with the default flags
// (blocking: ordered against the legacy default stream both ways), and the one
// event cuda_stream_after records (a wait takes the event's state when it is
// queued, so one event serves every call).
static cudaStream_t g_streams[3];  // [0]: the default stream
static int g_stream_cur = 0;
static cudaEvent_t g_stream_ev;

static cudaStream_t side_stream(int s) {
    if (s < 0 || s > 2) {
        fprintf(stderr, "spindle: stream %d: only 0, 1 and 2 exist (%s:%d)\n", s, __FILE__, __LINE__);
        abort();
    }
    if (s > 0 && !g_streams[s]) {
        // SPINDLE_STREAM_PRIORITY=s (1 or 2): that side stream at the device's highest priority, its thread
        // blocks dispatched first wherever both streams have some waiting; 0 (the default): equal.
        const long hi = env_long("SPINDLE_STREAM_PRIORITY", 0, 0, 2);
        int least = 0, greatest = 0;
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&g_streams[s], cudaStreamDefault, hi == s ? greatest : least));
    }
    return g_streams[s];
}

cudaStream_t cuda_launch_stream(void) { return g_streams[g_stream_cur]; }

extern "C" void cuda_stream_use(int s) {
    side_stream(s);
    g_stream_cur = s;
}

extern "C" void cuda_stream_after(int waiter, int signaler) {
    if (!g_stream_ev) CUDA_CHECK(cudaEventCreateWithFlags(&g_stream_ev, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(g_stream_ev, side_stream(signaler)));
    CUDA_CHECK(cudaStreamWaitEvent(side_stream(waiter), g_stream_ev, 0));
}

extern "C" void cuda_f32_to_bf16(void *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    f32_to_bf16_kernel<<<grid_for(n, 256), 256>>>((__nv_bfloat16 *)dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void cuda_bf16_to_f32(float *dst, const void *src, int64_t n) {
    if (n <= 0) return;
    bf16_to_f32_kernel<<<grid_for(n, 256), 256>>>(dst, (const __nv_bfloat16 *)src, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void cuda_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t seed) {
    if (n <= 0) return;
    fill_uniform_kernel<<<grid_for(n, 256), 256>>>(x, n, lo, hi, seed);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void cuda_f32_to_half(void *dst, const float *src, int64_t n, HalfType h) {
    if (h == HALF_BF16) {
        cuda_f32_to_bf16(dst, src, n);
        return;
    }
    if (n <= 0) return;
    f32_to_f16_kernel<<<grid_for(n, 256), 256>>>((__half *)dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void cuda_half_to_f32(float *dst, const void *src, int64_t n, HalfType h) {
    if (h == HALF_BF16) {
        cuda_bf16_to_f32(dst, src, n);
        return;
    }
    if (n <= 0) return;
    f16_to_f32_kernel<<<grid_for(n, 256), 256>>>(dst, (const __half *)src, n);
    CUDA_CHECK(cudaGetLastError());
}

static cublasHandle_t g_cublas = NULL;

// SPINDLE_CUBLAS_WORKSPACE_MB=N: the handle's GEMMs get a workspace of N MiB of
// their own (cublasSetWorkspace; cuBLAS's guide suggests 32 MiB on Hopper), so
// that its heuristics may pick kernels that need one; unset or 0: cuBLAS's own
// default. A knob to time the GEMMs with and without (docs/performance.md).
static size_t cublas_workspace_bytes(void) {
    const char *v = getenv("SPINDLE_CUBLAS_WORKSPACE_MB");
    if (!v || !*v) return 0;
    char *end = NULL;
    const long mb = strtol(v, &end, 10);
    if (*end || mb < 0 || mb > 4096) {
        fprintf(stderr, "spindle: SPINDLE_CUBLAS_WORKSPACE_MB=%s is not a whole number of MiB in 0..4096\n", v);
        exit(2);
    }
    return (size_t)mb << 20;
}

cublasHandle_t cuda_cublas_handle(void) {
    if (!g_cublas) {
        CUBLAS_CHECK(cublasCreate(&g_cublas));
        // No TF32 for fp32 GEMMs; bf16 GEMMs may not reduce split-K partial sums in bf16.
        CUBLAS_CHECK(cublasSetMathMode(
            g_cublas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
        const size_t ws = cublas_workspace_bytes();
        if (ws) {  // held for the process's life, as the handle is
            void *p = NULL;
            CUDA_CHECK(cudaMalloc(&p, ws));
            CUBLAS_CHECK(cublasSetWorkspace(g_cublas, p, ws));
        }
    }
    return g_cublas;
}
