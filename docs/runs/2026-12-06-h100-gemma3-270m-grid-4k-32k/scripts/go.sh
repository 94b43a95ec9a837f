#!/usr/bin/env bash
# Device plan for one stretch (a copy of what ran goes to the run folder's scripts/). From the carried tree's root.
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
# The kernel job: the twin test (all parts), memcheck and the fused selection's racecheck, then the
# kernel benches of the synthetic Qwen3-8B at 32K and 128K (the fused per-query selection against the
# TF32 one; the wide sparse-attention variant), then the per-query TTFT with and without the fused selection.
kjob() {
    cd $S
    mkdir -p $R/kb $R/check
    SPINDLE_REQUIRE_GPU=1 $B/test_cuda_twins >$R/check/twins.txt 2>&1; echo "twins exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins.txt | head -20
    gpu >$R/kb/gpu-before.txt
    timeout 240 $B/spindle bench --synthetic qwen3-8b --ctx 32768,131072 --k 2048 --bsel 64 --no-ttft --device cuda \
        --max-oracle-ctx 32768 --max-train-ctx 32768 --max-fp32-ctx 32768 \
        --json $R/kb/kernels.json >$R/kb/kernels.txt 2>&1; echo "kernels exit $?"
    SPINDLE_TC_ROWS=256 timeout 200 $B/spindle bench --synthetic qwen3-8b --ctx 32768,131072 --k 2048 --bsel 64 --no-ttft \
        --max-oracle-ctx 1024 --max-train-ctx 1024 --max-fp32-ctx 1024 \
        --device cuda --json $R/kb/kernels-rows256.json >$R/kb/kernels-rows256.txt 2>&1; echo "kernels rows256 exit $?"
    for hs in 2 1; do  # the oracle's heads staged HS at a time (default: the group's 4)
        SPINDLE_ORACLE_HEADS=$hs timeout 120 $B/spindle bench --synthetic qwen3-8b --ctx 32768 --k 2048 --bsel 64 --no-ttft \
            --max-train-ctx 1024 --max-fp32-ctx 1024 --device cuda --json $R/kb/kernels-oracle-hs$hs.json \
            >$R/kb/kernels-oracle-hs$hs.txt 2>&1; echo "oracle hs$hs exit $?"; grep -h "^oracle_select_bf16" $R/kb/kernels-oracle-hs$hs.txt
    done
    timeout 200 python3 scripts/bench-anchors.py --sections indexer --ctx 32768,131072 --json $R/kb/anchors.json \
        >$R/kb/anchors.txt 2>&1; echo "anchors exit $?"
    for v in 0 256; do
        SPINDLE_TC_ROWS=$v timeout 200 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --no-kernels \
            --ttft dense,indexer_block --device cuda --json $R/kb/ttft128k-rows$v.json >$R/kb/ttft128k-rows$v.txt 2>&1
        echo "ttft rows$v exit $?"; grep -h "^ttft" $R/kb/ttft128k-rows$v.txt | cut -c1-160
    done
    timeout 240 python3 scripts/bench-anchors.py --sections hf --ctx 131072 --json $R/kb/anchors-hf128k.json \
        >$R/kb/anchors-hf128k.txt 2>&1; echo "anchors hf exit $?"; tail -3 $R/kb/anchors-hf128k.txt
    gpu >$R/kb/gpu-after.txt
    touch /root/kb-timed.done
    [ -n "${NO_SAN:-}" ] || sanjob
}
sanjob() {
    cd $S
    SPINDLE_REQUIRE_GPU=1 timeout 330 compute-sanitizer --tool memcheck --error-exitcode 3 \
        $B/test_cuda_twins --quick >$R/check/memcheck.txt 2>&1; echo "memcheck exit $?"
    SPINDLE_REQUIRE_GPU=1 timeout 200 compute-sanitizer --tool racecheck --error-exitcode 3 \
        $B/test_cuda_twins --quick --part indexer >$R/check/racecheck-indexer.txt 2>&1; echo "racecheck exit $?"
    grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|^test_cuda_twins" $R/check/racecheck-indexer.txt $R/check/memcheck.txt
}
# The goldens (they travel with the last part) and the GPU ctests that read them.
goldjob() {
    cd $S; mkdir -p $R/check
    REUSE_BUILD=1 SKIP_TWINS=1 SKIP_SANITIZE=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 SKIP_CTEST=1 OUT=$R/gold bash scripts/device-check.sh >/dev/null 2>&1
    echo "goldens exit $?"; grep -hE "PASS|FAIL" $R/gold/goldens_cuda*.txt | tail -5
    (cd $B && SPINDLE_REQUIRE_GPU=1 timeout 400 ctest --timeout 360 -R '^gpu_' --output-on-failure) >$R/check/ctest-gpu.txt 2>&1
    echo "ctest gpu exit $?"; grep -E "tests passed|Failed|Passed|Skipped" $R/check/ctest-gpu.txt | tail -12
}
# ncu on the block-shared selection, the block-shared sparse attention and the bf16 oracle at 32K.
pjob() {
    cd $S; mkdir -p $R/ncu
    OUT=$R/ncu PROFILE_KERNELS='^(indexer_block_scores_kernel2|support_attention_block_tc|oracle_scores_tc)' \
        PROFILE_TIMEOUT_S=200 PROFILE_BENCH_ARGS="--max-fp32-ctx 1024 --max-train-ctx 1024" \
        bash scripts/device-profile.sh 2>&1 | tail -40
    SPINDLE_TC_ROWS=256 OUT=$R/ncu/rows256 PROFILE_KERNELS='^(support_attention_block_tc)' \
        PROFILE_TIMEOUT_S=150 PROFILE_BENCH_ARGS="--max-fp32-ctx 1024 --max-train-ctx 1024 --max-oracle-ctx 1024" \
        bash scripts/device-profile.sh 2>&1 | tail -20
}
# The check job of a Qwen stretch: the twin test (all parts), the oracle's staged heads timed on the
# synthetic Qwen3-8B at 32K, then (untimed) the goldens with the GPU ctests and the sanitizers.
cjob() {
    cd $S; mkdir -p $R/kb $R/check
    SPINDLE_REQUIRE_GPU=1 $B/test_cuda_twins >$R/check/twins.txt 2>&1; echo "twins exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins.txt | head -20
    gpu >$R/kb/gpu-before.txt
    for hs in 0 2 1; do
        if [ $hs = 0 ]; then e=; else e=SPINDLE_ORACLE_HEADS=$hs; fi
        env $e timeout 150 $B/spindle bench --synthetic qwen3-8b --ctx 32768 --k 2048 --bsel 64 --no-ttft \
            --max-train-ctx 1024 --max-fp32-ctx 1024 --device cuda --json $R/kb/kernels-oracle-hs$hs.json \
            >$R/kb/kernels-oracle-hs$hs.txt 2>&1; echo "oracle hs$hs exit $?"; grep -h "^oracle_select" $R/kb/kernels-oracle-hs$hs.txt | cut -c1-200
    done
    gpu >$R/kb/gpu-after.txt
    touch /root/kb-timed.done
    goldjob; sanjob
}
# launch DEADLINE NAME VAR=VAL... -- STAGE ARGS...: once the card has room (MEMMAX MiB used at most), a
# background job of device-qwen25coder.sh STAGE with the budget left to DEADLINE (none if under 150 s).
launch() {
    local d=$1 n=$2 e=(); shift 2; while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
    local need=${MEMFREE:-27000}; case " $* " in *" 131072 "*) need=${MEMFREE128:-36000} ;; esac  # 128K jobs grow to ~23 GB
    while [ $(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1) -lt $need ]; do sleep 5; done
    local b=$((d - $(date +%s)))
    [ $b -ge 150 ] || { echo "queue: $n not started ($b s left)"; return 0; }
    local hw=(); [ -f /root/oracle-hw ] && hw+=(SPINDLE_ORACLE_WARP_HEADS=$(cat /root/oracle-hw))  # else the kernel's default
    [ -f /root/oracle-hs ] && hw+=(SPINDLE_ORACLE_HEADS=$(cat /root/oracle-hs))
    $BGS start $n env RULER_PER_TASK=1 EXEC_BLOCK=16 BUDGET_S=$b "${hw[@]}" "${e[@]}" OUT=$R/$n $Q "$@"
    sleep ${LAUNCH_GAP:-40}
}
queue() {
    cd $S
    while [ ! -f /root/bg/train.rc ]; do sleep 5; done
    local d=$(( $(date +%s) + ${QB:-560} )) I="RULER_MODES=indexer"
    launch $d w64a $I -- ruler 65536 4096 1,16,64
    launch $d w64b $I -- ruler 65536 1024 1,16,64
    launch $d w128a $I -- ruler 131072 4096 1
    launch $d n64 -- nll 65536 1024,4096 1,16,64
    launch $d w64c $I -- ruler 65536 2048 1,16,64
    launch $d w64d $I -- ruler 65536 512 1,16,64
    launch $d w64e $I -- ruler 65536 256 1,16,64
    launch $d w128b $I -- ruler 131072 1024 1
    launch $d w32 $I -- ruler 32768 1024 16
    launch $d w128c $I -- ruler 131072 4096 16
    echo "queue: all started"
}
# The oracle job of a Qwen stretch (during the transfers): the twin test's oracle part, the oracle TTFT on
# Qwen2.5-1.5B's shape with its heads split or staged (the fastest goes to the quality rows), all twin parts.
ojob() {
    cd $S; mkdir -p $R/kb $R/check $R/ohw
    SPINDLE_REQUIRE_GPU=1 timeout 200 $B/test_cuda_twins --part oracle >$R/check/twins-oracle.txt 2>&1; local trc=$?
    echo "twins oracle exit $trc"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-oracle.txt | head; grep -c "warps/heads" $R/check/twins-oracle.txt
    gpu >$R/kb/gpu-before.txt
    # The oracle's TTFT on Qwen2.5-1.5B's shape (random weights, 32K) with its 6 heads a group split over
    # HW warps or staged HS at a time; the fastest per query is what the quality rows' oracle runs with.
    for v in "1 0" "3 0" "6 0" "1 3" "1 2"; do
        set -- $v; e="SPINDLE_ORACLE_WARP_HEADS=$1"; [ $2 = 0 ] || e="$e SPINDLE_ORACLE_HEADS=$2"
        env $e timeout 120 $B/spindle bench --synthetic qwen2.5-1.5b --ctx 32768 --k 2048 --bsel 1,64 --no-kernels \
            --ttft oracle,oracle_block --max-oracle-ttft-ctx 32768 --ttft-reps 2 --device cuda \
            --json $R/ohw/hw$1-hs$2.json >$R/ohw/hw$1-hs$2.txt 2>&1
        echo "hw $1 hs $2 exit $?"; grep -h "^ttft" $R/ohw/hw$1-hs$2.txt | cut -c1-120
    done
    gpu >$R/kb/gpu-after.txt
    python3 - $R/ohw $trc <<'PY'
import json, sys
best = (None, "1", "0")
for v in ("1 0", "3 0", "6 0", "1 3", "1 2"):
    hw, hs = v.split()
    try:
        r = [x for x in json.load(open(f"{sys.argv[1]}/hw{hw}-hs{hs}.json"))["results"] if x["name"] == "ttft_oracle"][0]
        if r.get("ms_median") and (best[0] is None or r["ms_median"] < best[0]): best = (r["ms_median"], hw, hs)
    except (OSError, ValueError, IndexError, KeyError):
        pass
if sys.argv[2] != "0": best = (None, "1", "0")  # the twin test failed: the default
open("/root/oracle-hw", "w").write(best[1] + "\n")
open("/root/oracle-hs", "w").write(best[2] + "\n")
print(f"oracle for the quality rows: warps/heads {best[1]}, staged heads {best[2]} (0: the group), {best[0]} ms")
PY
    touch /root/kb-timed.done
    SPINDLE_REQUIRE_GPU=1 timeout 400 $B/test_cuda_twins >$R/check/twins.txt 2>&1; echo "twins (all parts) exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins.txt | head -20
}
# The next stretch's queue: the 64K verdict on 5 instances a task, the rest of the 64K grid, then 128K.
queue2() {
    cd $S
    while [ ! -f /root/bg/train.rc ]; do sleep 5; done
    local d=$(( $(date +%s) + ${QB:-900} )) I="RULER_MODES=indexer" O="RULER_MODES=oracle"
    launch $d v64d RULER_PER_TASK=5 -- ruler 65536 dense
    launch $d v64a RULER_PER_TASK=5 $I -- ruler 65536 2048 64
    launch $d v64b RULER_PER_TASK=5 $I -- ruler 65536 4096 16
    launch $d i64a $I -- ruler 65536 256 1,16,64
    launch $d i64b $I -- ruler 65536 512 16,64
    launch $d o64a $O -- ruler 65536 4096,2048 1,16,64
    launch $d o64b $O -- ruler 65536 1024,512,256 1,16,64
    launch $d i128a $I -- ruler 131072 2048 1,16,64
    launch $d n64a -- nll 65536 1024,4096 1,16,64
    launch $d i128b $I -- ruler 131072 1024 1,16
    launch $d i128c $I -- ruler 131072 256,512 1,16,64
    launch $d n64b -- nll 65536 256,512,2048 1,16,64
    launch $d o128a $O -- ruler 131072 4096 1,16,64
    echo "queue: all started"
}
# The stretch after the precision fix of the indexer's NLL rows: those rows again (8K-64K), an indexer
# trained at 64K on the YaRN folder and its 64K verdict rows, then the 64K oracle and 128K indexer rows.
queue3() {
    cd $S
    while [ ! -f /root/bg/train.rc ]; do sleep 5; done
    local d=$(( $(date +%s) + ${QB:-900} )) I="RULER_MODES=indexer" O="RULER_MODES=oracle"
    local Y="INDEXER=/root/q25/idx-y64 INDEXER_BASE=models/qwen25coder-1.5b-yarn INDEXER_TAG=y64"
    launch $d y64t MODEL=models/qwen25coder-1.5b-yarn TRAIN_CTX=65536 INDEXER=/root/q25/idx-y64 TRAIN_MIX=0.25 \
        EVAL_EVERY=30 CKPT_EVERY=20 -- train 60
    launch $d r8 -- nll 8192 256,1024 1,64
    launch $d r16 -- nll 16384 1024 1,64
    launch $d r32 -- nll 32768 1024 1,64
    launch $d r64a -- nll 65536 2048 64
    launch $d r64b -- nll 65536 4096 16
    while [ ! -f /root/bg/y64t.rc ]; do sleep 5; done
    launch $d y64a $Y RULER_PER_TASK=5 $I -- ruler 65536 2048 64
    launch $d y64b $Y RULER_PER_TASK=5 $I -- ruler 65536 4096 16
    launch $d y64n $Y -- nll 65536 2048 64
    launch $d o64c $O -- ruler 65536 2048 1,16,64
    launch $d i128d $I -- ruler 131072 2048 1,16,64
    launch $d o64d $O -- ruler 65536 512,256 1,16,64
    launch $d i128e $I -- ruler 131072 512 1,16,64
    echo "queue: all started"
}
# The stretch after the precision fix: the indexer's NLL rows again (8K-64K), the 128K indexer grid's
# missing rows, the 64K oracle's missing rows, then the 128K oracle.
queue4() {
    cd $S
    while [ ! -f /root/bg/train.rc ]; do sleep 5; done
    local d=$(( $(date +%s) + ${QB:-900} )) I="RULER_MODES=indexer" O="RULER_MODES=oracle"
    launch $d r8 -- nll 8192 256,1024 1,64
    launch $d i128d $I -- ruler 131072 2048 1,16,64
    launch $d r16 -- nll 16384 1024 1,64
    launch $d r32 -- nll 32768 1024 1,64
    launch $d o64c $O -- ruler 65536 2048 1,16,64
    launch $d r64a -- nll 65536 2048 64
    launch $d r64b -- nll 65536 4096 16
    launch $d i128e $I -- ruler 131072 512 1,16,64
    launch $d i128f $I -- ruler 131072 256 16,64
    launch $d o64d $O -- ruler 65536 512,256 1,16,64
    launch $d o128a $O -- ruler 131072 4096 1,16,64
    echo "queue: all started"
}
# queue4's tail after its 128K k 256 call ran out of memory: that call first, then the rest (same deadline).
queue5() {
    cd $S
    local d=$(( $(stat -c %Y /root/bg/train.rc) + ${QB:-900} )) I="RULER_MODES=indexer" O="RULER_MODES=oracle"
    launch $d i128g $I -- ruler 131072 256 16,64
    launch $d o64d $O -- ruler 65536 512,256 1,16,64
    launch $d o128a $O -- ruler 131072 4096 1,16,64
    echo "queue: all started"
}
# The 128K oracle grid (k 4096 b_sel 64 is done): block-shared rows first (about 10 s an instance alone on
# an H100), then per query (unions of 16; slower), two 128K jobs at a time.
queue6() {
    cd $S
    while [ ! -f /root/bg/train.rc ]; do sleep 5; done
    local d=$(( $(date +%s) + ${QB:-900} )) O="RULER_MODES=oracle"
    launch $d o128p $O -- ruler 131072 2048,1024 64
    launch $d o128q $O -- ruler 131072 512,256 64
    launch $d o128r $O -- ruler 131072 4096,2048 16
    launch $d o128s $O -- ruler 131072 1024,512,256 16
    launch $d o128t $O -- ruler 131072 4096,2048 1
    launch $d o128u $O -- ruler 131072 1024,512,256 1
    echo "queue: all started"
}
queue7() {  # the 128K oracle rows in blocks of 16 and 64, two jobs at a time
    cd $S
    while [ ! -f /root/bg/train.rc ]; do sleep 5; done
    local d=$(( $(date +%s) + ${QB:-900} )) O="RULER_MODES=oracle"
    launch $d o128p $O -- ruler 131072 2048,1024 64
    launch $d o128q $O -- ruler 131072 512,256 64
    launch $d o128r $O -- ruler 131072 4096,2048 16
    launch $d o128s $O -- ruler 131072 1024,512,256 16
    echo "queue: all started"
}
# The check job of a stretch whose indexer travels (no training): the whole twin test, the goldens with the
# GPU ctests, the sanitizers.
tjob() {
    cd $S; mkdir -p $R/check
    SPINDLE_REQUIRE_GPU=1 timeout 400 $B/test_cuda_twins >$R/check/twins.txt 2>&1; echo "twins (all parts) exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins.txt | head -20
    while [ ! -d $S/tests/goldens ]; do sleep 5; done
    goldjob; sanjob
}
# The short stretch's checks, side by side: the whole twin test, the GPU ctests, then memcheck and the goldens.
t2job() {
    cd $S; mkdir -p $R/check
    (SPINDLE_REQUIRE_GPU=1 timeout 400 $B/test_cuda_twins >$R/check/twins.txt 2>&1; echo "twins (all parts) exit $?" >$R/check/twins.rc) &
    (cd $B && SPINDLE_REQUIRE_GPU=1 timeout 400 ctest --timeout 360 -R '^gpu_' --output-on-failure) >$R/check/ctest-gpu.txt 2>&1
    echo "ctest gpu exit $?"; grep -E "tests passed|Failed|Passed|Skipped" $R/check/ctest-gpu.txt | tail -12
    wait; cat $R/check/twins.rc; grep -E "^(FAIL|test_cuda_twins)" $R/check/twins.txt | head -20
    SPINDLE_REQUIRE_GPU=1 timeout 330 compute-sanitizer --tool memcheck --error-exitcode 3 \
        $B/test_cuda_twins --quick >$R/check/memcheck.txt 2>&1; echo "memcheck exit $?"
    grep -hE "ERROR SUMMARY|^test_cuda_twins" $R/check/memcheck.txt
    REUSE_BUILD=1 SKIP_TWINS=1 SKIP_SANITIZE=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 SKIP_CTEST=1 OUT=$R/gold bash scripts/device-check.sh >/dev/null 2>&1
    echo "goldens exit $?"; grep -hE "PASS|FAIL" $R/gold/goldens_cuda*.txt | tail -5
}
case "$1" in
t2job-run) t2job ;;
queue6-run) queue6 ;;
queue7-run) queue7 ;;
tjob-run) tjob ;;
pidx)  # the trained indexer carried in (.dev/idx-q25/idx, from an earlier stretch's `idx`) to /root/q25/idx
    mkdir -p /root/q25 && rm -rf /root/q25/idx && cp -r .dev/idx-q25/idx /root/q25/idx && (cd /root/q25/idx && sha256sum *)
    ;;
