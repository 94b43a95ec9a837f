// swiglu.cu: out[i] = silu(gate[i]) · up[i] = gate / (1 + exp(−gate)) · up, CUDA
// twin. Element-wise, grid-stride; expf (not __expf) so the fp32 twin matches
// the CPU's to rounding. out may alias gate.
#include "cuda_check.cuh"
#include "ops_cuda.h"

// ---- kernels ------------------------------------------------------------------------

__global__ void swiglu_forward_kernel1(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

// ---- launcher ------------------------------------------------------------------------

extern "C" void swiglu_forward_cuda(float *out, const float *gate, const float *up, int64_t n) {
    if (n <= 0) return;
    int64_t grid = (n + 255) / 256;
    if (grid > 65535 * 16) grid = 65535 * 16;
    swiglu_forward_kernel1<<<(int)grid, 256>>>(out, gate, up, n);
    CUDA_CHECK(cudaGetLastError());
}
