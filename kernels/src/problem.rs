//! The description of a conv2d problem, its validation and its errors.

use core::fmt;

/// Largest number of elements of any tensor of a problem (input, weight, output) and of the GEMM
/// dimensions: the kernels index with 32-bit integers.
pub const MAX_ELEMENTS: usize = i32::MAX as usize;

/// A 2D convolution: its sizes and options, independent of any buffer or element type.
///
/// Layouts are Burn's: input `[batch, in_channels, in_height, in_width]` (NCHW), weight
/// `[out_channels, in_channels / groups, kernel_height, kernel_width]` (OIHW), output
/// `[batch, out_channels, out_height, out_width]` (NCHW), all contiguous; bias `[out_channels]`.
/// `stride`, `padding` and `dilation` are `[height, width]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv2dProblem {
    /// Batch size `N`.
    pub batch: usize,
    /// Input channels `C` (all groups together).
    pub in_channels: usize,
    /// Input height `H`.
    pub in_height: usize,
    /// Input width `W`.
    pub in_width: usize,
    /// Output channels `OC` (all groups together).
    pub out_channels: usize,
    /// Kernel height `KH`.
    pub kernel_height: usize,
    /// Kernel width `KW`.
    pub kernel_width: usize,
    /// Stride `[height, width]`.
    pub stride: [usize; 2],
    /// Zero padding on each side, `[height, width]`.
    pub padding: [usize; 2],
    /// Dilation `[height, width]`.
    pub dilation: [usize; 2],
    /// Number of groups; `in_channels` and `out_channels` must both be multiples of it.
    pub groups: usize,
}

