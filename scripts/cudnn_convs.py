#!/usr/bin/env python3
"""cuDNN conv2d forward times for the ResNet20 layers at batch 128 that torch_baselines.py does
not time (the stem, the 16x16 stage and both stride-2 layers), in the same table format, so that
`conv_bench --cudnn FILE` reads a file holding both tables.

Device-resident operands, 5 warm-up launches, then the mean of 50 back-to-back launches between
CUDA events; f16, bf16 and f32. Usage: python3 scripts/cudnn_convs.py >> torch.md
"""
import torch
import torch.nn.functional as F

# (batch, in channels, out channels, side, stride), 3x3 kernels, padding 1.
SHAPES = [
    (128, 3, 16, 32, 1),
    (128, 16, 32, 32, 2),
    (128, 32, 32, 16, 1),
    (128, 32, 64, 16, 2),
]
LAUNCHES = 50


def time_us(x, w, stride):
    for _ in range(5):
        F.conv2d(x, w, None, stride, 1)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(LAUNCHES):
        F.conv2d(x, w, None, stride, 1)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / LAUNCHES


def main():
    torch.backends.cudnn.benchmark = True
    print("| n | c_in | c_out | hw | stride | k | dtype | us | TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, ci, co, hw, s in SHAPES:
        out = (hw + 2 - 3) // s + 1
        flops = 2.0 * n * co * out * out * ci * 9
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            x = torch.randn(n, ci, hw, hw, device="cuda", dtype=dtype)
            w = torch.randn(co, ci, 3, 3, device="cuda", dtype=dtype)
            us = time_us(x, w, s)
            name = str(dtype).replace("torch.", "")
            print(f"| {n} | {ci} | {co} | {hw} | {s} | 3 | {name} | {us:.1f} | {flops / us / 1e6:.2f} |")


if __name__ == "__main__":
    main()
