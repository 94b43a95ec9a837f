#!/usr/bin/env python3
"""Issue-6 ratio table: spindle's own benchmark JSON next to the PyTorch anchors JSON of the same run.

Inputs
  --spindle FILE   written by `spindle bench --json` (schema "spindle-bench/1")
  --anchors FILE   written by scripts/bench-anchors.py --json (schema "spindle-bench-anchors/1")
Both should come from the same job on the same card; the report says so when the GPU names differ.

Output
  Markdown on stdout, or in --md FILE (written to FILE.tmp, then renamed): the environment of both
  files, the issue-6 targets (target, our number, anchor number, ratio, met / not met / not measured),
  context comparisons with no target, TTFT by length, peak memory per configuration, and every
  measurement of both files. --json FILE writes the computed ratios (same .tmp + rename).

Targets (same run; ratios computed from the unrounded medians, `ms_median`):
  1. dense attention, 32K and 128K: attention_sdpa_bf16 throughput >= 0.95 x sdpa_cudnn's
     (throughput ratio = anchor ms / our ms, both counted as 2*T^2*d_h*Hq FLOPs)
  2. indexer scores + top-k at 128K, d_I = 128: indexer_select >= 8 x faster than indexer_scores_topk
  3. fused distillation step, one layer, 32K: train_step_layer time <= 1.5 x sdpa_cudnn's, and
     <= 1.5 x attention_sdpa_bf16's (ours)
  4. oracle selection at 32K: oracle_select time <= 2 x sdpa_cudnn's (lse given), and
     oracle_select + lse_sdpa <= 2 x (lse computed)
  5. TTFT at 128K, k = 2048: ttft_indexer_block (b_sel = 64) >= 2.5 x faster than HF's,
     ttft_indexer >= 1.5 x, ttft_dense >= 1.0 x
A missing file, a missing entry, an error or a skip shows as "not measured (reason)"; the script does
not stop on them. Exit status: 0 when the report was written, 1 when neither input could be read, 2 on
bad usage. Python 3 standard library only.

Example:
  python3 scripts/bench-report.py --spindle OUT/spindle.json --anchors OUT/anchors.json \\
      --md OUT/bench.md --json OUT/bench-ratios.json
"""
import argparse
import datetime
import json
import math
import os
import re
import statistics
import sys

SPINDLE_SCHEMA = "spindle-bench/1"
ANCHORS_SCHEMA = "spindle-bench-anchors/1"
REPORT_SCHEMA = "spindle-bench-report/1"
GIB = float(2 ** 30)
ATTN_NAMES = ("attention_sdpa_bf16", "attention_fp32", "lse_sdpa", "sdpa_cudnn", "sdpa_flash2")


# ---------------------------------------------------------------------------------------------------
# Loading


class Source:
    """One input file: its records, env and what went wrong reading it."""

    def __init__(self, label, path, schema):
        self.label = label          # "spindle" or "anchors"
        self.path = path
        self.expected_schema = schema
        self.doc = {}
        self.env = {}
        self.records = []
        self.problem = None         # why the file gave nothing (None when it loaded)
        self.warnings = []
        if path is None:
            self.problem = f"no --{label} file given"
            return
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except OSError as e:
            self.problem = f"{path}: cannot read ({e.strerror or e})"
            return
        except ValueError as e:
            self.problem = f"{path}: not valid JSON ({e})"
            return
        if not isinstance(doc, dict):
            self.problem = f"{path}: top level is not a JSON object"
            return
        self.doc = doc
        schema = doc.get("schema")
        if schema != self.expected_schema:
            self.warnings.append(f"{label} file {path}: schema is {schema!r}, expected "
                                 f"{self.expected_schema!r}; read anyway")
        env = doc.get("env")
        self.env = env if isinstance(env, dict) else {}
        if not isinstance(env, dict):
            self.warnings.append(f"{label} file {path}: no \"env\" object")
        res = doc.get("results")
        if not isinstance(res, list):
            self.problem = f"{path}: no \"results\" list"
            return
        for i, r in enumerate(res):
            if not isinstance(r, dict) or not isinstance(r.get("name"), str):
                self.warnings.append(f"{label} file {path}: results[{i}] is not a record with a name; "
                                     "ignored")
                continue
            self.records.append(r)
        if label == "anchors" and doc.get("complete") is False:
            self.warnings.append(f"anchors file {path} has \"complete\": false (the run stopped before "
                                 "its last section finished)")


