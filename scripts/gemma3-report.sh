#!/usr/bin/env bash
# gemma3-report.sh: the long-context reports of a hybrid checkpoint (docs/results.md, Gemma 3 270M), in
# one command; model-agnostic (the layers it acts on are the checkpoint's full-attention layers:
# spindle teacher's default --layers, so sliding-window layers never get an indexer).
#   a. oracle gap: `spindle eval` (dense + attention-mass oracle) on held-out text at every
#      length x k x b_sel (k >= length is left out: spindle eval refuses it);
#   b. evidence decomposition: at each --train-lengths L, teacher shards of the training text
#      (`spindle teacher --ctx L`), `spindle train`, `spindle export`, then `spindle eval --indexer` at L:
#      dense, oracle and trained indexer on the same held-out sequences (oracle gap, indexer gap, and the
#      block-sharing realization gap b_sel > 1 vs b_sel 1). At a length in both lists the oracle-gap rows
#      come from this eval (same sequences, same command);
#      --indexers L=DIR evaluates already exported indexers at L instead (no teacher, train, export);
#   c. TTFT of the same configurations: `spindle bench --model MODEL --no-kernels` per length, k and block
#      b_sel (dense, indexer per query, indexer block-shared, oracle per query; random indexer weights: the
#      timing does not depend on training), GPU only;
#   d. report.md (+ report.json) in --out: the tables, each with the command line that regenerates it, and
#      the list of every spindle call with its time. scripts/replace-section.py GEMMA3-REPORT OUT/report.md
#      docs/results.md puts it into the results page.
# Every call's output is reused on a rerun when its command line is unchanged (a run cut short continues;
# teacher and train resume); --fresh redoes everything. Logs next to each output (*.log).
#
#   scripts/gemma3-report.sh --model models/gemma3-270m --bin build-cuda/spindle --out results/gemma3
#   # the plumbing on a CPU, in minutes:
#   scripts/gemma3-report.sh --model models/smollm2 --device cpu --lengths "256 512" --ks "32 64" \
#       --bsels "1 64" --train-lengths 256 --train-seqs 4 --steps 4 --positions 512 --out /tmp/g3r
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
invocation="scripts/gemma3-report.sh$(printf ' %q' "$@")"

usage() {
    cat <<'EOF'
usage: scripts/gemma3-report.sh [options]   (lists: spaces or commas, e.g. "4096 8192" or 4096,8192)
  --model DIR           checkpoint (default models/gemma3-270m)
  --bin PATH            spindle binary (default build/spindle; on a GPU a -DSPINDLE_CUDA=ON build)
  --device cuda|cpu     where everything runs (default cuda; cpu: no TTFT)
  --precision P         spindle eval --precision with cuda (default fp32)
  --lengths LIST        oracle-gap lengths (default "4096 8192 16384 32768")
  --ks LIST             keys per support (default "64 256 1024 2048")
  --bsels LIST          queries per shared support, 1 = per query (default "1 64")
  --train-lengths LIST  lengths the indexers are trained and evaluated at (default "8192 16384 32768";
                        "none" skips training)
  --heldout PATH        held-out text, file or folder (default corpus/heldout)
  --train-text PATH     training text (default corpus/train)
  --positions P         scored positions per eval length: n-seq = max(1, P / length) (default 65536)
  --train-seqs N        teacher sequences per train length (default 32)
  --heldout-seqs N      held-out teacher sequences for train's recall (default 2)
  --steps N             optimizer steps (default 256); warm-up steps/10, held-out recall every steps/8
  --lr X                peak learning rate (default 3e-3)
  --train-flags "..."   extra spindle train flags (e.g. "--d-index 128 --d-rope 64")
  --indexers LIST       L=DIR pairs (e.g. 32768=runs/idx32k): at train length L evaluate the exported
                        indexers in DIR (spindle export's folder) instead of training them
  --oracle-ttft-max L   longest length whose oracle TTFT bench measures (default: the longest length)
  --bench-timeout S     wall-clock limit of each bench call (default 600)
  --out DIR             outputs (default results/gemma3)
  --fresh               redo every call even when its output is there
EOF
}

lst() { echo "${1//,/ }" | xargs; }   # "a,b c" -> "a b c"
model=models/gemma3-270m bin=build/spindle device=cuda precision=fp32
lengths="4096 8192 16384 32768" ks="64 256 1024 2048" bsels="1 64" train_lengths="8192 16384 32768"
heldout=corpus/heldout train_text=corpus/train positions=65536 train_seqs=32 heldout_seqs=2 steps=256 lr=3e-3
train_flags="" indexers="" oracle_ttft_max="" bench_timeout=600 out=results/gemma3 fresh=0
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --fresh) fresh=1; shift; continue ;;
    esac
    [ $# -ge 2 ] || { echo "gemma3-report: $1 needs a value" >&2; usage >&2; exit 2; }
    case "$1" in
        --model) model=$2 ;; --bin) bin=$2 ;; --device) device=$2 ;; --precision) precision=$2 ;;
        --lengths) lengths=$(lst "$2") ;; --ks) ks=$(lst "$2") ;; --bsels) bsels=$(lst "$2") ;;
        --train-lengths) train_lengths=$(lst "$2") ;; --heldout) heldout=$2 ;; --train-text) train_text=$2 ;;
        --positions) positions=$2 ;; --train-seqs) train_seqs=$2 ;; --heldout-seqs) heldout_seqs=$2 ;;
        --steps) steps=$2 ;; --lr) lr=$2 ;; --train-flags) train_flags=$2 ;; --indexers) indexers=$(lst "$2") ;;
        --oracle-ttft-max) oracle_ttft_max=$2 ;; --bench-timeout) bench_timeout=$2 ;; --out) out=$2 ;;
        *) echo "gemma3-report: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift 2
