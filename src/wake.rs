//! Waking CubeCL's device thread before an offloaded op needs it.
//!
//! CubeCL 0.10 runs all work of a device on one thread (cubecl-common, `device/handle/channel.rs`).
//! Launches are queued without waking it; a blocking call (the read that ends every offloaded
//! op) flushes the queue. After 8 192 spins and 64 yields without work the thread sleeps in
//! 150 µs steps, so a read that follows a CPU phase longer than that (the CPU ops between two
//! convs, then the op's own cast and upload) waits for the thread's next wake-up before its
//! kernel even starts. An offloaded op therefore flushes the device's queue as it starts and
//! as each staging chunk of an upload goes out: the thread runs what is queued and spins again,
//! so the op's launch and read find it awake.
//!
//! The flush goes through a handle of a service of our own: CubeCL keys its runner threads by
//! device and stage, and the compute servers run on the downstream stage, as this service does.
//! Waking it also from the CPU ops between two convolutions (batch norm, ReLU, pooling) measured
//! no faster on the H200 and was left out.
//!
//! A flush does not wake a thread that is asleep: it finds the work at the end of its sleep, and
//! the first task queued after the flush spins until then (on the H200 that showed as ~90 µs in
//! every input gradient's host time, then, queued later, in its upload). So on CUDA, where the
//! CPU has a core that rayon's pool leaves free, a keeper thread of ours also flushes each
//! device's queue every [`KEEP_EVERY`] while offloaded ops keep coming (one within
//! [`KEEP_FOR`] of the last): the device thread then stays in its spinning phase, on that free
//! core, and every op finds it awake. Past [`KEEP_FOR`] without an op the keeper parks and the
//! device thread goes back to sleep.
//!
//! `BURN_HETERO_DEVICE_WAKE` chooses: `1` (the default) flushes as ops start and keeps the
//! thread awake where that applies, `op` only flushes as ops start, `0` does neither (to measure
//! them against each other).

use cubecl_common::device::{DeviceId, DeviceService, ServerUtilitiesHandle};
use cubecl_common::device_handle::DeviceHandle;
use std::cell::RefCell;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Environment variable that turns the wake-ups off (`0`, `false`, `off`).
const ENV_DEVICE_WAKE: &str = "BURN_HETERO_DEVICE_WAKE";

/// A service with no state: its handle is how we reach a device's runner thread.
struct Waker;

impl DeviceService for Waker {
    fn init(_: DeviceId) -> Self {
        Waker
    }

    fn utilities(&self) -> ServerUtilitiesHandle {
        Arc::new(())
    }
}

thread_local! {
    /// This thread's handles, one per device it offloaded to.
    static HANDLES: RefCell<Vec<(DeviceId, DeviceHandle<Waker>)>> = const { RefCell::new(Vec::new()) };
}

/// What the wake-ups do (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Off,
    AtOps,
    KeepAwake,
}

fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let Ok(v) = std::env::var(ENV_DEVICE_WAKE) else {
            return Mode::KeepAwake;
        };
        if v.trim().eq_ignore_ascii_case("op") {
            log::info!("{ENV_DEVICE_WAKE}={v}: offloaded ops wake the device thread as they start");
            return Mode::AtOps;
        }
        match crate::placement::parse_bool(&v) {
            Some(true) => Mode::KeepAwake,
            Some(false) => {
                log::info!("{ENV_DEVICE_WAKE}={v}: offloaded ops do not wake the device thread");
                Mode::Off
            }
            None => {
                log::warn!("{ENV_DEVICE_WAKE}={v}: expected 1/op/0; the wake-ups stay on");
                Mode::KeepAwake
            }
        }
    })
}

/// How often the keeper flushes a device's queue: well inside the device thread's spinning
/// phase (8 192 spins and 64 yields, ~0.5 ms on the H200's Xeon), so that it never sleeps.
const KEEP_EVERY: Duration = Duration::from_micros(100);

/// How long after the last offloaded op the keeper goes on: longer than a training step's CPU
/// stretches between two convolutions, shorter than a pause for evaluation or data loading.
const KEEP_FOR: Duration = Duration::from_millis(50);

