// ops_cuda.h: the CUDA twin API (only with SPINDLE_HAVE_CUDA). Plain C, no CUDA
// types: device pointers are float* (fp32) or void* (bf16 storage, 2 bytes per
// element). Each op keeps its CPU twin's name (ops.h) with _cuda, its argument
// order (outputs → inputs → dimensions) and its semantics; the CPU twin is the
// reference, and tests/test_cuda_twins.c judges every op here against it.
//
// Launches go to the default stream (or a side stream: cuda_stream_use); ops are asynchronous like any kernel
// launch, and cuda_sync() waits for them. Device faults abort with the failing
// statement, function, file and line (kernels/cuda/cuda_check.cuh): they are
// never a user's input error.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ops.h"  // Act (the gated MLP's activation), shared with the CPU twin; C linkage here too

// ---- helpers (kernels/cuda/common.cu) ----------------------------------------

// Number of usable GPUs, 0 when there is none or no driver (any error from
// cudaGetDeviceCount counts as none; never aborts). When why is not NULL it
// receives a one-line reason for 0 or the name of device 0.
int cuda_available(char *why, size_t len);
// Device memory; cuda_malloc aborts on failure, caller frees with cuda_free.
void *cuda_malloc(size_t bytes);
void cuda_free(void *p);
void cuda_to_device(void *dst, const void *src, size_t bytes);
void cuda_to_host(void *dst, const void *src, size_t bytes);
// Columns [c0, c0 + n) of the device matrix src [rows, C] into dst [rows, n] (device; stream-ordered).
void cuda_copy_cols(float *dst, const float *src, int rows, int C, int c0, int n);
// Fills bytes of device memory with the byte value (0xFF makes every float NaN:
// the tests poison outputs with it before each op).
void cuda_memset(void *p, int value, size_t bytes);
void cuda_sync(void);
// Two side streams (1, 2; 0 is the default stream) for overlapping independent
// work. cuda_stream_use(s) sends spindle's own kernel launches (launch_checked,
// device_util.cuh) to stream s until the next call; cuBLAS, copies, memsets and
// allocations stay on the default stream. cuda_stream_after(w, s): what is
// queued on w from now on waits for what is queued on s so far. The side
// streams are blocking streams: the default stream waits for them and they for
// it, so work on them overlaps only with each other, between two operations of
// the default stream; a caller allocates its buffers before and frees them after.
void cuda_stream_use(int s);
void cuda_stream_after(int waiter, int signaler);
// Bytes allocated through cuda_malloc and not freed; the peak of that since the
// last reset (library workspaces — cuBLAS, cuDNN — are not counted).
size_t cuda_mem_live(void);
size_t cuda_mem_peak(void);
void cuda_mem_peak_reset(void);
// Bytes of device memory in use on the current device (cudaMemGetInfo: total −
// free): everything, spindle's allocations, what the stream-ordered pool keeps
// after a free, library workspaces and the CUDA context alike.
size_t cuda_mem_device_used(void);
// Median milliseconds of reps calls of fn(ctx) after warmup calls, CUDA events
// around each call; all[reps] (may be NULL) receives every sample.
double cuda_time_ms(void (*fn)(void *), void *ctx, int warmup, int reps, double *all);
// x[i] = uniform in [lo, hi) from a hash of (seed, i): reproducible random
// device data (synthetic weights and benchmark inputs).
void cuda_fill_uniform(float *x, int64_t n, float lo, float hi, uint64_t seed);
// dst[i] = bf16(src[i]) (round to nearest even) / src[i] widened to fp32.
void cuda_f32_to_bf16(void *dst, const float *src, int64_t n);
void cuda_bf16_to_f32(float *dst, const void *src, int64_t n);
// The two 16-bit storage types; the same conversions for either.
typedef enum { HALF_BF16 = 0, HALF_F16 = 1 } HalfType;
// The storage type of an op's output where it can be any of the three
// (e.g. support_attention_block_tc_cuda): fp32, or rounded to bf16 / f16
// (nearest even; the bits cuda_f32_to_half gives).
typedef enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2 } DType;
void cuda_f32_to_half(void *dst, const float *src, int64_t n, HalfType h);
void cuda_half_to_f32(float *dst, const void *src, int64_t n, HalfType h);

// ---- ops ----------------------------------------------------------------------

// out[T, C_out] = in[T, C_in] · w[C_out, C_in]ᵀ (+ bias[C_out] if not NULL).
// fp32 in, out and arithmetic: cublasSgemm with TF32 off (the reference mode).
void matmul_forward_cuda(float *out, const float *in, const float *w, const float *bias, int T, int C_in,
                         int C_out);
