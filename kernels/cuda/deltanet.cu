// deltanet.cu: the ops of a Gated DeltaNet (linear attention) layer, CUDA twin
// of kernels/cpu/deltanet_cpu.c: the causal depthwise conv1d, the row L2 norm,
// the gated RMSNorm, the decay and write gates, and the gated delta rule in
// its chunked form (the prefill).
//
// The chunked gated delta rule, per chunk of n ≤ C tokens (C ≤ 64) and value
// head, with γ_i = Σ_{m≤i} g_m the in-chunk cumulative log decay and S the
// state [dk, dv] entering the chunk (the CPU twin's algebra, its comment has
// the derivation):
//   L = β_i (k_i·k_j) e^{γ_i − γ_j} (j < i),  Tm = (I + L)⁻¹
//   W = Tm (β e^γ ⊙ K),  U = Tm (β ⊙ V)
//   V' = U − W S
//   O  = (e^γ ⊙ Q) S + P V',  P = (Q Kᵀ ⊙ e^{γ_i − γ_j}, j ≤ i)
//   S ← e^{γ_n} S + (e^{γ_n − γ} ⊙ K)ᵀ V'
// Three kernels:
//   dn_norms_kernel      inverse L2 norms of the q and k rows (one warp a row).
//   dn_chunk_kernel      everything that does not depend on S, every chunk and
//                        value head in parallel (grid: chunks × Hv): Tm by
//                        forward substitution in shared memory, then W, U, P and
//                        the decayed Q and K, written to a workspace in the
//                        layouts the next kernel reads with 16-byte loads.
//   dn_state_kernel      the sequential part (grid: ⌈dv/BV⌉ × Hv, BV = 32 or 16):
//                        one block carries a BV-column tile of one head's state through
//                        the chunks in order, in registers and shared memory,
//                        and writes O and the final state.
// A long sequence goes through in segments of whole chunks (the workspace holds
// one segment), the state carried from one segment to the next, so the result
// equals one pass over T. Inputs q, k, v in fp32, bf16 or f16 (DType), widened
// on load; g, beta, the state and all arithmetic fp32.
//
// Under SPINDLE_CUDA_EMULATION (tests/emu: the kernels on host threads, for
// checking them without a GPU) the launch and the dynamic shared memory go
// through the emulation's stand-ins; nothing else differs.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_check.cuh"
#include "device_util.cuh"
#include "ops_cuda.h"

enum {
    DN_C = 64,          // chunk slots: tiles hold 64 rows whatever the chunk, rows ≥ n zero
    DN_THREADS = 256,   // every kernel but the norms'
    DN_LDT = DN_C + 4,  // row stride of a transposed [d][64] tile filled from rows (4-way store conflicts, 16-byte aligned)
    DN_LDS = DN_C + 1,  // row stride of the substitution's [64][64] matrices (conflict free)
    DN_DMAX = 256,      // largest dk, dv
};

static __device__ __forceinline__ float widen(float x) { return x; }
static __device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ float widen(__half x) { return __half2float(x); }

static __device__ __forceinline__ float dn_silu(float x) { return x / (1.0f + expf(-x)); }

static __host__ __device__ __forceinline__ int round4(int x) { return (x + 3) & ~3; }

// ---- the small ops --------------------------------------------------------------------

// One thread per (t, c), taps in the CPU twin's order.
__global__ void __launch_bounds__(DN_THREADS) causal_conv1d_kernel1(float *out, const float *x, const float *w,
                                                                   const float *bias, int T, int C, int K,
                                                                   int apply_silu) {
    const int64_t n = (int64_t)T * C;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        const int t = (int)(e / C), c = (int)(e % C);
        float y = bias ? bias[c] : 0.0f;
        for (int j = 0; j < K; j++) {
            const int s = t - (K - 1) + j;
            if (s >= 0) y += w[(int64_t)c * K + j] * x[(int64_t)s * C + c];
        }
        out[e] = apply_silu ? dn_silu(y) : y;
    }
}

