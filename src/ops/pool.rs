//! 2D max pooling on burn-flex f32 tensors, plane by plane across rayon's threads.
//!
//! burn-flex pools through its 3D kernel, with bounds checks on every tap in signed arithmetic,
//! and its backward runs on one thread; in the MNIST net's profile on the H200 (16 cores) the
//! `[64, 20, 24, 24]` pooling took 0.84 ms forward and 2.1 ms backward, a third of the CPU
//! time of a step. Here each `(image, channel)` plane is one task; the window's valid rows and
//! columns are found once per output row and column, so the inner loop has no checks.
//!
//! The results are burn-flex's bit for bit: the same scan order (rows, then columns, of the
//! window), the same rule (the first value, then any strictly greater one, so NaN never
//! replaces a number, and a leading NaN stays), the same flat index within the plane (`row · width + column`, i64), `-∞`
//! and index -1 for a window with no valid tap; the backward adds each output's gradient at its
//! index in output order, as burn-flex does.

use super::elementwise::filled;
use super::layout::{flex_into_primitive, primitive_into_flex};
use burn_backend::ops::{MaxPool2dBackward, MaxPool2dWithIndices};
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{Backend, DType};
use burn_flex::{FlexTensor, Layout};
use burn_std::{Bytes, Shape};
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, Ordering};
use rayon::prelude::*;

/// Output values per rayon task at least.
const MIN_TASK: usize = 1 << 12;

/// A pooling window's geometry along one axis.
#[derive(Clone, Copy)]
struct Axis {
    input: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
    output: usize,
}

impl Axis {
    fn new(
        input: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil: bool,
    ) -> Option<Self> {
        if kernel == 0 || stride == 0 || dilation == 0 {
            return None;
        }
        // burn-flex's output size, ceil mode included.
        let span = dilation * (kernel - 1) + 1;
        let padded = input + 2 * padding;
        let output = if padded < span {
            usize::from(ceil)
        } else if ceil {
            (padded - span).div_ceil(stride) + 1
        } else {
            (padded - span) / stride + 1
        };
        Some(Self {
            input,
            kernel,
            stride,
            padding,
            dilation,
            output,
        })
    }

    /// The input positions of output `o`'s window, in order, that lie inside the input.
    fn taps(&self, o: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.kernel).filter_map(move |k| {
            (o * self.stride + k * self.dilation)
                .checked_sub(self.padding)
                .filter(|&i| i < self.input)
        })
    }

    /// Whether the windows are 2 wide at stride 2, with no padding or dilation, each inside the
    /// input (the case the 2x2 loops take).
    fn windows_2x2_inside(&self) -> bool {
        self.kernel == 2
            && self.stride == 2
            && self.padding == 0
            && self.dilation == 1
            && 2 * self.output <= self.input
    }

    /// [`Self::taps`] of every output, flattened, with each output's range in it.
    fn tap_table(&self) -> (Vec<usize>, Vec<(usize, usize)>) {
        let (mut taps, mut ranges) = (Vec::new(), Vec::with_capacity(self.output));
        for o in 0..self.output {
            let start = taps.len();
            taps.extend(self.taps(o));
            ranges.push((start, taps.len()));
        }
        (taps, ranges)
    }
}

/// The geometry of one call: planes and both axes.
struct Geometry {
    planes: usize,
    rows: Axis,
    cols: Axis,
}

impl Geometry {
    fn new(
        shape: &Shape,
        kernel: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil: bool,
    ) -> Option<Self> {
        let dims = shape.as_slice();
        if dims.len() != 4 {
            return None;
        }
        Some(Self {
            planes: dims[0] * dims[1],
            rows: Axis::new(dims[2], kernel[0], stride[0], padding[0], dilation[0], ceil)?,
            cols: Axis::new(dims[3], kernel[1], stride[1], padding[1], dilation[1], ceil)?,
        })
    }

    fn plane_in(&self) -> usize {
        self.rows.input * self.cols.input
    }

