// indexer.cu: the indexer on the GPU, CUDA twin of kernels/cpu/indexer_cpu.c
// and of the projections in kernels/cpu/indexer.c (head-collapsed variant, fp32).
//
// What. The projections q^I = R(W_q x), k^I = R(N(W_k x)) and their backward;
// the fused distillation loss KL(P ‖ Q) with the gradients of every indexer
// parameter; the attention-mass recall of the indexer's top-k; the indexer's
// supports (top-k per query, or per block of b_sel queries by the aggregated
// A_B(j) = Σ_{t∈B, t≥j} Q_t(j)). Definitions: kernels/indexer.h, docs/design.md "Indexer".
//
// How.
//   Projections: the GEMMs go through cuBLAS (fp32, TF32 off), the key norm is
//   one warp per row, RoPE one thread per rotated pair. The cos/sin tables are
//   built on the host with the CPU twin's exact recipe (inv_freq in double
//   stored fp32, angle = (float)t·inv_freq, cosf/sinf) and uploaded once, so
//   RoPE matches the CPU twin bit for bit; its products and sums use the _rn
//   intrinsics so nvcc does not fuse them into FMAs the CPU does not use.
//   The loss, flash style, never a T×T buffer:
//     scores:      every pass below scores its BQ × BK tiles with one
//                  function, tile_scores, so a (query, key) pair gets the same
//                  bits in each: on tensor cores when d_I is a multiple of 8
//                  ("3xTF32": q^I and k^I split once into tf32 high and low
//                  parts, three mma.sync m16n8k8 products per k-step, fp32
//                  accumulators), else with fp32 FMAs.
//     kernel lse:  one block per tile of BQ = 32 sampled queries streams all
//                  key tiles of BK = 32 and keeps an online max/sum per row:
//                  lse^I_t = log Σ_{j≤t} exp(score_{t,j}).
//     kernel loss: grid (query tile, key chunk of KCH keys). Per key tile the
//                  block scores the tile again (same code, same bits), rebuilds
//                  P from the teacher (one staged K^teacher tile per kv head,
//                  one staged q^teacher tile per query head:
//                  P = (1/Hq) Σ_h exp(s·q_h·k_{h/G} − lse_h); the bf16 teacher
//                  on tensor cores for two key tiles at once), adds the KL terms
//                  P·(log P − log Q) (P = 0 terms skipped, as the CPU twin) and
//                  forms G = (Q − P)/|𝒯| in shared memory, then writes it out:
//                  the host runs the kernel over chunks of query rows, each
//                  into a zeroed [rows, keys ≤ last query] buffer of at most
//                  2^26 floats that the kernel's blocks fill element by
//                  element, and takes it back with two fp32 cuBLAS GEMMs per
//                  chunk, chunk after chunk:
//                    dq^I = G·K^I/√d_I,  dk^I += Gᵀ·q^I/√d_I.
//                  256 threads; thread (i = tid/8, l = tid%8) owns row i and the
//                  keys l, l+8, l+16, l+24 of the tile (the tensor path's mma
//                  fragments reach that layout through a shared tile). The
//                  shared tiles' row strides keep those reads, and the
//                  ldmatrix loads, free of bank conflicts.
//     The KL partial of each block is a double; the host adds them in block
//     order.
//   The block objectives (indexer_objective_loss_cuda): the same kl kernel over
//   a tile list whose tiles never straddle two blocks of sampled queries also
//   writes each tile's column sums of P and Q (warp shuffles over the 4 rows of
//   a warp, then the 8 warps in order: no atomics); block_ratio_kernel adds a
//   block's tiles in order into Ā_B, Q̄_B, its KL terms and ρ_B = Ā_B/Q̄_B;
//   block_c_kernel scores the tiles again for c_t = Σ_j Q_t(j)·ρ_B(j) (one
//   partial per key chunk), and block_grad_kernel a third time for
//   G = Q·(c_t − ρ_B)·w/(n_B·|ℬ|), added element by element into the G buffer
//   the kl kernel wrote (the mix objective's per-query term, else zeros); the
//   host runs all of it per chunk of whole blocks and takes G back with the
//   same two GEMMs. Loss and gradients are reproducible as the per-query ones.
//   Then the projections' backward: RoPE transpose, the key norm's backward (a
//   warp per row; its gain/bias gradients a column reduction per slab of rows,
//   the slabs added in order), and dW += dᵀ·x as cuBLAS GEMMs (beta = 1).
//   Recall and select score a chunk of query rows against all keys with one
//   cuBLAS GEMM into a [chunk, keys] buffer (at most 2^26 floats) and select
//   with topk_rows_cuda (oracle_cuda.h). Recall masks keys past each query's
//   position with −FLT_MAX (the rows of a sparse query set have unequal
//   lengths), takes the top k of the chunk-wide row and keeps the picks ≤ t,
//   which is the CPU twin's top-k over j ≤ t; then one block per query sums P
//   over its picks. Block selection turns each score row into Q (row max, sum,
//   Q = exp(s − max)·(1/sum) as the CPU twin) and sums the rows of a block in
//   position order into A_B.
//
// Why this shape. The teacher term, Hq·d_h multiply-adds per (query, key)
// pair, dominates the loss; it is computed with fp32 FMAs from shared memory
// (the twin must hold fp32: no tensor cores, no TF32) unless the bf16 teacher
// is asked for. The indexer's own scores, d_I multiply-adds per pair but in
// every pass (lse alone was bound by the issue of fp32 FMAs), go to tensor
// cores as 3xTF32: each product is split into three whose terms are exact in
// fp32, accurate to about 2^-21 relative, where one tf32 mma (2^-11) would
// not hold the CPU twin's fp32 scores. Splitting the keys of a
// query tile over blockIdx.y keeps the GPU busy when the sampled queries are
// few. The per-query gradients go through G in memory (a chunk of it: T×T
// never exists) rather than float atomics, so they are the same bits on every
// run with the same cuBLAS and card, and a resumed run continues exactly; the
// G traffic (rows × keys × 4 B written once, read twice) is small next to the
// teacher's Hq·d_h products per pair. The block objectives take the same road
// (no float atomics anywhere in the loss); their per-block double sums are
// added in a fixed order, as the per-query loss's.
//
// Checked against the CPU twin by the twin test on a GPU (tests/twins/indexer.c)
// and, host code and kernels together, on host threads without one
// (scripts/emulate-cuda.sh indexer: every launch goes through launch_checked
// and the dynamic shared memory through DYNAMIC_SMEM for that).
//
// Not here: the head-expanded variant (score = Σ_h w_h·ReLU(q_h·k)). Every
// function aborts with a message for it; the CPU twin serves that ablation.
#include <cuda_bf16.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_check.cuh"
#include "cuda_check.cuh"
#include "device_util.cuh"
#include "mma.cuh"
extern "C" {  // indexer.h is a C header without its own extern "C" (indexer_layout is defined in C)
#include "indexer.h"
}
#include "env.h"
#include "indexer_cuda.h"
#include "oracle_cuda.h"
#include "ops_cuda.h"

enum {
    BQ = 32,         // sampled queries per tile
    BK = 32,         // keys per tile
    NT = 256,        // threads of the loss kernels (BQ rows × 8 threads)
    KPT = BK / 8,    // keys per thread in a tile
    KCH = 8 * BK,    // keys per block of the loss kernel (blockIdx.y)
    LDP = BK + 8,    // row stride of the BQ × BK fp32 tiles in shared memory (scores, P, G)
    TBK = 2 * BK,    // keys of the bf16 teacher's super-tile (two key tiles of the loss)
    LDT = TBK + 8,   // row stride of its P in shared memory
    MAX_DI = 256,    // largest d_I the loss kernels take (shared memory: ≤ 135 KiB at both limits)
    MAX_DH = 256,    // largest teacher head dim
};

// The indexer's score tiles. d_I a multiple of 8: on tensor cores (tile_scores_tc), q^I and k^I split
// into tf32 parts once (tf32_split_kernel: rows [n][2·d_I], high parts then low parts) and a staged
// tile is two planes [32][d_I + 4]: rows of 16-byte multiples for ldmatrix, whose stride (4 banks
// times an odd number) starts the 8 rows an ldmatrix phase reads on 8 distinct groups of 4 banks.
// Else fp32 FMAs (tile_scores_fp32) from rows [n][d_I] staged as one tile [32][d_I + 1] (odd stride:
// distinct banks for the threads' reads).
static __host__ __device__ int ix_tc(int dI) { return dI % 8 == 0; }
static __host__ __device__ int ix_row_floats(int dI) { return ix_tc(dI) ? 2 * dI : dI; }
// Floats of one staged q or k tile (BQ = BK rows).
static __host__ __device__ int ix_tile_floats(int dI) { return ix_tc(dI) ? 2 * BQ * (dI + 4) : BQ * (dI + 1); }
// Floats of the kl kernel's shared space after Qs that Ks, the fp32 teacher's Tq [BQ][dh + 1] and
// Tk [BK][dh + 1], and the bf16 teacher's Tqb [BQ][dh + TILE_PAD], Tkb [TBK][dh + TILE_PAD] (from a
// 16-byte boundary) and then its P [BQ][LDT] take in turn.
static __host__ __device__ int kl_kt_floats(int dI, int dh) {
    const int fp32_teacher = (BQ + BK) * (dh + 1), bf16_teacher = ((BQ + TBK) * (dh + TILE_PAD) * 2 + 16 + 3) / 4;
    int kt = ix_tile_floats(dI);
    if (fp32_teacher > kt) kt = fp32_teacher;
    if (bf16_teacher > kt) kt = bf16_teacher;
    return kt > BQ * LDT ? kt : BQ * LDT;
}

static const int64_t CHUNK_FLOATS = (int64_t)1 << 26;  // widest score buffer (256 MiB)

// ---- kernels: projections ----------------------------------------------------------------

// out[r, :] = x[pos[r], :]; one thread per element.
__global__ void gather_rows_kernel(float *out, const float *x, const int32_t *pos, int n, int dm) {
    const int64_t total = (int64_t)n * dm;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / dm, c = e % dm;
        out[e] = x[(int64_t)pos[r] * dm + c];
    }
}

// RoPE ("rotate half") on the first 2·half dims of each head of v[n, H, dI],
// row r at position pos[r] (pos NULL: r); cs/sn [positions, half]. inverse
// turns by −angle (R_tᵀ). Explicit _rn ops: no FMA contraction, like the CPU.
__global__ void rope_kernel(float *v, const float *cs, const float *sn, const int32_t *pos, int n, int H, int dI,
                            int half, int inverse) {
    const int64_t total = (int64_t)n * H * half;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(e % half);
        const int64_t rh = e / half, r = rh / H;
        const int64_t t = pos ? pos[r] : r;
        const float c = cs[t * half + i], s = inverse ? -sn[t * half + i] : sn[t * half + i];
        float *x = v + rh * dI;
        const float a = x[i], b = x[i + half];
        x[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        x[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
}

// Key norm, in place on y[n, dI] (y = u on entry): one warp per row.
//   RMS:   y = u·rstd ⊙ g,               rstd = 1/sqrt(mean(u²) + eps)
//   Layer: y = (u − mean)·rstd ⊙ g + b,  rstd = 1/sqrt(var(u) + eps)
// stat[2r] = mean (0 for RMS), stat[2r+1] = rstd when stat is not NULL.
__global__ void key_norm_kernel(float *y, float *stat, const float *g, const float *b, int n, int dI, float eps,
                                int layer) {
    const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= n) return;
    float *row = y + (int64_t)r * dI;
    float mean = 0.0f;
    if (layer) {
        float s = 0.0f;
        for (int i = lane; i < dI; i += 32) s += row[i];
        mean = warp_sum(s) / dI;
    }
    float var = 0.0f;
    for (int i = lane; i < dI; i += 32) var += (row[i] - mean) * (row[i] - mean);
    const float rstd = 1.0f / sqrtf(warp_sum(var) / dI + eps);
    for (int i = lane; i < dI; i += 32) row[i] = (row[i] - mean) * rstd * g[i] + (b ? b[i] : 0.0f);
    if (stat && lane == 0) stat[2 * r] = mean, stat[2 * r + 1] = rstd;
}

// Gain and bias gradients of the key norm, per slab of rows: pg[slab, c] =
// Σ_{j∈slab} dn[j,c]·x̂[j,c], pb[slab, c] = Σ_{j∈slab} dn[j,c] (pb may be NULL),
// x̂ = (u − mean)·rstd. Block (32, 8) covers 32 channels of slab blockIdx.y;
// key_norm_param_sum_kernel adds the slabs in order (no atomics: the same bits
// on every run).
__global__ void key_norm_param_grad_kernel(float *pg, float *pb, const float *dn, const float *u, const float *stat,
                                          int n, int dI, int rows_per_block) {
    __shared__ float sg[8][33], sb[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int j0 = blockIdx.y * rows_per_block, j1 = min(n, j0 + rows_per_block);
    float ag = 0.0f, ab = 0.0f;
    if (c < dI)
        for (int j = j0 + threadIdx.y; j < j1; j += 8) {
            const int64_t e = (int64_t)j * dI + c;
            ag += dn[e] * ((u[e] - stat[2 * j]) * stat[2 * j + 1]);
            ab += dn[e];
        }
    sg[threadIdx.y][threadIdx.x] = ag, sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y != 0 || c >= dI) return;
    for (int y = 1; y < 8; y++) ag += sg[y][threadIdx.x], ab += sb[y][threadIdx.x];
    pg[(int64_t)blockIdx.y * dI + c] = ag;
    if (pb) pb[(int64_t)blockIdx.y * dI + c] = ab;
}

// dg[c] += Σ_slab pg[slab, c], db[c] += Σ_slab pb[slab, c] (db NULL: no bias), slab by slab.
__global__ void key_norm_param_sum_kernel(float *dg, float *db, const float *pg, const float *pb, int n_slabs, int dI) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= dI) return;
    float g = 0.0f, b = 0.0f;
    for (int y = 0; y < n_slabs; y++) {
        g += pg[(int64_t)y * dI + c];
        if (db) b += pb[(int64_t)y * dI + c];
    }
    dg[c] += g;
    if (db) db[c] += b;
}

