// export.c: see export.h.
#include "export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "fileio.h"
#include "run_state.h"
#include "safetensors.h"

static const char *norm_name(IndexerNorm n) { return n == INDEXER_NORM_RMS ? "rms" : n == INDEXER_NORM_LAYER ? "layer" : "none"; }

// A whole number in [lo, hi] from a JSON item (-1 when absent, fractional,
// out of range or not a number).
static int json_int(const cJSON *it, double lo, double hi, int *out) {
    if (!cJSON_IsNumber(it)) return -1;
    const double v = it->valuedouble;
    if (!(v >= lo && v <= hi) || v != (double)(int64_t)v) return -1;
    *out = (int)v;
    return 0;
}

// The indexer configuration in a run's or an export's config.json object:
// every field present, of its type, and within indexer_config_check's bounds.
static int parse_indexer_cfg(const cJSON *o, IndexerConfig *c, const char *path, Status *st) {
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(o)) return status_fail(st, "%s: indexer configuration missing", path);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "variant");
    const cJSON *kn = cJSON_GetObjectItemCaseSensitive(o, "key_norm");
    if (!cJSON_IsString(v) || (strcmp(v->valuestring, "collapsed") && strcmp(v->valuestring, "expanded")))
        return status_fail(st, "%s: \"variant\" must be \"collapsed\" or \"expanded\"", path);
    if (!cJSON_IsString(kn) ||
        (strcmp(kn->valuestring, "none") && strcmp(kn->valuestring, "rms") && strcmp(kn->valuestring, "layer")))
        return status_fail(st, "%s: \"key_norm\" must be \"none\", \"rms\" or \"layer\"", path);
    c->variant = !strcmp(v->valuestring, "expanded") ? INDEXER_EXPANDED : INDEXER_COLLAPSED;
    c->key_norm = !strcmp(kn->valuestring, "rms") ? INDEXER_NORM_RMS
                  : !strcmp(kn->valuestring, "layer") ? INDEXER_NORM_LAYER : INDEXER_NORM_NONE;
    struct { const char *key; int *dst; int hi; } ints[] = {
        {"d_model", &c->d_model, INDEXER_MAX_D_MODEL}, {"d_index", &c->d_index, INDEXER_MAX_D_INDEX},
        {"d_rope", &c->d_rope, INDEXER_MAX_D_ROPE},    {"n_heads", &c->n_heads, INDEXER_MAX_HEADS},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (json_int(cJSON_GetObjectItemCaseSensitive(o, ints[i].key), 0, ints[i].hi, ints[i].dst))
            return status_fail(st, "%s: \"%s\" must be an integer in [0, %d]", path, ints[i].key, ints[i].hi);
    const char *fkeys[2] = {"norm_eps", "rope_theta"};
    float *fdst[2] = {&c->norm_eps, &c->rope_theta};
    for (int i = 0; i < 2; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, fkeys[i]);
        if (!cJSON_IsNumber(it) || !(fabs(it->valuedouble) <= 1e30))
            return status_fail(st, "%s: \"%s\" must be a number", path, fkeys[i]);
        *fdst[i] = (float)it->valuedouble;
    }
    if (indexer_config_check(c, st)) {
        const Status inner = *st;
        return status_fail(st, "%s: %s", path, inner.msg);
    }
    return 0;
}

static cJSON *read_json(const char *path, Status *st) {
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, st)) return NULL;
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    if (!o) status_fail(st, "%s: not valid JSON", path);
    return o;
}

// Tensor name of parameter tensor `t` of layer l.
static void tensor_name(char *buf, size_t n, int layer, const char *t) {
    if (!strcmp(t, "k_norm_bias")) snprintf(buf, n, "model.layers.%d.self_attn.indexer.k_norm.bias", layer);
    else snprintf(buf, n, "model.layers.%d.self_attn.indexer.%s.weight", layer, t);
}

int export_layout_parse(const char *name) {
    return !strcmp(name, "spindle") ? EXPORT_LAYOUT_SPINDLE
           : !strcmp(name, "dsa")   ? EXPORT_LAYOUT_DSA
           : !strcmp(name, "qsa")   ? EXPORT_LAYOUT_QSA
                                    : -1;
}

