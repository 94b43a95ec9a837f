// export.c: see export.h.
#include "export.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"
#include "run_state.h"
#include "safetensors.h"

static const char *norm_name(IndexerNorm n) { return n == INDEXER_NORM_RMS ? "rms" : n == INDEXER_NORM_LAYER ? "layer" : "none"; }

// The indexer configuration in a run's or an export's config.json object.
static int parse_indexer_cfg(const cJSON *o, IndexerConfig *c, const char *path, Status *st) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "variant");
    const cJSON *kn = cJSON_GetObjectItemCaseSensitive(o, "key_norm");
    if (!cJSON_IsString(v) || !cJSON_IsString(kn)) return status_fail(st, "%s: indexer variant/key_norm missing", path);
    memset(c, 0, sizeof *c);
    c->variant = !strcmp(v->valuestring, "expanded") ? INDEXER_EXPANDED : INDEXER_COLLAPSED;
    c->key_norm = !strcmp(kn->valuestring, "rms") ? INDEXER_NORM_RMS
                  : !strcmp(kn->valuestring, "layer") ? INDEXER_NORM_LAYER : INDEXER_NORM_NONE;
#define GET(field, key)                                                                  \
    do {                                                                                 \
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);                      \
        if (!cJSON_IsNumber(it)) return status_fail(st, "%s: \"%s\" missing", path, key); \
        c->field = it->valuedouble;                                                      \
    } while (0)
    GET(d_model, "d_model");
    GET(d_index, "d_index");
    GET(d_rope, "d_rope");
    GET(n_heads, "n_heads");
    GET(norm_eps, "norm_eps");
    GET(rope_theta, "rope_theta");
#undef GET
    return indexer_config_check(c, st);
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
    cJSON *run = read_json(path, st);
    if (!run) return -1;
    int rc = -1;
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
    int64_t step = at_step;
    if (step < 0 && run_state_latest(run_dir, &step, st)) {
        status_fail(st, "%s: no checkpoint to export (train first)", run_dir);
        goto done;
    }
    const int L = cJSON_GetArraySize(layers);
    rs.n_layers = L, rs.n_params = indexer_n_params(&c);
    rs.params = xcalloc((size_t)L, sizeof(float *)), rs.m = xcalloc((size_t)L, sizeof(float *));
    rs.v = xcalloc((size_t)L, sizeof(float *));
    for (int i = 0; i < L; i++) {
        rs.params[i] = xmalloc(sizeof(float) * (size_t)rs.n_params);
        rs.m[i] = xmalloc(sizeof(float) * (size_t)rs.n_params);
        rs.v[i] = xmalloc(sizeof(float) * (size_t)rs.n_params);
    }
    if (run_state_load(run_dir, step, &rs, st)) goto done;

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
    snprintf(tmp, sizeof tmp, "%s.tmp", out_dir);
    if (access(tmp, F_OK) == 0) {  // a leftover of an interrupted export
        char cmd[8500];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd) != 0) {
            status_fail(st, "%s: cannot remove the leftover", tmp);
            goto done;
        }
    }
    if (mkdir(tmp, 0755) != 0) {
        status_fail(st, "%s: cannot create (%s)", tmp, strerror(errno));
        goto done;
    }
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
    const cJSON *dk = cJSON_GetObjectItemCaseSensitive(o, "default_k"), *db = cJSON_GetObjectItemCaseSensitive(o, "default_bsel");
    s->default_k = cJSON_IsNumber(dk) ? dk->valueint : 256;
    s->default_bsel = cJSON_IsNumber(db) ? db->valueint : 1;
    s->n_model_layers = n_model_layers;
    s->params = xcalloc((size_t)n_model_layers, sizeof(float *));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st_add_file(&sf, path, st)) goto done;
    IndexerTensor it[INDEXER_MAX_TENSORS];
    const int nt = indexer_param_tensors(it, &s->cfg);
    const int64_t np = indexer_n_params(&s->cfg);
    const cJSON *e;
    cJSON_ArrayForEach(e, layers) {
        const int l = e->valueint;
        if (!cJSON_IsNumber(e) || l < 0 || l >= n_model_layers || s->params[l]) {
            status_fail(st, "%s/config.json: layer %d is not a layer of this model (it has %d)", dir, l, n_model_layers);
            goto done;
        }
        s->params[l] = xmalloc(sizeof(float) * (size_t)np);
        for (int j = 0; j < nt; j++) {
            char name[128];
            tensor_name(name, sizeof name, l, it[j].name);
            const StTensor *t = st_find(&sf, name);
            const int64_t n = it[j].shape[0] * (it[j].ndim > 1 ? it[j].shape[1] : 1);
            if (!t || t->dtype != ST_F32 || t->numel != n) {
                status_fail(st, "%s: tensor \"%s\" is missing or has the wrong shape/dtype", path, name);
                goto done;
            }
            st_to_f32(t, s->params[l] + it[j].offset);
        }
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
