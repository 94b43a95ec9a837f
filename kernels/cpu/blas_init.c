// blas_init.c: settle the threading and kernel choice of OpenMP + OpenBLAS.
//
// Two settings only take effect if they are in the environment when the
// libraries load, so when either is missing we set them and re-execute the
// process once (SPINDLE_REEXEC marks the second run):
//  - OPENBLAS_CORETYPE: OpenBLAS picks its kernels from the CPU's
//    identification; virtual machines that report a generic "Intel Xeon
//    Processor" make it fall back to Prescott (SSE3) kernels, 4–5× slower than
//    the AVX-512/AVX2 ones (measured on a 2-core CI-class VM: sgemm 28 vs
//    90–140 GFLOP/s).
//  - OMP_WAIT_POLICY=passive: OpenBLAS (pthread build) runs its GEMMs on its
//    own threads; OpenMP threads that spin after a parallel region steal
//    those cores (measured: SmolLM2 512-token forward 6.1 s → 1.8 s).
// Values the user set are respected.
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ops.h"

static const char *better_core(void) {
    const char *core = openblas_get_corename();
    if (getenv("OPENBLAS_CORETYPE") || !core ||
        (strcasecmp(core, "prescott") && strcasecmp(core, "core2") && strcasecmp(core, "nehalem")))
        return NULL;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
    return NULL;
}

void blas_ensure_core(char **argv) {
    if (getenv("SPINDLE_REEXEC")) return;
    const char *core = better_core();
    int wait = getenv("OMP_WAIT_POLICY") == NULL;
    if (!core && !wait) return;
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
    if (wait) setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("SPINDLE_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
    // exec failed: carry on with the defaults rather than fail.
}
