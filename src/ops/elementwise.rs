//! burn-flex's f32 add, sub, mul, div (of two tensors and with a scalar), negation, ReLU and
//! ReLU backward across rayon's threads.
//!
//! burn-flex runs these on one thread (SIMD, no rayon), which on a 16-core machine leaves most
//! of the CPU idle through a batch norm's forward and backward: dozens of such ops a layer on
//! `[32, 16, 32, 32]` tensors. Here the same operations run in chunks across rayon's pool, for
//! large contiguous f32 operands of the same shape or a `[rows, k]` operand against a
//! `[rows, 1]` one (the form [`super::broadcast`] gives batch norm's broadcasts). Each element is
//! the same operation on the same values as burn-flex's, so results are bit-identical.

use super::layout::{contiguous, from_flex, into_flex, writable};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, Scalar};
use burn_flex::{FlexTensor, Layout};
use burn_std::{Bytes, Shape};
use core::mem::MaybeUninit;
use rayon::prelude::*;

/// Below this many elements burn-flex's single-threaded op is left alone: splitting would cost
/// more than it saves.
pub(crate) const PARALLEL_MIN: usize = 1 << 16;

/// Elements per rayon task at least.
const CHUNK: usize = 1 << 13;

/// A binary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinaryKind {
    /// `C`'s own op.
    pub(crate) fn on<C: Backend>(self, lhs: FloatTensor<C>, rhs: FloatTensor<C>) -> FloatTensor<C> {
        match self {
            Self::Add => C::float_add(lhs, rhs),
            Self::Sub => C::float_sub(lhs, rhs),
            Self::Mul => C::float_mul(lhs, rhs),
            Self::Div => C::float_div(lhs, rhs),
        }
    }

    /// Whether `a ∘ b` equals `b ∘ a` bit for bit (IEEE add and mul do).
    pub(crate) fn commutative(self) -> bool {
        matches!(self, Self::Add | Self::Mul)
    }
}

/// `lhs ∘ rhs` across threads when `C` is burn-flex and the operands have a form handled here;
/// the operands back otherwise.
#[allow(clippy::type_complexity)]
pub(crate) fn binary<C: Backend>(
    kind: BinaryKind,
    lhs: FloatTensor<C>,
    rhs: FloatTensor<C>,
) -> Result<FloatTensor<C>, (FloatTensor<C>, FloatTensor<C>)> {
    match kind {
        BinaryKind::Add => binary_with::<C>(lhs, rhs, PARALLEL_MIN, |a, b| a + b),
        BinaryKind::Sub => binary_with::<C>(lhs, rhs, PARALLEL_MIN, |a, b| a - b),
        BinaryKind::Mul => binary_with::<C>(lhs, rhs, PARALLEL_MIN, |a, b| a * b),
        BinaryKind::Div => binary_with::<C>(lhs, rhs, PARALLEL_MIN, |a, b| a / b),
    }
}

/// `op(lhs, rhs)` element by element, as [`binary`] does for the four arithmetic ops, for
/// results of at least `min` elements (those below [`PARALLEL_MIN`] on this thread alone).
#[allow(clippy::type_complexity)]
fn binary_with<C: Backend>(
    lhs: FloatTensor<C>,
    rhs: FloatTensor<C>,
    min: usize,
    op: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<FloatTensor<C>, (FloatTensor<C>, FloatTensor<C>)> {
    let (lhs, rhs) = match (into_flex::<C>(lhs), into_flex::<C>(rhs)) {
        (Ok(l), Ok(r)) => (l, r),
        (l, r) => return Err((back::<C>(l), back::<C>(r))),
    };
    run(lhs, rhs, min, op)
        .map(from_flex::<C>)
        .map_err(|(l, r)| (from_flex::<C>(l), from_flex::<C>(r)))
}

/// `op(x)` for each element across threads, when `C` is burn-flex and the tensor is a large
/// contiguous f32 one (in place when its buffer is its own); the tensor back otherwise.
fn unary<C: Backend>(
    tensor: FloatTensor<C>,
    op: impl Fn(f32) -> f32 + Sync,
) -> Result<FloatTensor<C>, FloatTensor<C>> {
    let mut tensor = into_flex::<C>(tensor)?;
    let n = tensor.layout().num_elements();
    let Some((start, end)) = tensor.layout().contiguous_offsets() else {
        return Err(from_flex::<C>(tensor));
    };
    if tensor.dtype() != DType::F32 || n < PARALLEL_MIN {
        return Err(from_flex::<C>(tensor));
    }
    if start == 0 && writable(&tensor) {
        tensor.storage_mut::<f32>()[..n]
            .par_chunks_mut(CHUNK)
            .for_each(|x| x.iter_mut().for_each(|x| *x = op(*x)));
        return Ok(from_flex::<C>(tensor));
    }
    let src = &tensor.storage::<f32>()[start..end];
    let out = filled(n, |out| {
        out.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(o, x)| {
                o.iter_mut().zip(x).for_each(|(o, &x)| {
                    o.write(op(x));
                })
            })
    });
    let shape = tensor.layout().shape().clone();
    Ok(from_flex::<C>(dense(out, shape)))
}

