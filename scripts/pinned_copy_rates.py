"""Host-to-device and device-to-host copy times from pinned host memory, by size, through
PyTorch (one cudaMemcpyAsync per copy, CUDA events around it, median of 41 after 5 untimed):
the bus's ceiling for one copy of each size, against which `copy_bench`'s staging rates are read.

    python3 scripts/pinned_copy_rates.py     # on the GPU machine; prints a markdown table
"""
import statistics

import torch

SIZES = [1 << 16, 1 << 18, 1 << 19, 1 << 20, 1 << 21, 1 << 22, 1 << 24, 1 << 26]


def copy_us(n, up):
    """Median µs of one copy of `n` bytes (up: host to device)."""
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    times = []
    for i in range(46):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        if up:
            dev.copy_(host, non_blocking=True)
        else:
            host.copy_(dev, non_blocking=True)
        end.record()
        end.synchronize()
        if i >= 5:
            times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def main():
    torch.cuda.init()
    print("| bytes | up µs | up GB/s | down µs | down GB/s |\n|---:|---:|---:|---:|---:|")
    for n in SIZES:
        up, down = copy_us(n, True), copy_us(n, False)
        print(f"| {n} | {up:.1f} | {n / up / 1e3:.1f} | {down:.1f} | {n / down / 1e3:.1f} |")


if __name__ == "__main__":
    main()