done
[ "$train_lengths" = none ] && train_lengths=""
posint() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }
for v in "lengths:$lengths" "ks:$ks" "bsels:$bsels" "train-lengths:$train_lengths"; do
    for x in ${v#*:}; do posint "$x" || { echo "gemma3-report: --${v%%:*}: '$x' is not a positive integer" >&2; exit 2; }; done
done
[ -n "$lengths" ] && [ -n "$ks" ] && [ -n "$bsels" ] || { echo "gemma3-report: --lengths, --ks and --bsels need values" >&2; exit 2; }
for v in "positions:$positions" "train-seqs:$train_seqs" "heldout-seqs:$heldout_seqs" "steps:$steps" \
         "bench-timeout:$bench_timeout" ${oracle_ttft_max:+"oracle-ttft-max:$oracle_ttft_max"}; do
    posint "${v#*:}" || { echo "gemma3-report: --${v%%:*} wants a positive integer, not '${v#*:}'" >&2; exit 2; }
done
case "$device" in cpu|cuda) ;; *) echo "gemma3-report: --device is cpu or cuda, not '$device'" >&2; exit 2 ;; esac
case "$precision" in fp32|mixed|bf16) ;; *) echo "gemma3-report: --precision is fp32, mixed or bf16" >&2; exit 2 ;; esac
read -ra train_extra <<<"$train_flags"
in_list() { local x; for x in $2; do [ "$x" = "$1" ] && return 0; done; return 1; }
declare -A given_idx=()
for pair in $indexers; do
    L=${pair%%=*} d=${pair#*=}
    [[ $pair == *=* ]] && posint "$L" && [ -n "$d" ] || { echo "gemma3-report: --indexers: '$pair' is not L=DIR" >&2; exit 2; }
    in_list "$L" "$train_lengths" || { echo "gemma3-report: --indexers: $L is not one of --train-lengths ($train_lengths)" >&2; exit 2; }
    [ -f "$d/config.json" ] || { echo "gemma3-report: --indexers: $d/config.json not found (a folder written by spindle export)" >&2; exit 1; }
    given_idx[$L]=$d
done

fail() { echo "gemma3-report: $*" >&2; exit 1; }
[ -x "$bin" ] || fail "spindle binary $bin not found (scripts/build.sh build; for the GPU scripts/build.sh build-cuda -DSPINDLE_CUDA=ON)"
[ -f "$model/config.json" ] || fail "model $model: no config.json (scripts/get-gemma3.sh makes models/gemma3-270m)"
[ -e "$heldout" ] || fail "held-out text $heldout missing (scripts/get-corpus.sh)"
[ -z "$train_lengths" ] || [ -e "$train_text" ] || fail "training text $train_text missing (scripts/get-corpus.sh)"
mkdir -p "$out"
"$bin" info --model "$model" >"$out/info.txt" 2>&1 || fail "spindle info --model $model failed: $(cat "$out/info.txt")"

start=$(date +%s)
say() { echo "gemma3-report: $* ($(( $(date +%s) - start )) s)" >&2; }
manifest=$out/manifest.tsv
: >"$manifest.tmp"
failed=0

. "$root/scripts/shell-line.sh"  # shell_line

# step KIND TAG OUTPUT TIMEOUT -- COMMAND...: runs COMMAND (stdout+stderr to OUTPUT.log) unless OUTPUT is
# there from the same command line; one manifest line either way. OUTPUT is a file or a folder.
step() {
    local kind=$1 tag=$2 res=$3 limit=$4
    shift 5
    local cmd status=ok secs=0 rc=0 t0
    cmd=$(shell_line "$@")
    if [ $fresh = 0 ] && [ -e "$res" ] && [ "$(cat "$res.cmd" 2>/dev/null)" = "$cmd" ]; then
        say "reusing $res"
        secs=$(cat "$res.secs" 2>/dev/null || echo 0)
    else
        rm -f "$res.cmd" "$res.secs"
        if [ -d "$res" ]; then
            [ "$kind" != export ] || rm -rf -- "$res"   # teacher and train continue what is there (--resume)
        else
            rm -f "$res"
        fi
        say "$kind $tag: $cmd"
        t0=$(date +%s)
        if [ "$limit" -gt 0 ]; then timeout "$limit" "$@" >"$res.log" 2>&1 || rc=$?
        else "$@" >"$res.log" 2>&1 || rc=$?; fi
        secs=$(( $(date +%s) - t0 ))
        if [ $rc = 0 ] && [ -e "$res" ]; then
            printf '%s\n' "$cmd" >"$res.cmd"
            echo "$secs" >"$res.secs"
            say "$kind $tag done in $secs s"
        else
            status="failed: exit $rc; log $res.log"
            [ $rc != 124 ] || status="failed: over --bench-timeout $limit s; log $res.log"
            tail -n 15 "$res.log" >&2 || true
            say "$kind $tag FAILED (exit $rc) after $secs s"
        fi
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$tag" "$res" "$status" "$secs" "$cmd" >>"$manifest.tmp"
    [ "$status" = ok ]
}

nseq_for() { local n=$(( positions / $1 )); [ $n -ge 1 ] || n=1; echo $n; }
ks_below() { local k s=""; for k in $ks; do [ "$k" -lt "$1" ] && s+="$k,"; done; echo "${s%,}"; }
csv() { echo "${1// /,}"; }
dev=(--device "$device"); [ "$device" = cuda ] && dev+=(--precision "$precision")
eval_dev=("${dev[@]}")

# a. Oracle gap at the lengths not trained at (those come with the indexer evals of b).
for L in $lengths; do
    in_list "$L" "$train_lengths" && continue
    lk=$(ks_below "$L"); [ -n "$lk" ] || { say "ctx $L: every k >= $L, no eval"; continue; }
    n=$(nseq_for "$L")
    step eval "oracle ctx $L" "$out/eval_oracle_ctx$L.json" 0 -- \
        "$bin" eval --model "$model" --text "$heldout" --ctx "$L" --n-seq "$n" --k "$lk" --bsel "$(csv "$bsels")" \
        "${eval_dev[@]}" --json "$out/eval_oracle_ctx$L.json" || failed=1
done

# b. Teacher -> train -> export -> eval (dense, oracle, indexer) at each train length.
tdev=(--device "$device")
for L in $train_lengths; do
    if [ -n "${given_idx[$L]:-}" ]; then
        idx=${given_idx[$L]}
        say "ctx $L: indexers from $idx (no teacher, train or export)"
    else
        for part in "train:$train_text:$train_seqs" "heldout:$heldout:$heldout_seqs"; do
            IFS=: read -r name text n <<<"$part"
            sh=$out/shards_${name}_ctx$L
            [ $fresh = 1 ] && [ -d "$sh" ] && rm -rf -- "$sh"
            # --resume always (a missing or empty --out starts fresh): a run cut short continues
            step teacher "$name ctx $L" "$sh" 0 -- \
                "$bin" teacher --model "$model" --text "$text" --ctx "$L" --max-seq "$n" --out "$sh" "${tdev[@]}" --resume ||
                { failed=1; continue 2; }
        done
        run=$out/run_ctx$L
        [ $fresh = 1 ] && [ -d "$run" ] && rm -rf -- "$run"
        warm=$(( steps / 10 )); every=$(( steps / 8 )); [ $every -ge 1 ] || every=1
        step train "ctx $L" "$run" 0 -- \
            "$bin" train --model "$model" --shards "$out/shards_train_ctx$L" --heldout "$out/shards_heldout_ctx$L" \
            --out "$run" --steps "$steps" --warmup "$warm" --lr "$lr" --eval-every "$every" "${tdev[@]}" \
            "${train_extra[@]}" --resume || { failed=1; continue; }
        idx=$out/idx_ctx$L
        step export "ctx $L" "$idx" 0 -- "$bin" export --run "$run" --out "$idx" || { failed=1; continue; }
    fi
    lk=$(ks_below "$L"); [ -n "$lk" ] || { say "ctx $L: every k >= $L, no eval"; continue; }
    n=$(nseq_for "$L")
    step eval "indexer ctx $L" "$out/eval_indexer_ctx$L.json" 0 -- \
        "$bin" eval --model "$model" --text "$heldout" --ctx "$L" --n-seq "$n" --k "$lk" --bsel "$(csv "$bsels")" \
        --indexer "$idx" "${eval_dev[@]}" --json "$out/eval_indexer_ctx$L.json" || failed=1
done

# c. TTFT on the GPU: one bench call per (length, k, block b_sel).
if [ "$device" = cuda ]; then
    all_lengths=$(printf '%s\n' $lengths $train_lengths | sort -n | uniq | xargs)
    maxlen=$(printf '%s\n' $all_lengths | tail -1)
    block=""; for s in $bsels; do [ "$s" -gt 1 ] && block+="$s "; done; [ -n "$block" ] || block=1
    for L in $all_lengths; do
        for k in $ks; do
            [ "$k" -lt "$L" ] || continue
            for s in $block; do
                j=$out/bench_ctx${L}_k${k}_b$s.json
                step bench "ctx $L k $k b_sel $s" "$j" "$bench_timeout" -- \
                    "$bin" bench --model "$model" --no-kernels --ctx "$L" --k "$k" --bsel "$s" --device cuda \
                    --max-oracle-ttft-ctx "${oracle_ttft_max:-$maxlen}" --json "$j" || failed=1
            done
        done
    done
else
    say "--device cpu: TTFT not measured (spindle bench runs on the GPU)"
fi
mv "$manifest.tmp" "$manifest"

# d. Tables.
total=$(( $(date +%s) - start ))
python3 scripts/gemma3-report.py --manifest "$manifest" --out "$out" --model "$model" --heldout "$heldout" \
    --train-text "$train_text" --lengths "$lengths" --ks "$ks" --bsels "$bsels" --train-lengths "$train_lengths" \
    --device "$device" --precision "$precision" --steps "$steps" --train-seqs "$train_seqs" --indexers "$indexers" \
    --seconds "$total" --invocation "$invocation" || fail "scripts/gemma3-report.py failed"
say "done: $out/report.md, $out/report.json"
[ $failed = 0 ] || fail "some calls failed (see the manifest $manifest and the logs beside each output)"
