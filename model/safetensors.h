// safetensors.h: memory-mapped safetensors checkpoints, single or sharded.
//
// Tensors point into the mapping; nothing is copied until a caller converts a
// tensor to fp32 (st_to_f32). Every header is validated against the file size
// before any offset is trusted.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum { ST_F32, ST_F16, ST_BF16, ST_OTHER } StDType;

typedef struct {
    char *name;
    StDType dtype;
    char dtype_name[8];
    int ndim;
    int64_t shape[8];
    int64_t numel;
    const unsigned char *data;  // into the file's mapping
    size_t nbytes;
    int file;  // index into SafeTensors.files
} StTensor;

typedef struct {
    char *path;
    void *map;
    size_t size;
} StFile;

typedef struct {
    StFile *files;
    int n_files;
    StTensor *tensors;
    int n_tensors;
} SafeTensors;

// Opens DIR/model.safetensors.index.json and its shards if the index exists,
// else DIR/model.safetensors. Release with st_close (also after a failure).
int st_open(SafeTensors *s, const char *dir, Status *st);
// Maps one .safetensors file and adds its tensors to s.
int st_add_file(SafeTensors *s, const char *path, Status *st);
const StTensor *st_find(const SafeTensors *s, const char *name);
const char *st_path(const SafeTensors *s, const StTensor *t);
// Converts t (F32, F16 or BF16) to fp32 into dst (t->numel floats).
void st_to_f32(const StTensor *t, float *dst);
void st_close(SafeTensors *s);

float st_bf16_to_f32(uint16_t h);
float st_f16_to_f32(uint16_t h);

// One F32 tensor to write.
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    const float *data;
} StWriteTensor;

// Writes tensors as an F32 safetensors file at path (via PATH.tmp, renamed
// when complete). metadata: NULL or a flat string→string JSON object text.
int st_write(const char *path, const StWriteTensor *tensors, int n, const char *metadata_json, Status *st);
