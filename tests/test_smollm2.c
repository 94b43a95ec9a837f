// test_smollm2: the converted SmolLM2-135M against HF transformers on 512
// tokens of real text (tests/goldens/smollm2, made by scripts/check-smollm2.py).
//   test_smollm2 SPINDLE_BIN MODEL_DIR REF_DIR OUT_DIR
// The reference keeps, per position, the argmax id and logit, the
// log-sum-exp over the vocabulary, and the logits at 64 fixed probe ids.
// Exits 77 (skipped) when MODEL_DIR is absent.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy.h"

static int load_f32(const char *dir, const char *name, float **out, int64_t *shape) {
    char p[4096];
    int nd;
    Status st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (npy_read_f32(p, out, shape, &nd, &st)) return fprintf(stderr, "%s\n", st.msg), -1;
    return 0;
}

static int load_i32(const char *dir, const char *name, int32_t **out, int64_t *shape) {
    char p[4096];
    int nd;
    Status st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    if (npy_read_i32(p, out, shape, &nd, &st)) return fprintf(stderr, "%s\n", st.msg), -1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 5) return fprintf(stderr, "usage: test_smollm2 SPINDLE MODEL REF OUT\n"), 2;
    const char *bin = argv[1], *model = argv[2], *ref = argv[3], *outdir = argv[4];
    char p[4096], cmd[16384];
    snprintf(p, sizeof p, "%s/model.safetensors", model);
    if (access(p, R_OK) != 0) {
        printf("SKIPPED: %s not found (scripts/get-smollm2.sh builds it)\n", p);
        return 77;
    }
    char out[4096];
    snprintf(out, sizeof out, "%s/smollm2_logits.npy", outdir);
    snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --ids '%s/ids.txt' --out '%s'", bin, model, ref, out);
    if (system(cmd) != 0) return fprintf(stderr, "FAIL: %s\n", cmd), 1;

    float *logits, *am_logit, *lse, *probe;
    int32_t *am, *probe_ids;
    int64_t s_log[4], s_am[4], s_aml[4], s_lse[4], s_probe[4], s_pid[4];
    int nd;
    Status st;
    if (npy_read_f32(out, &logits, s_log, &nd, &st)) return fprintf(stderr, "%s\n", st.msg), 1;
    if (load_i32(ref, "argmax.npy", &am, s_am) || load_f32(ref, "argmax_logit.npy", &am_logit, s_aml) ||
        load_f32(ref, "lse.npy", &lse, s_lse) || load_f32(ref, "probe_logits.npy", &probe, s_probe) ||
        load_i32(ref, "probe_ids.npy", &probe_ids, s_pid))
        return 1;
    const int64_t T = s_log[0], V = s_log[1], P = s_pid[0];
    if (T != s_am[0] || T != s_probe[0] || P != s_probe[1])
        return fprintf(stderr, "FAIL: shapes disagree (T=%lld)\n", (long long)T), 1;

    int64_t agree = 0;
    double d_probe = 0, d_top = 0, d_lse = 0;
    for (int64_t t = 0; t < T; t++) {
        const float *row = logits + t * V;
        int64_t a = 0;
        double mx = row[0], sum = 0;
        for (int64_t j = 1; j < V; j++)
            if (row[j] > row[a]) a = j;
        mx = row[a];
        for (int64_t j = 0; j < V; j++) sum += exp(row[j] - mx);
        agree += a == am[t];
        d_top = fmax(d_top, fabs(row[a] - am_logit[t]));
        d_lse = fmax(d_lse, fabs(mx + log(sum) - lse[t]));
        for (int64_t i = 0; i < P; i++) d_probe = fmax(d_probe, fabs(row[probe_ids[i]] - probe[t * P + i]));
    }
    const double tol = 2e-3;
    int ok = agree == T && d_probe <= tol && d_top <= tol && d_lse <= tol;
    printf("%s smollm2 (%lld tokens of GPL-3 text): top-1 agreement %lld/%lld, max|diff| probe logits %.3g, "
           "top-1 logit %.3g, log-sum-exp %.3g (tol %.0e)\n",
           ok ? "PASS" : "FAIL", (long long)T, (long long)agree, (long long)T, d_probe, d_top, d_lse, tol);
    remove(out);
    free(logits), free(am), free(am_logit), free(lse), free(probe), free(probe_ids);
    return ok ? 0 : 1;
}