def as_int(v):
    try:
        if isinstance(v, bool):
            return None
        f = float(v)
        return int(f) if math.isfinite(f) and f == int(f) else None
    except (TypeError, ValueError):
        return None


def as_pos_float(v):
    if isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def rec_ms(r):
    """The record's median time in ms, or None. Falls back to the median of ms_all."""
    ms = as_pos_float(r.get("ms_median"))
    if ms is None and isinstance(r.get("ms_all"), list):
        vals = [as_pos_float(x) for x in r["ms_all"]]
        vals = [x for x in vals if x is not None]
        if vals:
            ms = statistics.median(vals)
    return ms


def text(v):
    return "" if v is None else str(v)


def one_line(s, limit=None):
    s = " ".join(text(s).split())
    if limit and len(s) > limit:
        s = s[:limit - 3] + "..."
    return s.replace("|", "\\|")


def fmt_ctx(ctx):
    c = as_int(ctx)
    if c is None:
        return text(ctx) or "-"
    if c >= 1024 and c % 1024 == 0:
        return f"{c // 1024}K"
    return str(c)


def fmt_ms(ms):
    if ms is None:
        return "-"
    if ms >= 1000:
        return f"{ms:.0f}"
    if ms >= 100:
        return f"{ms:.1f}"
    if ms >= 10:
        return f"{ms:.2f}"
    if ms >= 0.1:
        return f"{ms:.3f}"
    return f"{ms:.4f}"


def fmt_gib(b):
    v = as_pos_float(b)
    return "-" if v is None else f"{v / GIB:.2f}"


def fmt_ratio(x):
    if x is None:
        return "-"
    return f"{x:.3f}×" if x < 10 else f"{x:.1f}×"


# ---------------------------------------------------------------------------------------------------
# Looking up one measurement


class Pick:
    """A measurement looked up by name/ctx (and k, b_sel): the record, its time, or why there is none."""

    def __init__(self, src, name, ctx, rec=None, ms=None, reason=None):
        self.src, self.name, self.ctx, self.rec, self.ms, self.reason = src, name, ctx, rec, ms, reason

    @property
    def ok(self):
        return self.ms is not None

    def label(self):
        return f"{self.name} @ {fmt_ctx(self.ctx)}"

    def summary(self, flops_fn=None):
        return {"source": self.src.label, "name": self.name, "ctx": self.ctx,
                "ms_median": self.ms, "tflops": self.tflops(flops_fn),
                "peak_mem_bytes": self.rec.get("peak_mem_bytes") if self.rec else None,
                "k": self.rec.get("k") if self.rec else None,
                "bsel": self.rec.get("bsel") if self.rec else None,
                "reason": self.reason}

    def tflops(self, flops_fn=None):
        if not self.ok:
            return None
        t = as_pos_float(self.rec.get("tflops"))
        if t is None and flops_fn is not None and self.name in ATTN_NAMES:
            t = flops_fn(self.ctx) / (self.ms * 1e-3) / 1e12
        return t


def find(src, name, ctx, k=None, bsel=None, name_re=None, prefer=None):
    """Find name (or a name matching name_re, `prefer` first) at ctx in src. k / bsel filter the
    records that carry those fields (a record without them, or with null, is accepted)."""
    if src.problem:
        return Pick(src, name, ctx, reason=f"{src.label} file not loaded")

    def name_ok(r):
        if name_re is not None:
            return re.fullmatch(name_re, r["name"]) is not None
        return r["name"] == name

    same = [r for r in src.records if name_ok(r)]
    if not same:
        return Pick(src, name, ctx, reason=f"no {name} entry in the {src.label} file")
    at = [r for r in same if as_int(r.get("ctx")) == ctx]
    if not at:
        have = sorted({fmt_ctx(r.get("ctx")) if as_int(r.get("ctx")) else "no ctx" for r in same})
        return Pick(src, name, ctx, reason=f"{name} not run at {fmt_ctx(ctx)} (only {', '.join(have)})")
    for key, want in (("k", k), ("bsel", bsel)):
        if want is None:
            continue
        keep = [r for r in at if as_int(r.get(key)) in (None, want)]
        if not keep:
            have = sorted({text(r.get(key)) for r in at})
            return Pick(src, name, ctx, reason=f"{name} @ {fmt_ctx(ctx)} only with {key} = "
                                               f"{', '.join(have)}, not {want}")
        at = keep
    if prefer:
        pref = [r for r in at if r["name"] == prefer]
        at = pref or at
    timed = [r for r in at if rec_ms(r) is not None and not r.get("error") and not r.get("skipped")]
    if timed:
        r = timed[-1]
        if len(timed) > 1:
            src.warnings.append(f"{src.label}: {len(timed)} timed records for {r['name']} @ "
                                f"{fmt_ctx(ctx)}; the last one is used")
        return Pick(src, r["name"], ctx, rec=r, ms=rec_ms(r))
    # nothing timed: report an error first, then a skip, else the last record
    r = ([x for x in at if x.get("error")] or [x for x in at if x.get("skipped")] or at)[-1]
    if r.get("error"):
        why = "error: " + one_line(r["error"], 160)
    elif r.get("skipped"):
        why = "skipped: " + one_line(r["skipped"], 160)
    else:
        why = "no time in the record (ms_median null)"
    return Pick(src, r["name"], ctx, rec=r, reason=f"{r['name']} @ {fmt_ctx(ctx)}: {why}")


