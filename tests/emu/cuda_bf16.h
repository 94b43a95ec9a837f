// cuda_bf16.h (emulation, see cuda_runtime.h): bf16 storage and its conversions.
#pragma once
#include <cstdint>
#include <cstring>
struct __nv_bfloat16 {
    uint16_t bits;
};
inline float __bfloat162float(__nv_bfloat16 x) {
    uint32_t u = (uint32_t)x.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {  // finite inputs
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
    return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
inline float __low2float(__nv_bfloat162 p) { return __bfloat162float(p.x); }
inline float __high2float(__nv_bfloat162 p) { return __bfloat162float(p.y); }
