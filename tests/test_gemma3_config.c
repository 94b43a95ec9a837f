// test_gemma3_config: Gemma 3 config.json → ModelConfig, and its weights → Model.
//   test_gemma3_config fixtures FIXTURES_DIR TMP_DIR
//     tests/fixtures/gemma3_{legacy,new,nested}: one tiny configuration in the
//     transformers-4 keys (sliding_window_pattern, rope_theta + rope_scaling +
//     rope_local_base_freq), the transformers-5 keys (layer_types,
//     rope_parameters per layer kind) and nested under a multimodal config's
//     text_config: each parses to the same values, asserted one by one; the class
//     defaults of a config that gives only the sizes; a tiny checkpoint's norms
//     loaded as 1 + w and its head tied.
//   test_gemma3_config real MODEL_DIR
//     the converted Gemma 3 270M (scripts/get-gemma3.sh): loads, with its layer
//     kinds, window, RoPE bases, score and embedding scales. Exit 77 without it.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "fileio.h"
#include "model.h"
#include "rope.h"
#include "safetensors.h"

#include "expect.h"

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

// The values every tiny fixture must parse to.
static void check_tiny(const ModelConfig *c, const char *name) {
    static const LayerKind want[7] = {LAYER_SLIDING_ATTENTION, LAYER_SLIDING_ATTENTION, LAYER_FULL_ATTENTION,
                                      LAYER_SLIDING_ATTENTION, LAYER_SLIDING_ATTENTION, LAYER_FULL_ATTENTION,
                                      LAYER_SLIDING_ATTENTION};
    EXPECT(c->family == FAMILY_GEMMA3 && !strcmp(c->model_type, "gemma3_text") &&
               !strcmp(config_family_name(c->family), "gemma3"),
           "%s: family %d, model_type %s", name, c->family, c->model_type);
    EXPECT(c->hidden == 24 && c->n_layers == 7 && c->n_heads == 2 && c->n_kv_heads == 1 && c->head_dim == 8 &&
               c->intermediate == 40 && c->vocab == 50 && c->max_pos == 256 && c->rms_eps == 1e-6,
           "%s: sizes", name);
    int kinds_ok = c->layer_kinds != NULL;
    for (int l = 0; kinds_ok && l < 7; l++) kinds_ok = c->layer_kinds[l] == want[l];
    EXPECT(kinds_ok, "%s: layer kinds are not S S F S S F S", name);
    EXPECT(c->sliding_window == 5, "%s: sliding_window %d, want 5", name, c->sliding_window);
    EXPECT(c->rope.type == ROPE_LINEAR && c->rope.factor == 8 && c->rope.theta == 500000,
           "%s: full-attention RoPE %s factor %g theta %g, want linear 8 5e5", name, config_rope_name(c->rope.type),
           c->rope.factor, c->rope.theta);
    EXPECT(c->rope_local.type == ROPE_DEFAULT && c->rope_local.theta == 100 && c->rope_local.factor == 0,
           "%s: sliding RoPE %s theta %g, want default 100", name, config_rope_name(c->rope_local.type),
           c->rope_local.theta);
    EXPECT(c->attn_scale == pow(12.0, -0.5), "%s: attn_scale %.17g, want 12^-0.5", name, c->attn_scale);
    EXPECT(c->embed_scale == sqrtf(24.0f), "%s: embed_scale %.9g, want sqrt(24)", name, c->embed_scale);
    EXPECT(c->final_softcap == 30, "%s: final_softcap %g, want 30", name, c->final_softcap);
    EXPECT(c->act == ACT_GELU_TANH && !strcmp(config_act_name(c->act), "gelu_pytorch_tanh"), "%s: act %d", name,
           c->act);
    EXPECT(c->post_norms == 1 && c->qk_norm == 1 && c->tie_embeddings == 1, "%s: post_norms %d qk_norm %d tie %d",
           name, c->post_norms, c->qk_norm, c->tie_embeddings);
    EXPECT(!c->attention_bias && !c->o_bias && !c->mlp_bias, "%s: biases", name);

    // The two RoPE tables: sliding layers turn dim i by t·100^(−2i/8), full
    // layers by t·500000^(−2i/8)/8.
    const int T = 6, half = 4;
    EXPECT(rope_rot_dims_kind(c, LAYER_SLIDING_ATTENTION) == 8 && rope_rot_dims(c) == 8, "%s: rotated dims", name);
    float cs[6 * 4], sn[6 * 4], cf[6 * 4], sf[6 * 4], cf2[6 * 4], sf2[6 * 4];
    rope_tables_kind(c, LAYER_SLIDING_ATTENTION, T, cs, sn);
    rope_tables_kind(c, LAYER_FULL_ATTENTION, T, cf, sf);
    rope_tables(c, T, cf2, sf2);
    double err = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const double al = t * pow(100.0, -2.0 * i / 8), ag = t * pow(500000.0, -2.0 * i / 8) / 8;
            err = fmax(err, fabs(cs[t * half + i] - cos(al)) + fabs(sn[t * half + i] - sin(al)));
            err = fmax(err, fabs(cf[t * half + i] - cos(ag)) + fabs(sf[t * half + i] - sin(ag)));
        }
    EXPECT(err < 1e-5, "%s: RoPE tables off by %.3g", name, err);
    EXPECT(!memcmp(cf, cf2, sizeof cf) && !memcmp(sf, sf2, sizeof sf), "%s: rope_tables is not the full-attention table",
           name);
}

