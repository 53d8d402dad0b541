//! The gradient entry points against f64 references: the forward with a transposed, flipped
//! weight (a conv's input gradient) and the weight gradient in partial sums, on every runtime
//! (`check_*` here, called by the wgpu tests and the `cuda_` ones).

use burn_hetero_kernels::{
    Conv2dBuffers, Conv2dProblem, ConvError, ConvPath, ConvPathUsed, ConvTypes, OperandType,
    OutputType, WeightGradBuffers, WeightGradTypes, conv2d_forward_flipped_async,
    conv2d_weight_grad_async, weight_grad_splits,
};
use cubecl::prelude::*;
use half::{bf16, f16};
use rand::Rng;

use crate::common::{
    Case, assert_no_failures, bound, case_rng, from_bytes_output, nan_bytes, reference_conv,
    rel_l2, to_bytes_operand,
};

/// The weight `[OC, C, KH, KW]` that the flipped read of `buffer` (`[C, OC, KH, KW]`) sees.
fn flip_transpose(p: &Conv2dProblem, buffer: &[f32]) -> Vec<f32> {
    let (oc_n, c_n, kh_n, kw_n) = (
        p.out_channels,
        p.in_channels,
        p.kernel_height,
        p.kernel_width,
    );
    let mut w = vec![0f32; buffer.len()];
    for o in 0..oc_n {
        for c in 0..c_n {
            for y in 0..kh_n {
                for x in 0..kw_n {
                    let src = ((c * oc_n + o) * kh_n + (kh_n - 1 - y)) * kw_n + (kw_n - 1 - x);
                    w[((o * c_n + c) * kh_n + y) * kw_n + x] = buffer[src];
                }
            }
        }
    }
    w
}

/// The f64 weight gradient of images `images` of the conv `p` (one group), OIHW.
fn reference_weight_grad(
    p: &Conv2dProblem,
    input: &[f32],
    output_grad: &[f32],
    images: std::ops::Range<usize>,
) -> Vec<f64> {
    let (oh_n, ow_n) = (p.out_height(), p.out_width());
    let (c_n, oc_n, kh_n, kw_n) = (
        p.in_channels,
        p.out_channels,
        p.kernel_height,
        p.kernel_width,
    );
    let mut grad = vec![0f64; oc_n * c_n * kh_n * kw_n];
    for n in images {
        for o in 0..oc_n {
            for oh in 0..oh_n {
                for ow in 0..ow_n {
                    let dy = output_grad[((n * oc_n + o) * oh_n + oh) * ow_n + ow] as f64;
                    for c in 0..c_n {
                        for y in 0..kh_n {
                            let ih = (oh * p.stride[0] + y * p.dilation[0]) as isize
                                - p.padding[0] as isize;
                            if ih < 0 || ih >= p.in_height as isize {
                                continue;
                            }
                            for x in 0..kw_n {
                                let iw = (ow * p.stride[1] + x * p.dilation[1]) as isize
                                    - p.padding[1] as isize;
                                if iw < 0 || iw >= p.in_width as isize {
                                    continue;
                                }
                                let xv = input[((n * c_n + c) * p.in_height + ih as usize)
                                    * p.in_width
                                    + iw as usize] as f64;
                                grad[((o * c_n + c) * kh_n + y) * kw_n + x] += dy * xv;
                            }
                        }
                    }
                }
            }
        }
    }
    grad
}

/// `values` rounded to `storage` and then, as the kernel does, to `operand` (f16 then bf16).
fn rounded(values: &[f32], storage: OperandType, operand: OperandType) -> Vec<f32> {
    values
        .iter()
        .map(|&v| {
            let v = match storage {
                OperandType::F16 => f16::from_f32(v).to_f32(),
                _ => v,
            };
            match operand {
                OperandType::F32 => v,
                OperandType::F16 => f16::from_f32(v).to_f32(),
                OperandType::BF16 => bf16::from_f32(v).to_f32(),
            }
        })
        .collect()
}

/// The one-group cases of a grid.
pub fn one_group(cases: &[Case]) -> Vec<Case> {
    cases
        .iter()
        .copied()
        .filter(|c| c.problem.groups == 1)
        .collect()
}

