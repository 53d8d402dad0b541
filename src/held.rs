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
    fn of(array: &ArcArray<f32, IxDyn>) -> Self {
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
        match ndarray_bridge::lent_f32_array(tensor) {
            Some(array) => Self::array(array),
            None => HeldBuffer::Flex {
                buffer: Arc::downgrade(&tensor.data_arc()),
                layout: tensor.layout().clone(),
            },
        }
    }

    /// The buffer of a CPU backend's float tensor: a burn-flex tensor, or a burn-ndarray f32
    /// array that owns its values; None for any other.
    pub(crate) fn of<T: 'static>(tensor: &T) -> Option<Self> {
        let tensor = tensor as &dyn Any;
        if let Some(flex) = tensor.downcast_ref::<FlexTensor>() {
            return Some(Self::of_flex(flex));
        }
        match tensor.downcast_ref::<NdArrayTensor>()? {
            NdArrayTensor::F32(storage) if !storage.is_borrowed() => {
                Some(Self::array(storage.clone().into_shared()))
            }
            _ => None,
        }
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
            (HeldBuffer::Array { view, .. }, HeldBuffer::Array { view: other, .. }) => {
                // Both clones are alive while compared: one address is one allocation.
                view == other
            }
            _ => false,
        }
    }

    /// Makes `self` keep its values through `other`'s clone where both are dense views whose
    /// bytes overlap, so of one allocation (two live allocations never overlap): a holder of
    /// several entries keeps one clone per array, else the clones would keep each other alive
    /// (an array and its reshape, say). Views of one array that do not overlap (two slices)
    /// are not recognised as one; such entries go when the holder's own limit drops them.
    pub(crate) fn share(&mut self, other: &HeldBuffer) {
        if let (
            HeldBuffer::Array { array, view },
            HeldBuffer::Array {
                array: other_array,
                view: other_view,
            },
        ) = (self, other)
            && let (Some(a), Some(b)) = (&view.span, &other_view.span)
            && a.start < b.end
            && b.start < a.end
        {
            *array = other_array.clone();
        }
    }
}
