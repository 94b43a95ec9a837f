#!/usr/bin/env bash
# SmolLM2 on the GPU machine: join the GGUF parts, convert, then the transformers client in bf16 and fp32
# against spindle (issue 21). Run from /root/src.
set -uo pipefail
export LD_LIBRARY_PATH=/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu:/tmp/spindle-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread
B=/root/src/build-device/spindle
R=/root/res/smol; mkdir -p $R
W=/root/smol; mkdir -p $W
X=/root/i21x
for i in $(seq 400); do grep -q "=== twin test" /root/res/check/device-check.log 2>/dev/null && break; sleep 2; done
ls -la $B
if [ ! -f $W/model/config.json ]; then
  cat /root/sp/smol.part0 /root/sp/smol.part1 /root/sp/smol.part2 > $W/smol.gguf
  echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  $W/smol.gguf" | sha256sum -c - || exit 1
  python3 -m pip install -q --no-index --no-deps /root/c1/gguf-*.whl 2>&1 | tail -2
  python3 scripts/gguf_to_hf.py $W/smol.gguf $W/model > $W/convert.log 2>&1 || { tail $W/convert.log; exit 1; }
fi
(cd $W/model && sha256sum model.safetensors config.json tokenizer.json) | tee $R/model_sha256.txt
run() { # NAME INDEXER REF BSEL DTYPE SPDEV
  echo "=== $1 $(date -u +%H:%M:%S)"
  timeout 240 python3 scripts/hf-sparse-prefill.py --model $W/model --indexer $X/$2 --reference-indexer $X/$3 \
    --ids $X/held.ids --ctx 512 --k 64 --bsel $4 --device cuda --dtype $5 --spindle $B --spindle-device $6 \
    --json $R/$1.json > $R/$1.txt 2>&1
  echo "exit $?"; tail -12 $R/$1.txt
}
for bs in 1 16; do
  run C-qsa-$bs-bf16 C-qsa C-spindle $bs bf16 cuda
  run D-spindle-$bs-bf16 D-spindle D-spindle $bs bf16 cuda
  run E-dsa-$bs-bf16 E-dsa E-spindle $bs bf16 cpu
done
for bs in 1 16; do
  run C-qsa-$bs-fp32 C-qsa C-spindle $bs fp32 cuda
done
run E-dsa-16-fp32 E-dsa E-spindle 16 fp32 cpu
echo SMOL DONE
