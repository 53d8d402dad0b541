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
#   bench    PyTorch's step times (torch_baselines.py), then `hetero bench` with them beside ours
#   mnist    the MNIST net, 14 epochs, --backend cpu then --backend hetero (same seed)
#   profile  --profile runs of the MNIST net (b=64) and ResNet20 (b=32) on the hetero backend
#            (PROFILE_RUNS "model:batch ...", PROFILE_CPUS "flex ndarray" pick them)
#   fashion  ResNet20 on Fashion-MNIST until the call's time runs out, a checkpoint per epoch
#            under $OUT/ckpt; resumes from carry/resume.ckpt when there is one
# Settings: MNIST_BACKENDS (default "cpu hetero") picks the mnist stage's runs; FASHION_BACKEND
# (gpu|hetero, default gpu) and FASHION_EPOCHS (default 10) set the fashion stage; DEADLINE
# (seconds since the start, default 570) bounds it; AUTOTUNE is CubeCL's autotune level (default
# minimal); carry/autotune, when there, seeds CubeCL's autotune cache; PROFILE_TIMEOUT (s) bounds
# each profiled run. The bench stage takes TORCH_MODELS, BENCH_MODELS, BENCH_BACKENDS (comma
# lists) and BENCH_STEPS, and stops at DEADLINE.
set -uo pipefail
dir="$1"
shift
out="${OUT:-/tmp/out}"
mkdir -p "$out"
bin=/tmp/hetero
xz -dc "$dir/hetero.xz" > "$bin" && chmod +x "$bin"
# burn-cuda autotunes every new kernel shape; at CubeCL's default level that took minutes per
# model here, "minimal" seconds.
export CUBECL_AUTOTUNE_LEVEL="${AUTOTUNE:-minimal}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt"

# Median ms per step from a run's summary line.
ms() { sed -n 's/.* \([0-9.]*\) ms per step (median).*/\1/p' "$1" | tail -1; }

for stage in "$@"; do
    echo "== $stage at ${SECONDS}s"
    case "$stage" in
    checks)
        if [ -f "$dir/conformance.xz" ]; then
            timeout 200 bash "$(dirname "$0")/gpu_check.sh" "$dir/conformance.xz" > /dev/null 2>&1
            echo "conformance cuda_: rc $? (log: cuda_tests.log)"
            grep -E "^test |test result" "$out/cuda_tests.log"
        fi
        CUBECL_DEBUG_LOG="$out/cubecl.log" timeout 120 "$bin" train resnet20 --dataset mnist \
            --backend hetero --accel cuda --strict --dry-run --quiet > "$out/sass-run.txt" 2>&1
        echo "dry run for the SASS: rc $?"
        python3 "$dir/sass_check.py" "$out/cubecl.log" "$out/sass" | tee "$out/sass.md"
        rm -f "$out/cubecl.log"
        ;;
    bench)
        # PyTorch's step times first, then `hetero bench` with their table beside ours.
        timeout 240 python3 "$dir/torch_baselines.py" --threads 16 \
            --models "${TORCH_MODELS:-resnet20,mnist_net}" --variants cpu,study,gpu --steps 20 \
            --no-bus > "$out/torch-steps.md" 2>&1
        echo "torch: rc $?"
        left=$(( ${DEADLINE:-570} - SECONDS ))
        timeout "$left" "$bin" bench --models "${BENCH_MODELS:-mnist,resnet20}" \
            --backends "${BENCH_BACKENDS:-cpu-flex,hetero-forward,hetero,gpu}" --accel cuda \
            --steps "${BENCH_STEPS:-20}" --torch "$out/torch-steps.md" --output "$out/bench.md" \
            > "$out/bench.txt" 2>&1
        echo "bench: rc $?"
        cat "$out/bench.md" 2>/dev/null || tail -20 "$out/bench.txt"
        ;;
    mnist)
        for backend in ${MNIST_BACKENDS:-cpu hetero}; do
            timeout 150 "$bin" train mnist --backend "$backend" --accel cuda --quiet \
                > "$out/mnist-$backend.txt" 2>&1
            echo "mnist $backend: rc $?"
            tail -4 "$out/mnist-$backend.txt"
        done
        ;;
    profile)
        # A profiled hetero run of each model (the first step, which compiles, is left out), on
        # each CPU backend of PROFILE_CPUS (default "flex").
        for cpu in ${PROFILE_CPUS:-flex}; do
            for run in ${PROFILE_RUNS:-mnist:64 resnet20:32}; do
                model="${run%%:*}" batch="${run##*:}" name="${run%%:*}-${run##*:}-$cpu"
                timeout "${PROFILE_TIMEOUT:-150}" "$bin" train "$model" --backend hetero \
                    --cpu "$cpu" --accel cuda --epochs 1 --steps-per-epoch 12 \
                    --batch-size "$batch" --test-batch-size "$batch" --quiet --profile \
                    --profile-chart "$out/profile-$name.svg" > "$out/profile-$name.txt" 2>&1
                echo "profile $name: rc $?"
                grep -E "^done|^profile" "$out/profile-$name.txt"
            done
        done
        ;;
    fashion)
        resume=()
        [ -f "$dir/resume.ckpt" ] && resume=(--resume "$dir/resume.ckpt")
        # burn-cuda autotunes each new kernel shape; its cache (under target/) travels between
        # calls, and one batch size for training and testing keeps the set of shapes small.
        mkdir -p target
        [ -d "$dir/autotune" ] && cp -r "$dir/autotune" target/
        left=$(( ${DEADLINE:-570} - SECONDS ))
        timeout "$left" "$bin" train resnet20 \
            --dataset fashion-mnist --data-dir "$dir/fashion" \
            --backend "${FASHION_BACKEND:-gpu}" --accel cuda --epochs "${FASHION_EPOCHS:-10}" \
            --batch-size 125 --test-batch-size 125 --log-interval 40 \
            --save-every 1 --save-dir "$out/ckpt" --quiet "${resume[@]}" 2>&1 \
            | while IFS= read -r line; do echo "[${SECONDS}s] $line"; done >> "$out/fashion.txt"
        echo "fashion: rc ${PIPESTATUS[0]} after ${SECONDS}s"
        tail -15 "$out/fashion.txt"
        # Only the newest checkpoint travels back, with the autotune cache.
        ls -t "$out"/ckpt/*.ckpt 2>/dev/null | tail -n +2 | xargs -r rm -f
        [ -d target/autotune ] && cp -r target/autotune "$out/"
        ;;
    *) echo "unknown stage $stage"; exit 2 ;;
    esac
done
echo "== done at ${SECONDS}s"
