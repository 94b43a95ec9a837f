#!/usr/bin/env python3
"""qwen-frontier.py: the paired frontier of a real checkpoint from scripts/device-qwen25coder.sh's JSONs.

Reads every JSON in the folders given (the device stages' outputs, any mix of calls):
  nll_*.json    `spindle eval --ids/--text --ctx L` rows: NLL, ΔNLL (± 95%), logit KL, top-1 agreement,
                mass recall, sparsity of dense / oracle / indexer at each (k, b_sel);
  ruler_*.json  `spindle eval --tasks-file` rows: RULER accuracy per task and the average (± 95%);
  ttft_*.json   `spindle bench --model M --no-kernels` results: ttft_dense, ttft_indexer (b_sel 1; where
                ttft_indexer_union timed the same supports as unions of blocks, that time instead),
                ttft_indexer_block (b_sel > 1), ttft_oracle (per query; where ttft_oracle_union timed it
                as unions of blocks, that time instead), ttft_oracle_block (b_sel > 1).
and joins them per (length, mode, k, b_sel) into
  --md FILE     one Markdown table (+ the per-task RULER table, the sentences the issue's "Done when" asks
                for, computed from the numbers, and every command with its time);
  --json FILE   the joined rows;
  --png FILE    quality against TTFT speedup: RULER average and ΔNLL vs dense TTFT / TTFT, one line per
                (length, b_sel) through the indexer's k values, the per-query oracle as separate markers.
TTFT rows from several kinds of card are marked with their card, and a speedup divides only times of one card
(the same bench call's dense time, else the first dense time at that length on that card).
A length above the checkpoint's original context says which RoPE it ran with (YaRN) in every table.
A file NAME.json.partial named on the command line (a folder's are not read) gives the rows an eval call
had finished when it was stopped; the commands list says so.
Dense rows of several calls at one length are the same computation: the first is used, and the spread of
the others is reported (a check that the calls are comparable). ΔRULER pairs instances: with the
NAME-preds.jsonl (or .partial) beside each RULER JSON, a configuration is compared with dense on the task
instances both scored (e.g. RULER_PER_TASK=1 rows against the full dense call), each task's mean first.

  python3 scripts/qwen-frontier.py --results docs/runs/DIR [...] --md OUT.md --json OUT.json --png OUT.png
         [--within-ruler 1] [--within-nll 0.01] [--title TEXT] [--grid-k LIST --grid-bsel LIST]
The Markdown also says what the grid holds: per length, mode, k and b_sel, which of the RULER, NLL and TTFT
rows are there.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

MODES = ("dense", "oracle", "indexer", "two-stage")  # two-stage: indexer rows with eval --refine


def fail(msg):
    print(f"qwen-frontier: {msg}", file=sys.stderr)
    sys.exit(1)


def write_atomic(path, data, binary=False):
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(path + ".tmp", "wb" if binary else "w") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError) as e:
        fail(f"{path}: unreadable JSON ({e})")


def nll_path(prov):
    """What ran an NLL file's sparse rows: "tc" (the GPU's bf16 tensor-core kernels, their own statistics: the
    provenance's `execution` names them), "fp32" (the GPU's fp32 support kernel: every GPU file before that
    field, and SPINDLE_STATS_FP32=1) or "cpu" (the CPU twin)."""
    if prov.get("device") != "cuda":
        return "cpu"
    ex = prov.get("execution") or ""
    return "tc" if "tensor cores" in ex and "SPINDLE_STATS_FP32" not in ex else "fp32"


def key(mode, k, bsel, refine=0):
    """A configuration: (mode, k, b_sel); an indexer row with two-stage supports (eval --refine) is mode
    "two-stage" (its candidates per block are in the row's "refine")."""
    if mode == "dense":
        return (mode, 0, 0)
    return ("two-stage" if refine else mode, int(k), int(bsel))


def stem(path):
    """NAME of NAME.json, or of NAME.json.partial (the rows an eval call had finished when it was stopped)."""
    return path[:-len(".json.partial")] if path.endswith(".json.partial") else os.path.splitext(path)[0]


def side(path, ext):
    """The seconds / command files device-qwen25coder.sh keeps next to each JSON."""
    p = stem(path) + ext
    return open(p).read().strip() if os.path.exists(p) else None


class Frontier:
    def __init__(self):
        self.nll, self.ruler, self.tasks, self.ttft = {}, {}, {}, {}
        self.dense_nll_spread, self.dense_ruler_spread = {}, {}
        self.rope, self.commands, self.models, self.devices, self.bench_env = {}, [], {}, {}, None
        # Dense TTFT per (ctx, bench call) and per (ctx, card): a speedup divides times of one card only.
        self.dense_by_cmd, self.dense_by_gpu, self.gpus = {}, {}, []
        self.task_files = {}
        self.inst = {}  # ctx -> config -> {(task, index): score}, from each RULER JSON's -preds.jsonl

    def model_at(self, L, model):
        if model and not self.models.get(L):
            self.models[L] = model

    def command(self, kind, path, cmd):
        secs = side(path, ".secs")
        self.commands.append({"kind": kind, "json": path, "command": cmd or side(path, ".cmd") or "?",
                              "seconds": int(secs) if secs and secs.isdigit() else None,
                              "partial": path.endswith(".partial")})
        return len(self.commands)

    def add_nll(self, path, rows):
        rows = [r for r in rows if "task" not in r and "mode" in r]
        if not rows:
            return
        prov = rows[0].get("provenance", {})
        cid = self.command("nll", path, prov.get("command"))
        for r in rows:
            L, kk = r["ctx"], key(r["mode"], r["k"], r["bsel"], r.get("refine", 0))
            if r.get("recent") or r.get("sinks"):
                continue
            self.model_at(L, prov.get("model"))
            dev = prov.get("device")
            if dev and prov.get("precision"):
                dev += f" ({prov['precision']})"
            self.devices.setdefault(("nll", L), dev)
            if kk in self.nll.setdefault(L, {}):
                if kk[0] == "dense":
                    self.dense_nll_spread.setdefault(L, [self.nll[L][kk]["nll"]]).append(r["nll"])
                continue
            self.nll[L][kk] = dict(r, cmd=cid, path=nll_path(prov))

    def add_ruler(self, path, rows):
        rows = [r for r in rows if "task" in r]
        if not rows:
            return
        prov = rows[0].get("provenance", {})
        cid = self.command("ruler", path, prov.get("command"))
        for r in rows:
            L, kk = r["ctx"], key(r["mode"], r["k"], r["bsel"], r.get("refine", 0))
            p = r.get("provenance", prov)
            self.rope.setdefault(L, p.get("rope"))
            self.model_at(L, p.get("model"))
            self.devices.setdefault(("ruler", L), p.get("device"))
            self.task_files.setdefault(L, (p.get("tasks_file"), p.get("tasks_sha256"), p.get("generator"),
                                           p.get("seeds"), p.get("template"), p.get("sentence_splitter")))
            if r["task"] == "average":
                if kk in self.ruler.setdefault(L, {}):
                    if kk[0] == "dense":
                        self.dense_ruler_spread.setdefault(L, [self.ruler[L][kk]["accuracy"]]).append(r["accuracy"])
                    continue
                self.ruler[L][kk] = dict(r, cmd=cid)
            else:
                self.tasks.setdefault(L, {}).setdefault(r["task"], {}).setdefault(kk, dict(r, cmd=cid))

    def add_ttft(self, path, doc):
        cid = self.command("ttft", path, None)
        self.bench_env = self.bench_env or doc.get("env")
        model = (doc.get("env") or {}).get("model")
        gpu = (doc.get("env") or {}).get("gpu") or "?"
        if gpu not in self.gpus:
            self.gpus.append(gpu)
        names = {"ttft_dense": "dense", "ttft_indexer": "indexer", "ttft_indexer_block": "indexer",
                 "ttft_oracle": "oracle", "ttft_oracle_block": "oracle", "ttft_indexer_refine": "two-stage",
                 "ttft_indexer_union": "indexer", "ttft_oracle_union": "oracle"}
        for r in doc.get("results", []):
            name = r.get("name")
            mode = names.get(name)
            if mode is None or "k" not in r:  # a run bench skipped (it names no configuration)
                continue
            kk = key(mode, r.get("k", 0), 1 if name in ("ttft_oracle", "ttft_oracle_union") else r.get("bsel", 0))
            # Per-query supports as unions of blocks (bench's indexer_union, oracle_union) are the path eval
            # --exec-block runs its RULER rows on: the same supports and attention, so that row's TTFT where timed.
            path = ("unions" if name in ("ttft_indexer_union", "ttft_oracle_union") else
                    "gathers" if name in ("ttft_indexer", "ttft_oracle") else None)
            entry = {"ms": r.get("ms_median"), "error": r.get("error"), "notes": r.get("notes"), "cmd": cid,
                     "reps": r.get("reps"), "run": name, "path": path, "gpu": gpu}
            if entry["ms"] is None and not entry["error"]:
                entry["error"] = "no time"
            if mode == "dense" and entry["ms"] is not None:
                self.dense_by_cmd[(r["ctx"], cid)] = entry["ms"]
                self.dense_by_gpu.setdefault((r["ctx"], gpu), entry["ms"])
            self.model_at(r["ctx"], model)
            cur = self.ttft.setdefault(r["ctx"], {}).get(kk)
            if (cur is None or (cur["ms"] is None and entry["ms"] is not None) or
                    (path == "unions" and cur["path"] != "unions" and entry["ms"] is not None)):
                self.ttft[r["ctx"]][kk] = entry

    def add_instances(self, path):
        """The per-instance scores of a RULER JSON, from the predictions file written beside it."""
        base = stem(path)
        for p in (base + "-preds.jsonl", base + "-preds.jsonl.partial"):
            if os.path.exists(p):
                break
        else:
            return
        for line in open(p):
            try:
                r = json.loads(line)
                kk = key(r["mode"], r["k"], r["bsel"], r.get("refine", 0))
                self.inst.setdefault(r["ctx"], {}).setdefault(kk, {}).setdefault((r["task"], r["index"]), r["score"])
            except (ValueError, KeyError, TypeError):
                fail(f"{p}: not a predictions file of spindle eval --tasks-file")

    def paired_druler(self, L, c):
        """ΔRULER of config c against dense on the same instances (the tasks both scored), RULER's way:
        each task's mean, then the mean over tasks; None without per-instance scores of both."""
        dense, mine = self.inst.get(L, {}).get(("dense", 0, 0)), self.inst.get(L, {}).get(c)
        if not dense or not mine:
            return None
        both = sorted(set(dense) & set(mine))
        if not both:
            return None
        per_task = {}
        for t, i in both:
            per_task.setdefault(t, []).append((mine[(t, i)], dense[(t, i)]))
        mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
        d_task = [mean([a - b for a, b in v]) for v in per_task.values()]
        delta = mean(d_task)
        dense_same = mean([mean([b for _, b in v]) for v in per_task.values()])
        return delta, len(both), dense_same, spread95(d_task)

    def one_each(self, L, c):
        """Whether every task of a RULER row was scored on one instance (from the per-instance scores)."""
        mine = self.inst.get(L, {}).get(c)
        return bool(mine) and len({t for t, _ in mine}) == len(mine)

    def lengths(self):
        return sorted(set(self.nll) | set(self.ruler) | set(self.ttft))

    def configs(self, L):
        ks = set(self.nll.get(L, {})) | set(self.ruler.get(L, {})) | set(self.ttft.get(L, {}))
        # k >= ctx keeps every key: such a row is dense under a sparse label (eval refuses it on text; a
        # RULER prompt, a little shorter than ctx, and bench run it), so it is left out.
        ks = {c for c in ks if c[0] == "dense" or c[1] < L}
        return sorted(ks, key=lambda c: (MODES.index(c[0]) if c[0] == "dense" else 1, c[1], c[2], MODES.index(c[0])))

    def dense_ttft(self, L, t):
        """The dense TTFT a time t is divided by: the same bench call's, else the first on the same card."""
        return self.dense_by_cmd.get((L, t["cmd"])) or self.dense_by_gpu.get((L, t.get("gpu")))

    def rows(self, ttft_note):
        out = []
        for L in self.lengths():
            dense_r = self.ruler.get(L, {}).get(("dense", 0, 0))
            for c in self.configs(L):
                n = self.nll.get(L, {}).get(c)
                r = self.ruler.get(L, {}).get(c)
                t = self.ttft.get(L, {}).get(c)
                row = {"ctx": L, "mode": c[0], "k": c[1], "bsel": c[2]}
                if n:
                    for m in ("nll", "dnll", "dnll_ci95", "logit_kl", "top1_agree", "mass_recall", "sparsity",
                              "n_seq", "n_scored"):
                        row[m] = n.get(m)
                    row["nll_cmd"], row["nll_path"] = n["cmd"], n["path"]
                if r:
                    row["ruler"], row["ruler_ci95"], row["ruler_n"] = r["accuracy"], r.get("accuracy_ci95"), r.get("n_seq")
                    row["ruler_s_per_task"] = r.get("seconds_per_task")
                    row["ruler_cmd"] = r["cmd"]
                    if c[0] != "dense":
                        d = self.paired_druler(L, c)
                        if d:
                            row["druler"], row["druler_pairs"], row["ruler_dense_same"], row["druler_ci95"] = d
                        elif dense_r and dense_r.get("n_seq") == r.get("n_seq"):
                            row["druler"] = r["accuracy"] - dense_r["accuracy"]
                    row["ruler_one_each"] = self.one_each(L, c)
                if t and t["ms"] is not None:
                    row["ttft_ms"], row["ttft_cmd"], row["ttft_gpu"] = t["ms"], t["cmd"], t.get("gpu")
                    # gathers: the path of eval without --exec-block (the NLL rows, RULER calls without _x)
                    if t["path"]:
                        how = "unions of blocks" if t["path"] == "unions" else "per-query gathers"
                        row["ttft_path"] = f"{how} (bench {t['run'][5:]})"
                    dense_ms = self.dense_ttft(L, t)
                    if dense_ms:
                        row["speedup"] = dense_ms / t["ms"]
                else:
                    row["ttft_note"] = (t["error"] if t else None) or (
                        "not timed in these runs" if self.ttft.get(L) else ttft_note)
                out.append(row)
        return out


def read(folders):
    fr = Frontier()
    files = []
    for d in folders:
        if os.path.isfile(d):
            files.append(d)
        else:
            files += sorted(glob.glob(os.path.join(d, "*.json")))
    for p in files:
        base = os.path.basename(p)
        if base.startswith("nll_"):
            fr.add_nll(p, load(p))
        elif base.startswith("ruler_"):
            fr.add_ruler(p, load(p))
            fr.add_instances(p)
        elif base.startswith("ttft_"):
            fr.add_ttft(p, load(p))
    if not fr.lengths():
        fail("no nll_*.json, ruler_*.json or ttft_*.json in " + ", ".join(folders))
    for L, m in fr.models.items():  # NLL rows do not record the RoPE: the YaRN folder says it by its name
        if not fr.rope.get(L) and m and "yarn" in m.lower():
            fr.rope[L] = f"YaRN (model folder {m}; the NLL rows do not record the RoPE)"
    return fr


def f(v, d=4, sign=False):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:+.{d}f}" if sign else f"{v:.{d}f}"


