// trainer.c: see trainer.h. One step = one teacher sequence: sample the query
// positions (or whole blocks, for a block-aware objective); then for every
// trained layer take x and lse from the data source (a shard, or the tap of an
// online forward over the sequence), the teacher q/k from the tap or rebuilt
// from x (forward_layer_qk), the fused loss of the run's objective and its
// gradients (indexer_objective_loss_cpu, or its CUDA twin with --device cuda),
// clip, and apply AdamW. Online on the GPU the layers' steps run inside the
// one bf16 pass of the backbone, on its device arrays (train_gpu.h).
// Everything that decides the next step — parameters, moments, step, PRNG
// state, data cursor — goes into the run checkpoint, so a killed run resumes
// to the same bits.
#include "trainer.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adamw.h"
#include "dist.h"
#include "progress.h"
#include "fileio.h"
#include "fingerprint.h"
#include "forward.h"
#include "indexer_ops.h"
#include "model.h"
#include "retrieval.h"
#include "rng.h"
#include "rope.h"
#include "run_state.h"
#include "schedule.h"
#include "shard.h"
#include "synthetic.h"
#include "teacher.h"
#ifdef SPINDLE_HAVE_CUDA
#include "forward_cuda.h"
#include "indexer_cuda.h"
#include "ops_cuda.h"
#include "train_gpu.h"
#endif

TrainConfig train_config_default(void) {
    TrainConfig tc = {0};
    tc.steps = 200, tc.warmup = 20;
    tc.lr = 3e-3, tc.min_lr_frac = 0.1, tc.weight_decay = 0.01;
    tc.beta1 = 0.9, tc.beta2 = 0.95, tc.eps = 1e-8, tc.clip = 1.0;
    tc.seed = 1, tc.query_frac = 0.25, tc.min_pos = 16;
    tc.objective = indexer_objective_default();
    tc.eval_every = 50, tc.recall_k = 256, tc.eval_queries = 256;
    tc.ckpt_every = 25, tc.keep_ckpts = 2;
    tc.backbone_prec = -1;
    tc.batch = 1, tc.synthetic_seed = 1;
    return tc;
}

static const char *const PREC_NAMES[3] = {"fp32", "mixed", "bf16"};

int train_prec_parse(const char *s) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, PREC_NAMES[i])) return i;
    return -1;
}

const char *train_prec_name(int p) { return p >= 0 && p < 3 ? PREC_NAMES[p] : "?"; }

int train_backbone_prec(const TrainConfig *tc) {
    if (tc->backbone_prec >= 0) return tc->backbone_prec;
    return tc->shards_dir ? TRAIN_PREC_FP32 : TRAIN_PREC_BF16;
}

// The shards a run reads: paths, their sequence counts and the header they share.
typedef struct {
    char **paths;
    int n;
    int64_t *first;  // global index of each shard's first sequence (prefix sums)
    int64_t total;
    ShardHeader hdr;
    ShardReader *open;  // the shard currently open (one at a time)
    int open_idx;
    const ModelConfig *model;  // every shard is checked against it
} ShardSet;

static int shardset_open(ShardSet *ss, const char *dir, const char *fingerprint, const ModelConfig *model,
                         Status *st) {
    memset(ss, 0, sizeof *ss);
    ss->open_idx = -1;
    ss->model = model;
    if (shard_list(dir, &ss->paths, &ss->n, st)) return -1;
    if (ss->n == 0) return status_fail(st, "%s: no complete shards (shard-NNNNN.h5)", dir);
    ss->first = xmalloc(sizeof(int64_t) * (size_t)(ss->n + 1));
    for (int i = 0; i < ss->n; i++) {
        ShardReader *r;
        if (shard_open(&r, ss->paths[i], fingerprint, model, st)) return -1;
        const ShardHeader *h = shard_header(r);
        if (i == 0) ss->hdr = *h;
        else if (h->ctx != ss->hdr.ctx || h->n_layers != ss->hdr.n_layers ||
                 memcmp(h->layers, ss->hdr.layers, sizeof(int) * (size_t)h->n_layers)) {
            shard_close(r);
            return status_fail(st, "%s: ctx or layers differ from %s", ss->paths[i], ss->paths[0]);
        }
        ss->first[i] = ss->total;
        ss->total += h->n_seq;
        shard_close(r);
    }
    ss->first[ss->n] = ss->total;
    if (ss->total <= 0) return status_fail(st, "%s: the shards hold no sequences", dir);
    return 0;
}

static void shardset_close(ShardSet *ss) {
    if (ss->open) shard_close(ss->open);
    shard_free_list(ss->paths, ss->n);
    free(ss->first);
    memset(ss, 0, sizeof *ss);
}

// Reads global sequence g (modulo the total: epochs wrap) of one layer into
// x [n_x] and lse [n_lse] (either may be NULL).
static int shardset_read(ShardSet *ss, int64_t g, int layer, float *x, size_t n_x, float *lse, size_t n_lse,
                         Status *st) {
    g %= ss->total;
    int i = 0;
    while (ss->first[i + 1] <= g) i++;
    if (ss->open_idx != i) {
        if (ss->open) shard_close(ss->open);
        ss->open = NULL;
        if (shard_open(&ss->open, ss->paths[i], ss->hdr.fingerprint, ss->model, st)) return -1;
        ss->open_idx = i;
    }
    return shard_read(ss->open, g - ss->first[i], layer, NULL, 0, x, n_x, lse, n_lse, st);
}

// The token windows of online training: a loaded stream's (epochs wrap), or
// the random stream's (TrainStream.random), made on demand into buf; with a
// retrieval mix, some of the stream's windows become kv tasks over their own
// text (made into mbuf; the last one is kept: mixed_g, q_start).
typedef struct {
    const TeacherStream *stream;
    int random, vocab, T;
    uint64_t seed;
    int32_t *buf;  // [T] (random only)
    double mix;    // TrainConfig.retrieval_mix
    uint64_t mix_seed;
    const Tokenizer *tok;
    int32_t *mbuf;    // [T]: the kv task of window mixed_g
    int64_t mixed_g;  // −1: none made yet
    int q_start;      // its question's first position
} Windows;

// The kv task of window g, or 0 when g stays text (no mix, or not drawn). Its
// draws: splitmix64 of (mix_seed, g), nothing else.
static int window_mixed(Windows *w, int64_t g, Status *st) {
    if (w->mix <= 0 || w->random) return 0;
    uint64_t s = w->mix_seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(g + 1));
    if (rng_uniform(&s) >= w->mix) return 0;
    if (w->mixed_g == g) return 1;
    const double depth = rng_uniform(&s);
    const uint64_t seed = rng_next(&s);
    RetrievalTask task;
    const int32_t *text = w->stream->starts[g % (int64_t)w->stream->n_win];
    if (retrieval_make(w->tok, text, (size_t)w->T, RETRIEVAL_KV, w->T, depth, seed, &task, st)) return -1;
    memcpy(w->mbuf, task.ids, sizeof(int32_t) * (size_t)w->T);
    w->q_start = task.hay_start + task.hay_len;
    w->mixed_g = g;
    retrieval_free(&task);
    return 1;
}

// Window g: T ids (NULL, st set, when its kv task cannot be made).
static const int32_t *window_ids(Windows *w, int64_t g, Status *st) {
    if (!w->random) {
        const int mixed = window_mixed(w, g, st);
        if (mixed < 0) return NULL;
        return mixed ? w->mbuf : w->stream->starts[g % (int64_t)w->stream->n_win];
    }
    uint64_t s = w->seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(g + 1));
    for (int t = 0; t < w->T; t++) w->buf[t] = (int32_t)rng_below(&s, (uint64_t)w->vocab);
    return w->buf;
}

// Where a step's teacher data comes from: shards (x, lse read per layer), or
// online (the frozen backbone over the window, tapped at every trained layer
// in one pass; on the CPU the tap also hands the teacher q and k).
typedef struct {
    ShardSet *shards;            // shard mode
    Windows *win;                // online mode
    TeacherTap *tap;
    const Backbone *bb;
    int64_t tapped;  // the global sequence the tap holds (-1: none)
    float *x, *lse;  // shard mode: [T, D] and [Hq, T] buffers
    int T, D, Hq;
} TrainSource;

// Layer i (model layer `layer`) of global sequence g (epochs wrap): *x, *lse,
// and *q, *k when the source has them (else NULL: rebuild from x).
static int source_layer(TrainSource *s, int64_t g, int i, int layer, const float **x, const float **lse,
                        const float **q, const float **k, Status *st) {
    *q = *k = NULL;
    if (s->shards) {
        if (shardset_read(s->shards, g, layer, s->x, (size_t)s->T * s->D, s->lse, (size_t)s->T * s->Hq, st)) return -1;
        *x = s->x, *lse = s->lse;
        return 0;
    }
    if (s->tapped != g) {
        const int32_t *ids = window_ids(s->win, g, st);
        if (!ids) return -1;
        teacher_tap_forward(s->tap, s->bb, ids, s->T);
        s->tapped = g;
    }
    *x = s->tap->x[i], *lse = s->tap->lse[i];
    if (s->tap->q) *q = s->tap->q[i], *k = s->tap->k[i];
    return 0;
}

// format_version of RUN/config.json; 1 lacked the model path, device and
// teacher precision (and its checkpoints had no checksum).
enum { TRAIN_RUN_FORMAT = 2 };

