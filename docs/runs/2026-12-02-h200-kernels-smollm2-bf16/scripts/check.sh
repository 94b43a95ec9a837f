#!/usr/bin/env bash
# Correctness on the GPU (from /root/src): twins (all parts, full sizes), golden logits, then the GPU ctest
# cases. The sanitizers run later (san.sh).
set -uo pipefail
SKIP_SANITIZE=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 SKIP_CTEST=1 OUT=/root/res/check bash scripts/device-check.sh
echo "device-check exit $?"
for i in $(seq 150); do [ -s /root/smol/model/model.safetensors ] && [ -f /root/smol/model/tokenizer.json ] && break; sleep 2; done
export SPINDLE_SMOLLM2=/root/smol/model SPINDLE_REQUIRE_GPU=1
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread
(cd build-device && timeout 400 ctest --timeout 300 -R '^(gpu_cli|gpu_train_online|gpu_teacher_bf16)$' --output-on-failure) > /root/res/check/ctest_gpu.txt 2>&1
echo "ctest gpu exit $?"; grep -E "tests passed|Failed|Passed|Skipped" /root/res/check/ctest_gpu.txt | tail
echo "=== CHECK DONE $(date -u +%H:%M:%S)"
