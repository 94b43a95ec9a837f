#!/usr/bin/env bash
# Device plan for one stretch (not part of the project; copies of what ran go to docs/runs/.../scripts/).
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
pack() {
    # every job's results (the grid jobs' under /root/q25/grid), without model weights
    mkdir -p $R/q25res && cp -r /root/q25/res/. $R/q25res/ 2>/dev/null
    mkdir -p $R/bg && cp /root/bg/*.log /root/bg/*.rc $R/bg/ 2>/dev/null; cp /root/q25/bg/*.log /root/q25/bg/*.rc $R/bg/ 2>/dev/null
    (cd $R && tar czf $OUT/res.tgz --exclude='*.safetensors' --exclude='convert/*.bin' . 2>/dev/null); ls -la $OUT
}
case "$1" in
c1)
    $BGS src $S && (cd $S && $BGS start build env ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh)
    bash scripts/device-qwen25coder.sh part 00
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used --format=csv,noheader
    ;;
part)  # part NN: keep the part; once the build is done, start the twin test and the sanitizers
    bash scripts/device-qwen25coder.sh part "$2"
    if [ -f /root/bg/build.rc ] && [ ! -f /root/bg/check.pid ]; then
        echo "build exit $(cat /root/bg/build.rc)"; tail -3 $R/build/device-check.log 2>/dev/null
        (cd $S && $BGS start check env SKIP_GOLDENS=1 SKIP_CTEST=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 \
            SANITIZE_PARTS="memcheck oracle indexer" OUT=$R/check bash scripts/device-check.sh)
    fi
    $BGS status
    ;;
last)  # part 18 + goldens + tasks; convert, yarn; start the goldens, the training and the oracle rows
    bash scripts/device-qwen25coder.sh part 18
    mkdir -p $S/tests/goldens && cp -r .dev/gold/goldens/. $S/tests/goldens/
    mkdir -p /root/models $S/.dev && ln -sfn /root/models $S/models && cp -r .dev/c1 $S/.dev/
    cd $S
    $Q stash >/dev/null; ls -la /root/q25/tasks/
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    for t in train heldout; do $S/build-device/spindle tokenize --model models/qwen25coder-1.5b --text .dev/c1/text/$t.txt --out /root/q25/ids-$t.txt.tmp && mv /root/q25/ids-$t.txt.tmp /root/q25/ids-$t.txt; done
    wc -w /root/q25/ids-*.txt
    $BGS start train env TRAIN_MIX=0.25 BUDGET_S=900 EVAL_EVERY=50 CKPT_EVERY=20 COPY_INDEXER=1 OUT=$R/train $Q train 160
    $BGS start gold env SKIP_TWINS=1 SKIP_SANITIZE=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 OUT=$R/gold bash scripts/device-check.sh
    $BGS start or8 env RULER_PER_TASK=1 RULER_MODES=oracle BUDGET_S=1500 OUT=$R/or8 $Q ruler 8192 256,512,1024,2048,4096 1,16,64
    $BGS start or16 env RULER_PER_TASK=1 RULER_MODES=oracle BUDGET_S=1500 OUT=$R/or16 $Q ruler 16384 256,512,1024,2048,4096 1,16,64
    $BGS start dn env RULER_PER_TASK=1 BUDGET_S=1500 OUT=$R/dn bash -c "$Q ruler 8192 dense; $Q ruler 16384 dense; $Q ruler 65536 dense; $Q ruler 131072 dense"
    $BGS status
    ;;
last2)  # part 18 + tasks; convert, yarn; the training alone on the card
    bash scripts/device-qwen25coder.sh part 18
    mkdir -p /root/models $S/.dev && ln -sfn /root/models $S/models && cp -r .dev/c1 $S/.dev/
    cd $S
    $Q stash >/dev/null; ls /root/q25/tasks/
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    for t in train heldout; do $S/build-device/spindle tokenize --model models/qwen25coder-1.5b --text .dev/c1/text/$t.txt --out /root/q25/ids-$t.txt.tmp && mv /root/q25/ids-$t.txt.tmp /root/q25/ids-$t.txt; done
    $BGS start train env TRAIN_MIX=0.25 BUDGET_S=400 EVAL_EVERY=30 CKPT_EVERY=20 OUT=$R/train $Q train ${STEPS:-60}
    sleep 20; grep progress /root/q25/train.log | tail -1
    ;;
ix2)  # the trained indexer's rows, and the YaRN copy of the indexer for 64K and 128K
    cd $S
    python3 $ROOT/.dev/s3/fp.py models/qwen25coder-1.5b-yarn /root/q25/idx /root/q25/idx-yarn
    E="RULER_MODES=indexer BUDGET_S=${IXB:-240}"
    $BGS start ix8 env RULER_PER_TASK=1 $E OUT=$R/ix8 $Q ruler 8192 256,1024,4096 1,16,64
    $BGS start ix16 env RULER_PER_TASK=1 $E OUT=$R/ix16 $Q ruler 16384 256,1024,4096 1,16,64
    $BGS start d128 env RULER_PER_TASK=1 BUDGET_S=${IXB:-240} OUT=$R/d128 $Q ruler 131072 dense
    $BGS start ix32 env RULER_PER_TASK=1 $E OUT=$R/ix32 $Q ruler 32768 1024 1,64
    $BGS start ix64 env RULER_PER_TASK=1 $E INDEXER=/root/q25/idx-yarn OUT=$R/ix64 $Q ruler 65536 1024 64
    $BGS status
    ;;
start)  # start NAME ARGS...: a background job of device-qwen25coder.sh (env first: K=V ... then the stage)
    cd $S; n=$2; shift 2
    $BGS start $n env RULER_PER_TASK=1 BUDGET_S=1500 OUT=$R/$n $Q "$@"
    $BGS status
    ;;
startenv)  # startenv NAME VAR=VAL... -- ARGS...
    cd $S; n=$2; shift 2; e=(); while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
    $BGS start $n env RULER_PER_TASK=1 BUDGET_S=1500 "${e[@]}" OUT=$R/$n $Q "$@"
    $BGS status
    ;;
stop) $BGS stop "$2"; $BGS status ;;
ttft)  # ttft LENS K BSEL: on a quiet card
    cd $S
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used,utilization.gpu --format=csv,noheader
    BUDGET_S=${BUDGET:-560} OUT=$R/ttft $Q ttft "$2" "$3" "$4"
    pack
    ;;
wait)  # wait NAME SECS
    $BGS wait "$2" "${3:-500}" | tail -5; $BGS status; pack
    ;;
status) $BGS status; tail -n 3 /root/q25/bg/*.log 2>/dev/null | tail -40; pack ;;
*) echo "go.sh c1|part NN|last|start NAME STAGE..|wait NAME SECS|ttft|status"; exit 2 ;;
esac
