/work/main/build-device/spindle bench --synthetic qwen3-8b --no-kernels --ctx 8192 --k 64 --bsel 64 --device cuda --json /root/spindle-frontier/bench_qwen3-8b_ctx8192_k64_b64.json
