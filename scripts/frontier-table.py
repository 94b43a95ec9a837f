#!/usr/bin/env python3
"""frontier-table.py: the frontier table, evidence decomposition, plot and section (scripts/frontier.sh).

Reads the manifest frontier.sh writes (one tab-separated line per eval or bench call: kind, length,
k, b_sel, tag, JSON path, status, seconds, command line), the `spindle eval --json` results (docs/design.md
"Eval results") and the `spindle bench --json` results (schema spindle-bench/1), and writes
  OUT/frontier.json   every row, the decomposition and the commands (machine-readable);
  OUT/frontier.md     the table, the decomposition and the commands (Markdown);
  --section FILE      the same between <!-- FRONTIER:BEGIN ... --> and <!-- FRONTIER:END -->;
  --plot FILE         ΔNLL vs TTFT speedup, one panel per length, one marker per mode.
Every file is written to a temporary name and renamed. Every number is tagged with the command
(E1.., B1..) that produced it; the commands are listed in full.

Modes: dense, oracle and indexer come from the fp32 eval (ΔNLL and its interval paired with the
dense run of the same call); indexer-bf16 from the bf16 eval: its ΔNLL is NLL(indexer, bf16) −
NLL(dense, fp32), so that it holds the precision loss too; its interval, logit KL and top-1
agreement are against the dense bf16 run of the same call. TTFT is of the synthetic 8B model
(bf16 GEMMs + cuDNN SDPA; sparse paths fp32): dense = ttft_dense (once per length: the first
bench call at that length), oracle = ttft_oracle (per query only), indexer = ttft_indexer
(b_sel 1) or ttft_indexer_block (b_sel > 1); indexer-bf16 shares the indexer's TTFT.
"""
import argparse
import datetime
import json
import math
import os
import sys

MODES = ["dense", "oracle", "indexer", "indexer-bf16"]
NO_GPU = "not measured (no GPU)"


def fail(msg):
    print(f"frontier-table: {msg}", file=sys.stderr)
    sys.exit(1)


def ints(text):
    return [int(x) for x in text.split(",") if x]


def write_atomic(path, text):
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def read_manifest(path):
    steps, counts = [], {"eval": 0, "bench": 0}
    for line in open(path):
        line = line.rstrip("\n")
        if not line:
            continue
        f = line.split("\t")
        if len(f) != 9:
            fail(f"{path}: a line with {len(f)} fields, not 9: {line[:80]}")
        kind, length, k, s, tag, js, status, secs, cmd = f
        counts[kind] += 1
        st = {"id": ("E" if kind == "eval" else "B") + str(counts[kind]), "kind": kind, "ctx": int(length),
              "k": k, "bsel": s, "tag": tag, "json": js, "status": status, "seconds": int(secs or 0),
              "command": cmd, "data": None}
        if os.path.exists(js):
            try:
                st["data"] = json.load(open(js))
            except (OSError, ValueError) as e:
                if status == "ok":
                    fail(f"{js}: unreadable JSON ({e})")
        elif status == "ok":
            fail(f"{js}: missing (the manifest says its command succeeded)")
        steps.append(st)
    return steps


def fmt_ci(v, ci, sign=False):
    if v is None:
        return "–"
    s = f"{v:+.4f}" if sign else f"{v:.4f}"
    return s if ci is None else f"{s} ± {ci:.4f}"


def fmt(v, digits=4, sign=False):
    if v is None:
        return "–"
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


