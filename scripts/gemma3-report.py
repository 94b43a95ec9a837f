#!/usr/bin/env python3
"""gemma3-report.py: the tables of scripts/gemma3-report.sh from its manifest and the JSON it points to.

  python3 scripts/gemma3-report.py --manifest OUT/manifest.tsv --out OUT [--lengths ...] ...

Writes OUT/report.md (a GEMMA3-REPORT section for docs/results.md: oracle gap per length, the evidence
decomposition per train length, TTFT, and every spindle call with its command line and time) and
OUT/report.json (the same numbers). Every number names the call it comes from (E1, T1, B1, ...).
A missing or failed call leaves its cells "not measured" instead of failing the report.
"""
import argparse
import datetime
import json
import os
import re
import sys


def load_manifest(path):
    steps, ids = [], {}
    counters = {"eval": "E", "teacher": "S", "train": "T", "export": "X", "bench": "B"}
    n = {}
    with open(path) as f:
        for line in f:
            kind, tag, res, status, secs, cmd = line.rstrip("\n").split("\t", 5)
            p = counters.get(kind, "C")
            n[p] = n.get(p, 0) + 1
            sid = f"{p}{n[p]}"
            data = None
            if status == "ok" and res.endswith(".json") and os.path.isfile(res):
                with open(res) as jf:
                    data = json.load(jf)
            steps.append(dict(id=sid, kind=kind, tag=tag, res=res, status=status, secs=int(secs or 0), cmd=cmd,
                              data=data))
            ids[res] = sid
    return steps


def by_res(steps, res):
    for s in steps:
        if os.path.normpath(s["res"]) == os.path.normpath(res):
            return s
    return None


def f4(x, sign=False):
    if x is None:
        return "–"
    return f"{x:+.4f}" if sign else f"{x:.4f}"


def pm(r, key, sign=False):
    if r is None or r.get(key) is None:
        return "–"
    ci = r.get(key + "_ci95")
    return f4(r[key], sign) + (f" ± {ci:.4f}" if ci is not None else "")


def eval_rows(step):
    """The metric rows of an eval (retrieval rows and each row's provenance left out)."""
    if not step or not step["data"]:
        return []
    return [{k: v for k, v in r.items() if k != "provenance"} for r in step["data"] if "task" not in r]


def find(rows, mode, k=None, bsel=None):
    for r in rows:
        if r.get("mode") == mode and (k is None or r.get("k") == k) and (bsel is None or r.get("bsel") == bsel):
            return r
    return None


def bench_ms(steps, out, ctx, k, bsel, name):
    """(ms, call id, note) of one TTFT measurement."""
    s = by_res(steps, os.path.join(out, f"bench_ctx{ctx}_k{k}_b{bsel}.json"))
    if s is None:
        return None, None, "not measured"
    if not s["data"]:
        return None, s["id"], f"not measured ({s['id']} {s['status'].split(';')[0]})"
    for r in s["data"].get("results", []):
        if r.get("name") == name and r.get("ctx") == ctx:
            if r.get("ms_median") is not None and not r.get("error"):
                return r["ms_median"], s["id"], None
            return None, s["id"], f"not measured ({s['id']}: {r.get('error') or 'no time'})"
    return None, s["id"], f"not measured ({s['id']}: no {name})"


def teacher_done(log):
    """(sequences, layers) from spindle teacher's last 'done:' line, or (None, None)."""
    seqs = layers = None
    if os.path.isfile(log):
        for ln in open(log, errors="replace"):
            m = re.search(r"done: \d+ shard\(s\), (\d+) sequence\(s\).*?(\d+) layer\(s\)", ln)
            if m:
                seqs, layers = int(m.group(1)), int(m.group(2))
    return seqs, layers


