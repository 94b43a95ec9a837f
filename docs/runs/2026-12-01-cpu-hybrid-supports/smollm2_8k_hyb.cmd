build-meas/spindle eval --model models/smollm2 --text corpus/heldout --ctx 8192 --n-seq 1 --k 256,1024 --bsel 64 --recent 0,256 --sinks 0,4 --threads 2 --json /tmp/hyb/smollm2_8k_hyb.json