class Timings:
    """TTFT lookups over the bench calls, with the reason when a time is missing."""

    def __init__(self, steps, device):
        self.device = device
        self.benches = [s for s in steps if s["kind"] == "bench"]
        self.env = next((s["data"].get("env") for s in self.benches if s["data"]), None)

    def _find(self, name, ctx, k=None, bsel=None):
        why = None
        for b in self.benches:
            if b["ctx"] != ctx or (k is not None and int(b["k"]) != k) or (bsel is not None and int(b["bsel"]) != bsel):
                continue
            res = [r for r in (b["data"] or {}).get("results", []) if r.get("name") == name and r.get("ctx") == ctx]
            for r in res:
                if r.get("ms_median") is not None and not r.get("error"):
                    bad = "NON-FINITE" in (r.get("notes") or "")
                    return r["ms_median"], b["id"], ("non-finite logits" if bad else None)
                why = why or f"not measured ({b['id']}: {r.get('error') or 'no time'})"
            if not res and b["status"] != "ok":
                why = why or f"not measured ({b['id']} {b['status'].split(';')[0]})"
        if self.device != "cuda":
            return None, None, NO_GPU
        return None, None, why or "not measured (no bench call for it)"

    def dense(self, ctx):
        return self._find("ttft_dense", ctx)

    def dense_all(self, ctx):
        out = []
        for b in self.benches:
            for r in (b["data"] or {}).get("results", []):
                if r.get("name") == "ttft_dense" and r.get("ctx") == ctx and r.get("ms_median") is not None:
                    out.append(r["ms_median"])
        return out

    def mode(self, mode, ctx, k, bsel):
        if mode == "dense":
            return self.dense(ctx)
        if mode == "oracle":
            if bsel > 1:
                return None, None, ("not measured (bench times the oracle per query only)"
                                    if self.device == "cuda" else NO_GPU)
            return self._find("ttft_oracle", ctx, k)
        if bsel == 1:
            return self._find("ttft_indexer", ctx, k)
        return self._find("ttft_indexer_block", ctx, k, bsel)


def eval_rows(step):
    return [r for r in (step["data"] or []) if "task" not in r]


def build(steps, args):
    lengths, ks, bsels = ints(args.lengths), ints(args.k), ints(args.bsel)
    tim = Timings(steps, args.device)
    evals = {(s["ctx"], s["tag"]): s for s in steps if s["kind"] == "eval"}
    rows, decomp = [], []
    for L in lengths:
        e32, e16 = evals.get((L, "fp32")), evals.get((L, "bf16"))
        if not e32 or not e32["data"]:
            fail(f"no fp32 eval result at ctx {L}")
        r32 = eval_rows(e32)
        r16 = eval_rows(e16) if e16 and e16["data"] else []

        def get(rs, mode, k=0, s=0):
            for r in rs:
                if r["mode"] == mode and (mode == "dense" or (r["k"] == k and r["bsel"] == s)):
                    return r
            return None

        d32 = get(r32, "dense")
        if d32 is None:
            fail(f"{e32['json']}: no dense row")
        d16 = get(r16, "dense")
        dense_ms, dense_src, dense_why = tim.dense(L)

        def row(mode, k, s, r, src, nll_shift=0.0):
            ms, bsrc, why = tim.mode(mode, L, k, s)
            out = {"ctx": L, "k": k, "bsel": s, "mode": mode, "n_seq": r["n_seq"] if r else None,
                   "n_scored": r["n_scored"] if r else None, "source": src}
            if r:
                for m in ("nll", "logit_kl", "top1_agree", "mass_recall", "sparsity"):
                    out[m], out[m + "_ci95"] = r[m], r.get(m + "_ci95")
                out["dnll"], out["dnll_ci95"] = r["dnll"] + nll_shift, r.get("dnll_ci95")
            else:
                out["missing"] = NO_GPU if args.device != "cuda" else "not in the eval output"
            out["ttft_ms"], out["ttft_source"] = ms, bsrc
            out["ttft_note"] = why
            out["speedup"] = dense_ms / ms if ms and dense_ms else None
            return out

        rows.append(row("dense", 0, 0, d32, e32["id"]))
        shift = d16["nll"] - d32["nll"] if d16 else None
        for k in ks:
            for s in bsels:
                rows.append(row("oracle", k, s, get(r32, "oracle", k, s), e32["id"]))
                rows.append(row("indexer", k, s, get(r32, "indexer", k, s), e32["id"]))
                i16 = get(r16, "indexer", k, s)
                rows.append(row("indexer-bf16", k, s, i16, e16["id"] if e16 else None, shift or 0.0))
        # Evidence decomposition (ΔNLL, nats/token).
        for k in ks:
            o1, i1 = get(r32, "oracle", k, 1), get(r32, "indexer", k, 1)
            for s in bsels:
                i_s, i16 = get(r32, "indexer", k, s), get(r16, "indexer", k, s)
                dd = {"ctx": L, "k": k, "bsel": s, "source": e32["id"] + (", " + e16["id"] if e16 else "")}
                dd["oracle_gap"] = o1["dnll"] if o1 else None
                dd["indexer_gap"] = i1["dnll"] - o1["dnll"] if o1 and i1 else None
                dd["block_part"] = i_s["dnll"] - i1["dnll"] if i_s and i1 else None
                if i16 and i1 and shift is not None:
                    dd["realization_gap"] = i16["dnll"] + shift - i1["dnll"]
                    dd["precision_part"] = dd["realization_gap"] - (dd["block_part"] or 0.0)
                else:
                    dd["realization_gap"] = dd["precision_part"] = None
                ms, bsrc, why = tim.mode("indexer", L, k, s)
                dd["speedup"] = dense_ms / ms if ms and dense_ms else None
                dd["ttft_source"], dd["ttft_note"] = bsrc, why
                decomp.append(dd)
    meta = {"dense": {}}
    for L in lengths:
        ms, src, why = tim.dense(L)
        e32, e16 = evals.get((L, "fp32")), evals.get((L, "bf16"))
        d32 = next(r for r in eval_rows(e32) if r["mode"] == "dense")
        d16 = next((r for r in eval_rows(e16) if r["mode"] == "dense"), None) if e16 and e16["data"] else None
        meta["dense"][L] = {"ttft_ms": ms, "ttft_source": src, "ttft_note": why, "ttft_all": tim.dense_all(L),
                            "nll_fp32": d32["nll"], "nll_bf16": d16["nll"] if d16 else None,
                            "sources": e32["id"] + (", " + e16["id"] if e16 and d16 else "")}
    return rows, decomp, meta, tim.env


