// report.c: eval results as JSON (docs/design.md, "Eval results"), CSV and Markdown,
// each carrying its provenance (EvalProvenance): which model and indexer, which
// layers ran sparse in each row, the grid, the inputs and their SHA-256, the
// command line, the spindle version and the date.
#include <cjson/cJSON.h>
#include <stdarg.h>
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

int eval_sparse_layers(const EvalProvenance *p, EvalMode mode, const int **layers) {
    *layers = NULL;
    if (!p || mode == EVAL_DENSE) return 0;
    if (mode == EVAL_ORACLE) return *layers = p->full_layers, p->n_full_layers;
    return *layers = p->indexer_layers, p->n_indexer_layers;
}

// A growable string.
typedef struct {
    char *s;
    size_t len, cap;
} Buf;

static void buf_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(Buf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        SPINDLE_CHECK(n >= 0);
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        SPINDLE_CHECK(b->s);
    }
}

// "0-29" / "3,7,12" / "" : ascending layer numbers with runs collapsed.
static void layers_text(Buf *b, const int *l, int n) {
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && l[j + 1] == l[j] + 1) j++;
        buf_printf(b, "%s%d", i ? "," : "", l[i]);
        if (j > i) buf_printf(b, "%s%d", j > i + 1 ? "-" : ",", l[j]);
        i = j + 1;
    }
}

// A CSV field in double quotes (inner quotes doubled).
static void csv_quoted(Buf *b, const char *s) {
    buf_printf(b, "\"");
    for (; s && *s; s++) buf_printf(b, "%s%c", *s == '"' ? "\"" : "", *s);
    buf_printf(b, "\"");
}

// An int array (cJSON_CreateIntArray gives NULL for an empty one).
static cJSON *int_array(const int *v, int n) { return n > 0 && v ? cJSON_CreateIntArray(v, n) : cJSON_CreateArray(); }

static cJSON *provenance_json(const EvalProvenance *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "spindle_version", p->version);
    cJSON_AddStringToObject(o, "date_utc", p->date);
    cJSON_AddStringToObject(o, "command", p->command);
    cJSON_AddStringToObject(o, "model", p->model);
    cJSON_AddStringToObject(o, "model_fingerprint", p->model_fingerprint);
    cJSON_AddNumberToObject(o, "n_layers", p->n_layers);
    cJSON_AddItemToObject(o, "full_attention_layers", int_array(p->full_layers, p->n_full_layers));
    if (p->indexer) {
        cJSON_AddStringToObject(o, "indexer", p->indexer);
        cJSON_AddItemToObject(o, "indexer_layers", int_array(p->indexer_layers, p->n_indexer_layers));
    } else {
        cJSON_AddNullToObject(o, "indexer");
        cJSON_AddItemToObject(o, "indexer_layers", cJSON_CreateArray());
    }
    cJSON_AddNumberToObject(o, "ctx", p->ctx);
    cJSON_AddItemToObject(o, "k_grid", int_array(p->ks, p->n_k));
    cJSON_AddItemToObject(o, "bsel_grid", int_array(p->bsels, p->n_bsel));
    const int zero = 0;
    cJSON_AddItemToObject(o, "recent_grid", p->n_recent ? int_array(p->recents, p->n_recent) : int_array(&zero, 1));
    cJSON_AddItemToObject(o, "sinks_grid", p->n_sinks ? int_array(p->sinks, p->n_sinks) : int_array(&zero, 1));
    if (p->k_layers) {
        cJSON_AddStringToObject(o, "k_layers", p->k_layers);
        cJSON_AddItemToObject(o, "k_layer_weights", cJSON_CreateDoubleArray(p->k_layer_weights, p->n_full_layers));
    } else {
        cJSON_AddNullToObject(o, "k_layers");
    }
    cJSON_AddStringToObject(o, "device", p->device);
    cJSON_AddStringToObject(o, "precision", p->precision);
    if (p->execution) cJSON_AddStringToObject(o, "execution", p->execution);
    cJSON_AddStringToObject(o, "input_kind", p->input_kind);
    if (p->window_bos >= 0) cJSON_AddNumberToObject(o, "window_bos", p->window_bos);  // eval --bos
    cJSON *in = cJSON_AddArrayToObject(o, "inputs");
    for (int i = 0; i < p->n_inputs; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "path", p->inputs[i]);
        cJSON_AddStringToObject(f, "sha256", p->input_sha256[i]);
        cJSON_AddItemToArray(in, f);
    }
    return o;
}

