// ruler.c: see ruler.h.
#include "ruler.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"
#include "forward.h"
#include "indexer.h"
#include "progress.h"
#include "tokenizer.h"

const char *ruler_mode_name(EvalMode m) {
    return m == EVAL_DENSE ? "dense" : m == EVAL_ORACLE ? "oracle" : "indexer";
}

static char *dup_str(const char *s) {
    char *d = strdup(s ? s : "");
    SPINDLE_CHECK(d);
    return d;
}

void ruler_free(RulerTask *t, int n) {
    for (int i = 0; t && i < n; i++) {
        free(t[i].task), free(t[i].ids), free(t[i].stop), free(t[i].generator), free(t[i].splitter);
        free(t[i].tmpl);
        for (int r = 0; r < t[i].n_refs; r++) free(t[i].refs[r]);
        free(t[i].refs);
    }
    free(t);
}

// An array of integers as int32 (each in [lo, hi)); -1 with st on anything else.
static int int_array(const cJSON *a, const char *key, long long lo, long long hi, int32_t **out, int *n,
                     const char *where, Status *st) {
    if (!cJSON_IsArray(a)) return status_fail(st, "%s: \"%s\" must be an array of integers", where, key);
    const int len = cJSON_GetArraySize(a);
    *out = xmalloc(sizeof(int32_t) * (size_t)(len ? len : 1));
    *n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, a) {
        const double v = cJSON_IsNumber(e) ? e->valuedouble : NAN;
        if (!(v == floor(v) && v >= (double)lo && v < (double)hi))
            return status_fail(st, "%s: \"%s\"[%d] must be an integer in [%lld, %lld)", where, key, *n, lo, hi);
        (*out)[(*n)++] = (int32_t)v;
    }
    return 0;
}

static int get_int(const cJSON *o, const char *key, int lo, int *out, const char *where, Status *st) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > 1e9)
        return status_fail(st, "%s: \"%s\" must be an integer >= %d", where, key, lo);
    *out = (int)v->valuedouble;
    return 0;
}

static const char *get_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int parse_line(RulerTask *t, const char *line, int vocab, int max_pos, const char *where, Status *st) {
    memset(t, 0, sizeof *t);
    cJSON *o = cJSON_Parse(line);
    int rc = -1;
    if (!cJSON_IsObject(o)) {
        status_fail(st, "%s: not a JSON object", where);
        goto out;
    }
    const char *task = get_str(o, "task"), *metric = get_str(o, "metric");
    if (!task || !task[0]) {
        status_fail(st, "%s: \"task\" must be a non-empty string", where);
        goto out;
    }
    t->task = dup_str(task);
    if (metric && !strcmp(metric, "string_match_all")) t->metric = RULER_MATCH_ALL;
    else if (metric && !strcmp(metric, "string_match_part")) t->metric = RULER_MATCH_PART;
    else {
        status_fail(st, "%s: \"metric\" must be \"string_match_all\" or \"string_match_part\"", where);
        goto out;
    }
    if (get_int(o, "ctx", 1, &t->ctx, where, st) || get_int(o, "index", 0, &t->index, where, st) ||
        get_int(o, "max_new_tokens", 1, &t->max_new, where, st))
        goto out;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(o, "seed");
    t->seed = cJSON_IsNumber(seed) ? (int)seed->valuedouble : -1;
    if (int_array(cJSON_GetObjectItemCaseSensitive(o, "input_ids"), "input_ids", 0, vocab, &t->ids, &t->n_ids, where,
                  st))
        goto out;
    if (t->n_ids < 1) {
        status_fail(st, "%s: \"input_ids\" is empty", where);
        goto out;
    }
    if ((long long)t->n_ids + t->max_new > max_pos) {
        status_fail(st, "%s: %d prompt tokens + %d to generate exceed the model's %d positions", where, t->n_ids,
                    t->max_new, max_pos);
        goto out;
    }
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(o, "stop_ids");
    if (stop && int_array(stop, "stop_ids", 0, vocab, &t->stop, &t->n_stop, where, st)) goto out;
    const cJSON *refs = cJSON_GetObjectItemCaseSensitive(o, "outputs"), *r;
    if (!cJSON_IsArray(refs) || cJSON_GetArraySize(refs) < 1) {
        status_fail(st, "%s: \"outputs\" must be a non-empty array of strings", where);
        goto out;
    }
    t->refs = xcalloc((size_t)cJSON_GetArraySize(refs), sizeof *t->refs);
    cJSON_ArrayForEach(r, refs) {
        if (!cJSON_IsString(r)) {
            status_fail(st, "%s: \"outputs\"[%d] must be a string", where, t->n_refs);
            goto out;
        }
        t->refs[t->n_refs++] = dup_str(r->valuestring);
    }
    t->generator = dup_str(get_str(o, "generator"));
    t->splitter = dup_str(get_str(o, "sentence_splitter"));
    t->tmpl = dup_str(get_str(o, "template"));
    rc = 0;
out:
    cJSON_Delete(o);
    return rc;
}

