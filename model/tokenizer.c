// tokenizer.c: BPE from a Hugging Face tokenizer.json (byte-level or
// SentencePiece-style), written to give the same ids as the HF `tokenizers`
// library (encode with add_special_tokens=False).
//
// The encode pipeline, in HF's order:
//   1. added tokens whose "normalized" flag is false are cut out of the raw text
//      (leftmost match first, the longest at that place; lstrip/rstrip/single_word
//      applied as HF does);
//   2. every remaining piece is normalized (NFC/NFD/NFKC/NFKD via utf8proc,
//      Replace, Prepend: so Llama 2's Prepend("▁") applies to each piece between
//      added tokens) and added tokens with "normalized": true are cut out of the
//      normalized text;
//   3. the pre-tokenizers split each piece (Split, Digits, ByteLevel, Metaspace;
//      Sequence of these); ByteLevel also maps every byte to its GPT-2
//      "bytes_to_unicode" character, Metaspace every ' ' to "▁". Each piece
//      knows whether it starts at byte 0 of the input (Metaspace "first");
//      with no pre-tokenizer (Gemma) a whole piece is one BPE word;
//   4. BPE per pre-token: characters not in the vocab become <0xNN> byte tokens
//      (byte_fallback) or unk; then repeatedly merge the adjacent pair with the lowest
//      merge rank, leftmost on ties (a min-heap with stale entries skipped, as HF
//      does, so a run of 10,000 spaces costs O(n log n), not O(n^2)).
//
// Regexes are PCRE2 (UTF + UCP, JIT when available). HF compiles them with
// Oniguruma, whose Unicode \s, \w and \h differ from PCRE2's; patterns are
// rewritten so the classes agree (see translate_pattern).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <utf8proc.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

// ---------------------------------------------------------------------------
// Small growable arrays
// ---------------------------------------------------------------------------

#define VEC_PUSH(arr, n, cap, value)                                        \
    do {                                                                    \
        if ((n) == (cap)) {                                                 \
            size_t new_cap_ = (cap) ? 2 * (cap) : 16;                       \
            void *p_ = realloc((arr), new_cap_ * sizeof *(arr));            \
            SPINDLE_CHECK(p_ != NULL);                                      \
            (arr) = p_;                                                     \
            (cap) = new_cap_;                                               \
        }                                                                   \
        (arr)[(n)++] = (value);                                             \
    } while (0)

// ---------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------

// Returns the byte offset of the first invalid sequence, or len when all valid.
// Strict: no overlong forms, no surrogates, nothing above U+10FFFF.
static size_t utf8_first_invalid(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 2, cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 3, cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 4, cp = c & 0x07;
        } else {
            return i;
        }
        if (i + n > len) return i;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += n;
    }
    return len;
}

// Length of the UTF-8 sequence that starts with byte c (input already valid).
static size_t utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

// Decodes the valid UTF-8 character at s.
static uint32_t utf8_decode(const unsigned char *s) {
    size_t n = utf8_len(s[0]);
    if (n == 1) return s[0];
    uint32_t cp = s[0] & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < n; k++) cp = (cp << 6) | (s[k] & 0x3F);
    return cp;
}

static size_t utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

// Rust's char::is_whitespace: the Unicode White_Space property.
static bool is_unicode_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

// HF decides "single_word" with the Rust regex \w: Alphabetic, marks, decimal
// digits, connector punctuation and the joiners U+200C/U+200D. Alphabetic is
// taken as letters, letter numbers, marks and the few symbol blocks that are
// Other_Alphabetic (circled and squared Latin letters).
static bool is_word_char(uint32_t c) {
    if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) ||
        (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
        (c >= 0x1F170 && c <= 0x1F189))
        return true;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

// Start of the character that ends just before position `end` (end > 0).
static size_t utf8_prev_start(const char *s, size_t end) {
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

// ---------------------------------------------------------------------------
// GPT-2 byte <-> unicode map
// ---------------------------------------------------------------------------
//
// Printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for themselves; the
// other 68 bytes take the code points 256, 257, ... in byte order. Every mapped
// character is one or two bytes of UTF-8.

typedef struct {
    char utf8[256][2];
    uint8_t utf8_len[256];
    int16_t byte_of_cp[324];  // code point -> byte, -1 when unmapped
} ByteMap;

static void bytemap_init(ByteMap *m) {
    int next = 256;
    for (int i = 0; i < 324; i++) m->byte_of_cp[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)next++;
        char buf[4];
        m->utf8_len[b] = (uint8_t)utf8_encode(cp, buf);
        memcpy(m->utf8[b], buf, m->utf8_len[b]);
        m->byte_of_cp[cp] = (int16_t)b;
    }
}

// ---------------------------------------------------------------------------
// Hash tables (open addressing, linear probing)
// ---------------------------------------------------------------------------

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

// string -> id. Keys are owned copies.
typedef struct {
    char *key;  // NULL: empty slot
    uint32_t len;
    int32_t val;
    uint64_t hash;
} StrSlot;

typedef struct {
    StrSlot *slots;
    size_t cap;  // power of two
    size_t count;
} StrMap;

static void strmap_init(StrMap *m, size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    m->slots = xcalloc(cap, sizeof *m->slots);
    m->cap = cap;
    m->count = 0;
}

static void strmap_free(StrMap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    m->slots = NULL;
}

static StrSlot *strmap_slot(const StrMap *m, const char *key, size_t len, uint64_t h) {
    size_t i = h & (m->cap - 1);
    for (;;) {
        StrSlot *s = &m->slots[i];
        if (!s->key || (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)) return s;
        i = (i + 1) & (m->cap - 1);
    }
}

// Inserts or overwrites (the last value for a key wins, as with a JSON object
// parsed into a HashMap).
static void strmap_put(StrMap *m, const char *key, size_t len, int32_t val) {
    if (2 * (m->count + 1) > m->cap) {
        StrMap bigger;
        strmap_init(&bigger, m->count + 1);
        for (size_t i = 0; i < m->cap; i++) {
            StrSlot *s = &m->slots[i];
            if (s->key) *strmap_slot(&bigger, s->key, s->len, s->hash) = *s;
        }
        free(m->slots);
        *m = bigger;
    }
    uint64_t h = hash_bytes(key, len);
    StrSlot *s = strmap_slot(m, key, len, h);
    if (!s->key) {
        s->key = xmalloc(len + 1);
        memcpy(s->key, key, len);
        s->key[len] = '\0';
        s->len = (uint32_t)len;
        s->hash = h;
        m->count++;
    }
    s->val = val;
}

// Returns the id, or -1.
static int32_t strmap_get(const StrMap *m, const char *key, size_t len) {
    const StrSlot *s = strmap_slot(m, key, len, hash_bytes(key, len));
    return s->key ? s->val : -1;
}

// (left id, right id) -> (merge rank, merged id).
typedef struct {
    uint64_t key;  // UINT64_MAX: empty slot
    int32_t rank;
    int32_t merged;
} PairSlot;

typedef struct {
    PairSlot *slots;
    size_t cap;
} PairMap;

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static size_t pair_hash(uint64_t key, size_t cap) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

static void pairmap_init(PairMap *m, size_t expected) {
    size_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    m->slots = xmalloc(cap * sizeof *m->slots);
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->cap = cap;
}

static PairSlot *pairmap_slot(const PairMap *m, uint64_t key) {
    size_t i = pair_hash(key, m->cap);
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != key) i = (i + 1) & (m->cap - 1);
    return &m->slots[i];
}

// The table is sized for all merges up front, so it never grows.
static void pairmap_put(PairMap *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    PairSlot *s = pairmap_slot(m, pair_key(a, b));
    s->key = pair_key(a, b);
    s->rank = rank;
    s->merged = merged;
}

static const PairSlot *pairmap_get(const PairMap *m, int32_t a, int32_t b) {
    const PairSlot *s = pairmap_slot(m, pair_key(a, b));
    return s->key == UINT64_MAX ? NULL : s;
}

// ---------------------------------------------------------------------------
// The tokenizer
// ---------------------------------------------------------------------------

typedef enum { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD, NORM_REPLACE, NORM_PREPEND } NormKind;

typedef struct {
    NormKind kind;
    char *pattern;  // Replace: the literal pattern (never empty)
    char *content;  // Replace: its replacement; Prepend: the prefix
} NormStep;

typedef enum { PRE_SPLIT, PRE_BYTE_LEVEL, PRE_METASPACE } PreKind;

// Metaspace's prepend_scheme: when the replacement character is put in front
// of a piece that does not start with it.
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } PrependScheme;

// Decoder steps, applied in order to the list of token strings (HF decode_chain).
typedef enum {
    DEC_BYTE_LEVEL,     // GPT-2 characters back to bytes; one string out
    DEC_METASPACE,      // replacement -> ' '; dropped in the first token unless scheme never
    DEC_REPLACE,        // literal pattern -> content, in each token
    DEC_BYTE_FALLBACK,  // runs of <0xNN> tokens -> their bytes (U+FFFD per byte if not UTF-8)
    DEC_FUSE,           // all tokens -> one string
    DEC_STRIP,          // up to `start` leading and `stop` trailing `content` characters
} DecKind;