static char *to_json(const EvalResult *r, int n, const EvalProvenance *p) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mode", mode_name(r[i].mode));
        cJSON_AddNumberToObject(o, "k", r[i].k);
        cJSON_AddNumberToObject(o, "bsel", r[i].bsel);
        cJSON_AddNumberToObject(o, "recent", r[i].recent);
        cJSON_AddNumberToObject(o, "sinks", r[i].sinks);
        if (r[i].refine) cJSON_AddNumberToObject(o, "refine", r[i].refine);
        cJSON_AddNumberToObject(o, "ctx", r[i].ctx);
        cJSON_AddNumberToObject(o, "n_seq", r[i].n_seq);
        if (r[i].task >= 0) {
            cJSON_AddStringToObject(o, "task", retrieval_kind_name((RetrievalKind)r[i].task));
            cJSON_AddNumberToObject(o, "depth", r[i].depth);
            cJSON_AddNumberToObject(o, "accuracy", r[i].accuracy);
            cJSON_AddNumberToObject(o, "accuracy_ci95", (r[i].acc_hi - r[i].acc_lo) / 2);
            cJSON_AddNumberToObject(o, "accuracy_lo", r[i].acc_lo);
            cJSON_AddNumberToObject(o, "accuracy_hi", r[i].acc_hi);
        } else {
            cJSON_AddNumberToObject(o, "n_scored", (double)r[i].n_scored);
#define ADD(field, name)                                              \
            cJSON_AddNumberToObject(o, name, r[i].field.mean);        \
            cJSON_AddNumberToObject(o, name "_ci95", r[i].field.ci95);
            METRICS(ADD)
#undef ADD
            // Over the layers that ran sparse only (see sparse_layers).
            cJSON_AddNumberToObject(o, "mass_recall_sparse_layers", r[i].mass_recall_sparse.mean);
            cJSON_AddNumberToObject(o, "mass_recall_sparse_layers_ci95", r[i].mass_recall_sparse.ci95);
            cJSON_AddNumberToObject(o, "sparsity_sparse_layers", r[i].sparsity_sparse.mean);
            cJSON_AddNumberToObject(o, "sparsity_sparse_layers_ci95", r[i].sparsity_sparse.ci95);
            if (r[i].has_realization) {
                cJSON_AddNumberToObject(o, "realization_gap", r[i].realization.mean);
                cJSON_AddNumberToObject(o, "realization_gap_ci95", r[i].realization.ci95);
            }
            if (r[i].union_keys > 0) {  // --union-bsel, per-query rows
                cJSON_AddNumberToObject(o, "union_bsel", r[i].union_bsel);
                cJSON_AddNumberToObject(o, "union_keys_per_block", r[i].union_keys);
                cJSON_AddNumberToObject(o, "union_over_k", r[i].union_ratio);
            }
            if (r[i].n_layer_stats > 0) {  // per full-attention layer, in full_attention_layers' order
                cJSON *lr = cJSON_AddArrayToObject(o, "layer_mass_recall");
                cJSON *ls = cJSON_AddArrayToObject(o, "layer_sparsity");
                for (int j = 0; j < r[i].n_layer_stats; j++) {
                    cJSON_AddItemToArray(lr, cJSON_CreateNumber(r[i].layer_recall[j]));
                    cJSON_AddItemToArray(ls, cJSON_CreateNumber(r[i].layer_sparsity[j]));
                }
            }
            if (r[i].has_layer_k && p) cJSON_AddItemToObject(o, "layer_k", int_array(r[i].layer_k, p->n_full_layers));
        }
        if (p) {
            const int *sl;
            const int ns = eval_sparse_layers(p, r[i].mode, &sl);
            cJSON_AddItemToObject(o, "sparse_layers", int_array(sl, ns));
            cJSON_AddNumberToObject(o, "n_sparse_layers", ns);
            cJSON_AddNumberToObject(o, "n_layers", p->n_layers);
            cJSON_AddItemToObject(o, "provenance", provenance_json(p));
        }
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(arr);
    cJSON_Delete(arr);
    return s;
}

// The provenance columns of one CSV row (after the metric columns).
static void csv_provenance(Buf *b, const EvalProvenance *p, EvalMode mode) {
    const int *sl;
    const int ns = eval_sparse_layers(p, mode, &sl);
    Buf t = {0};
    buf_printf(&t, "%s", "");
    layers_text(&t, sl, ns);
    buf_printf(b, ",");
    csv_quoted(b, t.s);
    buf_printf(b, ",%d,%d,", ns, p->n_layers);
    csv_quoted(b, p->model);
    buf_printf(b, ",%s,", p->model_fingerprint);
    csv_quoted(b, p->indexer ? p->indexer : "");
    t.len = 0, t.s[0] = 0;
    layers_text(&t, p->indexer_layers, p->n_indexer_layers);
    buf_printf(b, ",");
    csv_quoted(b, t.s);
    t.len = 0, t.s[0] = 0;
    for (int i = 0; i < p->n_inputs; i++) buf_printf(&t, "%s%s:%s=%s", i ? ";" : "", p->input_kind, p->inputs[i], p->input_sha256[i]);
    buf_printf(b, ",");
    csv_quoted(b, t.s);
    buf_printf(b, ",%s,%s,", p->device, p->precision);
    csv_quoted(b, p->command);
    buf_printf(b, ",");
    csv_quoted(b, p->version);
    buf_printf(b, ",%s", p->date);
    free(t.s);
}

