#!/usr/bin/env bash
# test_oracle_cli.sh SPINDLE GOLDENS WORK: the oracle's exactness promises and
# spindle eval's output, through the CLI.
#  - k >= T reproduces dense logits byte for byte, per query and block-shared;
#  - eval writes JSON/CSV/Markdown whose dense row is zero-gap and whose
#    k < T rows show a real gap; every row says which layers ran sparse and
#    carries its provenance; eval refuses k >= T (such a row would be dense).
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
case=$goldens/llama_f32_default   # T = 48
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

"$bin" logits --model "$case" --ids "$case/ids.txt" --out "$work/dense.npy" 2>/dev/null
for args in "48 1" "48 5" "1000 16" "1000 1"; do
  set -- $args
  "$bin" logits --model "$case" --ids "$case/ids.txt" --out "$work/o.npy" --oracle-k "$1" --bsel "$2" 2>/dev/null
  check "oracle k=$1 bsel=$2 (k >= T) is byte-identical to dense" "cmp -s '$work/dense.npy' '$work/o.npy'"
done
"$bin" logits --model "$case" --ids "$case/ids.txt" --out "$work/o.npy" --oracle-k 8 --bsel 1 2>/dev/null
check "oracle k=8 differs from dense" "! cmp -s '$work/dense.npy' '$work/o.npy'"

# Hybrid supports: recent 0, sinks 0 is the plain oracle byte for byte (per query and
# block-shared); a window of every key (recent >= T) differs from the plain support.
for args in "8 1" "8 8"; do
  set -- $args
  "$bin" logits --model "$case" --ids "$case/ids.txt" --out "$work/p.npy" --oracle-k "$1" --bsel "$2" 2>/dev/null
  "$bin" logits --model "$case" --ids "$case/ids.txt" --out "$work/h.npy" --oracle-k "$1" --bsel "$2" --recent 0 --sinks 0 2>/dev/null
  check "oracle k=$1 bsel=$2 with --recent 0 --sinks 0 is byte-identical to the plain oracle" "cmp -s '$work/p.npy' '$work/h.npy'"
done
"$bin" logits --model "$case" --ids "$case/ids.txt" --out "$work/h.npy" --oracle-k 8 --bsel 8 --recent 4 --sinks 2 2>"$work/err"
check "oracle k=8 bsel=8 with --recent 4 --sinks 2 differs from the plain oracle and says so" \
  "! cmp -s '$work/p.npy' '$work/h.npy' && grep -q 'hybrid supports: each query also keeps its 4 most recent keys and the first 2 keys' '$work/err'"
cat "$case/ids.txt" "$case/ids.txt" >"$work/ids2.txt"
"$bin" eval --model "$case" --ids "$work/ids2.txt" --ctx 48 --k 8 --bsel 1,8 --recent 0,4 --sinks 0,2 --json "$work/hy.json" 2>/dev/null
check "eval --recent 0,4 --sinks 0,2 exits 0" "[ $? = 0 ]"
python3 - "$work/hy.json" <<'PY' || fails=$((fails + 1))
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 1 + 2 * 2 * 2, len(rows)
grid = [(r["bsel"], r["recent"], r["sinks"]) for r in rows[1:]]
assert grid == [(b, w, s) for b in (1, 8) for w in (0, 4) for s in (0, 2)], grid
assert rows[0]["recent"] == 0 and rows[0]["sinks"] == 0
by = {(r["bsel"], r["recent"], r["sinks"]): r for r in rows[1:]}
for b in (1, 8):
    # the union only adds keys to each layer's support: sparsity falls as W, S grow
    assert by[(b, 4, 2)]["sparsity"] < by[(b, 0, 0)]["sparsity"], (b, by)
    assert by[(b, 4, 0)]["sparsity"] < by[(b, 0, 0)]["sparsity"], (b, by)
p = rows[0]["provenance"]
assert p["recent_grid"] == [0, 4] and p["sinks_grid"] == [0, 2], p
print("ok: hybrid eval rows carry recent and sinks, in grid order, and count the union")
PY

