#!/usr/bin/env bash
# One GPU call: build, the union kernel's twins, the bf16-teacher test, the synthetic-8B
# online training test, the NCCL build + test, and the union TTFT at 128K. Results in $OUT/f.
set -uo pipefail
R=$OUT/f; mkdir -p $R
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread
B=build-device/spindle
t() { echo "=== $* ($(date -u +%H:%M:%S))"; }
t build; ONLY_BUILD=1 OUT=$R/b bash scripts/device-check.sh >/dev/null 2>&1; echo "build exit $?"; tail -2 $R/b/device-check.log
t teacher_bf16; SPINDLE_REQUIRE_GPU=1 timeout 60 bash tests/test_gpu_teacher_bf16.sh $B tests/goldens /tmp/tb16 >$R/teacher_bf16.txt 2>&1; echo "teacher_bf16 exit $?"; tail -4 $R/teacher_bf16.txt
t synth; OUT=$R timeout 200 bash scripts/device-train.sh synth >/dev/null 2>&1; echo "synth exit $?"; grep -E "^FAIL|^synthetic|failure" $R/gpu_train_synth.txt
t nccl; OUT=$R/n timeout 150 bash scripts/device-train.sh nccl >/dev/null 2>&1; echo "nccl exit $?"; grep -E "^ok|^FAIL|failure" $R/n/nccl_train.txt | tail -8
t twins oracle; SPINDLE_REQUIRE_GPU=1 timeout 150 build-device/test_cuda_twins --part oracle >$R/twins-oracle.txt 2>&1; echo "twins exit $?"
grep -E "^FAIL|PASS|union" $R/twins-oracle.txt | grep -v "^ok" | tail -5; grep -c "^ok   support_attention_union_tc" $R/twins-oracle.txt
t union bench; timeout 170 $B bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --device cuda --no-kernels \
  --ttft indexer_block,indexer_union --union-block 16 --json $R/union16.json >$R/union16.txt 2>&1; echo "bench exit $?"; grep -E "^ttft" $R/union16.txt
t hf client; bash tests/test_export_layouts.sh $B tests/goldens /tmp/i21t >$R/export_layouts.txt 2>&1; echo "export_layouts exit $?"
for a in "E-dsa E-spindle 8 1" "C-qsa C-spindle 24 16"; do set -- $a
  for dt in fp32 bf16; do timeout 60 python3 scripts/hf-sparse-prefill.py --model tests/goldens/llama_f32_default --indexer /tmp/i21t/$1 \
    --reference-indexer /tmp/i21t/$2 --ids /tmp/i21t/ids.txt --ctx 96 --k $3 --bsel $4 --device cuda --dtype $dt --spindle $B \
    --spindle-device cuda >>$R/hf_client.txt 2>&1; echo "client $1 k $3 bsel $4 $dt exit $?"; done; done
grep -iE "max \|" $R/hf_client.txt | tail -4
t done; cd $OUT && tar czf f.tgz f && rm -rf f