class Sum:
    """Sum of several picks (e.g. oracle_select + lse_sdpa): ok only when all are."""

    def __init__(self, picks):
        self.picks = picks
        bad = [p for p in picks if not p.ok]
        self.ms = None if bad else sum(p.ms for p in picks)
        self.reason = "; ".join(p.reason for p in bad) if bad else None
        self.rec = None

    @property
    def ok(self):
        return self.ms is not None

    def label(self):
        return " + ".join(p.label() for p in self.picks)

    def summary(self, flops_fn=None):
        return {"sum_of": [p.summary(flops_fn) for p in self.picks], "ms_median": self.ms,
                "reason": self.reason}

    def tflops(self, flops_fn=None):
        return None


# ---------------------------------------------------------------------------------------------------
# Rows


class Row:
    """One comparison. kind: 'speedup' (anchor ms / our ms, higher is better), 'time' (our ms / anchor
    ms, lower is better). threshold None: context row, no target."""

    def __init__(self, group, target, ours, anchor, kind, threshold=None, op=None, note=""):
        self.group, self.target, self.ours, self.anchor = group, target, ours, anchor
        self.kind, self.threshold, self.op, self.note = kind, threshold, op, note
        self.ratio = None
        if ours.ok and anchor.ok:
            self.ratio = anchor.ms / ours.ms if kind == "speedup" else ours.ms / anchor.ms
        if self.ratio is None:
            why = [x.reason for x in (ours, anchor) if not x.ok]
            self.status = "not measured"
            self.reason = "; ".join(why)
        elif threshold is None:
            self.status = "context"
            self.reason = None
        else:
            good = self.ratio >= threshold if op == ">=" else self.ratio <= threshold
            self.status = "met" if good else "not met"
            self.reason = None

    def status_text(self):
        if self.status == "not measured":
            return f"not measured ({self.reason})"
        if self.status == "context":
            return "—"
        return f"**{self.status}**" if self.status == "met" else self.status

    def needed(self):
        if self.threshold is None:
            return "—"
        return f"{'≥' if self.op == '>=' else '≤'} {self.threshold:g}×"

    def to_json(self, flops_fn=None):
        return {"group": self.group, "target": self.target, "kind": self.kind,
                "ratio_definition": ("anchor_ms / ours_ms (higher is better)" if self.kind == "speedup"
                                     else "ours_ms / anchor_ms (lower is better)"),
                "ratio": self.ratio, "threshold": self.threshold, "comparison": self.op,
                "status": self.status, "reason": self.reason, "note": self.note or None,
                "ours": self.ours.summary(flops_fn), "anchor": self.anchor.summary(flops_fn)}


def cell(x, flops_fn=None):
    if not x.ok:
        return f"{x.label()}: not measured"
    s = f"{x.label()}: {fmt_ms(x.ms)} ms"
    if isinstance(x, Sum):
        s = f"{x.label()}: {' + '.join(fmt_ms(p.ms) for p in x.picks)} = {fmt_ms(x.ms)} ms"
    t = x.tflops(flops_fn)
    if t is not None:
        s += f" ({t:.0f} TFLOP/s)"
    return s


# ---------------------------------------------------------------------------------------------------
# Report


