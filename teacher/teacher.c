// teacher.c: see teacher.h.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backbone.h"
#include "corpus.h"
#include "fileio.h"
#include "fingerprint.h"
#include "forward.h"
#include "ids.h"
#include "model.h"
#include "progress.h"
#include "shard.h"
#include "teacher.h"
#include "tokenizer.h"

#define CMD "teacher"

static void capture_fn(void *ctx, int layer, const float *xn, const float *q, const float *k, const float *lse, int T) {
    TeacherTap *c = ctx;
    int i = c->slot[layer];
    if (i < 0) return;
    memcpy(c->x[i], xn, sizeof(float) * (size_t)T * c->d_model);
    if (lse) memcpy(c->lse[i], lse, sizeof(float) * (size_t)T * c->n_heads);
    else c->missing_lse = 1;
    if (c->q) {
        SPINDLE_CHECK(q && k);
        memcpy(c->q[i], q, sizeof(float) * (size_t)T * c->q_dim);
        memcpy(c->k[i], k, sizeof(float) * (size_t)T * c->k_dim);
    }
}

void teacher_tap_init(TeacherTap *t, const ModelConfig *c, const int *layers, int n, int ctx, int want_qk) {
    SPINDLE_CHECK(n > 0 && ctx > 0);
    memset(t, 0, sizeof *t);
    t->n_layers = n;
    t->d_model = c->hidden, t->n_heads = c->n_heads;
    t->q_dim = c->n_heads * c->head_dim, t->k_dim = c->n_kv_heads * c->head_dim;
    t->slot = xmalloc(sizeof(int) * (size_t)c->n_layers);
    for (int l = 0; l < c->n_layers; l++) t->slot[l] = -1;
    t->hidden = xmalloc(sizeof(float) * (size_t)ctx * c->hidden);
    float ***bufs[4] = {&t->x, &t->lse, &t->q, &t->k};
    const int width[4] = {t->d_model, t->n_heads, t->q_dim, t->k_dim};
    for (int b = 0; b < (want_qk ? 4 : 2); b++) {
        *bufs[b] = xmalloc(sizeof(float *) * (size_t)n);
        for (int i = 0; i < n; i++) (*bufs[b])[i] = xmalloc(sizeof(float) * (size_t)ctx * width[b]);
    }
    for (int i = 0; i < n; i++) {
        SPINDLE_CHECK(layers[i] >= 0 && layers[i] < c->n_layers && (!i || layers[i] > layers[i - 1]));
        t->slot[layers[i]] = i;
    }
    t->tap = (ForwardTap){capture_fn, t, TAP_XN | TAP_LSE | (want_qk ? TAP_Q | TAP_K : 0u)};
    t->fo = (ForwardOpts){.tap = &t->tap, .stop_after_tap = layers[n - 1] + 1};
}

void teacher_tap_forward(TeacherTap *t, const Backbone *bb, const int32_t *ids, int ctx) {
    t->fo.tap = &t->tap;  // the struct may have moved since init
    t->tap.ctx = t;
    backbone_hidden(bb, ids, ctx, t->hidden, &t->fo);
    SPINDLE_CHECK(!t->missing_lse);
}

void teacher_tap_free(TeacherTap *t) {
    float **bufs[4] = {t->x, t->lse, t->q, t->k};
    for (int b = 0; b < 4; b++) {
        for (int i = 0; bufs[b] && i < t->n_layers; i++) free(bufs[b][i]);
        free(bufs[b]);
    }
    free(t->slot), free(t->hidden);
    memset(t, 0, sizeof *t);
}

