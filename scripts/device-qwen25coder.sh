#!/usr/bin/env bash
# device-qwen25coder.sh STAGE: Qwen2.5-Coder-1.5B-Instruct (docs/qwen25coder.md) ON the GPU machine, in
# stages that fit consecutive calls (each under the 10-minute limit; the machine keeps /root and the
# ignored folders between calls made back to back). Build first with `bash scripts/device-check.sh`
# (ONLY_BUILD=1 is enough) in the first call.
#
# What travels (docs/gpu.md): .deb/ in the first call; .dev/c1/ (text/check.txt, text/heldout.txt,
# text/train.txt and the gguf wheel); the RULER task files .dev/ruler-qwen/tasks_{4k,8k,16k,32k,64k,128k}
# .jsonl.gz (scripts/ruler-tasks.py; 0.6, 1.2, 2.4, 4.7, 3.8 and 7.5 MB: docs/ruler.md), each carried
# once: every stage copies the ones it finds into /root/q25/tasks/;
# the GGUF in parts .dev/qp/pNN made here, each small enough that the tree plus the part stay under the
# 64 MiB a call carries. With docs/ and tests/goldens/ left out of the tree (git sparse-checkout,
# docs/gpu.md "Smaller transfers": about 2.6 MB) the parts are p00 = the first 17,000,000 bytes (it
# travels with .deb/), p01 … p17 of 64,000,000 and p18 the rest:
#     G=.cache/qwen25coder/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
#     dd if=$G of=.dev/qp/p00 bs=1000000 count=17
#     for i in $(seq 1 17); do dd if=$G of=.dev/qp/p$(printf %02d $i) bs=1000000 skip=$((17+64*(i-1))) count=64; done
#     dd if=$G of=.dev/qp/p18 bs=1000000 skip=1105
# A part call may run other GPU work after keeping its part (CMD), so the transfer calls are not idle.
#
#   stash              keep the task files found in .dev/ruler-qwen/ in /root/q25/tasks/ (unpacked; every
#                      stage does this too, so a file needs to travel only once)
#   part NN [CMD...]   keep .dev/qp/pNN in /root/q25/, then run CMD (if any) from the repository root
#   convert            join /root/q25/p?? in order, check size and sha256 (cc324af0…b046), convert to
#                      models/qwen25coder-1.5b (scripts/gguf_to_hf.py, float32), then spindle's logits
#                      on 2,048 real tokens of .dev/c1/text/check.txt against HF transformers
#                      (Qwen2ForCausalLM) on the GPU, fp32 and bf16 (scripts/check-gemma3-spindle.py)
#   yarn               models/qwen25coder-1.5b-yarn: Qwen's YaRN rope_scaling (factor 4, original 32,768)
#                      over the converted folder (scripts/get-qwen25coder.sh --yarn), for 64K and 128K   ~1 s
#   train [STEPS]      online training of the indexers of all 28 layers at 32,768 tokens (spindle train
#                      --text .dev/c1/text/train.txt --device cuda --teacher-precision bf16, held-out
#                      recall on .dev/c1/text/heldout.txt every EVAL_EVERY steps, a checkpoint every
#                      CKPT_EVERY) for STEPS steps (default 300), stopped at the stage budget; the next
#                      `train` with the same STEPS resumes from the newest checkpoint (another STEPS starts a
#                      new run in /root/q25/run-ctxCTX-stepsSTEPS; windows start with the BOS, train --bos, and
#                      the folder's name ends in -bos where the tokenizer sets add_bos_token). Each call then exports the
#                      newest checkpoint to /root/q25/idx (the indexer the other stages use; INDEXER=DIR
#                      elsewhere). TRAIN_MIX=F trains with --retrieval-mix F (run folder …-mixF); MODEL
#                      and TRAIN_CTX train another folder at another length (e.g. the YaRN folder at
#                      65536): the stages that use that indexer then take INDEXER=DIR, INDEXER_BASE=FOLDER
#                      (the folder it was trained on) and INDEXER_TAG=T (their result names get _iT)
#   ruler LEN [K] [BSEL]  spindle eval --tasks-file tasks_LEN (YaRN folder above 32K): with K "dense"
#                      the dense rows only; else one call per k of K (default GRID_K), each with the
#                      oracle and (once trained) the indexer at every b_sel of BSEL (default GRID_BSEL;
#                      `eval --modes`, RULER_MODES overrides: the dense rows come from the "dense" call),
#                      each call its own JSON. RULER_PER_TASK=N scores the first N instances of each task
#   ruler FILE         as before: one spindle eval --tasks-file FILE at RULER_K × RULER_BSEL
#   nll LEN [K] [BSEL] spindle eval on held-out text (.dev/c1/text/heldout.txt) at ctx LEN: NLL, ΔNLL,
#                      logit KL, top-1 agreement, mass recall of dense, oracle and indexer, one call per k,
#                      n-seq = max(1, NLL_POSITIONS / LEN) (NLL_POSITIONS default 65536; EXEC_BLOCK=B:
#                      eval --exec-block B, the names carry _xB; SPINDLE_STATS_FP32=1: recall and every
#                      sparse row on the fp32 support kernel, the names carry _fp32stats); windows start
#                      with BOS (eval --bos) where the model's tokenizer_config.json sets add_bos_token (Gemma 3)
#   ttft LENS [K] [BSEL]  spindle bench --no-kernels on the same model, one call per group of LENS (≤ 32K on
#                      the plain folder, above on the YaRN one) with the whole K and BSEL as lists (the model
#                      loads once): dense once, indexer per query and oracle (LEN ≤ ORACLE_TTFT_MAX,
#                      default 32768) once per k, indexer and oracle (≤ ORACLE_TTFT_MAX) block-shared at
#                      every (k, b_sel > 1), and with EXEC_BLOCK=B the per-query indexer and oracle as
#                      unions of B queries (bench's indexer_union and oracle_union, the path eval
#                      --exec-block runs) in place of the per-query gathers; random indexer weights (the
#                      timing does not depend on training)
#                      (REFINE_X=F: one call per (k, block b_sel) instead, each adding the two-stage run,
#                      indexer_refine with F·k candidates; TTFT_MODES=oracle or indexer: only that mode's
#                      runs besides dense, the call's name tagged _mMODES)
#   frontier LEN [K] [BSEL]  nll, ttft and ruler at one length, in that order, in one call
#   grid LENS [K] [BSEL]  the quality rows of several lengths side by side, then their TTFT: for each
#                      length of LENS the dense RULER call and, per k, its RULER and NLL calls, each a
#                      background job (scripts/device-bg.sh, BG=$STATE/bg) running this script's stage,
#                      at most GRID_JOBS (default 6) at once (GRID_DENSE=0 leaves the dense RULER calls out,
#                      GRID_NLL=0 the NLL calls; RULER_MODES names the jobs), each started once the card has
#                      GRID_FREE_MIB (default 26000) MiB free, GRID_RAMP_S (default 30) s after the one
#                      before; the jobs share the card, so their times are not speeds. When they have ended
#                      (or GRID_TTFT_S, default 240, s before the budget: the rest are stopped, rerun to
#                      continue) the ttft stage runs alone on the card
#                      (GRID_NO_TTFT=1 leaves it out: grids of other lengths side by side, one ttft after).
#                      Results of every job in $OUT; each job's log in $STATE/grid/NAME/
#
# An order for 30 minutes of one machine, with the times it took: docs/qwen25coder.md ("What 30 minutes
# of one H200 hold"): the build and the long stages as background jobs (scripts/device-bg.sh) while the
# parts travel; the trained indexer (INDEXER=DIR) travels in a call of its own.
# Each stage stops starting spindle calls once BUDGET_S (default 540) seconds have passed, and kills the
# running one at BUDGET_S, so a call ends before the 10-minute limit with every finished JSON in $OUT;
# rerunning a stage skips the calls whose JSON is already in /root/q25/res with the same command line.
# Environment: GRID_K (default 256,512,1024,2048,4096), GRID_BSEL (default 1,16,64), PREC (bf16: the
# prefill's precision of eval and the indexer's; fp32 for the reference), BUDGET_S, RULER_PER_TASK,
# NLL_POSITIONS, ORACLE_TTFT_MAX, TTFT_PROFILE=1 (ttft: each run once more, op by op, the selection apart:
# bench --ttft-profile), REFINE_X (the indexer rows at b_sel > 1 as two-stage supports with
# REFINE_X·k candidates per block: eval --refine; the call names carry _rFx), EXEC_BLOCK=B (the RULER
# calls' per-query rows as unions of B queries on tensor cores: eval --exec-block, GPU bf16; the names
# carry _xB), and for a CPU smoke test DEVICE=cpu SPINDLE=build/spindle
# MODEL=models/smollm2 MODEL_YARN=... TASKS=DIR TRAIN_TEXT=... HELDOUT_TEXT=... TRAIN_CTX=1024 STATE=DIR
# (ttft needs a GPU: with DEVICE=cpu it says so and does nothing). Results in $OUT.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/device-out}
STATE=${STATE:-/root/q25}
mkdir -p "$OUT" "$STATE"
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$ROOT/build-device
SPINDLE=${SPINDLE:-$B/spindle}
M=${MODEL:-models/qwen25coder-1.5b}
MY=${MODEL_YARN:-models/qwen25coder-1.5b-yarn}
DEVICE=${DEVICE:-cuda}
PREC=${PREC:-bf16}
TASKS=${TASKS:-.dev/ruler-qwen}
TRAIN_TEXT=${TRAIN_TEXT:-.dev/c1/text/train.txt}
HELDOUT_TEXT=${HELDOUT_TEXT:-.dev/c1/text/heldout.txt}
TRAIN_CTX=${TRAIN_CTX:-32768}
GRID_K=${GRID_K:-256,512,1024,2048,4096}
GRID_BSEL=${GRID_BSEL:-1,16,64}
BUDGET_S=${BUDGET_S:-540}
RES=$STATE/res
IDX=${INDEXER:-$STATE/idx}
GGUF_SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
GGUF_BYTES=1117320768
T0=$(date +%s)
stage=${1:-}
. "$ROOT/scripts/shell-line.sh"  # shell_line

