//! Shared test code: the f64 reference conv, random inputs, the case grid and the runner.

use std::sync::OnceLock;

use burn_hetero_kernels::{
    Conv2dBuffers, Conv2dProblem, ConvError, ConvPath, ConvPathUsed, ConvTypes, OperandType,
    OutputType, conv2d_forward,
};
use cubecl::prelude::*;
use half::{bf16, f16};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The run's seed: `BURN_HETERO_TEST_SEED` if set (to replay a failure), else fresh; printed
/// once.
pub fn suite_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let seed = std::env::var("BURN_HETERO_TEST_SEED")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| rand::rng().random());
        eprintln!("kernels seed: BURN_HETERO_TEST_SEED={seed}");
        seed
    })
}

/// A generator for one case, derived from the suite seed and the case's name.
pub fn case_rng(name: &str) -> StdRng {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    StdRng::seed_from_u64(suite_seed() ^ h)
}

/// Relative L2 bound of each operand type (the reference uses the unrounded f32 inputs, so the
/// bound also covers the rounding of the operands).
pub fn bound(operand: OperandType) -> f64 {
    match operand {
        OperandType::F32 => 1e-5,
        OperandType::F16 => 5e-3,
        OperandType::BF16 => 2e-2,
    }
}

/// The f64 reference: straightforward loops over NCHW input, OIHW weight.
pub fn reference_conv(
    p: &Conv2dProblem,
    input: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f64> {
    let (oh_n, ow_n) = (p.out_height(), p.out_width());
    let cg = p.in_channels / p.groups;
    let ocg = p.out_channels / p.groups;
    let mut out = vec![0f64; p.output_len()];
    for n in 0..p.batch {
        for oc in 0..p.out_channels {
            let g = oc / ocg;
            for oh in 0..oh_n {
                for ow in 0..ow_n {
                    let mut sum = bias.map_or(0.0, |b| b[oc] as f64);
                    for c in 0..cg {
                        let ic = g * cg + c;
                        for kh in 0..p.kernel_height {
                            let ih = (oh * p.stride[0] + kh * p.dilation[0]) as isize
                                - p.padding[0] as isize;
                            if ih < 0 || ih >= p.in_height as isize {
                                continue;
                            }
                            for kw in 0..p.kernel_width {
                                let iw = (ow * p.stride[1] + kw * p.dilation[1]) as isize
                                    - p.padding[1] as isize;
                                if iw < 0 || iw >= p.in_width as isize {
                                    continue;
                                }
                                let x = input[((n * p.in_channels + ic) * p.in_height
                                    + ih as usize)
                                    * p.in_width
                                    + iw as usize];
                                let w = weight
                                    [((oc * cg + c) * p.kernel_height + kh) * p.kernel_width + kw];
                                sum += x as f64 * w as f64;
                            }
                        }
                    }
                    out[((n * p.out_channels + oc) * oh_n + oh) * ow_n + ow] = sum;
                }
            }
        }
    }
    out
}

/// One case of the grid.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// Name, for messages and the per-case seed.
    pub name: &'static str,
    /// The problem.
    pub problem: Conv2dProblem,
    /// Whether the first run of the case has a bias (the second run flips it).
    pub bias: bool,
}

#[allow(clippy::too_many_arguments)]
const fn case(
    name: &'static str,
    n: usize,
    c: usize,
    hw: [usize; 2],
    oc: usize,
    k: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
    bias: bool,
) -> Case {
    Case {
        name,
        problem: Conv2dProblem {
            batch: n,
            in_channels: c,
            in_height: hw[0],
            in_width: hw[1],
            out_channels: oc,
            kernel_height: k[0],
            kernel_width: k[1],
            stride,
            padding,
            dilation,
            groups,
        },
        bias,
    }
}

