"""Host-to-device and device-to-host copy times from pinned host memory, by size, through
PyTorch (one cudaMemcpyAsync per copy, CUDA events around it, median of 41 after 5 untimed):
the bus's ceiling for one copy of each size, against which `copy_bench`'s staging rates are read.
Two more upload columns probe what differs in the staging: the host buffer written by the CPU
right before each copy (the staging casts into its slot just before copying it), and the copy
on a non-blocking stream of its own (as the staging's is).

    python3 scripts/pinned_copy_rates.py     # on the GPU machine; prints a markdown table
"""
import statistics

import torch

SIZES = [1 << 16, 1 << 18, 1 << 19, 1 << 20, 1 << 21, 1 << 22, 1 << 24, 1 << 26]


def copy_us(n, up, written=False, stream=None):
    """Median µs of one copy of `n` bytes (up: host to device); `written`: the CPU writes the
    host buffer before each copy; `stream`: the copy goes there."""
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host.fill_(1)
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    stream = stream or torch.cuda.current_stream()
    times = []
    for i in range(46):
        if written:
            host.fill_(i % 7)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
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
    side = torch.cuda.Stream()
    print(
        "| bytes | up µs | up GB/s | down µs | down GB/s | up, written before, µs | "
        "up, own stream, µs |\n|---:|---:|---:|---:|---:|---:|---:|"
    )
    for n in SIZES:
        up, down = copy_us(n, True), copy_us(n, False)
        written, own = copy_us(n, True, written=True), copy_us(n, True, stream=side)
        print(
            f"| {n} | {up:.1f} | {n / up / 1e3:.1f} | {down:.1f} | {n / down / 1e3:.1f} "
            f"| {written:.1f} | {own:.1f} |"
        )


if __name__ == "__main__":
    main()