    fn plane_out(&self) -> usize {
        self.rows.output * self.cols.output
    }

    fn min_planes(&self) -> usize {
        (MIN_TASK / self.plane_out().max(1)).max(1)
    }
}

/// A contiguous tensor's values of type `E`; None for another dtype or a strided view.
fn values<E: bytemuck::Pod + burn_backend::Element>(
    tensor: &FlexTensor,
    dtype: DType,
) -> Option<&[E]> {
    if tensor.dtype() != dtype {
        return None;
    }
    let (start, end) = tensor.layout().contiguous_offsets()?;
    Some(&tensor.storage::<E>()[start..end])
}

fn dense<E: bytemuck::Pod + burn_backend::Element>(
    values: Vec<E>,
    shape: Vec<usize>,
    dtype: DType,
) -> FlexTensor {
    FlexTensor::new(
        Bytes::from_elems(values),
        Layout::contiguous(Shape::from(shape)),
        dtype,
    )
}

/// Max pooling of a contiguous f32 burn-flex tensor: the output, and the indices when asked for.
fn pool(
    x: &FlexTensor,
    geometry: &Geometry,
    with_indices: bool,
) -> Option<(FlexTensor, Option<FlexTensor>)> {
    let xs = values::<f32>(x, DType::F32)?;
    let (row_taps, row_ranges) = geometry.rows.tap_table();
    let (col_taps, col_ranges) = geometry.cols.tap_table();
    let (plane_in, plane_out, width) = (
        geometry.plane_in(),
        geometry.plane_out(),
        geometry.cols.input,
    );
    // An empty input plane gives no chunks to pair the output planes with, which would leave
    // them unwritten: burn-flex pools it.
    if plane_in == 0 {
        return None;
    }
    let n = geometry.planes * plane_out;
    let index_chunk = if with_indices { plane_out } else { 0 };
    let pool_any_plane = |plane: &[f32],
                          out: &mut [MaybeUninit<f32>],
                          mut index: Option<&mut [MaybeUninit<i64>]>| {
        for (oh, &(r0, r1)) in row_ranges.iter().enumerate() {
            for (ow, &(c0, c1)) in col_ranges.iter().enumerate() {
                let (rows, cols) = (&row_taps[r0..r1], &col_taps[c0..c1]);
                // The first tap, then selects rather than branches (random data would make
                // the comparison unpredictable).
                let (mut best, mut at) = match (rows.first(), cols.first()) {
                    (Some(&ih), Some(&iw)) => (plane[ih * width + iw], (ih * width + iw) as i64),
                    _ => (f32::NEG_INFINITY, -1),
                };
                for &ih in rows {
                    let row = &plane[ih * width..(ih + 1) * width];
                    for &iw in cols {
                        let v = row[iw];
                        let better = v > best;
                        best = if better { v } else { best };
                        at = if better { (ih * width + iw) as i64 } else { at };
                    }
                }
                let o = oh * geometry.cols.output + ow;
                out[o].write(best);
                if let Some(index) = index.as_deref_mut() {
                    index[o].write(at);
                }
            }
        }
    };
    // 2x2 windows at stride 2 inside the input (the common pooling): the four taps read
    // straight from two rows, in the same order and by the same rule, with no tap tables.
    let two_by_two = geometry.rows.windows_2x2_inside() && geometry.cols.windows_2x2_inside();
    let pool_plane_2x2 = |plane: &[f32],
                          out: &mut [MaybeUninit<f32>],
                          mut index: Option<&mut [MaybeUninit<i64>]>| {
        let cols = geometry.cols.output;
        for oh in 0..geometry.rows.output {
            let top = &plane[2 * oh * width..][..2 * cols];
            let bottom = &plane[(2 * oh + 1) * width..][..2 * cols];
            let row_start = (2 * oh * width) as i64;
            let out_row = &mut out[oh * cols..][..cols];
            let mut index_row = index.as_deref_mut().map(|i| &mut i[oh * cols..][..cols]);
            let windows = top.chunks_exact(2).zip(bottom.chunks_exact(2));
            for (ow, (t, b)) in windows.enumerate() {
                let (mut best, mut at) = (t[0], 0i64);
                for (v, offset) in [(t[1], 1), (b[0], width as i64), (b[1], width as i64 + 1)] {
                    let better = v > best;
                    best = if better { v } else { best };
                    at = if better { offset } else { at };
                }
                out_row[ow].write(best);
                if let Some(index_row) = index_row.as_deref_mut() {
                    index_row[ow].write(row_start + 2 * ow as i64 + at);
                }
            }
        }
    };
    let pool_plane =
        |plane: &[f32], out: &mut [MaybeUninit<f32>], index: Option<&mut [MaybeUninit<i64>]>| {
            if two_by_two {
                pool_plane_2x2(plane, out, index)
            } else {
                pool_any_plane(plane, out, index)
            }
        };
    // Both outputs are written plane by plane across the threads, every element once (no
    // zeroing pass on one thread first).
    let mut indices = Vec::new();
    let out = filled(n, |out| {
        if with_indices {
            indices = filled(n, |indices| {
                out.par_chunks_mut(plane_out.max(1))
                    .zip(indices.par_chunks_mut(index_chunk.max(1)))
                    .zip(xs.par_chunks(plane_in.max(1)))
                    .with_min_len(geometry.min_planes())
                    .for_each(|((o, i), p)| pool_plane(p, o, Some(i)));
            });
        } else {
            out.par_chunks_mut(plane_out.max(1))
                .zip(xs.par_chunks(plane_in.max(1)))
                .with_min_len(geometry.min_planes())
                .for_each(|(o, p)| pool_plane(p, o, None));
        }
    });
    let dims = x.layout().shape().as_slice();
    let shape = vec![dims[0], dims[1], geometry.rows.output, geometry.cols.output];
    let indices = with_indices.then(|| dense(indices, shape.clone(), DType::I64));
    Some((dense(out, shape, DType::F32), indices))
}