// One warp per row; the whole warp leaves together past the last row.
__global__ void __launch_bounds__(DN_THREADS) l2norm_rows_kernel1(float *x, int rows, int C, float eps) {
    const int lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * (DN_THREADS / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    float *xr = x + r * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += xr[c] * xr[c];
    ss = warp_sum(ss);
    const float inv = 1.0f / sqrtf(ss + eps);
    for (int c = lane; c < C; c += 32) xr[c] *= inv;
}

// One block per row: the sum of squares (warp shuffles, then the warps' sums in
// order), then every thread scales and gates its strided slice. Each element is
// read before the barrier and written after it by the same thread, so out may
// alias x or z.
__global__ void __launch_bounds__(DN_THREADS) gated_rmsnorm_kernel1(float *out, const float *x, const float *z,
                                                                   const float *w, int C, float eps) {
    DYNAMIC_SMEM(red);
    const float *xr = x + (int64_t)blockIdx.x * C, *zr = z + (int64_t)blockIdx.x * C;
    float *y = out + (int64_t)blockIdx.x * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += xr[c] * xr[c];
    ss = warp_sum(ss);
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = ss;
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < (int)(blockDim.x / 32); i++) total += red[i];
    const float rstd = 1.0f / sqrtf(total / C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x) y[c] = w[c] * (xr[c] * rstd) * dn_silu(zr[c]);
}

__global__ void __launch_bounds__(DN_THREADS) deltanet_gates_kernel1(float *g, float *beta, const float *a,
                                                                    const float *b, const float *A_log,
                                                                    const float *dt_bias, int T, int Hv) {
    const int64_t n = (int64_t)T * Hv;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int h = (int)(i % Hv);
        const float x = a[i] + dt_bias[h];
        const float sp = x > 20.0f ? x : log1pf(expf(x));
        const float bi = b[i];  // read both inputs before writing: g may alias a, beta may alias b
        g[i] = -expf(A_log[h]) * sp;
        beta[i] = 1.0f / (1.0f + expf(-bi));
    }
}

// ---- the chunked gated delta rule ------------------------------------------------------

// The workspace of one segment of nch chunks, per (chunk, value head) tile
// (64-row tiles, rows ≥ n zero; dkp, dvp = dk, dv rounded up to 4, pad zero):
//   Wt [dkp][64]  Wᵀ                    Qt [dkp][64]  (e^γ ⊙ Q)ᵀ, Q scaled and normalised
//   Kd [64][dkp]  e^{γ_n − γ} ⊙ K        Pt [64][64]   Pᵀ (Pt[m][i] = P[i][m])
//   U  [64][dvp]                        en            e^{γ_n}, one float
struct DnWork {
    float *Wt, *Qt, *Kd, *Pt, *U, *en;
    float *rq, *rk;  // [Tseg, Hk] inverse norms of the q and k rows (1 without the L2 norm)
};

static __device__ __forceinline__ int64_t dn_tile(int chunk, int h, int Hv, int64_t size) {
    return ((int64_t)chunk * Hv + h) * size;
}

// rq[r] = 1/sqrt(Σ q_r² + 1e-6) (1 when !l2), likewise rk, for rows r of [T, Hk].
template <typename InT>
__global__ void __launch_bounds__(DN_THREADS) dn_norms_kernel(float *rq, float *rk, const InT *q, const InT *k,
                                                             int rows, int dk, int l2) {
    const int lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * (DN_THREADS / 32) + threadIdx.x / 32;
    if (r >= rows) return;  // a whole warp
    float sq = 0.0f, sk = 0.0f;
    if (l2)
        for (int c = lane; c < dk; c += 32) {
            const float a = widen(q[r * dk + c]), b = widen(k[r * dk + c]);
            sq += a * a, sk += b * b;
        }
    sq = warp_sum(sq), sk = warp_sum(sk);
    if (lane == 0) {
        rq[r] = l2 ? 1.0f / sqrtf(sq + 1e-6f) : 1.0f;
        rk[r] = l2 ? 1.0f / sqrtf(sk + 1e-6f) : 1.0f;
    }
}

// acc[r][s] += Σ_{m<K} A[m·lda + i0 + r] · B[m·ldb + j0 + s], r < 4, s < NS:
// a 4 × NS tile of a product whose operands are both stored k-major (16-byte
// loads of A, 8- or 16-byte loads of B; i0, j0, lda, ldb multiples of 4 or NS).
template <int NS>
static __device__ __forceinline__ void dn_mm(float (&acc)[4][NS], const float *A, int lda, int i0, const float *B,
                                             int ldb, int j0, int K) {
    for (int m = 0; m < K; m++) {
        const float4 a = *(const float4 *)(A + m * lda + i0);  // shared memory: int offsets
        float b[NS];
        if constexpr (NS == 4) {
            const float4 b4 = *(const float4 *)(B + m * ldb + j0);
            b[0] = b4.x, b[1] = b4.y, b[2] = b4.z, b[3] = b4.w;
        } else {
            const float2 b2 = *(const float2 *)(B + m * ldb + j0);
            b[0] = b2.x, b[1] = b2.y;
        }
        const float av[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int s = 0; s < NS; s++) acc[r][s] += av[r] * b[s];
    }
}