/// Negation (`-x`, as burn-flex computes it).
pub(crate) fn float_neg<C: Backend>(tensor: FloatTensor<C>) -> FloatTensor<C> {
    unary::<C>(contiguous::<C>(tensor), |x| -x).unwrap_or_else(C::float_neg)
}

/// `op(x, s)` for each element, with the scalar as burn-flex takes it (to f64, then to f32):
/// an optimizer's updates scale every parameter and gradient this way.
fn scalar<C: Backend>(
    tensor: FloatTensor<C>,
    rhs: Scalar,
    op: impl Fn(f32, f32) -> f32 + Sync,
    on_c: impl FnOnce(FloatTensor<C>, Scalar) -> FloatTensor<C>,
) -> FloatTensor<C> {
    let s = rhs.elem::<f64>() as f32;
    unary::<C>(tensor, |x| op(x, s)).unwrap_or_else(|t| on_c(t, rhs))
}

/// `x + s`.
pub(crate) fn float_add_scalar<C: Backend>(tensor: FloatTensor<C>, rhs: Scalar) -> FloatTensor<C> {
    scalar::<C>(tensor, rhs, |x, s| x + s, C::float_add_scalar)
}

/// `x - s`.
pub(crate) fn float_sub_scalar<C: Backend>(tensor: FloatTensor<C>, rhs: Scalar) -> FloatTensor<C> {
    scalar::<C>(tensor, rhs, |x, s| x - s, C::float_sub_scalar)
}

/// `x * s`.
pub(crate) fn float_mul_scalar<C: Backend>(tensor: FloatTensor<C>, rhs: Scalar) -> FloatTensor<C> {
    scalar::<C>(tensor, rhs, |x, s| x * s, C::float_mul_scalar)
}

/// `x / s`.
pub(crate) fn float_div_scalar<C: Backend>(tensor: FloatTensor<C>, rhs: Scalar) -> FloatTensor<C> {
    scalar::<C>(tensor, rhs, |x, s| x / s, C::float_div_scalar)
}

/// ReLU (`x.max(0.0)`, as burn-flex computes it: NaN becomes 0).
pub(crate) fn relu<C: Backend>(tensor: FloatTensor<C>) -> FloatTensor<C> {
    unary::<C>(contiguous::<C>(tensor), |x| x.max(0.0)).unwrap_or_else(C::relu)
}

/// ReLU's backward: the gradient where the output is positive, else 0 (as burn-flex computes it).
///
/// On burn-ndarray small operands are taken too, on this thread: its ReLU backward is a
/// comparison, then a mask fill that walks its arrays through dynamic-rank iterators, 0.125 ms
/// for the MNIST net's `[64, 500]` against burn-flex's 0.013 (H100 host, `--profile`), 0.11 ms of
/// the 0.36 ms by which burn-ndarray's step of that net trailed burn-flex's.
pub(crate) fn relu_backward<C: Backend>(
    output: FloatTensor<C>,
    grad: FloatTensor<C>,
) -> FloatTensor<C> {
    let min = if super::layout::is_ndarray::<C>() {
        0
    } else {
        PARALLEL_MIN
    };
    let (output, grad) = (contiguous::<C>(output), contiguous::<C>(grad));
    binary_with::<C>(output, grad, min, |o, g| if o > 0.0 { g } else { 0.0 })
        .unwrap_or_else(|(o, g)| C::relu_backward(o, g))
}

fn back<C: Backend>(tensor: Result<FlexTensor, FloatTensor<C>>) -> FloatTensor<C> {
    match tensor {
        Ok(flex) => from_flex::<C>(flex),
        Err(tensor) => tensor,
    }
}

/// How the two operands line up.
enum Form {
    /// Same shape: element `i` with element `i`.
    Same,
    /// `[rows, k]` against `[rows, 1]`, the column operand on the right (`true`) or left.
    RowScalar { k: usize, column_right: bool },
}

fn form(lhs: &Shape, rhs: &Shape) -> Option<Form> {
    if lhs == rhs {
        return Some(Form::Same);
    }
    if lhs.num_dims() != 2 || rhs.num_dims() != 2 || lhs[0] != rhs[0] {
        return None;
    }
    match (lhs[1], rhs[1]) {
        (k, 1) if k > 1 => Some(Form::RowScalar {
            k,
            column_right: true,
        }),
        (1, k) if k > 1 => Some(Form::RowScalar {
            k,
            column_right: false,
        }),
        _ => None,
    }
}

