// family_gemma3.c: Gemma 3 text decoders (model_type "gemma3_text", or the
// "text_config" of a multimodal "gemma3" config), after transformers'
// modeling_gemma3.py. Per layer:
//   h = input_layernorm(x); h = attn(h); x = x + post_attention_layernorm(h)
//   h = pre_feedforward_layernorm(x); h = down(gelu_tanh(gate(h)) · up(h))
//   x = x + post_feedforward_layernorm(h)
// Every RMSNorm (these four, q_norm, k_norm, the final norm) multiplies by
// (1 + w) (folded in at load: norm_plus_one); embeddings × sqrt(hidden_size);
// tied head by default; score scale query_pre_attn_scalar^−½. Layers are
// sliding-window (window sliding_window, RoPE base rope_local_base_freq, default
// RoPE) or full attention (rope_theta + rope_scaling), by layer_types or, in
// older configs, sliding_window_pattern N (layer i is full iff (i + 1) % N == 0).
// transformers 5 writes the two RoPEs as rope_parameters.{full,sliding}_attention.
// Attention-logit soft-capping (Gemma 2's) is refused: no released Gemma 3 sets it.
#include <math.h>
#include <string.h>

#include "family.h"

static int parse_gemma3(ModelConfig *cfg, const cJSON *root, const char *path, Status *st) {
    if (config_read_bool(root, path, "attention_bias", 0, &cfg->attention_bias, st)) return -1;
    cfg->o_bias = cfg->attention_bias;  // one flag for q, k, v and o
    cfg->qk_norm = 1;
    cfg->post_norms = 1;

    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_activation");
    if (act && !cJSON_IsNull(act)) {
        if (!cJSON_IsString(act)) return status_fail(st, "%s: \"hidden_activation\" must be a string", path);
        if (strcmp(act->valuestring, "gelu_pytorch_tanh") && strcmp(act->valuestring, "gelu_tanh"))
            return status_fail(st, "%s: unsupported hidden_activation \"%s\" (supported: gelu_pytorch_tanh)", path,
                               act->valuestring);
    }
    cfg->act = ACT_GELU_TANH;

    int bidirectional = 0;
    if (config_read_bool(root, path, "use_bidirectional_attention", 0, &bidirectional, st)) return -1;
    if (bidirectional)
        return status_fail(st, "%s: use_bidirectional_attention is true; only causal decoders are supported", path);
    double cap = 0;
    int r = config_get_num(root, "attn_logit_softcapping", &cap);
    if (r < 0) return status_fail(st, "%s: \"attn_logit_softcapping\" must be a number or null", path);
    if (r > 0)
        return status_fail(st, "%s: \"attn_logit_softcapping\" is %g; attention-logit soft-capping is not supported "
                               "(only null)", path, cap);
    r = config_get_num(root, "final_logit_softcapping", &cap);
    if (r < 0) return status_fail(st, "%s: \"final_logit_softcapping\" must be a number or null", path);
    if (r > 0 && config_check_range(path, "final_logit_softcapping", cap, 0, 1, 1e6, st)) return -1;
    cfg->final_softcap = r > 0 ? cap : 0;

    double qpas = 256;
    if (config_read_float(root, path, "query_pre_attn_scalar", 256, &qpas, st)) return -1;
    if (config_check_range(path, "query_pre_attn_scalar", qpas, 0, 1, 1e9, st)) return -1;
    cfg->attn_scale = pow(qpas, -0.5);

    if (config_read_int_in(root, path, "sliding_window", 0, 4096, 1, CONFIG_MAX_POS, &cfg->sliding_window, st))
        return -1;
    if (config_read_layer_kinds(cfg, root, path, LAYER_SLIDING_ATTENTION, "sliding_window_pattern", 6, st)) return -1;

    // RoPE per layer kind. Full: a non-null legacy rope_scaling (with rope_theta),
    // else rope_parameters.full_attention; sliding: rope_parameters.sliding_attention,
    // else the default RoPE at rope_local_base_freq.
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *rp_full = NULL, *rp_local = NULL;
    if (cJSON_IsObject(rp)) {
        rp_full = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
        rp_local = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
        if (!rp_full && !rp_local) rp_full = rp;  // one object: the full-attention RoPE
    } else if (rp && !cJSON_IsNull(rp)) {
        return status_fail(st, "%s: RoPE parameters must be an object", path);
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (rs && !cJSON_IsNull(rs) && !(cJSON_IsObject(rs) && !rs->child)) rp_full = rs;
    if (config_parse_rope(&cfg->rope, cfg, root, rp_full, "rope_theta", 1e6, "full_attention", path, st))
        return -1;
    if (config_parse_rope(&cfg->rope_local, cfg, root, rp_local, "rope_local_base_freq", 1e4, "sliding_attention",
                          path, st))
        return -1;

    cfg->embed_scale = (float)sqrt((double)cfg->hidden);  // a Python float, cast to the fp32 weights' dtype
    return 0;
}

const FamilySpec family_gemma3 = {
    .family = FAMILY_GEMMA3,
    .model_type = "gemma3_text",
    .kv_heads_default = 4,
    .head_dim_default = 256,
    .tie_default = 1,
    .max_pos_default = 131072,
    .rms_eps_default = 1e-6,
    .parse = parse_gemma3,
    .embed = "model.embed_tokens.weight",
    .final_norm = "model.norm.weight",
    .lm_head = "lm_head.weight",
    .layer = {
        [ROLE_ATTN_NORM] = "input_layernorm.weight",
        [ROLE_POST_ATTN_NORM] = "post_attention_layernorm.weight",
        [ROLE_MLP_NORM] = "pre_feedforward_layernorm.weight",
        [ROLE_POST_MLP_NORM] = "post_feedforward_layernorm.weight",
        [ROLE_WQ] = "self_attn.q_proj.weight",
        [ROLE_BQ] = "self_attn.q_proj.bias",
        [ROLE_WK] = "self_attn.k_proj.weight",
        [ROLE_BK] = "self_attn.k_proj.bias",
        [ROLE_WV] = "self_attn.v_proj.weight",
        [ROLE_BV] = "self_attn.v_proj.bias",
        [ROLE_WO] = "self_attn.o_proj.weight",
        [ROLE_BO] = "self_attn.o_proj.bias",
        [ROLE_Q_NORM] = "self_attn.q_norm.weight",
        [ROLE_K_NORM] = "self_attn.k_norm.weight",
        [ROLE_W_GATE] = "mlp.gate_proj.weight",
        [ROLE_W_UP] = "mlp.up_proj.weight",
        [ROLE_W_DOWN] = "mlp.down_proj.weight",
    },
    .norm_plus_one = 1,
};
