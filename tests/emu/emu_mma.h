// emu_mma.h (emulation, see cuda_runtime.h): the warp-collective tensor-core pieces of
// kernels/cuda/mma.cuh — ldmatrix.x4 (plain and .trans) and .x2, mma.sync m16n8k16 bf16 → fp32 and
// m16n8k8 tf32 → fp32 — as exchanges among the warp's 32 host threads, with the fragment layouts the
// PTX ISA gives (and mma.cuh's header restates), and cvt.rna.tf32.f32 on the bit pattern. The product
// accumulates in fp32 in k order, one fused multiply-add per term: the tensor core's order and internal
// precision differ, so results agree to fp32 rounding, not bit for bit. Included by mma.cuh under
// SPINDLE_CUDA_EMULATION.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

inline uint16_t emu_b16(const void *row, int col) {
    uint16_t h;
    memcpy(&h, (const char *)row + 2 * col, 2);
    return h;
}

// ldmatrix.sync.aligned.m8n8.x4.b16: matrix i's row r is at lane 8i + r's address; lane l gets, of
// each matrix, row l / 4, columns 2(l % 4) and 2(l % 4) + 1 (the lower column in the low half).
static inline void ldsm_x4(uint32_t r[4], const void *p) {
    const void *rows[32];
    emu_warp_all(p, rows);
    const int l = emu_tid() % 32;
    for (int i = 0; i < 4; i++) {
        const void *row = rows[8 * i + l / 4];
        r[i] = (uint32_t)emu_b16(row, 2 * (l % 4)) | (uint32_t)emu_b16(row, 2 * (l % 4) + 1) << 16;
    }
}
// The same with .trans: lane l gets, of each matrix, column l / 4 of rows 2(l % 4) and 2(l % 4) + 1.
static inline void ldsm_x4_trans(uint32_t r[4], const void *p) {
    const void *rows[32];
    emu_warp_all(p, rows);
    const int l = emu_tid() % 32;
    for (int i = 0; i < 4; i++)
        r[i] = (uint32_t)emu_b16(rows[8 * i + 2 * (l % 4)], l / 4) |
               (uint32_t)emu_b16(rows[8 * i + 2 * (l % 4) + 1], l / 4) << 16;
}
// ldmatrix .x2: two matrices, their rows at lanes 0-15's addresses (the others' are not read).
static inline void ldsm_x2(uint32_t r[2], const void *p) {
    const void *rows[32];
    emu_warp_all(p, rows);
    const int l = emu_tid() % 32;
    for (int i = 0; i < 2; i++) {
        const void *row = rows[8 * i + l / 4];
        r[i] = (uint32_t)emu_b16(row, 2 * (l % 4)) | (uint32_t)emu_b16(row, 2 * (l % 4) + 1) << 16;
    }
}

inline float emu_bf16_bits(uint32_t h) {
    const uint32_t u = h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d += a·b. Lane (g = l / 4, c = l % 4) holds
// A (g, 2c..2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..); B k rows 2c, 2c+1 and 2c+8, 2c+9 of
// column g; C/D rows g and g+8, columns 2c, 2c+1.
static inline void mma_bf16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    struct Frag {
        uint32_t w[6];
    } mine = {{a[0], a[1], a[2], a[3], b0, b1}}, all[32];
    emu_warp_all(mine, all);
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, c = l % 4;
        const uint32_t *f = all[l].w;
        const int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * c, 2 * c, 2 * c + 8, 2 * c + 8};
        for (int i = 0; i < 4; i++) {
            A[ar[i]][ac[i]] = emu_bf16_bits(f[i] & 0xFFFFu);
            A[ar[i]][ac[i] + 1] = emu_bf16_bits(f[i] >> 16);
        }
        B[2 * c][g] = emu_bf16_bits(f[4] & 0xFFFFu), B[2 * c + 1][g] = emu_bf16_bits(f[4] >> 16);
        B[2 * c + 8][g] = emu_bf16_bits(f[5] & 0xFFFFu), B[2 * c + 9][g] = emu_bf16_bits(f[5] >> 16);
    }
    const int l = emu_tid() % 32, g = l / 4, c = l % 4;
    const int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * c, 2 * c + 1, 2 * c, 2 * c + 1};
    for (int i = 0; i < 4; i++) {
        float acc = d[i];
        for (int k = 0; k < 16; k++) acc = fmaf(A[rr[i]][k], B[k][cc[i]], acc);
        d[i] = acc;
    }
}

// cvt.rna.tf32.f32 as the hardware does it on the bit pattern: a finite x gets half a tf32 ulp (bit 12)
// added, which carries into the kept bits when the 13 dropped ones are at least half (to nearest, ties
// away from zero; past the largest finite value it carries into +-inf), then the low 13 bits are
// cleared. Inf and NaN are only masked.
inline float tf32_rna(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if (std::isfinite(x)) u += 0x1000u;
    u &= 0xFFFFE000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

// A tf32 operand register as the tensor core reads it: the sign, exponent and 10 mantissa bits; the
// low 13 bits take no part.
inline float emu_tf32_bits(uint32_t w) {
    const uint32_t u = w & 0xFFFFE000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, d += a·b. Lane (g = l / 4, c = l % 4) holds
// A (g, c), (g+8, c), (g, c+4), (g+8, c+4); B k rows c and c+4 of column g; C/D rows g and g+8,
// columns 2c, 2c+1. The products of two tf32 values are exact in fp32.
static inline void mma_tf32(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    struct Frag {
        uint32_t w[6];
    } mine = {{a[0], a[1], a[2], a[3], b0, b1}}, all[32];
    emu_warp_all(mine, all);
    float A[16][8], B[8][8];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, c = l % 4;
        const uint32_t *f = all[l].w;
        A[g][c] = emu_tf32_bits(f[0]), A[g + 8][c] = emu_tf32_bits(f[1]);
        A[g][c + 4] = emu_tf32_bits(f[2]), A[g + 8][c + 4] = emu_tf32_bits(f[3]);
        B[c][g] = emu_tf32_bits(f[4]), B[c + 4][g] = emu_tf32_bits(f[5]);
    }
    const int l = emu_tid() % 32, g = l / 4, c = l % 4;
    const int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * c, 2 * c + 1, 2 * c, 2 * c + 1};
    for (int i = 0; i < 4; i++) {
        float acc = d[i];
        for (int k = 0; k < 8; k++) acc = fmaf(A[rr[i]][k], B[k][cc[i]], acc);
        d[i] = acc;
    }
}
