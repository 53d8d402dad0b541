//! Differential cases of the module ops (convolutions, pooling, interpolation, attention, ...),
//! the activations, the quantized-tensor ops and transactions: see `run_all`.
//!
//! Forward ops are mostly called through Burn's public functions (`burn::tensor::module`,
//! `burn::tensor::activation`); backward ops and the quantized ops are called at the primitive
//! level (`B::conv2d_x_backward(...)`, `B::q_add(...)`), where each call reaches exactly one op of
//! the backend under test.

use crate::common::*;
use crate::diff;
use burn::tensor::backend::Backend;
use burn::tensor::module;
use burn::tensor::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConvOptions, FloatTensor,
    IntTensor, InterpolateMode, InterpolateOptions, PaddedConvOptions, QuantizedTensor,
    UnfoldOptions,
};
use burn::tensor::quantization::{
    BlockSize, Calibration, QuantLevel, QuantScheme, QuantStore, QuantValue,
    QuantizationParametersPrimitive, compute_q_params, compute_range,
};
use burn::tensor::{
    Bool, FloatDType, Int, Scalar, Slice, Tensor, TensorData, TensorPrimitive, Transaction,
    activation, read_sync,
};
use rand::Rng;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs every differential case of the module, activation, quantized and transaction ops, each on
/// `H` and on burn-ndarray with the same random inputs, and requires bit-identical outputs.
///
/// Every method of `ModuleOps`, `ActivationOps`, `QTensorOps` and `TransactionOps` is called on
/// `H` by at least one case. A few are not implemented by burn-ndarray: `rfft`, `irfft`,
/// `ctc_loss_backward` (left to autodiff), the backward passes of the non-nearest
/// interpolations, and `q_argtopk` (through `float_argtopk`): those calls require both backends
/// to fail with the same panic message (see [`outputs_or_panic_message`]).
pub fn run_all() {
    embedding_and_linear();
    convolutions();
    deformable_convolution();
    unfold();
    pooling();
    interpolation();
    attention_and_normalization();
    ctc_and_fft();
    activations();
    autodiff_training_step();
    quantized();
    transactions();
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The float primitive of a tensor.
fn fp<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// Reads a float primitive.
fn read<B: Backend>(t: FloatTensor<B>) -> TensorData {
    read_sync(B::float_into_data(t)).expect("float read")
}

/// Reads an int primitive.
fn read_int<B: Backend>(t: IntTensor<B>) -> TensorData {
    read_sync(B::int_into_data(t)).expect("int read")
}

/// Reads a quantized primitive: its quantized data (values, scheme and scales) and its
/// dequantized values.
fn read_q<B: Backend>(q: QuantizedTensor<B>) -> Vec<TensorData> {
    let dequantized = B::dequantize(q.clone(), FloatDType::F32);
    vec![
        read_sync(B::q_into_data(q)).expect("quantized read"),
        read::<B>(dequantized),
    ]
}

/// Reads the result of a quantized op, quantized or not (burn-ndarray does not propagate
/// quantization, so most of them are float).
fn read_p<B: Backend>(p: TensorPrimitive<B>) -> Vec<TensorData> {
    match p {
        TensorPrimitive::Float(t) => vec![read::<B>(t)],
        TensorPrimitive::QFloat(q) => read_q::<B>(q),
    }
}

/// `[a, b, rest...]` as a shape of rank `D = S + 2`.
fn dims<const S: usize, const D: usize>(a: usize, b: usize, rest: [usize; S]) -> [usize; D] {
    assert_eq!(D, S + 2);
    let mut out = [0; D];
    out[0] = a;
    out[1] = b;
    out[2..].copy_from_slice(&rest);
    out
}

/// Output size of a convolution along one dimension.
fn conv_out(size: usize, kernel: usize, stride: usize, padding: usize, dilation: usize) -> usize {
    (size + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1
}

/// A float tensor of multiples of 1/4 in [-2, 2]: products and short sums of such values are exact
/// in f32, so they do not depend on the order of accumulation.
fn quarters<B: Backend, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    shape: [usize; D],
) -> Tensor<B, D> {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| rng.random_range(-8i32..=8) as f32 / 4.0)
        .collect();
    Tensor::from_data(TensorData::new(v, shape), dev)
}

/// A float tensor of values in [lo, hi) with a random sign (never close to zero when lo > 0).
fn signed_in<B: Backend, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    shape: [usize; D],
    lo: f32,
    hi: f32,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            let x = rng.random_range(lo..hi);
            if rng.random_bool(0.5) { x } else { -x }
        })
        .collect();
    Tensor::from_data(TensorData::new(v, shape), dev)
}

/// A float tensor in [-2, 2) where about half of the values are exactly zero.
fn sparse<B: Backend, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    shape: [usize; D],
) -> Tensor<B, D> {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| {
            let x = rng.random_range(-2.0..2.0);
            if rng.random_bool(0.5) { 0.0 } else { x }
        })
        .collect();
    Tensor::from_data(TensorData::new(v, shape), dev)
}

/// An attention mask (true = masked) where the first key is never masked, so that no row of the
/// attention is fully masked.
fn attention_mask<B: Backend>(
    rng: &mut TestRng,
    dev: &B::Device,
    shape: [usize; 4],
) -> Tensor<B, 4, Bool> {
    let n = shape.iter().product();
    let v: Vec<bool> = (0..n)
        .map(|i| i % shape[3] != 0 && rng.random_bool(0.5))
        .collect();
    Tensor::from_data(TensorData::new(v, shape), dev)
}

/// Runs `op` and returns its outputs, or, when it panics, its panic message (as bytes) as the
/// only output: the case then requires both backends to panic with the same message. Only used
/// for ops that burn-ndarray does not implement; should it implement them one day, their results
/// are compared as usual.
fn outputs_or_panic_message(op: impl FnOnce() -> Vec<TensorData>) -> Vec<TensorData> {
    match catch_unwind(AssertUnwindSafe(op)) {
        Ok(outputs) => outputs,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "<non-string panic payload>".to_string());
            let bytes = message.into_bytes();
            let n = bytes.len();
            vec![TensorData::new(bytes, [n])]
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Embedding and linear
// ---------------------------------------------------------------------------------------------

fn embedding_and_linear() {
    // embedding and its backward (repeated indices accumulate), with size-1 vocabulary, batch,
    // sequence and model dimensions.
    diff!("embedding", |dev, rng| {
        let mut out = Vec::new();
        for (n_emb, d_model, batch, seq) in
            [(10, 4, 2, 3), (1, 5, 1, 1), (7, 1, 3, 6), (3, 8, 4, 9)]
        {
            let weights = float::<B, 2>(rng, dev, [n_emb, d_model]);
            let indices = int::<B, 2>(rng, dev, [batch, seq], 0, n_emb as i64);
            let y = module::embedding(weights.clone(), indices.clone());
            let grad = float::<B, 3>(rng, dev, [batch, seq, d_model]);
            let weights_grad =
                B::embedding_backward(fp(weights), fp(grad), indices.into_primitive());
            out.push(y.into_data());
            out.push(read::<B>(weights_grad));
        }
        out
    });

    // linear forward on inputs of rank 1 to 4, with and without bias.
    diff!("linear", |dev, rng| {
        let w = float::<B, 2>(rng, dev, [5, 3]);
        let b = float::<B, 1>(rng, dev, [3]);
        let x1 = float::<B, 1>(rng, dev, [5]);
        let x2 = float::<B, 2>(rng, dev, [4, 5]);
        let x3 = float::<B, 3>(rng, dev, [2, 1, 5]);
        let x4 = float::<B, 4>(rng, dev, [2, 3, 4, 5]);
        let w1 = float::<B, 2>(rng, dev, [1, 1]);
        let x_unit = float::<B, 2>(rng, dev, [3, 1]);
        vec![
            module::linear(x1, w.clone(), Some(b.clone())).into_data(),
            module::linear(x2.clone(), w.clone(), Some(b.clone())).into_data(),
            module::linear(x2, w.clone(), None).into_data(),
            module::linear(x3, w.clone(), Some(b.clone())).into_data(),
            module::linear(x4, w, Some(b)).into_data(),
            module::linear(x_unit, w1, None).into_data(),
        ]
    });

    // linear backward (input, weight and bias gradients) for batched inputs of rank 2 to 4.
    diff!("linear_backward", |dev, rng| {
        let mut out = check_linear_backward::<B, 2>(rng, dev, [4, 5], 3);
        out.extend(check_linear_backward::<B, 3>(rng, dev, [2, 3, 6], 2));
        out.extend(check_linear_backward::<B, 4>(rng, dev, [2, 2, 3, 4], 5));
        out.extend(check_linear_backward::<B, 2>(rng, dev, [1, 1], 1));
        out
    });
}

/// The three linear backward ops for an input of shape `x_shape` (`[..., d_in]`) and an output
/// of `d_out` features.
fn check_linear_backward<B: Backend, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    x_shape: [usize; D],
    d_out: usize,
) -> Vec<TensorData> {
    let mut g_shape = x_shape;
    g_shape[D - 1] = d_out;
    let w = float::<B, 2>(rng, dev, [x_shape[D - 1], d_out]);
    let x = fp(float::<B, D>(rng, dev, x_shape));
    let g = fp(float::<B, D>(rng, dev, g_shape));
    vec![
        read::<B>(B::linear_x_backward(fp(w), g.clone())),
        read::<B>(B::linear_weight_backward(x, g.clone())),
        read::<B>(B::linear_bias_backward(g)),
    ]
}

