#!/usr/bin/env bash
# The joined frontier of Qwen2.5-Coder-1.5B: this run's rows first (NLL at 8K-64K on the tensor-core statistics,
# eval --exec-block 16 for the per-query rows), then every earlier run (from the repository root).
set -euo pipefail
Y=docs/runs/2026-12-07-h100-qwen25coder-nll-8k-64k-tc/results
X=docs/runs/2026-12-07-h100-qwen25coder-nll-128k-tc-stats/results
R=docs/runs/2026-12-07-h100-qwen25coder-nll-ttft-oracle128k/results
R0=docs/runs/2026-12-07-h100-qwen25coder-128k-oracle-rest/results
Q=docs/runs/2026-12-07-h100-qwen25coder-128k-oracle/results
N=docs/runs/2026-12-06-h100-qwen25coder-nll-rerun-oracle-64k-128k/results
A=docs/runs/2026-12-06-h100-qwen25coder-64k-128k-oracle-n5/results
D=docs/runs/2026-12-06-h100-qwen25coder-64k-128k E=docs/runs/2026-12-03-h200-qwen25coder-grid P=docs/runs/2026-12-02-h200-qwen25coder-frontier-8k-128k
O=docs/runs/2026-12-02-h200-qwen25coder-32k-oracle-two-stage/ruler
python3 scripts/qwen-frontier.py --results $Y $X $R $R0 \
    $Q/ruler_ctx131072_n1_moracle_x16_k2048_b16-64.json.partial $Q/ruler_ctx131072_n1_moracle_x16_k1024_b16-64.json.partial \
    $Q/ruler_ctx131072_n1_moracle_x16_k512_b16-64.json.partial \
    $N $A $A/ruler_ctx65536_n1_moracle_x16_k1024_b1-16-64.json.partial $A/ruler_ctx131072_n1_mindexer_x16_k256_b1-16-64.json.partial \
    $D/results $D/results/ruler_ctx65536_n1_mindexer_x16_k512_b1-16-64.json.partial \
    $E/results $P/m1 $P/m2 $O/ruler_ctx32768_n1_moracle_k256_b1-16-64.json $O/ruler_ctx32768_n1_moracle_k1024_b1-16-64.json \
    $O/ruler_ctx32768_n1_moracle_k2048_b1-16-64.json docs/runs/2026-12-01-h200-qwen25coder-32k-train-ruler/ruler_ctx32768_dense.json \
    --md ${Y%/results}/frontier.md --json ${Y%/results}/frontier.json --png ${Y%/results}/frontier.png \
    --title "Qwen2.5-Coder-1.5B-Instruct (dequantized Q4_K_M), H100 and H200, 8K-128K"
