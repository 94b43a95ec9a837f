// elementwise.cu: the small glue ops of the CUDA forward (model/forward_cuda.c),
// CUDA twin. Their CPU twins are one-line loops in model/forward.c:
//   embedding gather   out[t, :] = table[ids[t], :]          (fp32 or bf16 table)
//   residual add       out[i] = a[i] + b[i]                    (out may alias a or b)
// Grid-stride loops, one thread per element; both are exact (a gather and one
// fp32 add), so the twin test compares them bit for bit.
#include <cuda_bf16.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "ops_cuda.h"

// ---- kernels ------------------------------------------------------------------------

// Flat grid-stride over the T·C outputs (no grid-y limit on T): i = t·C + c.
__global__ void embedding_forward_kernel1(float *out, const int32_t *ids, const float *table, int T, int C,
                                          float scale) {
    const int64_t n = (int64_t)T * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = table[(int64_t)ids[i / C] * C + i % C] * scale;
}

__global__ void embedding_forward_bf16_kernel1(float *out, const int32_t *ids, const __nv_bfloat16 *table, int T,
                                               int C, float scale) {
    const int64_t n = (int64_t)T * C;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = __bfloat162float(table[(int64_t)ids[i / C] * C + i % C]) * scale;
}

__global__ void softcap_forward_kernel1(float *x, int64_t n, float cap) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}

__global__ void residual_forward_kernel1(float *out, const float *a, const float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

// ---- launchers ------------------------------------------------------------------------

extern "C" void embedding_forward_cuda(float *out, const int32_t *ids, const float *table, int T, int C,
                                       float scale) {
    if (T <= 0 || C <= 0) return;
    embedding_forward_kernel1<<<grid_for((int64_t)T * C, 256), 256>>>(out, ids, table, T, C, scale);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void embedding_forward_bf16_cuda(float *out, const int32_t *ids, const void *table, int T, int C,
                                            float scale) {
    if (T <= 0 || C <= 0) return;
    embedding_forward_bf16_kernel1<<<grid_for((int64_t)T * C, 256), 256>>>(out, ids, (const __nv_bfloat16 *)table, T,
                                                                           C, scale);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void residual_forward_cuda(float *out, const float *a, const float *b, int64_t n) {
    if (n <= 0) return;
    residual_forward_kernel1<<<grid_for(n, 256), 256>>>(out, a, b, n);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" void softcap_forward_cuda(float *x, int64_t n, float cap) {
    if (n <= 0) return;
    softcap_forward_kernel1<<<grid_for(n, 256), 256>>>(x, n, cap);
    CUDA_CHECK(cudaGetLastError());
}