static const char *layout_name(ExportLayout l) {
    return l == EXPORT_LAYOUT_DSA ? "dsa" : l == EXPORT_LAYOUT_QSA ? "qsa" : "spindle";
}

// 0 if layout can hold the indexer of c exactly, else -1 naming what it cannot.
static int layout_check(ExportLayout layout, const IndexerConfig *c, const char *path, Status *st) {
    if (layout == EXPORT_LAYOUT_DSA) {
        if (c->variant != INDEXER_EXPANDED)
            return status_fail(st, "%s: --layout dsa cannot express a head-collapsed indexer: DeepSeek-V3.2's indexer "
                                   "scores sum_h w[t,h]*ReLU(q[t,h].k[j]), which has no exact form of a signed dot "
                                   "product (train with --variant expanded, or export --layout spindle or qsa)", path);
        if (c->key_norm != INDEXER_NORM_LAYER)
            return status_fail(st, "%s: --layout dsa cannot express key_norm %s: DeepSeek-V3.2's k_norm is a LayerNorm "
                                   "(train with --key-norm layer)", path, norm_name(c->key_norm));
        if (fabsf(c->norm_eps - 1e-6f) > 1e-12f)
            return status_fail(st, "%s: --layout dsa cannot express norm_eps %g: DeepSeek-V3.2's k_norm has eps 1e-6",
                               path, (double)c->norm_eps);
    } else if (layout == EXPORT_LAYOUT_QSA) {
        if (c->variant != INDEXER_COLLAPSED)
            return status_fail(st, "%s: --layout qsa cannot express a head-expanded indexer: Qwen4-Exp's QSA indexer "
                                   "sums ReLU(q[t,h].k[j]) over heads with no per-query head weights w = ww x "
                                   "(export --layout spindle or dsa)", path);
        if (c->key_norm != INDEXER_NORM_RMS)
            return status_fail(st, "%s: --layout qsa cannot express key_norm %s: Qwen4-Exp's k_layernorm is an "
                                   "RMSNorm (train with --key-norm rms)", path, norm_name(c->key_norm));
    }
    return 0;
}

// One tensor of a dsa or qsa export: name suffix, shape, offset in the layer's
// converted buffer (indexer_n_params + 2·d_I floats).
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[2];
    int64_t offset;
} OutTensor;

// The tensors of layout (DSA or QSA) for one layer's parameters p, converted
// into buf: DSA scales ww by sqrt(H·d_I), which DeepSeek-V3.2's indexer divides
// out (weights · H^-1/2, scores · d_I^-1/2), so its score is spindle's; QSA
// fuses wq and wk (adjacent in the layout) into index_qk_proj and stores
// RMSNorm gains as w with gain 1 + w (q_layernorm: w = 0, no query norm).
static int layout_tensors(OutTensor *o, float *buf, const float *p, const IndexerConfig *c, ExportLayout layout) {
    const IndexerLayout L = indexer_layout(c);
    const int64_t d = c->d_index, dm = c->d_model, H = c->n_heads;
    memcpy(buf, p, sizeof(float) * (size_t)L.n);
    if (layout == EXPORT_LAYOUT_DSA) {
        const double scale = sqrt((double)H * (double)d);
        for (int64_t i = 0; i < H * dm; i++) buf[L.ww + i] = (float)((double)p[L.ww + i] * scale);
        o[0] = (OutTensor){"wq_b.weight", 2, {H * d, dm}, L.wq};
        o[1] = (OutTensor){"wk.weight", 2, {d, dm}, L.wk};
        o[2] = (OutTensor){"k_norm.weight", 1, {d, 0}, L.k_norm};
        o[3] = (OutTensor){"k_norm.bias", 1, {d, 0}, L.k_norm_bias};
        o[4] = (OutTensor){"weights_proj.weight", 2, {H, dm}, L.ww};
        return 5;
    }
    for (int64_t i = 0; i < d; i++) buf[L.n + i] = 0.f, buf[L.n + d + i] = p[L.k_norm + i] - 1.f;
    o[0] = (OutTensor){"index_qk_proj.weight", 2, {2 * d, dm}, L.wq};  // L.wk == L.wq + d·dm
    o[1] = (OutTensor){"q_layernorm.weight", 1, {d, 0}, L.n};
    o[2] = (OutTensor){"k_layernorm.weight", 1, {d, 0}, L.n + d};
    return 3;
}

