//! Results read back from the accelerator after the op that computed them has returned.
//!
//! A conv's weight gradient is read by nothing before the optimizer step, while its input
//! gradient is what the next CPU op (the batch norm backward below it) waits for. The two are
//! computed in one accelerator call (see `paired`); read together, the input gradient waits for
//! the weight gradient's kernels too. Instead the input gradient's read is queued first, the
//! weight gradient's kernels and read after it, and the call returns as soon as the input
//! gradient is back: the weight gradient computes while the CPU goes on.
//!
//! The weight gradient is still handed out at once, as a CPU tensor: its buffer is a [`Bytes`]
//! over an allocation that waits for the read the first time its memory is touched (the way
//! CubeCL's file-backed bytes read their file on first access). burn-ndarray's own borrow would
//! touch them at once; `ndarray_bridge::pending` hands them to it without that. Every later
//! offloaded op of the thread first waits for the reads still pending, so that a result does
//! not hold its operands and staging memory for longer than one op. A read that fails falls
//! back to computing the result on the CPU from the operands kept for it (logged once; strict
//! mode panics instead).

use crate::fallback::{guarded, warn_once};
use burn_backend::{DType, Shape, TensorData};
use burn_std::{AllocationController, AllocationProperty, Bytes};
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Waits for a started read and returns its result, in the dtype and length announced for it.
pub(crate) type Settle = Box<dyn FnOnce() -> Result<TensorData, String> + Send>;

/// Computes the result on the CPU instead, for a read that failed.
pub(crate) type Fallback = Box<dyn FnOnce() -> Result<TensorData, String> + Send>;

/// A read started on the accelerator, with what to do if it fails.
pub(crate) struct Job {
    /// The op, for messages.
    pub op: String,
    pub settle: Settle,
    pub fallback: Fallback,
    /// Strict mode: a failed read panics instead of falling back.
    pub strict: bool,
}

/// The bytes of a pending result: empty until the first access, then the result's.
struct Pending {
    job: Mutex<Option<Job>>,
    bytes: OnceLock<ResultBytes>,
    len: usize,
    align: usize,
}

/// The settled bytes. Written once (through the `OnceLock`), then reached only through the
/// allocation controller that owns the `Pending`: the thread's list of pending reads holds weak
/// references, used only to settle.
struct ResultBytes(UnsafeCell<Bytes>);

// SAFETY: `Bytes` is `Send + Sync`; mutable access goes through `AllocationController::
// memory_mut`, which takes the controller (the sole owner of the memory) by `&mut`.
unsafe impl Sync for ResultBytes {}
unsafe impl Send for ResultBytes {}

/// Results left for later whose read failed and that were computed on the CPU instead.
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Fault injection: the read settled on this thread with this ordinal fails (0: none).
    static FAIL_AT: Cell<u64> = const { Cell::new(0) };
    /// Reads settled on this thread.
    static READS: Cell<u64> = const { Cell::new(0) };
}

/// Makes the `k`-th result left for later (1-based) that this thread waits for from now fail
/// to read, as a device failure would: it is then computed on the CPU. `None` clears it. Meant
/// for tests of that fallback.
pub fn inject_deferred_read_failure(k: Option<u64>) {
    let base = READS.get();
    FAIL_AT.set(k.map_or(0, |k| base + k));
}

/// How many results left for later had to be computed on the CPU because their read failed.
pub fn deferred_read_fallbacks() -> u64 {
    FALLBACKS.load(Ordering::SeqCst)
}

impl Pending {
    /// The result's bytes, waiting for the read the first time.
    fn bytes(&self) -> &ResultBytes {
        self.bytes.get_or_init(|| {
            let job = self
                .job
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .expect("a pending read settles once");
            ResultBytes(UnsafeCell::new(self.settle(job)))
        })
    }

