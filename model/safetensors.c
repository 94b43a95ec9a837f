// safetensors.c: see safetensors.h. File layout: an 8-byte little-endian
// header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}, then
// the data region that the offsets index.
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fileio.h"

#define ST_MAX_HEADER 100000000u  // the reference library's limit (100 MB)

static size_t dtype_size(const char *d, StDType *kind) {
    *kind = ST_OTHER;
    if (!strcmp(d, "F32")) return *kind = ST_F32, 4;
    if (!strcmp(d, "F16")) return *kind = ST_F16, 2;
    if (!strcmp(d, "BF16")) return *kind = ST_BF16, 2;
    if (!strcmp(d, "F64") || !strcmp(d, "I64") || !strcmp(d, "U64")) return 8;
    if (!strcmp(d, "I32") || !strcmp(d, "U32")) return 4;
    if (!strcmp(d, "I16") || !strcmp(d, "U16")) return 2;
    if (!strcmp(d, "I8") || !strcmp(d, "U8") || !strcmp(d, "BOOL") || !strcmp(d, "F8_E4M3") ||
        !strcmp(d, "F8_E5M2") || !strcmp(d, "F8_E8M0"))
        return 1;
    if (!strcmp(d, "C64")) return 8;
    return 0;
}

// The header must be UTF-8 (the reference parses it as a Rust str).
static int utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        if (k == 3 && ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0))) return 0;
        if (k == 4 && ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90))) return 0;
        i += k;
    }
    return 1;
}

// Every number in the header must be an integer literal: shapes and offsets are
// unsigned integers to the reference, which refuses 8.0, 8e0 and 1.5 alike (cJSON
// would read them all as doubles). Returns the offset of the first other number,
// or n when there is none.
static size_t first_non_integer(const char *h, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (h[i] == '"') {
            for (i++; i < n && h[i] != '"'; i++)
                if (h[i] == '\\') i++;
            continue;
        }
        if (h[i] == '-' || (h[i] >= '0' && h[i] <= '9')) {
            size_t start = i;
            for (; i < n && (strchr("0123456789+-.eE", h[i]) && h[i]); i++)
                if (h[i] == '.' || h[i] == 'e' || h[i] == 'E') return start;
            i--;
        }
    }
    return n;
}

typedef struct {
    uint64_t begin, end;
    int tensor;
} StSpan;

static int span_cmp(const void *a, const void *b) {
    const StSpan *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

// The reference's rule: sorted by data_offsets, the tensors tile the data region
// exactly, from byte 0 to its end, with no overlap, alias or gap.
static int check_tiling(const SafeTensors *s, int first, const unsigned char *data, size_t data_size,
                        const char *path, Status *st) {
    int count = s->n_tensors - first;
    StSpan *sp = xmalloc(sizeof *sp * (size_t)(count ? count : 1));
    for (int i = 0; i < count; i++) {
        const StTensor *t = &s->tensors[first + i];
        sp[i].begin = (uint64_t)(t->data - data);
        sp[i].end = sp[i].begin + t->nbytes;
        sp[i].tensor = first + i;
    }
    qsort(sp, (size_t)count, sizeof *sp, span_cmp);
    uint64_t at = 0;
    int rc = 0;
    for (int i = 0; i < count && !rc; i++) {
        const char *name = s->tensors[sp[i].tensor].name;
        if (sp[i].begin < at)
            rc = status_fail(st, "%s: tensor \"%s\" has data_offsets [%llu, %llu] that overlap tensor \"%s\" "
                                 "(ending at %llu)", path, name, (unsigned long long)sp[i].begin,
                             (unsigned long long)sp[i].end, s->tensors[sp[i - 1].tensor].name,
                             (unsigned long long)at);
        else if (sp[i].begin > at)
            rc = status_fail(st, "%s: tensor \"%s\" has data_offsets [%llu, %llu], leaving bytes [%llu, %llu) "
                                 "of the data region to no tensor", path, name, (unsigned long long)sp[i].begin,
                             (unsigned long long)sp[i].end, (unsigned long long)at,
                             (unsigned long long)sp[i].begin);
        at = sp[i].end;
    }
    if (!rc && at != data_size)
        rc = status_fail(st, "%s: the tensors cover %llu bytes but the data region holds %zu (the offsets must "
                             "cover it exactly)", path, (unsigned long long)at, data_size);
    free(sp);
    return rc;
}

static int parse_entry(SafeTensors *s, int file, const cJSON *e, const unsigned char *data,
                       size_t data_size, const char *path, Status *st) {
    const char *name = e->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
        cJSON_GetArraySize(off) != 2)
        return status_fail(st, "%s: header entry \"%s\" lacks dtype, shape or data_offsets", path, name);
    StTensor t = {0};
    size_t esize = dtype_size(dt->valuestring, &t.dtype);
    if (!esize) return status_fail(st, "%s: tensor \"%s\" has unknown dtype \"%s\"", path, name, dt->valuestring);
    snprintf(t.dtype_name, sizeof t.dtype_name, "%s", dt->valuestring);
    t.ndim = cJSON_GetArraySize(sh);
    if (t.ndim > 8) return status_fail(st, "%s: tensor \"%s\" has %d dims (max 8)", path, name, t.ndim);
    t.numel = 1;
    for (int i = 0; i < t.ndim; i++) {
        const cJSON *d = cJSON_GetArrayItem(sh, i);
        // (Fractional numbers never get here: first_non_integer refused them.)
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e12)
            return status_fail(st, "%s: tensor \"%s\" has a bad shape", path, name);
        t.shape[i] = (int64_t)d->valuedouble;
        if (t.shape[i] && t.numel > INT64_MAX / 16 / t.shape[i])
            return status_fail(st, "%s: tensor \"%s\" is absurdly large", path, name);
        t.numel *= t.shape[i];
    }
    double b = cJSON_GetArrayItem(off, 0)->valuedouble, en = cJSON_GetArrayItem(off, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) ||
        b < 0 || en < b || en > (double)data_size)
        return status_fail(st, "%s: tensor \"%s\" has data_offsets [%.0f, %.0f] outside the %zu-byte data region (truncated file?)",
                           path, name, b, en, data_size);
    t.nbytes = (size_t)en - (size_t)b;
    if ((uint64_t)t.numel * esize != t.nbytes)
        return status_fail(st, "%s: tensor \"%s\": shape and dtype need %llu bytes but data_offsets span %zu",
                           path, name, (unsigned long long)t.numel * esize, t.nbytes);
    t.data = data + (size_t)b;
    t.file = file;
    const StTensor *dup = st_find(s, name);
    if (dup)
        return status_fail(st, dup->file == file ? "%s: tensor \"%s\" appears twice in the header"
                                                 : "%s: tensor \"%s\" appears in more than one file", path, name);
    t.name = strdup(name);
    SPINDLE_CHECK(t.name);
    s->tensors = realloc(s->tensors, (size_t)(s->n_tensors + 1) * sizeof *s->tensors);
    SPINDLE_CHECK(s->tensors);
    s->tensors[s->n_tensors++] = t;
    return 0;
}

