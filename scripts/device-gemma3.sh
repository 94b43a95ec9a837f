#!/usr/bin/env bash
# device-gemma3.sh STAGE: the Gemma 3 checks and reports ON the GPU machine, in stages that fit
# consecutive calls (each under the 10-minute limit; the machine keeps /root and the ignored
# folders between calls made back to back). What travels: .deb/ (scripts/device-prepare.sh),
# .dev/c1/ (text/heldout.txt, text/train.txt, text/check.txt, the gguf wheel) and the Gemma 3
# GGUF in parts .dev/gp/pN (split -b BYTES -d -a 1 GGUF .dev/gp/p, BYTES such that the tree plus one
# part stay under the 64 MiB a call carries; the gemma stage joins every part there, in order).
#   build     build (scripts/device-check.sh: goldens_cuda incl. the gemma3 goldens), then the
#             128K TTFT of the synthetic Qwen3-8B (dense, block-shared) with the HF transformers
#             anchor in the same job
#   part N    keep the GGUF part .dev/gp/pN in /root/g3/; with TWINS=1 the full twin test
#             (test_cuda_twins), with SANITIZE_PARTS those sanitizer runs
#   convert   join the parts (sha256 a5fd3b62…6818) and convert (scripts/gemma3_gguf_to_hf.py) only:
#             models/gemma3-270m for other stages (e.g. scripts/device-qwen25coder.sh with
#             MODEL=models/gemma3-270m for RULER rows, docs/gemma3.md)
#   gemma     join the parts (sha256 a5fd3b62…6818), convert (scripts/gemma3_gguf_to_hf.py), check
#             spindle's logits against HF transformers on 2,048 real tokens (CUDA fp32 and bf16), then
#             scripts/gemma3-report.sh with REPORT_ARGS
# Results in $OUT.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/device-out}
mkdir -p "$OUT" /root/g3
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$ROOT/build-device
GGUF_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
stage=${1:-}
case "$stage" in
build)
    SKIP_TWINS=${SKIP_TWINS:-1} SKIP_SANITIZE=1 SKIP_CTEST=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 OUT=$OUT/check \
        bash scripts/device-check.sh >/dev/null 2>&1
    echo "device-check exit $?"
    grep -E "FAIL|goldens_cuda:|test_cuda_twins:" "$OUT/check/device-check.log" | tail -12
    "$B/spindle" bench --synthetic qwen3-8b --ctx 131072 --k 2048 --bsel 64 --device cuda --no-kernels \
        --ttft dense,indexer_block --json "$OUT/ttft128k.json" >"$OUT/ttft128k.txt" 2>&1
    echo "bench exit $?"; grep -E "^ttft" "$OUT/ttft128k.txt"
    python3 scripts/bench-anchors.py --ctx 131072 --sections hf --warmup 1 --budget-s 150 --json "$OUT/hf128k.json" \
        >"$OUT/hf128k.txt" 2>"$OUT/hf128k.err"
    echo "anchor exit $?"; grep hf_ "$OUT/hf128k.txt"
    ;;
part)
    n=${2:?part number}
    mv ".dev/gp/p$n" "/root/g3/p$n" && ls -la /root/g3
    if [ "${TWINS:-0}" = 1 ]; then
        SPINDLE_REQUIRE_GPU=1 "$B/test_cuda_twins" >"$OUT/twins.txt" 2>&1
        echo "test_cuda_twins exit $?"; grep -E "FAIL|failures|PASS$" "$OUT/twins.txt" | tail -6
    fi
    if [ -n "${SANITIZE_PARTS:-}" ]; then
        REUSE_BUILD=1 SKIP_TWINS=1 SKIP_GOLDENS=1 SKIP_CTEST=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 \
            OUT=$OUT/sanitize bash scripts/device-check.sh >/dev/null 2>&1
        echo "device-check exit $?"
        grep -E "SUMMARY|FAIL|Internal" "$OUT/sanitize/device-check.log"
    fi
    ;;
convert | gemma)
    cat /root/g3/p[0-9] >/root/g3/g.gguf
    got=$(sha256sum /root/g3/g.gguf | cut -d' ' -f1)
    echo "gguf sha256 $got"; [ "$got" = "$GGUF_SHA" ] || { echo "device-gemma3: GGUF sha256 mismatch"; exit 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .dev/c1/*.whl
    export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
    if [ ! -f models/gemma3-270m/model.safetensors ]; then
        rm -rf models/gemma3-270m.tmp && mkdir -p models &&
            python3 scripts/gemma3_gguf_to_hf.py /root/g3/g.gguf models/gemma3-270m.tmp >"$OUT/convert.txt" 2>&1 &&
            mv models/gemma3-270m.tmp models/gemma3-270m || { tail "$OUT/convert.txt"; exit 1; }
    fi
    (cd models/gemma3-270m && sha256sum *) >"$OUT/sums.txt"; cat "$OUT/sums.txt"
    [ "$stage" = convert ] && exit 0
    for prec in ${CHECK_PRECISIONS:-fp32 bf16}; do
        python3 scripts/check-gemma3-spindle.py --model models/gemma3-270m --text .dev/c1/text/check.txt \
            --spindle "$B/spindle" --device cuda --precision $prec --out-dir /root/g3/check-$prec \
            --json "$OUT/check-$prec.json" >"$OUT/check-$prec.txt" 2>&1
        echo "check $prec exit $?"; tail -4 "$OUT/check-$prec.txt"
    done
    rm -rf /root/g3/check-*
    # shellcheck disable=SC2086
    timeout "${REPORT_TIMEOUT_S:-450}" scripts/gemma3-report.sh --model models/gemma3-270m --bin "$B/spindle" --heldout .dev/c1/text/heldout.txt \
        --train-text .dev/c1/text/train.txt --out /root/g3/report ${REPORT_ARGS:-} >"$OUT/report.log" 2>&1
    echo "report exit $?"; tail -5 "$OUT/report.log"
    # everything but the shards and the training checkpoints (the exported indexers stay)
    (cd /root/g3 && tar czf "$OUT/report.tgz" --exclude='report/shards_*' --exclude='checkpoints' report)
    ;;
*)
    echo "usage: scripts/device-gemma3.sh build | part N | convert | gemma" >&2
    exit 2
    ;;
esac