// Input gradient of the key norm, in place: d[j] (= dn, the gradient at the
// norm's output) becomes du = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ ⊙ x̂)) with ĝ = g ⊙ dn
// (no mean(ĝ) term for RMS). One warp per row.
__global__ void key_norm_backward_kernel(float *d, const float *u, const float *stat, const float *g, int n, int dI,
                                         int layer) {
    const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= n) return;
    float *dr = d + (int64_t)r * dI;
    const float *ur = u + (int64_t)r * dI;
    const float mean = stat[2 * r], rstd = stat[2 * r + 1];
    float mg = 0.0f, mgx = 0.0f;
    for (int i = lane; i < dI; i += 32) {
        const float xh = (ur[i] - mean) * rstd, gh = g[i] * dr[i];
        mg += gh;
        mgx += gh * xh;
    }
    mg = layer ? warp_sum(mg) / dI : 0.0f;
    mgx = warp_sum(mgx) / dI;
    for (int i = lane; i < dI; i += 32) {
        const float xh = (ur[i] - mean) * rstd;
        dr[i] = rstd * (g[i] * dr[i] - mg - xh * mgx);
    }
}

// xs[r, :] = [hi(x[r, :]) | lo(x[r, :])] for x [n, dI]: each row's tf32 split (mma.cuh, tf32_split),
// high parts then low parts, as the tensor-core score tiles stage it. One thread per element.
__global__ void tf32_split_kernel(float *xs, const float *x, int n, int dI) {
    const int64_t total = (int64_t)n * dI;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / dI, c = e % dI;
        float hi, lo;
        tf32_split(x[e], &hi, &lo);
        xs[r * 2 * dI + c] = hi, xs[r * 2 * dI + dI + c] = lo;
    }
}

// ---- kernels: the loss -------------------------------------------------------------------

// Scores of thread (i, l) against its KPT keys of a staged tile with fp32
// FMAs: one dot of length dI each, scaled by c_col (1/√d_I for the
// indexer's scores when dI is not a multiple of 8, 1 for the fp32 teacher's
// raw q·k).
__device__ __forceinline__ void tile_scores_fp32(float s[KPT], const float *Qi, const float *Ki, int ld, int i, int l,
                                                 int dI, float c_col) {
    float acc[KPT];
#pragma unroll
    for (int m = 0; m < KPT; m++) acc[m] = 0.0f;
    const float *q = Qi + i * ld;
    for (int c = 0; c < dI; c++) {
        const float qc = q[c];
#pragma unroll
        for (int m = 0; m < KPT; m++) acc[m] += qc * Ki[(l + 8 * m) * ld + c];
    }
#pragma unroll
    for (int m = 0; m < KPT; m++) s[m] = acc[m] * c_col;
}

// The teacher's P (times Hq) on tensor cores, for bf16 tq, tk, over a BQ × 2·BK super-tile (keys
// j0 … j0 + nk − 1, nk ≤ 2·BK): two key tiles of the loss share one pass over the heads, so each
// staged q^teacher tile and each A fragment serves 64 keys instead of 32 (half the staging, the
// barriers and the ldmatrix loads a key). Each of the 8 warps owns the 16 × 16 piece (strip w / 4,
// keys 16·(w % 4) …) as two mma C fragments, loops over the heads, and adds exp(s·q·k − lse) where
// the key is visible; then, after a barrier, the fragments go to Ps [BQ][LDT], which may overlap
// the staging tiles. Tqb [BQ][dh + TILE_PAD] and Tkb [2·BK][dh + TILE_PAD] are bf16 staging tiles.
// dh ∈ {64, 128, 256}. Each (query, key) value is the one a 32-key tile gave: the same mma
// products, the heads added in the same order.
template <int D>
__device__ void teacher_tile_bf16(float *Ps, __nv_bfloat16 *Tqb, __nv_bfloat16 *Tkb, const __nv_bfloat16 *tq,
                                  const __nv_bfloat16 *tk, const float *tlse, const int *pos, int nr, int nk, int j0,
                                  int T, int Hq, int Hkv, float scale) {
    constexpr int LDH = D + TILE_PAD, CH = D / 8;
    const int G = Hq / Hkv, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int strip = warp / 4, nt = warp % 4;
    const float scale_log2 = scale * LOG2E;
    const int ra = 16 * strip + g, rb = ra + 8;  // this lane's rows of the tile
    const int ta = ra < nr ? pos[ra] : -1, tb = rb < nr ? pos[rb] : -1;
    const int ka = 16 * nt + 2 * c;  // this lane's keys ka, ka + 1 (n-tile 0) and ka + 8, ka + 9 (n-tile 1)
    const __nv_bfloat16 *qrow = Tqb + (16 * strip + (lane % 8) + 8 * ((lane / 8) % 2)) * LDH + 8 * (lane / 16);
    float p[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int kvh = 0; kvh < Hkv; kvh++) {
        __syncthreads();  // Tkb, Tqb are free
        for (int e = threadIdx.x; e < TBK * CH; e += blockDim.x) {
            const int r = e / CH, ch = e % CH;
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (r < nk) val = *(const uint4 *)(tk + (int64_t)(j0 + r) * Hkv * D + (int64_t)kvh * D + 8 * ch);
            *(uint4 *)(Tkb + r * LDH + 8 * ch) = val;
        }
        for (int gg = 0; gg < G; gg++) {
            const int h = kvh * G + gg;
            if (gg > 0) __syncthreads();  // Tqb is free
            for (int e = threadIdx.x; e < BQ * CH; e += blockDim.x) {
                const int r = e / CH, ch = e % CH;
                uint4 val = make_uint4(0u, 0u, 0u, 0u);
                if (r < nr) val = *(const uint4 *)(tq + (int64_t)pos[r] * Hq * D + (int64_t)h * D + 8 * ch);
                *(uint4 *)(Tqb + r * LDH + 8 * ch) = val;
            }
            __syncthreads();
            float s[2][4];
            mma_qk_tile<D, 2>(s, qrow, Tkb + 16 * nt * LDH, LDH);
            // e^(scale·s − lse) as 2^(s·scale·log2 e − lse·log2 e): one fused multiply-add and fast_exp2.
            const float la = ta >= 0 ? tlse[(int64_t)h * T + ta] * LOG2E : 0.0f;
            const float lb = tb >= 0 ? tlse[(int64_t)h * T + tb] * LOG2E : 0.0f;
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int kk = ka + 8 * n + e, j = j0 + kk;
                    if (kk < nk && j <= ta) p[n][e] += fast_exp2(fmaf(s[n][e], scale_log2, -la));
                    if (kk < nk && j <= tb) p[n][2 + e] += fast_exp2(fmaf(s[n][2 + e], scale_log2, -lb));
                }
        }
    }
    __syncthreads();  // every warp is done with Tqb, Tkb: Ps may overlap them
#pragma unroll
    for (int n = 0; n < 2; n++) {
        *(float2 *)(Ps + ra * LDT + ka + 8 * n) = make_float2(p[n][0], p[n][1]);
        *(float2 *)(Ps + rb * LDT + ka + 8 * n) = make_float2(p[n][2], p[n][3]);
    }
}

// Stages rows src[idx(r)·stride + off .. + n) for r < rows into dst[r·ld ..],
// zeros for r ≥ valid.
__device__ __forceinline__ void stage_rows(float *dst, int ld, const float *src, int64_t stride, int64_t off,
                                           const int *rowpos, int row0, int rows, int valid, int n) {
    for (int e = threadIdx.x; e < rows * n; e += blockDim.x) {
        const int r = e / n, c = e % n;
        const int64_t sr = rowpos ? rowpos[r] : row0 + r;
        dst[r * ld + c] = r < valid ? src[sr * stride + off + c] : 0.0f;
    }
}

// Stages rows row0 .. row0 + BQ − 1 of the indexer's q or k rows (ix_row_floats each; rows ≥ valid:
// zeros) into a tile of ix_tile_floats(dI). Tensor path: the planes of high and low parts, one warp a
// row, in 16-byte cp.async chunks (aligned: a row is 8·dI bytes), waited for here. Not followed by a
// barrier.
__device__ __forceinline__ void stage_ix_rows(float *dst, const float *src, int row0, int valid, int dI) {
    if (!ix_tc(dI)) {
        stage_rows(dst, dI + 1, src, dI, 0, NULL, row0, BQ, valid, dI);
        return;
    }
    const int ld = dI + 4, ch = dI / 4, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < BQ; r += blockDim.x / 32)
        for (int c = lane; c < 2 * ch; c += 32) {  // 16-byte chunk c of the row: plane c / ch
            const int p = c < ch ? 0 : 1;
            float *d = dst + (p * BQ + r) * ld + 4 * (c - p * ch);
            if (r < valid) __pipeline_memcpy_async(d, src + (int64_t)(row0 + r) * 2 * dI + 4 * c, 16);
            else *(float4 *)d = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    __pipeline_commit();
    __pipeline_wait_prior(0);
}

// The indexer's scores of a staged BQ × BK tile on tensor cores, fp32-accurate ("3xTF32", mma.cuh's
// tf32_split): Qs, Ks hold the planes of high and low parts (stage_ix_rows), and q·k = Σ qh·kh +
// Σ qh·kl + Σ ql·kh, every product exact in fp32 and each sum in its own fp32 accumulator (three
// independent chains of one mma a k-step), the small ones added first. Warp w computes the 16 × 8
// piece rows 16·(w / 4) …, keys 8·(w % 4) … with mma.sync m16n8k8 over dI / 8 k-steps and stores
// c_col·q·k into Ss [BQ][LDP] (float2 stores; a row stride of 8 banks puts 4 consecutive rows on all
// 32 banks, so these stores and the reads below are conflict-free); after the barrier, thread (i, l)
// takes its keys l + 8m back.
__device__ __forceinline__ void tile_scores_tc(float s[KPT], float *Ss, const float *Qs, const float *Ks, int i, int l,
                                               int dI, float c_col) {
    const int ld = dI + 4, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
    const int strip = warp / 4, nt = warp % 4;
    // ldmatrix rows: A (x4) row (lane % 8) + 8·((lane / 8) % 2) of the strip at column 4·(lane / 16);
    // B (x2) key row lane % 8 of the n-tile at column 4·((lane / 8) % 2).
    const float *qhi = Qs + (16 * strip + lane % 8 + 8 * ((lane / 8) % 2)) * ld + 4 * (lane / 16);
    const float *khi = Ks + (8 * nt + lane % 8) * ld + 4 * ((lane / 8) % 2);
    const float *qlo = qhi + BQ * ld, *klo = khi + BK * ld;
    float hh[4] = {0.0f, 0.0f, 0.0f, 0.0f}, hl[4] = {0.0f, 0.0f, 0.0f, 0.0f}, lh[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int k0 = 0; k0 < dI; k0 += 8) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        ldsm_x4(ah, qhi + k0);
        ldsm_x4(al, qlo + k0);
        ldsm_x2(bh, khi + k0);
        ldsm_x2(bl, klo + k0);
        mma_tf32(lh, al, bh[0], bh[1]);
        mma_tf32(hl, ah, bl[0], bl[1]);
        mma_tf32(hh, ah, bh[0], bh[1]);
    }
    const int ra = 16 * strip + g, ka = 8 * nt + 2 * c;
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; e++) v[e] = (hh[e] + (hl[e] + lh[e])) * c_col;
    *(float2 *)(Ss + ra * LDP + ka) = make_float2(v[0], v[1]);
    *(float2 *)(Ss + (ra + 8) * LDP + ka) = make_float2(v[2], v[3]);
    __syncthreads();
