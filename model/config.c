// config.c: config.json → ModelConfig, in both key styles seen in the wild.
//
// transformers 4.x wrote RoPE as top-level `rope_theta` plus an optional
// `rope_scaling` object; transformers 5 writes one `rope_parameters` object
// holding `rope_type`, `rope_theta` and the scaling keys. Either is accepted.
#include "config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fileio.h"
#include "rope.h"

const char *config_family_name(Family f) {
    switch (f) {
    case FAMILY_LLAMA: return "llama";
    case FAMILY_QWEN2: return "qwen2";
    case FAMILY_QWEN3: return "qwen3";
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

// A number-valued key: returns 1 and sets *out if present and numeric,
// 0 if absent or null, -1 if present with another type.
static int get_num(const cJSON *obj, const char *key, double *out) {
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

// Reads an integer key that must be present (required) or defaults to dflt.
static int read_int(const cJSON *root, const char *path, const char *key, int required, int dflt,
                    int *out, Status *st) {
    double v;
    int r = get_num(root, key, &v);
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

// Reads an integer key and checks it against [lo, hi], naming the key and the file.
static int read_int_in(const cJSON *root, const char *path, const char *key, int required, int dflt,
                       int lo, int hi, int *out, Status *st) {
    if (read_int(root, path, key, required, dflt, out, st)) return -1;
    if (*out < lo || *out > hi)
        return status_fail(st, "%s: \"%s\" must be in [%d, %d] (got %d)", path, key, lo, hi, *out);
    return 0;
}

// Checks that a real-valued key lies in (lo, hi] (lo_open) or [lo, hi].
static int check_range(const char *path, const char *key, double v, double lo, int lo_open, double hi,
                       Status *st) {
    if (isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi) return 0;
    return status_fail(st, "%s: \"%s\" must be in %c%g, %g] (got %g)", path, key, lo_open ? '(' : '[', lo, hi, v);
}

static int read_float(const cJSON *obj, const char *path, const char *key, double dflt,
                      double *out, Status *st) {
    double v;
    int r = get_num(obj, key, &v);
    if (r < 0) return status_fail(st, "%s: \"%s\" must be a number", path, key);
    *out = r ? v : dflt;
    return 0;
}

static int read_bool(const cJSON *obj, const char *path, const char *key, int dflt, int *out,
                     Status *st) {
    int r = get_bool(obj, key, out);
    if (r < 0) return status_fail(st, "%s: \"%s\" must be true or false", path, key);
    if (r == 0) *out = dflt;
    return 0;
}

// RoPE: `rope` is the rope_parameters / rope_scaling object (may be NULL);
// theta comes from it or from the top level.
static int parse_rope(RopeConfig *r, const cJSON *root, const cJSON *rope, const char *path,
                      Status *st) {
    memset(r, 0, sizeof *r);
    r->type = ROPE_DEFAULT;
    r->attention_factor = -1;
    r->partial_rotary_factor = 1.0;
    if (read_float(root, path, "rope_theta", 10000.0, &r->theta, st)) return -1;
    if (read_float(root, path, "partial_rotary_factor", 1.0, &r->partial_rotary_factor, st))
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

    if (read_float(rope, path, "rope_theta", r->theta, &r->theta, st)) return -1;
    if (read_float(rope, path, "partial_rotary_factor", r->partial_rotary_factor,
                   &r->partial_rotary_factor, st))
        return -1;
    if (read_float(rope, path, "factor", 0, &r->factor, st)) return -1;
    if (read_float(rope, path, "original_max_position_embeddings", 0, &r->original_max_pos, st))
        return -1;
    if (r->type == ROPE_LLAMA3) {
        if (read_float(rope, path, "low_freq_factor", 1.0, &r->low_freq_factor, st)) return -1;
        if (read_float(rope, path, "high_freq_factor", 4.0, &r->high_freq_factor, st)) return -1;
        if (r->high_freq_factor <= r->low_freq_factor)
            return status_fail(st, "%s: llama3 RoPE needs high_freq_factor > low_freq_factor", path);
    }
    if (r->type == ROPE_YARN) {
        if (read_float(rope, path, "beta_fast", 32.0, &r->beta_fast, st)) return -1;
        if (read_float(rope, path, "beta_slow", 1.0, &r->beta_slow, st)) return -1;
        if (read_float(rope, path, "attention_factor", -1, &r->attention_factor, st)) return -1;
        if (read_float(rope, path, "mscale", 0, &r->mscale, st)) return -1;
        if (read_float(rope, path, "mscale_all_dim", 0, &r->mscale_all_dim, st)) return -1;
        if (read_bool(rope, path, "truncate", 1, &r->truncate, st)) return -1;
    }
    if ((r->type == ROPE_LINEAR || r->type == ROPE_LLAMA3) && !(r->factor > 0))
        return status_fail(st, "%s: %s RoPE needs a positive \"factor\"", path, name);
    if (r->type == ROPE_YARN && r->factor < 0)
        return status_fail(st, "%s: yarn RoPE \"factor\" must be positive", path);
    if (r->factor != 0 && check_range(path, "factor", r->factor, 0, 1, 1e6, st)) return -1;
    if (r->original_max_pos != 0 &&
        check_range(path, "original_max_position_embeddings", r->original_max_pos, 0, 1, CONFIG_MAX_POS, st))
        return -1;
    if (r->type == ROPE_LLAMA3 && check_range(path, "low_freq_factor", r->low_freq_factor, 0, 1, 1e6, st))
        return -1;
    if (r->type == ROPE_LLAMA3 && check_range(path, "high_freq_factor", r->high_freq_factor, 0, 1, 1e6, st))
        return -1;
    if (r->type == ROPE_YARN) {
        if (check_range(path, "beta_fast", r->beta_fast, 0, 1, 1e6, st) ||
            check_range(path, "beta_slow", r->beta_slow, 0, 1, 1e6, st))
            return -1;
        if (r->attention_factor != -1 && check_range(path, "attention_factor", r->attention_factor, 0, 1, 1e3, st))
            return -1;
        if (check_range(path, "mscale", r->mscale, -1e3, 0, 1e3, st) ||
            check_range(path, "mscale_all_dim", r->mscale_all_dim, -1e3, 0, 1e3, st))
            return -1;
    }
    // theta <= 1 makes the frequencies grow with the dim (or, for yarn, divides by
    // log(theta) = 0); a tiny theta overflows them to inf and every logit is NaN.
    if (check_range(path, "rope_theta", r->theta, 1, 1, 1e15, st)) return -1;
    if (!(r->partial_rotary_factor > 0 && r->partial_rotary_factor <= 1))
        return status_fail(st, "%s: partial_rotary_factor must be in (0, 1]", path);
    return 0;
}

int config_load(ModelConfig *cfg, const char *dir, Status *st) {
    memset(cfg, 0, sizeof *cfg);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len = 0;
    char *text = NULL;
    if (file_read_all(path, &text, &len, st)) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return status_fail(st, "%s: not valid JSON (broken or truncated file)", path);
    }
    int rc = -1;

    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (!cJSON_IsString(mt)) {
        status_fail(st, "%s: missing \"model_type\"", path);
        goto done;
    }
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt->valuestring);
    if (!strcmp(mt->valuestring, "llama")) cfg->family = FAMILY_LLAMA;
    else if (!strcmp(mt->valuestring, "qwen2")) cfg->family = FAMILY_QWEN2;
    else if (!strcmp(mt->valuestring, "qwen3")) cfg->family = FAMILY_QWEN3;
    else {
        status_fail(st, "%s: unsupported model_type \"%s\" (supported: llama, qwen2, qwen3)", path,
                    mt->valuestring);
        goto done;
    }

    // Ranges: far beyond any released checkpoint, small enough that products of
    // sizes fit the types they are computed in.
    if (read_int_in(root, path, "hidden_size", 1, 0, 1, CONFIG_MAX_HIDDEN, &cfg->hidden, st)) goto done;
    if (read_int_in(root, path, "num_hidden_layers", 1, 0, 1, CONFIG_MAX_LAYERS, &cfg->n_layers, st)) goto done;
    if (read_int_in(root, path, "num_attention_heads", 1, 0, 1, CONFIG_MAX_HEADS, &cfg->n_heads, st)) goto done;
    // num_key_value_heads: null means MHA; absent means the class default
    // (MHA for llama, 32 for qwen2/qwen3), as transformers reads it.
    const cJSON *kvh = cJSON_GetObjectItemCaseSensitive(root, "num_key_value_heads");
    int dflt_kv = (!kvh && cfg->family != FAMILY_LLAMA) ? 32 : cfg->n_heads;
    if (read_int_in(root, path, "num_key_value_heads", 0, dflt_kv, 1, CONFIG_MAX_HEADS, &cfg->n_kv_heads, st))
        goto done;
    if (read_int_in(root, path, "intermediate_size", 1, 0, 1, CONFIG_MAX_INTERMEDIATE, &cfg->intermediate, st))
        goto done;
    if (read_int_in(root, path, "vocab_size", 1, 0, 1, CONFIG_MAX_VOCAB, &cfg->vocab, st)) goto done;
    if (read_int_in(root, path, "max_position_embeddings", 0, 2048, 1, CONFIG_MAX_POS, &cfg->max_pos, st))
        goto done;
    if (cfg->n_heads % cfg->n_kv_heads) {
        status_fail(st, "%s: num_attention_heads (%d) is not a multiple of num_key_value_heads (%d)",
                    path, cfg->n_heads, cfg->n_kv_heads);
        goto done;
    }
    // head_dim: explicit key if present; Qwen3's class default is 128, the
    // others derive it from hidden_size / num_attention_heads.
    int dflt_hd = cfg->family == FAMILY_QWEN3 ? 128 : cfg->hidden / cfg->n_heads;
    if (read_int(root, path, "head_dim", 0, dflt_hd, &cfg->head_dim, st)) goto done;
    if (cfg->head_dim < 2 || cfg->head_dim > CONFIG_MAX_HEAD_DIM || cfg->head_dim % 2) {
        status_fail(st, "%s: \"head_dim\" must be even and in [2, %d] (got %d)", path, CONFIG_MAX_HEAD_DIM,
                    cfg->head_dim);
        goto done;
    }
    if (read_float(root, path, "rms_norm_eps", 1e-6, &cfg->rms_eps, st)) goto done;
    // eps <= 0 divides zero rows by zero (NaN logits); real values are 1e-5 or 1e-6.
    if (check_range(path, "rms_norm_eps", cfg->rms_eps, 0, 1, 1.0, st)) goto done;
    if (read_bool(root, path, "tie_word_embeddings", 0, &cfg->tie_embeddings, st)) goto done;

    switch (cfg->family) {
    case FAMILY_LLAMA:
        if (read_bool(root, path, "attention_bias", 0, &cfg->attention_bias, st)) goto done;
        if (read_bool(root, path, "mlp_bias", 0, &cfg->mlp_bias, st)) goto done;
        cfg->o_bias = cfg->attention_bias;
        break;
    case FAMILY_QWEN2:
        cfg->attention_bias = 1;  // q/k/v always carry a bias in Qwen2; o_proj never does
        cfg->o_bias = 0;
        break;
    case FAMILY_QWEN3:
        if (read_bool(root, path, "attention_bias", 0, &cfg->attention_bias, st)) goto done;
        cfg->o_bias = cfg->attention_bias;
        cfg->qk_norm = 1;
        break;
    }

    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (cJSON_IsString(act) && strcmp(act->valuestring, "silu")) {
        status_fail(st, "%s: unsupported hidden_act \"%s\" (only silu)", path, act->valuestring);
        goto done;
    }
    int sliding = 0;
    if (read_bool(root, path, "use_sliding_window", 0, &sliding, st)) goto done;
    if (sliding) {
        status_fail(st, "%s: use_sliding_window is true; sliding-window layers are not supported yet", path);
        goto done;
    }
    // layer_types is not consulted: llama ignores it, and qwen2/qwen3 only use
    // sliding windows when use_sliding_window is true (refused above).
    cfg->layer_kinds = xcalloc((size_t)cfg->n_layers, sizeof *cfg->layer_kinds);
    for (int i = 0; i < cfg->n_layers; i++) cfg->layer_kinds[i] = LAYER_FULL_ATTENTION;

    // RoPE, resolved as transformers does: a non-null legacy rope_scaling wins,
    // else transformers-5 rope_parameters (per-layer-kind form: its full_attention entry).
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (!rp || cJSON_IsNull(rp) || (cJSON_IsObject(rp) && !rp->child)) {
        rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
        if (rp && cJSON_IsObject(rp) && cJSON_GetObjectItemCaseSensitive(rp, "full_attention"))
            rp = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    }
    if (parse_rope(&cfg->rope, root, rp, path, st)) goto done;
    RopeConfig *r = &cfg->rope;
    if (r->type == ROPE_LLAMA3 || r->type == ROPE_YARN) {
        // A top-level original_max_position_embeddings overrides the dict's;
        // yarn falls back to max_position_embeddings.
        double omp = 0;
        if (read_float(root, path, "original_max_position_embeddings", 0, &omp, st)) goto done;
        if (omp > 0) r->original_max_pos = omp;
        if (r->original_max_pos <= 0 && r->type == ROPE_YARN) r->original_max_pos = cfg->max_pos;
        if (r->original_max_pos <= 0) {
            status_fail(st, "%s: llama3 RoPE needs original_max_position_embeddings", path);
            goto done;
        }
        if (check_range(path, "original_max_position_embeddings", r->original_max_pos, 0, 1, CONFIG_MAX_POS, st))
            goto done;
        if (r->type == ROPE_YARN && r->factor <= 0) r->factor = cfg->max_pos / r->original_max_pos;
    }
    // Llama/Qwen rotate the whole head: default RoPE ignores partial_rotary_factor
    // and the scaled types cannot apply it (transformers raises a shape error).
    if (r->type == ROPE_DEFAULT) r->partial_rotary_factor = 1.0;
    else if (r->partial_rotary_factor != 1.0) {
        status_fail(st, "%s: partial_rotary_factor %g is not supported for %s RoPE in %s models", path,
                    r->partial_rotary_factor, config_rope_name(r->type), cfg->model_type);
        goto done;
    }

    // The frequencies themselves, at the longest context: every combination of
    // the checked parameters must still give finite angles and a finite, positive
    // cos/sin scale, or every logit would be NaN.
    {
        int half = rope_rot_dims(cfg) / 2;
        if (half < 1) {
            status_fail(st, "%s: RoPE rotates no dims (head_dim %d, partial_rotary_factor %g)", path,
                        cfg->head_dim, r->partial_rotary_factor);
            goto done;
        }
        float *inv = xmalloc(sizeof *inv * (size_t)half), af = 0;
        rope_inv_freq(cfg, inv, &af);
        int bad = -1;
        for (int i = 0; i < half && bad < 0; i++)
            if (!isfinite(inv[i]) || !isfinite(inv[i] * (float)cfg->max_pos) || inv[i] < 0) bad = i;
        double bad_v = bad >= 0 ? inv[bad] : 0;
        free(inv);
        if (bad >= 0 || !(isfinite(af) && af > 0)) {
            status_fail(st, "%s: the RoPE parameters (%s, rope_theta %g, factor %g) give %s (%g); "
                            "no model can run with them", path, config_rope_name(r->type), r->theta, r->factor,
                        bad >= 0 ? "a non-finite frequency" : "a non-positive cos/sin scale",
                        bad >= 0 ? bad_v : (double)af);
            goto done;
        }
    }

    cfg->attn_scale = 1.0 / sqrt((double)cfg->head_dim);
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc) config_free(cfg);
    return rc;
}

void config_free(ModelConfig *cfg) {
    free(cfg->layer_kinds);
    cfg->layer_kinds = NULL;
}
