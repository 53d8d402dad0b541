#!/usr/bin/env bash
# The `step_overhead` bench of several builds, alternated round by round in one device call, so
# that the machine's drift falls on every build alike. Output under $OUT.
#
# Here: for each version, cargo bench -p burn-hetero-benches --bench step_overhead --no-run,
#   then  strip -o carry/step_overhead-NAME target/release/deps/step_overhead-<hash>
#   && xz -T2 -6 -f carry/step_overhead-NAME  (NAME naming the version).
# There: scripts/gpu_steps.sh carry [NAME...]   (default: every carry/step_overhead-*.xz).
# Settings: ROUNDS (default 2), STEP_BENCHES (divan filters, default
# "hetero_cuda hetero_ndarray_cuda"), SAMPLES (default 20), DEADLINE (seconds since the start,
# default 560): no run starts after it. Summarise here with scripts/steps_table.py.
set -uo pipefail
dir="$1"
shift
out="${OUT:-/tmp/out}"
mkdir -p "$out"
export CUBECL_AUTOTUNE_LEVEL="${AUTOTUNE:-minimal}"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in "$dir"/step_overhead-*.xz; do
        n="${f##*/step_overhead-}"
        names+=("${n%.xz}")
    done
fi
for n in "${names[@]}"; do
    xz -dc "$dir/step_overhead-$n.xz" > "/tmp/step_overhead-$n" && chmod +x "/tmp/step_overhead-$n" || exit 1
done
for r in $(seq 1 "${ROUNDS:-2}"); do
    for n in "${names[@]}"; do
        if [ "$SECONDS" -ge "${DEADLINE:-560}" ]; then
            echo "deadline reached before round $r of $n"
            break 2
        fi
        echo "=== build $n round $r at ${SECONDS}s" | tee -a "$out/steps-log.txt"
        # shellcheck disable=SC2086
        timeout 200 "/tmp/step_overhead-$n" --bench ${STEP_BENCHES:-hetero_cuda hetero_ndarray_cuda} \
            --sample-count "${SAMPLES:-20}" >> "$out/steps-log.txt" 2>&1
        echo "build $n round $r: rc $?"
    done
done
