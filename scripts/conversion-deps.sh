# conversion-deps.sh: sourced by scripts/get-*.sh. conversion_deps NAME PYTHON installs, when missing, the
# Python packages a GGUF conversion needs (versions known to work), saying so as NAME.
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
