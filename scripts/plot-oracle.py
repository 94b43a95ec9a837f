#!/usr/bin/env python3
"""plot-oracle.py OUT.png RESULT.json...: the oracle-gap plot.

Two panels against sparsity: ΔNLL vs dense (nats/token, with 95% intervals) and
attention-mass recall; one line per (b_sel, context length), one point per k.
Reads the JSON files that `spindle eval --json` writes.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    rows = [r for p in paths for r in json.load(open(p)) if r["mode"] == "oracle" and "task" not in r]
    lines = {}
    for r in rows:
        lines.setdefault((r["bsel"], r["ctx"]), []).append(r)
    bsels = sorted({b for b, _ in lines})
    ctxs = sorted({c for _, c in lines})
    styles = ["-", "--", ":", "-."]
    colors = plt.get_cmap("tab10")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
    for (b, c), rs in sorted(lines.items()):
        rs.sort(key=lambda r: r["sparsity"])
        x = [r["sparsity"] for r in rs]
        color = colors(ctxs.index(c))
        style = styles[bsels.index(b) % len(styles)]
        label = f"ctx {c}, b_sel {b}"
        a1.errorbar(x, [r["dnll"] for r in rs], yerr=[r["dnll_ci95"] for r in rs], ls=style, color=color,
                    marker="o", ms=3, capsize=2, label=label)
        a2.plot(x, [r["mass_recall"] for r in rs], ls=style, color=color, marker="o", ms=3, label=label)
    a1.set_yscale("symlog", linthresh=0.01)
    a1.set_xlabel("sparsity  (1 − Σ|S_t| / Σ(t+1))")
    a1.set_ylabel("ΔNLL vs dense (nats/token)")
    a1.set_title("Oracle gap: ΔNLL")
    a2.set_xlabel("sparsity")
    a2.set_ylabel("attention-mass recall")
    a2.set_title("Oracle attention-mass recall")
    for a in (a1, a2):
        a.grid(alpha=0.3)
    a2.legend(fontsize=7, ncol=2)
    fig.suptitle("SmolLM2-135M, attention-mass oracle (points: k = 32 … 1024)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