say() { echo "device-qwen25coder: $* ($(($(date +%s) - T0)) s)"; }
left() { echo $((BUDGET_S - ($(date +%s) - T0))); }
dev_flags() { if [ "$DEVICE" = cuda ]; then echo --device cuda --precision "$PREC"; else echo --device cpu; fi; }
# The folder for a length: the plain one up to its 32,768 positions, the YaRN variant above.
model_for() { if [ "$1" -gt 32768 ]; then echo "$MY"; else echo "$M"; fi; }
need_model() {
    [ -f "$1/config.json" ] || { say "no $1 (stage convert, and yarn for > 32K)"; exit 1; }
}
# LEN as 4096 or 4k.
tokens() {
    case "$1" in
    *[kK]) echo $((${1%[kK]} * 1024)) ;;
    *) [[ $1 =~ ^[1-9][0-9]*$ ]] || { echo "device-qwen25coder: not a length: $1" >&2; exit 2; }; echo "$1" ;;
    esac
}
# indexer_args FOLDER: the indexer (trained on INDEXER_BASE, default $M) for the model folder FOLDER; on
# another folder with --indexer-base (the same weights with another RoPE scaling: eval checks that and
# accepts the indexer).
indexer_args() {
    [ -f "$IDX/model.safetensors" ] || return 0
    local base=${INDEXER_BASE:-$M}
    if [ "$1" != "$base" ]; then echo --indexer "$IDX" --indexer-base "$base"; else echo --indexer "$IDX"; fi
}
# REFINE_X=F: the indexer rows at b_sel > 1 as two-stage supports with F·k candidates a block (eval --refine).
refine_args() { if [ -n "${REFINE_X:-}" ] && [ -f "$IDX/model.safetensors" ]; then echo --refine $(($1 * REFINE_X)); fi; }

