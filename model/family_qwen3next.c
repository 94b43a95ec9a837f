// family_qwen3next.c: the Qwen3-Next and Qwen3.5 hybrids (model_type "qwen3_next",
// "qwen3_5_text", or the "text_config" of a multimodal "qwen3_5" config), after
// transformers' modeling_qwen3_next.py and modeling_qwen3_5.py. Per layer:
//   h = input_layernorm(x); h = mixer(h); x = x + h
//   h = post_attention_layernorm(x); x = x + mlp(h)
// The mixer is Gated DeltaNet (linear_attention) or gated full attention
// (full_attention), by layer_types or full_attention_interval N (layer i is full
// iff (i + 1) % N == 0). Full attention: q_proj holds [q | gate] per head, q/k
// RMSNorm, RoPE on the first head_dim · partial_rotary_factor dims (0.25 by
// default), output · sigmoid(gate) before o_proj. Every decoder RMSNorm (the
// two per layer, q_norm, k_norm, the final norm) is zero-centred, (1 + w),
// folded in at load; the DeltaNet output norm multiplies by w itself. The MLP is
// SwiGLU, or in qwen3_next the MoE block where num_experts > 0, (i + 1) %
// decoder_sparse_step == 0 and i is not in mlp_only_layers. Untied head by
// default. Text-only positions make Qwen3.5's multimodal RoPE (mrope_section)
// the ordinary one.
#include <string.h>

#include "family.h"
#include "fileio.h"

static int parse_qwen3next(ModelConfig *cfg, const cJSON *root, const char *path, Status *st) {
    if (config_read_bool(root, path, "attention_bias", 0, &cfg->attention_bias, st)) return -1;
    cfg->o_bias = cfg->attention_bias;
    cfg->qk_norm = 1;
    cfg->attn_out_gate = 1;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (cJSON_IsString(act) && strcmp(act->valuestring, "silu"))
        return status_fail(st, "%s: unsupported hidden_act \"%s\" (only silu)", path, act->valuestring);
    cfg->act = ACT_SILU;

    if (config_read_layer_kinds(cfg, root, path, LAYER_LINEAR_ATTENTION, "full_attention_interval", 4, st)) return -1;

    LinearAttnConfig *la = &cfg->lin;
    if (config_read_int_in(root, path, "linear_num_key_heads", 0, 16, 1, CONFIG_MAX_HEADS, &la->n_k_heads, st) ||
        config_read_int_in(root, path, "linear_num_value_heads", 0, 32, 1, CONFIG_MAX_HEADS, &la->n_v_heads, st) ||
        config_read_int_in(root, path, "linear_key_head_dim", 0, 128, 1, CONFIG_MAX_HEAD_DIM, &la->k_dim, st) ||
        config_read_int_in(root, path, "linear_value_head_dim", 0, 128, 1, CONFIG_MAX_HEAD_DIM, &la->v_dim, st) ||
        config_read_int_in(root, path, "linear_conv_kernel_dim", 0, 4, 1, 64, &la->conv_kernel, st))
        return -1;
    if (la->n_v_heads % la->n_k_heads)
        return status_fail(st, "%s: linear_num_value_heads (%d) is not a multiple of linear_num_key_heads (%d)", path,
                           la->n_v_heads, la->n_k_heads);
    la->fused_proj = cfg->family == FAMILY_QWEN3_NEXT;

    if (cfg->family == FAMILY_QWEN3_NEXT) {
        MoeConfig *mo = &cfg->moe;
        int step = 1;
        if (config_read_int_in(root, path, "num_experts", 0, 512, 0, 1 << 16, &mo->n_experts, st) ||
            config_read_int_in(root, path, "num_experts_per_tok", 0, 10, 1, 1 << 16, &mo->top_k, st) ||
            config_read_int_in(root, path, "moe_intermediate_size", 0, 512, 1, CONFIG_MAX_INTERMEDIATE,
                               &mo->intermediate, st) ||
            config_read_int_in(root, path, "shared_expert_intermediate_size", 0, 512, 0, CONFIG_MAX_INTERMEDIATE,
                               &mo->shared_intermediate, st) ||
            config_read_bool(root, path, "norm_topk_prob", 1, &mo->norm_topk_prob, st) ||
            config_read_int_in(root, path, "decoder_sparse_step", 0, 1, 1, CONFIG_MAX_LAYERS, &step, st))
            return -1;
        if (mo->n_experts > 0 && mo->top_k > mo->n_experts)
            return status_fail(st, "%s: num_experts_per_tok (%d) exceeds num_experts (%d)", path, mo->top_k,
                               mo->n_experts);
        if (mo->n_experts > 0) {
            cfg->layer_moe = xcalloc((size_t)cfg->n_layers, 1);
            for (int i = 0; i < cfg->n_layers; i++) cfg->layer_moe[i] = (i + 1) % step == 0;
            const cJSON *only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
            if (only && !cJSON_IsNull(only) && !cJSON_IsArray(only))
                return status_fail(st, "%s: \"mlp_only_layers\" must be a list of layer indices", path);
            for (const cJSON *e = only ? only->child : NULL; e; e = e->next) {
                if (!cJSON_IsNumber(e) || e->valuedouble != (int)e->valuedouble || e->valuedouble < 0 ||
                    e->valuedouble >= cfg->n_layers)
                    return status_fail(st, "%s: \"mlp_only_layers\" holds %s, not a layer index in [0, %d)", path,
                                       cJSON_IsNumber(e) ? "a number out of range" : "a non-number", cfg->n_layers);
                cfg->layer_moe[(int)e->valuedouble] = 0;
            }
        }
    }

    // RoPE: rope_parameters (transformers 5) or a legacy rope_scaling, theta
    // default 1e4, partial_rotary_factor default 0.25 (the configs' own default).
    cfg->rope_partial_dflt = 0.25;
    return config_parse_rope(&cfg->rope, cfg, root, config_rope_object(root), "rope_theta", 10000.0, NULL, path, st);
}

