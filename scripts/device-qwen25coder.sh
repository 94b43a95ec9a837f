#!/usr/bin/env bash
# device-qwen25coder.sh STAGE: Qwen2.5-Coder-1.5B-Instruct (docs/qwen25coder.md) ON the GPU machine, in
# stages that fit consecutive calls (each under the 10-minute limit; the machine keeps /root and the
# ignored folders between calls made back to back). Build first with `bash scripts/device-check.sh`
# (ONLY_BUILD=1 is enough) in the first call.
#
# What travels (docs/gpu.md): .deb/ in the first call; .dev/c1/ (text/check.txt, text/heldout.txt,
# text/train.txt and the gguf wheel); the GGUF in parts .dev/qp/pNN made here with
#     split -b BYTES -d -a 2 models/../.cache/qwen25coder/<file>.gguf .dev/qp/p
# with BYTES such that the tree plus one part stay under the 64 MiB a call carries (the tree is about
# 36 MB: 30,000,000 gives 38 parts). A part call may run other GPU work after keeping its part (CMD), so
# the transfer calls are not idle.
#
#   part NN [CMD...]   keep .dev/qp/pNN in /root/q25/, then run CMD (if any) from the repository root
#   convert            join /root/q25/p?? in order, check size and sha256 (cc324af0…b046), convert to
#                      models/qwen25coder-1.5b (scripts/gguf_to_hf.py, float32), then spindle's logits
#                      on 2,048 real tokens of .dev/c1/text/check.txt against HF transformers
#                      (Qwen2ForCausalLM) on the GPU, fp32 and bf16 (scripts/check-gemma3-spindle.py)
#   ruler FILE         spindle eval --tasks-file FILE (gzip allowed) --device cuda: dense, and the oracle at
#                      RULER_K (default 256,1024,2048) × RULER_BSEL (default 1,64), RULER_N tasks (default all)
# Results in $OUT.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/device-out}
mkdir -p "$OUT" /root/q25
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$ROOT/build-device
M=models/qwen25coder-1.5b
GGUF_SHA=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
GGUF_BYTES=1117320768
stage=${1:-}
case "$stage" in
part)
    n=${2:?part number (two digits)}
    shift 2
    mv ".dev/qp/p$n" "/root/q25/p$n" || exit 1
    parts=(/root/q25/p??)
    echo "kept part $n: ${#parts[@]} parts, $(du -cb "${parts[@]}" | tail -1 | cut -f1) bytes"
    if [ $# -gt 0 ]; then "$@"; echo "CMD exit $?"; fi
    ;;
convert)
    if [ ! -f "$M/model.safetensors" ]; then
        cat /root/q25/p?? >/root/q25/q.gguf
        size=$(stat -c %s /root/q25/q.gguf) got=$(sha256sum /root/q25/q.gguf | cut -d' ' -f1)
        echo "gguf $size bytes, sha256 $got"
        if [ "$size" != "$GGUF_BYTES" ] || [ "$got" != "$GGUF_SHA" ]; then
            echo "device-qwen25coder: GGUF size or sha256 mismatch"
            exit 1
        fi
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .dev/c1/*.whl
        rm -rf "$M.tmp" && mkdir -p models &&
            PYTHONPATH=/tmp/site python3 scripts/gguf_to_hf.py /root/q25/q.gguf "$M.tmp" >"$OUT/convert.txt" 2>&1 &&
            mv "$M.tmp" "$M" || { tail "$OUT/convert.txt"; exit 1; }
        rm -f /root/q25/q.gguf
    fi
    (cd "$M" && sha256sum ./*) >"$OUT/sums.txt"; cat "$OUT/sums.txt"
    for prec in ${CHECK_PRECISIONS:-fp32 bf16}; do
        PYTHONPATH=/tmp/site python3 scripts/check-gemma3-spindle.py --model "$M" --text .dev/c1/text/check.txt \
            --spindle "$B/spindle" --device cuda --precision "$prec" --out-dir "/root/q25/check-$prec" \
            --json "$OUT/check-$prec.json" >"$OUT/check-$prec.txt" 2>&1
        echo "check $prec exit $?"; tail -4 "$OUT/check-$prec.txt"
    done
    rm -rf /root/q25/check-*
    ;;
ruler)
    f=${2:?tasks file}
    case "$f" in *.gz) gunzip -c "$f" >/root/q25/tasks.jsonl && f=/root/q25/tasks.jsonl ;; esac
    n_arg=()
    [ -n "${RULER_N:-}" ] && n_arg=(--n-tasks "$RULER_N")
    "$B/spindle" eval --model "$M" --tasks-file "$f" --k "${RULER_K:-256,1024,2048}" --bsel "${RULER_BSEL:-1,64}" \
        "${n_arg[@]}" --device cuda --json "$OUT/ruler.json" --predictions "$OUT/ruler-preds.jsonl" \
        >"$OUT/ruler.log" 2>&1
    echo "eval exit $?"; grep "RULER average" "$OUT/ruler.log" | tail -20
    ;;
*)
    echo "usage: scripts/device-qwen25coder.sh part NN [CMD...] | convert | ruler FILE" >&2
    exit 2
    ;;
esac