// Per (chunk, value head): everything of the chunk that does not need the state.
// Shared memory (floats): X [max(dkp·68, 64·dvp)] (Kᵀ, then β ⊙ V rows),
// Y [dkp·68] (Qᵀ, then β e^γ ⊙ K rows), Ls [64·65] (L, then Tmᵀ), Ts [64·65]
// (Tm), and 64 each of g/γ, β, e^γ, β e^γ, e^{γ_n − γ}.
template <typename InT>
__global__ void __launch_bounds__(DN_THREADS)
    dn_chunk_kernel(DnWork ws, const InT *q, const InT *k, const InT *v, const float *g, const float *beta, int T,
                    int Hk, int Hv, int dk, int dv, int C, float scale) {
    DYNAMIC_SMEM(sm);
    const int dkp = round4(dk), dvp = round4(dv);
    const int xsize = dkp * DN_LDT > DN_C * dvp ? dkp * DN_LDT : DN_C * dvp;
    float *X = sm, *Y = X + xsize, *Ls = Y + dkp * DN_LDT, *Ts = Ls + DN_C * DN_LDS;
    float *gs = Ts + DN_C * DN_LDS, *bs = gs + DN_C, *eg = bs + DN_C, *bg = eg + DN_C, *ek = bg + DN_C;

    const int chunk = blockIdx.x, h = blockIdx.y, kh = h / (Hv / Hk), tid = threadIdx.x;
    const int t0 = chunk * C, n = T - t0 < C ? T - t0 : C;

    // 1. g, beta of the chunk; Kᵀ and Qᵀ (normalised, q scaled), zero past n and dk.
    if (tid < DN_C) {
        gs[tid] = tid < n ? g[(int64_t)(t0 + tid) * Hv + h] : 0.0f;
        bs[tid] = tid < n ? beta[(int64_t)(t0 + tid) * Hv + h] : 0.0f;
    }
    for (int e = tid; e < DN_C * dkp; e += DN_THREADS) {
        const int i = e / dkp, c = e % dkp;
        float kv = 0.0f, qv = 0.0f;
        if (i < n && c < dk) {
            const int64_t row = (int64_t)(t0 + i) * Hk + kh;
            kv = widen(k[row * dk + c]) * ws.rk[row];
            qv = (widen(q[row * dk + c]) * ws.rq[row]) * scale;
        }
        X[c * DN_LDT + i] = kv;
        Y[c * DN_LDT + i] = qv;
    }
    __syncthreads();
    // 2. γ: the running sum in token order (as the CPU twin forms it), then the decays.
    if (tid == 0) {
        float acc = 0.0f;
        for (int i = 0; i < n; i++) {
            acc += gs[i];
            gs[i] = acc;
        }
        for (int i = n; i < DN_C; i++) gs[i] = acc;
    }
    __syncthreads();
    if (tid < DN_C) {
        const float gam = gs[tid], gn = gs[n - 1];
        const float e = tid < n ? expf(gam) : 0.0f;
        eg[tid] = e;
        bg[tid] = bs[tid] * e;
        ek[tid] = tid < n ? expf(gn - gam) : 0.0f;
        if (tid == 0) ws.en[(int64_t)chunk * Hv + h] = expf(gn);
    }
    __syncthreads();

    // 3. A = K Kᵀ and Q Kᵀ, a 4×4 tile of each per thread; L (strictly lower,
    //    β_i e^{γ_i − γ_j}) into Ls, Pᵀ (j ≤ i, e^{γ_i − γ_j}) to the workspace.
    {
        const int i0 = 4 * (tid % 16), j0 = 4 * (tid / 16);
        float a[4][4] = {}, p[4][4] = {};
        for (int c = 0; c < dkp; c++) {
            const float4 ki = *(const float4 *)(X + c * DN_LDT + i0);
            const float4 qi = *(const float4 *)(Y + c * DN_LDT + i0);
            const float4 kj = *(const float4 *)(X + c * DN_LDT + j0);
            const float kiv[4] = {ki.x, ki.y, ki.z, ki.w}, qiv[4] = {qi.x, qi.y, qi.z, qi.w};
            const float kjv[4] = {kj.x, kj.y, kj.z, kj.w};
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    a[r][s] += kiv[r] * kjv[s];
                    p[r][s] += qiv[r] * kjv[s];
                }
        }
        float *Pt = ws.Pt + dn_tile(chunk, h, Hv, DN_C * DN_C);
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int s = 0; s < 4; s++) {
                const int i = i0 + r, j = j0 + s;
                const float dec = expf(gs[i] - gs[j]);
                Ls[i * DN_LDS + j] = (j < i && i < n) ? a[r][s] * (bs[i] * dec) : 0.0f;
                p[r][s] = (j <= i && i < n) ? p[r][s] * dec : 0.0f;
            }
