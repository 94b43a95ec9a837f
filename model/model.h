// model.h: a checkpoint's weights, carved out of the safetensors mapping.
//
// F32 tensors are used in place (pointers into the mmap); F16/BF16 tensors are
// converted to fp32 one tensor at a time into buffers the Model owns. Tensor
// names come from the family (model/family.h), also when a multimodal
// checkpoint holds them under "model.language_model." or "language_model.". Norm weights a family stores as
// w and applies as (1 + w) (Gemma) are held as fp32 copies of 1 + w, so every
// norm here is the ordinary RMSNorm x / rms(x) · weight. Qwen3-Next's fused DeltaNet
// projections (in_proj_qkvz, in_proj_ba, grouped per key head) are held split and
// reordered as Qwen3.5 stores them (model.c).
#pragma once
#include "config.h"
#include "safetensors.h"

typedef struct {
    const float *attn_norm;  // (hidden)
    const float *post_attn_norm;  // (hidden) norm of the attention output (post_norms), or NULL
    const float *wq, *bq;    // (Hq*dh, hidden), (Hq*dh) or NULL
    const float *wq_gate, *bq_gate;  // attn_out_gate: the gate rows of q_proj, (Hq*dh, hidden), (Hq*dh) or NULL
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
    // Gated DeltaNet (linear_attention layers), with C = 2·Hk·dk + Hv·dv channels
    // [q | k | v] (heads in order; value heads of one key head adjacent):
    const float *lin_qkv;     // (C, hidden)
    const float *lin_z;       // (Hv·dv, hidden) the output gate
    const float *lin_b, *lin_a;  // (Hv, hidden) beta and decay projections
    const float *lin_conv;    // (C, K) depthwise causal conv1d
    const float *lin_a_log, *lin_dt_bias;  // (Hv)
    const float *lin_norm;    // (dv) gated RMSNorm gain (w itself)
    const float *lin_out;     // (hidden, Hv·dv)
    // MoE block (cfg->layer_moe[l]): router, routed experts, shared expert + its gate.
    const float *moe_router;  // (E, hidden)
    const float **exp_gate, **exp_up;  // E pointers to (I_moe, hidden), owned arrays
    const float **exp_down;   // E pointers to (hidden, I_moe)
    const float *sh_gate, *sh_up;  // (I_shared, hidden)
    const float *sh_down;     // (hidden, I_shared)
    const float *sh_expert_gate;   // (1, hidden)
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
