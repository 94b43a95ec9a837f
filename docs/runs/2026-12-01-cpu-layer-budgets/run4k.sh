#!/usr/bin/env bash
# Per-layer budgets at 4K on SmolLM2-135M: calibrate on python-doc, evaluate on corpus/heldout (linux-doc first).
set -u
cd /work/wt/i18b
B=/tmp/i18b_meas/spindle O=/tmp/i18b_meas
while pgrep -f "calib_4k.json" >/dev/null; do sleep 5; done
for k in 256 1024; do for b in 1 64; do
  python3 scripts/calibrate-k-layers.py --eval $O/calib_4k.json --k $k --bsel $b --out $O/w4k_k${k}_b${b}.json 2>>$O/calibrate.log
done; done
t0=$(date +%s); $B eval --model models/smollm2 --text corpus/heldout --ctx 4096 --n-seq 1 --k 256,1024 --bsel 1,64 --threads 2 --json $O/uni_4k.json >$O/uni_4k.log 2>&1; echo "uni_4k $(( $(date +%s) - t0 )) s" >>$O/times.txt
for k in 256 1024; do for b in 64 1; do
  t0=$(date +%s); $B eval --model models/smollm2 --text corpus/heldout --ctx 4096 --n-seq 1 --k $k --bsel $b --k-layers $O/w4k_k${k}_b${b}.json --threads 2 --json $O/cal_4k_k${k}_b${b}.json >$O/cal_4k_k${k}_b${b}.log 2>&1
  echo "cal_4k_k${k}_b${b} $(( $(date +%s) - t0 )) s" >>$O/times.txt
done; done
echo done >>$O/times.txt
