// family.h: what one model family contributes, in one place: the class
// defaults of its config.json, the keys only it reads (biases, activation,
// norms, RoPE per layer kind, layer kinds, score scale), and the names of its
// tensors. config.c reads the keys every family shares and dispatches on
// model_type; model.c loads each role's tensor by the family's name for it.
// Adding a family is one family_*.c file with its FamilySpec, listed in
// family_find.
#pragma once
#include <cjson/cJSON.h>

#include "config.h"
#include "status.h"

// A tensor's role in a decoder layer (LayerWeights has one pointer per role).
typedef enum {
    ROLE_ATTN_NORM,       // norm before attention
    ROLE_POST_ATTN_NORM,  // norm of the attention output, before the residual add (post_norms)
    ROLE_MLP_NORM,        // norm before the MLP
    ROLE_POST_MLP_NORM,   // norm of the MLP output, before the residual add (post_norms)
    ROLE_WQ, ROLE_BQ, ROLE_WK, ROLE_BK, ROLE_WV, ROLE_BV, ROLE_WO, ROLE_BO,
    ROLE_Q_NORM, ROLE_K_NORM,  // per-head norms of q and k (qk_norm)
    ROLE_W_GATE, ROLE_B_GATE, ROLE_W_UP, ROLE_B_UP, ROLE_W_DOWN, ROLE_B_DOWN,
    // Gated DeltaNet (linear_attention layers): the projections, either apart
    // (qkv, z, b, a) or fused per key-head group (qkvz, ba: cfg->lin.fused_proj)
    ROLE_LIN_QKV, ROLE_LIN_Z, ROLE_LIN_B, ROLE_LIN_A, ROLE_LIN_QKVZ, ROLE_LIN_BA,
    ROLE_LIN_CONV, ROLE_LIN_A_LOG, ROLE_LIN_DT_BIAS, ROLE_LIN_NORM, ROLE_LIN_OUT,
    // the MoE block (layers with cfg->layer_moe[l]): router, shared expert and its gate
    ROLE_MOE_ROUTER, ROLE_SH_GATE, ROLE_SH_UP, ROLE_SH_DOWN, ROLE_SH_EXPERT_GATE,
    ROLE_COUNT
} LayerRole;

typedef struct {
    Family family;
    const char *model_type;  // config.json's "model_type"
    // Class defaults of transformers' config for keys a config.json may omit.
    int kv_heads_default;    // num_key_value_heads absent: 0 = MHA (= num_attention_heads)
    int head_dim_default;    // head_dim absent: 0 = hidden_size / num_attention_heads
    int tie_default;         // tie_word_embeddings
    int max_pos_default;     // max_position_embeddings
    double rms_eps_default;  // rms_norm_eps
    // Reads the family's own keys of root (path names the file in messages)
    // into cfg, whose shared sizes are already read; fills cfg->layer_kinds.
    // Returns 0, or -1 with st naming the file and key.
    int (*parse)(ModelConfig *cfg, const cJSON *root, const char *path, Status *st);
    // Tensor names: the model-level ones, and per layer a suffix after
    // "model.layers.{l}." for each role (NULL: the family has no such tensor).
    const char *embed, *final_norm, *lm_head;
    const char *layer[ROLE_COUNT];
    // The routed experts, after "model.layers.{l}.": "{experts}.gate_up_proj" [E, 2I, H] and
    // "{experts}.down_proj" [E, H, I] (transformers 5), or per expert
    // "{experts}.{e}.{gate,up,down}_proj.weight"; NULL: the family has no MoE.
    const char *experts;
    // Norm weights (every role *_NORM and final_norm) are stored as w and
    // applied as (1 + w) (Gemma): the loader folds the 1 in.
    int norm_plus_one;
} FamilySpec;

