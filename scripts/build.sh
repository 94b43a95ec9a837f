#!/usr/bin/env bash
# build.sh [BUILD_DIR] [cmake options...]: configure and build spindle.
#   scripts/build.sh                          # build/ (Release)
#   scripts/build.sh build-asan -DSPINDLE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
#   scripts/build.sh build-cuda -DSPINDLE_CUDA=ON
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-build}"
shift || true
case "$dir" in /*) ;; *) dir="$root/$dir" ;; esac
cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
