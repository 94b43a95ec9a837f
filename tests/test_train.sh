#!/usr/bin/env bash
# test_train.sh SPINDLE GOLDENS WORK: teacher -> train -> export on a tiny
# golden checkpoint, and the resume promise: a run stopped at a random step,
# or killed with SIGKILL at a random moment, then resumed, ends with the same
# bytes (parameters, AdamW moments, step, PRNG, cursor) as an uninterrupted run;
# `train --out RUN --resume` alone continues a run from its config.json; run
# checkpoints are checked (checksum, step in the name) and the newest valid one
# is used; exports of hostile folder names and hostile export configs are refused.
set -u
bin=$1 goldens=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
g=$goldens/llama_f32_default
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
for i in 1 2 3 4 5 6; do cat "$g/ids.txt"; done >"$work/ids.txt"
"$bin" teacher --model "$g" --ids "$work/ids.txt" --ctx 48 --out "$work/shards" --seqs-per-shard 2 2>/dev/null
"$bin" teacher --model "$g" --ids "$g/ids.txt" --ctx 48 --out "$work/held" 2>/dev/null
steps=${STEPS:-1500}
# The same run settings every time. (A function would put a shell between
# `&` and spindle, and kill -9 would hit the shell: exec replaces it.)
args=(train --model "$g" --shards "$work/shards" --heldout "$work/held" --steps "$steps" --d-index 16 --d-rope 8
      --recall-k 8 --eval-every 50 --ckpt-every 3 --min-pos 4 --query-frac 0.5 --lr 1e-2 --warmup 10 --threads 2)
train() { local run=$1; shift; exec "$bin" "${args[@]}" --out "$run" "$@"; }
# The same with another --steps (args[8] is its value).
train_n() { local n=$1 run=$2; shift 2; local a=("${args[@]}"); a[8]=$n; exec "$bin" "${a[@]}" --out "$run" "$@"; }
(train "$work/full") 2>"$work/full.log"
final=$(printf 'ckpt-%08d.bin' "$steps")
check "uninterrupted run reaches step $steps" "[ -s '$work/full/checkpoints/$final' ]"

# The loss went down: mean KL of the last 10 steps < 0.8 x that of the first 10.
check "training lowers the KL" "awk -F, -v s=$steps 'NR>1 && \$1<=10 {a+=\$3; na++} NR>1 && \$1>s-10 {b+=\$3; nb++} END {exit !(b/nb < 0.8*a/na)}' '$work/full/metrics.csv'"

# Stopped after a random number of steps, then resumed.
r=$((RANDOM % (steps - 1) + 1))
(train "$work/stop" --stop-after "$r") 2>/dev/null
"$bin" train --out "$work/stop" --resume 2>/dev/null
check "stop at step $r + \`train --out RUN --resume\` alone == uninterrupted (bytes)" "cmp -s '$work/full/checkpoints/$final' '$work/stop/checkpoints/$final'"

# SIGKILL at random moments within the run's duration, resuming each time,
# until the run is complete; at least 2 kills must land before the end.
ms() { date +%s%3N; }
t0=$(ms); (train "$work/time") 2>/dev/null; dur=$(( $(ms) - t0 ))
# The run's duration is measured once; on a loaded machine later runs can be faster than that, so the kills
# land too late: then the whole series starts again on a fresh folder with half the delays (at most 3 series).
kills=0 series=0
while [ "$kills" -lt 2 ] && [ "$series" -lt 3 ]; do
  series=$((series + 1)) kills=0 tries=0
  rm -rf "$work/kill"
  while [ ! -s "$work/kill/checkpoints/$final" ] && [ "$tries" -lt 20 ]; do
    tries=$((tries + 1))
    # Once config.json exists, --out and --resume alone; before, the full command (--resume starts it fresh).
    if [ -e "$work/kill/config.json" ]; then (exec "$bin" train --out "$work/kill" --resume) 2>/dev/null &
    else (train "$work/kill" --resume) 2>/dev/null & fi
    pid=$!
    if [ "$kills" -lt 3 ]; then
      sleep "$(awk -v d="$dur" -v r="$RANDOM" -v s="$series" \
        'BEGIN { printf "%.3f", d * (0.05 + 0.3 * r / 32768) / 1000 / 2 ^ (s - 1) }')"
      kill -9 "$pid" 2>/dev/null && [ ! -s "$work/kill/checkpoints/$final" ] && kills=$((kills + 1))
    fi
    wait "$pid" 2>/dev/null
  done
