//! Fresh burn-flex f32 buffers written across rayon's threads: zeros and concatenation.
//!
//! ResNet's option-A shortcut pads the new channels with zeros and concatenates them with every
//! second pixel of its input (a strided view), and the backward of that slice starts from zeros
//! of the input's shape: a few multi-megabyte buffers a step. burn-flex zeroes and concatenates
//! on one thread, walking a view element by element (and a zeroed allocation is a memset
//! wherever the allocator reuses heap memory rather than mapping fresh pages): on the H200 at
//! batch 128, 1.1 ms a call for zeros and 1.7 ms for a concatenation, 9 ms of an 80 ms ResNet20
//! step (profile of 2026-12-01). Here the same values are written in chunks across the pool, so
//! results are burn-flex's.

use super::elementwise::{dense, filled};
use super::layout::{from_flex, into_flex};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, FloatDType};
use burn_flex::FlexTensor;
use burn_std::Shape;
use core::any::TypeId;
use core::mem::MaybeUninit;
use rayon::prelude::*;

/// Below this many values burn-flex's single-threaded op is left alone.
const PARALLEL_MIN: usize = 1 << 16;

/// Values per rayon task at least.
const CHUNK: usize = 1 << 14;

/// `C`'s `float_zeros`, written across threads for large f32 tensors of burn-flex and
/// burn-ndarray (whose own zeros took 0.23 ms a call for ResNet's `[32, 16, 32, 32]` on the
/// H200, 2026-12-06; the written `Vec` becomes the array's buffer).
pub(crate) fn float_zeros<C: Backend>(
    shape: Shape,
    device: &C::Device,
    dtype: FloatDType,
) -> FloatTensor<C> {
    constant::<C>(shape, dtype, 0.0).unwrap_or_else(|shape| C::float_zeros(shape, device, dtype))
}

/// `C`'s `float_ones`, as [`float_zeros`] (autodiff seeds gradients with them: 0.5 ms a call
/// at batch 128 on burn-ndarray, on one thread).
pub(crate) fn float_ones<C: Backend>(
    shape: Shape,
    device: &C::Device,
    dtype: FloatDType,
) -> FloatTensor<C> {
    constant::<C>(shape, dtype, 1.0).unwrap_or_else(|shape| C::float_ones(shape, device, dtype))
}

/// A large f32 tensor of `value`s written across threads, when `C` is burn-flex or
/// burn-ndarray; the shape back otherwise.
fn constant<C: Backend>(
    shape: Shape,
    dtype: FloatDType,
    value: f32,
) -> Result<FloatTensor<C>, Shape> {
    let n = shape.num_elements();
    let flex = TypeId::of::<FloatTensor<C>>() == TypeId::of::<FlexTensor>();
    if !(flex || super::layout::is_ndarray::<C>())
        || n < PARALLEL_MIN
        || DType::from(dtype) != DType::F32
    {
        return Err(shape);
    }
    let values = filled(n, |out| {
        out.par_chunks_mut(CHUNK).for_each(|chunk| {
            for v in chunk {
                v.write(value);
            }
        })
    });
    Ok(from_flex::<C>(dense(values, shape)))
}

/// `C`'s `float_cat`, copied across threads when every tensor is a burn-flex f32 tensor (dense or
/// a view) and the result is large: each output block (one index of the dimensions before `dim`)
/// takes its part of every input in turn.
pub(crate) fn float_cat<C: Backend>(tensors: Vec<FloatTensor<C>>, dim: usize) -> FloatTensor<C> {
    let mut flex = Vec::with_capacity(tensors.len());
    let mut others = Vec::new();
    for t in tensors {
        match into_flex::<C>(t) {
            Ok(f) if others.is_empty() => flex.push(f),
            Ok(f) => others.push(from_flex::<C>(f)),
            Err(t) => others.push(t),
        }
    }
    if others.is_empty()
        && let Some(out) = cat(&flex, dim)
    {
        return from_flex::<C>(out);
    }
    let mut tensors: Vec<_> = flex.into_iter().map(from_flex::<C>).collect();
    tensors.extend(others);
    C::float_cat(tensors, dim)
}