typedef struct {
    DecKind kind;
    char *pattern, *content;  // Replace: literal pattern and content; Metaspace/Strip: the character
    PrependScheme scheme;     // Metaspace
    int start, stop;          // Strip
} DecStep;

typedef enum {
    SPLIT_REMOVED,
    SPLIT_ISOLATED,
    SPLIT_MERGED_WITH_PREVIOUS,
    SPLIT_MERGED_WITH_NEXT,
    SPLIT_CONTIGUOUS,
} SplitBehavior;

typedef struct {
    PreKind kind;
    pcre2_code *re;  // Split: the pattern (NULL: the empty String, never matches);
                     // ByteLevel: the GPT-2 pattern when use_regex, else NULL
    SplitBehavior behavior;
    bool invert;
    bool add_prefix_space;  // ByteLevel only
    char replacement[5];    // Metaspace: the character that stands for ' ' (UTF-8)
    size_t rep_len;
    PrependScheme scheme;   // Metaspace
    bool split;             // Metaspace: cut before every replacement character
} PreStep;

typedef struct {
    char *content;  // as matched: normalized when `normalized` is set
    size_t len;
    int32_t id;
    bool special, single_word, lstrip, rstrip, normalized;
} AddedToken;

// Added tokens of one kind (raw or normalized), bucketed by first byte, each
// bucket ordered longest first so the first hit at a position is the longest.
typedef struct {
    int32_t *order;        // indices into Tokenizer.added
    uint32_t start[257];   // bucket b is order[start[b] .. start[b+1])
} AddedIndex;

struct Tokenizer {
    char *path;
    int32_t max_ids;     // every id is below this (the model's vocab_size, or TOK_MAX_IDS)
    char *model_config;  // the config.json that set max_ids, or NULL
    ByteMap bytes;

    StrMap vocab;    // model vocab: token string -> id
    PairMap merges;  // (a, b) -> rank, merged id
    char **id_to_token;  // n_ids entries (room for cap_ids), NULL for holes
    int32_t n_ids, cap_ids;
    bool ignore_merges;
    bool byte_fallback;
    bool fuse_unk;
    int32_t unk_id;  // -1: none

    NormStep norms[16];
    int n_norms;

    PreStep *pre;
    int n_pre;

    AddedToken *added;
    int n_added;
    AddedIndex raw_index, norm_index;
    int32_t *added_at;  // n_ids entries: id -> index into added, or -1

    bool has_decoder;  // false: decode joins the tokens with ' ' (HF without a decoder)
    DecStep *dec;
    int n_dec;
};

// ---------------------------------------------------------------------------
// Regex: Oniguruma classes in PCRE2 terms
// ---------------------------------------------------------------------------
//
// HF compiles patterns with Oniguruma (Ruby syntax, UTF-8). With PCRE2_UCP, PCRE2
// differs on a few escapes, so they are spelled out:
//   \s  Onig: \t \n \v \f \r, U+0085 and general categories Zs/Zl/Zp.
//       PCRE2 UCP also matches U+180E (through \h).
//   \w  Onig: Alphabetic (letters, letter numbers, circled/squared letters),
//       marks, numbers, connector punctuation; inside a class (as measured
//       against HF) numbers narrow to Nd and Nl, so '½' and '²' drop out.
//       PCRE2 10.42 UCP: letters, numbers, '_' only.
//   \h  Onig: a hexadecimal digit. PCRE2: horizontal space.
// \S/\W/\H are negated the same way outside a class; inside a class they are left
// to PCRE2 (no such pattern is known in released tokenizers).

#define ONIG_SPACE "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"
#define ONIG_ALPHA_SYMBOLS "\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}"
#define ONIG_WORD "\\p{L}\\p{M}\\p{N}\\p{Pc}" ONIG_ALPHA_SYMBOLS
#define ONIG_WORD_IN_CLASS "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}" ONIG_ALPHA_SYMBOLS
#define ONIG_HEX "0-9a-fA-F"

static char *translate_pattern(const char *pat) {
    size_t n = strlen(pat);
    size_t cap = 64 * n + 64;  // an escape (2 bytes) grows to at most ~110
    char *out = xmalloc(cap);
    size_t o = 0;
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char e = pat[i + 1];
            const char *set = e == 's' || e == 'S' ? ONIG_SPACE
                              : e == 'w' || e == 'W' ? (in_class ? ONIG_WORD_IN_CLASS : ONIG_WORD)
                              : e == 'h' || e == 'H' ? ONIG_HEX
                                                     : NULL;
            bool negated = e == 'S' || e == 'W' || e == 'H';
            if (set && !(in_class && negated)) {
                o += (size_t)sprintf(out + o, in_class ? "%s" : negated ? "[^%s]" : "[%s]", set);
            } else {
                out[o++] = c;
                out[o++] = e;
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out[o++] = c;
            // A ']' right after '[' or '[^' is a literal member.
            if (i + 1 < n && pat[i + 1] == '^') out[o++] = pat[++i];
            if (i + 1 < n && pat[i + 1] == ']') out[o++] = pat[++i];
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && pat[i + 1] == ':') {
            // POSIX class [:name:] inside a class: copy through its closing ":]".
            const char *end = strstr(pat + i + 2, ":]");
            if (end) {
                size_t k = (size_t)(end - (pat + i)) + 2;
                memcpy(out + o, pat + i, k);
                o += k;
                i += k - 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = false;
        out[o++] = c;
    }
    out[o] = '\0';
    return out;
}

// Compiles pat (Oniguruma-style, or a literal string) for UTF-8 text.
static int compile_regex(pcre2_code **out, const char *pat, bool literal, const char *path,
                         Status *st) {
    *out = NULL;
    char *translated = literal ? NULL : translate_pattern(pat);
    const char *src = literal ? pat : translated;
    int err = 0;
    PCRE2_SIZE err_off = 0;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)src, PCRE2_ZERO_TERMINATED, opts, &err, &err_off, NULL);
    free(translated);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return status_fail(st, "%s: cannot compile pre-tokenizer pattern \"%s\": %s (at offset %zu)",
                           path, pat, (const char *)msg, (size_t)err_off);
    }
    // JIT when available (the interpreter is the fallback). Valgrind reports the
    // JIT's wide reads as errors; SPINDLE_PCRE2_NO_JIT=1 turns it off for such runs.
    const char *no_jit = getenv("SPINDLE_PCRE2_NO_JIT");
    if (!no_jit || strcmp(no_jit, "1") != 0) pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return 0;
}

static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

static int read_file(const char *path, char **data, size_t *len, Status *st) {
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return status_fail(st, "%s: cannot open tokenizer file: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            char *p = realloc(buf, cap);
            SPINDLE_CHECK(p != NULL);
            buf = p;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    bool failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return status_fail(st, "%s: read error", path);
    }
    *data = buf;
    *len = n;
    return 0;
}

// A JSON string member, or NULL when absent or not a string.
static const char *json_str(const cJSON *obj, const char *name) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

static bool json_bool(const cJSON *obj, const char *name, bool fallback) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsBool(it) ? cJSON_IsTrue(it) : fallback;
}

static bool json_is_null_or_absent(const cJSON *obj, const char *name) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);
    return !it || cJSON_IsNull(it);
}

// An id at or beyond the bound: the model's vocab_size when the tokenizer is
// loaded for a model, else TOK_MAX_IDS.
static int fail_id_range(const Tokenizer *t, double id, const char *token, Status *st) {
    if (t->model_config)
        return status_fail(st, "%s: token \"%.60s\" has id %.0f, outside the model's vocabulary [0, %d) "
                               "(%s: vocab_size %d)", t->path, token, id, t->max_ids, t->model_config, t->max_ids);
    return status_fail(st, "%s: token \"%.60s\" has id %.0f, beyond the largest supported id %d", t->path,
                       token, id, t->max_ids - 1);
}

// Grows id_to_token so that id fits. The room grows geometrically: one
// realloc per id would copy the table once per token (quadratic in the
// vocabulary wherever realloc cannot extend in place, e.g. under ASan).
static void ensure_id(Tokenizer *t, int32_t id) {
    if (id < t->n_ids) return;
    if (id >= t->cap_ids) {
        int64_t cap = t->cap_ids ? 2 * (int64_t)t->cap_ids : 1024;
        if (cap <= id) cap = (int64_t)id + 1;
        char **p = realloc(t->id_to_token, (size_t)cap * sizeof *p);
        SPINDLE_CHECK(p != NULL);
        t->id_to_token = p;
        t->cap_ids = (int32_t)(cap < INT32_MAX ? cap : INT32_MAX);
    }
    for (int32_t i = t->n_ids; i <= id; i++) t->id_to_token[i] = NULL;
    t->n_ids = id + 1;
}

static void set_token(Tokenizer *t, int32_t id, const char *s) {
    ensure_id(t, id);
    if (!t->id_to_token[id]) t->id_to_token[id] = strdup(s);
    SPINDLE_CHECK(t->id_to_token[id] != NULL);
}

