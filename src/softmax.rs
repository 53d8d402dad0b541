//! A classifier's log-softmax over the rows of its logits as one op with its own backward.
//!
//! burn's `log_softmax` is written in tensor ops, and burn-autodiff does not override it, so
//! under [`Autodiff`] a training step runs its `max_dim`, subtractions, `exp`, `sum_dim` and
//! `log` forward and their gradients backward, each a CPU op over the `[batch, classes]`
//! logits. [`log_softmax`] computes the same function through [`LogSoftmaxBackend`], whose
//! forward and backward are one op each: on `Hetero` a pass over each row; elsewhere the
//! textbook formulas in tensor ops (no autodiff graph through them). A model's loss calls it
//! where it called `burn::tensor::activation::log_softmax(logits, 1)`.
//!
//! ```
//! # use burn::tensor::{Distribution, Tensor};
//! use burn::backend::Autodiff;
//! use burn_hetero::softmax::log_softmax;
//! type B = Autodiff<burn_hetero::NdArray>;
//! let device = Default::default();
//! let logits = Tensor::<B, 2>::random([4, 10], Distribution::Default, &device);
//! let log_probs = log_softmax(logits);
//! assert_eq!(log_probs.dims(), [4, 10]);
//! ```

use crate::ops::channels::values;
use crate::ops::elementwise::dense;
use crate::ops::layout::{from_flex, into_flex};
use crate::{Accelerator, Hetero};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;

/// A backend with log-softmax over a matrix's rows, forward and backward, as single ops.
///
/// Both have defaults in tensor ops, so a backend implements it with an empty `impl`; `Hetero`
/// overrides them with a pass over each row, and `Autodiff<B>` records the forward as one node
/// whose backward is `B`'s.
pub trait LogSoftmaxBackend: Backend {
    /// `x - log Σ exp(x)` over each row of the matrix `x` (`[rows, classes]`).
    fn log_softmax_rows(x: FloatTensor<Self>) -> FloatTensor<Self> {
        decomposed_forward::<Self>(x)
    }

    /// The gradient of [`Self::log_softmax_rows`]'s input given its `output` and the gradient of
    /// that output: `grad - exp(output) · Σ grad` per row.
    fn log_softmax_rows_backward(
        output: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        decomposed_backward::<Self>(output, grad)
    }
}

/// Log-softmax over the classes (dim 1) of `logits` `[batch, classes]`: burn's
/// `log_softmax(logits, 1)`, with one op forward and one backward (see the module).
pub fn log_softmax<B: LogSoftmaxBackend>(logits: Tensor<B, 2>) -> Tensor<B, 2> {
    let x = logits.into_primitive().tensor();
    Tensor::from_primitive(TensorPrimitive::Float(B::log_softmax_rows(x)))
}

fn float<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 2> {
    Tensor::from_primitive(TensorPrimitive::Float(t))
}

/// The default forward: burn's own `log_softmax` over dim 1, which takes the row's maximum out
/// first, so that `exp` cannot overflow (a backend may override it).
pub fn decomposed_forward<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    B::log_softmax(x, 1)
}

/// The default backward, in `B`'s tensor ops.
pub fn decomposed_backward<B: Backend>(
    output: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> FloatTensor<B> {
    let grad = float::<B>(grad);
    let sum = grad.clone().sum_dim(1);
    (grad - float::<B>(output).exp() * sum)
        .into_primitive()
        .tensor()
}

impl_with_defaults!(LogSoftmaxBackend);

impl<C: Backend, A: Accelerator> LogSoftmaxBackend for Hetero<C, A> {
    fn log_softmax_rows(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let timer = crate::profile::CpuOpTimer::start_with("log_softmax_rows", || {
            vec![crate::profile::describe_operand(&x)]
        });
        match rows::<C, 1>([x], |[x], out| {
            forward_row(x, out);
        }) {
            Ok(out) => out,
            Err(([x], why)) => {
                drop(timer);
                op_by_op("log_softmax_rows", why);
                decomposed_forward::<Self>(x)
            }
        }
    }

    fn log_softmax_rows_backward(
        output: FloatTensor<Self>,
        grad: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let timer = crate::profile::CpuOpTimer::start_with("log_softmax_rows_backward", || {
            vec![crate::profile::describe_operand(&grad)]
        });
        match rows::<C, 2>([output, grad], |[output, grad], out| {
            backward_row(output, grad, out);
        }) {
            Ok(out) => out,
            Err(([output, grad], why)) => {
                drop(timer);
                op_by_op("log_softmax_rows_backward", why);
                decomposed_backward::<Self>(output, grad)
            }
        }
    }
}

/// One row of the forward: `x - (max + ln Σ exp(x - max))`, the sum in f64.
fn forward_row(x: &[f32], out: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = x.iter().map(|&v| f64::from((v - max).exp())).sum();
    let log_sum = max + sum.ln() as f32;
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v - log_sum;
    }
}