/// The small grid that runs everywhere (lavapipe included): kernel sizes 1/3/5/7, strides,
/// paddings 0..3, dilation, groups and depthwise, channel counts that are not multiples of 4
/// or 8, batch 1, odd spatial sizes, several tiles along M and N.
pub fn small_grid() -> Vec<Case> {
    vec![
        case(
            "1x1",
            2,
            3,
            [7, 9],
            5,
            [1, 1],
            [1, 1],
            [0, 0],
            [1, 1],
            1,
            false,
        ),
        case(
            "1x1 stride 2",
            2,
            50,
            [7, 7],
            20,
            [1, 1],
            [2, 2],
            [0, 0],
            [1, 1],
            1,
            true,
        ),
        case(
            "3x3 pad 1",
            1,
            5,
            [13, 11],
            20,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            true,
        ),
        case(
            "3x3 pad 0 odd",
            1,
            5,
            [7, 9],
            7,
            [3, 3],
            [1, 1],
            [0, 0],
            [1, 1],
            1,
            false,
        ),
        case(
            "3x3 stride 2",
            2,
            20,
            [9, 7],
            50,
            [3, 3],
            [2, 2],
            [1, 1],
            [1, 1],
            1,
            false,
        ),
        case(
            "3x3 pad 3",
            1,
            3,
            [8, 8],
            4,
            [3, 3],
            [1, 1],
            [3, 3],
            [1, 1],
            1,
            true,
        ),
        case(
            "3x3 dilation 2",
            2,
            6,
            [11, 9],
            10,
            [3, 3],
            [1, 1],
            [2, 2],
            [2, 2],
            1,
            true,
        ),
        case(
            "5x5 pad 2",
            1,
            3,
            [13, 11],
            8,
            [5, 5],
            [1, 1],
            [2, 2],
            [1, 1],
            1,
            false,
        ),
        case(
            "7x7 stride 2 pad 3",
            1,
            4,
            [15, 13],
            6,
            [7, 7],
            [2, 2],
            [3, 3],
            [1, 1],
            1,
            true,
        ),
        case(
            "groups 2",
            1,
            8,
            [9, 9],
            12,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            2,
            false,
        ),
        case(
            "groups 2 wide",
            1,
            10,
            [9, 9],
            40,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            2,
            true,
        ),
        case(
            "depthwise",
            1,
            20,
            [9, 11],
            20,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            20,
            true,
        ),
        case(
            "depthwise x2 stride 2",
            2,
            5,
            [7, 9],
            10,
            [3, 3],
            [2, 2],
            [1, 1],
            [1, 1],
            5,
            false,
        ),
        case(
            "asymmetric",
            1,
            5,
            [11, 13],
            9,
            [3, 5],
            [2, 1],
            [0, 2],
            [1, 2],
            1,
            true,
        ),
        case(
            "many m tiles",
            3,
            3,
            [17, 19],
            16,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            false,
        ),
        case(
            "two n tiles",
            1,
            16,
            [8, 8],
            70,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            true,
        ),
        case(
            "mnist 5x5",
            2,
            1,
            [28, 28],
            20,
            [5, 5],
            [1, 1],
            [0, 0],
            [1, 1],
            1,
            true,
        ),
    ]
}

