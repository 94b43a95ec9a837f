#!/usr/bin/env bash
set -u
cd /work/wt/i18b
B=/tmp/i18b_meas/spindle O=/tmp/i18b_meas
while ! grep -q '^doneg' $O/times.txt 2>/dev/null; do sleep 5; done
for b in 64 1; do
  t0=$(date +%s); $B eval --model models/smollm2 --text corpus/heldout --ctx 4096 --n-seq 1 --k 256 --bsel $b --k-layers $O/w4k_k256_b${b}_logk.json --threads 2 --json $O/cal_4k_k256_b${b}_logk.json >$O/cal_4k_k256_b${b}_logk.log 2>&1
  echo "cal_4k_k256_b${b}_logk $(( $(date +%s) - t0 )) s" >>$O/times.txt
done
echo donel >>$O/times.txt
