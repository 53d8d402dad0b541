//! SGD with momentum and weight decay as one op per parameter.
//!
//! burn-optim's `Sgd` updates a parameter with five to seven tensor ops (weight decay's scale
//! and add, momentum's two scales and add, the learning rate's scale, the subtraction), each
//! writing a full-size tensor: a ResNet20 step runs ~390 of them, the MNIST net's 800×500 layer
//! reads and writes its 1.6 MB six times. [`FusedSgd`] computes the same update through
//! [`SgdBackend::sgd_step`], which on `Hetero<Flex, _>` is one threaded pass over the parameter,
//! its gradient and its velocity, in place where their buffers are unshared; elsewhere it is the
//! tensor ops written out. Each element goes through the same f32 operations in the same order
//! as in `Sgd`, so the results are bit-identical, and the state (the velocity) is recorded under
//! the same names, so checkpoints of either load into the other.

use crate::Hetero;
use crate::accelerator::Accelerator;
use crate::ops::channels::values;
use crate::ops::elementwise::dense;
use crate::ops::layout::{from_flex, into_flex, writable};
use burn::module::AutodiffModule;
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{LearningRate, SimpleOptimizer};
use burn::record::Record;
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Scalar};
use burn_flex::FlexTensor;
use core::marker::PhantomData;
use rayon::prelude::*;

/// Below this many elements a parameter is updated on the calling thread.
const PARALLEL_MIN: usize = 1 << 15;

/// Elements per rayon task.
const CHUNK: usize = 1 << 13;

/// Momentum as burn-optim's `MomentumConfig` sets it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Momentum {
    /// The velocity's decay per step.
    pub momentum: f64,
    /// The share of the gradient left out of the velocity.
    pub dampening: f64,
    /// Nesterov's variant: the step is `momentum · velocity + gradient`.
    pub nesterov: bool,
}

/// One step's hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdStep {
    /// The learning rate.
    pub lr: f64,
    /// The weight decay's penalty (`gradient + penalty · parameter`).
    pub weight_decay: Option<f32>,
    /// Momentum, if any.
    pub momentum: Option<Momentum>,
}

/// The scalars of a step in f32, as burn-flex takes a scalar (to f64, then to f32).
#[derive(Clone, Copy)]
struct Scalars {
    lr: f32,
    weight_decay: Option<f32>,
    /// `(momentum, 1 - dampening, nesterov)`.
    momentum: Option<(f32, f32, bool)>,
}

impl SgdStep {
    fn scalars(&self) -> Scalars {
        let f32_of = |v: f64| Scalar::from(v).elem::<f64>() as f32;
        Scalars {
            lr: f32_of(self.lr),
            weight_decay: self.weight_decay.map(|p| f32_of(p as f64)),
            momentum: self
                .momentum
                .map(|m| (f32_of(m.momentum), f32_of(1.0 - m.dampening), m.nesterov)),
        }
    }
}

/// A parameter and its velocity after a step.
pub type SgdUpdate<B> = (FloatTensor<B>, Option<FloatTensor<B>>);

/// A backend with an SGD step as one op. The default is burn-optim's formulas in tensor ops,
/// so a backend implements it with an empty `impl`; `Hetero` runs it as one fused pass on
/// burn-flex.
pub trait SgdBackend: Backend {
    /// The parameter after one step from its gradient, and the velocity after it when the step
    /// has momentum (`velocity` is the previous one, `None` on the first step).
    fn sgd_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        velocity: Option<FloatTensor<Self>>,
        step: SgdStep,
    ) -> SgdUpdate<Self> {
        decomposed_step::<Self>(param, grad, velocity, step)
    }
}

impl_with_defaults!(SgdBackend);

impl<C: Backend, A: Accelerator> SgdBackend for Hetero<C, A> {
    fn sgd_step(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        velocity: Option<FloatTensor<Self>>,
        step: SgdStep,
    ) -> SgdUpdate<Self> {
        // Named by the parameter's shape, so that a profile tells which update waited for a
        // weight gradient still being read (the first conv's, the last the backward makes).
        let _timer = crate::profile::CpuOpTimer::start_with("sgd_step", || {
            vec![crate::profile::describe_operand(&param)]
        });
        match fused_step::<C>(param, grad, velocity, step) {
            Ok(update) => update,
            Err((param, grad, velocity)) => decomposed_step::<Self>(param, grad, velocity, step),
        }
    }
}