queue5-run) queue5 ;;
queue4-run) queue4 ;;
queue-run) queue ;;
queue2-run) queue2 ;;
queue3-run) queue3 ;;
ojob-run) ojob ;;
cjob-run) cjob ;;
gjob-run) goldjob; sanjob ;;
c1)  # the build (foreground), part 00, then the kernel job in the background
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    if [ -n "${PROF:-}" ]; then  # the oracle's TTFT op by op on the synthetic Qwen2.5-1.5B shape, the card quiet
        mkdir -p $R/prof
        timeout 150 $B/spindle bench --synthetic qwen2.5-1.5b --ctx 32768 --k 256,2048 --bsel 1,64 --no-kernels \
            --ttft dense,oracle,oracle_union,oracle_block --max-oracle-ttft-ctx 32768 --ttft-reps 2 --ttft-profile --device cuda \
            --json $R/prof/oracle-32k.json >$R/prof/oracle-32k.txt 2>&1; echo "prof exit $?"
        grep -h "^ttft" $R/prof/oracle-32k.txt | cut -c1-250
    fi
    bash scripts/device-qwen25coder.sh part 00
    gpu
    cp .dev/go.sh /root/go.sh; $BGS start ${C1JOB:-cjob} bash /root/go.sh ${C1JOB:-cjob}-run
    sleep 3; $BGS status
    pack
    ;;