// o[key] = {source, paths (real paths), tokens, windows} of a token stream; returns the object.
static cJSON *stream_json(cJSON *o, const char *key, const TrainStream *ts, const TeacherStream *loaded) {
    char abs[4096];
    cJSON *on = cJSON_AddObjectToObject(o, key);
    if (ts->random) {  // no paths: the seed makes every window
        cJSON_AddStringToObject(on, "source", "random");
        cJSON_AddNumberToObject(on, "seed", (double)ts->random_seed);
        return on;
    }
    cJSON_AddStringToObject(on, "source", ts->ids_path ? "ids" : "text");
    cJSON *paths = cJSON_AddArrayToObject(on, "paths");
    const int n = ts->ids_path ? 1 : ts->n_text;
    for (int i = 0; i < n; i++) {
        const char *p = ts->ids_path ? ts->ids_path : ts->text[i];
        cJSON_AddItemToArray(paths, cJSON_CreateString(realpath(p, abs) ? abs : p));
    }
    cJSON_AddNumberToObject(on, "tokens", (double)loaded->n_ids);
    cJSON_AddNumberToObject(on, "windows", (double)loaded->n_win);
    // --bos: each window is this token, then ctx − 1 tokens of the stream ("tokens" counts the windows' ids).
    if (loaded->bos_id >= 0) cJSON_AddNumberToObject(on, "bos_token_id", loaded->bos_id);
    return on;
}

// The stream of o[key] (stream_json's object) into ts. Returns 0, or -1 with st naming file.
static int stream_from_json(TrainStream *ts, const cJSON *on, const char *file, const char *key, Status *st) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(on, "source");
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(on, "paths"), *p;
    const int ids = cJSON_IsString(src) && !strcmp(src->valuestring, "ids");
    const int n = cJSON_IsArray(paths) ? cJSON_GetArraySize(paths) : 0;
    ts->n_text = 0, ts->ids_path = NULL, ts->random = 0, ts->random_seed = 0, ts->bos = 0;
    if (cJSON_IsString(src) && !strcmp(src->valuestring, "random")) {
        const cJSON *seed = cJSON_GetObjectItemCaseSensitive(on, "seed");
        if (!cJSON_IsNumber(seed) || seed->valuedouble < 0 || seed->valuedouble > 9007199254740992.0 ||
            seed->valuedouble != floor(seed->valuedouble))
            return status_fail(st, "%s: \"%s\" of source random needs a non-negative integer \"seed\"", file, key);
        ts->random = 1, ts->random_seed = (uint64_t)seed->valuedouble;
        return 0;
    }
    if (!cJSON_IsObject(on) || !cJSON_IsString(src) || (!ids && strcmp(src->valuestring, "text")) || n < 1 ||
        n > TRAIN_MAX_TEXT || (ids && n != 1))
        return status_fail(st, "%s: \"%s\" missing or incomplete (source, paths)", file, key);
    cJSON_ArrayForEach(p, paths) {
        if (!cJSON_IsString(p) || strlen(p->valuestring) >= sizeof ts->store[0])
            return status_fail(st, "%s: %s \"paths\" holds something other than a path", file, key);
        snprintf(ts->store[ts->n_text], sizeof ts->store[0], "%s", p->valuestring);
        ts->text[ts->n_text] = ts->store[ts->n_text];
        ts->n_text++;
    }
    if (ids) ts->ids_path = ts->text[0], ts->n_text = 0;
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(on, "bos_token_id");
    if (bos && (!cJSON_IsNumber(bos) || bos->valuedouble < 0 || bos->valuedouble != floor(bos->valuedouble)))
        return status_fail(st, "%s: %s \"bos_token_id\" is not a token id", file, key);
    ts->bos = bos != NULL;
    return 0;
}

static cJSON *config_json(const TrainConfig *tc, const char *fingerprint, int ctx, const TeacherStream *stream,
                          const TeacherStream *held_stream) {
    cJSON *o = cJSON_CreateObject();
    char abs[4096];
    cJSON_AddStringToObject(o, "format", "spindle-run");
    cJSON_AddNumberToObject(o, "format_version", TRAIN_RUN_FORMAT);
    if (tc->synthetic) {  // no folder: the name and seed rebuild the same weights
        cJSON_AddStringToObject(o, "model", "");
        cJSON *sy = cJSON_AddObjectToObject(o, "synthetic");
        cJSON_AddStringToObject(sy, "name", tc->synthetic);
        cJSON_AddNumberToObject(sy, "seed", (double)tc->synthetic_seed);
    } else
        cJSON_AddStringToObject(o, "model", realpath(tc->model_dir, abs) ? abs : tc->model_dir);
    cJSON_AddStringToObject(o, "model_fingerprint", fingerprint);
    cJSON_AddStringToObject(o, "shards", !tc->shards_dir ? "" : realpath(tc->shards_dir, abs) ? abs : tc->shards_dir);
    if (stream) {  // online: the stream, its windows and what the data cursor counts
        cJSON *on = stream_json(o, "online", &tc->online, stream);
        cJSON_AddNumberToObject(on, "ctx", ctx);
        // (One sequence per step: the words of runs from before "batch", which resume unchanged.)
        cJSON_AddStringToObject(on, "cursor", tc->online.random ?
            "sequences consumed; the step at cursor c trains on windows c .. c+batch-1, window i = ctx token ids "
            "uniform in [0, vocab) from splitmix64 seeded by (seed, i)" : tc->batch == 1 ?
            "sequences consumed; the step at cursor c trains on window c mod windows "
            "(window i = tokens [i*ctx, (i+1)*ctx) of the stream, as spindle teacher cuts it)" :
            "sequences consumed; the step at cursor c trains on windows c .. c+batch-1 mod windows "
            "(window i = tokens [i*ctx, (i+1)*ctx) of the stream, as spindle teacher cuts it)");
    }
    if (held_stream) stream_json(o, "heldout_online", &tc->heldout_stream, held_stream);  // recall on its window 0
    cJSON_AddStringToObject(o, "heldout", !tc->heldout_dir ? "" : realpath(tc->heldout_dir, abs) ? abs : tc->heldout_dir);
    cJSON_AddNumberToObject(o, "ctx", ctx);
    cJSON_AddItemToObject(o, "layers", cJSON_CreateIntArray(tc->layers, tc->n_layers));
    cJSON *ix = cJSON_AddObjectToObject(o, "indexer");
    const IndexerConfig *c = &tc->icfg;
    cJSON_AddStringToObject(ix, "variant", c->variant == INDEXER_EXPANDED ? "expanded" : "collapsed");
    cJSON_AddNumberToObject(ix, "d_model", c->d_model);
    cJSON_AddNumberToObject(ix, "d_index", c->d_index);
    cJSON_AddNumberToObject(ix, "d_rope", c->d_rope);
    cJSON_AddNumberToObject(ix, "n_heads", c->n_heads);
    cJSON_AddStringToObject(ix, "key_norm", c->key_norm == INDEXER_NORM_RMS ? "rms" : c->key_norm == INDEXER_NORM_LAYER ? "layer" : "none");
    cJSON_AddNumberToObject(ix, "norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(ix, "rope_theta", c->rope_theta);
    cJSON *obj = cJSON_AddObjectToObject(o, "objective");
    cJSON_AddStringToObject(obj, "kind", indexer_objective_name(tc->objective.kind));
    cJSON_AddNumberToObject(obj, "bsel", tc->objective.bsel);
    cJSON_AddNumberToObject(obj, "block_weight", tc->objective.block_weight);
#define NUM(f) cJSON_AddNumberToObject(o, #f, (double)tc->f)
    NUM(steps), NUM(warmup), NUM(lr), NUM(min_lr_frac), NUM(weight_decay), NUM(beta1), NUM(beta2), NUM(eps);
    NUM(clip), NUM(seed), NUM(query_frac), NUM(min_pos), NUM(eval_every), NUM(recall_k), NUM(eval_queries);
    NUM(ckpt_every), NUM(schedule_steps), NUM(batch);
    if (tc->retrieval_mix > 0) NUM(retrieval_mix);  // absent: none (runs made before the mix existed)
#undef NUM
    cJSON_AddStringToObject(o, "device", tc->use_cuda ? "cuda" : "cpu");
    cJSON_AddStringToObject(o, "teacher_precision", tc->bf16_teacher ? "bf16" : "fp32");
    // On the GPU: the upload whose pass gives the teacher online, or that
    // rebuilds q/k from shards (written there only when not the fp32 of old runs).
    const int bprec = train_backbone_prec(tc);
    if (tc->use_cuda && (stream || bprec != TRAIN_PREC_FP32))
        cJSON_AddStringToObject(o, "backbone_precision", train_prec_name(bprec));
    // The ranks are not part of the run: any N dividing "batch" resumes it.
    return o;
}

// Fresh run: writes RUN/config.json. Resume: checks every stored setting
// against tc, except steps (a resume may extend the run: *old_steps gets the
// stored value) and the paths (train_config_load read them from the file, or
// the command line replaced one that no longer exists); then writes tc back.
// write = 0 (a data-parallel rank other than 0): the checks only.
static int run_config(const TrainConfig *tc, const char *fingerprint, int ctx, const TeacherStream *stream,
                      const TeacherStream *held_stream, int resume, int write, long *old_steps, Status *st) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", tc->run_dir);
    cJSON *want = config_json(tc, fingerprint, ctx, stream, held_stream);
    int rc = 0;
    *old_steps = tc->steps;
    if (resume) {
        char *text;
        size_t len;
        if ((rc = file_read_all(path, &text, &len, st))) goto done;
        cJSON *have = cJSON_ParseWithLength(text, len);
        free(text);
        if (!have) {
            rc = status_fail(st, "%s: not valid JSON", path);
            goto done;
        }
        const cJSON *hs = cJSON_GetObjectItemCaseSensitive(have, "steps");
        if (cJSON_IsNumber(hs)) *old_steps = (long)hs->valuedouble;
        const cJSON *w;
        cJSON_ArrayForEach(w, want) {
            static const char *const free_keys[] = {"steps", "model", "shards", "heldout"};
            int skip = 0;
            for (size_t i = 0; i < sizeof free_keys / sizeof free_keys[0]; i++) skip |= !strcmp(w->string, free_keys[i]);
            if (skip) continue;
            const cJSON *h = cJSON_GetObjectItemCaseSensitive(have, w->string);
            // A run from before objectives were recorded trained per query.
            if (!h && !strcmp(w->string, "objective") && tc->objective.kind == INDEXER_OBJ_QUERY) continue;
            // A run from before "batch" took one sequence per rank ("world_size", absent: 1).
            if (!h && !strcmp(w->string, "batch")) {
                const cJSON *ws = cJSON_GetObjectItemCaseSensitive(have, "world_size");
                if ((cJSON_IsNumber(ws) ? (int)ws->valuedouble : 1) == tc->batch) continue;
            }
            char *a = cJSON_PrintUnformatted(w), *b = h ? cJSON_PrintUnformatted(h) : NULL;
            int same = b && !strcmp(a, b);
            if (!same)
                rc = status_fail(st, "%s: \"%s\" is %s in the run but %s now; resume with the run's settings",
                                 path, w->string, b ? b : "absent", a);
            free(a), free(b);
            if (rc) break;
        }
        cJSON_Delete(have);
        if (rc) goto done;
    }
    if (write) {
        char *text = cJSON_Print(want);
        rc = atomic_write_file(path, text, strlen(text), st);
        free(text);
    }
done:
    cJSON_Delete(want);
    return rc;
}

