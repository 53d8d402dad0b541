//! Strided operands made contiguous before burn-flex sees them.
//!
//! A batch norm's backward hands burn-flex permuted views: the gradient of its
//! `swap_dims(0, 1)`, `[32, 16, 32, 32]` with dims 0 and 1 exchanged. burn-flex's binary ops
//! and its contiguous copy walk such a view one element at a time (profile of a ResNet20 step on
//! 2 cores: a product with one 8.8 ms, a reshape's copy 5 ms, against 0.34 ms for a contiguous
//! product), and those calls were three quarters of the step's CPU time. The view is a run of
//! contiguous blocks (there `H·W` = 1 024 values each), so it is copied here block by block, in
//! parallel, at about the cost of a memcpy; burn-flex then takes its contiguous fast paths.
//! Copies move values unchanged, so results stay bit-identical.

use super::ndarray_bridge::{flex_into_ndarray, ndarray_into_flex};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType};
use burn_flex::{FlexTensor, Layout};
use burn_ndarray::NdArrayTensor;
use burn_std::{Bytes, Shape, bf16, f16};
use core::any::{Any, TypeId};
use core::mem::MaybeUninit;
use rayon::prelude::*;

/// Blocks shorter than this stay with burn-flex: a copy per block of a few values would not beat
/// its element walk by much, and its 2D transposes are tiled already.
const MIN_BLOCK: usize = 32;

/// `tensor` as burn-flex's tensor, when `C` is burn-flex or burn-ndarray (see
/// [`ndarray_bridge`](super::ndarray_bridge)); given back unchanged otherwise.
pub(crate) fn into_flex<C: Backend>(tensor: FloatTensor<C>) -> Result<FlexTensor, FloatTensor<C>> {
    primitive_into_flex(tensor)
}

/// The inverse of [`into_flex`]: `C` must be burn-flex or burn-ndarray.
pub(crate) fn from_flex<C: Backend>(tensor: FlexTensor) -> FloatTensor<C> {
    flex_into_primitive(tensor)
}

/// `value` as a `U` when `T` is `U` (a move, checked at run time); given back otherwise. The
/// backends' tensor types are only known as type parameters here, so their concrete forms are
/// reached through this.
fn cast_owned<T: 'static, U: 'static>(value: T) -> Result<U, T> {
    let mut slot = Some(value);
    match (&mut slot as &mut dyn Any).downcast_mut::<Option<U>>() {
        Some(cast) => Ok(cast.take().expect("the slot was just filled")),
        None => Err(slot.expect("the slot is untouched when the cast fails")),
    }
}

/// Any primitive (float, int or bool) as burn-flex's tensor, when it is one or a burn-ndarray
/// tensor the bridge takes; given back unchanged otherwise.
pub(crate) fn primitive_into_flex<T: 'static>(tensor: T) -> Result<FlexTensor, T> {
    let tensor = match cast_owned::<T, FlexTensor>(tensor) {
        Ok(flex) => return Ok(flex),
        Err(tensor) => tensor,
    };
    let nd = cast_owned::<T, NdArrayTensor>(tensor)?;
    ndarray_into_flex(nd)
        .map_err(|nd| cast_owned(nd).unwrap_or_else(|_| panic!("T is burn-ndarray's tensor")))
}

/// The inverse of [`primitive_into_flex`]: `T` must be burn-flex's or burn-ndarray's tensor.
pub(crate) fn flex_into_primitive<T: 'static>(tensor: FlexTensor) -> T {
    let flex = match cast_owned::<FlexTensor, T>(tensor) {
        Ok(t) => return t,
        Err(flex) => flex,
    };
    cast_owned::<NdArrayTensor, T>(flex_into_ndarray(flex)).unwrap_or_else(|_| {
        panic!("only called where the primitive is burn-flex's or burn-ndarray's tensor")
    })
}