// What the two families share: class defaults, parse, tensor names.
#define QWEN3NEXT_COMMON                                                 \
    .head_dim_default = 256, .tie_default = 0, .max_pos_default = 32768, \
    .rms_eps_default = 1e-6, .parse = parse_qwen3next,                   \
    .embed = "model.embed_tokens.weight",                                \
    .final_norm = "model.norm.weight",                                   \
    .lm_head = "lm_head.weight",                                         \
    .norm_plus_one = 1

#define QWEN3NEXT_LAYER_NAMES                                            \
    FAMILY_DECODER_LAYER_NAMES,                                          \
    [ROLE_LIN_CONV] = "linear_attn.conv1d.weight",                       \
    [ROLE_LIN_A_LOG] = "linear_attn.A_log",                              \
    [ROLE_LIN_DT_BIAS] = "linear_attn.dt_bias",                          \
    [ROLE_LIN_NORM] = "linear_attn.norm.weight",                         \
    [ROLE_LIN_OUT] = "linear_attn.out_proj.weight"

const FamilySpec family_qwen3_next = {
    .family = FAMILY_QWEN3_NEXT,
    .model_type = "qwen3_next",
    .kv_heads_default = 2,
    QWEN3NEXT_COMMON,
    .layer = {
        QWEN3NEXT_LAYER_NAMES,
        [ROLE_LIN_QKVZ] = "linear_attn.in_proj_qkvz.weight",
        [ROLE_LIN_BA] = "linear_attn.in_proj_ba.weight",
        [ROLE_MOE_ROUTER] = "mlp.gate.weight",
        [ROLE_SH_GATE] = "mlp.shared_expert.gate_proj.weight",
        [ROLE_SH_UP] = "mlp.shared_expert.up_proj.weight",
        [ROLE_SH_DOWN] = "mlp.shared_expert.down_proj.weight",
        [ROLE_SH_EXPERT_GATE] = "mlp.shared_expert_gate.weight",
    },
    .experts = "mlp.experts",
};

const FamilySpec family_qwen3_5 = {
    .family = FAMILY_QWEN3_5,
    .model_type = "qwen3_5_text",
    .kv_heads_default = 4,
    QWEN3NEXT_COMMON,
    .layer = {
        QWEN3NEXT_LAYER_NAMES,
        [ROLE_LIN_QKV] = "linear_attn.in_proj_qkv.weight",
        [ROLE_LIN_Z] = "linear_attn.in_proj_z.weight",
        [ROLE_LIN_B] = "linear_attn.in_proj_b.weight",
        [ROLE_LIN_A] = "linear_attn.in_proj_a.weight",
    },
};
