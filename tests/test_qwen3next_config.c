// test_qwen3next_config TMP_DIR: Qwen3-Next and Qwen3.5 config.json → ModelConfig.
//   Layer kinds from layer_types and from full_attention_interval; the Gated
//   DeltaNet sizes; the gated attention; partial RoPE (default 0.25, rotating
//   head_dim · factor dims of a default RoPE); the MoE layers from num_experts,
//   decoder_sparse_step and mlp_only_layers; Qwen3.5 nested under a multimodal
//   text_config; and configs that must be refused, each with the key named.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "rope.h"

#include "expect.h"

static const char *tmp;

// Writes text as TMP/NAME/config.json and loads it (0, or -1 with st).
static int load(const char *name, const char *text, ModelConfig *c, Status *st) {
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return config_load(c, dir, st);
}

#define SIZES                                                                                          \
    "\"hidden_size\": 32, \"num_hidden_layers\": 6, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, " \
    "\"head_dim\": 16, \"intermediate_size\": 48, \"vocab_size\": 64, \"linear_num_key_heads\": 2, "        \
    "\"linear_num_value_heads\": 4, \"linear_key_head_dim\": 8, \"linear_value_head_dim\": 12"

// A config that must be refused, with want in its message.
static void refused(const char *name, const char *text, const char *want) {
    ModelConfig c;
    Status st = {0};
    const int rc = load(name, text, &c, &st);
    EXPECT(rc != 0 && strstr(st.msg, want), "%s: want a refusal naming \"%s\", got rc %d \"%s\"", name, want, rc,
           st.msg);
    if (!rc) config_free(&c);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_qwen3next_config TMP_DIR\n");
        return 2;
    }
    tmp = argv[1];
    mkdir(tmp, 0755);
    ModelConfig c;
    Status st = {0};

    // Qwen3.5 by full_attention_interval 3, partial RoPE from the default.
    EXPECT(!load("q35_interval", "{\"model_type\": \"qwen3_5_text\", " SIZES ", \"full_attention_interval\": 3}", &c,
                 &st),
           "q35_interval: %s", st.msg);
    if (!failures) {
        static const LayerKind want[6] = {LAYER_LINEAR_ATTENTION, LAYER_LINEAR_ATTENTION, LAYER_FULL_ATTENTION,
                                          LAYER_LINEAR_ATTENTION, LAYER_LINEAR_ATTENTION, LAYER_FULL_ATTENTION};
        int ok = 1;
        for (int l = 0; l < 6; l++) ok &= c.layer_kinds[l] == want[l];
        EXPECT(ok, "q35_interval: layer kinds are not L L F L L F");
        EXPECT(c.family == FAMILY_QWEN3_5 && c.attn_out_gate && c.qk_norm && !c.layer_moe && !c.lin.fused_proj,
               "q35_interval: family %d gate %d qk_norm %d moe %p fused %d", c.family, c.attn_out_gate, c.qk_norm,
               (void *)c.layer_moe, c.lin.fused_proj);
        EXPECT(c.lin.n_k_heads == 2 && c.lin.n_v_heads == 4 && c.lin.k_dim == 8 && c.lin.v_dim == 12 &&
                   c.lin.conv_kernel == 4,
               "q35_interval: DeltaNet sizes");
        EXPECT(rope_rot_dims(&c) == 4 && c.rope.theta == 10000 && !c.tie_embeddings,
               "q35_interval: rotated dims %d (want 16 x 0.25), theta %g, tied %d", rope_rot_dims(&c), c.rope.theta,
               c.tie_embeddings);
        EXPECT(config_full_layers(c.layer_kinds, c.n_layers, NULL) == 2, "q35_interval: 2 full-attention layers");
        config_free(&c);
    }

    // Qwen3.5 nested in a multimodal config, layer_types and rope_parameters.
    EXPECT(!load("q35_nested",
                 "{\"model_type\": \"qwen3_5\", \"text_config\": {\"model_type\": \"qwen3_5_text\", " SIZES
                 ", \"layer_types\": [\"linear_attention\", \"full_attention\", \"linear_attention\", "
                 "\"full_attention\", \"linear_attention\", \"full_attention\"], \"rope_parameters\": {\"rope_type\": "
                 "\"default\", \"rope_theta\": 1e7, \"partial_rotary_factor\": 0.5, \"mrope_section\": [1, 1, 0]}}}",
                 &c, &st),
           "q35_nested: %s", st.msg);
    if (!st.msg[0]) {
        EXPECT(c.family == FAMILY_QWEN3_5 && c.layer_kinds[1] == LAYER_FULL_ATTENTION &&
                   c.layer_kinds[4] == LAYER_LINEAR_ATTENTION,
               "q35_nested: family and kinds");
        EXPECT(rope_rot_dims(&c) == 8 && c.rope.theta == 1e7, "q35_nested: rotated dims %d, theta %g",
               rope_rot_dims(&c), c.rope.theta);
        config_free(&c);
    }

    // Qwen3-Next: MoE every 2nd layer (decoder_sparse_step 2) except mlp_only_layers.
    st.msg[0] = 0;
    EXPECT(!load("qnext", "{\"model_type\": \"qwen3_next\", " SIZES ", \"num_experts\": 8, \"num_experts_per_tok\": "
                          "2, \"moe_intermediate_size\": 16, \"shared_expert_intermediate_size\": 24, "
                          "\"decoder_sparse_step\": 2, \"mlp_only_layers\": [3], \"norm_topk_prob\": false}",
                 &c, &st),
           "qnext: %s", st.msg);
    if (!st.msg[0]) {
        static const unsigned char want[6] = {0, 1, 0, 0, 0, 1};
        EXPECT(c.layer_moe && !memcmp(c.layer_moe, want, 6), "qnext: MoE layers are not 1 and 5");
        EXPECT(c.moe.n_experts == 8 && c.moe.top_k == 2 && c.moe.intermediate == 16 &&
                   c.moe.shared_intermediate == 24 && !c.moe.norm_topk_prob && c.lin.fused_proj,
               "qnext: MoE sizes / fused projections");
        EXPECT(c.layer_kinds[3] == LAYER_FULL_ATTENTION && c.layer_kinds[0] == LAYER_LINEAR_ATTENTION,
               "qnext: default interval 4");
        config_free(&c);
    }

    refused("bad_heads", "{\"model_type\": \"qwen3_5_text\", \"linear_num_key_heads\": 3, " SIZES "}",  // cJSON: the first key wins
            "linear_num_value_heads (4) is not a multiple of linear_num_key_heads (3)");
    refused("bad_topk", "{\"model_type\": \"qwen3_next\", " SIZES ", \"num_experts\": 2, \"num_experts_per_tok\": 3}",
            "num_experts_per_tok (3) exceeds num_experts (2)");
    refused("bad_only", "{\"model_type\": \"qwen3_next\", " SIZES ", \"num_experts\": 4, \"num_experts_per_tok\": 2, "
                        "\"mlp_only_layers\": [6]}",
            "mlp_only_layers");
    refused("bad_kind", "{\"model_type\": \"qwen3_5_text\", " SIZES ", \"layer_types\": [\"linear_attention\", "
                        "\"sliding_attention\", \"linear_attention\", \"full_attention\", \"linear_attention\", "
                        "\"full_attention\"]}",
            "(supported: full_attention, linear_attention)");
    refused("bad_gemma_linear", "{\"model_type\": \"gemma3_text\", " SIZES ", \"layer_types\": [\"linear_attention\", "
                                "\"full_attention\", \"full_attention\", \"full_attention\", \"full_attention\", "
                                "\"full_attention\"]}",
            "(supported: full_attention, sliding_attention)");
    refused("bad_odd_rot", "{\"model_type\": \"qwen3_5_text\", " SIZES ", \"partial_rotary_factor\": 0.1875}",
            "rotates an odd number of dims");
    refused("bad_act", "{\"model_type\": \"qwen3_5_text\", " SIZES ", \"hidden_act\": \"gelu\"}",
            "unsupported hidden_act");

    printf("test_qwen3next_config: %s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
