// args.h: the one flag grammar of every subcommand.
//
//   spindle CMD [--flag VALUE | --flag=VALUE | --switch]...
//
// - A flag is named in full ("--model"); there are no abbreviations and no
//   positional arguments. A value may follow as the next argument or after '='.
// - A flag that takes several values (takes_value 2) reads every following
//   argument up to the next one starting with "--"; "--text=a.txt b.txt" gives
//   two values.
// - A switch takes no value ("--resume"; "--resume=1" is an error).
// - Each flag may be given once.
// - "--help" or "-h" anywhere prints the help to stdout and exits 0.
// - An unknown flag is answered with the closest known one ("did you mean
//   --bsel?"). Every such usage error makes the command exit 2.
#pragma once
#include <stdio.h>

typedef struct {
    const char *name;   // "--model"
    int takes_value;    // 0 switch, 1 one value, 2 one or more values (up to the next --flag)
    const char *help;
    const char *value;  // filled by args_parse ("1" for a switch that is present)
    char **values;      // takes_value 2: the values (pointers into argv)
    int n_values;
} Flag;

// Fills flags[].value from argv[first..argc) (argv entries of the form
// "--flag=value" are rewritten in place to point at their value). A usage error
// prints "spindle CMD: what is wrong" and a pointer to --help on stderr and
// returns -1. --help / -h prints args_help to stdout and exits 0.
int args_parse(int argc, char **argv, int first, Flag *flags, int n_flags, const char *cmd);
// args_parse that also knows the required flags (NULL-terminated list, or NULL)
// and a note printed at the end of the help (NULL: none), for --help.
int args_parse_ex(int argc, char **argv, int first, Flag *flags, int n_flags, const char *cmd,
                  const char *const *required, const char *note);
// The help: a usage line naming the required flags, then every flag with
// "[required]" on the required ones, then the note.
void args_help(FILE *f, const char *cmd, const Flag *flags, int n_flags, const char *const *required,
               const char *note);
// Prints the usage line and the flag list to stderr (args_help without marks).
void args_usage(const char *cmd, const Flag *flags, int n_flags);
// The known flag closest to word (edit distance, or a unique prefix), or NULL
// when none is close enough to be a plausible typo.
const char *args_suggest(const char *word, const Flag *flags, int n_flags);
// Looks up a flag's value by name (NULL if absent).
const char *args_get(const Flag *flags, int n_flags, const char *name);
