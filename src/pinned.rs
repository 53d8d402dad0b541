//! Uploads to a CUDA device through page-locked (pinned) staging memory.
//!
//! CubeCL 0.10's `create` copies every upload into a fresh pageable `Vec` and copies from there,
//! so the driver stages it again: on the H200 that moved ~1 GB/s (`examples/copy_bench.rs`, cast
//! included), where downloads, which CubeCL stages through pinned memory, move ~50 GB/s. Here
//! each thread keeps two pinned slots; an upload is filled into them chunk by chunk (the caller's
//! fill casts f32 to f16/bf16 straight into the slot, across threads) while the previous chunk is
//! on the bus, on a stream of our own, into a device buffer CubeCL allocated.
//!
//! Device buffers are kept per thread and reused by later uploads of the same length, with their
//! addresses: a training step uploads the same shapes every step, and each fresh buffer costs two
//! blocking calls to CubeCL's device thread (allocation and address, then a wait for its queue),
//! which sleeps in 150 µs steps when idle. A kept buffer is reused only when no tensor holds it
//! any more.
//!
//! Ordering with CubeCL's stream: a fresh buffer comes from CubeCL's pool, in which a freed buffer
//! may still be read by a queued kernel, so CubeCL's stream is synchronised before the copy. A
//! kept buffer was last read by kernels of an earlier accelerator op, and every such op ends by
//! reading its result back (which drains CubeCL's queue into the driver), so waiting for the
//! context (no call to the device thread) is enough. Every chunk's copy is waited for before the
//! upload returns, so the data are in place before any later launch.

use crate::fallback::warn_once;
use crate::profile::StagedUploads;
use cubecl::cuda::CudaRuntime;
use cubecl::prelude::ComputeClient;
use cubecl::server::Handle;
use cubecl::stream_id::StreamId;
use cudarc::driver::{result, sys};
use std::cell::RefCell;
use std::ffi::c_void;
use std::time::{Duration, Instant};

/// Bytes per staging slot by default: large enough that the per-copy cost is small against the
/// transfer, small enough that filling one slot overlaps the copy of the other where an upload
/// spans several. ResNet20's largest upload at batch 128 (a 4 MiB f16 input and its weight) then
/// goes up in one copy: on an H100, against 2 MiB slots, its copies moved at 45.6 GB/s instead
/// of 42.6 in each of four alternated rounds, and the uploads' fill and wall time fell; step
/// times differed by less than that machine's noise (benches/RESULTS.md, 2026-12-05; on the
/// H200, 2 MiB had beaten 1 MiB, 45 GB/s against 39).
const SLOT_BYTES: usize = 4 << 20;

/// Environment variable setting the bytes per staging slot, in KiB (64 to 65 536), to measure
/// chunk sizes against each other.
const ENV_SLOT_KIB: &str = "BURN_HETERO_STAGING_CHUNK_KIB";

/// Bytes per staging slot: [`SLOT_BYTES`], or as [`ENV_SLOT_KIB`] sets (read once).
fn slot_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        crate::tuning::usize_from_env(ENV_SLOT_KIB, "KiB", 64..=65_536, SLOT_BYTES >> 10) << 10
    })
}

/// A tail of at most this many bytes after a full chunk goes with that chunk (each slot holds
/// that much more): a conv's weight after its input, which filled a chunk, would otherwise be a
/// copy of its own, paying a copy's fixed cost (~5 µs on the bus, more in all on the H200) for a
/// few KiB, while its fill is too short to overlap anything.
const TAIL_BYTES: usize = 256 << 10;

/// The chunks of an upload of `len` bytes through slots of `slot` (+ [`TAIL_BYTES`]) bytes, as
/// `(offset, bytes)`.
fn chunks(len: usize, slot: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut offset = 0;
    core::iter::from_fn(move || {
        if offset >= len {
            return None;
        }
        let left = len - offset;
        let n = if left <= slot + TAIL_BYTES {
            left
        } else {
            slot
        };
        offset += n;
        Some((offset - n, n))
    })
}

/// Bytes of device buffers a thread keeps for reuse; past it, the least recently used free
/// buffers are released (and uploads that find none free allocate without keeping).
const KEPT_BYTES: usize = 512 << 20;

/// Fills `dst` with the bytes of the upload starting at byte `offset`.
pub(crate) type Fill<'a> = dyn Fn(&mut [u8], usize) + Sync + 'a;

/// Copies `len` bytes, produced by `fill`, into a new device buffer of `client`'s device
/// (`device_index`) and returns its handle. `None` when the pinned path cannot be set up on this
/// thread (logged once); the caller then uploads through CubeCL.
pub(crate) fn upload(
    client: &ComputeClient<CudaRuntime>,
    device_index: usize,
    len: usize,
    fill: &Fill<'_>,
) -> Option<Result<Handle, String>> {
    STAGING.with(|cell| {
        let mut state = cell.borrow_mut();
        if let State::Unset = *state {
            *state = match Staging::new(device_index) {
                Ok(staging) => State::Ready(staging),
                Err(e) => {
                    warn_once(
                        "pinned-staging",
                        &format!(
                            "pinned staging memory is unavailable ({e}); uploads go through \
                             CubeCL's pageable copy"
                        ),
                    );
                    State::Unavailable
                }
            };
        }
        match &mut *state {
            State::Ready(staging) if staging.device_index == device_index => {
                Some(staging.upload(client, len, fill))
            }
            State::Ready(_) => {
                warn_once(
                    "pinned-staging-device",
                    "pinned staging serves the first CUDA device a thread uploads to; other \
                     devices go through CubeCL's pageable copy",
                );
                None
            }
            _ => None,
        }
    })
}