#pragma unroll
        for (int s = 0; s < 4; s++)
            *(float4 *)(Pt + (j0 + s) * DN_C + i0) = make_float4(p[0][s], p[1][s], p[2][s], p[3][s]);
    }
    // (e^γ ⊙ Q)ᵀ to the workspace.
    {
        float *Qt = ws.Qt + dn_tile(chunk, h, Hv, (int64_t)dkp * DN_C);
        for (int e = tid; e < dkp * DN_C; e += DN_THREADS) {
            const int c = e / DN_C, i = e % DN_C;
            Qt[e] = Y[c * DN_LDT + i] * eg[i];
        }
    }
    __syncthreads();

    // 4. Threads 0..63: Tm = (I + L)⁻¹ by forward substitution, thread j down
    //    column j: Tm[i][j] = −Σ_{j≤m<i} L[i][m] Tm[m][j], rows in order. Meanwhile the
    //    other threads load the rows of β e^γ ⊙ K (into Y), e^{γ_n − γ} ⊙ K (to
    //    the workspace) and β ⊙ V (into X).
    if (tid >= DN_C) {
        float *Kd = ws.Kd + dn_tile(chunk, h, Hv, (int64_t)DN_C * dkp);
        for (int e = tid - DN_C; e < DN_C * dkp; e += DN_THREADS - DN_C) {
            const int m = e / dkp, c = e % dkp;
            float kn = 0.0f;
            if (m < n && c < dk) {
                const int64_t row = (int64_t)(t0 + m) * Hk + kh;
                kn = widen(k[row * dk + c]) * ws.rk[row];
            }
            Y[e] = bg[m] * kn;
            Kd[e] = ek[m] * kn;
        }
        for (int e = tid - DN_C; e < DN_C * dvp; e += DN_THREADS - DN_C) {
            const int m = e / dvp, j = e % dvp;
            X[e] = (m < n && j < dv) ? bs[m] * widen(v[((int64_t)(t0 + m) * Hv + h) * dv + j]) : 0.0f;
        }
    }
    if (tid < DN_C) {  // column j of Tm depends only on L and column j itself: no barrier per row
        const int j = tid;
        for (int i = 0; i < n; i++) {
            float t = 0.0f;
            for (int m = j; m < i; m++) t += Ls[i * DN_LDS + m] * Ts[m * DN_LDS + j];
            Ts[i * DN_LDS + j] = j < i ? -t : (j == i ? 1.0f : 0.0f);
        }
    }
    __syncthreads();
    // 5. Tmᵀ into Ls (zero past row n, and above the diagonal).
    for (int e = tid; e < DN_C * DN_C; e += DN_THREADS) {
        const int m = e / DN_C, i = e % DN_C;
        Ls[m * DN_C + i] = (i < n && m <= i) ? Ts[i * DN_LDS + m] : 0.0f;
    }
    __syncthreads();

    // 6. W = Tm (β e^γ ⊙ K), stored transposed; U = Tm (β ⊙ V). 4×4 tiles: 16 row
    //    groups × 16 column groups a pass.
    {
        const int i0 = 4 * (tid % 16);
        float *Wt = ws.Wt + dn_tile(chunk, h, Hv, (int64_t)dkp * DN_C);
        for (int c0 = 4 * (tid / 16); c0 < dkp; c0 += 64) {
            float acc[4][4] = {};
            dn_mm<4>(acc, Ls, DN_C, i0, Y, dkp, c0, n);
#pragma unroll
            for (int s = 0; s < 4; s++)
                *(float4 *)(Wt + (int64_t)(c0 + s) * DN_C + i0) = make_float4(acc[0][s], acc[1][s], acc[2][s], acc[3][s]);
        }
        float *U = ws.U + dn_tile(chunk, h, Hv, (int64_t)DN_C * dvp);
        for (int j0 = 4 * (tid / 16); j0 < dvp; j0 += 64) {
            float acc[4][4] = {};
            dn_mm<4>(acc, Ls, DN_C, i0, X, dvp, j0, n);
#pragma unroll
            for (int r = 0; r < 4; r++)
                *(float4 *)(U + (int64_t)(i0 + r) * dvp + j0) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        }
    }
}

