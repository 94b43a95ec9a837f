// cuda_check.cuh: device faults abort with the failing statement, function,
// file and line. They are never a user's input error, so they do not go
// through Status.
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK(stmt)                                                                    \
    do {                                                                                    \
        cudaError_t err_ = (stmt);                                                          \
        if (err_ != cudaSuccess) {                                                          \
            fprintf(stderr, "spindle: CUDA error %s (%s) in %s at %s:%d: %s\n",             \
                    cudaGetErrorName(err_), cudaGetErrorString(err_), __func__, __FILE__,   \
                    __LINE__, #stmt);                                                       \
            abort();                                                                        \
        }                                                                                   \
    } while (0)
