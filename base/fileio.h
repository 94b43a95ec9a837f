// fileio.h: whole-file reads, and outputs that appear only when complete.
//
// Every output goes to PATH.tmp first; atomic_commit flushes, checks that the
// bytes reached the disk (a full disk fails here, not silently) and renames it
// to PATH. atomic_abort removes the temporary file, so a failed run leaves no
// output behind.
#pragma once
#include <stddef.h>
#include <stdio.h>

#include "status.h"

// Reads the whole of path into a malloc'ed, NUL-terminated buffer (*buf; the
// caller frees it). For small text files (configs, ids, JSON headers).
int file_read_all(const char *path, char **buf, size_t *len, Status *st);

typedef struct {
    FILE *f;
    char path[4096];
    char tmp[4100];
} AtomicFile;

int atomic_open(AtomicFile *af, const char *path, Status *st);
int atomic_write(AtomicFile *af, const void *data, size_t n, Status *st);
int atomic_commit(AtomicFile *af, Status *st);
void atomic_abort(AtomicFile *af);
// The whole of data[0..n) as path, through path.tmp (open, write, commit; on a
// failure nothing is left behind). Returns 0, or -1 with st naming the file.
int atomic_write_file(const char *path, const void *data, size_t n, Status *st);

// 1 if path exists and is a directory.
int path_is_dir(const char *path);
// 1 if dir does not exist or holds nothing (besides . and ..).
int dir_is_empty_or_missing(const char *dir);
// Removes path and, if it is a directory, everything below it, with the C
// library (nftw + remove: no shell, so no path is ever interpreted). Symbolic
// links are removed, never followed. A path that does not exist is not an
// error. Returns 0, or -1 with st naming what could not be removed.
int remove_tree(const char *path, Status *st);