kjob-run) kjob ;;
s1)  # a short stretch without the checkpoint: the build, the oracle's TTFT op by op on the synthetic
    # Qwen2.5-1.5B shape at 32K and 128K (card quiet), then the check job (twins, goldens, GPU ctests,
    # sanitizers) in the background
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu; mkdir -p $R/prof
    timeout 150 $B/spindle bench --synthetic qwen2.5-1.5b --ctx 32768 --k ${PK:-2048} --bsel 1,64 --no-kernels \
        --ttft dense,oracle,oracle_union,oracle_block --max-oracle-ttft-ctx 32768 --ttft-reps 2 --ttft-profile \
        --device cuda --json $R/prof/oracle-32k.json >$R/prof/oracle-32k.txt 2>&1; echo "prof 32k exit $?"
    grep -h "^ttft" $R/prof/oracle-32k.txt | cut -c1-250
    [ -n "${P128:-}" ] && timeout $P128 $B/spindle bench --synthetic qwen2.5-1.5b --ctx 131072 --k 2048 --bsel 64 --no-kernels \
        --ttft dense,oracle_union,oracle_block --max-oracle-ttft-ctx 131072 --ttft-reps 1 --ttft-warmup-ctx 16384 \
        --ttft-profile --device cuda --json $R/prof/oracle-128k.json >$R/prof/oracle-128k.txt 2>&1; echo "prof 128k exit $?"
    grep -h "^ttft" $R/prof/oracle-128k.txt 2>/dev/null | cut -c1-250
    mkdir -p $S/tests/goldens && cp -r .dev/gold/goldens/. $S/tests/goldens/
    cp .dev/go.sh /root/go.sh; (cd $S && $BGS start t2job bash /root/go.sh t2job-run)
    sleep 2; $BGS status; pack
    ;;
