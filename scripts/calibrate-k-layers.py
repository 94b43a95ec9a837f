#!/usr/bin/env python3
"""calibrate-k-layers.py: per-layer key budgets for `spindle eval --k-layers` from calibration data.

Reads `spindle eval --json` results (uniform budgets, several k, one b_sel) whose rows carry
layer_mass_recall (the mean mass recall of each full-attention layer's supports), builds each
layer's recall curve r_l(k) from them, and spends the total budget of a uniform k (n_layers * k
keys per support) greedily, `--step` keys at a time, on the layer whose recall rises most: the
allocation that maximises the summed recall sum_l r_l(k_l) when the curves are concave. Between
measured k a curve is interpolated linearly in log k (`--interp logk`, the default: recall rising
by equal steps per doubling of k, so the marginal gain falls smoothly and the allocation is not
tied to the measured grid) or in k (`--interp linear`); either way each curve is first replaced by
its upper concave hull in that coordinate.
Every layer starts at the smallest measured k; a layer never gets more than ctx keys (recall 1),
nor more than --max-weight times k (default: no bound but ctx).
Writes {"weights": [k_l / k, ...]} (mean 1), the file `spindle eval --k-layers` reads, with the
per-layer k and the curves it came from under "calibration".

  scripts/calibrate-k-layers.py --eval calib.json --k 256 --bsel 64 --out k_layers.json
"""
import argparse
import json
import math
import os
import sys


LOGK = True  # set by --interp


def x_of(k):
    return math.log(k) if LOGK else float(k)


def hull(points):
    """Upper concave hull of (k, recall) points sorted by k, in the interpolation's coordinate."""
    h = []
    for p in points:
        while len(h) >= 2:
            (k1, y1), (k2, y2) = h[-2], h[-1]
            x1, x2, xp = x_of(k1), x_of(k2), x_of(p[0])
            # drop h[-1] if it lies on or below the segment h[-2] -> p
            if (y2 - y1) * (xp - x1) <= (p[1] - y1) * (x2 - x1):
                h.pop()
            else:
                break
        h.append(p)
    return h


def interp(h, k):
    if k <= h[0][0]:
        return h[0][1]
    for (k1, y1), (k2, y2) in zip(h, h[1:]):
        if k <= k2:
            return y1 + (y2 - y1) * (x_of(k) - x_of(k1)) / (x_of(k2) - x_of(k1))
    return h[-1][1]


def allocate(curves, k, step, cap=None):
    """Greedy allocation: curves[l] = hull points; returns per-layer budgets summing to len(curves) * k
    (less when every layer reaches its cap), each at most cap."""
    n = len(curves)
    if cap is not None:
        curves = [[(x, y) for x, y in c if x < cap] + [(cap, interp(c, cap))] for c in curves]
    alloc = [c[0][0] for c in curves]
    left = n * k - sum(alloc)
    if left < 0:
        raise SystemExit(f"calibrate-k-layers: --k {k} is below the smallest measured k {max(alloc)}: "
                         "measure smaller k or ask for a larger one")
    while left > 0:
        s = min(step, left)
        best, gain = -1, -1.0
        for l, c in enumerate(curves):
            top = c[-1][0]
            if alloc[l] >= top:
                continue
            d = min(s, top - alloc[l])
            g = (interp(c, alloc[l] + d) - interp(c, alloc[l])) / d
            if g > gain:
                best, gain = l, g
        if best < 0:  # every layer at ctx: the rest cannot be spent
            break
        d = min(s, curves[best][-1][0] - alloc[best])
        alloc[best] += d
        left -= d
    return alloc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval", nargs="+", required=True, help="spindle eval --json file(s), uniform budgets")
    ap.add_argument("--k", type=int, required=True, help="the uniform k whose total budget is spent")
    ap.add_argument("--bsel", type=int, default=1, help="the rows' b_sel (default 1)")
    ap.add_argument("--mode", default="oracle", choices=["oracle", "indexer"], help="the rows' mode (default oracle)")
    ap.add_argument("--step", type=int, default=8, help="keys per greedy step (default 8)")
    ap.add_argument("--interp", default="logk", choices=["logk", "linear"],
                    help="recall between measured k: linear in log k (default) or in k")
    ap.add_argument("--max-weight", type=float, help="no layer gets more than this times k (default: ctx keys)")
    ap.add_argument("--out", required=True, help="the weights file to write")
    a = ap.parse_args()
    if a.k < 1 or a.step < 1 or a.bsel < 1:
        ap.error("--k, --step and --bsel must be positive")
    global LOGK
    LOGK = a.interp == "logk"
    pts, ctx, layers, sources = {}, None, None, []
    for path in a.eval:
        try:
            rows = json.load(open(path))
        except (OSError, ValueError) as e:
            sys.exit(f"calibrate-k-layers: {path}: {e}")
        for r in rows:
            if (r.get("mode") != a.mode or r.get("bsel") != a.bsel or r.get("task") is not None
                    or r.get("recent", 0) or r.get("sinks", 0) or "layer_k" in r or "layer_mass_recall" not in r):
                continue
            prov = r.get("provenance", {})
            if ctx is None:
                ctx, layers = r["ctx"], prov.get("full_attention_layers")
            if r["ctx"] != ctx or prov.get("full_attention_layers") != layers:
                sys.exit(f"calibrate-k-layers: {path}: rows of different ctx or layers; give one ctx and one model")
            pts[r["k"]] = r["layer_mass_recall"]
            sources.append({"file": path, "k": r["k"], "command": prov.get("command")})
    if len(pts) < 2:
        sys.exit(f"calibrate-k-layers: need rows of {a.mode}, b_sel {a.bsel} at two or more k with layer_mass_recall "
                 f"(spindle eval on the CPU twin); found {sorted(pts)}")
    n = len(next(iter(pts.values())))
    ks = sorted(pts)
    curves = []
    for l in range(n):
        p = [(k, pts[k][l]) for k in ks]
        if ks[-1] < ctx:
            p.append((ctx, 1.0))  # every causal key: recall 1
        curves.append(hull(p))
    cap = None if a.max_weight is None else max(int(round(a.max_weight * a.k)), min(c[0][0] for c in curves))
    alloc = allocate(curves, a.k, a.step, cap)
    uni = sum(interp(c, min(a.k, c[-1][0])) for c in curves)
    cal = sum(interp(c, x) for c, x in zip(curves, alloc))
    out = {
        "weights": [x / a.k for x in alloc],
        "calibration": {
            "k": a.k, "bsel": a.bsel, "mode": a.mode, "ctx": ctx, "full_attention_layers": layers,
            "layer_k": alloc, "measured_k": ks, "max_weight": a.max_weight, "interp": a.interp,
            "layer_mass_recall": {str(k): pts[k] for k in ks},
            "predicted_mean_recall_uniform": uni / n, "predicted_mean_recall_calibrated": cal / n,
            "sources": sources,
        },
    }
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    os.replace(tmp, a.out)
    print(f"calibrate-k-layers: k {a.k} b_sel {a.bsel} {a.mode}: layer k {alloc}; predicted mean recall "
          f"{uni / n:.4f} uniform -> {cal / n:.4f} calibrated -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
