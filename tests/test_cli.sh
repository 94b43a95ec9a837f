#!/usr/bin/env bash
# test_cli.sh SPINDLE GOLDENS WORK: the one command-line grammar (cli/args.h)
# on every command: --help exits 0 and lists the flags with the required ones
# marked; an unknown flag exits 2 with the closest known one; --flag=value
# reads the same as --flag value; a malformed value or a missing required flag
# exits 2; spindle help / --version. For teacher, train, export and scores only
# the grammar is checked here (their own tests check their values).
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
good=$goldens/llama_f32_default   # 2 layers, T = 48
fails=0 n=0

# expect CODE PATTERN CMD...: CMD's exit code is CODE and its stdout+stderr match PATTERN (grep -E).
expect() {
  local code=$1 pattern=$2; shift 2
  n=$((n + 1))
  "$@" >"$work/out" 2>&1
  local rc=$?
  if [ "$rc" != "$code" ] || ! grep -qE -- "$pattern" "$work/out"; then
    echo "FAIL: $* -> exit $rc (want $code), output: $(head -c 400 "$work/out") (want /$pattern/)"
    fails=$((fails + 1))
  else
    echo "ok: exit $rc: $*"
  fi
}
check() {
  n=$((n + 1))
  if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi
}

# spindle itself.
expect 0 "^spindle [^ ]+$" "$bin" --version
expect 0 "^spindle [^ ]+$" "$bin" version
expect 2 "usage: spindle COMMAND" "$bin"
expect 2 "unknown command \"evl\"; did you mean eval\?" "$bin" evl
expect 0 "commands:" "$bin" help
expect 0 "commands:" "$bin" --help
for c in info tokenize logits teacher train export scores eval bench; do
  check "spindle help lists $c" "'$bin' help | grep -qE '^  $c '"
done
"$bin" help eval >"$work/h1" 2>&1; "$bin" eval --help >"$work/h2" 2>&1
check "spindle help eval is spindle eval --help" "cmp -s '$work/h1' '$work/h2'"
expect 2 "unknown command \"nope\"" "$bin" help nope

# --help on every command: exit 0, on stdout, every flag listed; required ones
# marked where the command requires them outright.
declare -A flags=(
  [info]="--model" [tokenize]="--model --text --out" [logits]="--model --ids --out --oracle-k --bsel --indexer --k --threads"
  [teacher]="--model --ctx --out --resume" [train]="--out --resume" [export]="--run --out --layout"
  [scores]="--indexer --shard --layer --out --dump-selection --k --bsel"
  [eval]="--model --text --ids --ctx --k --bsel --json --csv --md --indexer"
  [bench]="--model --synthetic --ctx --k --bsel --json")
declare -A required=(
  [info]="--model" [tokenize]="--model --text" [logits]="--model --ids --out" [teacher]="--out" [export]="--run --out"
  [scores]="--indexer --shard --layer" [eval]="--model --ctx --k --bsel --json" [bench]="--ctx --json")
for c in info tokenize logits teacher train export scores eval bench; do
  n=$((n + 1))
  "$bin" "$c" --help >"$work/help" 2>"$work/help.err"; rc=$?
  bad=""
  [ "$rc" = 0 ] || bad="exit $rc"
  grep -q "^usage: spindle $c" "$work/help" || bad="$bad; no usage line on stdout"
  for f in ${flags[$c]}; do grep -qE -- "^  $f( |$)" "$work/help" || bad="$bad; $f not listed"; done
  for f in ${required[$c]:-}; do grep -qE -- "^  $f .*\[required\]" "$work/help" || bad="$bad; $f not marked [required]"; done
  grep -qE -- "^  --help " "$work/help" || bad="$bad; --help not listed"
  if [ -z "$bad" ]; then echo "ok: $c --help"; else echo "FAIL: $c --help: $bad"; fails=$((fails + 1)); fi
  # -h anywhere, after other flags, is --help too.
  check "$c --foo -h exits 0 with the help" "'$bin' $c --model x -h 2>/dev/null | grep -q '^usage: spindle $c'"