/// `slots` with every value set to zero, as initialised values.
fn zeroed(slots: &mut [MaybeUninit<f32>]) -> &mut [f32] {
    slots.fill(MaybeUninit::new(0.0));
    // SAFETY: every slot was written just above, and `MaybeUninit<f32>` has `f32`'s layout.
    unsafe { &mut *(slots as *mut [MaybeUninit<f32>] as *mut [f32]) }
}

/// Pooling parameters as Burn passes them: kernel, stride, padding, dilation, ceil mode.
type Params = ([usize; 2], [usize; 2], [usize; 2], [usize; 2], bool);

/// [`pool`] of `x` when `C` is burn-flex and `x` a contiguous f32 tensor; `x` back otherwise.
#[allow(clippy::type_complexity)]
fn pooled<C: Backend>(
    x: FloatTensor<C>,
    (kernel, stride, padding, dilation, ceil): Params,
    with_indices: bool,
) -> Result<(FlexTensor, Option<FlexTensor>), FloatTensor<C>> {
    let x = primitive_into_flex::<FloatTensor<C>>(x)?;
    Geometry::new(x.layout().shape(), kernel, stride, padding, dilation, ceil)
        .and_then(|g| pool(&x, &g, with_indices))
        .ok_or_else(|| flex_into_primitive(x))
}

/// `C`'s `max_pool2d`, plane-parallel when `C` is burn-flex and `x` a contiguous f32 tensor.
pub(crate) fn max_pool2d<C: Backend>(
    x: FloatTensor<C>,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil: bool,
) -> FloatTensor<C> {
    match pooled::<C>(x, (kernel, stride, padding, dilation, ceil), false) {
        Ok((out, _)) => flex_into_primitive(out),
        Err(x) => C::max_pool2d(x, kernel, stride, padding, dilation, ceil),
    }
}

