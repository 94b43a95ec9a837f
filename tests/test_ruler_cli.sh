#!/usr/bin/env bash
# spindle eval --tasks-file on SmolLM2-135M: a tiny tasks file, the greedy
# answers (--predictions), then the same prompts with references chosen from
# those answers, so each row's RULER score is known: a reference the answer
# holds scores 100, one it does not 0, string_match_all half of two. Plus the
# usage refusals. Exits 77 when the model is absent.
# Usage: test_ruler_cli.sh SPINDLE MODEL_DIR WORK
set -u
spindle=$1 model=$2 work=$3
[ -d "$model" ] || { echo "skipped: $model is absent"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
fails=0 passes=0
check() { if eval "$2"; then echo "ok: $1"; passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

. "$(dirname "${BASH_SOURCE[0]}")/ruler_probe.sh"
ids=$(probe_ids "$spindle" "$model" "$work")
line() {  # task metric outputs-json
    printf '{"task": "%s", "metric": "%s", "ctx": 64, "index": 0, "input_ids": [%s], "outputs": %s, "max_new_tokens": 12, "stop_ids": [2], "seed": 1, "generator": "test", "sentence_splitter": "none", "template": "chat"}\n' "$1" "$2" "$ids" "$3"
}
line probe string_match_all '["x"]' >"$work/t1.jsonl"
"$spindle" eval --model "$model" --tasks-file "$work/t1.jsonl" --json "$work/r1.json" --predictions "$work/p1.jsonl" 2>"$work/e1"
check "eval --tasks-file runs" "[ $? = 0 ] && [ -s $work/r1.json ] && [ -s $work/r1.md ]"
pred=$(python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['pred'])" "$work/p1.jsonl")
check "the greedy answer is not empty" "[ -n \"\$pred\" ]"
word=$(python3 -c "import sys; w=sys.argv[1].split(); print(max(w, key=len).upper())" "$pred")
{
    line hit string_match_all "[\"$word\"]"
    line miss string_match_all '["zq-never-said-xk"]'
    line half string_match_all "[\"$word\", \"zq-never-said-xk\"]"
    line part string_match_part "[\"zq-never-said-xk\", \"$word\"]"
} >"$work/t2.jsonl"
"$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --k 8 --bsel 1 --json "$work/r2.json" 2>"$work/e2"
check "eval with an oracle row runs" "[ $? = 0 ]"
check "scores: hit 100, miss 0, half 50, part 100, average 62.5 (dense)" "python3 - '$work/r2.json' <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r['mode'] == 'dense']
got = {r['task']: r['accuracy'] for r in rows}
want = {'hit': 100, 'miss': 0, 'half': 50, 'part': 100, 'average': 62.5}
sys.exit(0 if got == want else print(got) or 1)
PY"
check "rows: dense and oracle k 8, each with its provenance" "python3 - '$work/r2.json' <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
modes = sorted({(r['mode'], r['k'], r['bsel']) for r in rows})
p = rows[0]['provenance']
ok = modes == [('dense', 0, 0), ('oracle', 8, 1)] and p['generator'] == ['test'] and p['seeds'] == [1]
ok = ok and len(rows) == 10 and all(r['n_seq'] == (4 if r['task'] == 'average' else 1) for r in rows)
sys.exit(0 if ok else print(modes, p) or 1)
PY"
check "rows: each instance's time split into its prefill and its decoding (both > 0, their sum within the whole)" "python3 - '$work/r2.json' <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
bad = [r for r in rows if not (r['prefill_seconds_per_task'] > 0 and r['decode_seconds_per_task'] >= 0
       and r['prefill_seconds_per_task'] + r['decode_seconds_per_task'] <= r['seconds_per_task'] + 1e-6)]
sys.exit(0 if not bad else print(bad[0]) or 1)
PY"
# The GPU twin: on a machine without one (or a build without CUDA) a clear
# refusal (exit 1); with one, the same greedy answers as the CPU twin (fp32).
"$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --k 8 --bsel 1 --json "$work/r3.json" \
    --predictions "$work/p3.jsonl" --device cuda 2>"$work/e3"
rc3=$?
if [ $rc3 = 0 ]; then
    "$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --k 8 --bsel 1 --json "$work/r2p.json" \
        --predictions "$work/p2.jsonl" 2>/dev/null
    check "--device cuda: the same answers and scores as the CPU twin" "python3 - '$work/p2.jsonl' '$work/p3.jsonl' '$work/r2p.json' '$work/r3.json' <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
sa = [(r['mode'], r['task'], r['accuracy']) for r in json.load(open(sys.argv[3]))]
sb = [(r['mode'], r['task'], r['accuracy']) for r in json.load(open(sys.argv[4]))]
ok = [x['pred'] for x in a] == [x['pred'] for x in b] and sa == sb
sys.exit(0 if ok else print([x['pred'] for x in a], [x['pred'] for x in b]) or 1)
PY"
else
    check "--device cuda without a usable GPU: refused (exit 1) with the reason" \
        "[ $rc3 = 1 ] && grep -qE 'built without CUDA|no usable GPU' $work/e3 && [ ! -e $work/r3.json ]"
fi
"$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --json "$work/r3.json" --bsel 4 2>"$work/e4"
check "--bsel without --k is refused (exit 2)" "[ $? = 2 ]"
# --modes: only the rows named, the same scores as in the run with every row.
"$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --k 8 --bsel 1 --modes oracle --json "$work/r6.json" \
    --predictions "$work/p6.jsonl" 2>"$work/e6"
check "--modes oracle: oracle rows only, scores and answers as in the full run" "[ $? = 0 ] && python3 - '$work/r2.json' '$work/r6.json' '$work/p6.jsonl' <<'PY'
import json, sys
full = [(r['task'], r['accuracy']) for r in json.load(open(sys.argv[1])) if r['mode'] == 'oracle']
only = json.load(open(sys.argv[2]))
preds = [json.loads(l) for l in open(sys.argv[3])]
ok = {r['mode'] for r in only} == {'oracle'} and [(r['task'], r['accuracy']) for r in only] == full and len(preds) == 4
sys.exit(0 if ok else print(full, only) or 1)
PY"
check "a finished run leaves no .partial files" "[ ! -e $work/r6.json.partial ] && [ ! -e $work/r6.md.partial ] && [ ! -e $work/p6.jsonl.partial ]"
# A run stopped after its first configuration (as a kill at a time limit would): no result, and
# the .partial files hold that configuration's rows and answers, the same as the full run's.
"$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --k 8 --bsel 1 --json "$work/r8.json" \
    --predictions "$work/p8.jsonl" --stop-after 1 2>"$work/e8"
check "--stop-after 1: no result, the dense rows and answers in the .partial files" "[ ! -e $work/r8.json ] && [ ! -e $work/p8.jsonl ] && [ -s $work/r8.md.partial ] && python3 - '$work/r2.json' '$work/r8.json.partial' '$work/p8.jsonl.partial' <<'PY'
import json, sys
full = [(r['task'], r['accuracy']) for r in json.load(open(sys.argv[1])) if r['mode'] == 'dense']
part = json.load(open(sys.argv[2]))
preds = [json.loads(l) for l in open(sys.argv[3])]
ok = {r['mode'] for r in part} == {'dense'} and [(r['task'], r['accuracy']) for r in part] == full
ok = ok and len(preds) == 4 and all(p['mode'] == 'dense' for p in preds)
sys.exit(0 if ok else print(full, part) or 1)
PY"
"$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --modes oracle --json "$work/r7.json" 2>"$work/e7"
check "--modes oracle without --k is refused (exit 2)" "[ $? = 2 ] && grep -q 'need --k' $work/e7"
"$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --k 8 --modes indexer --json "$work/r7.json" 2>"$work/e7"
check "--modes indexer without --indexer is refused (exit 2)" "[ $? = 2 ] && grep -q 'needs --indexer' $work/e7"
"$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --k 8 --modes dense,sparse --json "$work/r7.json" 2>"$work/e7"
check "--modes with an unknown name is refused (exit 2)" "[ $? = 2 ]"
"$spindle" eval --model "$model" --tasks-file "$work/t2.jsonl" --k 8 --bsel 8 --refine 4 --json "$work/r9.json" 2>"$work/e9"
check "--refine without --indexer is refused (exit 2)" "[ $? = 2 ] && grep -q 'give --indexer' $work/e9"
printf '{"task": "x"}\n' >"$work/bad.jsonl"
"$spindle" eval --model "$model" --tasks-file "$work/bad.jsonl" --json "$work/r5.json" 2>"$work/e5"
check "a bad tasks file: exit 1, file and line named, no output" "[ $? = 1 ] && grep -q 'bad.jsonl: line 1' $work/e5 && [ ! -e $work/r5.json ]"
# ruler-tasks.py's base template: the prompt ids start with the tokenizer's BOS exactly where
# tokenizer_config.json sets add_bos_token (Gemma 3), none for this model (SmolLM2: false).
mkdir -p "$work/bos" && printf '{"add_bos_token": true}' >"$work/bos/tokenizer_config.json"
python3 - "$(dirname "${BASH_SOURCE[0]}")/../scripts/ruler-tasks.py" "$model" "$work/bos" >"$work/bos.txt" 2>&1 <<'PY'
import importlib.util, sys, types
spec = importlib.util.spec_from_file_location("ruler_tasks", sys.argv[1])
rt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rt)
tok = types.SimpleNamespace(bos_token_id=2)
got = rt.base_prefix(sys.argv[2], tok), rt.base_prefix(sys.argv[3], tok)
print(got)
sys.exit(0 if got == ([], [2]) else 1)
PY
check "ruler-tasks.py: BOS first under the base template only where add_bos_token is set" "[ $? = 0 ]"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
