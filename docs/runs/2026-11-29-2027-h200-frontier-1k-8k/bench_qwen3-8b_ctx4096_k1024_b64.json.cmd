/work/main/build-device/spindle bench --synthetic qwen3-8b --no-kernels --ctx 4096 --k 1024 --bsel 64 --device cuda --json /root/spindle-frontier/bench_qwen3-8b_ctx4096_k1024_b64.json