// The state's pass over the chunks of a segment, one block of 8·BV threads per
// (BV-column tile of dv, value head), BV = 32 or 16 (twice the blocks, for few
// heads). The block's state tile S [dkp][BV] lives in registers (a 4×4 tile of
// it per thread, two when dkp > 128) with a copy in shared memory that the
// products read. Per chunk:
//   load Wᵀ, (e^γ Q)ᵀ, Pᵀ, the U tile (and K_d, unless it must share W's buffer)
//   V' = U − W S                     4×2 tiles, 16 row × BV/2 column groups
//   O = (e^γ Q) S + P V'             to o (rows < n, columns < dv)
//   S ← e^{γ_n} S + K_dᵀ V'          in registers, then copied to shared memory
// Shared memory (floats): Bw [dkp·64], Bq [dkp·64], Bk [64·dkp] (absent when
// share_k: K_d then goes into Bw once V' is formed), Ps [64·64], Vp [64·BV],
// Ss [dkp·BV]. state_out may alias state_in: each block reads and writes only
// its own tile.
template <int BV>
__global__ void __launch_bounds__(8 * BV)
    dn_state_kernel(float *o, float *state_out, const float *state_in, DnWork ws, int T, int Hv, int dk, int dv,
                    int C, int share_k) {
    DYNAMIC_SMEM(sm);
    constexpr int NT = 8 * BV;  // threads: 16 × BV/2 V' tiles of 4×2, 32 × BV/4 state tiles of 4×4 a pass
    const int dkp = round4(dk), dvp = round4(dv);
    float *Bw = sm, *Bq = Bw + dkp * DN_C, *Bk = share_k ? Bw : Bq + dkp * DN_C;
    float *Ps = share_k ? Bq + dkp * DN_C : Bk + DN_C * dkp, *Vp = Ps + DN_C * DN_C, *Ss = Vp + DN_C * BV;

    const int tid = threadIdx.x, h = blockIdx.y, jt = blockIdx.x * BV;  // jt: first state column of the tile
    const int nch = (T + C - 1) / C;
    // This thread's state: rows c0 + 4·32·p … + 3 (p < 2), columns sj .. sj + 3.
    const int sj = 4 * (tid % (BV / 4)), sc = 4 * (tid / (BV / 4));
    float S[2][4][4];
    const float *Sin = state_in ? state_in + (int64_t)h * dk * dv : NULL;
#pragma unroll
    for (int p = 0; p < 2; p++)
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int s = 0; s < 4; s++) {
                const int c = sc + 128 * p + r, j = jt + sj + s;
                S[p][r][s] = (Sin && c < dk && j < dv) ? Sin[(int64_t)c * dv + j] : 0.0f;
            }
#pragma unroll
    for (int p = 0; p < 2; p++)
        if (sc + 128 * p < dkp)