int ruler_load(const char *path, int vocab, int max_pos, RulerTask **tasks, int *n, Status *st) {
    *tasks = NULL, *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) return status_fail(st, "%s: cannot open the tasks file", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n_line = 0, cap_t = 0, rc = 0;
    RulerTask *t = NULL;
    while ((len = getline(&line, &cap, f)) >= 0) {
        n_line++;
        while (len > 0 && isspace((unsigned char)line[len - 1])) line[--len] = 0;
        if (!len) continue;
        if (*n == cap_t) {
            cap_t = cap_t ? 2 * cap_t : 64;
            t = realloc(t, sizeof *t * (size_t)cap_t);
            SPINDLE_CHECK(t);
        }
        char where[4200];
        snprintf(where, sizeof where, "%s: line %d", path, n_line);
        if (parse_line(&t[*n], line, vocab, max_pos, where, st)) {
            ruler_free(t, *n + 1);
            t = NULL, *n = 0, rc = -1;
            break;
        }
        (*n)++;
    }
    free(line);
    fclose(f);
    if (!rc && !*n) rc = status_fail(st, "%s: no tasks (one JSON object per line expected)", path);
    *tasks = rc ? NULL : t;
    if (rc) free(t);
    return rc;
}

void ruler_postprocess(char *s) {
    size_t n = strlen(s), a = 0;
    while (a < n && isspace((unsigned char)s[a])) a++;
    while (n > a && isspace((unsigned char)s[n - 1])) n--;
    size_t o = 0;
    for (size_t i = a; i < n; i++) {
        const unsigned char ch = (unsigned char)s[i];
        s[o++] = ch <= 0x1f ? '\n' : (char)ch;
    }
    s[o] = 0;
    a = 0;  // strip again: the mapped bytes are whitespace now
    while (s[a] && isspace((unsigned char)s[a])) a++;
    n = strlen(s);
    while (n > a && isspace((unsigned char)s[n - 1])) n--;
    memmove(s, s + a, n - a);
    s[n - a] = 0;
}

// ASCII lower case (Python's str.lower on the ASCII the references hold; other
// bytes are compared as they are).
static char *lower_dup(const char *s) {
    char *d = dup_str(s);
    for (char *p = d; *p; p++) *p = (char)tolower((unsigned char)*p);
    return d;
}

double ruler_score(RulerMetric metric, const char *pred, const char *const *refs, int n_refs) {
    char *p = lower_dup(pred);
    int hits = 0;
    for (int r = 0; r < n_refs; r++) {
        char *l = lower_dup(refs[r]);
        hits += strstr(p, l) != NULL;
        free(l);
    }
    free(p);
    if (n_refs <= 0) return 0.0;
    return metric == RULER_MATCH_ALL ? 100.0 * hits / n_refs : hits ? 100.0 : 0.0;
}

