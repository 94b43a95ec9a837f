// test_ruler.c: RULER's scoring (eval/ruler.h) on known strings, and the tasks
// file reader's refusals. Usage: test_ruler TMP_DIR
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "ruler.h"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void expect_refused(const char *dir, const char *name, const char *text, const char *needle) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_file(path, text);
    RulerTask *t;
    int n;
    Status st = {{0}};
    const int rc = ruler_load(path, 100, 64, &t, &n, &st);
    EXPECT(rc == -1 && !t && !n, "%s: accepted", name);
    EXPECT(strstr(st.msg, path) && strstr(st.msg, needle), "%s: message \"%s\" lacks the file or \"%s\"", name,
           st.msg, needle);
}

#define LINE(extra)                                                                                       \
    "{\"task\": \"niah_single_1\", \"metric\": \"string_match_all\", \"ctx\": 64, \"index\": 0, "        \
    "\"input_ids\": [1, 2, 3], \"outputs\": [\"42\"], \"max_new_tokens\": 4" extra "}\n"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    const char *refs2[] = {"7712345", "Blue-Whale"};
    // string_match_all: the fraction of references found, case-insensitively.
    EXPECT(ruler_score(RULER_MATCH_ALL, "The numbers are 7712345 and blue-whale.", refs2, 2) == 100.0, "all: both");
    EXPECT(ruler_score(RULER_MATCH_ALL, "The number is 7712345.", refs2, 2) == 50.0, "all: one of two");
    EXPECT(ruler_score(RULER_MATCH_ALL, "771234", refs2, 2) == 0.0, "all: a prefix is no match");
    // string_match_part: any reference found.
    EXPECT(ruler_score(RULER_MATCH_PART, "it was BLUE-WHALE", refs2, 2) == 100.0, "part: one is enough");
    EXPECT(ruler_score(RULER_MATCH_PART, "nothing here", refs2, 2) == 0.0, "part: none");
    // postprocess: strip, control bytes to newlines, strip again.
    char p[] = "  \t answer\x01is\x1f" "42 \n\x02 ";
    ruler_postprocess(p);
    EXPECT(!strcmp(p, "answer\nis\n42"), "postprocess gave \"%s\"", p);
    char e[] = " \x03\n ";
    ruler_postprocess(e);
    EXPECT(!e[0], "postprocess of blanks gave \"%s\"", e);

    // The reader: a good file, then refusals naming the file and line.
    char path[4200];
    snprintf(path, sizeof path, "%s/ruler_ok.jsonl", argv[1]);
    write_file(path, LINE(", \"stop_ids\": [2], \"seed\": 7, \"generator\": \"nvidia-long-context-eval 26.3\"")
               "\n" LINE(""));
    RulerTask *t;
    int n;
    Status st;
    EXPECT(!ruler_load(path, 100, 64, &t, &n, &st) && n == 2, "good file refused: %s", st.msg);
    if (!failures) {
        EXPECT(t[0].n_ids == 3 && t[0].ids[2] == 3 && t[0].n_refs == 1 && !strcmp(t[0].refs[0], "42") &&
                   t[0].max_new == 4 && t[0].n_stop == 1 && t[0].stop[0] == 2 && t[0].seed == 7 &&
                   !strcmp(t[0].generator, "nvidia-long-context-eval 26.3") && t[0].metric == RULER_MATCH_ALL,
               "fields of line 1 read wrong");
        EXPECT(t[1].n_stop == 0 && t[1].seed == -1, "line 3: defaults");
        ruler_free(t, n);
    }
    expect_refused(argv[1], "bad_json.jsonl", LINE("") "{\"task\": \n", "line 2: not a JSON object");
    expect_refused(argv[1], "bad_metric.jsonl",
                   "{\"task\": \"x\", \"metric\": \"exact\", \"ctx\": 64, \"index\": 0, \"input_ids\": [1], "
                   "\"outputs\": [\"a\"], \"max_new_tokens\": 4}\n", "\"metric\"");
    expect_refused(argv[1], "bad_id.jsonl", LINE(", \"stop_ids\": [100]"), "\"stop_ids\"[0]");
    expect_refused(argv[1], "too_long.jsonl",
                   "{\"task\": \"x\", \"metric\": \"string_match_part\", \"ctx\": 64, \"index\": 0, "
                   "\"input_ids\": [1, 2, 3], \"outputs\": [\"a\"], \"max_new_tokens\": 62}\n", "exceed");
    expect_refused(argv[1], "no_outputs.jsonl",
                   "{\"task\": \"x\", \"metric\": \"string_match_part\", \"ctx\": 64, \"index\": 0, "
                   "\"input_ids\": [1], \"outputs\": [], \"max_new_tokens\": 2}\n", "\"outputs\"");
    expect_refused(argv[1], "empty.jsonl", "\n\n", "no tasks");
    return failures ? 1 : 0;
}