/// burn-optim's `Sgd` written out in the backend's ops, in its order.
fn decomposed_step<B: Backend>(
    param: FloatTensor<B>,
    grad: FloatTensor<B>,
    velocity: Option<FloatTensor<B>>,
    step: SgdStep,
) -> SgdUpdate<B> {
    let mut grad = grad;
    if let Some(penalty) = step.weight_decay {
        let decay = B::float_mul_scalar(param.clone(), Scalar::from(penalty as f64));
        grad = B::float_add(decay, grad);
    }
    let mut new_velocity = None;
    if let Some(m) = step.momentum {
        let v = match velocity {
            Some(v) => B::float_add(
                B::float_mul_scalar(grad.clone(), Scalar::from(1.0 - m.dampening)),
                B::float_mul_scalar(v, Scalar::from(m.momentum)),
            ),
            None => grad.clone(),
        };
        grad = if m.nesterov {
            B::float_add(
                B::float_mul_scalar(v.clone(), Scalar::from(m.momentum)),
                grad,
            )
        } else {
            v.clone()
        };
        new_velocity = Some(v);
    }
    let delta = B::float_mul_scalar(grad, Scalar::from(step.lr));
    (B::float_sub(param, delta), new_velocity)
}

/// The operands back, when the fused pass cannot take them.
type Refused<C> = (FloatTensor<C>, FloatTensor<C>, Option<FloatTensor<C>>);

/// The step in one pass when `C` is burn-flex and every operand is a contiguous f32 tensor of
/// the parameter's shape.
fn fused_step<C: Backend>(
    param: FloatTensor<C>,
    grad: FloatTensor<C>,
    velocity: Option<FloatTensor<C>>,
    step: SgdStep,
) -> Result<SgdUpdate<C>, Refused<C>> {
    let back = |p: FlexTensor, g: FlexTensor, v: Option<FlexTensor>| {
        (from_flex::<C>(p), from_flex::<C>(g), v.map(from_flex::<C>))
    };
    let (param, grad) = match (into_flex::<C>(param), into_flex::<C>(grad)) {
        (Ok(p), Ok(g)) => (p, g),
        (p, g) => {
            let undo = |t: Result<FlexTensor, FloatTensor<C>>| t.map_or_else(|t| t, from_flex::<C>);
            return Err((undo(p), undo(g), velocity));
        }
    };
    let velocity = match velocity.map(into_flex::<C>).transpose() {
        Ok(v) => v,
        Err(v) => return Err((from_flex::<C>(param), from_flex::<C>(grad), Some(v))),
    };
    let shape = param.layout().shape().clone();
    let fits = |t: &FlexTensor| values(t).is_some() && t.layout().shape() == &shape;
    if !fits(&param) || !fits(&grad) || velocity.as_ref().is_some_and(|v| !fits(v)) {
        return Err(back(param, grad, velocity));
    }
    let s = step.scalars();
    let (mut param, mut velocity) = (owned(param), velocity.map(owned));
    let n = shape.num_elements();
    // The first step with momentum: the velocity starts as the decayed gradient, written by
    // the pass into a buffer of its own.
    let first = velocity.is_none();
    if s.momentum.is_some() && first {
        velocity = Some(dense(vec![0.0; n], shape.clone()));
    }
    let g = values(&grad).expect("checked");
    let p = &mut param.storage_mut::<f32>()[..n];
    match velocity.as_mut() {
        Some(v) => {
            let v = &mut v.storage_mut::<f32>()[..n];
            let update = |(p, v, g): (&mut [f32], &mut [f32], &[f32])| {
                update_with_momentum(p, v, g, s, first)
            };
            if n < PARALLEL_MIN {
                update((p, v, g));
            } else {
                p.par_chunks_mut(CHUNK)
                    .zip(v.par_chunks_mut(CHUNK))
                    .zip(g.par_chunks(CHUNK))
                    .for_each(|((p, v), g)| update((p, v, g)));
            }
        }
        None if n < PARALLEL_MIN => update_plain(p, g, s),
        None => p
            .par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .for_each(|(p, g)| update_plain(p, g, s)),
    }
    Ok((from_flex::<C>(param), velocity.map(from_flex::<C>)))
}

/// A dense f32 tensor whose buffer is its own, from offset 0: `tensor` itself when it is, else a
/// copy.
fn owned(tensor: FlexTensor) -> FlexTensor {
    let n = tensor.layout().num_elements();
    if writable(&tensor) && tensor.layout().contiguous_offsets() == Some((0, n)) {
        return tensor;
    }
    let shape = tensor.layout().shape().clone();
    dense(values(&tensor).expect("checked").to_vec(), shape)
}

