#!/usr/bin/env bash
set -u
cd /work/wt/i18b
B=/tmp/i18b_meas/spindle O=/tmp/i18b_meas
for b in 64 1; do
  t0=$(date +%s); $B eval --model models/smollm2 --text corpus/heldout --ctx 8192 --n-seq 1 --k 256 --bsel $b --k-layers $O/w4k_k256_b${b}_logk.json --threads 2 --json $O/cal_8k_k256_b${b}_logk.json >$O/cal_8k_k256_b${b}_logk.log 2>&1
  echo "cal_8k_k256_b${b}_logk $(( $(date +%s) - t0 )) s" >>$O/times.txt
done
echo done8l >>$O/times.txt
