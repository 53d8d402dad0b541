//! Batch normalisation as one op with its own backward.
//!
//! burn-nn's [`BatchNorm`] is written in tensor ops, so under [`Autodiff`] a training step runs
//! each of them forward and again backward: a few dozen CPU ops on full-size tensors per layer,
//! two of them strided copies. [`batch_norm`] computes the same function through
//! [`BatchNormBackend`], whose training forward and backward are one op each: on `Hetero` with
//! burn-flex as the CPU backend they are a few threaded passes over memory; on any other backend
//! they are the textbook formulas in tensor ops (no autodiff graph through them).
//!
//! A model opts in by calling [`batch_norm`] where it called `BatchNorm::forward`, or
//! [`batch_norm_relu`] where a ReLU follows (with the residual added before it, as a ResNet
//! block ends); the module, its record and its running statistics are burn-nn's, so
//! checkpoints do not change.
//!
//! ```
//! # use burn::nn::BatchNormConfig;
//! # use burn::tensor::{Distribution, Tensor};
//! use burn::backend::Autodiff;
//! use burn_hetero::norm::batch_norm;
//! type B = Autodiff<burn_hetero::NdArray>;
//! let device = Default::default();
//! let bn = BatchNormConfig::new(3).init::<B>(&device);
//! let x = Tensor::<B, 4>::random([2, 3, 4, 4], Distribution::Default, &device);
//! let y = batch_norm(&bn, x);
//! assert_eq!(y.dims(), [2, 3, 4, 4]);
//! ```

use crate::{Accelerator, Hetero};
use burn::nn::BatchNorm;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::base::Checkpointer;
use burn_autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_autodiff::grads::Gradients;
use burn_autodiff::ops::{Backward, Ops, OpsKind};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, BackendTypes, TensorMetadata};

/// Results of a training-mode batch norm forward.
#[derive(Debug)]
pub struct BatchNormTrain<B: BackendTypes> {
    /// The normalised, scaled and shifted input; the input's shape.
    pub output: FloatTensor<B>,
    /// The batch mean per channel, `[channels]`.
    pub mean: FloatTensor<B>,
    /// The biased batch variance per channel (divided by the value count), `[channels]`.
    pub var: FloatTensor<B>,
}

/// Gradients of a training-mode batch norm.
#[derive(Debug)]
pub struct BatchNormGrads<B: BackendTypes> {
    /// Of the input; the input's shape.
    pub input: FloatTensor<B>,
    /// Of the scale `gamma`, `[channels]`.
    pub gamma: FloatTensor<B>,
    /// Of the shift `beta`, `[channels]`.
    pub beta: FloatTensor<B>,
}

/// Gradients of a training-mode `relu(batch_norm(x) + residual)`.
#[derive(Debug)]
pub struct BatchNormReluGrads<B: BackendTypes> {
    /// Of the input, `gamma` and `beta`.
    pub norm: BatchNormGrads<B>,
    /// Of the residual (the gradient before the ReLU), where asked for.
    pub residual: Option<FloatTensor<B>>,
}

/// A backend with batch norm's training forward and backward as single ops.
///
/// Both have defaults in tensor ops, so a backend implements it with an empty `impl`; `Hetero`
/// overrides them with fused CPU passes, and `Autodiff<B>` records the forward as one node whose
/// backward is `B`'s.
pub trait BatchNormBackend: Backend {
    /// Normalises `x` (`[batch, channels, ...]`) per channel with the batch's mean and biased
    /// variance, then scales by `gamma` and shifts by `beta` (both `[channels]`).
    fn batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> BatchNormTrain<Self> {
        decomposed_forward::<Self>(x, gamma, beta, epsilon)
    }

    /// Gradients of [`Self::batch_norm_train`] given its input, `gamma`, the batch statistics it
    /// returned and the gradient of its output.
    fn batch_norm_train_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        var: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        epsilon: f64,
    ) -> BatchNormGrads<Self> {
        decomposed_backward::<Self>(x, gamma, mean, var, grad, epsilon)
    }

    /// `relu(batch_norm(x) + residual)` in training mode, the residual optional: the output and
    /// the batch statistics as [`Self::batch_norm_train`] returns them.
    fn batch_norm_relu_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        residual: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> BatchNormTrain<Self> {
        relu_after_forward::<Self>(x, gamma, beta, residual, epsilon)
    }

    /// Gradients of [`Self::batch_norm_relu_train`] given its input, `gamma`, the batch
    /// statistics and output it returned and the gradient of its output; `residual` asks for
    /// the residual's gradient too.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_relu_train_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        var: FloatTensor<Self>,
        output: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        residual: bool,
        epsilon: f64,
    ) -> BatchNormReluGrads<Self> {
        relu_before_backward::<Self>(x, gamma, mean, var, output, grad, residual, epsilon)
    }
}

