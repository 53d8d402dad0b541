//! burn-ndarray's tensors handed to the burn-flex code of `Hetero`'s CPU ops and uploads, and
//! back, without copying their values where it can be helped.
//!
//! `Hetero`'s own CPU ops (batch norm, ReLU and the binary ops across threads, pooling, zeros
//! and concatenation, slice assignment, SGD) and its staged uploads work on burn-flex tensors.
//! With burn-ndarray as the CPU backend (`Hetero<NdArray, _>`, the default), each op's operands
//! become burn-flex tensors here and its results burn-ndarray tensors again:
//!
//! - an array held by nothing else hands its buffer over: the `Vec` under the array becomes the
//!   burn-flex buffer, and a result's `Vec` becomes the array of the result;
//! - an array held elsewhere too (autodiff keeps most activations) is lent: the burn-flex buffer
//!   reads the array's memory, and a write (an op working in place) first copies it, so that the
//!   other holders never see a change; a copy made that way goes back as the result's buffer;
//! - a lent buffer given back unwritten (an op that declined its operands) becomes the array it
//!   was lent from again: lent arrays are listed by the address of their values while lent.
//!
//! An array in another layout (a permuted or broadcast view: autodiff's gradients of broadcasts
//! are such views) is first copied into standard (row-major, dense) layout, one pass, so that
//! the fused passes take it rather than leaving the whole op to burn-ndarray op by op. Values
//! are moved or copied, never converted, so every result is the bits the burn-flex path
//! computes.

use burn_backend::DType;
use burn_flex::{FlexTensor, Layout};
use burn_ndarray::NdArrayTensor;
use burn_std::{AllocationController, AllocationProperty, Bytes, Shape};
use core::mem::MaybeUninit;
use core::ptr::NonNull;
use ndarray::{ArcArray, IxDyn};
use std::sync::Mutex;

/// `tensor` as a burn-flex tensor of the same dtype and shape; given back when it is not a
/// numeric array.
pub(crate) fn ndarray_into_flex(tensor: NdArrayTensor) -> Result<FlexTensor, NdArrayTensor> {
    macro_rules! hand_over {
        ($storage:expr, $dtype:expr) => {
            // A borrowed storage (read from a file or a deferred result) is copied once here
            // into an array of its own, as burn-ndarray's own ops would on each use.
            Ok(array_into_flex($storage.into_shared(), $dtype))
        };
    }
    match tensor {
        NdArrayTensor::F32(s) => hand_over!(s, DType::F32),
        NdArrayTensor::F64(s) => hand_over!(s, DType::F64),
        NdArrayTensor::I64(s) => hand_over!(s, DType::I64),
        NdArrayTensor::I32(s) => hand_over!(s, DType::I32),
        NdArrayTensor::I16(s) => hand_over!(s, DType::I16),
        NdArrayTensor::I8(s) => hand_over!(s, DType::I8),
        NdArrayTensor::U64(s) => hand_over!(s, DType::U64),
        NdArrayTensor::U32(s) => hand_over!(s, DType::U32),
        NdArrayTensor::U16(s) => hand_over!(s, DType::U16),
        NdArrayTensor::U8(s) => hand_over!(s, DType::U8),
        other => Err(other),
    }
}

/// The inverse of [`ndarray_into_flex`]: `tensor` as a burn-ndarray tensor owning its values.
///
/// # Panics
///
/// On a dtype burn-ndarray's tensor has no variant for (half precision, quantized, bool): the
/// ops that use this make results only in the dtypes of their operands.
pub(crate) fn flex_into_ndarray(tensor: FlexTensor) -> NdArrayTensor {
    if let Some(array) = lent_array(&tensor) {
        return array;
    }
    match tensor.dtype() {
        DType::F32 => flex_into_array::<f32>(tensor).into(),
        DType::F64 => flex_into_array::<f64>(tensor).into(),
        DType::I64 => flex_into_array::<i64>(tensor).into(),
        DType::I32 => flex_into_array::<i32>(tensor).into(),
        DType::I16 => flex_into_array::<i16>(tensor).into(),
        DType::I8 => flex_into_array::<i8>(tensor).into(),
        DType::U64 => flex_into_array::<u64>(tensor).into(),
        DType::U32 => flex_into_array::<u32>(tensor).into(),
        DType::U16 => flex_into_array::<u16>(tensor).into(),
        DType::U8 => flex_into_array::<u8>(tensor).into(),
        other => panic!("a burn-flex result of dtype {other:?} has no burn-ndarray form"),
    }
}

