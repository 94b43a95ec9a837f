// config.c: config.json → ModelConfig, in both key styles seen in the wild.
//
// transformers 4.x wrote RoPE as top-level `rope_theta` plus an optional
// `rope_scaling` object; transformers 5 writes one `rope_parameters` object
// holding `rope_type`, `rope_theta` and the scaling keys (or one such object
// per layer kind). Either is accepted. This file reads what every family
// shares (the sizes, the readers, RoPE) and leaves the rest to the family of
// model_type (family.h).
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "family.h"
#include "fileio.h"
#include "rope.h"

const char *config_family_name(Family f) {
    switch (f) {
    case FAMILY_LLAMA: return "llama";
    case FAMILY_QWEN2: return "qwen2";
    case FAMILY_QWEN3: return "qwen3";
    case FAMILY_GEMMA3: return "gemma3";
    case FAMILY_QWEN3_NEXT: return "qwen3_next";
    case FAMILY_QWEN3_5: return "qwen3_5";
    }
    return "?";
}

const char *config_layer_kind_name(LayerKind k) {
    switch (k) {
    case LAYER_FULL_ATTENTION: return "full_attention";
    case LAYER_SLIDING_ATTENTION: return "sliding_attention";
    case LAYER_LINEAR_ATTENTION: return "linear_attention";
    }
    return "?";
}

int config_full_layers(const LayerKind *kinds, int n_layers, int *out) {
    int n = 0;
    for (int l = 0; l < n_layers; l++)
        if (kinds[l] == LAYER_FULL_ATTENTION) {
            if (out) out[n] = l;
            n++;
        }
    return n;
}

const char *config_act_name(Act a) {
    switch (a) {
    case ACT_SILU: return "silu";
    case ACT_GELU_TANH: return "gelu_pytorch_tanh";
    }
    return "?";
}

const char *config_rope_name(RopeType t) {
    switch (t) {
    case ROPE_DEFAULT: return "default";
    case ROPE_LINEAR: return "linear";
    case ROPE_LLAMA3: return "llama3";
    case ROPE_YARN: return "yarn";
    }
    return "?";
}

int config_get_num(const cJSON *obj, const char *key, double *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return 0;
    if (!cJSON_IsNumber(it)) return -1;
    *out = it->valuedouble;
    return 1;
}

static int get_bool(const cJSON *obj, const char *key, int *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!it || cJSON_IsNull(it)) return 0;
    if (!cJSON_IsBool(it)) return -1;
    *out = cJSON_IsTrue(it);
    return 1;
}

int config_read_int(const cJSON *root, const char *path, const char *key, int required, int dflt, int *out,
                    Status *st) {
    double v;
    int r = config_get_num(root, key, &v);
    if (r < 0) return status_fail(st, "%s: \"%s\" must be a number", path, key);
    if (r == 0) {
        if (required) return status_fail(st, "%s: missing required key \"%s\"", path, key);
        *out = dflt;
        return 0;
    }
    if (v != floor(v) || v < 0 || v > 1e9)
        return status_fail(st, "%s: \"%s\" must be a non-negative integer (got %g)", path, key, v);
    *out = (int)v;
    return 0;
}

int config_read_int_in(const cJSON *root, const char *path, const char *key, int required, int dflt, int lo,
                       int hi, int *out, Status *st) {
    if (config_read_int(root, path, key, required, dflt, out, st)) return -1;
    if (*out < lo || *out > hi)
        return status_fail(st, "%s: \"%s\" must be in [%d, %d] (got %d)", path, key, lo, hi, *out);
    return 0;
}

int config_check_range(const char *path, const char *key, double v, double lo, int lo_open, double hi,
                       Status *st) {
    if (isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi) return 0;
    return status_fail(st, "%s: \"%s\" must be in %c%g, %g] (got %g)", path, key, lo_open ? '(' : '[', lo, hi, v);
}

int config_read_float(const cJSON *obj, const char *path, const char *key, double dflt, double *out,
                      Status *st) {
    double v;
    int r = config_get_num(obj, key, &v);
    if (r < 0) return status_fail(st, "%s: \"%s\" must be a number", path, key);
    *out = r ? v : dflt;
    return 0;
}

int config_read_bool(const cJSON *obj, const char *path, const char *key, int dflt, int *out, Status *st) {
    int r = get_bool(obj, key, out);
    if (r < 0) return status_fail(st, "%s: \"%s\" must be true or false", path, key);
    if (r == 0) *out = dflt;
    return 0;
}