/// The default [`BatchNormBackend::batch_norm_relu_train`]: the batch norm, then an add and a
/// ReLU in `B`'s tensor ops.
fn relu_after_forward<B: BatchNormBackend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    residual: Option<FloatTensor<B>>,
    epsilon: f64,
) -> BatchNormTrain<B> {
    let out = B::batch_norm_train(x, gamma, beta, epsilon);
    let sum = match residual {
        Some(residual) => B::float_add(out.output, residual),
        None => out.output,
    };
    BatchNormTrain {
        output: B::relu(sum),
        mean: out.mean,
        var: out.var,
    }
}

/// The default [`BatchNormBackend::batch_norm_relu_train_backward`]: ReLU's backward in `B`'s
/// tensor ops, then the batch norm's.
#[allow(clippy::too_many_arguments)]
fn relu_before_backward<B: BatchNormBackend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    var: FloatTensor<B>,
    output: FloatTensor<B>,
    grad: FloatTensor<B>,
    residual: bool,
    epsilon: f64,
) -> BatchNormReluGrads<B> {
    let before = B::relu_backward(output, grad);
    let residual = residual.then(|| before.clone());
    let norm = B::batch_norm_train_backward(x, gamma, mean, var, before, epsilon);
    BatchNormReluGrads { norm, residual }
}

/// burn-nn's `BatchNorm::forward` with the training path through [`BatchNormBackend`]: the same
/// output, gradients and running-statistics update. Inference (no autodiff) uses the running
/// statistics exactly as burn-nn does.
///
/// # Panics
///
/// If `input` has rank < 2, or its channel count is not the module's (as burn-nn does).
pub fn batch_norm<B: BatchNormBackend, const D: usize>(
    module: &BatchNorm<B>,
    input: Tensor<B, D>,
) -> Tensor<B, D> {
    train_or_infer(module, input, B::batch_norm_train, |y| y)
}

/// `relu(batch_norm(input) + residual)`, the residual optional: in training one op forward and
/// one backward (on `Hetero` with burn-flex, the add and the ReLU ride in batch norm's output
/// pass and ReLU's backward is a pass of the same op; elsewhere they are `B`'s tensor ops), with the same output, gradients and running statistics
/// as the three ops written out. A ResNet block ends in `batch_norm_relu(bn2, conv2(h),
/// Some(shortcut))`; its first half is `batch_norm_relu(bn1, conv1(x), None)`.
///
/// # Panics
///
/// As [`batch_norm`]; and if the residual's shape is not the input's.
pub fn batch_norm_relu<B: BatchNormBackend, const D: usize>(
    module: &BatchNorm<B>,
    input: Tensor<B, D>,
    residual: Option<Tensor<B, D>>,
) -> Tensor<B, D> {
    if let Some(residual) = &residual {
        assert_eq!(
            residual.dims(),
            input.dims(),
            "batch norm's residual must have the input's shape"
        );
    }
    let primitive = |r: Tensor<B, D>| r.into_primitive().tensor();
    let infer_residual = residual.clone();
    train_or_infer(
        module,
        input,
        move |x, gamma, beta, epsilon| {
            B::batch_norm_relu_train(x, gamma, beta, residual.map(primitive), epsilon)
        },
        move |y| {
            let sum = match infer_residual {
                Some(residual) => y + residual,
                None => y,
            };
            burn::tensor::activation::relu(sum)
        },
    )
}

