//! Keeping rayon's workers awake between the CPU ops of a training step.
//!
//! An idle rayon worker looks for work 32 times, yielding its core in between, then sleeps until
//! work arrives (rayon-core 1.13, `sleep/mod.rs`). A heterogeneous step alternates CPU ops with
//! waits for the accelerator and with serial stretches on the calling thread (autodiff's
//! bookkeeping), each longer than those 32 rounds, so nearly every CPU op starts with the pool
//! asleep and pays for waking it: the op splits its work, each split wakes one sleeping worker,
//! and the work waits for the scheduler to run them. On the H200 machine (16 cores) a parallel
//! ReLU over 737 280 floats took 37 µs back to back and 93 µs after the caller had been busy for
//! 1 ms alone; with the other workers kept spinning, 45 µs (`benches/RESULTS.md`, 2026-12-02).
//!
//! [`keep_workers_spinning`] keeps every worker of the current pool but the caller's looking for
//! work until a deadline: each runs a job that takes pending work from the pool as soon as there
//! is some (`rayon::yield_now`) and otherwise yields its core to the OS, as rayon's own idle
//! rounds do, and ends at the deadline. The caller's thread gets no such job: a caller that
//! waits inside the pool (for the other half of a `join`) would otherwise run it and wait for the
//! whole window. Calling it again moves the deadline; the jobs start only when none runs.
//!
//! The backend calls it on each offloaded op where the device keeper runs (see `wake`: CUDA,
//! with a core left beside the pool), for that keeper's window, so the pool stays awake while a
//! step's offloaded ops keep coming and sleeps again a moment after the last. The spinning
//! workers hold their cores at full load while they wait, as OpenMP's waiting threads do;
//! `BURN_HETERO_POOL_SPIN=0` turns this off.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Environment variable that turns the backend's spinning off (`0`, `false`, `off`).
pub const ENV_POOL_SPIN: &str = "BURN_HETERO_POOL_SPIN";

/// The instant deadlines are counted from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// When the spinning jobs end, in nanoseconds since [`epoch`].
static DEADLINE_NS: AtomicU64 = AtomicU64::new(0);
/// Whether a set of spinning jobs was handed out and has not finished.
static STARTED: AtomicBool = AtomicBool::new(false);
/// Jobs of the current set that have not returned (the caller's one included until it returns).
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// Jobs of the current set that are spinning now.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

/// Keeps the workers of the current rayon pool (the global one outside a pool) other than the
/// calling thread looking for work for `window` from now, instead of falling asleep between
/// ops: work handed to the pool then starts on them within microseconds rather than after the
/// scheduler has woken them. Cheap when they spin already (it moves the deadline). The spinning
/// workers keep their cores busy until the deadline. One set of spinning jobs exists at a time,
/// on the pool of the call that started it.
pub fn keep_workers_spinning(window: Duration) {
    let deadline = now_ns().saturating_add(u64::try_from(window.as_nanos()).unwrap_or(u64::MAX));
    DEADLINE_NS.fetch_max(deadline, Ordering::Relaxed);
    if STARTED.load(Ordering::Relaxed)
        || STARTED
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    // Outside the pool there is no caller's thread to leave out; leave out the first worker
    // instead, so that the pool's spinning threads and the caller fit on the cores the pool has.
    let caller = rayon::current_thread_index().unwrap_or(0);
    PENDING.store(rayon::current_num_threads(), Ordering::Release);
    rayon::spawn_broadcast(move |ctx| {
        if ctx.index() != caller {
            spin_until_deadline();
        }
        if PENDING.fetch_sub(1, Ordering::AcqRel) == 1 {
            STARTED.store(false, Ordering::Release);
        }
    });
}

/// How many workers are spinning now (for tests and diagnostics).
pub fn spinning_workers() -> usize {
    SPINNING.load(Ordering::Acquire)
}

/// The body of one spinning job.
fn spin_until_deadline() {
    SPINNING.fetch_add(1, Ordering::AcqRel);
    while now_ns() < DEADLINE_NS.load(Ordering::Relaxed) {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            std::thread::yield_now();
        }
    }
    SPINNING.fetch_sub(1, Ordering::AcqRel);
}

/// Whether the backend keeps the pool spinning ([`ENV_POOL_SPIN`], on unless set false).
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let Ok(v) = std::env::var(ENV_POOL_SPIN) else {
            return true;
        };
        match crate::placement::parse_bool(&v) {
            Some(on) => {
                if !on {
                    log::info!("{ENV_POOL_SPIN}={v}: rayon's workers sleep between CPU ops");
                }
                on
            }
            None => {
                log::warn!("{ENV_POOL_SPIN}={v}: expected 1/0; the pool is kept spinning");
                true
            }
        }
    })
}