// The indexer's own fields (spindle's config.json keys, in its order).
static void add_spindle_fields(cJSON *o, const IndexerConfig *c, int default_k, int default_bsel, const RunState *rs,
                               const cJSON *run) {
    cJSON_AddStringToObject(o, "variant", c->variant == INDEXER_EXPANDED ? "expanded" : "collapsed");
    cJSON_AddNumberToObject(o, "d_model", c->d_model);
    cJSON_AddNumberToObject(o, "d_index", c->d_index);
    cJSON_AddNumberToObject(o, "d_rope", c->d_rope);
    cJSON_AddNumberToObject(o, "n_heads", c->n_heads);
    cJSON_AddStringToObject(o, "key_norm", norm_name(c->key_norm));
    cJSON_AddNumberToObject(o, "norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c->rope_theta);
    cJSON_AddStringToObject(o, "rope", "rotate-half on the first d_rope dims, inv_freq[i] = rope_theta^(-2i/d_rope)");
    cJSON_AddStringToObject(o, "score", c->variant == INDEXER_EXPANDED ? "sum_h w[t,h] * relu(q[t,h] . k[j]), w = ww x"
                                                                        : "q[t] . k[j] / sqrt(d_index)");
    cJSON_AddNumberToObject(o, "default_k", default_k);
    cJSON_AddNumberToObject(o, "default_bsel", default_bsel);
    cJSON_AddNumberToObject(o, "steps", (double)rs->step);
    cJSON_AddNumberToObject(o, "tokens", (double)rs->tokens);
    // What the indexer was trained to match (runs from before it was recorded: per query).
    const cJSON *objective = cJSON_GetObjectItemCaseSensitive(run, "objective");
    if (cJSON_IsObject(objective)) cJSON_AddItemToObject(o, "objective", cJSON_Duplicate(objective, 1));
    else {
        cJSON *q = cJSON_AddObjectToObject(o, "objective");
        cJSON_AddStringToObject(q, "kind", "query");
        cJSON_AddNumberToObject(q, "bsel", 64);
        cJSON_AddNumberToObject(q, "block_weight", 1);
    }
}

// The keys a dsa or qsa loader reads, the tensor list, and the conventions.
static void add_layout_fields(cJSON *o, const IndexerConfig *c, int default_k, ExportLayout layout,
                              const OutTensor *ot, int nt) {
    cJSON_AddNumberToObject(o, "hidden_size", c->d_model);
    if (layout == EXPORT_LAYOUT_DSA) {
        cJSON_AddNumberToObject(o, "index_n_heads", c->n_heads);
        cJSON_AddNumberToObject(o, "index_head_dim", c->d_index);
        cJSON_AddNumberToObject(o, "index_topk", default_k);
        cJSON_AddNumberToObject(o, "qk_rope_head_dim", c->d_rope);
        cJSON_AddNumberToObject(o, "q_lora_rank", c->d_model);
    } else {
        cJSON_AddNumberToObject(o, "indexer_n_heads", c->n_heads);
        cJSON_AddNumberToObject(o, "indexer_kv_heads", 1);
        cJSON_AddNumberToObject(o, "indexer_head_dim", c->d_index);
        cJSON_AddNumberToObject(o, "indexer_budget", default_k);
        cJSON_AddNumberToObject(o, "indexer_compress_ratio", 1);
        cJSON_AddNumberToObject(o, "rms_norm_eps", c->norm_eps);
        cJSON_AddNumberToObject(o, "indexer_rotary_dim", c->d_rope);
    }
    cJSON *rp = cJSON_AddObjectToObject(o, "rope_parameters");
    cJSON_AddStringToObject(rp, "rope_type", "default");
    cJSON_AddNumberToObject(rp, "rope_theta", c->rope_theta);
    cJSON_AddBoolToObject(o, "rope_interleave", 0);
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    cJSON_AddStringToObject(o, "tensor_prefix", "model.layers.{l}.self_attn.indexer.");
    cJSON *ts = cJSON_AddObjectToObject(o, "tensors");
    for (int j = 0; j < nt; j++) {
        cJSON *shape = cJSON_CreateArray();
        for (int d = 0; d < ot[j].ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ot[j].shape[d]));
        cJSON_AddItemToObject(ts, ot[j].name, shape);
    }
    cJSON *cv = cJSON_AddObjectToObject(o, "conventions");
    cJSON_AddStringToObject(cv, "input", "every projection reads x, the layer's normed attention input (the tensor "
                                         "its q/k projections read)");
    cJSON_AddStringToObject(cv, "rope", "rotate-half (not interleaved) on the first d_rope dims of every query head "
                                        "and of the key, after the key norm; inv_freq[i] = rope_theta^(-2i/d_rope), "
                                        "positions 0, 1, ... of the sequence");
    if (layout == EXPORT_LAYOUT_DSA) {
        cJSON_AddStringToObject(cv, "wq_b", "reads x (q_lora_rank = hidden_size), not an MLA q_resid");
        cJSON_AddStringToObject(cv, "score", "sum_h (weights_proj x)[h] * index_n_heads^-0.5 * relu(q[h] . k * "
                                             "index_head_dim^-0.5): weights_proj = spindle's ww * sqrt(index_n_heads "
                                             "* index_head_dim), so this equals spindle's score exactly");
        cJSON_AddStringToObject(cv, "k_norm", "LayerNorm(eps 1e-6, biased variance) with weight and bias");
    } else {
        cJSON_AddStringToObject(cv, "index_qk_proj", "rows [0, d) the query head, rows [d, 2d) the key (d = "
                                                     "indexer_head_dim)");
        cJSON_AddStringToObject(cv, "k_layernorm", "RMSNorm with gain 1 + weight (eps rms_norm_eps) on the key, "
                                                   "before RoPE");
        cJSON_AddStringToObject(cv, "q_layernorm", "weight 0 (gain 1): spindle's query has no norm; an RMSNorm of "
                                                   "the query scales each query's scores by one positive factor");
        cJSON_AddStringToObject(cv, "score", "spindle: q . k / sqrt(indexer_head_dim), signed, no query norm; "
                                             "Qwen4-Exp's own indexer scores relu(q_layernorm(q) . k) / "
                                             "sqrt(indexer_head_dim): the same order of each query's keys with "
                                             "positive score, keys with score <= 0 tie at 0");
        cJSON_AddStringToObject(cv, "rotary", "the indexer's own RoPE (indexer_rotary_dim, rope_parameters); "
                                              "Qwen4-Exp applies its backbone's, so a client must apply this one");
    }
}

