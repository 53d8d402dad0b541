//! A CPU tensor's buffer, held so that the same buffer, unchanged, is known again later.
//!
//! Uploads (`uploads`) and a conv's weight gradient computed ahead (`paired`) are reused when
//! the same operand is asked for again: a conv's backward reads the input and weight its forward
//! uploaded, and both backward phases read one output gradient. "The same" must mean the same
//! values, so a buffer is held in a way that sees any change:
//!
//! - a burn-flex buffer by a weak reference, with the view's layout. Burn-flex writes in place
//!   only through `Arc::make_mut`/`Arc::get_mut` on the buffer's `Arc`; with a weak reference
//!   outstanding, `get_mut` refuses and `make_mut` moves the value to a new allocation, so the
//!   weak reference no longer upgrades. The buffer is gone once nothing else holds it.
//! - a burn-ndarray f32 array by a clone of the array (its values' `Arc`), compared by the
//!   view's address, shape and strides. Burn-ndarray writes in place only into an array held
//!   nowhere else (the array's copy on write), so while the clone is held the values cannot
//!   change, and their memory cannot be freed and reused for another array. The array counts
//!   as gone once the clone is its only holder, which makes a holder keep at most one clone of
//!   an array (see [`HeldBuffer::share`]). Burn-ndarray's arrays reach `Hetero`'s code as
//!   burn-flex buffers lent for one op (`ndarray_bridge`); such a buffer is held as the array
//!   it was lent from, which outlives the op.
//! - a burn-ndarray tensor borrowing an accelerator's read-back memory (a conv's result that
//!   feeds the next conv directly) by a clone of the tensor, compared by view like an array.
//!   Neither burn-ndarray nor the bridge writes borrowed memory in place, and the memory's
//!   count of borrowing tensors (`ndarray_bridge::read_back_memory`) says when the clone is the
//!   last one.

use crate::ops::ndarray_bridge;
use burn_flex::{FlexTensor, Layout};
use burn_ndarray::NdArrayTensor;
use burn_std::Bytes;
use core::any::Any;
use ndarray::{ArcArray, IxDyn};
use std::rc::Rc;
use std::sync::{Arc, Weak};

/// A CPU buffer and the view of it that was asked for.
pub(crate) enum HeldBuffer {
    Flex {
        buffer: Weak<Bytes>,
        layout: Layout,
    },
    /// `array`, the clone that keeps the values, may be of another view of the same
    /// allocation (shared by several holders, see [`HeldBuffer::share`]); `view` is the one
    /// asked for.
    Array {
        array: Rc<ArcArray<f32, IxDyn>>,
        view: ArrayView,
    },
    /// `tensor`, the clone that keeps the memory, may be another view of it (shared like an
    /// array's); `memory` counts the tensors borrowing it.
    Borrowed {
        tensor: Rc<NdArrayTensor>,
        memory: Weak<Bytes>,
        view: ArrayView,
    },
}

/// A view of an array's values: the address of its first value, its shape and strides, and the
/// bytes it spans when it is dense in standard layout.
#[derive(PartialEq)]
pub(crate) struct ArrayView {
    address: usize,
    shape: Vec<usize>,
    strides: Vec<isize>,
    span: Option<core::ops::Range<usize>>,
}

impl ArrayView {
    fn of<S: ndarray::Data<Elem = f32>>(array: &ndarray::ArrayBase<S, IxDyn>) -> Self {
        let address = array.as_ptr() as usize;
        let span = array
            .is_standard_layout()
            .then(|| address..address + array.len() * size_of::<f32>());
        ArrayView {
            address,
            shape: array.shape().to_vec(),
            strides: array.strides().to_vec(),
            span,
        }
    }
}

impl HeldBuffer {
    /// The buffer of a burn-flex tensor, or the array it was lent from.
    pub(crate) fn of_flex(tensor: &FlexTensor) -> Self {
        match ndarray_bridge::lent_f32(tensor).and_then(|lent| Self::of_ndarray(&lent)) {
            Some(held) => held,
            None => HeldBuffer::Flex {
                buffer: Arc::downgrade(&tensor.data_arc()),
                layout: tensor.layout().clone(),
            },
        }
    }