def build(sp, an, args):
    shapes = an.doc.get("shapes") if isinstance(an.doc.get("shapes"), dict) else {}
    hq = as_int(shapes.get("Hq")) or args.heads
    dh = as_int(shapes.get("d_h")) or args.head_dim

    def flops(ctx):
        return 2.0 * ctx * ctx * dh * hq

    K, B = args.k, args.bsel
    C32, C128 = args.ctx_32k, args.ctx_128k
    hf_re = r"hf_.+_ttft"
    hf_pref = "hf_qwen3-8b_ttft"

    def hf(ctx):
        return find(an, "hf_qwen3-8b_ttft", ctx, name_re=hf_re, prefer=hf_pref)

    targets, context = [], []
    # 1. dense attention
    for c in (C32, C128):
        targets.append(Row("1", f"dense attention {fmt_ctx(c)}: throughput ≥ 0.95× SDPA cuDNN",
                           find(sp, "attention_sdpa_bf16", c), find(an, "sdpa_cudnn", c),
                           "speedup", 0.95, ">=",
                           note="throughput ratio = anchor ms / our ms (same FLOP count)"))
    ctxs_attn = sorted({as_int(r.get("ctx")) for s in (sp, an) for r in s.records
                        if r["name"] in ATTN_NAMES and as_int(r.get("ctx"))})
    for c in ctxs_attn or [C32, C128]:
        if c not in (C32, C128):
            context.append(Row("1", f"dense attention {fmt_ctx(c)}: ours (cuDNN graph) vs SDPA cuDNN",
                               find(sp, "attention_sdpa_bf16", c), find(an, "sdpa_cudnn", c),
                               "speedup"))
        context.append(Row("1", f"dense attention {fmt_ctx(c)}: ours (cuDNN graph) vs SDPA FA2",
                           find(sp, "attention_sdpa_bf16", c), find(an, "sdpa_flash2", c), "speedup"))
        context.append(Row("1", f"dense attention {fmt_ctx(c)}: our fp32 flash kernel vs SDPA cuDNN",
                           find(sp, "attention_fp32", c), find(an, "sdpa_cudnn", c), "speedup"))
    # 2. indexer
    targets.append(Row("2", f"indexer scores + top-{K} {fmt_ctx(C128)} (d_I = 128): ≥ 8× faster "
                            "than PyTorch",
                       find(sp, "indexer_select", C128, k=K), find(an, "indexer_scores_topk", C128, k=K),
                       "speedup", 8.0, ">="))
    # The bf16 forward's selection (TF32 score GEMM; anchor: bf16 GEMM scores).
    targets.append(Row("2", f"indexer scores + top-{K} {fmt_ctx(C128)}, TF32 scores (the bf16 forward's): "
                            "≥ 8× faster than PyTorch",
                       find(sp, "indexer_select_tf32", C128, k=K), find(an, "indexer_scores_topk", C128, k=K),
                       "speedup", 8.0, ">="))
    ctxs_idx = sorted({as_int(r.get("ctx")) for s in (sp, an) for r in s.records
                       if r["name"] in ("indexer_select", "indexer_select_block",
                                        "indexer_scores_topk") and as_int(r.get("ctx"))})
    for c in ctxs_idx:
        if c != C128:
            context.append(Row("2", f"indexer scores + top-{K} {fmt_ctx(c)} vs PyTorch",
                               find(sp, "indexer_select", c, k=K),
                               find(an, "indexer_scores_topk", c, k=K), "speedup"))
        context.append(Row("2", f"block indexer selection {fmt_ctx(c)} vs PyTorch per-query top-{K}",
                           find(sp, "indexer_select_block", c),
                           find(an, "indexer_scores_topk", c, k=K), "speedup"))
        context.append(Row("2", f"block indexer selection {fmt_ctx(c)}, fused bf16 block sums (the bf16 "
                                f"forward's) vs PyTorch per-query top-{K}",
                           find(sp, "indexer_select_block_bf16", c),
                           find(an, "indexer_scores_topk", c, k=K), "speedup"))
    # 3. fused distillation step
    targets.append(Row("3", f"distillation step, one layer, {fmt_ctx(C32)}: ≤ 1.5× SDPA cuDNN forward",
                       find(sp, "train_step_layer", C32), find(an, "sdpa_cudnn", C32),
                       "time", 1.5, "<="))
    targets.append(Row("3", f"distillation step, one layer, {fmt_ctx(C32)}: ≤ 1.5× our cuDNN-graph "
                            "attention forward",
                       find(sp, "train_step_layer", C32), find(sp, "attention_sdpa_bf16", C32),
                       "time", 1.5, "<="))
    targets.append(Row("3", f"distillation step, one layer, {fmt_ctx(C32)}, bf16 teacher "
                            "(--teacher-precision bf16): ≤ 1.5× SDPA cuDNN forward",
                       find(sp, "train_step_layer_bf16", C32), find(an, "sdpa_cudnn", C32),
                       "time", 1.5, "<="))
    # 4. oracle
    osel = find(sp, "oracle_select", C32, k=K)
    lse = find(sp, "lse_sdpa", C32)
    targets.append(Row("4", f"oracle selection {fmt_ctx(C32)}, lse given: ≤ 2× SDPA cuDNN forward",
                       osel, find(an, "sdpa_cudnn", C32), "time", 2.0, "<="))
    targets.append(Row("4", f"oracle selection {fmt_ctx(C32)}, lse computed (lse_sdpa + oracle_select): "
                            "≤ 2× SDPA cuDNN forward",
                       Sum([lse, osel]), find(an, "sdpa_cudnn", C32), "time", 2.0, "<="))
    osel16 = find(sp, "oracle_select_bf16", C32, k=K)
    targets.append(Row("4", f"oracle selection {fmt_ctx(C32)}, bf16 tensor cores, lse given: ≤ 2× SDPA cuDNN "
                            "forward",
                       osel16, find(an, "sdpa_cudnn", C32), "time", 2.0, "<="))
    targets.append(Row("4", f"oracle selection {fmt_ctx(C32)}, bf16 tensor cores, lse computed: ≤ 2× SDPA cuDNN "
                            "forward",
                       Sum([lse, osel16]), find(an, "sdpa_cudnn", C32), "time", 2.0, "<="))
    context.append(Row("4", f"oracle selection {fmt_ctx(C32)}, lse given, vs PyTorch P + top-{K}",
                       osel, find(an, "oracle_P_topk", C32, k=K), "speedup"))
    context.append(Row("4", f"oracle selection {fmt_ctx(C32)}, lse computed, vs PyTorch lse + P + top-{K}",
                       Sum([lse, osel]), find(an, "oracle_total", C32, k=K), "speedup"))
    context.append(Row("4", f"lse pass {fmt_ctx(C32)}: SDPA with stats vs PyTorch lse",
                       lse, find(an, "oracle_lse", C32), "speedup"))
    # 5. TTFT
    for name, thr, extra in (("ttft_indexer_block", 2.5, dict(k=K, bsel=B)),
                             ("ttft_indexer", 1.5, dict(k=K)),
                             ("ttft_dense", 1.0, {})):
        what = {"ttft_indexer_block": f"indexer, b_sel = {B}", "ttft_indexer": "indexer, per query",
                "ttft_dense": "dense"}[name]
        goal = "no slower than HF (speedup ≥ 1.0×)" if thr == 1.0 else f"≥ {thr:g}× faster than HF"
        targets.append(Row("5", f"TTFT {fmt_ctx(C128)}, k = {K}, {what}: {goal}",
                           find(sp, name, C128, **extra), hf(C128), "speedup", thr, ">="))
    # sparse attention: realization gap, no target
    for c in (C32, C128):
        for ours in ("sparse_attention", "sparse_attention_block"):
            context.append(Row("sparse", f"{ours} {fmt_ctx(c)} vs flex block-sparse",
                               find(sp, ours, c, k=K), find(an, "flex_block_sparse", c), "speedup"))
            context.append(Row("sparse", f"{ours} {fmt_ctx(c)} vs SDPA cuDNN dense",
                               find(sp, ours, c, k=K), find(an, "sdpa_cudnn", c), "speedup"))
    # context rows where both sides are missing (never run, not asked for) say nothing: drop them
    context = [r for r in context if r.ours.ok or r.anchor.ok]
    return targets, context, flops


