#!/usr/bin/env python3
"""Generate the mechanical half of the Hetero backend: every method of Burn's backend op traits,
forwarded to the CPU backend `C`.

Usage: scripts/gen_forwarding.py [BURN_BACKEND_SRC]   (default: burn-backend 0.21.0 in ~/.cargo/registry)

Writes `src/ops/forwarded.rs` (the trait impls) and `tests/ops_list.txt` (one `Trait::method` per
line, which the conformance suite checks its coverage against). Methods listed in PLACED are not
forwarded: their bodies call the named function of `src/ops/placed.rs`, where the real work is;
those in REWRITTEN call the named function of `src/ops/broadcast.rs`, `channels.rs`,
`elementwise.rs`, `layout.rs`, `pool.rs` or `slice.rs`.
Re-run it when Burn is upgraded; the output is committed so that a build needs no Python.
"""
import glob
import os
import re
import sys

TRAITS = [
    ("FloatTensorOps", "ops/tensor.rs"),
    ("IntTensorOps", "ops/int_tensor.rs"),
    ("BoolTensorOps", "ops/bool_tensor.rs"),
    ("ModuleOps", "ops/modules/base.rs"),
    ("ActivationOps", "ops/activation.rs"),
    ("QTensorOps", "ops/qtensor.rs"),
]

# Containers generic over the backend: converted with crate::ops::rebind on the way in and out.
REBIND = [
    "DeformConv2dBackward",
    "MaxPool1dBackward",
    "MaxPool1dWithIndices",
    "MaxPool2dBackward",
    "MaxPool2dWithIndices",
    "QuantizationParametersPrimitive",
    "TensorPrimitive",
]
REBIND_RE = re.compile(r"^(" + "|".join(REBIND) + r")<Self>$")

# Ops that do real work in Hetero: method name -> function in crate::ops::placed.
PLACED = {
    "conv2d": "conv2d",
    "conv2d_x_backward": "conv2d_x_backward",
    "conv2d_weight_backward": "conv2d_weight_backward",
    "float_matmul": "float_matmul",
    "linear": "linear",
    "linear_x_backward": "linear_x_backward",
    "linear_weight_backward": "linear_weight_backward",
}

# CPU ops that Hetero runs through its own function (still on `C`, still timed as CPU ops): binary
# ops whose broadcasts and strided operands a CPU backend handles slowly, reshapes of strided views,
# elementwise ops a CPU backend runs on one thread.
REWRITTEN = {
    "float_add": "broadcast::float_add",
    "float_sub": "broadcast::float_sub",
    "float_mul": "broadcast::float_mul",
    "float_div": "broadcast::float_div",
    "float_reshape": "layout::float_reshape",
    "float_neg": "elementwise::float_neg",
    "float_add_scalar": "elementwise::float_add_scalar",
    "float_sub_scalar": "elementwise::float_sub_scalar",
    "float_mul_scalar": "elementwise::float_mul_scalar",
    "float_div_scalar": "elementwise::float_div_scalar",
    "relu": "elementwise::relu",
    "relu_backward": "elementwise::relu_backward",
    "conv2d_bias_backward": "channels::conv2d_bias_backward",
    "max_pool2d": "pool::max_pool2d",
    "max_pool2d_with_indices": "pool::max_pool2d_with_indices",
    "max_pool2d_with_indices_backward": "pool::max_pool2d_with_indices_backward",
    "float_slice": "slice::float_slice",
    "float_slice_assign": "slice::float_slice_assign",
    "float_zeros": "fill::float_zeros",
    "float_ones": "fill::float_ones",
    "float_cat": "fill::float_cat",
}


def skip_string(src, i):
    """src[i] is the opening quote of a string or raw string; return the index after it."""
    if src[i] == "r":
        j = i + 1
        hashes = 0
        while src[j] == "#":
            hashes += 1
            j += 1
        assert src[j] == '"'
        end = '"' + "#" * hashes
        k = src.index(end, j + 1)
        return k + len(end)
    j = i + 1
    while src[j] != '"':
        j += 2 if src[j] == "\\" else 1
    return j + 1


