#!/usr/bin/env python3
"""check-gemma3-hf.py: the converted Gemma 3 folder against transformers' own reading of the GGUF.

  python3 scripts/check-gemma3-hf.py HF_DIR GGUF TEXT [--tokens 2048] [--device cuda]

Needs torch, transformers (with its GGUF loader, which needs the `gguf` package) and tokenizers. Two
independent readings of the same GGUF run the same 2,048 real tokens (BOS + the text's first tokens by
HF_DIR/tokenizer.json) in float32:
  A: Gemma3ForCausalLM.from_pretrained(HF_DIR)            (scripts/gemma3_gguf_to_hf.py's conversion)
  B: Gemma3ForCausalLM.from_pretrained(dir, gguf_file=GGUF) (transformers dequantizes and maps it)
and prints, per position, top-1 agreement, the largest logit difference and both NLLs. Also how often
transformers' GGUF tokenizer (an approximation it builds itself) agrees with HF_DIR/tokenizer.json.
Exit 1 unless top-1 agrees at every position.
"""
import argparse
import os
import sys

import torch
from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("gguf")
    ap.add_argument("text")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    from transformers import AutoTokenizer, Gemma3ForCausalLM

    text = open(a.text, encoding="utf-8").read()
    tok = Tokenizer.from_file(os.path.join(a.hf_dir, "tokenizer.json"))
    ids = tok.encode(text, add_special_tokens=False).ids
    if len(ids) < a.tokens - 1:
        sys.exit(f"{a.text}: {len(ids)} tokens, fewer than {a.tokens - 1}")
    ids = [2] + ids[: a.tokens - 1]  # <bos>
    x = torch.tensor([ids], device=a.device)

    def logits(model):
        model = model.to(a.device).eval()
        with torch.no_grad():
            out = model(x).logits[0].float()
        del model
        torch.cuda.empty_cache() if a.device == "cuda" else None
        return out

    la = logits(Gemma3ForCausalLM.from_pretrained(a.hf_dir, torch_dtype=torch.float32, attn_implementation="eager"))
    lb = logits(Gemma3ForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(a.gguf)),
                                                  gguf_file=os.path.basename(a.gguf), torch_dtype=torch.float32,
                                                  attn_implementation="eager"))
    top1 = (la.argmax(-1) == lb.argmax(-1)).float()
    diff = (la - lb).abs().max().item()
    tgt = x[0, 1:]
    nll_a = torch.nn.functional.cross_entropy(la[:-1], tgt).item()
    nll_b = torch.nn.functional.cross_entropy(lb[:-1], tgt).item()
    print(f"check-gemma3-hf: {len(ids)} tokens of {a.text}; top-1 agreement {top1.mean().item():.6f} "
          f"({int(top1.sum().item())}/{len(ids)}); max |logit A - logit B| {diff:.3e}; "
          f"NLL A {nll_a:.4f}, B {nll_b:.4f} nats/token")
    try:
        tb = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(a.gguf)), gguf_file=os.path.basename(a.gguf))
        ib = tb(text, add_special_tokens=False)["input_ids"]
        ia = tok.encode(text, add_special_tokens=False).ids
        same = sum(1 for p, q in zip(ia, ib) if p == q)
        k = next((i for i, (p, q) in enumerate(zip(ia, ib)) if p != q), min(len(ia), len(ib)))
        print(f"check-gemma3-hf: transformers' GGUF tokenizer vs tokenizer.json: {len(ib)} vs {len(ia)} tokens, "
              f"first difference at token {k}, {same} positions equal")
    except Exception as e:  # the approximate tokenizer is informational only
        print(f"check-gemma3-hf: transformers' GGUF tokenizer could not be built: {e}")
    return 0 if top1.min().item() == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
