// model.h: a checkpoint's weights, carved out of the safetensors mapping.
//
// F32 tensors are used in place (pointers into the mmap); F16/BF16 tensors are
// converted to fp32 one tensor at a time into buffers the Model owns. Tensor
// names come from the family (model/family.h), also when a multimodal
// checkpoint holds them under "model.language_model." or "language_model.". Norm weights a family stores as
// w and applies as (1 + w) (Gemma) are held as fp32 copies of 1 + w, so every
// norm here is the ordinary RMSNorm x / rms(x) · weight.
#pragma once
#include "config.h"
#include "safetensors.h"

typedef struct {
    const float *attn_norm;  // (hidden)
    const float *post_attn_norm;  // (hidden) norm of the attention output (post_norms), or NULL
    const float *wq, *bq;    // (Hq*dh, hidden), (Hq*dh) or NULL
    const float *wk, *bk;    // (Hkv*dh, hidden), (Hkv*dh) or NULL
    const float *wv, *bv;    // (Hkv*dh, hidden), (Hkv*dh) or NULL
    const float *wo, *bo;    // (hidden, Hq*dh), (hidden) or NULL
    const float *q_norm;     // (dh) when qk_norm (qwen3, gemma3), else NULL
    const float *k_norm;     // (dh) when qk_norm, else NULL
    const float *mlp_norm;   // (hidden)
    const float *post_mlp_norm;   // (hidden) norm of the MLP output (post_norms), or NULL
    const float *w_gate, *b_gate;  // (inter, hidden), (inter) or NULL
    const float *w_up, *b_up;      // (inter, hidden), (inter) or NULL
    const float *w_down, *b_down;  // (hidden, inter), (hidden) or NULL
} LayerWeights;

typedef struct {
    ModelConfig cfg;
    SafeTensors st;
    const float *embed;       // (vocab, hidden)
    const float *final_norm;  // (hidden)
    const float *lm_head;     // (vocab, hidden); == embed when tied
    LayerWeights *layers;     // n_layers
    int64_t n_params;         // distinct parameters in the checkpoint
    float **owned;            // converted tensors, freed by model_free
    int n_owned;
} Model;

// Loads DIR (config.json + safetensors). On failure st names the file and
// problem and m holds nothing to free. On success release with model_free.
int model_load(Model *m, const char *dir, Status *st);
void model_free(Model *m);