def ttft_table(sp, an, args):
    ctxs = sorted({as_int(r.get("ctx")) for s in (sp, an) for r in s.records
                   if (r["name"].startswith("ttft_") or re.fullmatch(r"hf_.+_ttft", r["name"]))
                   and as_int(r.get("ctx"))})
    lines = []
    if not ctxs:
        return lines
    cols = (("ttft_dense", {}), ("ttft_indexer", dict(k=args.k)),
            ("ttft_indexer_block", dict(k=args.k, bsel=args.bsel)), ("ttft_oracle", dict(k=args.k)))
    lines.append("| ctx | HF (ms) | " + " | ".join(f"{n} (ms, speedup vs HF)" for n, _ in cols) + " |")
    lines.append("|---" * (2 + len(cols)) + "|")
    for c in ctxs:
        h = find(an, "hf_qwen3-8b_ttft", c, name_re=r"hf_.+_ttft", prefer="hf_qwen3-8b_ttft")
        row = [fmt_ctx(c), fmt_ms(h.ms) if h.ok else "not measured"]
        for n, kw in cols:
            p = find(sp, n, c, **kw)
            if not p.ok:
                row.append("not measured" if p.rec is None else "not measured (" +
                           ("error" if p.rec.get("error") else "skipped" if p.rec.get("skipped")
                            else "no time") + ")")
            else:
                row.append(f"{fmt_ms(p.ms)} ({fmt_ratio(h.ms / p.ms)})" if h.ok else fmt_ms(p.ms))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def env_line(src):
    if src.problem and not src.doc:
        return f"- **{src.label}**: not loaded ({src.problem})"
    e = src.env
    if src.label == "spindle":
        order = ("gpu", "date_utc", "model", "layers", "precision", "k", "bsel", "d_index")
    else:
        order = ("gpu", "date_utc", "torch", "torch_cuda", "cudnn", "transformers", "nvidia_smi",
                 "gpu_cc", "gpu_sms", "gpu_mem_bytes", "host", "python", "device")
    keys = [k for k in order if k in e] + sorted(k for k in e if k not in order)
    parts = []
    for k in keys:
        v = e[k]
        if k == "gpu_mem_bytes" and as_pos_float(v):
            v = f"{as_pos_float(v) / GIB:.1f} GiB"
        if k == "nvidia_smi" and v:
            v = f"driver, max SM clock, power limit = {v}"
        parts.append(f"{k} {one_line(v if not isinstance(v, (dict, list)) else json.dumps(v), 200)}")
    extra = []
    if src.label == "anchors":
        if "complete" in src.doc:
            extra.append(f"complete {str(src.doc.get('complete')).lower()}")
        if "wall_s" in src.doc:
            extra.append(f"wall {src.doc.get('wall_s')} s")
        sh = src.doc.get("shapes")
        if isinstance(sh, dict):
            extra.append("shapes " + ", ".join(f"{k} {v}" for k, v in sh.items()))
    head = f"- **{src.label}** (`{src.path}`, schema `{src.doc.get('schema')}`"
    head += f", {len(src.records)} records)"
    body = "; ".join(parts + extra) or "no env"
    if src.problem:
        body += f"; **{src.problem}**"
    return f"{head}: {body}"


