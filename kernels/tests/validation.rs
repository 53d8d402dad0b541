//! Bad problems, buffers and paths are refused with errors that say what is wrong.

use burn_hetero_kernels::{Conv2dProblem, ConvError, ConvPath, ConvTypes, OperandType, OutputType};

use crate::common::launch_error;
use crate::wgpu::client;

fn base() -> Conv2dProblem {
    Conv2dProblem::new(2, 4, [8, 8], 6, [3, 3]).with_padding([1, 1])
}

fn message(p: &Conv2dProblem) -> String {
    p.validate().expect_err("must be invalid").to_string()
}

#[test]
fn valid_problem_and_sizes() {
    let p = base().with_stride([2, 1]).with_dilation([1, 2]);
    p.validate().unwrap();
    // (8 + 2 - 3) / 2 + 1 = 4, (8 + 2 - 5) / 1 + 1 = 6
    assert_eq!((p.out_height(), p.out_width()), (4, 6));
    assert_eq!(p.output_shape(), [2, 6, 4, 6]);
    assert_eq!(p.weight_shape(), [6, 4, 3, 3]);
    assert_eq!(p.flops(), 2 * 2 * 6 * 4 * 6 * 4 * 3 * 3);
    let g = Conv2dProblem::new(1, 6, [5, 5], 9, [1, 1]).with_groups(3);
    g.validate().unwrap();
    assert_eq!(g.gemm_k(), 2);
    assert_eq!(g.gemm_n(), 3);
    assert_eq!(g.flops(), 2 * 25 * 9 * 2);
}

#[test]
fn zero_sizes_are_refused() {
    type Edit = fn(&mut Conv2dProblem);
    let cases: [(&str, Edit); 9] = [
        ("batch", |p| p.batch = 0),
        ("in_channels", |p| p.in_channels = 0),
        ("in_height", |p| p.in_height = 0),
        ("in_width", |p| p.in_width = 0),
        ("out_channels", |p| p.out_channels = 0),
        ("kernel_width", |p| p.kernel_width = 0),
        ("stride[0]", |p| p.stride[0] = 0),
        ("dilation[1]", |p| p.dilation[1] = 0),
        ("groups", |p| p.groups = 0),
    ];
    for (name, edit) in cases {
        let mut p = base();
        edit(&mut p);
        let err = p.validate().expect_err(name);
        assert!(matches!(err, ConvError::ZeroSize { .. }), "{name}: {err:?}");
        let msg = err.to_string();
        assert!(msg.contains(name) && msg.contains("is 0"), "{name}: {msg}");
        // Sizes of an invalid problem do not panic either.
        let _ = (p.out_height(), p.out_width(), p.output_len(), p.flops());
    }
}

#[test]
fn groups_must_divide_channels() {
    let msg = message(&base().with_groups(3));
    assert!(
        msg.contains("`in_channels` (4) is not a multiple of `groups` (3)"),
        "{msg}"
    );
    let mut p = base().with_groups(2);
    p.out_channels = 5;
    let msg = message(&p);
    assert!(
        msg.contains("`out_channels` (5) is not a multiple of `groups` (2)"),
        "{msg}"
    );
}

#[test]
fn kernel_larger_than_padded_input() {
    let mut p = base().with_padding([0, 0]);
    p.kernel_height = 9;
    let msg = message(&p);
    assert!(
        msg.contains("height") && msg.contains("larger than the padded input"),
        "{msg}"
    );
    assert_eq!((p.out_height(), p.output_len()), (0, 0));
    // Fits once padded.
    p.padding = [1, 0];
    p.validate().unwrap();
    // Dilation counts: 3x3 with dilation 4 spans 9 > 8.
    let p = base().with_padding([0, 0]).with_dilation([1, 4]);
    let msg = message(&p);
    assert!(msg.contains("width") && msg.contains("spanning 9"), "{msg}");
}

#[test]
fn too_large_is_refused() {
    let p = Conv2dProblem::new(1 << 16, 1 << 10, [64, 64], 8, [1, 1]);
    let msg = message(&p);
    assert!(msg.contains("too large") && msg.contains("input"), "{msg}");
    let p = Conv2dProblem::new(1, 1, [8, 8], 1, [3, 3]).with_padding([usize::MAX / 2, 0]);
    let msg = message(&p);
    assert!(msg.contains("too large"), "{msg}");
}

