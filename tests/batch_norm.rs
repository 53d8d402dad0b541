//! Batch norm as one op (`burn_hetero::norm`): output, running statistics and the gradients of
//! input, `gamma` and `beta` against an f64 reference of the same formulas, on each path: the
//! fused passes of `Hetero<Flex, _>`, the same passes on `Hetero<NdArray, _>` (its arrays handed
//! to them and back), which must give the same bits, and the op-by-op default (burn-ndarray).
//! burn-nn's own `BatchNorm` is checked against the same reference, so the reference is not ours
//! alone.

use crate::common::*;
use burn::backend::Autodiff;
use burn::module::Param;
use burn::nn::{BatchNorm, BatchNormConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use burn_hetero::norm::{BatchNormBackend, batch_norm, batch_norm_relu};

type HF = HeteroFlex;

const EPSILON: f64 = 1e-5;
const MOMENTUM: f64 = 0.1;

/// One case's inputs.
struct Inputs {
    shape: Vec<usize>,
    x: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    /// The output gradient (the loss is `Σ y · dy`).
    dy: Vec<f32>,
    /// What `batch_norm_relu` adds before its ReLU, where a case asks for one.
    residual: Option<Vec<f32>>,
}

impl Inputs {
    fn new(name: &str, shape: &[usize], offset: f32, spread: f32) -> Self {
        let mut rng = rng_for(name);
        let n: usize = shape.iter().product();
        let channels = shape[1];
        Self {
            shape: shape.to_vec(),
            x: random_vec(&mut rng, n, offset - spread, offset + spread),
            gamma: random_vec(&mut rng, channels, 0.5, 1.5),
            beta: random_vec(&mut rng, channels, -0.5, 0.5),
            dy: random_vec(&mut rng, n, -1.0, 1.0),
            residual: None,
        }
    }

    /// These inputs with a random residual, moved where needed so that no value before the
    /// ReLU lies within 1e-3 of its kink (where f32 and the f64 reference could disagree on
    /// the mask).
    fn with_residual(mut self, name: &str) -> Self {
        let mut rng = rng_for(&format!("{name} residual"));
        let mut residual = random_vec(&mut rng, self.x.len(), -1.0, 1.0);
        let normalised = reference(&self, false).0[0].clone();
        for (r, y) in residual.iter_mut().zip(normalised) {
            if (y + *r as f64).abs() < 1e-3 {
                *r += 2e-3;
            }
        }
        self.residual = Some(residual);
        self
    }

    fn planes(&self) -> (usize, usize, usize) {
        (
            self.shape[0],
            self.shape[1],
            self.shape[2..].iter().product(),
        )
    }
}

/// Output, running mean, running var, input, gamma and beta gradients, in that order.
type Results = [Vec<f64>; 6];

const NAMES: [&str; 6] = [
    "output",
    "running mean",
    "running var",
    "dx",
    "dgamma",
    "dbeta",
];

/// The f64 reference: biased batch variance, running statistics from 0 and 1; with `relu`,
/// `relu(batch_norm(x) + residual)` (the inputs' residual, if any) and, with a residual, its
/// gradient.
fn reference(inputs: &Inputs, relu: bool) -> (Results, Option<Vec<f64>>) {
    let (batch, channels, len) = inputs.planes();
    let count = (batch * len) as f64;
    let at = |n: usize, c: usize, i: usize| (n * channels + c) * len + i;
    let size = inputs.x.len();
    let (mut y, mut dx, mut dr) = (vec![0.0; size], vec![0.0; size], vec![0.0; size]);
    let (mut mean, mut var, mut dgamma, mut dbeta) = (vec![], vec![], vec![], vec![]);
    for c in 0..channels {
        let values = || (0..batch).flat_map(move |n| (0..len).map(move |i| at(n, c, i)));
        let m = values().map(|j| inputs.x[j] as f64).sum::<f64>() / count;
        let v = values()
            .map(|j| (inputs.x[j] as f64 - m).powi(2))
            .sum::<f64>()
            / count;
        let invstd = 1.0 / (v + EPSILON).sqrt();
        let (g, b) = (inputs.gamma[c] as f64, inputs.beta[c] as f64);
        let xhat = |j: usize| (inputs.x[j] as f64 - m) * invstd;
        // The output and the gradient reaching batch norm's output (through the ReLU).
        let residual = |j: usize| inputs.residual.as_ref().map_or(0.0, |r| r[j] as f64);
        let before = |j: usize| xhat(j) * g + b + residual(j);
        let grad = |j: usize| {
            if relu && before(j) <= 0.0 {
                0.0
            } else {
                inputs.dy[j] as f64
            }
        };
        let sum_dy: f64 = values().map(grad).sum();
        let sum_dy_xhat: f64 = values().map(|j| grad(j) * xhat(j)).sum();
        for j in values() {
            y[j] = if relu { before(j).max(0.0) } else { before(j) };
            dr[j] = grad(j);
            dx[j] = g * invstd * (grad(j) - sum_dy / count - xhat(j) * sum_dy_xhat / count);
        }
        mean.push(m * MOMENTUM);
        var.push((1.0 - MOMENTUM) + v * MOMENTUM);
        dgamma.push(sum_dy_xhat);
        dbeta.push(sum_dy);
    }
    let dr = inputs.residual.as_ref().map(|_| dr);
    ([y, mean, var, dx, dgamma, dbeta], dr)
}

fn values<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f64> {
    let data = t.into_data().convert::<f32>();
    data.as_slice::<f32>()
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .collect()
}

/// The module of a case: its `gamma` and `beta`, running statistics from 0 and 1.
fn module<B: burn::tensor::backend::Backend>(inputs: &Inputs, device: &B::Device) -> BatchNorm<B> {
    let channels = inputs.shape[1];
    let per_channel =
        |v: &[f32]| Tensor::<B, 1>::from_data(TensorData::new(v.to_vec(), [channels]), device);
    let mut module: BatchNorm<B> = BatchNormConfig::new(channels)
        .with_epsilon(EPSILON)
        .with_momentum(MOMENTUM)
        .init(device);
    module.gamma = Param::from_tensor(per_channel(&inputs.gamma));
    module.beta = Param::from_tensor(per_channel(&inputs.beta));
    module
}

/// A tensor of the case's shape.
fn full<B: burn::tensor::backend::Backend, const D: usize>(
    inputs: &Inputs,
    values: &[f32],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(
        TensorData::new(values.to_vec(), inputs.shape.clone()),
        device,
    )
}

/// The results of a forward `y` (the loss is `Σ y · dy`) of input `x` through `module`.
fn results<B: AutodiffBackend, const D: usize>(
    inputs: &Inputs,
    module: &BatchNorm<B>,
    x: &Tensor<B, D>,
    y: Tensor<B, D>,
) -> (Results, B::Gradients) {
    let dy = full::<B, D>(inputs, &inputs.dy, &x.device());
    let grads = (y.clone() * dy).sum().backward();
    let results = [
        values(y),
        values(module.running_mean.value_sync()),
        values(module.running_var.value_sync()),
        values(x.grad(&grads).expect("input gradient")),
        values(module.gamma.grad(&grads).expect("gamma gradient")),
        values(module.beta.grad(&grads).expect("beta gradient")),
    ];
    (results, grads)
}

/// One training forward and backward of a batch norm on `B`, through [`batch_norm`] or, with
/// `burn_nn`, through burn-nn's own `BatchNorm::forward`.
fn run<B: AutodiffBackend + BatchNormBackend, const D: usize>(
    inputs: &Inputs,
    burn_nn: bool,
) -> Results {
    let device = Default::default();
    let module = module::<B>(inputs, &device);
    let x = full::<B, D>(inputs, &inputs.x, &device).require_grad();
    let y = if burn_nn {
        module.forward(x.clone())
    } else {
        batch_norm(&module, x.clone())
    };
    results(inputs, &module, &x, y).0
}

/// One training forward and backward of `relu(batch_norm(x) + residual)` on `B` (the residual
/// where the inputs have one), through [`batch_norm_relu`] or, `written_out`, as a batch norm,
/// an add and a ReLU; the residual's gradient with the results.
fn run_relu<B: AutodiffBackend + BatchNormBackend, const D: usize>(
    inputs: &Inputs,
    written_out: bool,
) -> (Results, Option<Vec<f64>>) {
    let device = Default::default();
    let module = module::<B>(inputs, &device);
    let x = full::<B, D>(inputs, &inputs.x, &device).require_grad();
    let residual = inputs
        .residual
        .as_ref()
        .map(|r| full::<B, D>(inputs, r, &device).require_grad());
    let y = if written_out {
        let y = batch_norm(&module, x.clone());
        relu(match &residual {
            Some(r) => y + r.clone(),
            None => y,
        })
    } else {
        batch_norm_relu(&module, x.clone(), residual.clone())
    };
    let (results, grads) = results(inputs, &module, &x, y);
    let residual = residual.map(|r| values(r.grad(&grads).expect("residual gradient")));
    (results, residual)
}

fn assert_close(path: &str, got: &Results, expected: &Results, tolerance: f64) {
    for ((name, got), expected) in NAMES.iter().zip(got).zip(expected) {
        assert!(
            got.iter().all(|v| v.is_finite()),
            "{path}: {name} has a NaN or infinity"
        );
        let got: Vec<f32> = got.iter().map(|&v| v as f32).collect();
        let error = rel_l2(&got, expected);
        assert!(
            error <= tolerance,
            "{path}: {name} relative L2 error {error:.3e} > {tolerance:.0e}"
        );
    }
}

fn check<const D: usize>(name: &str, shape: &[usize]) {
    let inputs = Inputs::new(name, shape, 0.3, 2.0);
    let expected = reference(&inputs, false).0;
    let tolerance = 1e-5;
    assert_close(
        &format!("{name}: burn-nn on burn-ndarray (checks the reference)"),
        &run::<Autodiff<N>, D>(&inputs, true),
        &expected,
        tolerance,
    );
    assert_close(
        &format!("{name}: fused, Hetero<Flex>"),
        &run::<Autodiff<HF>, D>(&inputs, false),
        &expected,
        tolerance,
    );
    assert_close(
        &format!("{name}: op by op, burn-ndarray"),
        &run::<Autodiff<N>, D>(&inputs, false),
        &expected,
        tolerance,
    );
    let fused_flex = run::<Autodiff<HF>, D>(&inputs, false);
    let fused_ndarray = run::<Autodiff<H>, D>(&inputs, false);
    assert_close(
        &format!("{name}: fused, Hetero<NdArray>"),
        &fused_ndarray,
        &expected,
        tolerance,
    );
    assert_fused_alike(
        name,
        &fused_ndarray,
        &fused_flex,
        &run::<Autodiff<N>, D>(&inputs, false),
    );
}

/// `Hetero<NdArray>` runs the fused passes (through the bridge to burn-flex), not the op-by-op
/// form: the same bits as `Hetero<Flex>`; and, where the fused and op-by-op sums round
/// differently (so that this check can fail), not the op-by-op bits.
fn assert_fused_alike(name: &str, ndarray: &Results, flex: &Results, op_by_op: &Results) {
    for ((what, a), b) in NAMES.iter().zip(ndarray).zip(flex) {
        assert!(
            a == b,
            "{name}: {what} of Hetero<NdArray> is not Hetero<Flex>'s bit for bit"
        );
    }
    if ndarray[0].len() >= 4096 {
        assert!(
            ndarray != op_by_op,
            "{name}: Hetero<NdArray> gave the op-by-op bits: the fused path did not run"
        );
    }
}

/// Every path against the f64 reference, for images (odd plane sizes, planes longer than one
/// rayon task), sequences and plain `[batch, features]` inputs.
#[test]
fn all_paths_match_the_reference() {
    check::<4>("bn 4x3x5x7", &[4, 3, 5, 7]);
    check::<4>("bn 8x16x16x16", &[8, 16, 16, 16]);
    check::<3>("bn 3x4x6", &[3, 4, 6]);
    check::<2>("bn 6x5", &[6, 5]);
}

/// A channel whose mean is large against its spread: the fused path's shifted f64 sums keep the
/// variance (and so every output) to f32 accuracy.
#[test]
fn fused_path_keeps_digits_for_offset_channels() {
    let inputs = Inputs::new("bn offset", &[4, 3, 9, 9], 100.0, 1.0);
    assert_close(
        "offset channels: fused, Hetero<Flex>",
        &run::<Autodiff<HF>, 4>(&inputs, false),
        &reference(&inputs, false).0,
        1e-5,
    );
}

/// `relu(batch_norm(x) + residual)` as one op, with and without a residual, on every path
/// against the f64 reference, the residual's gradient included.
#[test]
fn relu_paths_match_the_reference() {
    for (name, shape) in [
        ("bnr 4x3x5x7", [4, 3, 5, 7]),
        ("bnr 8x16x16x16", [8, 16, 16, 16]),
    ] {
        for with_residual in [false, true] {
            let inputs = Inputs::new(name, &shape, 0.3, 2.0);
            let inputs = if with_residual {
                inputs.with_residual(name)
            } else {
                inputs
            };
            let (expected, expected_residual) = reference(&inputs, true);
            let case = format!("{name}, residual {with_residual}");
            assert!(
                run_relu::<Autodiff<H>, 4>(&inputs, false)
                    == run_relu::<Autodiff<HF>, 4>(&inputs, false),
                "{case}: Hetero<NdArray> is not Hetero<Flex> bit for bit"
            );
            let paths = [
                (
                    "fused, Hetero<Flex>",
                    run_relu::<Autodiff<HF>, 4>(&inputs, false),
                ),
                (
                    "op by op, burn-ndarray",
                    run_relu::<Autodiff<N>, 4>(&inputs, false),
                ),
                (
                    "fused, Hetero<NdArray>",
                    run_relu::<Autodiff<H>, 4>(&inputs, false),
                ),
                (
                    "written out, burn-ndarray",
                    run_relu::<Autodiff<N>, 4>(&inputs, true),
                ),
            ];
            for (path, (got, got_residual)) in paths {
                let path = format!("{case}: {path}");
                assert_close(&path, &got, &expected, 1e-5);
                match (&got_residual, &expected_residual) {
                    (Some(got), Some(expected)) => {
                        let got: Vec<f32> = got.iter().map(|&v| v as f32).collect();
                        let error = rel_l2(&got, expected);
                        assert!(error <= 1e-5, "{path}: residual gradient error {error:.3e}");
                    }
                    (None, None) => {}
                    _ => panic!("{path}: a residual gradient where there is no residual"),
                }
            }
            // Some values are masked (and some not), so the ReLU's backward is exercised.
            let zeros = expected[0].iter().filter(|&&v| v == 0.0).count();
            assert!(
                zeros > 0 && zeros < expected[0].len(),
                "{case}: {zeros} zeros"
            );
        }
    }
}

/// On `Hetero<Flex>` the fused op gives the same bits as the batch norm, add and ReLU written
/// out (the same f32 operations in one pass), forward and backward.
#[test]
fn relu_fused_is_bit_identical_to_written_out() {
    for with_residual in [false, true] {
        let name = "bnr bits";
        let inputs = Inputs::new(name, &[6, 8, 9, 11], -0.1, 1.7);
        let inputs = if with_residual {
            inputs.with_residual(name)
        } else {
            inputs
        };
        let fused = run_relu::<Autodiff<HF>, 4>(&inputs, false);
        let written_out = run_relu::<Autodiff<HF>, 4>(&inputs, true);
        for ((name, fused), written_out) in NAMES.iter().zip(&fused.0).zip(&written_out.0) {
            assert!(
                fused == written_out,
                "residual {with_residual}: {name} differs from the written-out ops"
            );
        }
        assert!(
            fused.1 == written_out.1,
            "residual {with_residual}: the residual's gradient differs"
        );
    }
}

/// Without autodiff `batch_norm_relu` is burn-nn's inference forward, the add and the ReLU.
#[test]
fn relu_inference_uses_the_running_statistics() {
    let name = "bnr inference";
    let inputs = Inputs::new(name, &[3, 4, 5, 5], 0.5, 1.0).with_residual(name);
    let device = Default::default();
    let module = module::<N>(&inputs, &device);
    let x = full::<N, 4>(&inputs, &inputs.x, &device);
    let r = full::<N, 4>(&inputs, inputs.residual.as_ref().unwrap(), &device);
    let got = values(batch_norm_relu(&module, x.clone(), Some(r.clone())));
    let expected = values(relu(module.forward(x) + r));
    assert!(
        got == expected,
        "inference differs from burn-nn's forward, add and ReLU"
    );
}

/// The backward writes the input gradient over the output gradient's buffer only when nothing
/// else holds it: a held output gradient is unchanged afterwards, and both branches agree bit
/// for bit.
#[test]
fn backward_leaves_a_held_gradient_alone() {
    let inputs = Inputs::new("bn held", &[4, 6, 8, 8], -0.2, 1.5);
    let shape = inputs.shape.clone();
    let float = |v: &[f32], shape: Vec<usize>| flex_primitive::<4>(v, &shape);
    let channel = |v: &[f32]| flex_primitive::<1>(v, &[v.len()]);
    let forward = HF::batch_norm_train(
        float(&inputs.x, shape.clone()),
        channel(&inputs.gamma),
        channel(&inputs.beta),
        EPSILON,
    );
    let data = flex_primitive_values::<1>;
    let (mean, var) = (data(forward.mean), data(forward.var));
    let backward = |grad| {
        HF::batch_norm_train_backward(
            float(&inputs.x, shape.clone()),
            channel(&inputs.gamma),
            channel(&mean),
            channel(&var),
            grad,
            EPSILON,
        )
    };
    let held = float(&inputs.dy, shape.clone());
    let shared = backward(held.clone());
    let unique = backward(float(&inputs.dy, shape.clone()));
    let flat = flex_primitive_values::<4>;
    assert_eq!(flat(held), inputs.dy, "the held output gradient changed");
    assert_eq!(
        flat(shared.input),
        flat(unique.input),
        "in place and out of place differ"
    );
    assert_eq!(data(shared.gamma), data(unique.gamma));
    assert_eq!(data(shared.beta), data(unique.beta));

    // The same with the ReLU's mask, with and without the gradient before it kept.
    let output = HF::batch_norm_relu_train(
        float(&inputs.x, shape.clone()),
        channel(&inputs.gamma),
        channel(&inputs.beta),
        None,
        EPSILON,
    )
    .output;
    for keep in [false, true] {
        let backward = |grad| {
            HF::batch_norm_relu_train_backward(
                float(&inputs.x, shape.clone()),
                channel(&inputs.gamma),
                channel(&mean),
                channel(&var),
                output.clone(),
                grad,
                keep,
                EPSILON,
            )
        };
        let held = float(&inputs.dy, shape.clone());
        let shared = backward(held.clone());
        let unique = backward(float(&inputs.dy, shape.clone()));
        assert_eq!(
            flat(held),
            inputs.dy,
            "keep {keep}: the held output gradient changed"
        );
        assert_eq!(
            flat(shared.norm.input),
            flat(unique.norm.input),
            "keep {keep}"
        );
        assert_eq!(
            data(shared.norm.gamma),
            data(unique.norm.gamma),
            "keep {keep}"
        );
        assert_eq!(shared.residual.is_some(), keep);
        if let (Some(a), Some(b)) = (shared.residual, unique.residual) {
            assert_eq!(flat(a), flat(b), "keep {keep}: the kept gradient");
        }
    }
}

/// A convolution's bias gradient on `Hetero<Flex, _>` (a threaded sum per channel) and on
/// `Hetero<NdArray, _>` (the same sums for large gradients, burn-ndarray's for small ones)
/// against the f64 sum, for planes shorter and longer than a rayon task and an odd plane size.
#[test]
fn conv_bias_gradient_is_the_channel_sum() {
    use burn::tensor::TensorPrimitive;
    use burn::tensor::ops::{FloatTensorOps, ModuleOps};
    let on_ndarray = |values: &[f32], shape: &[usize]| {
        let flat =
            Tensor::<H, 1>::from_data(TensorData::new(values.to_vec(), [values.len()]), &device())
                .into_primitive()
                .tensor();
        H::float_reshape(flat, burn::tensor::Shape::from(shape.to_vec()))
    };
    for shape in [
        [3, 5, 7, 9],
        [64, 20, 8, 8],
        [2, 50, 1, 1],
        [64, 20, 24, 24],
    ] {
        let inputs = Inputs::new("conv bias grad", &shape, 0.7, 1.0);
        let (batch, channels, len) = inputs.planes();
        let grad = HF::conv2d_bias_backward(
            flex_primitive::<4>(&inputs.x, &shape),
            flex_primitive::<1>(&inputs.gamma, &[channels]),
            flex_primitive::<4>(&inputs.dy, &shape),
        );
        let got = flex_primitive_values::<1>(grad);
        let expected: Vec<f64> = (0..channels)
            .map(|c| {
                (0..batch)
                    .flat_map(|n| (0..len).map(move |i| (n * channels + c) * len + i))
                    .map(|j| inputs.dy[j] as f64)
                    .sum()
            })
            .collect();
        let error = rel_l2(&got, &expected);
        assert!(error <= 1e-6, "{shape:?}: relative L2 error {error:.3e}");
        let grad = H::conv2d_bias_backward(
            on_ndarray(&inputs.x, &shape),
            on_ndarray(&inputs.gamma, &[channels]),
            on_ndarray(&inputs.dy, &shape),
        );
        let got = Tensor::<H, 1>::from_primitive(TensorPrimitive::Float(grad))
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        let error = rel_l2(&got, &expected);
        assert!(
            error <= 1e-6,
            "{shape:?} on burn-ndarray: relative L2 error {error:.3e}"
        );
    }
}
