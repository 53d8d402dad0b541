//! Batch norm's training forward and backward on burn-flex f32 tensors, each a few passes over
//! memory across rayon's threads.
//!
//! Written out as tensor ops (burn-nn's module, then autodiff's backward of each op), one batch
//! norm of a `[32, 16, 32, 32]` activation is a few dozen CPU ops on full-size tensors, two of
//! them strided copies of `swap_dims(0, 1)` views; a ResNet20 step has nineteen. Here the
//! forward reads the input twice and writes the output once, the backward reads input and output
//! gradient twice and writes the input gradient once (in place of the output gradient when that
//! buffer is not shared).
//!
//! With a ReLU after it (and the residual a ResNet block adds before the ReLU), the forward adds
//! and clamps in its output pass; the backward masks the output gradient (in place when nothing
//! else holds it; it is also the residual's gradient) in its first pass, summing each plane as
//! it is masked, and writes the input gradient in its second, into a buffer of its own where
//! the masked one is kept.
//!
//! Sums are taken per `(image, channel)` plane in f64 around a per-channel shift (the channel's
//! first value), so the variance does not lose digits to cancellation when a channel's mean is
//! large against its spread.

use super::channels::{Planes, values};
use super::elementwise::{dense, filled};
use super::layout::{from_flex, into_flex, writable};
use crate::sums::{gradient_sums, shifted_sums};
use burn_backend::Backend;
use burn_backend::tensor::FloatTensor;
use burn_flex::{FlexTensor, Layout};
use burn_std::Shape;
use core::mem::MaybeUninit;
use rayon::prelude::*;

/// The training forward's results: the normalised output, the batch mean and the biased batch
/// variance (both `[channels]`).
pub(crate) struct Forward<C: Backend> {
    pub(crate) output: FloatTensor<C>,
    pub(crate) mean: FloatTensor<C>,
    pub(crate) var: FloatTensor<C>,
}

/// The backward's results: gradients of the input, of `gamma` and of `beta`, and, where asked
/// for, the gradient before the ReLU (the residual's).
pub(crate) struct Backward<C: Backend> {
    pub(crate) input: FloatTensor<C>,
    pub(crate) gamma: FloatTensor<C>,
    pub(crate) beta: FloatTensor<C>,
    pub(crate) before_relu: Option<FloatTensor<C>>,
}

/// The ReLU that ended a forward: its output (the mask) and whether the gradient before it is
/// wanted as a result of its own.
pub(crate) struct ReluBackward<C: Backend> {
    pub(crate) output: FloatTensor<C>,
    pub(crate) keep_gradient: bool,
}

/// A backward the fused form refused: the reason, the operands (input, `gamma`, mean, variance,
/// output gradient) and the ReLU's output back unchanged.
pub(crate) type RefusedBackward<C> = (String, [FloatTensor<C>; 5], Option<FloatTensor<C>>);

/// Operands as burn-flex tensors; on failure, the reason and the operands back unchanged.
type Operands<C, const N: usize> = Result<[FlexTensor; N], (String, [FloatTensor<C>; N])>;

fn flex_operands<C: Backend, const N: usize>(tensors: [FloatTensor<C>; N]) -> Operands<C, N> {
    let converted = tensors.map(into_flex::<C>);
    if converted.iter().all(Result::is_ok) {
        return Ok(converted.map(|t| match t {
            Ok(flex) => flex,
            Err(_) => unreachable!("all operands converted"),
        }));
    }
    let back = converted.map(|t| match t {
        Ok(flex) => from_flex::<C>(flex),
        Err(tensor) => tensor,
    });
    Err(("the CPU backend is not burn-flex".to_string(), back))
}

/// An optional operand as a burn-flex tensor; the operand back when `C` is not burn-flex.
fn optional_flex<C: Backend>(
    tensor: Option<FloatTensor<C>>,
) -> Result<Option<FlexTensor>, FloatTensor<C>> {
    tensor.map(into_flex::<C>).transpose()
}

/// Checks the operands' dtypes, layouts and shapes; the reason when the fused form cannot take
/// them.
fn check(x: &FlexTensor, per_channel: &[&FlexTensor]) -> Result<Planes, String> {
    let planes = Planes::of(x.layout().shape())
        .ok_or_else(|| format!("input of rank {} (needs ≥ 2)", x.layout().num_dims()))?;
    let mut all = vec![x];
    all.extend_from_slice(per_channel);
    if all.iter().any(|t| values(t).is_none()) {
        return Err("an operand is not a contiguous f32 tensor".to_string());
    }
    if per_channel
        .iter()
        .any(|t| t.layout().num_elements() != planes.channels)
    {
        return Err("a per-channel operand's length is not the channel count".to_string());
    }
    Ok(planes)
}

