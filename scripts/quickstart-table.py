#!/usr/bin/env python3
"""quickstart-table.py: the quickstart's result table and its pass/fail check.

  quickstart-table.py --eval TRAINED.json --floor FLOOR.json --k K --bsel S [--indexer DIR]
                      [--logits DENSE.npy SPARSE.npy] [--md OUT.md]

TRAINED.json and FLOOR.json are `spindle eval --indexer` results (DESIGN.md "Eval results"): the first
with the trained indexer, the second with the same run's untrained initialisation (`spindle export
--step 0`). Prints, for the one (k, b_sel), dense / oracle / trained indexer / untrained floor: ΔNLL with
its 95% interval, mass recall, top-1 agreement and sparsity, then checks that the trained indexer's ΔNLL
is below half the floor's. With --logits, also compares the two logits files of `spindle logits` (dense
and with the indexer): top-1 agreement and mean KL(dense || sparse) of the next-token distributions.
Exits 0 when the check passes, 1 when it fails or an input is missing or malformed (the message names it).
"""
import argparse
import json
import sys


def fail(msg):
    print(f"quickstart-table: {msg}", file=sys.stderr)
    sys.exit(1)


def rows_of(path):
    """The per-configuration rows of an eval JSON: a list of objects with a `mode` (DESIGN.md), also when
    the file wraps them in an object beside other fields."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: cannot read eval results ({e})")
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)]
        data = next((v for v in lists if "mode" in v[0]), None)
    if not isinstance(data, list) or not all(isinstance(r, dict) and "mode" in r for r in data):
        fail(f"{path}: not spindle eval results (no list of rows with a 'mode')")
    return [r for r in data if "task" not in r]  # language-model rows; retrieval rows carry a task


def pick(rows, path, mode, k, bsel):
    for r in rows:
        if r["mode"] == mode and (mode == "dense" or (r.get("k") == k and r.get("bsel") == bsel)):
            return r
    where = "" if mode == "dense" else f" at k {k}, b_sel {bsel}"
    fail(f"{path}: no {mode} row{where}")


def logits_compare(dense_path, sparse_path):
    import numpy as np

    try:
        d, s = np.load(dense_path, mmap_mode="r"), np.load(sparse_path, mmap_mode="r")
    except (OSError, ValueError) as e:
        fail(f"cannot read logits ({e})")
    if d.shape != s.shape or d.ndim != 2:
        fail(f"{sparse_path}: shape {s.shape}, {dense_path}: shape {d.shape}; expected the same [T, vocab]")
    agree, kl = 0, 0.0
    for i in range(0, d.shape[0], 256):  # row chunks: never both full files in float64 at once
        a, b = np.asarray(d[i:i + 256], np.float64), np.asarray(s[i:i + 256], np.float64)
        agree += int((a.argmax(1) == b.argmax(1)).sum())
        la = a - a.max(1, keepdims=True)
        la -= np.log(np.exp(la).sum(1, keepdims=True))
        lb = b - b.max(1, keepdims=True)
        lb -= np.log(np.exp(lb).sum(1, keepdims=True))
        kl += float((np.exp(la) * (la - lb)).sum())
    return d.shape[0], agree / d.shape[0], kl / d.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eval", required=True, help="spindle eval --indexer JSON of the trained indexer")
    ap.add_argument("--floor", required=True, help="spindle eval --indexer JSON of the untrained initialisation")
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--bsel", type=int, required=True)
    ap.add_argument("--indexer", help="the exported indexer folder (printed under the table)")
    ap.add_argument("--logits", nargs=2, metavar=("DENSE", "SPARSE"), help="spindle logits outputs to compare")
    ap.add_argument("--md", help="also write the table here (Markdown)")
    a = ap.parse_args()

    tr, fl = rows_of(a.eval), rows_of(a.floor)
    dense = pick(tr, a.eval, "dense", a.k, a.bsel)
    oracle = pick(tr, a.eval, "oracle", a.k, a.bsel)
    trained = pick(tr, a.eval, "indexer", a.k, a.bsel)
    floor = pick(fl, a.floor, "indexer", a.k, a.bsel)
    for path, rows in ((a.eval, tr), (a.floor, fl)):
        d = pick(rows, path, "dense", a.k, a.bsel)
        if (d["ctx"], d["n_seq"], d["n_scored"]) != (dense["ctx"], dense["n_seq"], dense["n_scored"]):
            fail(f"{path}: evaluated on other sequences than {a.eval} (ctx, n_seq, n_scored differ)")

    def cell(r, m):  # ΔNLL with its 95% interval, the other metrics as means
        return f"{r[m]:+.4f} ± {r.get(m + '_ci95', 0):.4f}" if m == "dnll" else f"{r[m]:.4f}"

    lines = [
        f"ctx {dense['ctx']}, {dense['n_seq']} held-out sequence(s), {dense['n_scored']} scored positions; "
        f"k {a.k}, b_sel {a.bsel}; dense NLL {dense['nll']:.4f} nats/token",
        "",
        "| configuration | ΔNLL (nats/token) | mass recall | top-1 agree | sparsity |",
        "|---|---|---|---|---|",
    ]
    for name, r in (("dense", dense), ("oracle", oracle), ("trained indexer", trained),
                    ("untrained floor", floor)):
        lines.append(f"| {name} | {cell(r, 'dnll')} | {cell(r, 'mass_recall')} | {cell(r, 'top1_agree')} | "
                     f"{r['sparsity']:.3f} |")
    gap, half = trained["dnll"] - oracle["dnll"], floor["dnll"] / 2
    closed = (floor["dnll"] - trained["dnll"]) / (floor["dnll"] - oracle["dnll"]) if floor["dnll"] != oracle["dnll"] else 0
    lines += ["", f"indexer gap (trained − oracle) {gap:+.4f}; training closed {100 * closed:.1f}% of the "
                  f"floor-to-oracle distance"]
    if a.logits:
        t, agree, kl = logits_compare(*a.logits)
        lines.append(f"spindle logits --indexer vs dense on {t} tokens: top-1 agreement {agree:.4f}, "
                     f"mean KL(dense ‖ indexer) {kl:.4f}")
    ok = trained["dnll"] < half
    lines.append(f"check: trained ΔNLL {trained['dnll']:+.4f} {'<' if ok else '>='} half the floor's "
                 f"{half:+.4f}: {'passed' if ok else 'FAILED'}")
    if a.indexer:
        lines.append(f"exported indexer: {a.indexer}")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.md:
        with open(a.md + ".tmp", "w") as f:
            f.write(text)
        import os

        os.replace(a.md + ".tmp", a.md)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