def cross_checks(sp, an):
    out = []
    g1, g2 = sp.env.get("gpu"), an.env.get("gpu")
    # spindle writes "NVIDIA H200 (sm_90, 132 SMs)", PyTorch "NVIDIA H200": the same card
    # when one name starts with the other.
    a, b = str(g1 or "").strip(), str(g2 or "").strip()
    if a and b and not (a.startswith(b) or b.startswith(a)):
        out.append(f"the two files name different GPUs: spindle {g1!r}, anchors {g2!r}; the ratios "
                   "are not from one card")
    d1, d2 = parse_date(sp.env.get("date_utc")), parse_date(an.env.get("date_utc"))
    if d1 and d2 and abs((d1 - d2).total_seconds()) > 6 * 3600:
        out.append(f"the two files' dates are {abs((d1 - d2).total_seconds()) / 3600:.1f} h apart "
                   f"({sp.env.get('date_utc')} vs {an.env.get('date_utc')}): probably not the same run")
    for r in an.records:
        if re.fullmatch(r"hf_.+_ttft", r["name"]) and rec_ms(r) is not None:
            m, lay = r.get("model"), r.get("layers")
            if (m and m != "qwen3-8b") or (lay is not None and as_int(lay) != 36):
                out.append(f"HF TTFT anchor is {m}, {lay} layers (not Qwen3-8B's 36): target 5 "
                           "compares different models")
                break
    for r in an.records:
        if r["name"].endswith("_section") and r.get("error"):
            out.append(f"anchors section {r['name'][:-8]} died: {one_line(r['error'], 200)}")
    return out


def parse_date(s):
    if not isinstance(s, str):
        return None
    try:
        d = datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    return d if d.tzinfo else d.replace(tzinfo=datetime.timezone.utc)


def record_note(r):
    if r.get("error"):
        return "ERROR: " + one_line(r["error"], 220)
    if r.get("skipped"):
        return "skipped: " + one_line(r["skipped"], 220)
    if rec_ms(r) is None:
        return "not measured (no time in the record)"
    bits = []
    if r.get("gqa"):
        bits.append(f"GQA {r['gqa']}")
    if r.get("tokens_per_s") is not None:
        bits.append(f"{r['tokens_per_s']} tok/s, {r.get('layers')} layers")
    if r.get("keys_per_query_mean") is not None:
        bits.append(f"{r['keys_per_query_mean']} keys/query, first call {r.get('first_call_s')} s")
    if r.get("max_abs_diff_vs_sdpa_cudnn") is not None:
        bits.append(f"max |Δ| vs cuDNN {r['max_abs_diff_vs_sdpa_cudnn']:.3g}")
    if r.get("notes"):
        bits.append(text(r["notes"]))
    return one_line("; ".join(bits), 220)