def train_finals(log):
    """[(layer, final KL, held-out recall text)] from spindle train's closing lines."""
    out = {}
    if os.path.isfile(log):
        for ln in open(log, errors="replace"):
            m = re.search(r"layer (\d+): final KL ([0-9.eE+-]+)[^,]*(?:, held-out (recall@\d+) ([0-9.]+))?", ln)
            if m:
                out[int(m.group(1))] = (float(m.group(2)), m.group(3), m.group(4))
    return sorted((k,) + v for k, v in out.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="")
    ap.add_argument("--heldout", default="")
    ap.add_argument("--train-text", default="")
    ap.add_argument("--lengths", default="")
    ap.add_argument("--ks", default="")
    ap.add_argument("--bsels", default="")
    ap.add_argument("--train-lengths", default="")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--steps", default="")
    ap.add_argument("--train-seqs", default="")
    ap.add_argument("--indexers", default="", help="L=DIR pairs: indexers evaluated at L, trained elsewhere")
    ap.add_argument("--seconds", type=int, default=0)
    ap.add_argument("--invocation", default="scripts/gemma3-report.sh")
    a = ap.parse_args()
    ints = lambda s: [int(x) for x in s.replace(",", " ").split()]
    lengths, ks, bsels, tls = ints(a.lengths), ints(a.ks), ints(a.bsels), ints(a.train_lengths)
    given = dict((int(p.split("=", 1)[0]), p.split("=", 1)[1]) for p in a.indexers.replace(",", " ").split())
    steps = load_manifest(a.manifest)
    out = a.out
    info = ""
    if os.path.isfile(os.path.join(out, "info.txt")):
        info = open(os.path.join(out, "info.txt")).read()
    kinds = next((ln.split(None, 2)[-1] for ln in info.splitlines() if ln.startswith("layer kinds")), "?")
    md, js = [], {"oracle_gap": [], "decomposition": [], "ttft": [], "calls": []}
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    md.append("<!-- GEMMA3-REPORT:BEGIN (generated by scripts/gemma3-report.sh; do not edit by hand) -->")
    md.append(f"Run: `{a.invocation}` — {now}, {a.seconds // 60} min {a.seconds % 60} s in all "
              f"(calls reused from an earlier run are not counted; their own times are in the call list).")
    md.append(f"Model: `{a.model}` (layer kinds: {kinds}; the oracle and the indexers act at the full-attention "
              f"layers only). Held-out text: `{a.heldout}`; training text: `{a.train_text}`. Device: {a.device}"
              + (f", eval precision {a.precision}" if a.device == "cuda" else "") + ".")
    md.append("")

    # --- a. oracle gap ---------------------------------------------------------------------------------
    def length_eval(L):
        name = f"eval_indexer_ctx{L}.json" if L in tls else f"eval_oracle_ctx{L}.json"
        return by_res(steps, os.path.join(out, name))
    md.append("#### Oracle gap (attention-mass oracle vs dense, held-out text)")
    md.append("")
    md.append("ΔNLL vs dense in nats/token, ± a 95% interval (batch means). Regenerate: the run line above "
              "(part a; lengths that are also train lengths come from the evidence-decomposition eval).")
    md.append("")
    for s in bsels:
        md.append(f"ΔNLL of the oracle, b_sel {s} (rows k, columns length):")
        md.append("")
        md.append("| k | " + " | ".join(str(L) for L in lengths) + " |")
        md.append("|---|" + "---|" * len(lengths))
        for k in ks:
            cells = []
            for L in lengths:
                r = find(eval_rows(length_eval(L)), "oracle", k, s) if k < L else None
                cells.append(pm(r, "dnll", True) if r else ("k ≥ length" if k >= L else "not measured"))
            md.append(f"| {k} | " + " | ".join(cells) + " |")
        md.append("")
    md.append("| ctx | mode | k | b_sel | seqs | scored | NLL | ΔNLL | logit KL | top-1 agree | mass recall | sparsity | from |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for L in lengths:
        st = length_eval(L)
        rows = eval_rows(st)
        if not rows:
            md.append(f"| {L} | not measured ({st['status'] if st else 'no eval'}) |" + " |" * 11)
            continue
        sel = [r for r in rows if r["mode"] == "dense"] + sorted(
            (r for r in rows if r["mode"] == "oracle"), key=lambda r: (r["k"], r["bsel"]))
        for r in sel:
            md.append(f"| {L} | {r['mode']} | {r['k'] or '-'} | {r['bsel'] or '-'} | {r['n_seq']} | {r['n_scored']} | "
                      f"{f4(r['nll'])} | {pm(r, 'dnll', True)} | {pm(r, 'logit_kl')} | {pm(r, 'top1_agree')} | "
                      f"{pm(r, 'mass_recall')} | {f4(r['sparsity'])} | {st['id']} |")
            js["oracle_gap"].append(dict(r, source=st["id"]))
    md.append("")

    # --- b. evidence decomposition ----------------------------------------------------------------------
    if tls:
        md.append("#### Indexers at the full-attention layers: the evidence decomposition")
        md.append("")
        md.append(f"Per train length L: teacher shards of {a.train_seqs} sequences of L tokens of the training "
                  f"text, {a.steps} steps of `spindle train`, export, then one `spindle eval --indexer` at L: dense, "
                  "oracle and indexer on the same held-out sequences. oracle gap = ΔNLL(oracle, b_sel 1); indexer "
                  "gap = ΔNLL(indexer, b_sel 1) − ΔNLL(oracle, b_sel 1); realization gap of block sharing = "
                  "ΔNLL(indexer, b_sel) − ΔNLL(indexer, b_sel 1) (docs/design.md, Evidence decomposition)."
                  + "".join(f" At {L} the indexers are `{d}`, exported by an earlier run (not trained here)."
                            for L, d in sorted(given.items())))
        md.append("")
        md.append("| train/eval ctx | k | b_sel | oracle ΔNLL | indexer ΔNLL | oracle gap | indexer gap | realization gap | "
                  "oracle recall | indexer recall | oracle top-1 | indexer top-1 | indexer logit KL | from |")
        md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for L in tls:
            st = by_res(steps, os.path.join(out, f"eval_indexer_ctx{L}.json"))
            rows = eval_rows(st)
            srcs = [x["id"] for x in (by_res(steps, os.path.join(out, p)) for p in
                                       (f"shards_train_ctx{L}", f"run_ctx{L}", f"idx_ctx{L}")) if x]
            if not rows:
                md.append(f"| {L} | not measured ({st['status'] if st else 'no eval'}) |" + " |" * 12)
                continue
            for k in ks:
                if k >= L:
                    continue
                o1, i1 = find(rows, "oracle", k, 1), find(rows, "indexer", k, 1)
                for s in bsels:
                    o, i = find(rows, "oracle", k, s), find(rows, "indexer", k, s)
                    if o is None and i is None:
                        continue
                    og = o1["dnll"] if o1 else None
                    ig = i1["dnll"] - o1["dnll"] if (i1 and o1) else None
                    rg = (i["dnll"] - i1["dnll"]) if (s > 1 and i and i1) else None
                    md.append(f"| {L} | {k} | {s} | {pm(o, 'dnll', True)} | {pm(i, 'dnll', True)} | {f4(og, True)} | "
                              f"{f4(ig, True)} | {f4(rg, True) if s > 1 else '–'} | {f4(o and o['mass_recall'])} | "
                              f"{f4(i and i['mass_recall'])} | {f4(o and o['top1_agree'])} | {f4(i and i['top1_agree'])} | "
                              f"{f4(i and i['logit_kl'])} | {', '.join([st['id']] + srcs)} |")
                    js["decomposition"].append(dict(ctx=L, k=k, bsel=s, oracle=o, indexer=i, oracle_gap=og,
                                                    indexer_gap=ig, realization_gap=rg, source=st["id"]))
            d = find(rows, "dense")
            if d:
                md.append(f"| {L} | dense NLL {f4(d['nll'])} ({d['n_seq']} seqs, {d['n_scored']} scored) |" + " |" * 12)
        md.append("")
        md.append("Training, per train length (from the teacher and train logs): teacher sequences actually "
                  "written (fewer than asked when the text runs out) and, per trained layer, the final KL (mean "
                  "of the last steps) and the held-out recall.")
        md.append("")
        md.append("| train ctx | teacher seqs | layers | per layer: final KL / held-out recall | from |")
        md.append("|---|---|---|---|---|")
        for L in tls:
            if L in given:
                cfg = {}
                try:
                    cfg = json.load(open(os.path.join(given[L], "config.json")))
                except (OSError, ValueError):
                    pass
                md.append(f"| {L} | – | {len(cfg.get('layers', [])) or '–'} | trained by an earlier run: "
                          f"{cfg.get('steps', '?')} steps, {cfg.get('tokens', '?')} tokens (`{given[L]}/config.json`) | – |")
                js.setdefault("training", []).append(dict(ctx=L, indexers=given[L], steps=cfg.get("steps"),
                                                          tokens=cfg.get("tokens")))
                continue
            sh = by_res(steps, os.path.join(out, f"shards_train_ctx{L}"))
            tr = by_res(steps, os.path.join(out, f"run_ctx{L}"))
            seqs, nl = teacher_done(os.path.join(out, f"shards_train_ctx{L}.log"))
            fin = train_finals(os.path.join(out, f"run_ctx{L}.log"))
            cell = "; ".join(f"{l}: {kl:.4f}" + (f" / {rv} ({rn})" if rv else "") for l, kl, rn, rv in fin) or "–"
            md.append(f"| {L} | {seqs if seqs is not None else '–'} | {nl if nl is not None else '–'} | {cell} | "
                      f"{', '.join(x['id'] for x in (sh, tr) if x) or '–'} |")
            js.setdefault("training", []).append(dict(ctx=L, teacher_seqs=seqs, layers=nl,
                                                      finals=[dict(layer=l, kl=kl, recall=rv, recall_k=rn)
                                                              for l, kl, rn, rv in fin]))
        md.append("")

    # --- c. TTFT ----------------------------------------------------------------------------------------
    md.append("#### Time to first token (same model, same configurations)")
    md.append("")
    if a.device != "cuda":
        md.append("Not measured: the run was on the CPU (`spindle bench` runs on the GPU).")
    else:
        md.append("`spindle bench --model MODEL --no-kernels`: median of timed repeats after a warm-up; indexer "
                  "TTFT with random indexer weights (the timing does not depend on training); oracle per query "
                  "only. speedup = dense TTFT / TTFT.")
        md.append("")
        md.append("| ctx | k | b_sel | dense (ms) | oracle b_sel 1 (ms) | indexer (ms) | indexer speedup | from |")
        md.append("|---|---|---|---|---|---|---|---|")
        all_l = sorted(set(lengths) | set(tls))
        block = [s for s in bsels if s > 1] or [1]
        for L in all_l:
            for k in ks:
                if k >= L:
                    continue
                for s in bsels:
                    bs = s if s > 1 else block[0]
                    dn, did, dnote = bench_ms(steps, out, L, k, bs, "ttft_dense")
                    om, _, onote = bench_ms(steps, out, L, k, bs, "ttft_oracle") if s == 1 else (None, None, "–")
                    im, iid, inote = bench_ms(steps, out, L, k, bs, "ttft_indexer" if s == 1 else "ttft_indexer_block")
                    sp = f"{dn / im:.2f}×" if (dn and im) else "–"
                    md.append(f"| {L} | {k} | {s} | {f'{dn:.1f}' if dn else dnote} | "
                              f"{f'{om:.1f}' if om else onote} | {f'{im:.1f}' if im else inote} | {sp} | {iid or '–'} |")
                    js["ttft"].append(dict(ctx=L, k=k, bsel=s, dense_ms=dn, oracle_ms=om, indexer_ms=im,
                                           source=iid))
    md.append("")

    # --- d. the calls -----------------------------------------------------------------------------------
    md.append("#### Calls")
    md.append("")
    for s in steps:
        st = "" if s["status"] == "ok" else f" — {s['status']}"
        md.append(f"- {s['id']} ({s['kind']} {s['tag']}; {s['secs']} s{st}): `{s['cmd']}`")
        js["calls"].append({k: v for k, v in s.items() if k != "data"})
    md.append("<!-- GEMMA3-REPORT:END -->")
    js["invocation"], js["seconds"] = a.invocation, a.seconds
    for name, text in (("report.md", "\n".join(md) + "\n"), ("report.json", json.dumps(js, indent=1) + "\n")):
        p = os.path.join(out, name)
        with open(p + ".tmp", "w") as f:
            f.write(text)
        os.replace(p + ".tmp", p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