#pragma unroll
    for (int m = 0; m < KPT; m++) s[m] = Ss[i * LDP + l + 8 * m];
}

// The indexer's scores c_col·q^I_t·k^I_j of thread (i, l) against its KPT keys l + 8m of the staged
// tiles Qs, Ks (stage_ix_rows): on tensor cores through Ss [BQ][LDP] (a barrier; every thread of the
// block calls it) when dI is a multiple of 8, else with fp32 FMAs (Ss unused). Every pass of the loss
// (lse, KL and gradients, the block objectives' c_t and gradients) scores its tiles here, so a (query,
// key) pair gets the same bits in each.
__device__ __forceinline__ void tile_scores(float s[KPT], float *Ss, const float *Qs, const float *Ks, int i, int l,
                                            int dI, float c_col) {
    if (ix_tc(dI)) tile_scores_tc(s, Ss, Qs, Ks, i, l, dI, c_col);
    else tile_scores_fp32(s, Qs, Ks, dI + 1, i, l, dI, c_col);
}

// Pass 1: lse[r] = log Σ_{j≤t_r} exp(score_{t_r,j}) for the sampled queries of
// tile blockIdx.x (online max/sum over key tiles). qI, kI: the rows stage_ix_rows
// takes. Shared (dynamic): Qs, Ks [ix_tile_floats], Ss [BQ][LDP] (tensor path).
__global__ void __launch_bounds__(NT) indexer_lse_kernel(float *lse, const float *qI, const float *kI,
                                                         const int32_t *queries, int nq, int dI, float c_col) {
    DYNAMIC_SMEM(smem);
    float *Qs = smem, *Ks = Qs + ix_tile_floats(dI), *Ss = Ks + ix_tile_floats(dI);
    __shared__ int pos[BQ];
    const int r0 = blockIdx.x * BQ, nr = min(BQ, nq - r0);
    const int i = threadIdx.x / 8, l = threadIdx.x % 8;
    if (threadIdx.x < BQ) pos[threadIdx.x] = threadIdx.x < nr ? queries[r0 + threadIdx.x] : -1;
    stage_ix_rows(Qs, qI, r0, nr, dI);
    __syncthreads();
    const int t = pos[i], kend = pos[nr - 1] + 1;
    float m = -INFINITY, lsum = 0.0f;
    for (int j0 = 0; j0 < kend; j0 += BK) {
        const int nk = min(BK, kend - j0);
        __syncthreads();  // the previous tile's Ks, Ss are consumed
        stage_ix_rows(Ks, kI, j0, nk, dI);
        __syncthreads();
        float s[KPT];
        tile_scores(s, Ss, Qs, Ks, i, l, dI, c_col);
        float mx = -INFINITY;
#pragma unroll
        for (int a = 0; a < KPT; a++)
            if (j0 + l + 8 * a <= t && l + 8 * a < nk) mx = fmaxf(mx, s[a]);
        for (int off = 4; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const float m_new = fmaxf(m, mx);
        // m_new = −inf: nothing visible to this row yet (the shuffles still run on every lane).
        float sum = 0.0f;
#pragma unroll
        for (int a = 0; a < KPT; a++)
            if (j0 + l + 8 * a <= t && l + 8 * a < nk) sum += expf(s[a] - m_new);
        for (int off = 4; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        if (m_new > -INFINITY) lsum = lsum * expf(m - m_new) + sum, m = m_new;
    }
    if (l == 0 && i < nr) lse[r0 + i] = m + logf(lsum);
}

// The query rows of tile blockIdx.x: rows r0 .. r0 + nr − 1 of the sampled
// queries, by the standard tiling (tile_r0 NULL: r0 = tile·BQ) or by a tile
// list (the block objectives: tiles that never straddle two blocks).
__device__ __forceinline__ void tile_rows(int *r0, int *nr, const int32_t *tile_r0, const int32_t *tile_nr, int nq) {
    if (tile_r0) {
        *r0 = tile_r0[blockIdx.x], *nr = tile_nr[blockIdx.x];
    } else {
        *r0 = blockIdx.x * BQ, *nr = min(BQ, nq - *r0);
    }
}

// Pass 2: for query tile blockIdx.x and keys [blockIdx.y·KCH, +KCH) ∩ [0, kend):
// KL terms into kl_part[block] (double), and with gout ≠ NULL the gradient
// G = (Q − P)·inv_n of the tile's rows r and keys j into gout[(r − gr0)·ldg + j]
// (every element of the tile by one thread: zeros past a row's position). See
// the header comment. With pcol ≠ NULL (the block objectives) also the tile's
// column sums pcol[tile_off[tile] + j] = Σ_i P_{t_i}(j), qcol[…] = Σ_i Q_{t_i}(j)
// for its keys j < kend. qI, kI: the rows stage_ix_rows takes. Shared (dynamic):
// Qs [ix_tile_floats], then Ks [ix_tile_floats] sharing its space (kl_kt_floats)
// with the teacher's tiles (the scores are taken, and a barrier passed, before
// the teacher stages a tile; the teacher's reads end before the next key tile's
// barrier), then Gs [BQ][LDP] (the score tile's exchange too). The bf16 teacher
// runs on every other key tile, for that tile and the next (a super-tile of TBK
// keys), and leaves P in the same space.
__global__ void __launch_bounds__(NT)
    indexer_kl_kernel(double *kl_part, float *pcol, float *qcol, const float *qI, const float *kI, const float *lseI,
                      const float *tq, const float *tk, const float *tlse, const __nv_bfloat16 *tqb,
                      const __nv_bfloat16 *tkb, const int32_t *queries, const int32_t *tile_r0, const int32_t *tile_nr,
                      const int64_t *tile_off, int nq, int T, int Hq, int Hkv, int dh, int dI, float scale,
                      float c_col, float inv_n, float inv_hq, float *gout, int64_t ldg, int gr0) {
    DYNAMIC_SMEM(smem);
    const int ldh = dh + 1, kt = kl_kt_floats(dI, dh);
    float *Qs = smem, *Ks = Qs + ix_tile_floats(dI), *Tq = Ks, *Tk = Tq + BQ * ldh, *Gs = Ks + kt;
    // bf16 teacher (tqb ≠ NULL): its two staging tiles live in Tq and Tk's
    // space (unused then), from the first 16-byte boundary there (ldmatrix and
    // uint4 stores need it; Tq's offset, a multiple of 128 bytes, keeps the
    // base's alignment, so this only guards a base that had none), and P comes
    // back through the start of the same space.
    __nv_bfloat16 *Tqb = (__nv_bfloat16 *)(((uintptr_t)Tq + 15) & ~(uintptr_t)15);
    __nv_bfloat16 *Tkb = Tqb + BQ * (dh + TILE_PAD);
    __shared__ int pos[BQ];
    __shared__ float lse_s[BQ];
    __shared__ double red[NT / 32];
    __shared__ float colp[NT / 32][BK], colq[NT / 32][BK];  // per-warp column sums (pcol)

    int r0, nr;
    tile_rows(&r0, &nr, tile_r0, tile_nr, nq);
    const int i = threadIdx.x / 8, l = threadIdx.x % 8, G = Hq / Hkv;
    const int64_t tqs = (int64_t)Hq * dh, tks = (int64_t)Hkv * dh;
    if (threadIdx.x < BQ) {
        pos[threadIdx.x] = threadIdx.x < nr ? queries[r0 + threadIdx.x] : -1;
        lse_s[threadIdx.x] = threadIdx.x < nr ? lseI[r0 + threadIdx.x] : 0.0f;
    }
    const int kend = queries[r0 + nr - 1] + 1;
    const int jbeg = blockIdx.y * KCH, jend = min(kend, jbeg + KCH);
    double kl = 0.0;
    if (jbeg < kend) {  // uniform over the block
        stage_ix_rows(Qs, qI, r0, nr, dI);
        __syncthreads();
        const int t = pos[i];
        float p_next[KPT];  // the bf16 teacher's P of the super-tile's second key tile
        for (int j0 = jbeg; j0 < jend; j0 += BK) {
            const int nk = min(BK, jend - j0);
            __syncthreads();  // the previous tile's Tq, Tk, Gs are consumed
            stage_ix_rows(Ks, kI, j0, nk, dI);
            __syncthreads();
            float s[KPT], p[KPT];
            tile_scores(s, Gs, Qs, Ks, i, l, dI, c_col);
#pragma unroll
            for (int a = 0; a < KPT; a++) p[a] = 0.0f;
            // P_t(j)·Hq = Σ_h exp(s·q_{h,t}·k_{h/G,j} − lse_{h,t})
            if (tqb && ((j0 - jbeg) & (TBK - 1)) == 0) {
                // On tensor cores, for this tile and the next (a super-tile of TBK keys; jbeg is a
                // multiple of TBK), through Ps in Tq's space: Ks is consumed (tile_scores), and the
                // next write there is the next tile's staging, after the loop's first barrier.
                const int nk2 = min(TBK, jend - j0);
                float *Ps = Tq;
                if (dh == 64)
                    teacher_tile_bf16<64>(Ps, Tqb, Tkb, tqb, tkb, tlse, pos, nr, nk2, j0, T, Hq, Hkv, scale);
                else if (dh == 128)
                    teacher_tile_bf16<128>(Ps, Tqb, Tkb, tqb, tkb, tlse, pos, nr, nk2, j0, T, Hq, Hkv, scale);
                else
                    teacher_tile_bf16<256>(Ps, Tqb, Tkb, tqb, tkb, tlse, pos, nr, nk2, j0, T, Hq, Hkv, scale);
                __syncthreads();
#pragma unroll
                for (int a = 0; a < KPT; a++) p[a] = Ps[i * LDT + l + 8 * a], p_next[a] = Ps[i * LDT + BK + l + 8 * a];
            } else if (tqb) {  // the super-tile's second tile
#pragma unroll
                for (int a = 0; a < KPT; a++) p[a] = p_next[a];
            }
            for (int kvh = 0; !tqb && kvh < Hkv; kvh++) {
                __syncthreads();  // Tq, Tk (Ks's space the first time) are free
                stage_rows(Tk, ldh, tk, tks, (int64_t)kvh * dh, NULL, j0, BK, nk, dh);
                for (int g = 0; g < G; g++) {
                    const int h = kvh * G + g;
                    if (g > 0) __syncthreads();
                    stage_rows(Tq, ldh, tq, tqs, (int64_t)h * dh, pos, 0, BQ, nr, dh);
                    __syncthreads();
                    const float lh = i < nr ? tlse[(int64_t)h * T + t] : 0.0f;
                    float acc[KPT];  // the teacher's q·k (c_col = 1: x·1 is exact in fp32)
                    tile_scores_fp32(acc, Tq, Tk, ldh, i, l, dh, 1.0f);
#pragma unroll
                    for (int a = 0; a < KPT; a++)
                        if (j0 + l + 8 * a <= t && l + 8 * a < nk) p[a] += expf(scale * acc[a] - lh);
                }
            }
            // KL terms and G = (Q − P)/|𝒯| (0 where j > t).
            float row = 0.0f, pc[KPT], qc[KPT];
#pragma unroll
            for (int a = 0; a < KPT; a++) {
                const int jj = l + 8 * a;
                float gv = 0.0f;
                pc[a] = qc[a] = 0.0f;
                if (j0 + jj <= t && jj < nk) {
                    const float pj = p[a] * inv_hq, lq = s[a] - lse_s[i], qj = expf(lq);
                    if (pj > 0.0f) row += pj * (logf(pj) - lq);
                    gv = (qj - pj) * inv_n;
                    pc[a] = pj, qc[a] = qj;
                }
                Gs[i * LDP + jj] = gv;
            }
            kl += row;
            if (pcol) {  // uniform over the grid
                // Column sums: the 4 rows of a warp (lanes l, l+8, l+16, l+24), then the 8 warps in order.
                const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
                for (int a = 0; a < KPT; a++) {
                    float vp = pc[a], vq = qc[a];
                    vp += __shfl_xor_sync(0xffffffffu, vp, 8), vq += __shfl_xor_sync(0xffffffffu, vq, 8);
                    vp += __shfl_xor_sync(0xffffffffu, vp, 16), vq += __shfl_xor_sync(0xffffffffu, vq, 16);
                    if (lane < 8) colp[warp][lane + 8 * a] = vp, colq[warp][lane + 8 * a] = vq;
                }
                __syncthreads();
                if (threadIdx.x < nk) {
                    float sp = 0.0f, sq = 0.0f;
                    for (int w = 0; w < NT / 32; w++) sp += colp[w][threadIdx.x], sq += colq[w][threadIdx.x];
                    const int64_t o = tile_off[blockIdx.x] + j0 + threadIdx.x;
                    pcol[o] = sp, qcol[o] = sq;
                }
            }
            if (gout) {  // G of the tile's rows and keys out, each element by one thread block
                __syncthreads();
                for (int e = threadIdx.x; e < nr * nk; e += NT)
                    gout[(int64_t)(r0 - gr0 + e / nk) * ldg + j0 + e % nk] = Gs[(e / nk) * LDP + e % nk];
            }
        }
    }
    // The block's KL sum, in double.
    const double sum = block_sum(kl, red);
    if (threadIdx.x == 0) kl_part[(int64_t)blockIdx.y * gridDim.x + blockIdx.x] = sum;
}

// ---- kernels: the block objectives -----------------------------------------------------
// (indexer_objective_loss_cuda; definitions in kernels/indexer.h, IndexerObjective.)
// Blocks b (runs of sampled queries with one ⌊t/bsel⌋), each cut into tiles of
// ≤ BQ rows; seg_* are per block, tile_* per tile; a block's ragged vectors
// start at seg_off[b] and hold seg_kend[b] = max 𝒯_B + 1 keys.

// Ā_B, Q̄_B from the tiles' column sums (in tile order), the block's KL terms
// Ā·(log Ā − log Q̄) into klb_part[b·gridDim.x + blockIdx.x] (double), and
// ρ_B = Ā_B/Q̄_B into rho (Q̄ floored at FLT_MIN, as the CPU twin). Grid
// (key chunks of 256, blocks), 256 threads.
__global__ void block_ratio_kernel(float *rho, double *klb_part, const float *pcol, const float *qcol,
                                   const int64_t *tile_off, const int32_t *tile_kend, const int32_t *seg_tile0,
                                   const int32_t *seg_ntile, const int32_t *seg_nb, const int32_t *seg_kend,
                                   const int64_t *seg_off) {
    __shared__ double red[8];
    const int b = blockIdx.y, j = blockIdx.x * blockDim.x + threadIdx.x;
    double kl = 0.0;
    if (j < seg_kend[b]) {
        float sp = 0.0f, sq = 0.0f;
        for (int t = seg_tile0[b]; t < seg_tile0[b] + seg_ntile[b]; t++)
            if (j < tile_kend[t]) sp += pcol[tile_off[t] + j], sq += qcol[tile_off[t] + j];
        const float inv = 1.0f / seg_nb[b], a = sp * inv, qb = fmaxf(sq * inv, FLT_MIN);
        if (a > 0.0f) kl = (double)(a * (logf(a) - logf(qb)));
        rho[seg_off[b] + j] = a / qb;
    }
    const double sum = block_sum(kl, red);
    if (threadIdx.x == 0) klb_part[(int64_t)b * gridDim.x + blockIdx.x] = sum;
}

// c_t = Σ_{j≤t} Q_t(j)·ρ_B(j) over the keys of chunk blockIdx.y, for the rows
// of tile blockIdx.x: cpart[chunk·nq + row] (0 for a chunk past the tile's
// keys; the grad kernel adds the chunks in order). Shared: as indexer_lse_kernel.
__global__ void __launch_bounds__(NT)
    block_c_kernel(float *cpart, const float *qI, const float *kI, const float *lseI, const float *rho,
                   const int32_t *queries, const int32_t *tile_r0, const int32_t *tile_nr, const int32_t *tile_seg,
                   const int64_t *seg_off, int nq, int dI, float c_col) {
    DYNAMIC_SMEM(smem);
    float *Qs = smem, *Ks = Qs + ix_tile_floats(dI), *Ss = Ks + ix_tile_floats(dI);
    __shared__ int pos[BQ];
    __shared__ float lse_s[BQ];
    int r0, nr;
    tile_rows(&r0, &nr, tile_r0, tile_nr, nq);
    const float *rb = rho + seg_off[tile_seg[blockIdx.x]];
    const int i = threadIdx.x / 8, l = threadIdx.x % 8;
    if (threadIdx.x < BQ) {
        pos[threadIdx.x] = threadIdx.x < nr ? queries[r0 + threadIdx.x] : -1;
        lse_s[threadIdx.x] = threadIdx.x < nr ? lseI[r0 + threadIdx.x] : 0.0f;
    }
    const int kend = queries[r0 + nr - 1] + 1;
    const int jbeg = blockIdx.y * KCH, jend = min(kend, jbeg + KCH);
    float acc = 0.0f;
    if (jbeg < kend) {  // uniform over the block
        stage_ix_rows(Qs, qI, r0, nr, dI);
        __syncthreads();
        const int t = pos[i];
        for (int j0 = jbeg; j0 < jend; j0 += BK) {
            const int nk = min(BK, jend - j0);
            __syncthreads();  // the previous tile's Ks, Ss are consumed
            stage_ix_rows(Ks, kI, j0, nk, dI);
            __syncthreads();
            float s[KPT];
            tile_scores(s, Ss, Qs, Ks, i, l, dI, c_col);
#pragma unroll
            for (int a = 0; a < KPT; a++) {
                const int jj = l + 8 * a;
                if (j0 + jj <= t && jj < nk) acc += expf(s[a] - lse_s[i]) * rb[j0 + jj];
            }
        }
    }
    for (int off = 4; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);  // the row's 8 threads
    if (l == 0 && i < nr) cpart[(int64_t)blockIdx.y * nq + r0 + i] = acc;
}

// The block term's gradient for tile blockIdx.x, keys of chunk blockIdx.y:
// G = coef·Q_t(j)·(c_t − ρ_B(j)), coef = w_over_nseg / n_B, added to
// gout[(r − gr0)·ldg + j] for the tile's rows r and keys j ≤ t (each element by
// one thread; after the kl kernel wrote the chunk, so the order is fixed).
// Shared: as indexer_lse_kernel.
__global__ void __launch_bounds__(NT)
    block_grad_kernel(float *gout, int64_t ldg, int gr0, const float *qI, const float *kI, const float *lseI,
                      const float *rho, const float *cpart, int n_chunks, const int32_t *queries,
                      const int32_t *tile_r0, const int32_t *tile_nr, const int32_t *tile_seg, const int64_t *seg_off,
                      const int32_t *seg_nb, int nq, int dI, float c_col, float w_over_nseg) {
    DYNAMIC_SMEM(smem);
    float *Qs = smem, *Ks = Qs + ix_tile_floats(dI), *Ss = Ks + ix_tile_floats(dI);
    __shared__ int pos[BQ];
    __shared__ float lse_s[BQ], c_s[BQ];
    int r0, nr;
    tile_rows(&r0, &nr, tile_r0, tile_nr, nq);
    const int seg = tile_seg[blockIdx.x];
    const float *rb = rho + seg_off[seg];
    const float coef = w_over_nseg / (float)seg_nb[seg];
    const int i = threadIdx.x / 8, l = threadIdx.x % 8;
    if (threadIdx.x < BQ) {
        const int r = threadIdx.x;
        pos[r] = r < nr ? queries[r0 + r] : -1;
        lse_s[r] = r < nr ? lseI[r0 + r] : 0.0f;
        float c = 0.0f;
        for (int ch = 0; r < nr && ch < n_chunks; ch++) c += cpart[(int64_t)ch * nq + r0 + r];
        c_s[r] = c;
    }
    const int kend = queries[r0 + nr - 1] + 1;
    const int jbeg = blockIdx.y * KCH, jend = min(kend, jbeg + KCH);
    if (jbeg >= kend) return;  // uniform over the block
    stage_ix_rows(Qs, qI, r0, nr, dI);
    __syncthreads();
    const int t = pos[i];
    float *grow = gout + (int64_t)(r0 - gr0 + i) * ldg;  // used only for rows i < nr (t ≥ 0)
    for (int j0 = jbeg; j0 < jend; j0 += BK) {
        const int nk = min(BK, jend - j0);
        __syncthreads();  // the previous tile's Ks, Ss are consumed
        stage_ix_rows(Ks, kI, j0, nk, dI);
        __syncthreads();
        float s[KPT];
        tile_scores(s, Ss, Qs, Ks, i, l, dI, c_col);
#pragma unroll
        for (int a = 0; a < KPT; a++) {
            const int jj = l + 8 * a;
            if (j0 + jj <= t && jj < nk) grow[j0 + jj] += coef * expf(s[a] - lse_s[i]) * (c_s[i] - rb[j0 + jj]);
        }
    }
}

// ---- kernels: inference -------------------------------------------------------------------

// R[r·ld + j] = −FLT_MAX for pos[r] < j < len: keys a query may not see rank
// below every real score.
__global__ void mask_future_kernel(float *R, int64_t ld, const int32_t *pos, int rows, int len) {
    const int r = blockIdx.y;
    if (r >= rows) return;
    for (int j = pos[r] + 1 + blockIdx.x * blockDim.x + threadIdx.x; j < len; j += gridDim.x * blockDim.x)
        R[r * ld + j] = -FLT_MAX;
}

// recall[r] = (1/Hq) Σ_{a < n_sel[r], sel[r,a] ≤ t} Σ_h exp(s·q_{h,t}·k_{h/G,sel} − lse_{h,t}),
// t = pos[r]: one block per query, a warp per selected key, lanes over d_h.
__global__ void recall_kernel(float *recall, const int32_t *sel, const int32_t *n_sel, int k, const int32_t *pos,
                              const float *tq, const float *tk, const float *tlse, int T, int Hq, int Hkv, int dh,
                              float scale) {
    __shared__ float red[32];
    const int r = blockIdx.x, t = pos[r], warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int nw = blockDim.x / 32, G = Hq / Hkv, n = n_sel[r];
    const int64_t tqs = (int64_t)Hq * dh, tks = (int64_t)Hkv * dh;
    float mass = 0.0f;
    for (int a = warp; a < n; a += nw) {
        const int j = sel[(int64_t)r * k + a];
        if (j < 0 || j > t) continue;
        for (int h = 0; h < Hq; h++) {
            const float *qv = tq + (int64_t)t * tqs + (int64_t)h * dh, *kv = tk + (int64_t)j * tks + (int64_t)(h / G) * dh;
            float d = 0.0f;
            for (int c = lane; c < dh; c += 32) d += qv[c] * kv[c];
            d = warp_sum(d);
            mass += lane == 0 ? expf(scale * d - tlse[(int64_t)h * T + t]) : 0.0f;
        }
    }
    mass = warp_sum(mass);
    if (lane == 0) red[warp] = mass;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < nw; w++) s += red[w];
        recall[r] = s / Hq;
    }
}

