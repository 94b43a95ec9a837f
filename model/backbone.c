// backbone.c: see backbone.h.
#include "backbone.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

#ifdef SPINDLE_HAVE_CUDA
#include "forward_cuda.h"
#include "ops_cuda.h"
#endif

int backbone_flags(const char *cmd, const char *device, const char *precision, int *use_cuda, int *prec) {
    *use_cuda = 0;
    *prec = 0;
    if (device && strcmp(device, "cpu") && strcmp(device, "cuda")) {
        fprintf(stderr, "spindle %s: --device must be cpu or cuda (got \"%s\")\n", cmd, device);
        return 2;
    }
    *use_cuda = device && !strcmp(device, "cuda");
    if (precision && strcmp(precision, "fp32") && strcmp(precision, "mixed") && strcmp(precision, "bf16")) {
        fprintf(stderr, "spindle %s: --precision must be fp32, mixed or bf16 (got \"%s\")\n", cmd, precision);
        return 2;
    }
    if (precision && strcmp(precision, "fp32") && !*use_cuda) {
        fprintf(stderr, "spindle %s: --precision %s needs --device cuda (the CPU twin is fp32)\n", cmd, precision);
        return 2;
    }
    if (!*use_cuda) return 0;
#ifndef SPINDLE_HAVE_CUDA
    fprintf(stderr, "spindle %s: --device cuda: built without CUDA; configure with -DSPINDLE_CUDA=ON\n", cmd);
    return 1;
#else
    FwdPrecision p = FWD_FP32;
    if (precision) fwd_precision_parse(precision, &p);
    *prec = (int)p;
    char why[256];
    if (cuda_available(why, sizeof why) == 0) {
        fprintf(stderr, "spindle %s: --device cuda: no usable GPU (%s)\n", cmd, why);
        return 1;
    }
    return 0;
#endif
}

int backbone_open(Backbone *b, const Model *m, int use_cuda, int prec, Status *st) {
    b->m = m;
    b->gpu = NULL;
    if (!use_cuda) return 0;
#ifdef SPINDLE_HAVE_CUDA
    return fwd_cuda_upload(m, (FwdPrecision)prec, &b->gpu, st);
#else
    (void)prec;
    return status_fail(st, "--device cuda: built without CUDA; configure with -DSPINDLE_CUDA=ON");
#endif
}

void backbone_close(Backbone *b) {
#ifdef SPINDLE_HAVE_CUDA
    fwd_cuda_free(b->gpu);
#endif
    b->gpu = NULL;
}

const char *backbone_describe(const Backbone *b) {
#ifdef SPINDLE_HAVE_CUDA
    if (b->gpu) return fwd_cuda_describe(b->gpu);
#endif
    (void)b;
    return "cpu (fp32)";
}

void backbone_hidden(const Backbone *b, const int32_t *ids, int T, float *hidden, const ForwardOpts *o) {
#ifdef SPINDLE_HAVE_CUDA
    if (b->gpu) {
        fwd_cuda_hidden(b->gpu, ids, T, hidden, o);
        return;
    }
#endif
    forward_hidden(b->m, ids, T, hidden, o);
}

void backbone_lm_head(const Backbone *b, const float *hidden, int rows, float *logits) {
#ifdef SPINDLE_HAVE_CUDA
    if (b->gpu) {
        fwd_cuda_lm_head(b->gpu, hidden, rows, logits);
        return;
    }
#endif
    forward_lm_head(b->m, hidden, rows, logits);
}

int backbone_generate(const Backbone *b, const int32_t *ids, int T, const ForwardOpts *o, int max_new,
                      const int32_t *stop, int n_stop, int32_t *out, float *logits, GenTiming *tm, Status *st) {
#ifdef SPINDLE_HAVE_CUDA
    if (b->gpu) return fwd_cuda_generate(b->gpu, ids, T, o, max_new, stop, n_stop, out, logits, tm, st);
#endif
    return forward_generate(b->m, ids, T, o, max_new, stop, n_stop, out, logits, tm, st);
}

void backbone_score(const Backbone *b, const float *hd, const float *hs, int rows, const int32_t *next,
                    double *nll_d, double *nll_s, double *kl, int32_t *top1) {
    if (rows <= 0) return;
#ifdef SPINDLE_HAVE_CUDA
    if (b->gpu) {
        fwd_cuda_score(b->gpu, hd, hs, rows, next, nll_d, nll_s, kl, top1);
        return;
    }
#endif
    const int H = b->m->cfg.hidden, V = b->m->cfg.vocab, chunk = 128;
    const int n = rows < chunk ? rows : chunk;
    float *ld = xmalloc(sizeof(float) * (size_t)n * V), *ls = hs ? xmalloc(sizeof(float) * (size_t)n * V) : NULL;
    for (int r0 = 0; r0 < rows; r0 += n) {
        const int m = rows - r0 < n ? rows - r0 : n;
        forward_lm_head(b->m, hd + (size_t)r0 * H, m, ld);
        if (hs) {
            forward_lm_head(b->m, hs + (size_t)r0 * H, m, ls);
            next_token_stats_cpu(nll_d + r0, nll_s + r0, kl + r0, top1 + r0, ld, ls, next + r0, m, V);
        } else {
            next_token_stats_cpu(nll_d + r0, NULL, NULL, NULL, ld, NULL, next + r0, m, V);
        }
    }
    free(ld), free(ls);
}