// The RoPE object alone: `rope` is the rope_parameters / rope_scaling object
// (may be NULL); theta comes from it or from root's theta_key.
static int parse_rope_object(RopeConfig *r, const cJSON *root, const cJSON *rope, const char *theta_key,
                             double theta_dflt, double partial_dflt, const char *path, Status *st) {
    memset(r, 0, sizeof *r);
    r->type = ROPE_DEFAULT;
    r->attention_factor = -1;
    r->partial_rotary_factor = partial_dflt;
    if (config_read_float(root, path, theta_key, theta_dflt, &r->theta, st)) return -1;
    if (config_read_float(root, path, "partial_rotary_factor", partial_dflt, &r->partial_rotary_factor, st))
        return -1;
    if (!rope || cJSON_IsNull(rope)) return 0;
    if (!cJSON_IsObject(rope)) return status_fail(st, "%s: RoPE parameters must be an object", path);

    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rope, "rope_type");
    if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rope, "type");  // older spelling
    const char *name = cJSON_IsString(ty) ? ty->valuestring : "default";
    if (!strcmp(name, "default")) r->type = ROPE_DEFAULT;
    else if (!strcmp(name, "linear")) r->type = ROPE_LINEAR;
    else if (!strcmp(name, "llama3")) r->type = ROPE_LLAMA3;
    else if (!strcmp(name, "yarn")) r->type = ROPE_YARN;
    else return status_fail(st, "%s: unsupported rope_type \"%s\" (supported: default, linear, llama3, yarn)", path, name);

    if (config_read_float(rope, path, "rope_theta", r->theta, &r->theta, st)) return -1;
    if (config_read_float(rope, path, "partial_rotary_factor", r->partial_rotary_factor,
                   &r->partial_rotary_factor, st))
        return -1;
    if (config_read_float(rope, path, "factor", 0, &r->factor, st)) return -1;
    if (config_read_float(rope, path, "original_max_position_embeddings", 0, &r->original_max_pos, st))
        return -1;
    if (r->type == ROPE_LLAMA3) {
        if (config_read_float(rope, path, "low_freq_factor", 1.0, &r->low_freq_factor, st)) return -1;
        if (config_read_float(rope, path, "high_freq_factor", 4.0, &r->high_freq_factor, st)) return -1;
        if (r->high_freq_factor <= r->low_freq_factor)
            return status_fail(st, "%s: llama3 RoPE needs high_freq_factor > low_freq_factor", path);
    }
    if (r->type == ROPE_YARN) {
        if (config_read_float(rope, path, "beta_fast", 32.0, &r->beta_fast, st)) return -1;
        if (config_read_float(rope, path, "beta_slow", 1.0, &r->beta_slow, st)) return -1;
        if (config_read_float(rope, path, "attention_factor", -1, &r->attention_factor, st)) return -1;
        if (config_read_float(rope, path, "mscale", 0, &r->mscale, st)) return -1;
        if (config_read_float(rope, path, "mscale_all_dim", 0, &r->mscale_all_dim, st)) return -1;
        if (config_read_bool(rope, path, "truncate", 1, &r->truncate, st)) return -1;
    }
    if ((r->type == ROPE_LINEAR || r->type == ROPE_LLAMA3) && !(r->factor > 0))
        return status_fail(st, "%s: %s RoPE needs a positive \"factor\"", path, name);
    if (r->type == ROPE_YARN && r->factor < 0)
        return status_fail(st, "%s: yarn RoPE \"factor\" must be positive", path);
    if (r->factor != 0 && config_check_range(path, "factor", r->factor, 0, 1, 1e6, st)) return -1;
    if (r->original_max_pos != 0 &&
        config_check_range(path, "original_max_position_embeddings", r->original_max_pos, 0, 1, CONFIG_MAX_POS, st))
        return -1;
    if (r->type == ROPE_LLAMA3 && config_check_range(path, "low_freq_factor", r->low_freq_factor, 0, 1, 1e6, st))
        return -1;
    if (r->type == ROPE_LLAMA3 && config_check_range(path, "high_freq_factor", r->high_freq_factor, 0, 1, 1e6, st))
        return -1;
    if (r->type == ROPE_YARN) {
        if (config_check_range(path, "beta_fast", r->beta_fast, 0, 1, 1e6, st) ||
            config_check_range(path, "beta_slow", r->beta_slow, 0, 1, 1e6, st))
            return -1;
        if (r->attention_factor != -1 && config_check_range(path, "attention_factor", r->attention_factor, 0, 1, 1e3, st))
            return -1;
        if (config_check_range(path, "mscale", r->mscale, -1e3, 0, 1e3, st) ||
            config_check_range(path, "mscale_all_dim", r->mscale_all_dim, -1e3, 0, 1e3, st))
            return -1;
    }
    // theta <= 1 makes the frequencies grow with the dim (or, for yarn, divides by
    // log(theta) = 0); a tiny theta overflows them to inf and every logit is NaN.
    if (config_check_range(path, "rope_theta", r->theta, 1, 1, 1e15, st)) return -1;
    if (!(r->partial_rotary_factor > 0 && r->partial_rotary_factor <= 1))
        return status_fail(st, "%s: partial_rotary_factor must be in (0, 1]", path);
    return 0;
}