int st_add_file(SafeTensors *s, const char *path, Status *st) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return status_fail(st, "%s: cannot open (%s)", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return status_fail(st, "%s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return status_fail(st, "%s: too short to be safetensors (%zu bytes)", path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return status_fail(st, "%s: mmap failed (%s)", path, strerror(errno));
    s->files = realloc(s->files, (size_t)(s->n_files + 1) * sizeof *s->files);
    SPINDLE_CHECK(s->files);
    int file = s->n_files++;
    s->files[file] = (StFile){strdup(path), map, size};

    const unsigned char *p = map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | p[i];
    if (n > ST_MAX_HEADER || n > size - 8)
        return status_fail(st, "%s: header length %llu is absurd for a %zu-byte file (truncated or not safetensors)",
                           path, (unsigned long long)n, size);
    const char *hdr = (const char *)p + 8;
    if (!utf8_valid(p + 8, (size_t)n))
        return status_fail(st, "%s: header is not valid UTF-8 (garbage or not safetensors)", path);
    size_t bad = first_non_integer(hdr, (size_t)n);
    if (bad < n)
        return status_fail(st, "%s: header number \"%.24s\" at byte %zu is not an integer (shapes and "
                               "data_offsets are unsigned integers)", path, hdr + bad, 8 + bad);
    const char *end = NULL;
    cJSON *h = cJSON_ParseWithLengthOpts(hdr, (size_t)n, &end, 0);
    if (!h || !cJSON_IsObject(h)) {
        cJSON_Delete(h);
        return status_fail(st, "%s: header is not valid JSON (garbage or truncated file)", path);
    }
    // Only whitespace may follow the JSON object (writers pad the header with spaces).
    for (const char *q = end; q < hdr + n; q++)
        if (!strchr(" \t\n\r", *q) || !*q) {
            cJSON_Delete(h);
            return status_fail(st, "%s: header has bytes after its JSON object (at byte %zu)", path,
                               (size_t)(q - (const char *)p));
        }
    int rc = 0, first = s->n_tensors;
    const unsigned char *data = p + 8 + n;
    size_t data_size = size - 8 - (size_t)n;
    const cJSON *e;
    cJSON_ArrayForEach(e, h) {
        if (!strcmp(e->string, "__metadata__")) {
            // A string -> string map (or null), as the reference requires.
            const cJSON *kv;
            if (!cJSON_IsNull(e) && !cJSON_IsObject(e)) {
                rc = status_fail(st, "%s: \"__metadata__\" is not an object of strings", path);
                break;
            }
            cJSON_ArrayForEach(kv, e) {
                if (!cJSON_IsString(kv)) {
                    rc = status_fail(st, "%s: \"__metadata__\" entry \"%s\" is not a string", path, kv->string);
                    break;
                }
            }
            if (rc) break;
            continue;
        }
        if ((rc = parse_entry(s, file, e, data, data_size, path, st))) break;
    }
    cJSON_Delete(h);
    if (!rc) rc = check_tiling(s, first, data, data_size, path, st);
    return rc;
}

int st_open(SafeTensors *s, const char *dir, Status *st) {
    memset(s, 0, sizeof *s);
    if (!path_is_dir(dir)) return status_fail(st, "%s: no such model folder", dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) != 0) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        return st_add_file(s, path, st);
    }
    char *text;
    size_t len;
    if (file_read_all(path, &text, &len, st)) return -1;
    cJSON *idx = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *wm = idx ? cJSON_GetObjectItemCaseSensitive(idx, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(idx);
        return status_fail(st, "%s: not valid JSON with a \"weight_map\" object", path);
    }
    int rc = 0;
    const cJSON *e;
    // Open each shard once, in order of first mention.
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            rc = status_fail(st, "%s: weight_map entry \"%s\" is not a plain file name", path, e->string);
            break;
        }
        char shard[4096];
        snprintf(shard, sizeof shard, "%s/%s", dir, e->valuestring);
        int seen = 0;
        for (int i = 0; i < s->n_files && !seen; i++) seen = !strcmp(s->files[i].path, shard);
        if (!seen && (rc = st_add_file(s, shard, st))) break;
    }
    if (!rc) {
        cJSON_ArrayForEach(e, wm) {
            if (!st_find(s, e->string)) {
                rc = status_fail(st, "%s: tensor \"%s\" is listed for %s but that file lacks it", path,
                                 e->string, e->valuestring);
                break;
            }
        }
    }
    cJSON_Delete(idx);
    return rc;
}

