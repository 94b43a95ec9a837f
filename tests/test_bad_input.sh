#!/usr/bin/env bash
# test_bad_input.sh SPINDLE GOLDENS WORK: every bad input gets exit code 1 (2
# for bad usage), a message naming the file and the problem, and no output.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
good=$goldens/llama_f32_default
fails=0 n=0

# expect CODE PATTERN CMD...: runs CMD, checks its exit code, that stderr
# matches PATTERN (grep -E), and that neither $work/out.npy nor its .tmp exist.
expect() {
  local code=$1 pattern=$2; shift 2
  n=$((n + 1))
  rm -f "$work/out.npy" "$work/out.npy.tmp"
  "$@" >"$work/stdout" 2>"$work/stderr"
  local rc=$?
  local msg; msg=$(head -c 600 "$work/stderr")
  if [ "$rc" != "$code" ] || ! grep -qE -- "$pattern" "$work/stderr" || [ -e "$work/out.npy" ] || [ -e "$work/out.npy.tmp" ]; then
    echo "FAIL: $* -> exit $rc (want $code), stderr: $msg (want /$pattern/)"
    fails=$((fails + 1))
  else
    echo "ok: exit $rc: $msg"
  fi
}

# mkcase NAME: a fresh copy of the good checkpoint to break.
mkcase() { rm -rf "$work/$1"; cp -r "$good" "$work/$1"; echo "$work/$1"; }
logits() { "$bin" logits --model "$1" --ids "${2:-$good/ids.txt}" --out "$work/out.npy"; }

d=$(mkcase truncated); truncate -s 20000 "$d/model.safetensors"
expect 1 "$d/model.safetensors: .*(outside|truncated)" logits "$d"

d=$(mkcase garbage); head -c 5000 /dev/urandom >"$d/model.safetensors"
expect 1 "$d/model.safetensors: .*(absurd|not valid JSON)" logits "$d"

d=$(mkcase hugeheader); printf '\xff\xff\xff\xff\xff\xff\xff\x7f' | dd of="$d/model.safetensors" conv=notrunc status=none
expect 1 "$d/model.safetensors: header length [0-9]+ is absurd" logits "$d"

d=$(mkcase tiny); printf 'abc' >"$d/model.safetensors"
expect 1 "$d/model.safetensors: too short" logits "$d"

d=$(mkcase badjson); printf '{"model_type": "llama", "hidden_size": 64,, }' >"$d/config.json"
expect 1 "$d/config.json: not valid JSON" logits "$d"

d=$(mkcase truncjson); head -c 100 "$good/config.json" >"$d/config.json"
expect 1 "$d/config.json: not valid JSON" logits "$d"

d=$(mkcase noconfig); rm "$d/config.json"
expect 1 "$d/config.json: cannot open" logits "$d"

d=$(mkcase heads); sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$d/config.json"
expect 1 "$d/model.safetensors: \"model.layers.0.self_attn.k_proj.weight\" has shape \[32, 64\] but config.json implies \[64, 64\]" logits "$d"

d=$(mkcase family); sed -i 's/"model_type": "llama"/"model_type": "mamba2"/' "$d/config.json"
expect 1 "$d/config.json: unsupported model_type \"mamba2\"" logits "$d"

d=$(mkcase noweight); sed -i 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$d/config.json"
expect 1 "missing weight \"model.layers.2.input_layernorm.weight\"" logits "$d"

d=$(mkcase noshard); cp -r "$goldens/llama_bf16_sharded_llama3/." "$d/"; rm "$d/model.safetensors" "$d/model-00002-of-00004.safetensors"
expect 1 "$d/model-00002-of-00004.safetensors: cannot open" logits "$d"

expect 1 "$work/nope: no such model folder" logits "$work/nope"