def gpu_name(g):
    """A card's short name (H100, H200, ...) from bench's env.gpu, for the table's TTFT cells."""
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", g or "")
    return m.group(1) if m else (g or "?")


def ctx_name(L):
    return f"{L // 1024}K" if L % 1024 == 0 else str(L)


def yarn(rope):
    return bool(rope) and rope.lower().startswith("yarn")


def spread95(xs):
    """1.96 · sample sd / √n of xs (None below two values)."""
    n = len(xs)
    if n < 2:
        return None
    m = sum(xs) / n
    return 1.96 * math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1) / n)


def ruler_pm(r):
    """RULER average ± eval's 95% half-width; "± –" where eval's is 0 because every task has one instance
    (no within-task spread to estimate it from)."""
    if r.get("ruler_ci95") or not r.get("ruler_one_each"):
        return f"{r['ruler']:.1f} ± {r.get('ruler_ci95') or 0:.1f}"
    return f"{r['ruler']:.1f} ± –"


def verdict(rows, fr, within_ruler, within_nll):
    """The sentences of the issue's 'Done when', from the numbers."""
    out = []
    for L in fr.lengths():
        rs = [r for r in rows if r["ctx"] == L]
        d = next((r for r in rs if r["mode"] == "dense"), {})
        ix = [r for r in rs if r["mode"] == "indexer"]
        head = f"- **{ctx_name(L)}**" + (f" ({fr.rope.get(L)})" if yarn(fr.rope.get(L)) else "") + ": "
        parts = []
        if d.get("ruler") is not None:
            parts.append(f"dense RULER {ruler_pm(d)}")
        if not ix:
            out.append(head + "; ".join(parts + ["no indexer rows"]) + ".")
            continue
        both = [r for r in ix if r.get("druler") is not None and r.get("dnll") is not None]
        ok = [r for r in both if r["druler"] >= -within_ruler and r["dnll"] <= within_nll]
        sp = lambda r: r.get("speedup") or 0.0  # noqa: E731
        cfg = lambda r: f"k {r['k']}, b_sel {r['bsel']}"  # noqa: E731
        if not both:
            have = "RULER" if any(r.get("druler") is not None for r in ix) else "NLL" if any(
                r.get("dnll") is not None for r in ix) else None
            parts.append(f"the indexer has {'only ' + have + ' rows' if have else 'no quality rows'}: "
                         "no joint verdict")
        elif ok:
            best = max(ok, key=sp)
            s = (f"the indexer is within {within_ruler:g} RULER point and {within_nll:g} nats/token of dense at "
                 f"{len(ok)} of {len(both)} configurations ({'; '.join(cfg(r) for r in ok)})")
            if best.get("speedup"):
                s += (f"; the fastest of them, {cfg(best)}, at a TTFT speedup of {best['speedup']:.2f}× "
                      f"(ΔRULER {best['druler']:+.1f}, ΔNLL {best['dnll']:+.4f})")
            else:
                s += "; TTFT not measured for them"
            parts.append(s)
        else:
            near = min(both, key=lambda r: max(-r["druler"] / within_ruler, r["dnll"] / within_nll))
            parts.append(f"the indexer is not within {within_ruler:g} RULER point and {within_nll:g} nats/token "
                         f"of dense at any of {len(both)} configurations; closest {cfg(near)}: ΔRULER "
                         f"{near['druler']:+.1f}, ΔNLL {near['dnll']:+.4f}"
                         + (f", TTFT speedup {near['speedup']:.2f}×" if near.get("speedup") else ""))
        # Configurations with a RULER row but no NLL row: the RULER half of the verdict alone.
        only_r = [r for r in ix if r.get("druler") is not None and r.get("dnll") is None]
        r_ok = [r for r in only_r if r["druler"] >= -within_ruler]
        if only_r:
            s = (f"RULER alone (no NLL row): within {within_ruler:g} point of dense at {len(r_ok)} of "
                 f"{len(only_r)} configurations" + (f" ({'; '.join(cfg(r) for r in r_ok)})" if r_ok else ""))
            timed = [r for r in r_ok if r.get("speedup")]
            if timed:
                best = max(timed, key=sp)
                s += f", the fastest timed {cfg(best)} at {best['speedup']:.2f}× (ΔRULER {best['druler']:+.1f})"
            elif r_ok:
                s += ", none of them timed"
            parts.append(s)
        fastest = max((r for r in ix if r.get("speedup")), key=sp, default=None)
        if fastest:
            parts.append(f"the indexer's largest TTFT speedup in the grid is {fastest['speedup']:.2f}× "
                         f"({cfg(fastest)})")
        out.append(head + "; ".join(parts) + ".")
    return out


