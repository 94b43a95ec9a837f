#!/usr/bin/env bash
# Device plan for one stretch (not part of the project; a copy of what ran goes to docs/runs/.../scripts/).
# Run from the repository root of the carried tree.
set -uo pipefail
ROOT=$(pwd)
S=/root/src
R=/root/res
mkdir -p $R
export TASKS=$ROOT/.dev/rq
BGS="bash $ROOT/scripts/device-bg.sh"
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
Q="env SPINDLE=$S/build-device/spindle bash scripts/device-qwen25coder.sh"
B=$S/build-device
pack() {
    mkdir -p $R/q25res && cp -r /root/q25/res/. $R/q25res/ 2>/dev/null
    mkdir -p $R/bg && cp /root/bg/*.log /root/bg/*.rc $R/bg/ 2>/dev/null; cp /root/q25/bg/*.log /root/q25/bg/*.rc $R/bg/ 2>/dev/null
    (cd $R && tar czf $OUT/res.tgz --exclude='*.safetensors' --exclude='convert/*.bin' . 2>/dev/null); ls -la $OUT
}
gpu() { nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used,utilization.gpu --format=csv,noheader; }
case "$1" in
c1)  # the build (foreground), part 00, then the SDPA twins and the decoding bench with and without length buckets
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    bash scripts/device-qwen25coder.sh part 00
    gpu
    mkdir -p $R/diag && cd $S
    SPINDLE_REQUIRE_GPU=1 $B/test_cuda_twins --part sdpa >$R/diag/twins-sdpa.txt 2>&1; echo "twins sdpa exit $?"
    SPINDLE_SDPA_BUCKET=1 SPINDLE_REQUIRE_GPU=1 $B/test_cuda_twins --part sdpa >$R/diag/twins-sdpa-exact.txt 2>&1; echo "twins sdpa exact exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/diag/twins-sdpa*.txt | head
    for bk in 1024 1; do
        SPINDLE_SDPA_BUCKET=$bk SPINDLE_SDPA_DEBUG=1 timeout 200 $B/spindle bench --synthetic qwen3-1.7b --ctx 8192,32768 --no-kernels \
            --ttft dense --ttft-reps 2 --decode 24 --json $R/diag/decode-bucket$bk.json >$R/diag/decode-bucket$bk.txt 2>$R/diag/decode-bucket$bk.err
        echo "bench bucket $bk exit $?"; grep -E "generate|decode" $R/diag/decode-bucket$bk.txt
        grep -c "plan ready" $R/diag/decode-bucket$bk.err; grep "built in" $R/diag/decode-bucket$bk.err | head -4
    done
    pack
    ;;
part)  # part NN: keep the part; once built, start the twin test and the sanitizers in the background
    bash scripts/device-qwen25coder.sh part "$2"
    if [ ! -f /root/bg/check.pid ]; then
        (cd $S && $BGS start check env SKIP_GOLDENS=1 SKIP_CTEST=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 \
            SANITIZE_PARTS="memcheck sdpa" OUT=$R/check bash scripts/device-check.sh)
    fi
    $BGS status | tail -3
    ;;
last)  # part 18 + goldens + tasks; convert, yarn, tokenize; the training alone on the card
    bash scripts/device-qwen25coder.sh part 18
    mkdir -p $S/tests/goldens && cp -r .dev/gold/goldens/. $S/tests/goldens/
    mkdir -p /root/models $S/.dev && ln -sfn /root/models $S/models && cp -r .dev/c1 $S/.dev/
    cd $S
    $Q stash >/dev/null; ls /root/q25/tasks/
    $BGS wait check 5 | tail -4
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    for t in train heldout; do $B/spindle tokenize --model models/qwen25coder-1.5b --text .dev/c1/text/$t.txt --out /root/q25/ids-$t.txt.tmp && mv /root/q25/ids-$t.txt.tmp /root/q25/ids-$t.txt; done
    $BGS start train env TRAIN_MIX=0.25 BUDGET_S=400 EVAL_EVERY=30 CKPT_EVERY=20 OUT=$R/train $Q train ${STEPS:-60}
    sleep 25; grep progress /root/q25/train.log 2>/dev/null | tail -1; $BGS status | tail -4
    ;;
start)  # start NAME ARGS...: a background job of device-qwen25coder.sh
    cd $S; n=$2; shift 2
    $BGS start $n env RULER_PER_TASK=1 BUDGET_S=1500 OUT=$R/$n $Q "$@"
    ;;
startenv)  # startenv NAME VAR=VAL... -- ARGS...
    cd $S; n=$2; shift 2; e=(); while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
    $BGS start $n env RULER_PER_TASK=1 BUDGET_S=1500 "${e[@]}" OUT=$R/$n $Q "$@"
    ;;
gold)  # the CUDA goldens (SDPA changed): a background job
    cd $S; $BGS start gold env SKIP_TWINS=1 SKIP_SANITIZE=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 SKIP_CTEST=1 OUT=$R/gold bash scripts/device-check.sh
    ;;
stop) $BGS stop "$2"; $BGS status ;;
ttft)  # ttft LENS K BSEL: on a quiet card
    cd $S; gpu
    BUDGET_S=${BUDGET:-560} OUT=$R/ttft $Q ttft "$2" "$3" "$4"
    pack
    ;;
wait)  # wait NAME SECS
    $BGS wait "$2" "${3:-500}" | tail -5; $BGS status; gpu; pack
    ;;
sleep)  # sleep SECS: keep the machine while jobs run, then the status
    sleep "$2"; $BGS status; gpu; tail -qn 1 /root/bg/*.log 2>/dev/null | cut -c1-200; pack
    ;;
status) $BGS status; gpu; tail -qn 2 /root/bg/*.log 2>/dev/null | cut -c1-220; pack ;;
*) echo "go.sh c1|part NN|last|start NAME STAGE..|startenv|gold|wait NAME SECS|sleep S|ttft|status"; exit 2 ;;
esac
