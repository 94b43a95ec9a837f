// cublas_check.cuh: cuBLAS status checks (as CUDA_CHECK: statement, function,
// file, line, then abort) and the one cuBLAS handle the twin shares.
#pragma once
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>

#define CUBLAS_CHECK(stmt)                                                                  \
    do {                                                                                    \
        cublasStatus_t st_ = (stmt);                                                        \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            fprintf(stderr, "spindle: cuBLAS error %s (%d) in %s at %s:%d: %s\n",           \
                    cublasGetStatusName(st_), (int)st_, __func__, __FILE__, __LINE__,       \
                    #stmt);                                                                 \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

// Created on first use (common.cu), on the default stream, math mode
// CUBLAS_DEFAULT_MATH (no TF32: fp32 GEMMs stay fp32) with reduced-precision
// split-K reductions disallowed. Never freed.
cublasHandle_t cuda_cublas_handle(void);
