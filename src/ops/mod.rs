//! The op trait impls of `Hetero`: mechanical forwarding to `C` in [`forwarded`] (generated),
//! the ops that do real work in [`placed`], and CPU ops rewritten for speed in [`broadcast`],
//! [`layout`], [`elementwise`], [`channels`], [`conv`], [`matmul`], [`pool`] and [`slice`]; [`batch_norm`] holds the fused passes
//! of `crate::norm`.

pub(crate) mod batch_norm;
mod broadcast;
pub(crate) mod channels;
pub mod conv;
pub(crate) mod elementwise;
mod fill;
mod forwarded;
pub(crate) mod layout;
mod matmul;
pub(crate) mod ndarray_bridge;
pub(crate) mod placed;
mod pool;
mod rebind;
mod slice;
mod transaction;
