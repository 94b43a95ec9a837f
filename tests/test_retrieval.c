// test_retrieval: corpus reading (data/corpus.c) and the retrieval tasks (data/retrieval.c).
//   test_retrieval TOKENIZER_DIR SMOLLM2_DIR TMP_DIR [HELDOUT_DIR]
// TOKENIZER_DIR holds gpt2.json (tests/tokenizer): the corpus and scoring checks always run.
// The task checks use SmolLM2's tokenizer.json from SMOLLM2_DIR; without it the test prints
// SKIPPED and exits 77. The haystack is HELDOUT_DIR (corpus/heldout) when given and present,
// else generated text.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "corpus.h"
#include "retrieval.h"
#include "tokenizer.h"

#include "expect.h"

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot create %s\n", path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static int32_t *encode(const Tokenizer *tok, const char *text, size_t *n) {
    int32_t *ids;
    Status st;
    if (tok_encode(tok, text, strlen(text), &ids, n, &st)) {
        fprintf(stderr, "encode failed: %s\n", st.msg);
        exit(1);
    }
    return ids;
}

static char *decode(const Tokenizer *tok, const int32_t *ids, size_t n) {
    char *text;
    size_t len;
    Status st;
    if (tok_decode(tok, ids, n, &text, &len, &st)) {
        fprintf(stderr, "decode failed: %s\n", st.msg);
        exit(1);
    }
    return text;
}

static int count_substr(const char *hay, const char *needle) {
    int c = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++) c++;
    return c;
}

// --- corpus_load_tokens / corpus_windows on a temp folder, with the GPT-2 tokenizer ----------