// ---------------------------------------------------------------------------------------------
// Convolutions
// ---------------------------------------------------------------------------------------------

/// One convolution configuration (`padding_out` is only used by transposed convolutions).
#[derive(Clone, Copy)]
struct ConvCfg<const S: usize> {
    batch: usize,
    c_in: usize,
    c_out: usize,
    size: [usize; S],
    kernel: [usize; S],
    stride: [usize; S],
    padding: [usize; S],
    dilation: [usize; S],
    groups: usize,
    bias: bool,
    padding_out: [usize; S],
}

#[allow(clippy::too_many_arguments)]
const fn conv<const S: usize>(
    batch: usize,
    c_in: usize,
    c_out: usize,
    size: [usize; S],
    kernel: [usize; S],
    stride: [usize; S],
    padding: [usize; S],
    dilation: [usize; S],
    groups: usize,
    bias: bool,
) -> ConvCfg<S> {
    ConvCfg {
        batch,
        c_in,
        c_out,
        size,
        kernel,
        stride,
        padding,
        dilation,
        groups,
        bias,
        padding_out: [0; S],
    }
}

impl<const S: usize> ConvCfg<S> {
    const fn padding_out(mut self, padding_out: [usize; S]) -> Self {
        self.padding_out = padding_out;
        self
    }
}

type ConvForward<B, const D: usize, O> =
    fn(Tensor<B, D>, Tensor<B, D>, Option<Tensor<B, 1>>, O) -> Tensor<B, D>;
type ConvBackward<B, O> = fn(FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, O) -> FloatTensor<B>;
type BiasBackward<B> = fn(FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>;

/// A convolution forward (through `burn::tensor::module`) and its three backward ops, with the
/// output gradient drawn at random in the shape of the output.
fn check_conv<B: Backend, const S: usize, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    c: &ConvCfg<S>,
    forward: ConvForward<B, D, ConvOptions<S>>,
    x_backward: ConvBackward<B, ConvOptions<S>>,
    weight_backward: ConvBackward<B, ConvOptions<S>>,
    bias_backward: BiasBackward<B>,
) -> Vec<TensorData> {
    let options = ConvOptions::new(c.stride, c.padding, c.dilation, c.groups);
    let x = float::<B, D>(rng, dev, dims(c.batch, c.c_in, c.size));
    let w = float::<B, D>(rng, dev, dims(c.c_out, c.c_in / c.groups, c.kernel));
    let b = float::<B, 1>(rng, dev, [c.c_out]);
    let y = forward(
        x.clone(),
        w.clone(),
        c.bias.then(|| b.clone()),
        options.clone(),
    );
    let g = float::<B, D>(rng, dev, y.dims());
    let (x, w, b, g) = (fp(x), fp(w), fp(b), fp(g));
    vec![
        y.into_data(),
        read::<B>(x_backward(x.clone(), w.clone(), g.clone(), options.clone())),
        read::<B>(weight_backward(x.clone(), w, g.clone(), options)),
        read::<B>(bias_backward(x, b, g)),
    ]
}

/// A transposed convolution forward (through `burn::tensor::module`) and its three backward ops.
fn check_conv_transpose<B: Backend, const S: usize, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    c: &ConvCfg<S>,
    forward: ConvForward<B, D, ConvTransposeOptions<S>>,
    x_backward: fn(FloatTensor<B>, FloatTensor<B>, ConvTransposeOptions<S>) -> FloatTensor<B>,
    weight_backward: ConvBackward<B, ConvTransposeOptions<S>>,
    bias_backward: BiasBackward<B>,
) -> Vec<TensorData> {
    let options =
        ConvTransposeOptions::new(c.stride, c.padding, c.padding_out, c.dilation, c.groups);
    let x = float::<B, D>(rng, dev, dims(c.batch, c.c_in, c.size));
    let w = float::<B, D>(rng, dev, dims(c.c_in, c.c_out / c.groups, c.kernel));
    let b = float::<B, 1>(rng, dev, [c.c_out]);
    let y = forward(
        x.clone(),
        w.clone(),
        c.bias.then(|| b.clone()),
        options.clone(),
    );
    let g = float::<B, D>(rng, dev, y.dims());
    let (x, w, b, g) = (fp(x), fp(w), fp(b), fp(g));
    vec![
        y.into_data(),
        read::<B>(x_backward(w.clone(), g.clone(), options.clone())),
        read::<B>(weight_backward(x.clone(), w, g.clone(), options)),
        read::<B>(bias_backward(x, b, g)),
    ]
}

// The convolution configurations: strides, paddings, dilations, groups (depthwise too), no
// bias, size-1 inputs and kernels, batch 1; output paddings for the transposed ones.
#[rustfmt::skip]
const CONV1D: [ConvCfg<1>; 6] = [
    //   batch c_in c_out size  kernel stride padding dilation groups bias
    conv(2,    3,   4,    [11], [3],   [1],   [1],    [1],     1,     true),
    conv(1,    4,   6,    [16], [4],   [3],   [2],    [2],     2,     false),
    conv(3,    6,   6,    [7],  [3],   [2],   [0],    [1],     6,     true),
    conv(1,    1,   1,    [1],  [1],   [1],   [0],    [1],     1,     true),
    conv(2,    2,   3,    [5],  [5],   [1],   [2],    [1],     1,     true),
    conv(1,    3,   2,    [9],  [2],   [4],   [1],    [3],     1,     false),
];

#[rustfmt::skip]
const CONV2D: [ConvCfg<2>; 6] = [
    //   batch c_in c_out size     kernel  stride  padding dilation groups bias
    conv(2,    3,   4,    [9, 7],  [3, 3], [1, 1], [1, 1], [1, 1],  1,     true),
    conv(1,    4,   6,    [8, 11], [3, 2], [2, 3], [0, 1], [1, 2],  2,     false),
    conv(3,    6,   6,    [5, 5],  [3, 3], [1, 1], [2, 2], [2, 2],  6,     true),
    conv(1,    1,   1,    [1, 1],  [1, 1], [1, 1], [0, 0], [1, 1],  1,     true),
    conv(2,    2,   3,    [6, 1],  [2, 1], [2, 1], [1, 0], [1, 1],  1,     true),
    conv(1,    3,   5,    [10, 9], [5, 4], [3, 2], [2, 1], [1, 1],  1,     true),
];

#[rustfmt::skip]
const CONV3D: [ConvCfg<3>; 4] = [
    //   batch c_in c_out size       kernel     stride     padding    dilation   groups bias
    conv(2,    2,   3,    [4, 5, 3], [3, 3, 2], [1, 1, 1], [1, 1, 0], [1, 1, 1], 1,     true),
    conv(1,    4,   4,    [6, 5, 7], [2, 3, 3], [2, 1, 2], [0, 1, 1], [1, 2, 1], 2,     false),
    conv(1,    1,   1,    [1, 1, 1], [1, 1, 1], [1, 1, 1], [0, 0, 0], [1, 1, 1], 1,     true),
    conv(3,    3,   3,    [3, 4, 1], [3, 1, 1], [1, 2, 1], [1, 0, 0], [1, 1, 1], 3,     true),
];

#[rustfmt::skip]
const CONV_TRANSPOSE1D: [ConvCfg<1>; 5] = [
    //   batch c_in c_out size kernel stride padding dilation groups bias
    conv(2,    3,   4,    [7], [3],   [2],   [1],    [1],     1,     true).padding_out([1]),
    conv(1,    4,   6,    [5], [4],   [3],   [2],    [1],     2,     false).padding_out([2]),
    conv(3,    4,   4,    [6], [3],   [1],   [0],    [2],     4,     true).padding_out([1]),
    conv(1,    1,   1,    [1], [1],   [1],   [0],    [1],     1,     true),
    conv(2,    2,   3,    [4], [2],   [2],   [0],    [1],     1,     true),
];

#[rustfmt::skip]
const CONV_TRANSPOSE2D: [ConvCfg<2>; 5] = [
    //   batch c_in c_out size    kernel  stride  padding dilation groups bias
    conv(2,    3,   4,    [5, 4], [3, 3], [2, 2], [1, 1], [1, 1],  1,     true)
        .padding_out([1, 0]),
    conv(1,    4,   6,    [3, 6], [2, 3], [1, 3], [0, 1], [2, 1],  2,     false)
        .padding_out([1, 2]),
    conv(3,    4,   4,    [4, 4], [3, 3], [2, 2], [0, 0], [2, 2],  4,     true),
    conv(1,    1,   1,    [1, 1], [1, 1], [1, 1], [0, 0], [1, 1],  1,     true),
    conv(2,    2,   3,    [5, 1], [3, 1], [1, 1], [1, 0], [1, 1],  1,     true),
];

#[rustfmt::skip]
const CONV_TRANSPOSE3D: [ConvCfg<3>; 4] = [
    //   batch c_in c_out size       kernel     stride     padding    dilation   groups bias
    conv(2,    2,   3,    [3, 4, 2], [3, 2, 2], [2, 1, 2], [1, 0, 1], [1, 1, 1], 1,     true)
        .padding_out([1, 0, 1]),
    conv(1,    4,   2,    [2, 3, 3], [2, 3, 2], [1, 2, 1], [0, 1, 0], [2, 1, 1], 2,     false),
    conv(1,    1,   1,    [1, 1, 1], [1, 1, 1], [1, 1, 1], [0, 0, 0], [1, 1, 1], 1,     true),
    conv(2,    3,   3,    [2, 1, 3], [1, 1, 3], [1, 1, 2], [0, 0, 1], [1, 1, 1], 3,     true)
        .padding_out([0, 0, 1]),
];

