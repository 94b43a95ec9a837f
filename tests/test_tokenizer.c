// test_tokenizer: token-for-token parity with the Hugging Face `tokenizers`
// library, plus the error paths.
//
// Usage: test_tokenizer <dir>   (dir = tests/tokenizer)
//
// Every <case>.expected in dir (written by scripts/make-tokenizer-goldens.py)
// names a tokenizer.json and a text; the text is encoded and compared with the
// expected ids, and the expected ids are decoded and compared with HF's decode
// (<case>.decoded). Cases whose tokenizer lives outside dir (the real SmolLM2
// tokenizer under models/smollm2/) are skipped when that file is absent.
// Then: bad files and bad text must fail with a message naming the file, and a
// ~1 MB text must encode quickly. Exit status 0 only when everything passed.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tokenizer.h"

static int g_failures = 0;

#define EXPECT(cond, ...)                                            \
    do {                                                             \
        if (!(cond)) {                                               \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);              \
            printf(__VA_ARGS__);                                     \
            printf("\n");                                            \
            g_failures++;                                            \
        }                                                            \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Reads a whole file; NULL when it cannot be opened. *len gets the size.
static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = '\0';
    *len = got;
    return buf;
}

static bool file_exists(const char *path) { return access(path, R_OK) == 0; }

static void write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fwrite(data, 1, len, f);
    fclose(f);
}

// One golden: header lines then one id per line.
typedef struct {
    char tokenizer[1024], text[1024], decoded[1024];
    int32_t *ids;
    size_t n_ids;
} Golden;

static bool read_golden(const char *path, Golden *g) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[1024];
    long count = -1;
    bool in_ids = false;
    size_t cap = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (in_ids) {
            if (g->n_ids == cap) {
                cap = cap ? 2 * cap : 1024;
                g->ids = realloc(g->ids, cap * sizeof *g->ids);
            }
            g->ids[g->n_ids++] = (int32_t)strtol(line, NULL, 10);
        } else if (strncmp(line, "tokenizer ", 10) == 0) {
            snprintf(g->tokenizer, sizeof g->tokenizer, "%s", line + 10);
        } else if (strncmp(line, "text ", 5) == 0) {
            snprintf(g->text, sizeof g->text, "%s", line + 5);
        } else if (strncmp(line, "decoded ", 8) == 0) {
            snprintf(g->decoded, sizeof g->decoded, "%s", line + 8);
        } else if (strncmp(line, "count ", 6) == 0) {
            count = strtol(line + 6, NULL, 10);
        } else if (strcmp(line, "ids") == 0) {
            in_ids = true;
        }
    }
    fclose(f);
    return g->tokenizer[0] && g->text[0] && in_ids && count == (long)g->n_ids;
}

static void print_ids(const Tokenizer *tok, const int32_t *ids, size_t n, size_t from, size_t to) {
    for (size_t i = from; i < to && i < n; i++) {
        const char *s = tok_token(tok, ids[i]);
        printf(" %d(%s)", (int)ids[i], s ? s : "?");
    }
    printf("\n");
}

// Compares got with expected; prints the first mismatch with context.
static bool compare_ids(const Tokenizer *tok, const char *name, const int32_t *want, size_t n_want,
                        const int32_t *got, size_t n_got) {
    size_t i = 0;
    while (i < n_want && i < n_got && want[i] == got[i]) i++;
    if (i == n_want && i == n_got) return true;
    printf("FAIL %s: first mismatch at token %zu (expected %zu tokens, got %zu)\n", name, i, n_want,
           n_got);
    size_t from = i > 5 ? i - 5 : 0;
    printf("  expected [%zu..]:", from);
    print_ids(tok, want, n_want, from, i + 6);
    printf("  got      [%zu..]:", from);
    print_ids(tok, got, n_got, from, i + 6);
    return false;
}

// The tokenizer of the previous case, reused while consecutive cases share it.
static Tokenizer *g_tok = NULL;
static char g_tok_path[4096];

