// tokenizer.h: BPE from a Hugging Face tokenizer.json, byte-level (GPT-2,
// Qwen, Llama 3) or SentencePiece-style (Gemma, Llama 2: "▁" for spaces and
// <0xNN> byte fallback), token for token equal to the HF `tokenizers` library
// (see docs/tokenizer.md).
//
// Supported: model "BPE" (merges as "a b" strings or ["a","b"] pairs;
// ignore_merges, unk_token/fuse_unk, byte_fallback); normalizers NFC, NFD,
// NFKC, NFKD (through utf8proc), Replace (String pattern), Prepend and Sequence
// of them; pre-tokenizers ByteLevel (with or without its GPT-2 regex), Split
// (Regex or String; every behavior; invert), Digits, Metaspace (prepend_scheme
// always/first/never or the older add_prefix_space; split or not) and
// Sequence; decoders ByteLevel, Metaspace, Replace (String), ByteFallback,
// Fuse, Strip and Sequence (none: tokens joined with ' ', as HF); added tokens
// (special or not, single_word/lstrip/rstrip/normalized) matched before
// pre-splitting. Split
// regexes are rewritten to Oniguruma's meaning of \s, \w, \h and run through
// PCRE2 with UTF and Unicode properties (JIT unless SPINDLE_PCRE2_NO_JIT=1).
// Anything else in the file is refused with a message naming it.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef struct Tokenizer Tokenizer;

// The largest number of ids a tokenizer may have when no model bounds it
// (ids index dense tables; real vocabularies are below 300K).
#define TOK_MAX_IDS (1 << 22)

// Loads path (a tokenizer.json). On success *out owns a tokenizer; the caller
// frees it with tok_free. On failure *out is NULL and st names the file and problem.
// Every id (vocab and added tokens) must be below TOK_MAX_IDS.
int tok_load(Tokenizer **out, const char *path, Status *st);
// The same for a model's tokenizer (path = DIR/tokenizer.json): every id the
// tokenizer can produce must be below vocab, the model's vocab_size, since
// each id indexes the embedding; otherwise the load fails naming the token,
// its id and DIR/config.json. vocab <= 0 means no model bound (as tok_load).
int tok_load_model(Tokenizer **out, const char *path, int vocab, Status *st);
void tok_free(Tokenizer *tok);

// Encodes len bytes of UTF-8 text into token ids, without adding BOS/EOS or any
// post-processor template (HF: add_special_tokens=False). *ids is malloc'ed;
// the caller frees it. Invalid UTF-8 is an error naming the byte offset.
int tok_encode(const Tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n_ids,
               Status *st);

// Number of ids (vocabulary plus added tokens: one more than the largest id).
int tok_vocab_size(const Tokenizer *tok);
// The token's string as stored in tokenizer.json (byte-level or "▁" form), or NULL.
const char *tok_token(const Tokenizer *tok, int32_t id);

// Decodes ids back to text with the file's decoder, as HF's decode with
// skip_special_tokens=False: the tokens' strings (a normalized added token as
// it was matched) go through the decoder steps, then are joined. ByteLevel maps
// each token's characters back to bytes through the GPT-2 byte table (a token
// with a character outside it is copied as its UTF-8); the result may then be
// invalid UTF-8 when the ids split a character (HF would show U+FFFD there).
// ByteFallback turns a run of <0xNN> tokens into its bytes, or one U+FFFD per
// byte when they are not valid UTF-8, as HF does. *text is malloc'ed, NUL
// terminated, *len excludes the NUL; the caller frees it. Unknown ids are an error.
int tok_decode(const Tokenizer *tok, const int32_t *ids, size_t n_ids, char **text, size_t *len,
               Status *st);

// The id of a token given in its tokenizer.json form (added tokens first, then
// the vocab), or -1.
int32_t tok_find(const Tokenizer *tok, const char *token);

// 1 when id is an added token marked "special" (e.g. <|endoftext|>), else 0.
int tok_is_special(const Tokenizer *tok, int32_t id);

// The BOS token named by model_dir/tokenizer_config.json ("bos_token"): *id its
// id in tok, or -1 when the file or the entry is absent (or null); *add 1 when
// the file also sets add_bos_token (HF starts encoded text with it: Gemma).
// tok NULL: only *add is filled (the id is left -1).
// A bos_token tok does not know, or a file that is not a JSON object, is an
// error naming the file.
int tok_model_bos(const Tokenizer *tok, const char *model_dir, int32_t *id, int *add, Status *st);