int train_config_load(TrainConfig *tc, const char *run_dir, Status *st) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", run_dir);
    if (access(path, F_OK) != 0) return 1;
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, st)) return -1;
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    if (!o) return status_fail(st, "%s: not valid JSON", path);
    int rc = -1;
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(o, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(o, "format_version");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "spindle-run") || !cJSON_IsNumber(ver)) {
        status_fail(st, "%s: not a spindle run config", path);
        goto done;
    }
    if (ver->valuedouble != TRAIN_RUN_FORMAT) {
        status_fail(st, "%s: run format %g, this spindle resumes format %d (start a new run)", path, ver->valuedouble,
                    TRAIN_RUN_FORMAT);
        goto done;
    }
    // Strings: the three paths (held-out "" = none), the device, the teacher precision.
    const char *keys[5] = {"model", "shards", "heldout", "device", "teacher_precision"};
    const char *sv[5];
    for (int i = 0; i < 5; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, keys[i]);
        if (!cJSON_IsString(it) || strlen(it->valuestring) >= sizeof tc->path_store[0]) {
            status_fail(st, "%s: \"%s\" missing or not a string", path, keys[i]);
            goto done;
        }
        sv[i] = it->valuestring;
    }
    for (int i = 0; i < 3; i++) snprintf(tc->path_store[i], sizeof tc->path_store[i], "%s", sv[i]);
    tc->model_dir = tc->path_store[0], tc->shards_dir = sv[1][0] ? tc->path_store[1] : NULL;
    tc->heldout_dir = sv[2][0] ? tc->path_store[2] : NULL;
    tc->run_dir = run_dir;
    // A synthetic model ({name, seed}) instead of the model folder ("model" is then "").
    const cJSON *sy = cJSON_GetObjectItemCaseSensitive(o, "synthetic");
    tc->synthetic = NULL, tc->synthetic_seed = 1;
    if (sy) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(sy, "name"), *sd = cJSON_GetObjectItemCaseSensitive(sy, "seed");
        if (!cJSON_IsString(nm) || strlen(nm->valuestring) >= sizeof tc->synthetic_store || !cJSON_IsNumber(sd) ||
            sd->valuedouble < 0 || sd->valuedouble > 9007199254740992.0 || sd->valuedouble != floor(sd->valuedouble)) {
            status_fail(st, "%s: \"synthetic\" must be {name, seed}", path);
            goto done;
        }
        snprintf(tc->synthetic_store, sizeof tc->synthetic_store, "%s", nm->valuestring);
        tc->synthetic = tc->synthetic_store, tc->synthetic_seed = (uint64_t)sd->valuedouble;
        tc->model_dir = NULL;
    } else if (!sv[0][0]) {
        status_fail(st, "%s: \"model\" is empty and there is no \"synthetic\" model", path);
        goto done;
    }
    // Sequences per step; absent (runs from before it was recorded): one per rank.
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(o, "batch"), *ws = cJSON_GetObjectItemCaseSensitive(o, "world_size");
    tc->batch = cJSON_IsNumber(ws) ? (int)ws->valuedouble : 1;
    if (bt && (!cJSON_IsNumber(bt) || bt->valuedouble < 1 || bt->valuedouble > TRAIN_MAX_BATCH ||
               bt->valuedouble != floor(bt->valuedouble))) {
        status_fail(st, "%s: \"batch\" must be an integer in [1, %d]", path, TRAIN_MAX_BATCH);
        goto done;
    }
    if (bt) tc->batch = (int)bt->valuedouble;
    if ((strcmp(sv[3], "cpu") && strcmp(sv[3], "cuda")) || (strcmp(sv[4], "fp32") && strcmp(sv[4], "bf16"))) {
        status_fail(st, "%s: device \"%s\" / teacher_precision \"%s\" unknown", path, sv[3], sv[4]);
        goto done;
    }
    tc->use_cuda = !strcmp(sv[3], "cuda"), tc->bf16_teacher = !strcmp(sv[4], "bf16");
    const cJSON *bp = cJSON_GetObjectItemCaseSensitive(o, "backbone_precision");
    tc->backbone_prec = -1;  // absent: the mode's default (config_json writes it for every online GPU run)
    if (bp && (!cJSON_IsString(bp) || (tc->backbone_prec = train_prec_parse(bp->valuestring)) < 0)) {
        status_fail(st, "%s: \"backbone_precision\" is not fp32, mixed or bf16", path);
        goto done;
    }
    // Online mode: "online" {source, paths, ctx, ...}, and then no shards; held-out recall
    // online: "heldout_online" {source, paths, ...}, and then no held-out shards.
    const cJSON *on = cJSON_GetObjectItemCaseSensitive(o, "online");
    const cJSON *hon = cJSON_GetObjectItemCaseSensitive(o, "heldout_online");
    tc->online.n_text = 0, tc->online.ids_path = NULL, tc->ctx = 0;
    tc->heldout_stream.n_text = 0, tc->heldout_stream.ids_path = NULL;
    if (on || !tc->shards_dir) {
        const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(on, "ctx");
        if (tc->shards_dir || !cJSON_IsNumber(ctx) || ctx->valuedouble < 1 || ctx->valuedouble > 1 << 30 ||
            ctx->valuedouble != floor(ctx->valuedouble)) {
            status_fail(st, "%s: \"shards\" empty and \"online\" missing or incomplete (source, paths, ctx)", path);
            goto done;
        }
        if (stream_from_json(&tc->online, on, path, "online", st)) goto done;
        tc->ctx = (int)ctx->valuedouble;
    }
    if (hon && (tc->heldout_dir || stream_from_json(&tc->heldout_stream, hon, path, "heldout_online", st))) {
        if (tc->heldout_dir) status_fail(st, "%s: both \"heldout\" shards and \"heldout_online\"", path);
        goto done;
    }
    // Numbers: each must be present, finite and (for the integer ones) whole and in range.
    struct { const char *key; double *d; long *l; int *i; double lo, hi; } nums[] = {
        {"steps", NULL, &tc->steps, NULL, 1, 1 << 30},       {"warmup", NULL, &tc->warmup, NULL, 0, 1e9},
        {"schedule_steps", NULL, &tc->schedule_steps, NULL, 1, 1 << 30},
        {"lr", &tc->lr, NULL, NULL, 1e-9, 10},               {"min_lr_frac", &tc->min_lr_frac, NULL, NULL, 0, 1},
        {"weight_decay", &tc->weight_decay, NULL, NULL, 0, 10}, {"beta1", &tc->beta1, NULL, NULL, 0, 1},
        {"beta2", &tc->beta2, NULL, NULL, 0, 1},             {"eps", &tc->eps, NULL, NULL, 0, 1},
        {"clip", &tc->clip, NULL, NULL, 0, 1e9},             {"query_frac", &tc->query_frac, NULL, NULL, 1e-6, 1},
        {"min_pos", NULL, NULL, &tc->min_pos, 0, 1e9},       {"eval_every", NULL, NULL, &tc->eval_every, 1, 1 << 30},
        {"recall_k", NULL, NULL, &tc->recall_k, 1, 1 << 30}, {"eval_queries", NULL, NULL, &tc->eval_queries, 1, 1 << 20},
        {"ckpt_every", NULL, NULL, &tc->ckpt_every, 1, 1 << 30},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, nums[i].key);
        const double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
        if (!(v >= nums[i].lo && v <= nums[i].hi) || (!nums[i].d && v != floor(v))) {
            status_fail(st, "%s: \"%s\" missing or out of range", path, nums[i].key);
            goto done;
        }
        if (nums[i].d) *nums[i].d = v;
        else if (nums[i].l) *nums[i].l = (long)v;
        else *nums[i].i = (int)v;
    }
    const cJSON *mix = cJSON_GetObjectItemCaseSensitive(o, "retrieval_mix");  // optional
    if (mix && !(cJSON_IsNumber(mix) && mix->valuedouble > 0 && mix->valuedouble <= 1)) {
        status_fail(st, "%s: \"retrieval_mix\" must be a number in (0, 1]", path);
        goto done;
    }
    tc->retrieval_mix = mix ? mix->valuedouble : 0;
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(o, "seed");
    if (!cJSON_IsNumber(seed) || seed->valuedouble < 0 || seed->valuedouble > 9007199254740992.0 ||
        seed->valuedouble != floor(seed->valuedouble)) {
        status_fail(st, "%s: \"seed\" missing or not a non-negative integer", path);
        goto done;
    }
    tc->seed = (uint64_t)seed->valuedouble;
    // The objective ({kind, bsel, block_weight}); absent: per query (runs from before it was recorded).
    const cJSON *obj = cJSON_GetObjectItemCaseSensitive(o, "objective");
    tc->objective = indexer_objective_default();
    if (obj) {
        const cJSON *kind = cJSON_GetObjectItemCaseSensitive(obj, "kind");
        const cJSON *ob = cJSON_GetObjectItemCaseSensitive(obj, "bsel");
        const cJSON *ow = cJSON_GetObjectItemCaseSensitive(obj, "block_weight");
        const int k = cJSON_IsString(kind) ? indexer_objective_parse(kind->valuestring) : -1;
        if (k < 0 || !cJSON_IsNumber(ob) || ob->valuedouble < 1 || ob->valuedouble > 1 << 20 ||
            ob->valuedouble != floor(ob->valuedouble) || !cJSON_IsNumber(ow) || !(ow->valuedouble >= 0) ||
            ow->valuedouble > 1e6) {
            status_fail(st, "%s: \"objective\" must be {kind: query|block|mix, bsel: 1..%d, block_weight: 0..1e6}",
                        path, 1 << 20);
            goto done;
        }
        tc->objective.kind = (IndexerObjectiveKind)k;
        tc->objective.bsel = (int)ob->valuedouble, tc->objective.block_weight = ow->valuedouble;
    }
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(o, "layers"), *e;
    tc->n_layers = 0;
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) < 1 || cJSON_GetArraySize(layers) > TRAIN_MAX_LAYERS) {
        status_fail(st, "%s: \"layers\" missing or not a list of 1..%d layers", path, TRAIN_MAX_LAYERS);
        goto done;
    }
    cJSON_ArrayForEach(e, layers) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 100000 || e->valuedouble != floor(e->valuedouble)) {
            status_fail(st, "%s: \"layers\" holds something other than a layer index", path);
            goto done;
        }
        tc->layers[tc->n_layers++] = (int)e->valuedouble;
    }
    const cJSON *ix = cJSON_GetObjectItemCaseSensitive(o, "indexer");
    const cJSON *var = cJSON_GetObjectItemCaseSensitive(ix, "variant"), *kn = cJSON_GetObjectItemCaseSensitive(ix, "key_norm");
    if (!cJSON_IsObject(ix) || !cJSON_IsString(var) || !cJSON_IsString(kn)) {
        status_fail(st, "%s: \"indexer\" missing or incomplete", path);
        goto done;
    }
    IndexerConfig *c = &tc->icfg;
    if (!strcmp(var->valuestring, "collapsed")) c->variant = INDEXER_COLLAPSED;
    else if (!strcmp(var->valuestring, "expanded")) c->variant = INDEXER_EXPANDED;
    else c->variant = (IndexerVariant)-1;
    if (!strcmp(kn->valuestring, "none")) c->key_norm = INDEXER_NORM_NONE;
    else if (!strcmp(kn->valuestring, "rms")) c->key_norm = INDEXER_NORM_RMS;
    else if (!strcmp(kn->valuestring, "layer")) c->key_norm = INDEXER_NORM_LAYER;
    else c->key_norm = (IndexerNorm)-1;
    struct { const char *key; int *i; float *f; } ifs[] = {
        {"d_model", &c->d_model, NULL}, {"d_index", &c->d_index, NULL}, {"d_rope", &c->d_rope, NULL},
        {"n_heads", &c->n_heads, NULL}, {"norm_eps", NULL, &c->norm_eps}, {"rope_theta", NULL, &c->rope_theta},
    };
    for (size_t i = 0; i < sizeof ifs / sizeof ifs[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(ix, ifs[i].key);
        const double v = cJSON_IsNumber(it) ? it->valuedouble : NAN;
        if (!isfinite(v) || fabs(v) > 1e30 || (ifs[i].i && (v != floor(v) || fabs(v) > 1 << 30))) {
            status_fail(st, "%s: indexer \"%s\" missing or not a number", path, ifs[i].key);
            goto done;
        }
        if (ifs[i].i) *ifs[i].i = (int)v;
        else *ifs[i].f = (float)v;
    }
    if (indexer_config_check(c, st)) {
        Status inner = *st;
        status_fail(st, "%s: %s", path, inner.msg);
        goto done;
    }
    rc = 0;
done:
    cJSON_Delete(o);
    return rc;
}