int teacher_stream_load(TeacherStream *s, const ModelConfig *c, const char *model_dir, const char *const *text,
                        int n_text, const char *ids_path, int ctx, int max_seq, int bos, Status *st) {
    SPINDLE_CHECK(!text != !ids_path && ctx > 0 && max_seq >= 0);
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    s->bos_id = -1;
    Tokenizer *tok = NULL;
    int rc = -1;
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", model_dir);
    if (bos) {
        int add;
        if (ctx < 2) {
            status_fail(st, "a window that starts with the BOS needs --ctx of at least 2 (got %d)", ctx);
            goto done;
        }
        if (tok_load_model(&tok, tok_path, c->vocab, st) || tok_model_bos(tok, model_dir, &s->bos_id, &add, st))
            goto done;
        if (s->bos_id < 0) {
            status_fail(st, "--bos: %s/tokenizer_config.json names no bos_token", model_dir);
            goto done;
        }
    }
    if (ids_path) {
        if (ids_read(ids_path, c->vocab, &s->ids, &s->n_ids, st)) goto done;
    } else {
        if ((!tok && tok_load_model(&tok, tok_path, c->vocab, st)) ||
            corpus_load_tokens(tok, text, n_text, &s->ids, &s->n_ids, st))
            goto done;
        for (size_t i = 0; i < s->n_ids; i++)  // the embedding has vocab rows
            if (s->ids[i] < 0 || s->ids[i] >= c->vocab) {
                status_fail(st, "%s: token id %d is outside the model's vocabulary (%s/config.json: vocab_size %d)",
                            tok_path, s->ids[i], model_dir, c->vocab);
                goto done;
            }
    }
    const size_t n_stream = s->n_ids;  // the stream's tokens (the message below)
    if (bos) {  // the windows one after the other: BOS, then the next ctx − 1 tokens of the stream
        const size_t n_win = corpus_bos_windows(s->ids, s->n_ids, ctx, s->bos_id, (size_t)max_seq, NULL);
        int32_t *w = xmalloc(sizeof(int32_t) * (n_win ? n_win * (size_t)ctx : 1));
        corpus_bos_windows(s->ids, s->n_ids, ctx, s->bos_id, (size_t)max_seq, w);
        free(s->ids);
        s->ids = w, s->n_ids = n_win * (size_t)ctx;
    }
    s->n_win = corpus_windows(s->ids, s->n_ids, ctx, (size_t)max_seq, NULL);
    if (s->n_win == 0) {
        status_fail(st, "%s: %zu tokens, fewer than one window of --ctx %d%s", ids_path ? ids_path : text[0], n_stream,
                    ctx, bos ? " after its BOS" : "");
        goto done;
    }
    s->starts = xmalloc(sizeof *s->starts * s->n_win);
    corpus_windows(s->ids, s->n_ids, ctx, s->n_win, s->starts);
    {
        int len = snprintf(s->source, sizeof s->source, "%s:", ids_path ? "ids" : "text");
        int n_src = ids_path ? 1 : n_text;
        for (int i = 0; i < n_src && len < (int)sizeof s->source; i++) {
            const char *p = ids_path ? ids_path : text[i];
            char abs[PATH_MAX];
            len += snprintf(s->source + len, sizeof s->source - (size_t)len, "%s%s", i ? ";" : "",
                            realpath(p, abs) ? abs : p);
        }
        if (len >= (int)sizeof s->source) {
            status_fail(st, "the source paths are too long to record (%d bytes, at most %zu)", len,
                        sizeof s->source - 1);
            goto done;
        }
    }
    rc = 0;
done:
    tok_free(tok);
    return rc;
}

void teacher_stream_free(TeacherStream *s) {
    free(s->ids);
    free(s->starts);
    memset(s, 0, sizeof *s);
}

// 1 if dir has an entry other than . and ..; -1 if it cannot be read.
static int dir_nonempty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int any = 0;
    for (struct dirent *de; !any && (de = readdir(d));) any = strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
    closedir(d);
    return any;
}

// Removes dir/shard-*.tmp (partial shards of an interrupted run; nothing reads
// them). Returns how many.
static int remove_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "shard-", 6) || len < 10 || strcmp(de->d_name + len - 4, ".tmp")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (unlink(path) == 0) n++;
    }
    closedir(d);
    return n;
}