fn convolutions() {
    // conv1d/2d/3d forward and x/weight/bias backward: strides, paddings, dilations, groups
    // (including depthwise), no bias, size-1 inputs and kernels, batch 1.
    diff!("conv1d", |dev, rng| {
        CONV1D
            .iter()
            .flat_map(|c| {
                check_conv::<B, 1, 3>(
                    rng,
                    dev,
                    c,
                    |x, w, b, o| module::conv1d(x, w, b, o),
                    B::conv1d_x_backward,
                    B::conv1d_weight_backward,
                    B::conv1d_bias_backward,
                )
            })
            .collect()
    });
    diff!("conv2d", |dev, rng| {
        CONV2D
            .iter()
            .flat_map(|c| {
                check_conv::<B, 2, 4>(
                    rng,
                    dev,
                    c,
                    |x, w, b, o| module::conv2d(x, w, b, o),
                    B::conv2d_x_backward,
                    B::conv2d_weight_backward,
                    B::conv2d_bias_backward,
                )
            })
            .collect()
    });
    diff!("conv3d", |dev, rng| {
        CONV3D
            .iter()
            .flat_map(|c| {
                check_conv::<B, 3, 5>(
                    rng,
                    dev,
                    c,
                    |x, w, b, o| module::conv3d(x, w, b, o),
                    B::conv3d_x_backward,
                    B::conv3d_weight_backward,
                    B::conv3d_bias_backward,
                )
            })
            .collect()
    });

    // Asymmetric padding: the public functions pad explicitly, then call the backend conv.
    diff!("conv_asymmetric_padding", |dev, rng| {
        let x1 = float::<B, 3>(rng, dev, [2, 3, 8]);
        let w1 = float::<B, 3>(rng, dev, [4, 3, 3]);
        let x2 = float::<B, 4>(rng, dev, [1, 2, 7, 6]);
        let w2 = float::<B, 4>(rng, dev, [3, 2, 3, 2]);
        let b2 = float::<B, 1>(rng, dev, [3]);
        let y1 = module::conv1d(
            x1,
            w1,
            None,
            PaddedConvOptions::asymmetric([2], [0], [2], [1], 1),
        );
        let y2 = module::conv2d(
            x2,
            w2,
            Some(b2),
            PaddedConvOptions::asymmetric([1, 2], [0, 1], [2, 0], [1, 1], 1),
        );
        vec![y1.into_data(), y2.into_data()]
    });

    // Transposed convolutions forward and backward: strides, paddings, output paddings,
    // dilations, groups (including depthwise), size-1 inputs.
    diff!("conv_transpose1d", |dev, rng| {
        CONV_TRANSPOSE1D
            .iter()
            .flat_map(|c| {
                check_conv_transpose::<B, 1, 3>(
                    rng,
                    dev,
                    c,
                    |x, w, b, o| module::conv_transpose1d(x, w, b, o),
                    B::conv_transpose1d_x_backward,
                    B::conv_transpose1d_weight_backward,
                    B::conv_transpose1d_bias_backward,
                )
            })
            .collect()
    });
    diff!("conv_transpose2d", |dev, rng| {
        CONV_TRANSPOSE2D
            .iter()
            .flat_map(|c| {
                check_conv_transpose::<B, 2, 4>(
                    rng,
                    dev,
                    c,
                    |x, w, b, o| module::conv_transpose2d(x, w, b, o),
                    B::conv_transpose2d_x_backward,
                    B::conv_transpose2d_weight_backward,
                    B::conv_transpose2d_bias_backward,
                )
            })
            .collect()
    });
    diff!("conv_transpose3d", |dev, rng| {
        CONV_TRANSPOSE3D
            .iter()
            .flat_map(|c| {
                check_conv_transpose::<B, 3, 5>(
                    rng,
                    dev,
                    c,
                    |x, w, b, o| module::conv_transpose3d(x, w, b, o),
                    B::conv_transpose3d_x_backward,
                    B::conv_transpose3d_weight_backward,
                    B::conv_transpose3d_bias_backward,
                )
            })
            .collect()
    });
}

// ---------------------------------------------------------------------------------------------
// Deformable convolution
// ---------------------------------------------------------------------------------------------

fn deformable_convolution() {
    // deform_conv2d forward and backward, with and without mask and bias, weight and offset
    // groups, strides, paddings, dilations. burn-ndarray accumulates the input gradient with
    // atomic adds from several threads, in no fixed order: every input is a multiple of 1/4 (the
    // offsets too, so that the bilinear weights are multiples of 1/16), which makes every sum
    // exact and the reference deterministic.
    diff!("deform_conv2d", |dev, rng| {
        // (convolution with the weight groups as `groups`, offset groups, mask)
        #[rustfmt::skip]
        let cases = [
            // conv(batch, c_in, c_out, size, kernel, stride, padding, dilation, groups, bias)
            (conv(2, 3, 4, [6, 5], [3, 3], [1, 1], [1, 1], [1, 1], 1, true),  1, true),
            (conv(1, 4, 6, [7, 8], [3, 2], [2, 1], [0, 1], [1, 2], 2, true),  2, false),
            (conv(1, 4, 2, [5, 5], [2, 2], [1, 2], [1, 0], [2, 1], 1, false), 4, true),
            (conv(1, 1, 1, [1, 1], [1, 1], [1, 1], [0, 0], [1, 1], 1, true),  1, true),
            (conv(2, 2, 2, [4, 3], [3, 3], [1, 1], [1, 1], [1, 1], 2, false), 1, false),
        ];
        let mut out = Vec::new();
        for (c, og, has_mask) in cases {
            let (n, c_in, c_out, wg) = (c.batch, c.c_in, c.c_out, c.groups);
            let ([h, w], [kh, kw]) = (c.size, c.kernel);
            let (stride, padding, dilation, has_bias) = (c.stride, c.padding, c.dilation, c.bias);
            let options = DeformConvOptions::new(stride, padding, dilation, wg, og);
            let oh = conv_out(h, kh, stride[0], padding[0], dilation[0]);
            let ow = conv_out(w, kw, stride[1], padding[1], dilation[1]);
            let x = quarters::<B, 4>(rng, dev, [n, c_in, h, w]);
            let offset = quarters::<B, 4>(rng, dev, [n, 2 * og * kh * kw, oh, ow]);
            let weight = quarters::<B, 4>(rng, dev, [c_out, c_in / wg, kh, kw]);
            let mask = quarters::<B, 4>(rng, dev, [n, og * kh * kw, oh, ow]);
            let bias = quarters::<B, 1>(rng, dev, [c_out]);
            let mask = has_mask.then_some(mask);
            let bias = has_bias.then_some(bias);
            let y = module::deform_conv2d(
                x.clone(),
                offset.clone(),
                weight.clone(),
                mask.clone(),
                bias.clone(),
                options.clone(),
            );
            let grad = quarters::<B, 4>(rng, dev, y.dims());
            out.push(y.into_data());
            let grads = B::deform_conv2d_backward(
                fp(x),
                fp(offset),
                fp(weight),
                mask.map(fp),
                bias.map(fp),
                fp(grad),
                options,
            );
            out.push(read::<B>(grads.x_grad));
            out.push(read::<B>(grads.offset_grad));
            out.push(read::<B>(grads.weight_grad));
            out.extend(grads.mask_grad.map(read::<B>));
            out.extend(grads.bias_grad.map(read::<B>));
        }
        out
    });
}

// ---------------------------------------------------------------------------------------------
// Unfold
// ---------------------------------------------------------------------------------------------

fn unfold() {
    // unfold4d: the plain path (no padding, no dilation) and the conv-based one.
    diff!("unfold4d", |dev, rng| {
        let cases = [
            ([2, 3, 6, 5], [2, 2], [1, 1], [0, 0], [1, 1]),
            ([1, 2, 7, 8], [3, 2], [2, 3], [0, 0], [1, 1]),
            ([1, 2, 5, 5], [3, 3], [1, 1], [1, 1], [1, 1]),
            ([2, 1, 9, 7], [2, 3], [2, 1], [1, 0], [2, 2]),
            ([1, 1, 1, 1], [1, 1], [1, 1], [0, 0], [1, 1]),
        ];
        cases
            .into_iter()
            .map(|(shape, kernel, stride, padding, dilation)| {
                let x = float::<B, 4>(rng, dev, shape);
                module::unfold4d(x, kernel, UnfoldOptions::new(stride, padding, dilation))
                    .into_data()
            })
            .collect()
    });
}

// ---------------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------------