def coverage(fr, ks, bsels):
    """What the grid holds: per length and sparse mode, for each k of ks a cell of one mark per b_sel of
    bsels — the letters R (a RULER row), N (an NLL row), T (a TTFT time) present, '·' for none — and the
    count of (length, mode, k, b_sel) with all three."""
    def marks(L, c):
        m = ("R" if c in fr.ruler.get(L, {}) else "") + ("N" if c in fr.nll.get(L, {}) else "")
        t = fr.ttft.get(L, {}).get(c)
        return m + ("T" if t and t.get("ms") is not None else "") or "·"
    o = ["| ctx | mode | " + " | ".join(f"k {k}" for k in ks) + " |", "|---|---|" + "---|" * len(ks)]
    full = total = 0
    for L in fr.lengths():
        o.append(f"| {ctx_name(L)} | dense | {marks(L, ('dense', 0, 0))} |" + " |" * (len(ks) - 1))
        for mode in ("oracle", "indexer"):
            cells = []
            for k in ks:
                if k >= L:  # every key: not a sparse configuration
                    cells.append("k ≥ ctx")
                    continue
                ms = [marks(L, (mode, k, b)) for b in bsels]
                full += sum(m == "RNT" for m in ms)
                total += len(ms)
                cells.append(" / ".join(ms))
            o.append(f"| {ctx_name(L)} | {mode} | " + " | ".join(cells) + " |")
    return o, full, total