// Checks the existing shards of out against this run. On success *next_shard
// and *next_seq say where to continue. Returns 0, or -1 with st set.
static int check_existing(const char *out, const ShardHeader *want, const ModelConfig *model,
                          const int32_t *const *starts, size_t n_win, int *next_shard, int64_t *next_seq, Status *st) {
    char **paths = NULL;
    int n = 0;
    *next_shard = 0;
    *next_seq = 0;
    if (shard_list(out, &paths, &n, st)) return -1;
    int rc = -1;
    int32_t *tok = xmalloc(sizeof(int32_t) * (size_t)want->ctx);
    for (int i = 0; i < n; i++) {
        char expect[8192];
        shard_name(expect, sizeof expect, out, i);
        if (strcmp(paths[i], expect)) {
            status_fail(st, "%s: shards are not numbered 0, 1, ... without gaps (expected %s); cannot resume", paths[i],
                        expect);
            goto done;
        }
        ShardReader *r;
        if (shard_open(&r, paths[i], want->fingerprint, model, st)) goto done;
        const ShardHeader *h = shard_header(r);
        const char *what = NULL;
        if (h->ctx != want->ctx) what = "--ctx";
        else if (h->n_layers != want->n_layers || memcmp(h->layers, want->layers, sizeof(int) * (size_t)h->n_layers))
            what = "--layers";
        else if (h->seqs_per_shard != want->seqs_per_shard) what = "--seqs-per-shard";
        else if (h->x_dtype != want->x_dtype) what = "--x-dtype";
        else if (strcmp(h->source, want->source)) what = "the source (--text/--ids)";
        else if (h->first_seq != *next_seq || h->n_seq > want->seqs_per_shard || (i < n - 1 && h->n_seq != want->seqs_per_shard))
            what = "the sequence numbering (first_seq/n_seq)";
        else if (i == n - 1 && h->n_seq < want->seqs_per_shard && *next_seq + h->n_seq < (int64_t)n_win)
            what = "the number of sequences (the last shard is short: the earlier run stopped there, e.g. a smaller --max-seq)";
        if (what) {
            status_fail(st, "%s: this shard differs from the run in %s; cannot resume (shard: ctx %d, %d layers, "
                            "seqs_per_shard %d, x_dtype %s, source \"%s\")", paths[i], what, h->ctx, h->n_layers,
                        h->seqs_per_shard, shard_x_dtype_name(h->x_dtype), h->source);
            shard_close(r);
            goto done;
        }
        for (int64_t s = 0; s < h->n_seq; s++) {
            int64_t g = h->first_seq + s;
            if (shard_read(r, s, 0, tok, (size_t)want->ctx, NULL, 0, NULL, 0, st)) {
                shard_close(r);
                goto done;
            }
            if (g >= (int64_t)n_win || memcmp(tok, starts[g], sizeof(int32_t) * (size_t)want->ctx)) {
                status_fail(st, "%s: the tokens of sequence %lld differ from the source's window %lld; cannot resume",
                            paths[i], (long long)g, (long long)g);
                shard_close(r);
                goto done;
            }
        }
        *next_seq += h->n_seq;
        shard_close(r);
    }
    *next_shard = n;
    rc = 0;
done:
    free(tok);
    shard_free_list(paths, n);
    return rc ? -1 : 0;
}

// "0,3,5" for the log: the stored layers, shortened past 16.
static void layer_list(char *buf, size_t size, const int *layers, int n) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len + 16 < size; i++) {
        if (i == 16 && n > 17) {
            snprintf(buf + len, size - len, ",...,%d", layers[n - 1]);
            return;
        }
        len += (size_t)snprintf(buf + len, size - len, "%s%d", i ? "," : "", layers[i]);
    }
}

