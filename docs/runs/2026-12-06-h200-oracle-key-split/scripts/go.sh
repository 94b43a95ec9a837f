#!/usr/bin/env bash
# Device plan: the oracle's per-query kernels timed and checked (k1, kall-run, k2); the Qwen2.5-Coder stretch
# (c1, part, last, ttft, queue) for the 128K oracle rows and the oracle's TTFT on the real model, not run here.
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
    mkdir -p $R/bg && cp /root/bg/*.log /root/bg/*.rc $R/bg/ 2>/dev/null
    (cd $R && tar czf $OUT/res.tgz --exclude='*.safetensors' --exclude='convert/*.bin' . 2>/dev/null); ls -la $OUT
}
gpu() { nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used,utilization.gpu --format=csv,noheader; }
# The per-query oracle's kernels on a quiet card: the key-split kernel (default) against the one with one warp
# per 16 rows, Qwen3-8B's shape and Qwen2.5-1.5B's at 32K (and the block kernels beside them); then the oracle's
# TTFT on Qwen2.5's shape at 32K per query (as unions of 16) with each.
kbench() {
    cd $S; mkdir -p $R/kb
    gpu >$R/kb/gpu-before.txt
    for m in qwen3-8b qwen2.5-1.5b; do
        timeout 150 $B/spindle bench --synthetic $m --ctx 32768 --k 2048 --bsel 64 --no-ttft --max-train-ctx 1024 \
            --max-fp32-ctx 1024 --device cuda --json $R/kb/kernels-$m.json >$R/kb/kernels-$m.txt 2>&1
        echo "kernels $m exit $?"; grep -hE "^(oracle_select|sdpa)" $R/kb/kernels-$m.txt | cut -c1-230
    done
    for ks in default 0; do
        e=; [ $ks = default ] || e=SPINDLE_ORACLE_KEY_SPLIT=$ks
        env $e timeout 150 $B/spindle bench --synthetic qwen2.5-1.5b --ctx 32768 --k 2048 --bsel 64 --no-kernels \
            --ttft oracle_union,oracle_block --union-block 16 --max-oracle-ttft-ctx 32768 --ttft-reps 2 --ttft-profile --device cuda \
            --json $R/kb/ttft-oracle-ks$ks.json >$R/kb/ttft-oracle-ks$ks.txt 2>&1
        echo "ttft ks $ks exit $?"; grep -h "^ttft" $R/kb/ttft-oracle-ks$ks.txt | cut -c1-160
    done
    timeout 240 $B/spindle bench --synthetic qwen2.5-1.5b --ctx 131072 --k 2048 --bsel 64 --no-kernels \
        --ttft oracle_union --union-block 16 --max-oracle-ttft-ctx 131072 --ttft-reps 1 --ttft-profile --device cuda \
        --json $R/kb/ttft-oracle-128k.json >$R/kb/ttft-oracle-128k.txt 2>&1
    echo "ttft 128k exit $?"; grep -h "^ttft" $R/kb/ttft-oracle-128k.txt | cut -c1-160
    gpu >$R/kb/gpu-after.txt
}
# The checks: the whole twin test, memcheck over the quick twin test, the goldens and the GPU ctests.
cjob() {
    cd $S; mkdir -p $R/check
    SPINDLE_REQUIRE_GPU=1 timeout 500 $B/test_cuda_twins >$R/check/twins.txt 2>&1; echo "twins exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins.txt | head -20
    SPINDLE_REQUIRE_GPU=1 timeout 330 compute-sanitizer --tool memcheck --error-exitcode 3 \
        $B/test_cuda_twins --quick >$R/check/memcheck.txt 2>&1; echo "memcheck exit $?"
    grep -hE "ERROR SUMMARY|^test_cuda_twins" $R/check/memcheck.txt
    SPINDLE_REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool racecheck --kernel-name regex=oracle_query --error-exitcode 3 \
        $B/test_cuda_twins --quick --part oracle >$R/check/racecheck-oracle.txt 2>&1; echo "racecheck exit $?"
    grep -hE "RACECHECK SUMMARY|^test_cuda_twins" $R/check/racecheck-oracle.txt
}
goldjob() {
    cd $S; mkdir -p $R/check
    REUSE_BUILD=1 SKIP_TWINS=1 SKIP_SANITIZE=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 SKIP_CTEST=1 OUT=$R/gold bash scripts/device-check.sh >/dev/null 2>&1
    echo "goldens exit $?"; grep -hE "PASS|FAIL" $R/gold/goldens_cuda*.txt | tail -5
    (cd $B && SPINDLE_REQUIRE_GPU=1 timeout 400 ctest --timeout 360 -R '^gpu_' --output-on-failure) >$R/check/ctest-gpu.txt 2>&1
    echo "ctest gpu exit $?"; grep -E "tests passed|Failed|Passed|Skipped" $R/check/ctest-gpu.txt | tail -12
}
# launch DEADLINE NAME VAR=VAL... -- STAGE ARGS...: once the card has room, a background job of
# device-qwen25coder.sh STAGE with the budget left to DEADLINE (none if under 150 s).
launch() {
    local d=$1 n=$2 e=(); shift 2; while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
    local need=${MEMFREE128:-30000}
    while [ $(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1) -lt $need ]; do sleep 5; done
    local b=$((d - $(date +%s)))
    [ $b -ge 150 ] || { echo "queue: $n not started ($b s left)"; return 0; }
    $BGS start $n env RULER_PER_TASK=1 EXEC_BLOCK=16 BUDGET_S=$b "${e[@]}" OUT=$R/$n $Q "$@"
    sleep ${LAUNCH_GAP:-30}
}
# The 128K oracle rows: in blocks of 16 and 64 at the k the indexer's 128K rows have, k 1024 and 2048 first.
queue6() {
    cd $S
    local d=$(( $(date +%s) + ${QB:-600} )) O="RULER_MODES=oracle"
    launch $d o128k2 $O -- ruler 131072 2048 16,64
    launch $d o128k1 $O -- ruler 131072 1024 16,64
    launch $d o128k5 $O -- ruler 131072 512 16,64
    launch $d o128k25 $O -- ruler 131072 256 16,64
    echo "queue: all started"
}
case "$1" in
k2)  # the build, the per-query oracle kernels on both shapes, the twin test's oracle part
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -2
    cd $S; mkdir -p $R/kb2 $R/check2
    gpu >$R/kb2/gpu-before.txt
    for m in qwen3-8b qwen2.5-1.5b; do
        timeout 120 $B/spindle bench --synthetic $m --ctx 32768 --k 2048 --bsel 64 --no-ttft --max-train-ctx 1024 \
            --max-fp32-ctx 1024 --device cuda --json $R/kb2/kernels-$m.json >$R/kb2/kernels-$m.txt 2>&1
        echo "kernels $m exit $?"; grep -hE "^(oracle_select_bf16|lse_sdpa)" $R/kb2/kernels-$m.txt | cut -c1-200
    done
    gpu >$R/kb2/gpu-after.txt
    SPINDLE_REQUIRE_GPU=1 timeout 200 $B/test_cuda_twins --part oracle >$R/check2/twins-oracle.txt 2>&1; echo "twins oracle exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check2/twins-oracle.txt | head; grep -c "key-split" $R/check2/twins-oracle.txt
    pack
    ;;
kall-run) cjob; goldjob; touch /root/checks.done ;;
k1)  # the kernel stretch alone: the build, the benches on the quiet card, then every check in the background
    $BGS src $S
    mkdir -p $S/tests/goldens && cp -r .dev/gold/goldens/. $S/tests/goldens/
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu
    kbench
    cp $ROOT/.dev/go.sh /root/go.sh; (cd $S && $BGS start kall bash /root/go.sh kall-run)
    pack
    ;;
cjob-run) cjob; touch /root/checks.done ;;
goldjob-run) goldjob; touch /root/gold.done ;;
queue6-run) queue6 ;;
c1)  # the build, the kernel benches on the quiet card, part 00, then the checks in the background
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu
    kbench
    bash scripts/device-qwen25coder.sh part 00 | tail -1
    cp $ROOT/.dev/go.sh /root/go.sh; (cd $S && $BGS start cjob bash /root/go.sh cjob-run)
    pack
    ;;
part)  # part NN
    bash scripts/device-qwen25coder.sh part "$2" | tail -1
    $BGS status | tail -2
    ;;
last)  # part 18 + tasks; convert, yarn; the oracle's TTFT on a quiet card once the checks are done; the queue
    bash scripts/device-qwen25coder.sh part 18 | tail -1
    mkdir -p /root/models $S/.dev && ln -sfn /root/models $S/models && cp -r .dev/c1 $S/.dev/
    cd $S
    $Q stash >/dev/null; ls /root/q25/tasks/
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    mkdir -p $S/tests/goldens && cp -r $ROOT/.dev/gold/goldens/. $S/tests/goldens/
    w=0; while [ ! -f /root/checks.done ] && [ $w -lt ${CWAIT:-200} ]; do sleep 5; w=$((w + 5)); done
    echo "checks done after $w s more: $([ -f /root/checks.done ] && echo yes || echo NO)"
    cp $ROOT/.dev/go.sh /root/go.sh; $BGS start goldjob bash /root/go.sh goldjob-run
    pack
    ;;
ttft)  # ttft LENS K BSEL: the oracle's TTFT (and dense) on a quiet card
    cd $S; gpu
    w=0; while [ ! -f /root/gold.done ] && [ $w -lt ${CWAIT:-200} ]; do sleep 5; w=$((w + 5)); done; echo "goldens done after $w s: $([ -f /root/gold.done ] && echo yes || echo NO)"
    TTFT_MODES=oracle EXEC_BLOCK=16 ORACLE_TTFT_MAX=131072 BUDGET_S=${BUDGET:-500} OUT=$R/ttft $Q ttft "$2" "$3" "$4"
    pack
    ;;
queue) cp $ROOT/.dev/go.sh /root/go.sh; (cd $S && $BGS start queue bash /root/go.sh ${QUEUE:-queue6}-run); sleep 40; $BGS status ;;
sleep)  # sleep SECS: keep the machine while jobs run, then the status
    sleep "$2"; $BGS status; gpu; tail -qn 1 /root/bg/*.log 2>/dev/null | cut -c1-200; pack
    ;;
status) $BGS status; gpu; tail -qn 2 /root/bg/*.log 2>/dev/null | cut -c1-220; pack ;;
*) echo "go.sh c1|part NN|last|ttft LENS K BSEL|queue|sleep S|status"; exit 2 ;;
esac
