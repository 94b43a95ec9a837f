build-device/spindle export --run docs/runs/2026-12-01-h200-gemma3-270m-report/report/run_ctx16384 --out docs/runs/2026-12-01-h200-gemma3-270m-report/report/idx_ctx16384