printf '1 2 300\n' >"$work/oov.txt"
expect 1 "$work/oov.txt: line 1: id 300 .* out of the vocabulary \[0, 256\)" logits "$good" "$work/oov.txt"
printf '1 2\n3 four\n' >"$work/nan.txt"
expect 1 "$work/nan.txt: line 2: entry 4 \"four\" is not a non-negative integer" logits "$good" "$work/nan.txt"
: >"$work/empty.txt"
expect 1 "$work/empty.txt: no token ids" logits "$good" "$work/empty.txt"
expect 1 "$work/missing.txt: cannot open" logits "$good" "$work/missing.txt"
expect 1 "$work/nodir/out.npy.tmp: cannot create" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/nodir/out.npy"

# Bad usage: exit 2.
expect 2 "--out is required" "$bin" logits --model "$good" --ids "$good/ids.txt"
expect 2 "unknown flag \"--bogus\"" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --bogus
expect 2 "unknown command \"frobnicate\"" "$bin" frobnicate
expect 2 "--threads must be" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --threads 0
expect 1 "$work/nope: no such model folder" "$bin" info --model "$work/nope"

# eval: malformed or out-of-range flag values are usage errors (exit 2), bad
# files and runtime failures exit 1; either way nothing is written.
ev() { "$bin" eval --model "$good" --json "$work/out.npy" "$@"; }
expect 2 "--k must be a comma-separated list of positive integers \(got \"0,8\"\)" ev --ids "$good/ids.txt" --ctx 16 --k 0,8 --bsel 1
expect 2 "--k must be a comma-separated list of positive integers \(got \"0\"\)" ev --ids "$good/ids.txt" --ctx 16 --k 0 --bsel 1
expect 2 "--bsel must be a comma-separated list of positive integers \(got \"0\"\)" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 0
expect 2 "--k must be .*\(got \"8,abc\"\)" ev --ids "$good/ids.txt" --ctx 16 --k 8,abc --bsel 1
expect 2 "--ctx must be a positive integer \(got \"-5\"\)" ev --ids "$good/ids.txt" --ctx -5 --k 8 --bsel 1
expect 2 "--ctx must be a positive integer \(got \"0\"\)" ev --ids "$good/ids.txt" --ctx 0 --k 8 --bsel 1
expect 2 "--ctx must be a positive integer \(got \"16x\"\)" ev --ids "$good/ids.txt" --ctx 16x --k 8 --bsel 1
expect 2 "--n-seq must be a positive integer \(got \"0x10\"\)" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --n-seq 0x10
expect 2 "--k 16 is not below --ctx 16" ev --ids "$good/ids.txt" --ctx 16 --k 8,16 --bsel 1
expect 2 "--bsel 17 is longer than --ctx 16" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1,17
expect 2 "--threads must be an integer in \[1, [0-9]+\]" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --threads 1073741824
expect 2 "--json and --csv would both write" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$work/out.csv"
expect 2 "--json and --md would both write" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$work/out.npy" --md "$work/out.npy"
expect 2 "--csv and --md would both write" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --csv "$work/o.x" --md "$work/o.x"
expect 2 "--json $good/ids.txt is the --ids input" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$good/ids.txt"
# Two-stage supports: --refine N needs --indexer, N >= every --k, and the CPU twin.
expect 2 "--refine 4: it refines the indexer's rows: give --indexer" ev --ids "$good/ids.txt" --ctx 16 --k 4 --bsel 8 --refine 4
expect 2 "--refine must be" ev --ids "$good/ids.txt" --ctx 16 --k 4 --bsel 8 --refine 0
# Hybrid supports: --recent / --sinks take integers >= 0, and run on the CPU twin only.
expect 2 "--recent must be a comma-separated list of" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --recent -1
expect 2 "--recent must be a comma-separated list of" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --recent 4x
expect 2 "--sinks must be a comma-separated list of" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --sinks 1.5
expect 2 "--sinks must be a comma-separated list of" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --sinks 0,-4
expect 2 "--recent \(hybrid supports\) runs on the CPU twin only" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --recent 4 --device cuda
expect 2 "--sinks \(hybrid supports\) runs on the CPU twin only" ev --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --sinks 4 --device cuda
expect 2 "--recent must be an integer in \[0, " "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --oracle-k 8 --recent -3
expect 2 "--sinks must be an integer in \[0, " "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --oracle-k 8 --sinks 2x
expect 2 "--recent needs --oracle-k or --indexer" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --recent 4
expect 2 "--sinks \(hybrid supports\) runs on the CPU twin only" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --oracle-k 8 --sinks 4 --device cuda
for f in out.csv out.md o.x; do
  [ ! -e "$work/$f" ] || { echo "FAIL: a refused eval left $work/$f"; fails=$((fails + 1)); }
