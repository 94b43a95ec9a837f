// rope.cu: rotary position embedding in place, "rotate half" layout, CUDA twin.
// x [T, H, dh]; for i < rot/2 the pair (i, i + rot/2) of head h at position t
// turns by the angle whose cos/sin are cos/sin[t, i]. One thread per pair; dims
// ≥ rot are not touched.
#include "cuda_check.cuh"
#include "device_util.cuh"
#include "ops_cuda.h"

// ---- kernels ------------------------------------------------------------------------

__global__ void rope_forward_kernel1(float *x, const float *cos, const float *sin, int T, int H, int dh,
                                     int half) {
    const int64_t n = (int64_t)T * H * half;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % half);
        const int64_t th = idx / half;  // t·H + h
        const int t = (int)(th / H);
        float *v = x + th * dh;
        const float c = cos[(int64_t)t * half + i], s = sin[(int64_t)t * half + i];
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

// ---- launcher ------------------------------------------------------------------------

extern "C" void rope_forward_cuda(float *x, const float *cos, const float *sin, int T, int H, int dh, int rot) {
    const int half = rot / 2;
    const int64_t n = (int64_t)T * H * half;
    if (n <= 0) return;
    rope_forward_kernel1<<<grid_for(n, 256), 256>>>(x, cos, sin, T, H, dh, half);
    CUDA_CHECK(cudaGetLastError());
}
