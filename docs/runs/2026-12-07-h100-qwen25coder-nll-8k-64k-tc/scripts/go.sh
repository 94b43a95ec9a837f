#!/usr/bin/env bash
# Device plan: the wgmma kernels judged and timed on a quiet card (wg stage), then the rest of the 128K oracle
# rows of Qwen2.5-Coder-1.5B (the checkpoint in 19 parts, conversion, YaRN, RULER_MODES=oracle calls side by
# side), with the GPU checks of the tree in the background during the parts.
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
    mkdir -p $R/g3res && cp -r /root/g3q/res/. $R/g3res/ 2>/dev/null
    mkdir -p $R/bg && cp /root/bg/*.log /root/bg/*.rc $R/bg/ 2>/dev/null
    (cd $R && tar czf $OUT/res.tgz --exclude='*.safetensors' --exclude='convert/*.bin' . 2>/dev/null); ls -la $OUT
}
gpu() { nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu,memory.used,utilization.gpu --format=csv,noheader; }
# The checks: the whole twin test, memcheck over the quick twin test, racecheck of the oracle's key-split kernel.
cjob() {
    cd $S; mkdir -p $R/check
    SPINDLE_REQUIRE_GPU=1 timeout 500 $B/test_cuda_twins >$R/check/twins.txt 2>&1; echo "twins exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins.txt | head -20
    [ "${SAN:-1}" = 1 ] || return 0
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
# The rest of the 128K oracle rows: b_sel 64 at k 2048 … 256, b_sel 16 at k 256 and 4096, then per query.
queue8() {
    cd $S
    local d=$(( $(date +%s) + ${QB:-600} )) O="RULER_MODES=oracle"
    launch $d o128k2 $O -- ruler 131072 2048 64
    launch $d o128k1 $O -- ruler 131072 1024 64
    launch $d o128k5 $O -- ruler 131072 512 64
    launch $d o128k25 $O -- ruler 131072 256 16,64
    launch $d o128k4 $O -- ruler 131072 4096 16
    launch $d o128kq1 $O -- ruler 131072 2048,1024 1
    launch $d o128kq2 $O -- ruler 131072 4096,512,256 1
    echo "queue: all started"
}
# The wgmma kernels on the quiet card: the twin parts that judge them, the kernel rows at 32K and 128K
# (sparse_attention_block_wg beside _tc), the 128K TTFT with and without SPINDLE_SPARSE_WGMMA=1, ncu of both.
wgjob() {
    cd $S; mkdir -p $R/wg
    SPINDLE_REQUIRE_GPU=1 timeout 180 $B/test_cuda_twins --part wgmma,oracle,indexer >$R/wg/twins-wgmma.txt 2>&1
    echo "twins wgmma,oracle,indexer exit $?"; grep -E "^(FAIL|test_cuda_twins)|wgmma|block_wg|sums wg" $R/wg/twins-wgmma.txt | tail -10
    pack >/dev/null
    gpu >$R/wg/gpu-before.txt
    timeout 170 $B/spindle bench --synthetic qwen3-8b --ctx 32768,131072 --k 2048 --bsel 64 --no-ttft --max-train-ctx 32768 \
        --max-fp32-ctx 1024 --max-oracle-ctx 1024 --device cuda --json $R/wg/kernels.json >$R/wg/kernels.txt 2>&1
    echo "kernels exit $?"; grep -hE "^(sparse_attention_block_(tc|wg)|indexer_select_block_(bf16|wg)|attention_sdpa_bf16|gemm_layer|train|indexer_(lse|kl))" $R/wg/kernels.txt | cut -c1-230
    pack >/dev/null
    for w in 0 1; do
        SPINDLE_SPARSE_WGMMA=$w SPINDLE_SELECT_WGMMA=$w timeout 120 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --no-kernels \
            --ttft indexer_block --ttft-reps 2 --ttft-profile --device cuda --json $R/wg/ttft128k-wg$w.json >$R/wg/ttft128k-wg$w.txt 2>&1
        echo "ttft wg$w exit $?"; grep -h "^ttft" $R/wg/ttft128k-wg$w.txt | cut -c1-260
    done
    gpu >$R/wg/gpu-after.txt
}
wgncu() {
    cd $S
    OUT=$R/wg/ncu PROFILE_KERNELS='^(support_attention_block_wg_kernel|support_attention_block_tc_kernel2|indexer_block_scores_(wg_kernel|kernel2))' PROFILE_TIMEOUT_S=110 \
        PROFILE_BENCH_ARGS="--max-fp32-ctx 1024 --max-train-ctx 1024 --max-oracle-ctx 1024" bash scripts/device-profile.sh 2>&1 | tail -20
}

# Gemma 3 270M: the rest of its grid (RULER at 16K for k 512 / 4096 and at 32K for k 256-1024 / 4096, NLL
# with the BOS at 8K-32K for every k), GPAR calls at a time, the committed 32K indexer.
GEN="MODEL=models/gemma3-270m STATE=/root/g3q INDEXER=/root/g3q/idx TASKS=/root/rg EXEC_BLOCK=16 RULER_PER_TASK=1"
glaunch() {  # NAME VAR=VAL... -- STAGE ARGS...
    local n=$1 e=(); shift; while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
    while [ "$(pgrep -f -c 'build-device/spindle (eval|bench)')" -ge ${GPAR:-6} ]; do sleep 3; done
    local b=$((GD - $(date +%s)))
    [ $b -ge 60 ] || { echo "gqueue: $n not started ($b s left)"; return 0; }
    $BGS start $n env $GEN BUDGET_S=$b "${e[@]}" OUT=$R/$n $Q "$@"
    sleep ${GGAP:-6}
}
gqueue() {
    cd $S; GD=$(( $(date +%s) + ${QB:-600} ))
    glaunch r16a -- ruler 16384 4096 1,16,64
    glaunch r16b -- ruler 16384 512 1,16,64
    glaunch r32a -- ruler 32768 4096 1,16,64
    glaunch r32b -- ruler 32768 1024 1,16,64
    glaunch r32c -- ruler 32768 512 1,16,64
    glaunch r32d -- ruler 32768 256 1,16,64
    for L in 8192 16384 32768; do
        for k in 2048 1024 4096 256 512; do glaunch n${L}k$k -- nll $L $k 1,16,64; done
    done
    echo "gqueue: all started"
}
# Issue 17's next stretch: the indexer trained again (60 steps, as every run since 2026-12-02), then the two
# missing 128K oracle rows, the NLL grid and the TTFT at 8K-32K, the oracle's TTFT at 64K/128K.
queue9() {
    cd $S
    TRAIN_MIX=0.25 EVAL_EVERY=30 CKPT_EVERY=20 OUT=$R/train $Q train 60 | tail -3
    local d=$(( $(date +%s) + ${QB:-900} ))
    launch $d o128kq3 RULER_MODES=oracle -- ruler 131072 512,256 1
    for L in 8192 16384 32768; do
        for k in 256 512 1024 2048 4096; do launch $d n${L}k$k -- nll $L $k 1,16,64; done
    done
    launch $d t8to32 -- ttft 8192,16384,32768 256,512,1024,2048,4096 1,16,64
    launch $d to64 ORACLE_TTFT_MAX=131072 TTFT_MODES=oracle -- ttft 65536 256,512,1024,2048,4096 1,16,64
    launch $d to128 ORACLE_TTFT_MAX=131072 TTFT_MODES=oracle -- ttft 131072 256,512,1024,2048,4096 1,16,64
    echo "queue9: all started"
}

# Quiet-card kernel rows (synthetic Qwen3-8B layer, 32K and 128K, the step's phases) and the 128K TTFT,
# for the tree (sparse wgmma variants 0/1/2) and the tree before fast_exp2 (52b4364, /root/old), same card.
oldbuild() {
    rm -rf /root/old && mkdir -p /root/old && tar xzf $ROOT/.dev/old.tgz -C /root/old 2>/dev/null || tar xzf /root/old.tgz -C /root/old
    cd /root/old && P=/tmp/spindle-prefix L=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu
    PKGCONF=$(command -v pkg-config || echo $P/usr/bin/pkgconf)
    PKG_CONFIG_PATH=$L/pkgconfig:$P/usr/share/pkgconfig cmake -S . -B build-device -DSPINDLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P/usr" -DPKG_CONFIG_EXECUTABLE="$PKGCONF" >/root/old-build.log 2>&1 &&
        PKG_CONFIG_PATH=$L/pkgconfig:$P/usr/share/pkgconfig nice cmake --build build-device -j12 --target spindle >>/root/old-build.log 2>&1
    local rc=$?; echo "old build exit $rc"; [ $rc = 0 ] || tail -15 /root/old-build.log
}
kxrows() {  # TAG BIN
    local t=$1 b=$2
    SPINDLE_STEP_PROFILE=1 timeout 150 $b bench --synthetic qwen3-8b --ctx 32768,131072 --k 2048 --bsel 64 --no-ttft --max-train-ctx 32768 \
        --max-reps 5 --max-fp32-ctx 1024 --max-oracle-ctx 32768 --device cuda --json $R/kx/kernels-$t.json >$R/kx/kernels-$t.txt 2>$R/kx/kernels-$t.err
    echo "kernels $t exit $? $(date +%T)"
}
kxttft() {  # TAG BIN WG
    SPINDLE_SPARSE_WGMMA=$3 timeout 80 $2 bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --no-kernels \
        --ttft indexer_block --ttft-reps 3 --ttft-profile --device cuda --json $R/kx/ttft128k-$1.json >$R/kx/ttft128k-$1.txt 2>&1
    echo "ttft $1 exit $? $(date +%T)"
}
kxjob() {
    cd $S; mkdir -p $R/kx; date +%T
    oldbuild >$R/kx/oldbuild.txt 2>&1 &
    local ob=$!
    gpu >$R/kx/gpu-before.txt
    kxrows new $B/spindle
    for w in 0 1 2; do kxttft new-wg$w $B/spindle $w; done
    wait $ob; cat $R/kx/oldbuild.txt
    if [ -x /root/old/build-device/spindle ]; then
        kxrows old /root/old/build-device/spindle
        kxttft old-wg0 /root/old/build-device/spindle 0
        kxrows new2 $B/spindle
    fi
    gpu >$R/kx/gpu-after.txt
}
# Issue 17's stretch: the indexer trained again (60 steps), then the 128K oracle per query at k 512 / 256 and
# the NLL rows at 8K-32K (per query through gathers, as the earlier 8K-32K rows), GPAR at a time beside the
# checks, until NLL_END; then, alone on the card, the TTFT rows: 8K-32K every configuration, the oracle's
# at 64K and 128K, until END.
nlaunch() {  # DEADLINE NAME VAR=VAL... -- STAGE ARGS...
    local d=$1 n=$2 e=(); shift 2; while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
    while [ "$(pgrep -f -c 'build-device/spindle (eval|bench)')" -ge ${GPAR:-4} ] ||
          [ $(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1) -lt ${MEMFREE:-20000} ]; do sleep 3; done
    local b=$((d - $(date +%s)))
    [ $b -ge 90 ] || { echo "queue: $n not started ($b s left)"; return 0; }
    $BGS start $n env RULER_PER_TASK=1 BUDGET_S=$b "${e[@]}" OUT=$R/$n $Q "$@"
    sleep ${LAUNCH_GAP:-8}
}
tquiet() {  # NAME VAR=VAL... -- STAGE ARGS...: in the foreground, alone
    local n=$1 e=(); shift; while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
    local b=$((END - $(date +%s)))
    [ $b -ge 60 ] || { echo "queue: $n not started ($b s left)"; return 0; }
    echo "$n start $(date +%T) budget $b"; gpu
    env BUDGET_S=$b "${e[@]}" OUT=$R/$n $Q "$@" 2>&1 | tail -4
    echo "$n end $(date +%T)"
}
queue10() {
    cd $S; date +%T
    local w=0; while [ ! -f /root/kx.done ] && [ $w -lt 600 ]; do sleep 3; w=$((w + 3)); done
    echo "train $(date +%T)"
    TRAIN_MIX=0.25 EVAL_EVERY=30 CKPT_EVERY=20 OUT=$R/train $Q train 60 | tail -3
    local d=$NLL_END
    nlaunch $d o128kq3 RULER_MODES=oracle EXEC_BLOCK=16 -- ruler 131072 512,256 1
    for L in 8192 16384 32768; do
        for k in 2048 512 4096 256; do
            local bs=1,16,64; [ $L = 8192 ] && [ $k = 256 ] && bs=16
            nlaunch $d n${L}k$k -- nll $L $k $bs
        done
        nlaunch $d n${L}k1024 -- nll $L 1024 16
    done
    echo "queue: NLL all started $(date +%T)"
    while [ "$(pgrep -f -c 'build-device/spindle (eval|bench)')" -gt 0 ] || [ ! -f /root/gold.done ]; do
        [ $(date +%s) -ge $((END - 300)) ] && break; sleep 3
    done
    echo "queue: card quiet $(date +%T)"
    tquiet t8to32 ORACLE_TTFT_MAX=32768 -- ttft 8192,16384,32768 256,512,1024,2048,4096 1,16,64
    tquiet to64 ORACLE_TTFT_MAX=131072 TTFT_MODES=oracle EXEC_BLOCK=16 -- ttft 65536 256,512,1024,2048,4096 1,16,64
    tquiet to128a ORACLE_TTFT_MAX=131072 TTFT_MODES=oracle EXEC_BLOCK=16 -- ttft 131072 2048,1024,4096 1,16,64
    tquiet to128b ORACLE_TTFT_MAX=131072 TTFT_MODES=oracle EXEC_BLOCK=16 -- ttft 131072 256,512 1,16,64
    echo "queue10: done $(date +%T)"
}
# The next stretch: the indexer trained again, the oracle's TTFT at 128K alone on the card first (the card
# is quiet before the evaluations start), then NLL at 16K (k 1024 b_sel 16), 32K, 64K and 128K, GPAR at a time
# (64K/128K per query as unions of 16 queries, EXEC_BLOCK=16, as their RULER rows), until END.
queue11() {
    cd $S; date +%T
    local w=0; while [ ! -f /root/ws.done ] && [ $w -lt 400 ]; do sleep 3; w=$((w + 3)); done
    echo "train $(date +%T) (waited $w s for the ws chain)"
    TRAIN_MIX=0.25 EVAL_EVERY=30 CKPT_EVERY=20 OUT=$R/train $Q train 60 | tail -3
    tquiet to128a ORACLE_TTFT_MAX=131072 TTFT_MODES=oracle EXEC_BLOCK=16 -- ttft 131072 2048,1024,4096 1,16,64
    tquiet to128b ORACLE_TTFT_MAX=131072 TTFT_MODES=oracle EXEC_BLOCK=16 -- ttft 131072 256,512 1,16,64
    local d=$((END - 20))
    nlaunch $d n16384k1024 -- nll 16384 1024 16
    for k in 2048 512 4096 256; do nlaunch $d n32768k$k -- nll 32768 $k 1,16,64; done
    nlaunch $d n32768k1024 -- nll 32768 1024 16
    for k in 2048 1024 512 4096 256; do
        local bs=1,16,64; [ $k = 2048 ] && bs=1,16; [ $k = 4096 ] && bs=1,64
        nlaunch $d n65536k$k EXEC_BLOCK=16 -- nll 65536 $k $bs
    done
    for k in 2048 1024 4096 512 256; do nlaunch $d n131072k$k EXEC_BLOCK=16 -- nll 131072 $k 1,16,64; done
    echo "queue11: all started $(date +%T)"
}

# The NLL grid on the tensor-core statistics (eval --exec-block 16 for the per-query rows) at every length,
# 128K and 64K first; the oracle's TTFT at 128K alone on the card first; a 16K comparison with the fp32 kernel.
queue12() {
    cd $S; date +%T; touch /root/queue.waiting
    local w=0; while [ ! -f /root/ws.done ] && [ $w -lt 400 ]; do sleep 3; w=$((w + 3)); done
    (cd $B && SPINDLE_REQUIRE_GPU=1 timeout 120 ctest --timeout 100 -R '^gpu_(cli|teacher_bf16)$' --output-on-failure) >$R/check/ctest-gpu2.txt 2>&1
    echo "ctest gpu_cli,gpu_teacher_bf16 exit $? $(date +%T)"; grep -E "tests passed|Failed|Passed" $R/check/ctest-gpu2.txt | tail -4
    echo "train $(date +%T) (waited $w s for the ws chain)"
    TRAIN_MIX=0.25 EVAL_EVERY=30 CKPT_EVERY=20 OUT=$R/train $Q train 60 | tail -3
    local d=$((END - 330))
    for k in 2048 1024 4096 512 256; do nlaunch $d n131072k$k EXEC_BLOCK=16 -- nll 131072 $k 1,16,64; done
    for k in 2048 1024 4096 512 256; do nlaunch $d n65536k$k EXEC_BLOCK=16 -- nll 65536 $k 1,16,64; done
    nlaunch $d c16fp32 EXEC_BLOCK=16 SPINDLE_STATS_FP32=1 -- nll 16384 2048 1,16,64
    for L in 32768 16384 8192; do
        for k in 2048 1024 4096 512 256; do nlaunch $d n${L}k$k EXEC_BLOCK=16 -- nll $L $k 1,16,64; done
    done
    echo "queue12: NLL all started $(date +%T)"
    while [ "$(pgrep -f -c 'build-device/spindle (eval|bench)')" -gt 0 ] && [ $(date +%s) -lt $((END - 300)) ]; do sleep 3; done
    echo "queue12: card quiet $(date +%T)"
    tquiet to128a ORACLE_TTFT_MAX=131072 TTFT_MODES=oracle EXEC_BLOCK=16 -- ttft 131072 2048,1024,4096 1,16,64
    tquiet to128b ORACLE_TTFT_MAX=131072 TTFT_MODES=oracle EXEC_BLOCK=16 -- ttft 131072 256,512 1,16,64
    echo "queue12: done $(date +%T)"
}
# The GPU runs owed by the tree: gpu_cli and gpu_teacher_bf16 (the cuBLAS workspace knob, bench's env record),
# the wgmma twin part (the sparse wgmma choice through the one minb dispatch); then the knob timed on the quiet
# card: the 128K TTFT op by op, unset / 32 MiB / unset / 32 MiB, and the kernel rows at 32K with and without.
wsjob() {
    cd $S; mkdir -p $R/ws $R/check; date +%T
    SPINDLE_REQUIRE_GPU=1 timeout 240 $B/test_cuda_twins --part oracle,wgmma >$R/check/twins-oracle-wgmma.txt 2>&1
    echo "twins oracle,wgmma exit $? $(date +%T)"; grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-oracle-wgmma.txt | head -8
    grep -cE "support_attention_(block|union)_tc (stats out|recall|support)" $R/check/twins-oracle-wgmma.txt
    (cd $B && SPINDLE_REQUIRE_GPU=1 timeout 120 ctest --timeout 100 -R '^gpu_(cli|teacher_bf16)$' --output-on-failure) >$R/check/ctest-gpu.txt 2>&1
    echo "ctest gpu_cli,gpu_teacher_bf16 exit $? $(date +%T)"; grep -E "tests passed|Failed|Passed|Skipped" $R/check/ctest-gpu.txt | tail -4
    gpu >$R/ws/gpu-before.txt
    local i=0
    for m in unset 32 unset 32; do
        i=$((i + 1))
        if [ $m = unset ]; then e="env -u SPINDLE_CUBLAS_WORKSPACE_MB"; else e="env SPINDLE_CUBLAS_WORKSPACE_MB=$m"; fi
        $e timeout 60 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --no-kernels \
            --ttft indexer_block --ttft-reps 2 --ttft-profile --device cuda --json $R/ws/ttft128k-$i-$m.json >$R/ws/ttft128k-$i-$m.txt 2>&1
        echo "ttft $i ws=$m exit $? $(date +%T)"; grep -h "^ttft" $R/ws/ttft128k-$i-$m.txt | cut -c1-200
        [ -f /root/queue.waiting ] && [ $i = 2 ] && break  # the queue is ready: two runs are enough
    done
    gpu >$R/ws/gpu-after.txt
}

# The rest of the NLL grid on the tensor-core statistics (eval --exec-block 16 for the per-query rows):
# the indexer trained again, then 64K for k 1024/4096/512/256, 32K and a 16K comparison with the fp32
# kernel, 16K and 8K, GPAR at a time, until END.
queue13() {
    cd $S; date +%T
    echo "train $(date +%T)"
    TRAIN_MIX=0.25 EVAL_EVERY=30 CKPT_EVERY=20 OUT=$R/train $Q train 60 | tail -3
    local d=$((END - 20))
    for k in 1024 4096 512 256; do nlaunch $d n65536k$k EXEC_BLOCK=16 -- nll 65536 $k 1,16,64; done
    for k in 2048 1024 4096 512 256; do nlaunch $d n32768k$k EXEC_BLOCK=16 -- nll 32768 $k 1,16,64; done
    nlaunch $d c16fp32 EXEC_BLOCK=16 SPINDLE_STATS_FP32=1 -- nll 16384 2048 1,16,64
    for L in 16384 8192; do
        for k in 2048 1024 4096 512 256; do MEMFREE=12000 nlaunch $d n${L}k$k EXEC_BLOCK=16 -- nll $L $k 1,16,64; done
    done
    echo "queue13: all started $(date +%T)"
    while [ "$(pgrep -f -c 'build-device/spindle (eval|bench)')" -gt 0 ]; do sleep 3; done
    echo "queue13: done $(date +%T)"
}

case "$1" in
queue13-run) queue13 ;;
chk-run) SAN=${SAN:-0} cjob; touch /root/checks.done
    w=0; while [ ! -f /root/goldens.in ] && [ $w -lt 900 ]; do sleep 5; w=$((w + 5)); done
    goldjob; touch /root/gold.done ;;
wschain-run) wsjob; touch /root/ws.done ;;
queue9-run) queue9 ;;
c2)  # the build, part 00, then in the background: the quiet kernel rows (new and old trees), the checks, the goldens
    $BGS src $S
    [ -f $ROOT/.dev/old.tgz ] && cp $ROOT/.dev/old.tgz /root/old.tgz
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu
    cd $ROOT
    bash scripts/device-qwen25coder.sh part 00 | tail -1
    mkdir -p $S/.dev && cp -r .dev/c1 $S/.dev/
    cp $ROOT/.dev/go.sh /root/go.sh; [ "${CHAIN:-1}" = 1 ] && (cd $S && $BGS start chain bash /root/go.sh chain-run)
    [ "${CHAIN:-1}" = ws ] && (cd $S && $BGS start chain bash /root/go.sh wschain-run)
    [ "${CHAIN:-1}" = chk ] && (cd $S && $BGS start chain bash /root/go.sh chk-run)
    pack
    ;;
chain-run) kxjob; touch /root/kx.done; cjob; touch /root/checks.done
    w=0; while [ ! -d $S/tests/goldens/cases ] && [ ! -f /root/goldens.in ] && [ $w -lt 900 ]; do sleep 5; w=$((w + 5)); done
    goldjob; touch /root/gold.done ;;
queue10-run) queue10 ;;
queue11-run) queue11 ;;
queue12-run) queue12 ;;
last2)  # part 18; convert, yarn; goldens in place; queue10 (END and NLL_END: epoch seconds)
    bash scripts/device-qwen25coder.sh part 18 | tail -1
    mkdir -p /root/models $S/.dev && ln -sfn /root/models $S/models
    [ -d $S/.dev/c1 ] || { echo "no $S/.dev/c1 (stage c2 copies it)"; exit 1; }
    mkdir -p $S/tests/goldens && cp -r $ROOT/.dev/gold/goldens/. $S/tests/goldens/ && touch /root/goldens.in
    cd $S
    $Q stash >/dev/null; ls /root/q25/tasks/
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    cp $ROOT/.dev/go.sh /root/go.sh
    $BGS start queue env END=$END NLL_END=${NLL_END:-0} bash /root/go.sh ${QUEUE:-queue10}-run
    sleep 5; $BGS status
    pack
    ;;
gqueue-run) gqueue ;;
wgncu) wgncu; pack ;;
k2)  # the super-tile teacher and the unmasked softmax: the build, twins oracle+indexer, kernel rows 32K/128K, 128K TTFT
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu; cd $S; mkdir -p $R/check $R/step
    SPINDLE_REQUIRE_GPU=1 timeout 100 $B/test_cuda_twins --part indexer,oracle >$R/check/twins-io.txt 2>&1
    echo "twins indexer,oracle exit $?"; grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-io.txt | head -12
    pack >/dev/null
    gpu >$R/step/gpu-before.txt
    timeout 110 $B/spindle bench --synthetic qwen3-8b --ctx 32768,131072 --k 2048 --bsel 64 --no-ttft --max-train-ctx 32768 --max-reps 3 \
        --max-fp32-ctx 1024 --max-oracle-ctx 1024 --device cuda --json $R/step/kernels.json >$R/step/kernels.txt 2>&1
    echo "kernels exit $?"; grep -hE "^(attention_sdpa_bf16|train_step|sparse_attention_block_(tc|wg)|indexer_select_block_(bf16|wg)|gemm_layer)" $R/step/kernels.txt | cut -c1-130
    pack >/dev/null
    timeout 60 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --no-kernels \
        --ttft indexer_block --ttft-reps 2 --ttft-profile --device cuda --json $R/step/ttft128k.json >$R/step/ttft128k.txt 2>&1
    echo "ttft exit $?"; grep -h "^ttft" $R/step/ttft128k.txt | cut -c1-260
    gpu >$R/step/gpu-after.txt
    pack
    ;;
k3)  # fast_exp2 + raw-max softmax + rescale skip (sparse tc/wg, block selections, oracle sums) and the step profile:
     # the build, twins (oracle, indexer, block parts), kernel rows 32K/128K, 128K TTFT op by op, the step's phases
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu; cd $S; mkdir -p $R/check $R/k3
    SPINDLE_REQUIRE_GPU=1 timeout 200 $B/test_cuda_twins >$R/check/twins.txt 2>&1
    echo "twins exit $?"; grep -E "^(FAIL|test_cuda_twins)" $R/check/twins.txt | head -12
    pack >/dev/null
    gpu >$R/k3/gpu-before.txt
    SPINDLE_STEP_PROFILE=1 timeout 130 $B/spindle bench --synthetic qwen3-8b --ctx 32768,131072 --k 2048 --bsel 64 --no-ttft --max-train-ctx 32768 --max-reps 3 \
        --max-fp32-ctx 1024 --max-oracle-ctx 32768 --device cuda --json $R/k3/kernels.json >$R/k3/kernels.txt 2>$R/k3/kernels.err
    echo "kernels exit $?"; grep -hE "^(attention_sdpa_bf16|lse_sdpa|train_step_layer_bf16|sparse_attention_block_(tc|wg)|indexer_select_block_(bf16|wg)|oracle_select|gemm_layer)" $R/k3/kernels.txt | cut -c1-130
    grep -m3 "step profile" $R/k3/kernels.err | cut -c1-300
    pack >/dev/null
    for w in 0 1; do
        SPINDLE_SPARSE_WGMMA=$w SPINDLE_SELECT_WGMMA=$w timeout 60 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --no-kernels \
            --ttft indexer_block --ttft-reps 2 --ttft-profile --device cuda --json $R/k3/ttft128k-wg$w.json >$R/k3/ttft128k-wg$w.txt 2>&1
        echo "ttft wg$w exit $?"; grep -h "^ttft" $R/k3/ttft128k-wg$w.txt | cut -c1-260
    done
    gpu >$R/k3/gpu-after.txt
    pack
    ;;
k1)  # the shortest: the build, the twin parts wgmma and indexer, then oracle
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu; cd $S; mkdir -p $R/check
    SPINDLE_REQUIRE_GPU=1 timeout 90 $B/test_cuda_twins --part wgmma,indexer >$R/check/twins-wi.txt 2>&1
    echo "twins wgmma,indexer exit $?"; grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-wi.txt | head -12; grep -A8 "^FAIL.*wgmma" $R/check/twins-wi.txt | head -20
    pack >/dev/null
    SPINDLE_REQUIRE_GPU=1 timeout 150 $B/test_cuda_twins --part oracle >$R/check/twins-o.txt 2>&1
    echo "twins oracle exit $?"; grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-o.txt | head -12
    pack
    ;;
k0)  # the short stretch: the build, the twin parts the changed code is in, the kernel rows, the 128K TTFT with and without wgmma, the other twin parts
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu; cd $S; mkdir -p $R/wg $R/check
    SPINDLE_REQUIRE_GPU=1 timeout 170 $B/test_cuda_twins --part wgmma,oracle,indexer,deltanet >$R/check/twins-a.txt 2>&1
    echo "twins wgmma,oracle,indexer,deltanet exit $?"; grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-a.txt | head -12; grep -A8 "^FAIL.*wgmma" $R/check/twins-a.txt | head -20
    pack >/dev/null
    gpu >$R/wg/gpu-before.txt
    timeout 130 $B/spindle bench --synthetic qwen3-8b --ctx 32768,131072 --k 2048 --bsel 64 --no-ttft --max-train-ctx 32768 --max-reps 3 \
        --max-fp32-ctx 1024 --max-oracle-ctx 1024 --device cuda --json $R/wg/kernels.json >$R/wg/kernels.txt 2>&1
    echo "kernels exit $?"; grep -hE "^(sparse_attention_block_(tc|wg)|indexer_select_block_(bf16|wg)|attention_sdpa_bf16|train_step|indexer_(lse|kl))" $R/wg/kernels.txt | cut -c1-200
    pack >/dev/null
    for w in 0 1; do
        SPINDLE_SPARSE_WGMMA=$w SPINDLE_SELECT_WGMMA=$w timeout 75 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --no-kernels \
            --ttft indexer_block --ttft-reps 2 --device cuda --json $R/wg/ttft128k-wg$w.json >$R/wg/ttft128k-wg$w.txt 2>&1
        echo "ttft wg$w exit $?"; grep -h "^ttft" $R/wg/ttft128k-wg$w.txt | cut -c1-200
    done
    gpu >$R/wg/gpu-after.txt; pack >/dev/null
    SPINDLE_REQUIRE_GPU=1 timeout ${TB:-120} $B/test_cuda_twins --part backbone,sdpa,score,hybrid >$R/check/twins-b.txt 2>&1
    echo "twins backbone,sdpa,score,hybrid exit $?"; grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-b.txt | head -12
    pack
    ;;
g1)  # Gemma stretch: the build, the wgmma stage on the quiet card, GGUF part 4, tasks and indexer, the checks in the background
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu
    wgjob
    cd $ROOT
    mkdir -p /root/g3 && bash scripts/device-gemma3.sh part 4 | tail -1
    mkdir -p $S/.dev /root/g3q && cp -r .dev/c1 $S/.dev/ && rm -rf /root/rg && cp -r .dev/rg /root/rg
    cp $ROOT/.dev/go.sh /root/go.sh; (cd $S && $BGS start cjob bash /root/go.sh cjob-run)
    pack
    ;;
gpart)  # gpart N
    bash scripts/device-gemma3.sh part "$2" | tail -1
    $BGS status | tail -2
    ;;
glast)  # part 0, join + convert, then the grid queue
    bash scripts/device-gemma3.sh part 0 | tail -1
    rm -rf /root/g3q/idx && cp -r .dev/gidx/idx_ctx32768 /root/g3q/idx && (cd /root/g3q/idx && sha256sum model.safetensors)
    mkdir -p $S/models
    cd $S && OUT=$R/gconvert bash scripts/device-gemma3.sh convert | tail -4
    cp $ROOT/.dev/go.sh /root/go.sh
    $BGS start gqueue bash /root/go.sh gqueue-run
    sleep 20; $BGS status
    pack
    ;;
gold)  # the goldens, then the GPU ctests, in the background
    mkdir -p $S/tests/goldens && cp -r $ROOT/.dev/gold/goldens/. $S/tests/goldens/
    cp $ROOT/.dev/go.sh /root/go.sh; $BGS start gold bash /root/go.sh goldjob-run
    sleep 3; $BGS status
    ;;
c1)  # the build, part 00, then the checks in the background (the wgmma stage ran on 2026-12-07: WG=1 to repeat it)
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu
    [ "${WG:-0}" = 1 ] && wgjob
    cd $ROOT
    bash scripts/device-qwen25coder.sh part 00 | tail -1
    mkdir -p $S/.dev && cp -r .dev/c1 $S/.dev/   # the converter wheel and the held-out text, for `last`
    cp $ROOT/.dev/go.sh /root/go.sh; (cd $S && $BGS start cjob bash /root/go.sh cjob-run)
    pack
    ;;
cjob-run) cjob; touch /root/checks.done ;;
wg)  # the build and the wgmma stage on the quiet card (no parts)
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu; wgjob; pack
    ;;
goldjob-run) w=0; while [ ! -f /root/checks.done ] && [ $w -lt 900 ]; do sleep 5; w=$((w + 5)); done; goldjob; touch /root/gold.done ;;
queue8-run) queue8 ;;
part)  # part NN
    bash scripts/device-qwen25coder.sh part "$2" | tail -1
    $BGS status | tail -2
    ;;
last)  # part 18 + tasks; convert, yarn; the queue; the goldens once the checks are done
    bash scripts/device-qwen25coder.sh part 18 | tail -1
    mkdir -p /root/models $S/.dev && ln -sfn /root/models $S/models
    [ -d $S/.dev/c1 ] || { echo "no $S/.dev/c1 (stage c1 copies it)"; exit 1; }
    cd $S
    $Q stash >/dev/null; ls /root/q25/tasks/
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    mkdir -p $S/tests/goldens && cp -r $ROOT/.dev/gold/goldens/. $S/tests/goldens/
    cp $ROOT/.dev/go.sh /root/go.sh
    $BGS start queue bash /root/go.sh queue8-run
    $BGS start gold bash /root/go.sh goldjob-run
    sleep 20; $BGS status
    pack
    ;;
conv)  # the queue stopped, c1 copied, convert + yarn, the queue again
    for n in queue o128k2 o128k1 o128k5; do $BGS stop $n >/dev/null 2>&1; done
    mkdir -p $S/.dev && cp -r .dev/c1 $S/.dev/ && ls $S/.dev/c1
    cd $S
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    cp $ROOT/.dev/go.sh /root/go.sh
    $BGS start queue bash /root/go.sh queue8-run
    sleep 15; $BGS status
    pack
    ;;
sleep)  # sleep SECS: keep the machine while jobs run, then the status
    sleep "$2"; $BGS status; gpu; tail -qn 1 /root/bg/*.log 2>/dev/null | cut -c1-200; pack
    ;;
status) $BGS status; gpu; tail -qn 2 /root/bg/*.log 2>/dev/null | cut -c1-220; pack ;;
*) echo "go.sh c1|part NN|last|sleep S|status"; exit 2 ;;
esac
