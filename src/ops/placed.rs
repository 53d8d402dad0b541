//! The ops that do real work in `Hetero`: each is described once and run where its placement
//! says, through [`crate::offload::run`].

use crate::Accelerator;
use crate::offload::{self, PlacedOp};
use crate::placement::OpKind;
use crate::profile::{self, ConvSignature};
use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Shape, TensorMetadata};

/// Multiply-adds of a conv2d with this input, weight and output shape, times two.
fn conv2d_flops(weight: &Shape, out: &[usize]) -> u64 {
    // weight: [c_out, c_in / groups, kh, kw]; out: [n, c_out, h_out, w_out]
    let per_output = weight[1] * weight[2] * weight[3];
    2 * (out.iter().product::<usize>() * per_output) as u64
}

/// The conv's shape for the profile, computed only while profiling.
fn signature(x: &Shape, weight: &Shape, options: &ConvOptions<2>) -> Option<ConvSignature> {
    let four = |s: &Shape| [s[0], s[1], s[2], s[3]];
    (profile::profiling() && x.num_dims() == 4 && weight.num_dims() == 4).then(|| ConvSignature {
        input: four(x),
        weight: four(weight),
        stride: options.stride,
        padding: options.padding,
        dilation: options.dilation,
        groups: options.groups,
    })
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
        move || C::conv2d(x, weight, bias, options),
    )
}

pub(crate) fn conv2d_x_backward<C: Backend, A: Accelerator>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
    options: ConvOptions<2>,
) -> FloatTensor<C> {
    let x_shape = x.shape();
    let placed = PlacedOp::<C> {
        op: OpKind::Conv2dInputGrad,
        device: C::float_device(&x),
        out_dtype: x.dtype(),
        flops: conv2d_flops(&weight.shape(), &output_grad.shape()),
        uploads: vec![weight.clone(), output_grad.clone()],
        signature: signature(&x_shape, &weight.shape(), &options),
    };
    let accel_options = options.clone();
    offload::run::<C, A>(
        placed,
        move |mut t, _| {
            let output_grad = t.pop().expect("output_grad");
            let weight = t.pop().expect("weight");
            A::accel_conv2d_x_backward(x_shape, weight, output_grad, accel_options)
        },
        move || C::conv2d_x_backward(x, weight, output_grad, options),
    )
}

pub(crate) fn conv2d_weight_backward<C: Backend, A: Accelerator>(
    x: FloatTensor<C>,
    weight: FloatTensor<C>,
    output_grad: FloatTensor<C>,
    options: ConvOptions<2>,
) -> FloatTensor<C> {
    let w_shape = weight.shape();
    let placed = PlacedOp::<C> {
        op: OpKind::Conv2dWeightGrad,
        device: C::float_device(&x),
        out_dtype: weight.dtype(),
        flops: conv2d_flops(&w_shape, &output_grad.shape()),
        uploads: vec![x.clone(), output_grad.clone()],
        signature: signature(&x.shape(), &w_shape, &options),
    };
    let accel_options = options.clone();
    offload::run::<C, A>(
        placed,
        move |mut t, _| {
            let output_grad = t.pop().expect("output_grad");
            let x = t.pop().expect("x");
            A::accel_conv2d_weight_backward(x, w_shape, output_grad, accel_options)
        },
        move || C::conv2d_weight_backward(x, weight, output_grad, options),
    )
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