/// Larger shapes for the GPU machine.
pub fn large_grid() -> Vec<Case> {
    vec![
        case(
            "resnet 16ch",
            32,
            16,
            [32, 32],
            16,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            true,
        ),
        case(
            "mnist conv1",
            64,
            1,
            [28, 28],
            20,
            [5, 5],
            [1, 1],
            [0, 0],
            [1, 1],
            1,
            true,
        ),
        case(
            "mnist conv2",
            64,
            20,
            [12, 12],
            50,
            [5, 5],
            [1, 1],
            [0, 0],
            [1, 1],
            1,
            false,
        ),
        case(
            "resnet 32ch s2",
            16,
            16,
            [32, 32],
            32,
            [3, 3],
            [2, 2],
            [1, 1],
            [1, 1],
            1,
            false,
        ),
        case(
            "resnet 64ch",
            8,
            64,
            [16, 16],
            64,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            true,
        ),
        case(
            "resnet 64->128 s2",
            4,
            64,
            [28, 28],
            128,
            [3, 3],
            [2, 2],
            [1, 1],
            [1, 1],
            1,
            false,
        ),
        case(
            "stem 7x7 s2",
            2,
            3,
            [64, 64],
            64,
            [7, 7],
            [2, 2],
            [3, 3],
            [1, 1],
            1,
            true,
        ),
        // Several m tiles per persistent cube on an H200 (132 multiprocessors).
        case(
            "resnet20 stem batch",
            128,
            3,
            [32, 32],
            16,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            false,
        ),
        case(
            "many tiles 32->64",
            48,
            32,
            [28, 28],
            64,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            true,
        ),
        // K = 1152: the weight tile is streamed rather than resident in the cmma kernel.
        case(
            "streamed weight",
            2,
            128,
            [14, 14],
            64,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            true,
        ),
        case(
            "streamed weight groups",
            2,
            256,
            [9, 9],
            128,
            [3, 3],
            [2, 2],
            [1, 1],
            [1, 1],
            2,
            false,
        ),
        // Stride-1 problems for the patch kernel: dilation with groups, 5x5, 1x1, 48 channels.
        case(
            "patch dilation groups",
            2,
            32,
            [13, 11],
            32,
            [3, 3],
            [1, 1],
            [2, 2],
            [2, 2],
            2,
            true,
        ),
        case(
            "patch 5x5",
            1,
            16,
            [12, 10],
            24,
            [5, 5],
            [1, 1],
            [2, 2],
            [1, 1],
            1,
            false,
        ),
        case(
            "patch 1x1",
            2,
            32,
            [7, 9],
            40,
            [1, 1],
            [1, 1],
            [0, 0],
            [1, 1],
            1,
            true,
        ),
        case(
            "patch 48ch 7x7",
            2,
            48,
            [15, 13],
            20,
            [7, 7],
            [1, 1],
            [3, 3],
            [1, 1],
            1,
            false,
        ),
        // 40 channels: the last 16-channel chunk is partly padding.
        case(
            "patch 40ch",
            3,
            40,
            [9, 9],
            24,
            [3, 3],
            [1, 1],
            [1, 1],
            [1, 1],
            1,
            true,
        ),
    ]
}

/// Bytes of `values` rounded to `ty`.
pub fn to_bytes_operand(values: &[f32], ty: OperandType) -> Vec<u8> {
    match ty {
        OperandType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        OperandType::F16 => values
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_le_bytes())
            .collect(),
        OperandType::BF16 => values
            .iter()
            .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
            .collect(),
    }
}

/// `len` NaNs of the output type, to poison the output before the launch.
pub fn nan_bytes(len: usize, ty: OutputType) -> Vec<u8> {
    match ty {
        OutputType::F32 => (0..len).flat_map(|_| f32::NAN.to_le_bytes()).collect(),
        OutputType::F16 => (0..len).flat_map(|_| f16::NAN.to_le_bytes()).collect(),
    }
}

/// The output bytes read back, as f64.
pub fn from_bytes_output(bytes: &[u8], ty: OutputType) -> Vec<f64> {
    match ty {
        OutputType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
            .collect(),
        OutputType::F16 => bytes
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f64())
            .collect(),
    }
}

/// `Err` with the first non-finite element's index (unwritten poison, or an overflow).
pub fn check_finite(out: &[f64]) -> Result<(), String> {
    match out.iter().position(|v| !v.is_finite()) {
        Some(i) => Err(format!(
            "output[{i}] is {} (unwritten or overflow), {} non-finite of {}",
            out[i],
            out.iter().filter(|v| !v.is_finite()).count(),
            out.len()
        )),
        None => Ok(()),
    }
}

/// Relative L2 error of `out` against `reference`; `Err` with the first NaN's index.
pub fn rel_l2(out: &[f64], reference: &[f64]) -> Result<f64, String> {
    check_finite(out)?;
    let num: f64 = out
        .iter()
        .zip(reference)
        .map(|(o, r)| (o - r) * (o - r))
        .sum();
    let den: f64 = reference.iter().map(|r| r * r).sum();
    Ok(if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    })
}