s00)  # the build and gpu_cli alone (the new bench runs' checks)
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu; mkdir -p $R/check $S/tests/goldens && cp -r .dev/gold/goldens/. $S/tests/goldens/
    (cd $B && SPINDLE_REQUIRE_GPU=1 timeout 120 ctest --timeout 110 -R '^gpu_cli' --output-on-failure) >$R/check/ctest-gpu-cli.txt 2>&1
    echo "gpu_cli exit $?"; grep -E "^ok|^FAIL|profiles|runs:|tests passed" $R/check/ctest-gpu-cli.txt | cut -c1-300 | tail -16; pack
    ;;
s0)  # the shortest stretch: the build, the oracle's TTFT op by op at 32K (synthetic), gpu_cli, the oracle twins
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu; mkdir -p $R/prof $R/check
    timeout 120 $B/spindle bench --synthetic qwen2.5-1.5b --ctx 32768 --k 2048 --bsel 1,64 --no-kernels \
        --ttft dense,oracle_union,oracle_block --max-oracle-ttft-ctx 32768 --ttft-reps 2 --ttft-profile \
        --device cuda --json $R/prof/oracle-32k.json >$R/prof/oracle-32k.txt 2>&1; echo "prof 32k exit $?"
    grep -h "^ttft" $R/prof/oracle-32k.txt | cut -c1-250
    mkdir -p $S/tests/goldens && cp -r .dev/gold/goldens/. $S/tests/goldens/
    (cd $B && SPINDLE_REQUIRE_GPU=1 timeout 150 ctest --timeout 140 -R '^gpu_cli' --output-on-failure) >$R/check/ctest-gpu-cli.txt 2>&1
    echo "gpu_cli exit $?"; grep -E "^ok|^FAIL|profiles|runs:|tests passed" $R/check/ctest-gpu-cli.txt | cut -c1-200 | tail -14
    SPINDLE_REQUIRE_GPU=1 timeout ${TW:-120} $B/test_cuda_twins --part oracle >$R/check/twins-oracle.txt 2>&1; echo "twins oracle exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-oracle.txt | head; pack
    ;;