// The (task, ctx) groups in first-seen order: group[i] for each task.
static int group_tasks(const RulerTask *t, int n, int *group, int *first) {
    int n_g = 0;
    for (int i = 0; i < n; i++) {
        int g = 0;
        while (g < n_g && !(strcmp(t[first[g]].task, t[i].task) == 0 && t[first[g]].ctx == t[i].ctx)) g++;
        if (g == n_g) first[n_g++] = i;
        group[i] = g;
    }
    return n_g;
}

// Whether ruler_run scores mode m under o.
static int ruler_wants(const RulerOpts *o, EvalMode m) {
    if (m == EVAL_INDEXER && !o->indexer) return 0;
    if (m != EVAL_DENSE && o->n_k * o->n_bsel == 0) return 0;
    return !o->modes || (o->modes >> m) & 1u;
}

int ruler_n_configs(const RulerOpts *o) {
    const int per = o->n_k * o->n_bsel;
    return ruler_wants(o, EVAL_DENSE) + (ruler_wants(o, EVAL_ORACLE) + ruler_wants(o, EVAL_INDEXER)) * per;
}

int ruler_run(const Backbone *b, const RulerTask *tasks, int n_tasks, const RulerOpts *o, RulerResult **out,
              int *n_out, char ***preds, Status *st) {
    *out = NULL, *n_out = 0;
    if (preds) *preds = NULL;
    const Tokenizer *tok = o->tok;
    const int n_cfg = ruler_n_configs(o), per = o->n_k * o->n_bsel;
    // The configurations in order: dense, then each sparse mode at every (k, bsel).
    const size_t cap = (size_t)(n_cfg > 0 ? n_cfg : 1);
    EvalMode *cfg_mode = xmalloc(sizeof(EvalMode) * cap);
    int *cfg_k = xmalloc(sizeof(int) * cap), *cfg_b = xmalloc(sizeof(int) * cap);
    {
        int c = 0;
        if (ruler_wants(o, EVAL_DENSE)) cfg_mode[c] = EVAL_DENSE, cfg_k[c] = cfg_b[c] = 0, c++;
        for (EvalMode m = EVAL_ORACLE; m <= EVAL_INDEXER; m++)
            for (int j = 0; ruler_wants(o, m) && j < per; j++)
                cfg_mode[c] = m, cfg_k[c] = o->ks[j / o->n_bsel], cfg_b[c] = o->bsels[j % o->n_bsel], c++;
    }
    int *group = xmalloc(sizeof(int) * (size_t)n_tasks), *first = xmalloc(sizeof(int) * (size_t)n_tasks);
    const int n_g = group_tasks(tasks, n_tasks, group, first);
    // The lengths present, each with an average row.
    int *ctxs = xmalloc(sizeof(int) * (size_t)n_g), n_ctx = 0;
    for (int g = 0; g < n_g; g++) {
        int c = 0;
        while (c < n_ctx && ctxs[c] != tasks[first[g]].ctx) c++;
        if (c == n_ctx) ctxs[n_ctx++] = tasks[first[g]].ctx;
    }
    const int rows_per_cfg = n_g + n_ctx;
    RulerResult *res = xcalloc((size_t)n_cfg * rows_per_cfg, sizeof *res);
    char **pr = preds ? xcalloc((size_t)n_cfg * n_tasks, sizeof *pr) : NULL;
    double *sc = xmalloc(sizeof(double) * (size_t)n_tasks);
    int max_new = 1;
    for (int i = 0; i < n_tasks; i++) max_new = tasks[i].max_new > max_new ? tasks[i].max_new : max_new;
    int32_t *gen = xmalloc(sizeof(int32_t) * (size_t)max_new);
    Progress prog;
    if (o->progress) progress_start(&prog, "eval", "ruler tasks", (int64_t)n_cfg * n_tasks);
    int rc = 0;
    for (int c = 0; c < n_cfg && !rc; c++) {
        const EvalMode mode = cfg_mode[c];
        const int k = cfg_k[c], bsel = cfg_b[c];
        const int refine = mode == EVAL_INDEXER && bsel > 1 ? o->refine : 0;
        const Sparsity sp = {.topk = k, .bsel = bsel, .refine = refine, .exec_block = bsel == 1 ? o->exec_block : 0};
        const ForwardOpts fo = {.sparse = mode == EVAL_DENSE ? NULL : &sp,
                                .indexer = mode == EVAL_INDEXER ? o->indexer : NULL};
        RulerResult *row = res + (size_t)c * rows_per_cfg;
        for (int g = 0; g < rows_per_cfg; g++)
            row[g] = (RulerResult){.mode = mode, .k = k, .bsel = bsel, .refine = refine};
        for (int i = 0; i < n_tasks && !rc; i++) {
            const RulerTask *t = &tasks[i];
            const double t0 = omp_get_wtime();
            GenTiming tm = {0};
            const int n_gen = backbone_generate(b, t->ids, t->n_ids, &fo, t->max_new, t->stop, t->n_stop, gen, NULL,
                                                &tm, st);
            if (n_gen < 0) {
                rc = -1;
                break;
            }
            const double secs = omp_get_wtime() - t0;
            int n_keep = n_gen;  // the answer's text leaves out a final stop token, as a server's would
            for (int s = 0; n_keep > 0 && s < t->n_stop; s++)
                if (gen[n_keep - 1] == t->stop[s]) {
                    n_keep--;
                    break;
                }
            char *text = NULL;
            size_t len;
            if (tok_decode(tok, gen, (size_t)n_keep, &text, &len, st)) {
                rc = -1;
                break;
            }
            ruler_postprocess(text);
            sc[i] = ruler_score(t->metric, text, (const char *const *)t->refs, t->n_refs);
            RulerResult *r = &row[group[i]];
            r->task = t->task, r->ctx = t->ctx;
            r->n++;
            r->score += sc[i];
            r->seconds += secs;
            r->prefill_seconds += tm.prefill_s, r->decode_seconds += tm.decode_s;
            r->new_tokens += n_gen;
            if (pr) pr[(size_t)c * n_tasks + i] = text;
            else free(text);
            if (o->progress)
                progress_update(&prog, (int64_t)c * n_tasks + i + 1, "%s %s k %d bsel %d: %.0f", ruler_mode_name(mode),
                                t->task, k, bsel, sc[i]);
        }
        if (rc) break;
        for (int g = 0; g < n_g; g++) {  // means, then the sample sd's 95% half-width
            RulerResult *r = &row[g];
            r->score /= r->n, r->seconds /= r->n, r->new_tokens /= r->n;
            r->prefill_seconds /= r->n, r->decode_seconds /= r->n;
            double ss = 0.0;
            for (int i = 0; i < n_tasks; i++)
                if (group[i] == g) ss += (sc[i] - r->score) * (sc[i] - r->score);
            r->ci95 = r->n > 1 ? 1.96 * sqrt(ss / (r->n - 1) / r->n) : 0.0;
        }
        for (int cx = 0; cx < n_ctx; cx++) {  // per length: the mean of the task means
            RulerResult *a = &row[n_g + cx];
            a->task = "average", a->ctx = ctxs[cx];
            int n_in = 0;
            double var = 0.0;
            for (int g = 0; g < n_g; g++) {
                if (row[g].ctx != ctxs[cx]) continue;
                n_in++;
                a->n += row[g].n;
                a->score += row[g].score;
                a->seconds += row[g].seconds * row[g].n;
                a->prefill_seconds += row[g].prefill_seconds * row[g].n;
                a->decode_seconds += row[g].decode_seconds * row[g].n;
                a->new_tokens += row[g].new_tokens * row[g].n;
                var += (row[g].ci95 / 1.96) * (row[g].ci95 / 1.96);
            }
            a->score /= n_in, a->seconds /= a->n, a->new_tokens /= a->n;
            a->prefill_seconds /= a->n, a->decode_seconds /= a->n;
            a->ci95 = 1.96 * sqrt(var) / n_in;
        }
        if (o->on_config && o->on_config(o->on_config_ctx, res, (c + 1) * rows_per_cfg, pr, st)) rc = -1;
    }
    free(group), free(first), free(ctxs), free(sc), free(gen);
    free(cfg_mode), free(cfg_k), free(cfg_b);
    if (rc) {
        free(res);
        for (size_t i = 0; pr && i < (size_t)n_cfg * n_tasks; i++) free(pr[i]);
        free(pr);
        return -1;
    }
    *out = res, *n_out = n_cfg * rows_per_cfg;
    if (preds) *preds = pr;
    return 0;
}