/// `data` (an offloaded op's result) as `C`'s float tensor. On burn-ndarray: where the data's
/// buffer is a `Vec` of its values, an array that owns it; else (memory an accelerator's result
/// was read into) a tensor borrowing that memory without a copy (see
/// [`read_back`](super::ndarray_bridge::read_back)). `Hetero`'s CPU ops read it in place,
/// burn-ndarray's own ops copy it before using it, and `held` holds it like an array where it
/// is the next conv's operand.
pub(crate) fn float_from_data<C: Backend>(
    data: burn_backend::TensorData,
    device: &C::Device,
) -> FloatTensor<C> {
    let owned = matches!(data.dtype, DType::F32 | DType::F64);
    if owned && is_ndarray::<C>() {
        let data = match super::ndarray_bridge::read_back(data) {
            Ok(borrowed) => return from_ndarray::<C>(borrowed),
            Err(data) => data,
        };
        let layout = Layout::contiguous(data.shape);
        return flex_into_primitive(FlexTensor::new(data.bytes, layout, data.dtype));
    }
    C::float_from_data(data, device)
}

/// `data` (an offloaded op's result read after the op returned, whose bytes wait for the read on
/// first access) as `C`'s float tensor without waiting for it: on burn-ndarray through
/// [`pending`](super::ndarray_bridge::pending), elsewhere as [`float_from_data`].
pub(crate) fn pending_from_data<C: Backend>(
    data: burn_backend::TensorData,
    device: &C::Device,
) -> FloatTensor<C> {
    if is_ndarray::<C>() {
        match super::ndarray_bridge::pending(data) {
            Ok(tensor) => return from_ndarray::<C>(tensor),
            Err(data) => return float_from_data::<C>(data, device),
        }
    }
    float_from_data::<C>(data, device)
}

/// Whether `C` is burn-flex itself: the ops that stay burn-ndarray's own on `Hetero<NdArray, _>`
/// (where the conformance suite holds it to burn-ndarray's bits) check this, not [`into_flex`].
pub(crate) fn is_flex<C: Backend>() -> bool {
    TypeId::of::<C>() == TypeId::of::<burn_flex::Flex>()
}

/// Whether `C`'s float tensor is burn-ndarray's (the bridge hands its arrays to burn-flex code).
pub(crate) fn is_ndarray<C: Backend>() -> bool {
    TypeId::of::<FloatTensor<C>>() == TypeId::of::<NdArrayTensor>()
}

/// Whether an op may write into `tensor`'s buffer: nothing else holds it, and it is not a lent
/// burn-ndarray array (whose first write copies it, single-threaded, before the op's pass).
pub(crate) fn writable(tensor: &FlexTensor) -> bool {
    tensor.is_unique() && !super::ndarray_bridge::is_lent(tensor)
}

/// `tensor` contiguous when `C` is burn-flex and it is a strided view this module copies fast;
/// unchanged otherwise.
pub(crate) fn contiguous<C: Backend>(tensor: FloatTensor<C>) -> FloatTensor<C> {
    // burn-ndarray's arrays: the bridge copies a strided one dense as an op takes it, and a
    // dense one would only be handed over and back here.
    if !is_flex::<C>() {
        return tensor;
    }
    match into_flex::<C>(tensor) {
        Ok(flex) => match block_copy(&flex) {
            Some(copy) => from_flex::<C>(copy),
            None => from_flex::<C>(flex),
        },
        Err(tensor) => tensor,
    }
}

/// `C`'s reshape, with a strided burn-flex view first copied here (burn-flex's reshape copies
/// every non-contiguous view, through its element walk for most); a dense burn-ndarray array
/// reshaped without copying its values (burn-ndarray's own reshape copies every array).
pub(crate) fn float_reshape<C: Backend>(tensor: FloatTensor<C>, shape: Shape) -> FloatTensor<C> {
    let tensor = match into_ndarray::<C>(tensor) {
        Ok(array) => match super::ndarray_bridge::reshape_shared(array, &shape) {
            Ok(reshaped) => return from_ndarray::<C>(reshaped),
            Err(array) => from_ndarray::<C>(array),
        },
        Err(tensor) => tensor,
    };
    C::float_reshape(contiguous::<C>(tensor), shape)
}

