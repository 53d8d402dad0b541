//! Uploads, reused when the same CPU buffer is needed on the accelerator again.
//!
//! A conv's backward needs its forward's input (for the weight gradient) and weight (for the
//! input gradient), and autodiff holds both buffers from the forward to the backward; the
//! backward's two phases share the output gradient. Uploads are the largest item of a step's
//! conv time on the H200, and a third of a ResNet step's upload bytes were the forward inputs
//! going up a second time. An entry remembers a CPU buffer cast to f16/bf16 on its way up, with
//! the view and the upload dtype; the device copy is reused while the buffer is alive and
//! unchanged, so a step's entries live from a conv's forward to its backward (device copies of
//! at most [`KEPT_BYTES`] in all).
//!
//! An entry holds its buffer as a [`HeldBuffer`], which sees any change to it: a burn-flex
//! buffer by a weak reference, a burn-ndarray array (lent to `Hetero`'s code for the op) by a
//! clone, one per array for all its entries. An entry whose buffer nothing else holds any more
//! is removed (and its device copy freed) at the next lookup.

use crate::held::HeldBuffer;
use burn_backend::DType;
use burn_flex::FlexTensor;
use core::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;

/// Bytes of device copies kept: a training step's conv inputs and weights at their upload
/// precision (ResNet20 at batch 128: ~50 MB in f16) wait from the forward to the backward; past
/// this, the oldest entries are forgotten (their uploads happen again when needed).
const KEPT_BYTES: usize = 1 << 30;

struct Entry {
    buffer: HeldBuffer,
    /// The upload dtype and the precision its values were rounded to.
    dtype: (DType, DType),
    /// The device tensor (an accelerator's `FloatTensor`), and the device it is on, compared by
    /// the caller.
    uploaded: Box<dyn Any>,
    /// Its size on the device.
    bytes: usize,
}

/// A thread's entries, oldest first.
struct Kept(VecDeque<Entry>);

impl Drop for Kept {
    /// At thread exit the held buffers are leaked, not dropped (see [`HeldBuffer::leak`]).
    fn drop(&mut self) {
        for entry in self.0.drain(..) {
            entry.buffer.leak();
        }
    }
}

impl core::ops::Deref for Kept {
    type Target = VecDeque<Entry>;
    fn deref(&self) -> &VecDeque<Entry> {
        &self.0
    }
}

impl core::ops::DerefMut for Kept {
    fn deref_mut(&mut self) -> &mut VecDeque<Entry> {
        &mut self.0
    }
}

thread_local! {
    static UPLOADS: RefCell<Kept> = const { RefCell::new(Kept(VecDeque::new())) };
}

/// A device copy of `tensor` uploaded as `dtype` (upload dtype, precision) earlier on this thread, if there is one that
/// `matches` (the accelerator's tensor type and device); drops entries whose buffer is gone.
pub(crate) fn reuse<T: Clone + 'static>(
    tensor: &FlexTensor,
    dtype: (DType, DType),
    matches: impl Fn(&T) -> bool,
) -> Option<T> {
    let buffer = HeldBuffer::of_flex(tensor);
    UPLOADS.with(|uploads| {
        let mut uploads = uploads.borrow_mut();
        uploads.retain(|e| e.buffer.is_alive());
        uploads
            .iter()
            .filter(|e| e.dtype == dtype && e.buffer.is(&buffer))
            .find_map(|e| {
                e.uploaded
                    .downcast_ref::<T>()
                    .filter(|t| matches(t))
                    .cloned()
            })
    })
}

/// Remembers `uploaded` as the device copy of `tensor` in `dtype`, dropping the oldest entries
/// while those kept take more than [`KEPT_BYTES`].
pub(crate) fn remember<T: 'static>(tensor: &FlexTensor, dtype: (DType, DType), uploaded: T) {
    let mut buffer = HeldBuffer::of_flex(tensor);
    UPLOADS.with(|uploads| {
        let mut uploads = uploads.borrow_mut();
        for kept in uploads.iter() {
            buffer.share(&kept.buffer);
        }
        let entry = Entry {
            buffer,
            dtype,
            uploaded: Box::new(uploaded),
            bytes: tensor.layout().num_elements() * dtype.0.size(),
        };
        uploads.push_back(entry);
        let mut kept: usize = uploads.iter().map(|e| e.bytes).sum();
        while kept > KEPT_BYTES && uploads.len() > 1 {
            kept -= uploads.pop_front().map_or(0, |e| e.bytes);
        }
    });
}
