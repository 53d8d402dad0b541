//! The last few uploads, reused when the same CPU buffer is uploaded again in the same form.
//!
//! Autodiff's conv backward asks for the input gradient and then the weight gradient with the
//! same output gradient: two uploads of one buffer (a megabyte at ResNet20's first stage, and
//! uploads are the largest item of a step's conv time on the H200). An entry remembers a
//! burn-flex buffer cast to f16/bf16 on its way up by a weak reference, with the view's layout and the upload dtype; the device
//! copy is reused while the buffer is alive and unchanged.
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

/// Entries kept: enough for a conv backward's operands, few enough that the device copies held
/// are a few activations at most.
const ENTRIES: usize = 4;

struct Entry {
    buffer: Weak<Bytes>,
    layout: Layout,
    /// The upload dtype and the precision its values were rounded to.
    dtype: (DType, DType),
    /// The device tensor (an accelerator's `FloatTensor`), and the device it is on, compared by
    /// the caller.
    uploaded: Box<dyn Any>,
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

/// Remembers `uploaded` as the device copy of `tensor` in `dtype`, dropping the oldest entry
/// beyond [`ENTRIES`].
pub(crate) fn remember<T: 'static>(tensor: &FlexTensor, dtype: (DType, DType), uploaded: T) {
    let entry = Entry {
        buffer: Arc::downgrade(&tensor.data_arc()),
        layout: tensor.layout().clone(),
        dtype,
        uploaded: Box::new(uploaded),
    };
    UPLOADS.with(|uploads| {
        let mut uploads = uploads.borrow_mut();
        uploads.push_back(entry);
        while uploads.len() > ENTRIES {
            uploads.pop_front();
        }
    });
}