done
echo "killed $kills time(s) mid-run (a run takes $dur ms; series $series)"
check "at least 2 SIGKILLs landed mid-run" "[ $kills -ge 2 ]"
check "SIGKILL x$kills + \`train --out RUN --resume\` alone == uninterrupted (bytes)" "cmp -s '$work/full/checkpoints/$final' '$work/kill/checkpoints/$final'"
check "resumed logs hold each step once" "[ \$(grep -c '\"layer\":0,' '$work/kill/log.jsonl') = $steps ]"

check "the run's stderr (not a terminal) has progress lines, per-layer KL and recall, the checkpoint" \
  "grep -q '^spindle train: progress step 1/$steps (0%) elapsed .* s eta .* s; loss .*, lr .*, .* tokens/s' '$work/full.log' &&
   grep -q '^spindle train: progress step $steps/$steps (100%)' '$work/full.log' &&
   [ \$(grep -c '^spindle train: layer [01]: final KL [0-9.]* (mean of the last 10 steps), held-out recall@8 [0-9.]*\$' '$work/full.log') = 2 ] &&
   grep -q '^spindle train: checkpoint $work/full/checkpoints/$final\$' '$work/full.log'"

# Resuming with other settings is refused, naming both values (exit 2).
(train "$work/full" --resume --clip 0.5) 2>"$work/err"; rc=$?
check "resume with a different --clip is refused (exit 2, both values)" "[ $rc = 2 ] && grep -q -- '--clip is 1 in the run but 0.5 on the command line' '$work/err'"
"$bin" train --out "$work/full" --resume --layers 1 2>"$work/err"; rc=$?
check "resume with other --layers is refused (exit 2, both values)" "[ $rc = 2 ] && grep -q -- '--layers is 0,1 in the run but 1 on the command line' '$work/err'"
"$bin" train --out "$work/full" --resume --model "$goldens/qwen3_qknorm" 2>"$work/err"; rc=$?
check "resume with another --model is refused (exit 2, both paths)" "[ $rc = 2 ] && grep -q -- \"--model is $(cd "$g" && pwd -P) in the run but $(cd "$goldens/qwen3_qknorm" && pwd -P) on\" '$work/err'"
"$bin" train --out "$work/full" --resume --steps 100 2>"$work/err"; rc=$?
check "resume with a smaller --steps is refused (exit 2)" "[ $rc = 2 ] && grep -q -- '--steps is $steps in the run but 100' '$work/err'"
cp "$work/full/checkpoints/$final" "$work/final.bin"
"$bin" train --out "$work/full" --resume --lr 1e-2 --d-index 16 --threads 1 2>"$work/err"; rc=$?
check "resume of a complete run with agreeing flags: exit 0, nothing changes" \
  "[ $rc = 0 ] && grep -q 'already complete at step $steps' '$work/err' && cmp -s '$work/final.bin' '$work/full/checkpoints/$final'"
(train "$work/full") 2>"$work/err"; rc=$?
check "a fresh run into a used folder is refused" "[ $rc = 1 ] && grep -q 'not empty' '$work/err'"

# --resume on a missing or empty folder starts fresh and says so; alone, it needs --model and --shards.
(train_n 4 "$work/fresh" --resume) 2>"$work/err"; rc=$?
check "--resume on a missing folder starts fresh, saying so" \
  "[ $rc = 0 ] && grep -q -- '--resume: $work/fresh holds nothing to resume; starting fresh' '$work/err' && [ -s '$work/fresh/checkpoints/ckpt-00000004.bin' ]"
