#!/usr/bin/env bash
# conv2d forward timings on the GPU machine: cuDNN (PyTorch) and ours beside burn-cuda, in one
# call, joined into one markdown table.
#
# Here:  cargo build --release --locked -p burn-hetero --no-default-features --features cuda \
#          --example conv_bench
#        mkdir -p carry && cp target/release/examples/conv_bench carry/ && strip carry/conv_bench \
#          && xz -T2 -6 -f carry/conv_bench && cp ../shared/bench/torch_baselines.py \
#          scripts/cudnn_convs.py carry/
# There: scripts/gpu_bench.sh carry   (writes conv_bench.md, torch.md under $OUT)
set -euo pipefail
dir="$1"
out="${OUT:-/tmp}"
xz -dc "$dir/conv_bench.xz" > /tmp/conv_bench
chmod +x /tmp/conv_bench
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 "$dir/torch_baselines.py" --threads 16 --models mnist_net --variants gpu --steps 3 --no-bus \
    | tee "$out/torch.md"
# The batch-128 ResNet20 layers torch_baselines.py leaves out.
python3 "$dir/cudnn_convs.py" | tee -a "$out/torch.md"
/tmp/conv_bench --cudnn "$out/torch.md" | tee "$out/conv_bench.md"
