#!/usr/bin/env bash
# test.sh: the project's test command, from a fresh clone to a ctest summary.
# Installs the build dependencies, builds, fetches the real models (SmolLM2-135M-Instruct for the SmolLM2
# checks; Gemma 3 270M, scripts/get-gemma3.sh, for its tokenizer's check), and runs every ctest.
#   scripts/test.sh              # Release build in build/
#   scripts/test.sh --sanitize   # AddressSanitizer + UBSan build in build-asan/
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
scripts/get-smollm2.sh
scripts/get-gemma3.sh   # the real Gemma 3 270M tokenizer (ctest gemma3_tokenizer)
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  scripts/build.sh "$dir" -DSPINDLE_SANITIZE=ON -DSPINDLE_NATIVE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
else
  dir=build
  scripts/build.sh "$dir"
fi
cd "$dir"
ctest --output-on-failure --timeout 1200