/// The concatenation, when this module covers the case: two or more f32 tensors of one rank
/// whose dimensions other than `dim` agree, each dense or a view with positive strides (the
/// shortcut's every-second-pixel slice), at least [`PARALLEL_MIN`] values in all, more than one
/// output block. None leaves the case to burn-flex (and its checks).
fn cat(tensors: &[FlexTensor], dim: usize) -> Option<FlexTensor> {
    let first = tensors.first()?.layout().shape().clone();
    let rank = first.num_dims();
    if tensors.len() < 2 || dim >= rank {
        return None;
    }
    let mut parts = Vec::with_capacity(tensors.len());
    let mut cat_len = 0;
    for t in tensors {
        let layout = t.layout();
        let shape = layout.shape();
        let agrees =
            shape.num_dims() == rank && (0..rank).all(|d| d == dim || shape[d] == first[d]);
        if t.dtype() != DType::F32 || !agrees || !layout.has_positive_strides() {
            return None;
        }
        cat_len += shape[dim];
        parts.push(View {
            values: t.storage::<f32>(),
            start: layout.start_offset(),
            shape: shape.to_vec(),
            strides: layout.strides().iter().map(|&s| s as usize).collect(),
        });
    }
    let blocks: usize = first[..dim].iter().product();
    let block_len = cat_len * first[dim + 1..].iter().product::<usize>();
    let n = blocks * block_len;
    if n < PARALLEL_MIN || blocks < 2 || block_len == 0 {
        return None;
    }
    let out = filled(n, |out| {
        // Whole blocks per task, at least CHUNK values.
        let per_task = CHUNK.div_ceil(block_len) * block_len;
        out.par_chunks_mut(per_task)
            .enumerate()
            .for_each(|(task, chunk)| {
                let first_block = task * per_task / block_len;
                for (b, block) in chunk.chunks_mut(block_len).enumerate() {
                    let mut rest = block;
                    for part in &parts {
                        let (this, next) = rest.split_at_mut(part.block_len(dim));
                        part.write_block(first_block + b, dim, this);
                        rest = next;
                    }
                }
            })
    });
    let mut shape = first;
    shape[dim] = cat_len;
    Some(dense(out, shape))
}

/// A part of a concatenation: its buffer and view (positive strides).
struct View<'a> {
    values: &'a [f32],
    start: usize,
    shape: Vec<usize>,
    strides: Vec<usize>,
}

impl View<'_> {
    /// Values of one output block: the view's dimensions from `dim` on.
    fn block_len(&self, dim: usize) -> usize {
        self.shape[dim..].iter().product()
    }

    /// Writes block `block` (an index over the dimensions before `dim`) into `dst`, row-major.
    fn write_block(&self, block: usize, dim: usize, dst: &mut [MaybeUninit<f32>]) {
        let mut offset = self.start;
        let mut rem = block;
        for d in (0..dim).rev() {
            offset += (rem % self.shape[d]) * self.strides[d];
            rem /= self.shape[d];
        }
        let (shape, strides) = (&self.shape[dim..], &self.strides[dim..]);
        let inner = shape.len() - 1;
        let (row_len, step) = (shape[inner], strides[inner]);
        if row_len == 0 {
            return;
        }
        // Rows of the last dimension; the outer coordinates advance like an odometer.
        let mut index = vec![0usize; inner];
        for row in dst.chunks_mut(row_len) {
            if step == 1 {
                let src = &self.values[offset..offset + row_len];
                for (d, s) in row.iter_mut().zip(src) {
                    d.write(*s);
                }
            } else {
                for (j, d) in row.iter_mut().enumerate() {
                    d.write(self.values[offset + j * step]);
                }
            }
            for d in (0..inner).rev() {
                index[d] += 1;
                offset += strides[d];
                if index[d] < shape[d] {
                    break;
                }
                offset -= strides[d] * shape[d];
                index[d] = 0;
            }
        }
    }
}