# The task files travel once: keep every one found in the tree, unpacked, in $STATE/tasks.
stash_tasks() {
    mkdir -p "$STATE/tasks"
    local f base
    for f in "$TASKS"/tasks_*k.jsonl.gz "$TASKS"/tasks_*k.jsonl; do
        [ -f "$f" ] || continue
        base=$(basename "${f%.gz}")
        if [ ! -s "$STATE/tasks/$base" ] || [ "$f" -nt "$STATE/tasks/$base" ]; then
            # Stages started together (stage grid) may do this at once: each through its own .tmp.
            case "$f" in *.gz) gunzip -c "$f" >"$STATE/tasks/$base.tmp.$$" ;; *) cp "$f" "$STATE/tasks/$base.tmp.$$" ;; esac &&
                mv "$STATE/tasks/$base.tmp.$$" "$STATE/tasks/$base"
        fi
    done
}
# tasks_file LEN: the length's tasks (the first RULER_PER_TASK instances of each task when set).
tasks_file() {
    local f="$STATE/tasks/tasks_$(($1 / 1024))k.jsonl"
    [ -s "$f" ] || { echo "device-qwen25coder: no $f (carry $TASKS/tasks_$(($1 / 1024))k.jsonl.gz)" >&2; return 1; }
    if [ -n "${RULER_PER_TASK:-}" ]; then
        local g="${f%.jsonl}_n$RULER_PER_TASK.jsonl"
        if [ ! -s "$g" ] || [ "$f" -nt "$g" ]; then
            python3 - "$f" "$RULER_PER_TASK" "$g" <<'PYEOF' || return 1
import collections, json, os, sys
src, n, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
seen = collections.Counter()
tmp = f"{dst}.tmp.{os.getpid()}"  # stages started together write it at once: each its own .tmp
with open(tmp, "w") as out:
    for line in open(src):
        t = json.loads(line)["task"]
        if seen[t] < n:
            out.write(line)
        seen[t] += 1
os.replace(tmp, dst)
PYEOF
        fi
        f=$g
    fi
    echo "$f"
}
# ids_of TEXT: the text tokenized once ($STATE/ids-NAME.txt); both folders share the tokenizer.
ids_of() {
    local ids="$STATE/ids-$(basename "$1" .txt).txt"
    if [ ! -s "$ids" ]; then
        "$SPINDLE" tokenize --model "$M" --text "$1" --out "$ids.tmp.$$" >&2 && mv "$ids.tmp.$$" "$ids" || return 1
    fi
    echo "$ids"
}

