// cublas_v2.h stand-in for the emulation (tests/emu): the few cuBLAS calls the
// emulated host code makes, carried out by OpenBLAS on host memory. Column-major
// as cuBLAS; the TF32 compute type is computed in fp32 (the emulation checks
// indexing and the kernels' algebra, not TF32 rounding).
#pragma once
#include <cblas.h>

typedef struct EmuCublas *cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

inline const char *cublasGetStatusName(cublasStatus_t s) { return s ? "CUBLAS_STATUS_INVALID_VALUE" : "CUBLAS_STATUS_SUCCESS"; }
inline CBLAS_TRANSPOSE emu_op(cublasOperation_t o) { return o == CUBLAS_OP_T ? CblasTrans : CblasNoTrans; }
inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                                  float *C, int ldc) {
    cblas_sgemm(CblasColMajor, emu_op(ta), emu_op(tb), m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}
// fp32 operands only (what the emulated code passes).
inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                                   cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                                   cublasComputeType_t, cublasGemmAlgo_t) {
    if (at != CUDA_R_32F || bt != CUDA_R_32F || ct != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
    return cublasSgemm(h, ta, tb, m, n, k, (const float *)alpha, (const float *)A, lda, (const float *)B, ldb,
                       (const float *)beta, (float *)C, ldc);
}
