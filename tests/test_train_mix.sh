#!/usr/bin/env bash
# test_train_mix.sh SPINDLE MODEL_DIR TEXT_DIR WORK: online training with a
# retrieval mix (train --retrieval-mix F) on SmolLM2-135M, CPU, ctx 512, two
# layers, on TEXT_DIR's text, or on this repository's docs/ where TEXT_DIR is absent (a clean
# clone has no corpus). Exits 77 when the model is absent.
# - the run records "retrieval_mix"; log.jsonl counts the kv windows of each
#   step, and over 8 steps at F = 0.5 both kinds of window occur;
# - a kv step's queries include every question and answer position: its
#   "queries" exceed the plain run's on the same step (same seed: the sampled
#   positions are the same draws, the question's are added);
# - a mixed run trains to other weights than the plain one (the windows differ);
# - resume: stopped after step 3 and resumed, the checkpoint bytes equal the
#   uninterrupted run's (the mix is a function of the seed and the window);
#   resuming with another --retrieval-mix is refused (exit 2);
# - refusals: --retrieval-mix 1.5 (exit 2), with a block objective, or at a
#   --ctx too short for 16 needles (exit 1, a message, no run folder).
set -u
bin=$1 model=$2 text=$3 work=$4
[ -d "$model" ] || { echo "skipped: $model is absent"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
[ -d "$text" ] || { text="$(cd "$(dirname "$0")/.." && pwd)/docs"; echo "no corpus: training on $text"; }
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }

find "$text" -type f \( -name '*.txt' -o -name '*.md' -o -name '*.rst' -o ! -name '*.*' \) | LC_ALL=C sort |
  head -20 | xargs cat | head -c 200000 >"$work/train.txt"
common=(train --model "$model" --text "$work/train.txt" --ctx 512 --layers 3,17 --steps 8 --d-index 32 --d-rope 16
        --ckpt-every 1 --eval-every 100 --warmup 2 --lr 1e-2 --threads 2)
"$bin" "${common[@]}" --out "$work/plain" 2>"$work/plain.log"
check "plain online run" "[ \$? = 0 ] && [ -s '$work/plain/checkpoints/ckpt-00000008.bin' ]"
"$bin" "${common[@]}" --retrieval-mix 0.5 --out "$work/mix" 2>"$work/mix.log"
check "mixed run" "[ \$? = 0 ] && [ -s '$work/mix/checkpoints/ckpt-00000008.bin' ]"
check "config.json records retrieval_mix 0.5" "grep -q '\"retrieval_mix\":[[:space:]]*0.5' '$work/mix/config.json'"
check "the plain run's config has no retrieval_mix" "! grep -q retrieval_mix '$work/plain/config.json'"
python3 - "$work/plain/log.jsonl" "$work/mix/log.jsonl" >"$work/steps.txt" <<'PY'
import json, sys
def steps(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        if "layer" in r:
            out.setdefault(r["step"], r)
    return out
plain, mix = steps(sys.argv[1]), steps(sys.argv[2])
kv = [s for s, r in mix.items() if r.get("kv_windows") == 1]
text = [s for s, r in mix.items() if r.get("kv_windows") == 0]
more = all(mix[s]["queries"] > plain[s]["queries"] for s in kv)
same = all(mix[s]["queries"] == plain[s]["queries"] for s in text)
print(f"kv steps {kv}, text steps {text}, queries on kv steps above the plain run's: {more}, equal elsewhere: {same}")
print("OK" if kv and text and more and same else "BAD")
PY
cat "$work/steps.txt"
check "log.jsonl: kv and text windows both occur; a kv step adds its question's positions" "grep -q '^OK' '$work/steps.txt'"
"$bin" export --run "$work/plain" --out "$work/x_plain" 2>/dev/null
"$bin" export --run "$work/mix" --out "$work/x_mix" 2>/dev/null
check "the mix trains other weights" "[ -s '$work/x_plain/model.safetensors' ] && [ -s '$work/x_mix/model.safetensors' ] &&
  ! cmp -s '$work/x_plain/model.safetensors' '$work/x_mix/model.safetensors'"

"$bin" "${common[@]}" --retrieval-mix 0.5 --out "$work/cut" --stop-after 3 2>/dev/null
"$bin" train --out "$work/cut" --resume --threads 2 2>"$work/resume.log"
check "resumed after step 3: the same checkpoint bytes as the uninterrupted mixed run" \
  "cmp -s '$work/cut/checkpoints/ckpt-00000008.bin' '$work/mix/checkpoints/ckpt-00000008.bin'"
"$bin" train --out "$work/cut" --resume --retrieval-mix 0.25 --steps 9 2>"$work/other.log"
check "resume with another --retrieval-mix: exit 2" "[ \$? = 2 ] && grep -q -- '--retrieval-mix' '$work/other.log'"

"$bin" "${common[@]}" --retrieval-mix 1.5 --out "$work/bad1" 2>"$work/bad1.log"
check "--retrieval-mix 1.5: exit 2" "[ \$? = 2 ] && [ ! -e '$work/bad1' ]"
"$bin" "${common[@]}" --retrieval-mix 0.5 --objective block --objective-bsel 16 --out "$work/bad2" 2>"$work/bad2.log"
check "--retrieval-mix with a block objective: exit 1, a message, no run folder" \
  "[ \$? = 1 ] && grep -q 'query objective only' '$work/bad2.log' && [ ! -e '$work/bad2' ]"
"$bin" train --model "$model" --text "$work/train.txt" --ctx 128 --layers 3 --steps 2 --retrieval-mix 0.5 \
  --out "$work/bad3" 2>"$work/bad3.log"
check "--retrieval-mix at ctx 128: exit 1 naming the context, no run folder" \
  "[ \$? = 1 ] && grep -q 'retrieval-mix at --ctx 128: retrieval: kv task needs more than' '$work/bad3.log' && [ ! -e '$work/bad3' ]"

echo "train_mix: $([ $fails = 0 ] && echo PASS || echo "FAIL ($fails)")"
[ $fails = 0 ]