static int add_merge(Tokenizer *t, int32_t rank, const char *a, const char *b, Status *st) {
    int32_t ia = strmap_get(&t->vocab, a, strlen(a));
    int32_t ib = strmap_get(&t->vocab, b, strlen(b));
    size_t la = strlen(a), lb = strlen(b);
    char small[256];
    char *joined = la + lb < sizeof small ? small : xmalloc(la + lb + 1);
    memcpy(joined, a, la);
    memcpy(joined + la, b, lb);
    joined[la + lb] = '\0';
    int32_t im = strmap_get(&t->vocab, joined, la + lb);
    int rc = 0;
    if (ia < 0 || ib < 0 || im < 0) {
        rc = status_fail(st, "%s: merge %d (\"%s\" \"%s\") uses token \"%s\" that is not in the vocab",
                         t->path, (int)rank + 1, a, b, ia < 0 ? a : ib < 0 ? b : joined);
    } else {
        pairmap_put(&t->merges, ia, ib, rank, im);
    }
    if (joined != small) free(joined);
    return rc;
}

static int load_model(Tokenizer *t, const cJSON *model, Status *st) {
    if (!cJSON_IsObject(model)) return status_fail(st, "%s: no \"model\" object", t->path);
    const char *type = json_str(model, "type");
    if (type && strcmp(type, "BPE") != 0)
        return status_fail(st, "%s: model type \"%s\" is not supported (only BPE)", t->path, type);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsObject(vocab)) return status_fail(st, "%s: model has no \"vocab\" object", t->path);
    if (!json_is_null_or_absent(model, "merges") && !cJSON_IsArray(merges))
        return status_fail(st, "%s: model \"merges\" is not an array", t->path);

    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble != 0.0)
        return status_fail(st, "%s: BPE dropout is not supported", t->path);
    const char *csp = json_str(model, "continuing_subword_prefix");
    const char *eow = json_str(model, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return status_fail(st, "%s: BPE continuing_subword_prefix/end_of_word_suffix are not supported",
                           t->path);
    t->ignore_merges = json_bool(model, "ignore_merges", false);
    t->byte_fallback = json_bool(model, "byte_fallback", false);
    t->fuse_unk = json_bool(model, "fuse_unk", false);

    strmap_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab));
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble != floor(it->valuedouble))
            return status_fail(st, "%s: vocab entry \"%s\" has no valid id (a non-negative integer)",
                               t->path, it->string);
        if (it->valuedouble >= t->max_ids) return fail_id_range(t, it->valuedouble, it->string, st);
        int32_t id = (int32_t)it->valuedouble;
        size_t klen = strlen(it->string);
        if (utf8_first_invalid((const unsigned char *)it->string, klen) != klen)
            return status_fail(st, "%s: vocab entry %d is not valid UTF-8", t->path, (int)id);
        strmap_put(&t->vocab, it->string, strlen(it->string), id);
        set_token(t, id, it->string);
    }

    t->unk_id = -1;
    const char *unk = json_str(model, "unk_token");
    if (unk) {
        t->unk_id = strmap_get(&t->vocab, unk, strlen(unk));
        if (t->unk_id < 0)
            return status_fail(st, "%s: unk_token \"%s\" is not in the vocab", t->path, unk);
    }

    int n_merges = merges ? cJSON_GetArraySize(merges) : 0;
    pairmap_init(&t->merges, (size_t)n_merges);
    int32_t rank = 0;
    cJSON_ArrayForEach(it, merges) {
        if (cJSON_IsString(it)) {
            // "a b": exactly one space; "#version" lines are comments.
            const char *s = it->valuestring;
            if (strncmp(s, "#version", 8) == 0) continue;
            const char *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return status_fail(st, "%s: merge %d \"%s\" is not of the form \"a b\"", t->path,
                                   (int)rank + 1, s);
            size_t la = (size_t)(sp - s);
            char *a = xmalloc(la + 1);
            memcpy(a, s, la);
            a[la] = '\0';
            int rc = add_merge(t, rank, a, sp + 1, st);
            free(a);
            if (rc) return rc;
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            if (add_merge(t, rank, cJSON_GetArrayItem(it, 0)->valuestring,
                          cJSON_GetArrayItem(it, 1)->valuestring, st))
                return -1;
        } else {
            return status_fail(st, "%s: merge %d is neither \"a b\" nor [\"a\", \"b\"]", t->path,
                               (int)rank + 1);
        }
        rank++;
    }
    return 0;
}

static char *xstrdup(const char *s) {
    char *p = strdup(s);
    SPINDLE_CHECK(p != NULL);
    return p;
}

// The "pattern" of a Replace normalizer or decoder (`what` names which). Only
// {"String": "..."} is implemented; a Regex pattern is refused, and so is an
// empty String (HF's replace would then change nothing).
static int replace_fields(const Tokenizer *t, const cJSON *obj, const char *what, const char **pat,
                          Status *st) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(obj, "pattern");
    if (json_str(p, "Regex"))
        return status_fail(st, "%s: %s Replace with a Regex pattern is not supported (only {\"String\": ...})",
                           t->path, what);
    *pat = json_str(p, "String");
    if (!*pat)
        return status_fail(st, "%s: %s Replace has no \"pattern\": {\"String\": ...}", t->path, what);
    if (!**pat) return status_fail(st, "%s: %s Replace has an empty pattern", t->path, what);
    return 0;
}

// One UTF-8 character from a JSON string member (Metaspace's "replacement",
// Strip's "content"); `what` names the field in the message.
static int json_char(const Tokenizer *t, const cJSON *obj, const char *name, const char *what,
                     char out[5], size_t *len, Status *st) {
    const char *s = json_str(obj, name);
    if (!s || !*s || strlen(s) != utf8_len((unsigned char)s[0]) ||
        utf8_first_invalid((const unsigned char *)s, strlen(s)) != strlen(s))
        return status_fail(st, "%s: %s \"%s\" must be one character", t->path, what, name);
    *len = strlen(s);
    memcpy(out, s, *len);
    out[*len] = '\0';
    return 0;
}

// Metaspace's prepend_scheme, or the older add_prefix_space (true: always).
// HF refuses add_prefix_space false unless prepend_scheme says never or first.
static int json_prepend_scheme(const Tokenizer *t, const cJSON *obj, const char *what,
                               PrependScheme *out, Status *st) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, "prepend_scheme");
    const char *s = json_str(obj, "prepend_scheme");
    if (it && !s) return status_fail(st, "%s: %s \"prepend_scheme\" is not a string", t->path, what);
    if (!s || strcmp(s, "always") == 0) *out = PREPEND_ALWAYS;
    else if (strcmp(s, "first") == 0) *out = PREPEND_FIRST;
    else if (strcmp(s, "never") == 0) *out = PREPEND_NEVER;
    else
        return status_fail(st, "%s: %s prepend_scheme \"%s\" is not one of always, first, never", t->path,
                           what, s);
    if (!json_bool(obj, "add_prefix_space", true) && *out == PREPEND_ALWAYS)
        return status_fail(st, "%s: %s add_prefix_space false contradicts prepend_scheme always", t->path,
                           what);
    return 0;
}

static int load_normalizer(Tokenizer *t, const cJSON *norm, Status *st) {
    if (!norm || cJSON_IsNull(norm)) return 0;
    const char *type = json_str(norm, "type");
    if (!type) return status_fail(st, "%s: normalizer without a \"type\"", t->path);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
        if (!cJSON_IsArray(list))
            return status_fail(st, "%s: Sequence normalizer without a \"normalizers\" array", t->path);
        const cJSON *it;
        cJSON_ArrayForEach(it, list) {
            if (load_normalizer(t, it, st)) return -1;
        }
        return 0;
    }
    NormStep step = {0};
    if (strcmp(type, "NFC") == 0) step.kind = NORM_NFC;
    else if (strcmp(type, "NFD") == 0) step.kind = NORM_NFD;
    else if (strcmp(type, "NFKC") == 0) step.kind = NORM_NFKC;
    else if (strcmp(type, "NFKD") == 0) step.kind = NORM_NFKD;
    else if (strcmp(type, "Replace") == 0) step.kind = NORM_REPLACE;
    else if (strcmp(type, "Prepend") == 0) step.kind = NORM_PREPEND;
    else
        return status_fail(st, "%s: normalizer type \"%s\" is not supported "
                               "(supported: NFC, NFD, NFKC, NFKD, Replace, Prepend, Sequence)", t->path, type);
    if (t->n_norms == (int)(sizeof t->norms / sizeof t->norms[0]))
        return status_fail(st, "%s: too many normalizers", t->path);
    if (step.kind == NORM_REPLACE) {
        const char *pat = NULL, *content = json_str(norm, "content");
        if (replace_fields(t, norm, "normalizer", &pat, st)) return -1;
        if (!content) return status_fail(st, "%s: normalizer Replace lacks a \"content\" string", t->path);
        step.pattern = xstrdup(pat);
        step.content = xstrdup(content);
    } else if (step.kind == NORM_PREPEND) {
        const char *prefix = json_str(norm, "prepend");
        if (!prefix) return status_fail(st, "%s: normalizer Prepend lacks a \"prepend\" string", t->path);
        step.content = xstrdup(prefix);
    }
    t->norms[t->n_norms++] = step;
    return 0;
}

