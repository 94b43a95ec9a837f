// commands.c: the subcommands behind `spindle CMD`. Each parses its flags,
// loads what it needs through the status-returning loaders, runs, and maps
// failures to exit codes (1 bad input/runtime, 2 bad usage).
#include "commands.h"

#include <errno.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <time.h>
#include <omp.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "args.h"
#include "backbone.h"
#include "cli_layers.h"
#include "cli_util.h"
#include "fileio.h"
#include "forward.h"
#include "corpus.h"
#include "env.h"
#include "eval.h"
#include "export.h"
#include "fingerprint.h"
#include "ids.h"
#include "model.h"
#include "npy.h"
#include "rope.h"
#include "ruler.h"
#include "tokenizer.h"
#ifdef SPINDLE_HAVE_CUDA
#include "cuda_device.h"
#include "forward_cuda.h"
#include "ops_cuda.h"
#endif

// The layers an indexer set covers, ascending; returns their count (out has n_layers entries).
static int indexer_layers(const IndexerSet *set, int n_layers, int *out) {
    int n = 0;
    for (int l = 0; l < n_layers && l < set->n_model_layers; l++)
        if (set->params[l]) out[n++] = l;
    return n;
}

// "5,11,17" into buf: layers[0..n).
static void layer_list(char *buf, size_t size, const int *layers, int n) {
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len + 12 < size; i++) len += (size_t)snprintf(buf + len, size - len, "%s%d", i ? "," : "", layers[i]);
}

// Says on stderr which attention ran: dense, the oracle (k, b_sel, every
// full-attention layer) or an indexer (its layers, k, b_sel; the other
// full-attention layers dense). Layers of other kinds run as they are.
static void describe_sparsity(const char *cmd, const Sparsity *sp, const IndexerSet *set, const char *ix_dir,
                              const ModelConfig *c, int T) {
    const int n_layers = c->n_layers;
    if (!sp) {
        fprintf(stderr, "spindle %s: attention: dense at all %d layers\n", cmd, n_layers);
        return;
    }
    int *ls = xmalloc(sizeof(int) * (size_t)(n_layers > 0 ? n_layers : 1));
    char list[4096], others[128] = "";
    const int n_full = config_full_layers(c->layer_kinds, n_layers, ls);
    if (n_full < n_layers)
        snprintf(others, sizeof others, "; the %d other layers run as they are", n_layers - n_full);
    const char *full = sp->topk >= T ? " (k >= the sequence length: every key kept, i.e. dense exactly)" : "";
    if (!set) {
        if (n_full == n_layers)
            fprintf(stderr, "spindle %s: attention: oracle at all %d layers, k %d, b_sel %d%s\n", cmd, n_layers,
                    sp->topk, sp->bsel, full);
        else {
            layer_list(list, sizeof list, ls, n_full);
            fprintf(stderr, "spindle %s: attention: oracle at the %d full-attention layers (%s) of %d, k %d, b_sel %d%s%s\n",
                    cmd, n_full, list, n_layers, sp->topk, sp->bsel, others, full);
        }
        free(ls);
        return;
    }
    const int nl = indexer_layers(set, n_layers, ls);
    layer_list(list, sizeof list, ls, nl);
    fprintf(stderr, "spindle %s: attention: indexer %s at %d of %d %slayers (%s), k %d, b_sel %d, the other %slayers "
                    "dense%s%s\n", cmd, ix_dir, nl, n_full, n_full == n_layers ? "" : "full-attention ", list, sp->topk,
            sp->bsel, n_full == n_layers ? "" : "full-attention ", others, full);
    free(ls);
}

// Hybrid supports (--recent / --sinks) run on the CPU twin only: with --device
// cuda, a usage error naming the flag, before any work. Returns 0 or 2.
static int hybrid_needs_cpu(const char *cmd, const Flag *flags, int nf) {
    const char *dev = args_get(flags, nf, "--device");
    if (!dev || strcmp(dev, "cuda")) return 0;
    const char *names[2] = {"--recent", "--sinks"};
    for (int i = 0; i < 2; i++)
        if (args_get(flags, nf, names[i])) {
            fprintf(stderr, "spindle %s: %s (hybrid supports) runs on the CPU twin only; the GPU forward does not take "
                            "it yet: use --device cpu\n", cmd, names[i]);
            return 2;
        }
    return 0;
}

// --indexer-base, in every command that takes --indexer (load_indexer).
#define INDEXER_BASE_HELP                                                                                             \
    "the checkpoint the indexer was trained on, when --model is it with another RoPE scaling (the same tensors; "  \
    "config.json differs only in rope_scaling, rope_parameters, rope_theta and max_position_embeddings: e.g. its " \
    "YaRN folder)"

// --indexer-base without --indexer: a usage error of cmd (exit 2).
static int indexer_base_check(const char *cmd, const Flag *flags, int nf) {
    if (!args_get(flags, nf, "--indexer-base") || args_get(flags, nf, "--indexer")) return 0;
    fprintf(stderr, "spindle %s: --indexer-base needs --indexer (it names the checkpoint that indexer was trained on)\n",
            cmd);
    return 2;
}

// Loads the exported indexer in dir for model m (its fingerprint must match,
// or with base_dir, the --indexer-base, base_dir's when model_dir is base_dir
// with another RoPE scaling; it may cover full-attention layers only).
static int load_indexer(IndexerSet *set, const char *dir, const Model *m, const char *model_dir, const char *base_dir,
                        Status *st) {
    char fp[65];
    if (base_dir ? model_rope_variant_of(model_dir, &m->st, base_dir, fp, st)
                 : model_fingerprint(model_dir, &m->st, fp, st))
        return -1;
    if (indexer_set_load(set, dir, m->cfg.n_layers, fp, st)) return -1;
    if (set->cfg.d_model != m->cfg.hidden) {
        status_fail(st, "%s: indexer d_model %d, model hidden size %d", dir, set->cfg.d_model, m->cfg.hidden);
        indexer_set_free(set);
        return -1;
    }
    for (int l = 0; l < set->n_model_layers && l < m->cfg.n_layers; l++)
        if (set->params[l] && m->cfg.layer_kinds[l] != LAYER_FULL_ATTENTION) {
            status_fail(st, "%s/config.json: holds an indexer for layer %d, a %s layer of %s; indexers cover "
                            "full_attention layers only", dir, l, config_layer_kind_name(m->cfg.layer_kinds[l]), model_dir);
            indexer_set_free(set);
            return -1;
        }
    return 0;
}

// --indexer-scores of cmd: a FwdIndexerScores into *out. It chooses how the GPU
// forward's indexer scores keys, so it needs --device cuda and --indexer.
// Returns 0 or the exit code 2 after a message.
static int indexer_scores_flag(const char *cmd, const char *value, int use_cuda, const char *ix_dir, int *out) {
    if (cli_indexer_scores(cmd, value, out)) return 2;
    if (value && (!use_cuda || !ix_dir)) {
        fprintf(stderr, "spindle %s: --indexer-scores needs --device cuda and --indexer (the CPU twin's indexer "
                        "scores in fp32)\n", cmd);
        return 2;
    }
    return 0;
}