// The names of a transformers decoder layer's attention, MLP and two norms,
// after "model.layers.{l}." (llama, qwen2, qwen3, and the attention and dense-MLP
// layers of Qwen3-Next / Qwen3.5): entries of a FamilySpec's layer table.
#define FAMILY_DECODER_LAYER_NAMES                           \
    [ROLE_ATTN_NORM] = "input_layernorm.weight",             \
    [ROLE_MLP_NORM] = "post_attention_layernorm.weight",     \
    [ROLE_WQ] = "self_attn.q_proj.weight",                   \
    [ROLE_BQ] = "self_attn.q_proj.bias",                     \
    [ROLE_WK] = "self_attn.k_proj.weight",                   \
    [ROLE_BK] = "self_attn.k_proj.bias",                     \
    [ROLE_WV] = "self_attn.v_proj.weight",                   \
    [ROLE_BV] = "self_attn.v_proj.bias",                     \
    [ROLE_WO] = "self_attn.o_proj.weight",                   \
    [ROLE_BO] = "self_attn.o_proj.bias",                     \
    [ROLE_Q_NORM] = "self_attn.q_norm.weight",               \
    [ROLE_K_NORM] = "self_attn.k_norm.weight",               \
    [ROLE_W_GATE] = "mlp.gate_proj.weight",                  \
    [ROLE_B_GATE] = "mlp.gate_proj.bias",                    \
    [ROLE_W_UP] = "mlp.up_proj.weight",                      \
    [ROLE_B_UP] = "mlp.up_proj.bias",                        \
    [ROLE_W_DOWN] = "mlp.down_proj.weight",                  \
    [ROLE_B_DOWN] = "mlp.down_proj.bias"

extern const FamilySpec family_llama, family_qwen2, family_qwen3, family_gemma3, family_qwen3_next, family_qwen3_5;

// The family of config.json's model_type, or NULL.
const FamilySpec *family_find(const char *model_type);
// The family f (never NULL for a valid Family).
const FamilySpec *family_of(Family f);
// "llama, qwen2, qwen3, gemma3_text": the supported model_types, for messages.
const char *family_supported(void);

// Readers of config.json values shared by every family (config.c). Each
// returns 0, or -1 with st saying "PATH: \"KEY\" ...".
// A number key: 1 and *out if present and numeric, 0 if absent or null, -1 if another type.
int config_get_num(const cJSON *obj, const char *key, double *out);
// An integer key that must be present (required) or defaults to dflt.
int config_read_int(const cJSON *obj, const char *path, const char *key, int required, int dflt, int *out,
                    Status *st);
// The same, checked against [lo, hi].
int config_read_int_in(const cJSON *obj, const char *path, const char *key, int required, int dflt, int lo,
                       int hi, int *out, Status *st);
int config_read_float(const cJSON *obj, const char *path, const char *key, double dflt, double *out,
                      Status *st);
int config_read_bool(const cJSON *obj, const char *path, const char *key, int dflt, int *out, Status *st);
// Checks that v lies in (lo, hi] (lo_open) or [lo, hi].
int config_check_range(const char *path, const char *key, double v, double lo, int lo_open, double hi,
                       Status *st);
// One RoPE: rope is the rope_parameters / rope_scaling object (may be NULL);
// theta is read from root's theta_key (default theta_dflt), then from the
// object's "rope_theta"; what names it in messages (e.g. "sliding_attention
// RoPE"; NULL for the model's only RoPE). Then checked as a whole against cfg
// (original context, partial rotation, finite frequencies at max_pos).
int config_parse_rope(RopeConfig *r, const ModelConfig *cfg, const cJSON *root, const cJSON *rope,
                      const char *theta_key, double theta_dflt, const char *what, const char *path,
                      Status *st);
// Layer kinds into cfg->layer_kinds (allocated here) from root's "layer_types"
// (one string per layer: "full_attention" or the name of kind other), or, when
// that key is absent or null, every N-th layer full attention and the others of
// kind other, N from root's every_key (default every_dflt; Gemma 3's
// sliding_window_pattern, Qwen3-Next's full_attention_interval).
int config_read_layer_kinds(ModelConfig *cfg, const cJSON *root, const char *path, LayerKind other,
                            const char *every_key, int every_dflt, Status *st);
// The RoPE object transformers reads: a non-empty legacy "rope_scaling" wins,
// else "rope_parameters" (its "full_attention" entry when it holds one per
// layer kind); NULL when there is neither.
const cJSON *config_rope_object(const cJSON *root);
