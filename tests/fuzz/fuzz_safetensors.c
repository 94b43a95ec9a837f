// fuzz_safetensors: one safetensors file (header and data) through st_add_file.
// Accepted: the tensors tile the data region exactly and convert to fp32 inside
// the mapping. Refused: the message names the file.
#include "fuzz_util.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write_file("model.safetensors", data, size);
    SafeTensors s;
    memset(&s, 0, sizeof s);
    Status st = {{0}};
    fuzz_refused = 0;
    if (st_add_file(&s, path, &st) == 0) {
        const StFile *f = &s.files[0];
        const unsigned char *lo = f->map, *hi = lo + f->size;
        size_t covered = 0;
        for (int i = 0; i < s.n_tensors; i++) {
            const StTensor *t = &s.tensors[i];
            FUZZ_CHECK(t->data >= lo + 8 && t->data + t->nbytes <= hi, "tensor %s outside the file", t->name);
            covered += t->nbytes;
            if ((t->dtype == ST_F32 || t->dtype == ST_F16 || t->dtype == ST_BF16) && t->numel <= (1 << 20)) {
                float *buf = malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1));
                st_to_f32(t, buf);
                free(buf);
            }
        }
        FUZZ_CHECK(covered <= f->size - 8, "tensors overlap: %zu bytes in a %zu-byte file", covered, f->size);
    } else {
        fuzz_refused = 1;
        FUZZ_CHECK(strstr(st.msg, path) != NULL, "refusal does not name the file: %s", st.msg);
    }
    st_close(&s);
    return 0;
}