/// `tensor` as burn-ndarray's tensor when `C` is burn-ndarray; given back unchanged otherwise.
pub(crate) fn into_ndarray<C: Backend>(
    tensor: FloatTensor<C>,
) -> Result<NdArrayTensor, FloatTensor<C>> {
    cast_owned(tensor)
}

/// The inverse of [`into_ndarray`]: `C` must be burn-ndarray.
pub(crate) fn from_ndarray<C: Backend>(tensor: NdArrayTensor) -> FloatTensor<C> {
    cast_owned::<NdArrayTensor, FloatTensor<C>>(tensor)
        .unwrap_or_else(|_| panic!("only called where C's float tensor is burn-ndarray's"))
}

/// A contiguous copy of `tensor` when it is a positive-strided view made of contiguous blocks of
/// at least [`MIN_BLOCK`] values; None when it is contiguous already or not such a view.
pub(crate) fn block_copy(tensor: &FlexTensor) -> Option<FlexTensor> {
    let layout = tensor.layout();
    if layout.is_contiguous() || !layout.has_positive_strides() {
        return None;
    }
    match tensor.dtype() {
        DType::F32 => copy_blocks::<f32>(tensor, layout),
        DType::F64 => copy_blocks::<f64>(tensor, layout),
        DType::F16 => copy_blocks::<f16>(tensor, layout),
        DType::BF16 => copy_blocks::<bf16>(tensor, layout),
        _ => None,
    }
}

fn copy_blocks<E: bytemuck::Pod + burn_backend::Element + Send + Sync>(
    tensor: &FlexTensor,
    layout: &Layout,
) -> Option<FlexTensor> {
    let shape = layout.shape();
    let strides = layout.strides();
    // The innermost dims whose strides are those of a dense block (size-1 dims fit any stride).
    let mut block = 1usize;
    for d in (0..shape.num_dims()).rev() {
        if shape[d] != 1 && strides[d] != block as isize {
            break;
        }
        block *= shape[d];
    }
    if block < MIN_BLOCK || layout.num_elements() == 0 {
        return None;
    }
    let values = flex_strided_values::<E>(tensor);
    Some(FlexTensor::new(
        Bytes::from_elems(values),
        Layout::contiguous(shape.clone()),
        tensor.dtype(),
    ))
}

/// The values of a burn-flex tensor of element `E` in row-major order, through its layout's
/// strides (see [`strided_values`]).
pub(crate) fn flex_strided_values<E: bytemuck::Pod + burn_backend::Element + Send + Sync>(
    tensor: &FlexTensor,
) -> Vec<E> {
    let layout = tensor.layout();
    let storage: &[E] = tensor.storage();
    // SAFETY: a tensor's layout addresses values inside its storage only: each multi-index
    // below its shape, times its strides, from its start offset.
    unsafe {
        strided_values(
            storage.as_ptr().add(layout.start_offset()),
            layout.shape().as_slice(),
            layout.strides(),
        )
    }
}

/// Below this many values a copy stays on one thread.
pub(crate) const PARALLEL_COPY_MIN: usize = 1 << 16;

/// Values per rayon task of a copy at least.
const COPY_CHUNK: usize = 1 << 14;

/// Leading blocks a strided copy is cut into at least (when the shape has that many), so that
/// every thread of a 16-core pool gets a few.
const COPY_BLOCKS: usize = 64;

/// `values` in a new `Vec`, copied across rayon's threads when there are many: a single-threaded
/// copy of a 2 MB read-back result took about 0.3 ms on the H200's host, a memory-bound pass
/// that more threads share.
pub(crate) fn copied<E: Copy + Send + Sync>(values: &[E]) -> Vec<E> {
    if values.len() < PARALLEL_COPY_MIN {
        return values.to_vec();
    }
    super::elementwise::filled(values.len(), |out| {
        out.par_chunks_mut(COPY_CHUNK)
            .zip(values.par_chunks(COPY_CHUNK))
            .for_each(|(out, values)| {
                for (o, &v) in out.iter_mut().zip(values) {
                    o.write(v);
                }
            })
    })
}