int config_parse_rope(RopeConfig *r, const ModelConfig *cfg, const cJSON *root, const cJSON *rope,
                      const char *theta_key, double theta_dflt, const char *what, const char *path,
                      Status *st) {
    const double partial_dflt = cfg->rope_partial_dflt > 0 ? cfg->rope_partial_dflt : 1.0;
    if (parse_rope_object(r, root, rope, theta_key, theta_dflt, partial_dflt, path, st)) return -1;
    if (r->type == ROPE_LLAMA3 || r->type == ROPE_YARN) {
        // A top-level original_max_position_embeddings overrides the dict's;
        // yarn falls back to max_position_embeddings.
        double omp = 0;
        if (config_read_float(root, path, "original_max_position_embeddings", 0, &omp, st)) return -1;
        if (omp > 0) r->original_max_pos = omp;
        if (r->original_max_pos <= 0 && r->type == ROPE_YARN) r->original_max_pos = cfg->max_pos;
        if (r->original_max_pos <= 0)
            return status_fail(st, "%s: llama3 RoPE needs original_max_position_embeddings", path);
        if (config_check_range(path, "original_max_position_embeddings", r->original_max_pos, 0, 1, CONFIG_MAX_POS,
                               st))
            return -1;
        if (r->type == ROPE_YARN && r->factor <= 0) r->factor = cfg->max_pos / r->original_max_pos;
    }
    // Llama/Qwen/Gemma rotate the whole head: default RoPE ignores partial_rotary_factor
    // and the scaled types cannot apply it (transformers raises a shape error).
    // Qwen3-Next and Qwen3.5 rotate the first head_dim · partial_rotary_factor dims.
    if (r->type == ROPE_DEFAULT && cfg->rope_partial_dflt > 0) {
        if (rope_config_rot_dims(r, cfg->head_dim) % 2)
            return status_fail(st, "%s: head_dim %d x partial_rotary_factor %g rotates an odd number of dims", path,
                               cfg->head_dim, r->partial_rotary_factor);
    } else if (r->type == ROPE_DEFAULT) r->partial_rotary_factor = 1.0;
    else if (r->partial_rotary_factor != 1.0)
        return status_fail(st, "%s: partial_rotary_factor %g is not supported for %s RoPE in %s models", path,
                           r->partial_rotary_factor, config_rope_name(r->type), cfg->model_type);

    // The frequencies themselves, at the longest context: every combination of
    // the checked parameters must still give finite angles and a finite, positive
    // cos/sin scale, or every logit would be NaN.
    const int half = rope_config_rot_dims(r, cfg->head_dim) / 2;
    if (half < 1)
        return status_fail(st, "%s: RoPE rotates no dims (head_dim %d, partial_rotary_factor %g)", path,
                           cfg->head_dim, r->partial_rotary_factor);
    float *inv = xmalloc(sizeof *inv * (size_t)half), af = 0;
    rope_config_inv_freq(r, cfg->head_dim, inv, &af);
    int bad = -1;
    for (int i = 0; i < half && bad < 0; i++)
        if (!isfinite(inv[i]) || !isfinite(inv[i] * (float)cfg->max_pos) || inv[i] < 0) bad = i;
    double bad_v = bad >= 0 ? inv[bad] : 0;
    free(inv);
    if (bad >= 0 || !(isfinite(af) && af > 0))
        return status_fail(st, "%s: the %s%sRoPE parameters (%s, %s %g, factor %g) give %s (%g); "
                               "no model can run with them", path, what ? what : "", what ? " " : "",
                           config_rope_name(r->type), rope && cJSON_IsObject(rope) ? "rope_theta" : theta_key,
                           r->theta, r->factor, bad >= 0 ? "a non-finite frequency" : "a non-positive cos/sin scale",
                           bad >= 0 ? bad_v : (double)af);
    return 0;
}

void config_layer_kinds_periodic(LayerKind *kinds, int n_layers, int every, LayerKind other) {
    for (int i = 0; i < n_layers; i++) kinds[i] = (i + 1) % every ? other : LAYER_FULL_ATTENTION;
}

