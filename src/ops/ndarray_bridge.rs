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
use ndarray::{ArcArray, ArrayView, IxDyn, SliceInfoElem};
use std::sync::Mutex;

use super::layout::{PARALLEL_COPY_MIN, copied, strided_values};

/// `tensor` as a burn-flex tensor of the same dtype and shape; given back when it is not a
/// numeric array.
pub(crate) fn ndarray_into_flex(tensor: NdArrayTensor) -> Result<FlexTensor, NdArrayTensor> {
    macro_rules! hand_over {
        ($storage:expr, $dtype:expr) => {
            // A borrowed storage of another dtype (read from a file) is copied once here into
            // an array of its own, as burn-ndarray's own ops would on each use.
            Ok(array_into_flex($storage.into_shared(), $dtype))
        };
    }
    match tensor {
        // An accelerator's result (see `read_back`) is read where it lies.
        NdArrayTensor::F32(s) if s.is_borrowed() => Ok(lend_borrowed(NdArrayTensor::F32(s))),
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
        let shape = array.raw_dim();
        ArcArray::from_shape_vec(shape, dense_values(array.view()))
            .expect("the values fill the shape")
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
            // A read-back buffer (pinned memory) or another allocation: copied across threads.
            Err(bytes) => match bytemuck::try_cast_slice::<u8, E>(&bytes) {
                Ok(values) => copied(values),
                Err(_) => bytemuck::pod_collect_to_vec(&bytes),
            },
        }
    } else {
        match tensor.layout().contiguous_offsets() {
            Some((start, end)) => copied(&tensor.storage::<E>()[start..end]),
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
    lend_at(address, bytes, || NdArrayTensor::from(array.clone()));
}

/// Lists the array whose values are the `bytes` at `address` as lent, for one more burn-flex
/// buffer; `array` makes its entry when it is not listed yet.
fn lend_at(address: usize, bytes: usize, array: impl FnOnce() -> NdArrayTensor) {
    if lend_again(address, bytes) {
        return;
    }
    // Made outside the lock: cloning a tensor may run its memory's own code.
    let array = array();
    let mut lendings = LENDINGS.lock().unwrap_or_else(|e| e.into_inner());
    match lendings
        .iter_mut()
        .find(|l| l.address == address && l.bytes == bytes)
    {
        // Listed meanwhile by another thread; this clone drops after the lock.
        Some(lending) => lending.buffers += 1,
        None => lendings.push(Lending {
            address,
            bytes,
            array,
            buffers: 1,
        }),
    }
}

/// One more burn-flex buffer reads the values lent at `address`, if they are listed; whether
/// they are.
fn lend_again(address: usize, bytes: usize) -> bool {
    let mut lendings = LENDINGS.lock().unwrap_or_else(|e| e.into_inner());
    match lendings
        .iter_mut()
        .find(|l| l.address == address && l.bytes == bytes)
    {
        Some(lending) => {
            lending.buffers += 1;
            true
        }
        None => false,
    }
}

/// One burn-flex buffer fewer reads the lent values at `address`.
fn return_lent_at(address: usize, bytes: usize) {
    let mut lendings = LENDINGS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = lendings
        .iter()
        .position(|l| l.address == address && l.bytes == bytes)
    {
        lendings[i].buffers -= 1;
        if lendings[i].buffers == 0 {
            let gone = lendings.swap_remove(i);
            // Dropped outside the lock: dropping a tensor may run its memory's own code.
            drop(lendings);
            drop(gone);
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

/// The f32 tensor `tensor` reads, when it is a lent tensor's unwritten buffer, whole and
/// unreshaped: what holds its values beyond the op (see `held`).
pub(crate) fn lent_f32(tensor: &FlexTensor) -> Option<NdArrayTensor> {
    if tensor.dtype() != DType::F32 {
        return None;
    }
    lent_array(tensor).filter(|t| matches!(t, NdArrayTensor::F32(_)))
}

/// The memory behind a lent array's burn-flex buffer: the array itself until the first write,
/// then a copy of its values, whose `Vec` a result can take over; also the memory an
/// accelerator's result was read into, under a borrowed burn-ndarray tensor.
enum Lent<E> {
    /// Read in place; the array's other holders see these values.
    Shared(ArcArray<E, IxDyn>),
    /// Read-back memory (see [`read_back`]), shared by every clone of the borrowed tensor over
    /// it (burn-ndarray clones borrowed storage by cloning its bytes, and autodiff clones the
    /// activations it keeps): a clone costs a reference, and a write copies first.
    ReadBack(std::sync::Arc<Bytes>),
    /// A burn-ndarray tensor over borrowed memory (an accelerator's result, see [`read_back`]),
    /// read in place like `Shared`; its values are the `len` values at `address`.
    Borrowed {
        tensor: NdArrayTensor,
        address: usize,
        len: usize,
    },
    /// Written: a copy of the values, with capacity equal to its length.
    Copied(Vec<E>),
}

impl<E: bytemuck::Pod> Lent<E> {
    fn values(&self) -> &[E] {
        match self {
            Lent::Shared(array) => array
                .as_slice_memory_order()
                .expect("only standard-layout arrays are lent"),
            // SAFETY: `tensor` keeps the memory alive and unchanged (borrowed storage is never
            // written in place); `address` is its first value, aligned for `E` (checked by
            // burn-ndarray when it borrowed the memory).
            Lent::Borrowed { address, len, .. } => unsafe {
                core::slice::from_raw_parts(*address as *const E, *len)
            },
            // The values are aligned for `E`: checked in `read_back`, and by `cast_slice` (which
            // panics otherwise) for a result read later (see `pending`).
            Lent::ReadBack(memory) => bytemuck::cast_slice(&memory[..]),
            Lent::Copied(values) => values,
        }
    }
}

impl<E> Lent<E> {
    /// The address and byte length of the values lent from an array or tensor, if they are.
    fn lent_at(&self) -> Option<(usize, usize)> {
        match self {
            Lent::Shared(array) => Some(address_of(array)),
            Lent::Borrowed { address, len, .. } => Some((*address, len * size_of::<E>())),
            Lent::ReadBack(_) | Lent::Copied(_) => None,
        }
    }

    /// Marks this buffer as no longer reading the lent values (dropped, or copied on write).
    fn give_back(&self) {
        if let Some((address, bytes)) = self.lent_at() {
            return_lent_at(address, bytes);
        }
    }
}

/// A burn-ndarray f32 tensor over borrowed memory as a burn-flex tensor reading that memory:
/// lent like a shared array (a write copies it first), and recognised when it comes back
/// unwritten, so that an accelerator's result reaches `Hetero`'s CPU ops without a copy.
fn lend_borrowed(tensor: NdArrayTensor) -> FlexTensor {
    let NdArrayTensor::F32(storage) = &tensor else {
        unreachable!("only f32 borrowed storage is lent")
    };
    let view = storage.view();
    let shape = Shape::from(view.shape().to_vec());
    let (address, len) = (view.as_ptr() as usize, view.len());
    let byte_len = len * size_of::<f32>();
    lend_at(address, byte_len, || tensor.clone());
    let lent = Lent::<f32>::Borrowed {
        tensor,
        address,
        len,
    };
    // SAFETY: the controller's memory is the tensor's values, `byte_len` bytes, all initialised.
    let bytes = unsafe { Bytes::from_controller(Box::new(lent), byte_len) };
    FlexTensor::new(bytes, Layout::contiguous(shape), DType::F32)
}

impl<E: bytemuck::Pod + Send + Sync> AllocationController for Lent<E> {
    fn alloc_align(&self) -> usize {
        align_of::<E>()
    }

    fn property(&self) -> AllocationProperty {
        AllocationProperty::Other
    }

    unsafe fn memory_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        if !matches!(self, Lent::Copied(_)) {
            let copy = copied(self.values()).into_boxed_slice().into_vec();
            // The lent variant, dropped here, gives its lending back.
            *self = Lent::Copied(copy);
        }
        let Lent::Copied(values) = self else {
            unreachable!("a written buffer is a copy")
        };
        // SAFETY: callers write only initialised data (the trait's contract).
        unsafe { crate::memory::uninit_mut(bytemuck::cast_slice_mut(values.as_mut_slice())) }
    }

    fn memory(&self) -> &[MaybeUninit<u8>] {
        crate::memory::uninit(bytemuck::cast_slice(self.values()))
    }

    fn duplicate(&self) -> Option<Box<dyn AllocationController>> {
        let copy = match self {
            Lent::Shared(array) => Lent::Shared(array.clone()),
            Lent::Borrowed {
                tensor,
                address,
                len,
            } => Lent::Borrowed {
                tensor: tensor.clone(),
                address: *address,
                len: *len,
            },
            Lent::ReadBack(memory) => Lent::ReadBack(memory.clone()),
            Lent::Copied(_) => return None,
        };
        // One more buffer reads the lent values (given back when the copy drops).
        if let Some((address, bytes)) = copy.lent_at() {
            lend_again(address, bytes);
        }
        Some(Box::new(copy))
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
        self.give_back();
    }
}

/// An accelerator's f32 or f64 result as a burn-ndarray tensor over the memory it was read into
/// (borrowed storage: burn-ndarray reads it in place and copies it before any write), where
/// that memory is not a `Vec` of its own; the data back otherwise. Copying the read-back results
/// (about 190 MB a step) into new arrays took 5 ms of ResNet20's batch-128 step on the H200
/// (2026-12-06);
/// `Hetero`'s CPU ops read the borrowed memory through [`lend_borrowed`] instead.
pub(crate) fn read_back(
    data: burn_backend::TensorData,
) -> Result<NdArrayTensor, burn_backend::TensorData> {
    let (bytes, shape, dtype) = float_parts(data)?;
    let aligned = (bytes.as_ptr() as usize).is_multiple_of(dtype.size());
    if bytes.property() == AllocationProperty::Native || !aligned {
        return Err(burn_backend::TensorData::from_bytes(bytes, shape, dtype));
    }
    let len = bytes.len();
    let memory = std::sync::Arc::new(bytes);
    register_read_back(&memory);
    let shared = read_back_controller(memory, dtype);
    // SAFETY: the controller's memory is the read-back bytes, `len` of them, all initialised.
    let bytes = unsafe { Bytes::from_controller(shared, len) };
    // burn-ndarray borrows memory that is not a `Vec` of its own (property `Other`).
    Ok(NdArrayTensor::from_data(
        burn_backend::TensorData::from_bytes(bytes, shape, dtype),
    ))
}

/// A result read after its op returned (a conv's weight gradient, see `deferred`) as a
/// burn-ndarray tensor whose values arrive on first access, the way burn-flex keeps such a
/// result; the data back where it is not f32 or f64. Without this the result waited as it was
/// handed out, since burn-ndarray checks the alignment of memory it borrows, which reads the
/// pending memory's address and so waits for it.
///
/// burn-ndarray borrows a template instead: memory of zeros of the result's length, never read.
/// A clone of a borrowed tensor clones its bytes, which asks their controller for a duplicate,
/// and the template's duplicate is the pending memory under the read-back controller (shared
/// by clones, copied before a write). If burn-ndarray ever cloned borrowed storage otherwise,
/// the pending memory would be left over and the data comes back (logged once).
pub(crate) fn pending(
    data: burn_backend::TensorData,
) -> Result<NdArrayTensor, burn_backend::TensorData> {
    let (bytes, shape, dtype) = float_parts(data)?;
    let len = bytes.len();
    let zeros = Template(vec![0u64; len.div_ceil(size_of::<u64>())]);
    // SAFETY: the template's memory is at least `len` bytes, all initialised (zeros).
    let template = unsafe { Bytes::from_controller(Box::new(zeros), len) };
    let template = NdArrayTensor::from_data(burn_backend::TensorData::from_bytes(
        template,
        shape.clone(),
        dtype,
    ));
    let memory = std::sync::Arc::new(bytes);
    let handed = read_back_controller(memory.clone(), dtype);
    HANDED_OVER.with_borrow_mut(|slot| *slot = Some(handed));
    let tensor = template.clone();
    let left = HANDED_OVER.with_borrow_mut(Option::take);
    if left.is_none() && tensor.is_borrowed() {
        return Ok(tensor);
    }
    drop((left, tensor));
    crate::fallback::warn_once(
        "ndarray-pending",
        "burn-ndarray did not take a pending result as borrowed memory through a clone; weight \
         gradients read later are waited for as they are handed out",
    );
    let bytes = std::sync::Arc::try_unwrap(memory)
        .unwrap_or_else(|_| unreachable!("nothing else holds the pending memory"));
    Err(burn_backend::TensorData::from_bytes(bytes, shape, dtype))
}

/// An f32 or f64 result's bytes, shape and dtype; the data back for any other dtype.
fn float_parts(
    data: burn_backend::TensorData,
) -> Result<(Bytes, Shape, DType), burn_backend::TensorData> {
    if !matches!(data.dtype, DType::F32 | DType::F64) {
        return Err(data);
    }
    let burn_backend::TensorData {
        bytes,
        shape,
        dtype,
    } = data;
    Ok((bytes, shape, dtype))
}

/// The lent-memory controller over read-back `memory` of f32 or f64 values.
fn read_back_controller(
    memory: std::sync::Arc<Bytes>,
    dtype: DType,
) -> Box<dyn AllocationController> {
    match dtype {
        DType::F32 => Box::new(Lent::<f32>::ReadBack(memory)),
        _ => Box::new(Lent::<f64>::ReadBack(memory)),
    }
}

thread_local! {
    /// The controller a [`Template`]'s clone takes as its memory (see [`pending`]).
    static HANDED_OVER: core::cell::RefCell<Option<Box<dyn AllocationController>>> =
        const { core::cell::RefCell::new(None) };
}

/// The memory burn-ndarray borrows for [`pending`]: zeros of the result's length, aligned for
/// f64, whose duplicate is the controller waiting in `HANDED_OVER`.
struct Template(Vec<u64>);

impl AllocationController for Template {
    fn alloc_align(&self) -> usize {
        align_of::<u64>()
    }

    fn property(&self) -> AllocationProperty {
        AllocationProperty::Other
    }

    unsafe fn memory_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        // SAFETY: callers write only initialised data (the trait's contract).
        unsafe { crate::memory::uninit_mut(bytemuck::cast_slice_mut(self.0.as_mut_slice())) }
    }

    fn memory(&self) -> &[MaybeUninit<u8>] {
        crate::memory::uninit(bytemuck::cast_slice(self.0.as_slice()))
    }

    fn duplicate(&self) -> Option<Box<dyn AllocationController>> {
        HANDED_OVER.with_borrow_mut(Option::take)
    }
}

/// A read-back memory: the address and byte length of its values, and the memory.
type ReadBackEntry = (usize, usize, std::sync::Weak<Bytes>);

/// The read-back memories some tensor may still borrow, by address: how `held` tells whether
/// anything besides its own clone still holds one.
static READ_BACKS: Mutex<Vec<ReadBackEntry>> = Mutex::new(Vec::new());

fn register_read_back(memory: &std::sync::Arc<Bytes>) {
    let mut list = READ_BACKS.lock().unwrap_or_else(|e| e.into_inner());
    list.retain(|(_, _, m)| m.strong_count() > 0);
    list.push((
        memory.as_ptr() as usize,
        memory.len(),
        std::sync::Arc::downgrade(memory),
    ));
}

/// The read-back memory whose values are the `bytes` at `address`, while any tensor borrows it;
/// its strong count is the number of borrowed tensors over it (each clone has a controller).
pub(crate) fn read_back_memory(address: usize, bytes: usize) -> Option<std::sync::Weak<Bytes>> {
    let list = READ_BACKS.lock().unwrap_or_else(|e| e.into_inner());
    list.iter()
        .find(|(a, b, m)| *a == address && *b == bytes && m.strong_count() > 0)
        .map(|(_, _, m)| m.clone())
}

/// The values of `view` in standard (row-major) order (see [`strided_values`]).
pub(crate) fn dense_values<E: Copy + Send + Sync>(view: ArrayView<'_, E, IxDyn>) -> Vec<E> {
    if let Some(values) = view.as_slice() {
        return copied(values);
    }
    // SAFETY: every multi-index below the view's shape, times its strides, addresses one of
    // its values, which live as long as `view`.
    unsafe { strided_values(view.as_ptr(), view.shape(), view.strides()) }
}

/// burn-ndarray's `float_slice` of a large f32 array, its values copied across threads; the
/// tensor back when it is not one or a slice steps backwards. The slice bounds go to ndarray as
/// burn-ndarray hands them over (an empty range as `0..0`), so the region and its values are
/// burn-ndarray's; burn-ndarray copies the region on one thread (0.35–0.45 ms a call for ResNet's
/// shortcut slices at batch 32 on the H200, 2026-12-06).
pub(crate) fn slice_f32(
    tensor: NdArrayTensor,
    slices: &[burn_backend::Slice],
) -> Result<NdArrayTensor, NdArrayTensor> {
    let NdArrayTensor::F32(storage) = &tensor else {
        return Err(tensor);
    };
    if slices.len() > storage.view().ndim() || slices.iter().any(|s| s.step <= 0) {
        return Err(tensor);
    }
    let view = storage.view();
    let info: Vec<SliceInfoElem> = (0..view.ndim())
        .map(|i| match slices.get(i) {
            Some(s) if s.end == Some(s.start) => SliceInfoElem::Slice {
                start: 0,
                end: Some(0),
                step: 1,
            },
            Some(s) => SliceInfoElem::Slice {
                start: s.start,
                end: s.end,
                step: s.step,
            },
            None => SliceInfoElem::Slice {
                start: 0,
                end: None,
                step: 1,
            },
        })
        .collect();
    let region = view.slice(info.as_slice());
    if region.len() < PARALLEL_COPY_MIN {
        return Err(tensor);
    }
    let shape = region.raw_dim();
    let values = dense_values(region);
    let array = ArcArray::from_shape_vec(shape, values).expect("the values fill the shape");
    Ok(NdArrayTensor::from(array))
}

/// A float array reshaped without copying its values when it is in standard layout (the new
/// array shares the old one's buffer; burn-ndarray's copy on write keeps both unchanged by later
/// writes), else after one copy into standard layout across threads; the tensor back when it is
/// not an f32 or f64 array of the shape's size. burn-ndarray's own reshape copies every array
/// (it goes through a borrowed view), a permuted one through ndarray's element walk: 2 ms for
/// batch norm's `[32, 16, 32, 32]` gradient view against 0.14 on burn-flex (2 cores,
/// `cpu_ops --bench reshape_permuted`).
pub(crate) fn reshape_shared(
    tensor: NdArrayTensor,
    shape: &Shape,
) -> Result<NdArrayTensor, NdArrayTensor> {
    macro_rules! reshaped {
        ($storage:expr) => {{
            // An owned array in standard layout comes out as it is; a borrowed one (an
            // accelerator's result, or read from a file) or a strided view is copied once.
            let array = if $storage.is_borrowed() {
                let view = $storage.view();
                ArcArray::from_shape_vec(view.raw_dim(), dense_values(view))
                    .expect("the values fill the shape")
            } else {
                let array = $storage.into_shared();
                if array.is_standard_layout() {
                    array
                } else {
                    ArcArray::from_shape_vec(array.raw_dim(), dense_values(array.view()))
                        .expect("the values fill the shape")
                }
            };
            let array = array
                .into_shape_with_order(IxDyn(shape.as_slice()))
                .expect("a reshape of a standard-layout array keeps the number of values");
            Ok(NdArrayTensor::from(array))
        }};
    }
    if tensor_len(&tensor) != Some(shape.num_elements()) {
        return Err(tensor);
    }
    match tensor {
        NdArrayTensor::F32(s) => reshaped!(s),
        NdArrayTensor::F64(s) => reshaped!(s),
        other => Err(other),
    }
}

fn tensor_len(tensor: &NdArrayTensor) -> Option<usize> {
    match tensor {
        NdArrayTensor::F32(s) => Some(s.view().len()),
        NdArrayTensor::F64(s) => Some(s.view().len()),
        _ => None,
    }
}