int cmd_info(int argc, char **argv) {
    Flag flags[] = {
        {"--model", 1, "model folder (config.json + safetensors)", NULL},
        {"--indexer", 1, "exported indexer folder (spindle export) for this model: say which layers it covers", NULL},
        {"--indexer-base", 1, INDEXER_BASE_HELP, NULL},
    };
    int rc = cli_parse(argc, argv, flags, N_FLAGS(flags), "info", (const char *const[]){"--model", NULL});
    if (rc) return rc;
    if ((rc = indexer_base_check("info", flags, N_FLAGS(flags)))) return rc;
    Status st;
    Model m;
    if (model_load(&m, flags[0].value, &st)) return cli_fail("info", &st);
    IndexerSet set = {0};
    if (flags[1].value && load_indexer(&set, flags[1].value, &m, flags[0].value, flags[2].value, &st)) {
        model_free(&m);
        return cli_fail("info", &st);
    }
    const ModelConfig *c = &m.cfg;
    const RopeConfig *r = &c->rope;
    printf("model          %s\n", flags[0].value);
    printf("family         %s\n", config_family_name(c->family));
    printf("hidden         %d\n", c->hidden);
    {  // "18 (15 sliding_attention, 3 full_attention: 5 11 17)"
        int *full = xmalloc(sizeof(int) * (size_t)c->n_layers);
        const int n_full = config_full_layers(c->layer_kinds, c->n_layers, full);
        printf("layers         %d (", c->n_layers);
        for (int k = LAYER_FULL_ATTENTION + 1; k < LAYER_KIND_COUNT; k++) {
            int n = 0;
            for (int l = 0; l < c->n_layers; l++) n += c->layer_kinds[l] == (LayerKind)k;
            if (n) printf("%d %s, ", n, config_layer_kind_name((LayerKind)k));
        }
        printf("%d full_attention", n_full);
        if (n_full < c->n_layers) {
            printf(":");
            for (int i = 0; i < n_full; i++) printf(" %d", full[i]);
        }
        printf(")\n");
        free(full);
    }
    printf("heads          %d query, %d key/value (group %d), head_dim %d\n", c->n_heads,
           c->n_kv_heads, c->n_heads / c->n_kv_heads, c->head_dim);
    printf("intermediate   %d (%s)\n", c->intermediate, c->act == ACT_GELU_TANH ? "GeGLU, gelu_pytorch_tanh" : "SwiGLU");
    printf("vocab          %d\n", c->vocab);
    printf("context        %d (max_position_embeddings)\n", c->max_pos);
    printf("rope           %s, theta %g, rotated dims %d", config_rope_name(r->type), r->theta,
           rope_rot_dims(c));
    if (r->type != ROPE_DEFAULT) printf(", factor %g", r->factor);
    if (r->original_max_pos > 0 && r->type != ROPE_LINEAR) printf(", original context %g", r->original_max_pos);
    if (c->sliding_window) {
        const RopeConfig *rl = &c->rope_local;
        printf("; sliding layers: %s, theta %g", config_rope_name(rl->type), rl->theta);
        if (rl->type != ROPE_DEFAULT) printf(", factor %g", rl->factor);
    }
    printf("\n");
    if (c->sliding_window) printf("window         %d keys (sliding layers: t - %d < j <= t)\n", c->sliding_window, c->sliding_window);
    printf("score scale    %g%s\n", c->attn_scale,
           fabs(c->attn_scale * sqrt((double)c->head_dim) - 1) > 1e-12 ? " (not 1/sqrt(head_dim))" : " (1/sqrt(head_dim))");
    printf("norms          RMSNorm eps %g%s%s%s\n", c->rms_eps, c->qk_norm ? ", q/k RMSNorm per head" : "",
           c->post_norms ? ", post-attention and post-MLP norms" : "",
           c->family == FAMILY_GEMMA3 || c->attn_out_gate ? " (gains stored as w, applied as 1 + w)" : "");
    printf("biases         q/k/v %s, o %s, mlp %s\n", c->attention_bias ? "yes" : "no",
           c->o_bias ? "yes" : "no", c->mlp_bias ? "yes" : "no");
    printf("embeddings     %s", c->tie_embeddings ? "tied" : "untied");
    if (c->embed_scale != 1.0f) printf(", input scaled by %g", c->embed_scale);
    if (c->final_softcap > 0) printf(", logits soft-capped at %g", c->final_softcap);
    printf("\n");
    printf("layer kinds   ");
    static const char *const letter[LAYER_KIND_COUNT] = {"F", "S", "L"};
    for (int l = 0; l < c->n_layers; l++) printf(" %s", letter[c->layer_kinds[l]]);
    printf("  (F full_attention, GQA: the method acts here%s%s)\n", c->sliding_window ? "; S sliding_attention" : "",
           c->lin.n_v_heads ? "; L linear_attention, Gated DeltaNet" : "");
    if (c->attn_out_gate) printf("attn gate      output x sigmoid(gate), gate rows in q_proj\n");
    if (c->lin.n_v_heads)
        printf("deltanet       %d key / %d value heads, d_k %d, d_v %d, conv %d\n", c->lin.n_k_heads, c->lin.n_v_heads,
               c->lin.k_dim, c->lin.v_dim, c->lin.conv_kernel);
    if (c->layer_moe) {
        int n = 0;
        for (int l = 0; l < c->n_layers; l++) n += c->layer_moe[l];
        printf("moe            %d of %d layers: %d experts, top %d%s, expert FFN %d, shared expert %d\n", n,
               c->n_layers, c->moe.n_experts, c->moe.top_k, c->moe.norm_topk_prob ? " (renormalised)" : "",
               c->moe.intermediate, c->moe.shared_intermediate);
    }
    if (flags[1].value) {
        int *ls = xmalloc(sizeof(int) * (size_t)c->n_layers);
        const int nl = indexer_layers(&set, c->n_layers, ls);
        printf("indexer        %s: %d of %d full-attention layers:", flags[1].value, nl,
               config_full_layers(c->layer_kinds, c->n_layers, NULL));
        for (int i = 0; i < nl; i++) printf(" %d", ls[i]);
        printf(" (%s, d_I %d, default k %d, b_sel %d)\n", set.cfg.variant == INDEXER_EXPANDED ? "expanded" : "collapsed",
               set.cfg.d_index, set.default_k, set.default_bsel);
        free(ls);
    }
    printf("parameters     %lld (%.1fM)\n", (long long)m.n_params, m.n_params / 1e6);
    printf("weights        %d file(s), %d tensors, dtype %s\n", m.st.n_files, m.st.n_tensors,
           m.st.n_tensors ? m.st.tensors[0].dtype_name : "-");
#ifdef SPINDLE_HAVE_CUDA
    char gpu[256];
    cuda_device_describe(gpu, sizeof gpu);
    printf("cuda           %s\n", gpu);
#else
    printf("cuda           not built (configure with -DSPINDLE_CUDA=ON)\n");
#endif
    indexer_set_free(&set);
    model_free(&m);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    Flag flags[] = {
        {"--model", 1, "model folder holding tokenizer.json", NULL},
        {"--text", 1, "UTF-8 text file to encode", NULL},
        {"--out", 1, "write ids here (comma-separated) instead of stdout", NULL},
    };
    int rc = cli_parse(argc, argv, flags, N_FLAGS(flags), "tokenize", (const char *const[]){"--model", "--text", NULL});
    if (rc) return rc;
    Status st;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", flags[0].value);
    Tokenizer *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    size_t len, n = 0;
    rc = 1;
    if (!path_is_dir(flags[0].value)) {
        status_fail(&st, "%s: no such model folder", flags[0].value);
        goto done;
    }
    if (tok_load(&tok, path, &st) || file_read_all(flags[1].value, &text, &len, &st)) goto done;
    if (tok_encode(tok, text, len, &ids, &n, &st)) {
        fprintf(stderr, "spindle tokenize: %s: %s\n", flags[1].value, st.msg);
        tok_free(tok);
        free(text);
        return 1;
    }
    if (flags[2].value) {
        if (ids_write(flags[2].value, ids, n, &st)) goto done;
        fprintf(stderr, "spindle tokenize: %zu tokens -> %s\n", n, flags[2].value);
    } else {
        for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
        printf("\n");
    }
    rc = 0;
done:
    if (rc) cli_fail("tokenize", &st);
    tok_free(tok);
    free(text);
    free(ids);
    return rc;
}

