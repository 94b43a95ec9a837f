#!/usr/bin/env bash
# bench-cpu.sh [LENGTHS...]: SmolLM2-135M CPU forward speed at each length
# (default 1024 4096 8192) on real text, with the time split between GEMMs,
# attention, the LM head (+ writing the .npy) and the rest. Prints a Markdown
# table (docs/performance.md holds the recorded one).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/build/spindle" model="$root/models/smollm2"
[ -x "$bin" ] || { echo "bench-cpu: build first (scripts/build.sh)" >&2; exit 1; }
[ -d "$model" ] || { echo "bench-cpu: run scripts/get-smollm2.sh first" >&2; exit 1; }
lengths=("$@"); ((${#lengths[@]})) || lengths=(1024 4096 8192)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
# Real text: the licence texts every Debian machine ships, concatenated.
cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/LGPL-2.1 \
    /usr/share/common-licenses/GPL-2 /usr/share/common-licenses/MPL-2.0 >"$work/text.txt"
"$bin" tokenize --model "$model" --text "$work/text.txt" --out "$work/all.ids" 2>/dev/null
echo "| tokens | total s | tokens/s | backbone GEMMs s | attention s | LM head + .npy write s | other s | GEMM share | attention share |"
echo "|---|---|---|---|---|---|---|---|---|"
for n in "${lengths[@]}"; do
  tr "," "\n" <"$work/all.ids" | awk -v n="$n" "NR <= n" >"$work/ids.txt"
  got=$(wc -l <"$work/ids.txt")
  [ "$got" = "$n" ] || { echo "bench-cpu: only $got tokens of text" >&2; exit 1; }
  "$bin" logits --model "$model" --ids "$work/ids.txt" --out "$work/out.npy" --profile 2>"$work/log"
  rm -f "$work/out.npy"
  awk -v n="$n" '
    /tokens ->/ { for (i = 1; i <= NF; i++) if ($i == "in") total = $(i + 1) }
    /^profile:/ { gemm = $3; att = $6; head = $9; other = $12 }
    END { printf "| %d | %.2f | %.1f | %.2f | %.2f | %.2f | %.2f | %.0f%% | %.0f%% |\n",
          n, total, n / total, gemm, att, head, other, 100 * gemm / total, 100 * att / total }' "$work/log"
done
