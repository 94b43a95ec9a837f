// ops_cpu.c: the element-wise and GEMM ops of the backbone, CPU twin.
#include <cblas.h>
#include <math.h>

#include "ops.h"

void matmul_forward_cpu(float *out, const float *in, const float *w, const float *bias, int T,
                        int C_in, int C_out) {
    if (T == 1)  // one row (a decoding step): GEMV streams w once, where GEMM would first pack all of it
        cblas_sgemv(CblasRowMajor, CblasNoTrans, C_out, C_in, 1.0f, w, C_in, in, 1, 0.0f, out, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, C_out, C_in, 1.0f, in, C_in, w, C_in,
                    0.0f, out, C_out);
    if (!bias) return;
#pragma omp parallel for
    for (int t = 0; t < T; t++)
        for (int c = 0; c < C_out; c++) out[(int64_t)t * C_out + c] += bias[c];
}

void rmsnorm_forward_cpu(float *out, const float *in, const float *w, int R, int C, float eps) {
#pragma omp parallel for
    for (int r = 0; r < R; r++) {
        const float *x = in + (int64_t)r * C;
        float *y = out + (int64_t)r * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float rstd = 1.0f / sqrtf(ss / C + eps);
        for (int c = 0; c < C; c++) y[c] = x[c] * rstd * w[c];
    }
}

void rope_forward_cpu(float *x, const float *cos, const float *sin, int T, int H, int dh, int rot) {
    const int half = rot / 2;
#pragma omp parallel for
    for (int t = 0; t < T; t++) {
        const float *c = cos + (int64_t)t * half, *s = sin + (int64_t)t * half;
        for (int h = 0; h < H; h++) {
            float *v = x + ((int64_t)t * H + h) * dh;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

void rope_default_inv_freq(float *inv_freq, double theta, int dim) {
    for (int i = 0; i < dim / 2; i++) inv_freq[i] = (float)(1.0 / pow(theta, (2.0 * i) / dim));
}

void rope_tables_from_freq(float *cos_t, float *sin_t, const float *inv_freq, int half, float scale, int T) {
#pragma omp parallel for
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const float ang = (float)t * inv_freq[i];
            cos_t[(int64_t)t * half + i] = cosf(ang) * scale;
            sin_t[(int64_t)t * half + i] = sinf(ang) * scale;
        }
}

void glu_forward_cpu(float *out, const float *gate, const float *up, int64_t n, Act act) {
    if (act == ACT_GELU_TANH) {
        const float c = 0.7978845608028654f;  // sqrt(2/π)
#pragma omp parallel for
        for (int64_t i = 0; i < n; i++) {
            const float g = gate[i];
            out[i] = 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g))) * up[i];
        }
        return;
    }
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void softcap_forward_cpu(float *x, int64_t n, float cap) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}
