#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

/// Implements a trait of fused ops whose methods all have defaults in tensor ops (`norm`,
/// `optim`) for the backends `Hetero` runs on or beside: burn-ndarray, burn-flex and the
/// CubeCL backends.
macro_rules! impl_with_defaults {
    ($trait:path) => {
        impl $trait for burn_ndarray::NdArray<f32> {}
        impl $trait for burn_flex::Flex {}
        impl<R, F, I, BT> $trait for burn_cubecl::CubeBackend<R, F, I, BT>
        where
            R: burn_cubecl::CubeRuntime,
            F: burn_cubecl::FloatElement,
            I: burn_cubecl::IntElement,
            BT: burn_cubecl::BoolElement,
        {
        }
    };
}

mod accelerator;
mod backend;
pub mod cast;
mod deferred;
mod device;
mod fallback;
mod held;
mod memory;
pub mod norm;
mod offload;
mod ops;
pub mod optim;
mod paired;
#[cfg(feature = "cuda")]
mod pinned;
mod placement;
pub mod pool;
pub mod profile;
pub mod softmax;
pub mod spin;
mod stats;
pub mod sums;
#[cfg(feature = "trace-ops")]
mod trace;
mod tuning;
mod uploads;
mod wake;
#[cfg(feature = "trace-ops")]
pub use trace::ops_called;

pub use accelerator::{Accelerator, Download};
pub use backend::Hetero;
pub use deferred::{deferred_read_fallbacks, inject_deferred_read_failure};
pub use device::AcceleratorInfo;
pub use fallback::inject_accelerator_failure;
/// conv2d and its gradients of f32 burn-flex tensors on the CPU, as `Hetero<Flex, _>` runs the
/// convs placed there.
pub use ops::conv as cpu_conv;
pub use placement::{
    ENV_ACCELERATOR, ENV_PLACEMENT, ENV_STRICT, HeteroConfig, OpKind, Placement, Precision,
};
pub use stats::{OpCounters, Ran, Stats, reset_stats, stats};

/// The default CPU backend.
pub type NdArray = burn_ndarray::NdArray<f32>;

/// The CUDA accelerator backend (burn-cuda's CubeCL backend, without fusion).
#[cfg(feature = "cuda")]
pub type CudaAccelerator = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;

/// The Vulkan accelerator backend (burn-wgpu's CubeCL backend on Vulkan/SPIR-V, without fusion).
#[cfg(feature = "vulkan")]
pub type VulkanAccelerator = burn_cubecl::CubeBackend<cubecl::wgpu::WgpuRuntime, f32, i32, u8>;

/// `Hetero` with convolutions on a CUDA GPU; the CPU backend defaults to burn-ndarray.
#[cfg(feature = "cuda")]
pub type HeteroCuda<C = NdArray> = Hetero<C, CudaAccelerator>;

/// `Hetero` with convolutions on a Vulkan device; the CPU backend defaults to burn-ndarray.
#[cfg(feature = "vulkan")]
pub type HeteroVulkan<C = NdArray> = Hetero<C, VulkanAccelerator>;