fn pooling() {
    // avg_pool1d and its backward: count_include_pad, ceil_mode, paddings, odd lengths.
    diff!("avg_pool1d", |dev, rng| {
        // shape, kernel, stride, padding, count_include_pad, ceil_mode
        let cases = [
            ([2, 3, 9], 3, 2, 1, true, false),
            ([1, 2, 11], 2, 1, 1, false, true),
            ([3, 1, 5], 5, 1, 2, false, false),
            ([1, 4, 1], 1, 1, 0, true, true),
            ([2, 2, 7], 3, 3, 0, true, true),
            ([1, 1, 10], 4, 3, 2, false, true),
        ];
        let mut out = Vec::new();
        for (shape, k, s, p, count_pad, ceil) in cases {
            let x = float::<B, 3>(rng, dev, shape);
            let y = module::avg_pool1d(x.clone(), k, s, p, count_pad, ceil);
            let g = float::<B, 3>(rng, dev, y.dims());
            out.push(y.into_data());
            out.push(read::<B>(B::avg_pool1d_backward(
                fp(x),
                fp(g),
                k,
                s,
                p,
                count_pad,
                ceil,
            )));
        }
        out
    });

    // avg_pool2d and its backward.
    diff!("avg_pool2d", |dev, rng| {
        let cases = [
            ([2, 3, 9, 7], [3, 3], [2, 2], [1, 1], true, false),
            ([1, 2, 8, 11], [2, 3], [2, 1], [0, 1], false, true),
            ([3, 1, 5, 5], [5, 5], [1, 1], [2, 2], false, false),
            ([1, 4, 1, 6], [1, 3], [1, 2], [0, 1], true, true),
            ([2, 2, 7, 7], [3, 3], [3, 3], [0, 0], true, true),
            ([1, 1, 10, 9], [4, 2], [3, 2], [2, 1], false, true),
        ];
        let mut out = Vec::new();
        for (shape, k, s, p, count_pad, ceil) in cases {
            let x = float::<B, 4>(rng, dev, shape);
            let y = module::avg_pool2d(x.clone(), k, s, p, count_pad, ceil);
            let g = float::<B, 4>(rng, dev, y.dims());
            out.push(y.into_data());
            out.push(read::<B>(B::avg_pool2d_backward(
                fp(x),
                fp(g),
                k,
                s,
                p,
                count_pad,
                ceil,
            )));
        }
        out
    });

    // adaptive_avg_pool1d/2d and their backward: shrinking (divisible or not), identity,
    // growing, to size 1.
    diff!("adaptive_avg_pool1d", |dev, rng| {
        let mut out = Vec::new();
        for (shape, size) in [
            ([2, 3, 11], 4),
            ([1, 2, 8], 8),
            ([2, 1, 5], 1),
            ([1, 3, 4], 7),
            ([1, 1, 1], 3),
        ] {
            let x = float::<B, 3>(rng, dev, shape);
            let y = module::adaptive_avg_pool1d(x.clone(), size);
            let g = float::<B, 3>(rng, dev, y.dims());
            out.push(y.into_data());
            out.push(read::<B>(B::adaptive_avg_pool1d_backward(fp(x), fp(g))));
        }
        out
    });
    diff!("adaptive_avg_pool2d", |dev, rng| {
        let mut out = Vec::new();
        let cases = [
            ([2, 3, 7, 9], [3, 4]),
            ([1, 2, 6, 6], [6, 6]),
            ([2, 1, 5, 4], [1, 1]),
            ([1, 2, 3, 4], [5, 7]),
            ([1, 1, 1, 5], [2, 2]),
        ];
        for (shape, size) in cases {
            let x = float::<B, 4>(rng, dev, shape);
            let y = module::adaptive_avg_pool2d(x.clone(), size);
            let g = float::<B, 4>(rng, dev, y.dims());
            out.push(y.into_data());
            out.push(read::<B>(B::adaptive_avg_pool2d_backward(fp(x), fp(g))));
        }
        out
    });

    // max_pool1d, with indices, and the backward from the indices: dilations, ceil_mode.
    diff!("max_pool1d", |dev, rng| {
        // shape, kernel, stride, padding, dilation, ceil_mode
        let cases = [
            ([2, 3, 9], 3, 2, 1, 1, false),
            ([1, 2, 11], 2, 2, 1, 2, true),
            ([3, 1, 5], 5, 1, 2, 1, false),
            ([1, 4, 1], 1, 1, 0, 1, true),
            ([2, 2, 8], 3, 3, 0, 1, true),
        ];
        let mut out = Vec::new();
        for (shape, k, s, p, d, ceil) in cases {
            let x = float::<B, 3>(rng, dev, shape);
            let y = module::max_pool1d(x.clone(), k, s, p, d, ceil);
            let (y2, indices) = module::max_pool1d_with_indices(x.clone(), k, s, p, d, ceil);
            let g = float::<B, 3>(rng, dev, y2.dims());
            let grad = B::max_pool1d_with_indices_backward(
                fp(x),
                k,
                s,
                p,
                d,
                ceil,
                fp(g),
                indices.clone().into_primitive(),
            );
            out.push(y.into_data());
            out.push(y2.into_data());
            out.push(indices.into_data());
            out.push(read::<B>(grad.x_grad));
        }
        out
    });

    // max_pool2d, with indices, and the backward from the indices.
    diff!("max_pool2d", |dev, rng| {
        let cases = [
            ([2, 3, 9, 7], [3, 3], [2, 2], [1, 1], [1, 1], false),
            ([1, 2, 10, 11], [2, 3], [2, 2], [1, 0], [2, 1], true),
            ([3, 1, 5, 5], [5, 5], [1, 1], [2, 2], [1, 1], false),
            ([1, 4, 1, 6], [1, 2], [1, 2], [0, 1], [1, 2], true),
            ([2, 2, 8, 8], [3, 3], [3, 3], [0, 0], [1, 1], true),
        ];
        let mut out = Vec::new();
        for (shape, k, s, p, d, ceil) in cases {
            let x = float::<B, 4>(rng, dev, shape);
            let y = module::max_pool2d(x.clone(), k, s, p, d, ceil);
            let (y2, indices) = module::max_pool2d_with_indices(x.clone(), k, s, p, d, ceil);
            let g = float::<B, 4>(rng, dev, y2.dims());
            let grad = B::max_pool2d_with_indices_backward(
                fp(x),
                k,
                s,
                p,
                d,
                ceil,
                fp(g),
                indices.clone().into_primitive(),
            );
            out.push(y.into_data());
            out.push(y2.into_data());
            out.push(indices.into_data());
            out.push(read::<B>(grad.x_grad));
        }
        out
    });
}

// ---------------------------------------------------------------------------------------------
// Interpolation
// ---------------------------------------------------------------------------------------------

const INTERPOLATE_SIZES: [([usize; 4], [usize; 2]); 5] = [
    ([2, 3, 5, 7], [9, 12]),
    ([1, 2, 8, 9], [3, 4]),
    ([1, 1, 4, 6], [4, 6]),
    ([2, 1, 1, 4], [3, 8]),
    ([1, 2, 6, 5], [1, 1]),
];

fn interpolation() {
    // interpolate forward in every mode, aligned corners or not, up/down-sampling, identity,
    // size-1 input and output dims.
    diff!("interpolate", |dev, rng| {
        let mut out = Vec::new();
        for mode in [
            InterpolateMode::Nearest,
            InterpolateMode::Bilinear,
            InterpolateMode::Bicubic,
            InterpolateMode::Lanczos3,
        ] {
            for align_corners in [true, false] {
                for (shape, size) in INTERPOLATE_SIZES {
                    let x = float::<B, 4>(rng, dev, shape);
                    let options =
                        InterpolateOptions::new(mode.clone()).with_align_corners(align_corners);
                    out.push(module::interpolate(x, size, options).into_data());
                }
            }
        }
        out
    });

    // interpolate backward, nearest (the only mode burn-ndarray implements).
    diff!("interpolate_backward", |dev, rng| {
        let mut out = Vec::new();
        for align_corners in [true, false] {
            for (shape, size) in INTERPOLATE_SIZES {
                let x = float::<B, 4>(rng, dev, shape);
                let g = float::<B, 4>(rng, dev, [shape[0], shape[1], size[0], size[1]]);
                let options = InterpolateOptions::new(InterpolateMode::Nearest)
                    .with_align_corners(align_corners);
                out.push(read::<B>(B::interpolate_backward(
                    fp(x),
                    fp(g),
                    size,
                    options,
                )));
            }
        }
        out
    });

    // The other modes' backward panics on burn-ndarray: both backends must panic alike.
    diff!("interpolate_backward_unsupported", |dev, rng| {
        let mut out = Vec::new();
        for mode in [
            InterpolateMode::Bilinear,
            InterpolateMode::Bicubic,
            InterpolateMode::Lanczos3,
        ] {
            let x = float::<B, 4>(rng, dev, [1, 2, 4, 5]);
            let g = float::<B, 4>(rng, dev, [1, 2, 7, 3]);
            out.extend(outputs_or_panic_message(|| {
                let options = InterpolateOptions::new(mode);
                vec![read::<B>(B::interpolate_backward(
                    fp(x),
                    fp(g),
                    [7, 3],
                    options,
                ))]
            }));
        }
        out
    });
}

// ---------------------------------------------------------------------------------------------
// Attention and layer norm
// ---------------------------------------------------------------------------------------------

