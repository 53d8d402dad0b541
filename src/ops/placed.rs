//! The ops that do real work in `Hetero`: each is described once and run where its placement
//! says, through [`crate::offload::run`].

use crate::Accelerator;
use crate::device;
use crate::offload::{self, Part, PlacedOp};
use crate::paired;
use crate::placement::{OpKind, Placement};
use crate::profile::{self, ConvSignature};
use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, Shape, TensorMetadata};

/// Multiply-adds of a conv2d with this input, weight and output shape, times two.
fn conv2d_flops(weight: &Shape, out: &[usize]) -> u64 {
    // weight: [c_out, c_in / groups, kh, kw]; out: [n, c_out, h_out, w_out]
    let per_output = weight[1] * weight[2] * weight[3];
    2 * (out.iter().product::<usize>() * per_output) as u64
}

/// The conv's shape (None: not a 2D conv's 4-D operands).
fn conv_signature(x: &Shape, weight: &Shape, options: &ConvOptions<2>) -> Option<ConvSignature> {
    let four = |s: &Shape| [s[0], s[1], s[2], s[3]];
    (x.num_dims() == 4 && weight.num_dims() == 4).then(|| ConvSignature {
        input: four(x),
        weight: four(weight),
        stride: options.stride,
        padding: options.padding,
        dilation: options.dilation,
        groups: options.groups,
    })
}

/// The conv's shape for the profile, computed only while profiling.
fn signature(x: &Shape, weight: &Shape, options: &ConvOptions<2>) -> Option<ConvSignature> {
    profile::profiling()
        .then(|| conv_signature(x, weight, options))
        .flatten()
}

fn conv2d_out_shape(x: &Shape, weight: &Shape, options: &ConvOptions<2>) -> [usize; 4] {
    let out_dim = |i: usize| {
        let k = options.dilation[i] * (weight[2 + i] - 1) + 1;
        (x[2 + i] + 2 * options.padding[i]).saturating_sub(k) / options.stride[i] + 1
    };
    [x[0], weight[0], out_dim(0), out_dim(1)]
}

pub(crate) fn conv2d<C: Backend, A: Accelerator>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    bias: Option<FloatTensor<C>>,
    options: ConvOptions<2>,
) -> FloatTensor<C> {
    let (x_shape, w_shape) = (x.shape(), weight.shape());
    let out = conv2d_out_shape(&x_shape, &w_shape, &options);
    let mut uploads = vec![x.clone(), weight.clone()];
    uploads.extend(bias.clone());
    let placed = PlacedOp::<C> {
        op: OpKind::Conv2dForward,
        device: C::float_device(&x),
        out_dtype: x.dtype(),
        flops: conv2d_flops(&w_shape, &out),
        uploads,
        signature: signature(&x_shape, &w_shape, &options),
        // The weight, for the input gradient (the default places it at bf16 beside an f16
        // forward).
        ahead: vec![(1, OpKind::Conv2dInputGrad)],
    };
    let accel_options = options.clone();
    offload::run::<C, A>(
        placed,
        move |mut t, _| {
            let bias = (t.len() == 3).then(|| t.pop().expect("bias"));
            let weight = t.pop().expect("weight");
            let x = t.pop().expect("x");
            A::accel_conv2d(x, weight, bias, accel_options)
        },
        move || super::conv::cpu_conv2d::<C>(x, weight, bias, options),
    )
}

