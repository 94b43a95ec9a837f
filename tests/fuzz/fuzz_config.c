// fuzz_config: one config.json through config_load. Accepted: the sizes are in
// their documented ranges and the RoPE tables are finite at the longest
// context. Refused: the message names the file.
#include <math.h>

#include "config.h"
#include "fuzz_util.h"
#include "rope.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("config.json", data, size);
    ModelConfig c;
    Status st = {{0}};
    fuzz_refused = 0;
    if (config_load(&c, fuzz_dir(), &st) == 0) {
        FUZZ_CHECK(c.hidden >= 1 && c.hidden <= CONFIG_MAX_HIDDEN, "hidden %d", c.hidden);
        FUZZ_CHECK(c.n_layers >= 1 && c.n_layers <= CONFIG_MAX_LAYERS, "layers %d", c.n_layers);
        FUZZ_CHECK(c.n_heads >= 1 && c.n_kv_heads >= 1 && c.n_heads % c.n_kv_heads == 0, "heads %d/%d",
                   c.n_heads, c.n_kv_heads);
        FUZZ_CHECK(c.head_dim >= 2 && c.head_dim <= CONFIG_MAX_HEAD_DIM && c.head_dim % 2 == 0, "head_dim %d",
                   c.head_dim);
        FUZZ_CHECK(c.vocab >= 1 && c.vocab <= CONFIG_MAX_VOCAB, "vocab %d", c.vocab);
        FUZZ_CHECK(c.max_pos >= 1 && c.max_pos <= CONFIG_MAX_POS, "max_pos %d", c.max_pos);
        FUZZ_CHECK(isfinite(c.rms_eps) && c.rms_eps > 0, "rms_norm_eps %g", c.rms_eps);
        FUZZ_CHECK(c.layer_kinds != NULL, "no layer kinds");
        int half = rope_rot_dims(&c) / 2;
        FUZZ_CHECK(half >= 1, "no rotated dims");
        // The first positions and the last one the model supports.
        int T = 4;
        float *cs = malloc(sizeof(float) * (size_t)(T * half)), *sn = malloc(sizeof(float) * (size_t)(T * half));
        float *inv = malloc(sizeof(float) * (size_t)half), af;
        rope_tables(&c, T, cs, sn);
        rope_inv_freq(&c, inv, &af);
        for (int i = 0; i < T * half; i++)
            FUZZ_CHECK(isfinite(cs[i]) && isfinite(sn[i]), "RoPE table entry %d not finite", i);
        for (int i = 0; i < half; i++) {
            float ang = (float)(c.max_pos - 1) * inv[i];
            FUZZ_CHECK(isfinite(cosf(ang) * af), "RoPE angle at max_pos not finite (dim %d)", i);
        }
        // The sliding-window layers' RoPE, when there are such layers.
        FUZZ_CHECK(rope_rot_dims_kind(&c, LAYER_SLIDING_ATTENTION) / 2 == half || !c.sliding_window,
                   "sliding RoPE rotates other dims");
        if (c.sliding_window) {
            FUZZ_CHECK(c.sliding_window >= 1, "sliding_window %d", c.sliding_window);
            rope_tables_kind(&c, LAYER_SLIDING_ATTENTION, T, cs, sn);
            for (int i = 0; i < T * half; i++)
                FUZZ_CHECK(isfinite(cs[i]) && isfinite(sn[i]), "sliding RoPE table entry %d not finite", i);
        }
        free(cs);
        free(sn);
        free(inv);
        config_free(&c);
    } else {
        fuzz_refused = 1;
        FUZZ_CHECK(strstr(st.msg, path) != NULL, "refusal does not name the file: %s", st.msg);
    }
    return 0;
}