static void test_fixtures(const char *fixtures) {
    const char *names[] = {"gemma3_legacy", "gemma3_new", "gemma3_nested"};
    ModelConfig c[3];
    int ok[3];
    for (int i = 0; i < 3; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", fixtures, names[i]);
        Status st;
        ok[i] = config_load(&c[i], dir, &st) == 0;
        EXPECT(ok[i], "%s: %s", names[i], st.msg);
        if (ok[i]) check_tiny(&c[i], names[i]);
    }
    for (int i = 0; i < 3; i++)
        if (ok[i]) config_free(&c[i]);
}

// A config.json with only the sizes: transformers' Gemma3TextConfig defaults.
static void test_defaults(const char *tmp) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/gemma3_defaults", tmp);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "{\"model_type\": \"gemma3_text\", \"hidden_size\": 32, \"num_hidden_layers\": 13, "
                     "\"num_attention_heads\": 8, \"intermediate_size\": 64, \"vocab_size\": 100}");
    ModelConfig c;
    Status st;
    int rc = config_load(&c, dir, &st);
    EXPECT(rc == 0, "defaults: %s", st.msg);
    if (rc) return;
    int kinds_ok = 1;
    for (int l = 0; l < 13; l++)
        kinds_ok &= c.layer_kinds[l] == (l == 5 || l == 11 ? LAYER_FULL_ATTENTION : LAYER_SLIDING_ATTENTION);
    EXPECT(kinds_ok, "defaults: sliding_window_pattern 6 (full at 5 and 11)");
    EXPECT(c.sliding_window == 4096 && c.n_kv_heads == 4 && c.head_dim == 256 && c.max_pos == 131072 &&
               c.tie_embeddings == 1 && c.rms_eps == 1e-6,
           "defaults: W %d kv %d head_dim %d max_pos %d tie %d eps %g", c.sliding_window, c.n_kv_heads, c.head_dim,
           c.max_pos, c.tie_embeddings, c.rms_eps);
    EXPECT(c.rope.type == ROPE_DEFAULT && c.rope.theta == 1e6 && c.rope_local.type == ROPE_DEFAULT &&
               c.rope_local.theta == 1e4,
           "defaults: RoPE theta %g / local %g", c.rope.theta, c.rope_local.theta);
    EXPECT(c.attn_scale == 1.0 / 16 && c.final_softcap == 0 && c.act == ACT_GELU_TANH,
           "defaults: attn_scale %g softcap %g", c.attn_scale, c.final_softcap);
    config_free(&c);

    // Every layer full (pattern 1): no window, and the sliding RoPE is the full one.
    write_text(path, "{\"model_type\": \"gemma3_text\", \"hidden_size\": 32, \"num_hidden_layers\": 3, "
                     "\"num_attention_heads\": 8, \"intermediate_size\": 64, \"vocab_size\": 100, "
                     "\"sliding_window_pattern\": 1}");
    rc = config_load(&c, dir, &st);
    EXPECT(rc == 0, "pattern 1: %s", st.msg);
    if (rc) return;
    EXPECT(c.layer_kinds[0] == LAYER_FULL_ATTENTION && c.layer_kinds[2] == LAYER_FULL_ATTENTION &&
               c.sliding_window == 0 && c.rope_local.theta == c.rope.theta,
           "pattern 1: every layer full, W %d", c.sliding_window);
    config_free(&c);

    // A dense family: every layer full, no window, silu, scale 1, no post norms.
    write_text(path, "{\"model_type\": \"llama\", \"hidden_size\": 32, \"num_hidden_layers\": 3, "
                     "\"num_attention_heads\": 8, \"intermediate_size\": 64, \"vocab_size\": 100}");
    rc = config_load(&c, dir, &st);
    EXPECT(rc == 0, "llama: %s", st.msg);
    if (rc) return;
    EXPECT(c.layer_kinds[1] == LAYER_FULL_ATTENTION && c.sliding_window == 0 && c.act == ACT_SILU &&
               c.embed_scale == 1.0f && c.final_softcap == 0 && c.post_norms == 0 && c.rope_local.theta == 10000 &&
               c.attn_scale == 0.5,
           "llama: the plain dense decoder");
    config_free(&c);
}