int teacher_run(const TeacherOpts *o, Status *st) {
    const char *model_dir = o->model_dir, *ids_path = o->ids_path, *out = o->out;
    const int ctx = o->ctx, sps = o->seqs_per_shard, max_seq = o->max_seq, resume = o->resume;
    const ShardXDtype x_dtype = o->x_dtype;
    SPINDLE_CHECK(!o->text != !ids_path && ctx > 0 && sps > 0 && max_seq >= 0);
    Model m;
    if (model_load(&m, model_dir, st)) return -1;
    const ModelConfig *c = &m.cfg;
    int rc = 1;
    TeacherStream ts = {0};
    TeacherTap tap = {0};
    ShardWriter *w = NULL;
    ShardHeader *h = xcalloc(1, sizeof *h);
    Backbone bb = {&m, NULL};
    int created_out = 0;  // this command made --out: a failure before any shard removes it again

    // The layers: the given ones, each a full-attention layer of this model, or all of those.
    if (o->n_layers > SHARD_MAX_LAYERS) {
        status_fail(st, "%d layers to store, at most %d", o->n_layers, SHARD_MAX_LAYERS);
        goto done;
    }
    for (int i = 0; i < o->n_layers; i++) {
        const int l = o->layers[i];
        if (l < 0 || l >= c->n_layers || (i && l <= o->layers[i - 1])) {
            status_fail(st, "%s/config.json: layer %d is not a layer of this model (it has %d), or the layers are not "
                            "ascending", model_dir, l, c->n_layers);
            goto done;
        }
        if (c->layer_kinds[l] != LAYER_FULL_ATTENTION) {
            status_fail(st, "%s/config.json: layer %d is not a full-attention layer; teacher shards hold "
                            "full-attention layers only", model_dir, l);
            goto done;
        }
        h->layers[h->n_layers++] = l;
    }
    if (!o->n_layers)
        for (int l = 0; l < c->n_layers && h->n_layers < SHARD_MAX_LAYERS; l++)
            if (c->layer_kinds[l] == LAYER_FULL_ATTENTION) h->layers[h->n_layers++] = l;
    if (!h->n_layers) {
        status_fail(st, "%s/config.json: the model has no full-attention layer: nothing to store", model_dir);
        goto done;
    }
    if (ctx > c->max_pos) {
        status_fail(st, "--ctx %d is longer than the model supports (%s/config.json: max_position_embeddings %d)", ctx,
                    model_dir, c->max_pos);
        goto done;
    }
    h->x_dtype = x_dtype;
    if (model_fingerprint(model_dir, &m.st, h->fingerprint, st)) goto done;

    // The token stream and its windows.
    if (teacher_stream_load(&ts, c, model_dir, o->text, o->n_text, ids_path, ctx, max_seq, o->bos, st)) goto done;
    const size_t n_win = ts.n_win;
    const int32_t *const *starts = ts.starts;
    memcpy(h->source, ts.source, sizeof h->source);

    // The header shared by every shard of the run.
    snprintf(h->model_type, sizeof h->model_type, "%s", c->model_type);
    h->ctx = ctx;
    h->d_model = c->hidden;
    h->n_heads = c->n_heads;
    h->n_kv_heads = c->n_kv_heads;
    h->head_dim = c->head_dim;
    h->seqs_per_shard = sps;

    // The output folder: new or empty, or (--resume) checked shard by shard.
    if (mkdir(out, 0777) == 0) created_out = 1;
    else if (errno != EEXIST) {
        status_fail(st, "%s: cannot create the shard folder (%s)", out, strerror(errno));
        goto done;
    }
    if (!path_is_dir(out)) {
        status_fail(st, "%s: exists and is not a folder", out);
        goto done;
    }
    int stale = remove_stale_tmp(out);
    if (stale) fprintf(stderr, "spindle " CMD ": %s: removed %d partial shard(s) (*.tmp) of an interrupted run\n", out, stale);
    int next_shard = 0;
    int64_t seq = 0;
    int nonempty = dir_nonempty(out);
    if (nonempty < 0) {
        status_fail(st, "%s: cannot read the shard folder (%s)", out, strerror(errno));
        goto done;
    }
    if (nonempty && !resume) {
        status_fail(st, "%s: the folder is not empty; pass --resume to continue its shards, or choose an empty folder",
                    out);
        goto done;
    }
    if (resume) {
        if (check_existing(out, h, c, starts, n_win, &next_shard, &seq, st)) goto done;
        if (next_shard)
            fprintf(stderr, "spindle " CMD ": resuming after %d complete shard(s), %lld sequence(s)\n", next_shard,
                    (long long)seq);
        else
            fprintf(stderr, "spindle " CMD ": --resume: %s holds nothing to resume; starting fresh\n", out);
    }

    // What this run stores, before the work starts.
    const int L = h->n_layers, D = c->hidden, Hq = c->n_heads;
    {
        char list[256];
        layer_list(list, sizeof list, h->layers, L);
        const int n_full = config_full_layers(c->layer_kinds, c->n_layers, NULL);
        const double per_layer = (double)shard_x_dtype_bytes(x_dtype) * D + 4.0 * Hq;
        fprintf(stderr, "spindle " CMD ": layers %s (%d of %d full-attention layers%s); the forward stops after layer %d of %d\n",
                list, L, n_full, o->n_layers ? "" : "; the default: every full-attention layer",
                h->layers[L - 1], c->n_layers - 1);
        fprintf(stderr,
                "spindle " CMD ": per token: x %d B (%s) + lse %d B = %.0f B per layer, %.0f B for %d layer(s) + 4 B "
                "of tokens, before compression; %zu sequence(s) x %d tokens: %.1f MB at most\n",
                shard_x_dtype_bytes(x_dtype) * D, shard_x_dtype_name(x_dtype), 4 * Hq, per_layer, per_layer * L, L,
                n_win - (size_t)seq, ctx, ((double)(n_win - (size_t)seq) * ctx * (per_layer * L + 4.0)) / 1e6);
    }

    // Buffers and the tap: shards hold x and lse; q and k are never read.
    teacher_tap_init(&tap, c, h->layers, L, ctx, 0);
    if (backbone_open(&bb, &m, o->use_cuda, o->precision, st)) goto done;

    const int64_t first_new = seq;
    Progress prog;
    progress_start(&prog, CMD, "sequence", (int64_t)n_win - first_new);
    for (int shard = next_shard; seq < (int64_t)n_win; shard++) {
        char path[8192];
        shard_name(path, sizeof path, out, shard);
        h->first_seq = seq;
        h->token_begin = seq * (int64_t)ctx;
        if (shard_writer_open(&w, path, h, st)) goto done;
        for (int s = 0; s < sps && seq < (int64_t)n_win; s++, seq++) {
            teacher_tap_forward(&tap, &bb, starts[seq], ctx);
            if (shard_writer_append(w, starts[seq], (const float *const *)tap.x, (const float *const *)tap.lse, st))
                goto done;
            const int64_t done_n = seq + 1 - first_new;
            progress_update(&prog, done_n, "%.0f tokens/s, shard %d", (double)done_n * ctx / progress_elapsed(&prog),
                            shard);
        }
        ShardWriter *done_w = w;
        w = NULL;
        if (shard_writer_close(done_w, st)) goto done;
        created_out = 0;  // a complete shard is there: keep the folder
    }

    // Summary over every shard of the folder.
    {
        char **paths = NULL;
        int n = 0;
        if (shard_list(out, &paths, &n, st)) goto done;
        long long bytes = 0;
        for (int i = 0; i < n; i++) {
            struct stat sb;
            if (stat(paths[i], &sb) == 0) bytes += (long long)sb.st_size;
        }
        shard_free_list(paths, n);
        double tokens = (double)n_win * ctx, secs = progress_elapsed(&prog);
        double raw = (double)shard_x_dtype_bytes(x_dtype) * D + 4.0 * Hq + 4.0 / L;
        fprintf(stderr,
                "spindle " CMD ": done: %d shard(s), %zu sequence(s) of %d tokens (%lld new in %.1f s, %.0f tokens/s), "
                "%.0f tokens, %d layer(s), %lld bytes -> %s\n"
                "spindle " CMD ": %.1f bytes/token/layer stored (x %s; raw %.1f, ratio %.2f)\n",
                n, n_win, ctx, (long long)(seq - first_new), secs,
                secs > 0 ? (double)(seq - first_new) * ctx / secs : 0.0, tokens, L, bytes, out,
                bytes / (tokens * L), shard_x_dtype_name(x_dtype), raw, bytes / (tokens * L) / raw);
    }
    rc = 0;
done:
    shard_writer_abort(w);
    if (rc && created_out && dir_nonempty(out) == 0) rmdir(out);  // leave no empty folder behind
    backbone_close(&bb);
    free(h);
    teacher_tap_free(&tap);
    teacher_stream_free(&ts);
    model_free(&m);
    return rc ? -1 : 0;
}