// The operands come back by value when the form is not handled here; boxing them would cost an
// allocation per op.
#[allow(clippy::result_large_err)]
fn run(
    mut lhs: FlexTensor,
    rhs: FlexTensor,
    min: usize,
    op: impl Fn(f32, f32) -> f32 + Sync,
) -> Result<FlexTensor, (FlexTensor, FlexTensor)> {
    let (ls, rs) = (lhs.layout().shape().clone(), rhs.layout().shape().clone());
    let Some(form) = form(&ls, &rs) else {
        return Err((lhs, rhs));
    };
    let out_shape = match form {
        Form::RowScalar {
            column_right: false,
            ..
        } => rs.clone(),
        _ => ls.clone(),
    };
    let n = out_shape.num_elements();
    let (Some(l_range), Some(r_range)) = (
        lhs.layout().contiguous_offsets(),
        rhs.layout().contiguous_offsets(),
    ) else {
        return Err((lhs, rhs));
    };
    if lhs.dtype() != DType::F32 || rhs.dtype() != DType::F32 || n < min {
        return Err((lhs, rhs));
    }
    // Below the threaded size one chunk covers the whole: rayon runs a single piece on the
    // calling thread, without handing it to the pool.
    let chunk = if n < PARALLEL_MIN { n.max(1) } else { CHUNK };
    match form {
        Form::Same => {
            // In place when an operand's buffer is ours alone (burn-flex: the left one only).
            if l_range.0 == 0 && writable(&lhs) {
                let b = &rhs.storage::<f32>()[r_range.0..r_range.1];
                let a = &mut lhs.storage_mut::<f32>()[..n];
                a.par_chunks_mut(chunk)
                    .zip(b.par_chunks(chunk))
                    .for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, &b)| *a = op(*a, b)));
                return Ok(lhs);
            }
            if r_range.0 == 0 && writable(&rhs) {
                let mut rhs = rhs;
                let a = &lhs.storage::<f32>()[l_range.0..l_range.1];
                let b = &mut rhs.storage_mut::<f32>()[..n];
                b.par_chunks_mut(chunk)
                    .zip(a.par_chunks(chunk))
                    .for_each(|(b, a)| b.iter_mut().zip(a).for_each(|(b, &a)| *b = op(a, *b)));
                return Ok(rhs);
            }
            let a = &lhs.storage::<f32>()[l_range.0..l_range.1];
            let b = &rhs.storage::<f32>()[r_range.0..r_range.1];
            let out = filled(n, |out| {
                out.par_chunks_mut(chunk)
                    .zip(a.par_chunks(chunk).zip(b.par_chunks(chunk)))
                    .for_each(|(o, (a, b))| {
                        let (a, b) = (&a[..o.len()], &b[..o.len()]);
                        for i in 0..o.len() {
                            o[i].write(op(a[i], b[i]));
                        }
                    })
            });
            Ok(dense(out, out_shape))
        }
        Form::RowScalar { k, column_right } => {
            let (full, full_range, column, column_range) = if column_right {
                (&lhs, l_range, &rhs, r_range)
            } else {
                (&rhs, r_range, &lhs, l_range)
            };
            let full = &full.storage::<f32>()[full_range.0..full_range.1];
            let column = &column.storage::<f32>()[column_range.0..column_range.1];
            let rows_per_task = chunk.div_ceil(k);
            let out = filled(n, |out| {
                out.par_chunks_mut(k)
                    .zip(full.par_chunks(k))
                    .zip(column.par_iter())
                    .with_min_len(rows_per_task)
                    .for_each(|((o, row), &c)| {
                        if column_right {
                            o.iter_mut().zip(row).for_each(|(o, &a)| {
                                o.write(op(a, c));
                            });
                        } else {
                            o.iter_mut().zip(row).for_each(|(o, &b)| {
                                o.write(op(c, b));
                            });
                        }
                    })
            });
            Ok(dense(out, out_shape))
        }
    }
}

/// A vector of `n` values, every one written by `fill` (no zeroing pass first: the output of a
/// memory-bound op would otherwise be written twice).
pub(crate) fn filled<T>(n: usize, fill: impl FnOnce(&mut [MaybeUninit<T>])) -> Vec<T> {
    let mut out = Vec::with_capacity(n);
    let slots = &mut out.spare_capacity_mut()[..n];
    fill(slots);
    // SAFETY: `fill` wrote each of the first `n` slots: the chunks it is given cover them all,
    // and every caller writes every element of every chunk.
    unsafe { out.set_len(n) };
    out
}

/// `values` as a dense burn-flex f32 tensor of `shape`.
pub(crate) fn dense(values: Vec<f32>, shape: Shape) -> FlexTensor {
    FlexTensor::new(
        Bytes::from_elems(values),
        Layout::contiguous(shape),
        DType::F32,
    )
}
