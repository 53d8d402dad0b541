//! Which backend ops were called (feature `trace-ops`): the conformance suite uses it to prove
//! that every op of Burn's traits was exercised. Recorded per thread, so that tests running in
//! parallel do not count each other's calls.

use std::cell::RefCell;
use std::collections::BTreeSet;

thread_local! {
    static HIT: RefCell<BTreeSet<&'static str>> = const { RefCell::new(BTreeSet::new()) };
}

pub(crate) fn hit(op: &'static str) {
    HIT.with(|h| {
        h.borrow_mut().insert(op);
    });
}

/// The `Trait::method` names of every op called on a `Hetero` backend so far by this thread.
pub fn ops_called() -> BTreeSet<&'static str> {
    HIT.with(|h| h.borrow().clone())
}