static void test_corpus(const char *tokdir, const char *tmp) {
    char path[4096], dir[2048];
    snprintf(path, sizeof path, "%s/gpt2.json", tokdir);
    Tokenizer *tok;
    Status st;
    if (tok_load(&tok, path, &st)) {
        fprintf(stderr, "FAIL: %s\n", st.msg);
        exit(1);
    }
    int32_t eot = corpus_separator_id(tok);
    EXPECT(eot >= 0 && eot == tok_find(tok, "<|endoftext|>"), "separator is <|endoftext|>, got %d", eot);

    // dir/b.txt, dir/a.txt, dir/sub/c.txt, dir/.hidden, dir/empty.txt: read order a, b, sub/c.
    snprintf(dir, sizeof dir, "%s/corpus_unit", tmp);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/sub", dir);
    mkdir(path, 0755);
    const char *ta = "Hello world. This is file a.\n", *tb = " And file b, the second one.",
               *tc = "Third: in a subfolder.";
    snprintf(path, sizeof path, "%s/b.txt", dir), write_text(path, tb);
    snprintf(path, sizeof path, "%s/a.txt", dir), write_text(path, ta);
    snprintf(path, sizeof path, "%s/sub/c.txt", dir), write_text(path, tc);
    snprintf(path, sizeof path, "%s/.hidden", dir), write_text(path, "never read");
    snprintf(path, sizeof path, "%s/empty.txt", dir), write_text(path, "");

    size_t na, nb, nc;
    int32_t *ea = encode(tok, ta, &na), *eb = encode(tok, tb, &nb), *ec = encode(tok, tc, &nc);
    size_t nwant = na + 1 + nb + 1 + nc;
    int32_t *want = malloc(sizeof *want * nwant);
    size_t k = 0;
    memcpy(want + k, ea, sizeof *want * na), k += na;
    want[k++] = eot;
    memcpy(want + k, eb, sizeof *want * nb), k += nb;
    want[k++] = eot;
    memcpy(want + k, ec, sizeof *want * nc), k += nc;

    const char *paths[] = {dir};
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = corpus_load_tokens(tok, paths, 1, &ids, &n, &st);
    EXPECT(rc == 0, "corpus_load_tokens(dir): %s", st.msg);
    EXPECT(n == nwant && ids && memcmp(ids, want, sizeof *ids * n) == 0,
           "directory corpus: %zu ids, want %zu = a <eot> b <eot> sub/c", n, nwant);
    free(ids);

    // Explicit files keep the order given: b then a.
    char pa[4096], pb[4096];
    snprintf(pa, sizeof pa, "%s/a.txt", dir);
    snprintf(pb, sizeof pb, "%s/b.txt", dir);
    const char *two[] = {pb, pa};
    rc = corpus_load_tokens(tok, two, 2, &ids, &n, &st);
    EXPECT(rc == 0 && n == nb + 1 + na && ids[nb] == eot && memcmp(ids, eb, sizeof *ids * nb) == 0 &&
               memcmp(ids + nb + 1, ea, sizeof *ids * na) == 0,
           "files b, a: want b <eot> a");
    free(ids);

    // Errors: a missing path, an empty folder, a folder of empty files.
    char missing[4096], emptydir[2048], blankdir[2048];
    snprintf(missing, sizeof missing, "%s/no_such_file.txt", dir);
    const char *m[] = {missing};
    rc = corpus_load_tokens(tok, m, 1, &ids, &n, &st);
    EXPECT(rc == -1 && ids == NULL && strstr(st.msg, missing), "missing file: got \"%s\"", st.msg);
    snprintf(emptydir, sizeof emptydir, "%s/corpus_empty", tmp);
    mkdir(emptydir, 0755);
    const char *e[] = {emptydir};
    rc = corpus_load_tokens(tok, e, 1, &ids, &n, &st);
    EXPECT(rc == -1 && strstr(st.msg, emptydir), "empty folder must fail naming it: \"%s\"", st.msg);
    snprintf(blankdir, sizeof blankdir, "%s/corpus_blank", tmp);
    mkdir(blankdir, 0755);
    snprintf(path, sizeof path, "%s/x.txt", blankdir), write_text(path, "");
    const char *b[] = {blankdir};
    rc = corpus_load_tokens(tok, b, 1, &ids, &n, &st);
    EXPECT(rc == -1 && strstr(st.msg, blankdir) && strstr(st.msg, "empty"),
           "folder of empty files must fail naming it: \"%s\"", st.msg);
    // Invalid UTF-8 names the file.
    char badf[4096];
    snprintf(badf, sizeof badf, "%s/bad_utf8.txt", tmp);
    write_text(badf, "ok \xff\xfe bad");
    const char *bf[] = {badf};
    rc = corpus_load_tokens(tok, bf, 1, &ids, &n, &st);
    EXPECT(rc == -1 && strstr(st.msg, badf), "invalid UTF-8 must fail naming the file: \"%s\"", st.msg);

    // Windows.
    int32_t stream[100];
    for (int i = 0; i < 100; i++) stream[i] = i;
    const int32_t *starts[8];
    EXPECT(corpus_windows(stream, 100, 30, 0, NULL) == 3, "100 tokens / 30 = 3 windows");
    EXPECT(corpus_windows(stream, 100, 30, 2, starts) == 2 && starts[0] == stream &&
               starts[1] == stream + 30,
           "max_seq caps the count; windows are contiguous");
    EXPECT(corpus_windows(stream, 100, 101, 0, NULL) == 0, "ctx > n: no window");
    EXPECT(corpus_windows(stream, 100, 0, 0, NULL) == 0, "ctx 0: no window");
    EXPECT(corpus_windows(stream, 90, 30, 8, starts) == 3 && starts[2] == stream + 60, "exact fit");

    free(ea), free(eb), free(ec), free(want);
    tok_free(tok);
}

// --- exact match from logits ------------------------------------------------------------------

static void test_exact_match(void) {
    enum { T = 6, V = 5 };
    int32_t ids[T] = {1, 2, 3, 4, 0, 2};
    RetrievalTask task = {.T = T, .ids = ids, .ans_start = 4, .ans_len = 2};
    float logits[T * V];
    for (int i = 0; i < T * V; i++) logits[i] = 0;
    logits[3 * V + 0] = 1;  // predicts ids[4] = 0
    logits[4 * V + 2] = 1;  // predicts ids[5] = 2
    EXPECT(retrieval_exact_match(&task, logits, 0, V) == 1, "all answer tokens predicted");
    logits[4 * V + 3] = 2;  // now position 5 predicts 3
    EXPECT(retrieval_exact_match(&task, logits, 0, V) == 0, "one wrong answer token fails");
    logits[4 * V + 3] = 1;  // tie between 2 and 3 goes to the lower id
    EXPECT(retrieval_exact_match(&task, logits, 0, V) == 1, "ties go to the lowest id");
    logits[2 * V + 1] = 9;  // a non-answer position does not matter
    EXPECT(retrieval_exact_match(&task, logits, 0, V) == 1, "only answer positions count");
}

// --- tasks with SmolLM2's tokenizer -----------------------------------------------------------

