# shell-line.sh: sourced by the report scripts (frontier.sh, gemma3-report.sh).
# shell_line ARGS...: the arguments as one line a shell reads back the same (quoted only where needed),
# the form in which the reports record and compare each call's command line.
shell_line() {
    local a line=""
    for a in "$@"; do
        if [[ $a =~ ^[A-Za-z0-9_./,=:@%+-]+$ ]]; then line+="$a "; else line+="$(printf '%q' "$a") "; fi
    done
    printf '%s' "${line% }"
}