fn attention_and_normalization() {
    // attention: mask, additive bias, custom scale, softcap, causal (also with more keys than
    // queries), single query/key/head.
    diff!("attention", |dev, rng| {
        // batch, heads, seq_q, seq_k, head_dim, val_dim, mask, bias, scale, softcap, causal
        let cases = [
            (2, 3, 4, 6, 8, 5, false, false, None, None, false),
            (1, 2, 5, 5, 4, 4, true, false, None, None, false),
            (2, 1, 3, 7, 6, 2, false, true, Some(0.3), None, false),
            (1, 4, 6, 6, 8, 8, false, false, None, Some(5.0), true),
            (1, 2, 3, 5, 4, 4, true, true, None, None, true),
            (1, 1, 1, 1, 3, 1, true, true, Some(1.0), Some(2.0), true),
            (3, 2, 4, 3, 5, 6, true, true, Some(0.7), Some(1.5), false),
        ];
        let mut out = Vec::new();
        for (b, h, sq, sk, d, dv, has_mask, has_bias, scale, softcap, is_causal) in cases {
            let q = float::<B, 4>(rng, dev, [b, h, sq, d]);
            let k = float::<B, 4>(rng, dev, [b, h, sk, d]);
            let v = float::<B, 4>(rng, dev, [b, h, sk, dv]);
            let mask = attention_mask::<B>(rng, dev, [b, h, sq, sk]);
            let bias = float::<B, 4>(rng, dev, [b, h, sq, sk]);
            let options = AttentionModuleOptions {
                scale,
                softcap,
                is_causal,
            };
            let y = module::attention(
                q,
                k,
                v,
                has_mask.then_some(mask),
                has_bias.then_some(bias),
                options,
            );
            out.push(y.into_data());
        }
        out
    });

    // layer_norm over the last dim, with and without beta, ranks 2 to 4, d_model 1.
    diff!("layer_norm", |dev, rng| {
        let mut out = Vec::new();
        let x2 = float_in::<B, 2>(rng, dev, [4, 8], -5.0, 5.0);
        let x3 = float::<B, 3>(rng, dev, [2, 3, 5]);
        let x4 = float::<B, 4>(rng, dev, [1, 2, 1, 7]);
        let x_unit = float::<B, 2>(rng, dev, [3, 1]);
        let inputs = [
            (fp(x2), 8, true, 1e-5),
            (fp(x3), 5, false, 1e-3),
            (fp(x4), 7, true, 0.5),
            (fp(x_unit), 1, true, 1e-5),
        ];
        for (x, d_model, has_beta, epsilon) in inputs {
            let gamma = float::<B, 1>(rng, dev, [d_model]);
            let beta = float::<B, 1>(rng, dev, [d_model]);
            let y = B::layer_norm(x, fp(gamma), has_beta.then(|| fp(beta)), epsilon);
            out.push(read::<B>(y));
        }
        out
    });
}

// ---------------------------------------------------------------------------------------------
// CTC loss and FFT
// ---------------------------------------------------------------------------------------------

fn ctc_and_fft() {
    // ctc_loss: blank first or last, variable input and target lengths, repeated labels, a
    // target too long for its input (infinite loss), batch 1.
    diff!("ctc_loss", |dev, rng| {
        // time, batch, classes, max target length, blank, lengths drawn (or the infeasible case)
        let cases = [
            (12, 3, 5, 4, 0, true),
            (8, 2, 4, 3, 3, true),
            (6, 1, 3, 2, 0, true),
            (20, 4, 6, 6, 5, true),
            (3, 1, 4, 3, 0, false),
        ];
        let mut out = Vec::new();
        for (t, n, c, s, blank, draw_lengths) in cases {
            let logits = float::<B, 3>(rng, dev, [t, n, c]);
            let log_probs = activation::log_softmax(logits, 2);
            // Labels are the classes other than the blank.
            let labels: Vec<i64> = (0..c as i64).filter(|&l| l != blank as i64).collect();
            let targets: Vec<i64> = (0..n * s)
                .map(|_| labels[rng.random_range(0..labels.len())])
                .collect();
            let (input_lengths, target_lengths): (Vec<i64>, Vec<i64>) = if draw_lengths {
                (0..n)
                    .map(|_| {
                        (
                            rng.random_range(t as i64 / 2..=t as i64),
                            rng.random_range(1..=s as i64),
                        )
                    })
                    .unzip()
            } else {
                (vec![t as i64; n], vec![s as i64; n])
            };
            let targets = Tensor::<B, 2, Int>::from_data(TensorData::new(targets, [n, s]), dev);
            let input_lengths =
                Tensor::<B, 1, Int>::from_data(TensorData::new(input_lengths, [n]), dev);
            let target_lengths =
                Tensor::<B, 1, Int>::from_data(TensorData::new(target_lengths, [n]), dev);
            let loss = module::ctc_loss(log_probs, targets, input_lengths, target_lengths, blank);
            out.push(loss.into_data());
        }
        out
    });

    // has_ctc_loss_backward must agree; burn-ndarray has no native ctc_loss_backward (autodiff
    // differentiates the decomposed forward instead) and panics when it is called: both must.
    diff!("ctc_loss_backward", |dev, rng| {
        let has_backward = TensorData::from([B::has_ctc_loss_backward()]);
        let log_probs = activation::log_softmax(float::<B, 3>(rng, dev, [6, 2, 4]), 2);
        let targets = int::<B, 2>(rng, dev, [2, 2], 1, 4);
        let input_lengths = Tensor::<B, 1, Int>::from_data(TensorData::from([6i64, 5]), dev);
        let target_lengths = Tensor::<B, 1, Int>::from_data(TensorData::from([2i64, 1]), dev);
        let grad_loss = float::<B, 1>(rng, dev, [2]);
        let mut out = vec![has_backward];
        out.extend(outputs_or_panic_message(|| {
            vec![read::<B>(B::ctc_loss_backward(
                fp(log_probs),
                targets.into_primitive(),
                input_lengths.into_primitive(),
                target_lengths.into_primitive(),
                fp(grad_loss),
                0,
            ))]
        }));
        out
    });

    // rfft/irfft on power-of-two signals (with and without `n`): burn-ndarray does not
    // implement them (`todo!`), both backends must panic alike.
    diff!("rfft_irfft", |dev, rng| {
        let signal = float::<B, 2>(rng, dev, [3, 8]);
        let re = float::<B, 2>(rng, dev, [3, 5]);
        let im = float::<B, 2>(rng, dev, [3, 5]);
        let mut out = Vec::new();
        for n in [None, Some(16)] {
            let signal = fp(signal.clone());
            out.extend(outputs_or_panic_message(|| {
                let (re, im) = B::rfft(signal, 1, n);
                vec![read::<B>(re), read::<B>(im)]
            }));
        }
        for n in [None, Some(8)] {
            let (re, im) = (fp(re.clone()), fp(im.clone()));
            out.extend(outputs_or_panic_message(|| {
                vec![read::<B>(B::irfft(re, im, 1, n))]
            }));
        }
        out
    });
}

// ---------------------------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------------------------

fn activations() {
    // relu, leaky_relu (several slopes, negative and zero too), prelu (one alpha, per channel),
    // relu_backward.
    diff!("relu_family", |dev, rng| {
        let x = float_in::<B, 3>(rng, dev, [2, 4, 5], -6.0, 6.0);
        let x1 = float::<B, 1>(rng, dev, [7]);
        let alpha_one = float::<B, 1>(rng, dev, [1]);
        let alpha_channels = float::<B, 1>(rng, dev, [4]);
        let grad = float::<B, 3>(rng, dev, [2, 4, 5]);
        let mut out = vec![
            activation::relu(x.clone()).into_data(),
            activation::prelu(x.clone(), alpha_one.clone()).into_data(),
            activation::prelu(x.clone(), alpha_channels).into_data(),
            activation::prelu(x1.clone(), alpha_one).into_data(),
            activation::relu(x1.clone()).into_data(),
        ];
        for slope in [0.01, 0.2, 0.0, -0.5, 1.5] {
            out.push(activation::leaky_relu(x.clone(), slope).into_data());
        }
        let relu_out = activation::relu(x);
        // Operands held elsewhere too (as autodiff holds them), then given up: a pass in place
        // must not change a held gradient.
        out.push(read::<B>(B::relu_backward(
            fp(relu_out.clone()),
            fp(grad.clone()),
        )));
        out.push(grad.clone().into_data());
        out.push(read::<B>(B::relu_backward(fp(relu_out), fp(grad))));
        out
    });

    // gelu and gelu_backward, over a wide range.
    diff!("gelu", |dev, rng| {
        let x = float_in::<B, 3>(rng, dev, [3, 4, 6], -8.0, 8.0);
        let x_small = float::<B, 2>(rng, dev, [1, 5]);
        let grad = float::<B, 3>(rng, dev, [3, 4, 6]);
        vec![
            activation::gelu(x.clone()).into_data(),
            activation::gelu(x_small).into_data(),
            read::<B>(B::gelu_backward(fp(x), fp(grad))),
        ]
    });

    // sigmoid, hard_sigmoid (several alpha/beta), log_sigmoid and sigmoid_backward, with large
    // magnitudes (saturation, stability of log_sigmoid).
    diff!("sigmoid_family", |dev, rng| {
        let x = float_in::<B, 2>(rng, dev, [6, 7], -30.0, 30.0);
        let x_small = float::<B, 3>(rng, dev, [2, 1, 5]);
        let grad = float::<B, 2>(rng, dev, [6, 7]);
        let sig = activation::sigmoid(x.clone());
        let mut out = vec![
            sig.clone().into_data(),
            activation::sigmoid(x_small.clone()).into_data(),
            activation::log_sigmoid(x.clone()).into_data(),
            activation::log_sigmoid(x_small).into_data(),
            read::<B>(B::sigmoid_backward(fp(sig), fp(grad))),
        ];
        for (alpha, beta) in [(0.2, 0.5), (1.0 / 6.0, 0.5), (0.5, 0.0), (-0.1, 0.3)] {
            out.push(activation::hard_sigmoid(x.clone(), alpha, beta).into_data());
        }
        out
    });

    // log_sigmoid_backward, over a wide range. Its default implementation (which burn-ndarray
    // uses) takes a `float_recip`, and burn-ndarray's recip of a tensor of 32 elements or more
    // is not reproducible: in place, it computes the part of the buffer that is aligned for SIMD
    // with an approximate vector reciprocal and the rest exactly, so the result depends on the
    // buffer's address (two runs on burn-ndarray alone differ). Below 32 elements it divides
    // exactly: the inputs stay below that size.
    diff!("log_sigmoid_backward", |dev, rng| {
        let mut out = Vec::new();
        let x = float_in::<B, 2>(rng, dev, [5, 6], -30.0, 30.0);
        let g = float::<B, 2>(rng, dev, [5, 6]);
        out.push(read::<B>(B::log_sigmoid_backward(fp(x), fp(g))));
        let x = float_in::<B, 1>(rng, dev, [31], -6.0, 6.0);
        let g = float::<B, 1>(rng, dev, [31]);
        out.push(read::<B>(B::log_sigmoid_backward(fp(x), fp(g))));
        let x = float::<B, 3>(rng, dev, [2, 1, 5]);
        let g = float::<B, 3>(rng, dev, [2, 1, 5]);
        out.push(read::<B>(B::log_sigmoid_backward(fp(x), fp(g))));
        out
    });

    // softmax, log_softmax, softmin along every dim, with large magnitudes and a size-1 dim.
    diff!("softmax_family", |dev, rng| {
        let x = float_in::<B, 3>(rng, dev, [2, 3, 5], -4.0, 4.0);
        let big = float_in::<B, 2>(rng, dev, [4, 6], -90.0, 90.0);
        let unit = float::<B, 3>(rng, dev, [3, 1, 4]);
        let mut out = Vec::new();
        for dim in 0..3 {
            out.push(activation::softmax(x.clone(), dim).into_data());
            out.push(activation::log_softmax(x.clone(), dim).into_data());
            out.push(activation::softmin(x.clone(), dim).into_data());
            out.push(activation::softmax(unit.clone(), dim).into_data());
            out.push(activation::log_softmax(unit.clone(), dim).into_data());
            out.push(activation::softmin(unit.clone(), dim).into_data());
        }
        for dim in 0..2 {
            out.push(activation::softmax(big.clone(), dim).into_data());
            out.push(activation::log_softmax(big.clone(), dim).into_data());
            out.push(activation::softmin(big.clone(), dim).into_data());
        }
        out
    });
}