/// A failed driver call, named.
fn driver_error(what: &str, e: result::DriverError) -> String {
    format!("pinned staging, {what}: {e:?}")
}

/// A thread's staging: not tried yet, set up, or failed to set up (not retried).
enum State {
    Unset,
    Ready(Staging),
    Unavailable,
}

thread_local! {
    static STAGING: RefCell<State> = const { RefCell::new(State::Unset) };
}

/// Two pinned slots, a stream, and per slot the events recorded before and after its last copy
/// (the end event says when the slot may be rewritten; both time the copy when profiling).
struct Staging {
    device_index: usize,
    /// Bytes of a full chunk (each slot holds [`TAIL_BYTES`] more).
    slot_bytes: usize,
    slots: [*mut u8; 2],
    starts: [sys::CUevent; 2],
    ends: [sys::CUevent; 2],
    stream: sys::CUstream,
    kept: KeptBuffers,
}

/// A device buffer kept for reuse: CubeCL's handle (this clone keeps it allocated) and its address.
struct KeptBuffer {
    handle: Handle,
    ptr: sys::CUdeviceptr,
    len: usize,
    last_used: u64,
}

/// The device buffers a thread keeps, at most [`KEPT_BYTES`] of them.
#[derive(Default)]
struct KeptBuffers {
    buffers: Vec<KeptBuffer>,
    bytes: usize,
    clock: u64,
}

impl KeptBuffers {
    /// A kept buffer of exactly `len` bytes that no tensor holds, made this thread's most recent.
    fn take(&mut self, len: usize) -> Option<(Handle, sys::CUdeviceptr)> {
        let stream = StreamId::current();
        self.clock += 1;
        let clock = self.clock;
        let buffer = self
            .buffers
            .iter_mut()
            .find(|b| b.len == len && b.handle.stream == stream && b.handle.can_mut())?;
        buffer.last_used = clock;
        Some((buffer.handle.clone(), buffer.ptr))
    }

    /// Keeps a fresh buffer, first releasing the least recently used free ones past the budget;
    /// not kept when the budget is held by buffers in use.
    fn keep(&mut self, handle: &Handle, ptr: sys::CUdeviceptr, len: usize) {
        while self.bytes + len > KEPT_BYTES {
            let oldest_free = self
                .buffers
                .iter()
                .enumerate()
                .filter(|(_, b)| b.handle.can_mut())
                .min_by_key(|(_, b)| b.last_used)
                .map(|(i, _)| i);
            let Some(i) = oldest_free else { return };
            self.bytes -= self.buffers.swap_remove(i).len;
        }
        self.bytes += len;
        self.buffers.push(KeptBuffer {
            handle: handle.clone(),
            ptr,
            len,
            last_used: self.clock,
        });
    }
}

