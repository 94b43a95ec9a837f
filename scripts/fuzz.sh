#!/usr/bin/env bash
# fuzz.sh: builds every fuzz target (tests/fuzz/fuzz_*.c) with clang, ASan and
# UBSan (libFuzzer when clang has it, else tests/fuzz/driver.c) in build-fuzz/,
# and runs each from its committed corpus (tests/fuzz/corpus/NAME/) for a
# bounded number of executions. Exits non-zero when a target crashes (the input
# is saved under build-fuzz/crashes/), or runs fewer than --min-runs inputs.
#   scripts/fuzz.sh                      # every target, 20000 runs each (at most 120 s)
#   scripts/fuzz.sh --runs 100000 --time 600 tokenizer
#   options: --runs N  --time SECONDS (per target)  --min-runs N  --seed S  [NAME...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs=20000 max_time=120 min_runs=10000 seed=1
names=()
while (($#)); do
  case "$1" in
    --runs) runs=$2; shift ;;
    --time) max_time=$2; shift ;;
    --min-runs) min_runs=$2; shift ;;
    --seed) seed=$2; shift ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) names+=("$1") ;;
  esac
  shift
done
for v in "$runs" "$max_time" "$min_runs" "$seed"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: option values must be non-negative integers (got \"$v\")" >&2; exit 2; }
done
# clang and its sanitizer/libFuzzer runtimes (Debian: clang, libclang-rt-dev), installed when missing.
if ! command -v clang >/dev/null; then
  scripts/setup.sh --fuzz
fi
command -v clang >/dev/null || { echo "fuzz.sh: clang not found (the fuzz build needs it)" >&2; exit 1; }

dir=build-fuzz
mkdir -p "$dir"
if ! { CC=clang cmake -S . -B "$dir" -DSPINDLE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build "$dir" --target fuzz -j"$(nproc)"; } >"$dir/build.log" 2>&1; then
  tail -40 "$dir/build.log" >&2
  echo "fuzz.sh: the fuzz build failed (log: $dir/build.log)" >&2
  exit 1
fi
grep -q "use tests/fuzz/driver.c" "$dir/build.log" && echo "fuzz.sh: clang has no libFuzzer here; the targets use tests/fuzz/driver.c (seeded mutation)"
if ((${#names[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.c; do n=${f##*/fuzz_}; names+=("${n%.c}"); done
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
mkdir -p "$dir/crashes"
fails=0
printf '%-18s %10s %9s %10s  %s\n' target runs seconds exec/s result
for name in "${names[@]}"; do
  exe="$dir/fuzz/fuzz_$name" corpus="tests/fuzz/corpus/$name" work="$dir/fuzz-work/$name"
  [ -x "$exe" ] || { echo "fuzz.sh: no target $name ($exe)" >&2; fails=$((fails + 1)); continue; }
  [ -d "$corpus" ] || { echo "fuzz.sh: $name has no corpus folder $corpus" >&2; fails=$((fails + 1)); continue; }
  # New inputs go to a scratch folder; the committed corpus is only read.
  rm -rf "$work" && mkdir -p "$work"
  log="$dir/fuzz-work/$name.log"
  set +e
  "$exe" -runs="$runs" -max_total_time="$max_time" -seed="$seed" -timeout=20 -rss_limit_mb=2048 \
    -artifact_prefix="$dir/crashes/$name-" -print_final_stats=1 "$work" "$corpus" >"$log" 2>&1
  rc=$?
  set -e
  done_line=$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$log" | tail -1 || true)
  n=$(sed -E 's/^Done ([0-9]+) runs in ([0-9]+).*/\1/' <<<"$done_line")
  s=$(sed -E 's/^Done ([0-9]+) runs in ([0-9]+).*/\2/' <<<"$done_line")
  rate=$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}' || true)
  [ -n "$rate" ] || rate=$(sed -nE 's/.*, ([0-9]+) exec\/s\)$/\1/p' <<<"$done_line")
  result=ok
  if [ $rc != 0 ]; then
    result="CRASH (exit $rc; log $log)"
  elif [ -z "$n" ] || [ "$n" -lt "$min_runs" ]; then
    result="too few runs (${n:-0} < $min_runs; log $log)"
  fi
  printf '%-18s %10s %9s %10s  %s\n' "$name" "${n:-?}" "${s:-?}" "${rate:-?}" "$result"
  if [ "$result" != ok ]; then
    fails=$((fails + 1))
    grep -E "ERROR|SUMMARY|invariant failed|Test unit written|saved as" "$log" | head -8 | sed 's/^/    /'
  fi
done
if [ $fails != 0 ]; then
  echo "fuzz.sh: $fails target(s) failed" >&2
  exit 1
fi
echo "fuzz.sh: every target ran at least $min_runs inputs without a crash"
