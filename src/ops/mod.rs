//! The op trait impls of `Hetero`: mechanical forwarding to `C` in [`forwarded`] (generated),
//! the ops that do real work in [`placed`], and CPU ops rewritten for speed in [`broadcast`].

mod broadcast;
mod forwarded;
pub(crate) mod placed;
mod rebind;
mod transaction;
