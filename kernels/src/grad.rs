//! The weight gradient of a conv as one launch of the forward kernels, on the operands as they
//! are stored.
//!
//! For one group, `dW[o][c][y][x] = sum over (img, oh, ow) of dY[img][o][oh][ow] *
//! X[img][c][oh*s - p + y*d][ow*s - p + x*d]`: a conv whose "images" are the input channels
//! `c`, whose "channels" are the images, whose kernel is the output gradient (`OH x OW` taps)
//! and whose output pixels are the weight's taps, with stride and dilation swapped. The
//! kernels read that conv straight from the NCHW input and output gradient (a transposed view
//! of each, through the offsets of [`Layout`]), compute only the `KH x KW` taps of its output
//! that the weight has, and write them in OIHW order.
//!
//! Its reduction (`N*OH*OW` long) is split into `splits` equal parts of the batch, run as the
//! groups of that conv so that enough cubes fill a large GPU (few output tiles: `C*KH*KW` by
//! `OC`); each part writes its own partial gradient, and the caller sums them.

use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::launch::{Call, KernelTypes, require_one_group};
use crate::problem::{Conv2dProblem, ConvError, MAX_ELEMENTS};
use crate::shape::{Layout, WeightRead};
use crate::{ConvPath, ConvPathUsed, OperandType, OutputType};

/// The device buffers of a weight gradient: raw CubeCL handles, contiguous.
#[derive(Debug, Clone, Copy)]
pub struct WeightGradBuffers<'a> {
    /// The conv's input `[N, C, H, W]`, of [`WeightGradTypes::input`].
    pub input: &'a Handle,
    /// The gradient of the conv's output `[N, OC, OH, OW]`, of
    /// [`WeightGradTypes::output_grad`].
    pub output_grad: &'a Handle,
    /// f32 `[splits, OC, C, KH, KW]`: part `s` holds the weight gradient of images
    /// `s*N/splits ..`, `(s+1)*N/splits` (their sum is the gradient). Fully overwritten.
    pub partials: &'a Handle,
}

/// Element types of a weight gradient: the products' operands, and the types of the two
/// buffers, each the operand type or a type the kernel rounds to it as it loads (f32, or f16
/// for bf16 operands: an input kept at the forward's f16 feeds a bf16 gradient as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WeightGradTypes {
    /// Type of the products' operands.
    pub operand: OperandType,
    /// Type of the input buffer.
    pub input: OperandType,
    /// Type of the output-gradient buffer.
    pub output_grad: OperandType,
}

impl WeightGradTypes {
    /// Both buffers of the operand type.
    pub fn new(operand: OperandType) -> Self {
        Self {
            operand,
            input: operand,
            output_grad: operand,
        }
    }
}

/// Whether a buffer of `storage` can feed operands of `operand`: the same type, f32, or f16
/// for bf16 (its values then rounded on to bf16, as a cast on the device would).
fn reads_as(storage: OperandType, operand: OperandType) -> bool {
    storage == operand
        || storage == OperandType::F32
        || (storage == OperandType::F16 && operand == OperandType::BF16)
}

/// Into how many parts of the batch the weight gradient of `problem` is best split (see the
/// module documentation): a divisor of the batch with at least 512 values in each part's
/// reduction, at most 32 parts.
pub fn weight_grad_splits(problem: &Conv2dProblem) -> usize {
    /// The shortest reduction worth a part of its own.
    const MIN_SPLIT_REDUCTION: usize = 512;
    /// The most parts: enough tiles to fill the GPU, while the partial sums stay small.
    const MAX_SPLITS: usize = 32;
    let batch = problem.batch;
    let out_hw = problem.out_height() * problem.out_width();
    let most = (batch.saturating_mul(out_hw) / MIN_SPLIT_REDUCTION).clamp(1, MAX_SPLITS);
    (1..=most.min(batch))
        .rev()
        .find(|s| batch.is_multiple_of(*s))
        .unwrap_or(1)
}

/// The weight gradient of the conv `problem` (one group) from its input and output gradient,
/// in `splits` partial sums over equal parts of the batch (`splits` divides the batch; see
/// [`weight_grad_splits`]), sums in f32: one launch, no flush (a compilation or launch
/// failure is reported at the stream's next flush, sync or read).
///
/// `path` as for the forward: `Auto` takes the general cmma kernel on CUDA where cmma
/// supports the operand type, else the tiled kernel. Returns the kernel that ran; never
/// panics on bad input.
pub fn conv2d_weight_grad_async<R: Runtime>(
    client: &ComputeClient<R>,
    buffers: WeightGradBuffers<'_>,
    problem: &Conv2dProblem,
    types: WeightGradTypes,
    splits: usize,
    path: ConvPath,
) -> Result<ConvPathUsed, ConvError> {
    problem.validate()?;
    require_one_group(problem, "the weight gradient kernel")?;
    for (what, storage) in [
        ("input", types.input),
        ("output gradient", types.output_grad),
    ] {
        if !reads_as(storage, types.operand) {
            return Err(ConvError::Unsupported(format!(
                "{:?} operands read from a {storage:?} {what} (it holds the operand type, f32, \
                 or f16 for bf16)",
                types.operand
            )));
        }
    }
    if splits == 0 || !problem.batch.is_multiple_of(splits) {
        return Err(ConvError::Unsupported(format!(
            "{splits} parts of a batch of {}: the parts must divide the batch",
            problem.batch
        )));
    }
    let (oh, ow) = (problem.out_height(), problem.out_width());
    let (kh, kw) = (problem.kernel_height, problem.kernel_width);
    let taps = kh * kw;
    let per_split = problem.batch / splits;
    let partials_len = [splits, problem.out_channels, problem.in_channels, taps]
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or(ConvError::TooLarge {
            what: "weight gradient's partial sums",
            elements: usize::MAX,
        })?;
    // The swapped conv: images = input channels, channels = images (one group per part),
    // kernel = the output gradient, stride and dilation exchanged.
    let swapped = Conv2dProblem::new(
        problem.in_channels,
        problem.batch,
        [problem.in_height, problem.in_width],
        splits * problem.out_channels,
        [oh, ow],
    )
    .with_stride(problem.dilation)
    .with_padding(problem.padding)
    .with_dilation(problem.stride)
    .with_groups(splits);
    swapped.validate()?;
    // Its output is at least the weight's taps (the rows past them, when the input's last
    // rows fall outside every window, are not computed).
    if swapped.out_height() < kh || swapped.out_width() < kw {
        return Err(ConvError::Unsupported(format!(
            "the weight gradient of {problem} as a conv has {}x{} taps, fewer than the kernel's",
            swapped.out_height(),
            swapped.out_width()
        )));
    }
    let out_hw = oh * ow;
    let in_hw = problem.in_height * problem.in_width;
    let layout = Layout {
        out: [kh, kw],
        x_img: in_hw,
        x_chan: problem.in_channels * in_hw,
        w_group: per_split * problem.out_channels * out_hw,
        w_out: out_hw,
        w_chan: problem.out_channels * out_hw,
        o_img: taps,
        o_chan: problem.in_channels * taps,
        weight: WeightRead {
            strided: true,
            flipped: false,
        },
    };
    let call = Call {
        names: ["input", "output_grad", "partials"],
        input: buffers.input,
        weight: buffers.output_grad,
        bias: None,
        output: buffers.partials,
        problem: swapped,
        layout,
        lens: [problem.input_len(), problem.output_len(), partials_len],
        types: KernelTypes {
            input: types.input,
            weight: types.output_grad,
            operand: types.operand,
            output: OutputType::F32,
        },
    };
    call.launch(client, path)
}