# eval on the 3 x 48 = 144-token stream: 3 sequences of 48.
cat "$case/ids.txt" "$case/ids.txt" "$case/ids.txt" >"$work/ids3.txt"
"$bin" eval --model "$case" --ids "$work/ids3.txt" --ctx 48 --k 8,48 --bsel 1,16 --json "$work/refused.json" 2>"$work/err"
check "eval refuses k >= ctx with exit 2 and writes nothing" \
  "[ $? = 2 ] && grep -q -- '--k 48 is not below --ctx 48' '$work/err' && [ ! -e '$work/refused.json' ]"
"$bin" eval --model "$case" --ids "$work/ids3.txt" --ctx 48 --k 8,12 --bsel 1,16 --json "$work/ev.json" 2>"$work/err"
check "eval exits 0" "[ $? = 0 ]"
check "eval wrote CSV and Markdown beside the JSON" "[ -s '$work/ev.csv' ] && [ -s '$work/ev.md' ]"
check "eval printed progress lines (stderr not a terminal)" \
  "grep -qE '^spindle eval: progress forward 1/15 \\(7%\\) elapsed .* tokens/s' '$work/err' && grep -qE '^spindle eval: progress forward 15/15 \\(100%\\)' '$work/err'"
check "the Markdown table says which layers ran sparse" \
  "grep -q '| dense | .* | none |' '$work/ev.md' && grep -q '| oracle | 8 | 1 | .* | all 2 (0,1) |' '$work/ev.md' && grep -q 'fingerprint' '$work/ev.md'"
check "the CSV carries the sparse layers and the provenance columns" \
  "head -1 '$work/ev.csv' | grep -q ',sparse_layers,n_sparse_layers,n_layers,model,model_fingerprint,' && grep -q '^oracle,8,1,.*\"0,1\",2,2,' '$work/ev.csv'"
python3 - "$work/ev.json" "$case" "$work/ids3.txt" <<'PY' || fails=$((fails + 1))
import hashlib, json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 5, rows
sha = hashlib.sha256(open(sys.argv[3], "rb").read()).hexdigest()
for r in rows:
    p = r["provenance"]
    assert p["model"] == sys.argv[2] and len(p["model_fingerprint"]) == 64, p
    assert p["inputs"] == [{"path": sys.argv[3], "sha256": sha}] and p["input_kind"] == "ids", p
    assert p["ctx"] == 48 and p["k_grid"] == [8, 12] and p["bsel_grid"] == [1, 16], p
    assert p["indexer"] is None and p["indexer_layers"] == [], p
    assert p["spindle_version"] and p["date_utc"].endswith("Z") and " eval " in p["command"], p
    assert r["n_layers"] == 2, r
    want = [] if r["mode"] == "dense" else [0, 1]
    assert r["sparse_layers"] == want and r["n_sparse_layers"] == len(want), r
keys = {"mode", "k", "bsel", "ctx", "n_seq", "n_scored"} | {m + s for m in
        ("nll", "dnll", "logit_kl", "top1_agree", "mass_recall", "sparsity") for s in ("", "_ci95")}
assert all(keys <= set(r) for r in rows), "missing keys"
d = rows[0]
assert d["mode"] == "dense" and d["n_seq"] == 3 and d["n_scored"] == 3 * 47, d
assert d["dnll"] == 0 and d["logit_kl"] == 0 and d["top1_agree"] == 1 and d["mass_recall"] == 1, d
for r in rows[1:]:   # k < T: a real gap, and a consistent one
    assert r["mode"] == "oracle"
    assert r["logit_kl"] > 1e-3 and r["mass_recall"] < 0.999 and r["sparsity"] > 0.5, r
    assert abs(r["dnll"] - (r["nll"] - d["nll"])) < 1e-9, r
    # every layer ran sparse: the sparse-layer averages are the averages
    assert abs(r["mass_recall_sparse_layers"] - r["mass_recall"]) < 1e-6, r
    assert abs(r["sparsity_sparse_layers"] - r["sparsity"]) < 1e-6, r
print("ok: eval JSON rows check out (dense zero-gap, k < T real gap, sparse layers and provenance per row)")
PY
[ "$fails" = 0 ] && echo "all oracle CLI checks passed"
[ "$fails" = 0 ]
