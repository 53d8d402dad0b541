//! Uploads, reused when the same CPU buffer is needed on the accelerator again.
//!
//! A conv's backward needs its forward's input (for the weight gradient) and weight (for the
//! input gradient), and autodiff holds both buffers from the forward to the backward; the
//! backward's two phases share the output gradient. Uploads are the largest item of a step's
//! conv time on the H200, and a third of a ResNet step's upload bytes were the forward inputs
//! going up a second time. An entry remembers a burn-flex buffer cast to f16/bf16 on its way up
//! by a weak reference, with the view's layout and the upload dtype; the device copy is reused
//! while the buffer is alive and unchanged, so a step's entries live from a conv's forward to
//! its backward (device copies of at most [`KEPT_BYTES`] in all).
//!
//! Why a weak reference proves "unchanged": burn-flex writes in place only through
//! `Arc::make_mut`/`Arc::get_mut` on the buffer's `Arc`; with a weak reference outstanding,
//! `get_mut` refuses and `make_mut` moves the value to a new allocation, so the weak reference
//! no longer upgrades and the entry stops matching. An entry whose buffer was dropped is removed
//! (and its device copy freed) at the next lookup.

use burn_backend::DType;
use burn_flex::{FlexTensor, Layout};
use burn_std::Bytes;
use core::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};

/// Bytes of device copies kept: a training step's conv inputs and weights at their upload
/// precision (ResNet20 at batch 128: ~50 MB in f16) wait from the forward to the backward; past
/// this, the oldest entries are forgotten (their uploads happen again when needed).
const KEPT_BYTES: usize = 1 << 30;

struct Entry {
    buffer: Weak<Bytes>,
    layout: Layout,
    /// The upload dtype and the precision its values were rounded to.
    dtype: (DType, DType),
    /// The device tensor (an accelerator's `FloatTensor`), and the device it is on, compared by
    /// the caller.
    uploaded: Box<dyn Any>,
    /// Its size on the device.
    bytes: usize,
}

thread_local! {
    static UPLOADS: RefCell<VecDeque<Entry>> = const { RefCell::new(VecDeque::new()) };
}

/// A device copy of `tensor` uploaded as `dtype` (upload dtype, precision) earlier on this thread, if there is one that
/// `matches` (the accelerator's tensor type and device); drops entries whose buffer is gone.
pub(crate) fn reuse<T: Clone + 'static>(
    tensor: &FlexTensor,
    dtype: (DType, DType),
    matches: impl Fn(&T) -> bool,
) -> Option<T> {
    let buffer = Arc::downgrade(&tensor.data_arc());
    UPLOADS.with(|uploads| {
        let mut uploads = uploads.borrow_mut();
        uploads.retain(|e| e.buffer.strong_count() > 0);
        uploads
            .iter()
            .filter(|e| {
                e.dtype == dtype && e.layout == *tensor.layout() && Weak::ptr_eq(&e.buffer, &buffer)
            })
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
    let entry = Entry {
        buffer: Arc::downgrade(&tensor.data_arc()),
        layout: tensor.layout().clone(),
        dtype,
        uploaded: Box::new(uploaded),
        bytes: tensor.layout().num_elements() * dtype.0.size(),
    };
    UPLOADS.with(|uploads| {
        let mut uploads = uploads.borrow_mut();
        uploads.push_back(entry);
        let mut kept: usize = uploads.iter().map(|e| e.bytes).sum();
        while kept > KEPT_BYTES && uploads.len() > 1 {
            kept -= uploads.pop_front().map_or(0, |e| e.bytes);
        }
    });
}
