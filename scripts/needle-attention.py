#!/usr/bin/env python3
"""needle-attention.py: where a RULER needle ranks in each layer's attention at the question.

spindle's oracle keeps, for each query, the top-k keys of the head-averaged attention mass
P_t(j) = (1/Hq) Σ_h P_{h,t}(j) (docs/design.md). When a task fails under the oracle, this script shows
whether that average is the reason: for one task instance of a spindle task file (scripts/ruler-tasks.py)
it runs the model once in HF transformers, unchanged (its attention output is torch's SDPA), and records at
every full-attention layer the last prompt position's attention row of each head, P_h(j) = softmax_j(s ·
q_h · k_j) — one row per head, never a T×T buffer. The needle is the answer as it occurs in the prompt;
its look-alikes are the other strings of the same shape (digit for digit and letter for letter; any hex
string of the same layout for a UUID): the distractor keys' values of the multi-key tasks. Per layer it reports
  - the needle's rank under the head average (its best token; rank 1 = the top key), whether it is in the
    top-k for each k, and how many look-alike tokens rank above it;
  - its rank under max-over-heads pooling (max_h P_h(j)) and its best rank in any single head;
  - its mass under the average and in the head that gives it the most.
The last prompt position is the one whose prefill output produces the first answer token.

  python3 scripts/needle-attention.py --model DIR --tasks-file F.jsonl --task niah_multikey_2 [--index 0]
         [--k 256,1024,2048] [--device cuda] [--dtype bfloat16] [--json OUT.json]
Needs torch and transformers (the GPU machine has both).
"""
import argparse
import json
import os
import re
import sys


def shape_regex(answer):
    """A regex for strings shaped like answer, not inside a longer run of letters and digits: a hex
    string (a UUID) matches any hex string of the same layout, else digit for digit and letter for letter."""
    hexy = re.fullmatch(r"[0-9a-f-]+", answer) and re.search(r"[a-f]", answer)
    parts = []
    for c in answer:
        if hexy and c != "-":
            parts.append("[0-9a-f]")
        elif c.isdigit():
            parts.append("[0-9]")
        elif c.isalpha():
            parts.append("[A-Za-z]")
        else:
            parts.append(re.escape(c))
    return re.compile(r"(?<![0-9A-Za-z])" + "".join(parts) + r"(?![0-9A-Za-z])")


