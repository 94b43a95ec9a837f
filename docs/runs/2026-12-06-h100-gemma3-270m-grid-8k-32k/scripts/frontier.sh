#!/usr/bin/env bash
# The Gemma 3 270M frontier at 4K-32K (from the repository root): this run's RULER calls joined with the
# first stretch's (TTFT of every configuration, NLL at 4K, RULER at 4K and part of 8K), and the rows that
# stretch's stopped RULER calls had finished (their .json.partial files).
set -euo pipefail
N=docs/runs/2026-12-06-h100-gemma3-270m-grid-8k-32k
O=docs/runs/2026-12-06-h100-gemma3-270m-grid-4k-32k
python3 scripts/qwen-frontier.py --results $N/results $O/results $O/results/ruler_*.json.partial \
    --md $N/frontier.md --json $N/frontier.json --png $N/frontier.png \
    --title "Gemma 3 270M (base, dequantized Q4_K_M), H100, 4K-32K"
