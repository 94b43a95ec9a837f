#!/usr/bin/env bash
# Build corpus/ (train/ and heldout/ plain-text files) from the reStructuredText sources of two
# Debian documentation packages: the Linux kernel documentation (linux-doc-6.1) and the Python 3.11
# documentation (python3.11-doc). No root needed: `apt-get download` + `dpkg-deb -x`.
# Idempotent: does nothing when corpus/ was built from the same .deb files by the same rule.
#
#   scripts/get-corpus.sh                  # build corpus/ (if needed)
#   scripts/get-corpus.sh --force          # rebuild it
#   scripts/get-corpus.sh --any-version    # accept the archive's current versions when the
#                                          # pinned ones are gone from the mirror
#
# Split (by file, deterministic, independent of package version): a file's key is
# "<source>/<path under html/_sources/>", e.g. "linux-doc/admin-guide/README.rst.txt";
# it is held out iff int(first 8 hex digits of sha256(key)), 16) % 10 == 0 (about 10%).
# Training must never read corpus/heldout/. See docs/data.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${ROOT}/.cache/corpus"
OUT="${ROOT}/corpus"
TMP="${ROOT}/corpus.tmp"
SPLIT_RULE="heldout iff int(sha256('<source>/<relpath>')[:8], 16) % 10 == 0"
RULE_VERSION=1

# source name | Debian package | pinned version | sha256 of that .deb | folder inside the package
SOURCES=(
  "linux-doc|linux-doc-6.1|6.1.192-3|f18dfe28dcab7bdbf9185be16b9521f5841277a6a96c374a6683a648d5d5fa4f|usr/share/doc/linux-doc-6.1/html/_sources"
  "python-doc|python3.11-doc|3.11.2-6+deb12u9|5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be|usr/share/doc/python3.11/html/_sources"
)
# Left out: the kernel's translations/ (it_IT, ja_JP, ko_KR, zh_CN, zh_TW: non-English copies of
# English documents, which would leak held-out content into train across languages).
EXCLUDE_RE='^linux-doc/translations/'

FORCE=0
ANY_VERSION=0
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    --any-version) ANY_VERSION=1 ;;
    *) echo "usage: scripts/get-corpus.sh [--force] [--any-version]" >&2; exit 2 ;;
  esac
done

