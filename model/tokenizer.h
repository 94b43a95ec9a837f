// tokenizer.h: byte-level BPE from a Hugging Face tokenizer.json.
//
// Supported: model type "BPE" (byte-level, ranks from "merges" in either the
// "a b" string form or the ["a","b"] pair form, optional ignore_merges),
// pre-tokenizers ByteLevel (with or without its built-in GPT-2 regex), Split
// (regex, behavior Isolated/Removed/MergedWithPrevious/MergedWithNext/Contiguous),
// Digits and Sequence; normalizers none/NFC-on-NFC-input; added tokens (special
// and not) matched before pre-splitting. Pre-split regexes run through PCRE2
// with UTF and Unicode properties.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct Tokenizer Tokenizer;

// Loads path (a tokenizer.json). On success *out owns a tokenizer; the caller
// frees it with tok_free. On failure *out is NULL and st names the file and problem.
int tok_load(Tokenizer **out, const char *path, Status *st);
void tok_free(Tokenizer *tok);

// Encodes len bytes of UTF-8 text into token ids, without adding BOS/EOS or any
// post-processor template (HF: add_special_tokens=False). *ids is malloc'ed;
// the caller frees it. Invalid UTF-8 is an error naming the byte offset.
int tok_encode(const Tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n_ids,
               Status *st);

// Number of ids (vocabulary plus added tokens: one more than the largest id).
int tok_vocab_size(const Tokenizer *tok);
// The token's string as stored in tokenizer.json (byte-level form), or NULL.
const char *tok_token(const Tokenizer *tok, int32_t id);