static PreStep *new_step(Tokenizer *t) {
    PreStep *p = realloc(t->pre, (size_t)(t->n_pre + 1) * sizeof *p);
    SPINDLE_CHECK(p != NULL);
    t->pre = p;
    PreStep *s = &t->pre[t->n_pre++];
    memset(s, 0, sizeof *s);
    return s;
}

static int load_pre_tokenizer(Tokenizer *t, const cJSON *pre, Status *st) {
    if (!pre || cJSON_IsNull(pre)) return 0;
    const char *type = json_str(pre, "type");
    if (!type) return status_fail(st, "%s: pre_tokenizer without a \"type\"", t->path);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
        if (!cJSON_IsArray(list))
            return status_fail(st, "%s: Sequence pre_tokenizer without a \"pretokenizers\" array",
                               t->path);
        const cJSON *it;
        cJSON_ArrayForEach(it, list) {
            if (load_pre_tokenizer(t, it, st)) return -1;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        PreStep *s = new_step(t);
        s->kind = PRE_BYTE_LEVEL;
        s->add_prefix_space = json_bool(pre, "add_prefix_space", true);
        if (json_bool(pre, "use_regex", true)) return compile_regex(&s->re, GPT2_PATTERN, false, t->path, st);
        return 0;
    }
    if (strcmp(type, "Digits") == 0) {
        PreStep *s = new_step(t);
        s->kind = PRE_SPLIT;
        // Each numeric character (Rust char::is_numeric: Nd, Nl, No) is a match.
        s->behavior = json_bool(pre, "individual_digits", false) ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
        return compile_regex(&s->re, "\\p{N}", false, t->path, st);
    }
    if (strcmp(type, "Split") == 0) {
        PreStep *s = new_step(t);
        s->kind = PRE_SPLIT;
        s->invert = json_bool(pre, "invert", false);
        const char *b = json_str(pre, "behavior");
        if (!b) return status_fail(st, "%s: Split pre_tokenizer without a \"behavior\"", t->path);
        if (strcmp(b, "Removed") == 0) s->behavior = SPLIT_REMOVED;
        else if (strcmp(b, "Isolated") == 0) s->behavior = SPLIT_ISOLATED;
        else if (strcmp(b, "MergedWithPrevious") == 0) s->behavior = SPLIT_MERGED_WITH_PREVIOUS;
        else if (strcmp(b, "MergedWithNext") == 0) s->behavior = SPLIT_MERGED_WITH_NEXT;
        else if (strcmp(b, "Contiguous") == 0) s->behavior = SPLIT_CONTIGUOUS;
        else return status_fail(st, "%s: Split behavior \"%s\" is not supported", t->path, b);
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pre, "pattern");
        const char *re = json_str(pat, "Regex");
        const char *lit = json_str(pat, "String");
        if (re) return compile_regex(&s->re, re, false, t->path, st);
        if (lit) return *lit ? compile_regex(&s->re, lit, true, t->path, st) : 0;
        return status_fail(st, "%s: Split pattern is neither {\"Regex\": ...} nor {\"String\": ...}",
                           t->path);
    }
    if (strcmp(type, "Metaspace") == 0) {
        PreStep *s = new_step(t);
        s->kind = PRE_METASPACE;
        s->split = json_bool(pre, "split", true);
        if (json_char(t, pre, "replacement", "pre_tokenizer Metaspace", s->replacement, &s->rep_len, st))
            return -1;
        return json_prepend_scheme(t, pre, "pre_tokenizer Metaspace", &s->scheme, st);
    }
    return status_fail(st, "%s: pre_tokenizer type \"%s\" is not supported "
                           "(supported: ByteLevel, Split, Digits, Metaspace, Sequence)", t->path, type);
}

static int normalize(const Tokenizer *t, const char *s, size_t n, char **out, size_t *out_len,
                     Status *st);

static void build_added_index(const Tokenizer *t, AddedIndex *ix, bool normalized) {
    int count = 0;
    for (int i = 0; i < t->n_added; i++) count += t->added[i].normalized == normalized;
    ix->order = xmalloc((size_t)(count ? count : 1) * sizeof *ix->order);
    // Counting sort by first byte, then longest first inside each bucket.
    uint32_t counts[256] = {0};
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized && t->added[i].len > 0)
            counts[(unsigned char)t->added[i].content[0]]++;
    ix->start[0] = 0;
    for (int b = 0; b < 256; b++) ix->start[b + 1] = ix->start[b] + counts[b];
    uint32_t fill[256];
    memcpy(fill, ix->start, sizeof fill);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized && t->added[i].len > 0)
            ix->order[fill[(unsigned char)t->added[i].content[0]]++] = i;
    for (int b = 0; b < 256; b++) {
        // Insertion sort: buckets are small. Stable, so the first listed wins a tie.
        for (uint32_t i = ix->start[b] + 1; i < ix->start[b + 1]; i++) {
            int32_t v = ix->order[i];
            uint32_t j = i;
            while (j > ix->start[b] && t->added[ix->order[j - 1]].len < t->added[v].len) {
                ix->order[j] = ix->order[j - 1];
                j--;
            }
            ix->order[j] = v;
        }
    }
}

// Added tokens. HF does not take the "id" written in the file: it re-adds the
// tokens in file order, and a token gets its id from the model vocab when the
// vocab has its content, else the next free id after the vocab (see
// AddedVocabulary::add_tokens). For a consistent file that is the written id;
// for an inconsistent one HF's id is the one the model was trained with, so
// the same rule is applied here. Empty and repeated contents are skipped.
static int load_added_tokens(Tokenizer *t, const cJSON *list, Status *st) {
    if (!list || cJSON_IsNull(list)) return 0;
    if (!cJSON_IsArray(list)) return status_fail(st, "%s: \"added_tokens\" is not an array", t->path);
    int n = cJSON_GetArraySize(list);
    t->added = xcalloc((size_t)(n ? n : 1), sizeof *t->added);
    int32_t vocab_len = (int32_t)t->vocab.count;
    int32_t max_added = -1;
    int index = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        index++;
        const char *content = json_str(it, "content");
        if (!content)
            return status_fail(st, "%s: added token %d lacks a \"content\" string", t->path, index);
        size_t len = strlen(content);
        if (utf8_first_invalid((const unsigned char *)content, len) != len)
            return status_fail(st, "%s: added token %d is not valid UTF-8", t->path, index);
        bool seen = len == 0;
        for (int i = 0; i < t->n_added && !seen; i++)
            seen = strcmp(t->id_to_token[t->added[i].id], content) == 0;
        if (seen) continue;

        AddedToken *a = &t->added[t->n_added];
        a->id = strmap_get(&t->vocab, content, len);
        if (a->id < 0)
            a->id = max_added < 0 ? vocab_len
                    : (max_added >= vocab_len || vocab_len == 0) ? max_added + 1 : vocab_len;
        if (a->id >= t->max_ids) return fail_id_range(t, a->id, content, st);
        if (a->id > max_added) max_added = a->id;
        a->special = json_bool(it, "special", false);
        a->single_word = json_bool(it, "single_word", false);
        a->lstrip = json_bool(it, "lstrip", false);
        a->rstrip = json_bool(it, "rstrip", false);
        a->normalized = json_bool(it, "normalized", !a->special);
        // An added token's string wins over a vocab entry with the same id.
        ensure_id(t, a->id);
        free(t->id_to_token[a->id]);
        t->id_to_token[a->id] = NULL;
        set_token(t, a->id, content);
        t->n_added++;
        if (a->normalized && t->n_norms > 0) {
            // Normalized tokens are looked for in normalized text: normalize them too.
            if (normalize(t, content, len, &a->content, &a->len, st)) return -1;
        } else {
            a->content = strdup(content);
            SPINDLE_CHECK(a->content != NULL);
            a->len = len;
        }
    }
    build_added_index(t, &t->raw_index, false);
    build_added_index(t, &t->norm_index, true);
    t->added_at = xmalloc((size_t)(t->n_ids ? t->n_ids : 1) * sizeof *t->added_at);
    for (int32_t i = 0; i < t->n_ids; i++) t->added_at[i] = -1;
    for (int i = 0; i < t->n_added; i++) t->added_at[t->added[i].id] = i;
    return 0;
}