// ---------------------------------------------------------------------------------------------
// Autodiff
// ---------------------------------------------------------------------------------------------

fn autodiff_training_step() {
    // A small CNN step through `Autodiff<B>`: its backward pass calls the backend's backward ops
    // (conv2d x/weight/bias, max pool, relu, linear...) as a training loop would.
    diff!("autodiff_cnn_step", |dev, rng| {
        type A<B> = burn_autodiff::Autodiff<B>;
        let x = float::<A<B>, 4>(rng, dev, [2, 3, 8, 7]).require_grad();
        let w = float::<A<B>, 4>(rng, dev, [4, 3, 3, 3]).require_grad();
        let b = float::<A<B>, 1>(rng, dev, [4]).require_grad();
        let lw = float::<A<B>, 2>(rng, dev, [4 * 3 * 3, 5]).require_grad();
        let target = float::<A<B>, 2>(rng, dev, [2, 5]);
        let y = module::conv2d(
            x.clone(),
            w.clone(),
            Some(b.clone()),
            ConvOptions::new([1, 1], [1, 1], [1, 1], 1),
        );
        let y = activation::relu(y);
        let y = module::max_pool2d(y, [3, 3], [2, 2], [1, 1], [1, 1], false);
        let y = module::avg_pool2d(y, [2, 2], [1, 1], [0, 0], true, false);
        let y = y.flatten::<2>(1, 3);
        let y = activation::sigmoid(module::linear(y, lw.clone(), None));
        let loss = (y - target).powi_scalar(2).mean();
        let grads = loss.backward();
        vec![
            loss.into_data(),
            x.grad(&grads).expect("x grad").into_data(),
            w.grad(&grads).expect("w grad").into_data(),
            b.grad(&grads).expect("b grad").into_data(),
            lw.grad(&grads).expect("linear grad").into_data(),
        ]
    });
}

// ---------------------------------------------------------------------------------------------
// Quantized tensors
// ---------------------------------------------------------------------------------------------

/// Symmetric int8 schemes per tensor, stored natively: the ones burn-ndarray implements, and the
/// only ones for which its layout ops (which keep the scales as they are) are meaningful.
fn tensor_schemes() -> [QuantScheme; 2] {
    let base = QuantScheme::default().with_store(QuantStore::Native);
    [
        base.with_value(QuantValue::Q8S),
        base.with_value(QuantValue::Q8F),
    ]
}

/// Every scheme burn-ndarray implements: per tensor, and per block of 4 consecutive values (the
/// last dim of the inputs is then a multiple of 4).
fn all_schemes() -> [QuantScheme; 4] {
    let [q8s, q8f] = tensor_schemes();
    let block = QuantLevel::Block(BlockSize::new([4]));
    [q8s, q8f, q8s.with_level(block), q8f.with_level(block)]
}

/// Quantizes a float tensor with min-max calibration.
fn quant<B: Backend, const D: usize>(x: Tensor<B, D>, scheme: &QuantScheme) -> QuantizedTensor<B> {
    B::quantize_dynamic(fp(x), scheme)
}