def skip_block(src, i):
    """src[i] == '{'; return the index after the matching '}' (strings, chars, comments aware)."""
    depth = 0
    n = len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            i = src.index("\n", i)
            continue
        if src.startswith("/*", i):
            i = src.index("*/", i) + 2
            continue
        if c == '"' or (c == "r" and re.match(r'r#*"', src[i:]) and not src[i - 1].isalnum()):
            i = skip_string(src, i)
            continue
        if c == "'":
            # char literal ('a', '\n', '{') versus lifetime ('a)
            m = re.match(r"'(\\.|[^\\'])'", src[i:])
            if m:
                i += len(m.group(0))
                continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced block")


def split_top(s, sep=","):
    parts, depth, cur = [], 0, ""
    s = s.replace("->", "\x00")
    for c in s:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        if c == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur)
    return [p.replace("\x00", "->").strip() for p in parts]


def trait_methods(src, trait):
    start = src.index(f"pub trait {trait}<B: Backend>")
    body_start = src.index("{", start)
    body_end = skip_block(src, body_start)
    body = src[body_start + 1 : body_end - 1]
    methods = []
    i = 0
    pending_cfg = False
    while i < len(body):
        if body.startswith("//", i):
            i = body.index("\n", i)
            continue
        if body.startswith("#[", i):
            j = body.index("]", i)
            attr = body[i : j + 1]
            if attr.startswith("#[cfg("):
                pending_cfg = True
            i = j + 1
            continue
        m = re.match(r"\s*(async\s+)?fn\s+(\w+)", body[i:])
        if m and body[i : i + m.end()].strip().startswith(("fn", "async")):
            is_async = bool(m.group(1))
            name = m.group(2)
            j = i + m.end()
            # signature runs to the first top-level '{' or ';'
            depth = 0
            k = j
            text = body[j:].replace("->", "\x00\x00")
            while True:
                c = text[k - j]
                if c in "(<[":
                    depth += 1
                elif c in ")>]":
                    depth -= 1
                elif c in "{;" and depth == 0:
                    break
                k += 1
            sig = body[j:k]
            if body[k] == "{":
                k = skip_block(body, k)
            else:
                k += 1
            if not pending_cfg:
                methods.append((name, is_async, sig.strip()))
            pending_cfg = False
            i = k
            continue
        i += 1
    return methods


def render(trait, name, is_async, sig):
    # sig: "<generics>(params) -> Ret where ..." ; B is the trait's backend parameter.
    sig = re.sub(r"\bB\b", "Self", sig)
    sig = sig.replace("crate::", "burn_backend::")
    sig = " ".join(sig.split())
    generics = ""
    if sig.startswith("<"):
        depth = 0
        for idx, c in enumerate(sig):
            depth += c == "<"
            depth -= c == ">"
            if depth == 0:
                generics = sig[: idx + 1]
                sig = sig[idx + 1 :].strip()
                break
    assert sig.startswith("("), (name, sig)
    depth = 0
    for idx, c in enumerate(sig):
        depth += c == "("
        depth -= c == ")"
        if depth == 0:
            params, rest = sig[1:idx], sig[idx + 1 :].strip()
            break
    args = []
    floats = []
    for p in split_top(params):
        pat, ty = (x.strip() for x in p.split(":", 1))
        pat = re.sub(r"^mut\s+", "", pat)
        assert "Self>>" not in ty or not any(r in ty for r in REBIND), (name, ty)
        args.append(f"rebind({pat})" if REBIND_RE.match(ty) else pat)
        if ty == "FloatTensor<Self>":
            floats.append(pat)
    call_args = ", ".join(args)
    turbofish = ""
    if generics:
        names = [g.split(":")[0].strip() for g in split_top(generics[1:-1])]
        names = [g for g in names if not g.startswith("'") and not g.startswith("const ")]
        if names:
            turbofish = "::<" + ", ".join(names) + ">"
    if name in PLACED:
        target = f"placed::{PLACED[name]}::<C, A>"
    elif name in REWRITTEN:
        target = f"{REWRITTEN[name]}::<C>"
    else:
        target = f"<C as {trait}<C>>::{name}{turbofish}"
    call = f"{target}({call_args})"
    if is_async:
        call += ".await"
    ret = rest[2:].strip() if rest.startswith("->") else ""
    assert not any(r + "<" in ret for r in REBIND) or REBIND_RE.match(ret), (name, ret)
    if REBIND_RE.match(ret):
        call = f"rebind({call})"
    head = f"{'async ' if is_async else ''}fn {name}{generics}({params}) {rest}".rstrip()
    trace = f'        #[cfg(feature = "trace-ops")]\n        crate::trace::hit("{trait}::{name}");\n'
    if name not in PLACED:
        # Placed ops record their own time, per layer.
        if floats:
            described = ", ".join(f"describe_operand(&{f})" for f in floats)
            trace += (
                f'        let _timer = crate::profile::CpuOpTimer::start_with("{name}", || vec![{described}]);\n'
            )
        else:
            trace += f'        let _timer = crate::profile::CpuOpTimer::start("{name}");\n'
    return f"    {head} {{\n{trace}        {call}\n    }}\n"


