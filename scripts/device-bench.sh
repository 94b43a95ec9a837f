#!/usr/bin/env bash
# device-bench.sh: the GPU performance measurements in one job ON the GPU machine:
#   1. builds (scripts/device-check.sh with ONLY_BUILD=1: .deb/ unpacked, -DSPINDLE_CUDA=ON);
#   2. spindle bench on the synthetic Qwen3-8B (kernels of one layer and TTFT
#      of all 36 layers at 8K, 32K, 128K; k = 2048, b_sel = 64);
#   3. scripts/bench-anchors.py: PyTorch SDPA (cuDNN, FA2), HF transformers
#      Qwen3-8B prefill, PyTorch indexer/oracle, FlexAttention — same card, same job;
#   4. scripts/bench-report.py: the ratio table against the performance targets
#      (docs/performance.md).
# Output in $OUT: bench.json, bench.txt, anchors.json, anchors.txt, report.md.
# On the GPU machine, with .deb/ copied there (docs/gpu.md): bash scripts/device-bench.sh
# CTX (default 8192,32768,131072) and ANCHOR_BUDGET_S (default 250) override;
# BENCH_ARGS adds flags to spindle bench (e.g. "--max-reps 5").
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/device-out}
B=$ROOT/build-device
CTX=${CTX:-8192,32768,131072}
mkdir -p "$OUT"
if [ "${REUSE_BUILD:-0}" = 1 ] && [ -x "$B/spindle" ]; then
    echo "device-bench: reusing $B"
else
    ONLY_BUILD=1 OUT=$OUT/build bash scripts/device-check.sh >/dev/null 2>&1 || { tail -30 "$OUT/build/device-check.log"; exit 1; }
fi
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader
echo "=== spindle bench ($(date -u +%H:%M:%S))"
timeout ${BENCH_TIMEOUT_S:-300} "$B/spindle" bench --synthetic qwen3-8b --ctx "$CTX" --k 2048 --bsel 64 --device cuda --json "$OUT/bench.json" ${BENCH_ARGS:-} \
    2>&1 | tee "$OUT/bench.txt"
echo "=== anchors ($(date -u +%H:%M:%S))"
python3 scripts/bench-anchors.py --ctx "$CTX" --budget-s "${ANCHOR_BUDGET_S:-250}" --json "$OUT/anchors.json" \
    >"$OUT/anchors.txt" 2>"$OUT/anchors.err"
echo "bench-anchors exit $?"
cat "$OUT/anchors.txt"
echo "=== report ($(date -u +%H:%M:%S))"
python3 scripts/bench-report.py --spindle "$OUT/bench.json" --anchors "$OUT/anchors.json" --md "$OUT/report.md" \
    --json "$OUT/report.json" && cat "$OUT/report.md"
