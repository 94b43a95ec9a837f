// mma.cuh: the warp-level tensor-core pieces shared by the bf16 kernels
// (sparse_attention_tc.cu, indexer_block_tc.cu): ldmatrix loads, the
// m16n8k16 bf16 mma with fp32 accumulators, bf16x2 packing, and reductions
// over the quad of 4 lanes that share a row of an mma fragment; and for the
// fp32-accurate scores of indexer.cu, the m16n8k8 tf32 mma and the split of
// an fp32 value into two tf32 parts (cvt.rna).
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, c = lane % 4):
//   A 16×16 (4 × b32): rows g and g+8, columns 2c, 2c+1 and the same + 8, in
//     the order (g, 2c), (g+8, 2c), (g, 2c+8), (g+8, 2c+8);
//   B 16×8 (2 × b32): k rows 2c, 2c+1 and 2c+8, 2c+9, column g;
//   C 16×8 (4 × f32): rows g (0, 1) and g+8 (2, 3), columns 2c, 2c+1.
// ldmatrix.x4 from a row-major 16×16 tile whose lane l points at row
// (l % 8) + 8·((l / 8) % 2), column 8·(l / 16) gives that A fragment; from a
// row-major [n][k] tile (lane l at row l % 8, column 8·(l / 8)) it gives the
// B fragments of two k-steps of one 8-wide n-tile; with .trans from a
// row-major [k][n] tile (lane l at row (l % 8) + 8·((l / 8) % 2), column
// 8·(l / 16)) the B fragments of one k-step of two n-tiles.
//
// mma.m16n8k8 with tf32 operands (one 32-bit value a register): A 16×8 (4 ×
// b32): (g, c), (g+8, c), (g, c+4), (g+8, c+4); B 8×8 (2 × b32): k rows c and
// c+4, column g; C as above. A row of 4 fp32 values is 16 bytes, one ldmatrix
// row: from a row-major fp32 tile, ldmatrix.x4 at lane row (l % 8) + 8·((l / 8)
// % 2), column 4·(l / 16) gives the A fragment of one k-step, and ldmatrix.x2
// from a row-major [n][k] tile (lane l < 16 at row l % 8, column 4·(l / 8))
// the B fragment of one k-step of an 8-wide n-tile.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <stdint.h>

#include "device_util.cuh"

#ifdef SPINDLE_CUDA_EMULATION
// tests/emu: ldmatrix and mma.sync as exchanges among the warp's host threads.
#include "emu_mma.h"
#else
static __device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// d += a·b, m16n8k16, bf16 inputs, fp32 accumulators.
static __device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ void ldsm_x2(uint32_t r[2], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(p)));
}

// d += a·b, m16n8k8, tf32 inputs (fp32 bit patterns whose low 13 bits are zero), fp32 accumulators.
static __device__ __forceinline__ void mma_tf32(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// x rounded to tf32 (cvt.rna: to nearest, ties away from zero, 10 mantissa bits), as an fp32 value
// whose low 13 bits are zero.
static __device__ __forceinline__ float tf32_rna(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}
#endif

// The "3xTF32" split: x = hi + lo + e with hi = tf32(x), lo = tf32(x − hi) (x − hi is exact in fp32),
// |e| ≤ 2^-22·|x|. A product x·y is then hi_x·hi_y + hi_x·lo_y + lo_x·hi_y, each term exact in fp32,
// up to about 3·2^-22 relative (lo_x·lo_y and the e terms dropped): fp32-level products from three
// tf32 mmas.
static __device__ __forceinline__ void tf32_split(float x, float *hi, float *lo) {
    const float h = tf32_rna(x);
    *hi = h, *lo = tf32_rna(x - h);
}

// Two floats as bf16x2 (lo in the low half), and what they round to.
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi, float *lo_r, float *hi_r) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    *lo_r = __low2float(p), *hi_r = __high2float(p);
    return *(const uint32_t *)&p;
}

static __device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

static __device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// S = Q·Kᵀ for one warp: its 16 query rows (qrow: this lane's ldmatrix row
// pointer into a row-major [rows][ldh] bf16 tile, as for an A fragment) against
// the 8·NS key rows of the row-major [keys][ldh] tile Ks, over D dims. s[j]
// gets the C fragment of keys 8j … 8j+7 (zeroed first). K's B fragments come
// straight from its rows: ldmatrix.x4 at lane row l % 8, column 8·(l / 8)
// covers keys 8j … 8j+7 × dims 16kk … 16kk+31, two k-steps.
template <int D, int NS>
static __device__ __forceinline__ void mma_qk_tile(float s[NS][4], const __nv_bfloat16 *qrow,
                                                   const __nv_bfloat16 *Ks, int ldh) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < NS; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
    const __nv_bfloat16 *krow = Ks + (lane % 8) * ldh + 8 * (lane / 8);
#pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t qa[4], qb[4];
        ldsm_x4(qa, qrow + 16 * kk);
        ldsm_x4(qb, qrow + 16 * kk + 16);
#pragma unroll
        for (int j = 0; j < NS; j++) {
            uint32_t bk[4];
            ldsm_x4(bk, krow + 8 * j * ldh + 16 * kk);
            mma_bf16(s[j], qa, bk[0], bk[1]);
            mma_bf16(s[j], qb, bk[2], bk[3]);
        }
    }
}

