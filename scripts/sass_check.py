#!/usr/bin/env python3
"""Which instructions our CubeCL conv kernels compile to on the GPU machine.

CubeCL compiles kernels at run time (CUDA C++ through NVRTC), so there is no object file to
disassemble. Run a program with CUBECL_DEBUG_LOG=FILE: CubeCL then logs the source of every kernel
it compiles. This script takes the sources of our conv kernels out of that log, compiles each one
with nvcc for Hopper (sm_90a, the target CubeCL's NVRTC call uses there), and counts the
tensor-core (HMMA/HGMMA), FMA and shared-memory-matrix-load instructions in the SASS that
`cuobjdump --dump-sass` prints, beside ptxas' register and spill figures.

Usage (GPU machine): python3 sass_check.py CUBECL_LOG OUT_DIR  -> prints a markdown table.
"""

import collections
import pathlib
import re
import subprocess
import sys

OURS = ("conv2d_cmma_kernel", "conv2d_patch_kernel", "conv2d_tiled_kernel")
COUNTED = ("HMMA", "HGMMA", "FFMA", "HFMA2", "LDSM", "LDS", "LDG", "STS", "BAR")


def kernels(log: str):
    """(name, source) of each logged kernel compilation."""
    for block in log.split("[START_KERNEL_COMPILATION]")[1:]:
        block = block.split("[END_KERNEL_COMPILATION]")[0]
        name = re.search(r"^name: (.*)$", block, re.M)
        source = re.search(r"```cpp\n(.*)\n```", block, re.S)
        if name and source:
            yield name.group(1).strip(), source.group(1)


def main():
    log = pathlib.Path(sys.argv[1]).read_text(errors="replace")
    out = pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    seen = set()
    rows = []
    # Rows are printed as each kernel is compiled, so that a run cut short keeps what it did.
    print("| kernel | file | ptxas | " + " | ".join(COUNTED) + " |")
    print("|---|---|---|" + "---:|" * len(COUNTED), flush=True)

    def emit(name, stem, info, counts):
        rows.append(name)
        short = name if len(name) < 90 else name[:87] + "..."
        print(f"| {short} | {stem} | {info} | "
              + " | ".join(str(counts.get(k, 0)) for k in COUNTED) + " |", flush=True)

    for name, source in kernels(log):
        if not any(k in name for k in OURS) or source in seen:
            continue
        seen.add(source)
        stem = f"k{len(seen)}"
        cu = out / f"{stem}.cu"
        cu.write_text(source)
        cubin = out / f"{stem}.cubin"
        build = subprocess.run(
            ["nvcc", "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-Xptxas", "-v",
             "-o", str(cubin), str(cu)],
            capture_output=True, text=True)
        if build.returncode != 0:
            emit(name, stem, "nvcc failed: " + build.stderr.strip().splitlines()[-1], {})
            continue
        usage = re.search(r"Used (\d+) registers", build.stderr)
        spill = re.search(r"(\d+) bytes spill stores", build.stderr)
        sass = subprocess.run(["cuobjdump", "--dump-sass", str(cubin)],
                              capture_output=True, text=True).stdout
        (out / f"{stem}.sass").write_text(sass)
        counts = collections.Counter()
        for line in sass.splitlines():
            m = re.search(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9]*)", line)
            if m:
                counts[m.group(1)] += 1
        regs = usage.group(1) if usage else "?"
        spills = spill.group(1) if spill else "?"
        emit(name, stem, f"{regs} regs, {spills} B spilled", counts)
    if not rows:
        print("no conv kernel of ours in the log")
        sys.exit(1)


if __name__ == "__main__":
    main()