# call NAME CMD...: runs CMD (writing $RES/NAME.json) unless that JSON is there from the same command line,
# then copies NAME.json/.md/.log (and NAME-preds.jsonl) to $OUT. Stops the stage when the budget is spent.
call() {
    local name=$1
    shift
    local cmd t rc=0 l
    cmd=$(shell_line "$@")
    mkdir -p "$RES"
    if [ -s "$RES/$name.json" ] && [ "$(cat "$RES/$name.cmd" 2>/dev/null)" = "$cmd" ]; then
        say "$name: kept from an earlier call"
    else
        l=$(left)
        if [ "$l" -lt 20 ]; then
            say "budget of $BUDGET_S s spent before $name: rerun this stage to continue"
            exit 3
        fi
        rm -f "$RES/$name".* "$RES/$name-preds.jsonl" "$RES/$name-preds.jsonl.partial"
        say "$name: $cmd"
        t=$(date +%s)
        timeout -s TERM "$l" "$@" >"$RES/$name.log" 2>&1 || rc=$?
        echo $(($(date +%s) - t)) >"$RES/$name.secs"
        if [ $rc = 0 ] && [ -s "$RES/$name.json" ]; then
            printf '%s' "$cmd" >"$RES/$name.cmd"
            say "$name done in $(cat "$RES/$name.secs") s"
        else
            tail -5 "$RES/$name.log"
            cp "$RES/$name.log" "$OUT/"
            # The configurations a cut eval --tasks-file finished (its .partial files).
            for p in "$RES/$name".*.partial "$RES/$name"-preds.jsonl.partial; do [ -e "$p" ] && cp "$p" "$OUT/"; done
            if [ $rc = 124 ]; then say "$name cut at the budget of $BUDGET_S s: rerun this stage to continue"; exit 3; fi
            say "$name FAILED (exit $rc)"
            return 1
        fi
    fi
    cp "$RES/$name".* "$OUT/" 2>/dev/null
    [ -f "$RES/$name-preds.jsonl" ] && cp "$RES/$name-preds.jsonl" "$OUT/"
    return 0
}