static Tokenizer *load_cached(const char *path, Status *st) {
    if (g_tok && strcmp(path, g_tok_path) == 0) return g_tok;
    tok_free(g_tok);
    g_tok = NULL;
    if (tok_load(&g_tok, path, st)) return NULL;
    snprintf(g_tok_path, sizeof g_tok_path, "%s", path);
    return g_tok;
}

// Runs one golden. Returns 1 passed, 0 failed, -1 skipped.
static int run_case(const char *dir, const char *file, size_t *n_tokens) {
    char path[4096], tok_path[4096], text_path[4096];
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(file) - strlen(".expected")), file);
    snprintf(path, sizeof path, "%s/%s", dir, file);
    Golden g;
    if (!read_golden(path, &g)) {
        printf("FAIL %s: cannot read golden %s\n", name, path);
        free(g.ids);
        return 0;
    }
    snprintf(tok_path, sizeof tok_path, "%s/%s", dir, g.tokenizer);
    snprintf(text_path, sizeof text_path, "%s/%s", dir, g.text);
    if (!file_exists(tok_path) && strstr(g.tokenizer, "models/")) {
        printf("SKIP %s: %s not present\n", name, tok_path);
        free(g.ids);
        return -1;
    }
    int ok = 0;
    size_t text_len = 0;
    char *text = slurp(text_path, &text_len);
    Status st = {{0}};
    Tokenizer *tok = load_cached(tok_path, &st);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!text) {
        printf("FAIL %s: cannot read %s\n", name, text_path);
    } else if (!tok) {
        printf("FAIL %s: %s\n", name, st.msg);
    } else if (tok_encode(tok, text, text_len, &ids, &n, &st)) {
        printf("FAIL %s: encode: %s\n", name, st.msg);
    } else if (compare_ids(tok, name, g.ids, g.n_ids, ids, n)) {
        ok = 1;
        *n_tokens = n;
        // Decoding the expected ids must give HF's decode.
        if (g.decoded[0]) {
            char dec_path[4096];
            snprintf(dec_path, sizeof dec_path, "%s/%s", dir, g.decoded);
            size_t want_len = 0;
            char *want = slurp(dec_path, &want_len);
            char *got = NULL;
            size_t got_len = 0;
            if (!want) {
                printf("FAIL %s: cannot read %s\n", name, dec_path);
                ok = 0;
            } else if (tok_decode(tok, g.ids, g.n_ids, &got, &got_len, &st)) {
                printf("FAIL %s: decode: %s\n", name, st.msg);
                ok = 0;
            } else if (got_len != want_len || memcmp(got, want, got_len) != 0) {
                size_t i = 0;
                while (i < got_len && i < want_len && got[i] == want[i]) i++;
                printf("FAIL %s: decode differs from HF at byte %zu (lengths %zu vs %zu)\n", name,
                       i, got_len, want_len);
                ok = 0;
            }
            free(want);
            free(got);
        }
    }
    if (ok) printf("ok   %-36s %6zu tokens match\n", name, n);
    free(ids);
    free(text);
    free(g.ids);
    return ok;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_goldens(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        printf("FAIL cannot open golden folder %s\n", dir);
        g_failures++;
        return;
    }
    char **files = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 9 && strcmp(e->d_name + l - 9, ".expected") == 0) {
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                files = realloc(files, cap * sizeof *files);
            }
            files[n++] = strdup(e->d_name);
        }
    }
    closedir(d);
    qsort(files, n, sizeof *files, cmp_str);
    int passed = 0, failed = 0, skipped = 0;
    size_t tokens = 0;
    bool have_smollm2 = false;
    for (size_t i = 0; i < n; i++) {
        if (strncmp(files[i], "smollm2__", 9) == 0) have_smollm2 = true;
        size_t t = 0;
        int r = run_case(dir, files[i], &t);
        if (r > 0) passed++, tokens += t;
        else if (r == 0) failed++;
        else skipped++;
        free(files[i]);
    }
    free(files);
    tok_free(g_tok);
    g_tok = NULL;
    if (!have_smollm2) {
        printf("SKIP smollm2: no smollm2__*.expected in %s (models/smollm2/tokenizer.json was absent "
               "when scripts/make-tokenizer-goldens.py ran)\n", dir);
        skipped++;
    }
    EXPECT(n > 0, "no *.expected goldens in %s", dir);
    printf("goldens: %d passed (%zu tokens compared), %d failed, %d skipped\n", passed, tokens,
           failed, skipped);
    g_failures += failed;
}

