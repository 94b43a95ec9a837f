#!/usr/bin/env bash
# test_layering.sh CC CASE...: the folders' dependency order is enforced by the
# include paths (CMakeLists.txt: one library per folder, each with only its own
# folder and those below it on its path). For each library this compiles, with
# that library's include path, one probe per header: a header of its own
# folder or a lower one must compile, a header of a higher folder must be
# refused as not found. A quoted include is looked up first in the including
# file's own folder, which for a source in folder F is F itself, so a probe
# outside the tree sees exactly what a source in F sees from other folders.
#
# CASE is LIB=DIR:DIR:...=ALLOWED,ALLOWED=FORBIDDEN,FORBIDDEN (headers by name).
set -uo pipefail
cc="$1"
shift
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
checked=0
for spec in "$@"; do
  IFS='=' read -r lib dirs allowed forbidden <<<"$spec"
  flags=()
  IFS=':' read -r -a ds <<<"$dirs"
  for d in "${ds[@]}"; do [ -n "$d" ] && flags+=("-I$d"); done
  IFS=',' read -r -a ok <<<"$allowed"
  IFS=',' read -r -a bad <<<"$forbidden"
  for h in "${ok[@]}"; do
    printf '#include "%s"\nint layering_probe;\n' "$h" >"$tmp/probe.c"
    if ! "$cc" -std=c11 -D_GNU_SOURCE -c -o "$tmp/probe.o" "${flags[@]}" "$tmp/probe.c" 2>"$tmp/err"; then
      echo "FAIL $lib: \"$h\" (its own folder or a lower one) does not compile:"; sed 's/^/  /' "$tmp/err"; fail=1
    fi
    checked=$((checked + 1))
  done
  for h in "${bad[@]}"; do
    [ -n "$h" ] || continue
    printf '#include "%s"\nint layering_probe;\n' "$h" >"$tmp/probe.c"
    if "$cc" -std=c11 -D_GNU_SOURCE -c -o "$tmp/probe.o" "${flags[@]}" "$tmp/probe.c" 2>"$tmp/err"; then
      echo "FAIL $lib: \"$h\" is a higher folder's header and compiled"; fail=1
    elif ! grep -q "$h.*\(No such file\|not found\)" "$tmp/err"; then
      echo "FAIL $lib: \"$h\" failed for another reason than not being found:"; sed 's/^/  /' "$tmp/err"; fail=1
    fi
    checked=$((checked + 1))
  done
done
[ "$checked" -gt 0 ] || { echo "FAIL: no case checked"; exit 1; }
[ "$fail" = 0 ] && echo "layering: $checked probes, every upward include refused"
exit "$fail"