def ttft_cells(r):
    if r.get("ttft_ms") is None:
        return r.get("ttft_note") or "not measured", "–"
    t = f"{r['ttft_ms']:.1f}"
    if r.get("ttft_note"):
        t += f" ({r['ttft_note']})"
    return t, (f"{r['speedup']:.2f}×" if r.get("speedup") else "–")


def markdown(rows, decomp, meta, env, steps, args):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    secs = int(args.seconds)
    out = []
    gpu = (env or {}).get("gpu")
    where = f"GPU: {gpu}" if gpu else ("CPU (--device cpu)" if args.device == "cpu" else "GPU (no bench result)")
    out.append(f"Run: `{args.invocation}` — {now}, {where}, {secs // 60} min {secs % 60} s "
               f"(calls reused from an earlier run are not counted; their own times are in the command list).")
    ttft = (f"TTFT: synthetic {args.synthetic} ({env.get('layers')} layers; {env.get('precision')}; random "
            f"indexer weights of d_I {env.get('d_index')}: the timing does not depend on training), median of "
            f"timed repeats with CUDA events after a warm-up." if env else
            f"TTFT: {NO_GPU}." if args.device != "cuda" else "TTFT: no bench call succeeded.")
    out.append(f"Quality: SmolLM2 ({args.model}) on `{args.text}`, indexer `{args.indexer}`, dense vs "
               f"attention-mass oracle vs indexer at every layer. " + ttft)
    if args.device != "cuda" or args.quick:
        out.append("")
        out.append("**Smoke run, not the frontier:** "
                   + ("`--device cpu`: no bf16 eval and no TTFT (not measured, no GPU); " if args.device != "cuda" else "")
                   + ("`--quick`: one length, two k, one sequence." if args.quick else ""))
    out.append("")
    out.append("#### Frontier table")
    out.append("")
    out.append("ΔNLL vs dense in nats/token; ± is a 95% interval (batch means, as in the sections above). "
               "indexer-bf16 is the deployed precision (`--precision bf16`: 16-bit GEMMs + cuDNN attention; "
               "the sparse paths attend in fp32): its ΔNLL is NLL(indexer, bf16) − NLL(dense, fp32), its interval, "
               "logit KL and top-1 agreement are against the dense bf16 run. TTFT: the synthetic 8B model at "
               "that length, k and b_sel; speedup = dense TTFT / TTFT. The last column names the commands below.")
    out.append("")
    for L, d in meta["dense"].items():
        extra = ""
        if d["nll_bf16"] is not None:
            extra = f", bf16 {d['nll_bf16']:.4f} (bf16 − fp32 {d['nll_bf16'] - d['nll_fp32']:+.4f})"
        t = f"{d['ttft_ms']:.1f} ms ({d['ttft_source']})" if d["ttft_ms"] is not None else d["ttft_note"]
        spread = ""
        if len(d["ttft_all"]) > 1:
            spread = (f"; {len(d['ttft_all'])} bench calls measured it: {min(d['ttft_all']):.1f}–"
                      f"{max(d['ttft_all']):.1f} ms")
        out.append(f"- ctx {L}: dense NLL fp32 {d['nll_fp32']:.4f}{extra} [{d['sources']}]; dense TTFT {t}{spread}.")
    out.append("")
    out.append("| ctx | k | b_sel | mode | seqs | scored | NLL | ΔNLL | logit KL | top-1 agree | mass recall | "
               "sparsity | TTFT 8B (ms) | speedup | from |")
    out.append("|" + "---|" * 15)
    for r in rows:
        k = "-" if r["mode"] == "dense" else str(r["k"])
        s = "-" if r["mode"] == "dense" else str(r["bsel"])
        t, sp = ttft_cells(r)
        src = ", ".join(x for x in (r["source"], r.get("ttft_source")) if x) or "–"
        if "missing" in r:
            out.append(f"| {r['ctx']} | {k} | {s} | {r['mode']} | – | – | {r['missing']} | – | – | – | – | – | "
                       f"{t} | {sp} | {src} |")
            continue
        out.append(f"| {r['ctx']} | {k} | {s} | {r['mode']} | {r['n_seq']} | {r['n_scored']} | {fmt(r['nll'])} | "
                   f"{fmt_ci(r['dnll'], r['dnll_ci95'], True)} | {fmt_ci(r['logit_kl'], r['logit_kl_ci95'])} | "
                   f"{fmt_ci(r['top1_agree'], r['top1_agree_ci95'])} | "
                   f"{fmt_ci(r['mass_recall'], r['mass_recall_ci95'])} | {fmt(r['sparsity'])} | {t} | {sp} | {src} |")
    out.append("")
    out.append("#### Evidence decomposition (ΔNLL, nats/token)")
    out.append("")
    out.append("The three gaps of docs/design.md (\"Evidence decomposition\"), same data, length and k: "
               "oracle gap = ΔNLL(oracle, b_sel 1); indexer gap = ΔNLL(indexer, b_sel 1) − ΔNLL(oracle, b_sel 1); "
               "realization gap = "
               "ΔNLL(indexer, that b_sel, bf16) − ΔNLL(indexer, b_sel 1, fp32), split into block sharing "
               "(fp32: b_sel − b_sel 1) and precision (the rest). Differences of the table's rows: "
               "their intervals are in the table.")
    out.append("")
    out.append("| ctx | k | b_sel | oracle gap | indexer gap | realization gap | of which block sharing | "
               "of which bf16 | indexer TTFT speedup | from |")
    out.append("|" + "---|" * 10)
    for d in decomp:
        rg = fmt(d["realization_gap"], sign=True) if d["realization_gap"] is not None else (
            NO_GPU if args.device != "cuda" else "not measured")
        pp = fmt(d["precision_part"], sign=True) if d["precision_part"] is not None else "–"
        sp = f"{d['speedup']:.2f}×" if d["speedup"] else (d["ttft_note"] or "–")
        src = d["source"] + (", " + d["ttft_source"] if d["ttft_source"] else "")
        out.append(f"| {d['ctx']} | {d['k']} | {d['bsel']} | {fmt(d['oracle_gap'], sign=True)} | "
                   f"{fmt(d['indexer_gap'], sign=True)} | {rg} | {fmt(d['block_part'], sign=True)} | {pp} | "
                   f"{sp} | {src} |")
    out.append("")
    out.append("#### Commands")
    out.append("")
    out.append(f"From the repository root; outputs and logs in `{args.out}/`.")
    out.append("")
    for s in steps:
        what = (f"eval, ctx {s['ctx']}, {s['tag']}" if s["kind"] == "eval"
                else f"bench, ctx {s['ctx']}, k {s['k']}, b_sel {s['bsel']}")
        status = "" if s["status"] == "ok" else f" — **{s['status']}**"
        out.append(f"- {s['id']} ({what}; {s['seconds']} s){status}: `{s['command']}`")
    if not any(s["kind"] == "bench" for s in steps):
        out.append("- no bench calls: " + (NO_GPU if args.device != "cuda" else "none in the grid"))
    return "\n".join(out) + "\n"


