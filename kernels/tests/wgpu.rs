//! The conv grid on the default wgpu device (Vulkan through SPIR-V; lavapipe on CI).

use burn_hetero_kernels::{
    Conv2dProblem, ConvError, ConvPath, ConvPathUsed, ConvTypes, OperandType, OutputType,
    WeightGradTypes, auto_path, cmma_path_kernel, cmma_supported, operand_supported,
};
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};

use crate::common::{Case, check_cast_in_kernel, check_grid, launch_error, small_grid};
use crate::grad::{check_flipped, check_refusals, check_weight_grad, one_group};

/// The client of the default wgpu device.
pub fn client() -> ComputeClient<WgpuRuntime> {
    WgpuRuntime::client(&WgpuDevice::default())
}

/// The small grid on the tiled kernel with `types`.
fn check_tiled(client: &ComputeClient<WgpuRuntime>, types: ConvTypes) {
    check_grid(
        client,
        &small_grid(),
        types,
        ConvPath::Tiled,
        Some(ConvPath::Tiled),
    );
}

#[test]
fn tiled_f32() {
    let types = ConvTypes::new(OperandType::F32);
    check_tiled(&client(), types);
}

#[test]
fn tiled_f16() {
    let types = ConvTypes::new(OperandType::F16);
    check_tiled(&client(), types);
}

#[test]
fn tiled_f16_output_f16() {
    let types = ConvTypes::new(OperandType::F16).with_output(OutputType::F16);
    check_tiled(&client(), types);
}

#[test]
fn tiled_f16_from_f32_buffers() {
    let types = ConvTypes::new(OperandType::F16).with_storage(OperandType::F32);
    let client = client();
    check_tiled(&client, types);
    check_cast_in_kernel(&client, &small_grid(), types, ConvPath::Tiled);
}

#[test]
fn tiled_bf16() {
    let client = client();
    if !operand_supported(&client, OperandType::BF16) {
        eprintln!("tiled_bf16 skipped: this device cannot store bf16 (lavapipe cannot)");
        return;
    }
    let types = ConvTypes::new(OperandType::BF16);
    check_tiled(&client, types);
}

/// Auto keeps to the tiled kernel on wgpu (the cmma kernels are validated on CUDA); the cmma grid
/// runs where the device supports cmma, and asking for cmma elsewhere is an `Unsupported` error.
#[test]
fn auto_and_cmma() {
    let client = client();
    let problem = small_grid()[2].problem;
    for operand in [OperandType::F32, OperandType::F16, OperandType::BF16] {
        let supported = cmma_supported(&client, operand);
        assert_eq!(
            auto_path(&client, &problem, operand),
            ConvPathUsed::Tiled,
            "{operand:?}"
        );
        if supported {
            // Outside CUDA the cmma path is the general kernel.
            assert_eq!(cmma_path_kernel(&client, &problem), ConvPathUsed::Cmma);
        }
        if !operand_supported(&client, operand) {
            continue;
        }
        if supported {
            crate::cuda::cmma_checks(&client, operand);
        } else {
            eprintln!("cmma path with {operand:?} operands skipped: not supported by this device");
            let sizes = [
                problem.input_len() * 4,
                problem.weight_len() * 4,
                0,
                problem.output_len() * 4,
            ];
            let err = launch_error(
                &client,
                &problem,
                ConvTypes::new(operand),
                ConvPath::Cmma,
                sizes,
            );
            assert!(matches!(err, ConvError::Unsupported(_)), "{err}");
        }
    }
    // f32 operands never take the cmma path.
    assert!(!cmma_supported(&client, OperandType::F32));
    // Auto runs (and reports) the picked path.
    let types = ConvTypes::new(OperandType::F16);
    let expected = auto_path(&client, &problem, OperandType::F16).path();
    check_grid(
        &client,
        &small_grid()[..3],
        types,
        ConvPath::Auto,
        Some(expected),
    );
}

#[test]
fn bf16_refused_where_not_stored() {
    let client = client();
    if operand_supported(&client, OperandType::BF16) {
        eprintln!("bf16_refused_where_not_stored skipped: this device stores bf16");
        return;
    }
    let p = small_grid()[0].problem;
    let sizes = [p.input_len() * 2, p.weight_len() * 2, 0, p.output_len() * 4];
    let err = launch_error(
        &client,
        &p,
        ConvTypes::new(OperandType::BF16),
        ConvPath::Tiled,
        sizes,
    );
    assert!(
        matches!(err, ConvError::Unsupported(_)) && err.to_string().contains("BF16"),
        "{err}"
    );
}

#[test]
fn flipped_weight_tiled() {
    let client = client();
    let cases = one_group(&small_grid());
    for types in [
        ConvTypes::new(OperandType::F32),
        ConvTypes::new(OperandType::F16),
        ConvTypes::new(OperandType::F16).with_storage(OperandType::F32),
    ] {
        let used = check_flipped(&client, &cases, types, ConvPath::Tiled);
        assert!(used.iter().all(|u| *u == ConvPathUsed::Tiled), "{used:?}");
    }
}

#[test]
fn weight_grad_tiled() {
    let client = client();
    let mut cases = one_group(&small_grid());
    // A batch that splits into 2, 4 and 8 parts.
    cases.push(Case {
        name: "batch 8 stride 2",
        problem: Conv2dProblem::new(8, 4, [10, 9], 6, [3, 3])
            .with_stride([2, 2])
            .with_padding([1, 1]),
        bias: false,
    });
    for types in [
        WeightGradTypes::new(OperandType::F32),
        WeightGradTypes::new(OperandType::F16),
        WeightGradTypes {
            input: OperandType::F32,
            ..WeightGradTypes::new(OperandType::F16)
        },
    ] {
        let used = check_weight_grad(&client, &cases, types, ConvPath::Tiled);
        assert!(used.iter().all(|u| *u == ConvPathUsed::Tiled), "{used:?}");
    }
    // Auto keeps to the tiled kernel here, as for the forward.
    let used = check_weight_grad(
        &client,
        &cases[..3],
        WeightGradTypes::new(OperandType::F16),
        ConvPath::Auto,
    );
    assert!(used.iter().all(|u| *u == ConvPathUsed::Tiled), "{used:?}");
}

#[test]
fn gradient_refusals() {
    check_refusals(&client());
}