def kb(r):
    k, b = r.get("k"), r.get("bsel")
    if k is None and b is None:
        return "-"
    return f"{'-' if k is None else k} / {'-' if b is None else b}"


def markdown(sp, an, targets, context, flops, warnings, args):
    L = []
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    L.append("# spindle vs PyTorch anchors: issue-6 targets")
    L.append("")
    L.append(f"Generated {now} by `scripts/bench-report.py` from `{sp.path}` and `{an.path}`.")
    L.append("")
    L.append("## Environment")
    L.append("")
    L.append(env_line(sp))
    L.append(env_line(an))
    if warnings:
        L.append("")
        L.append("Warnings:")
        L.extend(f"- {one_line(w)}" for w in warnings)
    L.append("")
    n = {s: sum(1 for r in targets if r.status == s) for s in ("met", "not met", "not measured")}
    L.append("## Issue-6 targets")
    L.append("")
    L.append(f"{n['met']} of {len(targets)} target rows met, {n['not met']} not met, {n['not measured']} not "
             "measured. Ratios come from the medians of the two files (same run); *speedup* = anchor ms "
             "/ our ms (higher is better; for dense attention this is the throughput ratio, both sides "
             f"counted as 2·T²·d_h·Hq FLOPs with Hq = {hq_dh(an, args)[0]}, d_h = {hq_dh(an, args)[1]}), "
             "*time ratio* = our ms / anchor ms (lower is better).")
    L.append("")
    L += row_table(targets, flops, with_status=True)
    if context:
        L.append("")
        L.append("## Context (no target)")
        L.append("")
        L += row_table(context, flops, with_status=False)
    tt = ttft_table(sp, an, args)
    if tt:
        L.append("")
        L.append("## TTFT by length")
        L.append("")
        L.append(f"k = {args.k} (ttft_indexer, ttft_oracle), b_sel = {args.bsel} (ttft_indexer_block); "
                 "speedup = HF ms / ours.")
        L.append("")
        L += tt
    L.append("")
    L.append("## Peak memory per configuration")
    L.append("")
    L.append("`peak_mem_bytes` of each measurement (anchors: `torch.cuda.max_memory_allocated()`, inputs "
             "and, for HF, the weights included).")
    L.append("")
    L.append("| source | name | ctx | k / b_sel | peak GiB | status |")
    L.append("|---|---|---|---|---|---|")
    for s in (sp, an):
        for r in sorted(s.records, key=lambda r: (r["name"], as_int(r.get("ctx")) or 0)):
            st = "ok" if rec_ms(r) is not None and not r.get("error") and not r.get("skipped") else \
                ("error" if r.get("error") else "skipped" if r.get("skipped") else "no time")
            L.append(f"| {s.label} | {one_line(r['name'])} | {fmt_ctx(r.get('ctx'))} | {kb(r)} | "
                     f"{fmt_gib(r.get('peak_mem_bytes'))} | {st} |")
    L.append("")
    L.append("## Every measurement")
    L.append("")
    L.append("| source | name | ctx | k / b_sel | ms (median) | reps | TFLOP/s | peak GiB | note |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for s in (sp, an):
        if s.problem and not s.records:
            L.append(f"| {s.label} | — | | | | | | | not measured ({one_line(s.problem)}) |")
            continue
        for r in s.records:
            ms = rec_ms(r) if not r.get("error") and not r.get("skipped") else None
            tf = as_pos_float(r.get("tflops"))
            tfs = "-" if tf is None else f"{tf:.0f}"
            if tf is None and ms is not None and r["name"] in ATTN_NAMES and as_int(r.get("ctx")):
                tfs = f"{flops(as_int(r['ctx'])) / (ms * 1e-3) / 1e12:.0f} (computed)"
            L.append(f"| {s.label} | {one_line(r['name'])} | {fmt_ctx(r.get('ctx'))} | {kb(r)} | "
                     f"{fmt_ms(ms)} | {text(r.get('reps')) or '-'} | {tfs} | "
                     f"{fmt_gib(r.get('peak_mem_bytes'))} | {record_note(r)} |")
    L.append("")
    return "\n".join(L)


def hq_dh(an, args):
    sh = an.doc.get("shapes") if isinstance(an.doc.get("shapes"), dict) else {}
    return as_int(sh.get("Hq")) or args.heads, as_int(sh.get("d_h")) or args.head_dim


def row_table(rows, flops, with_status):
    L = []
    if with_status:
        L.append("| # | target | ours | anchor | ratio | needed | status |")
        L.append("|---|---|---|---|---|---|---|")
    else:
        L.append("| # | comparison | ours | reference | ratio | status |")
        L.append("|---|---|---|---|---|---|")
    for r in rows:
        kind = "speedup" if r.kind == "speedup" else "time ratio"
        ratio = f"{fmt_ratio(r.ratio)} {kind}" if r.ratio is not None else "-"
        cells = [r.group, one_line(r.target), one_line(cell(r.ours, flops)),
                 one_line(cell(r.anchor, flops)), ratio]
        if with_status:
            cells.append(r.needed())
            cells.append(one_line(r.status_text()))
        else:
            cells.append("ok" if r.ratio is not None else one_line(f"not measured ({r.reason})"))
        L.append("| " + " | ".join(cells) + " |")
    return L


def write_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(data)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--spindle", help="spindle bench JSON (schema spindle-bench/1)")
    ap.add_argument("--anchors", help="bench-anchors.py JSON (schema spindle-bench-anchors/1)")
    ap.add_argument("--md", help="write the Markdown here (via FILE.tmp + rename) instead of stdout")
    ap.add_argument("--json", help="write the computed ratios here (via FILE.tmp + rename)")
    ap.add_argument("--k", type=int, default=2048, help="top-k of the targets (default 2048)")
    ap.add_argument("--bsel", type=int, default=64, help="b_sel of ttft_indexer_block (default 64)")
    ap.add_argument("--ctx-32k", type=int, default=32768, help="the '32K' length (default 32768)")
    ap.add_argument("--ctx-128k", type=int, default=131072, help="the '128K' length (default 131072)")
    ap.add_argument("--heads", type=int, default=32,
                    help="Hq for computed TFLOP/s when the anchors file has no shapes (default 32)")
    ap.add_argument("--head-dim", type=int, default=128,
                    help="d_h for computed TFLOP/s when the anchors file has no shapes (default 128)")
    args = ap.parse_args()
    if not args.spindle and not args.anchors:
        ap.error("give --spindle FILE and/or --anchors FILE")
    for v, nm in ((args.k, "--k"), (args.bsel, "--bsel"), (args.ctx_32k, "--ctx-32k"),
                  (args.ctx_128k, "--ctx-128k"), (args.heads, "--heads"), (args.head_dim, "--head-dim")):
        if v <= 0:
            ap.error(f"{nm} must be positive")

    sp = Source("spindle", args.spindle, SPINDLE_SCHEMA)
    an = Source("anchors", args.anchors, ANCHORS_SCHEMA)
    targets, context, flops = build(sp, an, args)
    warnings = []
    for s in (sp, an):
        if s.problem:
            warnings.append(f"{s.label}: {s.problem}")
    warnings += cross_checks(sp, an)
    warnings += list(dict.fromkeys(sp.warnings + an.warnings))
    md = markdown(sp, an, targets, context, flops, warnings, args)

    if args.md:
        write_atomic(args.md, md)
    else:
        sys.stdout.write(md)
    if args.json:
        doc = {"schema": REPORT_SCHEMA,
               "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "inputs": {s.label: {"path": s.path, "schema": s.doc.get("schema"), "env": s.env,
                                    "records": len(s.records), "problem": s.problem}
                          for s in (sp, an)},
               "params": {"k": args.k, "bsel": args.bsel, "ctx_32k": args.ctx_32k,
                          "ctx_128k": args.ctx_128k, "Hq": hq_dh(an, args)[0], "d_h": hq_dh(an, args)[1]},
               "summary": {s: sum(1 for r in targets if r.status == s)
                           for s in ("met", "not met", "not measured")},
               "targets": [r.to_json(flops) for r in targets],
               "context": [r.to_json(flops) for r in context],
               "warnings": warnings}
        write_atomic(args.json, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    for w in warnings:
        print(f"bench-report: warning: {w}", file=sys.stderr)
    if args.md:
        print(f"bench-report: wrote {args.md}", file=sys.stderr)
    return 1 if (sp.problem and not sp.records and an.problem and not an.records) else 0


if __name__ == "__main__":
    sys.exit(main())