static int32_t *make_haystack(const Tokenizer *tok, const char *heldout, size_t *n) {
    struct stat sb;
    Status st;
    int32_t *ids;
    if (heldout && stat(heldout, &sb) == 0) {
        const char *p[] = {heldout};
        if (corpus_load_tokens(tok, p, 1, &ids, n, &st)) {
            fprintf(stderr, "FAIL: %s\n", st.msg);
            exit(1);
        }
        printf("haystack: %s (%zu tokens)\n", heldout, *n);
        return ids;
    }
    // Generated prose: sentences from a seeded word list, about 60K tokens.
    static const char *const words[] = {"the", "system", "reads", "a", "file", "and", "writes",
                                        "its", "value", "to", "memory", "when", "each", "driver",
                                        "starts", "quickly", "under", "load", "for", "users"};
    size_t cap = 400000, len = 0;
    char *text = malloc(cap);
    uint32_t x = 12345;
    while (len + 200 < cap) {
        int nw = 6 + (int)(x % 10);
        for (int i = 0; i < nw; i++) {
            x = x * 1103515245u + 12345u;
            const char *w = words[(x >> 16) % 20];
            len += (size_t)sprintf(text + len, "%s%s", i ? " " : "", w);
        }
        len += (size_t)sprintf(text + len, "%s", (x >> 8) % 7 == 0 ? ".\n" : ". ");
    }
    if (tok_encode(tok, text, len, &ids, n, &st)) {
        fprintf(stderr, "FAIL: %s\n", st.msg);
        exit(1);
    }
    free(text);
    printf("haystack: generated text (%zu tokens)\n", *n);
    return ids;
}