// Row statistics of Q for score rows of queries t = t0 + r (keys j ≤ t):
// mx[r] = max_j score, inv[r] = 1/Σ_j exp(score − mx). One block per row.
__global__ void row_softmax_stats_kernel(float *mx, float *inv, const float *R, int64_t ld, int t0) {
    __shared__ float red[32];
    const int r = blockIdx.x, n = t0 + r + 1, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int nw = blockDim.x / 32;
    const float *s = R + r * ld;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, s[j]);
    m = warp_max(m);
    if (lane == 0) red[warp] = m;
    __syncthreads();
    m = red[0];
    for (int w = 1; w < nw; w++) m = fmaxf(m, red[w]);
    __syncthreads();
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) sum += expf(s[j] - m);
    sum = warp_sum(sum);
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float tot = 0.0f;
        for (int w = 0; w < nw; w++) tot += red[w];
        mx[r] = m, inv[r] = 1.0f / tot;
    }
}

// A[b·ld + j] = Σ_{t∈B, t≥j} exp(R[t] − mx_t)·inv_t for block b of the chunk
// (B = [q0 + b·bsel, min(q0 + (b+1)·bsel, T))), j < end(B); rows of R are the
// queries q0, q0+1, … Sums go in position order, as the CPU twin's.
__global__ void block_aggregate_kernel(float *A, int64_t ld, const float *R, const float *mx, const float *inv,
                                       int q0, int bsel, int T) {
    const int b = blockIdx.y;
    const int tb = q0 + b * bsel, te = min(tb + bsel, T);
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < te; j += gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int t = max(tb, j); t < te; t++) {
            const int r = t - q0;
            acc += expf(R[r * ld + j] - mx[r]) * inv[r];
        }
        A[b * ld + j] = acc;
    }
}

// ---- host helpers -----------------------------------------------------------------------

static void require_collapsed(const IndexerConfig *cfg, const char *fn) {
    if (cfg->variant == INDEXER_COLLAPSED && cfg->n_heads == 1) return;
    fprintf(stderr,
            "spindle: %s: the head-expanded indexer has no CUDA twin yet (variant %d, %d heads); "
            "use the CPU twin (--device cpu) for it\n",
            fn, (int)cfg->variant, cfg->n_heads);
    abort();
}

