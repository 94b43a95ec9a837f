// rope.cu: rotary position embedding in place, "rotate half" layout, CUDA twin.
// x [T, H, dh]; for i < rot/2 the pair (i, i + rot/2) of head h at position t
// turns by the angle whose cos/sin are cos/sin[t, i]. One thread per pair; dims
// ≥ rot are not touched.
// head_norm_rope_cuda: Qwen3's per-head RMSNorm of q / k and then RoPE in one
// pass over x (one warp per head row, the row staged in shared memory so a dim
// can read its rotation partner), optionally writing the 16-bit copy the
// attention kernels take too: at 128K on Qwen3-8B the separate norm, RoPE and
// conversion passes moved 12 GB per layer for q alone, this one 5.
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

enum { HNR_WARPS = 8 };  // head rows per thread block

// One warp per row (t·H + h) of x; sm: HNR_WARPS rows of dh floats.
template <typename H16>
__global__ void __launch_bounds__(32 * HNR_WARPS)
    head_norm_rope_kernel1(float *x, H16 *x16, const float *w, const float *cos, const float *sin, int64_t rows,
                           int H, int dh, int half, float eps) {
    extern __shared__ float hnr_sm[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * HNR_WARPS + warp;
    if (row >= rows) return;  // warp-uniform; only warp-level barriers below
    float *v = x + row * dh, *sm = hnr_sm + warp * dh;
    float ss = 0.0f;
    for (int i = lane; i < dh; i += 32) {
        const float a = v[i];
        sm[i] = a;
        ss += a * a;
    }
    if (w) {
        const float rstd = 1.0f / sqrtf(warp_sum(ss) / dh + eps);
        for (int i = lane; i < dh; i += 32) sm[i] = sm[i] * rstd * w[i];  // a lane's own dims
    }
    __syncwarp();  // every dim normed before a partner reads it
    const int64_t t = row / H;
    for (int i = lane; i < dh; i += 32) {
        float y = sm[i];
        if (i < half) {
            const float c = cos[t * half + i], s = sin[t * half + i];
            y = sm[i] * c - sm[i + half] * s;
        } else if (i < 2 * half) {
            const float c = cos[t * half + i - half], s = sin[t * half + i - half];
            y = sm[i] * c + sm[i - half] * s;
        }
        v[i] = y;
        if (x16) store_as(x16 + row * dh + i, y);
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

extern "C" void head_norm_rope_cuda(float *x, void *x16, const float *w, const float *cos, const float *sin, int T,
                                    int H, int dh, int rot, float eps, HalfType h) {
    const int64_t rows = (int64_t)T * H;
    if (rows <= 0) return;
    const unsigned grid = (unsigned)((rows + HNR_WARPS - 1) / HNR_WARPS);
    const size_t smem = sizeof(float) * HNR_WARPS * (size_t)dh;
    if (!x16 || h == HALF_BF16)
        head_norm_rope_kernel1<<<grid, 32 * HNR_WARPS, smem>>>(x, (__nv_bfloat16 *)x16, w, cos, sin, rows, H, dh,
                                                               rot / 2, eps);
    else
        head_norm_rope_kernel1<<<grid, 32 * HNR_WARPS, smem>>>(x, (__half *)x16, w, cos, sin, rows, H, dh, rot / 2,
                                                               eps);
    CUDA_CHECK(cudaGetLastError());
}
