#!/usr/bin/env bash
# One chain on a fresh machine (from /root/src): twins, SmolLM2 dsa client rows, synthetic bench.
set -uo pipefail
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread
mkdir -p /root/res
bash scripts/device-bg.sh wait build 400 >/dev/null; echo "build rc $(cat /root/bg/build.rc)"
echo "=== twins $(date -u +%H:%M:%S)"
SPINDLE_REQUIRE_GPU=1 timeout 300 build-device/test_cuda_twins > /root/res/twins.txt 2>&1; echo "twins exit $?"; tail -2 /root/res/twins.txt
echo "=== smol $(date -u +%H:%M:%S)"
for i in $(seq 120); do [ -f /root/sp/smol.part0 ] && [ -f /root/sp/smol.part1 ] && [ -f /root/sp/smol.part2 ] && [ -f /root/i21x/E-dsa/model.safetensors ] && break; sleep 2; done
bash /root/s2/smol2.sh > /root/res/smol2.log 2>&1; echo "smol2 exit $?"
echo "=== bench $(date -u +%H:%M:%S)"
bash /root/s2/bench.sh > /root/res/benchchain.log 2>&1; echo "bench exit $?"
cd /root/res && tar czf /root/all.tgz . ; echo "=== ALL DONE $(date -u +%H:%M:%S)"
