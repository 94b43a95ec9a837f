#!/usr/bin/env bash
# --bos: each window is the model's BOS (tokenizer_config.json bos_token) then ctx - 1 tokens of the
# stream. eval --bos rows equal a plain eval of the ids file built that way; train --bos (online) and
# training on teacher --bos shards end with the same weights as plain runs on that file; the note when
# add_bos_token is set and --bos is not; refusals (no bos_token, one the tokenizer lacks, --bos where no
# tokenizer or text is read, a resume that adds it) name the file or the flag.
# usage: test_bos_windows.sh SPINDLE MODEL WORK. Exits 77 when the model is absent.
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

# train and teacher. The same three windows as above: --bos on the stream against the windows written out.
tr=(--model "$model" --ctx 32 --steps 6 --layers 0,1 --d-index 16 --d-rope 8 --recall-k 8 --eval-every 3
    --ckpt-every 3 --min-pos 4 --query-frac 0.5 --lr 1e-2 --warmup 2 --threads 2)
python3 - "$work/t.ids" >"$work/t93.ids" <<'PY'
import re, sys
ids = re.split(r"[,\s]+", open(sys.argv[1]).read().strip())
print(" ".join(ids[:93]))  # exactly the 3 windows' worth: 3 x 31
PY
"$spindle" train "${tr[@]}" --ids "$work/t93.ids" --bos --heldout-ids "$work/t93.ids" --out "$work/rb" 2>"$work/rb.log"
check "train --bos (online) runs" "[ $? = 0 ] && grep -q '\"bos_token_id\"' $work/rb/config.json"
"$spindle" train "${tr[@]}" --ids "$work/w.ids" --heldout-ids "$work/w.ids" --out "$work/rw" 2>"$work/rw.log"
check "train on the windows written out runs" "[ $? = 0 ] && ! grep -q 'bos_token_id' $work/rw/config.json"
for r in rb rw; do "$spindle" export --run "$work/$r" --out "$work/x_$r" 2>/dev/null; done
check "train --bos ends with the weights of training on the windows written out (bytes)" \
    "cmp -s $work/x_rb/model.safetensors $work/x_rw/model.safetensors && cmp -s <(cut -d, -f1-5,7 $work/rb/metrics.csv) <(cut -d, -f1-5,7 $work/rw/metrics.csv)"
"$spindle" teacher --model "$model" --ids "$work/t93.ids" --ctx 32 --layers 0,1 --bos --x-dtype fp32 --out "$work/sb" 2>/dev/null
s1=$?
"$spindle" teacher --model "$model" --ids "$work/w.ids" --ctx 32 --layers 0,1 --x-dtype fp32 --out "$work/sw" 2>/dev/null
check "teacher --bos and teacher on the windows written out run" "[ $s1 = 0 ] && [ $? = 0 ]"
st=(--model "$model" --steps 6 --d-index 16 --d-rope 8 --recall-k 8 --eval-every 3 --ckpt-every 3 --min-pos 4
    --query-frac 0.5 --lr 1e-2 --warmup 2 --threads 2)
"$spindle" train "${st[@]}" --shards "$work/sb" --out "$work/rsb" 2>/dev/null
"$spindle" train "${st[@]}" --shards "$work/sw" --out "$work/rsw" 2>/dev/null
for r in rsb rsw; do "$spindle" export --run "$work/$r" --out "$work/x_$r" 2>/dev/null; done
check "training on teacher --bos shards == on shards of the windows written out (bytes)" \
    "[ -s $work/x_rsb/model.safetensors ] && cmp -s $work/x_rsb/model.safetensors $work/x_rsw/model.safetensors"
"$spindle" train --out "$work/rw" --resume --steps 8 --bos 2>"$work/e1"
check "a resume that adds --bos is refused (exit 2)" "[ $? = 2 ] && grep -q -- '--bos' $work/e1"
"$spindle" train --out "$work/rb" --resume --steps 8 2>"$work/e2"
check "train --bos resumes from config.json alone (bos_token_id read back)" "[ $? = 0 ] && [ -s $work/rb/checkpoints/ckpt-00000008.bin ]"
"$spindle" train "${tr[@]}" --random-ids --bos --out "$work/rr" 2>"$work/e3"
check "train --bos with --random-ids: exit 2, no run folder" "[ $? = 2 ] && grep -q -- '--bos goes with' $work/e3 && [ ! -e $work/rr ]"
"$spindle" train "${st[@]}" --shards "$work/sw" --bos --out "$work/rs" 2>"$work/e4"
check "train --bos with --shards: exit 2 naming teacher --bos" "[ $? = 2 ] && grep -q -- 'teacher --bos' $work/e4"
"$spindle" teacher --model "$work/nobos" --ids "$work/t93.ids" --ctx 32 --bos --out "$work/sx" 2>"$work/e5"
check "teacher --bos without a bos_token: exit 1 naming the file, no shards" \
    "[ $? = 1 ] && grep -q 'nobos/tokenizer_config.json names no bos_token' $work/e5 && ! ls $work/sx/*.h5 >/dev/null 2>&1"
echo "$passes passed, $fails failed"
[ $fails = 0 ]