int cmd_logits(int argc, char **argv) {
    Flag flags[] = {
        {"--model", 1, "model folder (config.json + safetensors)", NULL},
        {"--ids", 1, "token ids file (integers separated by commas/whitespace)", NULL},
        {"--out", 1, "output .npy, float32 [T, vocab]", NULL},
        {"--device", 1, "cpu (default) or cuda", NULL},
        {"--threads", 1, "OpenMP threads (default: all cores)", NULL},
        {"--profile", 0, "print time in GEMMs, attention and the rest", NULL},
        {"--oracle-k", 1, "attention-mass oracle: keep the top K keys (K >= 1)", NULL},
        {"--bsel", 1, "queries sharing one support (default 1: per query)", NULL},
        {"--indexer", 1, "trained indexer folder (spindle export): it picks the supports", NULL},
        {"--indexer-base", 1, INDEXER_BASE_HELP, NULL},
        {"--k", 1, "keys kept per support with --indexer (default: the export's default_k)", NULL},
        {"--precision", 1, "with --device cuda: fp32 (default, the reference), mixed (16-bit layer GEMMs) or bf16 (mixed + cuDNN bf16 attention)", NULL},
        {"--indexer-scores", 1, "with --device cuda and --indexer: how the indexer scores keys, fp32, tf32 or bf16 (default: the precision's: fp32 in fp32 and mixed; in bf16, tf32 per query and fused bf16 block sums block-shared)", NULL},
        {"--recent", 1, "hybrid supports: each query also keeps its W most recent keys (default 0; CPU only)", NULL},
        {"--sinks", 1, "hybrid supports: each query also keeps the first S keys (default 0; CPU only)", NULL},
    };
    int rc = cli_parse(argc, argv, flags, N_FLAGS(flags), "logits",
                       (const char *const[]){"--model", "--ids", "--out", NULL});
    if (rc) return rc;
    if ((rc = indexer_base_check("logits", flags, N_FLAGS(flags)))) return rc;
    const char *ok_s = args_get(flags, N_FLAGS(flags), "--oracle-k"), *bs_s = args_get(flags, N_FLAGS(flags), "--bsel");
    Sparsity sp = {0, 1};
    int sparse = ok_s != NULL;
    if ((ok_s && cli_positive("logits", "--oracle-k", ok_s, &sp.topk)) ||
        (bs_s && cli_positive("logits", "--bsel", bs_s, &sp.bsel)))
        return 2;
    const char *ix_dir = args_get(flags, N_FLAGS(flags), "--indexer"), *k_s = args_get(flags, N_FLAGS(flags), "--k");
    if (ix_dir && ok_s) {
        fprintf(stderr, "spindle logits: --oracle-k and --indexer are exclusive\n");
        return 2;
    }
    if ((bs_s || k_s) && !ok_s && !ix_dir) {
        fprintf(stderr, "spindle logits: --bsel and --k need --oracle-k or --indexer\n");
        return 2;
    }
    if (k_s && cli_positive("logits", "--k", k_s, &sp.topk)) return 2;
    {
        const char *names[2] = {"--recent", "--sinks"};
        int *dst[2] = {&sp.recent, &sp.sinks};
        for (int i = 0; i < 2; i++) {
            const char *val = args_get(flags, N_FLAGS(flags), names[i]);
            long long x;
            if (!val) continue;
            if (cli_int("logits", names[i], val, 0, 1 << 30, &x)) return 2;
            if (!ok_s && !ix_dir) {
                fprintf(stderr, "spindle logits: %s needs --oracle-k or --indexer\n", names[i]);
                return 2;
            }
            *dst[i] = (int)x;
        }
    }
    if ((rc = hybrid_needs_cpu("logits", flags, N_FLAGS(flags)))) return rc;
    // --device cuda: the forward on GPU 0 (model/forward_cuda.h).
    int use_cuda, prec;
    if ((rc = backbone_flags("logits", args_get(flags, N_FLAGS(flags), "--device"),
                             args_get(flags, N_FLAGS(flags), "--precision"), &use_cuda, &prec)))
        return rc;
    if ((rc = cli_threads("logits", args_get(flags, N_FLAGS(flags), "--threads")))) return rc;
    int ix_scores;
    if ((rc = indexer_scores_flag("logits", args_get(flags, N_FLAGS(flags), "--indexer-scores"), use_cuda, ix_dir,
                                  &ix_scores)))
        return rc;
    const char *out = flags[2].value;

    Status st;
    Model m;
    if (model_load(&m, flags[0].value, &st)) return cli_fail("logits", &st);
    int32_t *ids = NULL;
    size_t n;
    IndexerSet set = {0};
    if (ix_dir) {
        if (load_indexer(&set, ix_dir, &m, flags[0].value, args_get(flags, N_FLAGS(flags), "--indexer-base"), &st)) {
            model_free(&m);
            return cli_fail("logits", &st);
        }
        if (use_cuda && set.cfg.variant == INDEXER_EXPANDED) {
            status_fail(&st, "%s: the expanded indexer variant runs on the CPU twin only (use --device cpu)", ix_dir);
            indexer_set_free(&set);
            model_free(&m);
            return cli_fail("logits", &st);
        }
        if (!k_s) sp.topk = set.default_k;
        if (!bs_s) sp.bsel = set.default_bsel;
        sparse = 1;
    }
    if (ids_read(flags[1].value, m.cfg.vocab, &ids, &n, &st)) {
        indexer_set_free(&set);
        model_free(&m);
        return cli_fail("logits", &st);
    }
    const int T = (int)n, H = m.cfg.hidden, V = m.cfg.vocab;
    if (T > m.cfg.max_pos)
        fprintf(stderr, "spindle logits: warning: %d tokens exceed max_position_embeddings (%d)\n", T, m.cfg.max_pos);
    // A block (or a support) longer than the sequence is the whole sequence:
    // clamp, so the buffers are sized by T and not by the flag.
    if (sparse && sp.bsel > T) {
        fprintf(stderr, "spindle logits: --bsel %d is longer than the %d tokens of %s: using %d (one block)\n", sp.bsel,
                T, flags[1].value, T);
        sp.bsel = T;
    }
    if (sparse && sp.topk > T) sp.topk = T;  // k >= T keeps every key either way (dense exactly)
    describe_sparsity("logits", sparse ? &sp : NULL, ix_dir ? &set : NULL, ix_dir, &m.cfg, T);
    if (sparse && (sp.recent || sp.sinks))
        fprintf(stderr, "spindle logits: hybrid supports: each query also keeps its %d most recent keys and the first "
                        "%d keys\n", sp.recent, sp.sinks);

    NpyWriter w;
    rc = 1;
    float *hidden = NULL, *logits = NULL;
    ForwardProfile prof = {0};
    double t0 = omp_get_wtime();
    Backbone bb = {&m, NULL};
    if (backbone_open(&bb, &m, use_cuda, prec, &st)) goto done;
    const double t_upload = omp_get_wtime() - t0;
    if (npy_writer_open(&w, out, T, V, &st)) goto done;
    hidden = xmalloc(sizeof(float) * (size_t)T * H);
    double t_fwd = omp_get_wtime();
    const ForwardOpts fo = {.sparse = sparse ? &sp : NULL, .indexer = ix_dir ? &set : NULL, .prof = &prof,
                            .indexer_scores = ix_scores};
    backbone_hidden(&bb, ids, T, hidden, &fo);
    t_fwd = omp_get_wtime() - t_fwd;
    // The logits go out in row chunks: [T, vocab] never sits in memory at once.
    const int chunk = 256;
    logits = xmalloc(sizeof(float) * (size_t)chunk * V);
    double t_head = omp_get_wtime();
    for (int r = 0; r < T; r += chunk) {
        int rows = T - r < chunk ? T - r : chunk;
        backbone_lm_head(&bb, hidden + (size_t)r * H, rows, logits);
        if (npy_writer_rows(&w, logits, rows, &st)) {
            npy_writer_abort(&w);
            goto done;
        }
    }
    prof.lm_head = omp_get_wtime() - t_head;
    if (npy_writer_close(&w, &st)) goto done;
    double secs = omp_get_wtime() - t0;
    fprintf(stderr, "spindle logits: %d tokens -> %s [%d, %d] in %.2f s (%.1f tokens/s)%s\n", T, out, T, V, secs,
            T / secs, use_cuda ? ", cuda" : "");
    if (use_cuda) fprintf(stderr, "spindle logits: cuda %s\n", backbone_describe(&bb));
    if (flags[5].value && use_cuda)
        fprintf(stderr, "profile: weight upload %.3f s, backbone %.3f s (gemm %.3f, attention %.3f, other %.3f), "
                "lm_head+write %.3f s\n", t_upload, t_fwd, prof.gemm, prof.attention, prof.other, prof.lm_head);
    else if (flags[5].value)
        fprintf(stderr, "profile: gemm %.3f s, attention %.3f s, lm_head+write %.3f s, other %.3f s\n",
                prof.gemm, prof.attention, prof.lm_head, prof.other);
    rc = 0;
done:
    if (rc) cli_fail("logits", &st);
    free(hidden);
    free(logits);
    free(ids);
    backbone_close(&bb);
    indexer_set_free(&set);
    model_free(&m);
    return rc;
}