def main():
    src_root = sys.argv[1] if len(sys.argv) > 1 else None
    if not src_root:
        cands = glob.glob(os.path.expanduser("~/.cargo/registry/src/*/burn-backend-0.21.0/src/backend"))
        if not cands:
            sys.exit("burn-backend 0.21.0 sources not found: build the project once (cargo fetch)")
        src_root = cands[0]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = [
        "//! Every op of Burn's backend traits, forwarded to the CPU backend `C`.\n",
        "//!\n",
        "//! Generated by `scripts/gen_forwarding.py` from burn-backend 0.21.0; do not edit by hand.\n",
        "//! The ops that do real work are routed to [`super::placed`].\n",
        "#![allow(unused_mut, clippy::too_many_arguments, clippy::type_complexity)]\n\n",
        "use super::broadcast;\n",
        "use super::channels;\n",
        "use super::elementwise;\n",
        "use super::fill;\n",
        "use super::layout;\n",
        "use super::placed;\n",
        "use super::pool;\n",
        "use super::rebind::rebind;\n",
        "use super::slice;\n",
        "use crate::profile::describe_operand;\n",
        "use crate::{Accelerator, Hetero};\n",
        "use burn_backend::ops::*;\n",
        "use burn_backend::quantization::QuantScheme;\n",
        "use burn_backend::tensor::quantization::QuantizationParametersPrimitive;\n",
        "use burn_backend::tensor::{Device, *};\n",
        "use burn_backend::*;\n",
        "use core::future::Future;\n",
        "use core::ops::Range;\n\n",
    ]
    listing = []
    seen_placed = set()
    for trait, rel in TRAITS:
        src = open(os.path.join(src_root, rel)).read()
        methods = trait_methods(src, trait)
        out.append(f"impl<C: Backend, A: Accelerator> {trait}<Self> for Hetero<C, A> {{\n")
        for name, is_async, sig in methods:
            out.append(render(trait, name, is_async, sig))
            listing.append(f"{trait}::{name}")
            if name in PLACED:
                seen_placed.add(name)
        out.append("}\n\n")
    missing = set(PLACED) - seen_placed
    if missing:
        sys.exit(f"placed ops not found in the traits: {sorted(missing)}")
    with open(os.path.join(here, "src/ops/forwarded.rs"), "w") as f:
        f.write("".join(out).rstrip() + "\n")
    with open(os.path.join(here, "tests/ops_list.txt"), "w") as f:
        f.write("# Every method of Burn 0.21's backend op traits (generated by scripts/gen_forwarding.py).\n")
        f.write("\n".join(listing) + "\nTransactionOps::tr_execute\n")
    print(f"{len(listing)} methods")


if __name__ == "__main__":
    main()
