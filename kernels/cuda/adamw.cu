// adamw.cu: AdamW and global-norm gradient clipping on the GPU, CUDA twins of
// train/adamw.c (adamw_step, grad_clip).
//
// What. adamw_step_cuda: one AdamW step over n fp32 parameters with fp32
// moments and decoupled weight decay,
//   m = β1·m + (1−β1)·g,  v = β2·v + (1−β2)·g²
//   p −= lr·( m/(1−β1^t) / (sqrt(v/(1−β2^t)) + eps) + wd·p )
// grad_clip_cuda: the global L2 norm of the gradients (double), and grads
// scaled in place to max_norm when above it.
//
// How. One thread per parameter, grid-stride. The step repeats the CPU twin's
// arithmetic operation for operation: the moments in fp32, the update in
// double, bias corrections 1 − β^t computed on the host in double with pow(),
// as the CPU twin does. Every operation is an explicit round-to-nearest
// intrinsic (__fmul_rn, __dadd_rn, __dsqrt_rn, …) so that nvcc cannot fuse a
// multiply and an add into an FMA, which the CPU twin (ISO C, no contraction)
// does not do: the step gives the CPU twin's bits. The norm: each thread sums
// squares in double over a grid-stride slice, the block reduces by shuffles,
// and the host adds the per-block partials in block order (the order differs
// from the CPU twin's sequential sum, so the norm may differ in its last bits).
//
// Why. Parameters, gradients and moments stay on the device for the whole
// training run; only a scalar (the norm) crosses to the host per step.
#include <math.h>
#include <stdlib.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "indexer_cuda.h"
#include "ops_cuda.h"

enum { ADAM_THREADS = 256, NORM_BLOCKS = 1024 };

// ---- kernels ------------------------------------------------------------------------

__global__ void adamw_kernel(float *params, const float *grads, float *m, float *v, size_t n,
                             const unsigned char *decay_mask, float b1, float b2, double bc1, double bc2, double lr,
                             double eps, double weight_decay) {
    const float one_b1 = __fsub_rn(1.0f, b1), one_b2 = __fsub_rn(1.0f, b2);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float g = grads[i];
        const float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(one_b1, g));
        const float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(one_b2, g), g));
        m[i] = mi, v[i] = vi;
        const double mhat = __ddiv_rn((double)mi, bc1), vhat = __ddiv_rn((double)vi, bc2);
        const double wd = (!decay_mask || decay_mask[i]) ? weight_decay : 0.0;
        const float p = params[i];
        const double step = __dmul_rn(
            lr, __dadd_rn(__ddiv_rn(mhat, __dadd_rn(__dsqrt_rn(vhat), eps)), __dmul_rn(wd, (double)p)));
        params[i] = __fsub_rn(p, __double2float_rn(step));
    }
}

// part[block] = Σ g² over the block's grid-stride slice, in double.
__global__ void sumsq_kernel(double *part, const float *g, size_t n) {
    __shared__ double red[ADAM_THREADS / 32];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * (double)g[i];
    const double t = block_sum(s, red);
    if (threadIdx.x == 0) part[blockIdx.x] = t;
}

__global__ void scale_kernel(float *g, size_t n, float s) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        g[i] = __fmul_rn(g[i], s);
}

// ---- launchers ------------------------------------------------------------------------

extern "C" void adamw_step_cuda(double lr, double beta1, double beta2, double eps, double weight_decay, long t,
                                float *params, const float *grads, float *m, float *v, size_t n,
                                const unsigned char *decay_mask) {
    if (n == 0) return;
    const double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    adamw_kernel<<<grid_for((int64_t)n, ADAM_THREADS), ADAM_THREADS>>>(params, grads, m, v, n, decay_mask, (float)beta1, (float)beta2, bc1,
                                                bc2, lr, eps, weight_decay);
    CUDA_CHECK(cudaGetLastError());
}

extern "C" double grad_clip_cuda(float *grads, size_t n, double max_norm) {
    if (n == 0) return 0.0;
    const int blocks = grid_for((int64_t)n, ADAM_THREADS) < NORM_BLOCKS ? grid_for((int64_t)n, ADAM_THREADS) : NORM_BLOCKS;
    double *part = (double *)cuda_malloc(sizeof(double) * blocks), hpart[NORM_BLOCKS];
    sumsq_kernel<<<blocks, ADAM_THREADS>>>(part, grads, n);
    CUDA_CHECK(cudaGetLastError());
    cuda_to_host(hpart, part, sizeof(double) * blocks);
    cuda_free(part);
    double ss = 0.0;
    for (int b = 0; b < blocks; b++) ss += hpart[b];
    const double norm = sqrt(ss);
    if (max_norm > 0 && norm > max_norm) {
        scale_kernel<<<grid_for((int64_t)n, ADAM_THREADS), ADAM_THREADS>>>(grads, n, (float)(max_norm / norm));
        CUDA_CHECK(cudaGetLastError());
    }
    return norm;
}
