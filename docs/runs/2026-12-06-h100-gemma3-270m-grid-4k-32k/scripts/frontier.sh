#!/usr/bin/env bash
# The Gemma 3 270M frontier of this run (from the repository root): every finished call's JSON, and the rows
# the RULER calls stopped at the budget had finished (their .json.partial files).
set -euo pipefail
R=docs/runs/2026-12-06-h100-gemma3-270m-grid-4k-32k
python3 scripts/qwen-frontier.py --results $R/results $R/results/ruler_*.json.partial \
    --md $R/frontier.md --json $R/frontier.json --png $R/frontier.png \
    --title "Gemma 3 270M (base, dequantized Q4_K_M), H100, 4K-32K"