def token_spans(offsets, spans):
    """Token indices whose character range overlaps any of spans."""
    out = []
    for i, (a, b) in enumerate(offsets):
        if b > a and any(a < e and s < b for s, e in spans):
            out.append(i)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--tasks-file", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--k", default="256,1024,2048")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    ap.add_argument("--json")
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",")]

    import torch
    from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer

    inst = None
    with open(args.tasks_file, encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)
            if t["task"] == args.task and t["index"] == args.index:
                inst = t
                break
    if inst is None:
        sys.exit(f"needle-attention: {args.tasks_file}: no task {args.task} index {args.index}")
    ids = inst["input_ids"]
    tok = AutoTokenizer.from_pretrained(args.model)
    enc = tok(inst["input"], add_special_tokens=False, return_offsets_mapping=True)
    if enc["input_ids"] != ids:
        sys.exit(f"needle-attention: {args.tasks_file}: the input does not re-tokenize to its input_ids "
                 f"({len(enc['input_ids'])} vs {len(ids)} tokens)")
    offsets = enc["offset_mapping"]
    text = inst["input"]
    needles, lookalike = {}, {}
    for ans in inst["outputs"]:
        rx = shape_regex(ans)
        occ = [(m.start(), m.end()) for m in re.finditer(re.escape(ans), text)]
        same = [(m.start(), m.end()) for m in rx.finditer(text) if text[m.start():m.end()] != ans]
        needles[ans] = token_spans(offsets, occ)
        lookalike[ans] = token_spans(offsets, same)
    rows = {}  # layer -> [Hq, T] fp32 probabilities of the last position

    def record(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        B, Hq, T, d = query.shape
        G = Hq // key.shape[1]
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling,
                                                               enable_gqa=G > 1)
        ql = query[0, :, -1, :].float()                                    # [Hq, d]
        kk = key[0].float().repeat_interleave(G, dim=0)                    # [Hq, T, d]
        s = torch.einsum("hd,htd->ht", ql, kk) * scaling
        rows[module.layer_idx] = torch.softmax(s, dim=-1).cpu()
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register("needle_record", record)
    dtype = torch.bfloat16 if args.dtype == "bfloat16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="needle_record")
    model.to(args.device).eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids], device=args.device)).logits[0, -1]
    first = tok.decode([int(logits.argmax())])

    layers = []
    for layer in sorted(rows):
        P = rows[layer]                                # [Hq, T]
        avg, mx = P.mean(0), P.max(0).values
        rank_avg = torch.empty_like(avg, dtype=torch.long)
        rank_avg[avg.argsort(descending=True)] = torch.arange(1, avg.numel() + 1)
        rank_mx = torch.empty_like(mx, dtype=torch.long)
        rank_mx[mx.argsort(descending=True)] = torch.arange(1, mx.numel() + 1)
        rank_h = torch.empty_like(P, dtype=torch.long)
        order = P.argsort(dim=1, descending=True)
        rank_h.scatter_(1, order, torch.arange(1, P.shape[1] + 1).expand_as(order).contiguous())
        entry = {"layer": layer, "needles": {}}
        for ans, pos in needles.items():
            if not pos:
                entry["needles"][ans] = None
                continue
            pos_t = torch.tensor(pos)
            ra = int(rank_avg[pos_t].min())
            la = lookalike[ans]
            above = int((rank_avg[torch.tensor(la)] < ra).sum()) if la else 0
            entry["needles"][ans] = {
                "tokens": len(pos), "rank_avg": ra, "in_topk_avg": {str(k): ra <= k for k in ks},
                "rank_max_pool": int(rank_mx[pos_t].min()), "best_head_rank": int(rank_h[:, pos_t].min()),
                "best_head": int(rank_h[:, pos_t].min(dim=1).values.argmin()),
                "mass_avg": float(avg[pos_t].sum()), "mass_best_head": float(P[:, pos_t].sum(1).max()),
                "lookalike_tokens": len(la), "lookalike_tokens_above_avg": above,
            }
        layers.append(entry)

    out = {"model": args.model, "tasks_file": args.tasks_file, "task": args.task, "index": args.index,
           "ctx": len(ids), "outputs": inst["outputs"], "first_token_dense": first, "k": ks,
           "needle_tokens": {a: len(p) for a, p in needles.items()},
           "lookalike_tokens": {a: len(p) for a, p in lookalike.items()}, "layers": layers}
    for ans in needles:
        ok = [e for e in layers if e["needles"].get(ans)]
        out.setdefault("summary", {})[ans] = {
            **{f"layers_in_top{k}_avg": sum(e["needles"][ans]["in_topk_avg"][str(k)] for e in ok) for k in ks},
            **{f"layers_in_top{k}_max_pool": sum(e["needles"][ans]["rank_max_pool"] <= k for e in ok) for k in ks},
            "layers": len(ok)}
    print(f"{args.task}[{args.index}] at {len(ids)} tokens; answer {inst['outputs']}; dense's first token {first!r}")
    for ans in needles:
        print(f"needle {ans!r}: {len(needles[ans])} tokens, {len(lookalike[ans])} look-alike tokens")
        print("layer  rank(avg)  look-alikes above  rank(max-pool)  best head (rank)  mass avg   mass best head")
        for e in layers:
            n = e["needles"].get(ans)
            if n:
                print(f"{e['layer']:5d}  {n['rank_avg']:9d}  {n['lookalike_tokens_above_avg']:17d}  "
                      f"{n['rank_max_pool']:14d}  {n['best_head']:4d} ({n['best_head_rank']:6d})  "
                      f"{n['mass_avg']:.2e}  {n['mass_best_head']:.2e}")
        print(json.dumps(out["summary"][ans]))
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(args.json + ".tmp", args.json)


if __name__ == "__main__":
    main()