static int load_decoder(Tokenizer *t, const cJSON *dec, Status *st) {
    if (!dec || cJSON_IsNull(dec)) return 0;
    t->has_decoder = true;
    const char *type = json_str(dec, "type");
    if (!type) return status_fail(st, "%s: decoder without a \"type\"", t->path);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(dec, "decoders");
        if (!cJSON_IsArray(list))
            return status_fail(st, "%s: Sequence decoder without a \"decoders\" array", t->path);
        const cJSON *it;
        cJSON_ArrayForEach(it, list) {
            if (load_decoder(t, it, st)) return -1;
        }
        return 0;
    }
    DecStep step = {0};
    if (strcmp(type, "ByteLevel") == 0) step.kind = DEC_BYTE_LEVEL;
    else if (strcmp(type, "Metaspace") == 0) step.kind = DEC_METASPACE;
    else if (strcmp(type, "Replace") == 0) step.kind = DEC_REPLACE;
    else if (strcmp(type, "ByteFallback") == 0) step.kind = DEC_BYTE_FALLBACK;
    else if (strcmp(type, "Fuse") == 0) step.kind = DEC_FUSE;
    else if (strcmp(type, "Strip") == 0) step.kind = DEC_STRIP;
    else
        return status_fail(st, "%s: decoder type \"%s\" is not supported (supported: ByteLevel, Metaspace, "
                               "Replace, ByteFallback, Fuse, Strip, Sequence)", t->path, type);
    char ch[5];
    size_t ch_len = 0;
    if (step.kind == DEC_METASPACE) {
        if (json_char(t, dec, "replacement", "decoder Metaspace", ch, &ch_len, st)) return -1;
        if (json_prepend_scheme(t, dec, "decoder Metaspace", &step.scheme, st)) return -1;
        step.pattern = xstrdup(ch);
    } else if (step.kind == DEC_REPLACE) {
        const char *pat = NULL, *content = json_str(dec, "content");
        if (replace_fields(t, dec, "decoder", &pat, st)) return -1;
        if (!content) return status_fail(st, "%s: decoder Replace lacks a \"content\" string", t->path);
        step.pattern = xstrdup(pat);
        step.content = xstrdup(content);
    } else if (step.kind == DEC_STRIP) {
        if (json_char(t, dec, "content", "decoder Strip", ch, &ch_len, st)) return -1;
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(dec, "start");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(dec, "stop");
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble < 0 ||
            a->valuedouble > 1e6 || b->valuedouble > 1e6 || a->valuedouble != floor(a->valuedouble) ||
            b->valuedouble != floor(b->valuedouble))
            return status_fail(st, "%s: decoder Strip needs integer \"start\" and \"stop\" >= 0", t->path);
        step.start = (int)a->valuedouble;
        step.stop = (int)b->valuedouble;
        step.pattern = xstrdup(ch);
    }
    DecStep *p = realloc(t->dec, (size_t)(t->n_dec + 1) * sizeof *p);
    SPINDLE_CHECK(p != NULL);
    t->dec = p;
    t->dec[t->n_dec++] = step;
    return 0;
}

void tok_free(Tokenizer *t) {
    if (!t) return;
    free(t->path);
    free(t->model_config);
    if (t->vocab.slots) strmap_free(&t->vocab);
    free(t->merges.slots);
    for (int32_t i = 0; i < t->n_ids; i++) free(t->id_to_token[i]);
    free(t->id_to_token);
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i].re);
    free(t->pre);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t->raw_index.order);
    free(t->norm_index.order);
    free(t->added_at);
    for (int i = 0; i < t->n_norms; i++) free(t->norms[i].pattern), free(t->norms[i].content);
    for (int i = 0; i < t->n_dec; i++) free(t->dec[i].pattern), free(t->dec[i].content);
    free(t->dec);
    free(t);
}

int tok_load(Tokenizer **out, const char *path, Status *st) { return tok_load_model(out, path, 0, st); }

int tok_load_model(Tokenizer **out, const char *path, int vocab, Status *st) {
    *out = NULL;
    char *data = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    Tokenizer *t = NULL;
    int rc = -1;

    if (read_file(path, &data, &len, st)) goto done;
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(data, len, &end, false);
    if (!root) {
        size_t at = end ? (size_t)(end - data) : 0;
        status_fail(st, "%s: not valid JSON (parse error near byte %zu of %zu)", path, at, len);
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        status_fail(st, "%s: not a tokenizer.json (top level is not an object)", path);
        goto done;
    }

    t = xcalloc(1, sizeof *t);
    t->path = strdup(path);
    SPINDLE_CHECK(t->path != NULL);
    t->max_ids = TOK_MAX_IDS;
    if (vocab > 0) {
        // The model's config.json sits beside its tokenizer.json.
        const char *slash = strrchr(path, '/');
        int dir_len = slash ? (int)(slash - path) : 1;
        size_t cap = (size_t)dir_len + 16;
        t->model_config = xmalloc(cap);
        snprintf(t->model_config, cap, "%.*s/config.json", dir_len, slash ? path : ".");
        t->max_ids = vocab;
    }
    bytemap_init(&t->bytes);
    t->unk_id = -1;
    if (load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), st)) goto done;
    if (load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), st)) goto done;
    if (load_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), st)) goto done;
    if (load_added_tokens(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), st)) goto done;
    if (load_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), st)) goto done;
    *out = t;
    t = NULL;
    rc = 0;
done:
    tok_free(t);
    cJSON_Delete(root);
    free(data);
    return rc;
}

int tok_vocab_size(const Tokenizer *t) { return t->n_ids; }

const char *tok_token(const Tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_ids ? t->id_to_token[id] : NULL;
}

int32_t tok_find(const Tokenizer *t, const char *token) {
    size_t len = strlen(token);
    for (int i = 0; i < t->n_added; i++)
        if (t->id_to_token[t->added[i].id] && strcmp(t->id_to_token[t->added[i].id], token) == 0)
            return t->added[i].id;
    return strmap_get(&t->vocab, token, len);
}

int tok_is_special(const Tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id == id) return t->added[i].special;
    return false;
}

int tok_model_bos(const Tokenizer *t, const char *model_dir, int32_t *id, int *add, Status *st) {
    *id = -1, *add = 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    if (access(path, F_OK) != 0) return 0;  // no tokenizer_config.json: no BOS known
    char *data = NULL;
    size_t len = 0;
    if (read_file(path, &data, &len, st)) return -1;
    cJSON *root = cJSON_ParseWithLength(data, len);
    free(data);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return status_fail(st, "%s: not a JSON object", path);
    }
    int rc = 0;
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(root, "bos_token");
    // "bos_token": "<bos>", or an AddedToken object {"content": "<bos>", ...} (older files), or null.
    if (cJSON_IsObject(bos)) bos = cJSON_GetObjectItemCaseSensitive(bos, "content");
    const int named = cJSON_IsString(bos);
    if (!named && bos && !cJSON_IsNull(bos))
        rc = status_fail(st, "%s: bos_token is neither a string, an object with \"content\" nor null", path);
    else if (named && t && (*id = tok_find(t, bos->valuestring)) < 0)
        rc = status_fail(st, "%s: bos_token \"%s\" is not a token of the model's tokenizer.json", path,
                         bos->valuestring);
    *add = !rc && named && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "add_bos_token"));
    cJSON_Delete(root);
    return rc;
}

// ---------------------------------------------------------------------------
// Encoding: per-call scratch
// ---------------------------------------------------------------------------

typedef struct {
    const char *p;
    size_t n;
    bool first;  // starts at byte 0 of the input text (HF: offsets_original().0 == 0)
} Piece;

typedef struct {
    size_t s, e;
    bool match;
} Span;

typedef struct {
    int32_t id;
    int32_t prev, next;  // -1: none
    bool gone;           // merged into its left neighbour
} Sym;

typedef struct {
    int32_t rank;
    int32_t pos;
    int32_t merged;
} HeapItem;

// Blocks of memory freed together at the end of an encode.
typedef struct Block {
    struct Block *next;
    size_t used, cap;
    char data[];
} Block;

typedef struct {
    const Tokenizer *tok;
    Status *st;
    int32_t *ids;
    size_t n_ids, cap_ids;
    Piece *pieces, *next_pieces;
    size_t n_pieces, cap_pieces, n_next, cap_next;
    Span *spans, *kept;
    size_t n_spans, cap_spans, n_kept, cap_kept;
    Sym *syms;
    size_t n_syms, cap_syms;
    HeapItem *heap;
    size_t n_heap, cap_heap;
    Block *blocks;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    bool origin;  // the text now given to split_added starts at byte 0 of the input
} Work;

static char *work_alloc(Work *w, size_t n) {
    if (!w->blocks || w->blocks->cap - w->blocks->used < n) {
        size_t cap = n > (1u << 16) ? n : (1u << 16);
        Block *b = xmalloc(sizeof *b + cap);
        b->next = w->blocks;
        b->used = 0;
        b->cap = cap;
        w->blocks = b;
    }
    char *p = w->blocks->data + w->blocks->used;
    w->blocks->used += n;
    return p;
}

static void work_free(Work *w) {
    free(w->ids);
    free(w->pieces);
    free(w->next_pieces);
    free(w->spans);
    free(w->kept);
    free(w->syms);
    free(w->heap);
    while (w->blocks) {
        Block *b = w->blocks->next;
        free(w->blocks);
        w->blocks = b;
    }
    pcre2_match_data_free(w->md);
    pcre2_match_context_free(w->mctx);
    pcre2_jit_stack_free(w->jit_stack);
}

static void emit(Work *w, int32_t id) { VEC_PUSH(w->ids, w->n_ids, w->cap_ids, id); }

// ---------------------------------------------------------------------------
// Normalization
// ---------------------------------------------------------------------------

