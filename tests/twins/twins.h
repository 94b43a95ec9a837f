// twins.h: the harness shared by the parts of test_cuda_twins (one binary):
// seeded random inputs, device copies, NaN-poisoned outputs and the one
// comparison every check goes through. Each part is a file tests/twins/X.c
// with one entry point twins_X(quick) that runs its cases; quick keeps sizes
// small for compute-sanitizer runs.
#pragma once
#include <math.h>
#include <stdint.h>

// Random numbers (splitmix64, seeded once by main from SPINDLE_SEED or time).
void twins_seed(uint64_t seed);
uint64_t twins_u64(void);
double uniform01(void);
float normal(void);
// Host arrays (abort on allocation failure): n normals of sd, or uninitialised.
float *randn(int64_t n, float sd);
float *host_alloc(int64_t n);
// Device copy of a host array; an all-NaN device array; a host copy of a device
// array (synchronises first). Free with cuda_free / free.
float *dev_from(const float *h, int64_t n);
float *dev_poisoned(int64_t n);
float *host_from_dev(const float *d, int64_t n);
// Same for int32 arrays (poison: every int is -1 after memset 0xFF).
int32_t *dev_from_i32(const int32_t *h, int64_t n);
int32_t *host_from_dev_i32(const int32_t *d, int64_t n);
// bf16 round to nearest even, as __float2bfloat16_rn (finite inputs).
float bf16_round(float x);
// f16 round to nearest even, as __float2half_rn (inputs in f16's range).
float f16_round(float x);

// Compares gpu with ref (n values) for the op named op (a string literal; the
// summary groups by it): fails on a non-finite gpu value, on nmse =
// Σ(gpu − ref)² / Σ ref² > tol_nmse, or on max|err| > tol_rel_max·max(1, max|ref|).
// Prints one line. Returns 1 when it passed.
int compare(const char *op, const char *shape, const float *gpu, const float *ref, int64_t n, double tol_nmse,
            double tol_rel_max);
// compare with the nmse taken relative to max(Σ ref², ref_sq_floor): for a
// result whose reference can cancel to rounding level while the terms it sums
// do not (a gradient over a few sampled queries), ref_sq_floor is the squared
// norm of the same quantity at its natural size. compare() is floor 0.
int compare_floor(const char *op, const char *shape, const float *gpu, const float *ref, int64_t n,
                  double tol_nmse, double tol_rel_max, double ref_sq_floor);
// Σ v² in double (a floor for compare_floor).
double sum_sq(const float *v, int64_t n);
// Records a check that is not a float comparison (e.g. a set comparison):
// ok or not, with a one-line detail.
void record(const char *op, const char *shape, int ok, const char *detail);
// Prints the per-op table; returns the number of failures.
int twins_summary(void);

// fp32 tolerances, bf16 tolerances (see test_cuda_twins.c).
#define F32_NMSE 1e-10
#define F32_MAX 2e-5
#define BF_SAME_NMSE 1e-9
#define BF_SAME_MAX 1e-4
#define BF_F32_NMSE 1e-4

// The parts.
void twins_backbone(int quick);  // test_cuda_twins.c: GEMM, norms, RoPE, SwiGLU, attention, glue
void twins_oracle(int quick);    // tests/twins/oracle.c: top-k select, oracle supports, sparse attention
void twins_indexer(int quick);   // tests/twins/indexer.c: indexer scores, select, fused KL loss/grads, AdamW
void twins_sdpa(int quick);      // tests/twins/sdpa.c: bf16 dense attention (cuDNN SDPA)
void twins_score(int quick);     // tests/twins/score.c: next-token scoring (eval), backbone_score
void twins_hybrid(int quick);    // tests/twins/hybrid.c: sigmoid gates, MoE router and experts
void twins_deltanet(int quick);  // tests/twins/deltanet.c: Gated DeltaNet (chunked delta rule, conv1d, norms, gates)
void twins_wgmma(int quick);     // tests/twins/wgmma.c: Hopper's warpgroup MMA pieces (kernels/cuda/wgmma.cuh)