def plot(rows, meta, path):
    """Draws the plot; False (and nothing written) where matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        print(f"frontier-table: matplotlib missing: no plot ({path}); rerun this script elsewhere for it",
              file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = list(meta["dense"])
    timed = any(r.get("speedup") for r in rows)
    xkey = "speedup" if timed else "sparsity"
    markers = {"dense": "o", "oracle": "s", "indexer": "^", "indexer-bf16": "v"}
    bsels = sorted({r["bsel"] for r in rows if r["mode"] != "dense"})
    colors = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, len(lengths), figsize=(4.6 * len(lengths) + 1, 4.6), squeeze=False)
    handles = {}  # label -> artist, over every panel (a mode may be timed at one length only)
    for ax, L in zip(axes[0], lengths):
        for r in rows:
            if r["ctx"] != L or r.get("dnll") is None:
                continue
            x = r.get(xkey)
            if x is None:
                continue
            if r["mode"] == "dense":
                color, label = "black", "dense"
            else:
                color = colors(bsels.index(r["bsel"]) % 10)
                label = f"{r['mode']}, b_sel {r['bsel']}"
            h = ax.errorbar([x], [r["dnll"]], yerr=[r["dnll_ci95"] or 0], marker=markers[r["mode"]], color=color,
                            ms=6, capsize=2, ls="none", mfc="none" if r["mode"] == "indexer-bf16" else color)
            handles.setdefault(label, h)
            if r["mode"] not in ("dense", "indexer-bf16"):  # bf16 sits next to its fp32 point
                ax.annotate(f"k{r['k']}", (x, r["dnll"]), fontsize=6, xytext=(3, 2), textcoords="offset points")
        ax.set_yscale("symlog", linthresh=0.01)
        if timed:
            ax.set_xscale("log", base=2)
            ax.axvline(1.0, color="grey", lw=0.8, ls=":")
            ax.set_xlabel("TTFT speedup vs dense (synthetic 8B)")
        else:
            ax.set_xlabel("sparsity (TTFT not measured: no GPU)")
        ax.set_ylabel("ΔNLL vs dense (nats/token)")
        ax.set_title(f"ctx {L}")
        ax.grid(alpha=0.3)
    order = sorted(handles, key=lambda lb: (lb != "dense", [m in lb for m in MODES[::-1]], lb))
    axes[0][-1].legend([handles[lb] for lb in order], order, fontsize=7)
    fig.suptitle("Frontier: SmolLM2-135M ΔNLL vs synthetic-8B TTFT speedup" if timed else
                 "SmolLM2-135M ΔNLL vs sparsity\n(TTFT not measured: no GPU)", fontsize=10)
    fig.tight_layout()
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    fig.savefig(tmp, dpi=110, format="png")
    os.replace(tmp, path)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for a in ("manifest", "out", "plot", "section", "doc", "device", "model", "indexer", "text", "synthetic",
              "lengths", "k", "bsel", "seconds", "invocation"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    steps = read_manifest(args.manifest)
    rows, decomp, meta, env = build(steps, args)
    body = markdown(rows, decomp, meta, env, steps, args)
    drawn = plot(rows, meta, args.plot)
    rel = os.path.relpath(os.path.abspath(args.plot), os.path.dirname(os.path.abspath(args.doc)))
    rel_out = os.path.relpath(os.path.abspath(args.plot), os.path.abspath(args.out))
    image = f"\n![frontier]({rel})\n" if drawn else "\n(No plot: matplotlib was missing where this ran.)\n"
    section = ("<!-- FRONTIER:BEGIN (generated by scripts/frontier.sh; do not edit by hand) -->\n" + body
               + image + "<!-- FRONTIER:END -->\n")
    clean = lambda v: None if isinstance(v, float) and not math.isfinite(v) else v  # noqa: E731
    doc = {"schema": "spindle-frontier/1", "invocation": args.invocation, "device": args.device, "gpu": (env or {}).get("gpu"),
           "model": args.model, "indexer": args.indexer, "text": args.text, "synthetic": args.synthetic,
           "bench_env": env,
           "dense": {str(L): v for L, v in meta["dense"].items()},
           "rows": [{k: clean(v) for k, v in r.items()} for r in rows],
           "decomposition": [{k: clean(v) for k, v in d.items()} for d in decomp],
           "commands": [{k: s[k] for k in ("id", "kind", "ctx", "k", "bsel", "tag", "json", "status", "seconds",
                                           "command")} for s in steps]}
    write_atomic(os.path.join(args.out, "frontier.json"), json.dumps(doc, indent=1) + "\n")
    write_atomic(os.path.join(args.out, "frontier.md"),
                 "# Frontier\n\n" + body + (f"\n![frontier]({rel_out})\n" if drawn else image))
    write_atomic(args.section, section)


if __name__ == "__main__":
    main()
