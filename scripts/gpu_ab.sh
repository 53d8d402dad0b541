#!/usr/bin/env bash
# Step times of several builds of `hetero`, alternated round by round in one device call, so
# that the machine's drift over the call falls on every build alike. Output under $OUT.
#
# Here: build each version (cargo build --release -p burn-hetero-models --no-default-features
#   --features cuda), then  strip target/release/hetero && xz -T2 -6 -c target/release/hetero
#   > carry/hetero-NAME.xz  for each, NAME naming the version.
# There: scripts/gpu_ab.sh carry [NAME...]   (default: every carry/hetero-*.xz); a NAME of the
#   form BUILD+VAR=VALUE runs carry/hetero-BUILD.xz with VAR=VALUE in its environment.
# Settings: ROUNDS (default 3), AB_MODELS (default resnet20,mnist), AB_BATCH (default: the
# bench's, 32 and 128 for ResNets, 64 for the MNIST net), AB_BACKENDS (default hetero),
# AB_STEPS (default 20), DEADLINE (seconds since the start, default 560): no round starts
# after it. AB_TORCH=1 first runs the PyTorch rows the goals are read against
# ($dir/torch_baselines.py, copied there from ../shared/bench) into $OUT/torch.md.
set -uo pipefail
dir="$1"
shift
# Only a few files come back from the machine: each run's files go to a work folder, and
# $OUT gets the summary (ab-summary.md) and every file of the work folder in one log (ab-log.txt).
final="${OUT:-/tmp/out}"
out=/tmp/ab-work
mkdir -p "$final" "$out"
export CUBECL_AUTOTUNE_LEVEL="${AUTOTUNE:-minimal}"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in "$dir"/hetero-*.xz; do
        n="${f##*/hetero-}"
        names+=("${n%.xz}")
    done
fi
for n in "${names[@]}"; do
    b="${n%%+*}"
    [ -x "/tmp/hetero-$b" ] || { xz -dc "$dir/hetero-$b.xz" > "/tmp/hetero-$b" && chmod +x "/tmp/hetero-$b"; } || exit 1
done
if [ -n "${AB_TORCH:-}" ]; then
    timeout 120 python3 "$dir/torch_baselines.py" --threads 16 --models resnet20,mnist_net \
        --variants cpu,study,gpu --steps 20 --no-bus --no-conv > "$final/torch.md" 2>&1
    echo "[${SECONDS}s] PyTorch rows: rc $?"
fi
rounds="${ROUNDS:-3}"
for r in $(seq 1 "$rounds"); do
    for n in "${names[@]}"; do
        if [ "$SECONDS" -ge "${DEADLINE:-560}" ]; then
            echo "deadline reached before round $r of $n"
            break 2
        fi
        b="${n%%+*}"
        label=$(echo "$n" | tr '+=' '__')
        vars=()
        [ "$b" != "$n" ] && vars=("${n#*+}")
        batch=()
        [ -n "${AB_BATCH:-}" ] && batch=(--batch-sizes "$AB_BATCH")
        env "${vars[@]}" timeout 240 "/tmp/hetero-$b" bench --models "${AB_MODELS:-resnet20,mnist}" \
            "${batch[@]}" --backends "${AB_BACKENDS:-hetero}" --accel cuda \
            --steps "${AB_STEPS:-20}" --output "$out/ab-$label-$r.md" > "$out/ab-$label-$r.txt" 2>&1
        echo "[${SECONDS}s] round $r $n: rc $?"
    done
done
# One row per build: each cell's medians over the rounds, then their median.
summary() {
echo "| build | model | batch | backend | ms/step per round | median |"
echo "|---|---|---:|---|---|---:|"
for n in "${names[@]}"; do
    label=$(echo "$n" | tr '+=' '__')
    cat "$out"/ab-"$label"-*.md 2>/dev/null | awk -F'|' -v n="$n" '
        $2 ~ /[a-z]/ && $3 ~ /[0-9]/ {
            key = $2 "|" $3 "|" $4; gsub(/ /, "", key)
            v = $6 + 0; cells[key] = cells[key] " " v
        }
        END {
            for (key in cells) {
                m = split(cells[key], xs, " ")
                for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
                    if (xs[j] < xs[i]) { t = xs[i]; xs[i] = xs[j]; xs[j] = t }
                split(key, kb, "|")
                printf "| %s | %s | %s | %s |%s | %.2f |\n", n, kb[1], kb[2], kb[3], cells[key], xs[int((m + 1) / 2)]
            }
        }' | sort
done
}
echo
summary | tee "$final/ab-summary.md"
for f in "$out"/*; do echo "=== ${f##*/}"; cat "$f"; done > "$final/ab-log.txt"