done
if "$bin" bench --help | grep -q "built without CUDA"; then cuda=0; else cuda=1; fi
[ $cuda = 1 ] || check "bench --help on a CPU build lists the flags, then says it needs CUDA" \
  "'$bin' bench --help | tail -1 | grep -q 'needs a build configured with -DSPINDLE_CUDA=ON'"

# Unknown flags: exit 2, with the closest known flag.
expect 2 "unknown flag \"--modle\"; did you mean --model\?" "$bin" info --modle "$good"
expect 2 "unknown flag \"--txt\"; did you mean --text\?" "$bin" tokenize --model "$good" --txt x
expect 2 "unknown flag \"--orcale-k\"; did you mean --oracle-k\?" "$bin" logits --model "$good" --orcale-k 4
expect 2 "unknown flag \"--thr\"; did you mean --threads\?" "$bin" logits --thr 2
expect 2 "unknown flag \"--bsl\"; did you mean --bsel\?" "$bin" eval --bsl 1
expect 2 "unknown flag \"--ctxs\"; did you mean --ctx\?" "$bin" bench --ctxs 1024
expect 2 "unknown flag \"--layer\"; did you mean --layers\?" "$bin" teacher --layer 0
expect 2 "unknown flag \"--resme\"; did you mean --resume\?" "$bin" train --resme
expect 2 "unknown flag \"--rn\"; did you mean --run\?" "$bin" export --rn x
expect 2 "unknown flag \"--shards\"; did you mean --shard\?" "$bin" scores --shards x
expect 2 "unknown flag \"--zzzzzzzz\"" "$bin" eval --zzzzzzzz 1
check "no suggestion for a flag nothing resembles" "! grep -q 'did you mean' '$work/out'"
expect 2 "unexpected argument \"stray\" \(flags start with --\)" "$bin" info stray
expect 2 "unexpected argument \"-k\".*did you mean --k\?" "$bin" eval -k 8

# Grammar errors: exit 2.
expect 2 "--model given twice" "$bin" info --model "$good" --model "$good"
expect 2 "--model needs a value" "$bin" info --model
expect 2 "--model needs a value \(got an empty one\)" "$bin" info --model=
expect 2 "--ids needs a value" "$bin" logits --model "$good" --ids --out "$work/x.npy"
expect 2 "--resume is a switch and takes no value" "$bin" teacher --resume=1
expect 2 "--text needs a value" "$bin" eval --text --ctx 16

# Missing required flags: exit 2, naming the flag.
expect 2 "--model is required" "$bin" info
expect 2 "--text is required" "$bin" tokenize --model "$good"
expect 2 "--out is required" "$bin" logits --model "$good" --ids "$good/ids.txt"
expect 2 "--json is required" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1
expect 2 "--json is required" "$bin" bench --synthetic qwen3-8b --ctx 1024
expect 2 "is required" "$bin" teacher
expect 2 "is required" "$bin" train
expect 2 "--run is required" "$bin" export --out "$work/idx"
expect 2 "is required" "$bin" scores

