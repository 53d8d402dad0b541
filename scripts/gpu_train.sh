#!/usr/bin/env bash
# Training runs and checks on the GPU machine, in one device call. Output files under $OUT.
#
# Here (the GPU machine has no Rust toolchain):
#   cargo build --release -p burn-hetero-models --no-default-features --features cuda
#   mkdir -p carry/fashion && cp target/release/hetero carry/ && strip carry/hetero \
#     && xz -T2 -6 -f carry/hetero && cp /usr/share/datasets/fashion-mnist/*.gz carry/fashion/
#   cp scripts/sass_check.py ../shared/bench/torch_baselines.py carry/
#   optional: the conformance test binary (cargo test -p burn-hetero --test conformance --no-run),
#   stripped and xz-ed as carry/conformance.xz, for its `cuda_` tests.
# There: scripts/gpu_train.sh carry STAGE...   stages, run in the order given:
#   checks   conformance `cuda_` tests; SASS of our conv kernels (sass_check.py)
#   steps    ResNet20 (b=128) and MNIST-net step times per backend, and PyTorch's beside them
#   mnist    the MNIST net, 14 epochs, --backend cpu then --backend hetero (same seed)
#   fashion  ResNet20 on Fashion-MNIST until the call's time runs out, a checkpoint per epoch
#            under $OUT/ckpt; resumes from carry/resume.ckpt when there is one
# FASHION_BACKEND (gpu|hetero, default gpu) and FASHION_EPOCHS (default 10) set the last stage;
# DEADLINE (seconds since the start, default 570) bounds it.
set -uo pipefail
dir="$1"
shift
out="${OUT:-/tmp/out}"
mkdir -p "$out"
bin=/tmp/hetero
xz -dc "$dir/hetero.xz" > "$bin" && chmod +x "$bin"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt"

# Median ms per step from a run's summary line.
ms() { sed -n 's/.* \([0-9.]*\) ms per step (median).*/\1/p' "$1" | tail -1; }

for stage in "$@"; do
    echo "== $stage at ${SECONDS}s"
    case "$stage" in
    checks)
        if [ -f "$dir/conformance.xz" ]; then
            xz -dc "$dir/conformance.xz" > /tmp/conformance && chmod +x /tmp/conformance
            timeout 240 /tmp/conformance --ignored cuda_ --test-threads 1 \
                > "$out/conformance-cuda.txt" 2>&1
            echo "conformance cuda_: rc $?"
            tail -5 "$out/conformance-cuda.txt"
        fi
        CUBECL_DEBUG_LOG="$out/cubecl.log" timeout 120 "$bin" train resnet20 --dataset mnist \
            --backend hetero --accel cuda --strict --dry-run --quiet > "$out/sass-run.txt" 2>&1
        echo "dry run for the SASS: rc $?"
        python3 "$dir/sass_check.py" "$out/cubecl.log" "$out/sass" | tee "$out/sass.md"
        rm -f "$out/cubecl.log"
        ;;
    steps)
        for backend in gpu hetero cpu; do
            for model in resnet20 mnist; do
                timeout 150 "$bin" train "$model" --backend "$backend" --accel cuda --epochs 1 \
                    --steps-per-epoch 25 --quiet > "$out/steps-$model-$backend.txt" 2>&1
                echo "$model $backend: rc $? $(ms "$out/steps-$model-$backend.txt") ms/step"
            done
        done
        timeout 200 python3 "$dir/torch_baselines.py" --threads 16 --models resnet20,mnist_net \
            --batches 128 --variants cpu,study,gpu --steps 10 --no-bus > "$out/torch-steps.md" 2>&1
        echo "torch: rc $?"
        cat "$out/torch-steps.md"
        ;;
    mnist)
        for backend in cpu hetero; do
            timeout 240 "$bin" train mnist --backend "$backend" --accel cuda --quiet \
                > "$out/mnist-$backend.txt" 2>&1
            echo "mnist $backend: rc $?"
            tail -4 "$out/mnist-$backend.txt"
        done
        ;;
    fashion)
        resume=()
        [ -f "$dir/resume.ckpt" ] && resume=(--resume "$dir/resume.ckpt")
        left=$(( ${DEADLINE:-570} - SECONDS ))
        timeout "$left" "$bin" train resnet20 --dataset fashion-mnist --data-dir "$dir/fashion" \
            --backend "${FASHION_BACKEND:-gpu}" --accel cuda --epochs "${FASHION_EPOCHS:-10}" \
            --save-every 1 --save-dir "$out/ckpt" --quiet "${resume[@]}" \
            >> "$out/fashion.txt" 2>&1
        echo "fashion: rc $? after ${SECONDS}s"
        tail -15 "$out/fashion.txt"
        # Only the newest checkpoint travels back.
        ls -t "$out"/ckpt/*.ckpt 2>/dev/null | tail -n +2 | xargs -r rm -f
        ;;
    *) echo "unknown stage $stage"; exit 2 ;;
    esac
done
echo "== done at ${SECONDS}s"