/// `p ← p - lr · g'` with `g' = g + penalty · p`, no momentum.
fn update_plain(p: &mut [f32], g: &[f32], s: Scalars) {
    for (p, &g) in p.iter_mut().zip(g) {
        let g = decayed(*p, g, s.weight_decay);
        *p -= g * s.lr;
    }
}

/// The step with momentum: `v ← (1 - dampening) · g' + momentum · v` (`v ← g'` on the first
/// step), then `p ← p - lr · v`, or with Nesterov `p ← p - lr · (momentum · v + g')`.
fn update_with_momentum(p: &mut [f32], v: &mut [f32], g: &[f32], s: Scalars, first: bool) {
    let (momentum, keep, nesterov) = s.momentum.expect("a step with momentum");
    for ((p, v), &g) in p.iter_mut().zip(v.iter_mut()).zip(g) {
        let g = decayed(*p, g, s.weight_decay);
        *v = if first { g } else { g * keep + *v * momentum };
        let g = if nesterov { *v * momentum + g } else { *v };
        *p -= g * s.lr;
    }
}

/// The gradient with weight decay, `penalty · p + g`, rounded as the two ops round it.
#[inline(always)]
fn decayed(p: f32, g: f32, penalty: Option<f32>) -> f32 {
    match penalty {
        Some(penalty) => p * penalty + g,
        None => g,
    }
}

/// SGD with optional momentum and weight decay, as burn-optim's `Sgd` computes it, one
/// [`SgdBackend::sgd_step`] per parameter.
#[derive(Clone, Debug)]
pub struct FusedSgd<B: Backend> {
    weight_decay: Option<f32>,
    momentum: Option<Momentum>,
    backend: PhantomData<B>,
}

impl<B: SgdBackend> FusedSgd<B> {
    /// The optimizer with burn-optim's configurations of momentum and weight decay (`None`:
    /// without).
    pub fn new(
        momentum: Option<&MomentumConfig>,
        weight_decay: Option<&WeightDecayConfig>,
    ) -> Self {
        Self {
            weight_decay: weight_decay.map(|w| w.penalty),
            momentum: momentum.map(|m| Momentum {
                momentum: m.momentum,
                dampening: m.dampening,
                nesterov: m.nesterov,
            }),
            backend: PhantomData,
        }
    }

    /// As an optimizer of an autodiff module `M` on `AB` (whose inner backend is `B`), like
    /// `SgdConfig::init`.
    pub fn init<AB, M>(self) -> OptimizerAdaptor<Self, M, AB>
    where
        AB: AutodiffBackend<InnerBackend = B>,
        M: AutodiffModule<AB>,
    {
        OptimizerAdaptor::from(self)
    }
}

/// A parameter's optimizer state: its velocity where the optimizer has momentum. Recorded as
/// burn-optim's `SgdState` is.
#[derive(Record, Clone)]
pub struct FusedSgdState<B: Backend, const D: usize> {
    /// The velocity, as burn-optim's `MomentumState`.
    pub momentum: Option<VelocityState<B, D>>,
}

/// The velocity of momentum, recorded as burn-optim's `MomentumState` is.
#[derive(Record, Clone)]
pub struct VelocityState<B: Backend, const D: usize> {
    /// The velocity.
    pub velocity: Tensor<B, D>,
}

impl<B: SgdBackend> SimpleOptimizer<B> for FusedSgd<B> {
    type State<const D: usize> = FusedSgdState<B, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<B, D>,
        grad: Tensor<B, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<B, D>, Option<Self::State<D>>) {
        let step = SgdStep {
            lr,
            weight_decay: self.weight_decay,
            momentum: self.momentum,
        };
        let velocity = state
            .and_then(|s| s.momentum)
            .map(|m| m.velocity.into_primitive().tensor());
        let (param, velocity) = B::sgd_step(
            tensor.into_primitive().tensor(),
            grad.into_primitive().tensor(),
            velocity,
            step,
        );
        let velocity = velocity.map(|v| VelocityState {
            velocity: Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(v)),
        });
        (
            Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(param)),
            Some(FusedSgdState { momentum: velocity }),
        )
    }

    fn to_device<const D: usize>(mut state: Self::State<D>, device: &B::Device) -> Self::State<D> {
        state.momentum = state.momentum.map(|m| VelocityState {
            velocity: m.velocity.to_device(device),
        });
        state
    }
}