/// Runs `conv2d_forward_flipped_async` on every case (with and without bias) against the
/// reference conv with the transposed, flipped weight. Returns the kernels that ran.
pub fn check_flipped<R: Runtime>(
    client: &ComputeClient<R>,
    cases: &[Case],
    types: ConvTypes,
    path: ConvPath,
) -> Vec<ConvPathUsed> {
    let limit = bound(types.operand);
    let mut failures = Vec::new();
    let mut used = Vec::new();
    let mut worst = 0f64;
    for case in cases {
        let p = &case.problem;
        let mut rng = case_rng(&format!("flipped {}", case.name));
        let mut draw =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
        let input = draw(p.input_len());
        let buffer = draw(p.weight_len());
        let bias = draw(p.out_channels);
        for with_bias in [case.bias, !case.bias] {
            let label = format!("flipped {} ({p}, bias: {with_bias}, {types:?})", case.name);
            let bias = with_bias.then_some(bias.as_slice());
            let input_h = client.create_from_slice(&to_bytes_operand(&input, types.storage));
            let weight_h = client.create_from_slice(&to_bytes_operand(&buffer, types.storage));
            let bias_h = bias.map(|b| {
                client
                    .create_from_slice(&b.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
            });
            let output_h = client.create_from_slice(&nan_bytes(p.output_len(), types.output));
            let buffers = Conv2dBuffers {
                input: &input_h,
                weight: &weight_h,
                bias: bias_h.as_ref(),
                output: &output_h,
            };
            let ran = match conv2d_forward_flipped_async(client, buffers, p, types, path) {
                Ok(ran) => ran,
                Err(e) => {
                    failures.push(format!("{label}: {e}"));
                    continue;
                }
            };
            used.push(ran);
            let bytes = match client.read_one(output_h) {
                Ok(b) => b,
                Err(e) => {
                    failures.push(format!("{label}: reading the output failed: {e}"));
                    continue;
                }
            };
            let reference = reference_conv(p, &input, &flip_transpose(p, &buffer), bias);
            match rel_l2(&from_bytes_output(&bytes, types.output), &reference) {
                Ok(e) if e <= limit => worst = worst.max(e),
                Ok(e) => failures.push(format!("{label}: relative L2 {e:.3e} > {limit:e}")),
                Err(e) => failures.push(format!("{label}: {e}")),
            }
        }
    }
    assert_no_failures("", &failures);
    eprintln!(
        "flipped weight {types:?} {path:?}: {} cases x 2, worst relative L2 {worst:.3e}, kernels {used:?}",
        cases.len()
    );
    used
}

/// The split counts tried for a batch: 1, the chosen one, and every other divisor up to 4.
fn split_counts(p: &Conv2dProblem) -> Vec<usize> {
    let mut counts = vec![1, weight_grad_splits(p)];
    counts.extend((2..=4).filter(|s| p.batch.is_multiple_of(*s)));
    counts.push(p.batch);
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// One weight-gradient launch on NaN-poisoned partials: the partials read back.
fn launch_weight_grad<R: Runtime>(
    client: &ComputeClient<R>,
    p: &Conv2dProblem,
    input: &[f32],
    output_grad: &[f32],
    types: WeightGradTypes,
    splits: usize,
    path: ConvPath,
) -> Result<(ConvPathUsed, Vec<f64>), String> {
    let input_h = client.create_from_slice(&to_bytes_operand(input, types.input));
    let grad_h = client.create_from_slice(&to_bytes_operand(output_grad, types.output_grad));
    let partials_len = splits * p.weight_len();
    let partials_h = client.create_from_slice(&nan_bytes(partials_len, OutputType::F32));
    let buffers = WeightGradBuffers {
        input: &input_h,
        output_grad: &grad_h,
        partials: &partials_h,
    };
    let used = conv2d_weight_grad_async(client, buffers, p, types, splits, path)
        .map_err(|e| e.to_string())?;
    let bytes = client
        .read_one(partials_h)
        .map_err(|e| format!("reading the partials failed: {e}"))?;
    Ok((used, from_bytes_output(&bytes, OutputType::F32)))
}

/// Runs the weight gradient of every case with several split counts: each part against the
/// reference on its images (the operands rounded as the kernel rounds them), with the bound
/// of the operand type. Returns the kernels that ran.
pub fn check_weight_grad<R: Runtime>(
    client: &ComputeClient<R>,
    cases: &[Case],
    types: WeightGradTypes,
    path: ConvPath,
) -> Vec<ConvPathUsed> {
    let limit = bound(types.operand);
    let mut failures = Vec::new();
    let mut used = Vec::new();
    let mut worst = 0f64;
    for case in cases {
        let p = &case.problem;
        let mut rng = case_rng(&format!("weight grad {}", case.name));
        let mut draw =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
        let input = draw(p.input_len());
        let output_grad = draw(p.output_len());
        // The rounding of the buffers is part of what is tested: the reference sees the f32
        // values, except where the input is stored narrower than the operand type needs.
        let input_ref = if types.input == OperandType::F16 && types.operand == OperandType::BF16 {
            rounded(&input, OperandType::F16, OperandType::F32)
        } else {
            input.clone()
        };
        for splits in split_counts(p) {
            let label = format!("weight grad {} ({p}, {splits} parts, {types:?})", case.name);
            let partials =
                match launch_weight_grad(client, p, &input, &output_grad, types, splits, path) {
                    Ok((ran, partials)) => {
                        used.push(ran);
                        partials
                    }
                    Err(e) => {
                        failures.push(format!("{label}: {e}"));
                        continue;
                    }
                };
            let per = p.batch / splits;
            for (s, part) in partials.chunks(p.weight_len()).enumerate() {
                let reference =
                    reference_weight_grad(p, &input_ref, &output_grad, s * per..(s + 1) * per);
                match rel_l2(part, &reference) {
                    Ok(e) if e <= limit => worst = worst.max(e),
                    Ok(e) => failures.push(format!(
                        "{label}: part {s}: relative L2 {e:.3e} > {limit:e}"
                    )),
                    Err(e) => failures.push(format!("{label}: part {s}: {e}")),
                }
            }
        }
    }
    assert_no_failures("", &failures);
    eprintln!(
        "weight grad {types:?} {path:?}: {} cases, worst relative L2 {worst:.3e}, kernels {:?}",
        cases.len(),
        {
            let mut k = used.clone();
            k.dedup();
            k
        }
    );
    used
}

/// An input stored as f16 feeding bf16 operands gives the bits of the same input rounded to
/// bf16 on the host (f16, then bf16: both round to nearest, ties to even).
pub fn check_f16_input_for_bf16<R: Runtime>(
    client: &ComputeClient<R>,
    cases: &[Case],
    path: ConvPath,
) {
    let mut failures = Vec::new();
    for case in cases {
        let p = &case.problem;
        let mut rng = case_rng(&format!("f16 for bf16 {}", case.name));
        let mut draw =
            |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
        let input = draw(p.input_len());
        let output_grad = draw(p.output_len());
        let splits = weight_grad_splits(p);
        let mixed = WeightGradTypes {
            input: OperandType::F16,
            ..WeightGradTypes::new(OperandType::BF16)
        };
        let host = rounded(&input, OperandType::F16, OperandType::BF16);
        let a = launch_weight_grad(client, p, &input, &output_grad, mixed, splits, path);
        let b = launch_weight_grad(
            client,
            p,
            &host,
            &output_grad,
            WeightGradTypes::new(OperandType::BF16),
            splits,
            path,
        );
        match (a, b) {
            (Ok((_, a)), Ok((_, b))) => {
                let differ = a
                    .iter()
                    .zip(&b)
                    .filter(|(x, y)| x.to_bits() != y.to_bits())
                    .count();
                if differ > 0 {
                    failures.push(format!(
                        "{} ({p}): {differ} of {} values differ",
                        case.name,
                        a.len()
                    ));
                }
            }
            (Err(e), _) | (_, Err(e)) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    assert_no_failures("", &failures);
}

/// Bad calls of the gradient entry points are refused with errors that name the problem.
pub fn check_refusals<R: Runtime>(client: &ComputeClient<R>) {
    let p = Conv2dProblem::new(4, 3, [6, 6], 5, [3, 3]).with_padding([1, 1]);
    let big = client.empty(1 << 16);
    let small = client.empty(8);
    let buffers = |partials| WeightGradBuffers {
        input: &big,
        output_grad: &big,
        partials,
    };
    let types = WeightGradTypes::new(OperandType::F32);
    let refused = |r: Result<ConvPathUsed, ConvError>| r.expect_err("the call must be refused");
    let e = refused(conv2d_weight_grad_async(
        client,
        buffers(&big),
        &p,
        types,
        3,
        ConvPath::Tiled,
    ));
    assert!(e.to_string().contains("divide the batch"), "{e}");
    let e = refused(conv2d_weight_grad_async(
        client,
        buffers(&big),
        &p,
        types,
        0,
        ConvPath::Tiled,
    ));
    assert!(e.to_string().contains("divide the batch"), "{e}");
    let e = refused(conv2d_weight_grad_async(
        client,
        buffers(&big),
        &p,
        WeightGradTypes {
            input: OperandType::F16,
            ..WeightGradTypes::new(OperandType::F32)
        },
        1,
        ConvPath::Tiled,
    ));
    assert!(matches!(e, ConvError::Unsupported(_)), "{e}");
    let grouped = Conv2dProblem::new(4, 4, [6, 6], 4, [3, 3]).with_groups(2);
    let e = refused(conv2d_weight_grad_async(
        client,
        buffers(&big),
        &grouped,
        types,
        1,
        ConvPath::Tiled,
    ));
    assert!(e.to_string().contains("one group"), "{e}");
    let e = refused(conv2d_weight_grad_async(
        client,
        buffers(&small),
        &p,
        types,
        2,
        ConvPath::Tiled,
    ));
    assert!(
        matches!(
            e,
            ConvError::BufferTooSmall {
                buffer: "partials",
                ..
            }
        ),
        "{e}"
    );
    let bad = Conv2dProblem::new(4, 3, [2, 2], 5, [3, 3]);
    let e = refused(conv2d_weight_grad_async(
        client,
        buffers(&big),
        &bad,
        types,
        1,
        ConvPath::Tiled,
    ));
    assert!(matches!(e, ConvError::KernelTooLarge { .. }), "{e}");
    let conv = Conv2dBuffers {
        input: &big,
        weight: &big,
        bias: None,
        output: &big,
    };
    let e = refused(conv2d_forward_flipped_async(
        client,
        conv,
        &grouped,
        ConvTypes::new(OperandType::F32),
        ConvPath::Tiled,
    ));
    assert!(e.to_string().contains("one group"), "{e}");
}
