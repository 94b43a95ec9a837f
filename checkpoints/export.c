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

int export_indexer(const char *run_dir, const char *out_dir, int64_t at_step, int default_k, int default_bsel,
                   Status *st) {
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
    const int nt = indexer_param_tensors(it, &c);
    ts = xcalloc((size_t)L * nt, sizeof *ts);
    names = xcalloc((size_t)L * nt, sizeof *names);
    for (int i = 0; i < L; i++)
        for (int j = 0; j < nt; j++) {
            StWriteTensor *w = &ts[i * nt + j];
            tensor_name(names[i * nt + j], sizeof names[0], cJSON_GetArrayItem(layers, i)->valueint, it[j].name);
            w->name = names[i * nt + j];
            w->ndim = it[j].ndim;
            w->shape[0] = it[j].shape[0], w->shape[1] = it[j].shape[1];
            w->data = rs.params[i] + it[j].offset;
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
    cJSON_AddItemToObject(o, "layers", cJSON_Duplicate(layers, 1));
    cJSON_AddStringToObject(o, "variant", c.variant == INDEXER_EXPANDED ? "expanded" : "collapsed");
    cJSON_AddNumberToObject(o, "d_model", c.d_model);
    cJSON_AddNumberToObject(o, "d_index", c.d_index);
    cJSON_AddNumberToObject(o, "d_rope", c.d_rope);
    cJSON_AddNumberToObject(o, "n_heads", c.n_heads);
    cJSON_AddStringToObject(o, "key_norm", norm_name(c.key_norm));
    cJSON_AddNumberToObject(o, "norm_eps", c.norm_eps);
    cJSON_AddNumberToObject(o, "rope_theta", c.rope_theta);
    cJSON_AddStringToObject(o, "rope", "rotate-half on the first d_rope dims, inv_freq[i] = rope_theta^(-2i/d_rope)");
    cJSON_AddStringToObject(o, "score", c.variant == INDEXER_EXPANDED ? "sum_h w[t,h] * relu(q[t,h] . k[j]), w = ww x"
                                                                       : "q[t] . k[j] / sqrt(d_index)");
    cJSON_AddNumberToObject(o, "default_k", default_k);
    cJSON_AddNumberToObject(o, "default_bsel", default_bsel);
    cJSON_AddNumberToObject(o, "steps", (double)rs.step);
    cJSON_AddNumberToObject(o, "tokens", (double)rs.tokens);
    // What the indexer was trained to match (runs from before it was recorded: per query).
    const cJSON *objective = cJSON_GetObjectItemCaseSensitive(run, "objective");
    if (cJSON_IsObject(objective)) cJSON_AddItemToObject(o, "objective", cJSON_Duplicate(objective, 1));
    else {
        cJSON *q = cJSON_AddObjectToObject(o, "objective");
        cJSON_AddStringToObject(q, "kind", "query");
        cJSON_AddNumberToObject(q, "bsel", 64);
        cJSON_AddNumberToObject(q, "block_weight", 1);
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
    free(rs.params), free(rs.m), free(rs.v), free(ts), free(names);
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
