// test_goldens: runs `spindle logits` on a golden case made by
// scripts/make-goldens.py and compares with the HF transformers logits.
//   test_goldens SPINDLE_BIN CASE_DIR OUT_DIR [TOL [K BSEL]]
// With K and BSEL it runs the attention-mass oracle (--oracle-k K --bsel BSEL)
// and compares with oracle_kK_bselBSEL.npy, else dense with logits.npy.
// Fails on any |Δlogit| > TOL (default 2e-3) or on any top-1 disagreement.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_goldens SPINDLE_BIN CASE_DIR OUT_DIR [TOL]\n");
        return 2;
    }
    const char *bin = argv[1], *dir = argv[2], *outdir = argv[3];
    double tol = argc > 4 ? atof(argv[4]) : 2e-3;
    const char *name = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    char out[4096], cmd[16384], ref_path[4096], extra[128] = "", label[512];
    snprintf(label, sizeof label, "%s", name);
    snprintf(ref_path, sizeof ref_path, "%s/logits.npy", dir);
    if (argc > 6) {
        snprintf(extra, sizeof extra, " --oracle-k %s --bsel %s", argv[5], argv[6]);
        snprintf(ref_path, sizeof ref_path, "%s/oracle_k%s_bsel%s.npy", dir, argv[5], argv[6]);
        snprintf(label, sizeof label, "%s oracle k=%s bsel=%s", name, argv[5], argv[6]);
    }
    // One output name per test, so tests can run in parallel (ctest -j).
    if (argc > 6) snprintf(out, sizeof out, "%s/golden_%s_oracle_k%s_bsel%s.npy", outdir, name, argv[5], argv[6]);
    else snprintf(out, sizeof out, "%s/golden_%s.npy", outdir, name);
    snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --ids '%s/ids.txt' --out '%s'%s", bin, dir, dir, out, extra);
    name = label;
    if (system(cmd) != 0) {
        fprintf(stderr, "FAIL %s: spindle logits failed: %s\n", name, cmd);
        return 1;
    }
    Status st;
    float *got, *ref;
    int64_t gs[4], rs[4];
    int gn, rn;
    if (npy_read_f32(out, &got, gs, &gn, &st) || npy_read_f32(ref_path, &ref, rs, &rn, &st)) {
        fprintf(stderr, "FAIL %s: %s\n", name, st.msg);
        return 1;
    }
    if (gn != 2 || rn != 2 || gs[0] != rs[0] || gs[1] != rs[1]) {
        fprintf(stderr, "FAIL %s: shape [%lld, %lld] vs reference [%lld, %lld]\n", name, (long long)gs[0],
                (long long)gs[1], (long long)rs[0], (long long)rs[1]);
        return 1;
    }
    const int64_t T = rs[0], V = rs[1];
    double max_diff = 0;
    int64_t worst = 0, top1_same = 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t ag = 0, ar = 0;
        for (int64_t j = 0; j < V; j++) {
            double d = fabs((double)got[t * V + j] - ref[t * V + j]);
            if (!(d <= max_diff)) max_diff = d, worst = t * V + j;  // NaN sticks
            if (got[t * V + j] > got[t * V + ag]) ag = j;
            if (ref[t * V + j] > ref[t * V + ar]) ar = j;
        }
        top1_same += ag == ar;
    }
    int ok = max_diff <= tol && top1_same == T;
    printf("%s %s: T=%lld vocab=%lld max|diff|=%.3g (at t=%lld, id=%lld; tol %.1g) top1 %lld/%lld\n",
           ok ? "PASS" : "FAIL", name, (long long)T, (long long)V, max_diff, (long long)(worst / V),
           (long long)(worst % V), tol, (long long)top1_same, (long long)T);
    free(got);
    free(ref);
    remove(out);
    return ok ? 0 : 1;
}