static void md_provenance(Buf *b, const EvalProvenance *p) {
    buf_printf(b, "\nProvenance:\n\n- spindle %s, %s\n- command: `%s`\n- model: `%s` (fingerprint %s, %d layers)\n",
               p->version, p->date, p->command, p->model, p->model_fingerprint, p->n_layers);
    if (p->indexer) {
        buf_printf(b, "- indexer: `%s`, layers ", p->indexer);
        layers_text(b, p->indexer_layers, p->n_indexer_layers);
        buf_printf(b, " (%d of %d)\n", p->n_indexer_layers, p->n_layers);
    } else {
        buf_printf(b, "- indexer: none\n");
    }
    if (p->k_layers) {
        buf_printf(b, "- per-layer budgets: `%s`, weights", p->k_layers);
        for (int j = 0; j < p->n_full_layers; j++) buf_printf(b, "%s%.4g", j ? ", " : " ", p->k_layer_weights[j]);
        buf_printf(b, " (k at a layer: round(k·w))\n");
    }
    buf_printf(b, "- ctx %d, k ", p->ctx);
    for (int i = 0; i < p->n_k; i++) buf_printf(b, "%s%d", i ? "," : "", p->ks[i]);
    buf_printf(b, ", b_sel ");
    for (int i = 0; i < p->n_bsel; i++) buf_printf(b, "%s%d", i ? "," : "", p->bsels[i]);
    for (int i = 0; i < p->n_recent; i++) buf_printf(b, "%s%d", i ? "," : ", recent ", p->recents[i]);
    for (int i = 0; i < p->n_sinks; i++) buf_printf(b, "%s%d", i ? "," : ", sinks ", p->sinks[i]);
    buf_printf(b, ", device %s, precision %s\n- %s input(s):\n", p->device, p->precision, p->input_kind);
    for (int i = 0; i < p->n_inputs; i++) buf_printf(b, "  - `%s` sha256 %s\n", p->inputs[i], p->input_sha256[i]);
    if (p->window_bos >= 0)
        buf_printf(b, "- each window: BOS (id %d), then ctx - 1 tokens of the input (--bos)\n", p->window_bos);
}

// "all 30 (0-29)", "3 of 30 (3,7,12)", "none".
static void md_sparse(Buf *b, const EvalProvenance *p, EvalMode mode) {
    if (!p) {
        buf_printf(b, "-");
        return;
    }
    const int *sl;
    const int ns = eval_sparse_layers(p, mode, &sl);
    if (!ns) {
        buf_printf(b, "none");
        return;
    }
    if (ns == p->n_layers) buf_printf(b, "all %d (", ns);
    else buf_printf(b, "%d of %d (", ns, p->n_layers);
    layers_text(b, sl, ns);
    buf_printf(b, ")");
}

// The b_sel cell of a sparse row: "64", "64 + recent 256 + sinks 4" for a
// hybrid support (docs/design.md "Hybrid supports"), "64 → 1 of 1024" for a
// two-stage one (per query from 1024 candidates a block).
static void bsel_cell(char *s, size_t n, const EvalResult *e) {
    int w = e->refine ? snprintf(s, n, "%d → 1 of %d", e->bsel, e->refine) : snprintf(s, n, "%d", e->bsel);
    if (e->recent && w >= 0 && (size_t)w < n) w += snprintf(s + w, n - (size_t)w, " + recent %d", e->recent);
    if (e->sinks && w >= 0 && (size_t)w < n) snprintf(s + w, n - (size_t)w, " + sinks %d", e->sinks);
}

