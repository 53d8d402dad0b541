#!/usr/bin/env python3
"""PyTorch's CPU time for the ops that `cargo bench -p burn-hetero-benches --bench cpu_ops` times,
on the same shapes, so that the two tables can be read side by side (run both in one call).

Each op is the ATen call PyTorch's autograd makes for it (e.g. `convolution_backward` with one
output asked for, `native_batch_norm_backward`); operands are fresh uniform values in [0, 1) as
Burn's default distribution draws, allocated once; the median of `--samples` timed calls after
`--warmup` untimed ones. Prints one markdown table: op (the bench's function name), arguments,
median and fastest µs.

    python3 scripts/torch_cpu_ops.py --threads 16 [--only conv] [--output FILE]
"""

import argparse
import statistics
import time

import torch

SHAPE = (32, 16, 32, 32)
EPSILON = 1e-5
CONVS = [
    ("16x32x32-3x3", SHAPE, (16, 16, 3, 3), 1),
    ("16x32x32-3x3-s2", SHAPE, (32, 16, 3, 3), 2),
    ("64x8x8-3x3", (32, 64, 8, 8), (64, 64, 3, 3), 1),
]
POOL_INPUT = (64, 20, 24, 24)
LINEAR = (64, 800, 500)


def rand(*shape):
    return torch.rand(*shape, dtype=torch.float32)


def cases():
    """(op, args, callable) for every op."""
    aten = torch.ops.aten
    out = []

    for name, x_shape, w_shape, stride in CONVS:
        x, w = rand(*x_shape), rand(*w_shape)
        y_shape = (x_shape[0], w_shape[0], x_shape[2] // stride, x_shape[3] // stride)
        g = rand(*y_shape)
        conv = dict(stride=[stride, stride], padding=[1, 1], dilation=[1, 1])

        def backward(mask, x=x, w=w, g=g, conv=conv):
            return aten.convolution_backward(
                g, x, w, None, conv["stride"], conv["padding"], conv["dilation"],
                False, [0, 0], 1, mask)

        out.append(("conv2d_forward", name,
                    lambda x=x, w=w, conv=conv: torch.nn.functional.conv2d(x, w, None, **conv)))
        out.append(("conv2d_x_backward", name, lambda b=backward: b([True, False, False])))
        out.append(("conv2d_weight_backward", name, lambda b=backward: b([False, True, False])))

    x, y = rand(*SHAPE), rand(*SHAPE)
    relu_out = torch.relu(rand(*SHAPE))
    out.append(("relu", "", lambda: torch.relu(x)))
    out.append(("relu_backward", "", lambda: aten.threshold_backward(y, relu_out, 0.0)))
    out.append(("add", "", lambda: x + y))
    per_channel = rand(1, SHAPE[1], 1, 1)
    out.append(("mul_per_channel", "", lambda: x * per_channel))

    gamma, beta = rand(SHAPE[1]), rand(SHAPE[1])
    running_mean, running_var = torch.zeros(SHAPE[1]), torch.ones(SHAPE[1])

    def bn_forward():
        return aten.native_batch_norm(x, gamma, beta, running_mean, running_var, True, 0.1,
                                      EPSILON)

    _, save_mean, save_invstd = bn_forward()
    grad = rand(*SHAPE)
    out.append(("batch_norm_forward", "", bn_forward))
    out.append(("batch_norm_backward", "", lambda: aten.native_batch_norm_backward(
        grad, x, gamma, running_mean, running_var, save_mean, save_invstd, True, EPSILON,
        [True, True, True])))
    residual = rand(*SHAPE)

    def bn_relu_forward():
        return torch.relu(bn_forward()[0] + residual)

    bn_relu_out = bn_relu_forward()

    def bn_relu_backward():
        g = aten.threshold_backward(grad, bn_relu_out, 0.0)
        return aten.native_batch_norm_backward(
            g, x, gamma, running_mean, running_var, save_mean, save_invstd, True, EPSILON,
            [True, True, True])

    out.append(("batch_norm_relu_forward", "", bn_relu_forward))
    out.append(("batch_norm_relu_backward", "", bn_relu_backward))
    w = rand(800, 500)
    out.append(("mul_scalar", "", lambda: w * 0.01))

    px = rand(*POOL_INPUT)
    pooled, indices = aten.max_pool2d_with_indices(px, [2, 2], [2, 2], [0, 0], [1, 1], False)
    pgrad = rand(*pooled.shape)
    out.append(("max_pool2d_with_indices", "",
                lambda: aten.max_pool2d_with_indices(px, [2, 2], [2, 2], [0, 0], [1, 1], False)))
    out.append(("max_pool2d_backward", "", lambda: aten.max_pool2d_with_indices_backward(
        pgrad, px, [2, 2], [2, 2], [0, 0], [1, 1], False, indices)))

    rows, d_in, d_out = LINEAR
    lx, lw, lb, lg = rand(rows, d_in), rand(d_in, d_out), rand(d_out), rand(rows, d_out)
    out.append(("linear", "", lambda: torch.addmm(lb, lx, lw)))
    out.append(("linear_x_backward", "", lambda: lg @ lw.t()))
    out.append(("linear_weight_backward", "", lambda: lx.t() @ lg))

    # ResNet20's logits at batch 128; the bench times the forward and the input gradient of
    # its sum, so the backward's incoming gradient is ones.
    logits, ones = rand(128, 10), torch.ones(128, 10)

    def log_softmax_both_ways():
        output = aten._log_softmax(logits, 1, False)
        return aten._log_softmax_backward_data(ones, output, 1, torch.float32)

    out.append(("log_softmax", "", log_softmax_both_ways))

    param = torch.nn.Parameter(rand(800, 500))
    param.grad = rand(800, 500)
    for foreach in (False, True):
        sgd = torch.optim.SGD([param], lr=0.01, momentum=0.9, weight_decay=1e-4,
                              foreach=foreach)
        sgd.step()
        out.append(("sgd_step", "foreach" if foreach else "for-loop", sgd.step))
    return out


def time_us(fn, warmup, samples):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times), min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--only", default="", help="ops whose name contains this")
    parser.add_argument("--output", help="also write the table to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lines = [
        f"PyTorch {torch.__version__}, {args.threads} threads, median of {args.samples}",
        "",
        "| op | args | PyTorch CPU µs (median) | fastest |",
        "|---|---|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    with torch.no_grad():
        for op, arg, fn in cases():
            if args.only not in op:
                continue
            median, fastest = time_us(fn, args.warmup, args.samples)
            line = f"| {op} | {arg} | {median:.1f} | {fastest:.1f} |"
            print(line, flush=True)
            lines.append(line)
    if args.output:
        with open(args.output, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