fn quantized() {
    // quantize with explicit parameters (min-max range computed on the backend) and
    // quantize_dynamic, then q_into_data and dequantize, for every scheme, ranks 1 to 3,
    // size-1 dims, all-zero input.
    diff!("q_quantize", |dev, rng| {
        let mut out = Vec::new();
        for scheme in all_schemes() {
            let x2 = float::<B, 2>(rng, dev, [3, 8]);
            let x3 = float_in::<B, 3>(rng, dev, [2, 1, 12], -40.0, 25.0);
            let x1 = float::<B, 1>(rng, dev, [4]);
            let zeros = Tensor::<B, 2>::zeros([2, 4], dev);
            let range = compute_range(&scheme, &x2, &Calibration::MinMax);
            let qparams = compute_q_params(&scheme, range);
            let q = B::quantize(
                fp(x2),
                &scheme,
                QuantizationParametersPrimitive {
                    scales: fp(qparams.scales),
                },
            );
            out.extend(read_q::<B>(q));
            out.extend(read_q::<B>(quant(x3, &scheme)));
            out.extend(read_q::<B>(quant(x1, &scheme)));
            out.extend(read_q::<B>(quant(zeros, &scheme)));
        }
        out
    });

    // q_from_data: data read back from a quantized tensor, and data built from random int8
    // values and scales, stored natively or packed in u32.
    diff!("q_from_data", |dev, rng| {
        let mut out = Vec::new();
        for scheme in all_schemes() {
            let x = float::<B, 2>(rng, dev, [4, 8]);
            let data = read_sync(B::q_into_data(quant(x, &scheme))).expect("quantized read");
            out.extend(read_q::<B>(B::q_from_data(data, dev)));

            let n_scales = match scheme.level {
                QuantLevel::Tensor => 1,
                QuantLevel::Block(_) => 32 / 4,
            };
            for store in [QuantStore::Native, QuantStore::PackedU32(0)] {
                let values: Vec<i8> = (0..32).map(|_| rng.random_range(-127..=127)).collect();
                let scales: Vec<f32> = (0..n_scales)
                    .map(|_| rng.random_range(0.001..0.1))
                    .collect();
                let data = TensorData::quantized(values, [8, 4], scheme.with_store(store), &scales);
                out.extend(read_q::<B>(B::q_from_data(data, dev)));
            }
        }
        out
    });

    // q_device, q_to_device, and the autodiff flags (identity outside autodiff).
    diff!("q_device_and_grad_flags", |dev, rng| {
        let mut out = Vec::new();
        for scheme in all_schemes() {
            let q = quant(float::<B, 2>(rng, dev, [2, 4]), &scheme);
            let device = B::q_device(&q);
            assert!(device == *dev, "q_device: not the tensor's device");
            let q = B::q_to_device(q, &device);
            let q = B::q_set_require_grad(q, true);
            out.push(TensorData::from([B::q_is_require_grad(&q)]));
            let q = B::q_detach(q);
            out.push(TensorData::from([B::q_is_require_grad(&q)]));
            out.extend(read_q::<B>(q));
        }
        out
    });

    // Layout ops on quantized tensors (per-tensor schemes): reshape, expand of size-1 dims,
    // transpose, swap_dims, permute, flip, select, slice (with steps, negative steps), gather,
    // repeat_dim, cat.
    diff!("q_layout", |dev, rng| {
        let mut out = Vec::new();
        for scheme in tensor_schemes() {
            let x = quant(float::<B, 3>(rng, dev, [2, 3, 4]), &scheme);
            let row = quant(float::<B, 3>(rng, dev, [2, 1, 4]), &scheme);
            let other = quant(float::<B, 3>(rng, dev, [2, 5, 4]), &scheme);
            let select_idx = int::<B, 1>(rng, dev, [5], 0, 3).into_primitive();
            let gather_idx = int::<B, 3>(rng, dev, [2, 3, 6], 0, 4).into_primitive();
            out.extend(read_q::<B>(B::q_reshape(x.clone(), [4, 6].into())));
            out.extend(read_q::<B>(B::q_reshape(x.clone(), [24].into())));
            out.extend(read_q::<B>(B::q_expand(row.clone(), [2, 3, 4].into())));
            out.extend(read_q::<B>(B::q_expand(row, [3, 2, 5, 4].into())));
            out.extend(read_q::<B>(B::q_transpose(x.clone())));
            out.extend(read_q::<B>(B::q_swap_dims(x.clone(), 0, 2)));
            out.extend(read_q::<B>(B::q_permute(x.clone(), &[2, 0, 1])));
            out.extend(read_q::<B>(B::q_flip(x.clone(), &[0, 2])));
            out.extend(read_q::<B>(B::q_select(x.clone(), 1, select_idx)));
            out.extend(read_q::<B>(B::q_slice(
                x.clone(),
                &[
                    Slice::new(1, None, 1),
                    Slice::new(0, Some(3), 2),
                    Slice::new(-1, None, -1),
                ],
            )));
            out.extend(read_q::<B>(B::q_gather(2, x.clone(), gather_idx)));
            out.extend(read_q::<B>(B::q_repeat_dim(x.clone(), 1, 3)));
            out.extend(read_q::<B>(B::q_cat(vec![x.clone(), other, x], 1)));
        }
        out
    });

    // Arithmetic on quantized tensors: binary ops (divisors away from zero), scalar ops, clamps,
    // neg, recip, matmul (quantized with quantized, and with a float operand on either side).
    // Inputs of q_recip (and of q_powi_scalar with a negative exponent) have fewer than 32
    // elements: see `log_sigmoid_backward` on burn-ndarray's recip.
    diff!("q_arith", |dev, rng| {
        let mut out = Vec::new();
        for scheme in all_schemes() {
            let a = quant(float::<B, 2>(rng, dev, [3, 8]), &scheme);
            let b = quant(float::<B, 2>(rng, dev, [3, 8]), &scheme);
            let nonzero = quant(signed_in::<B, 2>(rng, dev, [3, 8], 0.5, 2.0), &scheme);
            let s: Scalar = rng.random_range(-2.0f64..2.0).into();
            out.extend(read_p::<B>(B::q_add(a.clone(), b.clone())));
            out.extend(read_p::<B>(B::q_sub(a.clone(), b.clone())));
            out.extend(read_p::<B>(B::q_mul(a.clone(), b.clone())));
            out.extend(read_p::<B>(B::q_div(a.clone(), nonzero.clone())));
            out.extend(read_p::<B>(B::q_add_scalar(a.clone(), s)));
            out.extend(read_p::<B>(B::q_sub_scalar(a.clone(), s)));
            out.extend(read_p::<B>(B::q_mul_scalar(a.clone(), s)));
            out.extend(read_p::<B>(B::q_div_scalar(a.clone(), 0.75f64.into())));
            out.extend(read_p::<B>(B::q_clamp_min(a.clone(), (-0.5f64).into())));
            out.extend(read_p::<B>(B::q_clamp_max(a.clone(), 0.25f64.into())));
            out.extend(read_p::<B>(B::q_clamp(
                a.clone(),
                (-1.0f64).into(),
                1.0f64.into(),
            )));
            out.extend(read_p::<B>(B::q_neg(a.clone())));
            out.extend(read_p::<B>(B::q_recip(nonzero)));

            let lhs = quant(float::<B, 3>(rng, dev, [2, 3, 4]), &scheme);
            let rhs = quant(float::<B, 3>(rng, dev, [2, 4, 8]), &scheme);
            let lhs_f = fp(float::<B, 3>(rng, dev, [2, 3, 4]));
            let rhs_f = fp(float::<B, 3>(rng, dev, [2, 4, 8]));
            out.extend(read_p::<B>(B::q_matmul(
                TensorPrimitive::QFloat(lhs.clone()),
                TensorPrimitive::QFloat(rhs.clone()),
            )));
            out.extend(read_p::<B>(B::q_matmul(
                TensorPrimitive::QFloat(lhs),
                TensorPrimitive::Float(rhs_f),
            )));
            out.extend(read_p::<B>(B::q_matmul(
                TensorPrimitive::Float(lhs_f),
                TensorPrimitive::QFloat(rhs),
            )));
        }
        out
    });

    // Elementwise math on quantized tensors, each in its domain: exp, log and sqrt of positive
    // values, log1p above -1, powf of positive bases, powi with int tensor and scalar
    // exponents, powf_scalar, abs, trigonometric and hyperbolic functions, erf.
    diff!("q_math", |dev, rng| {
        let mut out = Vec::new();
        for scheme in all_schemes() {
            let x = quant(float::<B, 2>(rng, dev, [2, 8]), &scheme);
            let positive = quant(float_in::<B, 2>(rng, dev, [2, 8], 0.1, 4.0), &scheme);
            let above_m1 = quant(float_in::<B, 2>(rng, dev, [2, 8], -0.9, 3.0), &scheme);
            let exponent = quant(float::<B, 2>(rng, dev, [2, 8]), &scheme);
            let int_exponent = int::<B, 2>(rng, dev, [2, 8], -2, 4).into_primitive();
            out.extend(read_p::<B>(B::q_exp(x.clone())));
            out.extend(read_p::<B>(B::q_log(positive.clone())));
            out.extend(read_p::<B>(B::q_log1p(above_m1)));
            out.extend(read_p::<B>(B::q_sqrt(positive.clone())));
            out.extend(read_p::<B>(B::q_powf(positive.clone(), exponent)));
            out.extend(read_p::<B>(B::q_powi(positive.clone(), int_exponent)));
            out.extend(read_p::<B>(B::q_powi_scalar(x.clone(), 3i64.into())));
            out.extend(read_p::<B>(B::q_powi_scalar(
                positive.clone(),
                (-2i64).into(),
            )));
            out.extend(read_p::<B>(B::q_powf_scalar(positive, 1.7f64.into())));
            out.extend(read_q::<B>(B::q_abs(x.clone())));
            out.extend(read_p::<B>(B::q_cos(x.clone())));
            out.extend(read_p::<B>(B::q_sin(x.clone())));
            out.extend(read_p::<B>(B::q_tan(x.clone())));
            out.extend(read_p::<B>(B::q_cosh(x.clone())));
            out.extend(read_p::<B>(B::q_sinh(x.clone())));
            out.extend(read_p::<B>(B::q_tanh(x.clone())));
            out.extend(read_p::<B>(B::q_erf(x)));
        }
        out
    });

    // Reductions and scans on quantized tensors, over every dim: sum, prod, mean, cumulative
    // sum/prod/min/max, argmax/argmin, any/all on inputs with exact zeros.
    diff!("q_reduce", |dev, rng| {
        let int_dtype = burn::tensor::get_device_settings::<B>(dev).int_dtype;
        let bool_dtype = burn::tensor::get_device_settings::<B>(dev).bool_dtype;
        let mut out = Vec::new();
        for scheme in all_schemes() {
            let x = quant(float_in::<B, 3>(rng, dev, [2, 3, 4], -1.5, 1.5), &scheme);
            let zeros = quant(sparse::<B, 3>(rng, dev, [2, 3, 4]), &scheme);
            out.extend(read_p::<B>(B::q_sum(x.clone())));
            out.extend(read_p::<B>(B::q_prod(x.clone())));
            out.extend(read_p::<B>(B::q_mean(x.clone())));
            out.push(read_sync(B::bool_into_data(B::q_any(zeros.clone(), bool_dtype))).unwrap());
            out.push(read_sync(B::bool_into_data(B::q_all(zeros.clone(), bool_dtype))).unwrap());
            out.push(read_sync(B::bool_into_data(B::q_all(x.clone(), bool_dtype))).unwrap());
            for dim in 0..3 {
                out.extend(read_p::<B>(B::q_sum_dim(x.clone(), dim)));
                out.extend(read_p::<B>(B::q_prod_dim(x.clone(), dim)));
                out.extend(read_p::<B>(B::q_mean_dim(x.clone(), dim)));
                out.extend(read_p::<B>(B::q_cumsum(x.clone(), dim)));
                out.extend(read_p::<B>(B::q_cumprod(x.clone(), dim)));
                out.extend(read_p::<B>(B::q_cummin(x.clone(), dim)));
                out.extend(read_p::<B>(B::q_cummax(x.clone(), dim)));
                out.push(read_int::<B>(B::q_argmax(x.clone(), dim, int_dtype)));
                out.push(read_int::<B>(B::q_argmin(x.clone(), dim, int_dtype)));
                let any = B::q_any_dim(zeros.clone(), dim, bool_dtype);
                let all = B::q_all_dim(zeros.clone(), dim, bool_dtype);
                out.push(read_sync(B::bool_into_data(any)).unwrap());
                out.push(read_sync(B::bool_into_data(all)).unwrap());
            }
        }
        out
    });

    // Selections on quantized tensors (per-tensor schemes: the values are gathered from the
    // quantized tensor): max/min/max_abs overall and per dim, with indices, topk/argtopk.
    diff!("q_select_extrema", |dev, rng| {
        let int_dtype = burn::tensor::get_device_settings::<B>(dev).int_dtype;
        let mut out = Vec::new();
        for scheme in tensor_schemes() {
            let x = quant(float::<B, 3>(rng, dev, [2, 3, 5]), &scheme);
            out.extend(read_q::<B>(B::q_max(x.clone())));
            out.extend(read_q::<B>(B::q_min(x.clone())));
            out.extend(read_q::<B>(B::q_max_abs(x.clone())));
            for dim in 0..3 {
                out.extend(read_q::<B>(B::q_max_dim(x.clone(), dim)));
                out.extend(read_q::<B>(B::q_min_dim(x.clone(), dim)));
                out.extend(read_q::<B>(B::q_max_abs_dim(x.clone(), dim)));
                let (values, indices) = B::q_max_dim_with_indices(x.clone(), dim, int_dtype);
                out.extend(read_q::<B>(values));
                out.push(read_int::<B>(indices));
                let (values, indices) = B::q_min_dim_with_indices(x.clone(), dim, int_dtype);
                out.extend(read_q::<B>(values));
                out.push(read_int::<B>(indices));
            }
            for (dim, k) in [(2, 2), (1, 3), (0, 1)] {
                out.extend(read_q::<B>(B::q_topk(x.clone(), dim, k)));
                // burn-ndarray does not implement float_argtopk, which q_argtopk dequantizes
                // to: both backends must panic alike.
                let x = x.clone();
                out.extend(outputs_or_panic_message(|| {
                    vec![read_int::<B>(B::q_argtopk(x, dim, k, int_dtype))]
                }));
            }
        }
        out
    });

    // Sorting quantized tensors, ascending and descending, along every dim (ties are frequent
    // among int8 values).
    diff!("q_sort", |dev, rng| {
        let int_dtype = burn::tensor::get_device_settings::<B>(dev).int_dtype;
        let mut out = Vec::new();
        for scheme in all_schemes() {
            let x = quant(float::<B, 3>(rng, dev, [3, 2, 8]), &scheme);
            for dim in 0..3 {
                for descending in [false, true] {
                    out.extend(read_q::<B>(B::q_sort(x.clone(), dim, descending)));
                    let (values, indices) =
                        B::q_sort_with_indices(x.clone(), dim, descending, int_dtype);
                    out.extend(read_q::<B>(values));
                    out.push(read_int::<B>(indices));
                    out.push(read_int::<B>(B::q_argsort(
                        x.clone(),
                        dim,
                        descending,
                        int_dtype,
                    )));
                }
            }
        }
        out
    });
}