// s[0..n) with every non-overlapping occurrence of pat (non-empty), leftmost
// first, replaced by rep. Returns a malloc'ed NUL-terminated copy; *out_len its length.
static char *replace_all(const char *s, size_t n, const char *pat, const char *rep, size_t *out_len) {
    size_t pl = strlen(pat), rl = strlen(rep), count = 0;
    for (const char *q = s; (q = memmem(q, n - (size_t)(q - s), pat, pl)) != NULL; q += pl) count++;
    size_t len = n - count * pl + count * rl;
    char *out = xmalloc(len + 1), *o = out;
    const char *q = s, *end = s + n;
    for (const char *m; (m = memmem(q, (size_t)(end - q), pat, pl)) != NULL; q = m + pl) {
        memcpy(o, q, (size_t)(m - q));
        o += m - q;
        memcpy(o, rep, rl);
        o += rl;
    }
    memcpy(o, q, (size_t)(end - q));
    o += end - q;
    *o = '\0';
    *out_len = len;
    return out;
}

// Applies the normalizers in order. *out is malloc'ed.
static int normalize(const Tokenizer *t, const char *s, size_t n, char **out, size_t *out_len,
                     Status *st) {
    char *cur = xmalloc(n + 1);
    memcpy(cur, s, n);
    cur[n] = '\0';
    size_t len = n;
    for (int i = 0; i < t->n_norms; i++) {
        const NormStep *step = &t->norms[i];
        if (step->kind == NORM_REPLACE) {
            char *next = replace_all(cur, len, step->pattern, step->content, &len);
            free(cur);
            cur = next;
            continue;
        }
        if (step->kind == NORM_PREPEND) {
            // HF prepends only to a non-empty string.
            if (len == 0) continue;
            size_t pl = strlen(step->content);
            char *next = xmalloc(pl + len + 1);
            memcpy(next, step->content, pl);
            memcpy(next + pl, cur, len + 1);
            free(cur);
            cur = next;
            len += pl;
            continue;
        }
        int opts = UTF8PROC_STABLE;
        switch (step->kind) {
        case NORM_NFC: opts |= UTF8PROC_COMPOSE; break;
        case NORM_NFD: opts |= UTF8PROC_DECOMPOSE; break;
        case NORM_NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
        case NORM_NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
        default: break;
        }
        utf8proc_uint8_t *res = NULL;
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)len, &res,
                                          (utf8proc_option_t)opts);
        free(cur);
        if (r < 0) {
            *out = NULL;
            return status_fail(st, "%s: normalization failed: %s", t->path, utf8proc_errmsg(r));
        }
        cur = (char *)res;
        len = (size_t)r;
    }
    *out = cur;
    *out_len = len;
    return 0;
}

// ---------------------------------------------------------------------------
// Splitting
// ---------------------------------------------------------------------------

static int work_regex_setup(Work *w) {
    if (w->md) return 0;
    w->md = pcre2_match_data_create(1, NULL);
    w->mctx = pcre2_match_context_create(NULL);
    w->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    SPINDLE_CHECK(w->md && w->mctx && w->jit_stack);
    pcre2_jit_stack_assign(w->mctx, NULL, w->jit_stack);
    return 0;
}

// Fills w->spans with the matches of re in p[0..n) and the gaps between them,
// in order, covering the whole piece. Iterates as Rust's onig find_iter does:
// an empty match right where the previous match ended is skipped.
static int find_matches(Work *w, const pcre2_code *re, const char *p, size_t n) {
    w->n_spans = 0;
    size_t prev = 0;
    if (re) {
        work_regex_setup(w);
        size_t from = 0;
        bool have_last = false;
        size_t last_end = 0;
        while (from <= n) {
            int rc = pcre2_match(re, (PCRE2_SPTR)p, n, from, PCRE2_NO_UTF_CHECK, w->md, w->mctx);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return status_fail(w->st, "%s: pre-tokenizer regex failed on a %zu-byte piece: %s",
                                   w->tok->path, n, (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
            size_t s = ov[0], e = ov[1];
            if (s == e && have_last && last_end == e) {
                if (from >= n) break;
                from += utf8_len((unsigned char)p[from]);
                continue;
            }
            from = e;
            have_last = true;
            last_end = e;
            if (prev != s) VEC_PUSH(w->spans, w->n_spans, w->cap_spans, ((Span){prev, s, false}));
            VEC_PUSH(w->spans, w->n_spans, w->cap_spans, ((Span){s, e, true}));
            prev = e;
        }
    }
    if (prev != n || n == 0) VEC_PUSH(w->spans, w->n_spans, w->cap_spans, ((Span){prev, n, false}));
    return 0;
}

// Applies a Split step to one piece, appending the kept parts to next_pieces.
// The fold for each behavior follows HF's NormalizedString::split.
static int split_piece(Work *w, const PreStep *step, Piece in) {
    if (find_matches(w, step->re, in.p, in.n)) return -1;
    if (step->invert)
        for (size_t i = 0; i < w->n_spans; i++) w->spans[i].match = !w->spans[i].match;

    // kept: (range, remove) pairs; "match" here means "remove".
    w->n_kept = 0;
    bool prev_match = false;
    switch (step->behavior) {
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < w->n_spans; i++)
            VEC_PUSH(w->kept, w->n_kept, w->cap_kept, ((Span){w->spans[i].s, w->spans[i].e, false}));
        break;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < w->n_spans; i++) VEC_PUSH(w->kept, w->n_kept, w->cap_kept, w->spans[i]);
        break;
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < w->n_spans; i++) {
            Span sp = w->spans[i];
            if (sp.match == prev_match && w->n_kept > 0) w->kept[w->n_kept - 1].e = sp.e;
            else VEC_PUSH(w->kept, w->n_kept, w->cap_kept, ((Span){sp.s, sp.e, false}));
            prev_match = sp.match;
        }
        break;
    case SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < w->n_spans; i++) {
            Span sp = w->spans[i];
            if (sp.match && !prev_match && w->n_kept > 0) w->kept[w->n_kept - 1].e = sp.e;
            else VEC_PUSH(w->kept, w->n_kept, w->cap_kept, ((Span){sp.s, sp.e, false}));
            prev_match = sp.match;
        }
        break;
    case SPLIT_MERGED_WITH_NEXT:
        // Walk from the end, merging each match into the part after it.
        for (size_t i = w->n_spans; i-- > 0;) {
            Span sp = w->spans[i];
            if (sp.match && !prev_match && w->n_kept > 0) w->kept[w->n_kept - 1].s = sp.s;
            else VEC_PUSH(w->kept, w->n_kept, w->cap_kept, ((Span){sp.s, sp.e, false}));
            prev_match = sp.match;
        }
        for (size_t i = 0, j = w->n_kept; i + 1 < j; i++, j--) {
            Span tmp = w->kept[i];
            w->kept[i] = w->kept[j - 1];
            w->kept[j - 1] = tmp;
        }
        break;
    }
    for (size_t i = 0; i < w->n_kept; i++) {
        Span sp = w->kept[i];
        if (sp.match || sp.e == sp.s) continue;
        VEC_PUSH(w->next_pieces, w->n_next, w->cap_next,
                 ((Piece){in.p + sp.s, sp.e - sp.s, in.first && sp.s == 0}));
    }
    return 0;
}

// ByteLevel: optional prefix space, optional GPT-2 split, then every byte
// becomes its mapped character.
static int byte_level_piece(Work *w, const PreStep *step, Piece in) {
    const ByteMap *bm = &w->tok->bytes;
    if (step->add_prefix_space && in.p[0] != ' ') {
        char *p = work_alloc(w, in.n + 1);
        p[0] = ' ';
        memcpy(p + 1, in.p, in.n);
        in.p = p;
        in.n++;
    }
    size_t first = w->n_next;
    if (step->re) {
        PreStep isolated = {.kind = PRE_SPLIT, .re = step->re, .behavior = SPLIT_ISOLATED};
        if (split_piece(w, &isolated, in)) return -1;
    } else {
        VEC_PUSH(w->next_pieces, w->n_next, w->cap_next, in);
    }
    for (size_t i = first; i < w->n_next; i++) {
        Piece pc = w->next_pieces[i];
        char *out = work_alloc(w, 2 * pc.n);
        size_t o = 0;
        for (size_t k = 0; k < pc.n; k++) {
            unsigned char b = (unsigned char)pc.p[k];
            memcpy(out + o, bm->utf8[b], bm->utf8_len[b]);
            o += bm->utf8_len[b];
        }
        w->next_pieces[i] = (Piece){out, o, pc.first};
    }
    return 0;
}

