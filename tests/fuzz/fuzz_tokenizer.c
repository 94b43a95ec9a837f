// fuzz_tokenizer: input = a tokenizer.json, optionally followed by a NUL byte
// and text to encode. The tokenizer is loaded for a model with a vocabulary of
// FUZZ_VOCAB ids; then every id the text encodes to must be inside it and must
// decode. Refusals (load or encode) name the file.
#include "fuzz_util.h"
#include "tokenizer.h"

#define FUZZ_VOCAB 1024

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_len = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "Hello world, 123 \t tabs\n";
    size_t text_len = nul ? size - json_len - 1 : strlen(text);
    const char *path = fuzz_write_file("tokenizer.json", data, json_len);
    Tokenizer *tok = NULL;
    Status st = {{0}};
    fuzz_refused = 0;
    if (tok_load_model(&tok, path, FUZZ_VOCAB, &st) == 0) {
        FUZZ_CHECK(tok_vocab_size(tok) <= FUZZ_VOCAB, "%d ids for a %d-id model", tok_vocab_size(tok), FUZZ_VOCAB);
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(tok, text, text_len, &ids, &n, &st) == 0) {
            for (size_t i = 0; i < n; i++)
                FUZZ_CHECK(ids[i] >= 0 && ids[i] < FUZZ_VOCAB && tok_token(tok, ids[i]) != NULL,
                           "id %d at %zu", (int)ids[i], i);
            char *back = NULL;
            size_t back_len = 0;
            FUZZ_CHECK(tok_decode(tok, ids, n, &back, &back_len, &st) == 0, "decode: %s", st.msg);
            free(back);
            tok_is_special(tok, n ? ids[0] : 0);
        } else {
            fuzz_refused = 1;
            FUZZ_CHECK(strstr(st.msg, path) != NULL, "encode refusal does not name the file: %s", st.msg);
        }
        free(ids);
        tok_free(tok);
    } else {
        fuzz_refused = 1;
        FUZZ_CHECK(tok == NULL, "tok_load_model failed but left *out set");
        FUZZ_CHECK(strstr(st.msg, path) != NULL, "refusal does not name the file: %s", st.msg);
    }
    return 0;
}