// A failing call must return -1, leave *out NULL and name the file in the message.
static void expect_load_error(const char *path, const char *must_mention) {
    Tokenizer *tok = (Tokenizer *)&g_failures;  // must be reset to NULL
    Status st = {{0}};
    int rc = tok_load(&tok, path, &st);
    EXPECT(rc == -1, "tok_load(%s) returned %d, expected -1", path, rc);
    EXPECT(tok == NULL, "tok_load(%s) left *out set on failure", path);
    EXPECT(strstr(st.msg, path) != NULL, "message for %s does not name the file: \"%s\"", path,
           st.msg);
    if (must_mention)
        EXPECT(strstr(st.msg, must_mention) != NULL, "message for %s lacks \"%s\": \"%s\"", path,
               must_mention, st.msg);
    printf("ok   bad file -> %s\n", st.msg);
    if (rc == 0) tok_free(tok);
}

static void test_bad_inputs(const char *dir) {
    char tmpl[] = "/tmp/test_tokenizer_XXXXXX";
    char *tmp = mkdtemp(tmpl);
    if (!tmp) {
        perror("mkdtemp");
        g_failures++;
        return;
    }
    char path[1024], good[1024];
    snprintf(good, sizeof good, "%s/gpt2.json", dir);

    snprintf(path, sizeof path, "%s/does-not-exist.json", tmp);
    expect_load_error(path, "cannot open");

    snprintf(path, sizeof path, "%s/garbage.json", tmp);
    write_file(path, "this is { not json at all", 25);
    expect_load_error(path, "JSON");
    unlink(path);

    size_t len = 0;
    char *json = slurp(good, &len);
    EXPECT(json != NULL, "cannot read %s", good);
    if (json) {
        snprintf(path, sizeof path, "%s/truncated.json", tmp);
        write_file(path, json, len / 2);
        expect_load_error(path, "JSON");
        unlink(path);

        // Unsupported normalizer: named in the message.
        const char *norm = "\"normalizer\":null";
        char *at = strstr(json, norm);
        EXPECT(at != NULL, "gpt2.json has no null normalizer to replace");
        if (at) {
            snprintf(path, sizeof path, "%s/lowercase.json", tmp);
            FILE *f = fopen(path, "wb");
            fwrite(json, 1, (size_t)(at - json), f);
            fputs("\"normalizer\":{\"type\":\"Lowercase\"}", f);
            fputs(at + strlen(norm), f);
            fclose(f);
            expect_load_error(path, "Lowercase");
            unlink(path);
        }
        // A merge that refers to a token outside the vocab.
        const char *merges = "\"merges\":[";
        at = strstr(json, merges);
        if (at) {
            snprintf(path, sizeof path, "%s/badmerge.json", tmp);
            FILE *f = fopen(path, "wb");
            fwrite(json, 1, (size_t)(at - json) + strlen(merges), f);
            fputs("[\"nosuchtoken\",\"x\"],", f);
            fputs(at + strlen(merges), f);
            fclose(f);
            expect_load_error(path, "nosuchtoken");
            unlink(path);
        }
        free(json);
    }
    rmdir(tmp);

    // Invalid UTF-8: error with the byte offset.
    Tokenizer *tok = NULL;
    Status st = {{0}};
    if (tok_load(&tok, good, &st)) {
        printf("FAIL %s\n", st.msg);
        g_failures++;
        return;
    }
    struct {
        const char *text;
        size_t len, offset;
    } bad[] = {
        {"abc\x80xyz", 7, 3},            // lone continuation byte
        {"ab\xC0\xAF", 4, 2},            // overlong '/'
        {"hello \xED\xA0\x80!", 10, 6},  // UTF-16 surrogate
        {"\xE4\xB8\xAD\xE4\xB8", 5, 3},  // truncated at the end
        {"x\xF5\x80\x80\x80", 5, 1},     // above U+10FFFF
        {"\xFF", 1, 0},
        {"<|endoftext|>\xFE", 14, 13},   // after an added token
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = (int32_t *)&g_failures;
        size_t n = 99;
        st.msg[0] = '\0';
        int rc = tok_encode(tok, bad[i].text, bad[i].len, &ids, &n, &st);
        char want[64];
        snprintf(want, sizeof want, "offset %zu", bad[i].offset);
        EXPECT(rc == -1, "invalid UTF-8 case %zu: rc %d", i, rc);
        EXPECT(ids == NULL && n == 0, "invalid UTF-8 case %zu: outputs not cleared", i);
        EXPECT(strstr(st.msg, want) != NULL, "invalid UTF-8 case %zu: \"%s\" lacks \"%s\"", i,
               st.msg, want);
        EXPECT(strstr(st.msg, good) != NULL, "invalid UTF-8 case %zu: \"%s\" lacks the file name", i,
               st.msg);
        if (rc == 0) free(ids);
    }
    printf("ok   invalid UTF-8 -> %s\n", st.msg);

    // Small API checks.
    EXPECT(tok_find(tok, "<|endoftext|>") >= 0, "tok_find(<|endoftext|>) failed");
    EXPECT(tok_is_special(tok, tok_find(tok, "<|endoftext|>")), "<|endoftext|> not special");
    EXPECT(!tok_is_special(tok, tok_find(tok, "spindle_marker")), "spindle_marker is special");
    EXPECT(tok_token(tok, -1) == NULL && tok_token(tok, tok_vocab_size(tok)) == NULL,
           "tok_token out of range is not NULL");
    tok_free(tok);
}

