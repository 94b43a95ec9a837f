#!/usr/bin/env bash
# setup.sh: installs what spindle needs to build and test on a Debian/Ubuntu
# machine: Debian packages, and the Python packages the scripts and tests use.
# Safe to run again: installs only what is missing.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libhdf5-dev libcjson-dev libopenblas-dev libpcre2-dev
      libutf8proc-dev libssl-dev python3 python3-pip)
# --fuzz: also clang with its sanitizer and libFuzzer runtimes (scripts/fuzz.sh).
[ "${1:-}" = --fuzz ] && pkgs+=(clang libclang-rt-dev)
# --mpi: Open MPI, for data-parallel training (cmake -DSPINDLE_CUDA=ON -DSPINDLE_NCCL=ON; NCCL comes
# with the CUDA toolkit or NVIDIA's libnccl-dev).
[ "${1:-}" = --mpi ] && pkgs+=(libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Python packages the scripts and tests use (the export check reads
# safetensors and HDF5 the way another stack would).
py_missing=()
for m in numpy:numpy==2.4.6 safetensors:safetensors==0.8.0 h5py:h5py; do
  python3 -c "import ${m%%:*}" 2>/dev/null || py_missing+=("${m#*:}")
done
if ((${#py_missing[@]})); then
  echo "setup: pip installing ${py_missing[*]}"
  python3 -m pip install -q "${py_missing[@]}"
fi
echo "setup: done"