int train_remove_stale_tmp(const char *run_dir, const char *cmd) {
    int n = 0;
    for (int sub = 0; sub < 2; sub++) {
        char dir[4200];
        snprintf(dir, sizeof dir, sub ? "%s/checkpoints" : "%s", run_dir);
        DIR *d = opendir(dir);
        if (!d) continue;
        struct dirent *e;
        while ((e = readdir(d))) {
            const size_t len = strlen(e->d_name);
            if (len <= 4 || strcmp(e->d_name + len - 4, ".tmp")) continue;
            char path[4500];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            Status st;
            if (remove_tree(path, &st) == 0) {
                fprintf(stderr, "spindle %s: removed %s, left by a killed run\n", cmd, path);
                n++;
            } else
                fprintf(stderr, "spindle %s: %s\n", cmd, st.msg);
        }
        closedir(d);
    }
    return n;
}

// Keeps only the log lines of steps ≤ step (after a resume from that step).
static int truncate_log(const char *path, long step, int csv, Status *st) {
    char *text;
    size_t len;
    if (access(path, F_OK) != 0) return 0;
    if (file_read_all(path, &text, &len, st)) return -1;
    AtomicFile af;
    if (atomic_open(&af, path, st)) {
        free(text);
        return -1;
    }
    int rc = 0, first = 1;
    for (char *line = text, *next; *line && !rc; line = next) {
        next = strchr(line, '\n');
        next = next ? next + 1 : line + strlen(line);
        long s = -1;
        if (csv) s = first ? -1 : strtol(line, NULL, 10);
        else {
            const char *p = strstr(line, "\"step\":");
            s = p ? strtol(p + 7, NULL, 10) : -1;
        }
        if ((csv && first) || (s >= 0 && s <= step)) rc = atomic_write(&af, line, (size_t)(next - line), st);
        first = 0;
    }
    free(text);
    if (rc) {
        atomic_abort(&af);
        return -1;
    }
    return atomic_commit(&af, st);
}

// A kv window's question and answer positions [q_start, T) join its sampled
// queries q[0..n) (ascending; each once). Returns the new count.
static int add_question(int *q, int n, int q_start, int T, int min_pos) {
    const int from = q_start > min_pos ? q_start : min_pos;
    int m = 0;
    while (m < n && q[m] < from) m++;
    for (int t = from; t < T; t++) q[m++] = t;
    return m > 0 ? m : n;
}

// Sampled query positions of one step: each t in [min_pos, T) with
// probability query_frac (at least one: T−1). block > 1 (the block
// objectives): each block [b·block, (b+1)·block) with probability query_frac,
// all its positions ≥ min_pos (at least one block: the last), so that every
// sampled block aggregates all its queries, as block-shared selection does.
// Advances the run's PRNG.
static int sample_queries(int *q, int T, int min_pos, double frac, int block, uint64_t *rng) {
    int n = 0;
    const int t0 = min_pos < T ? min_pos : 0;
    if (block <= 1) {
        for (int t = t0; t < T; t++)
            if (rng_uniform(rng) < frac) q[n++] = t;
        if (n == 0) q[n++] = T - 1;
        return n;
    }
    for (int b0 = t0 / block * block; b0 < T; b0 += block)
        if (rng_uniform(rng) < frac)
            for (int t = b0 > t0 ? b0 : t0; t < b0 + block && t < T; t++) q[n++] = t;
    if (n == 0)
        for (int t = (T - 1) / block * block > t0 ? (T - 1) / block * block : t0; t < T; t++) q[n++] = t;
    return n;
}

