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
pack() { (cd $R && tar czf $OUT/res.tgz --exclude='*.safetensors' --exclude='convert/*.bin' . 2>/dev/null); ls -la $OUT; }
case "$1" in
c1)
    $BGS src $S && (cd $S && $BGS start build env ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh)
    bash scripts/device-qwen25coder.sh part 00
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used --format=csv,noheader
    ;;
part)  # part NN: keep the part; once the build is done, start the twin test
    bash scripts/device-qwen25coder.sh part "$2"
    if [ -f /root/bg/build.rc ] && [ ! -f /root/bg/twins.pid ]; then
        echo "build exit $(cat /root/bg/build.rc)"; tail -3 $R/build/device-check.log
        (cd $S && $BGS start twins bash $ROOT/.dev/s3/go.sh synth)
    fi
    $BGS status
    ;;
last)  # part 18 + goldens + tasks; convert, yarn; start the checks and the training
    bash scripts/device-qwen25coder.sh part 18
    mkdir -p $S/tests/goldens && cp -r .dev/gold/goldens/. $S/tests/goldens/
    mkdir -p /root/models $S/.dev && ln -sfn /root/models $S/models && cp -r .dev/c1 $S/.dev/
    cd $S
    $Q stash >/dev/null
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    # tokenize once before the parallel jobs
    for t in train heldout; do $S/build-device/spindle tokenize --model models/qwen25coder-1.5b --text .dev/c1/text/$t.txt --out /root/q25/ids-$t.txt.tmp && mv /root/q25/ids-$t.txt.tmp /root/q25/ids-$t.txt; done
    wc -w /root/q25/ids-*.txt
    $BGS wait twins 300 | tail -14
    $BGS start train env TRAIN_MIX=${MIX:-0.25} BUDGET_S=${TRAIN_BUDGET:-640} EVAL_EVERY=50 CKPT_EVERY=20 COPY_INDEXER=1 OUT=$R/train $Q train ${STEPS:-200}
    $BGS start check env SKIP_TWINS=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 SKIP_SANITIZE=1 OUT=$R/check bash scripts/device-check.sh
    $BGS start or3 env RULER_PER_TASK=1 RULER_MODES=oracle BUDGET_S=1500 OUT=$R/or3 $Q ruler 32768 1024 1,16,64
    $BGS status
    ;;
oracle)  # the oracle rows at 32K (quality only: the card is shared)
    cd $S
    $BGS start or1 env RULER_PER_TASK=1 RULER_MODES=oracle BUDGET_S=1500 OUT=$R/or1 $Q ruler 32768 256,512,1024 1,16,64
    $BGS start or2 env RULER_PER_TASK=1 RULER_MODES=oracle BUDGET_S=1500 OUT=$R/or2 $Q ruler 32768 2048,4096 1,16,64
    $BGS status
    ;;
ix)  # after the training: the indexer rows (quality; the card is shared by these jobs)
    cd $S
    ls -l /root/q25/idx/ || exit 1
    $BGS start ix1 env RULER_PER_TASK=1 RULER_MODES=indexer BUDGET_S=1500 OUT=$R/ix1 $Q ruler 32768 256 1,16,64
    $BGS start ix2 env RULER_PER_TASK=1 RULER_MODES=indexer BUDGET_S=1500 OUT=$R/ix2 $Q ruler 32768 1024 1,16,64
    $BGS start ix3 env RULER_PER_TASK=1 RULER_MODES=indexer REFINE_X=8 BUDGET_S=1500 OUT=$R/ix3 $Q ruler 32768 256,1024 64
    $BGS start ix4 env RULER_PER_TASK=1 RULER_MODES=indexer BUDGET_S=1500 OUT=$R/ix4 $Q ruler 32768 2048 1,64
    $BGS start nll2 env BUDGET_S=1500 REFINE_X=8 OUT=$R/nll2 $Q nll 32768 1024 1,64
    $BGS status
    ;;
stopall)  # stop every running job (before the quiet TTFT stretch)
    for p in /root/bg/*.pid; do n=$(basename $p .pid); [ -f /root/bg/$n.rc ] || $BGS stop $n; done
    $BGS status; pack
    ;;
ttft)  # on a quiet card: TTFT of the frontier configurations, then the synthetic 8B with the HF anchor
    cd $S
    mkdir -p $R/ttft
    B=$S/build-device/spindle M=models/qwen25coder-1.5b MY=models/qwen25coder-1.5b-yarn
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used,utilization.gpu --format=csv,noheader
    first=dense,
    for k in 256 1024 2048 4096; do
        timeout 200 $B bench --model $M --no-kernels --ctx 32768 --k $k --bsel 64 --ttft ${first}indexer,oracle,indexer_block,indexer_refine \
            --refine $((8 * k)) --union-block 64 --max-oracle-ttft-ctx 32768 --device cuda --json $R/ttft/q32_k$k.json >$R/ttft/q32_k$k.log 2>&1
        grep -h "^ttft" $R/ttft/q32_k$k.log; first=
    done
    for k in 256 1024 2048; do
        timeout 100 $B bench --model $M --no-kernels --ctx 32768 --k $k --bsel 16 --ttft indexer_block --device cuda --json $R/ttft/q32_k${k}_b16.json >$R/ttft/q32_k${k}_b16.log 2>&1
        grep -h "^ttft" $R/ttft/q32_k${k}_b16.log
    done
    first=dense,indexer,
    for k in 2048 1024 256; do
        timeout 200 $B bench --model $MY --no-kernels --ctx 131072 --k $k --bsel 64 --ttft ${first}indexer_block,indexer_refine \
            --refine $((8 * k)) --union-block 64 --device cuda --json $R/ttft/q128_k$k.json >$R/ttft/q128_k$k.log 2>&1
        grep -h "^ttft" $R/ttft/q128_k$k.log; first=
    done
    pack
    ;;
synth)  # synthetic Qwen3-8B 128K: block-shared vs two-stage vs unions, and HF transformers in the same job
    cd $S
    mkdir -p $R/synth
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used,utilization.gpu --format=csv,noheader
    timeout 300 $S/build-device/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --device cuda --no-kernels \
        --ttft dense,indexer_block,indexer_refine,indexer_union --refine 16384 --union-block 64 --json $R/synth/refine.json >$R/synth/refine.log 2>&1
    grep -h "^ttft" $R/synth/refine.log
    timeout 240 python3 scripts/bench-anchors.py --ctx 131072 --sections hf --budget-s 200 --json $R/synth/anchors.json >$R/synth/anchors.txt 2>$R/synth/anchors.err
    echo "anchors exit $?"; tail -5 $R/synth/anchors.txt
    pack
    ;;
wait)  # wait NAME SECS
    $BGS wait "$2" "${3:-500}"; $BGS status; pack
    ;;
status) $BGS status; pack ;;
*) echo "go.sh c1|part NN|last|oracle|wait NAME SECS|status"; exit 2 ;;
esac