/// One run: random inputs, the launch, and the error against the reference.
pub struct Run {
    /// Relative L2 error.
    pub error: f64,
    /// The kernel that ran.
    pub used: ConvPathUsed,
}

/// Runs `case` (with or without bias) on `client`; `Err` describes a launch error or a NaN.
pub fn run_case<R: Runtime>(
    client: &ComputeClient<R>,
    case: &Case,
    with_bias: bool,
    types: ConvTypes,
    path: ConvPath,
) -> Result<Run, String> {
    let (operands, used, output) = launch_case(client, case, with_bias, types, path)?;
    let reference = reference_conv(
        &case.problem,
        &operands.input,
        &operands.weight,
        operands.bias.as_deref(),
    );
    let error = rel_l2(&from_bytes_output(&output, types.output), &reference)?;
    Ok(Run { error, used })
}

/// The random operands of one case.
pub struct Operands {
    /// The input.
    pub input: Vec<f32>,
    /// The weight.
    pub weight: Vec<f32>,
    /// The bias, if the run has one.
    pub bias: Option<Vec<f32>>,
}

/// Draws the operands of `case` (the same for every run of a suite), launches it on
/// NaN-poisoned output and reads the output back: the operands, the kernel that ran and the
/// output's bytes.
pub fn launch_case<R: Runtime>(
    client: &ComputeClient<R>,
    case: &Case,
    with_bias: bool,
    types: ConvTypes,
    path: ConvPath,
) -> Result<(Operands, ConvPathUsed, Vec<u8>), String> {
    let p = &case.problem;
    let mut rng = case_rng(case.name);
    let mut draw =
        |len: usize| -> Vec<f32> { (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect() };
    let input = draw(p.input_len());
    let weight = draw(p.weight_len());
    let bias = draw(p.out_channels);
    let bias = with_bias.then_some(bias);

    // Rounded to the operand type here, or f32 for the kernel to round as it loads.
    let input_h = client.create_from_slice(&to_bytes_operand(&input, types.storage));
    let weight_h = client.create_from_slice(&to_bytes_operand(&weight, types.storage));
    let bias_h = bias.as_ref().map(|b| {
        client.create_from_slice(&b.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>())
    });
    let output_h = client.create_from_slice(&nan_bytes(p.output_len(), types.output));

    let buffers = Conv2dBuffers {
        input: &input_h,
        weight: &weight_h,
        bias: bias_h.as_ref(),
        output: &output_h,
    };
    let used = conv2d_forward(client, buffers, p, types, path).map_err(|e| e.to_string())?;
    let bytes = client
        .read_one(output_h)
        .map_err(|e| format!("reading the output failed: {e}"))?;
    let operands = Operands {
        input,
        weight,
        bias,
    };
    Ok((operands, used, bytes.to_vec()))
}

/// Runs every case of `cases` (with and without bias) from buffers of the operand type (rounded
/// on the host by `half`) and from f32 buffers (rounded in the kernel's loads), and panics
/// unless the two outputs are the same bits: both round to nearest, ties to even, and the
/// products then see the same operands. Every output is also checked for NaN (each is
/// poisoned before its launch); the error against the reference is [`check_grid`]'s job.
/// Returns the kernels that ran.
pub fn check_cast_in_kernel<R: Runtime>(
    client: &ComputeClient<R>,
    cases: &[Case],
    types: ConvTypes,
    path: ConvPath,
) -> GridResult {
    let host = types.with_storage(types.operand);
    let kernel = types.with_storage(OperandType::F32);
    let mut failures = Vec::new();
    let mut ran = GridResult::default();
    for case in cases {
        for with_bias in [false, true] {
            let label = format!("{} ({}, bias: {with_bias})", case.name, case.problem);
            match (
                launch_case(client, case, with_bias, host, path),
                launch_case(client, case, with_bias, kernel, path),
            ) {
                (Ok((_, used_a, a)), Ok((_, used_b, b))) => {
                    if used_a != used_b {
                        failures.push(format!("{label}: ran {used_a:?} and {used_b:?}"));
                    }
                    ran.count(used_b);
                    if let Err(e) = check_finite(&from_bytes_output(&b, types.output)) {
                        failures.push(format!("{label}: {e}"));
                    }
                    let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
                    if differ > 0 || a.len() != b.len() {
                        failures.push(format!(
                            "{label}: {differ} of {} output bytes differ",
                            a.len()
                        ));
                    }
                }
                (Err(e), _) | (_, Err(e)) => failures.push(format!("{label}: {e}")),
            }
        }
    }
    assert_no_failures(&format!("{types:?} {path:?}: "), &failures);
    eprintln!(
        "{types:?} {path:?}: {} cases x 2, the cast in the kernel gives the host cast's bits, kernels {:?}",
        cases.len(),
        ran.kernels
    );
    ran
}

/// Runs every case of `cases` twice (with and without bias) with `types` and `path`; panics
/// with every failing case (error above the bound, NaN, launch error) and the seed. Returns the
/// worst error.
pub fn check_grid<R: Runtime>(
    client: &ComputeClient<R>,
    cases: &[Case],
    types: ConvTypes,
    path: ConvPath,
    expect: Option<ConvPath>,
) -> GridResult {
    let limit = bound(types.operand);
    let mut failures = Vec::new();
    let mut worst = 0f64;
    let mut ran = GridResult::default();
    for case in cases {
        for with_bias in [case.bias, !case.bias] {
            let label = format!(
                "{} ({}, bias: {with_bias}, {types:?}, {path:?})",
                case.name, case.problem
            );
            match run_case(client, case, with_bias, types, path) {
                Ok(run) => {
                    worst = worst.max(run.error);
                    ran.count(run.used);
                    if run.error > limit || run.error.is_nan() {
                        failures.push(format!(
                            "{label}: relative L2 {:.3e} > {limit:e}",
                            run.error
                        ));
                    }
                    if let Some(expect) = expect
                        && run.used.path() != expect
                    {
                        failures.push(format!("{label}: ran {:?}, expected {expect:?}", run.used));
                    }
                }
                Err(e) => failures.push(format!("{label}: {e}")),
            }
        }
    }
    assert_no_failures("", &failures);
    eprintln!(
        "{types:?} {path:?}: {} cases x 2, worst relative L2 {worst:.3e} (bound {limit:e}), kernels {:?}",
        cases.len(),
        ran.kernels
    );
    ran
}

/// What [`check_grid`] and [`check_cast_in_kernel`] saw.
#[derive(Default)]
pub struct GridResult {
    /// The kernels that ran, with their run counts.
    pub kernels: Vec<(ConvPathUsed, usize)>,
}

impl GridResult {
    /// Counts one run of `kernel`.
    fn count(&mut self, kernel: ConvPathUsed) {
        match self.kernels.iter_mut().find(|(k, _)| *k == kernel) {
            Some((_, n)) => *n += 1,
            None => self.kernels.push((kernel, 1)),
        }
    }

    /// How many runs used `kernel`.
    pub fn runs_of(&self, kernel: ConvPathUsed) -> usize {
        self.kernels
            .iter()
            .find(|(k, _)| *k == kernel)
            .map_or(0, |(_, n)| *n)
    }
}

/// Shorthand for the error of a launch that must fail.
pub fn launch_error<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &Conv2dProblem,
    types: ConvTypes,
    path: ConvPath,
    sizes: [usize; 4],
) -> ConvError {
    let [i, w, b, o] = sizes;
    let input = client.empty(i);
    let weight = client.empty(w);
    let bias = client.empty(b.max(4));
    let output = client.empty(o);
    let buffers = Conv2dBuffers {
        input: &input,
        weight: &weight,
        bias: (b > 0).then_some(&bias),
        output: &output,
    };
    conv2d_forward(client, buffers, problem, types, path).expect_err("the launch must be refused")
}

/// Fails with every failure of a check and the seed that replays it; `context` prefixes the
/// count.
pub fn assert_no_failures(context: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{context}{} failure(s) (replay with BURN_HETERO_TEST_SEED={}):\n{}",
        failures.len(),
        suite_seed(),
        failures.join("\n")
    );
}
