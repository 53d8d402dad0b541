//! The op trait impls of `Hetero`: mechanical forwarding to `C` in [`forwarded`] (generated),
//! the ops that do real work in [`placed`].

mod forwarded;
pub(crate) mod placed;
mod rebind;
mod transaction;