// The distinct values of a task field, joined by ", ".
static void distinct(cJSON *o, const char *key, const RulerTask *t, int n, const char *(*get)(const RulerTask *)) {
    cJSON *a = cJSON_AddArrayToObject(o, key);
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(get(&t[j]), get(&t[i]));
        if (!seen) cJSON_AddItemToArray(a, cJSON_CreateString(get(&t[i])));
    }
}
static const char *gen_of(const RulerTask *t) { return t->generator; }
static const char *split_of(const RulerTask *t) { return t->splitter; }
static const char *tmpl_of(const RulerTask *t) { return t->tmpl; }

static cJSON *provenance(const RulerTask *t, int n, const RulerProvenance *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", p->model);
    cJSON_AddStringToObject(o, "model_fingerprint", p->model_fingerprint);
    cJSON_AddStringToObject(o, "rope", p->rope);
    cJSON_AddStringToObject(o, "tasks_file", p->tasks_file);
    cJSON_AddStringToObject(o, "tasks_sha256", p->tasks_sha256);
    distinct(o, "generator", t, n, gen_of);
    distinct(o, "sentence_splitter", t, n, split_of);
    distinct(o, "template", t, n, tmpl_of);
    cJSON *seeds = cJSON_AddArrayToObject(o, "seeds");
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = t[j].seed == t[i].seed;
        if (!seen) cJSON_AddItemToArray(seeds, cJSON_CreateNumber(t[i].seed));
    }
    if (p->indexer) cJSON_AddStringToObject(o, "indexer", p->indexer);
    else cJSON_AddNullToObject(o, "indexer");
    cJSON_AddItemToObject(o, "k_grid", cJSON_CreateIntArray(p->ks, p->n_k));
    cJSON_AddItemToObject(o, "bsel_grid", cJSON_CreateIntArray(p->bsels, p->n_bsel));
    cJSON_AddStringToObject(o, "decoding", "greedy, dense attention over the KV cache (fp32); prefill as the row's mode");
    if (p->exec_block > 0) {
        char ex[96];
        snprintf(ex, sizeof ex, "unions of blocks of %d queries on tensor cores", p->exec_block);
        cJSON_AddStringToObject(o, "per_query_execution", ex);
    } else {
        cJSON_AddStringToObject(o, "per_query_execution", "per-query gathers");
    }
    cJSON_AddStringToObject(o, "device", p->device);
    cJSON_AddStringToObject(o, "command", p->command);
    cJSON_AddStringToObject(o, "version", p->version);
    cJSON_AddStringToObject(o, "date", p->date);
    return o;
}