// Parses "0,0.5,1" into depths in [0, 1] (at most 64). Returns -1 after a message.
static int parse_depths(const char *value, double *out, int *n) {
    *n = 0;
    const char *p = value;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !(v >= 0 && v <= 1) || (*end && *end != ',') || *n == 64) {
            fprintf(stderr, "spindle eval: --depths must be comma-separated numbers in [0, 1] (got \"%s\")\n", value);
            return -1;
        }
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    return *n ? 0 : -1;
}

// Parses "passkey,multikey,kv". Returns -1 after a message.
static int parse_tasks(const char *value, RetrievalKind *out, int *n) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", value);
    *n = 0;
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == 8 || retrieval_kind_parse(tok, &out[*n]) != 0) {
            fprintf(stderr, "spindle eval: --tasks must list passkey, multikey and/or kv (got \"%s\")\n", value);
            return -1;
        }
        (*n)++;
    }
    return *n ? 0 : -1;
}

// The command line, each argument shell-quoted where it needs it (malloc'ed).
static char *command_line(int argc, char **argv) {
    size_t cap = 1;
    for (int i = 0; i < argc; i++) cap += 4 * strlen(argv[i]) + 3;
    char *out = xmalloc(cap), *p = out;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const int plain = *a && !a[strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%")];
        if (i) *p++ = ' ';
        if (plain) {
            p = stpcpy(p, a);
            continue;
        }
        *p++ = '\'';
        for (; *a; a++) {
            if (*a == '\'') p = stpcpy(p, "'\\''");
            else *p++ = *a;
        }
        *p++ = '\'';
    }
    *p = 0;
    return out;
}

// SHA-256 of data as 64 hex digits.
static int sha256_hex(const char *data, size_t n, char out[65]) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(data, n, md, &len, EVP_sha256(), NULL) != 1 || len != 32) return -1;
    for (unsigned i = 0; i < len; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}

// Whether text is what an ids file holds: only integers separated by commas
// and/or whitespace (at least one digit).
static int looks_like_ids(const char *text, size_t len) {
    int digits = 0;
    for (size_t i = 0; i < len; i++) {
        const char c = text[i];
        if (c >= '0' && c <= '9') digits = 1;
        else if (c != ',' && c != ' ' && c != '\t' && c != '\n' && c != '\r') return 0;
    }
    return digits;
}