log() { echo "get-corpus: $*" >&2; }
die() { echo "get-corpus: ERROR: $*" >&2; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
for tool in apt-get dpkg-deb sha256sum iconv; do
  command -v "$tool" >/dev/null || die "$tool not found (needs a Debian/Ubuntu system)"
done

# --- Fetch the .deb files (cached; pinned version first) ----------------------------------------
mkdir -p "$CACHE/debs"
# cached_deb PKG SHA: prints the cached .deb of PKG with the pinned sha256, else
# (with --any-version) any cached .deb of PKG, else nothing.
cached_deb() {
  local f found=""
  for f in "$CACHE/debs/${1}_"*.deb; do
    [[ -f "$f" ]] || continue
    if [[ "$(sha "$f")" == "$2" ]]; then echo "$f"; return; fi
    if ((ANY_VERSION)); then found="$f"; fi
  done
  echo "$found"
}
DEBS=()
for s in "${SOURCES[@]}"; do
  IFS='|' read -r name pkg ver want_sha sub <<<"$s"
  deb=$(cached_deb "$pkg" "$want_sha")
  if [[ -z "$deb" ]]; then
    log "downloading ${pkg}=${ver}"
    if ! (cd "$CACHE/debs" && apt-get download -q "${pkg}=${ver}" >&2); then
      ((ANY_VERSION)) || die "cannot download ${pkg}=${ver} (run 'apt-get update' as root, or pass --any-version to take the archive's current version)"
      log "pinned version unavailable; downloading the current ${pkg}"
      (cd "$CACHE/debs" && apt-get download -q "${pkg}" >&2) || die "cannot download ${pkg} (run 'apt-get update' as root)"
    fi
    deb=$(cached_deb "$pkg" "$want_sha")
    [[ -n "$deb" ]] || die "${pkg}: downloaded .deb does not have the pinned sha256 ${want_sha} (pass --any-version to accept it)"
  fi
  DEBS+=("$deb")
done

# --- Up to date? --------------------------------------------------------------------------------
stamp="rule=${RULE_VERSION} script=$(sha "${BASH_SOURCE[0]}")"
for d in "${DEBS[@]}"; do stamp+=" $(basename "$d"):$(sha "$d")"; done
if ((FORCE == 0)) && [[ -f "$OUT/STAMP" && "$(cat "$OUT/STAMP")" == "$stamp" ]] \
   && [[ -f "$OUT/MANIFEST.json" ]]; then
  log "$OUT is up to date; nothing to do (use --force to rebuild)"
  exit 0
fi

# --- Extract and split --------------------------------------------------------------------------
rm -rf "$TMP" "$CACHE/extract.tmp"
mkdir -p "$TMP/train" "$TMP/heldout" "$CACHE/extract.tmp"
: >"$TMP/train.list"
: >"$TMP/heldout.list"
pkg_json=""
for i in "${!SOURCES[@]}"; do
  IFS='|' read -r name pkg ver want_sha sub <<<"${SOURCES[$i]}"
  deb="${DEBS[$i]}"
  real_ver="$(dpkg-deb -f "$deb" Version)"
  real_pkg="$(dpkg-deb -f "$deb" Package)"
  [[ "$real_pkg" == "$pkg" ]] || die "$deb: package is $real_pkg, expected $pkg"
  x="$CACHE/extract.tmp/$name"
  mkdir -p "$x"
  log "extracting $(basename "$deb")"
  dpkg-deb -x "$deb" "$x"
  [[ -d "$x/$sub" ]] || die "$deb: no folder $sub inside"
  n_src=0; n_bad=0
  while IFS= read -r -d '' f; do
    rel="${f#"$x/$sub/"}"
    key="$name/$rel"
    [[ "$key" =~ $EXCLUDE_RE ]] && continue
    [[ -s "$f" ]] || continue                               # empty files carry no text
    if ! iconv -f UTF-8 -t UTF-8 "$f" >/dev/null 2>&1; then   # the tokenizer needs UTF-8
      n_bad=$((n_bad + 1)); log "skipping $key (not UTF-8)"; continue
    fi
    h="$(printf '%s' "$key" | sha256sum | cut -c1-8)"
    if (( 16#$h % 10 == 0 )); then part=heldout; else part=train; fi
    mkdir -p "$TMP/$part/$(dirname "$key")"
    cp "$f" "$TMP/$part/$key"
    echo "$key" >>"$TMP/$part.list"
    n_src=$((n_src + 1))
  done < <(find "$x/$sub" -type f -name '*.txt' -print0 | LC_ALL=C sort -z)
  log "$name: $n_src files ($n_bad skipped as not UTF-8)"
  [[ -n "$pkg_json" ]] && pkg_json+=","
  pkg_json+="
    {\"source\": \"$name\", \"package\": \"$pkg\", \"version\": \"$real_ver\", \"deb\": \"$(basename "$deb")\",
     \"deb_sha256\": \"$(sha "$deb")\", \"folder\": \"/$sub\", \"files\": $n_src}"
done
rm -rf "$CACHE/extract.tmp"

LC_ALL=C sort -o "$TMP/train.list" "$TMP/train.list"
LC_ALL=C sort -o "$TMP/heldout.list" "$TMP/heldout.list"
part_json() {  # files, bytes and sha256 of the sorted file list, for one part
  local p="$1" nf nb
  nf=$(wc -l <"$TMP/$p.list")
  nb=$(cd "$TMP/$p" && tr '\n' '\0' <"$TMP/$p.list" | xargs -0 cat | wc -c)
  printf '{"files": %d, "bytes": %d, "list_sha256": "%s"}' "$nf" "$nb" "$(sha "$TMP/$p.list")"
}
train_json="$(part_json train)"
heldout_json="$(part_json heldout)"
n_held=$(wc -l <"$TMP/heldout.list")
((n_held > 0)) || die "no held-out files: the split rule selected nothing"

cat >"$TMP/MANIFEST.json" <<EOF
{
  "format": "spindle-corpus",
  "rule_version": ${RULE_VERSION},
  "files": "reStructuredText sources (html/_sources/**/*.txt) of the packages below, UTF-8, copied unchanged",
  "excluded": "linux-doc/translations/ (non-English copies of English documents); empty files; non-UTF-8 files",
  "split_key": "<source>/<path under the package's html/_sources/>",
  "split_rule": "${SPLIT_RULE}",
  "packages": [${pkg_json}
  ],
  "train": ${train_json},
  "heldout": ${heldout_json},
  "note": "training never reads heldout/"
}
EOF
echo "$stamp" >"$TMP/STAMP"

rm -rf "$OUT"
mv "$TMP" "$OUT"
log "done: $OUT (train $train_json; heldout $heldout_json)"
