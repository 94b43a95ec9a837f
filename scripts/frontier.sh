#!/usr/bin/env bash
# frontier.sh: the quality/latency frontier (docs/design.md) in one command, on a GPU machine:
#   1. quality: SmolLM2 (real weights) dense vs attention-mass oracle vs a trained indexer at every
#      (length, k, b_sel) of the grid, `spindle eval --precision fp32` on held-out text (--positions scored
#      positions per length, 8192 by default: 8192/length sequences), and again `--precision bf16` (the deployed setting,
#      for the realization gap);
#   2. latency: TTFT of the synthetic Qwen3-8B at the same (length, k, b_sel), `spindle bench --no-kernels`
#      (dense, indexer per query, indexer block-shared, oracle per query);
#   3. scripts/frontier-table.py: one table (ΔNLL ± 95% interval, logit KL, top-1 agreement, mass recall,
#      sparsity, TTFT and speedup vs dense), the evidence decomposition (oracle / indexer / realization gap),
#      a plot (ΔNLL vs TTFT speedup) and the FRONTIER section of docs/results.md, every number next to the
#      command that produced it.
# Intermediate files (eval/bench JSON, logs, manifest.tsv, frontier.md/json) go to --out. A rerun reuses
# every eval/bench whose command line is unchanged (so a run cut short continues); --fresh redoes them.
# Paths are relative to the repository root. Progress on stderr. On a GPU machine without models/ and
# corpus/ the checkpoint comes as in scripts/device-smollm2.sh: pass --bin, --model and --text there; where
# commands are cut at a time limit, rerun the same line until it finishes.
# Smoke test without a GPU: scripts/frontier.sh --quick --device cpu (bench skipped, TTFT "not measured").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
invocation="scripts/frontier.sh${*:+ $*}"

usage() {
    cat <<'EOF'
usage: scripts/frontier.sh [options]
  --model DIR         SmolLM2 checkpoint folder (default models/smollm2)
  --indexer DIR       exported indexer, all layers (default results/indexer/idx_long)
  --text PATH         held-out text, file or folder (default corpus/heldout)
  --lengths LIST      context lengths (default 1024,2048,4096,8192)
  --k LIST            keys per support (default 64,256,1024)
  --bsel LIST         queries per shared support, 1 = per query (default 1,64)
  --n-seq N           sequences per length (default: --positions / length, at least 1)
  --positions P       scored positions per length when --n-seq is not given (default 8192)
  --quick             lengths 1024, k 64,256, b_sel 1,64, 1 sequence
  --device cuda|cpu   cuda (default) or cpu: a smoke test; no bf16 eval, no bench, TTFT "not measured"
  --synthetic NAME    the model bench times (default qwen3-8b)
  --bench-timeout S   wall-clock limit of each spindle bench call (default 300)
  --bin PATH          the spindle binary (default build/spindle; on a GPU e.g. build-cuda/spindle)
  --out DIR           intermediate files (default results/frontier)
  --doc FILE          the document whose FRONTIER section is replaced (default docs/results.md)
  --plot FILE         the plot (default docs/img/frontier.png)
  --no-doc            leave --doc and --plot alone: section and plot go to --out only
  --fresh             rerun every eval and bench even when its output is there
EOF
}

model=models/smollm2 indexer=results/indexer/idx_long text=corpus/heldout
lengths=1024,2048,4096,8192 ks=64,256,1024 bsels=1,64 nseq="" positions=8192 quick=0 device=cuda
synth=qwen3-8b bench_timeout=300 bin=build/spindle out=results/frontier
doc=docs/results.md plot=docs/img/frontier.png nodoc=0 fresh=0
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --quick) quick=1; shift; continue ;;
        --no-doc) nodoc=1; shift; continue ;;
        --fresh) fresh=1; shift; continue ;;
    esac
    [ $# -ge 2 ] || { echo "frontier: $1 needs a value" >&2; usage >&2; exit 2; }
    case "$1" in
        --model) model=$2 ;; --indexer) indexer=$2 ;; --text) text=$2 ;;
        --lengths) lengths=$2 ;; --k) ks=$2 ;; --bsel) bsels=$2 ;; --n-seq) nseq=$2 ;; --positions) positions=$2 ;;
        --device) device=$2 ;; --synthetic) synth=$2 ;; --bench-timeout) bench_timeout=$2 ;;
        --bin) bin=$2 ;; --out) out=$2 ;; --doc) doc=$2 ;; --plot) plot=$2 ;;
        *) echo "frontier: unknown option $1" >&2; usage >&2; exit 2 ;;
    esac
    shift 2
