// cuda_device.h: the C view of the CUDA build (only with SPINDLE_HAVE_CUDA).
#pragma once
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
// Writes a one-line description of the visible GPUs into buf; returns their count.
int cuda_device_describe(char *buf, size_t len);
#ifdef __cplusplus
}
#endif
