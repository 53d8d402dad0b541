//! The runtime sizes that the kernels receive, shared by both paths.

use cubecl::prelude::*;

use crate::problem::Conv2dProblem;

/// Sizes of a validated problem, as 32-bit kernel arguments. Everything that varies from call to
/// call of one layer (batch, spatial sizes, channels) is here, so that a layer compiles once per
/// kernel size and tile configuration.
#[derive(CubeLaunch, CubeType, Clone, Copy, Debug)]
pub(crate) struct ConvShape {
    /// Input channels (all groups), `C`.
    pub channels: u32,
    /// Input height `H`.
    pub in_h: u32,
    /// Input width `W`.
    pub in_w: u32,
    /// Output channels (all groups), `OC`.
    pub out_channels: u32,
    /// Output width `OW`.
    pub out_w: u32,
    /// `OH*OW`.
    pub out_hw: u32,
    /// Stride along the height.
    pub stride_h: u32,
    /// Stride along the width.
    pub stride_w: u32,
    /// Padding along the height.
    pub pad_h: u32,
    /// Padding along the width.
    pub pad_w: u32,
    /// Dilation along the height.
    pub dil_h: u32,
    /// Dilation along the width.
    pub dil_w: u32,
    /// Input channels per group, `C/groups`.
    pub channels_per_group: u32,
    /// Output channels per group, `OC/groups`.
    pub out_channels_per_group: u32,
    /// GEMM rows, `N*OH*OW`.
    pub gemm_m: u32,
    /// GEMM reduction length, `(C/groups)*KH*KW`.
    pub gemm_k: u32,
    /// Kernel height `KH`.
    pub kernel_h: u32,
    /// Kernel width `KW`.
    pub kernel_w: u32,
    /// The reduction step `bk` of the kernel decomposed as `(c, kh, kw)`:
    /// `bk = step_c*KH*KW + step_kh*KW + step_kw`, so that a unit advances its reduction
    /// indices without dividing.
    pub step_c: u32,
    /// See `step_c`.
    pub step_kh: u32,
    /// See `step_c`.
    pub step_kw: u32,
}

impl ConvShape {
    /// The launch argument of a problem that passed [`Conv2dProblem::validate`] (so every value
    /// fits in 31 bits), for a kernel whose reduction step is `bk`.
    pub(crate) fn launch_arg<R: Runtime>(problem: &Conv2dProblem, bk: u32) -> ConvShapeLaunch<R> {
        let v = |x: usize| x as u32;
        let (kh, kw) = (problem.kernel_height, problem.kernel_width);
        let bk = bk as usize;
        ConvShapeLaunch::new(
            v(problem.in_channels),
            v(problem.in_height),
            v(problem.in_width),
            v(problem.out_channels),
            v(problem.out_width()),
            v(problem.out_height() * problem.out_width()),
            v(problem.stride[0]),
            v(problem.stride[1]),
            v(problem.padding[0]),
            v(problem.padding[1]),
            v(problem.dilation[0]),
            v(problem.dilation[1]),
            v(problem.in_channels_per_group()),
            v(problem.out_channels_per_group()),
            v(problem.gemm_m()),
            v(problem.gemm_k()),
            v(kh),
            v(kw),
            v(bk / (kh * kw)),
            v(bk % (kh * kw) / kw),
            v(bk % kw),
        )
    }
}