def markdown(rows, fr, args):
    o = []
    if args.title:
        o += [f"### {args.title}", ""]
    models = sorted({m for m in fr.models.values() if m})
    env = fr.bench_env or {}
    o.append(f"Model: {', '.join(f'`{m}`' for m in models) or '?'}. Quality and TTFT per (length, mode, k, b_sel) "
             "from the calls listed below (`spindle eval` on held-out text: NLL rows; `spindle eval --tasks-file`: "
             "RULER rows; `spindle bench --model`: TTFT).")
    o.append("")
    if fr.bench_env:
        how = (f"{env.get('precision')}; random indexer weights of d_I {env.get('d_index')} (the timing does not "
               "depend on training).")
        if len(fr.gpus) > 1:
            o.append(f"TTFT: median of timed repeats with CUDA events after a warm-up, on {len(fr.gpus)} kinds of "
                     f"card ({'; '.join(f'{gpu_name(g)}: {g}' for g in fr.gpus)}): each time is marked with its card, "
                     "and its speedup divides the dense TTFT of the same bench call (or, where that call timed no "
                     "dense run, the first dense TTFT at that length on the same card) by it — never times of two "
                     "cards. " + how)
        else:
            o.append(f"TTFT: {env.get('gpu')}, median of timed repeats with CUDA events after a warm-up; " + how
                     + " Speedup = dense TTFT / TTFT at the same length.")
    else:
        o.append(f"TTFT: {args.ttft_note}.")
    devs = sorted({f"{k[0]}: {v}" for k, v in fr.devices.items() if v})
    if devs:
        o.append("")
        o.append("Quality runs: " + "; ".join(devs) + ".")
    o.append("")
    o.append("| ctx | RoPE |")
    o.append("|---|---|")
    for L in fr.lengths():
        m = fr.models.get(L) or ""
        rope = fr.rope.get(L) or (f"not recorded (no RULER row); the model folder `{m}`" +
                                  (" is the YaRN variant" if "yarn" in m.lower() else ""))
        o.append(f"| {ctx_name(L)} | {rope}{' — **YaRN**' if yarn(rope) else ''} |")
    o.append("")
    o.append("ΔNLL vs dense of the same call in nats/token (± 95%); RULER: the mean of the task means, 0–100 "
             "(± 95%), ΔRULER vs dense on the same task instances (paired from the predictions files where "
             "they are there: a row scored on fewer instances than dense is compared on those; its ± is 1.96 · "
             "sd / √n of the per-task differences, the tasks as the sample); a RULER average \"± –\" has one "
             "instance a task, so no within-task spread to estimate its interval from. C-numbers name the "
             "commands below. A per-query TTFT marked (unions) ran its supports as unions of blocks of queries "
             "on tensor cores, the path of the RULER calls with --exec-block (their names carry _x); (gathers) "
             "marks one timed with per-query gathers (bench's `indexer` / `oracle` runs), the path of the NLL "
             "and RULER calls without --exec-block. A configuration with k ≥ ctx keeps every key "
             "(dense under a sparse label): its rows are left out.")
    o.append("")
    paths = {r["nll_path"] for r in rows if r.get("nll_path") and r["mode"] != "dense"}
    mixed = len(paths) > 1
    tc_path = ("the GPU's bf16 tensor-core kernels, the ones the TTFT times, with the recall from their own rows "
               "(block-shared rows, and per-query rows as unions of blocks with --exec-block: file names _x")
    if paths == {"tc"}:
        o.append(f"Every sparse NLL row ran on {tc_path}; docs/gpu.md, \"Statistics on the tensor cores\").")
        o.append("")
    elif mixed:
        o.append(f"The NLL rows come from two paths, marked in the NLL column: (tc) {tc_path}); (fp32) the fp32 "
                 "support kernel over the bf16 pass's q, k (every earlier GPU file, and SPINDLE_STATS_FP32=1). On "
                 "the row measured both ways (64K, the oracle at k 2048, b_sel 64) they agree to 10⁻⁴ in NLL and "
                 "to the printed digit in logit KL and recall (docs/gpu.md, \"Statistics on the tensor cores\").")
        o.append("")
    o.append("| ctx | mode | k | b_sel | NLL | ΔNLL | logit KL | top-1 | mass recall | sparsity | RULER | ΔRULER | "
             "TTFT (ms) | speedup | from |")
    o.append("|" + "---|" * 15)
    for r in rows:
        y = " (YaRN)" if yarn(fr.rope.get(r["ctx"])) else ""
        k = "–" if r["mode"] == "dense" else str(r["k"])
        s = "–" if r["mode"] == "dense" else str(r["bsel"])
        dn = f(r.get("dnll"), sign=True) + (f" ± {r['dnll_ci95']:.4f}" if r.get("dnll_ci95") is not None
                                            and r["mode"] != "dense" else "")
        ru = ruler_pm(r) if r.get("ruler") is not None else "–"
        dr = f(r.get("druler"), 1, True) if r["mode"] != "dense" else "–"
        if r.get("druler_ci95") is not None and r["mode"] != "dense":
            dr += f" ± {r['druler_ci95']:.1f}"
        if r.get("druler_pairs") is not None and r["mode"] != "dense":
            dr += f" (paired, {r['druler_pairs']} instances; dense on them {r['ruler_dense_same']:.1f})"
        t = f(r.get("ttft_ms"), 1) if r.get("ttft_ms") is not None else (r.get("ttft_note") or "–")
        if r.get("ttft_path"):
            t += " (unions)" if r["ttft_path"].startswith("unions") else " (gathers)"
        if r.get("ttft_ms") is not None and len(fr.gpus) > 1:
            t += f" ({gpu_name(r.get('ttft_gpu'))})"
        sp = f"{r['speedup']:.2f}×" if r.get("speedup") else "–"
        src = ", ".join(f"C{r[c]}" for c in ("nll_cmd", "ruler_cmd", "ttft_cmd") if r.get(c))
        nl = f(r.get("nll")) + (f" ({r['nll_path']})" if mixed and r.get("nll_path") and r["mode"] != "dense" else "")
        o.append(f"| {ctx_name(r['ctx'])}{y} | {r['mode']} | {k} | {s} | {nl} | "
                 f"{dn if r['mode'] != 'dense' else '–'} | {f(r.get('logit_kl'))} | {f(r.get('top1_agree'))} | "
                 f"{f(r.get('mass_recall'))} | {f(r.get('sparsity'))} | {ru} | {dr} | {t} | {sp} | {src or '–'} |")
    o.append("")
    o.append("#### Where the indexer is within "
             f"{args.within_ruler:g} RULER point and {args.within_nll:g} nats of dense")
    o.append("")
    o += verdict(rows, fr, args.within_ruler, args.within_nll)
    o.append("")
    spread = [(L, v) for L, v in fr.dense_nll_spread.items() if max(v) - min(v) > 0] + \
             [(L, v) for L, v in fr.dense_ruler_spread.items() if max(v) - min(v) > 0]
    if fr.dense_nll_spread or fr.dense_ruler_spread:
        o.append("Dense rows repeated across calls: " + "; ".join(
            f"{ctx_name(L)} NLL {min(v):.6f}–{max(v):.6f} ({len(v)} calls)" for L, v in fr.dense_nll_spread.items())
            + ("; " if fr.dense_nll_spread and fr.dense_ruler_spread else "") + "; ".join(
            f"{ctx_name(L)} RULER {min(v):.1f}–{max(v):.1f} ({len(v)} calls)" for L, v in fr.dense_ruler_spread.items())
            + (" (identical)." if not spread else " (they differ: the table uses the first)."))
        o.append("")
    ks = [int(v) for v in args.grid_k.split(",")]
    bsels = [int(v) for v in args.grid_bsel.split(",")]
    cov, full, total = coverage(fr, ks, bsels)
    o.append("#### What the grid holds")
    o.append("")
    o.append(f"Per configuration of k ∈ {{{', '.join(map(str, ks))}}} × b_sel ∈ {{{', '.join(map(str, bsels))}}} "
             f"(a cell: b_sel {' / '.join(map(str, bsels))}): R a RULER row, N an NLL row, T a TTFT time, · none. "
             f"{full} of {total} sparse configurations have all three.")
    o.append("")
    o += cov
    o.append("")
    if fr.tasks:
        o.append("#### RULER per task")
        o.append("")
        for L in sorted(fr.tasks):
            cfgs = sorted({c for t in fr.tasks[L].values() for c in t if c[0] == "dense" or c[1] < L},
                          key=lambda c: (c[0] != "dense", c[1], c[2], MODES.index(c[0])))
            names = ["dense" if c[0] == "dense" else f"{c[0]} k{c[1]} b{c[2]}" for c in cfgs]
            tf = fr.task_files.get(L)
            o.append(f"{ctx_name(L)}{' (' + fr.rope[L] + ')' if yarn(fr.rope.get(L)) else ''}: tasks file "
                     f"`{tf[0]}` (sha256 {str(tf[1])[:12]}…, {', '.join(tf[2] or [])}, seeds {tf[3]})" if tf else "")
            o.append("")
            o.append("| task | n | " + " | ".join(names) + " |")
            o.append("|---|---|" + "---|" * len(names))
            for task in sorted(fr.tasks[L]):
                cells = []
                n = None
                for c in cfgs:
                    r = fr.tasks[L][task].get(c)
                    n = n or (r or {}).get("n_seq")
                    cells.append(f"{r['accuracy']:.0f} ± {r.get('accuracy_ci95') or 0:.0f}" if r else "–")
                o.append(f"| {task} | {n or '–'} | " + " | ".join(cells) + " |")
            o.append("")
    o.append("#### Commands")
    o.append("")
    for i, c in enumerate(fr.commands, 1):
        o.append(f"- C{i} ({c['kind']}, `{os.path.basename(c['json'])}`"
                 + (f", {c['seconds']} s" if c["seconds"] is not None else "")
                 + (", stopped: the rows it had finished" if c.get("partial") else "") + f"): `{c['command']}`")
    return "\n".join(o) + "\n"


