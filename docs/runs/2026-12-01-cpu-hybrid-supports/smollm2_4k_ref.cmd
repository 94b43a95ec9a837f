build-meas/spindle eval --model models/smollm2 --text corpus/heldout --ctx 4096 --n-seq 1 --k 256,1024 --bsel 1 --threads 2 --json /tmp/hyb/smollm2_4k_ref.json
