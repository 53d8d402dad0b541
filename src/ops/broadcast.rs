//! Binary float ops whose broadcast burn-flex handles slowly, rewritten as a broadcast it handles
//! fast. Each element is still one IEEE operation on the same two values, so results are
//! bit-identical to the plain op.
//!
//! burn-flex broadcasts an operand over a middle dimension (a batch norm's `[1, C, 1, 1]` against
//! `[N, C, H, W]`) through a slow general path: 9.2 ms for `[32, 16, 32, 32] × [1, 16, 1, 1]` on
//! 2 cores, against 0.26 ms for the same product written as `[N·C, H·W] × [N·C, 1]` (the small
//! operand first expanded to `[N, C]`, 512 values). burn-ndarray is slower with the rewrite
//! (5.9 ms against 2.5 ms) when its own op runs the rewritten form (`cargo bench -p
//! burn-hetero-benches --bench cpu_ops` times the three); on burn-ndarray, large f32 operands go
//! through the bridge to the same threaded passes as burn-flex's instead.

use super::elementwise::{self, BinaryKind};
use super::layout;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, Shape, TensorMetadata};

/// How a full operand and a broadcast one are seen as matrices: the full one as
/// `[outer · kept, inner]`, the broadcast one expanded to `[outer, kept]` and reshaped to
/// `[outer · kept, 1]` (or, with nothing inside the kept block, `[outer, kept]` against `[1, kept]`).
struct Plan {
    full: Shape,
    outer: usize,
    kept: usize,
    inner: usize,
    /// The dims of the broadcast operand expanded to `[.., kept block, ..]` with the inner dims 1.
    expanded: Shape,
}

/// A plan when `small` broadcasts against `full` only over leading and trailing dims around one
/// block of dims it keeps whole; None otherwise (same shapes, or a pattern flex handles well).
fn plan(full: &Shape, small: &Shape) -> Option<Plan> {
    let rank = full.num_dims();
    if small.num_dims() != rank || full == small {
        return None;
    }
    let kept: Vec<usize> = (0..rank).filter(|&i| small[i] != 1).collect();
    let (&first, &last) = (kept.first()?, kept.last()?);
    // The kept dims must match the full ones, in one block, with something broadcast inside it
    // or after it (a broadcast over leading dims only is a row broadcast already).
    if kept.iter().any(|&i| small[i] != full[i]) || last - first + 1 != kept.len() {
        return None;
    }
    let product = |r: core::ops::Range<usize>| r.map(|i| full[i]).product::<usize>();
    let (outer, kept_len, inner) = (
        product(0..first),
        product(first..last + 1),
        product(last + 1..rank),
    );
    if inner == 1 {
        return None;
    }
    let mut expanded = small.clone();
    for i in 0..first {
        expanded[i] = full[i];
    }
    Some(Plan {
        full: full.clone(),
        outer,
        kept: kept_len,
        inner,
        expanded,
    })
}

/// `lhs ∘ rhs`, rewritten when `C` is burn-flex: strided operands made contiguous
/// ([`layout`]), a broadcast over a middle dim seen as a row broadcast, large f32 operands run
/// across threads ([`elementwise`]). burn-flex's fast broadcast paths take the broadcast operand
/// on the right only: a commutative op (IEEE add and mul are, bit for bit) with the broadcast
/// operand first is run swapped.
fn binary<C: Backend>(
    kind: BinaryKind,
    lhs: FloatTensor<C>,
    rhs: FloatTensor<C>,
) -> FloatTensor<C> {
    if lhs.dtype() != rhs.dtype()
        || !(layout::is_flex::<C>() || threaded_on_ndarray::<C>(&lhs, &rhs))
    {
        return kind.on::<C>(lhs, rhs);
    }
    let (lhs, rhs) = (layout::contiguous::<C>(lhs), layout::contiguous::<C>(rhs));
    let run =
        |l, r| elementwise::binary::<C>(kind, l, r).unwrap_or_else(|(l, r)| kind.on::<C>(l, r));
    let (ls, rs) = (lhs.shape(), rhs.shape());
    let (small_is_rhs, plan) = match (plan(&ls, &rs), plan(&rs, &ls)) {
        (Some(p), _) => (true, p),
        (None, Some(p)) => (false, p),
        (None, None) => return run(lhs, rhs),
    };
    let (full, small) = if small_is_rhs { (lhs, rhs) } else { (rhs, lhs) };
    let rows = plan.outer * plan.kept;
    let full = layout::float_reshape::<C>(full, Shape::new([rows, plan.inner]));
    let small = layout::float_reshape::<C>(
        C::float_expand(small, plan.expanded.clone()),
        Shape::new([rows, 1]),
    );
    let out = if small_is_rhs || kind.commutative() {
        run(full, small)
    } else {
        run(small, full)
    };
    layout::float_reshape::<C>(out, plan.full)
}

/// Whether `C` is burn-ndarray and the op is a large f32 one, which the bridge hands to the
/// threaded passes of [`elementwise`]: burn-ndarray runs a binary op on one thread (a product
/// `[32, 64, 64] · [32, 64, 1]` in an average pool's backward took 2.1 ms a call on the H200,
/// 2026-12-06). Small ops stay burn-ndarray's, where the hand-over would cost more than it saves.
fn threaded_on_ndarray<C: Backend>(lhs: &FloatTensor<C>, rhs: &FloatTensor<C>) -> bool {
    layout::is_ndarray::<C>()
        && lhs.dtype() == burn_backend::DType::F32
        && lhs.shape().num_elements().max(rhs.shape().num_elements()) >= elementwise::PARALLEL_MIN
}

pub(crate) fn float_add<C: Backend>(lhs: FloatTensor<C>, rhs: FloatTensor<C>) -> FloatTensor<C> {
    binary::<C>(BinaryKind::Add, lhs, rhs)
}

pub(crate) fn float_sub<C: Backend>(lhs: FloatTensor<C>, rhs: FloatTensor<C>) -> FloatTensor<C> {
    binary::<C>(BinaryKind::Sub, lhs, rhs)
}

pub(crate) fn float_mul<C: Backend>(lhs: FloatTensor<C>, rhs: FloatTensor<C>) -> FloatTensor<C> {
    binary::<C>(BinaryKind::Mul, lhs, rhs)
}

pub(crate) fn float_div<C: Backend>(lhs: FloatTensor<C>, rhs: FloatTensor<C>) -> FloatTensor<C> {
    binary::<C>(BinaryKind::Div, lhs, rhs)
}
