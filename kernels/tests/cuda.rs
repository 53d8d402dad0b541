//! CUDA checks for the GPU machine, `#[ignore]`d: run them with `--ignored cuda_`. Without a
//! CUDA device they fail with a message that says so.

use std::time::Instant;

use burn_hetero_kernels::{
    Conv2dBuffers, Conv2dProblem, ConvPath, ConvPathUsed, ConvTypes, OperandType, OutputType,
    WeightGradTypes, auto_path, cmma_supported, conv2d_forward, conv2d_forward_async,
};
use cubecl::cuda::{CudaDevice, CudaRuntime};
use cubecl::prelude::*;

use crate::common::{check_cast_in_kernel, check_grid, large_grid, small_grid, to_bytes_operand};
use crate::grad::{
    check_f16_input_for_bf16, check_flipped, check_refusals, check_weight_grad, one_group,
};

/// The cmma correctness checks, for any runtime whose device supports cmma with `operand`:
/// the small grid, f32 output and f16 output.
pub fn cmma_checks<R: Runtime>(client: &ComputeClient<R>, operand: OperandType) {
    assert!(
        cmma_supported(client, operand),
        "the device does not support the cmma path with {operand:?} operands"
    );
    let types = ConvTypes::new(operand);
    let result = check_grid(
        client,
        &small_grid(),
        types,
        ConvPath::Cmma,
        Some(ConvPath::Cmma),
    );
    // The grid has problems for both cmma kernels where the patch kernel exists (CUDA).
    assert!(
        result.runs_of(ConvPathUsed::Cmma) > 0,
        "{:?}",
        result.kernels
    );
    check_grid(
        client,
        &small_grid(),
        types.with_output(OutputType::F16),
        ConvPath::Cmma,
        Some(ConvPath::Cmma),
    );
}

fn cuda_client() -> ComputeClient<CudaRuntime> {
    let client = std::panic::catch_unwind(|| CudaRuntime::client(&CudaDevice::default()));
    match client {
        Ok(client) => client,
        Err(_) => panic!(
            "no usable CUDA device (driver or GPU missing): the cuda_ tests need an NVIDIA GPU; \
             they are run deliberately on the GPU machine with `--ignored cuda_`"
        ),
    }
}

fn all_cases() -> Vec<crate::common::Case> {
    let mut cases = small_grid();
    cases.extend(large_grid());
    cases
}

#[test]
#[ignore = "needs a CUDA GPU; run with --ignored cuda_"]
fn cuda_cmma_f16() {
    let client = cuda_client();
    cmma_checks(&client, OperandType::F16);
    let types = ConvTypes::new(OperandType::F16);
    let result = check_grid(
        &client,
        &large_grid(),
        types,
        ConvPath::Cmma,
        Some(ConvPath::Cmma),
    );
    assert!(
        result.runs_of(ConvPathUsed::CmmaPatch) > 0,
        "{:?}",
        result.kernels
    );
    assert!(
        result.runs_of(ConvPathUsed::Cmma) > 0,
        "{:?}",
        result.kernels
    );
}

#[test]
#[ignore = "needs a CUDA GPU; run with --ignored cuda_"]
fn cuda_cmma_bf16() {
    let client = cuda_client();
    cmma_checks(&client, OperandType::BF16);
    let types = ConvTypes::new(OperandType::BF16);
    check_grid(
        &client,
        &large_grid(),
        types,
        ConvPath::Cmma,
        Some(ConvPath::Cmma),
    );
}