done
expect 1 "--ctx 100000 is longer than the model supports \(.*config.json: max_position_embeddings [0-9]+\)" ev --ids "$good/ids.txt" --ctx 100000 --k 8 --bsel 1
expect 1 "the text has 48 tokens, fewer than --ctx 64" ev --ids "$good/ids.txt" --ctx 64 --k 8 --bsel 1
: >"$work/empty_text.txt"
d=$(mkcase withtok); cp "$(dirname "$0")/tokenizer/bytes256.json" "$d/tokenizer.json"
expect 1 "$work/empty_text.txt: corpus is empty" "$bin" eval --model "$d" --text "$work/empty_text.txt" --ctx 16 --k 8 --bsel 1 --json "$work/out.npy"
# An ids file given as --text: refused, naming it (it would be tokenized as digits).
expect 1 "$good/ids.txt: holds only integers separated by commas/whitespace, i.e. a token-ids file; pass it with --ids" \
  "$bin" eval --model "$d" --text "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$work/out.npy"
# logits: --threads bounded; a b_sel longer than the sequence is clamped to it (one block), not allocated.
expect 2 "--threads must be an integer in \[1, [0-9]+\]" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --threads 1073741824
expect 2 "--threads must be an integer in \[1, [0-9]+\]" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --threads 2x
expect 2 "--bsel must be a positive integer \(got \"0x10\"\)" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --oracle-k 4 --bsel 0x10
n=$((n + 1))
if "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/big.npy" --oracle-k 4 --bsel 1073741824 2>"$work/stderr" &&
   grep -q "bsel 1073741824 is longer than the 48 tokens .*using 48" "$work/stderr" &&
   "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/one.npy" --oracle-k 4 --bsel 48 2>/dev/null &&
   cmp -s "$work/big.npy" "$work/one.npy"; then
  echo "ok: logits --bsel 1073741824 is clamped to the 48 tokens (same logits as --bsel 48)"
else
  echo "FAIL: logits --bsel 1073741824: $(head -c 300 "$work/stderr")"; fails=$((fails + 1))
fi
rm -f "$work/big.npy" "$work/one.npy"
expect 2 "give exactly one of --text or --ids" ev --ctx 16 --k 8 --bsel 1
expect 2 "--oracle-k must be a positive integer" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --oracle-k 0

# Device flags (model/backbone.h): usage errors first, then "no GPU" / "no CUDA".
expect 2 "--device must be cpu or cuda" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --device tpu
expect 2 "--precision bf16 needs --device cuda" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --precision bf16
expect 2 "--teacher-precision bf16 needs --device cuda" "$bin" train --model "$good" --shards "$work" --out "$work/run" --teacher-precision bf16
expect 2 "--teacher-precision must be fp32 or bf16" "$bin" train --model "$good" --shards "$work" --out "$work/run" --teacher-precision half
expect 2 "--precision must be fp32, mixed or bf16" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$work/out.npy" --device cuda --precision half
expect 2 "--device must be cpu or cuda" "$bin" teacher --model "$good" --ids "$good/ids.txt" --ctx 16 --out "$work/out.npy" --device gpu
expect 2 "--device must be cpu or cuda" "$bin" train --model "$good" --shards "$work" --out "$work/out.npy" --device gpu
# --device cuda where this build or machine cannot: exit 1 and say which (on a
# GPU machine with a CUDA build it runs, and writes the file).
n=$((n + 1))
rm -f "$work/out.npy"
"$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" --device cuda >/dev/null 2>"$work/stderr"; rc=$?
if { [ $rc = 1 ] && grep -qE "built without CUDA|no usable GPU" "$work/stderr" && [ ! -e "$work/out.npy" ]; } ||
   { [ $rc = 0 ] && [ -s "$work/out.npy" ]; }; then
  echo "ok: logits --device cuda: exit $rc: $(head -c 200 "$work/stderr")"
