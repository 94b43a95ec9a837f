#!/usr/bin/env bash
# test_reports.sh: the Python report scripts on recorded inputs.
#   1. scripts/bench-report.py on a recorded H200 run at 128K (docs/runs/2026-11-29-1820-h200-*):
#      the ratios it computes must be the ratios of the recorded medians, and
#      the met / not met verdicts must follow from the thresholds.
#   2. scripts/frontier-table.py on one recorded CPU eval (tests/fixtures/frontier/):
#      with matplotlib it writes the plot and links it; without it (a stub
#      module that raises ImportError shadows it) it still writes the table and
#      says in the section that there is no plot.
#   3. scripts/frontier.sh's argument checks (bad counts exit 2 before any work).
# Usage: tests/test_reports.sh SOURCE_DIR TMP_DIR
set -uo pipefail
src=$1 tmp=$2
rm -rf "$tmp" && mkdir -p "$tmp"
fails=0
check() { if [ "$1" = 0 ]; then echo "ok: $2"; else echo "FAIL: $2"; fails=$((fails + 1)); fi; }

# 1. bench-report.py
runs=$src/docs/runs
python3 "$src/scripts/bench-report.py" --spindle "$runs/2026-11-29-1820-h200-bench-128k.json" \
    --anchors "$runs/2026-11-29-1820-h200-anchors-128k.json" --md "$tmp/report.md" --json "$tmp/report.json" \
    >"$tmp/report.log" 2>&1
check $? "bench-report.py exits 0"
python3 - "$tmp/report.json" "$runs/2026-11-29-1820-h200-bench-128k.json" "$runs/2026-11-29-1820-h200-anchors-128k.json" <<'PY'
import json, sys
rep, sp, an = (json.load(open(p)) for p in sys.argv[1:4])
def med(doc, name, ctx):
    for r in doc["results"]:
        if r["name"] == name and int(r.get("ctx") or 0) == ctx and r.get("ms_median"):
            return r["ms_median"]
    raise SystemExit(f"no {name} at {ctx}")
rows = {t["target"]: t for t in rep["targets"]}
def row(prefix):
    hits = [t for k, t in rows.items() if k.startswith(prefix)]
    if len(hits) != 1:
        raise SystemExit(f"{len(hits)} target rows start with {prefix!r}")
    return hits[0]
bad = 0
C = 131072
want = [
    ("TTFT 128K, k = 2048, indexer, b_sel = 64", med(an, "hf_qwen3-8b_ttft", C) / med(sp, "ttft_indexer_block", C), "not met"),
    ("TTFT 128K, k = 2048, dense", med(an, "hf_qwen3-8b_ttft", C) / med(sp, "ttft_dense", C), "met"),
    ("dense attention 128K", med(an, "sdpa_cudnn", C) / med(sp, "attention_sdpa_bf16", C), "met"),
    ("indexer scores + top-2048 128K (d_I", med(an, "indexer_scores_topk", C) / med(sp, "indexer_select", C), "not met"),
    ("indexer scores + top-2048 128K, TF32", med(an, "indexer_scores_topk", C) / med(sp, "indexer_select_tf32", C), "not met"),
]
for prefix, ratio, status in want:
    t = row(prefix)
    ok = t["ratio"] is not None and abs(t["ratio"] - ratio) <= 1e-9 * ratio and t["status"] == status
    print(("ok" if ok else "FAIL") + f": {prefix}: ratio {t['ratio']} (want {ratio:.6g}), {t['status']} (want {status})")
    bad += not ok
# A target with no 32K data must say so, not invent a ratio.
t = row("distillation step, one layer, 32K: ≤ 1.5× SDPA")
ok = t["ratio"] is None and t["status"] == "not measured"
print(("ok" if ok else "FAIL") + f": 32K training target with no 32K rows: {t['status']}")
sys.exit(1 if bad or not ok else 0)
PY
check $? "bench-report.py ratios and verdicts"

# 2. frontier-table.py, with and without matplotlib
fx=$src/tests/fixtures/frontier
for mode in plot noplot; do
    d=$tmp/frontier-$mode
    mkdir -p "$d"
    cp "$fx/eval_cpu_fp32_ctx1024.json" "$d/eval.json"
    printf 'eval\t1024\t64,256\t1,64\tfp32\t%s\tok\t54\tspindle eval (recorded)\n' "$d/eval.json" >"$d/manifest.tsv"
    printf '# doc\n\n<!-- FRONTIER:BEGIN -->\nold\n<!-- FRONTIER:END -->\n' >"$d/doc.md"
    pp=""
    if [ $mode = noplot ]; then
        mkdir -p "$d/stub/matplotlib"
        echo 'raise ImportError("stub: no matplotlib")' >"$d/stub/matplotlib/__init__.py"
        pp=$d/stub
    elif ! python3 -c 'import matplotlib' 2>/dev/null; then
        echo "skip: frontier-table.py with a plot (no matplotlib here)"
        continue
    fi
    PYTHONPATH=$pp python3 "$src/scripts/frontier-table.py" --manifest "$d/manifest.tsv" --out "$d" \
        --plot "$d/frontier.png" --section "$d/section.md" --doc "$d/doc.md" --device cpu --model models/smollm2 \
        --indexer results/indexer/idx_long --text corpus/heldout --synthetic qwen3-8b --lengths 1024 --k 64,256 \
        --bsel 1,64 --seconds 54 --invocation "tests/test_reports.sh" --quick >"$d/log" 2>&1
    check $? "frontier-table.py ($mode) exits 0"
    grep -q "FRONTIER:BEGIN" "$d/section.md" && grep -q "FRONTIER:END" "$d/section.md"
    check $? "frontier-table.py ($mode): section markers"
    if [ $mode = plot ]; then
        [ -s "$d/frontier.png" ] && grep -q '!\[frontier\](frontier.png)' "$d/section.md"
        check $? "frontier-table.py (plot): PNG written and linked"
    else
        [ ! -e "$d/frontier.png" ] && grep -q "No plot: matplotlib was missing" "$d/section.md"
        check $? "frontier-table.py (noplot): no PNG, the section says so"
    fi
done
# 3. frontier.sh refuses bad counts before doing any work (exit 2, the flag named).
for bad in "--positions 0" "--positions 12k" "--n-seq -1" "--lengths 1024,,2048"; do
    out=$(bash "$src/scripts/frontier.sh" $bad --out "$tmp/frontier-bad" 2>&1)
    rc=$?
    [ $rc = 2 ] && [[ $out == *"${bad%% *}"* ]] && [ ! -e "$tmp/frontier-bad" ]
    check $? "frontier.sh $bad: exit 2 ($rc), names the flag, writes nothing"
done

echo "reports: $([ $fails = 0 ] && echo PASS || echo "FAIL ($fails)")"
exit $((fails > 0))