/// With autodiff, `train` (then the running statistics' update); without, burn-nn's inference
/// forward, then `after_inference`.
fn train_or_infer<B: BatchNormBackend, const D: usize>(
    module: &BatchNorm<B>,
    input: Tensor<B, D>,
    train: impl FnOnce(FloatTensor<B>, FloatTensor<B>, FloatTensor<B>, f64) -> BatchNormTrain<B>,
    after_inference: impl FnOnce(Tensor<B, D>) -> Tensor<B, D>,
) -> Tensor<B, D> {
    assert!(
        D >= 2,
        "batch norm needs an input of rank >= 2, [batch, channels, ...]; got rank {D}"
    );
    let device = input.device();
    if !B::ad_enabled(&device) {
        return after_inference(module.forward(input));
    }
    let channels = module.gamma.dims()[0];
    assert_eq!(
        input.dims()[1],
        channels,
        "batch norm over {channels} channels got an input of shape {:?}",
        input.dims()
    );
    let out = train(
        input.into_primitive().tensor(),
        module.gamma.val().into_primitive().tensor(),
        module.beta.val().into_primitive().tensor(),
        module.epsilon,
    );
    let per_channel = |t| Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t)).detach();
    let (mean, var) = (per_channel(out.mean), per_channel(out.var));
    let momentum = module.momentum;
    let update = |state: &burn::module::RunningState<Tensor<B, 1>>, batch: Tensor<B, 1>| {
        let running = state.value_sync().to_device(&device);
        state.update(
            running
                .mul_scalar(1.0 - momentum)
                .add(batch.mul_scalar(momentum))
                .detach(),
        );
    };
    update(&module.running_mean, mean);
    update(&module.running_var, var);
    Tensor::from_primitive(TensorPrimitive::Float(out.output))
}

/// `x` as `[batch, channels, rest]` and the shape to give results back in.
fn flattened<B: Backend>(x: FloatTensor<B>) -> (Tensor<B, 3>, burn_std::Shape) {
    let shape = x.shape();
    let dims = shape.as_slice();
    let rest: usize = dims[2..].iter().product();
    let x = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(B::float_reshape(
        x,
        [dims[0], dims[1], rest].into(),
    )));
    (x, shape)
}

fn channel_view<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 3> {
    let t = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(t));
    let channels = t.dims()[0];
    t.reshape([1, channels, 1])
}

fn primitive<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// The default forward, in `B`'s tensor ops.
pub fn decomposed_forward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    epsilon: f64,
) -> BatchNormTrain<B> {
    let (x, shape) = flattened::<B>(x);
    let [batch, channels, rest] = x.dims();
    let count = (batch * rest).max(1) as f64;
    let mean = x.clone().sum_dim(2).sum_dim(0).div_scalar(count);
    let centred = x - mean.clone();
    let var = centred
        .clone()
        .square()
        .sum_dim(2)
        .sum_dim(0)
        .div_scalar(count);
    let scale = var.clone().add_scalar(epsilon).sqrt().recip() * channel_view::<B>(gamma);
    let output = centred * scale + channel_view::<B>(beta);
    BatchNormTrain {
        output: B::float_reshape(primitive(output), shape),
        mean: primitive(mean.reshape([channels])),
        var: primitive(var.reshape([channels])),
    }
}

/// The default backward, in `B`'s tensor ops.
pub fn decomposed_backward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    var: FloatTensor<B>,
    grad: FloatTensor<B>,
    epsilon: f64,
) -> BatchNormGrads<B> {
    let (x, shape) = flattened::<B>(x);
    let (grad, _) = flattened::<B>(grad);
    let [batch, channels, rest] = x.dims();
    let count = (batch * rest).max(1) as f64;
    let invstd = channel_view::<B>(var).add_scalar(epsilon).sqrt().recip();
    let normalised = (x - channel_view::<B>(mean)) * invstd.clone();
    let grad_beta = grad.clone().sum_dim(2).sum_dim(0);
    let grad_gamma = (grad.clone() * normalised.clone()).sum_dim(2).sum_dim(0);
    let input = (grad
        - grad_beta.clone().div_scalar(count)
        - normalised * grad_gamma.clone().div_scalar(count))
        * (invstd * channel_view::<B>(gamma));
    BatchNormGrads {
        input: B::float_reshape(primitive(input), shape),
        gamma: primitive(grad_gamma.reshape([channels])),
        beta: primitive(grad_beta.reshape([channels])),
    }
}

impl_with_defaults!(BatchNormBackend);

impl<C: Backend, A: Accelerator> BatchNormBackend for Hetero<C, A> {
    fn batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> BatchNormTrain<Self> {
        let operands = [x, gamma, beta];
        fused_forward::<C, A>(
            "batch_norm_train",
            operands,
            (None, false),
            epsilon,
            |o, _| {
                let [x, gamma, beta] = o;
                decomposed_forward::<Self>(x, gamma, beta, epsilon)
            },
        )
    }