def plot(rows, fr, path, title):
    try:
        import matplotlib
    except ImportError:
        print(f"qwen-frontier: matplotlib missing: no plot ({path})", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timed = any(r.get("speedup") for r in rows if r["mode"] != "dense")
    xkey = "speedup" if timed else "sparsity"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    lengths = fr.lengths()
    bsels = sorted({r["bsel"] for r in rows if r["mode"] != "dense"})
    cmap = plt.get_cmap("tab10")
    styles = ["-", "--", ":", "-."]
    for ax, (ykey, ylabel) in zip(axes, (("druler", "ΔRULER average vs dense (points)"),
                                          ("dnll", "ΔNLL vs dense (nats/token)"))):
        for li, L in enumerate(lengths):
            color = cmap(li % 10)
            lab = ctx_name(L) + (" YaRN" if yarn(fr.rope.get(L)) else "")
            # The indexer's rows through its k values (a line per b_sel), the two-stage rows (eval --refine:
            # per-query supports executed block-wise) as markers, the per-query oracle as markers.
            for mode, dy in (("indexer", 2), ("two-stage", -8)):
                for bi, b in enumerate(bsels):
                    pts = sorted((r[xkey], r[ykey], r["k"]) for r in rows if r["ctx"] == L and r["mode"] == mode
                                 and r["bsel"] == b and r.get(xkey) is not None and r.get(ykey) is not None)
                    if not pts:
                        continue
                    look = (dict(ls=styles[bi % 4], marker="^") if mode == "indexer"
                            else dict(ls="", marker="D", mfc="none"))
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, label=f"{mode} {lab}, b_sel {b}",
                            **look)
                    for x, y, k in pts:
                        ax.annotate(f"k{k}", (x, y), fontsize=6, xytext=(3, dy), textcoords="offset points")
            ox = [(r[xkey], r[ykey]) for r in rows if r["ctx"] == L and r["mode"] == "oracle" and r["bsel"] == 1
                  and r.get(xkey) is not None and r.get(ykey) is not None]
            if ox:
                ax.plot([p[0] for p in ox], [p[1] for p in ox], "s", mfc="none", color=color,
                        label=f"oracle {lab}, per query")
        ax.axhline(0, color="black", lw=0.8)
        if ykey == "druler":
            ax.axhline(-1, color="grey", lw=0.8, ls=":")
        else:
            ax.axhline(0.01, color="grey", lw=0.8, ls=":")
            ax.set_yscale("symlog", linthresh=0.01)
        if timed:
            ax.set_xscale("log", base=2)
            ax.axvline(1, color="grey", lw=0.8, ls=":")
            ax.set_xlabel("TTFT speedup vs dense")
        else:
            ax.set_xlabel("sparsity (TTFT not measured)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    legend = {}  # every series of either panel, once
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(lab, h)
    handles, labels = list(legend.values()), list(legend)
    if handles:
        axes[1].legend(handles, labels, fontsize=6, loc="best")
    fig.suptitle(title or "Quality against TTFT speedup", fontsize=10)
    fig.tight_layout()
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
    fig.savefig(path + ".tmp", dpi=110, format="png")
    os.replace(path + ".tmp", path)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", nargs="+", required=True, help="folders (or files) holding the stages' JSONs")
    ap.add_argument("--md", required=True)
    ap.add_argument("--json")
    ap.add_argument("--png")
    ap.add_argument("--title", default="")
    ap.add_argument("--within-ruler", type=float, default=1.0, help="RULER points (default 1)")
    ap.add_argument("--within-nll", type=float, default=0.01, help="nats/token (default 0.01)")
    ap.add_argument("--grid-k", default="256,512,1024,2048,4096", help="the k of the coverage table")
    ap.add_argument("--grid-bsel", default="1,16,64", help="the b_sel of the coverage table")
    ap.add_argument("--ttft-note", default="not measured (no ttft_*.json: spindle bench runs on a GPU only)")
    args = ap.parse_args()
    fr = read(args.results)
    rows = fr.rows(args.ttft_note)
    body = markdown(rows, fr, args)
    if args.png:
        drawn = plot(rows, fr, args.png, args.title)
        if drawn:
            rel = os.path.relpath(os.path.abspath(args.png), os.path.dirname(os.path.abspath(args.md)))
            body += f"\n![quality against TTFT speedup]({rel})\n"
    write_atomic(args.md, body)
    if args.json:
        clean = lambda v: None if isinstance(v, float) and not math.isfinite(v) else v  # noqa: E731
        doc = {"schema": "spindle-qwen-frontier/1", "rows": [{k: clean(v) for k, v in r.items()} for r in rows],
               "rope": {str(L): v for L, v in fr.rope.items()}, "bench_env": fr.bench_env,
               "commands": fr.commands, "verdict": verdict(rows, fr, args.within_ruler, args.within_nll)}
        write_atomic(args.json, json.dumps(doc, indent=1) + "\n")
    print(f"qwen-frontier: {len(rows)} rows over {len(fr.lengths())} length(s) -> {args.md}", file=sys.stderr)


if __name__ == "__main__":
    main()
