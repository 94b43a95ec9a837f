// config.h: the architecture of a Hugging Face checkpoint, read from config.json.
#pragma once
#include "ops.h"  // Act
#include "status.h"

typedef enum { FAMILY_LLAMA, FAMILY_QWEN2, FAMILY_QWEN3, FAMILY_GEMMA3, FAMILY_QWEN3_NEXT, FAMILY_QWEN3_5 } Family;
typedef enum { ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN } RopeType;
// full: causal GQA over every earlier key; sliding: key j visible to query t
// iff t − sliding_window < j ≤ t; linear: Gated DeltaNet, a recurrence with no
// keys to select (DESIGN.md, "Hybrid stacks").
typedef enum { LAYER_FULL_ATTENTION, LAYER_SLIDING_ATTENTION, LAYER_LINEAR_ATTENTION } LayerKind;
#define LAYER_KIND_COUNT 3

// The Gated DeltaNet layers' sizes (Qwen3-Next, Qwen3.5: linear_*).
typedef struct {
    int n_k_heads, n_v_heads;  // linear_num_key_heads, linear_num_value_heads (a multiple of n_k_heads)
    int k_dim, v_dim;          // linear_key_head_dim, linear_value_head_dim
    int conv_kernel;           // linear_conv_kernel_dim
    int fused_proj;            // in_proj_qkvz + in_proj_ba (qwen3_next), else in_proj_qkv/_z/_b/_a
} LinearAttnConfig;

// The mixture-of-experts MLP (Qwen3-Next): routed experts + a gated shared expert.
typedef struct {
    int n_experts;         // num_experts (0: no MoE layer)
    int top_k;             // num_experts_per_tok
    int intermediate;      // moe_intermediate_size (per routed expert)
    int shared_intermediate;  // shared_expert_intermediate_size (0: no shared expert)
    int norm_topk_prob;    // renormalise the top-k router probabilities to sum 1
} MoeConfig;

typedef struct {
    RopeType type;
    double theta;                 // rope_theta
    double factor;                // linear, llama3, yarn
    double low_freq_factor;       // llama3
    double high_freq_factor;      // llama3
    double original_max_pos;      // llama3, yarn (0 = not given)
    double beta_fast, beta_slow;  // yarn
    double attention_factor;      // yarn: scale on cos/sin (< 0 = derive from factor)
    double mscale, mscale_all_dim;// yarn (0 = not given)
    int truncate;                 // yarn: round the correction range to integers
    double partial_rotary_factor; // fraction of head_dim that is rotated
} RopeConfig;

typedef struct {
    Family family;
    char model_type[32];
    int hidden;        // hidden_size
    int n_layers;      // num_hidden_layers
    int n_heads;       // num_attention_heads (Hq)
    int n_kv_heads;    // num_key_value_heads (Hkv)
    int head_dim;      // d_h
    int intermediate;  // intermediate_size
    int vocab;         // vocab_size
    int max_pos;       // max_position_embeddings
    double rms_eps;
    int tie_embeddings;
    int attention_bias;  // q/k/v (and for llama, o) projections carry a bias
    int o_bias;          // o_proj carries a bias
    int mlp_bias;
    int qk_norm;         // qwen3, gemma3: RMSNorm over each head of q and k before RoPE
    int post_norms;      // gemma3: the attention and MLP outputs are normed before each residual add
    Act act;             // activation of the gated MLP (SwiGLU: silu; GeGLU: gelu_tanh)
    float embed_scale;   // input embeddings × embed_scale (1; gemma3: sqrt(hidden) in fp32)
    double final_softcap;// logits = cap·tanh(logits/cap) when > 0 (0: none)
    double attn_scale;   // score scale s
    RopeConfig rope;         // RoPE of full-attention layers
    RopeConfig rope_local;   // RoPE of sliding-window layers (== rope when there are none)
    int sliding_window;      // W of sliding layers; 0 when no layer slides
    LayerKind *layer_kinds;  // n_layers entries, owned
    int attn_out_gate;       // qwen3_next/3_5: q_proj rows per head are [q | gate]; o = attn · sigmoid(gate)
    double rope_partial_dflt;// > 0: default RoPE honours partial_rotary_factor (this is its default); 0: rotates all
    LinearAttnConfig lin;    // sizes of the LAYER_LINEAR_ATTENTION layers
    MoeConfig moe;
    unsigned char *layer_moe;// n_layers entries (owned; NULL: no MoE layer): 1 where the MLP is the MoE block
} ModelConfig;

// Ranges config_load accepts (far beyond released checkpoints; they keep
// products of sizes inside the integer types that hold them).
#define CONFIG_MAX_HIDDEN (1 << 16)
#define CONFIG_MAX_LAYERS 1024
#define CONFIG_MAX_HEADS 1024
#define CONFIG_MAX_HEAD_DIM 1024
#define CONFIG_MAX_INTERMEDIATE (1 << 20)
#define CONFIG_MAX_VOCAB (1 << 22)
#define CONFIG_MAX_POS (1 << 24)

// Reads DIR/config.json. On failure st names the file and the problem.
// The caller releases cfg with config_free.
int config_load(ModelConfig *cfg, const char *dir, Status *st);
// DIR/config.json parsed as a JSON object (cJSON_Delete it), its path in path[0..n);
// NULL with st naming the file when it is unreadable or not a JSON object.
struct cJSON *config_json_read(const char *dir, char *path, size_t n, Status *st);
void config_free(ModelConfig *cfg);
const char *config_family_name(Family f);
const char *config_rope_name(RopeType t);
const char *config_layer_kind_name(LayerKind k);  // "full_attention", "sliding_attention", "linear_attention"
// The full-attention layers among kinds[0..n_layers) — the layers the method
// acts at (docs/design.md, "Hybrid stacks") — ascending, into out (room for
// n_layers entries; may be NULL to count only). Returns their count.
int config_full_layers(const LayerKind *kinds, int n_layers, int *out);
// kinds[i] = full attention iff (i + 1) % every == 0, else other (the layer
// pattern of configs without layer_types).
void config_layer_kinds_periodic(LayerKind *kinds, int n_layers, int every, LayerKind other);
const char *config_act_name(Act a);               // "silu", "gelu_pytorch_tanh"