/// The values at `base` + multi-index · `strides` over `shape`, in row-major order, copied
/// across rayon's threads when there are many: a task per block of the leading dims, each
/// walking its block's strides with loops of its own (ndarray's iterator over a dynamic-rank
/// strided view costs tens of nanoseconds a value: 1.4 ms for ResNet's every-second-pixel slice
/// at batch 128 on 16 cores), runs of the innermost dim at stride 1 copied whole.
///
/// # Safety
///
/// Every such address must be a readable, initialised `E` for the duration of the call.
pub(crate) unsafe fn strided_values<E: Copy + Send + Sync>(
    base: *const E,
    shape: &[usize],
    strides: &[isize],
) -> Vec<E> {
    let n: usize = shape.iter().product();
    if n == 0 {
        return Vec::new();
    }
    let (mut lead, mut blocks) = (0, 1);
    if n >= PARALLEL_COPY_MIN {
        while lead + 1 < shape.len() && blocks < COPY_BLOCKS {
            blocks *= shape[lead];
            lead += 1;
        }
    }
    let block = n / blocks;
    let base = SendPtr(base);
    super::elementwise::filled(n, |out| {
        let run = |(index, out): (usize, &mut [MaybeUninit<E>])| {
            // The block's first value: `index` spelled out over the leading dims.
            let (mut rest, mut offset) = (index, 0isize);
            for d in (0..lead).rev() {
                offset += (rest % shape[d]) as isize * strides[d];
                rest /= shape[d];
            }
            // SAFETY: `offset` and every offset `gather` adds stay inside the view (indices
            // below its shape times its strides): the caller's contract.
            unsafe {
                gather(
                    base.get().offset(offset),
                    &shape[lead..],
                    &strides[lead..],
                    out,
                )
            };
        };
        if blocks == 1 {
            run((0, out));
        } else {
            out.par_chunks_mut(block)
                .with_min_len(COPY_CHUNK.div_ceil(block))
                .enumerate()
                .for_each(run);
        }
    })
}

/// A view's first value, shared by the tasks that read disjoint blocks of it.
#[derive(Clone, Copy)]
struct SendPtr<E>(*const E);
// SAFETY: the tasks only read through it, while the view it came from is borrowed.
unsafe impl<E: Sync> Send for SendPtr<E> {}
unsafe impl<E: Sync> Sync for SendPtr<E> {}

impl<E> SendPtr<E> {
    /// The address (a method, so that closures capture the whole `Send` wrapper).
    fn get(self) -> *const E {
        self.0
    }
}

/// Writes the values at `src` + multi-index · `strides` over `shape`, in row-major order, into
/// `out` (as many slots as `shape` has values).
///
/// # Safety
///
/// Every such address must be a readable, initialised `E`.
unsafe fn gather<E: Copy>(
    src: *const E,
    shape: &[usize],
    strides: &[isize],
    out: &mut [MaybeUninit<E>],
) {
    match shape {
        [] => {
            // SAFETY: the caller's contract.
            out[0].write(unsafe { *src });
        }
        [len] if strides[0] == 1 => {
            // SAFETY: the `len` values from `src` on are the caller's contract; `out` has room
            // for them, and `MaybeUninit<E>` has `E`'s layout.
            unsafe {
                core::ptr::copy_nonoverlapping(src, out.as_mut_ptr().cast::<E>(), *len);
            }
        }
        [len] => {
            let stride = strides[0];
            for (i, o) in out[..*len].iter_mut().enumerate() {
                // SAFETY: index `i` is below the dim's length.
                o.write(unsafe { *src.offset(i as isize * stride) });
            }
        }
        [len, inner @ ..] => {
            let size = out.len() / len.max(&1);
            for (i, o) in out.chunks_mut(size.max(1)).take(*len).enumerate() {
                // SAFETY: index `i` is below the dim's length; the rest is the caller's contract.
                unsafe { gather(src.offset(i as isize * strides[0]), inner, &strides[1..], o) };
            }
        }
    }
}