# Malformed and out-of-range values: exit 2.
expect 2 "--oracle-k must be a positive integer \(got \"4abc\"\)" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/x.npy" --oracle-k 4abc
expect 2 "--bsel must be a positive integer \(got \"0x10\"\)" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/x.npy" --oracle-k 4 --bsel 0x10
expect 2 "--k must be a positive integer \(got \" 8\"\)" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/x.npy" --indexer x --k " 8"
expect 2 "--threads must be an integer in \[1, [0-9]+\]" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/x.npy" --threads 1073741824
expect 2 "--k must be a comma-separated list" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8, --bsel 1 --json "$work/e.json"
expect 2 "--ctx must be a positive integer \(got \"16.5\"\)" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16.5 --k 8 --bsel 1 --json "$work/e.json"
expect 2 "--ctx must be at least 2" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 1 --k 8 --bsel 1 --json "$work/e.json"
expect 2 "--depths must be" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$work/e.json" --depths 0.5,2
expect 2 "--k must be a comma-separated list of positive integers \(got \"4abc\"\)" "$bin" bench --synthetic qwen3-8b --ctx 1024 --k 4abc --json "$work/b.json"
expect 2 "--k must be a comma-separated list of positive integers \(got \"256,0\"\)" "$bin" bench --synthetic qwen3-8b --ctx 1024 --k 256,0 --json "$work/b.json"
expect 2 "--bsel 4096 is longer than the longest --ctx 1024" "$bin" bench --synthetic qwen3-8b --ctx 1024 --bsel 16,4096 --json "$work/b.json"
expect 2 "--refine 512: the candidates per block must be at least --k \(1024\)" "$bin" bench --synthetic qwen3-8b --ctx 2048 --k 256,1024 --refine 512 --json "$work/b.json"
expect 2 "--max-reps must be an integer in \[1, 60\]" "$bin" bench --synthetic qwen3-8b --ctx 1024 --max-reps 100 --json "$work/b.json"
expect 2 "--bsel 4096 is longer than the longest --ctx 1024" "$bin" bench --synthetic qwen3-8b --ctx 1024 --bsel 4096 --json "$work/b.json"
expect 2 "--synthetic must be" "$bin" bench --synthetic qwen9 --ctx 1024 --json "$work/b.json"
expect 2 "--device must be cuda" "$bin" bench --synthetic qwen3-8b --ctx 1024 --device cpu --json "$work/b.json"
# --indexer-scores: a value out of fp32|tf32|bf16, or without the GPU indexer forward it chooses for, is a usage error.
expect 2 "--indexer-scores must be fp32, tf32 or bf16 \(got \"fp16\"\)" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/x.npy" --indexer x --indexer-scores fp16
expect 2 "--indexer-scores needs --device cuda and --indexer" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/x.npy" --indexer x --indexer-scores tf32
expect 2 "--indexer-scores needs --device cuda and --indexer" "$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/x.npy" --indexer-scores bf16
expect 2 "--indexer-scores must be fp32, tf32 or bf16 \(got \"TF32\"\)" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$work/e.json" --indexer x --indexer-scores TF32
expect 2 "--indexer-scores needs --device cuda and --indexer" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$work/e.json" --indexer x --indexer-scores fp32
expect 2 "--indexer-scores must be fp32, tf32 or bf16 \(got \"half\"\)" "$bin" bench --synthetic qwen3-8b --ctx 1024 --indexer-scores half --json "$work/b.json"
expect 2 "--query-frac, --teacher-precision and --train-tokens go with --train-online" "$bin" bench --synthetic qwen3-8b --ctx 1024 --query-frac 0.5 --json "$work/b.json"
expect 2 "--query-frac must be" "$bin" bench --synthetic qwen3-8b --ctx 1024 --train-online --query-frac 2 --json "$work/b.json"
expect 2 "--teacher-precision must be fp32 or bf16 \(got \"half\"\)" "$bin" bench --synthetic qwen3-8b --ctx 1024 --train-online --teacher-precision half --json "$work/b.json"
expect 2 "--exec-block 16: it runs with --device cuda --precision bf16" "$bin" eval --model "$work/none" --tasks-file "$work/t.jsonl" --json "$work/e.json" --k 8 --exec-block 16
expect 2 "--exec-block 0 must be|--exec-block must be a positive integer" "$bin" eval --model "$work/none" --tasks-file "$work/t.jsonl" --json "$work/e.json" --k 8 --exec-block 0
# The held-out rows take --exec-block too, with the same checks.
expect 2 "--exec-block 16: it runs with --device cuda --precision bf16" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$work/e.json" --exec-block 16
expect 2 "--exec-block must be a positive integer" "$bin" eval --model "$good" --ids "$good/ids.txt" --ctx 16 --k 8 --bsel 1 --json "$work/e.json" --exec-block x
expect 2 "--decode must be a positive integer \(got \"0\"\)" "$bin" bench --synthetic qwen3-8b --ctx 1024 --decode 0 --json "$work/b.json"
expect 2 "--decode runs with the TTFT runs" "$bin" bench --synthetic qwen3-8b --ctx 1024 --decode 8 --no-ttft --json "$work/b.json"
check "a refused eval or bench wrote nothing" "[ ! -e '$work/e.json' ] && [ ! -e '$work/b.json' ]"
if [ $cuda = 0 ]; then  # good flags on a CPU build: a runtime failure (exit 1), saying why
  expect 1 "built without CUDA" "$bin" bench --synthetic=qwen3-8b --ctx=1024 --json="$work/b.json"