// The same with bf16 storage of in and w (void* to bf16), fp32 accumulation and
// fp32 out (cublasGemmEx, CUBLAS_COMPUTE_32F); bias stays fp32.
void matmul_forward_bf16_cuda(float *out, const void *in, const void *w, const float *bias, int T,
                              int C_in, int C_out);
// The same for either 16-bit type (in and w both of type h).
void matmul_forward_half_cuda(float *out, const void *in, const void *w, const float *bias, int T, int C_in,
                              int C_out, HalfType h);

// out = in · wᵀ with 16-bit operands of type h and a 16-bit out of the same
// type: fp32 accumulation, the result rounded once (nearest even) in the GEMM's
// epilogue. No bias. For products only an element-wise op reads (gate, up).
void matmul_forward_half_out_cuda(void *out, const void *in, const void *w, int T, int C_in, int C_out, HalfType h);

// x[T, C_out] += in[T, C_in] · wᵀ: matmul_forward followed by residual_forward
// (the residual stream's update) as one GEMM with β = 1, the product added to x
// in fp32 without a [T, C_out] intermediate. No bias (a biased projection goes
// through matmul_forward). fp32 operands, or 16-bit ones of type h.
void matmul_accumulate_cuda(float *x, const float *in, const float *w, int T, int C_in, int C_out);
void matmul_accumulate_half_cuda(float *x, const void *in, const void *w, int T, int C_in, int C_out, HalfType h);

// out[r, :] = in[r, :] / sqrt(mean(in[r, :]²) + eps) · w, for rows r < R. out may alias in.
void rmsnorm_forward_cuda(float *out, const float *in, const float *w, int R, int C, float eps);
// The same, rounded to bf16 / f16 into out (a GEMM's operand; the bits
// rmsnorm_forward_cuda and then cuda_f32_to_half give). out must not alias in.
void rmsnorm_forward_half_cuda(void *out, const float *in, const float *w, int R, int C, float eps, HalfType h);

// Rotates x[T, H, dh] in place, "rotate half" layout, cos/sin [T, rot/2] (as the CPU twin).
void rope_forward_cuda(float *x, const float *cos, const float *sin, int T, int H, int dh, int rot);
// Per head row of x [T, H, dh], in place: RMSNorm with gain w [dh] (w NULL:
// no norm), then RoPE as rope_forward_cuda (rot 0: none) — rmsnorm_forward_cuda
// over the T·H rows and rope_forward_cuda in one pass (the norm's sum in
// another order: fp32 rounding apart). x16 (may be NULL) gets the result
// rounded to type h too. dh ≤ 1024.
void head_norm_rope_cuda(float *x, void *x16, const float *w, const float *cos, const float *sin, int T, int H,
                         int dh, int rot, float eps, HalfType h);

// out[i] = act(gate[i]) · up[i] (act: ACT_SILU or ACT_GELU_TANH, as
// glu_forward_cpu). out may alias gate. (glu.cu)
void glu_forward_cuda(float *out, const float *gate, const float *up, int64_t n, Act act);
// The same, rounded to bf16 / f16 into out (the down projection's operand).
void glu_forward_half_cuda(void *out, const float *gate, const float *up, int64_t n, Act act, HalfType h);
// The same from 16-bit gate and up of type h (fp32 arithmetic). out may alias gate.
void glu_forward_half_in_cuda(void *out, const void *gate, const void *up, int64_t n, Act act, HalfType h);

// Causal GQA attention, fp32, flash style (online softmax over key tiles, no T×T
// buffer). q [T, Hq·dh], k/v [T, Hkv·dh], out [T, Hq·dh]; lse [Hq, T] (may be
// NULL) gets each row's log-sum-exp of scale·q·k. dh ≤ 256. window as
// attention_forward_cpu: 0 causal, W > 0 key j visible to query t iff
// t − W < j ≤ t (key tiles wholly outside every row's window are skipped).
void attention_forward_cuda(float *out, float *lse, const float *q, const float *k, const float *v, int T,
                            int Hq, int Hkv, int dh, float scale, int window);
// attention_cached_cpu (ops.h) on the device: n queries at positions p0.. over
// the cache rows 0..p0+n−1 of k_cache / v_cache (device arrays, fp32). For the
// few queries of a decoding step (one block per query and head; a scratch of
// n·Hq·(p0+n) floats for the scores).
void attention_cached_cuda(float *out, const float *q, const float *k_cache, const float *v_cache, int p0, int n,
                           int Hq, int Hkv, int dh, float scale, int window);

// ---- glue of the forward pass (kernels/cuda/elementwise.cu) ---------------------------

// out[t, :] = table[ids[t], :] · scale for t < T (one fp32 multiply: Gemma's
// × sqrt(d_model); scale 1 is the row exactly); ids is a device array of T
// valid row indices, table [rows, C] fp32 / bf16 (void*), out [T, C] fp32.
void embedding_forward_cuda(float *out, const int32_t *ids, const float *table, int T, int C, float scale);
void embedding_forward_bf16_cuda(float *out, const int32_t *ids, const void *table, int T, int C, float scale);

