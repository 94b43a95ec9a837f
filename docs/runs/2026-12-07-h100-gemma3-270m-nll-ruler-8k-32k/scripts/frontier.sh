#!/usr/bin/env bash
# The Gemma 3 270M frontier at 4K-32K (from the repository root): this run's NLL calls at 8K-32K and RULER
# calls at 16K and 32K, joined with the two earlier stretches' (TTFT of every configuration, NLL at 4K,
# RULER at 4K-32K) and the rows the first stretch's stopped RULER calls had finished (.json.partial).
set -euo pipefail
N=docs/runs/2026-12-07-h100-gemma3-270m-nll-ruler-8k-32k
M=docs/runs/2026-12-06-h100-gemma3-270m-grid-8k-32k
O=docs/runs/2026-12-06-h100-gemma3-270m-grid-4k-32k
python3 scripts/qwen-frontier.py --results $N/results $M/results $O/results $O/results/ruler_*.json.partial \
    --md $N/frontier.md --json $N/frontier.json --png $N/frontier.png \
    --title "Gemma 3 270M (base, dequantized Q4_K_M), H100, 4K-32K"
