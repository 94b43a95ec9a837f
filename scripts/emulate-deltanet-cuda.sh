#!/usr/bin/env bash
# emulate-deltanet-cuda.sh [--quick] [--twins]: builds tests/emu/emu_deltanet.cpp (the
# kernels of kernels/cuda/deltanet.cu on host threads, no GPU or nvcc needed)
# into build-emu/ and runs it against the CPU twins; --twins runs the DeltaNet
# part of test_cuda_twins (tests/twins/deltanet.c) on the emulated kernels
# instead. EMU_OUT=DIR builds there (default build-emu/). Exit 0 when every case
# passes, 77 (CTest: skipped) without g++ or pkg-config's openblas.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${EMU_OUT:-$root/build-emu}"
if ! command -v g++ >/dev/null || ! pkg-config --exists openblas; then
    echo "emulate-deltanet-cuda: skipped: needs g++ and openblas (pkg-config)"
    exit 77
fi
mkdir -p "$out"
inc=(-I"$root/tests/emu" -I"$root/kernels" -I"$root/kernels/cuda" -I"$root/base")
gcc -std=c11 -O2 -fopenmp -D_GNU_SOURCE "${inc[@]}" $(pkg-config --cflags openblas) -c "$root/kernels/cpu/deltanet_cpu.c" -o "$out/deltanet_cpu.o"
for f in twins/common twins/deltanet; do
    gcc -std=c11 -O2 -D_GNU_SOURCE "${inc[@]}" -I"$root/tests/twins" -c "$root/tests/$f.c" -o "$out/$(basename $f).o"
done
g++ -std=c++20 -O1 -g -pthread -fno-strict-aliasing -Wall -Wno-unused-parameter -Wno-unused-function -Wno-unknown-pragmas "${inc[@]}" \
    -x c++ "$root/tests/emu/emu_deltanet.cpp" -x none "$out/deltanet_cpu.o" "$out/common.o" "$out/deltanet.o" -fopenmp $(pkg-config --libs openblas) -o "$out/emu_deltanet"
exec "$out/emu_deltanet" "$@"
