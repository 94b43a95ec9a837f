#!/usr/bin/env python3
"""oracle-bf16-emulate.py: what the GPU's bf16 oracle should give on the golden cases, with numpy alone.

In the bf16 mode the oracle selects from the bf16 pass's own q, k (model/forward_cuda.c,
oracle_attend_bf16). On the tiny random-weight goldens many supports sit on near-ties of attention
mass, so bf16 rounding alone moves keys in and out of them, and the logits then leave the fp32 oracle
golden by far more than dense bf16 does. This script runs scripts/goldens_np.py's float64 forward with
bf16=True (GEMM operands and q, k, v rounded to bfloat16) for every llama / qwen2 / qwen3 case that has
oracle goldens, and prints its distance to the fp32 golden in the numbers tests/test_goldens_cuda.sh
prints for the GPU (nmse, top-1). Given that test's output (--gpu FILE), each line also shows the GPU's
numbers for the same case, and MUT=random|bottom|nonorm instead emulates a broken selection (random
keys, the least-mass keys, the heads summed without their softmax normalisation), which is what the
test's bf16 oracle bound has to reject.

  python3 scripts/oracle-bf16-emulate.py [--goldens tests/goldens] [--gpu goldens_cuda.txt] [--mutation M]
"""
import argparse
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goldens_np  # noqa: E402


def mutated_mask(kind, rng):
    def mask(P, k, bsel):
        causal = np.tril(np.ones_like(P)) > 0
        if kind == "random":
            P = rng.random(P.shape) * causal
        elif kind == "bottom":
            P = np.where(causal, 1.0 / (P + 1e-30), 0.0)
        return ORIGINAL_MASK(P, k, bsel)
    return mask


def unnormalised_P(q, k, mask, G, scale):
    """P summed over heads without each head's softmax normalisation (the "nonorm" mutation)."""
    P = np.zeros((q.shape[0], q.shape[0]))
    for hh in range(q.shape[1]):
        s = (q[:, hh] @ k[:, hh // G].T) * scale + mask
        P += np.exp(s - s.max(-1, keepdims=True))
    return P


ORIGINAL_MASK = goldens_np._np_oracle_mask


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--goldens", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                                      "goldens"))
    ap.add_argument("--gpu", help="tests/test_goldens_cuda.sh output, for the GPU's numbers beside each line")
    ap.add_argument("--mutation", choices=("random", "bottom", "nonorm"),
                    help="emulate a broken selection instead (in fp32)")
    args = ap.parse_args()
    gpu = {}
    if args.gpu:
        pat = re.compile(r"^(\S+)\s+bf16 oracle max\|diff\| \S+ nmse (\S+) top1\s+(\S+)%")
        for line in open(args.gpu):
            m = pat.match(line)
            if m:
                gpu[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    if args.mutation in ("random", "bottom"):
        goldens_np._np_oracle_mask = mutated_mask(args.mutation, np.random.default_rng(0))
    elif args.mutation == "nonorm":
        goldens_np._np_teacher_P = unnormalised_P
    rows = []
    for name in sorted(os.listdir(args.goldens)):
        d = os.path.join(args.goldens, name)
        cfg_path = os.path.join(d, "config.json")
        if not os.path.isfile(cfg_path):
            continue
        with open(cfg_path) as f:
            cfg = json.load(f)
        if cfg.get("model_type") not in ("llama", "qwen2", "qwen3"):
            continue
        ids = [int(t) for t in open(os.path.join(d, "ids.txt")).read().split()]
        for f in sorted(os.listdir(d)):
            m = re.fullmatch(r"oracle_k(\d+)_bsel(\d+)\.npy", f)
            if not m:
                continue
            k, bsel = int(m.group(1)), int(m.group(2))
            ref = np.load(os.path.join(d, f)).astype(np.float64)
            got = goldens_np.numpy_forward(d, ids, oracle=(k, bsel), bf16=args.mutation is None)
            nmse = float(((got - ref) ** 2).sum() / (ref ** 2).sum())
            top1 = 100.0 * float((got.argmax(1) == ref.argmax(1)).mean())
            key = f"{name}/{f[:-4]}"
            line = f"{key:<44} emulated nmse {nmse:.3e} top1 {top1:6.2f}%"
            if key in gpu:
                line += f"   GPU nmse {gpu[key][0]:.3e} top1 {gpu[key][1]:6.2f}%"
            print(line)
            rows.append(nmse)
    if rows:
        print(f"{len(rows)} cases: median nmse {np.median(rows):.3e}, max {max(rows):.3e}")


if __name__ == "__main__":
    main()
