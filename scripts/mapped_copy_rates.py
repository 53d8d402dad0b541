"""Uploads from pinned host memory by size: the copy engine (one cudaMemcpyAsync; the same split
into pieces on several streams) against a kernel that reads the pinned memory itself through
its mapped device address and writes device memory, 16 bytes per thread and step. Each timed
upload follows a CPU write of the host buffer, as the staging's cast into its slot does, and
every kernel upload is checked byte for byte a few times. CUDA events around each upload (and
around all pieces of a split one), median of 41 after 5 untimed; the wall column is the host's
time from the call to the end of a synchronize. numpy's write goes through the CPU's caches,
unlike the staging's streaming stores, so every column here pays for the bus's reads of cached
lines (`pinned_copy_rates.py`'s "written before" column): compare the columns with each other.

    python3 scripts/mapped_copy_rates.py     # on the GPU machine (CuPy); prints markdown tables
"""
import statistics
import time

import cupy as cp
import numpy as np

SIZES = [1 << 18, 1 << 19, 1 << 20, 3 << 19, 1 << 21, 1 << 22, 1 << 23]

SOURCE = r"""
extern "C" __global__ void copy16(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                  unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += step) dst[i] = src[i];
}
extern "C" __global__ void copy16x4(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                    unsigned long long n) {
    // Four loads in flight per thread before any store.
    unsigned long long t = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = t; i < n; i += 4 * step) {
        uint4 v[4];
        #pragma unroll
        for (int k = 0; k < 4; k++) { unsigned long long j = i + k * step; if (j < n) v[k] = src[j]; }
        #pragma unroll
        for (int k = 0; k < 4; k++) { unsigned long long j = i + k * step; if (j < n) dst[j] = v[k]; }
    }
}
"""


def median_us(run, write, reps=46, warm=5):
    """(event µs, wall µs) medians of `run(stream)` on a fresh stream, `write()` before each."""
    stream = cp.cuda.Stream(non_blocking=True)
    ev, wall = [], []
    for i in range(reps):
        write(i)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        t0 = time.perf_counter()
        start.record(stream)
        run(stream)
        end.record(stream)
        end.synchronize()
        t1 = time.perf_counter()
        if i >= warm:
            ev.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
            wall.append((t1 - t0) * 1e6)
    return statistics.median(ev), statistics.median(wall)


def main():
    props = cp.cuda.runtime.getDeviceProperties(0)
    sms = props["multiProcessorCount"]
    print(f"device: {props['name'].decode()}, {sms} SMs")
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    kernels = {name: module.get_function(name) for name in ("copy16", "copy16x4")}
    rows = []
    for n in SIZES:
        pinned = cp.cuda.alloc_pinned_memory(n)
        host = np.frombuffer(pinned, dtype=np.uint8, count=n)
        dst = cp.empty(n, dtype=cp.uint8)
        # Under unified addressing a pinned allocation has the same address on the device.
        dev_ptr = pinned.ptr

        def write(i):
            host[:] = (i * 7 + 1) & 0xFF
            host[i % n] = 3

        def engine(stream, pieces=1):
            if pieces == 1:
                cp.cuda.runtime.memcpyAsync(dst.data.ptr, pinned.ptr, n, 1, stream.ptr)
                return
            step = n // pieces
            ready = cp.cuda.Event(disable_timing=True)
            ready.record(stream)
            side = engine.side[:pieces - 1]
            for k, s in enumerate([stream] + side):
                if k:
                    s.wait_event(ready)
                cp.cuda.runtime.memcpyAsync(
                    dst.data.ptr + k * step, pinned.ptr + k * step, step, 1, s.ptr
                )
            for s in side:
                done = cp.cuda.Event(disable_timing=True)
                done.record(s)
                stream.wait_event(done)

        engine.side = [cp.cuda.Stream(non_blocking=True) for _ in range(3)]

        def kernel(name, blocks, threads):
            vectors = n // 16

            def run(stream):
                kernels[name](
                    (blocks,), (threads,), (cp.uint64(dev_ptr), dst, cp.uint64(vectors)),
                    stream=stream,
                )

            return run

        row = {"bytes": n}
        row["engine"] = median_us(engine, write)
        row["engine x2"] = median_us(lambda s: engine(s, 2), write)
        row["engine x4"] = median_us(lambda s: engine(s, 4), write)
        # (kernel, blocks per multiprocessor or None for one vector per thread, threads)
        configs = [
            ("copy16", 1, 1024),
            ("copy16", 2, 512),
            ("copy16", 4, 256),
            ("copy16", 8, 256),
            ("copy16", 16, 256),
            ("copy16", None, 256),
            ("copy16x4", 2, 512),
            ("copy16x4", 4, 256),
            ("copy16x4", 8, 256),
        ]
        for name, per_sm, threads in configs:
            blocks = per_sm * sms if per_sm else max(1, n // 16 // threads)
            run = kernel(name, blocks, threads)
            for check in range(3):
                write(100 + check)
                run(cp.cuda.Stream.null)
                cp.cuda.Stream.null.synchronize()
                assert np.array_equal(cp.asnumpy(dst), host), (name, blocks, threads, n)
            shape = f"{per_sm}/SM" if per_sm else "1 vector/thread"
            row[f"{name} {shape} x{threads}"] = median_us(run, write)
        rows.append(row)
        del host
    keys = [k for k in rows[0] if k != "bytes"]
    print("\nGB/s from events (µs in brackets):\n")
    print("| bytes | " + " | ".join(keys) + " |")
    print("|---:|" + "---:|" * len(keys))
    for row in rows:
        n = row["bytes"]
        cells = [f"{n / row[k][0] / 1e3:.1f} ({row[k][0]:.1f})" for k in keys]
        print(f"| {n} | " + " | ".join(cells) + " |")
    print("\nhost wall µs, call to end of synchronize:\n")
    print("| bytes | " + " | ".join(keys) + " |")
    print("|---:|" + "---:|" * len(keys))
    for row in rows:
        print(f"| {row['bytes']} | " + " | ".join(f"{row[k][1]:.1f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