// A tiny checkpoint for a fixture: every tensor its config implies, norms
// with known values. The loader must hand out 1 + w for every norm, the
// projections as stored, and the embedding as the head. prefix: the
// checkpoint's names as a multimodal Gemma 3 stores them: "" (plain
// "model.…"), "model.language_model." (in place of "model.", transformers ≥
// 4.52) or "language_model.model." (older).
static void test_load(const char *fixtures, const char *fixture, const char *prefix, const char *tmp) {
    char dir[4096], path[4200], src[4200];
    snprintf(dir, sizeof dir, "%s/%s_tiny%zu", tmp, fixture, strlen(prefix));
    mkdir(dir, 0755);
    snprintf(src, sizeof src, "%s/%s/config.json", fixtures, fixture);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    Status st;
    EXPECT(file_read_all(src, &text, &len, &st) == 0, "%s", st.msg);
    if (!text) return;
    write_text(path, text);
    free(text);

    enum { L = 7, H = 24, I = 40, V = 50, DH = 8, NQ = 16, NKV = 8 };
    static const char *per_layer[][2] = {
        {"input_layernorm.weight", "H"},          {"post_attention_layernorm.weight", "H"},
        {"pre_feedforward_layernorm.weight", "H"}, {"post_feedforward_layernorm.weight", "H"},
        {"self_attn.q_proj.weight", "Q"},          {"self_attn.k_proj.weight", "K"},
        {"self_attn.v_proj.weight", "K"},          {"self_attn.o_proj.weight", "O"},
        {"self_attn.q_norm.weight", "D"},          {"self_attn.k_norm.weight", "D"},
        {"mlp.gate_proj.weight", "G"},             {"mlp.up_proj.weight", "G"},
        {"mlp.down_proj.weight", "W"},
    };
    enum { PER = sizeof per_layer / sizeof per_layer[0] };
    StWriteTensor ts[2 + PER * L];
    char names[2 + PER * L][96];
    float *bufs[2 + PER * L];
    int n = 0;
    // Tensor n holds the value 0.01·n + 0.001·i at index i.
#define ADD(nm, nd, d0, d1)                                                               \
    do {                                                                                  \
        snprintf(names[n], sizeof names[n], "%s%s", *prefix ? prefix : "model.", (nm) + 6); \
        const int64_t numel_ = (int64_t)(d0) * ((nd) == 2 ? (d1) : 1);                      \
        bufs[n] = malloc(sizeof(float) * (size_t)numel_);                                 \
        for (int64_t i_ = 0; i_ < numel_; i_++) bufs[n][i_] = 0.01f * n + 0.001f * (float)(i_ % 97); \
        ts[n] = (StWriteTensor){names[n], nd, {d0, d1}, bufs[n]};                           \
        n++;                                                                              \
    } while (0)
    ADD("model.embed_tokens.weight", 2, V, H);
    ADD("model.norm.weight", 1, H, 0);
    for (int l = 0; l < L; l++)
        for (int r = 0; r < PER; r++) {
            char nm[96];
            snprintf(nm, sizeof nm, "model.layers.%d.%s", l, per_layer[r][0]);
            switch (per_layer[r][1][0]) {
            case 'H': ADD(nm, 1, H, 0); break;
            case 'D': ADD(nm, 1, DH, 0); break;
            case 'Q': ADD(nm, 2, NQ, H); break;
            case 'K': ADD(nm, 2, NKV, H); break;
            case 'O': ADD(nm, 2, H, NQ); break;
            case 'G': ADD(nm, 2, I, H); break;
            case 'W': ADD(nm, 2, H, I); break;
            }
        }
#undef ADD
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    EXPECT(st_write(path, ts, n, "{\"format\": \"pt\"}", &st) == 0, "st_write: %s", st.msg);
    Model m;
    int rc = model_load(&m, dir, &st);
    EXPECT(rc == 0, "tiny gemma3 load (%s, names \"%s\"): %s", fixture, prefix, st.msg);
    if (rc == 0) {
        // The stored value of tensor t at index i, and whether the loaded one is w (+ 1).
#define STORED(t, i) (0.01f * (t) + 0.001f * (float)((i) % 97))
        double err_norm = 0, err_plain = 0;
        for (int i = 0; i < H; i++) err_norm = fmax(err_norm, fabs(m.final_norm[i] - (1.0f + STORED(1, i))));
        for (int l = 0; l < L; l++) {
            const LayerWeights *w = &m.layers[l];
            const int t0 = 2 + PER * l;
            const float *norms[] = {w->attn_norm, w->post_attn_norm, w->mlp_norm, w->post_mlp_norm};
            for (int r = 0; r < 4; r++)
                for (int i = 0; i < H; i++) err_norm = fmax(err_norm, fabs(norms[r][i] - (1.0f + STORED(t0 + r, i))));
            for (int i = 0; i < DH; i++) {
                err_norm = fmax(err_norm, fabs(w->q_norm[i] - (1.0f + STORED(t0 + 8, i))));
                err_norm = fmax(err_norm, fabs(w->k_norm[i] - (1.0f + STORED(t0 + 9, i))));
            }
            for (int i = 0; i < NQ * H; i++) err_plain = fmax(err_plain, fabs(w->wq[i] - STORED(t0 + 4, i)));
            for (int i = 0; i < H * I; i++) err_plain = fmax(err_plain, fabs(w->w_down[i] - STORED(t0 + 12, i)));
            EXPECT(!w->bq && !w->bo && !w->b_gate, "layer %d: biases where the config has none", l);
        }
#undef STORED
        EXPECT(err_norm == 0, "norm weights are not 1 + w (max error %.3g)", err_norm);
        EXPECT(err_plain == 0, "projections are not as stored (max error %.3g)", err_plain);
        EXPECT(m.lm_head == m.embed, "tied head: lm_head is not the embedding");
        model_free(&m);
    }
    // A checkpoint without the post-feedforward norm of layer 3 is refused by name.
    const int drop = 2 + PER * 3 + 3;
    StWriteTensor ts2[2 + PER * L];
    int n2 = 0;
    for (int i = 0; i < n; i++)
        if (i != drop) ts2[n2++] = ts[i];
    EXPECT(st_write(path, ts2, n2, "{\"format\": \"pt\"}", &st) == 0, "st_write: %s", st.msg);
    rc = model_load(&m, dir, &st);
    char missing[200];
    snprintf(missing, sizeof missing, "missing weight \"%slayers.3.post_feedforward_layernorm.weight\"",
             *prefix ? prefix : "model.");
    EXPECT(rc == -1 && strstr(st.msg, missing), "missing post norm: rc %d, %s", rc, st.msg);
    if (rc == 0) model_free(&m);
    for (int i = 0; i < n; i++) free(bufs[i]);
}