    /// A burn-ndarray f32 array that owns its values, or a tensor borrowing read-back memory;
    /// None for any other.
    fn of_ndarray(tensor: &NdArrayTensor) -> Option<Self> {
        let NdArrayTensor::F32(storage) = tensor else {
            return None;
        };
        if !storage.is_borrowed() {
            return Some(Self::array(storage.clone().into_shared()));
        }
        let values = storage.view();
        let view = ArrayView::of(&values);
        let bytes = values.len() * size_of::<f32>();
        let memory = ndarray_bridge::read_back_memory(view.address, bytes)?;
        Some(HeldBuffer::Borrowed {
            tensor: Rc::new(tensor.clone()),
            memory,
            view,
        })
    }

    /// The buffer of a CPU backend's float tensor: a burn-flex tensor, or a burn-ndarray f32
    /// array that owns its values; None for any other.
    pub(crate) fn of<T: 'static>(tensor: &T) -> Option<Self> {
        let tensor = tensor as &dyn Any;
        if let Some(flex) = tensor.downcast_ref::<FlexTensor>() {
            return Some(Self::of_flex(flex));
        }
        Self::of_ndarray(tensor.downcast_ref::<NdArrayTensor>()?)
    }

    fn array(array: ArcArray<f32, IxDyn>) -> Self {
        let view = ArrayView::of(&array);
        HeldBuffer::Array {
            array: Rc::new(array),
            view,
        }
    }

    /// Whether anything besides this (and the holders it shares its clone with) holds the
    /// buffer: while something does, the buffer can be asked for again.
    pub(crate) fn is_alive(&self) -> bool {
        match self {
            HeldBuffer::Flex { buffer, .. } => buffer.strong_count() > 0,
            HeldBuffer::Array { array, .. } => !array.is_unique(),
            // The clone held here is one of the borrowing tensors.
            HeldBuffer::Borrowed { memory, .. } => memory.strong_count() > 1,
        }
    }

    /// Lets go of the buffer without dropping what keeps it, for thread exit: a tensor over
    /// read-back memory may need the GPU runtime's thread-locals to release it, which may be
    /// gone by then.
    pub(crate) fn leak(self) {
        if let HeldBuffer::Borrowed { tensor, .. } = self {
            std::mem::forget(tensor);
        }
    }

    /// The view asked for, of an array or borrowed memory.
    fn view(&self) -> Option<&ArrayView> {
        match self {
            HeldBuffer::Flex { .. } => None,
            HeldBuffer::Array { view, .. } | HeldBuffer::Borrowed { view, .. } => Some(view),
        }
    }

    /// Whether `self` and `other` hold the same buffer, in the same view.
    pub(crate) fn is(&self, other: &HeldBuffer) -> bool {
        match (self, other) {
            (
                HeldBuffer::Flex { buffer, layout },
                HeldBuffer::Flex {
                    buffer: other_buffer,
                    layout: other_layout,
                },
            ) => Weak::ptr_eq(buffer, other_buffer) && layout == other_layout,
            (HeldBuffer::Flex { .. }, _) | (_, HeldBuffer::Flex { .. }) => false,
            // Both clones are alive while compared: one address is one allocation.
            _ => self.view() == other.view(),
        }
    }

    /// Makes `self` keep its values through `other`'s clone where both are dense views whose
    /// bytes overlap, so of one allocation (two live allocations never overlap): a holder of
    /// several entries keeps one clone per array, else the clones would keep each other alive
    /// (an array and its reshape, say). Views of one array that do not overlap (two slices)
    /// are not recognised as one; such entries go when the holder's own limit drops them.
    pub(crate) fn share(&mut self, other: &HeldBuffer) {
        let overlap = match (self.view(), other.view()) {
            (Some(view), Some(other_view)) => match (&view.span, &other_view.span) {
                (Some(a), Some(b)) => a.start < b.end && b.start < a.end,
                _ => false,
            },
            _ => false,
        };
        if !overlap {
            return;
        }
        match (self, other) {
            (
                HeldBuffer::Array { array, .. },
                HeldBuffer::Array {
                    array: other_array, ..
                },
            ) => *array = other_array.clone(),
            (
                HeldBuffer::Borrowed { tensor, .. },
                HeldBuffer::Borrowed {
                    tensor: other_tensor,
                    ..
                },
            ) => *tensor = other_tensor.clone(),
            _ => {}
        }
    }
}