int eval_write(const EvalResult *r, int n, const EvalProvenance *p, const char *json, const char *csv,
               const char *md, Status *st) {
    if (json) {
        char *s = to_json(r, n, p);
        int rc = atomic_write_file(json, s, strlen(s), st);
        free(s);
        if (rc) return -1;
    }
    Buf b = {0};
    if (csv) {
        buf_printf(&b, "mode,k,bsel,ctx,n_seq,n_scored");
#define HEAD(field, name) buf_printf(&b, "," name "," name "_ci95");
        METRICS(HEAD)
#undef HEAD
        buf_printf(&b, ",task,depth,accuracy,accuracy_lo,accuracy_hi,recent,sinks");
        if (p)
            buf_printf(&b, ",sparse_layers,n_sparse_layers,n_layers,model,model_fingerprint,indexer,indexer_layers,"
                           "inputs,device,precision,command,spindle_version,date_utc");
        buf_printf(&b, "\n");
        for (int i = 0; i < n; i++) {
            buf_printf(&b, "%s,%d,%d,%d,%d,", mode_name(r[i].mode), r[i].k, r[i].bsel, r[i].ctx, r[i].n_seq);
            if (r[i].task >= 0) {
                buf_printf(&b, ",,,,,,,,,,,,,%s,%g,%.4f,%.4f,%.4f,%d,%d", retrieval_kind_name((RetrievalKind)r[i].task),
                           r[i].depth, r[i].accuracy, r[i].acc_lo, r[i].acc_hi, r[i].recent, r[i].sinks);
            } else {
                buf_printf(&b, "%lld", (long long)r[i].n_scored);
#define ROW(field, name) buf_printf(&b, ",%.6g,%.3g", r[i].field.mean, r[i].field.ci95);
                METRICS(ROW)
#undef ROW
                buf_printf(&b, ",,,,,,%d,%d", r[i].recent, r[i].sinks);
            }
            if (p) csv_provenance(&b, p, r[i].mode);
            buf_printf(&b, "\n");
        }
        if (atomic_write_file(csv, b.s, b.len, st)) goto fail;
    }
    if (md) {
        b.len = 0;
        buf_printf(&b, "| mode | k | b_sel | ctx | seqs | scored | NLL | ΔNLL | logit KL | top-1 agree | mass recall | "
                       "sparsity | sparse layers |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        int any_task = 0;
        for (int i = 0; i < n; i++) {
            const EvalResult *e = &r[i];
            if (e->task >= 0) {
                any_task = 1;
                continue;
            }
            char kb[16] = "-", bb[48] = "-";
            if (e->mode != EVAL_DENSE) snprintf(kb, sizeof kb, "%d", e->k), bsel_cell(bb, sizeof bb, e);
            buf_printf(&b,
                       "| %s | %s | %s | %d | %d | %lld | %.4f ± %.4f | %+.4f ± %.4f | %.4f ± %.4f | "
                       "%.4f ± %.4f | %.4f ± %.4f | %.4f | ",
                       mode_name(e->mode), kb, bb, e->ctx, e->n_seq, (long long)e->n_scored, e->nll.mean, e->nll.ci95,
                       e->dnll.mean, e->dnll.ci95, e->logit_kl.mean, e->logit_kl.ci95, e->top1_agree.mean,
                       e->top1_agree.ci95, e->mass_recall.mean, e->mass_recall.ci95, e->sparsity.mean);
            md_sparse(&b, p, e->mode);
            buf_printf(&b, " |\n");
        }
        int any_gap = 0;
        for (int i = 0; i < n; i++) any_gap |= r[i].task < 0 && r[i].has_realization;
        if (any_gap) {
            buf_printf(&b, "\nRealization gap: NLL of the row − NLL of its mode's b_sel 1 row of the same k, paired per "
                           "position.\n\n| mode | k | b_sel | realization gap |\n|---|---|---|---|\n");
            for (int i = 0; i < n; i++) {
                const EvalResult *e = &r[i];
                if (e->task >= 0 || !e->has_realization) continue;
                char bb[48];
                bsel_cell(bb, sizeof bb, e);
                buf_printf(&b, "| %s | %d | %s | %+.4f ± %.4f |\n", mode_name(e->mode), e->k, bb, e->realization.mean,
                           e->realization.ci95);
            }
        }
        if (any_task) {
            buf_printf(&b, "\n| task | depth | mode | k | b_sel | ctx | instances | exact match | 95%% interval | sparse layers |\n"
                           "|---|---|---|---|---|---|---|---|---|---|\n");
            for (int i = 0; i < n; i++) {
                const EvalResult *e = &r[i];
                if (e->task < 0) continue;
                char kb[16] = "-", bb[48] = "-";
                if (e->mode != EVAL_DENSE) snprintf(kb, sizeof kb, "%d", e->k), bsel_cell(bb, sizeof bb, e);
                buf_printf(&b, "| %s | %.2f | %s | %s | %s | %d | %d | %.3f | [%.3f, %.3f] | ",
                           retrieval_kind_name((RetrievalKind)e->task), e->depth, mode_name(e->mode), kb, bb, e->ctx,
                           e->n_seq, e->accuracy, e->acc_lo, e->acc_hi);
                md_sparse(&b, p, e->mode);
                buf_printf(&b, " |\n");
            }
        }
        if (p) md_provenance(&b, p);
        if (atomic_write_file(md, b.s, b.len, st)) goto fail;
    }
    free(b.s);
    return 0;
fail:
    free(b.s);
    return -1;
}
