#!/usr/bin/env python3
"""Markdown table of the median step times in a log of scripts/gpu_steps.sh (steps-log.txt):
one row per bench and argument, one column per build, each cell the medians of the rounds and,
in bold, their median.

    python3 scripts/steps_table.py steps-log.txt
"""
import re
import statistics
import sys

UNITS = {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1.0, "s": 1e3}


def ms(cell):
    m = re.match(r"\s*([0-9.]+)\s*(ns|µs|us|ms|s)\s*$", cell)
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def main(path):
    build = None
    bench = None
    pending = None
    cells = {}  # (bench, arg) -> build -> [median ms per round]
    order = []
    builds = []
    for line in open(path, encoding="utf-8"):
        head = re.match(r"=== build (\S+) round", line)
        if head:
            build = head.group(1)
            if build not in builds:
                builds.append(build)
            continue
        line = line.rstrip("\n")
        # The tree's own "│" columns come first: they give the depth, and are not cells.
        prefix = re.match(r"^[│ ]*", line).group(0)
        depth = len(prefix) // 3
        parts = line[len(prefix):].split("│")
        if build is None:
            continue
        # A profiled run prints its profile between its name and its times.
        named = re.match(r"^[├╰]─ (\(.*?\))\s+profile", parts[0])
        if named:
            pending = named.group(1)
            continue
        if len(parts) < 4:
            continue
        label = re.sub(r"^[├╰─ ]*", "", parts[0])
        if ms(label) is not None:
            label, depth = pending or "?", 1
        # The first column holds the name and the fastest time; the median is the third.
        first = re.match(r"(.*?)\s{2,}(\S+ \S+)\s*$", label)
        if first:
            label = first.group(1)
        label = label.strip()
        median = ms(parts[2])
        if median is None:
            if depth == 0 and label:
                bench = label
            continue
        key = (bench, label) if depth > 0 else (label, "")
        if key not in cells:
            cells[key] = {}
            order.append(key)
        cells[key].setdefault(build, []).append(median)
    print("| bench | args | " + " | ".join(builds) + " |")
    print("|---|---|" + "---:|" * len(builds))
    for key in order:
        row = []
        for b in builds:
            xs = cells[key].get(b, [])
            if xs:
                row.append(" ".join(f"{x:.2f}" for x in xs) + f" **{statistics.median(xs):.2f}**")
            else:
                row.append("—")
        print(f"| {key[0]} | {key[1]} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