int ruler_write(const RulerResult *r, int n, const RulerTask *tasks, int n_tasks, char *const *preds,
                const RulerProvenance *p, const char *json, const char *md, const char *preds_path, Status *st) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "mode", ruler_mode_name(r[i].mode));
        cJSON_AddNumberToObject(o, "k", r[i].k);
        cJSON_AddNumberToObject(o, "bsel", r[i].bsel);
        if (r[i].refine) cJSON_AddNumberToObject(o, "refine", r[i].refine);
        cJSON_AddNumberToObject(o, "ctx", r[i].ctx);
        cJSON_AddStringToObject(o, "task", r[i].task);
        cJSON_AddNumberToObject(o, "n_seq", r[i].n);
        cJSON_AddNumberToObject(o, "accuracy", r[i].score);
        cJSON_AddNumberToObject(o, "accuracy_ci95", r[i].ci95);
        cJSON_AddNumberToObject(o, "seconds_per_task", r[i].seconds);
        cJSON_AddNumberToObject(o, "prefill_seconds_per_task", r[i].prefill_seconds);
        cJSON_AddNumberToObject(o, "decode_seconds_per_task", r[i].decode_seconds);
        cJSON_AddNumberToObject(o, "new_tokens", r[i].new_tokens);
        cJSON_AddItemToObject(o, "provenance", provenance(tasks, n_tasks, p));
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(arr);
    cJSON_Delete(arr);
    int rc = atomic_write_file(json, s, strlen(s), st);
    free(s);
    if (rc) return -1;
    if (md) {
        size_t cap = 4096 + (size_t)n * 256, len = 0;
        char *b = xmalloc(cap);
        len += (size_t)snprintf(b + len, cap - len,
                                "| mode | k | b_sel | ctx | task | n | RULER score | ±95%% | s/task | new tokens |\n"
                                "|---|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n; i++) {
            char bs[48];  // "64", or "64 → 1 of 1024" for two-stage supports
            if (r[i].refine) snprintf(bs, sizeof bs, "%d → 1 of %d", r[i].bsel, r[i].refine);
            else snprintf(bs, sizeof bs, "%d", r[i].bsel);
            len += (size_t)snprintf(b + len, cap - len, "| %s | %d | %s | %d | %s | %d | %.1f | %.1f | %.2f | %.1f |\n",
                                    ruler_mode_name(r[i].mode), r[i].k, bs, r[i].ctx, r[i].task, r[i].n, r[i].score,
                                    r[i].ci95, r[i].seconds, r[i].new_tokens);
        }
        len += (size_t)snprintf(b + len, cap - len,
                                "\nModel %s, RoPE %s. Tasks: %s (sha256 %s), generator %s, seed %d, template %s. "
                                "Greedy answers, dense decoding after each row's prefill (%s).\n\n`%s`\n",
                                p->model, p->rope, p->tasks_file, p->tasks_sha256, tasks[0].generator, tasks[0].seed,
                                tasks[0].tmpl, p->device, p->command);
        rc = atomic_write_file(md, b, len, st);
        free(b);
        if (rc) return -1;
    }
    if (preds_path && preds) {
        AtomicFile af;
        if (atomic_open(&af, preds_path, st)) return -1;
        // Configurations in the order of the rows' first appearance.
        int c = 0;
        for (int i = 0; i < n && !rc; i++) {
            if (i && r[i].mode == r[i - 1].mode && r[i].k == r[i - 1].k && r[i].bsel == r[i - 1].bsel) continue;
            for (int t = 0; t < n_tasks && !rc; t++) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "mode", ruler_mode_name(r[i].mode));
                cJSON_AddNumberToObject(o, "k", r[i].k);
                cJSON_AddNumberToObject(o, "bsel", r[i].bsel);
                if (r[i].refine) cJSON_AddNumberToObject(o, "refine", r[i].refine);
                cJSON_AddStringToObject(o, "task", tasks[t].task);
                cJSON_AddNumberToObject(o, "ctx", tasks[t].ctx);
                cJSON_AddNumberToObject(o, "index", tasks[t].index);
                const char *pred = preds[(size_t)c * n_tasks + t];
                cJSON_AddStringToObject(o, "pred", pred);
                cJSON *refs = cJSON_AddArrayToObject(o, "outputs");
                for (int k = 0; k < tasks[t].n_refs; k++) cJSON_AddItemToArray(refs, cJSON_CreateString(tasks[t].refs[k]));
                cJSON_AddNumberToObject(o, "score", ruler_score(tasks[t].metric, pred,
                                                                 (const char *const *)tasks[t].refs, tasks[t].n_refs));
                char *line = cJSON_PrintUnformatted(o);
                cJSON_Delete(o);
                rc = atomic_write(&af, line, strlen(line), st) || atomic_write(&af, "\n", 1, st);
                free(line);
            }
            c++;
        }
        if (rc) {
            atomic_abort(&af);
            return -1;
        }
        if (atomic_commit(&af, st)) return -1;
    }
    return 0;
}
