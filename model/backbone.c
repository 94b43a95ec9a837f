// backbone.c: see backbone.h.
#include "backbone.h"

#include <stdio.h>
#include <string.h>

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
