//! Views of initialised bytes as the possibly uninitialised bytes that CubeCL's allocation
//! controllers hand out: one place for the casts of every controller here (lent arrays,
//! read-back memory, results read later).

use core::mem::MaybeUninit;

/// `bytes` as possibly uninitialised bytes.
pub(crate) fn uninit(bytes: &[u8]) -> &[MaybeUninit<u8>] {
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and initialised bytes are valid as it.
    unsafe { core::slice::from_raw_parts(bytes.as_ptr().cast(), bytes.len()) }
}

/// `bytes` as possibly uninitialised bytes, for writing.
///
/// # Safety
///
/// The caller writes only initialised bytes through the view (the contract of
/// `AllocationController::memory_mut`), since `bytes` is read as initialised afterwards.
pub(crate) unsafe fn uninit_mut(bytes: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: the same layout; the caller keeps the bytes initialised.
    unsafe { core::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len()) }
}