/// The devices the keeper keeps awake, each with the time of its last offloaded op.
static KEPT: Mutex<Vec<(DeviceId, Instant)>> = Mutex::new(Vec::new());

/// The keeper thread, once started.
static KEEPER: OnceLock<std::thread::Thread> = OnceLock::new();

/// Notes an offloaded op on `device`, starting (or unparking) the keeper.
fn keep_awake(device: DeviceId) {
    let now = Instant::now();
    let was_idle = {
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        match kept.iter_mut().find(|(id, _)| *id == device) {
            Some((_, last)) => {
                let idle = now.duration_since(*last) >= KEEP_FOR;
                *last = now;
                idle
            }
            None => {
                kept.push((device, now));
                true
            }
        }
    };
    if !was_idle {
        return;
    }
    let keeper = KEEPER.get_or_init(|| {
        std::thread::Builder::new()
            .name("burn-hetero-keeper".into())
            .spawn(keeper_loop)
            .expect("spawning the device keeper thread")
            .thread()
            .clone()
    });
    keeper.unpark();
}

/// Flushes the queue of every device with a recent op, every [`KEEP_EVERY`]; parks when none
/// has had one for [`KEEP_FOR`].
fn keeper_loop() {
    let mut handles: Vec<(DeviceId, DeviceHandle<Waker>)> = Vec::new();
    loop {
        let now = Instant::now();
        let active: Vec<DeviceId> = KEPT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, last)| now.duration_since(*last) < KEEP_FOR)
            .map(|(id, _)| *id)
            .collect();
        if active.is_empty() {
            std::thread::park_timeout(KEEP_FOR);
            continue;
        }
        for device in active {
            flush(&mut handles, device);
        }
        std::thread::sleep(KEEP_EVERY);
    }
}

/// Whether a core is left beside rayon's pool for a spinning device thread (checked once).
fn core_to_spare() -> bool {
    static SPARE: OnceLock<bool> = OnceLock::new();
    *SPARE.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pool = rayon::current_num_threads();
        let spare = cores > pool;
        if !spare {
            log::info!(
                "rayon's pool takes all {cores} cores: the device thread is not kept awake \
                 between offloaded ops (it would take a core from the pool); \
                 burn_hetero::pool::build_global_pool leaves one"
            );
        }
        spare
    })
}

/// Makes the runner thread of `device` run its queue now and stay awake for a while. Cheap
/// (an atomic add and a few no-op tasks); does not wait. The no-ops fill the queue's buffer, so
/// the next task anyone queues waits, spinning, until the thread takes that batch: queue device
/// work after the op's host-side work where the order is free (see `offload`).
pub(crate) fn wake(device: DeviceId) {
    if mode() == Mode::Off || DeviceHandle::<Waker>::is_blocking() {
        return;
    }
    HANDLES.with_borrow_mut(|handles| flush(handles, device));
}

/// Flushes `device`'s queue through its handle in `handles`, made on first use.
fn flush(handles: &mut Vec<(DeviceId, DeviceHandle<Waker>)>, device: DeviceId) {
    let index = match handles.iter().position(|(id, _)| *id == device) {
        Some(index) => index,
        None => {
            handles.push((device, DeviceHandle::<Waker>::new(device)));
            handles.len() - 1
        }
    };
    handles[index].1.flush_queue();
}

/// [`wake`], and where the mode and the cores allow it, the device kept awake by the keeper
/// and rayon's workers kept spinning (`crate::spin`) while offloaded ops keep coming (see the
/// module's doc). For runtimes whose device thread drives a real GPU: on a CPU-emulated device
/// (lavapipe) a spinning thread would take the emulator's cores.
pub(crate) fn wake_and_keep(device: DeviceId) {
    wake(device);
    if mode() == Mode::KeepAwake && !DeviceHandle::<Waker>::is_blocking() && core_to_spare() {
        keep_awake(device);
        // The CPU ops between offloaded ones then find rayon's workers awake too.
        if crate::spin::enabled() {
            crate::spin::keep_workers_spinning(KEEP_FOR);
        }
    }
}
