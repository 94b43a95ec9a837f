// fuzz_ids: one ids file through ids_read, for a model of FUZZ_VOCAB ids and
// with no vocabulary bound. Accepted: every id is in range, and writing the
// ids and reading them back gives the same list. Refused: the message names the file.
#include "fuzz_util.h"
#include "ids.h"

#define FUZZ_VOCAB 1000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_write_file("ids.txt", data, size);
    char path[512];
    snprintf(path, sizeof path, "%s", p);
    fuzz_refused = 0;
    for (int pass = 0; pass < 2; pass++) {
        int vocab = pass == 0 ? FUZZ_VOCAB : 0;
        int32_t *ids = NULL;
        size_t n = 0;
        Status st = {{0}};
        if (ids_read(path, vocab, &ids, &n, &st) == 0) {
            FUZZ_CHECK(n > 0, "accepted with no ids");
            for (size_t i = 0; i < n; i++)
                FUZZ_CHECK(ids[i] >= 0 && (vocab == 0 || ids[i] < vocab), "id %d at %zu", (int)ids[i], i);
            if (pass == 0) {
                char out[600];
                snprintf(out, sizeof out, "%s/ids_out.txt", fuzz_dir());
                fuzz_write_file("ids_out.txt", "", 0);
                FUZZ_CHECK(ids_write(out, ids, n, &st) == 0, "ids_write: %s", st.msg);
                int32_t *again = NULL;
                size_t m = 0;
                FUZZ_CHECK(ids_read(out, vocab, &again, &m, &st) == 0, "re-read: %s", st.msg);
                FUZZ_CHECK(m == n && memcmp(again, ids, n * sizeof *ids) == 0, "round trip differs");
                free(again);
            }
            free(ids);
        } else {
            if (pass == 0) fuzz_refused = 1;
            FUZZ_CHECK(ids == NULL, "ids_read failed but left *ids set");
            FUZZ_CHECK(strstr(st.msg, path) != NULL, "refusal does not name the file: %s", st.msg);
        }
    }
    return 0;
}