/// A forward the fused form refused: the reason, and the operands (input, `gamma`, `beta`,
/// then the residual) back unchanged.
pub(crate) type RefusedForward<C> = (String, [FloatTensor<C>; 3], Option<FloatTensor<C>>);

/// Training forward: `y = (x - mean) / sqrt(var + epsilon) · gamma + beta` with the batch's
/// mean and biased variance per channel, then `+ residual` where there is one and `max(y, 0)`
/// with `relu`, in the same pass. The operands back, with the reason, when `C` is not
/// burn-flex or they are not contiguous f32 tensors (the residual of the input's shape).
pub(crate) fn forward<C: Backend>(
    x: FloatTensor<C>,
    gamma: FloatTensor<C>,
    beta: FloatTensor<C>,
    residual: Option<FloatTensor<C>>,
    relu: bool,
    epsilon: f64,
) -> Result<Forward<C>, RefusedForward<C>> {
    let [x, gamma, beta] = match flex_operands::<C, 3>([x, gamma, beta]) {
        Ok(operands) => operands,
        Err((why, back)) => return Err((why, back, residual)),
    };
    let residual = match optional_flex::<C>(residual) {
        Ok(residual) => residual,
        Err(r) => {
            let why = "the residual is not a burn-flex tensor".to_string();
            return Err((why, [x, gamma, beta].map(from_flex::<C>), Some(r)));
        }
    };
    let planes = check(&x, &[&gamma, &beta]).and_then(|planes| match &residual {
        Some(r) if values(r).is_none() || r.layout().shape() != x.layout().shape() => {
            Err("the residual is not a contiguous f32 tensor of the input's shape".to_string())
        }
        _ => Ok(planes),
    });
    let planes = match planes {
        Ok(planes) => planes,
        Err(why) => {
            let back = [x, gamma, beta].map(from_flex::<C>);
            return Err((why, back, residual.map(from_flex::<C>)));
        }
    };
    let xs = values(&x).expect("checked");
    let rs = residual.as_ref().map(|r| values(r).expect("checked"));
    let (gamma_v, beta_v) = (
        values(&gamma).expect("checked"),
        values(&beta).expect("checked"),
    );
    let len = planes.len;
    let shifts: Vec<f32> = (0..planes.channels)
        .map(|c| if len > 0 { xs[c * len] } else { 0.0 })
        .collect();
    let sums = planes.per_channel(|p, c| shifted_sums(&xs[p * len..(p + 1) * len], shifts[c]));
    let count = planes.count().max(1) as f64;
    let (mut mean, mut var) = (
        Vec::with_capacity(sums.len()),
        Vec::with_capacity(sums.len()),
    );
    for (&[sum, squares], &shift) in sums.iter().zip(&shifts) {
        let centred = sum / count;
        mean.push(shift as f64 + centred);
        var.push((squares / count - centred * centred).max(0.0));
    }
    let mean32: Vec<f32> = mean.iter().map(|&m| m as f32).collect();
    let scale: Vec<f32> = var
        .iter()
        .zip(gamma_v)
        .map(|(&v, &g)| (g as f64 / (v + epsilon).sqrt()) as f32)
        .collect();
    let channels = planes.channels;
    // The same f32 operations as the op-by-op form (affine map, add, then burn-flex's ReLU,
    // `max(0)`), so both give the same bits.
    let activate = |v: f32| if relu { v.max(0.0) } else { v };
    let out = filled(xs.len(), |out| {
        out.par_chunks_mut(len.max(1))
            .zip(xs.par_chunks(len.max(1)))
            .with_min_len(planes.min_planes())
            .enumerate()
            .for_each(|(p, (o, x))| {
                let c = p % channels;
                let (m, s, b) = (mean32[c], scale[c], beta_v[c]);
                match rs {
                    None => o.iter_mut().zip(x).for_each(|(o, &x)| {
                        o.write(activate((x - m) * s + b));
                    }),
                    Some(rs) => {
                        let r = &rs[p * len..p * len + o.len()];
                        o.iter_mut().zip(x).zip(r).for_each(|((o, &x), &r)| {
                            o.write(activate((x - m) * s + b + r));
                        })
                    }
                }
            });
    });
    let shape = x.layout().shape().clone();
    let per_channel = Shape::from(vec![channels]);
    let var32: Vec<f32> = var.iter().map(|&v| v as f32).collect();
    Ok(Forward {
        output: from_flex::<C>(dense(out, shape)),
        mean: from_flex::<C>(dense(mean32, per_channel.clone())),
        var: from_flex::<C>(dense(var32, per_channel)),
    })
}

