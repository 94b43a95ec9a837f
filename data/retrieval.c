// retrieval.c: see retrieval.h.
#include "retrieval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

// --- Templates -------------------------------------------------------------------------------

static const char PASSKEY_PREAMBLE[] =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the important information there.\n\n";
static const char MULTIKEY_PREAMBLE[] =
    "Some special magic numbers are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the numbers afterwards.\n\n";
static const char KV_PREAMBLE[] = "Facts of the form \"the value of a word is a number\" are scattered through "
                                  "the text below. A question about one of them follows it.\n\n";

// Keys for the multikey needles: common, distinct English words.
static const char *const KEY_WORDS[] = {
    "apple",   "river",   "candle",  "garden",  "lantern", "marble",  "harbor",  "meadow",
    "pepper",  "violin",  "anchor",  "blanket", "castle",  "dolphin", "feather", "glacier",
    "hammer",  "island",  "jacket",  "kettle",  "ladder",  "mirror",  "needle",  "orchard",
    "pillow",  "quartz",  "saddle",  "tunnel",  "valley",  "walnut",  "zephyr",  "bridge",
    "cabinet", "desert",  "engine",  "forest",  "granite", "helmet",  "iceberg", "jungle",
    "kitchen", "lemon",   "magnet",  "nectar",  "oyster",  "parrot",  "rocket",  "sponge",
    "thunder", "umbrella", "velvet", "window",  "yogurt",  "basket",  "compass", "falcon",
    "goblet",  "hornet",  "lobster", "mustard", "pebble",  "ribbon",  "tomato",  "whistle",
};
enum { N_KEY_WORDS = sizeof KEY_WORDS / sizeof KEY_WORDS[0] };

const char *retrieval_kind_name(RetrievalKind kind) {
    switch (kind) {
    case RETRIEVAL_PASSKEY: return "passkey";
    case RETRIEVAL_MULTIKEY: return "multikey";
    case RETRIEVAL_KV: return "kv";
    }
    return "unknown";
}

int retrieval_kind_parse(const char *name, RetrievalKind *kind) {
    if (strcmp(name, "passkey") == 0) *kind = RETRIEVAL_PASSKEY;
    else if (strcmp(name, "multikey") == 0) *kind = RETRIEVAL_MULTIKEY;
    else if (strcmp(name, "kv") == 0) *kind = RETRIEVAL_KV;
    else return -1;
    return 0;
}

// --- Haystack boundaries ----------------------------------------------------------------------

// The first, second-to-last and last byte of one token's text (0 where there is none).
static void token_ends(const Tokenizer *tok, int32_t id, int *first, int *last2, int *last) {
    char *text = NULL;
    size_t len = 0;
    *first = *last2 = *last = 0;
    if (tok_decode(tok, &id, 1, &text, &len, NULL) == 0 && len > 0) {
        *first = (unsigned char)text[0];
        *last = (unsigned char)text[len - 1];
        if (len > 1) *last2 = (unsigned char)text[len - 2];
    }
    free(text);
}

