#!/usr/bin/env bash
# device-hybrid.sh STAGE: the Qwen3-Next / Qwen3.5 checks and benchmarks ON the GPU machine, from the
# repository root, in stages that fit one call each (the machine keeps build-device/ and /tmp between
# calls made back to back). What travels: .deb/ (scripts/device-prepare.sh) and, for the PyTorch
# references, .whl/ holding flash-linear-attention, fla-core and einops (docs/gpu.md).
#   check    build (scripts/device-check.sh), the twin test (every part: the Gated DeltaNet and the
#            hybrid parts included), goldens_cuda (the qwen3_5 / qwen3_next goldens in every
#            precision), compute-sanitizer (SANITIZE_PARTS, default "memcheck deltanet": memcheck over
#            every part, racecheck over the DeltaNet kernels); then the DeltaNet kernel bench
#            (bench_deltanet_cuda) beside the PyTorch chunked references (scripts/bench-deltanet.py:
#            transformers' torch_chunk_gated_delta_rule and flash-linear-attention's Triton kernel)
#   bench M  spindle bench --synthetic M (qwen3.5-9b or qwen3.5-0.8b) at CTXS (default
#            32768,131072,262144): TTFT dense / indexer block-shared (TTFT_RUNS, default
#            dense,indexer_block; add indexer for per query) and the dense pass op by op; then in the
#            same job HF transformers on the same shapes (scripts/bench-anchors.py --sections hf,
#            Qwen3_5ForCausalLM, fla's kernels for the DeltaNet layers) and PyTorch SDPA (FlashAttention-2
#            and cuDNN backends) on the full-attention layers' shape (Hq, Hkv, d_h 256)
#   long M   the same at LONG_CTX (default 1048576) tokens: one timed TTFT per run, warmed up on
#            WARMUP_CTX (default 131072) tokens (the row-chunk GEMMs' plans), with peak memory; then
#            the SDPA anchors and HF transformers at that length (LONG_SECTIONS, default sdpa,hf;
#            HF's failure, e.g. out of memory, is recorded as such)
# Results in $OUT.
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/device-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$ROOT/build-device
wheels() {  # the PyTorch references' packages, once per machine
    [ -d /tmp/site/fla ] && return 0
    ls .whl/*.whl >/dev/null 2>&1 || { echo "device-hybrid: no .whl/ (flash-linear-attention not installed)"; return 0; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla*.whl \
        .whl/flash_linear*.whl .whl/einops*.whl
}
stage=${1:-}
case "$stage" in
check)
    SKIP_SANITIZE=0 SANITIZE_PARTS=${SANITIZE_PARTS:-memcheck deltanet} SKIP_CTEST=1 SKIP_SYNTH=1 SKIP_SMOLLM2=1 \
        OUT=$OUT/check bash scripts/device-check.sh >/dev/null 2>&1
    echo "device-check exit $?"
    grep -E "^FAIL|goldens_cuda:|test_cuda_twins:|SUMMARY|device-check: FAIL" "$OUT/check/device-check.log" | tail -20
    grep -E "qwen3" "$OUT/check/goldens_cuda.txt" | head -30
    "$B/bench_deltanet_cuda" --T "${DN_T:-32768,131072}" --json "$OUT/deltanet-cuda.json" >"$OUT/deltanet-cuda.txt" 2>&1
    echo "bench_deltanet_cuda exit $?"; tail -8 "$OUT/deltanet-cuda.txt"
    wheels
    PYTHONPATH=/tmp/site python3 scripts/bench-deltanet.py --T "${DN_T:-32768,131072}" --out "$OUT/deltanet-torch.json" \
        >"$OUT/deltanet-torch.txt" 2>&1
    echo "bench-deltanet.py exit $?"; tail -8 "$OUT/deltanet-torch.txt"
    ;;
bench)
    m=${2:?model: qwen3.5-9b or qwen3.5-0.8b}
    ctxs=${CTXS:-32768,131072,262144}
    case "$m" in qwen3.5-9b) hq=16 hkv=4 ;; qwen3.5-0.8b) hq=8 hkv=2 ;; *) echo "device-hybrid: unknown model $m" >&2; exit 2 ;; esac
    "$B/spindle" bench --synthetic "$m" --ctx "$ctxs" --k 2048 --bsel 64 --device cuda --no-kernels \
        --ttft "${TTFT_RUNS:-dense,indexer_block}" --json "$OUT/bench-$m.json" >"$OUT/bench-$m.txt" 2>&1
    echo "bench exit $?"; grep -E "^ttft" "$OUT/bench-$m.txt"
    wheels
    PYTHONPATH=/tmp/site timeout "${HF_TIMEOUT_S:-300}" python3 scripts/bench-anchors.py --ctx "$ctxs" --sections hf,sdpa \
        --model-size "$m" --heads $hq --kv-heads $hkv --head-dim 256 --warmup 1 --budget-s "${HF_BUDGET_S:-240}" \
        --json "$OUT/anchors-$m.json" >"$OUT/anchors-$m.txt" 2>"$OUT/anchors-$m.err"
    echo "anchors exit $?"; grep -E "hf_|sdpa" "$OUT/anchors-$m.txt" | head -20
    ;;
long)
    m=${2:?model: qwen3.5-9b or qwen3.5-0.8b}
    ctx=${LONG_CTX:-1048576}
    case "$m" in qwen3.5-9b) hq=16 hkv=4 ;; qwen3.5-0.8b) hq=8 hkv=2 ;; *) echo "device-hybrid: unknown model $m" >&2; exit 2 ;; esac
    "$B/spindle" bench --synthetic "$m" --ctx "$ctx" --k 2048 --bsel 64 --device cuda --no-kernels \
        --ttft "${TTFT_RUNS:-dense,indexer_block}" --ttft-warmup-ctx "${WARMUP_CTX:-131072}" \
        --json "$OUT/long-$m.json" >"$OUT/long-$m.txt" 2>&1
    echo "bench exit $?"; grep -E "^ttft" "$OUT/long-$m.txt"
    wheels
    PYTHONPATH=/tmp/site timeout "${HF_TIMEOUT_S:-300}" python3 scripts/bench-anchors.py --ctx "$ctx" \
        --sections "${LONG_SECTIONS:-sdpa,hf}" --model-size "$m" --heads $hq --kv-heads $hkv --head-dim 256 --warmup 1 \
        --budget-s "${HF_BUDGET_S:-240}" --json "$OUT/long-anchors-$m.json" >"$OUT/long-anchors-$m.txt" \
        2>"$OUT/long-anchors-$m.err"
    echo "anchors exit $?"; grep -E "hf_|sdpa" "$OUT/long-anchors-$m.txt" | head -20; tail -3 "$OUT/long-anchors-$m.err"
    ;;
*)
    echo "usage: scripts/device-hybrid.sh check | bench qwen3.5-9b|qwen3.5-0.8b | long qwen3.5-9b|qwen3.5-0.8b" >&2
    exit 2
    ;;
esac
