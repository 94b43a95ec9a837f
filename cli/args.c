// args.c: see args.h.
#include "args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void args_usage(const char *cmd, const Flag *flags, int n_flags) {
    fprintf(stderr, "usage: spindle %s [flags]\n", cmd);
    for (int i = 0; i < n_flags; i++)
        fprintf(stderr, "  %-14s %-6s %s\n", flags[i].name, flags[i].takes_value == 2 ? "V..." : flags[i].takes_value ? "VALUE" : "",
                flags[i].help);
}

int args_parse(int argc, char **argv, int first, Flag *flags, int n_flags, const char *cmd) {
    for (int i = first; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {  // nothing is held yet: just leave
            args_usage(cmd, flags, n_flags);
            exit(0);
        }
        Flag *f = NULL;
        for (int j = 0; j < n_flags && !f; j++)
            if (!strcmp(argv[i], flags[j].name)) f = &flags[j];
        if (!f) {
            fprintf(stderr, "spindle %s: unknown argument \"%s\"\n", cmd, argv[i]);
            args_usage(cmd, flags, n_flags);
            return -1;
        }
        if (f->value) {
            fprintf(stderr, "spindle %s: %s given twice\n", cmd, f->name);
            return -1;
        }
        if (!f->takes_value) {
            f->value = "1";
            continue;
        }
        if (i + 1 >= argc || (f->takes_value == 2 && !strncmp(argv[i + 1], "--", 2))) {
            fprintf(stderr, "spindle %s: %s needs a value\n", cmd, f->name);
            return -1;
        }
        f->value = argv[++i];
        if (f->takes_value == 2) {
            f->values = &argv[i];
            f->n_values = 1;
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) i++, f->n_values++;
        }
    }
    return 0;
}

const char *args_get(const Flag *flags, int n_flags, const char *name) {
    for (int i = 0; i < n_flags; i++)
        if (!strcmp(flags[i].name, name)) return flags[i].value;
    return NULL;
}
