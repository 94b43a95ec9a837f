# gpu_probe.sh: sourced by the GPU tests. gpu_probe SPINDLE MODEL WORK runs
# `spindle logits --device cuda` once on the checkpoint MODEL (its ids.txt) and
# ends the test where there is no GPU to test on: exit 77 (CTest: skipped) when
# the build has no CUDA or the machine no usable GPU, exit 1 instead with
# SPINDLE_REQUIRE_GPU=1, and exit 1 on any other failure of the probe. It
# returns only when the GPU ran it.
gpu_probe() {
    local bin=$1 model=$2 work=$3
    if "$bin" logits --model "$model" --ids "$model/ids.txt" --out "$work/probe.npy" --device cuda \
        >/dev/null 2>"$work/probe.err"; then
        return 0
    fi
    if grep -qE "no usable GPU|built without CUDA" "$work/probe.err"; then
        if [ "${SPINDLE_REQUIRE_GPU:-0}" = 1 ]; then
            echo "FAIL: SPINDLE_REQUIRE_GPU=1 but: $(cat "$work/probe.err")"
            exit 1
        fi
        echo "skipped: $(cat "$work/probe.err")"
        exit 77
    fi
    echo "FAIL: spindle logits --device cuda on $model: $(cat "$work/probe.err")"
    exit 1
}