const StTensor *st_find(const SafeTensors *s, const char *name) {
    for (int i = 0; i < s->n_tensors; i++)
        if (!strcmp(s->tensors[i].name, name)) return &s->tensors[i];
    return NULL;
}

const char *st_path(const SafeTensors *s, const StTensor *t) { return s->files[t->file].path; }

float st_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | man << 13;  // inf / nan
    else if (exp) u = sign | (exp + 112) << 23 | man << 13;
    else if (!man) u = sign;
    else {  // subnormal: man × 2^-24
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void st_to_f32(const StTensor *t, float *dst) {
    const unsigned char *p = t->data;
    switch (t->dtype) {
    case ST_F32: memcpy(dst, p, (size_t)t->numel * 4); break;
    case ST_BF16:
        for (int64_t i = 0; i < t->numel; i++) dst[i] = st_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    case ST_F16:
        for (int64_t i = 0; i < t->numel; i++) dst[i] = st_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        break;
    default: SPINDLE_CHECK(!"st_to_f32: unsupported dtype");
    }
}

void st_close(SafeTensors *s) {
    for (int i = 0; i < s->n_files; i++) {
        munmap(s->files[i].map, s->files[i].size);
        free(s->files[i].path);
    }
    for (int i = 0; i < s->n_tensors; i++) free(s->tensors[i].name);
    free(s->files);
    free(s->tensors);
    memset(s, 0, sizeof *s);
}

int st_write(const char *path, const StWriteTensor *tensors, int n, const char *metadata_json, Status *st) {
    cJSON *h = cJSON_CreateObject();
    if (metadata_json) {
        cJSON *meta = cJSON_Parse(metadata_json);
        SPINDLE_CHECK(meta && cJSON_IsObject(meta));
        cJSON_AddItemToObject(h, "__metadata__", meta);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const StWriteTensor *t = &tensors[i];
        int64_t numel = 1;
        cJSON *e = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *offs = cJSON_CreateArray();
        for (int d = 0; d < t->ndim; d++) {
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
            numel *= t->shape[d];
        }
        cJSON_AddStringToObject(e, "dtype", "F32");
        cJSON_AddItemToObject(e, "shape", shape);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        off += (uint64_t)numel * 4;
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToObject(e, "data_offsets", offs);
        cJSON_AddItemToObject(h, t->name, e);
    }
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t jl = strlen(json), padded = (jl + 7) / 8 * 8;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    AtomicFile af;
    int rc = atomic_open(&af, path, st);
    if (!rc) rc = atomic_write(&af, len8, 8, st);
    if (!rc) rc = atomic_write(&af, json, jl, st);
    if (!rc) rc = atomic_write(&af, "        ", padded - jl, st);
    for (int i = 0; !rc && i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < tensors[i].ndim; d++) numel *= (size_t)tensors[i].shape[d];
        rc = atomic_write(&af, tensors[i].data, numel * 4, st);
    }
    free(json);
    if (rc) {
        atomic_abort(&af);
        return -1;
    }
    return atomic_commit(&af, st);
}
