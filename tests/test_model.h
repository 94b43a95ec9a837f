// test_model.h: what the model-level test binaries (test_decode, test_gpu_ttft)
// share: a model folder and its ids file loaded with the loaders' messages,
// and a random indexer at every full-attention layer of a model.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "forward.h"
#include "ids.h"
#include "indexer.h"
#include "model.h"

// *m from dir and *ids (*n_ids of them) from ids_file; 1, with the loader's
// message on stderr, when either fails.
static inline int load_model_and_ids(Model *m, const char *dir, const char *ids_file, int32_t **ids, size_t *n_ids) {
    Status st;
    if (model_load(m, dir, &st)) {
        fprintf(stderr, "%s\n", st.msg);
        return 1;
    }
    if (ids_read(ids_file, m->cfg.vocab, ids, n_ids, &st)) {
        fprintf(stderr, "%s\n", st.msg);
        model_free(m);
        return 1;
    }
    return 0;
}

// A head-collapsed indexer of d_index (RoPE on d_rope of them, RMSNorm key)
// at every full-attention layer of m, layer l initialized from seed + l; free
// with random_indexer_free.
static inline IndexerSet random_indexer_set(const Model *m, int d_index, int d_rope, uint64_t seed) {
    const int L = m->cfg.n_layers;
    IndexerSet set = {.cfg = {.variant = INDEXER_COLLAPSED, .d_model = m->cfg.hidden, .d_index = d_index,
                              .d_rope = d_rope, .n_heads = 1, .key_norm = INDEXER_NORM_RMS, .norm_eps = 1e-6f,
                              .rope_theta = 1e4f},
                      .n_model_layers = L};
    set.params = calloc((size_t)L, sizeof *set.params);
    if (!set.params) abort();
    const int64_t np = indexer_n_params(&set.cfg);
    for (int l = 0; l < L; l++) {
        if (m->cfg.layer_kinds[l] != LAYER_FULL_ATTENTION) continue;
        set.params[l] = malloc(sizeof(float) * (size_t)np);
        if (!set.params[l]) abort();
        indexer_init(&set.cfg, set.params[l], seed + (uint64_t)l);
    }
    return set;
}

static inline void random_indexer_free(IndexerSet *set) {
    for (int l = 0; l < set->n_model_layers; l++) free(set->params[l]);
    free(set->params);
    set->params = NULL;
}
