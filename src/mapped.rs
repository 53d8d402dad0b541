//! Moving a staging slot's bytes to the device with a kernel that reads the pinned slot through
//! its mapped device address, instead of a copy-engine copy.
//!
//! A copy-engine copy pays a fixed cost on the bus besides its bytes, which weighs on the
//! sizes a training step uploads one op at a time (ResNet20's input gradients at batch 128
//! upload 1 MiB each): one PyTorch copy from pinned memory moves 36 GB/s at 1 MiB against 53
//! from ~64 MiB (`scripts/pinned_copy_rates.py`). Here every thread loads 16-byte vectors
//! straight from host memory and stores them to the device buffer; many loads are in flight at
//! once across the multiprocessors, so the transfer starts at once. Which sizes go this way is
//! measured (`scripts/mapped_copy_rates.py`, `BURN_HETERO_MAPPED_UPLOAD_MAX_KIB`).
//!
//! The kernel is compiled by NVRTC once per thread that stages uploads; if that or mapping
//! the slots fails, the copies stay on the copy engine and the cause is logged once.

use crate::fallback::warn_once;
use cudarc::driver::{result, sys};
use std::ffi::{CString, c_void};

/// The copy: 16-byte vectors over a grid-stride loop, then the last `bytes % 16` bytes one per
/// thread of block 0. Both addresses are 16-byte aligned (checked by the caller).
const SOURCE: &str = r#"
extern "C" __global__ void copy_mapped(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                       unsigned long long bytes) {
    unsigned long long vectors = bytes / 16;
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < vectors; i += step) {
        dst[i] = src[i];
    }
    unsigned int tail = (unsigned int)(bytes % 16);
    if (blockIdx.x == 0 && threadIdx.x < tail) {
        const unsigned char* s = (const unsigned char*)(src + vectors);
        unsigned char* d = (unsigned char*)(dst + vectors);
        d[threadIdx.x] = s[threadIdx.x];
    }
}
"#;

/// Threads per block.
const THREADS: u32 = 256;

/// Blocks per multiprocessor at most: enough loads in flight to cover the bus's latency.
const BLOCKS_PER_SM: u32 = 4;

/// Largest chunk that goes through the kernel by default, in bytes.
const MAX_BYTES: usize = 2 << 20;

/// Environment variable setting the largest chunk, in KiB, that the kernel moves (0: none, all
/// chunks go on the copy engine), to measure the two against each other.
const ENV_MAX_KIB: &str = "BURN_HETERO_MAPPED_UPLOAD_MAX_KIB";

/// Largest chunk that goes through the kernel: [`MAX_BYTES`], or as [`ENV_MAX_KIB`] sets (read
/// once).
pub(crate) fn max_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        crate::tuning::usize_from_env(ENV_MAX_KIB, "KiB", 0..=65_536, MAX_BYTES >> 10) << 10
    })
}

/// The loaded kernel and its launch shape on this device.
pub(crate) struct MappedCopy {
    module: sys::CUmodule,
    function: sys::CUfunction,
    max_blocks: u32,
}

impl MappedCopy {
    /// Compiles and loads the kernel for the current context's `device`; `None` (logged once)
    /// when it cannot be, or when the kernel is turned off.
    pub(crate) fn new(device: sys::CUdevice) -> Option<Self> {
        if max_bytes() == 0 {
            return None;
        }
        match Self::load(device) {
            Ok(copy) => Some(copy),
            Err(e) => {
                warn_once(
                    "mapped-upload",
                    &format!(
                        "the upload kernel that reads pinned memory is unavailable ({e}); every \
                         staged upload goes through the copy engine"
                    ),
                );
                None
            }
        }
    }

    fn load(device: sys::CUdevice) -> Result<Self, String> {
        let ptx = cudarc::nvrtc::compile_ptx(SOURCE).map_err(|e| format!("NVRTC: {e:?}"))?;
        let image = CString::new(ptx.to_src()).map_err(|e| format!("PTX text: {e}"))?;
        // SAFETY: a context is current on this thread (the staging's); the image is a
        // NUL-terminated PTX text that outlives the call.
        let module = unsafe { result::module::load_data(image.as_ptr() as *const c_void) }
            .map_err(|e| format!("cuModuleLoadData: {e:?}"))?;
        // SAFETY: `module` was just loaded and is unloaded only in `drop`.
        let function =
            unsafe { result::module::get_function(module, CString::new("copy_mapped").unwrap()) };
        let function = match function {
            Ok(function) => function,
            Err(e) => {
                // SAFETY: loaded above, not used again.
                let _ = unsafe { result::module::unload(module) };
                return Err(format!("cuModuleGetFunction: {e:?}"));
            }
        };
        // SAFETY: `device` is a valid device handle.
        let sms = unsafe {
            result::device::get_attribute(
                device,
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            )
        }
        .map_err(|e| format!("multiprocessor count: {e:?}"))?;
        Ok(MappedCopy {
            module,
            function,
            max_blocks: (sms.max(1) as u32) * BLOCKS_PER_SM,
        })
    }

    /// Whether a chunk of `bytes` to `dst` goes through the kernel.
    pub(crate) fn takes(&self, dst: sys::CUdeviceptr, bytes: usize) -> bool {
        bytes <= max_bytes() && dst.is_multiple_of(16)
    }

    /// Queues the copy of `bytes` from the mapped pinned address `src` to `dst` on `stream`.
    ///
    /// # Safety
    /// `src` must be the device address of pinned memory holding `bytes` bytes and `dst` a device
    /// buffer of at least `bytes` bytes, both 16-byte aligned and kept alive, and `src` not
    /// written, until the copy completes on `stream`.
    pub(crate) unsafe fn launch(
        &self,
        src: sys::CUdeviceptr,
        dst: sys::CUdeviceptr,
        bytes: usize,
        stream: sys::CUstream,
    ) -> Result<(), String> {
        let vectors = (bytes / 16) as u64;
        let blocks = vectors
            .div_ceil(u64::from(THREADS))
            .clamp(1, u64::from(self.max_blocks));
        let mut src = src;
        let mut dst = dst;
        let mut len = bytes as u64;
        let mut params = [
            &mut src as *mut sys::CUdeviceptr as *mut c_void,
            &mut dst as *mut sys::CUdeviceptr as *mut c_void,
            &mut len as *mut u64 as *mut c_void,
        ];
        // SAFETY: the function takes (const uint4*, uint4*, unsigned long long), passed by
        // address as the driver expects; the caller guarantees the buffers.
        unsafe {
            result::launch_kernel(
                self.function,
                (blocks as u32, 1, 1),
                (THREADS, 1, 1),
                0,
                stream,
                &mut params,
            )
        }
        .map_err(|e| format!("cuLaunchKernel: {e:?}"))
    }
}

impl Drop for MappedCopy {
    fn drop(&mut self) {
        // SAFETY: loaded by `load`, unloaded once; the staging waits for its stream first.
        let _ = unsafe { result::module::unload(self.module) };
    }
}
