// cuda_fp16.h (emulation, see cuda_runtime.h): f16 storage and its conversions.
#pragma once
#include <cstdint>
#include <cstring>
struct __half {
    _Float16 v;
};
inline float __half2float(__half x) { return (float)x.v; }
inline __half __float2half_rn(float f) { return __half{(_Float16)f}; }
struct __half2 {
    __half x, y;
};
inline __half2 __floats2half2_rn(float lo, float hi) { return __half2{__float2half_rn(lo), __float2half_rn(hi)}; }
