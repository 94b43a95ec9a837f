// rope.h: RoPE frequencies for the four types, following transformers.
//
// A model has one RoPE per attention kind: cfg->rope for full-attention layers
// and cfg->rope_local for sliding-window layers (Gemma 3's local base; the
// same as cfg->rope in families without sliding layers).
#pragma once
#include "config.h"

// Number of rotated dims of r on heads of head_dim (head_dim × partial_rotary_factor).
int rope_config_rot_dims(const RopeConfig *r, int head_dim);
// inv_freq[rot/2] of r and the factor applied to cos/sin (1 except for yarn).
void rope_config_inv_freq(const RopeConfig *r, int head_dim, float *inv_freq, float *attn_factor);

// The RoPE of layers of the given kind.
const RopeConfig *rope_of_kind(const ModelConfig *c, LayerKind kind);
// Rotated dims of the layers of kind.
int rope_rot_dims_kind(const ModelConfig *c, LayerKind kind);
// cos/sin tables [T, rot/2] of the layers of kind for positions 0..T-1
// (caller allocates; rot = rope_rot_dims_kind).
void rope_tables_kind(const ModelConfig *c, LayerKind kind, int T, float *cos_t, float *sin_t);

// The same for full-attention layers (c->rope).
int rope_rot_dims(const ModelConfig *c);
void rope_inv_freq(const ModelConfig *c, float *inv_freq, float *attn_factor);
void rope_tables(const ModelConfig *c, int T, float *cos_t, float *sin_t);