g1)  # Gemma 3 270M stretch: the build, the text and wheel (no GGUF part: each part is 64 MB)
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    mkdir -p $S/.dev && cp -r .dev/c1 $S/.dev/; cp .dev/go.sh /root/go.sh; gpu; pack
    ;;
gpart)  # gpart N: GGUF part .dev/gp/pN into /root/g3
    bash scripts/device-gemma3.sh part "$2" | tail -2
    ;;
glast)  # join + convert, then the Gemma indexer (32K, 60 steps) and the quality grid 4K-32K in the background
    export TASKS=$ROOT/.dev/rg G="env MODEL=models/gemma3-270m STATE=/root/g3q SPINDLE=$S/build-device/spindle"
    cd $S && OUT=$R/gconvert bash scripts/device-gemma3.sh convert | tail -4
    if [ -n "${GIDX:-}" ]; then  # the committed indexer travels (.dev/gidx/idx_ctx32768) instead of a training
        mkdir -p /root/g3q && rm -rf /root/g3q/idx && cp -r $ROOT/.dev/gidx/idx_ctx32768 /root/g3q/idx && (cd /root/g3q/idx && sha256sum *)
        pack; exit 0
    fi
    mkdir -p /root/g3q && $BGS start gtrain env TRAIN_MIX=0.25 BUDGET_S=400 EVAL_EVERY=30 CKPT_EVERY=20 TRAIN_CTX=32768 \
        OUT=$R/gtrain $G TASKS=$TASKS bash scripts/device-qwen25coder.sh train ${STEPS:-60}
    sleep 30; grep progress /root/g3q/train.log | tail -1; pack
    ;;
