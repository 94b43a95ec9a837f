// common.cu: helpers of the CUDA twin: device query, memory, bf16 conversion,
// and the shared cuBLAS handle. Every CUDA call is checked (cuda_check.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>

#include "cublas_check.cuh"
#include "cuda_check.cuh"
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

// ---- launchers and helpers ---------------------------------------------------------

static int grid_for(int64_t n, int block) {
    int64_t g = (n + block - 1) / block;
    return (int)(g < 65535 * 16 ? (g > 0 ? g : 1) : 65535 * 16);
}

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

extern "C" void *cuda_malloc(size_t bytes) {
    void *p = NULL;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

extern "C" void cuda_free(void *p) {
    if (p) CUDA_CHECK(cudaFree(p));
}

extern "C" void cuda_to_device(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

extern "C" void cuda_to_host(void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

extern "C" void cuda_memset(void *p, int value, size_t bytes) { CUDA_CHECK(cudaMemset(p, value, bytes)); }

extern "C" void cuda_sync(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

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

cublasHandle_t cuda_cublas_handle(void) {
    if (!g_cublas) {
        CUBLAS_CHECK(cublasCreate(&g_cublas));
        // No TF32 for fp32 GEMMs; bf16 GEMMs may not reduce split-K partial sums in bf16.
        CUBLAS_CHECK(cublasSetMathMode(
            g_cublas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    }
    return g_cublas;
}
