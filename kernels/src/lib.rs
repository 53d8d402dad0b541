//! CubeCL kernels of burn-hetero, generic over the CubeCL runtime.
//!
//! conv2d forward as an implicit GEMM (`M = N*OH*OW` output pixels, `N = OC/groups` output
//! channels per group, `K = (C/groups)*KH*KW`), with f32, f16 or bf16 operands, sums always in
//! f32, an optional f32 bias fused in the epilogue, and an f32 or f16 output. The operands are
//! read as stored, or from f32 buffers and rounded to f16/bf16 as they are loaded
//! ([`ConvTypes::with_storage`]). Layouts are Burn's: NCHW input and output, OIHW weight, all
//! contiguous. Stride, padding, dilation and groups are supported. Two paths ([`ConvPath`]):
//!
//! - `Tiled`: a portable kernel (shared-memory tiles, a register tile per unit, f32 arithmetic)
//!   that runs on every CubeCL runtime, including Vulkan on a CPU driver;
//! - `Cmma`: matrix-unit kernels built on CubeCL's `cmma` fragments (16x16x16, f16/bf16
//!   operands, f32 accumulators) for devices that report that configuration: a general one
//!   (im2col gathered per reduction step, any stride), and on CUDA a faster one for stride 1
//!   that stages the input once per 16-channel chunk and reads every tap from it
//!   ([`ConvPathUsed::CmmaPatch`]).
//!
//! `Auto` takes the cmma path on CUDA where it is supported, else the tiled one. Each call is
//! one kernel launch.
//!
//! The same kernels compute a conv's gradients on the operands as stored: the input gradient
//! as a forward conv with the weight read transposed and flipped
//! ([`conv2d_forward_flipped_async`]), and the weight gradient from the NCHW input and output
//! gradient, its reduction split over parts of the batch ([`conv2d_weight_grad_async`]).
//!
//! The entry points are [`conv2d_forward`] (which flushes CubeCL's queue so that a launch
//! failure comes back as an error) and [`conv2d_forward_async`] (no flush); they take raw
//! CubeCL handles and a [`Conv2dProblem`], and return a [`ConvError`] (never panic) for bad
//! input, unsupported types or paths, and launch failures.
//!
//! ```no_run
//! use burn_hetero_kernels::*;
//! # fn run<R: cubecl::Runtime>(client: &cubecl::prelude::ComputeClient<R>,
//! #     x: &cubecl::server::Handle, w: &cubecl::server::Handle, y: &cubecl::server::Handle)
//! # -> Result<(), ConvError> {
//! let problem = Conv2dProblem::new(8, 16, [32, 32], 16, [3, 3]).with_padding([1, 1]);
//! let buffers = Conv2dBuffers { input: x, weight: w, bias: None, output: y };
//! let used = conv2d_forward(client, buffers, &problem, ConvTypes::new(OperandType::F16), ConvPath::Auto)?;
//! # let _ = used; Ok(()) }
//! ```
#![warn(missing_docs)]

mod cmma;
mod gather;
mod grad;
mod launch;
mod patch;
mod problem;
mod shape;
mod tiled;

pub use cmma::CmmaConfig;
pub use grad::{WeightGradBuffers, WeightGradTypes, conv2d_weight_grad_async, weight_grad_splits};
pub use launch::{
    Conv2dBuffers, ConvPath, ConvPathUsed, ConvTypes, OperandType, OutputType, auto_path,
    cmma_path_kernel, cmma_supported, conv2d_forward, conv2d_forward_async,
    conv2d_forward_flipped_async, operand_supported, storage_supported,
};
pub use problem::{Conv2dProblem, ConvError, MAX_ELEMENTS};
pub use tiled::TiledConfig;
