#!/usr/bin/env bash
# device-profile.sh: Nsight Compute evidence for docs/performance.md, ON the GPU machine,
# after a build (scripts/device-check.sh or device-bench.sh made build-device/).
# Runs `spindle bench --no-ttft` on the synthetic Qwen3-8B at one length under
# ncu, profiling the first launch of each of our heavy kernels (not cuDNN's or
# cuBLAS's), with the clocks left alone (--clock-control none: no clock locking, so the
# times are those of an ordinary run).
# Sections: SpeedOfLight, MemoryWorkloadAnalysis, ComputeWorkloadAnalysis,
# Occupancy, LaunchStats, WarpStateStats, SchedulerStats.
# Output in $OUT: profile-<ctx>.ncu-rep, profile-<ctx>.txt (details page),
# profile-<ctx>.csv (raw metrics).
# PROFILE_CTX (default 32768), PROFILE_KERNELS (regex), PROFILE_NTH (which launch of each
# kernel, default 1), PROFILE_TIMEOUT_S (240), PROFILE_BENCH_ARGS (more flags for
# the bench under ncu, e.g. "--max-fp32-ctx 1024 --max-train-ctx 1024" to skip slow
# kernels that are not profiled).
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/device-out}
B=$ROOT/build-device
CTX=${PROFILE_CTX:-32768}
K=${PROFILE_KERNELS:-^(support_attention_block_tc_kernel2|indexer_kl|indexer_lse|oracle_scores|topk_rows|support_attention_block_kernel|support_attention_block_tc|support_attention_query|row_softmax_stats|block_aggregate|mask_future|indexer_score)}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v ncu >/dev/null || export PATH=$PATH:/usr/local/cuda/bin:$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | tail -1)
command -v ncu >/dev/null || { echo "device-profile: ncu not found" >&2; exit 1; }
ncu --version | tail -1
rep=$OUT/profile-$CTX
timeout "${PROFILE_TIMEOUT_S:-240}" ncu --clock-control none --kernel-name-base function \
    --kernel-id "::regex:$K:${PROFILE_NTH:-1}" \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    -f -o "$rep" \
    "$B/spindle" bench --synthetic qwen3-8b --ctx "$CTX" --k 2048 --bsel 64 --device cuda --no-ttft --max-reps 1 ${PROFILE_BENCH_ARGS:-} --json "$rep.bench.json" \
    >"$rep.log" 2>&1
echo "ncu exit $?"
tail -5 "$rep.log"
[ -f "$rep.ncu-rep" ] || exit 1
ncu -i "$rep.ncu-rep" --page details >"$rep.txt" 2>&1
ncu -i "$rep.ncu-rep" --page raw --csv >"$rep.csv" 2>&1
grep -E "^  [a-z_0-9]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy" "$rep.txt" | head -120
