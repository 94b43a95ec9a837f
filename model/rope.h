// rope.h: RoPE frequencies for the four types, following transformers.
#pragma once
#include "config.h"

// Number of rotated dims (head_dim × partial_rotary_factor).
int rope_rot_dims(const ModelConfig *c);
// inv_freq[rot/2] and the factor applied to cos/sin (1 except for yarn).
void rope_inv_freq(const ModelConfig *c, float *inv_freq, float *attn_factor);
// cos/sin tables [T, rot/2] for positions 0..T-1 (caller allocates).
void rope_tables(const ModelConfig *c, int T, float *cos_t, float *sin_t);
