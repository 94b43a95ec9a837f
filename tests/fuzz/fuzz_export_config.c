// fuzz_export_config.c: libFuzzer target for exported indexer configs and run
// configs (checkpoints/export.h), loaded through the public API.
//
// Input: one control byte, then the bytes of a config.json.
//  - control bit 0 clear: INDEXER/config.json beside a fixed model.safetensors
//    (layer 0 of a collapsed indexer, d_model 8, d_index 4, LayerNorm key);
//    indexer_set_load for a 2-layer model, as `logits --indexer` loads it.
//  - control bit 0 set: RUN/config.json beside a valid step-1 checkpoint of
//    that indexer; export_indexer into a fresh folder (then removed), as
//    `spindle export` runs.
// Every input must be refused or loaded cleanly: no crash, no sanitizer
// report, no huge allocation, and a loaded config within its bounds.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export.h"
#include "fileio.h"
#include "indexer.h"
#include "run_state.h"
#include "safetensors.h"

static char base[256], ix_dir[300], run_dir[300], out_dir[300];

static IndexerConfig seed_cfg(void) {
    IndexerConfig c = indexer_config_default(8);
    c.d_index = 4, c.d_rope = 2;
    return c;
}

static void setup(void) {
    if (base[0]) return;
    char tmpl[] = "/tmp/fuzz_export_config.XXXXXX";
    if (!mkdtemp(tmpl)) abort();
    snprintf(base, sizeof base, "%s", tmpl);
    snprintf(ix_dir, sizeof ix_dir, "%s/ix", base);
    snprintf(run_dir, sizeof run_dir, "%s/run", base);
    snprintf(out_dir, sizeof out_dir, "%s/out", base);
    if (mkdir(ix_dir, 0755) || mkdir(run_dir, 0755)) abort();
    const IndexerConfig c = seed_cfg();
    const int64_t np = indexer_n_params(&c);
    float *p = calloc((size_t)np, sizeof(float)), *m = calloc((size_t)np, sizeof(float)),
          *v = calloc((size_t)np, sizeof(float));
    indexer_init(&c, p, 1);
    IndexerTensor it[INDEXER_MAX_TENSORS];
    const int nt = indexer_param_tensors(it, &c);
    StWriteTensor ts[INDEXER_MAX_TENSORS];
    static char names[INDEXER_MAX_TENSORS][96];
    for (int j = 0; j < nt; j++) {
        if (!strcmp(it[j].name, "k_norm_bias")) snprintf(names[j], sizeof names[j], "model.layers.0.self_attn.indexer.k_norm.bias");
        else snprintf(names[j], sizeof names[j], "model.layers.0.self_attn.indexer.%s.weight", it[j].name);
        ts[j] = (StWriteTensor){names[j], it[j].ndim, {it[j].shape[0], it[j].shape[1]}, p + it[j].offset};
    }
    char path[400];
    Status st;
    snprintf(path, sizeof path, "%s/model.safetensors", ix_dir);
    if (st_write(path, ts, nt, NULL, &st)) abort();
    RunState rs = {.step = 1, .rng = 1, .cursor = 1, .tokens = 16, .n_layers = 1, .n_params = np,
                   .params = &p, .m = &m, .v = &v};
    if (run_state_save(run_dir, &rs, 2, &st)) abort();
    free(p), free(m), free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    if (size < 1) return 0;
    const int run_mode = data[0] & 1;
    char path[400];
    snprintf(path, sizeof path, "%s/config.json", run_mode ? run_dir : ix_dir);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    fwrite(data + 1, 1, size - 1, f);
    fclose(f);
    Status st;
    if (run_mode) {
        if (export_indexer(run_dir, out_dir, -1, 16, 1, &st) == 0) {
            IndexerSet s;
            if (indexer_set_load(&s, out_dir, 1 << 10, NULL, &st) != 0) abort();  // export reads back
            indexer_set_free(&s);
        }
        if (remove_tree(out_dir, &st)) abort();
        return 0;
    }
    IndexerSet s;
    if (indexer_set_load(&s, ix_dir, 2, NULL, &st) == 0) {
        if (indexer_config_check(&s.cfg, &st) != 0 || s.default_k < 1 || s.default_bsel < 1) abort();
        indexer_set_free(&s);
    }
    return 0;
}
