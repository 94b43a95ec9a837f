#!/usr/bin/env python3
"""Reference check of models/smollm2 (SmolLM2-135M-Instruct, float32) against HF transformers.

Input: the first N (512) token ids of /usr/share/common-licenses/GPL-3, tokenized with the HF
`tokenizers` library from models/smollm2/tokenizer.json (no special tokens, no BOS).
Reference: HF LlamaForCausalLM.from_pretrained(models/smollm2, dtype=float32), CPU, eager attention.

  check-smollm2.py                       run HF; write tests/goldens/smollm2/ if absent, otherwise
                                         compare HF against the committed goldens
  check-smollm2.py --write-goldens       (re)write tests/goldens/smollm2/
  check-smollm2.py --spindle build/spindle
                                         also run `spindle logits --model M --ids ids.txt --out X.npy`
                                         and compare its full logits with HF: top-1 agreement over all
                                         positions and max |logit difference|; prints a Markdown line;
                                         exit 1 if agreement < 100% or max diff > --tol (2e-3)
  check-smollm2.py --spindle-logits X.npy
                                         same comparison for logits spindle already wrote

Golden files (tests/goldens/smollm2/):
  ids.txt            the N input ids, one line, space separated, newline at the end
  argmax.npy         int32 [N]      argmax over the vocabulary of the logits at each position
  argmax_logit.npy   float32 [N]    the logit at that argmax
  lse.npy            float32 [N]    logsumexp of the logits at each position (computed in float64)
  top2_margin.npy    float32 [N]    top-1 logit minus top-2 logit (small values = near ties)
  probe_ids.npy      int32 [64]     sorted vocab ids, numpy default_rng(20240601).choice(V, 64, replace=False)
  probe_logits.npy   float32 [N,64] the logits at probe_ids for each position
  ref.json           provenance: model checksums, text source, versions, NLL/perplexity
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE_SEED = 20240601
N_PROBE = 64


def log(msg):
    print(f"check-smollm2: {msg}", flush=True)


def fail(msg):
    print(f"check-smollm2: FAIL: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tokenize(model_dir, text_path, n):
    from tokenizers import Tokenizer
    tk = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    ids = tk.encode(text, add_special_tokens=False).ids
    if len(ids) < n:
        fail(f"{text_path} gives only {len(ids)} tokens, need {n}")
    return ids[:n]


def write_ids(path, ids):
    with open(path, "w") as f:
        f.write(" ".join(str(i) for i in ids) + "\n")


def read_ids(path):
    with open(path) as f:
        return [int(x) for x in f.read().replace(",", " ").split()]


def hf_logits(model_dir, ids):
    import torch
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    t0 = time.time()
    with torch.no_grad():
        out = model(torch.tensor([ids], dtype=torch.long), use_cache=False)
    logits = out.logits[0].float().numpy()
    log(f"HF forward over {len(ids)} tokens: {time.time() - t0:.1f} s, logits {logits.shape}")
    import transformers
    return logits, {"torch": torch.__version__, "transformers": transformers.__version__}


def summarize(logits, ids):
    l64 = logits.astype(np.float64)
    m = l64.max(axis=1, keepdims=True)
    lse = (m[:, 0] + np.log(np.exp(l64 - m).sum(axis=1)))
    nll = lse[:-1] - l64[np.arange(len(ids) - 1), ids[1:]]
    return lse, float(nll.mean())


def top2_margin(logits):
    part = np.partition(logits, -2, axis=1)
    return (part[:, -1] - part[:, -2]).astype(np.float32)


def probe_ids(vocab):
    rng = np.random.default_rng(PROBE_SEED)
    return np.sort(rng.choice(vocab, N_PROBE, replace=False)).astype(np.int32)


def write_goldens(gdir, ids, logits, meta):
    os.makedirs(gdir, exist_ok=True)
    write_ids(os.path.join(gdir, "ids.txt"), ids)
    am = logits.argmax(axis=1).astype(np.int32)
    pid = probe_ids(logits.shape[1])
    lse, _ = summarize(logits, ids)
    np.save(os.path.join(gdir, "argmax.npy"), am)
    np.save(os.path.join(gdir, "argmax_logit.npy"), logits[np.arange(len(ids)), am].astype(np.float32))
    np.save(os.path.join(gdir, "lse.npy"), lse.astype(np.float32))
    np.save(os.path.join(gdir, "top2_margin.npy"), top2_margin(logits))
    np.save(os.path.join(gdir, "probe_ids.npy"), pid)
    np.save(os.path.join(gdir, "probe_logits.npy"), np.ascontiguousarray(logits[:, pid], dtype=np.float32))
    with open(os.path.join(gdir, "ref.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(gdir, x)) for x in os.listdir(gdir))
    log(f"wrote goldens to {gdir} ({total} bytes)")


def compare_goldens(gdir, ids, logits):
    gids = read_ids(os.path.join(gdir, "ids.txt"))
    if gids != list(ids):
        fail("tokenization differs from the committed ids.txt")
    am = np.load(os.path.join(gdir, "argmax.npy"))
    pid = np.load(os.path.join(gdir, "probe_ids.npy"))
    pl = np.load(os.path.join(gdir, "probe_logits.npy"))
    al = np.load(os.path.join(gdir, "argmax_logit.npy"))
    n = len(ids)
    agree = int((logits.argmax(axis=1) == am).sum())
    d = max(float(np.abs(logits[:, pid] - pl).max()), float(np.abs(logits[np.arange(n), am] - al).max()))
    log(f"HF vs committed goldens: top-1 {agree}/{n}, max |diff| at probe ids {d:.3g}")
    if agree != n or d > 1e-3:
        fail("HF transformers no longer reproduces the committed goldens")


def compare_spindle(spindle_logits, hf, ids, tol, label):
    x = np.load(spindle_logits)
    if x.ndim == 3 and x.shape[0] == 1:
        x = x[0]
    if x.shape != hf.shape:
        fail(f"{spindle_logits} has shape {x.shape}, want {hf.shape}")
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        fail(f"{spindle_logits} has NaN/Inf")
    n = hf.shape[0]
    agree = int((x.argmax(axis=1) == hf.argmax(axis=1)).sum())
    diff = np.abs(x - hf)
    mx = float(diff.max())
    pos, tok = np.unravel_index(int(diff.argmax()), diff.shape)
    _, nll_s = summarize(x, ids)
    _, nll_h = summarize(hf, ids)
    log(f"spindle vs HF: top-1 agreement {agree}/{n}, max |logit diff| {mx:.3g} (position {pos}, "
        f"token {tok}), mean |diff| {float(diff.mean()):.3g}, NLL {nll_s:.5f} vs {nll_h:.5f}")
    ok = agree == n and mx <= tol
    bad = np.nonzero(x.argmax(axis=1) != hf.argmax(axis=1))[0]
    if len(bad):
        marg = top2_margin(hf)
        log("top-1 disagreements (position: HF top1-top2 margin): "
            + ", ".join(f"{int(p)}: {float(marg[p]):.3g}" for p in bad[:20]))
    print(f"| {label} | {n} tokens of GPL-3 | top-1 agreement {agree}/{n} ({100.0 * agree / n:.2f}%) "
          f"| max abs logit diff {mx:.2e} | mean NLL {nll_s:.4f} (HF {nll_h:.4f}) "
          f"| {'pass' if ok else 'FAIL'} (tol {tol:g}) |")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "smollm2"))
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("-n", type=int, default=512)
    ap.add_argument("--goldens", default=os.path.join(ROOT, "tests", "goldens", "smollm2"))
    ap.add_argument("--write-goldens", action="store_true")
    ap.add_argument("--spindle", metavar="BINARY", help="spindle binary to run and compare")
    ap.add_argument("--spindle-logits", metavar="NPY", help="compare logits spindle already wrote")
    ap.add_argument("--spindle-args", default="", help="extra arguments for `spindle logits`")
    ap.add_argument("--tol", type=float, default=2e-3, help="max abs logit difference allowed")
    a = ap.parse_args()

    if not os.path.isfile(os.path.join(a.model, "model.safetensors")):
        fail(f"{a.model} has no model.safetensors; run scripts/get-smollm2.sh")
    ids = tokenize(a.model, a.text, a.n)
    log(f"{len(ids)} ids from {a.text}; first 8: {ids[:8]}")
    logits, versions = hf_logits(a.model, ids)
    if not np.isfinite(logits).all():
        fail("HF logits have NaN/Inf")
    lse, nll = summarize(logits, ids)
    log(f"HF mean NLL over {len(ids) - 1} next-token predictions: {nll:.4f} (perplexity {np.exp(nll):.3f})")

    gdir = a.goldens
    if a.write_goldens or not os.path.isfile(os.path.join(gdir, "argmax.npy")):
        src = {}
        sp = os.path.join(a.model, "SOURCE.txt")
        if os.path.isfile(sp):
            with open(sp) as f:
                for line in f:
                    k, _, v = line.partition(":")
                    src[k.strip()] = v.strip()
        meta = {
            "model": "SmolLM2-135M-Instruct, float32 dequantized from Q4_1 GGUF (models/smollm2)",
            "model_safetensors_sha256": sha256(os.path.join(a.model, "model.safetensors")),
            "tokenizer_json_sha256": sha256(os.path.join(a.model, "tokenizer.json")),
            "gguf_sha256": src.get("gguf_sha256"),
            "wheel_sha256": src.get("wheel_sha256"),
            "text": a.text,
            "text_sha256": sha256(a.text),
            "n_tokens": len(ids),
            "special_tokens": "none (no BOS)",
            "reference": "transformers LlamaForCausalLM, float32, CPU, attn_implementation=eager",
            "versions": versions,
            "probe_seed": PROBE_SEED,
            "probe_rule": f"np.sort(np.random.default_rng({PROBE_SEED}).choice(vocab_size, {N_PROBE}, replace=False))",
            "min_top2_margin": float(top2_margin(logits).min()),
            "min_top2_margin_position": int(top2_margin(logits).argmin()),
            "mean_nll": nll,
            "perplexity": float(np.exp(nll)),
        }
        write_goldens(gdir, ids, logits, meta)
    else:
        compare_goldens(gdir, ids, logits)

    if a.spindle or a.spindle_logits:
        ok = True
        if a.spindle:
            ids_path = os.path.join(gdir, "ids.txt")
            with tempfile.TemporaryDirectory() as td:
                out = os.path.join(td, "logits.npy")
                cmd = [a.spindle, "logits", "--model", a.model, "--ids", ids_path, "--out", out] + a.spindle_args.split()
                log("running: " + " ".join(cmd))
                t0 = time.time()
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    sys.stderr.write(r.stdout[-4000:] + r.stderr[-4000:])
                    fail(f"spindle exited with {r.returncode}")
                log(f"spindle took {time.time() - t0:.1f} s")
                ok = compare_spindle(out, logits, ids, a.tol, "SmolLM2-135M-Instruct f32 (spindle vs HF)")
        if a.spindle_logits:
            ok = compare_spindle(a.spindle_logits, logits, ids, a.tol,
                                 "SmolLM2-135M-Instruct f32 (spindle vs HF)") and ok
        if not ok:
            fail(f"spindle disagrees with HF (need 100% top-1 and max diff <= {a.tol:g})")
        log("spindle matches HF")


if __name__ == "__main__":
    main()
