#!/usr/bin/env bash
# test_parser_refusals.sh SPINDLE GOLDENS WORK: model files that pass a lax
# parser and then crash or compute NaN are refused by the commands that read
# them: exit 1, a message naming the file and the problem, nothing written.
# (The same inputs, and what fuzzing found, replay in the fuzz_corpus_* tests.)
set -u
bin=$1 goldens=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
good=$goldens/llama_f32_default
fails=0 n=0

# expect CODE PATTERN OUT CMD...: runs CMD; checks the exit code, that stderr
# matches PATTERN (grep -E) and that OUT (the command's output) does not exist,
# nor OUT.tmp.
expect() {
  local code=$1 pattern=$2 out=$3; shift 3
  n=$((n + 1))
  "$@" >"$work/stdout" 2>"$work/stderr"
  local rc=$?
  local msg; msg=$(head -c 600 "$work/stderr")
  if [ "$rc" != "$code" ] || ! grep -qE -- "$pattern" "$work/stderr" || [ -e "$out" ] || [ -e "$out.tmp" ]; then
    echo "FAIL: $* -> exit $rc (want $code), stderr: $msg (want /$pattern/)$( [ -e "$out" ] && echo "; $out exists")"
    fails=$((fails + 1))
  else
    echo "ok: exit $rc: $msg"
  fi
}
mkcase() { rm -rf "$work/$1"; cp -r "$good" "$work/$1"; echo "$work/$1"; }
logits() { "$bin" logits --model "$1" --ids "$good/ids.txt" --out "$work/out.npy"; }
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 40) >"$work/text.txt"

# Tokenizer ids beyond the model's vocab_size (gpt2.json has 3003 ids, the model 256):
# every id would index past the embedding.
d=$(mkcase bigtok); cp "$here/tokenizer/gpt2.json" "$d/tokenizer.json"
pat="$d/tokenizer.json: token .* has id [0-9]+, outside the model's vocabulary \[0, 256\) \($d/config.json: vocab_size 256\)"
expect 1 "$pat" "$work/eval.json" "$bin" eval --model "$d" --text "$work/text.txt" --ctx 16 --k 8 --bsel 1 --json "$work/eval.json"
expect 1 "$pat" "$work/shards" "$bin" teacher --model "$d" --text "$work/text.txt" --ctx 16 --out "$work/shards"
# The same model with a tokenizer that fits (256 byte tokens) runs.
d=$(mkcase bytetok); cp "$here/tokenizer/bytes256.json" "$d/tokenizer.json"
n=$((n + 1))
if "$bin" eval --model "$d" --text "$work/text.txt" --ctx 16 --n-seq 2 --k 8 --bsel 1 --json "$work/ok.json" 2>"$work/stderr" &&
   [ -s "$work/ok.json" ]; then
  echo "ok: a tokenizer inside the vocabulary runs: $work/ok.json"
else
  echo "FAIL: eval with bytes256.json: $(head -c 300 "$work/stderr")"; fails=$((fails + 1))
fi

# config.json values that passed validation and then aborted or gave NaN logits.
d=$(mkcase headdim); sed -i 's/"head_dim": 16/"head_dim": 4096/' "$d/config.json"
expect 1 "$d/config.json: \"head_dim\" must be even and in \[2, 1024\] \(got 4096\)" "$work/out.npy" logits "$d"
d=$(mkcase eps0); sed -i 's/"rms_norm_eps": 1e-05/"rms_norm_eps": 0/' "$d/config.json"
expect 1 "$d/config.json: \"rms_norm_eps\" must be in \(0, 1\] \(got 0\)" "$work/out.npy" logits "$d"
d=$(mkcase epsneg); sed -i 's/"rms_norm_eps": 1e-05/"rms_norm_eps": -1e-06/' "$d/config.json"
expect 1 "$d/config.json: \"rms_norm_eps\" must be in \(0, 1\]" "$work/out.npy" logits "$d"
d=$(mkcase theta); sed -i 's/"rope_theta": 10000.0/"rope_theta": 1e-300/' "$d/config.json"
expect 1 "$d/config.json: \"rope_theta\" must be in \(1, 1e\+15\] \(got 1e-300\)" "$work/out.npy" logits "$d"
d=$(mkcase vocab); sed -i 's/"vocab_size": 256/"vocab_size": 1000000000/' "$d/config.json"
expect 1 "$d/config.json: \"vocab_size\" must be in \[1, 4194304\]" "$work/out.npy" logits "$d"

