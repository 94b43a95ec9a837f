// retrieval.h: RULER-style retrieval tasks, teacher-forced (eval --tasks), and the kv task of
// training mixes (train --retrieval-mix): token sequences built from a haystack stream.
//
// A task is one token sequence ids[0..T) of exactly the requested length T:
//
//   preamble | haystack (real text) with needle(s) spliced in | question | answer
//
// The answer tokens are the last ans_len tokens: [ans_start, T), ans_start = T - ans_len.
// Scoring (exact match, retrieval_exact_match): for every answer position p,
// argmax(logits[p-1]) == ids[p].
//
// Kinds (templates follow RULER's passkey and niah_multikey_1):
//  passkey:  needle " The pass key is N. Remember it. N is the pass key." (N: 5 digits);
//            question "\n\nWhat is the pass key? The pass key is", answer " N".
//  kv:       spindle's own, for training mixes (train --retrieval-mix), not a RULER template:
//            RETRIEVAL_KV_NEEDLES needles " The value of K is N." (K: distinct words, N: distinct
//            7-digit numbers; the queried one at the requested depth); question "\n\nWhat is the
//            value of K? The value of K is", answer " N".
//  multikey: RETRIEVAL_MULTIKEY_NEEDLES needles " One of the special magic numbers for K is: N."
//            (K: distinct words from a fixed list, N: distinct 7-digit numbers); the queried one
//            sits at the requested depth, the others at seeded random depths; question
//            "\n\nWhat is the special magic number for K mentioned in the provided text? The
//            special magic number for K mentioned in the provided text is", answer " N".
//
// Pieces (preamble, needles, question, answer) are tokenized SEPARATELY with the model's
// tokenizer and the token arrays are spliced; the result can differ from tokenizing the
// joined text at the seams. Needles go in at a haystack token boundary: the nearest sentence
// boundary (after ". ", "! ", "? " or a line end, before whitespace) to the requested depth
// within a radius of max(4, H/100) tokens (H = haystack tokens), else the nearest boundary
// before whitespace in that radius, else exactly at the depth (round(depth * H)).
//
// Everything random comes from the task's own PRNG (splitmix64) seeded by seed and kind, so a
// (haystack, kind, T, depth, seed) gives identical tasks on every machine. The draws do not
// depend on depth: the same seed at several depths gives the same haystack window (when T is
// the same) and the same numbers, with only the needle moved.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tokenizer.h"

typedef enum { RETRIEVAL_PASSKEY = 0, RETRIEVAL_MULTIKEY = 1, RETRIEVAL_KV = 2 } RetrievalKind;

enum {
    RETRIEVAL_MULTIKEY_NEEDLES = 4,  // RULER niah_multikey_1: 1 queried + 3 distractors
    RETRIEVAL_KV_NEEDLES = 16,       // 1 queried + 15 distractors of the same shape
    RETRIEVAL_MAX_NEEDLES = 16,
};

typedef struct {
    RetrievalKind kind;
    int T;                   // sequence length (tokens)
    int32_t *ids;            // [T]; owned, freed by retrieval_free
    int ans_start, ans_len;  // answer span [ans_start, ans_start + ans_len), ends at T
    int needle_start;        // first token of the queried needle in ids
    int needle_len;          // its length in tokens
    int n_needles;           // needles in the haystack (1 for passkey)
    int hay_start, hay_len;  // the haystack region in ids (needles included): [hay_start, +hay_len)
    int n_hay;               // haystack tokens taken from the stream (H; needles excluded)
    double depth;            // realized depth: haystack tokens before the queried needle / H
    size_t hay_offset;       // where the haystack window starts in the given token stream
    char answer[16];         // the number, e.g. "68217"
    char key[32];            // multikey, kv: the queried key word; passkey: ""
} RetrievalTask;

// Builds a task of exactly T tokens from the token stream haystack[0..n_hay) (e.g. held-out
// text from corpus_load_tokens). depth in [0, 1]. On success out owns ids (retrieval_free).
// Errors (out cleared): unknown kind, depth outside [0, 1], T too small to hold the
// preamble, needles, question, answer and at least one haystack token, or a stream shorter
// than the haystack the task needs.
int retrieval_make(const Tokenizer *tok, const int32_t *haystack, size_t n_hay, RetrievalKind kind,
                   int T, double depth, uint64_t seed, RetrievalTask *out, Status *st);
void retrieval_free(RetrievalTask *task);

// 1 when every answer token is the argmax of the logits one position earlier, else 0.
// logits: float32 rows [*, vocab], row r holding position first_row + r of a forward pass
// over task->ids (first_row = 0 for full [T, vocab] logits; ans_start - 1 for just the rows
// that predict the answer). Ties go to the lowest id (as a first-max scan finds it).
int retrieval_exact_match(const RetrievalTask *task, const float *logits, int first_row, int vocab);

// "passkey" / "multikey" / "kv"; parse returns -1 for an unknown name.
const char *retrieval_kind_name(RetrievalKind kind);
int retrieval_kind_parse(const char *name, RetrievalKind *kind);