#[test]
fn launch_refuses_bad_problems_and_buffers() {
    let client = client();
    let types = ConvTypes::new(OperandType::F32);
    let p = base();
    let sizes = [p.input_len() * 4, p.weight_len() * 4, 0, p.output_len() * 4];

    // An invalid problem is refused before anything else.
    let err = launch_error(
        &client,
        &base().with_groups(3),
        types,
        ConvPath::Auto,
        sizes,
    );
    assert!(matches!(err, ConvError::GroupsMismatch { .. }), "{err}");

    // Buffers too small.
    for (i, name) in [(0, "input"), (1, "weight"), (3, "output")] {
        let mut s = sizes;
        s[i] -= 4;
        let err = launch_error(&client, &p, types, ConvPath::Tiled, s);
        let msg = err.to_string();
        assert!(
            matches!(err, ConvError::BufferTooSmall { .. }) && msg.contains(name),
            "{name}: {msg}"
        );
    }
    let mut s = sizes;
    s[2] = 4 * p.out_channels - 4;
    let err = launch_error(&client, &p, types, ConvPath::Tiled, s);
    assert!(err.to_string().contains("`bias`"), "{err}");

    // f16 operands in f32-sized buffers are fine, f32 operands in f16-sized ones are not.
    let half = [sizes[0] / 2, sizes[1] / 2, 0, sizes[3] / 2];
    let err = launch_error(
        &client,
        &p,
        types.with_output(OutputType::F16),
        ConvPath::Tiled,
        half,
    );
    assert!(err.to_string().contains("`input`"), "{err}");

    // f16 operands read from f32 buffers need f32-sized buffers; f16 buffers cannot feed
    // bf16 operands (the buffers hold the operand type or f32).
    let cast_in_kernel = ConvTypes::new(OperandType::F16).with_storage(OperandType::F32);
    let mut s = sizes;
    s[1] = p.weight_len() * 2;
    let err = launch_error(&client, &p, cast_in_kernel, ConvPath::Tiled, s);
    assert!(
        matches!(err, ConvError::BufferTooSmall { .. }) && err.to_string().contains("`weight`"),
        "{err}"
    );
    let err = launch_error(
        &client,
        &p,
        ConvTypes::new(OperandType::BF16).with_storage(OperandType::F16),
        ConvPath::Tiled,
        sizes,
    );
    assert!(
        matches!(err, ConvError::Unsupported(_)) && err.to_string().contains("F16 buffers"),
        "{err}"
    );
}

#[test]
fn cmma_tilings_are_valid_and_fill_the_device() {
    use burn_hetero_kernels::CmmaConfig;
    for n in [1, 16, 17, 20, 32, 33, 50, 64, 1000] {
        for (batch, side) in [(1, 4), (32, 8), (64, 12), (128, 32), (256, 56)] {
            let p = Conv2dProblem::new(batch, 16, [side, side], n, [3, 3]).with_padding([1, 1]);
            for sms in [None, Some(8), Some(132)] {
                let cfg = CmmaConfig::for_problem(&p, sms);
                assert!(cfg.is_valid(), "{cfg:?} for {p} on {sms:?}");
                assert!(
                    cfg.shared_memory_bytes(0) <= CmmaConfig::largest().shared_memory_bytes(0)
                        && cfg.units() <= CmmaConfig::largest().units(),
                    "{cfg:?} needs more than the largest tiling, which cmma_supported checks"
                );
            }
        }
    }
    // ResNet20's 16 -> 32 stride-2 layer at batch 32: 64 tiles of 128 rows would leave half of
    // 132 multiprocessors idle; tiles of 64 rows give 128.
    let strided = Conv2dProblem::new(32, 16, [32, 32], 32, [3, 3])
        .with_padding([1, 1])
        .with_stride([2, 2]);
    assert_eq!(CmmaConfig::for_problem(&strided, Some(132)).bm(), 64);
    assert_eq!(CmmaConfig::for_problem(&strided, Some(8)).bm(), 128);
}
