#!/usr/bin/env bash
# test_gemma3_tokenizer.sh SPINDLE MODEL_DIR TOKDIR WORK: spindle's tokenizer on the real Gemma 3 270M
# tokenizer.json (built by scripts/get-gemma3.sh from the GGUF's SentencePiece vocabulary) against the ids
# HF `tokenizers` gives for each TOKDIR/*.txt (TOKDIR/gemma3/NAME.expected; TOKDIR/gemma3/README says how they were made).
# Exit 77 (skipped) when MODEL_DIR is missing.
set -u
bin=$1 model=$2 tokdir=$3 work=$4
[ -f "$model/tokenizer.json" ] || { echo "skipped: $model/tokenizer.json is missing (scripts/get-gemma3.sh)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
fails=0 n=0
for f in "$tokdir"/*.txt; do
  name=$(basename "$f" .txt)
  want="$tokdir/gemma3/$name.expected"
  [ -f "$want" ] || { echo "FAIL: $want is missing"; fails=$((fails + 1)); continue; }
  if ! "$bin" tokenize --model "$model" --text "$f" --out "$work/$name.ids" 2>"$work/$name.err"; then
    echo "FAIL: $name: spindle tokenize: $(cat "$work/$name.err")"; fails=$((fails + 1)); continue
  fi
  if [ "$(tr -s ', \n' '\n\n\n' <"$work/$name.ids" | grep -c .)" = "$(tr -s ', \n' '\n\n\n' <"$want" | grep -c .)" ] &&
     diff <(tr -s ', \n' '\n\n\n' <"$work/$name.ids" | grep .) <(tr -s ', \n' '\n\n\n' <"$want" | grep .) >/dev/null; then
    n=$((n + 1)); echo "ok: $name"
  else
    echo "FAIL: $name: ids differ from HF tokenizers'"; fails=$((fails + 1))
  fi
done
echo "$n texts identical, $fails failure(s)"
[ $fails = 0 ]