ggrid)  # ggrid: the Gemma quality grid (RULER dense/oracle/indexer, NLL) then TTFT, in the background
    cd $S && $BGS start ggrid env MODEL=models/gemma3-270m STATE=/root/g3q TASKS=$ROOT/.dev/rg SPINDLE=$S/build-device/spindle \
        RULER_PER_TASK=${GPT:-1} EXEC_BLOCK=16 BUDGET_S=${GB:-900} GRID_FREE_MIB=20000 OUT=$R/ggrid bash scripts/device-qwen25coder.sh grid 4096,8192,16384,32768
    sleep 5; $BGS status | tail -3
    ;;
kall-run) NO_SAN=1 kjob; goldjob; pjob; sanjob ;;
k1)  # the kernel plan alone (no Qwen stretch): the build, then twins, benches, anchors, sanitizers, goldens, GPU ctests
    $BGS src $S
    mkdir -p $S/tests/goldens && cp -r .dev/gold/goldens/. $S/tests/goldens/
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu
    cp .dev/go.sh /root/go.sh; $BGS start kall bash /root/go.sh kall-run
    sleep ${K1_SLEEP:-200}; $BGS status; tail -n 30 /root/bg/kall.log
    pack
    ;;
goldjob-run) goldjob ;;
kA)  # the build, the twin test's indexer part, the kernel benches, the per-query TTFT, the anchors (one short call)
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu
    cd $S; mkdir -p $R/kb $R/check
    SPINDLE_REQUIRE_GPU=1 timeout 90 $B/test_cuda_twins --part indexer >$R/check/twins-indexer.txt 2>&1; echo "twins indexer exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-indexer.txt | head -20; grep -i "fused" $R/check/twins-indexer.txt | head -20
    gpu >$R/kb/gpu-before.txt
    timeout 120 $B/spindle bench --synthetic qwen3-8b --ctx 32768,131072 --k 2048 --bsel 64 --no-ttft --max-oracle-ctx 1024 \
        --max-train-ctx 1024 --max-fp32-ctx 1024 --device cuda --json $R/kb/kernels.json >$R/kb/kernels.txt 2>&1; echo "kernels exit $?"
    grep -E "indexer_select|sparse_att|sdpa|gemm" $R/kb/kernels.txt | cut -c1-250 | head -30
    pack
    timeout 60 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --layers 6 --no-kernels --ttft indexer \
        --device cuda --json $R/kb/ttft-default.json >$R/kb/ttft-default.txt 2>&1; echo "ttft default exit $?"
    SPINDLE_FUSED_SELECT=1 timeout 60 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --layers 6 --no-kernels \
        --ttft indexer --indexer-scores bf16 --device cuda --json $R/kb/ttft-fused.json >$R/kb/ttft-fused.txt 2>&1
    echo "ttft fused exit $?"; grep -h "^ttft" $R/kb/ttft-*.txt | cut -c1-200
    pack
    timeout 60 python3 scripts/bench-anchors.py --sections indexer --ctx 32768,131072 --json $R/kb/anchors.json \
        >$R/kb/anchors.txt 2>&1; echo "anchors exit $?"; tail -5 $R/kb/anchors.txt
    gpu >$R/kb/gpu-after.txt
    pack
    ;;
kmin)  # the build, the twin test's indexer part, the selection kernels at 128K (the shortest useful call)
    $BGS src $S
    (cd $S && ONLY_BUILD=1 OUT=$R/build bash scripts/device-check.sh) | tail -3
    gpu
    cd $S; mkdir -p $R/kb $R/check
    SPINDLE_REQUIRE_GPU=1 timeout 60 $B/test_cuda_twins --part indexer >$R/check/twins-indexer.txt 2>&1; echo "twins indexer exit $?"
    grep -E "^(FAIL|test_cuda_twins)" $R/check/twins-indexer.txt | head -20; grep -i "fused" $R/check/twins-indexer.txt | head -20
    pack
    timeout 80 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --no-ttft --max-oracle-ctx 1024 \
        --max-train-ctx 1024 --max-fp32-ctx 1024 --device cuda --json $R/kb/kernels.json >$R/kb/kernels.txt 2>&1; echo "kernels exit $?"
    grep -E "indexer_select|sparse_att|sdpa|gemm" $R/kb/kernels.txt | cut -c1-250 | head -30
    pack
    ;;