static void require_shapes(const IndexerConfig *cfg, int dh, const char *fn) {
    if (cfg->d_index <= MAX_DI && dh <= MAX_DH) return;
    fprintf(stderr, "spindle: %s: d_index %d / teacher head dim %d above the kernels' limits (%d / %d)\n", fn,
            cfg->d_index, dh, MAX_DI, MAX_DH);
    abort();
}

// cos/sin tables [n, d_rope/2] for positions 0..n−1, built on the host exactly
// as kernels/cpu/indexer.c forms them, uploaded once and kept (regrown when a longer
// sequence or another θ / d_rope comes). Never freed.
static struct {
    float theta;
    int d_rope;
    int n;
    float *cos, *sin;
} g_rope;

static void rope_tables(const IndexerConfig *c, int n, const float **cs, const float **sn) {
    const int half = c->d_rope / 2;
    if (g_rope.cos && g_rope.theta == c->rope_theta && g_rope.d_rope == c->d_rope && g_rope.n >= n) {
        *cs = g_rope.cos, *sn = g_rope.sin;
        return;
    }
    cuda_free(g_rope.cos), cuda_free(g_rope.sin);
    const int cap = n > g_rope.n && g_rope.d_rope == c->d_rope ? (n + 1023) / 1024 * 1024 : n;
    float *inv_freq = (float *)malloc(sizeof(float) * half);
    float *hc = (float *)malloc(sizeof(float) * (size_t)cap * half), *hs = (float *)malloc(sizeof(float) * (size_t)cap * half);
    if (!inv_freq || !hc || !hs) {
        fprintf(stderr, "spindle: out of host memory for the indexer's RoPE tables\n");
        abort();
    }
    rope_default_inv_freq(inv_freq, (double)c->rope_theta, c->d_rope);  // the CPU twin's tables (ops.h)
    rope_tables_from_freq(hc, hs, inv_freq, half, 1.0f, cap);
    g_rope.cos = (float *)cuda_malloc(sizeof(float) * (size_t)cap * half);
    g_rope.sin = (float *)cuda_malloc(sizeof(float) * (size_t)cap * half);
    cuda_to_device(g_rope.cos, hc, sizeof(float) * (size_t)cap * half);
    cuda_to_device(g_rope.sin, hs, sizeof(float) * (size_t)cap * half);
    g_rope.theta = c->rope_theta, g_rope.d_rope = c->d_rope, g_rope.n = cap;
    free(inv_freq), free(hc), free(hs);
    *cs = g_rope.cos, *sn = g_rope.sin;
}

// RoPE on v[n, 1, d_I] (rows at pos[r], or r when pos is NULL); n_pos bounds the positions.
static void rope_apply(float *v, const IndexerConfig *c, const int32_t *pos, int n, int n_pos, int inverse) {
    const int half = c->d_rope / 2;
    if (half == 0 || n <= 0) return;
    const float *cs, *sn;
    rope_tables(c, n_pos, &cs, &sn);
    launch_checked(rope_kernel, grid_for((int64_t)n * half, 256), 256, 0, v, cs, sn, pos, n, 1, c->d_index, half,
                   inverse);
}

// Row-major C[m, n] (+)= alpha·A[m, k]·B[n, k]ᵀ (ldc given): cuBLAS sees the
// column-major transposes, Cᵀ = B·Aᵀ.
static void gemm_abt(float *C, int64_t ldc, const float *A, int lda, const float *B, int ldb, int m, int n, int k,
                     float alpha, float beta) {
    CUBLAS_CHECK(cublasSgemm(cuda_cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, ldb, A, lda, &beta,
                             C, (int)ldc));
}

// gemm_abt on TF32 tensor cores (fp32 in and out, 10-bit mantissas in the product).
static void gemm_abt_tf32(float *C, int64_t ldc, const float *A, int lda, const float *B, int ldb, int m, int n,
                          int k, float alpha) {
    const float beta = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(cuda_cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, B, CUDA_R_32F, ldb, A,
                              CUDA_R_32F, lda, &beta, C, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F_FAST_TF32,
                              CUBLAS_GEMM_DEFAULT));
}

// Row-major W[m, dm] += D[n, m]ᵀ·X[n, dm]: the weight gradient of y = x·Wᵀ.
static void gemm_weight_grad(float *W, const float *D, const float *X, int n, int m, int dm) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasSgemm(cuda_cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_T, dm, m, n, &one, X, dm, D, m, &one, W,
                             dm));
}

// y[n, d_I] = x[n, d_model]·Wᵀ: fp32, or on TF32 tensor cores (the selection of
// the bf16 forward, whose scores are rounded further anyway: ~5 ms less per
// layer at 128K than the fp32 GEMMs).
static void project(float *y, const float *x, const float *W, int n, int dm, int dI, int tf32) {
    if (tf32) gemm_abt_tf32(y, dI, x, dm, W, dm, n, dI, dm, 1.0f);
    else matmul_forward_cuda(y, x, W, NULL, n, dm, dI);
}

// q[n, d_I] = R_pos(xq·W_qᵀ) for the gathered query rows xq [n, d_model].
static void queries_forward(float *q, const IndexerConfig *c, const float *params, const float *xq,
                            const int32_t *pos, int n, int n_pos, int tf32) {
    const IndexerLayout L = indexer_layout(c);
    project(q, xq, params + L.wq, n, c->d_model, c->d_index, tf32);
    rope_apply(q, c, pos, n, n_pos, 0);
}

// k[T, d_I] = R(N(x·W_kᵀ)); u, stat (may be NULL) saved for the backward.
static void keys_forward(float *k, float *u, float *stat, const IndexerConfig *c, const float *params, const float *x,
                         int T, int tf32) {
    const IndexerLayout L = indexer_layout(c);
    const int dI = c->d_index;
    project(k, x, params + L.wk, T, c->d_model, dI, tf32);
    if (u) CUDA_CHECK(cudaMemcpyAsync(u, k, sizeof(float) * (size_t)T * dI, cudaMemcpyDeviceToDevice, 0));
    if (c->key_norm != INDEXER_NORM_NONE) {
        const float *b = L.k_norm_bias >= 0 ? params + L.k_norm_bias : NULL;
        launch_checked(key_norm_kernel, (T + 7) / 8, 256, 0, k, stat, params + L.k_norm, b, T, dI, c->norm_eps,
                       c->key_norm == INDEXER_NORM_LAYER);
    }
    rope_apply(k, c, NULL, T, T, 0);
}

// grads.wq += (R_posᵀ dq)ᵀ·xq. dq is overwritten (rotated back).
static void queries_backward(float *grads, float *dq, const IndexerConfig *c, const float *xq, const int32_t *pos,
                             int n, int n_pos) {
    const IndexerLayout L = indexer_layout(c);
    rope_apply(dq, c, pos, n, n_pos, 1);
    gemm_weight_grad(grads + L.wq, dq, xq, n, c->d_index, c->d_model);
}

// grads.wk (+ k_norm, k_norm_bias) from dk [T, d_I], overwritten on the way.
static void keys_backward(float *grads, float *dk, const IndexerConfig *c, const float *params, const float *x,
                          const float *u, const float *stat, int T) {
    const IndexerLayout L = indexer_layout(c);
    const int dI = c->d_index;
    rope_apply(dk, c, NULL, T, T, 1);  // dn = R_jᵀ dk
    if (c->key_norm != INDEXER_NORM_NONE) {
        const int layer = c->key_norm == INDEXER_NORM_LAYER;
        const int rows_per_block = 256;
        const int n_slabs = (T + rows_per_block - 1) / rows_per_block;
        const dim3 grid((dI + 31) / 32, n_slabs), block(32, 8);
        float *pg = (float *)cuda_malloc(sizeof(float) * (size_t)n_slabs * dI * 2), *pb = pg + (size_t)n_slabs * dI;
        launch_checked(key_norm_param_grad_kernel, grid, block, 0, pg, layer ? pb : nullptr, dk, u, stat, T, dI,
                       rows_per_block);
        launch_checked(key_norm_param_sum_kernel, (dI + 127) / 128, 128, 0, grads + L.k_norm,
                       layer ? grads + L.k_norm_bias : nullptr, pg, pb, n_slabs, dI);
        cuda_free(pg);
        launch_checked(key_norm_backward_kernel, (T + 7) / 8, 256, 0, dk, u, stat, params + L.k_norm, T, dI, layer);
    }
    gemm_weight_grad(grads + L.wk, dk, x, T, dI, c->d_model);
}

// The query positions on the host, checked: in [0, T), ascending and distinct
// when sorted ≠ 0. Returns them (caller frees) and the number of keys any of
// them sees (max + 1).
static int32_t *host_queries(const int32_t *queries, int nq, int T, int sorted, int *n_keys, const char *fn) {
    int32_t *h = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq);
    if (!h) abort();
    cuda_to_host(h, queries, sizeof(int32_t) * (size_t)nq);
    int mx = -1;
    for (int r = 0; r < nq; r++) {
        if (h[r] < 0 || h[r] >= T || (sorted && r > 0 && h[r] <= h[r - 1])) {
            fprintf(stderr, "spindle: %s: query %d at position %d is out of [0, %d)%s\n", fn, r, h[r], T,
                    sorted ? " or not ascending" : "");
            abort();
        }
        mx = h[r] > mx ? h[r] : mx;
    }
    *n_keys = mx + 1;
    return h;
}

static void gather_rows(float *out, const float *x, const int32_t *pos, int n, int dm) {
    launch_checked(gather_rows_kernel, grid_for((int64_t)n * dm, 256), 256, 0, out, x, pos, n, dm);
}

// Dynamic shared memory of indexer_lse_kernel, block_c_kernel and block_grad_kernel: Qs, Ks, and Ss on
// the tensor path (71 KiB at d_I = 128).
static size_t lse_smem(int dI) {
    return sizeof(float) * (2 * (size_t)ix_tile_floats(dI) + (ix_tc(dI) ? (size_t)BQ * LDP : 0));
}

// Dynamic shared memory of indexer_kl_kernel: Qs, then Ks or the teacher's tiles (one space,
// kl_kt_floats), then Gs (71 KiB at d_I = d_h = 128).
static size_t kl_smem(int dI, int dh) {
    return sizeof(float) * ((size_t)ix_tile_floats(dI) + (size_t)kl_kt_floats(dI, dh) + (size_t)BQ * LDP);
}

// Rows per chunk of G (SPINDLE_KL_ROWS caps them, so that tests run several chunks on small inputs).
static long kl_rows_cap(void) { return env_long("SPINDLE_KL_ROWS", 0, 0, 1L << 30); }

// SPINDLE_STEP_PROFILE=1: each call of a loss entry point prints on stderr the device time of its
// phases (gather and projections, tf32 split, lse pass, teacher copies, G zeroed, loss kernel, gradient
// GEMMs, projections' backward), from CUDA events between consecutive marks, read once at the end of
// the call: the marks add no synchronisation inside it. A knob for finding where the step's time goes;
// results do not change.
enum { PROF_MAX = 4096, PROF_PHASES = 16 };
static struct {
    int on, n;
    cudaEvent_t ev[PROF_MAX];
    const char *phase[PROF_MAX];
} g_prof = {-1, 0, {}, {}};

// The work on the stream since the previous mark was `phase` (the first mark of a call: "start").
static void prof_mark(const char *phase) {
    if (g_prof.on < 0) g_prof.on = env_long("SPINDLE_STEP_PROFILE", 0, 0, 1) == 1;
    if (!g_prof.on || g_prof.n >= PROF_MAX) return;
    if (!g_prof.ev[g_prof.n]) CUDA_CHECK(cudaEventCreate(&g_prof.ev[g_prof.n]));
    CUDA_CHECK(cudaEventRecord(g_prof.ev[g_prof.n], 0));
    g_prof.phase[g_prof.n++] = phase;
}

// One line for the call: the total, then each phase's sum in the order phases first appeared.
static void prof_report(const char *fn, int nq, int n_keys) {
    if (g_prof.on != 1) return;
    if (g_prof.n >= 2) {
        const char *names[PROF_PHASES];
        double ms[PROF_PHASES], total = 0.0;
        int nn = 0;
        CUDA_CHECK(cudaEventSynchronize(g_prof.ev[g_prof.n - 1]));
        for (int i = 1; i < g_prof.n; i++) {
            float f = 0.0f;
            CUDA_CHECK(cudaEventElapsedTime(&f, g_prof.ev[i - 1], g_prof.ev[i]));
            int j = 0;
            while (j < nn && strcmp(names[j], g_prof.phase[i]) != 0) j++;
            if (j == nn) {
                if (nn == PROF_PHASES) j = nn - 1;  // more phases than the table holds: into the last
                else names[nn] = g_prof.phase[i], ms[nn++] = 0.0;
            }
            ms[j] += f, total += f;
        }
        fprintf(stderr, "spindle: step profile: %s, %d queries, %d keys: %.3f ms =", fn, nq, n_keys, total);
        for (int j = 0; j < nn; j++) fprintf(stderr, "%s %s %.3f", j ? " +" : "", names[j], ms[j]);
        fputc('\n', stderr);
    }
    g_prof.n = 0;
}