impl Conv2dProblem {
    /// A problem with stride 1, no padding, dilation 1 and one group; change the options with
    /// the `with_*` methods or by setting the fields.
    pub fn new(
        batch: usize,
        in_channels: usize,
        in_size: [usize; 2],
        out_channels: usize,
        kernel_size: [usize; 2],
    ) -> Self {
        Self {
            batch,
            in_channels,
            in_height: in_size[0],
            in_width: in_size[1],
            out_channels,
            kernel_height: kernel_size[0],
            kernel_width: kernel_size[1],
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }

    /// The same problem with another stride `[height, width]`.
    pub fn with_stride(mut self, stride: [usize; 2]) -> Self {
        self.stride = stride;
        self
    }

    /// The same problem with another padding `[height, width]`.
    pub fn with_padding(mut self, padding: [usize; 2]) -> Self {
        self.padding = padding;
        self
    }

    /// The same problem with another dilation `[height, width]`.
    pub fn with_dilation(mut self, dilation: [usize; 2]) -> Self {
        self.dilation = dilation;
        self
    }

    /// The same problem with another number of groups.
    pub fn with_groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    /// Output size along one axis, `None` when the dilated kernel does not fit in the padded
    /// input or an intermediate overflows.
    fn out_size(
        input: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
    ) -> Option<usize> {
        let padded = input.checked_add(padding.checked_mul(2)?)?;
        let span = dilation
            .checked_mul(kernel.checked_sub(1)?)?
            .checked_add(1)?;
        let room = padded.checked_sub(span)?;
        room.checked_div(stride)?.checked_add(1)
    }

    /// Output height `(H + 2*pad - dil*(KH-1) - 1) / stride + 1`, or 0 when the problem is
    /// invalid along the height (see [`validate`](Self::validate)).
    pub fn out_height(&self) -> usize {
        Self::out_size(
            self.in_height,
            self.kernel_height,
            self.stride[0],
            self.padding[0],
            self.dilation[0],
        )
        .unwrap_or(0)
    }

    /// Output width `(W + 2*pad - dil*(KW-1) - 1) / stride + 1`, or 0 when the problem is
    /// invalid along the width (see [`validate`](Self::validate)).
    pub fn out_width(&self) -> usize {
        Self::out_size(
            self.in_width,
            self.kernel_width,
            self.stride[1],
            self.padding[1],
            self.dilation[1],
        )
        .unwrap_or(0)
    }

    /// Input channels per group, `C / groups` (0 when `groups` is 0).
    pub fn in_channels_per_group(&self) -> usize {
        self.in_channels.checked_div(self.groups).unwrap_or(0)
    }

    /// Output channels per group, `OC / groups` (0 when `groups` is 0).
    pub fn out_channels_per_group(&self) -> usize {
        self.out_channels.checked_div(self.groups).unwrap_or(0)
    }

    /// Element count of the input, `N*C*H*W` (saturating, like every size of an invalid
    /// problem).
    pub fn input_len(&self) -> usize {
        product(&self.input_shape())
    }

    /// Element count of the weight, `OC*(C/groups)*KH*KW`.
    pub fn weight_len(&self) -> usize {
        product(&self.weight_shape())
    }

    /// Element count of the output, `N*OC*OH*OW`.
    pub fn output_len(&self) -> usize {
        product(&self.output_shape())
    }

    /// Shape of the input, `[N, C, H, W]`.
    pub fn input_shape(&self) -> [usize; 4] {
        [self.batch, self.in_channels, self.in_height, self.in_width]
    }

    /// Shape of the weight, `[OC, C/groups, KH, KW]`.
    pub fn weight_shape(&self) -> [usize; 4] {
        [
            self.out_channels,
            self.in_channels_per_group(),
            self.kernel_height,
            self.kernel_width,
        ]
    }

    /// Shape of the output, `[N, OC, OH, OW]`.
    pub fn output_shape(&self) -> [usize; 4] {
        [
            self.batch,
            self.out_channels,
            self.out_height(),
            self.out_width(),
        ]
    }

    /// Rows of the implicit GEMM (one per output pixel), `M = N*OH*OW`.
    pub fn gemm_m(&self) -> usize {
        product(&[self.batch, self.out_height(), self.out_width()])
    }

    /// Columns of the implicit GEMM of one group, `OC / groups`.
    pub fn gemm_n(&self) -> usize {
        self.out_channels_per_group()
    }

    /// Reduction length of the implicit GEMM, `K = (C/groups)*KH*KW`.
    pub fn gemm_k(&self) -> usize {
        product(&[
            self.in_channels_per_group(),
            self.kernel_height,
            self.kernel_width,
        ])
    }

    /// Floating-point operations of the convolution (a multiply-add counts 2), without the
    /// bias: `2*N*OC*OH*OW*(C/groups)*KH*KW` (saturating).
    pub fn flops(&self) -> u64 {
        [self.gemm_m(), self.out_channels, self.gemm_k()]
            .iter()
            .fold(2u64, |acc, &d| acc.saturating_mul(d as u64))
    }

    /// Checks that the problem describes a convolution that the kernels can compute. Never
    /// panics; every size that is zero, inconsistent or too large is an error that names it.
    pub fn validate(&self) -> Result<(), ConvError> {
        let sizes = [
            ("batch", self.batch),
            ("in_channels", self.in_channels),
            ("in_height", self.in_height),
            ("in_width", self.in_width),
            ("out_channels", self.out_channels),
            ("kernel_height", self.kernel_height),
            ("kernel_width", self.kernel_width),
            ("stride[0] (height)", self.stride[0]),
            ("stride[1] (width)", self.stride[1]),
            ("dilation[0] (height)", self.dilation[0]),
            ("dilation[1] (width)", self.dilation[1]),
            ("groups", self.groups),
        ];
        for (name, value) in sizes {
            if value == 0 {
                return Err(ConvError::ZeroSize { name });
            }
        }
        if !self.in_channels.is_multiple_of(self.groups) {
            return Err(ConvError::GroupsMismatch {
                name: "in_channels",
                channels: self.in_channels,
                groups: self.groups,
            });
        }
        if !self.out_channels.is_multiple_of(self.groups) {
            return Err(ConvError::GroupsMismatch {
                name: "out_channels",
                channels: self.out_channels,
                groups: self.groups,
            });
        }
        let axes = [
            (
                "height",
                self.in_height,
                self.kernel_height,
                self.stride[0],
                self.padding[0],
                self.dilation[0],
            ),
            (
                "width",
                self.in_width,
                self.kernel_width,
                self.stride[1],
                self.padding[1],
                self.dilation[1],
            ),
        ];
        for (axis, input, kernel, _stride, padding, dilation) in axes {
            // The kernels compute `out*stride + k*dilation - padding` in 32 bits.
            let padded = padding
                .checked_mul(2)
                .and_then(|p| p.checked_add(input))
                .unwrap_or(usize::MAX);
            if padded > MAX_ELEMENTS {
                return Err(ConvError::TooLarge {
                    what: "padded input extent",
                    elements: padded,
                });
            }
            let span = dilation
                .checked_mul(kernel - 1)
                .and_then(|s| s.checked_add(1))
                .unwrap_or(usize::MAX);
            if span > padded {
                return Err(ConvError::KernelTooLarge {
                    axis,
                    kernel,
                    dilation,
                    input,
                    padding,
                });
            }
        }
        let products: [(&'static str, &[usize]); 5] = [
            ("input", &self.input_shape()),
            ("weight", &self.weight_shape()),
            ("output", &self.output_shape()),
            (
                "implicit GEMM (N*OH*OW rows)",
                &[self.batch, self.out_height(), self.out_width()],
            ),
            (
                "implicit GEMM reduction ((C/groups)*KH*KW)",
                &[
                    self.in_channels_per_group(),
                    self.kernel_height,
                    self.kernel_width,
                ],
            ),
        ];
        for (what, dims) in products {
            let elements = product(dims);
            if elements > MAX_ELEMENTS {
                return Err(ConvError::TooLarge { what, elements });
            }
        }
        Ok(())
    }
}

/// Saturating product of sizes.
fn product(dims: &[usize]) -> usize {
    dims.iter().fold(1usize, |acc, &d| acc.saturating_mul(d))
}

impl fmt::Display for Conv2dProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "conv2d {}x{}x{}x{} -> {} channels, kernel {}x{}, stride {:?}, padding {:?}, dilation {:?}, groups {}",
            self.batch,
            self.in_channels,
            self.in_height,
            self.in_width,
            self.out_channels,
            self.kernel_height,
            self.kernel_width,
            self.stride,
            self.padding,
            self.dilation,
            self.groups
        )
    }
}

