#!/usr/bin/env bash
# spindle eval --bos: each window is the model's BOS (tokenizer_config.json bos_token) then ctx - 1
# tokens of the stream, so its rows equal a plain eval of the ids file built that way; the note when
# add_bos_token is set and --bos is not; refusals (no bos_token, one the tokenizer lacks) name the file.
# usage: test_eval_bos.sh SPINDLE MODEL WORK. Exits 77 when the model is absent.
set -u
spindle=$1 model=$2 work=$3
[ -d "$model" ] || { echo "skipped: $model is absent"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
fails=0 passes=0
check() { if eval "$2"; then echo "ok: $1"; passes=$((passes + 1)); else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

head -c 4000 "$(dirname "${BASH_SOURCE[0]}")/../README.md" >"$work/t.txt"
"$spindle" tokenize --model "$model" --text "$work/t.txt" --out "$work/t.ids" 2>/dev/null
bos=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bos_token'])" "$model/tokenizer_config.json")
# The same windows written out: BOS, then the next 31 tokens, three times.
python3 - "$work/t.ids" "$model/tokenizer.json" "$bos" >"$work/w.ids" <<'PY'
import json, re, sys
ids = [int(x) for x in re.split(r"[,\s]+", open(sys.argv[1]).read().strip())]
t = json.load(open(sys.argv[2]))
b = next((a["id"] for a in t.get("added_tokens", []) if a["content"] == sys.argv[3]), None)
b = t["model"]["vocab"][sys.argv[3]] if b is None else b
print(" ".join(str(x) for s in range(3) for x in [b] + ids[31 * s:31 * s + 31]))
PY
run() { "$spindle" eval --model "$1" --ids "$2" --ctx 32 --k 8 --bsel 1,4 --n-seq 3 --json "$3" "${@:4}"; }
run "$model" "$work/t.ids" "$work/b.json" --bos 2>"$work/b.err"
check "eval --bos runs" "[ $? = 0 ] && [ -s $work/b.json ]"
run "$model" "$work/w.ids" "$work/w.json" 2>"$work/w.err"
check "eval of the windows written out runs" "[ $? = 0 ] && [ -s $work/w.json ]"
python3 - "$work/b.json" "$work/w.json" "$work/b.md" "$work/w.ids" <<'PY'
import json, sys
b, w = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
keys = ("mode", "k", "bsel", "nll", "dnll", "logit_kl", "top1_agree", "mass_recall", "n_scored")
same = len(b) == len(w) == 3 and all(all(x.get(k) == y.get(k) for k in keys) for x, y in zip(b, w))
first = int(open(sys.argv[4]).read().split()[0])  # the BOS id, as the windows written out start
ok = same and all(r["provenance"].get("window_bos") == first for r in b)
ok = ok and all("window_bos" not in r["provenance"] for r in w) and f"BOS (id {first})" in open(sys.argv[3]).read()
sys.exit(0 if ok else print(b[0], w[0]) or 1)
PY
check "--bos rows equal the plain rows of BOS-led windows; provenance names the BOS id" "[ $? = 0 ]"
check "no add_bos_token note for a model that does not set it" "! grep -q 'sets add_bos_token' $work/b.err $work/w.err"
# A model folder whose tokenizer_config.json sets add_bos_token (bos_token as an AddedToken object).
mk() { rm -rf "$work/$1" && mkdir -p "$work/$1" && for f in config.json model.safetensors tokenizer.json; do
    ln -s "$(cd "$model" && pwd)/$f" "$work/$1/$f"; done && printf '%s' "$2" >"$work/$1/tokenizer_config.json"; }
mk addbos "{\"bos_token\": {\"content\": \"$bos\"}, \"add_bos_token\": true}"
run "$work/addbos" "$work/t.ids" "$work/n.json" 2>"$work/n.err"
check "add_bos_token without --bos: runs, with a note that names the file and --bos" \
    "[ $? = 0 ] && grep -q 'addbos/tokenizer_config.json sets add_bos_token.*--bos' $work/n.err"
run "$work/addbos" "$work/t.ids" "$work/n2.json" --bos 2>"$work/n2.err"
check "--bos with bos_token as an object: the same rows as with the string" \
    "[ $? = 0 ] && python3 -c \"import json,sys; a,b=(json.load(open(f)) for f in sys.argv[1:]); sys.exit(a[1]['nll']!=b[1]['nll'])\" $work/n2.json $work/b.json"
mk nobos '{"bos_token": null}'
run "$work/nobos" "$work/t.ids" "$work/x.json" --bos 2>"$work/x.err"
check "--bos without a bos_token: exit 1 naming the file, no output" \
    "[ $? = 1 ] && grep -q 'nobos/tokenizer_config.json names no bos_token' $work/x.err && [ ! -e $work/x.json ]"
mk badbos '{"bos_token": "<no such token>"}'
run "$work/badbos" "$work/t.ids" "$work/y.json" --bos 2>"$work/y.err"
check "--bos with a bos_token the tokenizer lacks: exit 1 naming it" \
    "[ $? = 1 ] && grep -q 'badbos/tokenizer_config.json: bos_token \"<no such token>\" is not a token' $work/y.err && [ ! -e $work/y.json ]"
mk notjson '[1, 2]'
run "$work/notjson" "$work/t.ids" "$work/z.json" --bos 2>"$work/z.err"
check "--bos with a tokenizer_config.json that is not an object: exit 1 naming it" \
    "[ $? = 1 ] && grep -q 'notjson/tokenizer_config.json: not a JSON object' $work/z.err"
run "$work/notjson" "$work/t.ids" "$work/z2.json" 2>"$work/z2.err"
check "without --bos that file is not read: the run goes on" "[ $? = 0 ] && [ -s $work/z2.json ]"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