done
if [ $quick = 1 ]; then lengths=1024 ks=64,256 bsels=1,64 nseq=${nseq:-1}; fi

fail() { echo "frontier: $*" >&2; exit 1; }
islist() { [[ $1 =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]]; }
for v in "lengths:$lengths" "k:$ks" "bsel:$bsels"; do
    islist "${v#*:}" || { echo "frontier: --${v%%:*} wants positive integers separated by commas, not '${v#*:}'" >&2; exit 2; }
done
[ -z "$nseq" ] || [[ $nseq =~ ^[1-9][0-9]*$ ]] || { echo "frontier: --n-seq wants a positive integer" >&2; exit 2; }
[[ $positions =~ ^[1-9][0-9]*$ ]] || { echo "frontier: --positions wants a positive integer" >&2; exit 2; }
[[ $bench_timeout =~ ^[1-9][0-9]*$ ]] || { echo "frontier: --bench-timeout wants seconds" >&2; exit 2; }
case "$device" in cpu|cuda) ;; *) echo "frontier: --device is cpu or cuda, not '$device'" >&2; exit 2 ;; esac

# What must be there before any work starts.
[ -x "$bin" ] || fail "spindle binary $bin not found (build it: scripts/build.sh build; for the GPU:" \
    "scripts/build.sh build-cuda -DSPINDLE_CUDA=ON and --bin build-cuda/spindle)"
if [ "$device" = cuda ] && [[ $("$bin" bench --help 2>&1 || true) == *"built without CUDA"* ]]; then
    fail "$bin was built without CUDA; pass --bin with a -DSPINDLE_CUDA=ON build (e.g. build-cuda/spindle), or --device cpu"
fi
[ -f "$model/config.json" ] || fail "model $model missing (no $model/config.json; scripts/get-smollm2.sh makes models/smollm2)"
[ -f "$indexer/config.json" ] && [ -f "$indexer/model.safetensors" ] ||
    fail "indexer $indexer missing (needs config.json and model.safetensors from spindle export; scripts/indexer-report.sh" \
        "and the idx_long commands in docs/results.md make results/indexer/idx_long)"
[ -e "$text" ] || fail "held-out text $text missing (scripts/get-corpus.sh makes corpus/heldout)"
python3 -c 'import matplotlib' 2>/dev/null ||
    echo "frontier: python3 has no matplotlib: the table is made, the plot is not (rerun scripts/frontier-table.py elsewhere)" >&2
mkdir -p "$out"

start=$(date +%s)
say() { echo "frontier: $* ($(( $(date +%s) - start )) s)" >&2; }
manifest=$out/manifest.tsv
: >"$manifest.tmp"
bench_failed=0

. "$root/scripts/shell-line.sh"  # shell_line

# step KIND LENGTH K BSEL TAG JSON TIMEOUT -- COMMAND...: runs COMMAND (stdout+stderr to JSON's .log)
# unless JSON is there from the same command line; appends a line to the manifest either way.
step() {
    local kind=$1 len=$2 k=$3 s=$4 tag=$5 json=$6 limit=$7
    shift 8
    local cmd status=ok secs=0 rc=0 t0
    cmd=$(shell_line "$@")
    if [ $fresh = 0 ] && [ -s "$json" ] && [ "$(cat "$json.cmd" 2>/dev/null)" = "$cmd" ]; then
        say "reusing $json"
        secs=$(cat "$json.secs" 2>/dev/null || echo 0)
    else
        rm -f "$json" "$json.cmd" "$json.secs"
        say "$kind $tag: $cmd"
        t0=$(date +%s)
        if [ "$limit" -gt 0 ]; then timeout "$limit" "$@" >"$json.log" 2>&1 || rc=$?
        else "$@" >"$json.log" 2>&1 || rc=$?; fi
        secs=$(( $(date +%s) - t0 ))
        if [ $rc = 0 ] && [ -s "$json" ]; then
            printf '%s\n' "$cmd" >"$json.cmd"
            echo "$secs" >"$json.secs"
        else
            status="failed: exit $rc"
            [ $rc != 124 ] || status="$status (over --bench-timeout $limit s)"
            status="$status; log $json.log"
            tail -n 15 "$json.log" >&2 || true
        fi
        if [ $rc = 0 ]; then say "$kind $tag done in $secs s"; else say "$kind $tag FAILED (exit $rc) after $secs s"; fi
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$len" "$k" "$s" "$tag" "$json" "$status" "$secs" "$cmd" \
        >>"$manifest.tmp"
    [ "$status" = ok ]
}

