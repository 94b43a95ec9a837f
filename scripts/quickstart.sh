#!/usr/bin/env bash
# quickstart.sh: the main job, as far as it exists today, from a fresh machine:
# install dependencies, build, fetch SmolLM2-135M (the default real model),
# describe it, tokenize real text, run the verified CPU forward pass, and
# measure the attention-mass oracle's gap on held-out text.
# Results land in results/quickstart/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh
scripts/build.sh build
scripts/get-smollm2.sh
out=results/quickstart
mkdir -p "$out"
build/spindle info --model models/smollm2 | tee "$out/info.txt"
head -c 6000 /usr/share/common-licenses/GPL-3 >"$out/text.txt"
build/spindle tokenize --model models/smollm2 --text "$out/text.txt" --out "$out/ids.txt"
build/spindle logits --model models/smollm2 --ids "$out/ids.txt" --out "$out/logits.npy" --profile
echo "quickstart: logits [T, 49152] float32 in $out/logits.npy"
# The oracle gap on real held-out text: dense vs the attention-mass oracle.
scripts/get-corpus.sh
build/spindle eval --model models/smollm2 --text corpus/heldout --ctx 1024 --k 64,256 --bsel 1,64 --n-seq 2 \
  --json "$out/eval.json"
cat "$out/eval.md"
