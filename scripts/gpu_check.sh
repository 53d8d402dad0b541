#!/usr/bin/env bash
# Runs the CUDA checks of the conformance suite on the GPU machine from a carried test binary.
#
# Here:  cargo test --test conformance --no-run   (note the binary path it prints)
#        mkdir -p carry && cp <binary> carry/conformance && strip carry/conformance && xz -T2 -6 carry/conformance
# There: scripts/gpu_check.sh carry/conformance.xz   (writes its log under $OUT)
set -euo pipefail
bin="$1"
out="${OUT:-/tmp}"
if [[ "$bin" == *.xz ]]; then
    xz -dc "$bin" > /tmp/conformance
    chmod +x /tmp/conformance
    bin=/tmp/conformance
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
# Every CUDA test (ignored by default), with their counter tables.
"$bin" --ignored --nocapture --test-threads=1 cuda_ 2>&1 | tee "$out/cuda_tests.log"
