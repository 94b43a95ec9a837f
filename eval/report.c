// report.c: eval results as JSON (DESIGN.md "Eval results"), CSV and Markdown.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "eval.h"
#include "fileio.h"

static const char *mode_name(EvalMode m) { return m == EVAL_DENSE ? "dense" : m == EVAL_ORACLE ? "oracle" : "indexer"; }

// The metrics in output order, with their JSON names.
#define METRICS(X)                  \
    X(nll, "nll")                   \
    X(dnll, "dnll")                 \
    X(logit_kl, "logit_kl")         \
    X(top1_agree, "top1_agree")     \
    X(mass_recall, "mass_recall")   \
    X(sparsity, "sparsity")

static char *to_json(const EvalResult *r, int n) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mode", mode_name(r[i].mode));
        cJSON_AddNumberToObject(o, "k", r[i].k);
        cJSON_AddNumberToObject(o, "bsel", r[i].bsel);
        cJSON_AddNumberToObject(o, "ctx", r[i].ctx);
        cJSON_AddNumberToObject(o, "n_seq", r[i].n_seq);
        if (r[i].task >= 0) {
            cJSON_AddStringToObject(o, "task", retrieval_kind_name((RetrievalKind)r[i].task));
            cJSON_AddNumberToObject(o, "depth", r[i].depth);
            cJSON_AddNumberToObject(o, "accuracy", r[i].accuracy);
            cJSON_AddNumberToObject(o, "accuracy_ci95", (r[i].acc_hi - r[i].acc_lo) / 2);
            cJSON_AddNumberToObject(o, "accuracy_lo", r[i].acc_lo);
            cJSON_AddNumberToObject(o, "accuracy_hi", r[i].acc_hi);
            cJSON_AddItemToArray(arr, o);
            continue;
        }
        cJSON_AddNumberToObject(o, "n_scored", (double)r[i].n_scored);
#define ADD(field, name)                                              \
        cJSON_AddNumberToObject(o, name, r[i].field.mean);            \
        cJSON_AddNumberToObject(o, name "_ci95", r[i].field.ci95);
        METRICS(ADD)
#undef ADD
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(arr);
    cJSON_Delete(arr);
    return s;
}

int eval_write(const EvalResult *r, int n, const char *json, const char *csv, const char *md, Status *st) {
    if (json) {
        char *s = to_json(r, n);
        int rc = atomic_write_file(json, s, strlen(s), st);
        free(s);
        if (rc) return -1;
    }
    size_t cap = 4096 + (size_t)n * 512, len = 0;
    char *buf = xmalloc(cap);
    if (csv) {
        len = (size_t)snprintf(buf, cap, "mode,k,bsel,ctx,n_seq,n_scored");
#define HEAD(field, name) len += (size_t)snprintf(buf + len, cap - len, "," name "," name "_ci95");
        METRICS(HEAD)
#undef HEAD
        len += (size_t)snprintf(buf + len, cap - len, ",task,depth,accuracy,accuracy_lo,accuracy_hi\n");
        for (int i = 0; i < n; i++) {
            len += (size_t)snprintf(buf + len, cap - len, "%s,%d,%d,%d,%d,", mode_name(r[i].mode), r[i].k, r[i].bsel,
                                    r[i].ctx, r[i].n_seq);
            if (r[i].task >= 0) {
                len += (size_t)snprintf(buf + len, cap - len, ",,,,,,,,,,,,,%s,%g,%.4f,%.4f,%.4f\n",
                                        retrieval_kind_name((RetrievalKind)r[i].task), r[i].depth, r[i].accuracy,
                                        r[i].acc_lo, r[i].acc_hi);
                continue;
            }
            len += (size_t)snprintf(buf + len, cap - len, "%lld", (long long)r[i].n_scored);
#define ROW(field, name) \
            len += (size_t)snprintf(buf + len, cap - len, ",%.6g,%.3g", r[i].field.mean, r[i].field.ci95);
            METRICS(ROW)
#undef ROW
            len += (size_t)snprintf(buf + len, cap - len, ",,,,,\n");
        }
        if (atomic_write_file(csv, buf, strlen(buf), st)) goto fail;
    }
    if (md) {
        len = (size_t)snprintf(buf, cap,
                               "| mode | k | b_sel | ctx | seqs | scored | NLL | ΔNLL | logit KL | top-1 agree | mass recall | sparsity |\n"
                               "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        int any_task = 0;
        for (int i = 0; i < n; i++) {
            const EvalResult *e = &r[i];
            if (e->task >= 0) {
                any_task = 1;
                continue;
            }
            char kb[16] = "-", bb[16] = "-";
            if (e->mode != EVAL_DENSE) snprintf(kb, sizeof kb, "%d", e->k), snprintf(bb, sizeof bb, "%d", e->bsel);
            len += (size_t)snprintf(buf + len, cap - len,
                                    "| %s | %s | %s | %d | %d | %lld | %.4f ± %.4f | %+.4f ± %.4f | %.4f ± %.4f | "
                                    "%.4f ± %.4f | %.4f ± %.4f | %.4f |\n",
                                    mode_name(e->mode), kb, bb,
                                    e->ctx, e->n_seq, (long long)e->n_scored, e->nll.mean, e->nll.ci95, e->dnll.mean,
                                    e->dnll.ci95, e->logit_kl.mean, e->logit_kl.ci95, e->top1_agree.mean,
                                    e->top1_agree.ci95, e->mass_recall.mean, e->mass_recall.ci95, e->sparsity.mean);
        }
        if (any_task) {
            len += (size_t)snprintf(buf + len, cap - len,
                                    "\n| task | depth | mode | k | b_sel | ctx | instances | exact match | 95%% interval |\n"
                                    "|---|---|---|---|---|---|---|---|---|\n");
            for (int i = 0; i < n; i++) {
                const EvalResult *e = &r[i];
                if (e->task < 0) continue;
                char kb[16] = "-", bb[16] = "-";
                if (e->mode != EVAL_DENSE) snprintf(kb, sizeof kb, "%d", e->k), snprintf(bb, sizeof bb, "%d", e->bsel);
                len += (size_t)snprintf(buf + len, cap - len, "| %s | %.2f | %s | %s | %s | %d | %d | %.3f | [%.3f, %.3f] |\n",
                                        retrieval_kind_name((RetrievalKind)e->task), e->depth, mode_name(e->mode), kb,
                                        bb, e->ctx, e->n_seq, e->accuracy, e->acc_lo, e->acc_hi);
            }
        }
        if (atomic_write_file(md, buf, strlen(buf), st)) goto fail;
    }
    free(buf);
    return 0;
fail:
    free(buf);
    return -1;
}