#ifdef SPINDLE_HAVE_CUDA
// --device cuda: the same step on the GPU (train_gpu.h). Parameters and AdamW
// moments live on the device between checkpoints (rs holds them only when
// saved). Online, the step runs inside the bf16 backbone's pass (GpuOnline);
// from shards (and for held-out shards), x and lse go up per layer and the
// teacher q/k are rebuilt there from x (fwd_cuda_layer_qk).
typedef struct {
    GpuIndexers ix;
    GpuOnline on;  // online training / held-out recall through the device tap (on.f: the tapped backbone)
    FwdCuda *f;    // the upload that rebuilds q/k from stored x (NULL: no shards read)
    int own_f;     // f was uploaded here (else it is the backbone's, freed by backbone_close)
    float *x, *lse, *tq, *tk;  // one stored layer on the device (with f)
} GpuTrain;

// backbone: the tapped forward's upload (online training or held-out recall
// online), or NULL. shards: x/lse are read from shards (training or held-out),
// so q/k are rebuilt on the device: the backbone's upload when there is one,
// else an upload of m made here (--backbone-precision; fp32 by default).
static int gpu_open(GpuTrain *g, const Model *m, const TrainConfig *tc, const RunState *rs,
                    const unsigned char *decay, int T, FwdCuda *backbone, int shards, Status *st) {
    memset(g, 0, sizeof *g);
    const ModelConfig *c = &m->cfg;
    if (shards) {
        if (backbone) g->f = backbone;
        else if (fwd_cuda_upload(m, (FwdPrecision)train_backbone_prec(tc), &g->f, st)) return -1;
        else g->own_f = 1;
        const size_t TT = (size_t)T;
        g->x = cuda_malloc(sizeof(float) * TT * c->hidden);
        g->lse = cuda_malloc(sizeof(float) * TT * c->n_heads);
        g->tq = cuda_malloc(sizeof(float) * TT * c->n_heads * c->head_dim);
        g->tk = cuda_malloc(sizeof(float) * TT * c->n_kv_heads * c->head_dim);
    }
    gpu_indexers_open(&g->ix, &tc->icfg, &tc->objective, rs, decay, T);
    if (backbone) {
        const GpuTeacher te = {c->n_heads, c->n_kv_heads, c->head_dim, (float)c->attn_scale, tc->bf16_teacher};
        gpu_online_init(&g->on, &g->ix, backbone, c, tc->layers, tc->n_layers, &te);
    }
    return 0;
}

// One stored layer's x, lse (host) onto the device and its teacher q/k rebuilt there.
static void gpu_load_layer(GpuTrain *g, const Model *m, int layer, const float *x, const float *lse, int T) {
    const ModelConfig *c = &m->cfg;
    cuda_to_device(g->x, x, sizeof(float) * (size_t)T * c->hidden);
    cuda_to_device(g->lse, lse, sizeof(float) * (size_t)T * c->n_heads);
    fwd_cuda_layer_qk(g->f, layer, g->x, T, g->tq, g->tk);
}

static void gpu_close(GpuTrain *g) {
    if (g->on.slot) gpu_online_free(&g->on);
    gpu_indexers_close(&g->ix);
    void *ps[] = {g->x, g->lse, g->tq, g->tk};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) cuda_free(ps[i]);
    if (g->own_f) fwd_cuda_free(g->f);
    memset(g, 0, sizeof *g);
}

// Device memory: the peak of spindle's own allocations since the run began
// (weights, indexers, the pass's activations, the loss's scratch) and what
// the device has in use now (cudaMemGetInfo: also the libraries' workspaces
// and what the stream-ordered pool keeps).
static void gpu_mem_note(char *buf, size_t len) {
    snprintf(buf, len, ", GPU peak %.2f GB (in use %.2f GB)", cuda_mem_peak() / 1e9, cuda_mem_device_used() / 1e9);
}
#endif

