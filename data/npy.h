// npy.h: float32 .npy files (NumPy format 1.0, little-endian, C order).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "fileio.h"

// Streaming writer for a 2-D float32 array [rows, cols]: rows are appended in
// order; npy_writer_close checks that all rows came and renames PATH.tmp to PATH.
typedef struct {
    AtomicFile af;
    int64_t rows, cols, written;
} NpyWriter;

int npy_writer_open(NpyWriter *w, const char *path, int64_t rows, int64_t cols, Status *st);
int npy_writer_rows(NpyWriter *w, const float *data, int64_t n_rows, Status *st);
int npy_writer_close(NpyWriter *w, Status *st);
void npy_writer_abort(NpyWriter *w);

// Reads a float32 array of up to 4 dims: *data is malloc'ed (caller frees),
// shape[0..*ndim) filled.
int npy_read_f32(const char *path, float **data, int64_t shape[4], int *ndim, Status *st);
int npy_read_i32(const char *path, int32_t **data, int64_t shape[4], int *ndim, Status *st);
