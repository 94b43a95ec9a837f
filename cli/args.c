// args.c: see args.h.
#include "args.h"

#include <stdlib.h>
#include <string.h>

static int is_required(const char *name, const char *const *required) {
    for (; required && *required; required++)
        if (!strcmp(*required, name)) return 1;
    return 0;
}

static const char *value_word(const Flag *f) { return f->takes_value == 2 ? " VALUE..." : f->takes_value ? " VALUE" : ""; }

void args_help(FILE *f, const char *cmd, const Flag *flags, int n_flags, const char *const *required,
               const char *note) {
    fprintf(f, "usage: spindle %s", cmd);
    for (const char *const *r = required; r && *r; r++)
        for (int i = 0; i < n_flags; i++)
            if (!strcmp(flags[i].name, *r)) fprintf(f, " %s%s", flags[i].name, value_word(&flags[i]));
    fprintf(f, " [flags]\n\nflags (a value goes after a space or '='; [required] flags must be given):\n");
    for (int i = 0; i < n_flags; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s", flags[i].name, value_word(&flags[i]));
        fprintf(f, "  %-28s %s%s\n", left, is_required(flags[i].name, required) ? "[required] " : "", flags[i].help);
    }
    fprintf(f, "  %-28s %s\n", "--help", "print this help and exit");
    if (note) fprintf(f, "\n%s\n", note);
}

void args_usage(const char *cmd, const Flag *flags, int n_flags) { args_help(stderr, cmd, flags, n_flags, NULL, NULL); }

// Levenshtein distance of a and b (both short: flag names).
static int edit_distance(const char *a, const char *b) {
    const size_t na = strlen(a), nb = strlen(b);
    if (na > 63 || nb > 63) return 1 << 20;
    int row[64];
    for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            const int up = row[j], best_sub = diag + (a[i - 1] != b[j - 1]);
            int v = up + 1 < row[j - 1] + 1 ? up + 1 : row[j - 1] + 1;
            row[j] = v < best_sub ? v : best_sub;
            diag = up;
        }
    }
    return row[nb];
}

const char *args_suggest(const char *word, const Flag *flags, int n_flags) {
    // Compare without leading dashes, so "-k" and "k" find "--k".
    while (*word == '-') word++;
    const size_t len = strcspn(word, "=");
    char w[64];
    if (len == 0 || len >= sizeof w) return NULL;
    memcpy(w, word, len), w[len] = 0;
    const char *best = NULL, *prefix = NULL;
    int best_d = 1 << 20, n_prefix = 0;
    for (int i = 0; i < n_flags; i++) {
        const char *name = flags[i].name + strspn(flags[i].name, "-");
        const int d = edit_distance(w, name);
        if (d < best_d) best_d = d, best = flags[i].name;
        if (!strncmp(name, w, len)) n_prefix++, prefix = flags[i].name;
    }
    if (n_prefix == 1) return prefix;  // "--thr" -> "--threads"
    // A plausible typo: at most a third of the word wrong (and at least one edit allowed).
    const int limit = len < 3 ? 1 : (int)len / 3 + 1;
    return best && best_d <= limit ? best : NULL;
}

static void usage_hint(const char *cmd) { fprintf(stderr, "spindle %s: see spindle %s --help\n", cmd, cmd); }

int args_parse_ex(int argc, char **argv, int first, Flag *flags, int n_flags, const char *cmd,
                  const char *const *required, const char *note) {
    for (int i = first; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {  // nothing is held yet: just leave
            args_help(stdout, cmd, flags, n_flags, required, note);
            fflush(stdout);
            exit(0);
        }
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i];
        const char *eq = !strncmp(arg, "--", 2) ? strchr(arg, '=') : NULL;
        const size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        Flag *f = NULL;
        for (int j = 0; j < n_flags && !f; j++)
            if (strlen(flags[j].name) == name_len && !strncmp(arg, flags[j].name, name_len)) f = &flags[j];
        if (!f) {
            const char *s = args_suggest(arg, flags, n_flags);
            if (strncmp(arg, "--", 2))
                fprintf(stderr, "spindle %s: unexpected argument \"%s\" (flags start with --)", cmd, arg);
            else
                fprintf(stderr, "spindle %s: unknown flag \"%.*s\"", cmd, (int)name_len, arg);
            if (s) fprintf(stderr, "; did you mean %s?", s);
            fprintf(stderr, "\n");
            usage_hint(cmd);
            return -1;
        }
        if (f->value) {
            fprintf(stderr, "spindle %s: %s given twice\n", cmd, f->name);
            return -1;
        }
        if (!f->takes_value) {
            if (eq) {
                fprintf(stderr, "spindle %s: %s is a switch and takes no value (got \"%s\")\n", cmd, f->name, arg);
                return -1;
            }
            f->value = "1";
            continue;
        }
        if (eq) {
            if (!eq[1]) {
                fprintf(stderr, "spindle %s: %s needs a value (got an empty one)\n", cmd, f->name);
                return -1;
            }
            argv[i] = (char *)eq + 1;  // the value in place of "--flag=value"
        } else {
            // The next argument is the value, unless there is none or it is another flag.
            int next_is_flag = 0;
            if (i + 1 < argc && !strncmp(argv[i + 1], "--", 2)) {
                const size_t nl = strcspn(argv[i + 1], "=");
                for (int j = 0; j < n_flags; j++)
                    if (strlen(flags[j].name) == nl && !strncmp(argv[i + 1], flags[j].name, nl)) next_is_flag = 1;
                if (f->takes_value == 2) next_is_flag = 1;
            }
            if (i + 1 >= argc || next_is_flag) {
                fprintf(stderr, "spindle %s: %s needs a value\n", cmd, f->name);
                usage_hint(cmd);
                return -1;
            }
            i++;
        }
        f->value = argv[i];
        if (f->takes_value == 2) {
            f->values = &argv[i];
            f->n_values = 1;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) i++, f->n_values++;
        }
    }
    return 0;
}

int args_parse(int argc, char **argv, int first, Flag *flags, int n_flags, const char *cmd) {
    return args_parse_ex(argc, argv, first, flags, n_flags, cmd, NULL, NULL);
}

const char *args_get(const Flag *flags, int n_flags, const char *name) {
    for (int i = 0; i < n_flags; i++)
        if (!strcmp(flags[i].name, name)) return flags[i].value;
    return NULL;
}