static void check_task(const Tokenizer *tok, const int32_t *hay, size_t n_hay, RetrievalKind kind,
                       int T, double depth, uint64_t seed) {
    RetrievalTask t;
    Status st;
    const char *kn = retrieval_kind_name(kind);
    if (retrieval_make(tok, hay, n_hay, kind, T, depth, seed, &t, &st)) {
        EXPECT(0, "%s T=%d depth=%g seed=%llu: %s", kn, T, depth, (unsigned long long)seed, st.msg);
        return;
    }
    EXPECT(t.T == T && t.ids, "%s: T", kn);
    EXPECT(t.ans_len > 0 && t.ans_start + t.ans_len == T, "%s T=%d: answer span [%d, +%d) must end at T",
           kn, T, t.ans_start, t.ans_len);
    int vocab = tok_vocab_size(tok);
    int ok_ids = 1;
    for (int i = 0; i < T; i++) ok_ids &= t.ids[i] >= 0 && t.ids[i] < vocab;
    EXPECT(ok_ids, "%s: ids in [0, vocab)", kn);

    // The answer decodes to " NUMBER" with the right number of digits.
    char *ans = decode(tok, t.ids + t.ans_start, (size_t)t.ans_len);
    char want[64];
    snprintf(want, sizeof want, " %s", t.answer);
    EXPECT(strcmp(ans, want) == 0, "%s: answer decodes to \"%s\", want \"%s\"", kn, ans, want);
    size_t digits = strlen(t.answer);
    EXPECT(digits == (kind == RETRIEVAL_PASSKEY ? 5u : 7u) && strspn(t.answer, "0123456789") == digits,
           "%s: answer \"%s\" has the wrong form", kn, t.answer);
    free(ans);

    // The queried needle: its text, and its position = depth (within the boundary radius).
    char *needle = decode(tok, t.ids + t.needle_start, (size_t)t.needle_len);
    char nw[256];
    if (kind == RETRIEVAL_PASSKEY)
        snprintf(nw, sizeof nw, " The pass key is %s. Remember it. %s is the pass key.", t.answer, t.answer);
    else if (kind == RETRIEVAL_KV)
        snprintf(nw, sizeof nw, " The value of %s is %s.", t.key, t.answer);
    else
        snprintf(nw, sizeof nw, " One of the special magic numbers for %s is: %s.", t.key, t.answer);
    EXPECT(strcmp(needle, nw) == 0, "%s: needle decodes to \"%s\", want \"%s\"", kn, needle, nw);
    free(needle);
    // find_boundary searches max(4, H/100) tokens either side of round(depth * H).
    double tol = (fmax(4.0, (double)(t.n_hay / 100)) + 1.0) / t.n_hay;
    EXPECT(fabs(t.depth - depth) <= tol, "%s T=%d: realized depth %.4f, asked %.4f", kn, T, t.depth, depth);
    EXPECT(t.hay_start > 0 && t.hay_start + t.hay_len < t.ans_start, "%s: layout", kn);

    // Everything in the haystack region except the needles is the stream, in order, from
    // hay_offset. Passkey: one needle, checked exactly, with its depth recomputed here.
    if (kind == RETRIEVAL_PASSKEY) {
        int before = t.needle_start - t.hay_start;
        int after = t.hay_len - before - t.needle_len;
        const int32_t *h = hay + t.hay_offset;
        EXPECT(before + after == t.n_hay, "passkey: haystack tokens %d + %d != %d", before, after, t.n_hay);
        EXPECT(memcmp(t.ids + t.hay_start, h, sizeof(int32_t) * (size_t)before) == 0 &&
                   memcmp(t.ids + t.needle_start + t.needle_len, h + before,
                          sizeof(int32_t) * (size_t)after) == 0,
               "passkey: haystack tokens are not the stream's");
        double d = (double)before / t.n_hay;
        EXPECT(fabs(d - depth) <= tol, "passkey T=%d: needle after %d of %d haystack tokens (%.4f), asked %.4f",
               T, before, t.n_hay, d, depth);
        // And by position in the whole sequence, where preamble and question are small.
        double dseq = (double)t.needle_start / T;
        EXPECT(T < 4096 || fabs(dseq - depth) <= 0.03, "passkey T=%d: needle at %.3f of the sequence, asked %.3f", T,
               dseq, depth);
    } else if (kind == RETRIEVAL_KV) {
        char *all = decode(tok, t.ids, (size_t)T);
        EXPECT(count_substr(all, " The value of ") == RETRIEVAL_KV_NEEDLES + 1,  // + the question's answer line
               "kv: %d needles in the text", count_substr(all, " The value of ") - 1);
        char q[128];
        snprintf(q, sizeof q, "What is the value of %s? The value of %s is %s", t.key, t.key, t.answer);
        EXPECT(strstr(all, q) != NULL, "kv: question + answer for key %s not at the end", t.key);
        snprintf(q, sizeof q, "The value of %s is %s.", t.key, t.answer);
        EXPECT(count_substr(all, q) == 1, "kv: key %s must be in exactly one needle, with the answer", t.key);
        EXPECT(strstr(all, "special magic") == NULL, "kv: no RULER wording");
        free(all);
    } else {
        char *all = decode(tok, t.ids, (size_t)T);
        EXPECT(count_substr(all, "One of the special magic numbers for ") == RETRIEVAL_MULTIKEY_NEEDLES,
               "multikey: %d needles in the text", count_substr(all, "One of the special magic numbers for "));
        char q[128];
        snprintf(q, sizeof q, "The special magic number for %s mentioned in the provided text is %s", t.key,
                 t.answer);
        EXPECT(strstr(all, q) != NULL, "multikey: question + answer for key %s not at the end", t.key);
        snprintf(q, sizeof q, "magic numbers for %s is:", t.key);
        EXPECT(count_substr(all, q) == 1, "multikey: key %s must be in exactly one needle", t.key);
        free(all);
    }

    // Determinism: the same arguments give the same sequence.
    RetrievalTask u;
    if (retrieval_make(tok, hay, n_hay, kind, T, depth, seed, &u, &st) == 0) {
        EXPECT(u.T == T && memcmp(u.ids, t.ids, sizeof(int32_t) * (size_t)T) == 0 &&
                   u.hay_offset == t.hay_offset,
               "%s: same seed must give identical ids", kn);
        retrieval_free(&u);
    }
    retrieval_free(&t);
}

