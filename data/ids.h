// ids.h: token-id files (integers separated by commas and/or whitespace).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "status.h"

// Reads path into a malloc'ed array (*ids; the caller frees it). Every id must
// be in [0, vocab); an empty file, a non-numeric entry or an out-of-range id
// is an error naming the file and the entry's position.
int ids_read(const char *path, int vocab, int32_t **ids, size_t *n, Status *st);
// Writes ids comma-separated on one line to path (atomically).
int ids_write(const char *path, const int32_t *ids, size_t n, Status *st);
