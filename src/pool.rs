//! Where a training loop should run: on a thread of rayon's global pool, with a core left
//! beside the pool for the accelerator's device thread.
//!
//! The CPU backends split each large op across rayon's pool. Called from a thread outside the
//! pool, every such op hands its work to the pool and sleeps until it is done: two thread
//! wake-ups per op, hundreds of ops per training step. From a pool thread the caller starts on
//! the work at once and the others join in. And where the pool takes every core, the backend
//! does not keep the device thread and the pool awake between offloaded ops (see `wake` and
//! [`crate::spin`]), since either would take a core from the pool. [`run_on_pool`] sets up both.

/// Builds rayon's global pool for a heterogeneous run, unless it exists already (then `false`):
/// one thread fewer than the cores where there are more than two (the device thread is busy
/// beside the pool) unless `RAYON_NUM_THREADS` sets the count, and 8 MiB stacks, since a training
/// loop may run on a pool thread ([`run_on_pool`]) and a deep model's forward and backward
/// recurse through its modules.
pub fn build_global_pool(leave_a_core: bool) -> bool {
    let mut builder = rayon::ThreadPoolBuilder::new().stack_size(8 << 20);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if leave_a_core && std::env::var_os("RAYON_NUM_THREADS").is_none() && cores > 2 {
        builder = builder.num_threads(cores - 1);
    }
    // Fails only when the pool was built already.
    builder.build_global().is_ok()
}

/// Runs `f` on a thread of rayon's global pool, the caller waiting, after building the pool
/// with [`build_global_pool`]`(true)` if nothing has built it yet. Wrap a training loop on a
/// `Hetero` backend in it: each threaded CPU op then starts on the calling thread at once, and
/// with a core to spare the device thread and the pool stay awake between offloaded ops. With a
/// single pool thread `f` runs on the caller, since work handed to the pool from another thread
/// (a device's) would wait for it forever.
///
/// Only an entry point should do this: loops run side by side (tests) could take every pool
/// thread and block there on work handed to the pool.
pub fn run_on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    build_global_pool(true);
    if rayon::current_thread_index().is_some() || rayon::current_num_threads() < 2 {
        return f();
    }
    // `scope` runs its body on a worker of the global pool when called from outside it.
    rayon::scope(|_| f())
}
