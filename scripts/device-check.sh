#!/usr/bin/env bash
# device-check.sh: run ON the GPU machine (Ubuntu 24.04 + CUDA, no network), from
# the repo root. Builds spindle with the CUDA twin and checks it:
#   1. unpacks the .debs that scripts/device-prepare.sh fetched (run that HERE
#      first; the device call carries .deb/) into a private prefix with dpkg -x,
#      keeping the system's copy of every shared library the machine already has;
#   2. configures with -DSPINDLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90, builds -j16;
#   3. runs tests/test_cuda_twins.c with SPINDLE_REQUIRE_GPU=1 (so "no GPU" fails),
#      then under compute-sanitizer --tool memcheck and --tool racecheck (--quick
#      sizes, T ≤ 130);
#   4. runs the CPU ctest suite (every test but the twin test; the ones needing
#      models/ or corpus/ skip themselves, since those folders do not travel).
# Everything goes to $OUT (default ./device-out): device-check.log (all of it),
# twins.txt, memcheck.txt, racecheck.txt, ctest.txt, build.log. Exit 0 only if
# every step passed.
#
# Device call (see docs/device-runs.md):
#   run(command="bash scripts/device-check.sh", carry=[".deb"], kind="nvidia-h200")
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/device-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/device-check.log") 2>&1
P=/tmp/spindle-prefix
B=$ROOT/build-device
ARCH=x86_64-linux-gnu
JOBS=${JOBS:-16}
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
fail() { echo "device-check: FAIL: $*"; status=1; }

step "machine"
. /etc/os-release && echo "$PRETTY_NAME"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader || fail "nvidia-smi"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
nvcc --version | tail -2
cmake --version | head -1
gcc --version | head -1
command -v compute-sanitizer || echo "compute-sanitizer not on PATH"

step "unpack .deb/ into $P"
if ! ls .deb/*.deb >/dev/null 2>&1; then
    echo "device-check: no .deb/*.deb: run scripts/device-prepare.sh here and carry .deb" >&2
    exit 1
fi
rm -rf "$P" && mkdir -p "$P"
for f in .deb/*.deb; do dpkg -x "$f" "$P" || fail "dpkg -x $f"; done
L=$P/usr/lib/$ARCH
# The system's copy wins for every soname it has (newer, and what its other
# libraries were built against); bookworm's fills only the gaps.
kept=() linked=()
for f in "$L"/lib*.so.* "$L"/openblas-pthread/lib*.so.* "$L"/hdf5/serial/lib*.so.*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    name=$(basename "$f")
    sys=$(ldconfig -p | awk -v n="$name" '$1 == n && /x86-64/ {print $NF; exit}')
    if [ -n "$sys" ] && [ "${sys#$P}" = "$sys" ]; then
        ln -sfn "$sys" "$f"
        linked+=("$name")
    else
        case "$name" in *.so.[0-9]|*.so.[0-9][0-9]|*.so.[0-9][0-9][0-9]) kept+=("$name") ;; esac
    fi
done
echo "system copy used for: ${linked[*]:-none}"
echo "from .deb/ (missing on this machine): ${kept[*]:-none}"
# What update-alternatives would have made: openblas's .pc and cblas.h live in
# openblas-pthread/ folders; hdf5 lives in hdf5/serial.
cp "$L/openblas-pthread/pkgconfig/openblas.pc" "$L/pkgconfig/openblas.pc"
ln -sfn openblas-pthread/libopenblas.so.0 "$L/libopenblas.so.0"
# .pc files name /usr: point them at the prefix.
for pc in $(find "$P" -name '*.pc'); do
    sed -i -E "s#(^|[=[:space:]]|-I|-L)/usr#\1$P/usr#g" "$pc"
done
export PKG_CONFIG_PATH=$L/pkgconfig:$P/usr/share/pkgconfig
export LD_LIBRARY_PATH=$L:$L/openblas-pthread:$L/hdf5/serial${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PKGCONF=$(command -v pkg-config || true)
[ -n "$PKGCONF" ] || PKGCONF=$P/usr/bin/pkgconf
echo "pkg-config: $PKGCONF"
for m in libcjson libpcre2-8 openblas libutf8proc libcrypto; do
    printf '  %-12s %s\n' "$m" "$("$PKGCONF" --modversion "$m" 2>&1)"
done

step "configure + build (-j$JOBS)"
rm -rf "$B"
{
    cmake -S "$ROOT" -B "$B" -DSPINDLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$P/usr" -DPKG_CONFIG_EXECUTABLE="$PKGCONF" &&
        cmake --build "$B" -j"$JOBS"
} >"$OUT/build.log" 2>&1
rc=$?
grep -E "HDF5|Found|CUDA|warning" "$OUT/build.log" | head -40
if [ $rc -ne 0 ]; then
    tail -40 "$OUT/build.log"
    fail "build (see build.log)"
    echo "device-check: stopping: nothing to test"
    exit 1
fi
echo "build ok"

step "twin test: SPINDLE_REQUIRE_GPU=1 $B/test_cuda_twins"
SPINDLE_REQUIRE_GPU=1 "$B/test_cuda_twins" >"$OUT/twins.txt" 2>&1
rc=$?
grep -E "^(FAIL|test_cuda_twins)" "$OUT/twins.txt"
sed -n '/^op /,$p' "$OUT/twins.txt"
[ $rc -eq 0 ] || fail "test_cuda_twins exit $rc"

for tool in memcheck racecheck; do
    step "compute-sanitizer --tool $tool (test_cuda_twins --quick)"
    SPINDLE_REQUIRE_GPU=1 timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 3 \
        "$B/test_cuda_twins" --quick >"$OUT/$tool.txt" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^test_cuda_twins: (PASS|FAIL)|Device not supported" "$OUT/$tool.txt"
    [ $rc -eq 0 ] || fail "$tool exit $rc"
done

# Serially, as scripts/test.sh runs it: under ctest -j the golden oracle tests
# k8_bsel1 and k8_bsel8 write the same output file (tests/test_goldens.c names
# it by k only) and one fails to rename its .tmp (seen on the H200, 2026-11-29).
step "CPU ctest suite (all but cuda_twins, serial)"
(cd "$B" && timeout 300 ctest --timeout 240 -E '^cuda_twins$' --output-on-failure) >"$OUT/ctest.txt" 2>&1
rc=$?
grep -E "tests passed|Not Run|\*\*\*|Skipped|Failed|Passed" "$OUT/ctest.txt" | tail -40
[ $rc -eq 0 ] || fail "ctest exit $rc"

step "summary"
sed -n '/^op /,$p' "$OUT/twins.txt"
for tool in memcheck racecheck; do echo "$tool: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.txt" | tr '\n' ' ')"; done
grep -E "tests passed" "$OUT/ctest.txt"
echo "device-check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
