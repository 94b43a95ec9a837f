#!/usr/bin/env bash
# scripts/device-qwen25coder.sh grid on the CPU twin with SmolLM2-135M: the quality rows of a length as
# background jobs side by side (at most GRID_JOBS at once), their results gathered in OUT; a second run
# keeps every finished call; a budget too short for a job starts none; a bad length is refused; on a card
# short of memory the jobs wait for room.
# Exits 77 when the model is absent.
# Usage: test_device_grid.sh SPINDLE MODEL_DIR WORK
set -u
spindle=$1 model=$2 work=$3
[ -d "$model" ] || { echo "skipped: $model is absent"; exit 77; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rm -rf "$work" && mkdir -p "$work/tasks"
fails=0 passes=0
check() { if eval "$2"; then echo "ok: $1"; passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

# Two tiny RULER lines (the format of scripts/ruler-tasks.py) and a held-out text of > 1,024 tokens.
. "$(dirname "${BASH_SOURCE[0]}")/ruler_probe.sh"
ids=$(probe_ids "$spindle" "$model" "$work")
for t in a b; do
    printf '{"task": "%s", "metric": "string_match_all", "ctx": 1024, "index": 0, "input_ids": [%s], "outputs": ["4417"], "max_new_tokens": 8, "stop_ids": [2], "seed": 1, "generator": "test", "sentence_splitter": "none", "template": "chat"}\n' "$t" "$ids"
done >"$work/tasks/tasks_1k.jsonl"
for i in $(seq 1 120); do echo "Line $i of a held-out text: the indexer ranks keys, the oracle keeps the mass of each query."; done >"$work/heldout.txt"

run() {  # OUT BUDGET_S [LENS]
    env DEVICE=cpu SPINDLE="$spindle" MODEL="$model" MODEL_YARN="$work/yarn" TASKS="$work/tasks" HELDOUT_TEXT="$work/heldout.txt" \
        STATE="$work/state" OUT="$1" GRID_K=32,64 GRID_BSEL=1,16 NLL_POSITIONS=1024 BUDGET_S="$2" GRID_TTFT_S=5 GRID_JOBS=2 \
        bash "$root/scripts/device-qwen25coder.sh" grid "${3:-1024}"
}
(cd "$root" && run "$work/out1" 600) >"$work/log1" 2>&1
rc=$?
check "grid runs (exit 0)" "[ $rc = 0 ]"
check "every job's result is in OUT: dense RULER, RULER and NLL at k 32 and 64" \
    "[ -s $work/out1/ruler_ctx1024_dense.json ] && [ -s $work/out1/ruler_ctx1024_k32_b1-16.json ] && [ -s $work/out1/ruler_ctx1024_k64_b1-16.json ] && [ -s $work/out1/nll_ctx1024_n1_k32_b1-16.json ] && [ -s $work/out1/nll_ctx1024_n1_k64_b1-16.json ]"
check "five jobs started, each ended with status 0" \
    "[ \$(grep -c ' started (' $work/log1) = 5 ] && [ \$(grep -c 'grid: g1024_[a-z0-9_]*: 0: ' $work/log1) = 5 ]"
check "never more than GRID_JOBS (2) running at once" "python3 - '$work/state/bg' <<'PY'
import glob, os, sys
spans = []
for pid in glob.glob(os.path.join(sys.argv[1], 'g1024_*.pid')):
    rc = pid[:-4] + '.rc'
    spans.append((os.stat(pid).st_mtime, os.stat(rc).st_mtime))
peak = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
sys.exit(0 if len(spans) == 5 and peak <= 2 else print(len(spans), peak) or 1)
PY"
check "the dense RULER row scores the answer" "python3 - '$work/out1/ruler_ctx1024_dense.json' <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r['mode'] == 'dense' and r['task'] == 'average']
sys.exit(0 if len(rows) == 1 and rows[0]['accuracy'] in (0, 100) else print(rows) or 1)
PY"
(cd "$root" && run "$work/out2" 600) >"$work/log2" 2>&1
check "a second run keeps every finished call" "[ \$? = 0 ] && [ \$(grep -c 'kept from an earlier call' $work/state/bg/g1024_*.log | awk -F: '{s += \$2} END {print s}') = 5 ]"
(cd "$root" && run "$work/out3" 20) >"$work/log3" 2>&1
check "a budget too short for a job starts none" "grep -q 'budget reached before g1024_dense' $work/log3 && ! grep -q ' started (' $work/log3"
(cd "$root" && run "$work/out4" 600 12x) >"$work/log4" 2>&1
check "a bad length is refused (exit 2)" "[ \$? = 2 ] && grep -q 'not a length: 12x' $work/log4"
# A card short of memory (an nvidia-smi that reports 1,000 MiB free, under GRID_FREE_MIB): the jobs run one
# at a time although GRID_JOBS allows two.
mkdir -p "$work/smi" && printf '#!/bin/sh\necho 1000\n' >"$work/smi/nvidia-smi" && chmod +x "$work/smi/nvidia-smi"
rm -rf "$work/state/bg" "$work/state/res"
(cd "$root" && PATH="$work/smi:$PATH" GRID_FREE_MIB=5000 GRID_RAMP_S=0 run "$work/out5" 600) >"$work/log5" 2>&1
check "with the card short of memory, one job at a time" "[ \$? = 0 ] && python3 - '$work/state/bg' <<'PY'
import glob, os, sys
spans = []
for pid in glob.glob(os.path.join(sys.argv[1], 'g1024_*.pid')):
    spans.append((os.stat(pid).st_mtime, os.stat(pid[:-4] + '.rc').st_mtime))
peak = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
sys.exit(0 if len(spans) == 5 and peak == 1 else print(len(spans), peak) or 1)
PY"
# The NLL stage starts each window with the BOS where the model's tokenizer sets add_bos_token (Gemma 3),
# and not otherwise (this model: false).
mkdir -p "$work/bosm" && for f in config.json model.safetensors tokenizer.json; do
    ln -sf "$(cd "$model" && pwd)/$f" "$work/bosm/$f"; done
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['add_bos_token']=True; json.dump(c, open(sys.argv[2], 'w'))" \
    "$model/tokenizer_config.json" "$work/bosm/tokenizer_config.json"
nll() {  # MODEL OUT
    env DEVICE=cpu SPINDLE="$spindle" MODEL="$1" TASKS="$work/tasks" HELDOUT_TEXT="$work/heldout.txt" \
        STATE="$work/state-$(basename "$2")" OUT="$2" NLL_POSITIONS=1024 BUDGET_S=300 bash "$root/scripts/device-qwen25coder.sh" nll 1024 32 1
}
(cd "$root" && nll "$work/bosm" "$work/out6" && nll "$model" "$work/out7") >"$work/log6" 2>&1
check "nll: --bos for a model whose tokenizer sets add_bos_token, not for one that does not" \
    "[ \$? = 0 ] && grep -q -- ' --bos ' $work/out6/nll_ctx1024_n1_k32_b1.cmd && ! grep -q -- '--bos' $work/out7/nll_ctx1024_n1_k32_b1.cmd && python3 -c \"import json,sys; sys.exit(json.load(open(sys.argv[1]))[0]['provenance']['window_bos'] < 0)\" $work/out6/nll_ctx1024_n1_k32_b1.json"
# The train stage likewise: its windows start with the BOS there (train --bos, a run folder of its own).
(cd "$root" && env DEVICE=cpu SPINDLE="$spindle" MODEL="$work/bosm" TASKS="$work/tasks" TRAIN_TEXT="$work/heldout.txt" \
    HELDOUT_TEXT="$work/heldout.txt" STATE="$work/state-train" OUT="$work/out8" TRAIN_CTX=64 EVAL_EVERY=2 \
    BUDGET_S=300 EXPORT_S=20 bash "$root/scripts/device-qwen25coder.sh" train 2) >"$work/log8" 2>&1
check "train: --bos for that model, in a run folder named -bos" \
    "[ \$? = 0 ] && grep -q '\"bos_token_id\"' $work/state-train/run-ctx64-steps2-bos/config.json && grep -q -- 'train .* --bos' $work/log8"
echo "test_device_grid: $passes passed, $fails failed"
[ $fails = 0 ]
