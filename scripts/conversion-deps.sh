# conversion-deps.sh: sourced by scripts/get-*.sh. conversion_deps NAME PYTHON installs, when missing, the
# Python packages a GGUF conversion needs (versions known to work), saying so as NAME; pinned_wheel fetches
# one pinned wheel into a cache.
conversion_deps() {
  local name=$1 py=$2 need=()
  "$py" -c "import numpy" 2>/dev/null || need+=("numpy==2.4.6")
  "$py" -c "import gguf" 2>/dev/null || need+=("gguf==0.19.0")
  "$py" -c "import safetensors" 2>/dev/null || need+=("safetensors==0.8.0")
  "$py" -c "import tokenizers" 2>/dev/null || need+=("tokenizers==0.23.3")
  if ((${#need[@]})); then
    echo "$name: installing ${need[*]}"
    "$py" -m pip install -q "${need[@]}"
  fi
}

# pinned_wheel NAME PYTHON CACHE PKG VERSION FILE SHA256 [SIZE]: CACHE/FILE, the wheel of PKG==VERSION,
# downloaded (pip download --no-deps) unless already there with that sha256; exits naming the file
# when pip gives none or its sha256 differs. SIZE (e.g. "~50 MB") goes into the download message.
pinned_wheel() {
  local name=$1 py=$2 cache=$3 pkg=$4 version=$5 file=$6 want=$7 size=${8:-} got
  mkdir -p "$cache"
  if [[ ! -f "$cache/$file" ]] || [[ "$(sha256sum "$cache/$file" | cut -d' ' -f1)" != "$want" ]]; then
    rm -f "$cache/$file"
    echo "$name: downloading $pkg==$version${size:+ ($size)}"
    "$py" -m pip download -q --no-deps "$pkg==$version" -d "$cache"
  fi
  [[ -f "$cache/$file" ]] || { echo "$name: ERROR: pip download did not produce $cache/$file" >&2; exit 1; }
  got=$(sha256sum "$cache/$file" | cut -d' ' -f1)
  [[ "$got" == "$want" ]] || { echo "$name: ERROR: $cache/$file: sha256 $got, expected $want" >&2; exit 1; }
}