/// An array as a contiguous burn-flex tensor: its buffer when nothing else holds it, else lent
/// (see [`Lent`]); a dense copy first when it is not in standard layout.
fn array_into_flex<E: bytemuck::Pod + Send + Sync>(
    array: ArcArray<E, IxDyn>,
    dtype: DType,
) -> FlexTensor
where
    NdArrayTensor: From<ArcArray<E, IxDyn>>,
{
    let array = if array.is_standard_layout() {
        array
    } else {
        array.as_standard_layout().into_owned().into_shared()
    };
    let shape = Shape::from(array.shape().to_vec());
    let len = array.len();
    let bytes = if array.is_unique() {
        let (values, offset) = array.into_owned().into_raw_vec_and_offset();
        match offset.unwrap_or(0) {
            0 if values.len() == len => Bytes::from_elems(values),
            // A slice of a larger buffer: only its part goes over.
            start => Bytes::from_elems(values[start..start + len].to_vec()),
        }
    } else {
        let byte_len = core::mem::size_of_val(
            array
                .as_slice_memory_order()
                .expect("a standard-layout array is one slice"),
        );
        lend(&array);
        // SAFETY: the controller's memory is the array's values, `byte_len` bytes, all
        // initialised.
        unsafe { Bytes::from_controller(Box::new(Lent::Shared(array)), byte_len) }
    };
    FlexTensor::new(bytes, Layout::contiguous(shape), dtype)
}

/// A burn-flex tensor of element `E` as an array owning its values: the buffer itself when it
/// is a whole, unshared `Vec` of `E` (a fresh result, or a lent buffer copied on write), else a
/// copy of the tensor's values in order.
fn flex_into_array<E: burn_backend::Element + bytemuck::Pod>(
    tensor: FlexTensor,
) -> ArcArray<E, IxDyn> {
    let shape = tensor.layout().shape().to_vec();
    let len = tensor.layout().num_elements();
    let whole = tensor.layout().contiguous_offsets() == Some((0, len))
        && tensor.bytes().len() == len * size_of::<E>()
        && tensor.is_unique();
    let values: Vec<E> = if whole {
        match tensor.into_data().bytes.try_into_vec::<E>() {
            Ok(values) => values,
            Err(bytes) => bytemuck::pod_collect_to_vec(&bytes),
        }
    } else {
        match tensor.layout().contiguous_offsets() {
            Some((start, end)) => tensor.storage::<E>()[start..end].to_vec(),
            None => {
                let dense = tensor.to_contiguous();
                let (start, end) = dense
                    .layout()
                    .contiguous_offsets()
                    .expect("a contiguous copy has contiguous offsets");
                dense.storage::<E>()[start..end].to_vec()
            }
        }
    };
    ArcArray::from_shape_vec(IxDyn(&shape), values).expect("the values fill the shape")
}

/// An array lent out: the address and byte length of its values, the array, and how many
/// burn-flex buffers read it.
struct Lending {
    address: usize,
    bytes: usize,
    array: NdArrayTensor,
    buffers: usize,
}

/// The arrays lent out now (a few at a time: an op's operands, while the op runs).
static LENDINGS: Mutex<Vec<Lending>> = Mutex::new(Vec::new());

fn address_of<E>(array: &ArcArray<E, IxDyn>) -> (usize, usize) {
    (array.as_ptr() as usize, array.len() * size_of::<E>())
}

/// Lists `array` as lent, for one more burn-flex buffer.
fn lend<E: bytemuck::Pod + Send + Sync>(array: &ArcArray<E, IxDyn>)
where
    NdArrayTensor: From<ArcArray<E, IxDyn>>,
{
    let (address, bytes) = address_of(array);
    let mut lendings = LENDINGS.lock().unwrap_or_else(|e| e.into_inner());
    match lendings
        .iter_mut()
        .find(|l| l.address == address && l.bytes == bytes)
    {
        Some(lending) => lending.buffers += 1,
        None => lendings.push(Lending {
            address,
            bytes,
            array: NdArrayTensor::from(array.clone()),
            buffers: 1,
        }),
    }
}

/// One burn-flex buffer fewer reads `array` (dropped, or copied on write).
fn return_lent<E>(array: &ArcArray<E, IxDyn>) {
    let (address, bytes) = address_of(array);
    let mut lendings = LENDINGS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = lendings
        .iter()
        .position(|l| l.address == address && l.bytes == bytes)
    {
        lendings[i].buffers -= 1;
        if lendings[i].buffers == 0 {
            lendings.swap_remove(i);
        }
    }
}