int export_indexer(const char *run_dir, const char *out_dir, int64_t at_step, int default_k, int default_bsel,
                   Status *st) {
    return export_indexer_as(run_dir, out_dir, at_step, default_k, default_bsel, EXPORT_LAYOUT_SPINDLE, st);
}

int export_indexer_as(const char *run_dir, const char *out_dir, int64_t at_step, int default_k, int default_bsel,
                      ExportLayout layout, Status *st) {
    char path[4300], tmp[4200];
    snprintf(path, sizeof path, "%s/config.json", run_dir);
    if (access(out_dir, F_OK) == 0) return status_fail(st, "%s: already exists; choose another --out", out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", out_dir);
    cJSON *run = read_json(path, st);
    if (!run) return -1;
    int rc = -1, made_tmp = 0;
    RunState rs = {0};
    StWriteTensor *ts = NULL;
    char (*names)[128] = NULL;
    float **conv = NULL;
    IndexerConfig c;
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(run, "layers");
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(run, "model_fingerprint");
    if (!cJSON_IsArray(layers) || !cJSON_IsString(fp) ||
        parse_indexer_cfg(cJSON_GetObjectItemCaseSensitive(run, "indexer"), &c, path, st)) {
        if (!st->msg[0] || cJSON_IsArray(layers)) status_fail(st, "%s: not a spindle run config", path);
        goto done;
    }
    const int L = cJSON_GetArraySize(layers);
    if (L < 1 || L > CONFIG_MAX_LAYERS) {
        status_fail(st, "%s: \"layers\" must list 1 to %d trained layers", path, CONFIG_MAX_LAYERS);
        goto done;
    }
    // Layer indices as an exported indexer may hold them (indexer_set_load
    // reads them back against a model of at most CONFIG_MAX_LAYERS layers).
    static char seen[CONFIG_MAX_LAYERS];
    memset(seen, 0, sizeof seen);
    const cJSON *e;
    cJSON_ArrayForEach(e, layers) {
        int l;
        if (json_int(e, 0, CONFIG_MAX_LAYERS - 1, &l) || seen[l]) {
            status_fail(st, "%s: \"layers\" must hold distinct layer indices in [0, %d)", path, CONFIG_MAX_LAYERS);
            goto done;
        }
        seen[l] = 1;
    }
    {  // An export never holds a layer that is not full attention (checked against the
       // run's model while its config.json is there; the trainer checked it too).
        const cJSON *mdir = cJSON_GetObjectItemCaseSensitive(run, "model");
        ModelConfig mc;
        Status ignored;
        if (cJSON_IsString(mdir) && config_load(&mc, mdir->valuestring, &ignored) == 0) {
            int bad = -1;
            cJSON_ArrayForEach(e, layers) if (bad < 0 && (e->valueint >= mc.n_layers ||
                                                         mc.layer_kinds[e->valueint] != LAYER_FULL_ATTENTION)) bad = e->valueint;
            config_free(&mc);
            if (bad >= 0) {
                status_fail(st, "%s: \"layers\": %d is not a full-attention layer of %s; indexers cover "
                                "full-attention layers only", path, bad, mdir->valuestring);
                goto done;
            }
        }
    }
    if (layout_check(layout, &c, path, st)) goto done;
    rs.n_layers = L, rs.n_params = indexer_n_params(&c);
    if (run_state_sizes_fit(run_dir, at_step, L, rs.n_params, st)) {
        if (at_step < 0 && run_state_latest(run_dir, &(int64_t){0}, st))
            status_fail(st, "%s: no checkpoint to export (train first)", run_dir);
        goto done;
    }
    rs.params = xcalloc((size_t)L, sizeof(float *)), rs.m = xcalloc((size_t)L, sizeof(float *));
    rs.v = xcalloc((size_t)L, sizeof(float *));
    for (int i = 0; i < L; i++) {
        rs.params[i] = xmalloc(sizeof(float) * (size_t)rs.n_params);
        rs.m[i] = xmalloc(sizeof(float) * (size_t)rs.n_params);
        rs.v[i] = xmalloc(sizeof(float) * (size_t)rs.n_params);
    }
    int64_t step = at_step;
    if (at_step >= 0) {
        if (run_state_load(run_dir, step, &rs, st)) goto done;
    } else {
        const int lrc = run_state_load_newest(run_dir, "export", -1, 0, &rs, &step, st);
        if (lrc == 1) status_fail(st, "%s: no checkpoint to export (train first)", run_dir);
        if (lrc) goto done;
    }
    fprintf(stderr, "spindle export: %s: step %lld\n", run_dir, (long long)step);

    IndexerTensor it[INDEXER_MAX_TENSORS];
    OutTensor ot[INDEXER_MAX_TENSORS];
    int nt = indexer_param_tensors(it, &c);
    if (layout != EXPORT_LAYOUT_SPINDLE) {
        conv = xcalloc((size_t)L, sizeof(float *));
        for (int i = 0; i < L; i++) {
            conv[i] = xmalloc(sizeof(float) * (size_t)(rs.n_params + 2 * (int64_t)c.d_index));
            nt = layout_tensors(ot, conv[i], rs.params[i], &c, layout);
        }
    }
    ts = xcalloc((size_t)L * nt, sizeof *ts);
    names = xcalloc((size_t)L * nt, sizeof *names);
    for (int i = 0; i < L; i++)
        for (int j = 0; j < nt; j++) {
            StWriteTensor *w = &ts[i * nt + j];
            const int l = cJSON_GetArrayItem(layers, i)->valueint;
            w->name = names[i * nt + j];
            if (layout == EXPORT_LAYOUT_SPINDLE) {
                tensor_name(names[i * nt + j], sizeof names[0], l, it[j].name);
                w->ndim = it[j].ndim;
                w->shape[0] = it[j].shape[0], w->shape[1] = it[j].shape[1];
                w->data = rs.params[i] + it[j].offset;
            } else {
                snprintf(names[i * nt + j], sizeof names[0], "model.layers.%d.self_attn.indexer.%s", l, ot[j].name);
                w->ndim = ot[j].ndim;
                w->shape[0] = ot[j].shape[0], w->shape[1] = ot[j].shape[1];
                w->data = conv[i] + ot[j].offset;
            }
        }
    struct stat sb;
    if (lstat(tmp, &sb) == 0) {  // a leftover of an interrupted export
        if (remove_tree(tmp, st)) goto done;
        fprintf(stderr, "spindle export: removed %s, left by an interrupted export\n", tmp);
    }
    if (mkdir(tmp, 0755) != 0) {
        status_fail(st, "%s: cannot create (%s)", tmp, strerror(errno));
        goto done;
    }
    made_tmp = 1;
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    if (st_write(path, ts, L * nt, "{\"format\": \"pt\"}", st)) goto done;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "spindle-indexer");
    cJSON_AddNumberToObject(o, "format_version", 1);
    cJSON_AddStringToObject(o, "base_fingerprint", fp->valuestring);
    if (layout == EXPORT_LAYOUT_SPINDLE) {
        cJSON_AddItemToObject(o, "layers", cJSON_Duplicate(layers, 1));
        add_spindle_fields(o, &c, default_k, default_bsel, &rs, run);
    } else {
        cJSON_AddStringToObject(o, "layout", layout_name(layout));
        cJSON_AddItemToObject(o, "layers", cJSON_Duplicate(layers, 1));
        add_layout_fields(o, &c, default_k, layout, ot, nt);
        add_spindle_fields(cJSON_AddObjectToObject(o, "spindle"), &c, default_k, default_bsel, &rs, run);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    snprintf(path, sizeof path, "%s/config.json", tmp);
    const int wrc = atomic_write_file(path, text, strlen(text), st);
    free(text);
    if (wrc) goto done;
    if (rename(tmp, out_dir) != 0) {
        status_fail(st, "%s: cannot rename from %s (%s)", out_dir, tmp, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (rc && made_tmp) {
        Status ignored;
        remove_tree(tmp, &ignored);
    }
    for (int i = 0; rs.params && i < rs.n_layers; i++) free(rs.params[i]), free(rs.m[i]), free(rs.v[i]);
    for (int i = 0; conv && i < rs.n_layers; i++) free(conv[i]);
    free(rs.params), free(rs.m), free(rs.v), free(ts), free(names), free(conv);
    cJSON_Delete(run);
    return rc;
}

int indexer_set_load(IndexerSet *s, const char *dir, int n_model_layers, const char *expect_fp, Status *st) {
    memset(s, 0, sizeof *s);
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!path_is_dir(dir)) return status_fail(st, "%s: no such indexer folder", dir);
    cJSON *o = read_json(path, st);
    if (!o) return -1;
    int rc = -1;
    SafeTensors sf = {0};
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(o, "layers");
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(o, "base_fingerprint");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "spindle-indexer") || !cJSON_IsArray(layers) ||
        !cJSON_IsString(fp)) {
        status_fail(st, "%s: not a spindle indexer config", path);
        goto done;
    }
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(o, "layout");
    if (lay && (!cJSON_IsString(lay) || strcmp(lay->valuestring, "spindle"))) {
        status_fail(st, "%s: exported with --layout %s, for other stacks (python/spindle_indexer.py reads it); "
                        "spindle reads the default layout (export --layout spindle)", path,
                    cJSON_IsString(lay) ? lay->valuestring : "?");
        goto done;
    }
    if (parse_indexer_cfg(o, &s->cfg, path, st)) goto done;
    snprintf(s->fingerprint, sizeof s->fingerprint, "%s", fp->valuestring);
    if (expect_fp && strcmp(expect_fp, s->fingerprint)) {
        status_fail(st, "%s: trained for checkpoint %.12s…, but this model is %.12s… (another checkpoint)", path,
                    s->fingerprint, expect_fp);
        goto done;
    }
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(o, "format_version");
    int version;
    if (json_int(ver, 1, 1, &version)) {
        status_fail(st, "%s: \"format_version\" must be 1", path);
        goto done;
    }
    if (json_int(cJSON_GetObjectItemCaseSensitive(o, "default_k"), 1, 1 << 30, &s->default_k) ||
        json_int(cJSON_GetObjectItemCaseSensitive(o, "default_bsel"), 1, 1 << 30, &s->default_bsel)) {
        status_fail(st, "%s: \"default_k\" and \"default_bsel\" must be integers in [1, 2^30]", path);
        goto done;
    }
    const int n_listed = cJSON_GetArraySize(layers);
    if (n_listed < 1 || n_listed > n_model_layers) {
        status_fail(st, "%s: \"layers\" must list 1 to %d layers (got %d)", path, n_model_layers, n_listed);
        goto done;
    }
    s->n_model_layers = n_model_layers;
    s->params = xcalloc((size_t)n_model_layers, sizeof(float *));
    char st_file[4200];
    snprintf(st_file, sizeof st_file, "%s/model.safetensors", dir);
    if (st_add_file(&sf, st_file, st)) goto done;
    IndexerTensor it[INDEXER_MAX_TENSORS];
    const int nt = indexer_param_tensors(it, &s->cfg);
    const int64_t np = indexer_n_params(&s->cfg);
    // Every tensor is checked against the config before anything is
    // allocated, so the allocation is bounded by the file's own size.
    const cJSON *e;
    int expected = 0;
    for (int pass = 0; pass < 2; pass++) {
        cJSON_ArrayForEach(e, layers) {
            int l;
            if (json_int(e, 0, n_model_layers - 1, &l) || s->params[l]) {  // (duplicates: seen in pass 1)
                status_fail(st, "%s: \"layers\": %s is not a distinct layer of this model (it has %d)", path,
                            cJSON_IsNumber(e) ? "an entry" : "a non-number", n_model_layers);
                goto done;
            }
            if (pass == 1) s->params[l] = xmalloc(sizeof(float) * (size_t)np);
            for (int j = 0; j < nt; j++) {
                char name[128];
                tensor_name(name, sizeof name, l, it[j].name);
                const StTensor *t = st_find(&sf, name);
                if (!t) {
                    status_fail(st, "%s: tensor \"%s\" is missing", st_file, name);
                    goto done;
                }
                int shape_ok = t->dtype == ST_F32 && t->ndim == it[j].ndim;
                for (int d = 0; shape_ok && d < it[j].ndim; d++) shape_ok = t->shape[d] == it[j].shape[d];
                if (!shape_ok) {
                    char shape[64];
                    if (it[j].ndim > 1)
                        snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)it[j].shape[0], (long long)it[j].shape[1]);
                    else
                        snprintf(shape, sizeof shape, "[%lld]", (long long)it[j].shape[0]);
                    status_fail(st, "%s: tensor \"%s\" must be F32 of shape %s (by config.json)", st_file, name, shape);
                    goto done;
                }
                if (pass == 1) {
                    st_to_f32(t, s->params[l] + it[j].offset);
                    expected++;
                }
            }
        }
    }
    if (sf.n_tensors != expected) {
        status_fail(st, "%s: holds %d tensors, config.json's layers and variant name %d", st_file, sf.n_tensors, expected);
        goto done;
    }
    rc = 0;
done:
    st_close(&sf);
    cJSON_Delete(o);
    if (rc) indexer_set_free(s);
    return rc;
}

void indexer_set_free(IndexerSet *s) {
    for (int i = 0; s->params && i < s->n_model_layers; i++) free(s->params[i]);
    free(s->params);
    memset(s, 0, sizeof *s);
}