#pragma unroll
            for (int r = 0; r < 4; r++)
                *(float4 *)(Ss + (sc + 128 * p + r) * BV + sj) = make_float4(S[p][r][0], S[p][r][1], S[p][r][2], S[p][r][3]);

    const int i0 = 4 * (tid % 16), j0 = 2 * (tid / 16);  // this thread's V' / O tile
    for (int chunk = 0; chunk < nch; chunk++) {
        const int t0 = chunk * C, n = T - t0 < C ? T - t0 : C;
        const float4 *Wt = (const float4 *)(ws.Wt + dn_tile(chunk, h, Hv, (int64_t)dkp * DN_C));
        const float4 *Qt = (const float4 *)(ws.Qt + dn_tile(chunk, h, Hv, (int64_t)dkp * DN_C));
        const float4 *Kd = (const float4 *)(ws.Kd + dn_tile(chunk, h, Hv, (int64_t)DN_C * dkp));
        const float4 *Pt = (const float4 *)(ws.Pt + dn_tile(chunk, h, Hv, DN_C * DN_C));
        const float *U = ws.U + dn_tile(chunk, h, Hv, (int64_t)DN_C * dvp);
        for (int e = tid; e < dkp * DN_C / 4; e += NT) {
            ((float4 *)Bw)[e] = Wt[e];
            ((float4 *)Bq)[e] = Qt[e];
            if (!share_k) ((float4 *)Bk)[e] = Kd[e];
        }
        for (int e = tid; e < DN_C * DN_C / 4; e += NT) ((float4 *)Ps)[e] = Pt[e];
        for (int e = tid; e < DN_C * BV; e += NT) {
            const int i = e / BV, j = jt + e % BV;
            Vp[e] = j < dv ? U[(int64_t)i * dvp + j] : 0.0f;
        }
        const float en = ws.en[(int64_t)chunk * Hv + h];
        __syncthreads();

        // V' = U − W S.
        {
            float acc[4][2] = {};
            dn_mm<2>(acc, Bw, DN_C, i0, Ss, BV, j0, dkp);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                float2 *u = (float2 *)(Vp + (i0 + r) * BV + j0);
                const float2 uv = *u;
                *u = make_float2(uv.x - acc[r][0], uv.y - acc[r][1]);
            }
        }
        __syncthreads();
        if (share_k) {
            for (int e = tid; e < dkp * DN_C / 4; e += NT) ((float4 *)Bk)[e] = Kd[e];
            __syncthreads();
        }

        // O = (e^γ Q) S + P V'.
        {
            float acc[4][2] = {};
            dn_mm<2>(acc, Bq, DN_C, i0, Ss, BV, j0, dkp);
            dn_mm<2>(acc, Ps, DN_C, i0, Vp, BV, j0, n);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = i0 + r;
                if (i >= n) continue;
                float *orow = o + ((int64_t)(t0 + i) * Hv + h) * dv;
#pragma unroll
                for (int s = 0; s < 2; s++)
                    if (jt + j0 + s < dv) orow[jt + j0 + s] = acc[r][s];
            }
        }
        // S ← e^{γ_n} S + K_dᵀ V' (K_d [64][dkp] is the k-major operand of the product).
#pragma unroll
        for (int p = 0; p < 2; p++) {
            if (sc + 128 * p >= dkp) continue;
            float acc[4][4];
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int s = 0; s < 4; s++) acc[r][s] = en * S[p][r][s];
            dn_mm<4>(acc, Bk, dkp, sc + 128 * p, Vp, BV, sj, n);
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int s = 0; s < 4; s++) S[p][r][s] = acc[r][s];
        }
        __syncthreads();
#pragma unroll
        for (int p = 0; p < 2; p++)
            if (sc + 128 * p < dkp)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    *(float4 *)(Ss + (sc + 128 * p + r) * BV + sj) =
                        make_float4(S[p][r][0], S[p][r][1], S[p][r][2], S[p][r][3]);
        // (the next chunk's loads touch neither Ss nor the registers; its barrier orders these stores)
    }

    if (state_out) {
        float *Sout = state_out + (int64_t)h * dk * dv;
#pragma unroll
        for (int p = 0; p < 2; p++)
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    const int c = sc + 128 * p + r, j = jt + sj + s;
                    if (c < dk && j < dv) Sout[(int64_t)c * dv + j] = S[p][r][s];
                }
    }
}

// ---- launchers ------------------------------------------------------------------------

static void dn_fail(const char *fn, const char *what) {
    fprintf(stderr, "spindle: %s: %s (%s)\n", fn, what, __FILE__);
    abort();
}

extern "C" void causal_conv1d_cuda(float *out, const float *x, const float *w, const float *bias, int T, int C,
                                   int K, int apply_silu) {
    if (T <= 0 || C <= 0) return;
    if (K <= 0) dn_fail("causal_conv1d_cuda", "kernel size must be positive");
    launch_checked(causal_conv1d_kernel1, dim3(grid_for((int64_t)T * C, DN_THREADS)), dim3(DN_THREADS), 0, out, x,
                   w, bias, T, C, K, apply_silu);
}

extern "C" void l2norm_rows_cuda(float *x, int rows, int C, float eps) {
    if (rows <= 0 || C <= 0) return;
    const int per = DN_THREADS / 32;
    launch_checked(l2norm_rows_kernel1, dim3((rows + per - 1) / per), dim3(DN_THREADS), 0, x, rows, C, eps);
}

