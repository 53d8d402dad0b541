#!/usr/bin/env bash
# The CPU half on the GPU machine's 16 cores, beside PyTorch's CPU in one device call: per-op
# times (`cpu_ops` bench and scripts/torch_cpu_ops.py, same ops and shapes), then training steps
# with every op on the CPU and with only the conv forward offloaded, the convs placed on the CPU
# run by burn-hetero (`BURN_HETERO_CPU_CONV=own`) and by burn-flex (`=backend`), alternated.
#
# Here:  cargo build --release -p burn-hetero-models --no-default-features --features cuda
#        cargo bench -p burn-hetero-benches --bench cpu_ops --no-run   (note the binary it names)
#        mkdir -p carry; for b in target/release/hetero <cpu_ops binary>; do
#          strip -o carry/$(basename $b | sed 's/-[0-9a-f]*$//') $b; done; xz -T2 -f carry/hetero carry/cpu_ops
#        cp scripts/torch_cpu_ops.py ../shared/bench/torch_baselines.py carry/
#        (a second cpu_ops build, for `conv_ab`, as carry/cpu_ops_base.xz)
# There: scripts/gpu_cpu.sh carry [STAGE...]   stages: ops conv_ab steps (default ops steps);
#        conv_ab times burn-hetero's convs of cpu_ops_base and cpu_ops alternated, ROUNDS times
# Settings: ROUNDS (default 1) for the A/Bs, OTHERS=0 to time only the convs in `ops`, STEPS
# (default 6), DEADLINE (s since the start, default 560). Few files come back: each run's files
# go to a work folder, gathered at the end into $OUT/steps-log.txt and $OUT/conv-ab-log.txt.
set -uo pipefail
dir="$1"
shift
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(ops steps)
out="${OUT:-/tmp/out}"
mkdir -p "$out"
for b in hetero cpu_ops cpu_ops_base; do
    [ -f "$dir/$b.xz" ] && xz -dc "$dir/$b.xz" > "/tmp/$b" && chmod +x "/tmp/$b"
done
export CUBECL_AUTOTUNE_LEVEL="${AUTOTUNE:-minimal}"
work=/tmp/gpu-cpu
mkdir -p "$work"
for stage in "${stages[@]}"; do
    echo "== $stage at ${SECONDS}s"
    case "$stage" in
    ops)
        only=()
        [ "${OTHERS:-1}" = 1 ] || only=(--only conv)
        timeout 150 python3 "$dir/torch_cpu_ops.py" --threads "$(nproc)" --samples 60 "${only[@]}" \
            --output "$out/torch-cpu-ops.md" > /dev/null 2>&1
        echo "torch_cpu_ops: rc $?"
        cat "$out/torch-cpu-ops.md"
        # The convs in full, the other ops with fewer samples.
        timeout 200 /tmp/cpu_ops --bench conv2d > "$out/cpu-ops.txt" 2>&1
        echo "cpu_ops conv2d: rc $?"
        if [ "${OTHERS:-1}" = 1 ]; then
            timeout 150 /tmp/cpu_ops --bench --skip conv2d --skip relu_after_idle \
                --skip f16_into_staging --sample-count 30 >> "$out/cpu-ops.txt" 2>&1
            echo "cpu_ops others: rc $?"
        fi
        ;;
    conv_ab)
        for r in $(seq 1 "${ROUNDS:-1}"); do
            for b in cpu_ops_base cpu_ops; do
                timeout 100 "/tmp/$b" --bench conv2d --sample-count 20 > "$work/conv-ab-$b-$r.txt" 2>&1
                echo "[${SECONDS}s] round $r $b: rc $?"
                # burn-hetero's rows: those after a `Hetero<...>` line, before the next backend's.
                awk '/─ Hetero/ {h = 1; next} /─ (Flex|NdArray) / || /^[├╰]─/ {h = 0}
                     h && /3x3/ {sub(/^[│├╰─ ]*/, ""); print}' "$work/conv-ab-$b-$r.txt"
            done
        done
        for f in "$work"/conv-ab-*; do echo "=== ${f##*/}"; cat "$f"; done > "$out/conv-ab-log.txt"
        ;;
    steps)
        timeout 150 python3 "$dir/torch_baselines.py" --threads "$(nproc)" \
            --models resnet20,mnist_net --variants cpu --steps 20 --no-bus --no-conv \
            > "$out/torch-steps.md" 2>&1
        echo "torch_baselines: rc $?"
        cat "$out/torch-steps.md"
        for r in $(seq 1 "${ROUNDS:-1}"); do
            for conv in own backend; do
                if [ "$SECONDS" -ge "${DEADLINE:-560}" ]; then
                    echo "deadline before round $r $conv"
                    break 2
                fi
                BURN_HETERO_CPU_CONV=$conv timeout 200 /tmp/hetero bench \
                    --models resnet20,mnist --backends hetero-cpu,hetero-forward --accel cuda \
                    --steps "${STEPS:-6}" --warmup 1 --output "$work/steps-$conv-$r.md" \
                    > "$work/steps-$conv-$r.txt" 2>&1
                echo "[${SECONDS}s] round $r conv $conv: rc $?"
                cat "$work/steps-$conv-$r.md"
            done
        done
        for f in "$work"/*; do echo "=== ${f##*/}"; cat "$f"; done > "$out/steps-log.txt"
        ;;
    esac
done
