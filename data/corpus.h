// corpus.h: text files -> one token stream, and that stream cut into windows.
//
// A path is a text file, or a directory meaning every regular file below it
// (recursively; names starting with '.' skipped), visited in byte order of the
// names at each level. Each file is tokenized on its own (no BOS/EOS added by
// the tokenizer) and the per-file ids are concatenated in that order, with one
// separator id between consecutive non-empty files (corpus_separator_id).
// The corpus built by scripts/get-corpus.sh is read as corpus/train or
// corpus/heldout (docs/data.md).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tokenizer.h"

// The document separator for tok: the id of the first of "<|endoftext|>",
// "<|end_of_text|>", "</s>", "<eos>" that the tokenizer knows, or -1 (then
// files are concatenated with no separator).
int32_t corpus_separator_id(const Tokenizer *tok);

// Expands paths (files and directories, as above) into a list of files, in
// reading order. *files is a malloc'ed array of malloc'ed strings; the caller
// frees it with corpus_free_files. A missing path, or no file at all, is an error.
int corpus_list_files(const char *const *paths, int n_paths, char ***files, int *n_files,
                      Status *st);
void corpus_free_files(char **files, int n_files);

// Reads and tokenizes every file of paths (files tokenized in parallel) into
// one stream. *ids is malloc'ed (caller frees); *n its length. A corpus that
// yields no tokens is an error naming the paths; so is any unreadable or
// non-UTF-8 file (the message names it).
int corpus_load_tokens(const Tokenizer *tok, const char *const *paths, int n_paths, int32_t **ids,
                       size_t *n, Status *st);

// Non-overlapping windows of ctx tokens: window i is ids[i*ctx .. (i+1)*ctx);
// a tail shorter than ctx is dropped. Returns their count, floor(n / ctx),
// capped at max_seq when max_seq > 0; 0 when ctx <= 0. When starts is not NULL
// it receives the returned number of window pointers (give it max_seq entries,
// or call first with NULL to learn the count).
size_t corpus_windows(const int32_t *ids, size_t n, int ctx, size_t max_seq, const int32_t **starts);

// Windows that start with a BOS token (eval, teacher and train --bos): window i
// is bos followed by ids[i*(ctx−1) .. (i+1)*(ctx−1)). Returns their count,
// floor(n / (ctx − 1)), capped at max_seq when max_seq > 0; 0 when ctx < 2.
// When out is not NULL it receives the windows one after the other (count·ctx
// ids; call first with NULL to learn the count).
size_t corpus_bos_windows(const int32_t *ids, size_t n, int ctx, int32_t bos, size_t max_seq, int32_t *out);
