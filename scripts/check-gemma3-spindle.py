#!/usr/bin/env python3
"""check-gemma3-spindle.py: spindle's logits on real tokens against HF transformers (float32), for every family
spindle loads whose HF class is listed in HF_CLASSES: Gemma3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, taken
from config.json's model_type.

  # spindle runs here (tokenize + logits), then HF:
  python3 scripts/check-gemma3-spindle.py --model models/gemma3-270m --text TEXT --spindle build-cuda/spindle \\
      --device cuda --out-dir results/gemma3-check
  # or compare a logits file spindle already wrote for an ids file:
  python3 scripts/check-gemma3-spindle.py --model models/gemma3-270m --ids IDS --logits OUT.npy --json SUMMARY.json

  # the tokenizer only: spindle tokenize against HF `tokenizers` on MODEL/tokenizer.json, file by file:
  python3 scripts/check-gemma3-spindle.py --model models/qwen25coder-1.5b --tokenizer-texts FILE... --json T.json

With --text, the ids are <bos> + the first --tokens - 1 ids of `spindle tokenize --model MODEL --text TEXT`
(spindle's own tokenizer: the same ids go to both sides), written to OUT_DIR/ids.txt. <bos> is --bos ID when
given (--bos -1: none), else config.json's bos_token_id when tokenizer_config.json has add_bos_token true
(Gemma: id 2) and nothing when it does not (Qwen2: the first --tokens ids of the text).
and `spindle logits --model MODEL --ids OUT_DIR/ids.txt --out OUT_DIR/spindle_logits.npy --device DEVICE
[--precision P]` makes the spindle side. With --ids/--logits both are given (the ids exactly as spindle
read them; the logits float32 [T, vocab] .npy as `spindle logits` writes them).

The HF side: the model_type's class (Gemma3ForCausalLM, ...).from_pretrained(MODEL, dtype=float32,
attn_implementation=--attn (eager by default; sdpa also allowed)), use_cache=False, on --hf-device (default cuda when available). The logits
are formed chunk by chunk (--chunk positions at a time) from the final hidden states through the tied
or separate head (and final_logit_softcapping when the config sets it); the spindle .npy is memory-mapped:
neither side's [T, vocab] array is held in memory whole.

Reports top-1 agreement at every position (count, the disagreeing positions with HF's top-2 margin there),
max |logit difference| and its position and token, mean |difference|, the NLL (nats/token, position t
scored on id t+1) of each side and the mean KL(HF || spindle); writes the JSON summary (--json, default
OUT_DIR/check.json). Exit 1 if top-1 disagrees anywhere (or on a failure), 2 on bad usage.
With --tokenizer-texts: per file, whether the two id lists are identical (and the first difference), the
token count, and the total; exit 1 if any file differs. Needs torch, transformers, numpy (tokenizers for
--tokenizer-texts).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

# config.json model_type -> the transformers class that is the reference for it
HF_CLASSES = {"gemma3_text": "Gemma3ForCausalLM", "qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}


def read_ids(path):
    with open(path) as f:
        txt = f.read().replace(",", " ")
    try:
        return [int(x) for x in txt.split()]
    except ValueError as e:
        sys.exit(f"check-gemma3-spindle: {path}: not a list of integers ({e})")


def run(cmd):
    print("check-gemma3-spindle: $ " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        sys.exit(f"check-gemma3-spindle: command failed with exit {r.returncode}: {' '.join(cmd)}")
    return r.stdout


def spindle_side(a):
    """(ids, logits path) of the spindle side, running spindle when --text is given."""
    if a.ids:
        return read_ids(a.ids), a.logits
    os.makedirs(a.out_dir, exist_ok=True)
    tok_path = os.path.join(a.out_dir, "text_ids.txt")
    run([a.spindle, "tokenize", "--model", a.model, "--text", a.text, "--out", tok_path])
    ids = read_ids(tok_path)
    bos = [] if a.bos is None else [a.bos]
    if len(ids) < a.tokens - len(bos):
        sys.exit(f"check-gemma3-spindle: {a.text}: {len(ids)} tokens, fewer than {a.tokens - len(bos)}")
    ids = bos + ids[: a.tokens - len(bos)]
    ids_path = os.path.join(a.out_dir, "ids.txt")
    with open(ids_path + ".tmp", "w") as f:
        for i in range(0, len(ids), 16):
            f.write(" ".join(str(x) for x in ids[i:i + 16]) + "\n")
    os.replace(ids_path + ".tmp", ids_path)
    out = os.path.join(a.out_dir, "spindle_logits.npy")
    cmd = [a.spindle, "logits", "--model", a.model, "--ids", ids_path, "--out", out, "--device", a.device]
    if a.precision:
        cmd += ["--precision", a.precision]
    t0 = time.time()
    run(cmd)
    print(f"check-gemma3-spindle: spindle logits took {time.time() - t0:.1f} s", file=sys.stderr)
    return ids, out


def model_bos(model):
    """The id a sequence starts with: config.json's bos_token_id when tokenizer_config.json adds one."""
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    tcfg = {}
    if os.path.isfile(os.path.join(model, "tokenizer_config.json")):
        with open(os.path.join(model, "tokenizer_config.json")) as f:
            tcfg = json.load(f)
    if tcfg.get("add_bos_token") and cfg.get("bos_token_id") is not None:
        return int(cfg["bos_token_id"])
    return None