kB)  # per-query TTFT with and without the fused selection; the fused kernel under ncu and the sanitizers
    cd $S; mkdir -p $R/kb $R/check
    timeout 150 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --layers 6 --no-kernels --ttft indexer \
        --device cuda --json $R/kb/ttft-default.json >$R/kb/ttft-default.txt 2>&1; echo "ttft default exit $?"
    SPINDLE_FUSED_SELECT=1 timeout 150 $B/spindle bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --layers 6 --no-kernels \
        --ttft indexer --indexer-scores bf16 --device cuda --json $R/kb/ttft-fused.json >$R/kb/ttft-fused.txt 2>&1
    echo "ttft fused exit $?"; grep -h "^ttft" $R/kb/ttft-*.txt
    pack
    SPINDLE_REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool racecheck --kernel-name regex=select_fused --error-exitcode 3 \
        $B/test_cuda_twins --quick --part indexer >$R/check/racecheck-select-fused.txt 2>&1; echo "racecheck exit $?"
    SPINDLE_REQUIRE_GPU=1 timeout 120 compute-sanitizer --tool memcheck --kernel-name regex=select_fused --error-exitcode 3 \
        $B/test_cuda_twins --quick --part indexer >$R/check/memcheck-select-fused.txt 2>&1; echo "memcheck exit $?"
    grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|^test_cuda_twins" $R/check/racecheck-select-fused.txt $R/check/memcheck-select-fused.txt
    pack
    mkdir -p $R/ncu; (cd $S && OUT=$R/ncu PROFILE_KERNELS='^(indexer_select_fused|topk_rows)' PROFILE_TIMEOUT_S=150 \
        PROFILE_BENCH_ARGS="--max-fp32-ctx 1024 --max-train-ctx 1024 --max-oracle-ctx 1024" bash scripts/device-profile.sh) | tail -40
    pack
    ;;
part)  # part NN
    bash scripts/device-qwen25coder.sh part "$2"
    $BGS status | tail -3
    ;;
last)  # part 18 + tasks; convert, yarn, tokenize; wait for the kernel job; the training alone on the card
    bash scripts/device-qwen25coder.sh part 18
    mkdir -p $S/tests/goldens && cp -r .dev/gold/goldens/. $S/tests/goldens/
    mkdir -p /root/models $S/.dev && ln -sfn /root/models $S/models && cp -r .dev/c1 $S/.dev/
    cd $S
    $Q stash >/dev/null; ls /root/q25/tasks/
    CHECK_PRECISIONS= OUT=$R/convert $Q convert | tail -3
    OUT=$R/convert $Q yarn | tail -2
    for t in train heldout; do $B/spindle tokenize --model models/qwen25coder-1.5b --text .dev/c1/text/$t.txt --out /root/q25/ids-$t.txt.tmp && mv /root/q25/ids-$t.txt.tmp /root/q25/ids-$t.txt; done
    w=0; while [ ! -f /root/kb-timed.done ] && [ $w -lt ${KWAIT:-200} ]; do sleep 5; w=$((w + 5)); done
    [ -n "${OHW:-}" ] && bash $ROOT/.dev/go.sh ohw
    [ -f /root/bg/tjob.log ] || { cp $ROOT/.dev/go.sh /root/go.sh; (cd $S && $BGS start gjob bash /root/go.sh gjob-run); }  # goldens, GPU ctests, sanitizers
    echo "kernel timings done: $([ -f /root/kb-timed.done ] && echo yes || echo NO) after $w s more"; tail -qn 12 /root/bg/kjob.log /root/bg/cjob.log 2>/dev/null
    if [ -n "${CARRIED_IDX:-}" ] && [ -s /root/q25/idx/model.safetensors ]; then  # the indexer travelled (pidx)
        mkdir -p /root/bg && echo "carried indexer: $(sha256sum /root/q25/idx/model.safetensors)" >/root/bg/train.log && echo 0 >/root/bg/train.rc
    else
        $BGS start train env TRAIN_MIX=0.25 BUDGET_S=400 EVAL_EVERY=30 CKPT_EVERY=20 OUT=$R/train $Q train ${STEPS:-60}
    fi
    [ -n "${QUEUE:-}" ] && cp $ROOT/.dev/go.sh /root/go.sh && (cd $S && bash $ROOT/scripts/device-bg.sh start queue bash /root/go.sh ${QUEUE}-run)
    [ -n "${QUEUE:-}" ] || [ -f /root/bg/cjob.log ] || $BGS start goldjob bash /root/go.sh goldjob-run
    sleep 20; grep progress /root/q25/train.log 2>/dev/null | tail -1; $BGS status | tail -4
    pack
    ;;
grid)  # grid NAME LENS K BSEL [VAR=VAL...]: the quality rows as background jobs (no TTFT)
    cd $S; n=$2 l=$3 k=$4 b=$5; shift 5
    $BGS start $n env RULER_PER_TASK=1 EXEC_BLOCK=16 GRID_NO_TTFT=1 BUDGET_S=${GB:-1200} "$@" OUT=$R/$n $Q grid $l $k $b
    sleep 5; $BGS status | tail -3
    ;;
tg)  # tg LENS K BSEL [VAR=VAL...]: wait for the training (<= 200 s), then the grid's quality rows in the background
    $BGS wait train ${TWAIT:-200} | tail -4; grep -h "recall" /root/q25/train.log | tail -2
    ls -la /root/q25/idx 2>&1 | head -5
    shift; bash $ROOT/.dev/go.sh grid "$@"
    pack
    ;;
start)  # start NAME VAR=VAL... -- ARGS...: a background job of device-qwen25coder.sh
    cd $S; n=$2; shift 2; e=(); while [ "$1" != -- ]; do e+=("$1"); shift; done; shift
    $BGS start $n env RULER_PER_TASK=1 BUDGET_S=1500 "${e[@]}" OUT=$R/$n $Q "$@"
    ;;