/// Why a convolution was not run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConvError {
    /// A size or option that must be positive is zero.
    ZeroSize {
        /// The field of [`Conv2dProblem`].
        name: &'static str,
    },
    /// A channel count is not a multiple of the number of groups.
    GroupsMismatch {
        /// `in_channels` or `out_channels`.
        name: &'static str,
        /// Its value.
        channels: usize,
        /// The number of groups.
        groups: usize,
    },
    /// The dilated kernel does not fit in the padded input: the output would be empty.
    KernelTooLarge {
        /// `height` or `width`.
        axis: &'static str,
        /// Kernel size along the axis.
        kernel: usize,
        /// Dilation along the axis.
        dilation: usize,
        /// Input size along the axis.
        input: usize,
        /// Padding on each side along the axis.
        padding: usize,
    },
    /// A tensor or GEMM dimension has more elements than the kernels' 32-bit indexing allows.
    TooLarge {
        /// Which tensor or dimension.
        what: &'static str,
        /// Its element count (`usize::MAX` when it overflowed).
        elements: usize,
    },
    /// A buffer is smaller than the problem needs.
    BufferTooSmall {
        /// `input`, `weight`, `bias` or `output` (`output_grad` and `partials` for a weight gradient).
        buffer: &'static str,
        /// Bytes the problem needs.
        needed: u64,
        /// Bytes the handle has.
        actual: u64,
    },
    /// The device cannot do what was asked (an element type it cannot store, no matrix units
    /// for the cmma path, too little shared memory...).
    Unsupported(String),
    /// CubeCL reported an error while compiling or launching the kernel.
    Launch(String),
}

impl fmt::Display for ConvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvError::ZeroSize { name } => {
                write!(f, "invalid conv2d: `{name}` is 0, it must be at least 1")
            }
            ConvError::GroupsMismatch {
                name,
                channels,
                groups,
            } => write!(
                f,
                "invalid conv2d: `{name}` ({channels}) is not a multiple of `groups` ({groups})"
            ),
            ConvError::KernelTooLarge {
                axis,
                kernel,
                dilation,
                input,
                padding,
            } => write!(
                f,
                "invalid conv2d: along the {axis}, the kernel ({kernel}, dilation {dilation}, spanning {}) \
                 is larger than the padded input ({input} + 2*{padding} = {})",
                dilation
                    .saturating_mul(kernel.saturating_sub(1))
                    .saturating_add(1),
                input.saturating_add(padding.saturating_mul(2))
            ),
            ConvError::TooLarge { what, elements } => {
                if *elements == usize::MAX {
                    write!(
                        f,
                        "conv2d too large: the {what} overflows (at most {MAX_ELEMENTS} elements)"
                    )
                } else {
                    write!(
                        f,
                        "conv2d too large: the {what} has {elements} elements, at most {MAX_ELEMENTS} are supported"
                    )
                }
            }
            ConvError::BufferTooSmall {
                buffer,
                needed,
                actual,
            } => write!(
                f,
                "conv2d buffer too small: `{buffer}` has {actual} bytes, the problem needs {needed}"
            ),
            ConvError::Unsupported(reason) => write!(f, "conv2d not supported here: {reason}"),
            ConvError::Launch(reason) => write!(f, "conv2d kernel launch failed: {reason}"),
        }
    }
}

impl std::error::Error for ConvError {}
