// rope.c: see rope.h. With dim = rot dims and base = rope_theta, the default
// frequencies are inv_freq[i] = base^(−2i/dim); the other types rescale them:
//   linear  inv_freq / factor
//   llama3  wavelengths longer than old_ctx/low_freq_factor are divided by
//           factor, shorter than old_ctx/high_freq_factor kept, and the band in
//           between blended by smooth = (old_ctx/wavelen − low)/(high − low)
//   yarn    a ramp between interpolation (÷factor) and extrapolation over the
//           dims whose rotation counts fall between beta_slow and beta_fast at
//           the original context, and cos/sin scaled by the attention factor
//           0.1·ln(factor) + 1 (or the mscale ratio, or the configured value).
#include "rope.h"

#include <math.h>

#include "ops.h"
#include "status.h"

int rope_config_rot_dims(const RopeConfig *r, int head_dim) { return (int)(head_dim * r->partial_rotary_factor); }

static double yarn_mscale(double scale, double mscale) {
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

static double yarn_correction_dim(double n_rot, int dim, double base, double max_pos) {
    return dim * log(max_pos / (n_rot * 2.0 * M_PI)) / (2.0 * log(base));
}

void rope_config_inv_freq(const RopeConfig *r, int head_dim, float *inv_freq, float *attn_factor) {
    const int dim = rope_config_rot_dims(r, head_dim), half = dim / 2;
    *attn_factor = 1.0f;
    rope_default_inv_freq(inv_freq, r->theta, dim);
    switch (r->type) {
    case ROPE_DEFAULT: break;
    case ROPE_LINEAR:
        for (int i = 0; i < half; i++) inv_freq[i] = (float)(inv_freq[i] / r->factor);
        break;
    case ROPE_LLAMA3: {
        const double old_ctx = r->original_max_pos;
        const double low_wl = old_ctx / r->low_freq_factor, high_wl = old_ctx / r->high_freq_factor;
        for (int i = 0; i < half; i++) {
            const double f = inv_freq[i], wl = 2.0 * M_PI / f;
            double g = wl > low_wl ? f / r->factor : f;
            if (!(wl < high_wl) && !(wl > low_wl)) {
                const double smooth = (old_ctx / wl - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
                g = (1.0 - smooth) * g / r->factor + smooth * g;
            }
            inv_freq[i] = (float)g;
        }
        break;
    }
    case ROPE_YARN: {
        const double factor = r->factor;
        double af = r->attention_factor;
        if (af < 0)
            af = (r->mscale != 0 && r->mscale_all_dim != 0)
                     ? yarn_mscale(factor, r->mscale) / yarn_mscale(factor, r->mscale_all_dim)
                     : yarn_mscale(factor, 1.0);
        *attn_factor = (float)af;
        double lo = yarn_correction_dim(r->beta_fast, dim, r->theta, r->original_max_pos);
        double hi = yarn_correction_dim(r->beta_slow, dim, r->theta, r->original_max_pos);
        if (r->truncate) lo = floor(lo), hi = ceil(hi);
        if (lo < 0) lo = 0;
        if (hi > dim - 1) hi = dim - 1;
        if (lo == hi) hi += 0.001;
        for (int i = 0; i < half; i++) {
            float ramp = (float)((i - lo) / (hi - lo));
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            const float extra = 1.0f - ramp;  // weight of extrapolation
            const float f_extra = inv_freq[i], f_inter = (float)(inv_freq[i] / factor);
            inv_freq[i] = f_inter * (1.0f - extra) + f_extra * extra;
        }
        break;
    }
    }
}

const RopeConfig *rope_of_kind(const ModelConfig *c, LayerKind kind) {
    return kind == LAYER_SLIDING_ATTENTION ? &c->rope_local : &c->rope;
}

int rope_rot_dims_kind(const ModelConfig *c, LayerKind kind) {
    return rope_config_rot_dims(rope_of_kind(c, kind), c->head_dim);
}

void rope_tables_kind(const ModelConfig *c, LayerKind kind, int T, float *cos_t, float *sin_t) {
    const RopeConfig *r = rope_of_kind(c, kind);
    const int half = rope_config_rot_dims(r, c->head_dim) / 2;
    float af;
    float *inv_freq = xmalloc(sizeof *inv_freq * (size_t)(half > 0 ? half : 1));
    rope_config_inv_freq(r, c->head_dim, inv_freq, &af);
    rope_tables_from_freq(cos_t, sin_t, inv_freq, half, af, T);
    free(inv_freq);
}

int rope_rot_dims(const ModelConfig *c) { return rope_rot_dims_kind(c, LAYER_FULL_ATTENTION); }

void rope_inv_freq(const ModelConfig *c, float *inv_freq, float *attn_factor) {
    rope_config_inv_freq(&c->rope, c->head_dim, inv_freq, attn_factor);
}

void rope_tables(const ModelConfig *c, int T, float *cos_t, float *sin_t) {
    rope_tables_kind(c, LAYER_FULL_ATTENTION, T, cos_t, sin_t);
}