// ~1 MB of varied text must encode in well under a second or two.
static void test_speed(const char *dir) {
    const char *names[] = {"gpt2.json", "qwen2.json", "llama3.json", "gemma3style.json", "metaspace_always.json"};
    char path[1024];
    snprintf(path, sizeof path, "%s/text.txt", dir);
    size_t len = 0;
    char *unit = slurp(path, &len);
    if (!unit || len == 0) {
        printf("FAIL cannot read %s\n", path);
        g_failures++;
        free(unit);
        return;
    }
    size_t reps = (1u << 20) / len + 1;
    char *big = malloc(reps * len);
    for (size_t i = 0; i < reps; i++) memcpy(big + i * len, unit, len);
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        Tokenizer *tok = NULL;
        Status st = {{0}};
        if (tok_load(&tok, path, &st)) {
            printf("FAIL %s\n", st.msg);
            g_failures++;
            continue;
        }
        int32_t *ids = NULL;
        size_t n = 0;
        double t0 = now_s();
        int rc = tok_encode(tok, big, reps * len, &ids, &n, &st);
        double dt = now_s() - t0;
        EXPECT(rc == 0, "encode of %zu bytes failed: %s", reps * len, st.msg);
        printf("ok   speed %-12s %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", names[k],
               reps * len, n, dt, (double)(reps * len) / dt / 1e6);
        // Generous: sanitizer and valgrind builds are many times slower.
        EXPECT(dt < 30.0, "encoding %zu bytes took %.1f s", reps * len, dt);
        free(ids);
        tok_free(tok);
    }
    free(big);
    free(unit);
}