// ---------------------------------------------------------------------------------------------
// Transactions
// ---------------------------------------------------------------------------------------------

fn transactions() {
    // Transactions reading float, int, bool and quantized tensors of several ranks (size-1 dims
    // too), all kinds mixed in one transaction, then single-kind ones.
    diff!("transaction", |dev, rng| {
        let [scheme, _] = tensor_schemes();
        let f2 = float::<B, 2>(rng, dev, [2, 3]);
        let f4 = float::<B, 4>(rng, dev, [1, 2, 1, 3]);
        let i1 = int::<B, 1>(rng, dev, [5], -100, 100);
        let i3 = int::<B, 3>(rng, dev, [2, 1, 2], 0, 10);
        let b2 = boolean::<B, 2>(rng, dev, [3, 3]);
        let unit = float::<B, 1>(rng, dev, [1]);
        let q = Tensor::<B, 2>::from_primitive(TensorPrimitive::QFloat(quant(
            float::<B, 2>(rng, dev, [2, 4]),
            &scheme,
        )));
        let mut out = Transaction::default()
            .register(f2.clone())
            .register(i1.clone())
            .register(b2.clone())
            .register(q)
            .register(f4)
            .register(i3.clone())
            .register(unit)
            .execute();
        out.extend(Transaction::default().register(i1).register(i3).execute());
        out.extend(Transaction::default().register(b2).execute());
        out.extend(
            Transaction::default()
                .register(f2.clone())
                .register(f2)
                .execute(),
        );
        out
    });
}

/// The linear layers of `Hetero<Flex, _>` (threaded blocks of `gemm` calls,
/// `src/ops/matmul.rs`), or of `Hetero<NdArray, _>` (its large products go to the same blocks),
/// against an f64 reference: forward with and without bias, the input and weight gradients, on
/// inputs of rank 2 to 4, with products split along rows and along columns into uneven blocks (a
/// pool of 7 threads), a weight that is a transposed view, and empty batches. Relative L2 error
/// ≤ 1e-5 (f32 sums in another order).
pub fn linear_matches_f64<HF: burn::tensor::backend::Backend>() {
    use crate::common::rel_l2;
    use burn::tensor::Shape;
    let mut rng = rng_for(&format!("linear {}", core::any::type_name::<HF>()));
    let dev = Default::default();
    /// `a [m, k] · b [k, n]` in f64, row-major values.
    fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for p in 0..k {
                let x = a[i * k + p] as f64;
                for j in 0..n {
                    out[i * n + j] += x * b[p * n + j] as f64;
                }
            }
        }
        out
    }
    fn transposed(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        (0..cols * rows)
            .map(|i| a[(i % rows) * cols + i / rows])
            .collect()
    }
    fn values<B: burn::tensor::backend::Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
        t.into_data().convert::<f32>().into_vec().unwrap()
    }
    let check = |case: &str, got: Vec<f32>, want: &[f64]| {
        assert_eq!(got.len(), want.len(), "{case}: length");
        assert!(got.iter().all(|v| v.is_finite()), "{case}: not finite");
        let err = rel_l2(&got, want);
        assert!(err <= 1e-5, "{case}: relative L2 error {err:e}");
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(7)
        .build()
        .expect("a pool");
    pool.install(|| {
        // (leading dims, d_in, d_out): the MNIST net's layers, wide, tall and small products.
        let cases: [(&[usize], usize, usize); 6] = [
            (&[64], 800, 500),
            (&[64], 500, 10),
            (&[3, 37], 130, 300),
            (&[2, 3, 50], 70, 9),
            (&[5], 4, 3),
            (&[0], 6, 5),
        ];
        for (lead, d_in, d_out) in cases {
            let rows: usize = lead.iter().product();
            let case = format!("{lead:?} x {d_in} -> {d_out}");
            let x = random_vec(&mut rng, rows * d_in, -2.0, 2.0);
            let w = random_vec(&mut rng, d_in * d_out, -1.0, 1.0);
            let b = random_vec(&mut rng, d_out, -1.0, 1.0);
            let g = random_vec(&mut rng, rows * d_out, -1.0, 1.0);
            let mut x_shape = lead.to_vec();
            x_shape.push(d_in);
            let mut g_shape = lead.to_vec();
            g_shape.push(d_out);
            let tensor = |v: &[f32], shape: &[usize]| {
                let t = Tensor::<HF, 1>::from_data(TensorData::new(v.to_vec(), [v.len()]), &dev);
                HF::float_reshape(t.into_primitive().tensor(), Shape::from(shape.to_vec()))
            };
            let xw = reference(&x, &w, rows, d_in, d_out);
            let with_bias: Vec<f64> = xw
                .iter()
                .enumerate()
                .map(|(i, v)| v + b[i % d_out] as f64)
                .collect();
            let out = HF::linear(
                tensor(&x, &x_shape),
                tensor(&w, &[d_in, d_out]),
                Some(tensor(&b, &[d_out])),
            );
            assert_eq!(
                burn::tensor::TensorMetadata::shape(&out).to_vec(),
                g_shape,
                "{case}"
            );
            check(
                &format!("{case} forward, bias"),
                flat::<HF>(out),
                &with_bias,
            );
            let out = HF::linear(tensor(&x, &x_shape), tensor(&w, &[d_in, d_out]), None);
            check(&format!("{case} forward"), flat::<HF>(out), &xw);
            // The weight as the transpose of a [d_out, d_in] tensor: a strided view.
            let w_view =
                HF::float_swap_dims(tensor(&transposed(&w, d_in, d_out), &[d_out, d_in]), 0, 1);
            let out = HF::linear(tensor(&x, &x_shape), w_view, None);
            check(
                &format!("{case} forward, weight view"),
                flat::<HF>(out),
                &xw,
            );
            let dx = HF::linear_x_backward(tensor(&w, &[d_in, d_out]), tensor(&g, &g_shape));
            assert_eq!(
                burn::tensor::TensorMetadata::shape(&dx).to_vec(),
                x_shape,
                "{case}"
            );
            let want = reference(&g, &transposed(&w, d_in, d_out), rows, d_out, d_in);
            check(&format!("{case} input gradient"), flat::<HF>(dx), &want);
            // The weight read transposed by its strides, itself a transposed view.
            let w_view =
                HF::float_swap_dims(tensor(&transposed(&w, d_in, d_out), &[d_out, d_in]), 0, 1);
            let dx = HF::linear_x_backward(w_view, tensor(&g, &g_shape));
            check(
                &format!("{case} input gradient, weight view"),
                flat::<HF>(dx),
                &want,
            );
            let dw = HF::linear_weight_backward(tensor(&x, &x_shape), tensor(&g, &g_shape));
            let want = reference(&transposed(&x, rows, d_in), &g, d_in, rows, d_out);
            check(&format!("{case} weight gradient"), flat::<HF>(dw), &want);
        }
    });
    fn flat<B: burn::tensor::backend::Backend>(t: FloatTensor<B>) -> Vec<f32> {
        let n = burn::tensor::TensorMetadata::shape(&t).num_elements();
        let t = B::float_reshape(t, Shape::new([n]));
        values(Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t)))
    }
}