// Column sums over a warp's 16 rows: v0, v1 are this lane's values of columns
// 2c and 2c + 1 of n-tile j (its two rows already added); the 8 lanes that
// share those columns (same c) are summed and lanes with g = 0 store the
// n-tile's 8 totals at out[8j … 8j + 7].
static __device__ __forceinline__ void warp_colsum_store(float *out, int j, float v0, float v1) {
    const int lane = threadIdx.x % 32, c = lane % 4;
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        v0 += __shfl_xor_sync(0xffffffffu, v0, off);
        v1 += __shfl_xor_sync(0xffffffffu, v1, off);
    }
    if (lane < 4) out[8 * j + 2 * c] = v0, out[8 * j + 2 * c + 1] = v1;
}

// Row padding of every bf16 tile in shared memory here: 8 elements (16 bytes)
// keep rows 16-byte aligned for cp.async / ldmatrix and shift consecutive rows
// by 4 banks, so the 8 row reads of an ldmatrix hit distinct banks.
enum { TILE_PAD = 8 };

// Stages a ROWS × D bf16 tile into dst [ROWS][D + TILE_PAD] with cp.async in
// 16-byte chunks: tile row j < n comes from src + r·stride, r = rows[j] when
// GATHER, else j (contiguous rows; rows unused); rows j ≥ n are set to zero, so
// masked weights never meet garbage. GATHER is a template parameter so that
// neither form pays for the other in registers. Every thread of the block
// takes part; not waited for (commit and wait outside).
template <int D, int ROWS, bool GATHER>
static __device__ __forceinline__ void cp_async_rows(__nv_bfloat16 *dst, const __nv_bfloat16 *src, int64_t stride,
                                                     const int32_t *rows, int n) {
    constexpr int CH = D / 8, LDH = D + TILE_PAD;
    for (int e = threadIdx.x; e < ROWS * CH; e += blockDim.x) {
        const int j = e / CH, c = e % CH;
        __nv_bfloat16 *d = dst + j * LDH + 8 * c;
        if (j < n) __pipeline_memcpy_async(d, src + (int64_t)(GATHER ? rows[j] : j) * stride + 8 * c, 16);
        else *(uint4 *)d = make_uint4(0u, 0u, 0u, 0u);
    }
}

// Keys-major sums (the block-shared selections, indexer_block_tc.cu and oracle_tc.cu): S transposed for one
// warp, its 16 keys (krow: this lane's ldmatrix row pointer into the key tile, as for an A fragment) × the
// 8·NQ query rows of Qrows (row-major [queries][D + TILE_PAD] bf16), and per key the sum over those
// queries of p = 2^(s·scale_log2 − L) with L = lse[query] (log2 units; +∞ for rows past the last query;
// one fused multiply-add and fast_exp2 a score, a p under 2^-126 counting 0): this lane's keys ka, kb
// (rows g and g + 8 of the 16) add their share into *sum_a, *sum_b (the quad's four lanes then hold the
// four parts). MASK: p = 0 where the key is after the query (query positions
// tq0 + r); without it every query of the chunk is at or after both keys.
template <int D, int NQ, bool MASK>
static __device__ __forceinline__ void key_sums_tile(float *sum_a, float *sum_b, const __nv_bfloat16 *krow,
                                                     const __nv_bfloat16 *Qrows, const float *lse, int tq0, int ka,
                                                     int kb, float scale_log2) {
    const int c = threadIdx.x % 4;
    float s[NQ][4];
    mma_qk_tile<D, NQ>(s, krow, Qrows, D + TILE_PAD);
#pragma unroll
    for (int j = 0; j < NQ; j++) {
        const int r = 8 * j + 2 * c, tq = tq0 + r;  // queries r, r + 1 of the chunk
        const float2 L = *(const float2 *)(lse + r);
        const float a0 = fast_exp2(fmaf(s[j][0], scale_log2, -L.x)), a1 = fast_exp2(fmaf(s[j][1], scale_log2, -L.y));
        const float b0 = fast_exp2(fmaf(s[j][2], scale_log2, -L.x)), b1 = fast_exp2(fmaf(s[j][3], scale_log2, -L.y));
        if (MASK) {
            *sum_a += (ka <= tq ? a0 : 0.0f) + (ka <= tq + 1 ? a1 : 0.0f);
            *sum_b += (kb <= tq ? b0 : 0.0f) + (kb <= tq + 1 ? b1 : 0.0f);
        } else {
            *sum_a += a0 + a1;
            *sum_b += b0 + b1;
        }
    }
}

// key_sums_tile over a chunk of n ∈ {16, 32, 48, 64} queries, the mask chosen at run time.
template <int D>
static __device__ __forceinline__ void key_sums_chunk(float *sum_a, float *sum_b, const __nv_bfloat16 *krow,
                                                      const __nv_bfloat16 *Qrows, const float *lse, int n, int tq0,
                                                      int ka, int kb, float scale_log2, bool mask) {
#define KEY_SUMS(NQ)                                                                                   \
    (mask ? key_sums_tile<D, NQ, true>(sum_a, sum_b, krow, Qrows, lse, tq0, ka, kb, scale_log2)       \
          : key_sums_tile<D, NQ, false>(sum_a, sum_b, krow, Qrows, lse, tq0, ka, kb, scale_log2))
    if (n == 64) KEY_SUMS(8);
    else if (n == 48) KEY_SUMS(6);
    else if (n == 32) KEY_SUMS(4);
    else KEY_SUMS(2);
#undef KEY_SUMS
}
