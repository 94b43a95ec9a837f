#!/usr/bin/env bash
# device-frontier.sh: scripts/frontier.sh ON the GPU machine (the quality/latency frontier),
# after a build (build-device/, from scripts/device-check.sh) and once the SmolLM2
# GGUF parts have arrived (.dev/smol.part0..2, as for scripts/device-smollm2.sh,
# which this calls with MODEL_ONLY=1 to join, check and convert them). The trained
# indexer comes with the tree (results/indexer/idx_long, 17 MiB), the held-out text as .dev/text/heldout.txt.
# Everything is written under $OUT/frontier (frontier.md/json, section.md, the
# plot where matplotlib exists, every eval/bench JSON and log, manifest.tsv); the
# repository's docs are left alone (--no-doc): the FRONTIER section of
# docs/results.md is then replaced here with scripts/replace-section.py.
# A rerun continues where a cut-short run stopped (frontier.sh reuses finished
# steps while /root/spindle-frontier survives, i.e. on a warm machine).
# Extra arguments go to scripts/frontier.sh (e.g. --lengths 1024,4096).
set -uo pipefail
ROOT=$(pwd)
OUT=${OUT:-$ROOT/device-out}
B=${B:-$ROOT/build-device}
W=/root/spindle-frontier
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
MODEL_ONLY=1 B=$B OUT=$OUT bash scripts/device-smollm2.sh || exit 1
mkdir -p "$W" "$OUT/frontier"
bash scripts/frontier.sh --bin "$B/spindle" --model /root/spindle-smollm2/model --text .dev/text/heldout.txt \
    --indexer "${INDEXER:-results/indexer/idx_long}" --out "$W" --no-doc "$@"
rc=$?
cp -r "$W"/. "$OUT/frontier/"
echo "device-frontier: frontier.sh exit $rc"
exit $rc
