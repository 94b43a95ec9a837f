// args.h: "--flag value" parsing for the subcommands.
#pragma once

typedef struct {
    const char *name;   // "--model"
    int takes_value;    // 0 switch, 1 one value, 2 one or more values (up to the next --flag)
    const char *help;
    const char *value;  // filled by args_parse ("1" for a switch that is present)
    char **values;      // takes_value 2: the values (pointers into argv)
    int n_values;
} Flag;

// Fills flags[].value from argv[first..argc). Unknown flags, a missing value,
// or a repeated flag print a usage message for cmd and return -1; --help / -h
// prints the usage to stderr and exits 0.
int args_parse(int argc, char **argv, int first, Flag *flags, int n_flags, const char *cmd);
// Prints "usage: spindle CMD" and the flag list to stderr.
void args_usage(const char *cmd, const Flag *flags, int n_flags);
// Looks up a flag's value by name (NULL if absent).
const char *args_get(const Flag *flags, int n_flags, const char *name);
