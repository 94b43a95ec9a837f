// config.h: the architecture of a Hugging Face checkpoint, read from config.json.
#pragma once
#include "status.h"

typedef enum { FAMILY_LLAMA, FAMILY_QWEN2, FAMILY_QWEN3 } Family;
typedef enum { ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN } RopeType;
typedef enum { LAYER_FULL_ATTENTION, LAYER_SLIDING_ATTENTION } LayerKind;

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
    int qk_norm;         // qwen3: RMSNorm over each head of q and k before RoPE
    double attn_scale;   // score scale s
    RopeConfig rope;
    LayerKind *layer_kinds;  // n_layers entries, owned
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
void config_free(ModelConfig *cfg);
const char *config_family_name(Family f);
const char *config_rope_name(RopeType t);