    fn batch_norm_train_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        var: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        epsilon: f64,
    ) -> BatchNormGrads<Self> {
        let operands = [x, gamma, mean, var, grad];
        let backward = fused_backward::<C, A>("batch_norm_train_backward", operands, None, epsilon);
        match backward {
            Ok(out) => out.norm,
            Err(([x, gamma, mean, var, grad], _)) => {
                decomposed_backward::<Self>(x, gamma, mean, var, grad, epsilon)
            }
        }
    }

    fn batch_norm_relu_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        residual: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> BatchNormTrain<Self> {
        let (op, operands) = ("batch_norm_relu_train", [x, gamma, beta]);
        fused_forward::<C, A>(op, operands, (residual, true), epsilon, |o, residual| {
            let [x, gamma, beta] = o;
            relu_after_forward::<Self>(x, gamma, beta, residual, epsilon)
        })
    }

    fn batch_norm_relu_train_backward(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        mean: FloatTensor<Self>,
        var: FloatTensor<Self>,
        output: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        residual: bool,
        epsilon: f64,
    ) -> BatchNormReluGrads<Self> {
        let relu = crate::ops::batch_norm::ReluBackward {
            output,
            keep_gradient: residual,
        };
        let operands = [x, gamma, mean, var, grad];
        let op = "batch_norm_relu_train_backward";
        match fused_backward::<C, A>(op, operands, Some(relu), epsilon) {
            Ok(out) => out,
            Err(([x, gamma, mean, var, grad], output)) => {
                let output = output.expect("the ReLU's output comes back with the operands");
                relu_before_backward::<Self>(x, gamma, mean, var, output, grad, residual, epsilon)
            }
        }
    }
}

/// A fused forward on burn-flex (the residual added and the ReLU applied with `relu`), timed as
/// `op`; where it refuses the operands, logged once and `op_by_op_form` on them and the residual.
fn fused_forward<C: Backend, A: Accelerator>(
    op: &'static str,
    [x, gamma, beta]: [FloatTensor<C>; 3],
    (residual, relu): (Option<FloatTensor<C>>, bool),
    epsilon: f64,
    op_by_op_form: impl FnOnce(
        [FloatTensor<C>; 3],
        Option<FloatTensor<C>>,
    ) -> BatchNormTrain<Hetero<C, A>>,
) -> BatchNormTrain<Hetero<C, A>> {
    let timer =
        crate::profile::CpuOpTimer::start_with(op, || vec![crate::profile::describe_operand(&x)]);
    match crate::ops::batch_norm::forward::<C>(x, gamma, beta, residual, relu, epsilon) {
        Ok(out) => BatchNormTrain {
            output: out.output,
            mean: out.mean,
            var: out.var,
        },
        Err((why, operands, residual)) => {
            drop(timer);
            op_by_op(op, &why);
            op_by_op_form(operands, residual)
        }
    }
}

/// A fused backward on burn-flex (after a ReLU with `relu`), timed as `op`; where it refuses
/// the operands, logged once and the operands (and the ReLU's output) back.
#[allow(clippy::type_complexity)]
fn fused_backward<C: Backend, A: Accelerator>(
    op: &'static str,
    [x, gamma, mean, var, grad]: [FloatTensor<C>; 5],
    relu: Option<crate::ops::batch_norm::ReluBackward<C>>,
    epsilon: f64,
) -> Result<BatchNormReluGrads<Hetero<C, A>>, ([FloatTensor<C>; 5], Option<FloatTensor<C>>)> {
    let timer = crate::profile::CpuOpTimer::start_with(op, || {
        vec![crate::profile::describe_operand(&grad)]
    });
    match crate::ops::batch_norm::backward::<C>(x, gamma, mean, var, grad, relu, epsilon) {
        Ok(out) => Ok(BatchNormReluGrads {
            norm: BatchNormGrads {
                input: out.input,
                gamma: out.gamma,
                beta: out.beta,
            },
            residual: out.before_relu,
        }),
        Err((why, operands, output)) => {
            drop(timer);
            op_by_op(op, &why);
            Err((operands, output))
        }
    }
}

/// Logs once per op and reason that the fused form was not used.
fn op_by_op(op: &str, why: &str) {
    crate::fallback::op_by_op(
        op,
        why,
        "the fused form needs burn-flex and contiguous f32 tensors",
    );
}

/// The autodiff node of a batch norm: input, `gamma` and `beta` as parents.
#[derive(Debug)]
struct BatchNormNode;