else
  echo "FAIL: logits --device cuda -> exit $rc: $(head -c 300 "$work/stderr")"; fails=$((fails + 1))
fi
rm -f "$work/out.npy"
if "$bin" bench --synthetic qwen3-8b --ctx 1024 --json "$work/b.json" >/dev/null 2>&1 && [ ! -s "$work/b.json" ]; then
  echo "FAIL: bench exit 0 but no JSON"; fails=$((fails + 1))
fi

# Hybrid stacks: on a config-only Gemma 3 fixture (layers 2 and 5 full
# attention, the others sliding), a --layers list naming a sliding layer is a
# usage error naming the layer and its kind, refused before any weight is read
# and before any output folder exists. Runs where the fixture is present.
hy=$(dirname "$0")/fixtures/gemma3_new
if [ -f "$hy/config.json" ]; then
  printf '1 2 3 4 5 6 7 8\n' >"$work/hy_ids.txt"
  expect 2 "teacher: --layers: layer 0 is a sliding_attention layer; .*full_attention layers only \(this model's: 2,5\)" \
    "$bin" teacher --model "$hy" --ids "$work/hy_ids.txt" --ctx 8 --out "$work/hy_shards" --layers 0
  expect 2 "teacher: --layers: layer 3 is a sliding_attention layer" \
    "$bin" teacher --model "$hy" --ids "$work/hy_ids.txt" --ctx 8 --out "$work/hy_shards" --layers 2-3
  expect 2 "teacher: --layers: layer 7 does not exist \(the model has 7 layers" \
    "$bin" teacher --model "$hy" --ids "$work/hy_ids.txt" --ctx 8 --out "$work/hy_shards" --layers 5,7
  expect 2 "train: --layers: layer 6 is a sliding_attention layer" \
    "$bin" train --model "$hy" --shards "$work/hy_shards" --out "$work/hy_run" --layers 2,6
  n=$((n + 1))
  if [ -e "$work/hy_shards" ] || [ -e "$work/hy_run" ]; then
    echo "FAIL: a refused hybrid --layers left a folder"; fails=$((fails + 1))
  else
    echo "ok: the refused hybrid runs left no folder"
  fi
else
  echo "skip: $hy absent (hybrid --layers refusals)"
fi

# Qwen3-Next / Qwen3.5 checkpoints whose config.json disagrees with their weights: the
# loader names the tensor, its shape and what the config implies.
hyb() {  # hyb NAME CASE KEY VALUE: a copy of goldens/CASE with config.json's KEY set to VALUE
  rm -rf "$work/$1" && cp -r "$goldens/$2" "$work/$1" &&
    python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c, open(p, 'w'))" \
      "$work/$1/config.json" "$3" "$4"
  echo "$work/$1"
}
d=$(hyb q35_vdim qwen3_5_types_f32 linear_value_head_dim 8)
expect 1 "linear_attn.in_proj_qkv.weight\" has shape \[.*\] but config.json implies" logits "$d" "$d/ids.txt"
d=$(hyb qnext_experts qwen3_next_moe_f32 num_experts 5)
expect 1 "mlp.gate.weight\" has shape \[4, 32\] but config.json implies \[5, 32\]" logits "$d" "$d/ids.txt"
d=$(hyb qnext_kinds qwen3_next_moe_f32 layer_types '["full_attention", "full_attention", "linear_attention", "full_attention"]')
expect 1 "missing weight \"model.layers.0.self_attn.q_proj.weight\"" logits "$d" "$d/ids.txt"

# And the good path writes the file (so the checks above can tell the difference).
rm -f "$work/out.npy"
if "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/out.npy" 2>/dev/null && [ -s "$work/out.npy" ] && [ ! -e "$work/out.npy.tmp" ]; then
  echo "ok: good input writes $work/out.npy"
else
  echo "FAIL: good input did not write $work/out.npy"; fails=$((fails + 1))
fi
echo "$((n - fails))/$n bad-input checks passed"
[ "$fails" = 0 ]