/// One row of the backward: `grad - exp(output) · Σ grad`, the sum in f64.
fn backward_row(output: &[f32], grad: &[f32], out: &mut [f32]) {
    let sum = grad.iter().map(|&g| f64::from(g)).sum::<f64>() as f32;
    for ((o, &y), &g) in out.iter_mut().zip(output).zip(grad) {
        *o = g - y.exp() * sum;
    }
}

/// `row` applied to each row of `N` matrices of one shape, into a new matrix of that shape,
/// when `C` is burn-flex (or burn-ndarray, through the bridge) and each is a contiguous f32
/// matrix; the operands back with the reason otherwise. The logits of a classifier are a few
/// thousand values, so one thread does it.
#[allow(clippy::type_complexity)]
fn rows<C: Backend, const N: usize>(
    operands: [FloatTensor<C>; N],
    row: impl Fn([&[f32]; N], &mut [f32]),
) -> Result<FloatTensor<C>, ([FloatTensor<C>; N], &'static str)> {
    let converted = operands.map(into_flex::<C>);
    if converted.iter().any(Result::is_err) {
        let back = converted.map(|t| t.map_or_else(|t| t, from_flex::<C>));
        return Err((back, "a CPU backend other than burn-flex or burn-ndarray"));
    }
    let flex = converted.map(|t| t.unwrap_or_else(|_| unreachable!("checked above")));
    let shape = flex[0].layout().shape().clone();
    let fits = flex
        .iter()
        .all(|t| values(t).is_some() && t.layout().shape() == &shape);
    if shape.num_dims() != 2 || !fits {
        return Err((
            flex.map(from_flex::<C>),
            "an operand that is not a contiguous f32 matrix",
        ));
    }
    let dims = shape.as_slice();
    let (count, width) = (dims[0], dims[1]);
    let mut out = vec![0.0f32; count * width];
    {
        let inputs: [&[f32]; N] = std::array::from_fn(|i| values(&flex[i]).expect("checked"));
        for (r, out_row) in out.chunks_mut(width.max(1)).enumerate().take(count) {
            let at = r * width..(r + 1) * width;
            row(inputs.map(|input| &input[at.clone()]), out_row);
        }
    }
    Ok(from_flex::<C>(dense(out, shape)))
}

/// Logs once per op and reason that the row pass was not used.
fn op_by_op(op: &str, why: &str) {
    crate::fallback::op_by_op(
        op,
        why,
        "the row pass needs burn-flex or burn-ndarray and contiguous f32 matrices",
    );
}

/// The autodiff node of a log-softmax: the logits as parent, the output as state.
#[derive(Debug)]
struct LogSoftmaxNode;

impl<B: LogSoftmaxBackend> Backward<B, 1> for LogSoftmaxNode {
    /// The forward's output.
    type State = FloatTensor<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        if let Some(node) = node_x {
            grads.register::<B>(node.id, B::log_softmax_rows_backward(ops.state, grad));
        }
    }
}

impl<B: LogSoftmaxBackend, S: CheckpointStrategy> LogSoftmaxBackend for Autodiff<B, S> {
    fn log_softmax_rows(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let output = B::log_softmax_rows(x.primitive);
        match LogSoftmaxNode
            .prepare::<S>([x.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(output.clone(), output),
            OpsKind::UnTracked(prep) => prep.finish(output),
        }
    }
}
