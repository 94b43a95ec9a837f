// emu_wgmma.h (emulation, see cuda_runtime.h): kernels/cuda/wgmma.cuh's warpgroup MMA on host threads.
// A warp's D rows depend only on its own A rows and on B, so each warp computes its part of the
// m64nNk16 product from its lanes' A fragments (exchanged among the warp's 32 host threads, as
// emu_mma.h's mma_bf16) and B read from shared memory through the descriptor's arithmetic: the core
// matrix of (n0, k0) at start + (n0 / 8)·SBO + (k0 / 8)·LBO, inside it 8 rows of 16 bytes (n-rows of k
// values K-major, k-rows of n values MN-major). The products accumulate in fp32 in k order, one fused
// multiply-add each: the tensor core's order differs, so results agree to fp32 rounding.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "emu_mma.h"

// The emulation's descriptor: a host address and the two strides (the device's packs them in 64 bits).
struct WgDesc {
    const unsigned char *start;
    uint32_t lbo, sbo;
};

inline WgDesc wg_desc(const void *smem, uint32_t lbo, uint32_t sbo) {
    return WgDesc{(const unsigned char *)smem, lbo, sbo};
}
inline WgDesc wg_desc_add(WgDesc d, uint32_t bytes) {
    d.start += bytes;
    return d;
}
// The warpgroup's fences and waits: the emulated product is complete when the call returns; the warp
// barrier keeps a warp's lanes together as the instruction's .sync.aligned does.
inline void wg_fence() { __syncwarp(); }
inline void wg_commit() {}
template <int N>
inline void wg_wait() { __syncwarp(); }
inline void wg_fence_proxy() {}
inline void wg_pin(float *, int) {}
inline void wg_pin(uint32_t *, int) {}

// B(k, n) through the descriptor, as a float.
template <int TRANS_B>
inline float emu_wg_b(const WgDesc &b, int k, int n) {
    const unsigned char *core = b.start + (size_t)(n / 8) * b.sbo + (size_t)(k / 8) * b.lbo;
    const int row = TRANS_B ? k % 8 : n % 8, col = TRANS_B ? n % 8 : k % 8;
    return emu_bf16_bits(emu_b16(core + 16 * row, col));
}

template <int TRANS_B>
inline void wgmma_m64n64k16(float d[32], const uint32_t a[4], WgDesc b, int accumulate) {
    struct Frag {
        uint32_t w[4];
    } mine = {{a[0], a[1], a[2], a[3]}}, all[32];
    emu_warp_all(mine, all);
    float A[16][16];
    for (int l = 0; l < 32; l++) {
        const int g = l / 4, c = l % 4;
        const int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * c, 2 * c, 2 * c + 8, 2 * c + 8};
        for (int i = 0; i < 4; i++) {
            A[ar[i]][ac[i]] = emu_bf16_bits(all[l].w[i] & 0xFFFFu);
            A[ar[i]][ac[i] + 1] = emu_bf16_bits(all[l].w[i] >> 16);
        }
    }
    const int l = emu_tid() % 32, g = l / 4, c = l % 4;
    for (int j = 0; j < 8; j++)
        for (int e = 0; e < 4; e++) {
            const int r = e < 2 ? g : g + 8, n = 8 * j + 2 * c + e % 2;
            float acc = accumulate ? d[4 * j + e] : 0.0f;
            for (int k = 0; k < 16; k++) acc = std::fma(A[r][k], emu_wg_b<TRANS_B>(b, k, n), acc);
            d[4 * j + e] = acc;
        }
}