extern "C" void gated_rmsnorm_cuda(float *out, const float *x, const float *z, const float *w, int rows, int C,
                                   float eps) {
    if (rows <= 0 || C <= 0) return;
    launch_checked(gated_rmsnorm_kernel1, dim3(rows), dim3(DN_THREADS), sizeof(float) * (DN_THREADS / 32), out, x, z,
                   w, C, eps);
}

extern "C" void deltanet_gates_cuda(float *g, float *beta, const float *a, const float *b, const float *A_log,
                                    const float *dt_bias, int T, int Hv) {
    if (T <= 0 || Hv <= 0) return;
    launch_checked(deltanet_gates_kernel1, dim3(grid_for((int64_t)T * Hv, DN_THREADS)), dim3(DN_THREADS), 0, g, beta,
                   a, b, A_log, dt_bias, T, Hv);
}

// The workspace holds one segment; 512 MiB of it by default (at Hv 32, dk = dv
// = 128 about 110 chunks, 7K tokens: enough blocks for dn_chunk_kernel to fill
// the GPU many times over). Grown on demand, kept for the next call.
static const size_t DN_WS_BYTES = (size_t)512 << 20;
static int g_segment_chunks;  // chunks per segment, 0: sized by DN_WS_BYTES
static int g_state_tile;      // dn_state_kernel's BV, 0: the default (32)
static float *g_ws;
static size_t g_ws_bytes;

extern "C" void gated_delta_rule_cuda_tune(int segment_chunks, int state_tile) {
    g_segment_chunks = segment_chunks > 0 ? segment_chunks : 0;
    g_state_tile = state_tile == 16 || state_tile == 32 ? state_tile : 0;
}

static float *dn_workspace(size_t bytes) {
    if (bytes > g_ws_bytes) {
        cuda_free(g_ws);
        g_ws = (float *)cuda_malloc(bytes);
        g_ws_bytes = bytes;
    }
    return g_ws;
}