/// Training backward, from the forward's input, `gamma`, batch mean and variance and the output
/// gradient; with `relu`, the gradient is first masked by the ReLU's output, in the same passes.
/// The operands back, with the reason, as for [`forward`].
pub(crate) fn backward<C: Backend>(
    x: FloatTensor<C>,
    gamma: FloatTensor<C>,
    mean: FloatTensor<C>,
    var: FloatTensor<C>,
    grad: FloatTensor<C>,
    relu: Option<ReluBackward<C>>,
    epsilon: f64,
) -> Result<Backward<C>, RefusedBackward<C>> {
    let keep_gradient = relu.as_ref().is_some_and(|r| r.keep_gradient);
    let relu_output = relu.map(|r| r.output);
    let [x, gamma, mean, var, grad] = match flex_operands::<C, 5>([x, gamma, mean, var, grad]) {
        Ok(operands) => operands,
        Err((why, back)) => return Err((why, back, relu_output)),
    };
    let output = match optional_flex::<C>(relu_output) {
        Ok(output) => output,
        Err(y) => {
            let why = "the ReLU's output is not a burn-flex tensor".to_string();
            return Err((
                why,
                [x, gamma, mean, var, grad].map(from_flex::<C>),
                Some(y),
            ));
        }
    };
    let checked = check(&x, &[&gamma, &mean, &var]).and_then(|planes| {
        let full = |t: &FlexTensor| {
            values(t).is_some_and(|v| v.len() == planes.batch * planes.channels * planes.len)
        };
        if !full(&grad) {
            Err("the output gradient is not a contiguous f32 tensor of the input's shape".into())
        } else if output.as_ref().is_some_and(|y| !full(y)) {
            Err("the ReLU's output is not a contiguous f32 tensor of the input's shape".into())
        } else {
            Ok(planes)
        }
    });
    let planes = match checked {
        Ok(planes) => planes,
        Err(why) => {
            let back = [x, gamma, mean, var, grad].map(from_flex::<C>);
            return Err((why, back, output.map(from_flex::<C>)));
        }
    };
    let (len, channels) = (planes.len, planes.channels);
    let xs = values(&x).expect("checked");
    let (gamma_v, mean_v, var_v) = (
        values(&gamma).expect("checked"),
        values(&mean).expect("checked"),
        values(&var).expect("checked"),
    );
    let shape = x.layout().shape().clone();
    let chunk = len.max(1);
    let unique =
        |t: &FlexTensor| writable(t) && t.layout().contiguous_offsets() == Some((0, xs.len()));
    // The gradient reaching batch norm's output, and its sums, in one pass: `dy`, or after a
    // ReLU `dy` masked by its output (as burn-flex's ReLU backward computes it), written over
    // `dy` where nothing else holds it, else into a buffer of its own, each plane summed as it
    // is written.
    let plane_sums =
        |p: usize, c: usize, dy: &[f32]| gradient_sums(dy, &xs[p * len..(p + 1) * len], mean_v[c]);
    let (grad, sums) = match &output {
        None => {
            let dy = values(&grad).expect("checked");
            let sums = planes.per_channel(|p, c| plane_sums(p, c, &dy[p * len..(p + 1) * len]));
            (grad, sums)
        }
        Some(y) => {
            let ys = values(y).expect("checked");
            let masked = |g: f32, y: f32| if y > 0.0 { g } else { 0.0 };
            if unique(&grad) {
                let mut grad = grad;
                let dy = &mut grad.storage_mut::<f32>()[..xs.len()];
                let sums = planes.per_channel_mut(dy, |p, c, g: &mut [f32]| {
                    let y = &ys[p * len..p * len + g.len()];
                    g.iter_mut().zip(y).for_each(|(g, &y)| *g = masked(*g, y));
                    plane_sums(p, c, g)
                });
                (grad, sums)
            } else {
                let dy = values(&grad).expect("checked");
                let mut sums = Vec::new();
                let out = filled(xs.len(), |out| {
                    sums = planes.per_channel_mut(out, |p, c, o: &mut [MaybeUninit<f32>]| {
                        let range = p * len..p * len + o.len();
                        let (g, y) = (&dy[range.clone()], &ys[range]);
                        o.iter_mut().zip(g).zip(y).for_each(|((o, &g), &y)| {
                            o.write(masked(g, y));
                        });
                        // SAFETY: every value of the plane was written just above.
                        let written = unsafe { &*(o as *const [MaybeUninit<f32>] as *const [f32]) };
                        plane_sums(p, c, written)
                    });
                });
                (dense(out, shape.clone()), sums)
            }
        }
    };
    let dy = values(&grad).expect("checked");
    let count = planes.count().max(1) as f64;
    // dx = a·dy + b·(x - mean) + k per channel, with a = gamma·invstd,
    // b = -a·invstd²·Σ dy·(x - mean) / count and k = -a·Σ dy / count, for the exact batch
    // mean: the f32 mean is off it by `offset` (up to half an ulp: 4e-6 at a mean of 100,
    // which would cost the gradient of gamma ~1e-5 of its value where the spread is ~1).
    let mut coefficients = Vec::with_capacity(channels);
    let (mut grad_gamma, mut grad_beta) = (Vec::with_capacity(channels), Vec::new());
    for c in 0..channels {
        let invstd = 1.0 / (var_v[c] as f64 + epsilon).sqrt();
        let [sum, dot_f32_mean, centred] = sums[c];
        let offset = centred / count;
        let dot = dot_f32_mean - offset * sum;
        let a = gamma_v[c] as f64 * invstd;
        let b = -a * invstd * invstd * dot / count;
        // `dx` centres on the f32 mean: b·(x - mean) = b·(x - mean32) - b·offset.
        coefficients.push((a as f32, b as f32, (-a * sum / count - b * offset) as f32));
        grad_gamma.push((dot * invstd) as f32);
        grad_beta.push(sum as f32);
    }
    // The coefficients of plane `p`'s channel, as a function of the gradient and input.
    let dx = |p: usize| {
        let ((a, b, k), m) = (coefficients[p % channels], mean_v[p % channels]);
        move |g: f32, x: f32| a * g + b * (x - m) + k
    };
    // `dx` is written over the gradient where nothing else holds it (and it is not returned
    // as the residual's), else into a buffer of its own.
    let (input, before_relu) = if unique(&grad) && !keep_gradient {
        let mut grad = grad;
        grad.storage_mut::<f32>()[..xs.len()]
            .par_chunks_mut(chunk)
            .zip(xs.par_chunks(chunk))
            .with_min_len(planes.min_planes())
            .enumerate()
            .for_each(|(p, (g, x))| {
                let dx = dx(p);
                g.iter_mut().zip(x).for_each(|(g, &x)| *g = dx(*g, x))
            });
        (dense_like(grad, shape), None)
    } else {
        let out = filled(xs.len(), |out| {
            out.par_chunks_mut(chunk)
                .zip(dy.par_chunks(chunk).zip(xs.par_chunks(chunk)))
                .with_min_len(planes.min_planes())
                .enumerate()
                .for_each(|(p, (o, (g, x)))| {
                    let dx = dx(p);
                    o.iter_mut().zip(g).zip(x).for_each(|((o, &g), &x)| {
                        o.write(dx(g, x));
                    })
                });
        });
        let kept = keep_gradient.then(|| dense_like(grad, shape.clone()));
        (dense(out, shape), kept)
    };
    let per_channel = Shape::from(vec![channels]);
    Ok(Backward {
        input: from_flex::<C>(input),
        gamma: from_flex::<C>(dense(grad_gamma, per_channel.clone())),
        beta: from_flex::<C>(dense(grad_beta, per_channel)),
        before_relu: before_relu.map(from_flex::<C>),
    })
}

/// `tensor`, its buffer now holding values of `shape` laid out densely from offset 0.
fn dense_like(tensor: FlexTensor, shape: Shape) -> FlexTensor {
    if tensor.layout().shape() == &shape {
        tensor
    } else {
        tensor.with_layout(Layout::contiguous(shape))
    }
}