mkdir -p "$work/empty"
"$bin" train --out "$work/empty" --resume 2>"$work/err"; rc=$?
check "--resume alone on an empty folder: exit 2, --model required" "[ $rc = 2 ] && grep -q -- '--model is required' '$work/err'"
"$bin" train --shards "$work/shards" --out "$work/nomodel" 2>"$work/err"; rc=$?
check "without --resume, --model is required (exit 2)" "[ $rc = 2 ] && [ ! -e '$work/nomodel' ]"

# --steps larger than the run's extends it: said on stderr and in log.jsonl;
# the cosine keeps its horizon (steps past it run at the floor lr = lr x min-lr-frac).
(train_n 40 "$work/ext") 2>/dev/null
"$bin" train --out "$work/ext" --resume --steps 60 2>"$work/err"; rc=$?
check "--steps 60 extends a 40-step run (stderr, log.jsonl, config.json, checkpoint)" \
  "[ $rc = 0 ] && grep -q 'extending the run from 40 to 60 steps at step 40' '$work/err' &&
   grep -q '{\"event\":\"extend\",\"step\":40,\"steps_from\":40,\"steps_to\":60,\"schedule_steps\":40}' '$work/ext/log.jsonl' &&
   grep -q '\"steps\":	60' '$work/ext/config.json' && [ -s '$work/ext/checkpoints/ckpt-00000060.bin' ]"
check "extended steps run at the floor lr (1e-3) and log each step once" \
  "awk -F, '\$1>40 && \$1!=\"step\" {n++; if (\$4 != 0.001) bad++} END {exit !(n == 40 && !bad)}' '$work/ext/metrics.csv' &&
   [ \$(grep -c '\"layer\":0,' '$work/ext/log.jsonl') = 60 ]"
check "the first 40 steps of the extended run are those of the 40-step run" \
  "[ \$(grep -c '\"step\":40,\"layer\":0,' '$work/ext/log.jsonl') = 1 ] && awk -F, '\$1==40 && \$2==0 {print \$4}' '$work/ext/metrics.csv' | grep -qx 0.001"

# A refused run leaves no folder: every setting is checked before it is created.
nofolder() {  # name, expected exit code, what stderr must say, extra flags...
  local name=$1 want=$2 say=$3; shift 3
  "$bin" train --model "$g" --shards "$work/shards" --out "$work/refused" "$@" 2>"$work/err"; local rc=$?
  check "$name: exit $want, no run folder" "[ $rc = $want ] && grep -q -- '$say' '$work/err' && [ ! -e '$work/refused' ]"
}
nofolder "--d-rope 2048" 2 "--d-rope must be an integer in \[0, 1024\]" --d-index 4096 --d-rope 2048
nofolder "--d-index 2^30" 2 "--d-index must be an integer in \[1, 4096\]" --d-index 1073741824
nofolder "--d-rope 32 > --d-index 16" 2 "d_rope must be even and in \[0, 16\]" --d-index 16 --d-rope 32
nofolder "--steps 0" 2 "--steps must be an integer" --steps 0 --layers 0
nofolder "--variant bogus" 2 "--variant must be collapsed or expanded" --variant bogus
nofolder "--key-norm bogus" 2 "--key-norm must be none, rms or layer" --key-norm bogus
nofolder "--layers 0,0" 2 "--layers must be distinct" --layers 0,0
nofolder "--warmup 2.5" 2 "--warmup must be an integer" --warmup 2.5
nofolder "--layers 5 (not in the shards)" 1 "layer 5 is not stored in these shards" --layers 5 --d-index 16 --d-rope 8
mkdir -p "$work/noseq"
python3 - "$work/shards/shard-00000.h5" "$work/noseq/shard-00000.h5" <<'PY' 2>/dev/null
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    f.attrs["n_seq"] = 0
    f.attrs["token_end"] = f.attrs["token_begin"]
    ds = []
    f.visititems(lambda n, d: ds.append(d) if isinstance(d, h5py.Dataset) and d.maxshape[0] is None else None)
    for d in ds: d.resize(0, axis=0)
