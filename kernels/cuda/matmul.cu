// matmul.cu: out[T, C_out] = in[T, C_in] · w[C_out, C_in]ᵀ (+ bias), CUDA twin.
//
// cuBLAS is column-major; a row-major [R, C] matrix is its column-major
// transpose [C, R]. So outᵀ[C_out, T] = w[C_out, C_in] · inᵀ[C_in, T] is one
// GEMM with opA = T on w (seen by cuBLAS as [C_in, C_out]) and opB = N on in.
// fp32: cublasSgemm, TF32 off (handle math mode, cublas_check.cuh): the
// reference mode. bf16: cublasGemmEx with bf16 A/B, fp32 C and
// CUBLAS_COMPUTE_32F: bf16 storage, fp32 accumulation; f16 the same way.
// The accumulate forms pass β = 1, so the product lands on top of x (the
// residual stream) in the GEMM's epilogue.
#include <cuda_bf16.h>

#include "cublas_check.cuh"
#include "cuda_check.cuh"
#include "device_util.cuh"
#include "ops_cuda.h"

// ---- kernels ------------------------------------------------------------------------

// out[t, c] += bias[c]; one thread per element, grid-stride.
__global__ void add_bias_kernel(float *out, const float *bias, int64_t n, int C_out) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] += bias[i % C_out];
}

// ---- launchers ------------------------------------------------------------------------

static void add_bias(float *out, const float *bias, int T, int C_out) {
    const int64_t n = (int64_t)T * C_out;
    add_bias_kernel<<<grid_for(n, 256), 256>>>(out, bias, n, C_out);
    CUDA_CHECK(cudaGetLastError());
}

// outᵀ = w·inᵀ + beta·outᵀ in fp32 (beta 0: a plain product; 1: added to out).
static void sgemm(float *out, const float *in, const float *w, int T, int C_in, int C_out, float beta) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasSgemm(cuda_cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, C_out, T, C_in, &one, w, C_in,
                             in, C_in, &beta, out, C_out));
}

// The same with 16-bit operands of type h, fp32 accumulation and out.
static void gemm_half(float *out, const void *in, const void *w, int T, int C_in, int C_out, HalfType h,
                      float beta) {
    const float one = 1.0f;
    const cudaDataType_t type = h == HALF_F16 ? CUDA_R_16F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasGemmEx(cuda_cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, C_out, T, C_in, &one, w, type, C_in,
                              in, type, C_in, &beta, out, CUDA_R_32F, C_out, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

extern "C" void matmul_forward_cuda(float *out, const float *in, const float *w, const float *bias, int T,
                                    int C_in, int C_out) {
    if (T <= 0 || C_out <= 0) return;
    sgemm(out, in, w, T, C_in, C_out, 0.0f);
    if (bias) add_bias(out, bias, T, C_out);
}

extern "C" void matmul_forward_half_cuda(float *out, const void *in, const void *w, const float *bias, int T,
                                         int C_in, int C_out, HalfType h) {
    if (T <= 0 || C_out <= 0) return;
    gemm_half(out, in, w, T, C_in, C_out, h, 0.0f);
    if (bias) add_bias(out, bias, T, C_out);
}

extern "C" void matmul_forward_half_out_cuda(void *out, const void *in, const void *w, int T, int C_in, int C_out,
                                             HalfType h) {
    if (T <= 0 || C_out <= 0) return;
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t type = h == HALF_F16 ? CUDA_R_16F : CUDA_R_16BF;
    CUBLAS_CHECK(cublasGemmEx(cuda_cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, C_out, T, C_in, &one, w, type, C_in,
                              in, type, C_in, &zero, out, type, C_out, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

extern "C" void matmul_accumulate_cuda(float *x, const float *in, const float *w, int T, int C_in, int C_out) {
    if (T > 0 && C_out > 0) sgemm(x, in, w, T, C_in, C_out, 1.0f);
}

extern "C" void matmul_accumulate_half_cuda(float *x, const void *in, const void *w, int T, int C_in, int C_out,
                                            HalfType h) {
    if (T > 0 && C_out > 0) gemm_half(x, in, w, T, C_in, C_out, h, 1.0f);
}

extern "C" void matmul_forward_bf16_cuda(float *out, const void *in, const void *w, const float *bias, int T,
                                         int C_in, int C_out) {
    matmul_forward_half_cuda(out, in, w, bias, T, C_in, C_out, HALF_BF16);
}
