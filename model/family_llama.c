// family_llama.c: the dense decoders llama, qwen2 and qwen3 (transformers'
// modeling_llama.py, modeling_qwen2.py, modeling_qwen3.py). They share one
// layer and one tensor naming and differ in little:
//   llama  biases only when attention_bias (q/k/v/o) / mlp_bias say so; MHA when
//          num_key_value_heads is absent
//   qwen2  q/k/v always carry a bias, o_proj never; 32 KV heads by default
//   qwen3  per-head q/k RMSNorm before RoPE; head_dim 128 by default
// Every layer is full attention: qwen2/qwen3 slide only with use_sliding_window
// (refused), and llama ignores layer_types.
#include <string.h>

#include "family.h"
#include "fileio.h"

static int parse_dense(ModelConfig *cfg, const cJSON *root, const char *path, Status *st) {
    switch (cfg->family) {
    case FAMILY_LLAMA:
        if (config_read_bool(root, path, "attention_bias", 0, &cfg->attention_bias, st)) return -1;
        if (config_read_bool(root, path, "mlp_bias", 0, &cfg->mlp_bias, st)) return -1;
        cfg->o_bias = cfg->attention_bias;
        break;
    case FAMILY_QWEN2:
        cfg->attention_bias = 1;  // q/k/v always carry a bias in Qwen2; o_proj never does
        cfg->o_bias = 0;
        break;
    case FAMILY_QWEN3:
        if (config_read_bool(root, path, "attention_bias", 0, &cfg->attention_bias, st)) return -1;
        cfg->o_bias = cfg->attention_bias;
        cfg->qk_norm = 1;
        break;
    default: SPINDLE_CHECK(!"parse_dense on another family");
    }

    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (cJSON_IsString(act) && strcmp(act->valuestring, "silu"))
        return status_fail(st, "%s: unsupported hidden_act \"%s\" (only silu)", path, act->valuestring);
    cfg->act = ACT_SILU;
    int sliding = 0;
    if (config_read_bool(root, path, "use_sliding_window", 0, &sliding, st)) return -1;
    if (sliding)
        return status_fail(st, "%s: use_sliding_window is true; sliding-window layers are not supported yet", path);
    // layer_types is not consulted: llama ignores it, and qwen2/qwen3 only use
    // sliding windows when use_sliding_window is true (refused above).
    cfg->layer_kinds = xcalloc((size_t)cfg->n_layers, sizeof *cfg->layer_kinds);
    for (int i = 0; i < cfg->n_layers; i++) cfg->layer_kinds[i] = LAYER_FULL_ATTENTION;

    // RoPE, resolved as transformers does: a non-null legacy rope_scaling wins,
    // else transformers-5 rope_parameters (per-layer-kind form: its full_attention entry).
    return config_parse_rope(&cfg->rope, cfg, root, config_rope_object(root), "rope_theta", 10000.0, NULL, path, st);
}

#define DENSE_FAMILY(fam, type, kv_dflt, hd_dflt)                                                    \
    {                                                                                                \
        .family = fam, .model_type = type, .kv_heads_default = kv_dflt, .head_dim_default = hd_dflt, \
        .tie_default = 0, .max_pos_default = 2048, .rms_eps_default = 1e-6, .parse = parse_dense,   \
        .embed = "model.embed_tokens.weight", .final_norm = "model.norm.weight",                    \
        .lm_head = "lm_head.weight", .layer = {FAMILY_DECODER_LAYER_NAMES}, .norm_plus_one = 0,     \
    }

const FamilySpec family_llama = DENSE_FAMILY(FAMILY_LLAMA, "llama", 0, 0);
const FamilySpec family_qwen2 = DENSE_FAMILY(FAMILY_QWEN2, "qwen2", 32, 0);
const FamilySpec family_qwen3 = DENSE_FAMILY(FAMILY_QWEN3, "qwen3", 32, 128);