// Metaspace (HF pre_tokenizers::Metaspace): every ' ' becomes the replacement
// character; the replacement is put in front unless the piece starts with it
// (scheme always, or first for the piece at byte 0 of the input); with split,
// the piece is cut before every replacement character (Split MergedWithNext), so
// "a▁▁b" gives "a", "▁", "▁b".
static int metaspace_piece(Work *w, const PreStep *step, Piece in) {
    size_t rl = step->rep_len, spaces = 0;
    for (size_t i = 0; i < in.n; i++) spaces += in.p[i] == ' ';
    bool prepend = step->scheme == PREPEND_ALWAYS || (step->scheme == PREPEND_FIRST && in.first);
    char *out = work_alloc(w, in.n + spaces * (rl - 1) + rl);
    size_t o = 0;
    for (size_t i = 0; i < in.n; i++) {
        if (in.p[i] == ' ') memcpy(out + o, step->replacement, rl), o += rl;
        else out[o++] = in.p[i];
    }
    if (prepend && !(o >= rl && memcmp(out, step->replacement, rl) == 0)) {
        memmove(out + rl, out, o);
        memcpy(out, step->replacement, rl);
        o += rl;
    }
    if (!step->split) {
        VEC_PUSH(w->next_pieces, w->n_next, w->cap_next, ((Piece){out, o, in.first}));
        return 0;
    }
    size_t from = 0;
    for (size_t i = 1; i + rl <= o; i++) {
        if (memcmp(out + i, step->replacement, rl) != 0) continue;
        VEC_PUSH(w->next_pieces, w->n_next, w->cap_next, ((Piece){out + from, i - from, in.first && from == 0}));
        from = i;
        i += rl - 1;
    }
    VEC_PUSH(w->next_pieces, w->n_next, w->cap_next, ((Piece){out + from, o - from, in.first && from == 0}));
    return 0;
}

// ---------------------------------------------------------------------------
// BPE
// ---------------------------------------------------------------------------

static bool heap_less(HeapItem a, HeapItem b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

static void heap_push(Work *w, HeapItem it) {
    VEC_PUSH(w->heap, w->n_heap, w->cap_heap, it);
    size_t i = w->n_heap - 1;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(w->heap[i], w->heap[parent])) break;
        HeapItem tmp = w->heap[i];
        w->heap[i] = w->heap[parent];
        w->heap[parent] = tmp;
        i = parent;
    }
}

static HeapItem heap_pop(Work *w) {
    HeapItem top = w->heap[0];
    w->heap[0] = w->heap[--w->n_heap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < w->n_heap && heap_less(w->heap[l], w->heap[m])) m = l;
        if (r < w->n_heap && heap_less(w->heap[r], w->heap[m])) m = r;
        if (m == i) break;
        HeapItem tmp = w->heap[i];
        w->heap[i] = w->heap[m];
        w->heap[m] = tmp;
        i = m;
    }
    return top;
}

static void push_sym(Work *w, int32_t id) {
    int32_t pos = (int32_t)w->n_syms;
    VEC_PUSH(w->syms, w->n_syms, w->cap_syms, ((Sym){id, pos - 1, -1, false}));
    if (pos > 0) w->syms[pos - 1].next = pos;
}

// Queues the merge of symbol pos with its right neighbour, if there is one.
static void queue_pair(Work *w, int32_t pos) {
    int32_t next = w->syms[pos].next;
    if (next < 0) return;
    const PairSlot *m = pairmap_get(&w->tok->merges, w->syms[pos].id, w->syms[next].id);
    if (m) heap_push(w, (HeapItem){m->rank, pos, m->merged});
}

// Tokenizes one pre-token (already in the vocab's character form).
static void bpe_piece(Work *w, const char *p, size_t n) {
    const Tokenizer *t = w->tok;
    if (n == 0) return;
    if (t->ignore_merges) {
        int32_t id = strmap_get(&t->vocab, p, n);
        if (id >= 0) {
            emit(w, id);
            return;
        }
    }
    // One symbol per character; unknown ones go to byte fallback or unk.
    w->n_syms = 0;
    bool pending_unk = false;
    for (size_t i = 0; i < n;) {
        size_t cl = utf8_len((unsigned char)p[i]);
        int32_t id = strmap_get(&t->vocab, p + i, cl);
        if (id >= 0) {
            if (pending_unk) push_sym(w, t->unk_id), pending_unk = false;
            push_sym(w, id);
        } else {
            bool done = false;
            if (t->byte_fallback) {
                int32_t bid[4];
                done = true;
                for (size_t k = 0; k < cl && done; k++) {
                    char name[8];
                    snprintf(name, sizeof name, "<0x%02X>", (unsigned char)p[i + k]);
                    bid[k] = strmap_get(&t->vocab, name, strlen(name));
                    done = bid[k] >= 0;
                }
                if (done)
                    for (size_t k = 0; k < cl; k++) push_sym(w, bid[k]);
            }
            if (!done && t->unk_id >= 0) {
                if (pending_unk && !t->fuse_unk) push_sym(w, t->unk_id);
                pending_unk = true;
            }
            // With neither, HF drops the character.
        }
        i += cl;
    }
    if (pending_unk) push_sym(w, t->unk_id);

    w->n_heap = 0;
    for (int32_t i = 0; i + 1 < (int32_t)w->n_syms; i++) queue_pair(w, i);
    while (w->n_heap > 0) {
        HeapItem top = heap_pop(w);
        Sym *s = &w->syms[top.pos];
        if (s->gone || s->next < 0) continue;
        Sym *right = &w->syms[s->next];
        // Skip stale entries: the pair at pos must still merge into the same token.
        const PairSlot *m = pairmap_get(&t->merges, s->id, right->id);
        if (!m || m->merged != top.merged) continue;
        s->id = top.merged;
        right->gone = true;
        s->next = right->next;
        if (s->next >= 0) w->syms[s->next].prev = top.pos;
        if (s->prev >= 0) queue_pair(w, s->prev);
        queue_pair(w, top.pos);
    }
    for (int32_t i = w->n_syms ? 0 : -1; i >= 0; i = w->syms[i].next) emit(w, w->syms[i].id);
}

// ---------------------------------------------------------------------------
// Encoding: the pipeline
// ---------------------------------------------------------------------------

// Pre-tokenizes one piece of normalized text and runs BPE on every result.
static int encode_plain(Work *w, const char *p, size_t n) {
    const Tokenizer *t = w->tok;
    if (n == 0) return 0;
    w->n_pieces = 0;
    VEC_PUSH(w->pieces, w->n_pieces, w->cap_pieces, ((Piece){p, n, w->origin}));
    for (int k = 0; k < t->n_pre; k++) {
        const PreStep *step = &t->pre[k];
        w->n_next = 0;
        for (size_t i = 0; i < w->n_pieces; i++) {
            int rc = step->kind == PRE_BYTE_LEVEL  ? byte_level_piece(w, step, w->pieces[i])
                     : step->kind == PRE_METASPACE ? metaspace_piece(w, step, w->pieces[i])
                                                   : split_piece(w, step, w->pieces[i]);
            if (rc) return -1;
        }
        Piece *tmp = w->pieces;
        w->pieces = w->next_pieces;
        w->next_pieces = tmp;
        size_t tcap = w->cap_pieces;
        w->cap_pieces = w->cap_next;
        w->cap_next = tcap;
        w->n_pieces = w->n_next;
    }
    for (size_t i = 0; i < w->n_pieces; i++) bpe_piece(w, w->pieces[i].p, w->pieces[i].n);
    return 0;
}

// First character of s[0..n) is a word character (HF starts_with_word).
static bool starts_with_word(const char *s, size_t n) {
    return n > 0 && is_word_char(utf8_decode((const unsigned char *)s));
}

static bool ends_with_word(const char *s, size_t n) {
    return n > 0 && is_word_char(utf8_decode((const unsigned char *)s + utf8_prev_start(s, n)));
}