static void test_tasks(const Tokenizer *tok, const int32_t *hay, size_t n_hay) {
    const int Ts[] = {256, 1024, 8192};
    const double depths[] = {0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
            for (size_t j = 0; j < sizeof depths / sizeof depths[0]; j++)
                if (k != RETRIEVAL_KV || Ts[i] >= 512)  // 16 needles need ~280 tokens (checked below)
                    check_task(tok, hay, n_hay, (RetrievalKind)k, Ts[i], depths[j], 1000 + 7 * i + j);

    // Different seeds: different numbers (fixed seeds, so this is deterministic).
    Status st;
    for (int k = 0; k < 3; k++) {
        RetrievalTask a, b, c;
        int rc = retrieval_make(tok, hay, n_hay, (RetrievalKind)k, 1024, 0.5, 1, &a, &st);
        rc |= retrieval_make(tok, hay, n_hay, (RetrievalKind)k, 1024, 0.5, 2, &b, &st);
        rc |= retrieval_make(tok, hay, n_hay, (RetrievalKind)k, 1024, 0.2, 1, &c, &st);
        EXPECT(rc == 0, "make: %s", st.msg);
        if (rc) continue;
        EXPECT(strcmp(a.answer, b.answer) != 0, "%s: seeds 1 and 2 give the same number %s",
               retrieval_kind_name(k), a.answer);
        EXPECT(strcmp(a.answer, c.answer) == 0 && a.hay_offset == c.hay_offset,
               "%s: the same seed at another depth keeps the number and the window",
               retrieval_kind_name(k));
        EXPECT(a.needle_start != c.needle_start, "%s: depth moves the needle", retrieval_kind_name(k));
        printf("%s seed 1: answer %s%s%s, needle at %d of %d, haystack offset %zu\n",
               retrieval_kind_name(k), a.answer, a.key[0] ? ", key " : "", a.key, a.needle_start, a.T,
               a.hay_offset);
        retrieval_free(&a), retrieval_free(&b), retrieval_free(&c);
    }

    // Errors: T too small, depth out of range, a stream too short.
    RetrievalTask t;
    int rc = retrieval_make(tok, hay, n_hay, RETRIEVAL_PASSKEY, 40, 0.5, 1, &t, &st);
    EXPECT(rc == -1 && t.ids == NULL && strstr(st.msg, "too small"), "T=40 must fail: \"%s\"", st.msg);
    rc = retrieval_make(tok, hay, n_hay, RETRIEVAL_KV, 256, 0.5, 1, &t, &st);
    EXPECT(rc == -1 && t.ids == NULL && strstr(st.msg, "kv task needs more than"), "kv at 256 must fail: \"%s\"",
           st.msg);
    rc = retrieval_make(tok, hay, n_hay, RETRIEVAL_MULTIKEY, 120, 0.5, 1, &t, &st);
    EXPECT(rc == -1 && strstr(st.msg, "too small"), "multikey T=120 must fail: \"%s\"", st.msg);
    rc = retrieval_make(tok, hay, n_hay, RETRIEVAL_PASSKEY, 1024, 1.5, 1, &t, &st);
    EXPECT(rc == -1 && strstr(st.msg, "depth"), "depth 1.5 must fail: \"%s\"", st.msg);
    rc = retrieval_make(tok, hay, 100, RETRIEVAL_PASSKEY, 1024, 0.5, 1, &t, &st);
    EXPECT(rc == -1 && strstr(st.msg, "haystack"), "a 100-token stream must fail: \"%s\"", st.msg);
    rc = retrieval_make(tok, hay, n_hay, (RetrievalKind)7, 1024, 0.5, 1, &t, &st);
    EXPECT(rc == -1, "unknown kind must fail");
    RetrievalKind kind;
    EXPECT(retrieval_kind_parse("multikey", &kind) == 0 && kind == RETRIEVAL_MULTIKEY &&
               retrieval_kind_parse("passkey", &kind) == 0 && kind == RETRIEVAL_PASSKEY &&
               retrieval_kind_parse("kv", &kind) == 0 && kind == RETRIEVAL_KV &&
               retrieval_kind_parse("niah", &kind) == -1,
           "kind names");
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_retrieval TOKENIZER_DIR SMOLLM2_DIR TMP_DIR [HELDOUT_DIR]\n");
        return 2;
    }
    mkdir(argv[3], 0755);
    test_corpus(argv[1], argv[3]);
    test_exact_match();

    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[2]);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (failures) {
            fprintf(stderr, "%d check(s) failed\n", failures);
            return 1;
        }
        printf("SKIPPED: no %s (run scripts/get-smollm2.sh); corpus and scoring checks passed\n", path);
        return 77;
    }
    Tokenizer *tok;
    Status st;
    if (tok_load(&tok, path, &st)) {
        fprintf(stderr, "FAIL: %s\n", st.msg);
        return 1;
    }
    EXPECT(corpus_separator_id(tok) == tok_find(tok, "<|endoftext|>") && corpus_separator_id(tok) >= 0,
           "SmolLM2 separator is <|endoftext|>");
    size_t n_hay;
    int32_t *hay = make_haystack(tok, argc > 4 ? argv[4] : NULL, &n_hay);
    test_tasks(tok, hay, n_hay);
    free(hay);
    tok_free(tok);
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_retrieval: all checks passed\n");
    return 0;
}
