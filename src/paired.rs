//! A conv's weight gradient computed in the same accelerator call as its input gradient.
//!
//! Autodiff's conv backward asks for the input gradient and then, with the same operands, for
//! the weight gradient: two offloaded ops, each ending in a blocking read from the device. When
//! both phases are placed on the accelerator at one precision, the input-gradient call also uploads the input, launches the weight gradient and reads both
//! results in one go; the weight gradient waits here, one per thread, until it is asked for.
//!
//! It is handed out only for the same request: the same input, weight and output-gradient
//! buffers, unchanged, in the same views (see `held`), and the same options. A conv whose weight
//! gradient is never asked for (frozen weights) shows as a waiting result that nobody took when
//! the next input gradient comes; that conv's shape is not paired again (logged once).

use crate::fallback::warn_once;
use crate::held::HeldBuffer;
use crate::profile::ConvSignature;
use burn_backend::ops::ConvOptions;
use core::any::Any;
use std::cell::RefCell;
use std::collections::HashSet;

/// A weight gradient computed ahead, with the request it answers.
struct Waiting {
    conv: ConvSignature,
    /// Input, weight and output gradient.
    operands: [HeldBuffer; 3],
    options: ConvOptions<2>,
    /// The gradient, as the CPU backend's float tensor.
    grad: Box<dyn Any>,
}

#[derive(Default)]
struct State {
    waiting: Option<Waiting>,
    /// Conv shapes whose weight gradient was computed ahead and not asked for.
    unpaired: HashSet<ConvSignature>,
}

impl Drop for State {
    /// At thread exit a kept gradient is leaked, not dropped: its buffer may be a mapping of
    /// device memory read back by a GPU runtime, whose release needs that runtime's own
    /// thread-locals, which may be gone by then.
    fn drop(&mut self) {
        if let Some(waiting) = self.waiting.take() {
            std::mem::forget(waiting.grad);
        }
    }
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

/// The three operands' buffers (input, weight, output gradient), when each is a buffer that
/// can be held (see [`HeldBuffer::of`]).
pub(crate) fn operands<T: 'static>(x: &T, weight: &T, output_grad: &T) -> Option<[HeldBuffer; 3]> {
    Some([
        HeldBuffer::of(x)?,
        HeldBuffer::of(weight)?,
        HeldBuffer::of(output_grad)?,
    ])
}

/// Whether the weight gradient of `conv` should be computed with its input gradient. Called as
/// the input gradient is asked for: a result still waiting here was not asked for, and its
/// shape is not paired again.
pub(crate) fn wanted(conv: &ConvSignature) -> bool {
    STATE.with(|state| {
        let mut state = state.borrow_mut();
        if let Some(left) = state.waiting.take() {
            warn_once(
                &format!("unpaired:{:?}", left.conv),
                &format!(
                    "the weight gradient of the conv {:?} -> {:?} was computed with its input \
                     gradient and not asked for (frozen weights?); it is no longer computed ahead",
                    left.conv.input, left.conv.weight
                ),
            );
            state.unpaired.insert(left.conv);
        }
        !state.unpaired.contains(conv)
    })
}

/// Keeps `grad`, the weight gradient of the request (`operands`: input, weight, output gradient).
pub(crate) fn keep<T: 'static>(
    conv: ConvSignature,
    operands: [HeldBuffer; 3],
    options: ConvOptions<2>,
    grad: T,
) {
    let waiting = Waiting {
        conv,
        operands,
        options,
        grad: Box::new(grad),
    };
    STATE.with(|state| state.borrow_mut().waiting = Some(waiting));
}

/// The weight gradient kept for exactly this request, taken out.
pub(crate) fn take<T: 'static>(operands: [HeldBuffer; 3], options: &ConvOptions<2>) -> Option<T> {
    STATE.with(|state| {
        let mut state = state.borrow_mut();
        let waiting = state.waiting.as_ref()?;
        let same = waiting.options == *options
            && waiting.operands.iter().zip(operands).all(|(o, t)| o.is(&t));
        if !same || !waiting.grad.is::<T>() {
            return None;
        }
        let grad = state.waiting.take()?.grad;
        grad.downcast::<T>().ok().map(|g| *g)
    })
}
