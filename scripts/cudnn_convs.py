#!/usr/bin/env python3
"""cuDNN conv2d forward times for the ResNet20 layers at batch 128 that torch_baselines.py does
not time (the stem, the 16x16 stage and both stride-2 layers), in the same table format, so that
`conv_bench --cudnn FILE` reads a file holding both tables.

Device-resident operands, 5 warm-up launches, then the mean of 50 back-to-back launches between
CUDA events; f16, bf16 and f32. `--mnist` times the MNIST net's two layers instead (to repeat
them beside conv_bench within one call). Usage: python3 scripts/cudnn_convs.py >> torch.md
"""
import sys

import torch
import torch.nn.functional as F

# (batch, in channels, out channels, side, stride, kernel, padding).
SHAPES = [
    (128, 3, 16, 32, 1, 3, 1),
    (128, 16, 32, 32, 2, 3, 1),
    (128, 32, 32, 16, 1, 3, 1),
    (128, 32, 64, 16, 2, 3, 1),
]
MNIST = [
    (64, 1, 20, 28, 1, 5, 0),
    (64, 20, 50, 12, 1, 5, 0),
]
LAUNCHES = 50


def time_us(x, w, stride, pad):
    for _ in range(5):
        F.conv2d(x, w, None, stride, pad)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(LAUNCHES):
        F.conv2d(x, w, None, stride, pad)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / LAUNCHES


def main():
    torch.backends.cudnn.benchmark = True
    shapes = MNIST if "--mnist" in sys.argv[1:] else SHAPES
    print("| n | c_in | c_out | hw | stride | k | dtype | us | TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, ci, co, hw, s, k, pad in shapes:
        out = (hw + 2 * pad - k) // s + 1
        flops = 2.0 * n * co * out * out * ci * k * k
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            x = torch.randn(n, ci, hw, hw, device="cuda", dtype=dtype)
            w = torch.randn(co, ci, k, k, device="cuda", dtype=dtype)
            us = time_us(x, w, s, pad)
            name = str(dtype).replace("torch.", "")
            print(f"| {n} | {ci} | {co} | {hw} | {s} | {k} | {name} | {us:.1f} | {flops / us / 1e6:.2f} |")


if __name__ == "__main__":
    main()