const cJSON *config_rope_object(const cJSON *root) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (rp && !cJSON_IsNull(rp) && !(cJSON_IsObject(rp) && !rp->child)) return rp;
    rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *full = cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, "full_attention") : NULL;
    return full ? full : rp;
}

int config_read_layer_kinds(ModelConfig *cfg, const cJSON *root, const char *path, LayerKind other,
                            const char *every_key, int every_dflt, Status *st) {
    const unsigned allowed = 1u << LAYER_FULL_ATTENTION | 1u << other;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    if (!lt || cJSON_IsNull(lt)) {
        int every = every_dflt;
        if (config_read_int_in(root, path, every_key, 0, every_dflt, 1, CONFIG_MAX_LAYERS, &every, st)) return -1;
        free(cfg->layer_kinds);
        cfg->layer_kinds = xcalloc((size_t)cfg->n_layers, sizeof *cfg->layer_kinds);
        config_layer_kinds_periodic(cfg->layer_kinds, cfg->n_layers, every, other);
        return 0;
    }
    if (!cJSON_IsArray(lt)) return status_fail(st, "%s: \"layer_types\" must be a list of strings", path);
    const int n = cJSON_GetArraySize(lt);
    if (n != cfg->n_layers)
        return status_fail(st, "%s: \"layer_types\" has %d entries but num_hidden_layers is %d", path, n,
                           cfg->n_layers);
    char names[96] = "";  // "full_attention, sliding_attention" (the kinds allowed, for messages)
    for (int k = 0; k < LAYER_KIND_COUNT; k++)
        if (allowed & (1u << k))
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? ", " : "",
                     config_layer_kind_name((LayerKind)k));
    LayerKind *kinds = xcalloc((size_t)n, sizeof *kinds);
    int i = 0;
    for (const cJSON *e = lt->child; e; e = e->next, i++) {
        int kind = -1;
        for (int k = 0; k < LAYER_KIND_COUNT && kind < 0 && cJSON_IsString(e); k++)
            if ((allowed & (1u << k)) && !strcmp(e->valuestring, config_layer_kind_name((LayerKind)k))) kind = k;
        if (kind >= 0) {
            kinds[i] = (LayerKind)kind;
            continue;
        }
        if (cJSON_IsString(e))
            status_fail(st, "%s: \"layer_types\"[%d] is \"%s\" (supported: %s)", path, i, e->valuestring, names);
        else
            status_fail(st, "%s: \"layer_types\"[%d] must be a string", path, i);
        free(kinds);
        return -1;
    }
    free(cfg->layer_kinds);
    cfg->layer_kinds = kinds;
    return 0;
}

static const FamilySpec *const families[] = {&family_llama, &family_qwen2, &family_qwen3, &family_gemma3,
                                             &family_qwen3_next, &family_qwen3_5};
enum { N_FAMILIES = sizeof families / sizeof families[0] };

const FamilySpec *family_find(const char *model_type) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (!strcmp(families[i]->model_type, model_type)) return families[i];
    return NULL;
}

const FamilySpec *family_of(Family f) {
    for (int i = 0; i < N_FAMILIES; i++)
        if (families[i]->family == f) return families[i];
    SPINDLE_CHECK(!"a Family value without a FamilySpec");
    return NULL;
}

const char *family_supported(void) {
    static char buf[256];
    if (!buf[0])
        for (int i = 0; i < N_FAMILIES; i++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? ", " : "", families[i]->model_type);
    return buf;
}

cJSON *config_json_read(const char *dir, char *path, size_t n, Status *st) {
    snprintf(path, n, "%s/config.json", dir);
    size_t len = 0;
    char *text = NULL;
    if (file_read_all(path, &text, &len, st)) return NULL;
    cJSON *doc = cJSON_ParseWithLength(text, len);
    free(text);
    if (!doc || !cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        status_fail(st, "%s: not valid JSON (broken or truncated file)", path);
        return NULL;
    }
    return doc;
}