/// The input gradient; where the weight gradient is placed alike (and the operands' buffers can
/// be held, see `held`), the weight gradient is computed in the same accelerator call and kept for the
/// request that follows (see [`paired`]).
pub(crate) fn conv2d_x_backward<C: Backend, A: Accelerator>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
    options: ConvOptions<2>,
) -> FloatTensor<C> {
    let device = C::float_device(&x);
    let conv = conv_signature(&x.shape(), &weight.shape(), &options);
    let config = device::config(&device);
    let input_grad = config.placement(OpKind::Conv2dInputGrad);
    let pair = matches!(input_grad, Placement::Accelerator { .. })
        && config.placement(OpKind::Conv2dWeightGrad) == input_grad
        && paired::operands(&x, &weight, &output_grad).is_some()
        && conv.as_ref().is_some_and(paired::wanted);
    let extras = if pair {
        vec![weight_grad_part::<C, A>(
            x.clone(),
            weight.clone(),
            output_grad.clone(),
            options.clone(),
        )]
    } else {
        Vec::new()
    };
    let operands = pair.then(|| (x.clone(), weight.clone(), output_grad.clone()));
    let main = x_grad_part::<C, A>(
        (x.shape(), x.dtype()),
        weight.clone(),
        output_grad.clone(),
        options.clone(),
        device,
    );
    let kept_options = options.clone();
    let (x_grad, mut extra) = offload::run_parts::<C, A>(main, extras, move || {
        super::conv::cpu_conv2d_x_backward::<C>(x, weight, output_grad, options)
    });
    if let (Some((x, weight, output_grad)), Some(weight_grad), Some(conv)) =
        (operands, extra.pop(), conv)
    {
        let held = paired::operands(&x, &weight, &output_grad).expect("checked above");
        paired::keep(conv, held, kept_options, weight_grad);
    }
    x_grad
}

/// The input gradient as an offloaded op; `x` is the input's shape and dtype.
fn x_grad_part<'a, C: Backend, A: Accelerator>(
    (x_shape, out_dtype): (Shape, DType),
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
    options: ConvOptions<2>,
    device: C::Device,
) -> Part<'a, C, A> {
    let placed = PlacedOp::<C> {
        op: OpKind::Conv2dInputGrad,
        device,
        out_dtype,
        flops: conv2d_flops(&weight.shape(), &output_grad.shape()),
        signature: signature(&x_shape, &weight.shape(), &options),
        uploads: vec![weight, output_grad],
        ahead: Vec::new(),
    };
    Part {
        placed,
        launch: Box::new(move |mut t, _| {
            let output_grad = t.pop().expect("output_grad");
            let weight = t.pop().expect("weight");
            A::accel_conv2d_x_backward(x_shape, weight, output_grad, options)
        }),
        read_later: None,
    }
}

/// The weight gradient: the one computed with the input gradient of this request if there is
/// one, else an offloaded op of its own.
pub(crate) fn conv2d_weight_backward<C: Backend, A: Accelerator>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
    options: ConvOptions<2>,
) -> FloatTensor<C> {
    if let Some(held) = paired::operands(&x, &weight, &output_grad)
        && let Some(grad) = paired::take::<FloatTensor<C>>(held, &options)
    {
        return grad;
    }
    let part = weight_grad_part::<C, A>(
        x.clone(),
        weight.clone(),
        output_grad.clone(),
        options.clone(),
    );
    offload::run_parts::<C, A>(part, Vec::new(), move || {
        super::conv::cpu_conv2d_weight_backward::<C>(x, weight, output_grad, options)
    })
    .0
}

/// The weight gradient as an offloaded op. Nothing reads it before the optimizer step, so it
/// is read back after the call returns (see `deferred`), and recomputed on the CPU from the
/// operands if that read fails.
fn weight_grad_part<'a, C: Backend, A: Accelerator>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
    options: ConvOptions<2>,
) -> Part<'a, C, A> {
    let (w_shape, out_dtype) = (weight.shape(), weight.dtype());
    let placed = PlacedOp::<C> {
        op: OpKind::Conv2dWeightGrad,
        device: C::float_device(&x),
        out_dtype,
        flops: conv2d_flops(&w_shape, &output_grad.shape()),
        signature: signature(&x.shape(), &w_shape, &options),
        uploads: vec![x.clone(), output_grad.clone()],
        ahead: Vec::new(),
    };
    let cpu_options = options.clone();
    Part {
        placed,
        launch: Box::new(move |mut t, _| {
            let output_grad = t.pop().expect("output_grad");
            let x = t.pop().expect("x");
            A::accel_conv2d_weight_backward(x, w_shape, output_grad, options)
        }),
        read_later: Some(Box::new(move || {
            super::conv::cpu_conv2d_weight_backward::<C>(x, weight, output_grad, cpu_options)
        })),
    }
}