PY
"$bin" train --model "$g" --shards "$work/noseq" --out "$work/refused" --layers 0 --d-index 16 --d-rope 8 2>"$work/err"; rc=$?
check "shards holding 0 sequences: refused cleanly (exit 1, no folder)" "[ $rc = 1 ] && grep -q 'noseq' '$work/err' && [ ! -e '$work/refused' ]"

# Stale *.tmp of a killed run are removed on the next start, saying so.
cp -r "$work/fresh" "$work/stale"
touch "$work/stale/checkpoints/ckpt-00000003.bin.tmp" "$work/stale/log.jsonl.tmp"
"$bin" train --out "$work/stale" --resume 2>"$work/err"; rc=$?
check "stale *.tmp removed on resume, saying so" \
  "[ $rc = 0 ] && [ \$(grep -c 'removed .*\.tmp, left by a killed run' '$work/err') = 2 ] && [ -z \"\$(find '$work/stale' -name '*.tmp')\" ]"

# Run checkpoints: a corrupted, truncated or renamed newest checkpoint is
# refused, the newest valid one is used (resume and export say so), and the
# run still ends with the bytes of the uninterrupted run.
prev=$(printf 'ckpt-%08d.bin' $((steps - 3)))
corrupt() {  # run folder, checkpoint file name, how
  case $3 in
    flip) python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0x10; open(p,'wb').write(b)" "$1/checkpoints/$2" ;;
    cut) truncate -s -9 "$1/checkpoints/$2" ;;
    step0) cp "$1/checkpoints/ckpt-00000000.bin" "$1/checkpoints/$2" ;;
  esac
}
for how in flip cut step0; do
  rm -rf "$work/bad" && cp -r "$work/full" "$work/bad" && corrupt "$work/bad" "$final" $how
  "$bin" export --run "$work/bad" --out "$work/bad_idx" 2>"$work/err"; rc=$?
  check "export, newest checkpoint $how: falls back to step $((steps - 3)), saying so" \
    "[ $rc = 0 ] && grep -q '$final: .*; falling back to an older checkpoint' '$work/err' && grep -q '\"steps\":	$((steps - 3))' '$work/bad_idx/config.json'"
  "$bin" export --run "$work/bad" --out "$work/bad_idx2" --step "$steps" 2>"$work/err"; rc=$?
  check "export --step $steps of a checkpoint ($how) is refused" "[ $rc = 1 ] && [ ! -e '$work/bad_idx2' ] && [ ! -e '$work/bad_idx2.tmp' ]"
  rm -rf "$work/bad_idx"
  "$bin" train --out "$work/bad" --resume 2>"$work/err"; rc=$?
  check "resume, newest checkpoint $how: falls back, renames it .invalid, ends with the same bytes" \
    "[ $rc = 0 ] && grep -q 'resuming $work/bad at step $((steps - 3))' '$work/err' && [ -e '$work/bad/checkpoints/$final.invalid' ] &&
     cmp -s '$work/full/checkpoints/$final' '$work/bad/checkpoints/$final'"
done
grep -q 'checksum mismatch' "$work/err" || true
rm -rf "$work/bad" && cp -r "$work/full" "$work/bad" && corrupt "$work/bad" "$final" flip
"$bin" train --out "$work/bad" --resume 2>"$work/err"
check "a flipped payload byte is named as a checksum mismatch" "grep -q '$final: checksum mismatch' '$work/err'"
# A checkpoint under another step's name: its header step is not the name's.
rm -rf "$work/bad" && cp -r "$work/full" "$work/bad"
mv "$work/bad/checkpoints/$final" "$work/bad/checkpoints/ckpt-00000000.bin"
rm -f "$work/bad/checkpoints/$prev"
"$bin" train --out "$work/bad" --resume 2>"$work/err"; rc=$?
check "the step-$steps checkpoint renamed as step 0: refused, nothing overwritten (exit 1)" \
  "[ $rc = 1 ] && grep -q 'header says step $steps, the file name step 0' '$work/err' && grep -q 'no valid checkpoint' '$work/err'"