#[test]
#[ignore = "needs a CUDA GPU; run with --ignored cuda_"]
fn cuda_cmma_from_f32_buffers() {
    let client = cuda_client();
    for operand in [OperandType::F16, OperandType::BF16] {
        let types = ConvTypes::new(operand).with_storage(OperandType::F32);
        check_grid(
            &client,
            &small_grid(),
            types,
            ConvPath::Cmma,
            Some(ConvPath::Cmma),
        );
        let ran = check_cast_in_kernel(&client, &all_cases(), types, ConvPath::Cmma);
        for kernel in [ConvPathUsed::Cmma, ConvPathUsed::CmmaPatch] {
            assert!(ran.runs_of(kernel) > 0, "{:?}", ran.kernels);
        }
        check_cast_in_kernel(
            &client,
            &small_grid(),
            types.with_output(OutputType::F16),
            ConvPath::Cmma,
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU; run with --ignored cuda_"]
fn cuda_gradients() {
    let client = cuda_client();
    let cases = one_group(&all_cases());
    for operand in [OperandType::F16, OperandType::BF16] {
        // The input gradient's weight read flipped: the patch kernel for stride 1, the
        // general cmma kernel for the rest.
        let used = check_flipped(&client, &cases, ConvTypes::new(operand), ConvPath::Auto);
        for kernel in [ConvPathUsed::Cmma, ConvPathUsed::CmmaPatch] {
            assert!(used.contains(&kernel), "{operand:?}: {used:?}");
        }
        let used = check_weight_grad(
            &client,
            &cases,
            WeightGradTypes::new(operand),
            ConvPath::Auto,
        );
        assert!(
            used.iter().all(|u| *u == ConvPathUsed::Cmma),
            "{operand:?}: {used:?}"
        );
    }
    // The forward's f16 input for a bf16 gradient, rounded in the kernel.
    let mixed = WeightGradTypes {
        input: OperandType::F16,
        ..WeightGradTypes::new(OperandType::BF16)
    };
    check_weight_grad(&client, &cases, mixed, ConvPath::Auto);
    check_f16_input_for_bf16(&client, &cases, ConvPath::Auto);
    check_weight_grad(
        &client,
        &one_group(&small_grid()),
        WeightGradTypes::new(OperandType::F32),
        ConvPath::Tiled,
    );
    check_refusals(&client);
}

#[test]
#[ignore = "needs a CUDA GPU; run with --ignored cuda_"]
fn cuda_tiled_f16() {
    let client = cuda_client();
    let types = ConvTypes::new(OperandType::F16);
    check_grid(
        &client,
        &all_cases(),
        types,
        ConvPath::Tiled,
        Some(ConvPath::Tiled),
    );
}

#[test]
#[ignore = "needs a CUDA GPU; run with --ignored cuda_"]
fn cuda_tiled_bf16() {
    let client = cuda_client();
    let types = ConvTypes::new(OperandType::BF16);
    check_grid(
        &client,
        &all_cases(),
        types,
        ConvPath::Tiled,
        Some(ConvPath::Tiled),
    );
}

#[test]
#[ignore = "needs a CUDA GPU; run with --ignored cuda_"]
fn cuda_tiled_f32() {
    let client = cuda_client();
    let types = ConvTypes::new(OperandType::F32);
    check_grid(
        &client,
        &all_cases(),
        types,
        ConvPath::Tiled,
        Some(ConvPath::Tiled),
    );
}

#[test]
#[ignore = "needs a CUDA GPU; run with --ignored cuda_"]
fn cuda_auto_picks_cmma_for_half() {
    let client = cuda_client();
    let p = large_grid()[0].problem;
    assert_eq!(
        auto_path(&client, &p, OperandType::F16),
        ConvPathUsed::CmmaPatch
    );
    assert_eq!(
        auto_path(&client, &p, OperandType::BF16),
        ConvPathUsed::CmmaPatch
    );
    assert_eq!(
        auto_path(&client, &p, OperandType::F32),
        ConvPathUsed::Tiled
    );
    // Stride 2 and few input channels take the general cmma kernel.
    let strided = p.with_stride([2, 2]);
    assert_eq!(
        auto_path(&client, &strided, OperandType::F16),
        ConvPathUsed::Cmma
    );
    let mnist = large_grid()[1].problem;
    assert_eq!(
        auto_path(&client, &mnist, OperandType::F16),
        ConvPathUsed::Cmma
    );
    let types = ConvTypes::new(OperandType::F16);
    check_grid(
        &client,
        &large_grid()[..2],
        types,
        ConvPath::Auto,
        Some(ConvPath::Cmma),
    );
}

/// Timings (no assertion): per launch, of a few shapes, each path, f16/bf16/f32 operands and
/// f32 output, after a warm-up: wall time of `conv2d_forward` (with its flush) and of
/// `conv2d_forward_async`, and device time (CubeCL's profiler) of the async launches.
/// Run with `--ignored --nocapture cuda_bench`; `BENCH_ONLY=text` keeps the f16 cmma runs of
/// the shapes whose name contains `text` (one kernel to look at under a profiler).
#[test]
#[ignore = "needs a CUDA GPU; run with --ignored --nocapture cuda_bench"]
fn cuda_bench() {
    let client = cuda_client();
    let only = std::env::var("BENCH_ONLY").ok();
    let shapes = [
        (
            "resnet20 16->32 s2 32x16x32x32",
            Conv2dProblem::new(32, 16, [32, 32], 32, [3, 3])
                .with_padding([1, 1])
                .with_stride([2, 2]),
        ),
        (
            "resnet20 16ch 128x16x32x32",
            Conv2dProblem::new(128, 16, [32, 32], 16, [3, 3]).with_padding([1, 1]),
        ),
        (
            "resnet20 32ch 128x32x16x16",
            Conv2dProblem::new(128, 32, [16, 16], 32, [3, 3]).with_padding([1, 1]),
        ),
        (
            "resnet20 64ch 128x64x8x8",
            Conv2dProblem::new(128, 64, [8, 8], 64, [3, 3]).with_padding([1, 1]),
        ),
        (
            "mnist conv1 64x1x28x28->20 5x5",
            Conv2dProblem::new(64, 1, [28, 28], 20, [5, 5]),
        ),
        (
            "mnist conv2 64x20x12x12->50 5x5",
            Conv2dProblem::new(64, 20, [12, 12], 50, [5, 5]),
        ),
        (
            "large 256x64x56x56->64 3x3",
            Conv2dProblem::new(256, 64, [56, 56], 64, [3, 3]).with_padding([1, 1]),
        ),
    ];
    let operands: &[OperandType] = if only.is_some() {
        &[OperandType::F16]
    } else {
        &[OperandType::F16, OperandType::BF16, OperandType::F32]
    };
    for &operand in operands {
        for (name, p) in &shapes {
            if only
                .as_ref()
                .is_some_and(|text| !name.contains(text.as_str()))
            {
                continue;
            }
            let input =
                client.create_from_slice(&to_bytes_operand(&vec![0.5; p.input_len()], operand));
            let weight =
                client.create_from_slice(&to_bytes_operand(&vec![0.25; p.weight_len()], operand));
            let output = client.empty(p.output_len() * 4);
            let buffers = Conv2dBuffers {
                input: &input,
                weight: &weight,
                bias: None,
                output: &output,
            };
            for path in [ConvPath::Cmma, ConvPath::Tiled] {
                if path == ConvPath::Cmma && !cmma_supported(&client, operand) {
                    continue;
                }
                if only.is_some() && path == ConvPath::Tiled {
                    continue;
                }
                let types = ConvTypes::new(operand);
                let iters = if p.flops() > 10_000_000_000 { 20 } else { 200 };
                let sync = || cubecl::future::block_on(client.sync()).unwrap();
                let mut used = None;
                for _ in 0..3 {
                    used = Some(conv2d_forward(&client, buffers, p, types, path).unwrap());
                }
                sync();
                let start = Instant::now();
                for _ in 0..iters {
                    conv2d_forward(&client, buffers, p, types, path).unwrap();
                }
                sync();
                let checked = start.elapsed().as_secs_f64() / iters as f64;
                let start = Instant::now();
                for _ in 0..iters {
                    conv2d_forward_async(&client, buffers, p, types, path).unwrap();
                }
                sync();
                let asynchronous = start.elapsed().as_secs_f64() / iters as f64;
                let (_, ticks) = client
                    .profile(
                        || {
                            for _ in 0..iters {
                                conv2d_forward_async(&client, buffers, p, types, path).unwrap();
                            }
                        },
                        "bench",
                    )
                    .unwrap();
                let device = cubecl::future::block_on(ticks.resolve())
                    .duration()
                    .as_secs_f64()
                    / iters as f64;
                println!(
                    "bench {operand:?} {:?} {name}: wall {:.1} us (async {:.1} us), device {:.1} us = {:.1} TFLOP/s",
                    used.unwrap(),
                    checked * 1e6,
                    asynchronous * 1e6,
                    device * 1e6,
                    p.flops() as f64 / device / 1e12
                );
            }
        }
    }
}