// What both loss entry points set up: the gathered query rows, q^I, k^I (with the key norm's saved
// input and statistics when there are gradients), the rows the loss kernels stage from them (qs, ks:
// ix_row_floats(d_I) a row, their tf32 split on the tensor path, else q and k themselves), lse^I of
// the sampled queries, the gradient buffers, and bf16 copies of the teacher's q, k for the bf16 teacher.
typedef struct {
    float *xq, *q, *k, *qs, *ks, *lse, *u, *stat, *dq, *dk;
    void *tqb, *tkb;
} LossSetup;

// xs [n, 2·dI] = the tf32 split of x [n, dI] (tf32_split_kernel).
static void tf32_split_rows(float *xs, const float *x, int n, int dI) {
    launch_checked(tf32_split_kernel, grid_for((int64_t)n * dI, 256), 256, 0, xs, x, n, dI);
}

static LossSetup loss_setup(int grads, const IndexerConfig *cfg, const float *params, const float *x,
                            const float *tq, const float *tk, const int32_t *queries, int nq, int n_keys, int Hq,
                            int Hkv, int dh, int bf16_teacher) {
    const int dI = cfg->d_index, dm = cfg->d_model;
    LossSetup L = {0};
    L.xq = (float *)cuda_malloc(sizeof(float) * (size_t)nq * dm);
    L.q = (float *)cuda_malloc(sizeof(float) * (size_t)nq * dI);
    L.k = (float *)cuda_malloc(sizeof(float) * (size_t)n_keys * dI);
    L.lse = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    if (grads) {
        L.u = (float *)cuda_malloc(sizeof(float) * (size_t)n_keys * dI);
        L.stat = (float *)cuda_malloc(sizeof(float) * (size_t)n_keys * 2);
        L.dq = (float *)cuda_malloc(sizeof(float) * (size_t)nq * dI);  // every row written by a chunk's GEMM
        L.dk = (float *)cuda_malloc(sizeof(float) * (size_t)n_keys * dI);
        cuda_memset(L.dk, 0, sizeof(float) * (size_t)n_keys * dI);
    }
    prof_mark("start");
    gather_rows(L.xq, x, queries, nq, dm);
    queries_forward(L.q, cfg, params, L.xq, queries, nq, n_keys, 0);
    keys_forward(L.k, L.u, L.stat, cfg, params, x, n_keys, 0);
    prof_mark("projections");
    L.qs = L.q, L.ks = L.k;
    if (ix_tc(dI)) {  // scores on tensor cores: q^I, k^I split once, staged by every pass
        L.qs = (float *)cuda_malloc(sizeof(float) * (size_t)nq * 2 * dI);
        L.ks = (float *)cuda_malloc(sizeof(float) * (size_t)n_keys * 2 * dI);
        tf32_split_rows(L.qs, L.q, nq, dI);
        tf32_split_rows(L.ks, L.k, n_keys, dI);
        prof_mark("tf32 split");
    }
    const float c_col = 1.0f / sqrtf((float)dI);
    const size_t smem_lse = lse_smem(dI);
    CUDA_CHECK(cudaFuncSetAttribute(indexer_lse_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_lse));
    launch_checked(indexer_lse_kernel, (nq + BQ - 1) / BQ, NT, smem_lse, L.lse, L.qs, L.ks, queries, nq, dI, c_col);
    prof_mark("lse pass");
    const size_t smem_kl = kl_smem(dI, dh);
    CUDA_CHECK(cudaFuncSetAttribute(indexer_kl_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_kl));
    if (bf16_teacher && (dh == 64 || dh == 128 || dh == 256)) {
        L.tqb = cuda_malloc(2 * (size_t)n_keys * Hq * dh), L.tkb = cuda_malloc(2 * (size_t)n_keys * Hkv * dh);
        cuda_f32_to_bf16(L.tqb, tq, (int64_t)n_keys * Hq * dh);
        cuda_f32_to_bf16(L.tkb, tk, (int64_t)n_keys * Hkv * dh);
        prof_mark("teacher bf16 copies");
    }
    return L;
}

// Row-major dq[r0 .. r0 + rows, dI] = c·G[rows, kend]·K[kend, dI]; dk[kend, dI] += c·Gᵀ·q[r0 .., dI].
static void loss_take_back(LossSetup *L, const float *G, int r0, int rows, int kend, int dI) {
    const float c_col = 1.0f / sqrtf((float)dI), one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(cuda_cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, dI, rows, kend, &c_col, L->k, dI, G, kend,
                             &zero, L->dq + (int64_t)r0 * dI, dI));
    CUBLAS_CHECK(cublasSgemm(cuda_cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_T, dI, kend, rows, &c_col,
                             L->q + (int64_t)r0 * dI, dI, G, kend, &one, L->dk, dI));
}

// The projections' backward into grads (when there are gradients), then every buffer freed.
static void loss_finish(LossSetup *L, float *grads, const IndexerConfig *cfg, const float *params, const float *x,
                        const int32_t *queries, int nq, int n_keys) {
    if (grads) {
        queries_backward(grads, L->dq, cfg, L->xq, queries, nq, n_keys);
        keys_backward(grads, L->dk, cfg, params, x, L->u, L->stat, n_keys);
        prof_mark("projections backward");
    }
    if (L->qs != L->q) cuda_free(L->qs), cuda_free(L->ks);
    cuda_free(L->xq), cuda_free(L->q), cuda_free(L->k), cuda_free(L->lse), cuda_free(L->u), cuda_free(L->stat);
    cuda_free(L->dq), cuda_free(L->dk), cuda_free(L->tqb), cuda_free(L->tkb);
}

// ---- the API ---------------------------------------------------------------------------------

extern "C" double indexer_kl_loss_cuda(float *grads, const IndexerConfig *cfg, const float *params, const float *x,
                                       const float *tq, const float *tk, const float *tlse, int T, int Hq, int Hkv,
                                       int dh, float scale, const int32_t *queries, int n_queries, int bf16_teacher) {
    if (n_queries <= 0) return 0.0;
    require_collapsed(cfg, __func__);
    require_shapes(cfg, dh, __func__);
    if (Hq % Hkv != 0) {
        fprintf(stderr, "spindle: %s: Hq = %d is not a multiple of Hkv = %d\n", __func__, Hq, Hkv);
        abort();
    }
    const int nq = n_queries, dI = cfg->d_index;
    int n_keys;
    int32_t *hq = host_queries(queries, nq, T, 1, &n_keys, __func__);
    LossSetup L = loss_setup(grads != NULL, cfg, params, x, tq, tk, queries, nq, n_keys, Hq, Hkv, dh, bf16_teacher);
    const float c_col = 1.0f / sqrtf((float)dI);
    // Query chunks of qc rows (all of them for the loss alone). With gradients, the kernel writes each
    // chunk's G = (Q − P)/|𝒯| [nc, kend] (every element once, zeros past a row's position) and two fp32
    // GEMMs take it back: dq^I = c·G·K^I, dk^I += c·Gᵀ·q^I, chunk after chunk — no atomics, so the
    // gradients are the same bits on every run.
    int qc = nq;
    float *G = NULL;
    if (grads) {
        int64_t rows = CHUNK_FLOATS / n_keys;
        const long cap = kl_rows_cap();  // at most this many rows a chunk (tests)
        if (cap > 0 && cap < rows) rows = cap;
        rows = rows / BQ * BQ;
        qc = rows < BQ ? BQ : rows < nq ? (int)rows : nq;
        G = (float *)cuda_malloc(sizeof(float) * (size_t)qc * n_keys);
    }
    // The KL partials of every chunk's blocks, in chunk order, in one buffer (one copy back at the end).
    int64_t n_part = 0;
    for (int c0 = 0; c0 < nq; c0 += qc) {
        const int nc = nq - c0 < qc ? nq - c0 : qc, kend = hq[c0 + nc - 1] + 1;
        n_part += (int64_t)((nc + BQ - 1) / BQ) * ((kend + KCH - 1) / KCH);
    }
    double *part = (double *)cuda_malloc(sizeof(double) * (size_t)n_part);
    int64_t off = 0;  // this chunk's first partial
    for (int c0 = 0; c0 < nq; c0 += qc) {
        const int nc = nq - c0 < qc ? nq - c0 : qc, kend = hq[c0 + nc - 1] + 1;
        const int n_tiles = (nc + BQ - 1) / BQ, n_chunks = (kend + KCH - 1) / KCH;
        if (G) cuda_memset(G, 0, sizeof(float) * (size_t)nc * kend), prof_mark("G zeroed");
        launch_checked(indexer_kl_kernel, dim3(n_tiles, n_chunks), NT, kl_smem(dI, dh), part + off, nullptr, nullptr,
                       L.qs + (int64_t)c0 * ix_row_floats(dI), L.ks, L.lse + c0, tq, tk, tlse,
                       (const __nv_bfloat16 *)L.tqb, (const __nv_bfloat16 *)L.tkb, queries + c0, nullptr, nullptr,
                       nullptr, nc, T, Hq, Hkv, dh, dI, scale, c_col, 1.0f / nq, 1.0f / Hq, G, (int64_t)kend, 0);
        prof_mark("loss kernel");
        off += (int64_t)n_tiles * n_chunks;
        if (G) loss_take_back(&L, G, c0, nc, kend, dI), prof_mark("gradient GEMMs");
    }
    double *hpart = (double *)malloc(sizeof(double) * (size_t)n_part);
    if (!hpart) abort();
    cuda_to_host(hpart, part, sizeof(double) * (size_t)n_part);
    prof_mark("partials to host");
    double loss = 0.0;
    for (int64_t b = 0; b < n_part; b++) loss += hpart[b];
    loss /= nq;
    free(hpart), free(hq);
    cuda_free(part), cuda_free(G);
    loss_finish(&L, grads, cfg, params, x, queries, nq, n_keys);
    prof_report(__func__, nq, n_keys);
    return loss;
}

// A host int array onto the device (caller frees with cuda_free).
template <typename I>
static I *upload(const I *h, size_t n) {
    I *d = (I *)cuda_malloc(sizeof(I) * (n ? n : 1));
    if (n) cuda_to_device(d, h, sizeof(I) * n);
    return d;
}