impl Staging {
    fn new(device_index: usize) -> Result<Self, String> {
        result::init().map_err(|e| driver_error("cuInit", e))?;
        let device =
            result::device::get(device_index as i32).map_err(|e| driver_error("cuDeviceGet", e))?;
        // SAFETY: `device` is a valid device handle; CubeCL runs on the same primary context,
        // which is made current on this thread (it stays retained for the process).
        unsafe {
            let ctx = result::primary_ctx::retain(device).map_err(|e| driver_error("retain", e))?;
            result::ctx::set_current(ctx).map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        }
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| driver_error("cuStreamCreate", e))?;
        let mut staging = Staging {
            device_index,
            slot_bytes: slot_bytes(),
            slots: [std::ptr::null_mut(); 2],
            starts: [std::ptr::null_mut(); 2],
            ends: [std::ptr::null_mut(); 2],
            stream,
            kept: KeptBuffers::default(),
        };
        for i in 0..2 {
            // SAFETY: a context is current; the pointer is freed in `drop`.
            staging.slots[i] = unsafe { result::malloc_host(staging.slot_bytes + TAIL_BYTES, 0) }
                .map_err(|e| driver_error("cuMemHostAlloc", e))?
                as *mut u8;
            for events in [&mut staging.starts, &mut staging.ends] {
                events[i] = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                    .map_err(|e| driver_error("cuEventCreate", e))?;
            }
        }
        Ok(staging)
    }

    /// The device's id in CubeCL, for waking its device thread (see `wake`).
    fn device_id(&self) -> cubecl_common::device::DeviceId {
        let device = cubecl::cuda::CudaDevice {
            index: self.device_index,
        };
        cubecl_common::device::Device::to_id(&device)
    }

    fn upload(
        &mut self,
        client: &ComputeClient<CudaRuntime>,
        len: usize,
        fill: &Fill<'_>,
    ) -> Result<Handle, String> {
        let profiling = crate::profile::profiling();
        let start = Instant::now();
        let mut stages = StagedUploads {
            uploads: 1,
            bytes: len as u64,
            ..Default::default()
        };
        let (handle, dst) = match self.kept.take(len) {
            Some((handle, ptr)) => {
                stages.reused = 1;
                stages.allocate = start.elapsed();
                // The context is current on this thread (set up by `new`).
                result::ctx::synchronize().map_err(|e| driver_error("cuCtxSynchronize", e))?;
                (handle, ptr)
            }
            None => {
                let handle = client.empty(len);
                let resource = client
                    .get_resource(handle.clone())
                    .map_err(|e| format!("pinned upload, device buffer: {e:?}"))?;
                let dst = resource.resource();
                if (dst.size as usize) < len {
                    return Err(format!(
                        "pinned upload: device buffer of {} bytes for {len}",
                        dst.size
                    ));
                }
                let ptr = dst.ptr;
                stages.allocate = start.elapsed();
                burn_std::future::block_on(client.sync())
                    .map_err(|e| format!("pinned upload, waiting for the device: {e:?}"))?;
                self.kept.keep(&handle, ptr, len);
                (handle, ptr)
            }
        };
        stages.wait = start.elapsed() - stages.allocate;

        let copied = self.copy_chunks(dst, len, fill, profiling, &mut stages);
        if copied.is_err() {
            // A copy may still be in flight: let it finish before the device buffer (held by
            // `handle`) and the slots can be used again.
            // SAFETY: the stream was created by `new` and is alive.
            let _ = unsafe { result::stream::synchronize(self.stream) };
        }
        copied?;
        if profiling {
            stages.total = start.elapsed();
            crate::profile::record_staged_upload(&stages);
        }
        Ok(handle)
    }

    /// Fills the slots chunk by chunk from `fill` and copies each to `dst + offset` on our
    /// stream, overlapping the fill of one slot with the copy of the other; returns when every
    /// copy has completed, adding the fill and bus times to `stages`.
    fn copy_chunks(
        &mut self,
        dst: sys::CUdeviceptr,
        len: usize,
        fill: &Fill<'_>,
        profiling: bool,
        stages: &mut StagedUploads,
    ) -> Result<(), String> {
        // Per slot, the bytes of its copy in flight.
        let mut pending = [None; 2];
        for (chunk, (offset, n)) in chunks(len, self.slot_bytes).enumerate() {
            let slot = chunk % 2;
            if let Some(bytes) = pending[slot] {
                stages.add_copy(bytes, self.wait(slot, profiling)?);
            }
            // SAFETY: the slot holds slot_bytes + TAIL_BYTES >= n bytes, only this thread uses it, and its
            // last copy has completed (waited for above).
            let host = unsafe { std::slice::from_raw_parts_mut(self.slots[slot], n) };
            let fill_start = Instant::now();
            fill(host, offset);
            stages.fill += fill_start.elapsed();
            // SAFETY: `dst` holds at least `len` bytes and the caller keeps it allocated until
            // every copy has completed; the slot is pinned and is not written again before its
            // end event completes.
            unsafe {
                result::event::record(self.starts[slot], self.stream)
                    .map_err(|e| driver_error("cuEventRecord", e))?;
                result::memcpy_htod_async(dst + offset as u64, &*host, self.stream)
                    .map_err(|e| driver_error("cuMemcpyHtoDAsync", e))?;
                result::event::record(self.ends[slot], self.stream)
                    .map_err(|e| driver_error("cuEventRecord", e))?;
            }
            pending[slot] = Some(n);
            // The next chunk's fill may outlast the device thread's spinning.
            crate::wake::wake(self.device_id());
        }
        for (slot, pending) in pending.into_iter().enumerate() {
            if let Some(bytes) = pending {
                stages.add_copy(bytes, self.wait(slot, profiling)?);
            }
        }
        Ok(())
    }

    /// Waits for the last copy out of `slot`; returns its time on the bus when profiling.
    fn wait(&self, slot: usize, profiling: bool) -> Result<Duration, String> {
        // SAFETY: both events were recorded on our stream around the slot's last copy.
        unsafe {
            result::event::synchronize(self.ends[slot])
                .map_err(|e| driver_error("cuEventSynchronize", e))?;
            if !profiling {
                return Ok(Duration::ZERO);
            }
            let ms = result::event::elapsed(self.starts[slot], self.ends[slot])
                .map_err(|e| driver_error("cuEventElapsedTime", e))?;
            Ok(Duration::from_secs_f64(f64::from(ms) / 1e3))
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: everything here was created by `new` and is released once; errors at thread
        // exit have nowhere to go.
        unsafe {
            let _ = result::stream::synchronize(self.stream);
            for i in 0..2 {
                if !self.slots[i].is_null() {
                    let _ = result::free_host(self.slots[i] as *mut c_void);
                }
                for event in [self.starts[i], self.ends[i]] {
                    if !event.is_null() {
                        let _ = result::event::destroy(event);
                    }
                }
            }
            let _ = result::stream::destroy(self.stream);
        }
    }
}