int config_load(ModelConfig *cfg, const char *dir, Status *st) {
    memset(cfg, 0, sizeof *cfg);
    char path[4096];
    cJSON *doc = config_json_read(dir, path, sizeof path, st);
    if (!doc) return -1;
    int rc = -1;
    const cJSON *root = doc;

    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt)) {
        status_fail(st, "%s: missing \"model_type\"", path);
        goto done;
    }
    const char *type = mt->valuestring;
    // A multimodal Gemma 3 or Qwen3.5 config holds the language model's under "text_config".
    const cJSON *text_cfg = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!strcmp(type, "gemma3") && cJSON_IsObject(text_cfg)) {
        root = text_cfg;
        type = family_gemma3.model_type;
    } else if (!strcmp(type, "qwen3_5") && cJSON_IsObject(text_cfg)) {
        root = text_cfg;
        type = family_qwen3_5.model_type;
    }
    const FamilySpec *fam = family_find(type);
    if (!fam) {
        status_fail(st, "%s: unsupported model_type \"%s\" (supported: %s)", path, type, family_supported());
        goto done;
    }
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", type);
    cfg->family = fam->family;

    // Ranges: far beyond any released checkpoint, small enough that products of
    // sizes fit the types they are computed in.
    if (config_read_int_in(root, path, "hidden_size", 1, 0, 1, CONFIG_MAX_HIDDEN, &cfg->hidden, st)) goto done;
    if (config_read_int_in(root, path, "num_hidden_layers", 1, 0, 1, CONFIG_MAX_LAYERS, &cfg->n_layers, st))
        goto done;
    if (config_read_int_in(root, path, "num_attention_heads", 1, 0, 1, CONFIG_MAX_HEADS, &cfg->n_heads, st))
        goto done;
    // num_key_value_heads: null means MHA; absent means the class default
    // (MHA for llama, 32 for qwen2/qwen3, 4 for gemma3), as transformers reads it.
    const cJSON *kvh = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads");
    int dflt_kv = (!kvh && fam->kv_heads_default) ? fam->kv_heads_default : cfg->n_heads;
    if (config_read_int_in(root, path, "num_key_value_heads", 0, dflt_kv, 1, CONFIG_MAX_HEADS, &cfg->n_kv_heads,
                           st))
        goto done;
    if (config_read_int_in(root, path, "intermediate_size", 1, 0, 1, CONFIG_MAX_INTERMEDIATE, &cfg->intermediate,
                           st))
        goto done;
    if (config_read_int_in(root, path, "vocab_size", 1, 0, 1, CONFIG_MAX_VOCAB, &cfg->vocab, st)) goto done;
    if (config_read_int_in(root, path, "max_position_embeddings", 0, fam->max_pos_default, 1, CONFIG_MAX_POS,
                           &cfg->max_pos, st))
        goto done;
    if (cfg->n_heads % cfg->n_kv_heads) {
        status_fail(st, "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                    path, cfg->n_heads, cfg->n_kv_heads);
        goto done;
    }
    // head_dim: explicit key if present, else the family's class default, else
    // hidden_size / num_attention_heads.
    int dflt_hd = fam->head_dim_default ? fam->head_dim_default : cfg->hidden / cfg->n_heads;
    if (config_read_int(root, path, "head_dim", 0, dflt_hd, &cfg->head_dim, st)) goto done;
    if (cfg->head_dim < 2 || cfg->head_dim > CONFIG_MAX_HEAD_DIM || cfg->head_dim % 2) {
        status_fail(st, "%s: \"head_dim\" must be even and in [2, %d] (got %d)", path, CONFIG_MAX_HEAD_DIM,
                    cfg->head_dim);
        goto done;
    }
    if (config_read_float(root, path, "rms_norm_eps", fam->rms_eps_default, &cfg->rms_eps, st)) goto done;
    // eps <= 0 divides zero rows by zero (NaN logits); real values are 1e-5 or 1e-6.
    if (config_check_range(path, "rms_norm_eps", cfg->rms_eps, 0, 1, 1.0, st)) goto done;
    if (config_read_bool(root, path, "tie_word_embeddings", fam->tie_default, &cfg->tie_embeddings, st)) goto done;

    // What the family does not set is a plain dense decoder.
    cfg->act = ACT_SILU;
    cfg->embed_scale = 1.0f;
    cfg->attn_scale = 1.0 / sqrt((double)cfg->head_dim);
    if (fam->parse(cfg, root, path, st)) goto done;
    SPINDLE_CHECK(cfg->layer_kinds);
    int n_sliding = 0;
    for (int l = 0; l < cfg->n_layers; l++) n_sliding += cfg->layer_kinds[l] == LAYER_SLIDING_ATTENTION;
    if (!n_sliding) {
        cfg->sliding_window = 0;
        cfg->rope_local = cfg->rope;
    }
    rc = 0;
done:
    cJSON_Delete(doc);
    if (rc) config_free(cfg);
    return rc;
}

void config_free(ModelConfig *cfg) {
    free(cfg->layer_kinds);
    free(cfg->layer_moe);
    cfg->layer_kinds = NULL;
    cfg->layer_moe = NULL;
}
