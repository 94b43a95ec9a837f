// fingerprint.c: see fingerprint.h. SHA-256 through OpenSSL's EVP API.
#include "fingerprint.h"

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fileio.h"

static int cmp_tensor_names(const void *a, const void *b) {
    const StTensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

// Feeds the per-tensor lines of `tensors` (name order) into ctx. 0 on success.
static int hash_tensors(EVP_MD_CTX *ctx, const SafeTensors *tensors) {
    const StTensor **order = xmalloc(sizeof *order * (size_t)(tensors->n_tensors ? tensors->n_tensors : 1));
    for (int i = 0; i < tensors->n_tensors; i++) order[i] = &tensors->tensors[i];
    qsort(order, (size_t)tensors->n_tensors, sizeof *order, cmp_tensor_names);
    int rc = 0;
    for (int i = 0; i < tensors->n_tensors && !rc; i++) {
        const StTensor *t = order[i];
        char line[256];
        int n = snprintf(line, sizeof line, " %s ", t->dtype_name);
        for (int d = 0; d < t->ndim && n < (int)sizeof line - 32; d++)
            n += snprintf(line + n, sizeof line - (size_t)n, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        line[n++] = '\n';
        if (EVP_DigestUpdate(ctx, t->name, strlen(t->name)) != 1 || EVP_DigestUpdate(ctx, line, (size_t)n) != 1)
            rc = -1;
    }
    free(order);
    return rc;
}

// SHA-256 of cfg (cfg_len bytes; none when NULL) then the tensor lines, as hex.
static int digest(const char *cfg, size_t cfg_len, const SafeTensors *tensors, char out_hex[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    int rc = -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
        (!cfg || EVP_DigestUpdate(ctx, cfg, cfg_len) == 1) && !hash_tensors(ctx, tensors) &&
        EVP_DigestFinal_ex(ctx, md, &md_len) == 1 && md_len == 32) {
        for (unsigned i = 0; i < md_len; i++) snprintf(out_hex + 2 * i, 3, "%02x", md[i]);
        rc = 0;
    }
    EVP_MD_CTX_free(ctx);
    return rc;
}

int model_fingerprint(const char *model_dir, const SafeTensors *tensors, char out_hex[65], Status *st) {
    out_hex[0] = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    char *cfg = NULL;
    size_t cfg_len = 0;
    if (file_read_all(path, &cfg, &cfg_len, st)) return -1;
    const int rc = digest(cfg, cfg_len, tensors, out_hex);
    if (rc)
        status_fail(st, "%s: cannot compute the checkpoint fingerprint (SHA-256 unavailable in libcrypto)", model_dir);
    free(cfg);
    return rc;
}

// The keys a RoPE variant may change: the scaling (transformers 4.x's rope_scaling, 5.x's
// rope_parameters), the base and the context it declares.
static int rope_key(const char *k) {
    static const char *const keys[] = {"rope_scaling", "rope_parameters", "rope_theta", "max_position_embeddings"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(k, keys[i])) return 1;
    return 0;
}

// The first top-level key of a (outside the RoPE keys) that b lacks or holds otherwise; NULL when none.
static const char *first_difference(const cJSON *a, const cJSON *b) {
    for (const cJSON *it = a->child; it; it = it->next) {
        if (rope_key(it->string)) continue;
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(b, it->string);
        if (!o || !cJSON_Compare(it, o, 1)) return it->string;
    }
    return NULL;
}

int model_rope_variant_of(const char *model_dir, const SafeTensors *model_tensors, const char *base_dir,
                          char base_fp[65], Status *st) {
    base_fp[0] = 0;
    SafeTensors base = {0};
    cJSON *cm = NULL, *cb = NULL;
    char pm[4200], pb[4200], hm[65], hb[65];
    int rc = -1;
    if (st_open(&base, base_dir, st) || model_fingerprint(base_dir, &base, base_fp, st)) goto done;
    if (digest(NULL, 0, model_tensors, hm) || digest(NULL, 0, &base, hb)) {
        status_fail(st, "%s: cannot compute the tensor fingerprint (SHA-256 unavailable in libcrypto)", model_dir);
        goto done;
    }
    if (strcmp(hm, hb)) {
        status_fail(st, "%s and %s hold different tensors (names, dtypes or shapes): --indexer-base must be the "
                        "same checkpoint with another RoPE scaling", model_dir, base_dir);
        goto done;
    }
    if (!(cm = config_json_read(model_dir, pm, sizeof pm, st)) || !(cb = config_json_read(base_dir, pb, sizeof pb, st)))
        goto done;
    const char *key = first_difference(cm, cb);
    if (!key) key = first_difference(cb, cm);
    if (key) {
        status_fail(st, "%s: \"%s\" differs from %s (--indexer-base must be the same checkpoint with another RoPE "
                        "scaling: only rope_scaling, rope_parameters, rope_theta and max_position_embeddings may "
                        "differ)", pm, key, pb);
        goto done;
    }
    rc = 0;
done:
    if (rc) base_fp[0] = 0;
    cJSON_Delete(cm), cJSON_Delete(cb);
    st_close(&base);
    return rc;
}