/// `C`'s `max_pool2d_with_indices`, plane-parallel as [`max_pool2d`].
pub(crate) fn max_pool2d_with_indices<C: Backend>(
    x: FloatTensor<C>,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil: bool,
) -> MaxPool2dWithIndices<C> {
    match pooled::<C>(x, (kernel, stride, padding, dilation, ceil), true) {
        Ok((output, Some(indices))) => MaxPool2dWithIndices {
            output: flex_into_primitive(output),
            indices: flex_into_primitive(indices),
        },
        Ok(_) => unreachable!("pool returns indices when asked for them"),
        Err(x) => C::max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil),
    }
}

/// `C`'s `max_pool2d_with_indices_backward`, plane-parallel when `C` is burn-flex and the
/// gradient and indices are contiguous f32 and i64 tensors.
#[allow(clippy::too_many_arguments)]
pub(crate) fn max_pool2d_with_indices_backward<C: Backend>(
    x: FloatTensor<C>,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil: bool,
    output_grad: FloatTensor<C>,
    indices: IntTensor<C>,
) -> MaxPool2dBackward<C> {
    let fallback = |x, grad, indices| {
        C::max_pool2d_with_indices_backward(
            x, kernel, stride, padding, dilation, ceil, grad, indices,
        )
    };
    let (grad, index) = match (
        primitive_into_flex::<FloatTensor<C>>(output_grad),
        primitive_into_flex::<IntTensor<C>>(indices),
    ) {
        (Ok(g), Ok(i)) => (g, i),
        (g, i) => {
            let g = g.map_or_else(|g| g, flex_into_primitive);
            let i = i.map_or_else(|i| i, flex_into_primitive);
            return fallback(x, g, i);
        }
    };
    let x_shape = burn_backend::TensorMetadata::shape(&x);
    let dims = x_shape.as_slice().to_vec();
    let ok = dims.len() == 4
        && grad.layout().shape() == index.layout().shape()
        && grad.layout().num_dims() == 4
        && grad.layout().shape()[0] * grad.layout().shape()[1] == dims[0] * dims[1];
    let (Some(dy), Some(at), true) = (
        values::<f32>(&grad, DType::F32),
        values::<i64>(&index, DType::I64),
        ok,
    ) else {
        return fallback(x, flex_into_primitive(grad), flex_into_primitive(index));
    };
    let plane_in = dims[2] * dims[3];
    let plane_out = grad.layout().shape()[2] * grad.layout().shape()[3];
    let planes = dims[0] * dims[1];
    // Each plane is zeroed and its gradients added by one task, in output order (a zeroed
    // allocation would be cleared on one thread first); with no outputs, no task runs and
    // nothing is added. An index past its plane (not one pooling writes) is noted by its task,
    // and the call is then burn-flex's. A pass that wrote each 2x2 window's four values at once,
    // with selects instead of the scatter, took 2.8 ms per `[64, 20, 24, 24]` call on one thread
    // against 0.13–0.33 ms for this (a standalone loop benchmark on 2 cores, 2026-12-07).
    let out_of_plane = AtomicBool::new(false);
    let out = if plane_out == 0 {
        vec![0f32; planes * plane_in]
    } else {
        filled(planes * plane_in, |out| {
            out.par_chunks_mut(plane_in.max(1))
                .zip(
                    dy.par_chunks(plane_out.max(1))
                        .zip(at.par_chunks(plane_out.max(1))),
                )
                .with_min_len((MIN_TASK / plane_in.max(1)).max(1))
                .for_each(|(o, (g, i))| {
                    let o = zeroed(o);
                    for (&g, &i) in g.iter().zip(i) {
                        if i >= 0 {
                            match o.get_mut(i as usize) {
                                Some(slot) => *slot += g,
                                None => out_of_plane.store(true, Ordering::Relaxed),
                            }
                        }
                    }
                });
        })
    };
    if out_of_plane.into_inner() {
        return fallback(x, flex_into_primitive(grad), flex_into_primitive(index));
    }
    MaxPool2dBackward {
        x_grad: flex_into_primitive(dense(out, dims, DType::F32)),
    }
}