extern "C" double indexer_objective_loss_cuda(float *grads, double *parts, const IndexerConfig *cfg,
                                              const IndexerObjective *obj, const float *params, const float *x,
                                              const float *tq, const float *tk, const float *tlse, int T, int Hq,
                                              int Hkv, int dh, float scale, const int32_t *queries, int n_queries,
                                              int bf16_teacher) {
    if (obj->kind == INDEXER_OBJ_QUERY) {
        const double l = indexer_kl_loss_cuda(grads, cfg, params, x, tq, tk, tlse, T, Hq, Hkv, dh, scale, queries,
                                              n_queries, bf16_teacher);
        if (parts) parts[0] = l, parts[1] = NAN;
        return l;
    }
    if (parts) parts[0] = parts[1] = 0.0;
    if (n_queries <= 0) return 0.0;
    require_collapsed(cfg, __func__);
    require_shapes(cfg, dh, __func__);
    if (Hq % Hkv != 0 || obj->bsel < 1 || !(obj->block_weight >= 0.0) ||
        (obj->kind != INDEXER_OBJ_BLOCK && obj->kind != INDEXER_OBJ_MIX)) {
        fprintf(stderr, "spindle: %s: Hq = %d / Hkv = %d, objective %d, bsel %d, weight %g not usable\n", __func__, Hq,
                Hkv, (int)obj->kind, obj->bsel, obj->block_weight);
        abort();
    }
    const int nq = n_queries, dI = cfg->d_index, bsel = obj->bsel;
    const double w_query = obj->kind == INDEXER_OBJ_MIX ? 1.0 : 0.0;
    const double w_block = obj->kind == INDEXER_OBJ_MIX ? obj->block_weight : 1.0;
    int n_keys;
    int32_t *hq = host_queries(queries, nq, T, 1, &n_keys, __func__);

    // Blocks (runs of one ⌊t/bsel⌋) and their tiles of ≤ BQ rows, on the host.
    int32_t *seg_tile0 = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq), *seg_ntile = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq);
    int32_t *seg_nb = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq), *seg_kend = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq);
    int64_t *seg_off = (int64_t *)malloc(sizeof(int64_t) * (size_t)nq), *tile_off = (int64_t *)malloc(sizeof(int64_t) * (size_t)nq);
    int32_t *tile_r0 = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq), *tile_nr = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq);
    int32_t *tile_seg = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq), *tile_kend = (int32_t *)malloc(sizeof(int32_t) * (size_t)nq);
    if (!seg_tile0 || !seg_ntile || !seg_nb || !seg_kend || !seg_off || !tile_off || !tile_r0 || !tile_nr || !tile_seg ||
        !tile_kend)
        abort();
    int n_seg = 0, n_tile = 0;
    int64_t seg_len = 0, tile_len = 0;
    for (int ra = 0; ra < nq;) {
        int rb = ra;
        while (rb < nq && hq[rb] / bsel == hq[ra] / bsel) rb++;
        seg_tile0[n_seg] = n_tile, seg_nb[n_seg] = rb - ra, seg_kend[n_seg] = hq[rb - 1] + 1, seg_off[n_seg] = seg_len;
        seg_len += seg_kend[n_seg];
        for (int c0 = ra; c0 < rb; c0 += BQ) {
            tile_r0[n_tile] = c0, tile_nr[n_tile] = rb - c0 < BQ ? rb - c0 : BQ, tile_seg[n_tile] = n_seg;
            tile_kend[n_tile] = hq[c0 + tile_nr[n_tile] - 1] + 1, tile_off[n_tile] = tile_len;
            tile_len += tile_kend[n_tile];
            n_tile++;
        }
        seg_ntile[n_seg] = n_tile - seg_tile0[n_seg];
        n_seg++;
        ra = rb;
    }
    int32_t *d_seg_tile0 = upload(seg_tile0, n_seg), *d_seg_ntile = upload(seg_ntile, n_seg);
    int32_t *d_seg_nb = upload(seg_nb, n_seg), *d_seg_kend = upload(seg_kend, n_seg);
    int64_t *d_seg_off = upload(seg_off, n_seg), *d_tile_off = upload(tile_off, n_tile);
    int32_t *d_tile_r0 = upload(tile_r0, n_tile), *d_tile_nr = upload(tile_nr, n_tile);
    int32_t *d_tile_seg = upload(tile_seg, n_tile), *d_tile_kend = upload(tile_kend, n_tile);

    LossSetup L = loss_setup(grads != NULL, cfg, params, x, tq, tk, queries, nq, n_keys, Hq, Hkv, dh, bf16_teacher);
    float *q = L.qs, *k = L.ks, *lse = L.lse;  // the rows the kernels stage
    const float c_col = 1.0f / sqrtf((float)dI);
    const int n_chunks = (n_keys + KCH - 1) / KCH;
    const size_t smem_lse = lse_smem(dI);

    // Chunks of whole blocks: with gradients, a chunk's rows × keys (its last position + 1) fit one G
    // buffer of CHUNK_FLOATS (a block alone may need more: the buffer grows to it), at most
    // SPINDLE_KL_ROWS rows when set; without, one chunk. Per chunk: pass 2 over its tiles (KL, column
    // sums and, MIX, G = (Q − P)·w/|𝒯| into the buffer), Ā, Q̄, ρ of its blocks, then c_t and the block
    // term added into G element by element, and two fp32 GEMMs take G back into dq^I, dk^I as the
    // per-query objective's — no atomics, so the gradients are the same bits on every run.
    int32_t *chunk_seg0 = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_seg + 1));
    if (!chunk_seg0) abort();
    int n_chunk = 0;
    int64_t g_floats = 0, n_part = 0, n_klb = 0;
    {
        const long cap = grads ? kl_rows_cap() : 0;
        for (int s0 = 0; s0 < n_seg;) {
            const int r0 = tile_r0[seg_tile0[s0]];
            int s1 = s0 + 1;
            while (grads && s1 < n_seg) {
                const int64_t rows = tile_r0[seg_tile0[s1]] + seg_nb[s1] - r0;
                if (rows * seg_kend[s1] > CHUNK_FLOATS || (cap > 0 && rows > cap)) break;
                s1++;
            }
            const int last = seg_tile0[s1 - 1] + seg_ntile[s1 - 1] - 1, kend = seg_kend[s1 - 1];
            const int64_t rows = tile_r0[last] + tile_nr[last] - r0;
            g_floats = rows * kend > g_floats ? rows * kend : g_floats;
            n_part += (int64_t)(last + 1 - seg_tile0[s0]) * ((kend + KCH - 1) / KCH);
            n_klb += (int64_t)(s1 - s0) * ((kend + 255) / 256);
            chunk_seg0[n_chunk++] = s0;
            s0 = s1;
        }
        chunk_seg0[n_chunk] = n_seg;
    }
    float *pcol = (float *)cuda_malloc(sizeof(float) * (size_t)tile_len);
    float *qcol = (float *)cuda_malloc(sizeof(float) * (size_t)tile_len);
    const size_t smem_kl = kl_smem(dI, dh);
    CUDA_CHECK(cudaFuncSetAttribute(block_c_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_lse));
    CUDA_CHECK(cudaFuncSetAttribute(block_grad_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_lse));
    double *part = (double *)cuda_malloc(sizeof(double) * (size_t)n_part);
    double *klb = (double *)cuda_malloc(sizeof(double) * (size_t)n_klb);
    float *rho = (float *)cuda_malloc(sizeof(float) * (size_t)seg_len);
    const int query_grads = grads && w_query > 0.0, block_grads = grads && w_block > 0.0;
    float *G = grads ? (float *)cuda_malloc(sizeof(float) * (size_t)g_floats) : NULL;
    float *cpart = block_grads ? (float *)cuda_malloc(sizeof(float) * (size_t)n_chunks * nq) : NULL;
    int64_t poff = 0, koff = 0;  // the chunk's first KL partials
    for (int c = 0; c < n_chunk; c++) {
        const int sa = chunk_seg0[c], sb = chunk_seg0[c + 1], ta = seg_tile0[sa];
        const int tb = seg_tile0[sb - 1] + seg_ntile[sb - 1], kend = seg_kend[sb - 1];
        const int R0 = tile_r0[ta], rows = tile_r0[tb - 1] + tile_nr[tb - 1] - R0;
        const int ky = (kend + KCH - 1) / KCH, gx = (kend + 255) / 256;
        if (G) cuda_memset(G, 0, sizeof(float) * (size_t)rows * kend);
        launch_checked(indexer_kl_kernel, dim3(tb - ta, ky), NT, smem_kl, part + poff, pcol, qcol, q, k, lse, tq, tk,
                       tlse, (const __nv_bfloat16 *)L.tqb, (const __nv_bfloat16 *)L.tkb, queries, d_tile_r0 + ta,
                       d_tile_nr + ta, d_tile_off + ta, nq, T, Hq, Hkv, dh, dI, scale, c_col, (float)(w_query / nq),
                       1.0f / Hq, query_grads ? G : nullptr, (int64_t)kend, R0);
        poff += (int64_t)(tb - ta) * ky;
        launch_checked(block_ratio_kernel, dim3(gx, sb - sa), 256, 0, rho, klb + koff, pcol, qcol, d_tile_off,
                       d_tile_kend, d_seg_tile0 + sa, d_seg_ntile + sa, d_seg_nb + sa, d_seg_kend + sa,
                       d_seg_off + sa);
        koff += (int64_t)(sb - sa) * gx;
        if (block_grads) {  // passes 3-4: c_t, then the block term into G
            launch_checked(block_c_kernel, dim3(tb - ta, ky), NT, smem_lse, cpart, q, k, lse, rho, queries,
                           d_tile_r0 + ta, d_tile_nr + ta, d_tile_seg + ta, d_seg_off, nq, dI, c_col);
            launch_checked(block_grad_kernel, dim3(tb - ta, ky), NT, smem_lse, G, (int64_t)kend, R0, q, k, lse, rho,
                           cpart, ky, queries, d_tile_r0 + ta, d_tile_nr + ta, d_tile_seg + ta, d_seg_off, d_seg_nb,
                           nq, dI, c_col, (float)(w_block / n_seg));
        }
        if (G) loss_take_back(&L, G, R0, rows, kend, dI);
    }
    double *hpart = (double *)malloc(sizeof(double) * (size_t)(n_part > n_klb ? n_part : n_klb));
    if (!hpart) abort();
    cuda_to_host(hpart, part, sizeof(double) * (size_t)n_part);
    double l_query = 0.0, l_block = 0.0;
    for (int64_t b = 0; b < n_part; b++) l_query += hpart[b];
    cuda_to_host(hpart, klb, sizeof(double) * (size_t)n_klb);
    for (int64_t b = 0; b < n_klb; b++) l_block += hpart[b];
    l_query /= nq, l_block /= n_seg;
    free(hpart), free(chunk_seg0);
    if (parts) parts[0] = l_query, parts[1] = l_block;
    cuda_free(G), cuda_free(cpart);
    prof_mark("objective passes");  // the loss and gradient passes of the objective, together
    loss_finish(&L, grads, cfg, params, x, queries, nq, n_keys);
    prof_report(__func__, nq, n_keys);
    cuda_free(part), cuda_free(pcol), cuda_free(qcol), cuda_free(rho), cuda_free(klb);
    cuda_free(d_seg_tile0), cuda_free(d_seg_ntile), cuda_free(d_seg_nb), cuda_free(d_seg_kend), cuda_free(d_seg_off);
    cuda_free(d_tile_off), cuda_free(d_tile_r0), cuda_free(d_tile_nr), cuda_free(d_tile_seg), cuda_free(d_tile_kend);
    free(hq), free(seg_tile0), free(seg_ntile), free(seg_nb), free(seg_kend), free(seg_off), free(tile_off);
    free(tile_r0), free(tile_nr), free(tile_seg), free(tile_kend);
    return w_query * l_query + w_block * l_block;
}

extern "C" double indexer_mass_recall_cuda(float *recall, const IndexerConfig *cfg, const float *params,
                                           const float *x, const float *tq, const float *tk, const float *tlse, int T,
                                           int Hq, int Hkv, int dh, float scale, const int32_t *queries, int n_queries,
                                           int k) {
    if (n_queries <= 0) return 0.0;
    require_collapsed(cfg, __func__);
    if (Hq % Hkv != 0 || k < 1) {
        fprintf(stderr, "spindle: %s: Hq = %d not a multiple of Hkv = %d, or k = %d < 1\n", __func__, Hq, Hkv, k);
        abort();
    }
    const int nq = n_queries, dI = cfg->d_index, dm = cfg->d_model;
    int n_keys;
    int32_t *hpos = host_queries(queries, nq, T, 0, &n_keys, __func__);

    float *xq = (float *)cuda_malloc(sizeof(float) * (size_t)nq * dm);
    float *q = (float *)cuda_malloc(sizeof(float) * (size_t)nq * dI);
    float *kk = (float *)cuda_malloc(sizeof(float) * (size_t)n_keys * dI);
    gather_rows(xq, x, queries, nq, dm);
    queries_forward(q, cfg, params, xq, queries, nq, n_keys, 0);
    keys_forward(kk, NULL, NULL, cfg, params, x, n_keys, 0);
    cuda_free(xq);

    int64_t ch = CHUNK_FLOATS / n_keys;
    ch = ch < 1 ? 1 : ch > 1024 ? 1024 : ch;
    if (ch > nq) ch = nq;
    float *R = (float *)cuda_malloc(sizeof(float) * (size_t)ch * n_keys);
    int32_t *sel = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)ch * k);
    int32_t *nsel = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)ch);
    float *rec = (float *)cuda_malloc(sizeof(float) * (size_t)nq);
    const float c_col = 1.0f / sqrtf((float)dI);
    for (int r0 = 0; r0 < nq; r0 += (int)ch) {
        const int nr = nq - r0 < ch ? nq - r0 : (int)ch;
        int len = 0;
        for (int r = r0; r < r0 + nr; r++) len = hpos[r] + 1 > len ? hpos[r] + 1 : len;
        // R[r, j] = q^I_r·k^I_j/√d_I for j < len; −FLT_MAX past the row's position.
        gemm_abt(R, n_keys, q + (int64_t)r0 * dI, dI, kk, dI, nr, len, dI, c_col, 0.0f);
        launch_checked(mask_future_kernel, dim3((len + 255) / 256 < 64 ? (len + 255) / 256 : 64, nr), 256, 0, R, n_keys,
                       queries + r0, nr, len);
        topk_rows_cuda(sel, nsel, R, nr, n_keys, len, 0, len, k);
        launch_checked(recall_kernel, nr, 256, 0, rec + r0, sel, nsel, k, queries + r0, tq, tk, tlse, T, Hq, Hkv, dh,
                       scale);
    }
    float *hrec = (float *)malloc(sizeof(float) * (size_t)nq);
    if (!hrec) abort();
    cuda_to_host(hrec, rec, sizeof(float) * (size_t)nq);
    double mean = 0.0;
    for (int r = 0; r < nq; r++) mean += hrec[r];
    if (recall) CUDA_CHECK(cudaMemcpy(recall, rec, sizeof(float) * (size_t)nq, cudaMemcpyDeviceToDevice));
    free(hrec), free(hpos);
    cuda_free(R), cuda_free(sel), cuda_free(nsel), cuda_free(rec), cuda_free(q), cuda_free(kk);
    return mean / nq;
}