stop) $BGS stop "$2"; $BGS status ;;
idx)  # the trained indexer back in parts of 15 MB (sha256 of the tar beside them), then the status
    (cd /root/q25 && tar cf /root/idx.tar idx && sha256sum /root/idx.tar | tee $OUT/idx.sha256 && split -b 15M -d /root/idx.tar $OUT/idx.tar.)
    bash "$0" status
    ;;
ttft)  # ttft LENS K BSEL: on a quiet card
    cd $S; gpu
    EXEC_BLOCK=16 ORACLE_TTFT_MAX=${OTM:-131072} BUDGET_S=${BUDGET:-560} OUT=$R/ttft $Q ttft "$2" "$3" "$4"
    pack
    ;;
ohs)  # the oracle's per-query TTFT on Qwen2.5-Coder at 32K with its 6 heads a group staged 6, 3, 2 at a time
    cd $S; mkdir -p $R/ohs
    for hs in 6 3 2; do
        SPINDLE_ORACLE_HEADS=$hs timeout 150 $B/spindle bench --model models/qwen25coder-1.5b --ctx 32768 --k 1024 \
            --bsel 1,64 --no-kernels --ttft oracle,oracle_block --device cuda --json $R/ohs/hs$hs.json >$R/ohs/hs$hs.txt 2>&1
        echo "hs $hs exit $?"; grep -h "^ttft" $R/ohs/hs$hs.txt | cut -c1-120
    done
    pack
    ;;
ohw)  # the oracle's TTFT on Qwen2.5-Coder at 32K with its heads split over warps (HW) or staged (HS); the fastest per query -> /root/oracle-{hw,hs}
    cd $S; mkdir -p $R/ohw
    for v in "1 0" "3 0" "6 0" "1 3" "1 2"; do
        set -- $v; e="SPINDLE_ORACLE_WARP_HEADS=$1"; [ $2 = 0 ] || e="$e SPINDLE_ORACLE_HEADS=$2"
        env $e timeout 100 $B/spindle bench --model models/qwen25coder-1.5b --ctx 32768 --k 2048 --bsel 1,64 --no-kernels \
            --ttft oracle,oracle_block --ttft-reps 2 --device cuda --json $R/ohw/hw$1-hs$2.json >$R/ohw/hw$1-hs$2.txt 2>&1
        echo "hw $1 hs $2 exit $?"; grep -h "^ttft" $R/ohw/hw$1-hs$2.txt | cut -c1-120
    done
    python3 - $R/ohw <<'PY'
import json, sys
best = (None, "1", "0")
for v in ("1 0", "3 0", "6 0", "1 3", "1 2"):
    hw, hs = v.split()
    try:
        r = [x for x in json.load(open(f"{sys.argv[1]}/hw{hw}-hs{hs}.json"))["results"] if x["name"] == "ttft_oracle"][0]
        if r.get("ms_median") and (best[0] is None or r["ms_median"] < best[0]): best = (r["ms_median"], hw, hs)
    except (OSError, ValueError, IndexError, KeyError):
        pass
open("/root/oracle-hw", "w").write(best[1] + "\n")
open("/root/oracle-hs", "w").write(best[2] + "\n")
print(f"oracle for the quality rows: warps/heads {best[1]}, staged heads {best[2]} (0: the group), {best[0]} ms")
PY
    ;;
wait)  # wait NAME SECS
    $BGS wait "$2" "${3:-500}" | tail -5; $BGS status; gpu; pack
    ;;
sleep)  # sleep SECS: keep the machine while jobs run, then the status
    sleep "$2"; $BGS status; gpu; tail -qn 1 /root/bg/*.log /root/q25/bg/*.log 2>/dev/null | cut -c1-200; pack
    ;;
retrain)  # the build back (goldjob rebuilt it), tokenize, the training in the background
    w=0; while [ ! -x $B/spindle ] && [ $w -lt 200 ]; do sleep 5; w=$((w + 5)); done; echo "spindle there after $w s"
    cd $S
    for t in train heldout; do $B/spindle tokenize --model models/qwen25coder-1.5b --text .dev/c1/text/$t.txt --out /root/q25/ids-$t.txt.tmp && mv /root/q25/ids-$t.txt.tmp /root/q25/ids-$t.txt; done
    if [ -n "${CARRIED_IDX:-}" ] && [ -s /root/q25/idx/model.safetensors ]; then  # the indexer travelled (pidx)
        mkdir -p /root/bg && echo "carried indexer: $(sha256sum /root/q25/idx/model.safetensors)" >/root/bg/train.log && echo 0 >/root/bg/train.rc
    else
        $BGS start train env TRAIN_MIX=0.25 BUDGET_S=400 EVAL_EVERY=30 CKPT_EVERY=20 OUT=$R/train $Q train ${STEPS:-60}
    fi
    sleep 30; grep progress /root/q25/train.log 2>/dev/null | tail -1; $BGS status | tail -4
    pack
    ;;
later)  # later DEADLINE_EPOCH NAME LENS K BSEL VARS... : start grid NAME once the card has 20 GB free
    d=$2; shift 2
    while [ $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) -gt ${MEMMAX:-58000} ]; do sleep 10; done
    GB=$((d - $(date +%s))) bash "$0" grid "$@"; sleep 60
    ;;
status) $BGS status; BG=/root/q25/bg $BGS status; gpu; tail -qn 2 /root/bg/*.log 2>/dev/null | cut -c1-220; pack ;;
*) echo "go.sh c1|part NN|last|grid LENS K BSEL|start NAME VARS -- STAGE..|wait NAME SECS|sleep S|ttft|status"; exit 2 ;;
esac
