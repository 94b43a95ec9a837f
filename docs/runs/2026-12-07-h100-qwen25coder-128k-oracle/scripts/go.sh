#!/usr/bin/env bash
# Device plan: the 128K oracle rows of Qwen2.5-Coder-1.5B (the checkpoint in 19 parts, conversion, YaRN,
# RULER_MODES=oracle calls side by side), with the GPU checks of the tree in the background during the parts.
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
# The checks: the whole twin test, memcheck over the quick twin test, racecheck of the oracle's key-split kernel.
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
# ncu of the kernels whose bounds docs/performance.md has not named: the distillation step's and the fused
# per-query selection's (synthetic Qwen3-8B layer, 32K), on the card before the rows start.
pjob() {
    cd $S; mkdir -p $R/ncu
    OUT=$R/ncu PROFILE_KERNELS='^(indexer_kl_kernel|indexer_lse_kernel|indexer_select_fused_kernel1|block_grad_kernel|block_c_kernel|block_ratio_kernel)' \
        PROFILE_TIMEOUT_S=240 PROFILE_BENCH_ARGS="--max-fp32-ctx 1024 --max-oracle-ctx 1024" \
        bash scripts/device-profile.sh 2>&1 | tail -40
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
# The 128K oracle rows: block-shared first (b_sel 16 and 64 at each k), then per query.
queue7() {
    cd $S
    local d=$(( $(date +%s) + ${QB:-600} )) O="RULER_MODES=oracle"
    launch $d o128k2 $O -- ruler 131072 2048 16,64
    launch $d o128k1 $O -- ruler 131072 1024 16,64
    launch $d o128k5 $O -- ruler 131072 512 16,64
    launch $d o128k25 $O -- ruler 131072 256 16,64
    launch $d o128k4 $O -- ruler 131072 4096 16
    launch $d o128kq1 $O -- ruler 131072 256,512 1
    launch $d o128kq2 $O -- ruler 131072 1024,2048,4096 1
    echo "queue: all started"
}
case "$1" in
c1)  # the build, the oracle's kernel rows on the quiet card, part 00, then the checks in the background
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu
    cd $S; mkdir -p $R/kb
    timeout 150 $B/spindle bench --synthetic qwen3-8b --ctx 32768 --k 2048 --bsel 64 --no-ttft --max-train-ctx 1024 \
        --max-fp32-ctx 1024 --device cuda --json $R/kb/kernels-qwen3-8b.json >$R/kb/kernels-qwen3-8b.txt 2>&1
    echo "kernels exit $?"; grep -hE "^(oracle_select_bf16|lse_sdpa)" $R/kb/kernels-qwen3-8b.txt | cut -c1-200
    timeout 120 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --no-kernels --ttft indexer_block \
        --ttft-reps 1 --ttft-profile --device cuda --json $R/kb/ttft128k-profile.json >$R/kb/ttft128k-profile.txt 2>&1
    echo "ttft profile exit $?"; grep -h "^ttft" $R/kb/ttft128k-profile.txt | cut -c1-300
    cd $ROOT
    bash scripts/device-qwen25coder.sh part 00 | tail -1
    cp $ROOT/.dev/go.sh /root/go.sh; (cd $S && $BGS start cjob bash /root/go.sh cjob-run)
    pack
    ;;
cjob-run) pjob; cjob; touch /root/checks.done ;;
goldjob-run) w=0; while [ ! -f /root/checks.done ] && [ $w -lt 900 ]; do sleep 5; w=$((w + 5)); done; goldjob; touch /root/gold.done ;;
queue7-run) queue7 ;;
part)  # part NN
    bash scripts/device-qwen25coder.sh part "$2" | tail -1
    $BGS status | tail -2
    ;;
last)  # part 18 + tasks; convert, yarn; the queue; the goldens once the checks are done
    bash scripts/device-qwen25coder.sh part 18 | tail -1
    mkdir -p /root/models $S/.dev && ln -sfn /root/models $S/models && cp -r .dev/c1 $S/.dev/
    cd $S
    $Q stash >/dev/null; ls /root/q25/tasks/
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    mkdir -p $S/tests/goldens && cp -r $ROOT/.dev/gold/goldens/. $S/tests/goldens/
    cp $ROOT/.dev/go.sh /root/go.sh
    $BGS start queue bash /root/go.sh queue7-run
    # (the goldens: not run in this stretch)
    sleep 20; $BGS status
    pack
    ;;
sleep)  # sleep SECS: keep the machine while jobs run, then the status
    sleep "$2"; $BGS status; gpu; tail -qn 1 /root/bg/*.log 2>/dev/null | cut -c1-200; pack
    ;;
status) $BGS status; gpu; tail -qn 2 /root/bg/*.log 2>/dev/null | cut -c1-220; pack ;;
*) echo "go.sh c1|part NN|last|sleep S|status"; exit 2 ;;
esac