    fn settle(&self, job: Job) -> Bytes {
        let Job {
            op,
            settle,
            fallback,
            strict,
        } = job;
        let n = READS.get() + 1;
        READS.set(n);
        let injected = n == FAIL_AT.get();
        let read = match guarded(settle) {
            _ if injected => Err(format!("injected read failure (deferred read #{n})")),
            Ok(Ok(data)) if data.bytes.len() == self.len => Ok(data.bytes),
            Ok(Ok(data)) => Err(format!(
                "read {} bytes of a {}-byte result",
                data.bytes.len(),
                self.len
            )),
            Ok(Err(e)) | Err(e) => Err(e),
        };
        let cause = match read {
            Ok(bytes) => return bytes,
            Err(cause) => cause,
        };
        if strict {
            panic!("burn-hetero (strict mode): reading the result of {op} failed: {cause}");
        }
        warn_once(
            &format!("deferred:{op}:{cause}"),
            &format!("reading the result of {op} failed ({cause}); it is computed on the CPU"),
        );
        FALLBACKS.fetch_add(1, Ordering::SeqCst);
        match fallback() {
            Ok(data) if data.bytes.len() == self.len => data.bytes,
            Ok(data) => panic!(
                "{op} on the CPU gave {} bytes for a {}-byte result",
                data.bytes.len(),
                self.len
            ),
            Err(e) => panic!("{op}: its read failed ({cause}) and the CPU could not redo it: {e}"),
        }
    }
}

impl Drop for Pending {
    /// A result dropped unread still waits for its read: the copy may be writing into staging
    /// memory that goes back to the runtime's pool with it.
    fn drop(&mut self) {
        let job = self.job.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(job) = job {
            let _ = guarded(job.settle);
        }
    }
}

/// The allocation behind a pending result's [`Bytes`].
struct Controller(Arc<Pending>);

impl AllocationController for Controller {
    fn alloc_align(&self) -> usize {
        self.0.align
    }

    fn property(&self) -> AllocationProperty {
        AllocationProperty::Other
    }

    unsafe fn memory_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        let cell = self.0.bytes();
        // SAFETY: `&mut self` is the only way to the memory (see `ResultBytes`), and the
        // settled bytes are initialised.
        let bytes: &mut Bytes = unsafe { &mut *cell.0.get() };
        // SAFETY: callers write only initialised bytes (the trait's contract).
        unsafe { crate::memory::uninit_mut(bytes) }
    }

    fn memory(&self) -> &[MaybeUninit<u8>] {
        let cell = self.0.bytes();
        // SAFETY: shared access; writers need `&mut self` (see `memory_mut`).
        let bytes: &Bytes = unsafe { &*cell.0.get() };
        crate::memory::uninit(bytes)
    }
}

thread_local! {
    /// This thread's reads not yet settled.
    static PENDING: RefCell<Vec<Weak<Pending>>> = const { RefCell::new(Vec::new()) };
}

/// Tensor data of `shape` and `dtype` whose bytes are the result of `job`, read on first access
/// (or by the next [`settle_all`] of this thread).
pub(crate) fn tensor_data(job: Job, shape: Shape, dtype: DType) -> TensorData {
    let len = shape.num_elements() * dtype.size();
    let pending = Arc::new(Pending {
        job: Mutex::new(Some(job)),
        bytes: OnceLock::new(),
        len,
        align: dtype.size().max(1),
    });
    PENDING.with_borrow_mut(|list| list.push(Arc::downgrade(&pending)));
    // SAFETY: the controller's memory is the settled result, `len` bytes long (checked in
    // `settle`; a wrong length panics there rather than exposing other memory).
    let bytes = unsafe { Bytes::from_controller(Box::new(Controller(pending)), len) };
    TensorData::from_bytes(bytes, shape, dtype)
}

/// Waits for every read of this thread still pending.
pub(crate) fn settle_all() {
    let pending = PENDING.with_borrow_mut(std::mem::take);
    for entry in pending {
        if let Some(pending) = entry.upgrade() {
            pending.bytes();
        }
    }
}
