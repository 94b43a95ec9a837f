#!/usr/bin/env bash
# device-prepare.sh: run HERE (the Debian 12 development machine), from the repo
# root, before copying the tree to the GPU machine. Downloads into .deb/ (git-ignored) the .debs that
# scripts/device-check.sh unpacks on the GPU machine, which runs Ubuntu 24.04
# with CUDA, CMake and gcc but without the C libraries spindle links (cJSON,
# PCRE2, utf8proc, OpenSSL headers, OpenBLAS, HDF5) and without network access.
#
# These are Debian 12 (bookworm) amd64 packages, fetched with this machine's own
# apt lists. They are plain C libraries; Ubuntu 24.04's glibc (2.39) is newer
# than bookworm's (2.36), so bookworm binaries run there. device-check.sh
# unpacks them with `dpkg -x` into a private prefix (never into /) and uses the
# system's copy of every shared library the device already has, so only the
# missing ones come from bookworm.
#
# Usage: scripts/device-prepare.sh             (then copy the tree with .deb/ to the GPU machine)
#        scripts/device-prepare.sh --smollm2   also what scripts/device-smollm2.sh
#   needs, all git-ignored: the SmolLM2 GGUF (from scripts/get-smollm2.sh's
#   cache) split in three parts, for transfers limited to 64 MiB (with the ~8 MiB
#   working tree): .dev/smol.part0 (27 MiB, sent with the 27 MiB .deb),
#   .dev/smol.part1 (53 MiB, alone) and .dev/smol.part2 (14 MiB, with .whl,
#   .dev/text and, for scripts/device-frontier.sh, the 17 MiB indexer
#   results/indexer/idx_long); each transfer keeps ~2.5 MiB to spare;
#   the gguf and h5py wheels in .whl/; text slices .dev/text/{train,heldout}.txt
#   of corpus/ (scripts/get-corpus.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --smollm2 ]; then
    gguf=.cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -f "$gguf" ] || scripts/get-smollm2.sh
    [ -d corpus/train ] || scripts/get-corpus.sh
    mkdir -p .dev/text .whl
    # dd, not tail | head: head closing the pipe early fails the script under pipefail.
    dd if="$gguf" of=.dev/smol.part0 bs=1000000 count=28 status=none
    dd if="$gguf" of=.dev/smol.part1 bs=1000000 skip=28 count=56 status=none
    dd if="$gguf" of=.dev/smol.part2 bs=1000000 skip=84 status=none
    python3 -m pip download -q --no-deps gguf==0.19.0 -d .whl
    python3 -m pip download -q --no-deps h5py==3.14.0 --python-version 3.12 --only-binary=:all: \
        --platform manylinux_2_17_x86_64 -d .whl
    find corpus/train/linux-doc -type f | sort | head -60 | xargs cat >.dev/text/train.txt
    find corpus/heldout -type f | sort | head -40 | xargs cat >.dev/text/heldout.txt
    ls -la .dev .dev/text .whl
fi
# -dev packages: headers, .pc files, link-time .so symlinks.
DEV="libcjson-dev libpcre2-dev libutf8proc-dev libssl-dev libopenblas-dev libopenblas-pthread-dev
     libhdf5-dev pkgconf pkgconf-bin libpkgconf3"
# Runtime libraries: the shared objects those link against and their whole
# NEEDED closure (read with ldd on this machine), except glibc, libgcc_s and
# zlib, which every Ubuntu 24.04 system has in a newer version.
RUNTIME="libcjson1 libpcre2-8-0 libutf8proc2 libssl3 libopenblas0-pthread libgfortran5 libquadmath0
     libhdf5-103-1 libaec0 libsz2 libcurl4 libbrotli1 libffi8 libgmp10 libgnutls30 libgssapi-krb5-2
     libhogweed6 libidn2-0 libk5crypto3 libkrb5-3 libkrb5support0 libldap-2.5-0 libnettle8
     libnghttp2-14 libp11-kit0 libpsl5 librtmp1 libsasl2-2 libssh2-1 libtasn1-6 libunistring2
     libzstd1 libcom-err2 libkeyutils1"
mkdir -p .deb
(cd .deb && apt-get download $DEV $RUNTIME)
# libhdf5-dev carries static archives and tools we never use: keep the .deb as
# is (dpkg -x needs it whole) but report the folder's size (a transfer limited to
# 64 MiB must hold it with the working tree).
du -sh .deb
n=$(ls .deb/*.deb | wc -l)
size=$(du -sm .deb | cut -f1)
echo "device-prepare: $n packages, ${size} MiB in .deb/"
if [ "$size" -ge 60 ]; then echo "device-prepare: .deb/ is too large to carry (limit 64 MiB)" >&2; exit 1; fi