// Writes dir/src with the first occurrence of `old` replaced by `new`; 0 on success.
static int write_replaced(const char *dir, const char *src, const char *out, const char *old, const char *new) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, src);
    size_t len = 0;
    char *json = slurp(path, &len);
    char *at = json ? strstr(json, old) : NULL;
    if (!at) {
        free(json);
        return -1;
    }
    FILE *f = fopen(out, "wb");
    fwrite(json, 1, (size_t)(at - json), f);
    fputs(new, f);
    fputs(at + strlen(old), f);
    fclose(f);
    free(json);
    return 0;
}

// Writes gpt2.json with text inserted right after the first occurrence of
// `after`; returns 0 on success.
static int write_variant(const char *dir, const char *out, const char *after, const char *insert) {
    char with[1024];
    snprintf(with, sizeof with, "%s%s", after, insert);
    return write_replaced(dir, "gpt2.json", out, after, with);
}

// Ids are bounded: by the model's vocab_size when the tokenizer is loaded for a
// model (every id indexes the embedding), else by TOK_MAX_IDS, so a vocab id of
// 1e9 is refused instead of sizing an 8 GB table.
static void test_id_bounds(const char *dir) {
    char good[1024], path[1024];
    snprintf(good, sizeof good, "%s/gpt2.json", dir);
    Tokenizer *tok = NULL;
    Status st = {{0}};
    int rc = tok_load_model(&tok, good, 256, &st);
    EXPECT(rc == -1 && tok == NULL, "gpt2.json (ids up to 3002) loaded for a 256-id model");
    EXPECT(strstr(st.msg, good) && strstr(st.msg, "config.json: vocab_size 256") &&
               strstr(st.msg, "outside the model's vocabulary [0, 256)"),
           "message lacks the file, the id range or config.json: \"%s\"", st.msg);
    printf("ok   ids beyond the model -> %s\n", st.msg);
    rc = tok_load_model(&tok, good, 3002, &st);
    EXPECT(rc == -1 && strstr(st.msg, "id 3002"), "id 3002 accepted for a 3002-id model: %s", rc ? st.msg : "");
    if (!rc) tok_free(tok), tok = NULL;
    rc = tok_load_model(&tok, good, 3003, &st);
    EXPECT(rc == 0 && tok_vocab_size(tok) == 3003, "gpt2.json refused for a 3003-id model: %s", st.msg);
    tok_free(tok);
    tok = NULL;

    snprintf(path, sizeof path, "/tmp/test_tokenizer_bigid_%d.json", (int)getpid());
    EXPECT(write_variant(dir, path, "\"vocab\":{", "\"spindle_big\":1000000000,") == 0, "cannot write %s", path);
    double t0 = now_s();
    rc = tok_load(&tok, path, &st);
    EXPECT(rc == -1 && tok == NULL && strstr(st.msg, path) && strstr(st.msg, "id 1000000000"),
           "vocab id 1e9 not refused: rc %d \"%s\"", rc, st.msg);
    EXPECT(now_s() - t0 < 5.0, "refusing id 1e9 took %.1f s", now_s() - t0);
    printf("ok   vocab id 1e9 -> %s\n", st.msg);
    if (!rc) tok_free(tok);
    unlink(path);
}