// Two paths naming the same file: equal strings, or (both existing) the same inode.
static int same_file(const char *a, const char *b) {
    if (!strcmp(a, b)) return 1;
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// The progress of eval --tasks-file: after every configuration the rows so
// far go to PATH.partial beside each output (each through its .tmp), so that a
// run stopped later — killed at a time limit — keeps the configurations that
// finished, under names that say they are not the result. The outputs
// themselves are written once, at the end, and the .partial files removed.
typedef struct {
    const RulerTask *tasks;
    int n_tasks, done, stop_after;  // configurations written; stop_after > 0: end the process after that many
    const RulerProvenance *prov;
    char json[4200], md[4200], preds[4200];  // the .partial paths ("" where there is no output)
} RulerOut;

static int ruler_out_write(void *ctx, const RulerResult *rows, int n_rows, char *const *preds, Status *st) {
    RulerOut *w = ctx;
    w->done++;
    if (ruler_write(rows, n_rows, w->tasks, w->n_tasks, preds, w->prov, w->json, w->md, w->preds[0] ? w->preds : NULL,
                    st))
        return -1;
    if (w->stop_after && w->done >= w->stop_after) {
        fprintf(stderr, "spindle eval: --stop-after %d: stopping as if killed (%s holds the rows so far)\n",
                w->stop_after, w->json);
        _exit(0);
    }
    return 0;
}

// eval --refine N (two-stage supports): it needs an indexer and N ≥ every k.
// Nonzero after a message: a usage error.
static int refine_check(int refine, const char *indexer, const int *ks, int n_k) {
    if (!refine) return 0;
    const char *why = !indexer ? "it refines the indexer's rows: give --indexer" : NULL;
    for (int i = 0; !why && i < n_k; i++)
        if (ks[i] > refine) why = "every --k must be at most the candidates per block";
    if (why) fprintf(stderr, "spindle eval: --refine %d: %s\n", refine, why);
    return why != NULL;
}

// spindle eval --tasks-file: RULER tasks (scripts/ruler-tasks.py) answered by
// greedy decoding after each configuration's prefill (eval/ruler.h).
// --exec-block B (0: not given) of spindle eval: the GPU's bf16 tensor-core path, B a multiple of 16 up to
// 128, with sparse rows to execute. 0, or 1 after the message (usage).
static int exec_block_check(int exec_block, const Flag *flags, int nf, int n_k) {
    if (!exec_block) return 0;
    const char *dev = args_get(flags, nf, "--device"), *pr = args_get(flags, nf, "--precision");
    const char *why = !dev || strcmp(dev, "cuda") || !pr || strcmp(pr, "bf16")
                          ? "it runs with --device cuda --precision bf16 (the tensor-core path)"
                      : exec_block % 16 || exec_block > 128 ? "give a multiple of 16, at most 128"
                      : !n_k ? "it executes the sparse rows: give --k" : NULL;
    if (!why) return 0;
    fprintf(stderr, "spindle eval: --exec-block %d: %s\n", exec_block, why);
    return 1;
}

static int eval_tasks(int argc, char **argv) {
    Flag flags[] = {
        {"--model", 1, "model folder", NULL},
        {"--tasks-file", 1, "RULER tasks as JSON lines (scripts/ruler-tasks.py)", NULL},
        {"--k", 1, "keys kept per support, comma-separated (default: dense rows only)", NULL},
        {"--bsel", 1, "queries sharing one support, comma-separated (with --k; default 1)", NULL},
        {"--indexer", 1, "trained indexer folder (spindle export): adds indexer rows at every (k, b_sel)", NULL},
        {"--indexer-base", 1, INDEXER_BASE_HELP, NULL},
        {"--json", 1, "results as JSON (one object per configuration and task, with its provenance); while it runs, "
                      "the configurations done so far in JSON.partial (also MD.partial, PREDICTIONS.partial)", NULL},
        {"--md", 1, "results as a Markdown table (default: the --json path with .md)", NULL},
        {"--predictions", 1, "each greedy answer as JSON lines (configuration, task, pred, outputs, score)", NULL},
        {"--n-tasks", 1, "score only the first N tasks of the file", NULL},
        {"--modes", 1, "which rows, comma-separated: dense, oracle, indexer (default: all that the flags allow)", NULL},
        {"--refine", 1, "two-stage supports for the indexer rows at b_sel > 1: N candidate keys per block by its aggregate, then each query its own top-k of them (N >= every k)", NULL},
        {"--exec-block", 1, "with --device cuda --precision bf16: run the per-query rows (b_sel 1) as the unions of the supports of blocks of B consecutive queries on tensor cores (B a multiple of 16, at most 128): the same per-query attention in bf16 tiles, faster at long context (default: per-query gathers)", NULL},
        {"--stop-after", 1, "testing aid: stop (as if killed) after N configurations, leaving only the .partial files",
         NULL},
        {"--threads", 1, "OpenMP threads (default: all cores)", NULL},
        {"--device", 1, "cpu (default) or cuda: the prefill and the cached decoding steps on that twin", NULL},
        {"--precision", 1, "with --device cuda: fp32 (default), mixed or bf16 (the prefill's precision; decoding steps attend in fp32)", NULL},
    };
    const int nf = N_FLAGS(flags);
    char *cmdline = command_line(argc, argv);
    int rc = cli_parse(argc, argv, flags, nf, "eval", (const char *const[]){"--model", "--tasks-file", "--json", NULL});
    if (!rc) rc = indexer_base_check("eval", flags, nf);
    if (rc) {
        free(cmdline);
        return rc;
    }
    rc = 2;
    int ks[64], bsels[64] = {1}, n_k = 0, n_b = 1, n_max = 0, stop_after = 0, refine = 0, exec_block = 0;
    const char *v;
    int use_cuda = 0, prec = 0;
    if ((rc = backbone_flags("eval", args_get(flags, nf, "--device"), args_get(flags, nf, "--precision"), &use_cuda,
                             &prec))) {
        free(cmdline);
        return rc;
    }
    rc = 2;
    if (cli_threads("eval", args_get(flags, nf, "--threads")) ||
        ((v = args_get(flags, nf, "--k")) && cli_list("eval", "--k", v, 1, ks, &n_k)) ||
        ((v = args_get(flags, nf, "--bsel")) && cli_list("eval", "--bsel", v, 1, bsels, &n_b)) ||
        ((v = args_get(flags, nf, "--n-tasks")) && cli_positive("eval", "--n-tasks", v, &n_max)) ||
        ((v = args_get(flags, nf, "--stop-after")) && cli_positive("eval", "--stop-after", v, &stop_after)) ||
        ((v = args_get(flags, nf, "--refine")) && cli_positive("eval", "--refine", v, &refine)) ||
        ((v = args_get(flags, nf, "--exec-block")) && cli_positive("eval", "--exec-block", v, &exec_block)))
        goto usage;
    if (refine_check(refine, args_get(flags, nf, "--indexer"), ks, n_k)) goto usage;
    if (exec_block_check(exec_block, flags, nf, n_k)) goto usage;
    if (args_get(flags, nf, "--bsel") && !n_k) {
        fprintf(stderr, "spindle eval: --bsel needs --k\n");
        goto usage;
    }
    if (args_get(flags, nf, "--indexer") && !n_k) {
        fprintf(stderr, "spindle eval: --indexer needs --k (the indexer rows' supports)\n");
        goto usage;
    }
    unsigned modes = 0;  // 1u << EvalMode; 0: all
    if ((v = args_get(flags, nf, "--modes"))) {
        static const char *const names[] = {"dense", "oracle", "indexer"};
        int want[3] = {0};
        if (cli_names("eval", "--modes", v, names, 3, want)) goto usage;
        for (int m = 0; m < 3; m++) modes |= want[m] ? 1u << m : 0u;
        if ((want[EVAL_ORACLE] || want[EVAL_INDEXER]) && !n_k) {
            fprintf(stderr, "spindle eval: --modes oracle / indexer need --k\n");
            goto usage;
        }
        if (want[EVAL_INDEXER] && !args_get(flags, nf, "--indexer")) {
            fprintf(stderr, "spindle eval: --modes indexer needs --indexer\n");
            goto usage;
        }
    }
    const char *json = args_get(flags, nf, "--json"), *tasks_path = args_get(flags, nf, "--tasks-file");
    const char *preds_path = args_get(flags, nf, "--predictions");
    char md[4096];
    const char *dot = strrchr(json, '.');
    const int stem = dot && !strchr(dot, '/') ? (int)(dot - json) : (int)strlen(json);
    if (args_get(flags, nf, "--md")) snprintf(md, sizeof md, "%s", args_get(flags, nf, "--md"));
    else snprintf(md, sizeof md, "%.*s.md", stem, json);
    {
        const char *outs[3] = {json, md, preds_path}, *names[3] = {"--json", "--md", "--predictions"};
        for (int a = 0; a < 3; a++) {
            if (outs[a] && same_file(outs[a], tasks_path)) {
                fprintf(stderr, "spindle eval: %s %s is the --tasks-file input\n", names[a], outs[a]);
                goto usage;
            }
            for (int b = a + 1; b < 3; b++)
                if (outs[a] && outs[b] && same_file(outs[a], outs[b])) {
                    fprintf(stderr, "spindle eval: %s and %s would both write %s; give them different paths\n",
                            names[a], names[b], outs[a]);
                    goto usage;
                }
        }
    }
    Status st;
    Model m;
    memset(&m, 0, sizeof m);
    RulerTask *tasks = NULL;
    RulerResult *res = NULL;
    char **preds = NULL, fp[65], sum[65], *data = NULL;
    Tokenizer *tok = NULL;
    IndexerSet set = {0};
    Backbone bb = {0};
    int n_tasks = 0, n_loaded = 0, n_res = 0, loaded = 0;
    size_t len = 0;
    const char *ix_dir = args_get(flags, nf, "--indexer");
    int n_cfg = 0;  // ruler_run's configurations (the rows of preds), once the options are set
    rc = 1;
    if (model_load(&m, flags[0].value, &st)) goto done;
    loaded = 1;
    if (model_fingerprint(flags[0].value, &m.st, fp, &st)) goto done;
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", flags[0].value);
    if (tok_load_model(&tok, tok_path, m.cfg.vocab, &st)) goto done;
    if (file_read_all(tasks_path, &data, &len, &st)) goto done;
    if (sha256_hex(data, len, sum)) {
        status_fail(&st, "%s: cannot compute SHA-256 (libcrypto)", tasks_path);
        goto done;
    }
    // YaRN configs as Qwen documents them keep max_position_embeddings at the
    // original length: the scaled context is factor × original.
    int max_ctx = m.cfg.max_pos;
    if (m.cfg.rope.type == ROPE_YARN && m.cfg.rope.factor * m.cfg.rope.original_max_pos > max_ctx)
        max_ctx = (int)(m.cfg.rope.factor * m.cfg.rope.original_max_pos);
    if (ruler_load(tasks_path, m.cfg.vocab, max_ctx, &tasks, &n_loaded, &st)) goto done;
    n_tasks = n_max && n_max < n_loaded ? n_max : n_loaded;
    if (ix_dir && load_indexer(&set, ix_dir, &m, flags[0].value, args_get(flags, nf, "--indexer-base"), &st)) goto done;
    if (backbone_open(&bb, &m, use_cuda, prec, &st)) goto done;
    char date[32];
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    char rope[256];
    const RopeConfig *rp = &m.cfg.rope;
    if (rp->type == ROPE_YARN || rp->type == ROPE_LLAMA3)
        snprintf(rope, sizeof rope, "%s (factor %g, original %g, theta %g)", config_rope_name(rp->type), rp->factor,
                 rp->original_max_pos, rp->theta);
    else if (rp->type == ROPE_LINEAR)
        snprintf(rope, sizeof rope, "linear (factor %g, theta %g)", rp->factor, rp->theta);
    else snprintf(rope, sizeof rope, "default (theta %g)", rp->theta);
    const RulerProvenance prov = {flags[0].value, fp, rope, tasks_path, sum, ix_dir, ks, bsels, n_k, n_k ? n_b : 0,
                                  backbone_describe(&bb), cmdline, spindle_version(), date, exec_block};
    RulerOut w = {tasks, n_tasks, 0, stop_after, &prov, "", "", ""};
    snprintf(w.json, sizeof w.json, "%s.partial", json);
    snprintf(w.md, sizeof w.md, "%s.partial", md);
    if (preds_path) snprintf(w.preds, sizeof w.preds, "%s.partial", preds_path);
    const RulerOpts o = {ks, bsels, n_k, n_k ? n_b : 0, ix_dir ? &set : NULL, tok, 1, modes, ruler_out_write, &w,
                         refine, exec_block};
    n_cfg = ruler_n_configs(&o);
    if (ruler_run(&bb, tasks, n_tasks, &o, &res, &n_res, &preds, &st)) goto done;
    if (ruler_write(res, n_res, tasks, n_tasks, preds, &prov, json, md, preds_path, &st)) goto done;
    unlink(w.json), unlink(w.md);  // the result is complete: its progress files go
    if (preds_path) unlink(w.preds);
    for (int i = 0; i < n_res; i++)
        if (!strcmp(res[i].task, "average"))
            fprintf(stderr, "spindle eval: %s k %d bsel %d at %d: RULER average %.1f ± %.1f over %d instances "
                    "(per instance: prefill %.3f s, decoding %.3f s for %.1f tokens)\n",
                    ruler_mode_name(res[i].mode), res[i].k, res[i].bsel, res[i].ctx, res[i].score, res[i].ci95,
                    res[i].n, res[i].prefill_seconds, res[i].decode_seconds, res[i].new_tokens);
    fprintf(stderr, "spindle eval: %d task instances, %d rows -> %s, %s\n", n_tasks, n_res, json, md);
    rc = 0;
done:
    if (rc) cli_fail("eval", &st);
    if (preds) {
        for (size_t i = 0; i < (size_t)n_cfg * n_tasks; i++) free(preds[i]);
        free(preds);
    }
    free(res);
    ruler_free(tasks, n_loaded);
    indexer_set_free(&set);
    backbone_close(&bb);
    tok_free(tok);
    free(data);
    if (loaded) model_free(&m);
    free(cmdline);
    return rc;
usage:
    free(cmdline);
    return rc;
}

// --k-layers FILE: {"weights": [w_0, ...]}, one weight > 0 per full-attention
// layer (full[0..n_full) in order). Writes wl[full[j]] = w_j / mean(w) (so the
// total budget is the uniform one) and wn[j] the same, and says when the mean was not 1.
static int read_k_layers(const char *path, const int *full, int n_full, double *wl, double *wn, Status *st) {
    char *data = NULL;
    size_t len = 0;
    if (file_read_all(path, &data, &len, st)) return -1;
    cJSON *root = cJSON_ParseWithLength(data, len);
    free(data);
    if (!root) return status_fail(st, "%s: not valid JSON", path);
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(root, "weights");
    int rc = 0;
    if (!cJSON_IsArray(w)) {
        rc = status_fail(st, "%s: needs \"weights\": an array of one number per full-attention layer", path);
    } else if (cJSON_GetArraySize(w) != n_full) {
        rc = status_fail(st, "%s: \"weights\" has %d entries; the model has %d full-attention layers (one weight each)",
                         path, cJSON_GetArraySize(w), n_full);
    } else {
        double sum = 0;
        for (int j = 0; j < n_full && !rc; j++) {
            const cJSON *e = cJSON_GetArrayItem(w, j);
            const double x = cJSON_IsNumber(e) ? e->valuedouble : NAN;
            if (!(x > 0) || !isfinite(x))
                rc = status_fail(st, "%s: weights[%d] (layer %d) must be a finite number > 0", path, j, full[j]);
            else
                wn[j] = x, sum += x;
        }
        const double mean = rc ? 1 : sum / n_full;
        if (!rc && fabs(mean - 1) > 1e-6)
            fprintf(stderr, "spindle eval: %s: the weights' mean is %.6g, not 1: dividing by it (the total budget "
                            "stays the uniform one)\n", path, mean);
        for (int j = 0; j < n_full && !rc; j++) wn[j] /= mean, wl[full[j]] = wn[j];
    }
    cJSON_Delete(root);
    return rc;
}

int cmd_eval(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--tasks-file") || !strncmp(argv[i], "--tasks-file=", 13)) return eval_tasks(argc, argv);
    Flag flags[] = {
        {"--model", 1, "model folder", NULL},
        {"--text", 2, "held-out text file(s) or folder(s), tokenized and concatenated (or --ids)", NULL},
        {"--ids", 1, "token ids file instead of --text (integers separated by commas/whitespace)", NULL},
        {"--ctx", 1, "context length of each evaluated sequence (>= 2)", NULL},
        {"--k", 1, "keys kept per support, comma-separated, each < --ctx (e.g. 32,64,128)", NULL},
        {"--bsel", 1, "queries sharing one support, comma-separated, each <= --ctx (1 = per query)", NULL},
        {"--json", 1, "results as JSON (one object per configuration, with its provenance)", NULL},
        {"--csv", 1, "results as CSV (default: the --json path with .csv)", NULL},
        {"--md", 1, "results as a Markdown table (default: the --json path with .md)", NULL},
        {"--n-seq", 1, "evaluate at most this many sequences (default: all that fit)", NULL},
        {"--threads", 1, "OpenMP threads (default: all cores)", NULL},
        {"--tasks", 1, "retrieval tasks too: passkey, multikey and/or kv (haystacks from the same text; kv: spindle's own 16-needle task, the one train --retrieval-mix trains on)", NULL},
        {"--depths", 1, "needle depths in [0, 1], comma-separated (default 0,0.5,1)", NULL},
        {"--task-n", 1, "seeded instances per task and depth (default 4)", NULL},
        {"--seed", 1, "seed of the retrieval instances (default 1)", NULL},
        {"--indexer", 1, "trained indexer folder (spindle export): adds indexer rows at every (k, b_sel)", NULL},
        {"--indexer-base", 1, INDEXER_BASE_HELP, NULL},
        {"--device", 1, "cpu (default) or cuda", NULL},
        {"--precision", 1, "with --device cuda: fp32 (default), mixed or bf16 (see spindle logits)", NULL},
        {"--indexer-scores", 1, "with --device cuda and --indexer: how the indexer scores keys, fp32, tf32 or bf16 (default: the precision's: fp32 in fp32 and mixed; in bf16, tf32 per query and fused bf16 block sums block-shared)", NULL},
        {"--recent", 1, "hybrid supports: each query also keeps its W most recent keys, comma-separated W >= 0 (default 0; CPU only)", NULL},
        {"--sinks", 1, "hybrid supports: each query also keeps the first S keys, comma-separated S >= 0 (default 0; CPU only)", NULL},
        {"--union-bsel", 1, "per-query rows (b_sel 1): also measure the union of the supports of each block of B consecutive queries, B in {1,2,4,8,16,32,64} (with --device cuda: the indexer rows only)", NULL},
        {"--refine", 1, "two-stage supports for the indexer rows at b_sel > 1: each block takes N candidate keys by its aggregate, then each query its own top-k of them (N >= every k)", NULL},
        {"--exec-block", 1, "with --device cuda --precision bf16: run the per-query rows (b_sel 1) as the unions of the supports of blocks of B consecutive queries on tensor cores (B a multiple of 16, at most 128): the same per-query attention in bf16 tiles, faster at long context (default: per-query gathers)", NULL},
        {"--k-layers", 1, "per-layer budgets: JSON {\"weights\": [w, ...]}, one w > 0 per full-attention layer (normalised to mean 1); a row of k keeps round(k*w) keys per support at each layer (CPU only; scripts/calibrate-k-layers.py makes one)", NULL},
        {"--tasks-file", 1, "RULER tasks (scripts/ruler-tasks.py) instead of text: greedy answers scored by string match; its own flags: spindle eval --tasks-file F --help", NULL},
        {"--bos", 0, "each window is the model's BOS token (tokenizer_config.json bos_token) then ctx - 1 tokens of the text, the way the model met text in training (Gemma 3 sets add_bos_token); default: windows of ctx tokens of the text", NULL},
    };
    const int nf = N_FLAGS(flags);
    char *cmdline = command_line(argc, argv);  // before parsing rewrites --flag=value entries
    int rc = cli_parse(argc, argv, flags, nf, "eval", (const char *const[]){"--model", "--ctx", "--k", "--bsel", "--json", NULL});
    if (!rc) rc = indexer_base_check("eval", flags, nf);
    if (rc) {
        free(cmdline);
        return rc;
    }
    rc = 2;  // usage errors until the flags are checked
    const Flag *text = &flags[1];
    const char *ids_path = args_get(flags, nf, "--ids"), *v;
    int use_cuda, prec, ks[64], bsels[64], n_k, n_b, ctx, n_seq = 0;
    int recents[64] = {0}, sinks[64] = {0}, n_rec = 1, n_sink = 1, union_bsel = 0, refine = 0, exec_block = 0;
    RetrievalKind tasks[8];
    double depths[64] = {0, 0.5, 1};
    int n_tasks = 0, n_depths = 3, task_n = 4, seed = 1;
    if (!text->value == !ids_path) {
        fprintf(stderr, "spindle eval: give exactly one of --text or --ids\n");
        goto usage;
    }
    if (((v = args_get(flags, nf, "--recent")) && cli_list("eval", "--recent", v, 0, recents, &n_rec)) ||
        ((v = args_get(flags, nf, "--sinks")) && cli_list("eval", "--sinks", v, 0, sinks, &n_sink)) ||
        hybrid_needs_cpu("eval", flags, nf))
        goto usage;
    if (cli_threads("eval", args_get(flags, nf, "--threads")) ||
        backbone_flags("eval", args_get(flags, nf, "--device"), args_get(flags, nf, "--precision"), &use_cuda, &prec))
        goto usage;
    int ix_scores;
    if (indexer_scores_flag("eval", args_get(flags, nf, "--indexer-scores"), use_cuda, args_get(flags, nf, "--indexer"),
                            &ix_scores))
        goto usage;
    if (cli_positive("eval", "--ctx", args_get(flags, nf, "--ctx"), &ctx) ||
        cli_list("eval", "--k", args_get(flags, nf, "--k"), 1, ks, &n_k) ||
        cli_list("eval", "--bsel", args_get(flags, nf, "--bsel"), 1, bsels, &n_b) ||
        ((v = args_get(flags, nf, "--n-seq")) && cli_positive("eval", "--n-seq", v, &n_seq)) ||
        ((v = args_get(flags, nf, "--tasks")) && parse_tasks(v, tasks, &n_tasks)) ||
        ((v = args_get(flags, nf, "--depths")) && parse_depths(v, depths, &n_depths)) ||
        ((v = args_get(flags, nf, "--task-n")) && cli_positive("eval", "--task-n", v, &task_n)) ||
        ((v = args_get(flags, nf, "--seed")) && cli_positive("eval", "--seed", v, &seed)) ||
        ((v = args_get(flags, nf, "--union-bsel")) && cli_positive("eval", "--union-bsel", v, &union_bsel)) ||
        ((v = args_get(flags, nf, "--refine")) && cli_positive("eval", "--refine", v, &refine)) ||
        ((v = args_get(flags, nf, "--exec-block")) && cli_positive("eval", "--exec-block", v, &exec_block)))
        goto usage;
    if (refine_check(refine, args_get(flags, nf, "--indexer"), ks, n_k)) goto usage;
    if (exec_block_check(exec_block, flags, nf, n_k)) goto usage;
    if (union_bsel && 64 % union_bsel) {
        fprintf(stderr, "spindle eval: --union-bsel %d: give a divisor of 64 (1, 2, 4, 8, 16, 32 or 64)\n",
                union_bsel);
        goto usage;
    }
    const char *k_layers = args_get(flags, nf, "--k-layers");
    if (k_layers && use_cuda) {
        fprintf(stderr, "spindle eval: --k-layers: per-layer budgets run on the CPU twin only (--device cpu); the GPU "
                        "forward sizes every layer's supports by --k\n");
        goto usage;
    }
    if (ctx < 2) {
        fprintf(stderr, "spindle eval: --ctx must be at least 2 (eval scores each next token; got %d)\n", ctx);
        goto usage;
    }
    // A support of k >= ctx keys is every causal key: such a row would be dense,
    // labelled sparse. Mass recall is the recall at the row's k, so it is only
    // informative well below ctx: say so above ctx/2.
    for (int i = 0; i < n_k; i++) {
        if (ks[i] >= ctx) {
            fprintf(stderr, "spindle eval: --k %d is not below --ctx %d: every key would be kept (dense), so the "
                            "sparse rows would not be sparse; give each k < ctx\n", ks[i], ctx);
            goto usage;
        }
        if (2 * ks[i] >= ctx)
            fprintf(stderr, "spindle eval: note: --k %d keeps at least half of the %d keys: its mass recall and "
                            "sparsity say little\n", ks[i], ctx);
    }
    for (int i = 0; i < n_b; i++)
        if (bsels[i] > ctx) {
            fprintf(stderr, "spindle eval: --bsel %d is longer than --ctx %d (a block is at most one sequence)\n",
                    bsels[i], ctx);
            goto usage;
        }
    const char *json = args_get(flags, nf, "--json");
    char csv[4096], md[4096];
    const char *dot = strrchr(json, '.');
    int stem = dot && !strchr(dot, '/') ? (int)(dot - json) : (int)strlen(json);
    snprintf(csv, sizeof csv, "%s", args_get(flags, nf, "--csv") ? args_get(flags, nf, "--csv") : "");
    snprintf(md, sizeof md, "%s", args_get(flags, nf, "--md") ? args_get(flags, nf, "--md") : "");
    if (!csv[0]) snprintf(csv, sizeof csv, "%.*s.csv", stem, json);
    if (!md[0]) snprintf(md, sizeof md, "%.*s.md", stem, json);
    {
        const char *outs[3] = {json, csv, md}, *names[3] = {"--json", "--csv", "--md"};
        for (int a = 0; a < 3; a++)
            for (int b = a + 1; b < 3; b++)
                if (same_file(outs[a], outs[b])) {
                    fprintf(stderr, "spindle eval: %s and %s would both write %s (one would overwrite the other); "
                                    "give them different paths\n", names[a], names[b], outs[a]);
                    goto usage;
                }
        for (int a = 0; a < 3; a++) {
            if (ids_path && same_file(outs[a], ids_path)) {
                fprintf(stderr, "spindle eval: %s %s is the --ids input\n", names[a], outs[a]);
                goto usage;
            }
            for (int t = 0; text->value && t < text->n_values; t++)
                if (same_file(outs[a], text->values[t])) {
                    fprintf(stderr, "spindle eval: %s %s is a --text input\n", names[a], outs[a]);
                    goto usage;
                }
        }
    }

    Status st;
    Model m;
    memset(&m, 0, sizeof m);
    int32_t *ids = NULL;
    size_t n = 0;
    EvalResult *res = NULL;
    Tokenizer *tok = NULL;
    IndexerSet set = {0};
    Backbone bb = {&m, NULL};
    int n_res = 0, loaded = 0, n_files = 0, *full_layers = NULL, *ix_layers = NULL, n_ix = 0;
    char **files = NULL, (*sums)[65] = NULL, fp[65];
    double *layer_w = NULL, *full_w = NULL;
    rc = 1;
    if (model_load(&m, flags[0].value, &st)) goto done;
    loaded = 1;
    if (ctx > m.cfg.max_pos) {
        status_fail(&st, "--ctx %d is longer than the model supports (%s/config.json: max_position_embeddings %d)", ctx,
                    flags[0].value, m.cfg.max_pos);
        goto done;
    }
    if (model_fingerprint(flags[0].value, &m.st, fp, &st)) goto done;
    // The inputs: every file read, with its SHA-256; a --text file that holds
    // only integers is an ids file given to the wrong flag.
    if (ids_path) {
        files = xmalloc(sizeof *files);
        files[0] = strdup(ids_path), n_files = 1;
        SPINDLE_CHECK(files[0]);
    } else if (corpus_list_files((const char *const *)text->values, text->n_values, &files, &n_files, &st))
        goto done;
    sums = xcalloc((size_t)n_files, sizeof *sums);
    for (int i = 0; i < n_files; i++) {
        char *data = NULL;
        size_t len = 0;
        if (file_read_all(files[i], &data, &len, &st)) goto done;
        const int idsy = !ids_path && looks_like_ids(data, len);
        const int ok = !sha256_hex(data, len, sums[i]);
        free(data);
        if (!ok) {
            status_fail(&st, "%s: cannot compute SHA-256 (libcrypto)", files[i]);
            goto done;
        }
        if (idsy) {
            status_fail(&st, "%s: holds only integers separated by commas/whitespace, i.e. a token-ids file; pass it "
                             "with --ids (--text would tokenize the digits as text)", files[i]);
            goto done;
        }
    }
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", flags[0].value);
    const int bos = args_get(flags, nf, "--bos") != NULL;
    if ((text->value || n_tasks || bos) && tok_load_model(&tok, tok_path, m.cfg.vocab, &st)) goto done;
    int32_t bos_id = -1;
    int add_bos = 0;
    if (bos) {
        if (tok_model_bos(tok, flags[0].value, &bos_id, &add_bos, &st)) goto done;
        if (bos_id < 0) {
            status_fail(&st, "--bos: %s/tokenizer_config.json names no bos_token", flags[0].value);
            goto done;
        }
    } else {  // only the note: a tokenizer_config.json eval cannot read stays unread without --bos
        Status ignored;
        if (!tok_model_bos(NULL, flags[0].value, &bos_id, &add_bos, &ignored) && add_bos)
            fprintf(stderr, "spindle eval: note: %s/tokenizer_config.json sets add_bos_token (the model met text "
                            "after its BOS token); these windows start without it: --bos starts each with it\n",
                    flags[0].value);
    }
    if (ids_path ? ids_read(ids_path, m.cfg.vocab, &ids, &n, &st)
                 : corpus_load_tokens(tok, (const char *const *)text->values, text->n_values, &ids, &n, &st))
        goto done;
    const char *ix_dir = args_get(flags, nf, "--indexer");
    if (ix_dir && load_indexer(&set, ix_dir, &m, flags[0].value, args_get(flags, nf, "--indexer-base"), &st)) goto done;
    if (ix_dir && use_cuda && set.cfg.variant == INDEXER_EXPANDED) {
        status_fail(&st, "%s: the expanded indexer variant runs on the CPU twin only (use --device cpu)", ix_dir);
        goto done;
    }
    const int L = m.cfg.n_layers;
    full_layers = xmalloc(sizeof(int) * (size_t)L), ix_layers = xmalloc(sizeof(int) * (size_t)L);
    // The method acts at the full-attention layers only; other kinds run as they are.
    const int n_full = config_full_layers(m.cfg.layer_kinds, L, full_layers);
    if (ix_dir) {
        n_ix = indexer_layers(&set, L, ix_layers);
        fprintf(stderr, "spindle eval: indexer %s covers %d of %d full-attention layers (", ix_dir, n_ix, n_full);
        for (int i = 0; i < n_ix; i++) fprintf(stderr, "%s%d", i ? "," : "", ix_layers[i]);
        fprintf(stderr, "); indexer rows run the other full-attention layers dense, oracle rows are sparse at all %d\n",
                n_full);
    }
    if (n_full < L) {
        fprintf(stderr, "spindle eval: the oracle and indexers act at the %d full-attention layers (", n_full);
        for (int i = 0; i < n_full; i++) fprintf(stderr, "%s%d", i ? "," : "", full_layers[i]);
        fprintf(stderr, ") of %d; recall and sparsity average over those\n", L);
    }
    if (k_layers) {
        layer_w = xcalloc((size_t)L, sizeof *layer_w), full_w = xcalloc((size_t)(n_full ? n_full : 1), sizeof *full_w);
        if (read_k_layers(k_layers, full_layers, n_full, layer_w, full_w, &st)) goto done;
        fprintf(stderr, "spindle eval: per-layer budgets from %s: k %d keeps", k_layers, ks[0]);
        for (int j = 0; j < n_full; j++) fprintf(stderr, "%s%d", j ? "," : " ", eval_layer_k(ks[0], full_w[j]));
        fprintf(stderr, " keys at layers");
        for (int j = 0; j < n_full; j++) fprintf(stderr, "%s%d", j ? "," : " ", full_layers[j]);
        fprintf(stderr, "\n");
    }
    if (backbone_open(&bb, &m, use_cuda, prec, &st)) goto done;
    EvalOpts o = {ctx, ks, n_k, bsels, n_b, ix_dir ? &set : NULL, n_seq, 1, tok, tasks, n_tasks, depths,
                  n_depths, task_n, (uint64_t)seed, bb.gpu, ix_scores};
    o.layer_weights = layer_w;
    o.recents = recents, o.n_recent = n_rec, o.sinks = sinks, o.n_sinks = n_sink;
    o.union_bsel = union_bsel;
    o.exec_block = exec_block;
    o.refine = refine;
    o.bos_windows = bos, o.bos_id = bos_id;
    if (eval_run(&m, ids, n, &o, &res, &n_res, &st)) goto done;
    char date[32];
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    const char **sum_ptrs = xmalloc(sizeof(char *) * (size_t)n_files);
    for (int i = 0; i < n_files; i++) sum_ptrs[i] = sums[i];
    const char *prec_name = !use_cuda ? "fp32" : args_get(flags, nf, "--precision") ? args_get(flags, nf, "--precision") : "fp32";
    // What ran the sparse rows on the GPU (model/forward_cuda.c attend_supports): in bf16 the tensor-core
    // kernels, with their own statistics unless SPINDLE_STATS_FP32=1; else the fp32 support kernel.
    char execution[256];
    if (strcmp(prec_name, "bf16"))
        snprintf(execution, sizeof execution, "every sparse row on the fp32 support kernel");
    else if (env_long("SPINDLE_STATS_FP32", 0, 0, 1))
        snprintf(execution, sizeof execution, "every sparse row and its recall on the fp32 support kernel over the "
                                              "bf16 pass's q, k (SPINDLE_STATS_FP32=1)");
    else if (exec_block)
        snprintf(execution, sizeof execution, "bf16 tensor cores, per-query rows as unions of blocks of %d queries; "
                                              "recall from the kernels' own rows", exec_block);
    else
        snprintf(execution, sizeof execution, "block-shared rows on bf16 tensor cores, per-query rows by gathers on "
                                              "the fp32 support kernel; recall from the kernels that ran each row");
    const EvalProvenance prov = {flags[0].value, fp, L, full_layers, n_full, ix_dir, ix_layers, n_ix,
                                 ids_path ? "ids" : "text", (const char *const *)files, sum_ptrs, n_files,
                                 ks, bsels, n_k, n_b, ctx, use_cuda ? "cuda" : "cpu", prec_name, cmdline,
                                 spindle_version(), date, recents, sinks, n_rec, n_sink, k_layers, full_w,
                                 bos ? bos_id : -1, use_cuda ? execution : NULL};
    const int wrc = eval_write(res, n_res, &prov, json, csv, md, &st);
    free(sum_ptrs);
    if (wrc) goto done;
    const int n_lm = 1 + n_k * n_b * n_rec * n_sink * (ix_dir ? 2 : 1);
    fprintf(stderr, "spindle eval: %d configurations on %d sequence(s) of %d tokens, %d retrieval rows -> %s, %s, %s\n",
            n_lm, res[0].n_seq, ctx, n_res - n_lm, json, csv, md);
    rc = 0;
done:
    if (rc) cli_fail("eval", &st);
    backbone_close(&bb);
    indexer_set_free(&set);
    tok_free(tok);
    free(res);
    free(ids);
    free(full_layers), free(ix_layers), free(sums), free(layer_w), free(full_w);
    if (files) corpus_free_files(files, n_files);
    if (loaded) model_free(&m);
    free(cmdline);
    return rc;
usage:
    free(cmdline);
    return rc;
}
