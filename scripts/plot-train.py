#!/usr/bin/env python3
"""plot-train.py OUT.png NAME=RUN_DIR...: training curves of indexer runs.

Left: KL(P || Q) per step, averaged over the run's layers (a 5-step moving mean).
Right: held-out attention-mass recall@k of the indexer, averaged over layers.
Reads RUN/metrics.csv (written by `spindle train`).
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    out, runs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, run in runs:
        kl, rec = defaultdict(list), defaultdict(list)
        for row in csv.DictReader(open(f"{run}/metrics.csv")):
            s = int(row["step"])
            kl[s].append(float(row["kl"]))
            if row["recall_at_k"]:
                rec[s].append(float(row["recall_at_k"]))
        steps = sorted(kl)
        mean = [sum(kl[s]) / len(kl[s]) for s in steps]
        smooth = [sum(mean[max(0, i - 4):i + 1]) / len(mean[max(0, i - 4):i + 1]) for i in range(len(mean))]
        a1.plot(steps, smooth, label=name)
        rs = sorted(rec)
        if rs:
            a2.plot(rs, [sum(rec[s]) / len(rec[s]) for s in rs], marker="o", ms=3, label=name)
    a1.set_xlabel("step (one 2K-token teacher sequence)")
    a1.set_ylabel("KL(P ‖ Q), mean over layers")
    a1.set_yscale("log")
    a1.set_title("Training loss")
    a2.set_xlabel("step")
    a2.set_ylabel("held-out mass recall@k, mean over layers")
    a2.set_title("Held-out recall of the indexer's top-k")
    for a in (a1, a2):
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
