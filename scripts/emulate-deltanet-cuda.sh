#!/usr/bin/env bash
# emulate-deltanet-cuda.sh [--quick]: builds tests/emu/emu_deltanet.cpp (the
# kernels of kernels/cuda/deltanet.cu on host threads, no GPU or nvcc needed)
# into build-emu/ and runs it against the CPU twins. Exit 0 when every case passes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/build-emu"
mkdir -p "$out"
inc=(-I"$root/tests/emu" -I"$root/kernels" -I"$root/kernels/cuda" -I"$root/base")
gcc -std=c11 -O2 -fopenmp -D_GNU_SOURCE "${inc[@]}" $(pkg-config --cflags openblas) -c "$root/kernels/cpu/deltanet_cpu.c" -o "$out/deltanet_cpu.o"
g++ -std=c++20 -O1 -g -pthread -fno-strict-aliasing -Wall -Wno-unused-parameter -Wno-unused-function -Wno-unknown-pragmas "${inc[@]}" \
    -x c++ "$root/tests/emu/emu_deltanet.cpp" -x none "$out/deltanet_cpu.o" -fopenmp $(pkg-config --libs openblas) -o "$out/emu_deltanet"
exec "$out/emu_deltanet" "$@"