# Gemma 3 configs (tests/fixtures/gemma3_new) with a key out of what the family supports.
gemma=$here/fixtures/gemma3_new
gcase() { rm -rf "$work/$1"; mkdir -p "$work/$1"; cp "$gemma/config.json" "$work/$1/"; echo "$work/$1"; }
info() { "$bin" info --model "$1"; }
d=$(gcase g_kind); sed -i '0,/"full_attention", "sliding_attention",/s//"chunked_attention", "sliding_attention",/' "$d/config.json"
expect 1 "$d/config.json: \"layer_types\"\[2\] is \"chunked_attention\" \(supported: full_attention, sliding_attention\)" "$work/none" info "$d"
d=$(gcase g_kind_num); sed -i 's/"layer_types": \["sliding_attention",/"layer_types": [7,/' "$d/config.json"
expect 1 "$d/config.json: \"layer_types\"\[0\] must be a string" "$work/none" info "$d"
d=$(gcase g_len); sed -i 's/"layer_types": \["sliding_attention", /"layer_types": [/' "$d/config.json"
expect 1 "$d/config.json: \"layer_types\" has 6 entries but num_hidden_layers is 7" "$work/none" info "$d"
d=$(gcase g_softcap); sed -i 's/"attn_logit_softcapping": null/"attn_logit_softcapping": 50.0/' "$d/config.json"
expect 1 "$d/config.json: \"attn_logit_softcapping\" is 50; attention-logit soft-capping is not supported" "$work/none" info "$d"
d=$(gcase g_act); sed -i 's/"gelu_pytorch_tanh"/"relu"/' "$d/config.json"
expect 1 "$d/config.json: unsupported hidden_activation \"relu\"" "$work/none" info "$d"
d=$(gcase g_window); sed -i 's/"sliding_window": 5/"sliding_window": 0/' "$d/config.json"
expect 1 "$d/config.json: \"sliding_window\" must be in \[1, 16777216\] \(got 0\)" "$work/none" info "$d"
d=$(gcase g_local_theta); sed -i 's/"rope_type": "default", "rope_theta": 100.0/"rope_type": "default", "rope_theta": 0.5/' "$d/config.json"
expect 1 "$d/config.json: \"rope_theta\" must be in \(1, 1e\+15\] \(got 0.5\)" "$work/none" info "$d"
d=$(gcase g_qpas); sed -i 's/"query_pre_attn_scalar": 12/"query_pre_attn_scalar": 0/' "$d/config.json"
expect 1 "$d/config.json: \"query_pre_attn_scalar\" must be in \(0, 1e\+09\] \(got 0\)" "$work/none" info "$d"

# safetensors headers that the reference library (safetensors 0.8.0) refuses.
st_case() {
  local name=$1 pattern=$2
  local d; d=$(mkcase "st_$name"); cp "$here/fuzz/corpus/safetensors/refuse-$name" "$d/model.safetensors"
  expect 1 "$d/model.safetensors: $pattern" "$work/out.npy" logits "$d"
}
st_case alias "tensor \"b\" has data_offsets \[0, 8\] that overlap tensor \"a\""
st_case overlap "tensor \"b\" has data_offsets \[4, 12\] that overlap"
st_case gap "tensor \"b\" has data_offsets \[8, 12\], leaving bytes \[4, 8\) of the data region to no tensor"
st_case not-from-zero "tensor \"a\" has data_offsets \[8, 16\], leaving bytes \[0, 8\)"
st_case trailing-data "the tensors cover 8 bytes but the data region holds 16"
st_case fractional-offset "header number \"8.0.*is not an integer"
st_case exponent-offset "header number \"8e0.*is not an integer"
st_case fractional-shape "header number \"2.5.*is not an integer"
st_case nul-padding "header has bytes after its JSON object"
st_case metadata-number "\"__metadata__\" entry \"x\" is not a string"
st_case bad-utf8-name "header is not valid UTF-8"

echo "$((n - fails))/$n parser refusal checks passed"
[ "$fails" = 0 ]
