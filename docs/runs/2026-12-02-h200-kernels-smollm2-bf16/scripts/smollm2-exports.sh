set -e
S=build/spindle M=models/smollm2 W=.dev/i21s
cat corpus/train/linux-doc/RCU/checklist.rst.txt corpus/train/linux-doc/RCU/Design/Requirements/Requirements.rst.txt \
    corpus/train/linux-doc/RCU/Design/Memory-Ordering/Tree-RCU-Memory-Ordering.rst.txt >$W/text.txt
$S tokenize --model $M --text $W/text.txt --out $W/ids.txt
$S tokenize --model $M --text corpus/heldout/linux-doc/PCI/pci.rst.txt --out $W/held.ids
$S teacher --model $M --ids $W/ids.txt --ctx 512 --max-seq 8 --out $W/shards
T="--model $M --shards $W/shards --steps 40 --d-index 64 --d-rope 32 --lr 3e-3 --warmup 5 --threads 2 --recall-k 32"
$S train $T --out $W/runD
$S train $T --out $W/runC --key-norm rms
$S train $T --out $W/runE --variant expanded --heads 4
$S export --run $W/runD --out $W/D-spindle --k 64
$S export --run $W/runC --out $W/C-spindle --k 64; $S export --run $W/runC --out $W/C-qsa --k 64 --layout qsa
$S export --run $W/runE --out $W/E-spindle --k 64; $S export --run $W/runE --out $W/E-dsa --k 64 --layout dsa
rm -rf $W/shards
echo DONE > $W/DONE