fi

# --flag=value reads as --flag value.
"$bin" info --model "$good" >"$work/i1" 2>&1; r1=$?
"$bin" info --model="$good" >"$work/i2" 2>&1; r2=$?
check "info --model=DIR is info --model DIR" "[ $r1 = 0 ] && [ $r2 = 0 ] && cmp -s '$work/i1' '$work/i2'"
tm=$work/tokmodel; cp -r "$good" "$tm"; cp "$(dirname "$0")/tokenizer/gpt2.json" "$tm/tokenizer.json"
printf 'Hello world, hello spindle.\n' >"$work/t.txt"
"$bin" tokenize --model "$tm" --text "$work/t.txt" >"$work/t1" 2>/dev/null; r1=$?
"$bin" tokenize --model="$tm" --text="$work/t.txt" >"$work/t2" 2>/dev/null; r2=$?
check "tokenize --flag=value" "[ $r1 = 0 ] && [ $r2 = 0 ] && [ -s '$work/t1' ] && cmp -s '$work/t1' '$work/t2'"
"$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/l1.npy" --oracle-k 8 --bsel 4 2>/dev/null; r1=$?
"$bin" logits --model="$good" --ids="$good/ids.txt" --out="$work/l2.npy" --oracle-k=8 --bsel=4 2>"$work/l2.err"; r2=$?
check "logits --flag=value gives the same logits" "[ $r1 = 0 ] && [ $r2 = 0 ] && cmp -s '$work/l1.npy' '$work/l2.npy'"
check "logits says the oracle ran, with k and b_sel" "grep -q 'attention: oracle at all 2 layers, k 8, b_sel 4' '$work/l2.err'"
"$bin" logits --model "$good" --ids "$good/ids.txt" --out "$work/l3.npy" 2>"$work/l3.err"
check "logits says dense ran" "grep -q 'attention: dense at all 2 layers' '$work/l3.err'"
ev=(--model "$good" --ids "$good/ids.txt" --ctx 16 --k 4,8 --bsel 1,2)
"$bin" eval "${ev[@]}" --json "$work/e1.json" 2>/dev/null; r1=$?
"$bin" eval --model="$good" --ids="$good/ids.txt" --ctx=16 --k=4,8 --bsel=1,2 --json="$work/e2.json" 2>/dev/null; r2=$?
check "eval --flag=value gives the same rows" "[ $r1 = 0 ] && [ $r2 = 0 ] && python3 - '$work/e1.json' '$work/e2.json' <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
strip = lambda rows: [{k: v for k, v in r.items() if k != 'provenance'} for r in rows]
assert len(a) == 5 and strip(a) == strip(b), (a, b)
assert '--k=4,8' in b[0]['provenance']['command'] and '--k 4,8' in a[0]['provenance']['command']
PY"
"$bin" eval --model "$tm" --text="$work/t.txt" "$work/t.txt" --ctx 16 --k 8 --bsel 1 --json "$work/e3.json" 2>"$work/e3.err"
check "--text=a b reads two values" "! grep -q 'unexpected argument' '$work/e3.err'"
expect 2 "unknown flag \"--nope\"" "$bin" export --run="$work/nope" --out="$work/idx" --nope
"$bin" export --run="$work/nope" --out="$work/idx" >"$work/x.out" 2>&1
check "export --run=DIR --out=DIR reads the values (a missing run is named, not a grammar error)" \
  "grep -q '$work/nope' '$work/x.out' && ! grep -qE 'unknown flag|needs a value|is required' '$work/x.out'"

echo "$((n - fails))/$n CLI checks passed"
[ "$fails" = 0 ]
