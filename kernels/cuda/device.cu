// device.cu: what the CUDA build can see (`spindle info` prints it): the GPU
// count and device 0, on which every CUDA op launches.
#include <stdio.h>

#include "cuda_check.cuh"
#include "cuda_device.h"

extern "C" int cuda_device_describe(char *buf, size_t len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || n == 0) {
        snprintf(buf, len, "built with CUDA %d.%d; no usable GPU (%s)", CUDART_VERSION / 1000,
                 CUDART_VERSION % 1000 / 10, err == cudaSuccess ? "none found" : cudaGetErrorString(err));
        return 0;
    }
    CUDA_CHECK(err);
    cudaDeviceProp p;
    CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
    snprintf(buf, len, "%d GPU(s); device 0: %s, sm_%d%d, %.1f GiB", n, p.name, p.major, p.minor,
             p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return n;
}
