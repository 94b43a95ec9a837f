#!/usr/bin/env python3
"""check_export_layouts.py MODE ...: the numpy path of python/spindle_indexer.py against spindle.

  selections INDEXER SHARD SEQ DUMPS   every DUMPS/sel-L{l}-k{k}-b{b}.npy (`spindle scores --dump-selection`
                                       on SHARD's sequence SEQ) against spindle_indexer's supports of the
                                       same layer, k, bsel; DUMPS/scores-L{l}.npy (`spindle scores --out` at
                                       DUMPS/positions.txt) against its scores. Exit 1 below 99.9% of the
                                       selected keys (ties aside) or above 1e-4 relative score difference.
  names INDEXER                        the file loads with the `safetensors` package and holds exactly the
                                       tensors (names, shapes, F32) its config.json names; 77 without it.
  perturb SRC DST TENSOR               DST = a copy of export SRC with tensor TENSOR negated.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import spindle_indexer as si  # noqa: E402


def shard_x(shard, layer, seq):
    import h5py

    with h5py.File(shard, "r") as f:
        x = f[f"layer_{layer}/x"][seq]
        if f.attrs["x_dtype"] == "bfloat16":  # the upper 16 bits of float32 (docs/formats.md)
            x = (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)


def values(ix, layer, x, bsel):
    """What the supports rank, per row: scores (bsel 1) or A_B (blocks), float64, -inf where not a candidate."""
    s = ix.scores(layer, x)
    T = s.shape[0]
    if bsel == 1:
        return s
    e = np.exp(s - s.max(1, keepdims=True))
    Q = e / e.sum(1, keepdims=True)
    rows = (T + bsel - 1) // bsel
    A = np.full((rows, T), -np.inf)
    for b in range(rows):
        end = min(T, (b + 1) * bsel)
        A[b, :end] = Q[b * bsel:end, :end].sum(0)
    return A


def compare(got, want, vals, rel_tie=1e-5):
    """(raw overlap, overlap with ties aside): a key spindle chose and numpy did not counts as a tie when
    its value is within rel_tie (of the row's largest magnitude) of the smallest value numpy chose."""
    hit = tie = tot = 0
    for r in range(want.shape[0]):
        sw, sg = set(want[r][want[r] >= 0].tolist()), set(got[r][got[r] >= 0].tolist())
        tot += len(sw)
        hit += len(sw & sg)
        miss = sw - sg
        if miss and sg:
            v = vals[r]
            scale = np.abs(v[np.isfinite(v)]).max()
            kth = min(v[j] for j in sg)
            tie += sum(1 for j in miss if abs(v[j] - kth) <= rel_tie * scale)
    return hit / max(1, tot), (hit + tie) / max(1, tot)


def cmd_selections(ix_dir, shard, seq, dumps):
    ix = si.load(ix_dir)
    worst, bad = 1.0, False
    n = 0
    positions = [int(p) for p in open(os.path.join(dumps, "positions.txt")).read().split(",")]
    for name in sorted(os.listdir(dumps)):
        if name.startswith("scores-L"):
            layer = int(name[8:-4])
            want = np.load(os.path.join(dumps, name)).astype(np.float64)
            got = ix.scores(layer, shard_x(shard, layer, seq))[positions]
            fin = np.isfinite(want)
            if not (np.isfinite(got) == fin).all():
                print(f"FAIL: {ix_dir} layer {layer}: the causal masks of the scores differ")
                bad = True
                continue
            rel = np.abs(got[fin] - want[fin]).max() / max(1e-12, np.abs(want[fin]).max())
            print(f"{os.path.basename(ix_dir)} layer {layer}: scores at {len(positions)} positions, max |numpy - "
                  f"spindle| / max |score| = {rel:.2e}")
            if not rel <= 1e-4:
                print(f"FAIL: {ix_dir} layer {layer}: scores differ by {rel:.2e} (> 1e-4)")
                bad = True
            continue
        if not name.startswith("sel-L"):
            continue
        l_s, k_s, b_s = name[4:-4].split("-")
        layer, k, bsel = int(l_s[1:]), int(k_s[1:]), int(b_s[1:])
        want = np.load(os.path.join(dumps, name)).astype(np.int64)
        x = shard_x(shard, layer, seq)
        got = ix.select(layer, x, k=k, bsel=bsel)
        raw, ties_aside = compare(got, want, values(ix, layer, x, bsel))
        print(f"{os.path.basename(ix_dir)} layer {layer} k {k} bsel {bsel}: {want.shape[0]} supports, overlap "
              f"{raw:.5f}, ties aside {ties_aside:.5f}")
        worst = min(worst, ties_aside)
        n += 1
    if n == 0:
        print(f"FAIL: no selection dumps in {dumps}")
        return 1
    if worst < 0.999:
        print(f"FAIL: {ix_dir}: {worst:.5f} of spindle's selected keys reproduced (< 0.999, ties aside)")
        return 1
    if bad:
        return 1
    print(f"ok: {ix_dir}: {n} selection dumps, worst overlap {worst:.5f} (ties aside)")
    return 0


def expected_tensors(cfg):
    """{name: shape} an export's config.json says its file holds."""
    out = {}
    pre = "model.layers.{}.self_attn.indexer."
    for l in cfg["layers"]:
        if cfg.get("layout", "spindle") == "spindle":  # docs/formats.md's table
            d, dm, H = cfg["d_index"], cfg["d_model"], cfg["n_heads"]
            t = {"wq.weight": [H * d, dm], "wk.weight": [d, dm]}
            if cfg["key_norm"] in ("rms", "layer"):
                t["k_norm.weight"] = [d]
            if cfg["key_norm"] == "layer":
                t["k_norm.bias"] = [d]
            if cfg["variant"] == "expanded":
                t["ww.weight"] = [H, dm]
        else:
            t = cfg["tensors"]
            assert cfg["tensor_prefix"] == "model.layers.{l}.self_attn.indexer."
        for name, shape in t.items():
            out[pre.format(l) + name] = list(shape)
    return out


def cmd_names(ix_dir):
    try:
        from safetensors import safe_open
    except ImportError:
        print("skipped: the safetensors package is not installed (scripts/setup.sh installs it)")
        return 77
    cfg = json.load(open(os.path.join(ix_dir, "config.json")))
    want = expected_tensors(cfg)
    got = {}
    with safe_open(os.path.join(ix_dir, "model.safetensors"), framework="np") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            if t.dtype != np.float32:
                print(f"FAIL: {ix_dir}: {name} is {t.dtype}, not F32")
                return 1
            got[name] = list(t.shape)
    if got != want:
        print(f"FAIL: {ix_dir}: tensors {sorted(set(got) ^ set(want)) or 'of other shapes'} differ from config.json's")
        return 1
    print(f"ok: {ix_dir} ({cfg.get('layout', 'spindle')}): the safetensors package loads exactly the {len(want)} "
          f"tensors config.json names")
    return 0


def cmd_perturb(src, dst, tensor):
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    raw = bytearray(open(path, "rb").read())
    (n,) = struct.unpack("<Q", raw[:8])
    a, b = json.loads(raw[8:8 + n])[tensor]["data_offsets"]
    v = np.frombuffer(bytes(raw[8 + n + a:8 + n + b]), dtype="<f4")
    raw[8 + n + a:8 + n + b] = (-v).astype("<f4").tobytes()
    open(path, "wb").write(bytes(raw))
    return 0


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "selections":
        return cmd_selections(args[0], args[1], int(args[2]), args[3])
    if mode == "names":
        return cmd_names(args[0])
    if mode == "perturb":
        return cmd_perturb(*args)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