// An added whitespace token with lstrip/rstrip over 1 MB of tabs: linear time
// (a quadratic scan took minutes), and the ids HF gives: one token when both
// strips are set (later matches fall inside the first one's stripped span),
// one per tab otherwise.
static void test_whitespace_token_speed(const char *dir) {
    size_t n = 1u << 20;
    char *tabs = malloc(n);
    memset(tabs, '\t', n);
    const struct {
        const char *l, *r;
        size_t want;
    } cases[] = {{"true", "true", 1}, {"true", "false", n}, {"false", "true", n}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[256], added[256];
        snprintf(path, sizeof path, "/tmp/test_tokenizer_tab_%d.json", (int)getpid());
        snprintf(added, sizeof added,
                 "{\"id\":3003,\"content\":\"\\t\",\"single_word\":false,\"lstrip\":%s,\"rstrip\":%s,"
                 "\"normalized\":false,\"special\":false},", cases[k].l, cases[k].r);
        EXPECT(write_variant(dir, path, "\"added_tokens\":[", added) == 0, "cannot write %s", path);
        Tokenizer *tok = NULL;
        Status st = {{0}};
        if (tok_load(&tok, path, &st)) {
            printf("FAIL %s\n", st.msg);
            g_failures++;
            unlink(path);
            continue;
        }
        int32_t tab = tok_find(tok, "\t");
        int32_t *ids = NULL;
        size_t got = 0;
        double t0 = now_s();
        int rc = tok_encode(tok, tabs, n, &ids, &got, &st);
        double dt = now_s() - t0;
        EXPECT(rc == 0, "encode: %s", st.msg);
        EXPECT(got == cases[k].want, "lstrip %s rstrip %s: %zu ids, HF gives %zu", cases[k].l, cases[k].r, got,
               cases[k].want);
        size_t other = 0;
        for (size_t i = 0; i < got; i++) other += ids[i] != tab;
        EXPECT(tab >= 0 && other == 0, "%zu ids are not the tab token %d", other, (int)tab);
        // Generous (sanitizer builds are slower); quadratic took minutes.
        EXPECT(dt < 10.0, "1 MB of tabs took %.1f s (lstrip %s rstrip %s)", dt, cases[k].l, cases[k].r);
        printf("ok   1 MB of tabs, lstrip %s rstrip %s: %zu ids in %.3f s\n", cases[k].l, cases[k].r, got, dt);
        free(ids);
        tok_free(tok);
        unlink(path);
    }
    free(tabs);
}


// SentencePiece-style constructs that are not implemented are refused at load,
// naming the file and the field (a Regex Replace, unknown decoders, a Metaspace
// replacement of more than one character, an unknown prepend_scheme).
static void test_sentencepiece_refusals(const char *dir) {
    const struct {
        const char *src, *old, *new, *mention;
    } cases[] = {
        {"gemma3style.json", "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\"",
         "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\"", "normalizer Replace with a Regex"},
        {"gemma3style.json", "\"normalizer\":{\"type\":\"Replace\"", "\"normalizer\":{\"type\":\"Precompiled\"",
         "normalizer type \"Precompiled\""},
        {"gemma3style.json", "{\"type\":\"Fuse\"}", "{\"type\":\"CTC\"}", "decoder type \"CTC\""},
        {"gemma3style.json", "{\"type\":\"Replace\",\"pattern\":{\"String\":\"▁\"}",
         "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"▁\"}", "decoder Replace with a Regex"},
        {"metaspace_first.json", "\"replacement\":\"▁\"", "\"replacement\":\"▁▁\"",
         "pre_tokenizer Metaspace \"replacement\" must be one character"},
        {"metaspace_first.json", "\"prepend_scheme\":\"first\"", "\"prepend_scheme\":\"sometimes\"",
         "prepend_scheme \"sometimes\""},
        {"metaspace_first.json", "\"prepend_scheme\":\"first\"", "\"add_prefix_space\":false",
         "add_prefix_space false"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, "/tmp/test_tokenizer_sp%zu_%d.json", k, (int)getpid());
        if (write_replaced(dir, cases[k].src, path, cases[k].old, cases[k].new)) {
            printf("FAIL %s has no \"%s\" to replace\n", cases[k].src, cases[k].old);
            g_failures++;
            continue;
        }
        expect_load_error(path, cases[k].mention);
        unlink(path);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <dir with tokenizer goldens>\n", argv[0]);
        return 2;
    }
    run_goldens(argv[1]);
    test_bad_inputs(argv[1]);
    test_speed(argv[1]);
    test_id_bounds(argv[1]);
    test_whitespace_token_speed(argv[1]);
    test_sentencepiece_refusals(argv[1]);
    if (g_failures) {
        printf("test_tokenizer: %d failure(s)\n", g_failures);
        return 1;
    }
    printf("test_tokenizer: all passed\n");
    return 0;
}
