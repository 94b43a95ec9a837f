#!/usr/bin/env python3
"""lenfit.py: the k that keeps ΔNLL <= 0.01 per length, from the frontier table (docs/results.md)."""
import math
# frontier table (docs/results.md "Frontier table"): dnll[(mode,bsel)][T] = {k: dnll}
D = {
 ('oracle',1): {1024:{64:.0313,256:.0036,1024:0}, 2048:{64:.0491,256:.0088,1024:.0003}, 4096:{64:.0675,256:.0142,1024:.0017}, 8192:{64:.0810,256:.0180,1024:.0030}},
 ('oracle',64): {1024:{64:.5265,256:.0048,1024:0}, 2048:{64:.6995,256:.0146,1024:.0004}, 4096:{64:.8456,256:.0257,1024:.0013}, 8192:{64:.9345,256:.0350,1024:.0020}},
 ('indexer',1): {1024:{64:.0638,256:.0054,1024:0}, 2048:{64:.1160,256:.0168,1024:.0007}, 4096:{64:.1841,256:.0440,1024:.0047}, 8192:{64:.2612,256:.0892,1024:.0212}},
 ('indexer',64): {1024:{64:.7318,256:.0552,1024:0}, 2048:{64:.9333,256:.1380,1024:.0035}, 4096:{64:1.1356,256:.2479,1024:.0397}, 8192:{64:1.3490,256:.3544,1024:.1144}},
}
tgt = 0.01
def kstar(pts, T):
    ks = sorted(pts)
    for a, b in zip(ks, ks[1:]):
        da, db = pts[a], pts[b]
        if da > tgt >= db:
            if b >= T:  # the upper point is dense (k >= T): linear in log k
                return a * (b / a) ** ((da - tgt) / (da - db)), 'dense'
            return a * (tgt / da) ** (math.log(b / a) / math.log(db / da)), ''
    a, b = ks[-2], ks[-1]
    da, db = pts[a], pts[b]
    return a * (tgt / da) ** (math.log(b / a) / math.log(db / da)), 'extrapolated'
def fit(pairs):
    xs = [math.log(T) for T, _ in pairs]; ys = [math.log(k) for _, k in pairs]
    n = len(xs); mx = sum(xs) / n; my = sum(ys) / n
    al = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return al, math.exp(my - al * mx)
for key, byT in D.items():
    got = [(T,) + kstar(pts, T) for T, pts in sorted(byT.items())]
    good = [(T, k) for T, k, how in got if not how]
    print(key, [(T, round(k), how) for T, k, how in got])
    if len(good) >= 3:
        al, c = fit(good)
        print('   k*(T) = %.3g * T^%.2f over %s; 32K: %.0f, 128K: %.0f' % (c, al, [T for T, _ in good], c * 32768 ** al, c * 131072 ** al))
