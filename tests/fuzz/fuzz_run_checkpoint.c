// fuzz_run_checkpoint.c: libFuzzer target for run checkpoints
// (checkpoints/run_state.h), loaded through the public API as resume and
// export load them.
//
// Input: one control byte, then the bytes of RUN/checkpoints/ckpt-00000001.bin.
// Control bit 0 set: the harness rewrites the last 32 bytes with the SHA-256
// of everything before them, so mutations get past the checksum and reach the
// header checks (step vs file name, sizes, version). The run has 1 layer of
// 8 parameters. Every input must be refused or loaded cleanly: no crash, no
// sanitizer report, nothing written outside the temporary folder.
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fileio.h"
#include "run_state.h"

enum { N_PARAMS = 8, DIGEST = 32 };

static char run_dir[256];

static void setup(void) {
    if (run_dir[0]) return;
    char tmpl[] = "/tmp/fuzz_run_checkpoint.XXXXXX";
    if (!mkdtemp(tmpl)) abort();
    snprintf(run_dir, sizeof run_dir, "%s", tmpl);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/checkpoints", run_dir);
    if (mkdir(dir, 0755) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    if (size < 1) return 0;
    const int fix_digest = data[0] & 1;
    size_t n = size - 1;
    unsigned char *bytes = malloc(n ? n : 1);
    memcpy(bytes, data + 1, n);
    if (fix_digest && n >= DIGEST) {
        unsigned int len = 0;
        unsigned char md[EVP_MAX_MD_SIZE];
        EVP_Digest(bytes, n - DIGEST, md, &len, EVP_sha256(), NULL);
        memcpy(bytes + n - DIGEST, md, DIGEST);
    }
    char path[400];
    run_state_path(path, sizeof path, run_dir, 1);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n) fwrite(bytes, 1, n, f);
    fclose(f);
    free(bytes);

    float params[N_PARAMS], m[N_PARAMS], v[N_PARAMS];
    float *pp = params, *pm = m, *pv = v;
    RunState rs = {.n_layers = 1, .n_params = N_PARAMS, .params = &pp, .m = &pm, .v = &pv};
    Status st;
    if (run_state_load(run_dir, 1, &rs, &st) == 0 && rs.step != 1) abort();  // a loaded file is the one named
    int64_t step = -1;
    RunState rs2 = {.n_layers = 1, .n_params = N_PARAMS, .params = &pp, .m = &pm, .v = &pv};
    const int rc = run_state_load_newest(run_dir, "fuzz", -1, 0, &rs2, &step, &st);
    if (rc == 0 && step != 1) abort();
    return 0;
}