int train_run(const TrainConfig *tc, int resume, Status *st) {
    Model m;
    if (tc->synthetic && tc->shards_dir) return status_fail(st, "--synthetic trains online only (no --shards)");
    // A synthetic model holds host weights for the CPU twin only (the GPU fills its own).
    if (tc->synthetic ? synthetic_model(&m, tc->synthetic, tc->synthetic_seed, !tc->use_cuda, st)
                      : model_load(&m, tc->model_dir, st))
        return -1;
    const char *model_name = tc->synthetic ? tc->synthetic : tc->model_dir;  // for messages
    char fp[65];
    ShardSet train = {0}, held = {0};
    TeacherStream stream = {0}, hstream = {0};
    TeacherTap tap = {0}, htap = {0};
    const int held_online = tc->heldout_stream.ids_path || tc->heldout_stream.n_text;
    Backbone bb = {&m, NULL};
    const int online = !tc->shards_dir;
    // Data parallel: rank `rank` of `world` trains on the step's sequences cursor + rank + j·world
    // (j < batch / world); rank 0 writes.
    const int world = tc->dist ? tc->dist->world : 1, rank = tc->dist ? tc->dist->rank : 0, writer = rank == 0;
    const int B = tc->batch, Bl = B > 0 && B % world == 0 ? B / world : 0;
    Windows win = {&stream, tc->online.random, m.cfg.vocab, tc->ctx, tc->online.random_seed, NULL};
    Windows hwin = {&hstream, 0, m.cfg.vocab, 0, 0, NULL};
    win.mixed_g = hwin.mixed_g = -1;
    Tokenizer *mix_tok = NULL;
    RunState rs = {0};
    FILE *log = NULL, *csv = NULL;
    float *x = NULL, *lse = NULL, *tq = NULL, *tk = NULL, *grads = NULL, *cos_t = NULL, *sin_t = NULL;
    int *queries = NULL, *qsets = NULL, *nqs = NULL;
    unsigned char *decay = NULL;
    int rc = -1;
#ifdef SPINDLE_HAVE_CUDA
    GpuTrain gpu = {0};
#else
    if (tc->use_cuda) {
        status_fail(st, "--device cuda: built without CUDA; configure with -DSPINDLE_CUDA=ON");
        goto done;
    }
#endif
    if (world > 1 && !tc->use_cuda) {
        status_fail(st, "%d ranks: data-parallel training runs on the GPU only (--device cuda)", world);
        goto done;
    }
    if (Bl < 1 || B > TRAIN_MAX_BATCH) {
        status_fail(st, "batch %d is not a positive multiple (at most %d) of the %d rank(s)", B, TRAIN_MAX_BATCH, world);
        goto done;
    }
    if (tc->synthetic) synthetic_fingerprint(fp, tc->synthetic, tc->synthetic_seed);
    else if (model_fingerprint(tc->model_dir, &m.st, fp, st)) goto done;
    if (indexer_config_check(&tc->icfg, st)) goto done;
    if (tc->schedule_steps < 1 || tc->steps < 1) {
        status_fail(st, "%s: steps %ld / schedule_steps %ld must be positive", tc->run_dir, tc->steps, tc->schedule_steps);
        goto done;
    }
    if (tc->icfg.d_model != m.cfg.hidden) {
        status_fail(st, "indexer d_model %d differs from the model's hidden size %d", tc->icfg.d_model, m.cfg.hidden);
        goto done;
    }
    if (online) {
        if (tc->ctx < 1 || tc->ctx > m.cfg.max_pos) {
            status_fail(st, "--ctx %d is not in [1, %d] (%s/config.json: max_position_embeddings)", tc->ctx,
                        m.cfg.max_pos, model_name);
            goto done;
        }
        if (tc->online.random) win.buf = xmalloc(sizeof(int32_t) * (size_t)tc->ctx);
        else if (teacher_stream_load(&stream, &m.cfg, tc->model_dir, tc->online.ids_path ? NULL : tc->online.text, tc->online.n_text,
                                tc->online.ids_path, tc->ctx, 0, tc->online.bos, st))
            goto done;
    } else if (shardset_open(&train, tc->shards_dir, fp, &m.cfg, st))
        goto done;
    if (tc->retrieval_mix > 0) {  // kv tasks over the stream's own windows, tokenized with the model's tokenizer
        if (!online || tc->online.random || tc->synthetic || tc->objective.kind != INDEXER_OBJ_QUERY) {
            status_fail(st, "--retrieval-mix: online training on a real model's text with the query objective only "
                            "(not shards, --random-ids, --synthetic or a block objective)");
            goto done;
        }
        char tp[4200];
        snprintf(tp, sizeof tp, "%s/tokenizer.json", tc->model_dir);
        if (tok_load_model(&mix_tok, tp, m.cfg.vocab, st)) goto done;
        win.mix = tc->retrieval_mix, win.mix_seed = tc->seed ^ 0x6B7665697865646Bull, win.tok = mix_tok;
        win.mbuf = xmalloc(sizeof(int32_t) * (size_t)tc->ctx);
        // The first window's task, now: a context too short for 16 needles fails before the run starts.
        RetrievalTask probe;
        if (retrieval_make(mix_tok, stream.starts[0], (size_t)tc->ctx, RETRIEVAL_KV, tc->ctx, 0.5, 1, &probe, st)) {
            char why[sizeof st->msg];
            snprintf(why, sizeof why, "%s", st->msg);
            status_fail(st, "--retrieval-mix at --ctx %d: %s", tc->ctx, why);
            goto done;
        }
        retrieval_free(&probe);
    }
    if (tc->heldout_dir && shardset_open(&held, tc->heldout_dir, fp, &m.cfg, st)) goto done;
    const int T = online ? tc->ctx : train.hdr.ctx;
    if (held_online) {
        const TrainStream *hs = &tc->heldout_stream;
        if (teacher_stream_load(&hstream, &m.cfg, tc->model_dir, hs->ids_path ? NULL : hs->text, hs->n_text,
                                hs->ids_path, T, 1, hs->bos, st))
            goto done;
    }
    for (int i = 0; i < tc->n_layers; i++) {
        if (online && (tc->layers[i] >= m.cfg.n_layers || (i && tc->layers[i] <= tc->layers[i - 1]))) {
            status_fail(st, "%s/config.json: layer %d is not a layer of %s (it has %d), or the layers are not "
                            "ascending", tc->run_dir, tc->layers[i], model_name, m.cfg.n_layers);
            goto done;
        }
        if (tc->layers[i] >= 0 && tc->layers[i] < m.cfg.n_layers && m.cfg.layer_kinds[tc->layers[i]] != LAYER_FULL_ATTENTION) {
            status_fail(st, "%s/config.json: layer %d is not a full-attention layer of %s; indexers are trained for "
                            "full-attention layers only", tc->run_dir, tc->layers[i], model_name);
            goto done;
        }
        if (online) continue;
        int found = 0;
        for (int j = 0; j < train.hdr.n_layers; j++) found |= train.hdr.layers[j] == tc->layers[i];
        if (!found) {
            status_fail(st, "%s: layer %d is not stored in these shards", train.paths[0], tc->layers[i]);
            goto done;
        }
    }
    if (held.n && held.hdr.ctx != T) {
        status_fail(st, "%s: held-out ctx %d differs from the training %s' %d", held.paths[0], held.hdr.ctx,
                    online ? "--ctx" : "shards", T);
        goto done;
    }

    // Every size is known now: allocate before the run folder is touched, so
    // an impossible configuration never leaves one behind.
    const int L = tc->n_layers;
    const int64_t np = indexer_n_params(&tc->icfg);
    rs.n_layers = L, rs.n_params = np;
    rs.params = xcalloc((size_t)L, sizeof(float *));
    rs.m = xcalloc((size_t)L, sizeof(float *));
    rs.v = xcalloc((size_t)L, sizeof(float *));
    for (int i = 0; i < L; i++) {
        rs.params[i] = xmalloc(sizeof(float) * (size_t)np);
        rs.m[i] = xcalloc((size_t)np, sizeof(float));
        rs.v[i] = xcalloc((size_t)np, sizeof(float));
        indexer_init(&tc->icfg, rs.params[i], tc->seed * 1000003ull + (uint64_t)tc->layers[i]);
    }
    rs.rng = tc->seed;
    char log_path[4200], csv_path[4200];
    snprintf(log_path, sizeof log_path, "%s/log.jsonl", tc->run_dir);
    snprintf(csv_path, sizeof csv_path, "%s/metrics.csv", tc->run_dir);
    int64_t resumed_at = 0;
    if (resume) {
        int64_t step;
        // Only rank 0 renames refused checkpoints aside; every rank then takes the same newest valid one.
        const int lrc = run_state_load_newest(tc->run_dir, "train", tc->steps, writer, &rs, &step, st);
        if (lrc < 0) goto done;
        if (lrc == 0) {
            if (rs.cursor != rs.step * B || rs.tokens != rs.cursor * (int64_t)T) {
                status_fail(st, "%s: step %lld with data cursor %lld and %lld tokens does not fit this run (ctx %d, "
                            "batch %d: %d sequence(s) per step)", tc->run_dir, (long long)rs.step,
                            (long long)rs.cursor, (long long)rs.tokens, T, B, B);
                goto done;
            }
            resumed_at = rs.step;
        }
    } else if (writer && !dir_is_empty_or_missing(tc->run_dir)) {
        status_fail(st, "%s: run folder is not empty (use --resume to continue it)", tc->run_dir);
        goto done;
    }
    if (writer && !resume && mkdir(tc->run_dir, 0755) != 0 && errno != EEXIST) {
        status_fail(st, "%s: cannot create (%s)", tc->run_dir, strerror(errno));
        goto done;
    }
    long old_steps;
    if (run_config(tc, fp, T, online ? &stream : NULL, held_online ? &hstream : NULL, resume, writer, &old_steps,
                   st)) {
        if (writer && !resume) rmdir(tc->run_dir);  // only when still empty
        goto done;
    }
    if (resume && writer) {
        if (resumed_at > 0)
            fprintf(stderr, "spindle train: resuming %s at step %lld\n", tc->run_dir, (long long)resumed_at);
        else
            fprintf(stderr, "spindle train: %s has no checkpoint yet; starting at step 0\n", tc->run_dir);
        if (truncate_log(log_path, (long)rs.step, 0, st) || truncate_log(csv_path, (long)rs.step, 1, st)) goto done;
    }
    // Rank 0 writes the logs; the other ranks write to nowhere (/dev/null).
    log = fopen(writer ? log_path : "/dev/null", "a");
    csv = fopen(writer ? csv_path : "/dev/null", "a");
    if (!log || !csv) {
        status_fail(st, "%s: cannot append to its logs (%s)", tc->run_dir, strerror(errno));
        goto done;
    }
    if (writer && ftell(csv) == 0) fprintf(csv, "step,layer,kl,lr,grad_norm,tokens_per_s,recall_at_k\n");
    if (writer && resume && tc->steps != old_steps) {
        fprintf(stderr,
                "spindle train: %s: extending the run from %ld to %ld steps at step %lld; the cosine keeps its "
                "horizon of %ld steps, so steps past it run at the floor lr %.3g\n",
                tc->run_dir, old_steps, tc->steps, (long long)rs.step, tc->schedule_steps, tc->lr * tc->min_lr_frac);
        fprintf(log, "{\"event\":\"extend\",\"step\":%lld,\"steps_from\":%ld,\"steps_to\":%ld,\"schedule_steps\":%ld}\n",
                (long long)rs.step, old_steps, tc->steps, tc->schedule_steps);
        fflush(log);
    }

    // The parameters that decay: the projections, not the key norm's gain/bias.
    decay = xcalloc((size_t)np, 1);
    {
        IndexerTensor ts[INDEXER_MAX_TENSORS];
        int nt = indexer_param_tensors(ts, &tc->icfg);
        for (int i = 0; i < nt; i++)
            if (!strncmp(ts[i].name, "w", 1)) {
                int64_t n = ts[i].shape[0] * (ts[i].ndim > 1 ? ts[i].shape[1] : 1);
                memset(decay + ts[i].offset, 1, (size_t)n);
            }
    }
    const ModelConfig *c = &m.cfg;
    const int D = c->hidden, Hq = c->n_heads, Hkv = c->n_kv_heads, dh = c->head_dim, half = rope_rot_dims(c) / 2;
    // Host buffers: a stored layer's x and lse (shards), the rebuilt teacher q/k (CPU step).
    const int reads_shards = !online || held.n;
    if (reads_shards) {
        x = xmalloc(sizeof(float) * (size_t)T * D);
        lse = xmalloc(sizeof(float) * (size_t)T * Hq);
    }
    if (!tc->use_cuda) {
        tq = xmalloc(sizeof(float) * (size_t)T * Hq * dh);
        tk = xmalloc(sizeof(float) * (size_t)T * Hkv * dh);
    }
    // The CPU step's gradients: one buffer, or with several sequences per rank one per layer (summed over them).
    grads = xmalloc(sizeof(float) * (size_t)np * (tc->use_cuda || Bl == 1 ? 1 : (size_t)L));
    cos_t = xmalloc(sizeof(float) * (size_t)T * half);
    sin_t = xmalloc(sizeof(float) * (size_t)T * half);
    queries = xmalloc(sizeof(int) * (size_t)T);
    qsets = xmalloc(sizeof(int) * (size_t)T * (size_t)Bl);  // this rank's sequences' sampled queries
    nqs = xmalloc(sizeof(int) * (size_t)Bl);
    hwin.T = T;
    rope_tables(c, T, cos_t, sin_t);
    const float scale = (float)c->attn_scale;
    TrainSource src = {online ? NULL : &train, &win, &tap, &bb, -1, x, lse, T, D, Hq};
    TrainSource hsrc = {held_online ? NULL : &held, &hwin, &htap, &bb, -1, x, lse, T, D, Hq};
    // On the CPU a tap keeps each trained layer's x, lse, q and k of the window
    // on the host. On the GPU the step runs inside the pass on the device
    // arrays (train_gpu.h): online training taps the backbone (bf16 by
    // default); a shard run's held-out recall online taps the upload that
    // also rebuilds the shards' q/k (fp32 by default).
    if (online && !tc->use_cuda) teacher_tap_init(&tap, c, tc->layers, L, T, 1);
    if (held_online && !tc->use_cuda) teacher_tap_init(&htap, c, tc->layers, L, T, 1);
#ifdef SPINDLE_HAVE_CUDA
    if (tc->synthetic && tc->use_cuda) {  // bench's in-memory model: the weights filled on the device from the seed
        if (fwd_cuda_synthetic(&m, (FwdPrecision)train_backbone_prec(tc), tc->synthetic_seed, &bb.gpu, st)) goto done;
    } else
#endif
    if ((online || held_online) &&
        backbone_open(&bb, &m, tc->use_cuda, tc->use_cuda ? train_backbone_prec(tc) : TRAIN_PREC_FP32, st))
        goto done;
    if (held_online && writer)
        fprintf(stderr, "spindle train: held-out recall on window 0 of %s (%d tokens; %s)\n", hstream.source, T,
                tc->use_cuda ? "one tapped forward per measurement" : "one forward, kept");
    if (online && writer) {
        char what[sizeof stream.source + 96];
        if (tc->online.random)
            snprintf(what, sizeof what, "random token ids (seed %llu, vocabulary %d), windows of %d tokens",
                     (unsigned long long)tc->online.random_seed, m.cfg.vocab, T);
        else
            snprintf(what, sizeof what, "%zu window(s) of %d tokens from %s (%zu tokens)", stream.n_win, T,
                     stream.source, stream.n_ids);
        fprintf(stderr, "spindle train: online: %s%s%s; the backbone (%s) runs once per sequence, tapped at %d "
                        "layer(s), stopping after layer %d; %d sequence(s) per step\n",
                what, tc->synthetic ? "; synthetic model " : "", tc->synthetic ? tc->synthetic : "",
                backbone_describe(&bb), L, tc->layers[L - 1], B);
    } else if (writer && B > 1)
        fprintf(stderr, "spindle train: %d sequence(s) per step\n", B);

    // A fresh run checkpoints its initialisation as step 0: the untrained
    // indexer can be exported and evaluated as the floor.
    if (writer && rs.step == 0 && run_state_save(tc->run_dir, &rs, tc->keep_ckpts + 1, st)) goto done;
#ifdef SPINDLE_HAVE_CUDA
    if (tc->use_cuda) {
        if (gpu_open(&gpu, &m, tc, &rs, decay, T, bb.gpu, reads_shards, st)) goto done;
        if (tc->dist && tc->dist->nccl) gpu.ix.dist = tc->dist;  // an NCCL build all-reduces even for one rank
        if (Bl > 1) gpu_indexers_accumulators(&gpu.ix);  // one gradient sum per layer across the rank's sequences
        if (writer)
            fprintf(stderr, "spindle train: GPU: backbone weights %.2f GB (%s), %d indexer(s) of %lld parameters "
                            "with their AdamW moments in fp32\n",
                    (gpu.on.f ? fwd_cuda_weight_bytes(gpu.on.f) : 0) / 1e9 +
                        (gpu.own_f ? fwd_cuda_weight_bytes(gpu.f) : 0) / 1e9,
                    gpu.on.f ? fwd_cuda_describe(gpu.on.f) : fwd_cuda_describe(gpu.f), L, (long long)np);
        if (writer && gpu.ix.dist)
            fprintf(stderr, "spindle train: data parallel: %d rank(s) over NCCL, %d sequence(s) per step (rank r: "
                            "the sequences at cursor + r + %d j, j < %d); gradients all-reduced: %lld bytes per rank "
                            "per step (%d layer(s) x %lld fp32)\n", world, B, world, Bl, (long long)(4 * np * L), L,
                    (long long)np);
    }
#endif
    Progress pr;
    progress_start(&pr, "train", "step", tc->steps);
    pr.base = rs.step;
    long steps_here = 0;
    // For the summary: each layer's KL over the last KL_TAIL steps, its last held-out recall.
    enum { KL_TAIL = 10 };
    double kl_tail[TRAIN_MAX_LAYERS][KL_TAIL], last_rec[TRAIN_MAX_LAYERS];
    int have_rec = 0;
    char last_ckpt[4200] = "";
    while (rs.step < tc->steps) {
        const long step = (long)rs.step + 1;
        const double t0 = omp_get_wtime();
        const double lr = lr_at(step, tc->warmup, tc->schedule_steps, tc->lr, tc->min_lr_frac);
        const AdamW opt = {lr, tc->beta1, tc->beta2, tc->eps, tc->weight_decay};
        const IndexerObjective *obj = &tc->objective;
        // The query sets of the step's B sequences, drawn in sequence order by
        // every rank (the PRNG advances the same everywhere); this rank keeps
        // those of its own sequences, j = rank, rank + world, ...
        int nq = 0;  // this rank's queries over its sequences (the log's "queries")
        int n_mixed = 0;  // of its sequences, the kv windows (the log's "kv_windows", with a retrieval mix)
        for (int j = 0; j < B; j++) {
            const int mine = j % world == rank;
            int *dst = mine ? qsets + (size_t)(j / world) * T : queries;
            int n = sample_queries(dst, T, tc->min_pos, tc->query_frac,
                                   obj->kind == INDEXER_OBJ_QUERY ? 1 : obj->bsel, &rs.rng);
            const int mixed = online ? window_mixed(&win, rs.cursor + j, st) : 0;
            if (mixed < 0) goto done;
            if (mixed) n = add_question(dst, n, win.q_start, T, tc->min_pos), n_mixed += mine;
            if (mine) nqs[j / world] = n, nq += n;
        }
        // Per layer: the mean over this rank's sequences of the loss and its parts.
        double kl[TRAIN_MAX_LAYERS] = {0}, gn[TRAIN_MAX_LAYERS], kl_mean = 0, parts[TRAIN_MAX_LAYERS][2] = {{0}};
        int finite = 1, bad_layer = 0;
        double bad_kl = 0;
#ifdef SPINDLE_HAVE_CUDA
        if (tc->use_cuda && online) {  // every trained layer's loss inside one pass of the backbone per sequence
            for (int j = 0; j < Bl; j++) {
                const int32_t *ids = window_ids(&win, rs.cursor + rank + (int64_t)j * world, st);
                if (!ids) goto done;
                gpu_indexers_set_queries(&gpu.ix, qsets + (size_t)j * T, nqs[j]);
                // One sequence per rank: its step right in the pass. Several: their gradients summed, the step after.
                if (Bl == 1) gpu_online_train(&gpu.on, ids, T, nqs[j], &opt, step, tc->clip);
                else gpu_online_accumulate(&gpu.on, ids, T, nqs[j]);
                for (int i = 0; i < L; i++) {
                    kl[i] += gpu.on.kl[i] / Bl;
                    parts[i][0] += gpu.ix.parts[i][0] / Bl, parts[i][1] += gpu.ix.parts[i][1] / Bl;
                    if (!isfinite(gpu.on.kl[i]) && finite) finite = 0, bad_layer = tc->layers[i], bad_kl = gpu.on.kl[i];
                }
            }
            for (int i = 0; i < L; i++)  // Bl > 1: the mean over the rank's sequences, averaged over the ranks, the step
                gn[i] = Bl == 1 ? gpu.on.gn[i] : gpu_layer_apply(&gpu.ix, i, Bl, finite, &opt, step, tc->clip, NULL);
        }
#endif
        for (int j = 0; j < Bl && !(tc->use_cuda && online); j++) {
            const int64_t seq = rs.cursor + rank + (int64_t)j * world;
            const int *qj = qsets + (size_t)j * T;
#ifdef SPINDLE_HAVE_CUDA
            if (tc->use_cuda) gpu_indexers_set_queries(&gpu.ix, qj, nqs[j]);
#endif
            for (int i = 0; i < L; i++) {
                const float *xl, *ll, *ql, *kq;
                double kj, pj[2];
                float *gi = grads + (Bl == 1 || tc->use_cuda ? 0 : (size_t)i * np);  // the CPU step's gradients
                if (source_layer(&src, seq, i, tc->layers[i], &xl, &ll, &ql, &kq, st)) goto done;
#ifdef SPINDLE_HAVE_CUDA
                if (tc->use_cuda) {
                    gpu_load_layer(&gpu, &m, tc->layers[i], xl, ll, T);
                    const GpuTeacher te = {Hq, Hkv, dh, scale, tc->bf16_teacher};
                    if (Bl == 1)
                        kj = gpu_layer_step(&gpu.ix, i, gpu.x, gpu.tq, gpu.tk, gpu.lse, T, &te, nqs[j], &opt, step,
                                            tc->clip, &gn[i], NULL);
                    else
                        kj = gpu_layer_accumulate(&gpu.ix, i, gpu.x, gpu.tq, gpu.tk, gpu.lse, T, &te, nqs[j], NULL);
                    pj[0] = gpu.ix.parts[i][0], pj[1] = gpu.ix.parts[i][1];
                } else
#endif
                {
                    if (!ql) {
                        forward_layer_qk(&m, tc->layers[i], xl, T, cos_t, sin_t, tq, tk);
                        ql = tq, kq = tk;
                    }
                    // One sequence: the step right here. Several: layer i's gradients summed over them.
                    if (j == 0) memset(gi, 0, sizeof(float) * (size_t)np);
                    kj = indexer_objective_loss_cpu(gi, pj, &tc->icfg, obj, rs.params[i], xl, ql, kq, ll, T, Hq, Hkv,
                                                    dh, scale, qj, nqs[j]);
                }
                kl[i] += kj / Bl;
                parts[i][0] += pj[0] / Bl, parts[i][1] += pj[1] / Bl;
                if (!isfinite(kj)) {
                    status_fail(st, "step %ld, layer %d: the loss is not finite (%g); lower --lr", step, tc->layers[i], kj);
                    goto done;
                }
                if (!tc->use_cuda && Bl == 1) {
                    gn[i] = grad_clip(gi, (size_t)np, tc->clip);
                    adamw_step(&opt, step, rs.params[i], gi, rs.m[i], rs.v[i], (size_t)np, decay);
                }
            }
        }
        // Several sequences per rank: AdamW on the mean of their gradients (the GPU's online pass did it above).
        for (int i = 0; Bl > 1 && !(tc->use_cuda && online) && i < L; i++) {
#ifdef SPINDLE_HAVE_CUDA
            if (tc->use_cuda) {
                gn[i] = gpu_layer_apply(&gpu.ix, i, Bl, 1, &opt, step, tc->clip, NULL);
                continue;
            }
#endif
            float *gi = grads + (size_t)i * np;
            const float inv = (float)(1.0 / Bl);  // one fp32 multiply, as the GPU's mean
            for (int64_t p = 0; p < np; p++) gi[p] *= inv;
            gn[i] = grad_clip(gi, (size_t)np, tc->clip);
            adamw_step(&opt, step, rs.params[i], gi, rs.m[i], rs.v[i], (size_t)np, decay);
        }
        if (!finite) {
            status_fail(st, "step %ld, layer %d: the loss is not finite (%g); lower --lr", step, bad_layer, bad_kl);
            goto done;
        }
        for (int i = 0; i < L; i++) {
            kl_mean += kl[i] / L;
            kl_tail[i][steps_here % KL_TAIL] = kl[i];
        }
        rs.cursor += B;
        rs.step = step;
        rs.tokens += (int64_t)T * B;
        const double tps = (double)T * B / (omp_get_wtime() - t0);

        // Held-out recall@k of every layer's indexer.
        double rec[TRAIN_MAX_LAYERS];
        const int do_eval = writer && (held.n || held_online) && tc->eval_every > 0 &&
                            (step % tc->eval_every == 0 || step == tc->steps);
        if (do_eval) {
            // Evenly spaced queries from min_pos to T−1 (fixed, so curves compare).
            int ne = 0;
            for (int e = 0; e < tc->eval_queries; e++) {
                int t = tc->min_pos + (int)((int64_t)(T - 1 - tc->min_pos) * e / (tc->eval_queries > 1 ? tc->eval_queries - 1 : 1));
                if (t >= 0 && t < T && (ne == 0 || t > queries[ne - 1])) queries[ne++] = t;
            }
#ifdef SPINDLE_HAVE_CUDA
            if (tc->use_cuda) gpu_indexers_set_queries(&gpu.ix, queries, ne);
            if (tc->use_cuda && held_online) {  // one tapped pass over the held-out window
                gpu_online_recall(&gpu.on, hstream.starts[0], T, ne, tc->recall_k);
                memcpy(rec, gpu.on.rec, sizeof(double) * (size_t)L);
            }
#endif
            for (int i = 0; i < L && !(tc->use_cuda && held_online); i++) {
                const float *xl, *ll, *ql, *kq;
                if (source_layer(&hsrc, 0, i, tc->layers[i], &xl, &ll, &ql, &kq, st)) goto done;
#ifdef SPINDLE_HAVE_CUDA
                if (tc->use_cuda) {
                    gpu_load_layer(&gpu, &m, tc->layers[i], xl, ll, T);
                    rec[i] = indexer_mass_recall_cuda(NULL, &tc->icfg, gpu.ix.params[i], gpu.x, gpu.tq, gpu.tk,
                                                      gpu.lse, T, Hq, Hkv, dh, scale, gpu.ix.queries, ne, tc->recall_k);
                    continue;
                }
#endif
                if (!ql) {
                    forward_layer_qk(&m, tc->layers[i], xl, T, cos_t, sin_t, tq, tk);
                    ql = tq, kq = tk;
                }
                rec[i] = indexer_mass_recall_cpu(NULL, &tc->icfg, rs.params[i], xl, ql, kq, ll, T, Hq, Hkv, dh, scale,
                                                 queries, ne, tc->recall_k);
            }
        }
        char mem_note[96] = "", mem_json[96] = "";
#ifdef SPINDLE_HAVE_CUDA
        if (tc->use_cuda) {
            gpu_mem_note(mem_note, sizeof mem_note);
            snprintf(mem_json, sizeof mem_json, ",\"gpu_mem_peak_bytes\":%zu,\"gpu_mem_used_bytes\":%zu", cuda_mem_peak(),
                     cuda_mem_device_used());
        }
#endif
        for (int i = 0; i < L; i++) {
            fprintf(log, "{\"step\":%ld,\"layer\":%d,\"kl\":%.6g,\"lr\":%.6g,\"grad_norm\":%.6g,\"tokens_per_s\":%.1f,\"queries\":%d%s",
                    step, tc->layers[i], kl[i], lr, gn[i], tps, nq, mem_json);
            if (tc->retrieval_mix > 0) fprintf(log, ",\"kv_windows\":%d", n_mixed);
            if (obj->kind != INDEXER_OBJ_QUERY)
                fprintf(log, ",\"kl_query\":%.6g,\"kl_block\":%.6g", parts[i][0], parts[i][1]);
            if (do_eval) fprintf(log, ",\"recall_at_k\":%.6g,\"k\":%d", rec[i], tc->recall_k);
            fprintf(log, "}\n");
            fprintf(csv, "%ld,%d,%.6g,%.6g,%.6g,%.1f,", step, tc->layers[i], kl[i], lr, gn[i], tps);
            if (do_eval) fprintf(csv, "%.6g", rec[i]);
            fprintf(csv, "\n");
        }
        fflush(log), fflush(csv);
        if (writer && (step % tc->ckpt_every == 0 || step == tc->steps)) {
#ifdef SPINDLE_HAVE_CUDA
            if (tc->use_cuda) gpu_indexers_download(&gpu.ix, &rs);
#endif
            if (run_state_save(tc->run_dir, &rs, tc->keep_ckpts, st)) goto done;
            run_state_path(last_ckpt, sizeof last_ckpt, tc->run_dir, rs.step);
        }
        if (do_eval) {
            memcpy(last_rec, rec, sizeof(double) * (size_t)L);
            have_rec = 1;
        }
        steps_here++;
        if (writer) progress_update(&pr, step, "loss %.4f, lr %.3g, %.0f tokens/s%s", kl_mean, lr, tps, mem_note);
        if (tc->stop_after && steps_here >= tc->stop_after) break;
    }
    // The summary: where the run stands, each layer's final KL and held-out
    // recall, the checkpoint to export.
    // (rank 0 only: the ranks hold the same parameters)
    if (writer) {
        if (steps_here == 0)
            fprintf(stderr, "spindle train: %s: already complete at step %lld (a larger --steps extends it)\n",
                    tc->run_dir, (long long)rs.step);
        else
            fprintf(stderr, "spindle train: %s: %s at step %lld/%ld (%ld steps in %.1f s)\n", tc->run_dir,
                    rs.step == tc->steps ? "done" : "stopped", (long long)rs.step, tc->steps, steps_here,
                    progress_elapsed(&pr));
        const int tail = steps_here < KL_TAIL ? (int)steps_here : KL_TAIL;
        for (int i = 0; i < L && steps_here > 0; i++) {
            double kl_sum = 0;
            for (int j = 0; j < tail; j++) kl_sum += kl_tail[i][j];
            char recs[96];
            if (have_rec) snprintf(recs, sizeof recs, "held-out recall@%d %.4f", tc->recall_k, last_rec[i]);
            else snprintf(recs, sizeof recs, "held-out recall: %s", held.n || held_online ? "not measured in this run" : "no --heldout");
            fprintf(stderr, "spindle train: layer %d: final KL %.4f (mean of the last %d steps), %s\n", tc->layers[i],
                    kl_sum / tail, tail, recs);
        }
        if (!last_ckpt[0]) {
            int64_t newest;
            if (run_state_latest(tc->run_dir, &newest, st) == 0) run_state_path(last_ckpt, sizeof last_ckpt, tc->run_dir, newest);
        }
        if (last_ckpt[0]) fprintf(stderr, "spindle train: checkpoint %s\n", last_ckpt);
#ifdef SPINDLE_HAVE_CUDA
        if (tc->use_cuda && steps_here > 0)
            fprintf(stderr, "spindle train: GPU memory: peak %.2f GB of spindle's allocations, %.2f GB in use on the device\n",
                    cuda_mem_peak() / 1e9, cuda_mem_device_used() / 1e9);
#endif
    }
    rc = 0;
done:
#ifdef SPINDLE_HAVE_CUDA
    gpu_close(&gpu);
#endif
    if (log) fclose(log);
    if (csv) fclose(csv);
    for (int i = 0; rs.params && i < rs.n_layers; i++) free(rs.params[i]), free(rs.m[i]), free(rs.v[i]);
    free(rs.params), free(rs.m), free(rs.v);
    free(x), free(lse), free(tq), free(tk), free(grads), free(cos_t), free(sin_t), free(queries), free(decay);
    free(qsets), free(nqs), free(win.buf), free(win.mbuf);
    tok_free(mix_tok);
    shardset_close(&train);
    if (held.paths) shardset_close(&held);
    teacher_tap_free(&tap), teacher_tap_free(&htap);
    backbone_close(&bb);
    teacher_stream_free(&stream), teacher_stream_free(&hstream);
    model_free(&m);
    return rc;
}
