#!/usr/bin/env bash
# Quiet card: synthetic Qwen3-8B at 32K and 128K (kernels + TTFT of every path, HF anchors), then the
# Qwen2.5-Coder TTFT grid at 32K and 128K. Run from /root/src.
set -uo pipefail
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread
echo "=== synthetic bench $(date -u +%H:%M:%S)"
REUSE_BUILD=1 CTX=32768,131072 ANCHOR_BUDGET_S=200 BENCH_TIMEOUT_S=330 \
  BENCH_ARGS="--ttft dense,indexer,indexer_block,indexer_union --union-block 16" \
  OUT=/root/res/bench bash scripts/device-bench.sh > /root/res/bench.log 2>&1
echo "device-bench exit $?"; grep -E "^ttft|ttft" /root/res/bench/bench.txt | head -20
[ -f /root/src/models/qwen25coder-1.5b/config.json ] || { echo "no qwen: bench done"; exit 0; }
echo "=== qwen ttft $(date -u +%H:%M:%S)"
SPINDLE=/root/src/build-device/spindle INDEXER=/root/q25idx BUDGET_S=${QTTFT_BUDGET:-330} OUT=/root/res/qttft \
  bash scripts/device-qwen25coder.sh ttft 32768,131072 > /root/res/qttft.log 2>&1
echo "qttft exit $?"; tail -5 /root/res/qttft.log
echo "=== BENCH DONE $(date -u +%H:%M:%S)"