/// What `f` makes of the lending whose memory `tensor`'s buffer is, if any.
fn lending_of<R>(tensor: &FlexTensor, f: impl FnOnce(Option<&Lending>) -> R) -> R {
    let bytes = tensor.bytes();
    let (address, len) = (bytes.as_ptr() as usize, bytes.len());
    let lendings = LENDINGS.lock().unwrap_or_else(|e| e.into_inner());
    f(lendings
        .iter()
        .find(|l| l.address == address && l.bytes == len))
}

/// Whether `tensor` reads a lent array's memory: writing it would copy the array first, so an
/// op that can write a result of its own instead should (see [`writable`](super::layout::writable)).
pub(crate) fn is_lent(tensor: &FlexTensor) -> bool {
    lending_of(tensor, |lending| lending.is_some())
}

/// The array `tensor` reads, when it is a lent array's unwritten buffer, whole and unreshaped.
fn lent_array(tensor: &FlexTensor) -> Option<NdArrayTensor> {
    use burn_backend::TensorMetadata;
    if tensor.layout().contiguous_offsets() != Some((0, tensor.layout().num_elements())) {
        return None;
    }
    lending_of(tensor, |lending| lending.map(|l| l.array.clone())).filter(|array| {
        array.dtype() == tensor.dtype() && array.shape() == *tensor.layout().shape()
    })
}

/// The f32 array `tensor` reads, when it is a lent array's unwritten buffer, whole and
/// unreshaped: what holds its values beyond the op (see `held`).
pub(crate) fn lent_f32_array(tensor: &FlexTensor) -> Option<ArcArray<f32, IxDyn>> {
    if tensor.dtype() != DType::F32 {
        return None;
    }
    match lent_array(tensor)? {
        NdArrayTensor::F32(storage) => Some(storage.into_shared()),
        _ => None,
    }
}

/// The memory behind a lent array's burn-flex buffer: the array itself until the first write,
/// then a copy of its values, whose `Vec` a result can take over.
enum Lent<E> {
    /// Read in place; the array's other holders see these values.
    Shared(ArcArray<E, IxDyn>),
    /// Written: a copy of the values, with capacity equal to its length.
    Copied(Vec<E>),
}

impl<E: bytemuck::Pod> Lent<E> {
    fn values(&self) -> &[E] {
        match self {
            Lent::Shared(array) => array
                .as_slice_memory_order()
                .expect("only standard-layout arrays are lent"),
            Lent::Copied(values) => values,
        }
    }
}

impl<E: bytemuck::Pod + Send + Sync> AllocationController for Lent<E> {
    fn alloc_align(&self) -> usize {
        align_of::<E>()
    }

    fn property(&self) -> AllocationProperty {
        AllocationProperty::Other
    }

    unsafe fn memory_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        if let Lent::Shared(array) = self {
            return_lent(array);
            let copy = array
                .as_slice_memory_order()
                .expect("only standard-layout arrays are lent")
                .to_vec()
                .into_boxed_slice()
                .into_vec();
            *self = Lent::Copied(copy);
        }
        let Lent::Copied(values) = self else {
            unreachable!("a written buffer is a copy")
        };
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(values.as_mut_slice());
        // SAFETY: the same memory viewed as possibly uninitialised bytes; callers write only
        // initialised data (the trait's contract).
        unsafe { core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len()) }
    }

    fn memory(&self) -> &[MaybeUninit<u8>] {
        let bytes: &[u8] = bytemuck::cast_slice(self.values());
        // SAFETY: initialised bytes viewed as possibly uninitialised ones.
        unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len()) }
    }

    fn duplicate(&self) -> Option<Box<dyn AllocationController>> {
        match self {
            Lent::Shared(array) => Some(Box::new(Lent::Shared(array.clone()))),
            Lent::Copied(_) => None,
        }
    }

    fn try_detach(&mut self) -> Option<NonNull<u8>> {
        match self {
            // The copy was allocated as a `Vec<E>` whose capacity is its length, which is what
            // `Bytes::try_into_vec` rebuilds it with (`memory().len()` bytes, `alloc_align`).
            Lent::Copied(values) if values.capacity() == values.len() && !values.is_empty() => {
                let mut values = core::mem::take(values);
                let ptr = values.as_mut_ptr();
                core::mem::forget(values);
                NonNull::new(ptr.cast())
            }
            _ => None,
        }
    }
}

impl<E> Drop for Lent<E> {
    fn drop(&mut self) {
        if let Lent::Shared(array) = self {
            return_lent(array);
        }
    }
}
