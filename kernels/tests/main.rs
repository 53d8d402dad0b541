//! The tests of burn-hetero-kernels: one binary.
//!
//! - `grad`: the gradient entry points (a transposed, flipped weight; the weight gradient in
//!   partial sums) against f64 references, run by the wgpu and cuda tests;
//! - `validation`: bad problems and buffers are refused with a clear error;
//! - `wgpu`: the conv grid on the default wgpu device (Vulkan; lavapipe on CI) against an f64
//!   reference, f32 and f16 operands (bf16 where the device stores it), both output types, the
//!   tiled path, and the cmma path where the device has it;
//! - `cuda`: `#[ignore]`d `cuda_*` tests for the GPU machine (`--ignored cuda_`): the same grid
//!   and larger shapes on CUDA, cmma and tiled paths, f16 and bf16.
//!
//! Set `BURN_HETERO_TEST_SEED` to replay a run's random inputs (each run prints its seed).

mod common;
mod cuda;
mod grad;
mod validation;
mod wgpu;