IFS=, read -ra L_ARR <<<"$lengths"
IFS=, read -ra K_ARR <<<"$ks"
IFS=, read -ra S_ARR <<<"$bsels"
block_bsels=()
for s in "${S_ARR[@]}"; do [ "$s" -gt 1 ] && block_bsels+=("$s"); done
[ ${#block_bsels[@]} -gt 0 ] || block_bsels=(1)  # bench still needs one --bsel; only ttft_indexer is read then
kdash=${ks//,/-} sdash=${bsels//,/-}

# 1. Quality: one eval per length and precision (dense + oracle + indexer at every k, b_sel).
precs=(fp32); [ "$device" = cuda ] && precs+=(bf16)
for L in "${L_ARR[@]}"; do
    n=${nseq:-$(( positions / L > 0 ? positions / L : 1 ))}
    # spindle eval refuses k >= ctx (every key kept: not a sparse row); those cells stay empty.
    lks=$(for k in "${K_ARR[@]}"; do if [ "$k" -lt "$L" ]; then printf '%s,' "$k"; fi; done); lks=${lks%,}
    [ -n "$lks" ] || { say "ctx $L: every --k is >= $L, no eval"; continue; }
    for p in "${precs[@]}"; do
        json=$out/eval_${device}_${p}_ctx${L}_n${n}_k${kdash}_b${sdash}.json
        extra=(--device "$device"); [ "$device" = cuda ] && extra+=(--precision "$p")
        step eval "$L" "$ks" "$bsels" "$p" "$json" 0 -- \
            "$bin" eval --model "$model" --text "$text" --ctx "$L" --n-seq "$n" --k "$lks" --bsel "$bsels" \
            --indexer "$indexer" "${extra[@]}" --json "$json" ||
            { mv "$manifest.tmp" "$manifest"; fail "spindle eval failed at ctx $L ($p); see $json.log"; }
    done
done

# 2. Latency: TTFT of the synthetic 8B model, one bench call per (length, k, block b_sel).
if [ "$device" = cuda ]; then
    for L in "${L_ARR[@]}"; do
        for k in "${K_ARR[@]}"; do
            for s in "${block_bsels[@]}"; do
                json=$out/bench_${synth}_ctx${L}_k${k}_b${s}.json
                step bench "$L" "$k" "$s" "$synth" "$json" "$bench_timeout" -- \
                    "$bin" bench --synthetic "$synth" --no-kernels --ctx "$L" --k "$k" --bsel "$s" --device cuda \
                    --json "$json" || bench_failed=1
            done
        done
    done
else
    say "no GPU (--device cpu): bf16 eval and TTFT bench skipped"
fi
mv "$manifest.tmp" "$manifest"

# 3. Table, decomposition, plot, section.
total=$(( $(date +%s) - start ))
sec_out=$out/section.md plot_out=$plot
[ $nodoc = 1 ] && plot_out=$out/frontier.png
args=(--manifest "$manifest" --out "$out" --plot "$plot_out" --section "$sec_out" --doc "$doc"
      --device "$device" --model "$model" --indexer "$indexer" --text "$text" --synthetic "$synth"
      --lengths "$lengths" --k "$ks" --bsel "$bsels" --seconds "$total" --invocation "$invocation")
[ $quick = 1 ] && args+=(--quick)
mkdir -p "$(dirname "$plot_out")"
python3 scripts/frontier-table.py "${args[@]}" || fail "scripts/frontier-table.py failed"
if [ $nodoc = 0 ]; then
    python3 scripts/replace-section.py FRONTIER "$sec_out" "$doc"
    say "done: $out/frontier.md, $out/frontier.json, $plot_out, section FRONTIER of $doc"
else
    say "done: $out/frontier.md, $out/frontier.json, $plot_out, $sec_out ($doc left alone)"
fi
[ $bench_failed = 0 ] || fail "some spindle bench calls failed (their TTFT says not measured; logs in $out)"