// The block-shared selection from bf16 copies of q and kk through
// indexer_block_scores_bf16_cuda, for blocks b_first … in n_chunks chunks of
// equal size, each at most 4·CHUNK_FLOATS of A (the chunk's [blocks, T]
// ranking values, 1 GiB: all 2048 blocks of 64 at 128K in one launch when
// n_chunks is 1, whose longest-first order then balances the SMs; in chunks of
// 512 the first chunks left SMs idle behind their longest block). With attend
// (indexer_select_blocks_overlap_cuda): each chunk's values and top-k on side
// stream 1, then attend(ctx, b0, nb) with side stream 2 current and ordered
// after them; A is free for the next chunk once the previous chunk's top-k,
// queued before on stream 1, has read it. -1 when that kernel declines (it does
// so for the first chunk or not at all, before anything reaches stream 2).
static int select_blocks_bf16(int32_t *sel, int32_t *n_sel, const float *q, const float *kk, int T, int dI,
                              float c_col, int k, int bsel, int b_first, int n_chunks,
                              void (*attend)(void *ctx, int b0, int nb), void *ctx) {
    const int n_blocks = (T + bsel - 1) / bsel;
    int64_t nb = (n_blocks - b_first + (int64_t)n_chunks - 1) / n_chunks, cap = 4 * CHUNK_FLOATS / T;
    nb = nb > cap ? cap : nb;
    nb = nb < 1 ? 1 : nb;
    void *qb = cuda_malloc(2 * (size_t)T * dI), *kb = cuda_malloc(2 * (size_t)T * dI);
    cuda_f32_to_bf16(qb, q, (int64_t)T * dI);
    cuda_f32_to_bf16(kb, kk, (int64_t)T * dI);
    float *A = (float *)cuda_malloc(sizeof(float) * (size_t)nb * T);
    int rc = 0;
    for (int b0 = b_first; b0 < n_blocks && rc == 0; b0 += (int)nb) {
        const int nbk = n_blocks - b0 < nb ? n_blocks - b0 : (int)nb;
        if (attend) cuda_stream_use(1);
        rc = indexer_block_scores_bf16_cuda(A, T, qb, kb, T, dI, c_col, bsel, b0, nbk);
        if (rc == 0) topk_rows_cuda(sel + (int64_t)b0 * k, n_sel + b0, A, nbk, T, (b0 + 1) * bsel, bsel, T, k);
        if (rc == 0 && attend) {
            cuda_stream_after(2, 1);
            cuda_stream_use(2);
            attend(ctx, b0, nbk);
        }
    }
    if (attend) cuda_stream_use(0);  // the frees below wait for both side streams (blocking streams)
    cuda_free(qb), cuda_free(kb), cuda_free(A);
    return rc;
}

// indexer_select_cuda's rows from the projections q, kk [T, dI] (tf32: the
// score GEMMs on TF32 tensor cores).
static void select_projected(int32_t *sel, int32_t *n_sel, const float *q, const float *kk, int T, int dI, int k,
                             int bsel, IndexerScores scores, int tf32) {
    const float c_col = 1.0f / sqrtf((float)dI);
    int64_t ch = CHUNK_FLOATS / T;  // score rows per chunk
    ch = ch < 1 ? 1 : ch > 1024 ? 1024 : ch;
    // Per query, bf16, SPINDLE_FUSED_SELECT=1: scores and selection fused on tensor cores (no score
    // buffer); the TF32 path below where that kernel declines the shape.
    int fused = bsel == 1 && scores == IX_SCORES_BF16 && env_long("SPINDLE_FUSED_SELECT", 0, 0, 1) == 1;
    if (fused) {
        void *qb = cuda_malloc(2 * (size_t)T * dI), *kb = cuda_malloc(2 * (size_t)T * dI);
        cuda_f32_to_bf16(qb, q, (int64_t)T * dI);
        cuda_f32_to_bf16(kb, kk, (int64_t)T * dI);
        fused = indexer_select_fused_bf16_cuda(sel, n_sel, qb, kb, T, dI, c_col, k) == 0;
        cuda_free(qb), cuda_free(kb);
    }
    if (fused) {
        // done on tensor cores, without a score buffer
    } else if (bsel > 1 && scores == IX_SCORES_BF16 &&
               select_blocks_bf16(sel, n_sel, q, kk, T, dI, c_col, k, bsel, 0, 1, NULL, NULL) == 0) {
        // done on tensor cores, without score buffers
    } else if (bsel == 1) {
        if (ch > T) ch = T;
        float *R = (float *)cuda_malloc(sizeof(float) * (size_t)ch * T);
        for (int t0 = 0; t0 < T; t0 += (int)ch) {
            const int nr = T - t0 < ch ? T - t0 : (int)ch, len = t0 + nr;
            if (tf32) gemm_abt_tf32(R, T, q + (int64_t)t0 * dI, dI, kk, dI, nr, len, dI, c_col);
            else gemm_abt(R, T, q + (int64_t)t0 * dI, dI, kk, dI, nr, len, dI, c_col, 0.0f);
            topk_rows_cuda(sel + (int64_t)t0 * k, n_sel + t0, R, nr, T, t0 + 1, 1, T, k);
        }
        cuda_free(R);
    } else {
        const int n_blocks = (T + bsel - 1) / bsel;
        int nb = (int)(ch / bsel);  // blocks per chunk
        nb = nb < 1 ? 1 : nb > n_blocks ? n_blocks : nb;
        const int64_t rows = (int64_t)nb * bsel;
        float *R = (float *)cuda_malloc(sizeof(float) * (size_t)rows * T);
        float *A = (float *)cuda_malloc(sizeof(float) * (size_t)nb * T);
        float *mx = (float *)cuda_malloc(sizeof(float) * (size_t)rows);
        float *inv = (float *)cuda_malloc(sizeof(float) * (size_t)rows);
        for (int b0 = 0; b0 < n_blocks; b0 += nb) {
            const int nbk = n_blocks - b0 < nb ? n_blocks - b0 : nb;
            const int q0 = b0 * bsel, q1 = (b0 + nbk) * bsel < T ? (b0 + nbk) * bsel : T;
            if (tf32) gemm_abt_tf32(R, T, q + (int64_t)q0 * dI, dI, kk, dI, q1 - q0, q1, dI, c_col);
            else gemm_abt(R, T, q + (int64_t)q0 * dI, dI, kk, dI, q1 - q0, q1, dI, c_col, 0.0f);
            launch_checked(row_softmax_stats_kernel, q1 - q0, 256, 0, mx, inv, R, T, q0);
            const int gx = (q1 + 255) / 256 < 128 ? (q1 + 255) / 256 : 128;
            launch_checked(block_aggregate_kernel, dim3(gx, nbk), 256, 0, A, T, R, mx, inv, q0, bsel, T);
            topk_rows_cuda(sel + (int64_t)b0 * k, n_sel + b0, A, nbk, T, (b0 + 1) * bsel, bsel, T, k);
        }
        cuda_free(R), cuda_free(A), cuda_free(mx), cuda_free(inv);
    }
}

// Every position's indexer q and k (q^I [T, dI], k^I [T, dI]), as the selection projects them.
static void project_all(float **q, float **kk, const IndexerConfig *cfg, const float *params, const float *x, int T,
                        int tf32) {
    *q = (float *)cuda_malloc(sizeof(float) * (size_t)T * cfg->d_index);
    *kk = (float *)cuda_malloc(sizeof(float) * (size_t)T * cfg->d_index);
    // Every position is a query; q and k share x.
    queries_forward(*q, cfg, params, x, NULL, T, T, tf32);
    keys_forward(*kk, NULL, NULL, cfg, params, x, T, tf32);
}

extern "C" void indexer_select_cuda(int32_t *sel, int32_t *n_sel, const IndexerConfig *cfg, const float *params,
                                    const float *x, int T, int k, int bsel, IndexerScores scores) {
    if (T < 0 || k < 1 || bsel < 1) {
        fprintf(stderr, "spindle: %s: bad arguments T = %d, k = %d, bsel = %d\n", __func__, T, k, bsel);
        abort();
    }
    if (T == 0) return;
    require_collapsed(cfg, __func__);
    // Projections, like the scores, on TF32 tensor cores unless fp32 is asked for.
    const int tf32 = scores != IX_SCORES_FP32;
    float *q, *kk;
    project_all(&q, &kk, cfg, params, x, T, tf32);
    select_projected(sel, n_sel, q, kk, T, cfg->d_index, k, bsel, scores, tf32);
    cuda_free(q), cuda_free(kk);
}

extern "C" int indexer_select_blocks_overlap_cuda(int32_t *sel, int32_t *n_sel, const IndexerConfig *cfg,
                                                  const float *params, const float *x, int T, int k, int bsel,
                                                  int b_first, int n_chunks, void (*attend)(void *ctx, int b0, int nb),
                                                  void *ctx) {
    const int n_blocks = T > 0 && bsel > 0 ? (T + bsel - 1) / bsel : 0;
    if (T < 0 || k < 1 || bsel < 1 || n_chunks < 1 || b_first < 0 || (T > 0 && b_first >= n_blocks) || !attend) {
        fprintf(stderr, "spindle: %s: bad arguments T = %d, k = %d, bsel = %d, first block %d, chunks = %d\n",
                __func__, T, k, bsel, b_first, n_chunks);
        abort();
    }
    if (T == 0) return 0;
    require_collapsed(cfg, __func__);
    const int dI = cfg->d_index;
    // The block kernel's shapes, asked before the projections so that a caller's fallback does not make them twice.
    if ((dI != 64 && dI != 128) || bsel < 16 || bsel > 128 || bsel % 16) return -1;
    float *q, *kk;
    project_all(&q, &kk, cfg, params, x, T, 1);
    const int rc = select_blocks_bf16(sel, n_sel, q, kk, T, dI, 1.0f / sqrtf((float)dI), k, bsel, b_first, n_chunks,
                                      attend, ctx);
    cuda_free(q), cuda_free(kk);
    if (rc != 0) {
        fprintf(stderr, "spindle: %s: the block kernel declined d_index %d, bsel %d (%s:%d)\n", __func__, dI, bsel,
                __FILE__, __LINE__);
        abort();
    }
    return 0;
}

extern "C" void indexer_select_refined_cuda(int32_t *sel, int32_t *n_sel, const IndexerConfig *cfg,
                                            const float *params, const float *x, int T, int k, int bsel, int cand,
                                            IndexerScores scores) {
    if (T < 0 || k < 1 || bsel < 1 || cand < k) {
        fprintf(stderr, "spindle: %s: bad arguments T = %d, k = %d, bsel = %d, cand = %d\n", __func__, T, k, bsel,
                cand);
        abort();
    }
    if (T == 0) return;
    require_collapsed(cfg, __func__);
    const int tf32 = scores != IX_SCORES_FP32, dI = cfg->d_index, n_blocks = (T + bsel - 1) / bsel;
    float *q, *kk;
    project_all(&q, &kk, cfg, params, x, T, tf32);
    // Stage 1: C_B, the block-shared selection at k = cand.
    int32_t *csel = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)n_blocks * cand);
    int32_t *cn = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)n_blocks);
    select_projected(csel, cn, q, kk, T, dI, cand, bsel, scores, tf32);
    // Stage 2, in chunks of whole blocks: each query's scores over its block's candidates, their top-k.
    int nb = (int)(CHUNK_FLOATS / ((int64_t)bsel * cand));
    nb = nb < 1 ? 1 : nb > n_blocks ? n_blocks : nb;
    const int64_t rows = (int64_t)nb * bsel;
    float *R = (float *)cuda_malloc(sizeof(float) * (size_t)rows * cand);
    int32_t *pos = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)rows * k);
    int32_t *pn = (int32_t *)cuda_malloc(sizeof(int32_t) * (size_t)rows);
    for (int b0 = 0; b0 < n_blocks; b0 += nb) {
        const int nbk = n_blocks - b0 < nb ? n_blocks - b0 : nb;
        const int t0 = b0 * bsel, nr = ((b0 + nbk) * bsel < T ? (b0 + nbk) * bsel : T) - t0;
        indexer_refine_scores_cuda(R, cand, q, kk, dI, 1.0f / sqrtf((float)dI), csel, cn, cand, T, bsel, b0, nbk);
        topk_rows_cuda(pos, pn, R, nr, cand, cand, 0, cand, k);
        indexer_refine_rows_cuda(sel, n_sel, pos, pn, csel, cn, cand, k, bsel, t0, nr);
    }
    cuda_free(R), cuda_free(pos), cuda_free(pn), cuda_free(csel), cuda_free(cn);
    cuda_free(q), cuda_free(kk);
}
