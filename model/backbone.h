// backbone.h: one forward pass on whichever twin runs it — the CPU twin
// (model/forward.h) or, when a GPU copy of the weights was uploaded, the CUDA
// twin (model/forward_cuda.h). Callers that take `--device` hold a Backbone
// and never branch on the device themselves.
#pragma once
#include <stdint.h>

#include "forward.h"
#include "model.h"
#include "status.h"

struct FwdCuda;

typedef struct {
    const Model *m;
    struct FwdCuda *gpu;  // NULL: the CPU twin
} Backbone;

// --device (NULL or "cpu" | "cuda") and --precision (NULL or "fp32" | "mixed" |
// "bf16", GPU only) of command cmd: 0 when usable, else the exit code after a
// message naming the flag — 2 for bad usage, 1 for a build without CUDA or a
// machine without a GPU. *use_cuda, *prec (an FwdPrecision; fp32 by default).
int backbone_flags(const char *cmd, const char *device, const char *precision, int *use_cuda, int *prec);

// b on the CPU (use_cuda = 0) or with m's weights uploaded to GPU 0 in
// precision prec. Returns 0, or -1 with st saying why. Close with backbone_close.
int backbone_open(Backbone *b, const Model *m, int use_cuda, int prec, Status *st);
void backbone_close(Backbone *b);
// "cpu" or the GPU path's description.
const char *backbone_describe(const Backbone *b);

void backbone_hidden(const Backbone *b, const int32_t *ids, int T, float *hidden, const ForwardOpts *o);
void backbone_lm_head(const Backbone *b, const float *hidden, int rows, float *logits);
// Greedy decoding (forward_generate, model/forward.h) on b's twin; tm may be NULL.
int backbone_generate(const Backbone *b, const int32_t *ids, int T, const ForwardOpts *o, int max_new,
                      const int32_t *stop, int n_stop, int32_t *out, float *logits, GenTiming *tm, Status *st);

// Next-token scores of rows positions (the scoring of `spindle eval`):
// hd[rows, hidden] dense final hidden states, hs the same from a sparse pass
// (or NULL: dense only), next[rows] the token that follows each position
// (each < vocab). Host arrays in and out, [rows] each. Per row i, in double:
//   nll_d[i] = lse_d − logit_d[next_i]
// and when hs is given (else nll_s, kl, top1 are not touched and may be NULL):
//   nll_s[i] = lse_s − logit_s[next_i]
//   kl[i]    = KL(dense ‖ sparse) of the two next-token distributions (≥ 0: clamped)
//   top1[i]  = 1 when the two argmaxes (ties: the lowest index) are equal, else 0.
// Logits come from the lm_head in row chunks (fp32 in every precision) and never
// exist for all rows at once. CPU: forward_lm_head then next_token_stats_cpu
// (kernels/ops.h); GPU: fwd_cuda_score, where the logits stay on the device.
void backbone_score(const Backbone *b, const float *hd, const float *hs, int rows, const int32_t *next,
                    double *nll_d, double *nll_s, double *kl, int32_t *top1);
