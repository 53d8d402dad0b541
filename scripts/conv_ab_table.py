#!/usr/bin/env python3
"""Summarises the `conv_ab` stage of scripts/gpu_cpu.sh: reads its conv-ab-log.txt (divan
output of two cpu_ops builds, alternated round by round) and prints a markdown table of
burn-hetero's conv medians, each build's median over the rounds and their ratio.

Usage: scripts/conv_ab_table.py conv-ab-log.txt [BASE NEW]   (default cpu_ops_base cpu_ops)
"""
import collections
import re
import statistics
import sys

UNITS = {"ns": 1e-3, "µs": 1.0, "ms": 1e3, "s": 1e6}


def runs(path):
    """Yields (build, text) for each `=== conv-ab-BUILD-ROUND.txt` section."""
    build, lines = None, []
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^=== conv-ab-(.+)-\d+\.txt", line)
        if m:
            if build:
                yield build, lines
            build, lines = m.group(1), []
        else:
            lines.append(line)
    if build:
        yield build, lines


def hetero_medians(lines):
    """{(op, case): median µs} of the rows under a `Hetero<...>` backend."""
    out, op, hetero = {}, None, False
    for line in lines:
        m = re.match(r"^([│├╰ ]*)[├╰]─ (\S+)", line)
        if not m:
            continue
        depth, name = len(m.group(1)) // 3, m.group(2)
        if depth == 0:
            op = name
        elif depth == 1:
            hetero = name.startswith("Hetero")
        elif hetero:
            value, unit = line.split("│")[-4].split()
            out[(op, name)] = float(value) * UNITS[unit]
    return out


def main():
    path = sys.argv[1]
    base, new = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 3 else ("cpu_ops_base", "cpu_ops")
    times = collections.defaultdict(lambda: collections.defaultdict(list))
    for build, lines in runs(path):
        for key, us in hetero_medians(lines).items():
            times[key][build].append(us)
    print(f"| op | case | {base} µs | {new} µs | {new}/{base} | rounds |")
    print("|---|---|---:|---:|---:|---:|")
    for (op, case), by in sorted(times.items()):
        a, b = statistics.median(by[base]), statistics.median(by[new])
        print(f"| {op} | {case} | {a:.1f} | {b:.1f} | {b / a:.3f} | {len(by[new])} |")


if __name__ == "__main__":
    main()