def check_tokenizer(a):
    """spindle tokenize against HF tokenizers on MODEL/tokenizer.json, one file at a time."""
    from tokenizers import Tokenizer
    import tokenizers
    tk = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    os.makedirs(a.out_dir, exist_ok=True)
    files, total, bad = [], 0, 0
    for i, path in enumerate(a.tokenizer_texts):
        out = os.path.join(a.out_dir, f"tok_{i}.txt")
        run([a.spindle, "tokenize", "--model", a.model, "--text", path, "--out", out])
        sp = read_ids(out)
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")  # the bytes as they are (\r\n stays), as spindle reads them
        hf = tk.encode(text, add_special_tokens=False).ids
        k = 0
        while k < min(len(sp), len(hf)) and sp[k] == hf[k]:
            k += 1
        same = sp == hf
        total += len(hf)
        bad += not same
        files.append({"file": path, "bytes": len(text.encode()), "tokens_hf": len(hf), "tokens_spindle": len(sp),
                      "identical": same, "first_difference": None if same else k})
        if not same:
            print(f"check-gemma3-spindle: {path}: first difference at token {k}: spindle {sp[k:k + 5]}, "
                  f"HF {hf[k:k + 5]}")
    summary = {"model": a.model, "tokenizer": os.path.join(a.model, "tokenizer.json"),
               "tokenizers_version": tokenizers.__version__, "files": len(files), "files_identical": len(files) - bad,
               "tokens_compared": total, "pass": bad == 0, "per_file": files}
    out = a.json or os.path.join(a.out_dir, "tokenizer-check.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".tmp", "w") as f:
        json.dump(summary, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(out + ".tmp", out)
    print(f"check-gemma3-spindle: tokenizer: {len(files) - bad}/{len(files)} files identical token for token, "
          f"{total} tokens (HF count); summary {out}")
    return 0 if bad == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="converted HF folder (e.g. models/gemma3-270m)")
    ap.add_argument("--text", help="text file: spindle tokenizes it and writes the logits (with --spindle)")
    ap.add_argument("--spindle", default="build/spindle", help="spindle binary for --text (default build/spindle)")
    ap.add_argument("--device", default="cuda", choices=["cpu", "cuda"], help="spindle logits --device (default cuda)")
    ap.add_argument("--precision", choices=["fp32", "mixed", "bf16"], help="spindle logits --precision (cuda)")
    ap.add_argument("--tokens", type=int, default=2048, help="tokens with --text, <bos> included (default 2048)")
    ap.add_argument("--bos", type=int, default=None,
                    help="id prepended with --text, -1 for none "
                         "(default: the model's: Gemma's <bos> = 2, none for Qwen2)")
    ap.add_argument("--out-dir", default="results/gemma3-check", help="ids, spindle logits, summary (with --text)")
    ap.add_argument("--tokenizer-texts", nargs="+", metavar="FILE",
                    help="compare spindle tokenize with HF tokenizers on these files (no logits)")
    ap.add_argument("--ids", help="ids file spindle logits read (instead of --text)")
    ap.add_argument("--logits", help="spindle logits .npy for --ids")
    ap.add_argument("--json", help="summary JSON (default OUT_DIR/check.json)")
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"], help="HF attention (default eager)")
    ap.add_argument("--hf-device", default=None, help="device of the HF model (default cuda when available)")
    ap.add_argument("--chunk", type=int, default=256, help="positions per logits chunk (default 256)")
    ap.add_argument("--list", type=int, default=50, help="disagreeing positions printed (all go to the JSON)")
    a = ap.parse_args()
    if not os.path.isfile(os.path.join(a.model, "config.json")):
        sys.exit(f"check-gemma3-spindle: {a.model}: no config.json")
    if a.tokenizer_texts:
        if a.text or a.ids:
            ap.error("--tokenizer-texts takes neither --text nor --ids")
        return check_tokenizer(a)
    if bool(a.text) == bool(a.ids):
        ap.error("give --text (spindle runs here) or --ids with --logits")
    if a.ids and not a.logits:
        ap.error("--ids needs --logits")
    if a.tokens < 2 or a.chunk < 1:
        ap.error("--tokens must be >= 2 and --chunk >= 1")
    if a.bos is not None and a.bos < -1:
        ap.error("--bos must be a token id or -1 (none)")
    a.bos = model_bos(a.model) if a.bos is None else (None if a.bos == -1 else a.bos)
    with open(os.path.join(a.model, "config.json")) as f:
        model_type = json.load(f).get("model_type")
    if model_type not in HF_CLASSES:
        sys.exit(f"check-gemma3-spindle: {a.model}/config.json: model_type {model_type!r} has no HF class here "
                 f"(known: {', '.join(sorted(HF_CLASSES))})")

    ids, logits_path = spindle_side(a)
    sp = np.load(logits_path, mmap_mode="r")
    if sp.dtype != np.float32 or sp.ndim != 2 or sp.shape[0] != len(ids):
        sys.exit(f"check-gemma3-spindle: {logits_path}: {sp.dtype} {sp.shape}, expected float32 [{len(ids)}, vocab]")

    import torch
    import transformers
    hf_class = getattr(transformers, HF_CLASSES[model_type])
    dev = a.hf_device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False      # a float32 reference, not TF32
    torch.backends.cudnn.allow_tf32 = False
    t0 = time.time()
    model = hf_class.from_pretrained(a.model, dtype=torch.float32, attn_implementation=a.attn).to(dev).eval()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if sp.shape[1] != model.config.vocab_size:
        sys.exit(f"check-gemma3-spindle: {logits_path}: vocab {sp.shape[1]}, the model has {model.config.vocab_size}")
    x = torch.tensor([ids], dtype=torch.long, device=dev)
    with torch.no_grad():
        hidden = model.model(input_ids=x, use_cache=False).last_hidden_state[0]   # [T, d], after the final norm
    T, V = sp.shape
    tgt = np.asarray(ids[1:] + [-1])
    disagree, margins = [], []
    max_diff, max_at, max_tok, sum_abs = -1.0, -1, -1, 0.0
    nll_hf = nll_sp = kl = 0.0
    for lo in range(0, T, a.chunk):
        hi = min(lo + a.chunk, T)
        with torch.no_grad():
            z = model.lm_head(hidden[lo:hi])
            if cap:
                z = torch.tanh(z / cap) * cap
        h = z.double()
        s = torch.from_numpy(np.array(sp[lo:hi], dtype=np.float64)).to(dev)
        d = (h - s).abs()
        dmax, darg = d.max(dim=1)
        sum_abs += float(d.sum())
        i = int(dmax.argmax())
        if float(dmax[i]) > max_diff:
            max_diff, max_at, max_tok = float(dmax[i]), lo + i, int(darg[i])
        top2 = h.topk(2, dim=1)
        a_h, a_s = top2.indices[:, 0], s.argmax(dim=1)
        for r in torch.nonzero(a_h != a_s).flatten().tolist():
            disagree.append(lo + r)
            margins.append(float(top2.values[r, 0] - top2.values[r, 1]))
        lp_h, lp_s = torch.log_softmax(h, dim=1), torch.log_softmax(s, dim=1)
        kl += float((lp_h.exp() * (lp_h - lp_s)).sum())
        rows = [r for r in range(hi - lo) if lo + r < T - 1]
        tt = torch.tensor(tgt[lo:hi][rows], dtype=torch.long, device=dev)
        rr = torch.tensor(rows, dtype=torch.long, device=dev)
        nll_hf -= float(lp_h[rr, tt].sum())
        nll_sp -= float(lp_s[rr, tt].sum())
    secs = time.time() - t0
    summary = {
        "model": a.model, "tokens": T, "vocab": V, "ids": a.ids or os.path.join(a.out_dir, "ids.txt"),
        "spindle_logits": logits_path, "spindle_device": None if a.ids else a.device,
        "spindle_precision": None if a.ids else (a.precision or "default"),
        "bos": a.bos if a.text else None,
        "hf": f"{hf_class.__name__} float32, attn_implementation={a.attn}, use_cache=False, on {dev}",
        "transformers_version": transformers.__version__, "torch_version": torch.__version__,
        "top1_agree": T - len(disagree), "top1_agree_frac": (T - len(disagree)) / T,
        "top1_disagree_positions": disagree, "top1_disagree_hf_top2_margin": margins,
        "max_abs_logit_diff": max_diff, "max_abs_logit_diff_position": max_at, "max_abs_logit_diff_token": max_tok,
        "mean_abs_logit_diff": sum_abs / (T * V),
        "nll_hf": nll_hf / (T - 1), "nll_spindle": nll_sp / (T - 1), "nll_diff": (nll_sp - nll_hf) / (T - 1),
        "mean_kl_hf_spindle": kl / T, "hf_seconds": secs,
        "pass": not disagree,
    }
    out = a.json or os.path.join(a.out_dir, "check.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".tmp", "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    os.replace(out + ".tmp", out)
    print(f"check-gemma3-spindle: {T} tokens; top-1 agreement {T - len(disagree)}/{T}; max |logit diff| "
          f"{max_diff:.3e} at position {max_at} (token {max_tok}); mean |diff| {summary['mean_abs_logit_diff']:.3e}; "
          f"NLL HF {summary['nll_hf']:.4f}, spindle {summary['nll_spindle']:.4f} nats/token; mean KL "
          f"{summary['mean_kl_hf_spindle']:.3e}; HF {a.attn} on {dev}; summary {out}")
    if disagree:
        shown = ", ".join(f"{p} (HF margin {m:.3g})" for p, m in list(zip(disagree, margins))[: a.list])
        print(f"check-gemma3-spindle: top-1 disagrees at {len(disagree)} positions: {shown}"
              + (" ..." if len(disagree) > a.list else ""))
    return 0 if not disagree else 1


if __name__ == "__main__":
    sys.exit(main())
