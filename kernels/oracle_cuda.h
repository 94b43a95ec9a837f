// oracle_cuda.h: top-k selection, the attention-mass oracle and attention over
// given supports on the GPU (only with SPINDLE_HAVE_CUDA), the CUDA twins of
// kernels/cpu/topk.c, oracle_attention_cpu and support_attention_cpu (ops.h),
// with the same semantics (docs/design.md "Oracle"). All pointers are device
// pointers; q [T, Hq·dh], k/v [T, Hkv·dh], out [T, Hq·dh], lse [Hq, T] fp32.
// Nothing here allocates a T×T buffer: rows are processed in chunks, and the
// widest buffer is a chunk of rows × T floats.
//
// Tie rule of every top-k (as the CPU twin): larger value first, then lower
// index. Selections are written sorted ascending, padded with −1.
#pragma once
#include <stdint.h>

#include "ops_cuda.h"  // DType

#ifdef __cplusplus
extern "C" {
#endif

// For each row r < rows, with len_r = min(len0 + r·step, cap): the top-k of
// score[r·ld + j] over j < len_r (all of 0..len_r−1 when len_r ≤ k), written
// to sel[r·k ..] ascending then −1, and n_sel[r] = min(len_r, k). k ≥ 1.
// Per-query rows of a query chunk starting at t0: len0 = t0 + 1, step = 1;
// block rows starting at block b0: len0 = (b0 + 1)·bsel, step = bsel, cap = T.
// Rows with len_r ≤ k read no scores (score may be NULL when every row is so).
// Exact: the same indices as topk_support, ±0 counted equal. (topk.cu)
void topk_rows_cuda(int32_t *sel, int32_t *n_sel, const float *score, int rows, int64_t ld, int len0, int step,
                    int cap, int k);

// The oracle's supports (docs/design.md "Oracle"): bsel = 1, T rows, row t = top-k of P_t(j)
// over j ≤ t; bsel = s, ceil(T/s) rows, row b = top-k of A_B(j) = Σ_{t∈B, t≥j}
// P_t(j) over j < end(B). P is rebuilt from q, k and lse (the log-sum-exp of
// scale·q·k per head and query, as attention_forward_cuda writes it).
// sel [rows, topk], n_sel [rows]. Scratch: one [chunk, T] score buffer
// (≤ 256 MB), allocated and freed here (freed in stream order, after the work queued on it). (oracle.cu)
void oracle_select_cuda(int32_t *sel, int32_t *n_sel, const float *q, const float *k, const float *lse, int T,
                        int Hq, int Hkv, int dh, float scale, int topk, int bsel);

// Attention of every head over the given supports (semantics of
// support_attention_cpu): row b = t / bsel holds n_sel[b] sorted key indices at
// sel + b·topk; query t attends to those ≤ t, or to {t} alone when none is.
// When recall / support [T] are not NULL: recall[t] += Σ_{j∈S_t} P_t(j) (needs
// lse; otherwise lse may be NULL) and support[t] += |S_t|. With recall, a
// [T, Hq] scratch is allocated and freed here. (sparse_attention.cu)
void support_attention_cuda(float *out, float *recall, float *support, const float *q, const float *k,
                            const float *v, const float *lse, int T, int Hq, int Hkv, int dh, float scale, int topk,
                            int bsel, const int32_t *sel, const int32_t *n_sel);

// recall[t] += (1/Hq)·Σ_h mass[t·Hq + h] (mass [T, Hq]: each row's Σ_{j∈S_t} P_t(j))
// and support[t] += |S_t| (1 for a query that attends to {t} alone), one thread a
// query, no atomics; either may be NULL (recall needs mass). The statistics step
// of support_attention_cuda and of the tensor-core kernels. (sparse_attention.cu)
void support_attention_counts_cuda(float *recall, float *support, const float *mass, int T, int Hq, int topk, int bsel,
                                   const int32_t *sel, const int32_t *n_sel);

// What a tensor-core support attention adds up besides its output, as
// support_attention_cuda does (recall needs lse [Hq, T]; either sum may be NULL).
typedef struct {
    float *recall, *support;
    const float *lse;
} SupportStatsDev;

// support_attention_cuda at bsel 1 through the shared-tile kernel (one thread
// block per query and KV head, the group's heads sharing each staged key tile),
// slower on an H200 than the default warp kernel; for comparison in the twin
// test and spindle bench ("sparse_attention_tile").
void support_attention_query_tile_cuda(float *out, float *recall, float *support, const float *q, const float *k,
                                       const float *v, const float *lse, int T, int Hq, int Hkv, int dh, float scale,
                                       int topk, const int32_t *sel, const int32_t *n_sel);

// support_attention_cuda from bf16 q, k, v (void*, [T, H·dh] as the fp32 ones),
// on tensor cores where the kernel takes the shape; out [T, Hq·dh] of type
// out_type (DT_F32, or DT_BF16 / DT_F16 rounded to nearest even: the
// o-projection's operand, the bits fp32 out and cuda_f32_to_half give). With st
// (else NULL) also recall / support as support_attention_cuda adds them, a row's
// mass taken from the same bf16-rounded weights its output is made of (the
// warpgroup-MMA kernel is then not used). Same
// semantics: query t of block b = t / bsel attends every head to the keys of
// sel[b] that are ≤ t, or to {t} alone. On the tensor-core path the attention
// weights are rounded to bf16 before they multiply v (as in any bf16 flash
// kernel), so it matches support_attention_cpu on the same bf16-rounded inputs
// up to that rounding (≤ 2⁻⁸ relative per weight), not to fp32 rounding. The
// kernel takes dh ∈ {64, 128}, bsel a multiple of 16 up to 128 and 16-byte
// aligned q, k, v; every other call (dh 256, bsel 1, …) runs
// support_attention_cuda on fp32 copies, inside this op. Asynchronous, like
// any launch. Twin check: tests/twins/oracle.c. (sparse_attention_tc.cu)
void support_attention_block_tc_cuda(void *out, const void *q, const void *k, const void *v, int T, int Hq, int Hkv,
                                     int dh, float scale, int topk, int bsel, const int32_t *sel, const int32_t *n_sel,
                                     DType out_type, const SupportStatsDev *st);
// Σ_b |U_b| over the blocks of ublock consecutive queries (aligned to 0, the
// last one possibly shorter): U_b = ∪_{t ∈ b} (the keys of S_t that are ≤ t, or
// {t} when there is none) — what a block-wise execution of per-query supports
// loads once per block; the GPU side of SupportUnion (kernels/ops.h) for given
// per-query supports (sel [T, topk], n_sel [T], device). Synchronous; −1 when
// the block's bitmap of T bits does not fit in shared memory.
int64_t support_union_keys_cuda(const int32_t *sel, const int32_t *n_sel, int T, int topk, int ublock);

// 1 when support_attention_block_tc_cuda takes the tensor-core path for this
// shape (aligned pointers assumed), 0 when it falls back (for benchmarks).
int support_attention_block_tc_takes(int Hq, int Hkv, int dh, int topk, int bsel);
// support_attention_block_tc_cuda without statistics, for the query blocks [b0, b0 + nb) only (rows
// b0·bsel … of out; the mma.sync kernel whatever SPINDLE_SPARSE_WGMMA says), so that a selection
// computed a chunk of blocks at a time can be attended chunk by chunk. -1, nothing launched, where that
// kernel does not take the call (support_attention_block_tc_takes, or rows not 16-byte aligned).
int support_attention_block_tc_range_cuda(void *out, const void *q, const void *k, const void *v, int T, int Hq,
                                          int Hkv, int dh, float scale, int topk, int bsel, const int32_t *sel,
                                          const int32_t *n_sel, DType out_type, int b0, int nb);

// The same attention on Hopper's warpgroup MMA (sparse_attention_wg.cu, sm_90a): what
// support_attention_block_tc_cuda runs under SPINDLE_SPARSE_WGMMA=1 where this takes the shape (d_h 64
// or 128, a group of query heads whose rows hpc·bsel ≤ 128 are a multiple of 64). Returns 0 when it
// launched, −1 when it does not take the call (shape, or a device that is not sm_90). Same semantics and
// the same bf16 rounding of the weights as the mma.sync kernel. Twin check: tests/twins/oracle.c.
// SPINDLE_SPARSE_WGMMA=2 runs its variant of one thread block an SM instead (the same values, a variant to
// time; sparse_attention_wg.cu says why). ..._minb_cuda runs the kernel of minb thread blocks an SM
// (2: the default, 1: the variant) whatever the environment says (bench times both).
int support_attention_block_wg_cuda(void *out, DType out_type, const void *q, const void *k, const void *v, int T,
                                    int Hq, int Hkv, int dh, float scale, int topk, int bsel, const int32_t *sel,
                                    const int32_t *n_sel);
int support_attention_block_wg_minb_cuda(int minb, void *out, DType out_type, const void *q, const void *k,
                                         const void *v, int T, int Hq, int Hkv, int dh, float scale, int topk,
                                         int bsel, const int32_t *sel, const int32_t *n_sel);
int support_attention_block_wg_takes(int Hq, int Hkv, int dh, int bsel);

// Per-query supports (sel [T, topk], n_sel [T]: support_attention_cuda's
// bsel 1) executed on tensor cores in blocks of ublock queries: each block
// gathers the union of its queries' visible keys (query t's keys ≤ t) as dense
// 64-key tiles once for the G query heads of a KV head, and a per-query
// membership mask keeps for each query exactly its own keys — the output is
// per-query sparse attention, not a block-shared one (a query with no visible
// key attends to {t} alone). q, k, v bf16 as support_attention_block_tc_cuda,
// with the same bf16 rounding of the weights; the union's bitmap lives in
// shared memory (8 bytes per 32 keys: T up to about 900K on an H200). Shapes
// that path does not take run support_attention_cuda (bsel 1) on fp32 copies.
// st (may be NULL): recall / support per query as support_attention_block_tc_cuda
// adds them. *union_keys (may be NULL) = Σ_b |U_b|, the keys the blocks gathered.
// Synchronises once (the union sizes come to the host to place the arrays).
// Twin check: tests/twins/oracle.c. (sparse_attention_tc.cu)
void support_attention_union_tc_cuda(void *out, const void *q, const void *k, const void *v, int T, int Hq, int Hkv,
                                     int dh, float scale, int topk, int ublock, const int32_t *sel,
                                     const int32_t *n_sel, DType out_type, const SupportStatsDev *st,
                                     int64_t *union_keys);
// 1 when support_attention_union_tc_cuda takes the tensor-core path.
int support_attention_union_tc_takes(int T, int Hq, int Hkv, int dh, int topk, int ublock);

// oracle_select_cuda for bf16 q, k (void*, [T, H·dh] as the fp32 ones): on
// tensor cores the same rows (P per query, A_B per block) from bf16 products
// summed in fp32, the same exact top-k. lse fp32 [Hq, T] as given. The kernel
// takes dh ∈ {64, 128, 256}, bsel = 1 or a multiple of 16 up to 128, and group
// sizes whose staged q rows fit in shared memory (dh 256, G 4: bsel ≤ 64);
// anything else runs oracle_select_cuda on fp32 copies of q, k inside this op.
// Judged by tests/twins/oracle.c against double-precision P over the same
// bf16-rounded q, k. (oracle_tc.cu)
void oracle_select_bf16_cuda(int32_t *sel, int32_t *n_sel, const void *q, const void *k, const float *lse, int T,
                             int Hq, int Hkv, int dh, float scale, int topk, int bsel);
// 1 when oracle_select_bf16_cuda takes the tensor-core path for this shape
// (aligned pointers assumed), 0 when it falls back (for benchmarks).
int oracle_select_tc_takes(int Hq, int Hkv, int dh, int topk, int bsel);
// The warps per 16 query rows over which oracle_select_bf16_cuda splits the heads it stages, for this shape and
// SPINDLE_ORACLE_WARP_HEADS (docs/performance.md, "Oracle selection"): by default 3 where 6 heads are staged,
// else 1.
int oracle_select_tc_warp_heads(int Hq, int Hkv, int dh, int bsel);
// Per query (bsel 1): the warps per 16 query rows over which the key-split kernel divides each 64-key tile (1, 2
// or 4; SPINDLE_ORACLE_KEY_SPLIT sets it, by default the fewest that give an SM 16 warps), or 0 where the kernel
// with one warp per 16 rows runs (SPINDLE_ORACLE_KEY_SPLIT=0, or bsel > 1).
int oracle_select_tc_key_split(int Hq, int Hkv, int dh, int bsel);
// The head groups of the keys-major block-shared kernel for this shape (4 warps each; SPINDLE_ORACLE_HEAD_GROUPS
// caps them), or 0 where it does not run: per query, or with SPINDLE_ORACLE_BLOCK_ROWS=1 (the query-major one).
int oracle_select_tc_head_groups(int Hq, int Hkv, int dh, int bsel);

// oracle_attention_cpu on the GPU: lse (dense attention's), oracle_select_cuda,
// support_attention_cuda. With topk ≥ T it equals dense attention.
void oracle_attention_cuda(float *out, float *recall, float *support, const float *q, const float *k,
                           const float *v, int T, int Hq, int Hkv, int dh, float scale, int topk, int bsel);

#ifdef __cplusplus
}
#endif