// Cuts the added tokens of one index out of s[0..n): each text part between them
// goes to `plain`, each token is emitted. Mirrors HF AddedVocabulary::find_matches
// (leftmost-longest matching, then single_word / lstrip / rstrip).
static int split_added(Work *w, const AddedIndex *ix, const char *s, size_t n,
                       int (*plain)(Work *, const char *, size_t)) {
    const Tokenizer *t = w->tok;
    size_t start_offset = 0;
    size_t pos = 0;
    size_t ws_from = 1, ws_to = 0;  // the last whitespace run rstrip scanned (empty: none)
    const bool base_origin = w->origin;  // s starts at byte 0 of the input
    while (pos < n) {
        // Leftmost position where some token matches; the longest there.
        const AddedToken *hit = NULL;
        size_t at = pos;
        for (; at < n && !hit; at++) {
            unsigned char b = (unsigned char)s[at];
            for (uint32_t k = ix->start[b]; k < ix->start[b + 1]; k++) {
                const AddedToken *a = &t->added[ix->order[k]];
                if (a->len <= n - at && memcmp(s + at, a->content, a->len) == 0) {
                    hit = a;
                    break;
                }
            }
        }
        if (!hit) break;
        at--;
        size_t start = at, stop = at + hit->len;
        pos = stop;  // the matcher resumes after the raw match
        if (hit->single_word) {
            bool start_space = start == 0 || !ends_with_word(s, start);
            bool stop_space = stop == n || !starts_with_word(s + stop, n - stop);
            if (!start_space || !stop_space) continue;
        }
        if (hit->lstrip) {
            // Back over the whitespace before the token, but not into the previous match
            // (HF scans back to the start of the text and then clamps to start_offset;
            // stopping at start_offset gives the same start in linear time).
            size_t ns = start;
            while (ns > start_offset) {
                size_t c = utf8_prev_start(s, ns);
                if (!is_unicode_space(utf8_decode((const unsigned char *)s + c))) break;
                ns = c;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (hit->rstrip) {
            // Forward over the whitespace after the token. Matches inside a run that an
            // earlier rstrip already scanned end where that scan ended, so a run of n
            // whitespace tokens costs O(n), not O(n^2).
            if (stop >= ws_from && stop <= ws_to) {
                stop = ws_to;
            } else {
                ws_from = stop;
                while (stop < n && is_unicode_space(utf8_decode((const unsigned char *)s + stop)))
                    stop += utf8_len((unsigned char)s[stop]);
                ws_to = stop;
            }
        }
        w->origin = base_origin && start_offset == 0;
        int rc = start_offset < start ? plain(w, s + start_offset, start - start_offset) : 0;
        w->origin = base_origin;
        if (rc) return -1;
        // A match inside whitespace that an earlier token's rstrip took ends up with an
        // empty span once lstrip clamps its start; HF drops empty splits, so it gives no token.
        if (start < stop) emit(w, hit->id);
        if (stop > start_offset) start_offset = stop;
    }
    w->origin = base_origin && start_offset == 0;
    int rc = start_offset < n ? plain(w, s + start_offset, n - start_offset) : 0;
    w->origin = base_origin;
    return rc ? -1 : 0;
}

// A raw text part: normalize, then cut out the normalized added tokens.
static int encode_raw_part(Work *w, const char *s, size_t n) {
    const Tokenizer *t = w->tok;
    if (t->n_norms == 0) return split_added(w, &t->norm_index, s, n, encode_plain);
    char *norm = NULL;
    size_t len = 0;
    if (normalize(t, s, n, &norm, &len, w->st)) return -1;
    int rc = split_added(w, &t->norm_index, norm, len, encode_plain);
    free(norm);
    return rc;
}

int tok_encode(const Tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n_ids,
               Status *st) {
    *ids = NULL;
    *n_ids = 0;
    size_t bad = utf8_first_invalid((const unsigned char *)text, len);
    if (bad != len)
        return status_fail(st, "%s: input text is not valid UTF-8 (byte 0x%02X at byte offset %zu)",
                           t->path, (unsigned char)text[bad], bad);
    Work w = {.tok = t, .st = st, .origin = true};
    int rc = split_added(&w, &t->raw_index, text, len, encode_raw_part);
    if (rc == 0) {
        *ids = w.ids ? w.ids : xmalloc(sizeof(int32_t));
        *n_ids = w.n_ids;
        w.ids = NULL;
    }
    work_free(&w);
    return rc;
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

// Decoding works on a list of strings, as HF's decode_chain does: the tokens'
// strings go through the decoder steps in order, then are joined ("" with a
// decoder, " " without one).
typedef struct {
    char *s;
    size_t n;
} DStr;

typedef struct {
    DStr *v;
    size_t n, cap;
} DList;

static void dlist_push(DList *l, char *s, size_t n) { VEC_PUSH(l->v, l->n, l->cap, ((DStr){s, n})); }

static char *mem_copy(const char *s, size_t n) {
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static void dlist_free(DList *l) {
    for (size_t i = 0; i < l->n; i++) free(l->v[i].s);
    free(l->v);
    *l = (DList){0};
}

// The strings of l joined with sep (may be NULL: nothing between).
static DStr dlist_join(const DList *l, const char *sep) {
    size_t sl = sep ? strlen(sep) : 0, total = 0;
    for (size_t i = 0; i < l->n; i++) total += l->v[i].n + (i ? sl : 0);
    char *out = xmalloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (i && sl) memcpy(out + o, sep, sl), o += sl;
        memcpy(out + o, l->v[i].s, l->v[i].n);
        o += l->v[i].n;
    }
    out[o] = '\0';
    return (DStr){out, o};
}

// The byte of a byte-fallback token "<0xNN>" (HF: six bytes, u8::from_str_radix
// of the two in the middle, which also takes a leading '+'), or -1.
static int byte_token_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0 && !(k == 3 && c == '+')) return -1;
        v = d < 0 ? 0 : 16 * v + d;
    }
    return v;
}

// ByteFallback: a run of byte tokens becomes one string of its bytes when they
// are valid UTF-8, else one U+FFFD per byte.
static void flush_bytes(DList *out, unsigned char *bytes, size_t *nb) {
    if (*nb == 0) return;
    if (utf8_first_invalid(bytes, *nb) == *nb) {
        dlist_push(out, mem_copy((const char *)bytes, *nb), *nb);
    } else {
        for (size_t i = 0; i < *nb; i++) dlist_push(out, mem_copy("\xEF\xBF\xBD", 3), 3);
    }
    *nb = 0;
}

static void decode_step(const Tokenizer *t, const DecStep *d, DList *in, DList *out) {
    switch (d->kind) {
    case DEC_BYTE_LEVEL: {
        // Every character maps back to a byte, or the token is copied as it is.
        size_t total = 0;
        for (size_t i = 0; i < in->n; i++) total += in->v[i].n;
        char *buf = xmalloc(total + 1);
        size_t o = 0;
        for (size_t i = 0; i < in->n; i++) {
            const char *tokstr = in->v[i].s;
            size_t tl = in->v[i].n, start = o;
            bool all_mapped = true;
            for (size_t k = 0; k < tl;) {
                uint32_t cp = utf8_decode((const unsigned char *)tokstr + k);
                int b = cp < 324 ? t->bytes.byte_of_cp[cp] : -1;
                if (b < 0) {
                    all_mapped = false;
                    break;
                }
                buf[o++] = (char)b;
                k += utf8_len((unsigned char)tokstr[k]);
            }
            if (!all_mapped) {
                o = start;
                memcpy(buf + o, tokstr, tl);
                o += tl;
            }
        }
        buf[o] = '\0';
        dlist_push(out, buf, o);
        break;
    }
    case DEC_METASPACE:
        // The replacement character becomes ' '; in the first token (the one
        // whose prefix the pre-tokenizer added) every one of them is dropped.
        for (size_t i = 0; i < in->n; i++) {
            bool drop = i == 0 && d->scheme != PREPEND_NEVER;
            size_t len = 0;
            char *s = replace_all(in->v[i].s, in->v[i].n, d->pattern, drop ? "" : " ", &len);
            dlist_push(out, s, len);
        }
        break;
    case DEC_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            size_t len = 0;
            char *s = replace_all(in->v[i].s, in->v[i].n, d->pattern, d->content, &len);
            dlist_push(out, s, len);
        }
        break;
    case DEC_BYTE_FALLBACK: {
        unsigned char *bytes = xmalloc(in->n + 1);
        size_t nb = 0;
        for (size_t i = 0; i < in->n; i++) {
            int b = byte_token_value(in->v[i].s, in->v[i].n);
            if (b >= 0) {
                bytes[nb++] = (unsigned char)b;
                continue;
            }
            flush_bytes(out, bytes, &nb);
            dlist_push(out, in->v[i].s, in->v[i].n);
            in->v[i].s = NULL;  // moved
        }
        flush_bytes(out, bytes, &nb);
        free(bytes);
        break;
    }
    case DEC_FUSE: {
        DStr all = dlist_join(in, NULL);
        dlist_push(out, all.s, all.n);
        break;
    }
    case DEC_STRIP: {
        // Up to `start` leading and `stop` trailing copies of the character.
        size_t cl = strlen(d->pattern);
        for (size_t i = 0; i < in->n; i++) {
            const char *s = in->v[i].s;
            size_t a = 0, b = in->v[i].n;
            for (int k = 0; k < d->start && b - a >= cl && memcmp(s + a, d->pattern, cl) == 0; k++) a += cl;
            for (int k = 0; k < d->stop && b - a >= cl && memcmp(s + b - cl, d->pattern, cl) == 0; k++) b -= cl;
            dlist_push(out, mem_copy(s + a, b - a), b - a);
        }
        break;
    }
    }
}

int tok_decode(const Tokenizer *t, const int32_t *ids, size_t n, char **text, size_t *len,
               Status *st) {
    *text = NULL;
    *len = 0;
    DList cur = {0};
    for (size_t i = 0; i < n; i++) {
        const char *tokstr = tok_token(t, ids[i]);
        if (!tokstr) {
            dlist_free(&cur);
            return status_fail(st, "%s: cannot decode id %d (position %zu): no such token", t->path,
                               (int)ids[i], i);
        }
        // HF decodes a normalized added token as it matches it: its content
        // normalized ("spindle_marker" under a Prepend("▁") normalizer is "▁spindle_marker").
        int32_t a = t->added_at ? t->added_at[ids[i]] : -1;
        if (a >= 0 && t->added[a].normalized) dlist_push(&cur, mem_copy(t->added[a].content, t->added[a].len), t->added[a].len);
        else dlist_push(&cur, mem_copy(tokstr, strlen(tokstr)), strlen(tokstr));
    }
    for (int k = 0; k < t->n_dec; k++) {
        DList next = {0};
        decode_step(t, &t->dec[k], &cur, &next);
        dlist_free(&cur);
        cur = next;
    }
    DStr all = dlist_join(&cur, t->has_decoder ? NULL : " ");
    dlist_free(&cur);
    *text = all.s;
    *len = all.n;
    return 0;
}