rm -rf "$work/bad" && cp -r "$work/full" "$work/bad"
mv "$work/bad/checkpoints/$final" "$work/bad/checkpoints/ckpt-00009999.bin"
"$bin" train --out "$work/bad" --resume 2>"$work/err"; rc=$?
check "a checkpoint named beyond the run's steps is refused; the run resumes from step $((steps - 3)) to the same bytes" \
  "[ $rc = 0 ] && grep -q 'ckpt-00009999.bin: step 9999 is beyond' '$work/err' && cmp -s '$work/full/checkpoints/$final' '$work/bad/checkpoints/$final'"

# Export, and its safetensors read back.
"$bin" export --run "$work/full" --out "$work/idx" 2>/dev/null
check "export wrote model.safetensors + config.json" "[ -s '$work/idx/model.safetensors' ] && [ -s '$work/idx/config.json' ]"
"$bin" info --model "$g" --indexer "$work/idx" >"$work/info.out" 2>"$work/err"; rc=$?
check "info --indexer says which layers it covers; info lists the layer kinds" \
  "[ $rc = 0 ] && grep -q '^indexer .*: 2 of 2 full-attention layers: 0 1 (collapsed, d_I 16' '$work/info.out' &&
   grep -q '^layers  *2 (2 full_attention)' '$work/info.out'"