static int is_space(int c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Boundary class of inserting before hay[p] (0 <= p <= H): 2 sentence (after ". ", "! ", "? "
// or a line end, and before whitespace), 1 whitespace (before a space or line break), 0 none.
// Needles start with a space and end with '.', so classes 1 and 2 keep the text readable.
// ".." (a reStructuredText directive, an ellipsis) is not a sentence end.
static int boundary_class(const Tokenizer *tok, const int32_t *hay, int H, int p) {
    if (p == 0 || p == H) return 2;
    int pf, pl2, pl, nf, nl2, nl;
    token_ends(tok, hay[p], &nf, &nl2, &nl);
    if (!is_space(nf)) return 0;
    token_ends(tok, hay[p - 1], &pf, &pl2, &pl);
    if (pl == '\n' || ((pl == '.' && pl2 != '.') || pl == '!' || pl == '?')) return 2;
    return 1;
}

// The insertion point for a needle aimed at haystack position target (see retrieval.h).
static int find_boundary(const Tokenizer *tok, const int32_t *hay, int H, int target) {
    int radius = H / 100 > 4 ? H / 100 : 4;
    int best_ws = -1;
    for (int d = 0; d <= radius; d++) {
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            if (d == 0 && sgn == 1) continue;
            int p = target + sgn * d;
            if (p < 0 || p > H) continue;
            int c = boundary_class(tok, hay, H, p);
            if (c == 2) return p;
            if (c == 1 && best_ws < 0) best_ws = p;
        }
    }
    return best_ws >= 0 ? best_ws : target;
}

// --- Tasks -----------------------------------------------------------------------------------

typedef struct {
    int32_t *ids;
    size_t n;
} Piece;

static int encode_piece(const Tokenizer *tok, const char *text, Piece *p, Status *st) {
    return tok_encode(tok, text, strlen(text), &p->ids, &p->n, st);
}

void retrieval_free(RetrievalTask *task) {
    if (!task) return;
    free(task->ids);
    memset(task, 0, sizeof *task);
}

typedef struct {
    int pos;    // insertion point in the haystack window, 0..H
    int which;  // needle index (0 = the queried one)
} Insert;

static int cmp_insert(const void *a, const void *b) {
    const Insert *x = a, *y = b;
    if (x->pos != y->pos) return x->pos < y->pos ? -1 : 1;
    return x->which - y->which;
}

int retrieval_make(const Tokenizer *tok, const int32_t *haystack, size_t n_hay, RetrievalKind kind,
                   int T, double depth, uint64_t seed, RetrievalTask *out, Status *st) {
    memset(out, 0, sizeof *out);
    if (kind != RETRIEVAL_PASSKEY && kind != RETRIEVAL_MULTIKEY && kind != RETRIEVAL_KV)
        return status_fail(st, "retrieval: unknown task kind %d", (int)kind);
    if (!(depth >= 0.0 && depth <= 1.0))
        return status_fail(st, "retrieval: depth %g is outside [0, 1]", depth);
    if (T <= 0) return status_fail(st, "retrieval: context length %d must be positive", T);

    // Draws, in a fixed order that does not depend on T or depth: numbers, keys, distractor
    // depths, then the haystack offset (which needs the haystack length).
    uint64_t rng = seed ^ (0xA5A5A5A5ull * (uint64_t)(kind + 1));
    rng_next(&rng);
    const int n_needles = kind == RETRIEVAL_PASSKEY ? 1 : kind == RETRIEVAL_KV ? RETRIEVAL_KV_NEEDLES
                                                                                : RETRIEVAL_MULTIKEY_NEEDLES;
    const int keyed = kind != RETRIEVAL_PASSKEY;
    long numbers[RETRIEVAL_MAX_NEEDLES];
    int keys[RETRIEVAL_MAX_NEEDLES];
    double depths[RETRIEVAL_MAX_NEEDLES];
    for (int i = 0; i < n_needles; i++) {
        for (;;) {  // distinct numbers
            numbers[i] = kind == RETRIEVAL_PASSKEY ? 10000 + (long)rng_below(&rng, 90000)
                                                   : 1000000 + (long)rng_below(&rng, 9000000);
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= numbers[j] == numbers[i];
            if (!dup) break;
        }
    }
    for (int i = 0; i < n_needles && keyed; i++) {
        for (;;) {  // distinct keys
            keys[i] = (int)rng_below(&rng, N_KEY_WORDS);
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= keys[j] == keys[i];
            if (!dup) break;
        }
    }
    depths[0] = depth;
    for (int i = 1; i < n_needles; i++) depths[i] = rng_uniform(&rng);

    // Text pieces, each tokenized on its own.
    char buf[512];
    Piece pre = {0}, question = {0}, answer = {0}, needles[RETRIEVAL_MAX_NEEDLES] = {{0}};
    int rc = 0;
    rc |= encode_piece(tok, kind == RETRIEVAL_PASSKEY ? PASSKEY_PREAMBLE : kind == RETRIEVAL_KV ? KV_PREAMBLE
                                                                                              : MULTIKEY_PREAMBLE,
                       &pre, st);
    for (int i = 0; i < n_needles && !rc; i++) {
        if (kind == RETRIEVAL_PASSKEY)
            snprintf(buf, sizeof buf, " The pass key is %ld. Remember it. %ld is the pass key.",
                     numbers[i], numbers[i]);
        else if (kind == RETRIEVAL_KV)
            snprintf(buf, sizeof buf, " The value of %s is %ld.", KEY_WORDS[keys[i]], numbers[i]);
        else
            snprintf(buf, sizeof buf, " One of the special magic numbers for %s is: %ld.",
                     KEY_WORDS[keys[i]], numbers[i]);
        rc = encode_piece(tok, buf, &needles[i], st);
    }
    if (!rc) {
        if (kind == RETRIEVAL_PASSKEY)
            snprintf(buf, sizeof buf, "\n\nWhat is the pass key? The pass key is");
        else if (kind == RETRIEVAL_KV)
            snprintf(buf, sizeof buf, "\n\nWhat is the value of %s? The value of %s is", KEY_WORDS[keys[0]],
                     KEY_WORDS[keys[0]]);
        else
            snprintf(buf, sizeof buf,
                     "\n\nWhat is the special magic number for %s mentioned in the provided text? "
                     "The special magic number for %s mentioned in the provided text is",
                     KEY_WORDS[keys[0]], KEY_WORDS[keys[0]]);
        rc = encode_piece(tok, buf, &question, st);
    }
    if (!rc) {
        snprintf(buf, sizeof buf, " %ld", numbers[0]);
        rc = encode_piece(tok, buf, &answer, st);
    }
    if (!rc && answer.n == 0) rc = status_fail(st, "retrieval: the answer encodes to no tokens");

    long fixed = (long)pre.n + (long)question.n + (long)answer.n;
    for (int i = 0; i < n_needles; i++) fixed += (long)needles[i].n;
    long H = (long)T - fixed;
    if (!rc && H < 1)
        rc = status_fail(st,
                         "retrieval: %s task needs more than %ld tokens (preamble, needle%s, question "
                         "and answer), context length %d is too small",
                         retrieval_kind_name(kind), fixed, n_needles > 1 ? "s" : "", T);
    if (!rc && (size_t)H > n_hay)
        rc = status_fail(st,
                         "retrieval: the haystack stream has %zu tokens, a %s task of %d tokens "
                         "needs %ld (give more held-out text)",
                         n_hay, retrieval_kind_name(kind), T, H);
    if (rc) goto done;

    size_t offset = (size_t)rng_below(&rng, (uint64_t)(n_hay - (size_t)H) + 1);
    const int32_t *hay = haystack + offset;

    Insert ins[RETRIEVAL_MAX_NEEDLES];
    for (int i = 0; i < n_needles; i++) {
        int target = (int)lround(depths[i] * (double)H);
        ins[i].pos = find_boundary(tok, hay, (int)H, target);
        ins[i].which = i;
    }
    qsort(ins, (size_t)n_needles, sizeof ins[0], cmp_insert);

    // Splice: preamble | hay[0..p1) needle hay[p1..p2) needle ... hay[..H) | question | answer.
    int32_t *ids = xmalloc(sizeof *ids * (size_t)T);
    size_t k = 0, h = 0;
    memcpy(ids + k, pre.ids, sizeof *ids * pre.n);
    k += pre.n;
    out->hay_start = (int)k;
    for (int i = 0; i < n_needles; i++) {
        size_t p = (size_t)ins[i].pos;
        memcpy(ids + k, hay + h, sizeof *ids * (p - h));
        k += p - h;
        h = p;
        const Piece *nd = &needles[ins[i].which];
        if (ins[i].which == 0) {
            out->needle_start = (int)k;
            out->needle_len = (int)nd->n;
            out->depth = (double)p / (double)H;
        }
        memcpy(ids + k, nd->ids, sizeof *ids * nd->n);
        k += nd->n;
    }
    memcpy(ids + k, hay + h, sizeof *ids * ((size_t)H - h));
    k += (size_t)H - h;
    out->hay_len = (int)k - out->hay_start;
    memcpy(ids + k, question.ids, sizeof *ids * question.n);
    k += question.n;
    out->ans_start = (int)k;
    out->ans_len = (int)answer.n;
    memcpy(ids + k, answer.ids, sizeof *ids * answer.n);
    k += answer.n;
    SPINDLE_CHECK(k == (size_t)T);

    out->kind = kind;
    out->T = T;
    out->ids = ids;
    out->n_needles = n_needles;
    out->n_hay = (int)H;
    out->hay_offset = offset;
    snprintf(out->answer, sizeof out->answer, "%ld", numbers[0]);
    if (keyed) snprintf(out->key, sizeof out->key, "%s", KEY_WORDS[keys[0]]);

done:
    free(pre.ids);
    free(question.ids);
    free(answer.ids);
    for (int i = 0; i < n_needles; i++) free(needles[i].ids);
    if (rc) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

int retrieval_exact_match(const RetrievalTask *task, const float *logits, int first_row, int vocab) {
    for (int p = task->ans_start; p < task->ans_start + task->ans_len; p++) {
        SPINDLE_CHECK(p - 1 >= first_row);
        const float *row = logits + (size_t)(p - 1 - first_row) * (size_t)vocab;
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (row[v] > row[best]) best = v;
        if (best != task->ids[p]) return 0;
    }
    return 1;
}