stage_ruler() {  # LEN [K] [BSEL]
    local L f MM k ks=${2:-$GRID_K} bs=${3:-$GRID_BSEL} ix rc=0
    L=$(tokens "$1") || exit 2
    MM=$(model_for "$L")
    need_model "$MM"
    stash_tasks
    f=$(tasks_file "$L") || exit 1
    ix=$(indexer_args "$MM")
    [ -n "$ix" ] || say "no indexer in $IDX (stage train): oracle rows only"
    local tag=${RULER_PER_TASK:+_n$RULER_PER_TASK}${INDEXER_TAG:+_i$INDEXER_TAG}
    if [ "$ks" = dense ]; then
        call "ruler_ctx${L}${tag}_dense" "$SPINDLE" eval --model "$MM" --tasks-file "$f" $(dev_flags) \
            --json "$RES/ruler_ctx${L}${tag}_dense.json" --predictions "$RES/ruler_ctx${L}${tag}_dense-preds.jsonl" ||
            rc=1
    else
        local modes=oracle name
        [ -n "$ix" ] && modes=oracle,indexer
        # RULER_MODES names the calls too, so that an oracle-only call and a later indexer-only one keep
        # their own JSON.
        [ -n "${RULER_MODES:-}" ] && tag+=_m${RULER_MODES//,/-}
        [ -n "$ix" ] && [ -n "${REFINE_X:-}" ] && tag+=_r${REFINE_X}x
        local ex=()
        if [ -n "${EXEC_BLOCK:-}" ]; then ex=(--exec-block "$EXEC_BLOCK"); tag+=_x${EXEC_BLOCK}; fi
        for k in ${ks//,/ }; do
            name=ruler_ctx${L}${tag}_k${k}_b${bs//,/-}
            call "$name" "$SPINDLE" eval --model "$MM" --tasks-file "$f" --k "$k" --bsel "$bs" \
                --modes "${RULER_MODES:-$modes}" $ix $(refine_args "$k") "${ex[@]}" $(dev_flags) \
                --json "$RES/$name.json" --predictions "$RES/$name-preds.jsonl" || rc=1
        done
    fi
    grep -h "RULER average" "$OUT"/ruler_ctx"${L}"*.log 2>/dev/null | sed 's/^spindle eval: //' | sort -u
    return $rc
}

# --bos where the model's tokenizer starts text with its BOS (Gemma 3: add_bos_token): its windows of
# held-out and training text then start with it, as its RULER prompts do.
bos_flag() {
    if grep -Eq '"add_bos_token"[[:space:]]*:[[:space:]]*true' "$1/tokenizer_config.json" 2>/dev/null; then echo --bos; fi
}

stage_nll() {  # LEN [K] [BSEL]
    local L MM ids k ks=${2:-$GRID_K} bs=${3:-$GRID_BSEL} ix n rc=0
    L=$(tokens "$1") || exit 2
    MM=$(model_for "$L")
    need_model "$MM"
    ids=$(ids_of "$HELDOUT_TEXT") || exit 1
    n=$((${NLL_POSITIONS:-65536} / L))
    [ "$n" -ge 1 ] || n=1
    ix=$(indexer_args "$MM")
    [ -n "$ix" ] || say "no indexer in $IDX (stage train): oracle rows only"
    local tag=${INDEXER_TAG:+_i$INDEXER_TAG} ex=()
    [ -n "$ix" ] && [ -n "${REFINE_X:-}" ] && tag+=_r${REFINE_X}x
    if [ -n "${EXEC_BLOCK:-}" ]; then ex=(--exec-block "$EXEC_BLOCK"); tag+=_x${EXEC_BLOCK}; fi
    [ "${SPINDLE_STATS_FP32:-0}" = 1 ] && tag+=_fp32stats
    local bos
    bos=$(bos_flag "$MM")
    for k in ${ks//,/ }; do
        [ "$k" -lt "$L" ] || { say "k $k >= ctx $L: no sparse row (spindle eval refuses it)"; continue; }
        call "nll_ctx${L}_n${n}${tag}_k${k}_b${bs//,/-}" "$SPINDLE" eval --model "$MM" --ids "$ids" --ctx "$L" \
            --n-seq "$n" --k "$k" --bsel "$bs" "${ex[@]}" $bos $ix $(refine_args "$k") $(dev_flags) \
            --json "$RES/nll_ctx${L}_n${n}${tag}_k${k}_b${bs//,/-}.json" || rc=1
    done
    return $rc
}

stage_ttft() {  # LENS [K] [BSEL]
    local lens=() L k s ks=${2:-$GRID_K} bs=${3:-$GRID_BSEL} MM rc=0 small="" large="" group runs first_k refine tag
    if [ "$DEVICE" != cuda ]; then
        say "ttft: spindle bench runs on a GPU only (DEVICE=$DEVICE): nothing timed"
        return 0
    fi
    for L in ${1//,/ }; do
        L=$(tokens "$L") || exit 2
        lens+=("$L")
    done
    for L in "${lens[@]}"; do
        if [ "$L" -gt 32768 ]; then large+="${large:+,}$L"; else small+="${small:+,}$L"; fi
    done
    local blocks=()
    for s in ${bs//,/ }; do [ "$s" -gt 1 ] && blocks+=("$s"); done
    local per_query=0
    [[ ,$bs, == *,1,* ]] && per_query=1
    [ ${#blocks[@]} -gt 0 ] || blocks=(1)
    for group in "$small" "$large"; do
        [ -n "$group" ] || continue
        MM=$(model_for "${group%%,*}")
        need_model "$MM"
        if [ -z "${REFINE_X:-}" ]; then
            # One bench call for the whole group (the model loads once): dense once, the per-query runs once per
            # k, the block-shared run at every (k, b_sel > 1) (bench's --k / --bsel lists).
            # The oracle block-shared too (up to ORACLE_TTFT_MAX); with EXEC_BLOCK the per-query indexer and
            # oracle the way the RULER calls ran them (indexer_union, oracle_union: unions of EXEC_BLOCK
            # queries) instead of through per-query gathers.
            runs=dense
            [ "${blocks[*]}" != 1 ] && runs+=",indexer_block,oracle_block"
            local bl ux=() xt=""
            if [ $per_query = 1 ] && [ -n "${EXEC_BLOCK:-}" ]; then
                runs+=",oracle_union,indexer_union" ux=(--union-block "$EXEC_BLOCK") xt=_x$EXEC_BLOCK
            elif [ $per_query = 1 ]; then
                runs+=",indexer,oracle"
            fi
            bl=$(IFS=,; echo "${blocks[*]}")
            [ $per_query = 1 ] && [ "$bl" != 1 ] && bl="1,$bl"
            local mt=""
            if [ -n "${TTFT_MODES:-}" ]; then  # only these modes' runs (dense is always timed: the divisor)
                local r kept=dense
                for r in ${runs//,/ }; do
                    [[ ,$TTFT_MODES, == *,${r%%_*},* ]] && [ "$r" != dense ] && kept+=",$r"
                done
                runs=$kept mt=_m${TTFT_MODES//,/-}
            fi
            local nm="ttft_ctx${group//,/-}${xt}${mt}_k${ks//,/-}_b${bl//,/-}" pf=()
            [ -n "${TTFT_PROFILE:-}" ] && pf=(--ttft-profile)  # each run once more, op by op
            call "$nm" "$SPINDLE" bench --model "$MM" --no-kernels --ctx "$group" --k "$ks" --bsel "$bl" \
                --ttft "$runs" "${ux[@]}" "${pf[@]}" --max-oracle-ttft-ctx "${ORACLE_TTFT_MAX:-32768}" --device cuda \
                --json "$RES/$nm.json" || rc=1
            grep -h "^ttft" "$RES/$nm.log" 2>/dev/null
            continue
        fi
        first_k=1
        for k in ${ks//,/ }; do
            for s in "${blocks[@]}"; do
                runs=""
                [ $first_k = 1 ] && runs=dense
                # Per query (b_sel 1): the indexer and the oracle, once per k (bench skips the oracle above
                # --max-oracle-ttft-ctx and says so in its JSON).
                [ "$s" = "${blocks[0]}" ] && [ $per_query = 1 ] && runs+="${runs:+,}indexer,oracle"
                [ "$s" -gt 1 ] && runs+="${runs:+,}indexer_block"
                refine=() tag=""
                if [ "$s" -gt 1 ]; then  # two-stage: executed as unions of its blocks (REFINE_X·k candidates each)
                    runs+=",indexer_refine" refine=(--refine $((k * REFINE_X)) --union-block "$s") tag=_r${REFINE_X}x
                fi
                first_k=0
                call "ttft_ctx${group//,/-}${tag}_k${k}_b${s}" "$SPINDLE" bench --model "$MM" --no-kernels --ctx "$group" \
                    --k "$k" --bsel "$s" --ttft "$runs" "${refine[@]}" --max-oracle-ttft-ctx "${ORACLE_TTFT_MAX:-32768}" \
                    --device cuda --json "$RES/ttft_ctx${group//,/-}${tag}_k${k}_b${s}.json" || rc=1
                grep -h "^ttft" "$RES/ttft_ctx${group//,/-}${tag}_k${k}_b${s}.log" 2>/dev/null
            done
        done
    done
    return $rc
}

stage_grid() {  # LENS [K] [BSEL]
    local lens=${1:?LENS} ks=${2:-$GRID_K} bs=${3:-$GRID_BSEL} L k j name args started=() reserve=${GRID_TTFT_S:-240}
    local bgs="bash $ROOT/scripts/device-bg.sh" me="$ROOT/scripts/device-qwen25coder.sh"
    export BG=$STATE/bg
    stash_tasks
    ids_of "$HELDOUT_TEXT" >/dev/null || exit 1  # once, before the jobs that read it
    local jobs=()
    for L in ${lens//,/ }; do
        L=$(tokens "$L") || exit 2
        need_model "$(model_for "$L")"
        if tasks_file "$L" >/dev/null; then
            [ "${GRID_DENSE:-1}" = 1 ] && jobs+=("g${L}_dense|ruler $L dense")
            for k in ${ks//,/ }; do jobs+=("g${L}_ruler${RULER_MODES:+_m${RULER_MODES//,/-}}_k$k|ruler $L $k $bs"); done
        fi
        if [ "${GRID_NLL:-1}" = 1 ]; then
            for k in ${ks//,/ }; do jobs+=("g${L}_nll_k$k|nll $L $k $bs"); done
        fi
    done
    running() {  # how many of the started jobs have no status yet
        local n=0 x
        for x in "${started[@]}"; do [ -f "$BG/$x.rc" ] || n=$((n + 1)); done
        echo $n
    }
    # MiB free on the card; without nvidia-smi (a machine with no GPU) the check is left out.
    local smi=0
    command -v nvidia-smi >/dev/null 2>&1 && smi=1
    free_mib() { nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1; }
    for j in "${jobs[@]}"; do
        name=${j%%|*} args=${j#*|}
        while [ "$(running)" -ge "${GRID_JOBS:-6}" ] && [ "$(left)" -gt "$reserve" ]; do sleep 5; done
        # A job starts once the card has room for it (GRID_FREE_MIB; a RULER call of this model holds about
        # 18 GB at 64K and 23 GB at 128K): on an 80 GB card four such jobs fill it, and a fifth that
        # started anyway would end at its first allocation, and the queue would move on past it.
        if [ $smi = 1 ]; then
            while [ "$(running)" -gt 0 ] && [ "$(free_mib)" -lt "${GRID_FREE_MIB:-26000}" ] &&
                [ "$(left)" -gt "$reserve" ]; do sleep 5; done
        fi
        if [ "$(left)" -le $((reserve + 20)) ]; then say "grid: budget reached before $name: rerun to continue"; break; fi
        mkdir -p "$STATE/grid/$name"
        # shellcheck disable=SC2086 # args: the stage and its words
        $bgs start "$name" env BUDGET_S=$(($(left) - reserve)) OUT="$STATE/grid/$name" bash "$me" $args >/dev/null &&
            started+=("$name") && say "grid: $name started ($args)"
        # Its allocations show before the next job's check of the card's free memory.
        [ $smi = 1 ] && sleep "${GRID_RAMP_S:-30}"
    done
    while [ "$(running)" -gt 0 ] && [ "$(left)" -gt "$reserve" ]; do sleep 5; done
    for name in "${started[@]}"; do
        [ -f "$BG/$name.rc" ] || { $bgs stop "$name" >/dev/null; say "grid: $name stopped at the budget"; }
        say "grid: $name: $(cat "$BG/$name.rc"): $(grep -h "RULER average\|done in\|kept from\|FAILED\|budget" "$BG/$name.log" | tail -1)"
    done
    # Each job's OUT: its calls' results (finished or kept), a cut call's .partial files and log.
    for name in "${started[@]}"; do cp "$STATE/grid/$name"/* "$OUT"/ 2>/dev/null; done
    # GRID_NO_TTFT=1: the quality rows only (several grids side by side; one ttft stage after them all).
    [ -n "${GRID_NO_TTFT:-}" ] || stage_ttft "$lens" "$ks" "$bs"
}

case "$stage" in
part)
    n=${2:?part number (two digits)}
    shift 2
    mv ".dev/qp/p$n" "$STATE/p$n" || exit 1
    parts=("$STATE"/p??)
    echo "kept part $n: ${#parts[@]} parts, $(du -cb "${parts[@]}" | tail -1 | cut -f1) bytes"
    stash_tasks
    if [ $# -gt 0 ]; then "$@"; echo "CMD exit $?"; fi
    ;;
convert)
    if [ ! -f "$M/model.safetensors" ]; then
        cat "$STATE"/p?? >"$STATE/q.gguf"
        size=$(stat -c %s "$STATE/q.gguf") got=$(sha256sum "$STATE/q.gguf" | cut -d' ' -f1)
        echo "gguf $size bytes, sha256 $got"
        if [ "$size" != "$GGUF_BYTES" ] || [ "$got" != "$GGUF_SHA" ]; then
            echo "device-qwen25coder: GGUF size or sha256 mismatch"
            exit 1
        fi
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .dev/c1/*.whl
        rm -rf "$M.tmp" && mkdir -p models &&
            PYTHONPATH=/tmp/site python3 scripts/gguf_to_hf.py "$STATE/q.gguf" "$M.tmp" >"$OUT/convert.txt" 2>&1 &&
            mv "$M.tmp" "$M" || { tail "$OUT/convert.txt"; exit 1; }
        rm -f "$STATE/q.gguf"
    fi
    (cd "$M" && sha256sum ./*) >"$OUT/sums.txt"; cat "$OUT/sums.txt"
    for prec in ${CHECK_PRECISIONS-fp32 bf16}; do  # CHECK_PRECISIONS= (empty) skips the HF check
        PYTHONPATH=/tmp/site python3 scripts/check-gemma3-spindle.py --model "$M" --text .dev/c1/text/check.txt \
            --spindle "$B/spindle" --device cuda --precision "$prec" --out-dir "$STATE/check-$prec" \
            --json "$OUT/check-$prec.json" >"$OUT/check-$prec.txt" 2>&1
        echo "check $prec exit $?"; tail -4 "$OUT/check-$prec.txt"
    done
    rm -rf "$STATE"/check-*
    ;;
stash)
    stash_tasks
    ls -l "$STATE/tasks"
    ;;
yarn)
    need_model "$M"
    bash scripts/get-qwen25coder.sh --yarn --base "$M" --out "$MY" && cp "$MY/config.json" "$OUT/yarn-config.json"
    stash_tasks
    ;;
train)
    steps=${2:-300}
    [[ $steps =~ ^[1-9][0-9]*$ ]] || { echo "device-qwen25coder: train STEPS: a positive integer, not $steps" >&2; exit 2; }
    need_model "$M"
    stash_tasks
    # One run folder per (ctx, STEPS): the same STEPS resumes, another starts afresh (a resumed run keeps
    # the cosine horizon of its first call).
    bos=$(bos_flag "$M")
    RUN=$STATE/run-ctx$TRAIN_CTX-steps$steps${TRAIN_MIX:+-mix$TRAIN_MIX}${bos:+-bos}
    train_ids=$(ids_of "$TRAIN_TEXT") && heldout_ids=$(ids_of "$HELDOUT_TEXT") || exit 1
    # The export needs time after the budget: keep EXPORT_S (default 40 s) for it.
    budget=$(($(left) - ${EXPORT_S:-40}))
    [ "$budget" -gt 30 ] || { say "no time left to train (BUDGET_S $BUDGET_S)"; exit 3; }
    cmd=("$SPINDLE" train --model "$M" --ids "$train_ids" --ctx "$TRAIN_CTX" --heldout-ids "$heldout_ids"
         --steps "$steps" --eval-every "${EVAL_EVERY:-50}" --ckpt-every "${CKPT_EVERY:-20}" --out "$RUN" --resume)
    [ -n "${TRAIN_MIX:-}" ] && cmd+=(--retrieval-mix "$TRAIN_MIX")
    [ -n "$bos" ] && cmd+=("$bos")
    if [ "$DEVICE" = cuda ]; then cmd+=(--device cuda --teacher-precision "${TEACHER_PRECISION:-bf16}"); fi
    say "train (at most $budget s): ${cmd[*]}"
    rc=0
    timeout -s TERM "$budget" "${cmd[@]}" >>"$STATE/train.log" 2>&1 || rc=$?
    cp "$STATE/train.log" "$OUT/train.log"
    grep -E "progress step|resuming|done at|extending" "$STATE/train.log" | tail -4
    [ -f "$RUN/metrics.csv" ] && python3 - "$RUN/metrics.csv" <<'PYEOF' || true
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
last = max(int(r["step"]) for r in rows)
kl = [float(r["kl"]) for r in rows if int(r["step"]) == last]
rec = [r for r in rows if r.get("recall_at_k")]
msg = f"step {last}: mean KL {sum(kl) / len(kl):.4f} over {len(kl)} layers"
if rec:
    s = max(int(r["step"]) for r in rec)
    v = [float(r["recall_at_k"]) for r in rec if int(r["step"]) == s]
    msg += f"; held-out recall at step {s}: mean {sum(v) / len(v):.4f}, min {min(v):.4f}"
print(msg)
PYEOF
    for f in config.json log.jsonl metrics.csv; do [ -f "$RUN/$f" ] && cp "$RUN/$f" "$OUT/train-$f"; done
    if [ $rc = 124 ]; then say "train stopped at the budget; rerun \`train $steps\` to continue (--resume)"
    elif [ $rc != 0 ]; then tail -3 "$STATE/train.log"; say "train FAILED (exit $rc)"; fi
    ls "$RUN"/checkpoints/ckpt-*.bin >/dev/null 2>&1 || { say "no checkpoint to export"; exit 1; }
    rm -rf "$IDX.new"
    "$SPINDLE" export --run "$RUN" --out "$IDX.new" >"$OUT/export.log" 2>&1 || { cat "$OUT/export.log"; exit 1; }
    rm -rf "$IDX" && mv "$IDX.new" "$IDX"
    cp "$IDX/config.json" "$OUT/indexer-config.json"
    [ -n "${COPY_INDEXER:-}" ] && cp "$IDX/model.safetensors" "$OUT/indexer.safetensors"
    # A new indexer: the rows that used the old one (their command lines name --indexer) are redone.
    for c in "$RES"/ruler_*.cmd "$RES"/nll_*.cmd; do [ -f "$c" ] && grep -q -- "--indexer $IDX " "$c" && rm -f "$c"; done
    cat "$OUT/export.log"
    [ $rc = 0 ] || [ $rc = 124 ] || exit 1
    ;;
ruler)
    case "${2:?LEN or tasks file}" in
    *.jsonl | *.gz)
        f=$2
        case "$f" in *.gz) gunzip -c "$f" >"$STATE/$(basename "${f%.gz}")" && f=$STATE/$(basename "${f%.gz}") ;; esac
        n_arg=()
        [ -n "${RULER_N:-}" ] && n_arg=(--n-tasks "$RULER_N")
        "$SPINDLE" eval --model "$M" --tasks-file "$f" --k "${RULER_K:-256,1024,2048}" --bsel "${RULER_BSEL:-1,64}" \
            "${n_arg[@]}" $(dev_flags) --json "$OUT/ruler.json" --predictions "$OUT/ruler-preds.jsonl" \
            >"$OUT/ruler.log" 2>&1
        echo "eval exit $?"; grep "RULER average" "$OUT/ruler.log" | tail -20
        ;;
    *) stage_ruler "${@:2}" ;;
    esac
    ;;
nll) stage_nll "${@:2}" ;;
ttft) stage_ttft "${@:2}" ;;
grid) stage_grid "${@:2}" ;;
frontier)
    L=${2:?LEN}
    rc=0
    stage_nll "$L" "${3:-$GRID_K}" "${4:-$GRID_BSEL}" || rc=1
    stage_ttft "$L" "${3:-$GRID_K}" "${4:-$GRID_BSEL}" || rc=1
    stage_ruler "$L" "${3:-$GRID_K}" "${4:-$GRID_BSEL}" || rc=1
    exit $rc
    ;;
*)
    echo "usage: scripts/device-qwen25coder.sh stash | part NN [CMD...] | convert | yarn | train [STEPS] |" \
        "ruler LEN [K] [BSEL] | ruler FILE | nll LEN [K] [BSEL] | ttft LENS [K] [BSEL] | frontier LEN [K] [BSEL] |" \
        "grid LENS [K] [BSEL]" >&2
    exit 2
    ;;
esac