"$bin" info --model "$goldens/qwen2_bias_legacy" --indexer "$work/idx" >/dev/null 2>"$work/err"; rc=$?
check "info --indexer of another checkpoint: exit 1" "[ $rc = 1 ] && grep -q 'another checkpoint' '$work/err'"
# The same checkpoint with another RoPE scaling (a YaRN folder over the same weights): another
# fingerprint, refused as such; accepted with --indexer-base naming the checkpoint the indexer was trained on.
variant() {  # variant DIR PYTHON-EDIT-OF-c: $g's files linked into DIR, its config.json edited
  rm -rf "$1" && mkdir -p "$1" && for f in "$g"/*; do ln -s "$f" "$1/"; done && rm "$1/config.json" &&
    python3 -c "import json, sys; c = json.load(open(sys.argv[1])); $2; json.dump(c, open(sys.argv[2], 'w'), indent=1)" \
      "$g/config.json" "$1/config.json"
}
variant "$work/yarn" "c['rope_parameters'] = {'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 512, 'rope_theta': 10000.0}"
"$bin" info --model "$work/yarn" --indexer "$work/idx" >/dev/null 2>"$work/err"; rc=$?
check "a YaRN folder over the same weights without --indexer-base: another checkpoint (exit 1)" \
  "[ $rc = 1 ] && grep -q 'another checkpoint' '$work/err'"
"$bin" info --model "$work/yarn" --indexer "$work/idx" --indexer-base "$g" >"$work/info.out" 2>"$work/err"; rc=$?
check "... with --indexer-base the original: accepted (info names the indexer's layers and the YaRN RoPE)" \
  "[ $rc = 0 ] && grep -q '^indexer .*: 2 of 2 full-attention layers' '$work/info.out' && grep -qi 'yarn' '$work/info.out'"
"$bin" logits --model "$work/yarn" --ids "$g/ids.txt" --indexer "$work/idx" --indexer-base "$g" --k 8 \
  --out "$work/yarn-logits.npy" 2>"$work/err"; rc=$?
"$bin" logits --model "$g" --ids "$g/ids.txt" --indexer "$work/idx" --k 8 --out "$work/base-logits.npy" 2>/dev/null
check "... and logits run with the indexer's supports on it, under the YaRN RoPE (not the base's: they differ)" \
  "[ $rc = 0 ] && [ -s '$work/yarn-logits.npy' ] && [ -s '$work/base-logits.npy' ] &&
   ! cmp -s '$work/yarn-logits.npy' '$work/base-logits.npy'"
# Qwen's documented edit, as scripts/get-qwen25coder.sh --yarn writes it: rope_scaling added, the context x4.
variant "$work/qyarn" "c['rope_scaling'] = {'type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': 512}; c['max_position_embeddings'] = 2048"
"$bin" eval --model "$work/qyarn" --ids "$work/ids.txt" --ctx 48 --k 8 --bsel 1 --indexer "$work/idx" \
  --indexer-base "$g" --json "$work/qyarn.json" 2>"$work/err"; rc=$?
check "... Qwen's rope_scaling form (and max_position_embeddings x4): eval --indexer-base adds indexer rows" \
  "[ $rc = 0 ] && grep -q '\"mode\":.*\"indexer\"' '$work/qyarn.json'"
"$bin" eval --model "$work/qyarn" --ids "$work/ids.txt" --ctx 48 --k 8 --bsel 1 --indexer "$work/idx" \
  --json "$work/qyarn-no.json" 2>"$work/err"; rc=$?
check "... and without --indexer-base eval refuses it (exit 1, another checkpoint, no JSON)" \
  "[ $rc = 1 ] && grep -q 'another checkpoint' '$work/err' && [ ! -e '$work/qyarn-no.json' ] && [ ! -e '$work/qyarn-no.json.partial' ]"
"$bin" info --model "$work/yarn" --indexer "$work/idx" --indexer-base "$goldens/qwen2_bias_legacy" >/dev/null 2>"$work/err"; rc=$?
check "--indexer-base of another checkpoint (other tensors): exit 1, both folders named" \
  "[ $rc = 1 ] && grep -q 'hold different tensors' '$work/err' && grep -q '$goldens/qwen2_bias_legacy' '$work/err' &&
   grep -q '$work/yarn ' '$work/err'"
variant "$work/eps" "c['rms_norm_eps'] = 1e-6"
"$bin" info --model "$work/eps" --indexer "$work/idx" --indexer-base "$g" >/dev/null 2>"$work/err"; rc=$?
check "--indexer-base with a config that differs beyond the RoPE: exit 1, the key and both files named" \
  "[ $rc = 1 ] && grep -q '$work/eps/config.json: \"rms_norm_eps\" differs from $g/config.json' '$work/err'"
"$bin" info --model "$g" --indexer-base "$g" >/dev/null 2>"$work/err"; rc=$?
check "--indexer-base without --indexer: usage error (exit 2)" "[ $rc = 2 ] && grep -q 'needs --indexer' '$work/err'"
"$bin" eval --model "$g" --ids "$g/ids.txt" --ctx 32 --k 8 --bsel 1 --json "$work/x.json" --indexer-base "$g" >/dev/null 2>"$work/err"; rc=$?
check "eval --indexer-base without --indexer: exit 2" "[ $rc = 2 ] && grep -q 'needs --indexer' '$work/err'"
"$bin" export --run "$work/full" --out "$work/idx" 2>"$work/err"; rc=$?
check "export refuses an existing --out" "[ $rc = 1 ]"
# Hostile --out names with a leftover OUT.tmp: removed with the C library, never a shell.
inj="$work/inj';touch $work/PWNED;'"
mkdir -p "$inj.tmp"
"$bin" export --run "$work/full" --out "$inj" 2>"$work/err"; rc=$?
check "export --out \"DIR/inj';touch PWNED;'\" runs no shell" \
  "[ $rc = 0 ] && [ ! -e '$work/PWNED' ] && [ -s \"\$inj/config.json\" ] && [ ! -e \"\$inj.tmp\" ] && grep -q 'removed .*, left by an interrupted export' '$work/err'"
mkdir -p "$work/x" "$work/victim.tmp" && touch "$work/x/keep" "$work/victim.tmp/keep"
two="$work/x' '$work/victim"
mkdir -p "$two.tmp"
"$bin" export --run "$work/full" --out "$two" 2>/dev/null; rc=$?
check "export --out \"DIR/x' 'DIR/victim\" removes only its own leftover" \
  "[ $rc = 0 ] && [ -e '$work/x/keep' ] && [ -e '$work/victim.tmp/keep' ] && [ -s \"\$two/config.json\" ]"
"$bin" export --run "$work/full" --out "$work/idx_k0" --k 0 2>/dev/null; rc=$?
check "export --k 0: exit 2" "[ $rc = 2 ] && [ ! -e '$work/idx_k0' ]"
"$bin" export --run "$work/full" --out "$work/idx_s" --step 4abc 2>/dev/null; rc=$?
check "export --step 4abc: exit 2" "[ $rc = 2 ] && [ ! -e '$work/idx_s' ]"
"$bin" export --run "$work/full" --out "$work/idx_s" --step 7 2>/dev/null; rc=$?
check "export --step 7 (no such checkpoint): exit 1, nothing left" "[ $rc = 1 ] && [ ! -e '$work/idx_s' ] && [ ! -e '$work/idx_s.tmp' ]"
"$bin" scores --indexer "$work/idx" --shard "$work/held/shard-00000.h5" --layer 0x10 --positions 1 --out "$work/s.npy" 2>/dev/null; rc=$?
check "scores --layer 0x10: exit 2" "[ $rc = 2 ] && [ ! -e '$work/s.npy' ]"

# Exported configs that are not what export writes: refused at load (exit 1,
# the file named), no OUT.npy or OUT.npy.tmp left by logits --indexer.
badcfg() {  # name, python statement on the dict c
  rm -rf "$work/badix" && cp -r "$work/idx" "$work/badix"
  python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); $2; json.dump(c, open(p,'w'))" "$work/badix/config.json"
  "$bin" logits --model "$g" --ids "$g/ids.txt" --out "$work/bad.npy" --indexer "$work/badix" 2>"$work/err"; local rc=$?
  check "export config $1: refused (exit 1, file named, no output)" \
    "[ $rc = 1 ] && grep -q '$work/badix/' '$work/err' && [ ! -e '$work/bad.npy' ] && [ ! -e '$work/bad.npy.tmp' ]"
}
badcfg "default_bsel 0" "c['default_bsel']=0"
badcfg "default_bsel -1" "c['default_bsel']=-1"
badcfg "default_k -5" "c['default_k']=-5"
badcfg "default_k 0" "c['default_k']=0"
badcfg "default_k 2.5" "c['default_k']=2.5"
badcfg "default_k missing" "del c['default_k']"
badcfg "d_index 2^30" "c['d_index']=2**30"
badcfg "d_rope 2048" "c['d_rope']=2048"
badcfg "d_rope odd" "c['d_rope']=7"
badcfg "d_index 8 (tensor shapes disagree)" "c['d_index']=8"
badcfg "d_model 32 (tensor shapes disagree)" "c['d_model']=32"
badcfg "n_heads 0" "c['n_heads']=0"
badcfg "norm_eps 0" "c['norm_eps']=0"
badcfg "rope_theta 1e-300" "c['rope_theta']=1e-300"
badcfg "variant bogus" "c['variant']='bogus'"
badcfg "key_norm none (tensors of a LayerNorm)" "c['key_norm']='none'"
badcfg "layers [99]" "c['layers']=[99]"
badcfg "layers [0, 0]" "c['layers']=[0,0]"
badcfg "layers [-1]" "c['layers']=[-1]"
badcfg "layers ['0']" "c['layers']=['0']"
badcfg "format_version 2" "c['format_version']=2"
here=$(cd "$(dirname "$0")/.." && pwd)
check "another stack (numpy + safetensors + h5py) recomputes the exported scores" \
  "python3 '$here/scripts/check-export.py' '$bin' '$work/idx' '$work/held/shard-00000.h5' 1"
"$bin" train --model "$g" --shards "$work/shards" --out "$work/exp" --steps 5 --d-index 16 --d-rope 8 \
  --variant expanded --heads 2 --key-norm rms 2>/dev/null
"$bin" export --run "$work/exp" --out "$work/idx_exp" 2>/dev/null
check "... and the expanded variant's" \
  "python3 '$here/scripts/check-export.py' '$bin' '$work/idx_exp' '$work/held/shard-00000.h5' 0"

# The export at inference: k >= T is dense exactly; another checkpoint is refused.
"$bin" logits --model "$g" --ids "$g/ids.txt" --out "$work/dense.npy" 2>/dev/null
"$bin" logits --model "$g" --ids "$g/ids.txt" --out "$work/ix.npy" --indexer "$work/idx" --k 48 2>/dev/null
check "logits --indexer with k >= T == dense (bytes)" "cmp -s '$work/dense.npy' '$work/ix.npy'"
"$bin" logits --model "$g" --ids "$g/ids.txt" --out "$work/ix8.npy" --indexer "$work/idx" --k 8 --bsel 4 2>/dev/null
check "logits --indexer with k = 8 differs from dense" "[ -s '$work/ix8.npy' ] && ! cmp -s '$work/dense.npy' '$work/ix8.npy'"
"$bin" logits --model "$goldens/qwen3_qknorm" --ids "$g/ids.txt" --out "$work/x.npy" --indexer "$work/idx" 2>"$work/err"; rc=$?
check "an indexer of another checkpoint is refused" "[ $rc = 1 ] && grep -q 'another checkpoint' '$work/err' && [ ! -e '$work/x.npy' ]"
"$bin" eval --model "$g" --ids "$work/ids.txt" --ctx 48 --k 8 --bsel 1 --indexer "$work/idx" --json "$work/ev.json" 2>/dev/null
check "eval --indexer adds indexer rows" "grep -q '\"mode\":.*\"indexer\"' '$work/ev.json'"
# An indexer for one of the two layers: the other layer stays dense, and its
# keys count as kept. The rows say so: the indexer row ran sparse at layer 0
# only, the oracle row at both; per-query top-k keeps min(t+1, k) keys in a
# sparse layer, so the indexer row's sparsity is exactly half the oracle's, and
# over its sparse layer alone (sparsity_sparse_layers) the oracle's.
one_args=("${args[@]}")
one_args[8]=2  # the value of --steps
"$bin" "${one_args[@]}" --out "$work/one" --layers 0 2>/dev/null
"$bin" export --run "$work/one" --out "$work/idx_one" 2>/dev/null
"$bin" eval --model "$g" --ids "$work/ids.txt" --ctx 48 --k 8 --bsel 1 --indexer "$work/idx_one" --json "$work/ev1.json" 2>/dev/null
check "eval of a one-layer indexer: sparse at layer 0 only, the dense layer counted whole (sparsity half the oracle's)" \
  "python3 -c \"import json,sys; r={x['mode']: x for x in json.load(open('$work/ev1.json'))}; i, o = r['indexer'], r['oracle']; sys.exit(not (i['sparse_layers'] == [0] and o['sparse_layers'] == [0, 1] and i['provenance']['indexer_layers'] == [0] and abs(i['sparsity'] - o['sparsity'] / 2) < 1e-6 and abs(i['sparsity_sparse_layers'] - o['sparsity']) < 1e-6 and i['mass_recall'] >= 0.5 and abs(2 * i['mass_recall'] - 1 - i['mass_recall_sparse_layers']) < 1e-5))\""

# The held-out recall's k: ctx/8 by default (ctx 48: 6), refused from ctx/2 on, before any run folder.
"$bin" train --model "$g" --shards "$work/shards" --heldout "$work/held" --out "$work/rk" --steps 2 --d-index 16 \
  --d-rope 8 --min-pos 4 2>"$work/err"; rc=$?
check "recall-k defaults to ctx/8 and says so" "[ $rc = 0 ] && grep -q 'held-out recall@6 (the default: ctx 48 / 8' '$work/err' && grep -q '\"recall_k\":[[:space:]]*6,' '$work/rk/config.json'"
"$bin" train --model "$g" --shards "$work/shards" --out "$work/rk24" --steps 2 --d-index 16 --d-rope 8 --recall-k 24 \
  2>"$work/err"; rc=$?
check "--recall-k >= ctx/2 exits 2, names the ctx, leaves no folder" "[ $rc = 2 ] && grep -q 'below half the shards. ctx 48' '$work/err' && [ ! -e '$work/rk24' ]"

check "no *.tmp left anywhere" "[ -z \"\$(find '$work' -name '*.tmp' ! -path '*/victim.tmp*')\" ]"
[ "$fails" = 0 ] && echo "all train checks passed"
[ "$fails" = 0 ]
