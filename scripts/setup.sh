#!/usr/bin/env bash
# setup.sh: installs what spindle needs to build and test on a Debian/Ubuntu
# machine (Debian packages only; Python packages for the model conversion are
# installed by scripts/get-smollm2.sh). Safe to run again: installs only what
# is missing.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libhdf5-dev libcjson-dev libopenblas-dev libpcre2-dev
      libutf8proc-dev libssl-dev python3 python3-pip)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
echo "setup: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