impl<B: BatchNormBackend> Backward<B, 3> for BatchNormNode {
    /// Input, `gamma`, batch mean and variance, epsilon.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        f64,
    );

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let grad = grads.consume::<B>(&ops.node);
        let (x, gamma, mean, var, epsilon) = ops.state;
        let out = B::batch_norm_train_backward(x, gamma, mean, var, grad, epsilon);
        for (node, grad) in [
            (node_x, out.input),
            (node_gamma, out.gamma),
            (node_beta, out.beta),
        ] {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// The autodiff node of `relu(batch_norm(x) + residual)`: input, `gamma` and `beta` as
/// parents, and the residual as a fourth where there is one (`N` = 3 or 4).
#[derive(Debug)]
struct BatchNormReluNode;

impl<B: BatchNormBackend, const N: usize> Backward<B, N> for BatchNormReluNode {
    /// Input, `gamma`, batch mean and variance, output, epsilon.
    type State = (
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        FloatTensor<B>,
        f64,
    );

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let mut parents = ops.parents.into_iter();
        let [node_x, node_gamma, node_beta] = std::array::from_fn(|_| parents.next().flatten());
        let node_residual = parents.next().flatten();
        let grad = grads.consume::<B>(&ops.node);
        let (x, gamma, mean, var, output, epsilon) = ops.state;
        let out = B::batch_norm_relu_train_backward(
            x,
            gamma,
            mean,
            var,
            output,
            grad,
            node_residual.is_some(),
            epsilon,
        );
        let residual = node_residual.zip(out.residual);
        for (node, grad) in [
            (node_x, out.norm.input),
            (node_gamma, out.norm.gamma),
            (node_beta, out.norm.beta),
        ]
        .into_iter()
        .chain(residual.map(|(node, grad)| (Some(node), grad)))
        {
            if let Some(node) = node {
                grads.register::<B>(node.id, grad);
            }
        }
    }
}

/// The state of a [`BatchNormReluNode`].
type ReluNodeState<B> = <BatchNormReluNode as Backward<B, 3>>::State;

/// Finishes the autodiff node of a `relu(batch_norm(x) + residual)` that `B` computed.
fn finish_relu_node<B: BatchNormBackend, S: CheckpointStrategy, const N: usize>(
    kind: OpsKind<BatchNormReluNode, B, ReluNodeState<B>, S, N>,
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    out: BatchNormTrain<B>,
    epsilon: f64,
) -> BatchNormTrain<Autodiff<B, S>>
where
    BatchNormReluNode: Backward<B, N, State = ReluNodeState<B>>,
{
    let untracked = <FloatTensor<Autodiff<B, S>>>::new;
    let output = match kind {
        OpsKind::Tracked(prep) => {
            let state = (
                x,
                gamma,
                out.mean.clone(),
                out.var.clone(),
                out.output.clone(),
                epsilon,
            );
            prep.finish(state, out.output)
        }
        OpsKind::UnTracked(prep) => prep.finish(out.output),
    };
    BatchNormTrain {
        output,
        mean: untracked(out.mean),
        var: untracked(out.var),
    }
}

impl<B: BatchNormBackend, S: CheckpointStrategy> BatchNormBackend for Autodiff<B, S> {
    fn batch_norm_relu_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        residual: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> BatchNormTrain<Self> {
        let out = B::batch_norm_relu_train(
            x.primitive.clone(),
            gamma.primitive.clone(),
            beta.primitive,
            residual.as_ref().map(|r| r.primitive.clone()),
            epsilon,
        );
        let (x_primitive, gamma_primitive) = (x.primitive, gamma.primitive);
        match residual {
            None => {
                let kind = BatchNormReluNode
                    .prepare::<S>([x.node, gamma.node, beta.node])
                    .compute_bound()
                    .stateful();
                finish_relu_node::<B, S, 3>(kind, x_primitive, gamma_primitive, out, epsilon)
            }
            Some(residual) => {
                let kind = BatchNormReluNode
                    .prepare::<S>([x.node, gamma.node, beta.node, residual.node])
                    .compute_bound()
                    .stateful();
                finish_relu_node::<B, S, 4>(kind, x_primitive, gamma_primitive, out, epsilon)
            }
        }
    }

    fn batch_norm_train(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> BatchNormTrain<Self> {
        let out = B::batch_norm_train(
            x.primitive.clone(),
            gamma.primitive.clone(),
            beta.primitive,
            epsilon,
        );
        let untracked = <FloatTensor<Self>>::new;
        let output = match BatchNormNode
            .prepare::<S>([x.node, gamma.node, beta.node])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(
                (
                    x.primitive,
                    gamma.primitive,
                    out.mean.clone(),
                    out.var.clone(),
                    epsilon,
                ),
                out.output,
            ),
            OpsKind::UnTracked(prep) => prep.finish(out.output),
        };
        BatchNormTrain {
            output,
            mean: untracked(out.mean),
            var: untracked(out.var),
        }
    }
}