// The converted Gemma 3 270M: 18 layers, full attention at 5, 11, 17.
static int test_real(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        printf("skipped: %s not found (scripts/get-gemma3.sh)\n", path);
        return 77;
    }
    Model m;
    Status st;
    int rc = model_load(&m, dir, &st);
    EXPECT(rc == 0, "gemma3-270m: %s", st.msg);
    if (rc) return 1;
    const ModelConfig *c = &m.cfg;
    int kinds_ok = c->n_layers == 18;
    for (int l = 0; kinds_ok && l < 18; l++)
        kinds_ok = c->layer_kinds[l] == (l == 5 || l == 11 || l == 17 ? LAYER_FULL_ATTENTION : LAYER_SLIDING_ATTENTION);
    EXPECT(kinds_ok, "gemma3-270m: layer kinds are not sliding except 5, 11, 17");
    EXPECT(c->sliding_window == 512, "gemma3-270m: W %d", c->sliding_window);
    EXPECT(c->rope_local.type == ROPE_DEFAULT && c->rope_local.theta == 1e4, "gemma3-270m: local theta %g",
           c->rope_local.theta);
    EXPECT(c->rope.type == ROPE_DEFAULT && c->rope.theta == 1e6, "gemma3-270m: full theta %g", c->rope.theta);
    EXPECT(c->attn_scale == 1.0 / 16, "gemma3-270m: attn_scale %g", c->attn_scale);
    EXPECT(c->embed_scale == sqrtf(640.0f), "gemma3-270m: embed_scale %.9g", c->embed_scale);
    EXPECT(c->hidden == 640 && c->n_heads == 4 && c->n_kv_heads == 1 && c->head_dim == 256 && c->vocab == 262144 &&
               c->intermediate == 2048 && c->max_pos == 32768,
           "gemma3-270m: sizes");
    EXPECT(c->act == ACT_GELU_TANH && c->final_softcap == 0 && c->post_norms && c->qk_norm && m.lm_head == m.embed,
           "gemma3-270m: act, softcap, norms, tied head");
    for (int l = 0; l < 18; l++)
        EXPECT(m.layers[l].post_attn_norm && m.layers[l].post_mlp_norm && m.layers[l].q_norm, "layer %d norms", l);
    model_free(&m);
    return failures ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "fixtures")) {
        test_fixtures(argv[2]);
        test_defaults(argv[3]);
        test_load(argv[2], "gemma3_legacy", "", argv[3]);
        test_load(argv[2], "gemma3_nested", "model.language_model.", argv[3]);
        test_load(argv[2], "gemma3_nested", "language_model.model.", argv[3]);
    } else if (argc == 3 && !strcmp(argv[1], "real")) {
        int rc = test_real(argv[2]);
        if (rc == 77) return 77;
    } else {
        fprintf(stderr, "usage: test_gemma3_config fixtures FIXTURES_DIR TMP_DIR | real MODEL_DIR\n");
        return 2;
    }
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    else printf("all gemma3 config checks passed\n");
    return failures ? 1 : 0;
}
