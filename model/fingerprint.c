// fingerprint.c: see fingerprint.h. SHA-256 through OpenSSL's EVP API.
#include "fingerprint.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "fileio.h"

static int cmp_tensor_names(const void *a, const void *b) {
    const StTensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

int model_fingerprint(const char *model_dir, const SafeTensors *tensors, char out_hex[65], Status *st) {
    out_hex[0] = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    char *cfg = NULL;
    size_t cfg_len = 0;
    if (file_read_all(path, &cfg, &cfg_len, st)) return -1;

    const StTensor **order = xmalloc(sizeof *order * (size_t)(tensors->n_tensors ? tensors->n_tensors : 1));
    for (int i = 0; i < tensors->n_tensors; i++) order[i] = &tensors->tensors[i];
    qsort(order, (size_t)tensors->n_tensors, sizeof *order, cmp_tensor_names);

    int rc = -1;
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1 || EVP_DigestUpdate(ctx, cfg, cfg_len) != 1) goto done;
    for (int i = 0; i < tensors->n_tensors; i++) {
        const StTensor *t = order[i];
        char line[256];
        int n = snprintf(line, sizeof line, " %s ", t->dtype_name);
        for (int d = 0; d < t->ndim && n < (int)sizeof line - 32; d++)
            n += snprintf(line + n, sizeof line - (size_t)n, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        line[n++] = '\n';
        if (EVP_DigestUpdate(ctx, t->name, strlen(t->name)) != 1 || EVP_DigestUpdate(ctx, line, (size_t)n) != 1)
            goto done;
    }
    if (EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != 32) goto done;
    for (unsigned i = 0; i < md_len; i++) snprintf(out_hex + 2 * i, 3, "%02x", md[i]);
    rc = 0;
done:
    if (rc) status_fail(st, "%s: cannot compute the checkpoint fingerprint (SHA-256 unavailable in libcrypto)", model_dir);
    EVP_MD_CTX_free(ctx);
    free(order);
    free(cfg);
    return rc;
}
