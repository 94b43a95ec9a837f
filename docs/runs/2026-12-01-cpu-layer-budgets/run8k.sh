#!/usr/bin/env bash
# 8K: the 4K-calibrated weights applied at 8K (uniform rows: the hybrid section's S4/S5 on the same text).
set -u
cd /work/wt/i18b
B=/tmp/i18b_meas/spindle O=/tmp/i18b_meas
while ! grep -q '^done' $O/times.txt 2>/dev/null; do sleep 5; done
for b in 64 1; do
  t0=$(date +%s); $B eval --model models/smollm2 --text corpus/heldout --ctx 8192 --n-seq 1 --k 256 --bsel $b --k-layers $O/w4k_k256_b${b}.json --threads 2 --json $O/cal_8k_k256_b${b}.json >$O/cal_8k_k256_b${b}.log 2>&1
  echo "cal_8k_k256_b${b} $(( $(date +%s) - t0 )) s" >>$O/times.txt
done
echo done8 >>$O/times.txt
# Gemma 3 270M (3 global layers) at 4K: calibrate on python-doc at b_sel 64, evaluate k 256 b_sel 64.
G=models/gemma3-270m
t0=$(date +%s); $B eval --model $G --text corpus/heldout/python-doc --ctx 4096 --n-seq 1 --k 128,256,512,1024 --bsel 64 --threads 2 --json $O/gcalib_4k.json >$O/gcalib_4k.log 2>&1; echo "gcalib_4k $(( $(date +%s) - t0 )) s" >>$O/times.txt
python3 scripts/calibrate-k-layers.py --eval $O/gcalib_4k.json --k 256 --bsel 64 --out $O/gw4k_k256_b64.json 2>>$O/calibrate.log
t0=$(date +%s); $B eval --model $G --text corpus/heldout --ctx 4096 --n-seq 1 --k 256 --bsel 64 --k-layers $O/gw4k_k256_b64.json --threads 2 --json $O/gcal_4k_k256_b64.json >$O/gcal_4k.log 2>&1; echo "gcal_4k_k256_b64 $(( $(date +%s) - t0 )) s" >>$O/times.txt
echo doneg >>$O/times.txt