pub(crate) fn float_matmul<C: Backend, A: Accelerator>(
    lhs: FloatTensor<C>,
    rhs: FloatTensor<C>,
) -> FloatTensor<C> {
    let (l, r) = (lhs.shape(), rhs.shape());
    let rank = l.num_dims();
    let (m, k, n) = (l[rank - 2], l[rank - 1], r[rank - 1]);
    let batch: usize = (0..rank - 2).map(|i| l[i].max(r[i])).product();
    let placed = PlacedOp::<C> {
        op: OpKind::Matmul,
        device: C::float_device(&lhs),
        out_dtype: lhs.dtype(),
        flops: 2 * (batch * m * k * n) as u64,
        uploads: vec![lhs.clone(), rhs.clone()],
        signature: None,
        ahead: Vec::new(),
    };
    offload::run::<C, A>(
        placed,
        |mut t, _| {
            let rhs = t.pop().expect("rhs");
            let lhs = t.pop().expect("lhs");
            A::accel_matmul(lhs, rhs)
        },
        move || C::float_matmul(lhs, rhs),
    )
}

/// Whether matmuls of `device` are placed on the accelerator: linear layers follow the matmul
/// placement, so that it covers them too.
fn matmul_on_accelerator<C: Backend>(device: &C::Device) -> bool {
    matches!(
        device::config(device).placement(OpKind::Matmul),
        Placement::Accelerator { .. }
    )
}

use super::matmul::as_matrix;

/// `[..., d_in] x [d_in, d_out] (+ [d_out])`. On the CPU placement it is [`super::matmul`]'s
/// threaded product (or `C`'s own op where that does not apply); on the
/// accelerator it is one matmul of the rows of `x` (placed like `float_matmul`), the bias added
/// on the CPU.
pub(crate) fn linear<C: Backend, A: Accelerator>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    bias: Option<FloatTensor<C>>,
) -> FloatTensor<C> {
    if !matmul_on_accelerator::<C>(&C::float_device(&x)) {
        let _timer = profile::CpuOpTimer::start("linear");
        return super::matmul::linear::<C>(x, weight, bias);
    }
    let mut out_shape = x.shape();
    let last = out_shape.num_dims() - 1;
    out_shape[last] = weight.shape()[1];
    let out = float_matmul::<C, A>(as_matrix::<C>(x), weight);
    let out = match bias {
        Some(bias) => {
            let d_out = bias.shape().num_elements();
            C::float_add(out, C::float_reshape(bias, Shape::new([1, d_out])))
        }
        None => out,
    };
    C::float_reshape(out, out_shape)
}

/// Gradient of [`linear`] with respect to `x`: `output_grad · weightᵀ`.
pub(crate) fn linear_x_backward<C: Backend, A: Accelerator>(
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
) -> FloatTensor<C> {
    if !matmul_on_accelerator::<C>(&C::float_device(&weight)) {
        let _timer = profile::CpuOpTimer::start("linear_x_backward");
        return super::matmul::linear_x_backward::<C>(weight, output_grad);
    }
    let mut x_shape = output_grad.shape();
    let last = x_shape.num_dims() - 1;
    x_shape[last] = weight.shape()[0];
    let grad = float_matmul::<C, A>(
        as_matrix::<C>(output_grad),
        C::float_swap_dims(weight, 0, 1),
    );
    C::float_reshape(grad, x_shape)
}

/// Gradient of [`linear`] with respect to the weight: `xᵀ · output_grad`, over all rows.
pub(crate) fn linear_weight_backward<C: Backend, A: Accelerator>(
    x: FloatTensor<C>,
    output_grad: FloatTensor<C>,
) -> FloatTensor<C> {
    if !matmul_on_accelerator::<C>(&C::float_device(&x)) {
        let _timer = profile::CpuOpTimer::start("linear_weight_backward");
        return super::matmul::linear_weight_backward::<C>(x, output_grad);
    }
    float_matmul::<C, A>(
        C::float_swap_dims(as_matrix::<C>(x), 0, 1),
        as_matrix::<C>(output_grad),
    )
}