template <typename InT>
static void dn_run(float *o, float *state_out, const InT *q, const InT *k, const InT *v, const float *g,
                   const float *beta, const float *state_in, int T, int Hk, int Hv, int dk, int dv, float scale,
                   int l2, int C) {
    const int dkp = round4(dk), dvp = round4(dv);
    const int xsize = dkp * DN_LDT > DN_C * dvp ? dkp * DN_LDT : DN_C * dvp;
    const size_t smem_chunk = sizeof(float) * ((size_t)xsize + (size_t)dkp * DN_LDT + 2 * DN_C * DN_LDS + 5 * DN_C);
    const int smem_max = device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    // BV = 32 unless a test or bench asks for 16: on an H200, 32 was the faster tile at
    // both Qwen3.5 shapes, also at 16 value heads, where it gives 64 blocks on 132 SMs and
    // 16 twice as many (docs/performance.md, "Gated DeltaNet chunked kernel").
    const int BV = g_state_tile ? g_state_tile : 32;
    const size_t smem_state2 = sizeof(float) * (2 * (size_t)dkp * DN_C + DN_C * DN_C + DN_C * BV + (size_t)dkp * BV);
    const size_t smem_state3 = smem_state2 + sizeof(float) * (size_t)dkp * DN_C;
    if (smem_chunk > (size_t)smem_max || smem_state2 > (size_t)smem_max)
        dn_fail("gated_delta_rule_chunked_cuda", "dk or dv too large for this GPU's shared memory");
    const int share_k = BV == 16 || smem_state3 > (size_t)smem_max;
    const size_t smem_state = share_k ? smem_state2 : smem_state3;
    void (*state_kernel)(float *, float *, const float *, DnWork, int, int, int, int, int, int) =
        BV == 16 ? dn_state_kernel<16> : dn_state_kernel<32>;
    CUDA_CHECK(cudaFuncSetAttribute(dn_chunk_kernel<InT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_chunk));
    CUDA_CHECK(cudaFuncSetAttribute(state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_state));

    // Segment of whole chunks and its workspace (floats; every array a multiple of 4).
    const int64_t tile_d = (int64_t)dkp * DN_C, tile_p = DN_C * DN_C, tile_u = (int64_t)DN_C * dvp;
    const int64_t per_chunk = (int64_t)Hv * (3 * tile_d + tile_p + tile_u + 1) + 2 * (int64_t)C * Hk + 8;
    const int nch_all = (T + C - 1) / C;
    int seg = g_segment_chunks ? g_segment_chunks : (int)(DN_WS_BYTES / (sizeof(float) * per_chunk));
    if (seg < 1) seg = 1;
    if (seg > nch_all) seg = nch_all > 0 ? nch_all : 1;
    const int nseg = (nch_all + seg - 1) / seg;
    const int need_scratch = !state_out && nseg > 1;
    const int64_t sn = (int64_t)seg * Hv, srows = (int64_t)seg * C * Hk;
    const int64_t ws_floats = sn * (3 * tile_d + tile_p + tile_u) + ((sn + 3) & ~3) + 2 * ((srows + 3) & ~3) +
                              (need_scratch ? (int64_t)Hv * dk * dv : 0);
    float *w = dn_workspace(sizeof(float) * (size_t)ws_floats);
    DnWork ws;
    ws.Wt = w, ws.Qt = ws.Wt + sn * tile_d, ws.Kd = ws.Qt + sn * tile_d, ws.Pt = ws.Kd + sn * tile_d;
    ws.U = ws.Pt + sn * tile_p, ws.en = ws.U + sn * tile_u, ws.rq = ws.en + ((sn + 3) & ~3);
    ws.rk = ws.rq + ((srows + 3) & ~3);
    float *carry = need_scratch ? ws.rk + ((srows + 3) & ~3) : state_out;  // the state between segments

    const dim3 state_grid((dv + BV - 1) / BV, Hv), state_block(8 * BV);
    if (T == 0) {  // the final state is the initial one
        if (state_out)
            launch_checked(state_kernel, state_grid, state_block, smem_state, o, state_out, state_in, ws, 0, Hv,
                           dk, dv, C, share_k);
        return;
    }
    for (int s = 0; s < nseg; s++) {
        const int64_t ts = (int64_t)s * seg * C;
        const int Tseg = (int)(T - ts < (int64_t)seg * C ? T - ts : (int64_t)seg * C);
        const int nch = (Tseg + C - 1) / C, rows = Tseg * Hk;
        const InT *qs = q + ts * Hk * dk, *ks = k + ts * Hk * dk, *vs = v + ts * Hv * dv;
        launch_checked(dn_norms_kernel<InT>, dim3((rows + DN_THREADS / 32 - 1) / (DN_THREADS / 32)), dim3(DN_THREADS),
                       0, ws.rq, ws.rk, qs, ks, rows, dk, l2);
        launch_checked(dn_chunk_kernel<InT>, dim3(nch, Hv), dim3(DN_THREADS), smem_chunk, ws, qs, ks, vs, g + ts * Hv,
                       beta + ts * Hv, Tseg, Hk, Hv, dk, dv, C, scale);
        const float *sin = s == 0 ? state_in : carry;
        float *sout = s == nseg - 1 ? state_out : carry;
        launch_checked(state_kernel, state_grid, state_block, smem_state, o + ts * Hv * dv, sout, sin, ws, Tseg,
                       Hv, dk, dv, C, share_k);
    }
}

extern "C" void gated_delta_rule_chunked_cuda(float *o, float *state_out, const void *q, const void *k,
                                              const void *v, const float *g, const float *beta,
                                              const float *state_in, int T, int Hk, int Hv, int dk, int dv,
                                              float scale, int qk_l2norm, int chunk, DType dt) {
    const char *fn = "gated_delta_rule_chunked_cuda";
    if (T < 0 || Hk <= 0 || Hv <= 0 || Hv % Hk != 0) dn_fail(fn, "needs T >= 0 and Hv a multiple of Hk");
    if (dk < 1 || dk > DN_DMAX || dv < 1 || dv > DN_DMAX) dn_fail(fn, "dk and dv must be in [1, 256]");
    if (chunk < 1 || chunk > DN_C) dn_fail(fn, "chunk must be in [1, 64]");
    if (scale == 0.0f) scale = 1.0f / sqrtf((float)dk);
    switch (dt) {
    case DT_F32:
        dn_run(o, state_out, (const float *)q, (const float *)k, (const float *)v, g, beta, state_in, T, Hk, Hv, dk,
               dv, scale, qk_l2norm, chunk);
        break;
    case DT_BF16:
        dn_run(o, state_out, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, g, beta,
               state_in, T, Hk, Hv, dk, dv, scale, qk_l2norm, chunk);
        break;
    case DT_F16:
        dn_run(o, state_out, (const __half *)q, (const __half *)k, (const __half *)v, g, beta, state_in, T, Hk, Hv,
               dk, dv, scale, qk_l2norm, chunk);
        break;
    default: dn_fail(fn, "unknown input type");
    }
}
