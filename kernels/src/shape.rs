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
    /// Input offset between images (`C*H*W` for a dense NCHW input).
    pub x_img: u32,
    /// Input offset between channels (`H*W` for a dense NCHW input).
    pub x_chan: u32,
    /// Weight offset between groups (`OC/groups * K` for a dense OIHW weight).
    pub w_group: u32,
    /// Weight offset between the output channels of a group (`K` for a dense OIHW weight).
    pub w_out: u32,
    /// Weight offset between input channels, read where the weight is not dense
    /// ([`WeightRead::strided`]); `KH*KW` for a dense OIHW weight.
    pub w_chan: u32,
    /// Output offset between images (`OC*OH*OW` for a dense NCHW output).
    pub o_img: u32,
    /// Output offset between channels (`OH*OW` for a dense NCHW output).
    pub o_chan: u32,
}

/// How the kernels read the weight (compile-time).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(crate) struct WeightRead {
    /// The reduction index `k = (c, kh, kw)` is split into the channel (offset `w_chan`) and
    /// the tap (contiguous); otherwise `k` itself is the offset (a dense OIHW row).
    pub strided: bool,
    /// The taps are read in reverse order (a kernel flipped along both axes).
    pub flipped: bool,
}

impl WeightRead {
    /// A dense OIHW weight.
    pub(crate) const DENSE: WeightRead = WeightRead {
        strided: false,
        flipped: false,
    };
}

/// Where a kernel reads its operands and writes its output, and how much of the output it
/// computes: the problem's own dense layouts ([`Layout::dense`]), or the views that the
/// gradients read (transposed operands, a cropped output). Offsets in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Output height and width computed (at most the problem's).
    pub out: [usize; 2],
    /// See [`ConvShape::x_img`].
    pub x_img: usize,
    /// See [`ConvShape::x_chan`].
    pub x_chan: usize,
    /// See [`ConvShape::w_group`].
    pub w_group: usize,
    /// See [`ConvShape::w_out`].
    pub w_out: usize,
    /// See [`ConvShape::w_chan`].
    pub w_chan: usize,
    /// See [`ConvShape::o_img`].
    pub o_img: usize,
    /// See [`ConvShape::o_chan`].
    pub o_chan: usize,
    /// How the weight is read.
    pub weight: WeightRead,
}

impl Layout {
    /// The problem's layouts: dense NCHW input and output, dense OIHW weight.
    pub(crate) fn dense(problem: &Conv2dProblem) -> Self {
        let (oh, ow) = (problem.out_height(), problem.out_width());
        Layout {
            out: [oh, ow],
            x_img: problem.in_channels * problem.in_height * problem.in_width,
            x_chan: problem.in_height * problem.in_width,
            w_group: problem.out_channels_per_group() * problem.gemm_k(),
            w_out: problem.gemm_k(),
            w_chan: problem.kernel_height * problem.kernel_width,
            o_img: problem.out_channels * oh * ow,
            o_chan: oh * ow,
            weight: WeightRead::DENSE,
        }
    }

    /// The problem's layouts with the weight read transposed and flipped from an OIHW buffer
    /// `[C, OC, KH, KW]` (one group): `w'[o][c][y][x] = buffer[c][o][KH-1-y][KW-1-x]`.
    pub(crate) fn flipped_weight(problem: &Conv2dProblem) -> Self {
        let taps = problem.kernel_height * problem.kernel_width;
        Layout {
            w_group: 0,
            w_out: taps,
            w_chan: problem.out_channels * taps,
            weight: WeightRead {
                strided: true,
                flipped: true,
            },
            ..Self::dense(problem)
        }
    }

    /// How the patch kernel reads the weight of a call in this layout, `None` where it cannot:
    /// it reads dense inputs and outputs, and the weight dense or flipped (the layouts of
    /// [`Layout::dense`] and [`Layout::flipped_weight`]).
    pub(crate) fn patch_read(&self, problem: &Conv2dProblem) -> Option<WeightRead> {
        let dense = Self::dense(problem);
        let flipped = Self::flipped_weight(problem);
        if *self == dense {
            Some(dense.weight)
        } else if problem.groups == 1 && *self == flipped {
            Some(flipped.weight)
        } else {
            None
        }
    }

    /// GEMM rows computed, `N * out[0] * out[1]`.
    pub(crate) fn gemm_m(&self, problem: &Conv2dProblem) -> usize {
        problem.batch * self.out[0] * self.out[1]
    }
}

impl ConvShape {
    /// The launch argument of a problem that passed [`Conv2dProblem::validate`] (so every value
    /// fits in 31 bits), its operands and output in `layout` (whose offsets the caller has
    /// checked to fit in 31 bits), for a kernel whose reduction step is `bk`.
    pub(crate) fn launch_arg<R: Runtime>(
        problem: &Conv2dProblem,
        layout: &Layout,
        bk: u32,
    ) -> ConvShapeLaunch<R> {
        let v = |x: usize| x as u32;
        let (kh, kw) = (problem.kernel_height, problem.kernel_width);
        let bk = bk as usize;
        ConvShapeLaunch::new(
            v(problem.in_channels),
            v(problem.in_height),
            v(problem.in_width),
            v(problem.out_channels),
            v(layout.out[1]),
            v(layout.out[0] * layout.out[1]),
            v(problem.stride[0]),
            v(problem.stride[1]),
            v(problem.padding[0]),
            v(problem.padding[1]),
            v(problem.dilation[0]),
            v(problem.dilation[1]),
            v(problem.in_channels_per_group()),
            v(problem.out_channels_per_group()),
            v(layout.gemm_m(problem)),
            v(problem.gemm_k()),
            v(kh),
            v(kw),
            v(bk / (kh * kw)),
            v(bk % (kh * kw) / kw),
            v(bk % kw),
            v(layout.x_img),
            v(layout.x_chan),
            v(layout.w_group),
            v(layout.w_out),
            v(layout.w_chan),
            v(layout.o_img),
            v(layout.o_chan),
        )
    }
}
