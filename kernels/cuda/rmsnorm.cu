// rmsnorm.cu: out[r, :] = in[r, :] / sqrt(mean(in[r, :]²) + eps) · w, CUDA twin.
// One block per row: each thread sums the squares of a strided slice, a warp
// shuffle then shared memory reduce them, every thread scales its slice.
// out may alias in (each element is read before it is written, by one thread).
// rmsnorm_forward_half_cuda writes the same fp32 values rounded to bf16 / f16
// (the next GEMM's operand, without the fp32 round trip through memory).
#include "cuda_check.cuh"
#include "device_util.cuh"
#include "ops_cuda.h"

enum { RMS_THREADS = 256 };

// ---- kernels ------------------------------------------------------------------------

template <typename OutT>
__global__ void __launch_bounds__(RMS_THREADS) rmsnorm_forward_kernel1(OutT *out, const float *in,
                                                                      const float *w, int C, float eps) {
    __shared__ float partial[RMS_THREADS / 32];
    __shared__ float rstd_s;
    const float *x = in + (int64_t)blockIdx.x * C;
    OutT *y = out + (int64_t)blockIdx.x * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
    ss = warp_sum(ss);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int i = 0; i < (int)(blockDim.x / 32); i++) total += partial[i];
        rstd_s = 1.0f / sqrtf(total / C + eps);
    }
    __syncthreads();
    const float rstd = rstd_s;
    for (int c = threadIdx.x; c < C; c += blockDim.x) store_as(y + c, x[c] * rstd * w[c]);
}

// ---- launcher ------------------------------------------------------------------------

extern "C" void rmsnorm_forward_cuda(float *out, const float *in, const float *w, int R, int C, float eps) {
    if (R <= 0) return;
    rmsnorm_forward_kernel1<<<R, RMS_THREADS>>>(out, in, w, C, eps);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void rmsnorm_forward_half_cuda(void *out, const float *in, const float *w, int R, int C, float eps,
                                          HalfType h) {
    if (R <= 0) return;
    if (h == HALF_BF16) rmsnorm_forward_kernel1<<<R, RMS_THREADS>>>((__nv_bfloat16 *)out, in, w, C, eps);
    else rmsnorm_forward_kernel1<<<R, RMS_THREADS>>>((__half *)out, in, w, C, eps);
    CUDA_CHECK(cudaGetLastError());
}