// x[i] = cap · tanh(x[i] / cap) in place (soft-capping), as softcap_forward_cpu.
void softcap_forward_cuda(float *x, int64_t n, float cap);

// out[i] = a[i] + b[i] (the residual stream). out may alias a or b.
void residual_forward_cuda(float *out, const float *a, const float *b, int64_t n);

// ---- gates and mixture of experts (kernels/cuda/moe.cu) ------------------------------

// sigmoid_mul_cpu, sigmoid_scale_rows_cpu, moe_route_cpu (ops.h) on the device.
void sigmoid_mul_cuda(float *x, const float *g, int64_t n);
void sigmoid_scale_rows_cuda(float *x, const float *g, int rows, int cols);
void moe_route_cuda(int *idx, float *wt, const float *logits, int T, int E, int k, int renorm);
// moe_experts_cpu on the device: x, out [T, H], idx, wt [T, k] device arrays;
// w_gate, w_up, w_down host arrays of E device pointers to fp32 matrices. The
// (token, slot) pairs are bucketed by expert on the host (a copy of idx and wt),
// each expert's GEMMs run over its tokens, and each token's k contributions are
// added in ascending expert order (the CPU twin's order). Synchronises.
void moe_experts_cuda(float *out, const float *x, const int *idx, const float *wt, const float *const *w_gate,
                      const float *const *w_up, const float *const *w_down, int T, int H, int E, int inter, int k,
                      Act act);

// ---- Gated DeltaNet (kernels/cuda/deltanet.cu) ---------------------------------------

// The CPU twins' ops (ops.h, kernels/cpu/deltanet_cpu.c) on device arrays, same
// arguments and semantics; fp32 throughout.
void causal_conv1d_cuda(float *out, const float *x, const float *w, const float *bias, int T, int C, int K,
                        int apply_silu);
void l2norm_rows_cuda(float *x, int rows, int C, float eps);
void gated_rmsnorm_cuda(float *out, const float *x, const float *z, const float *w, int rows, int C, float eps);
void deltanet_gates_cuda(float *g, float *beta, const float *a, const float *b, const float *A_log,
                         const float *dt_bias, int T, int Hv);
// gated_delta_rule_chunked_cpu on the device: q, k [T, Hk, dk] and v [T, Hv, dv]
// stored as dt (DT_F32, DT_BF16 or DT_F16; widened to fp32 on load), g, beta
// [T, Hv], state_in / state_out [Hv, dk, dv] (either may be NULL; they may
// alias) and o [T, Hv, dv] fp32; fp32 state and arithmetic. 1 ≤ dk, dv ≤ 256,
// 1 ≤ chunk ≤ 64 (64 is the fast case), any T ≥ 0. Uses a workspace of up to
// about 512 MiB, kept between calls (a long T goes through in segments).
void gated_delta_rule_chunked_cuda(float *o, float *state_out, const void *q, const void *k, const void *v,
                                   const float *g, const float *beta, const float *state_in, int T, int Hk,
                                   int Hv, int dk, int dv, float scale, int qk_l2norm, int chunk, DType dt);
// Tests and benches: chunks per segment of gated_delta_rule_chunked_cuda (0: as
// many as the workspace cap allows; small values cross segment boundaries at
// small T) and the state pass's column tile (16 or 32; 0: the default, 32).
// Both only change how the work is split, not the result.
void gated_delta_rule_cuda_tune(int segment_chunks, int state_tile);

// ---- scoring (kernels/cuda/score.cu) ----------------------------------------------

// next_token_stats_cpu (ops.h) on the device: ld, ls [rows, V] fp32 logits (ls
// may be NULL: dense only), next [rows], outputs [rows]: device arrays. One
// thread block per row; sums in double, so the results match the CPU twin's to
// double rounding (argmax ties: the lowest index, as there).
void next_token_stats_cuda(double *nll_d, double *nll_s, double *kl, int32_t *top1, const float *ld,
                           const float *ls, const int32_t *next, int rows, int V);

// The check of the warpgroup MMA pieces (kernels/cuda/wgmma.cuh, wgmma_check.cu): C [64][64] fp32 =
// A [64][K] · B on one warpgroup, A row-major bf16, B bf16 as [64][K] (trans_b 0: C = A·Bᵀ, B staged
// K-major) or [K][64] (trans_b 1: C = A·B, staged MN-major); K a multiple of 16, at most 256. Returns 0,
// −1 for a bad K, −2 on a device that is not sm_90 (the code is sm_90a's).
int wgmma_check_cuda(float *C, const void *A, const void *B, int K, int trans_b);

#ifdef __cplusplus
}
#endif
