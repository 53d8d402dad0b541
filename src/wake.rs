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
//! `BURN_HETERO_DEVICE_WAKE=0` turns it off (to measure it against the default). Waking it also
//! from the CPU ops between two convolutions (batch norm, ReLU, pooling) measured no faster on
//! the H200 and was left out.

use cubecl_common::device::{DeviceId, DeviceService, ServerUtilitiesHandle};
use cubecl_common::device_handle::DeviceHandle;
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

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

fn enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        let Ok(v) = std::env::var(ENV_DEVICE_WAKE) else {
            return true;
        };
        match crate::placement::parse_bool(&v) {
            Some(true) => true,
            Some(false) => {
                log::info!("{ENV_DEVICE_WAKE}={v}: offloaded ops do not wake the device thread");
                false
            }
            None => {
                log::warn!("{ENV_DEVICE_WAKE}={v}: expected 1/0/true/false; the wake-ups stay on");
                true
            }
        }
    })
}

/// Makes the runner thread of `device` run its queue now and stay awake for a while. Cheap
/// (an atomic add and a few no-op tasks); does not wait. The no-ops fill the queue's buffer, so
/// the next task anyone queues waits, spinning, until the thread takes that batch: queue device
/// work after the op's host-side work where the order is free (see `offload`).
pub(crate) fn wake(device: DeviceId) {
    if !enabled() || DeviceHandle::<Waker>::is_blocking() {
        return;
    }
    HANDLES.with_borrow_mut(|handles| {
        let index = match handles.iter().position(|(id, _)| *id == device) {
            Some(index) => index,
            None => {
                handles.push((device, DeviceHandle::<Waker>::new(device)));
                handles.len() - 1
            }
        };
        handles[index].1.flush_queue();
    });
}
