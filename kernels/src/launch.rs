//! The public entry point: checks, path selection and launch.

use cubecl::features::{MmaConfig, TypeUsage};
use cubecl::ir::{ElemType, FloatKind};
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::problem::{Conv2dProblem, ConvError};
use crate::{cmma, patch, tiled};

/// Element type of the operands (input and weight). The sums are always f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperandType {
    /// 32-bit float.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
}

impl OperandType {
    /// The CubeCL storage type.
    pub fn storage_type(self) -> StorageType {
        let kind = match self {
            OperandType::F32 => FloatKind::F32,
            OperandType::F16 => FloatKind::F16,
            OperandType::BF16 => FloatKind::BF16,
        };
        ElemType::Float(kind).into()
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            OperandType::F32 => 4,
            OperandType::F16 | OperandType::BF16 => 2,
        }
    }
}

/// Element type of the output. The f32 sums (plus the f32 bias) are rounded to it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputType {
    /// 32-bit float.
    F32,
    /// IEEE half precision.
    F16,
}

impl OutputType {
    /// The CubeCL storage type.
    pub fn storage_type(self) -> StorageType {
        let kind = match self {
            OutputType::F32 => FloatKind::F32,
            OutputType::F16 => FloatKind::F16,
        };
        ElemType::Float(kind).into()
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            OutputType::F32 => 4,
            OutputType::F16 => 2,
        }
    }
}

/// Which kernel to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ConvPath {
    /// The portable tiled kernel (f32 arithmetic), on every runtime and operand type.
    Tiled,
    /// The matrix-unit kernel (CubeCL `cmma`, 16x16x16 fragments, f32 accumulators): f16/bf16
    /// operands on devices that report that cmma configuration. Asking for it elsewhere is an
    /// [`ConvError::Unsupported`] error.
    Cmma,
    /// `Cmma` where it is supported (see [`cmma_supported`]) on the CUDA runtime, where the cmma
    /// kernels are validated; else `Tiled` (see [`auto_path`]).
    #[default]
    Auto,
}

/// The kernel that ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConvPathUsed {
    /// The tiled kernel.
    Tiled,
    /// The general cmma kernel (implicit GEMM with the im2col gathered per reduction step).
    Cmma,
    /// The cmma kernel for stride 1 on CUDA: implicit GEMM over the padded, flattened input,
    /// which stages the input once per 16-channel chunk as a channels-last patch and reads
    /// every tap from it. Chosen by the cmma path where it applies (stride 1, at least 16 input
    /// channels per group that fill 16-channel chunks well, weight tile within 100 KiB).
    CmmaPatch,
}

impl ConvPathUsed {
    /// The path the kernel belongs to: [`ConvPath::Tiled`] or [`ConvPath::Cmma`].
    pub fn path(self) -> ConvPath {
        match self {
            ConvPathUsed::Tiled => ConvPath::Tiled,
            ConvPathUsed::Cmma | ConvPathUsed::CmmaPatch => ConvPath::Cmma,
        }
    }
}

/// The cmma kernel that runs `problem` on this device (cmma support assumed), with the patch
/// kernel's plan where it applies.
fn cmma_kernel<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &Conv2dProblem,
) -> (ConvPathUsed, Option<patch::PatchPlan>) {
    // The patch kernel's vectorised shared-memory view is validated on CUDA only.
    if R::name(client) != "cuda" {
        return (ConvPathUsed::Cmma, None);
    }
    let hw = &client.properties().hardware;
    match patch::PatchConfig::plan(
        problem,
        hw.max_shared_memory_size,
        hw.num_streaming_multiprocessors,
    ) {
        Some(plan) => (ConvPathUsed::CmmaPatch, Some(plan)),
        None => (ConvPathUsed::Cmma, None),
    }
}

/// Element types of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConvTypes {
    /// Type of the products' operands: the input and weight values are rounded to it.
    pub operand: OperandType,
    /// Type of the input and weight buffers: `operand` (cast before the upload), or
    /// [`OperandType::F32`] with the cast to `operand` fused into the kernel's loads (twice the
    /// bytes on the bus and in the kernel's reads, no cast pass on the host).
    pub storage: OperandType,
    /// Type of the output buffer.
    pub output: OutputType,
}

impl ConvTypes {
    /// Operands of type `operand`, stored as such, output in f32.
    pub fn new(operand: OperandType) -> Self {
        Self {
            operand,
            storage: operand,
            output: OutputType::F32,
        }
    }

    /// The same operands with another output type.
    pub fn with_output(mut self, output: OutputType) -> Self {
        self.output = output;
        self
    }

    /// The same operands read from buffers of type `storage`: the operand type itself, or f32
    /// cast to the operand type in the kernel (any other pairing is
    /// [`ConvError::Unsupported`] at launch).
    pub fn with_storage(mut self, storage: OperandType) -> Self {
        self.storage = storage;
        self
    }
}

/// The device buffers of one call: raw CubeCL handles, contiguous, in the layouts of
/// [`Conv2dProblem`]. The input and weight hold [`ConvTypes::storage`] elements, the output
/// [`ConvTypes::output`] elements and the bias (if any) f32. A handle may be larger than needed
/// (the kernels use its first elements); the output must not alias an operand.
#[derive(Debug, Clone, Copy)]
pub struct Conv2dBuffers<'a> {
    /// Input `[N, C, H, W]`.
    pub input: &'a Handle,
    /// Weight `[OC, C/groups, KH, KW]`.
    pub weight: &'a Handle,
    /// Bias `[OC]`, f32.
    pub bias: Option<&'a Handle>,
    /// Output `[N, OC, OH, OW]`, fully overwritten.
    pub output: &'a Handle,
}

/// Whether the device can hold elements of `ty` in buffers.
pub fn storage_supported<R: Runtime>(client: &ComputeClient<R>, ty: StorageType) -> bool {
    client
        .properties()
        .features
        .type_usage(ty)
        .contains(TypeUsage::Buffer)
}

/// Whether the device can store operands of this type (lavapipe, for one, cannot store bf16).
pub fn operand_supported<R: Runtime>(client: &ComputeClient<R>, operand: OperandType) -> bool {
    storage_supported(client, operand.storage_type())
}

/// Whether the cmma path can run operands of this type on this device: f16 or bf16 operands
/// that the device stores, a 16x16x16 cmma configuration with these operands and f32
/// accumulators, 32-unit planes, and enough shared memory and units per cube.
pub fn cmma_supported<R: Runtime>(client: &ComputeClient<R>, operand: OperandType) -> bool {
    cmma_unsupported_reason(client, operand).is_none()
}

/// Why the cmma path cannot run here, `None` if it can.
pub(crate) fn cmma_unsupported_reason<R: Runtime>(
    client: &ComputeClient<R>,
    operand: OperandType,
) -> Option<String> {
    if operand == OperandType::F32 {
        return Some("the cmma path takes f16 or bf16 operands, not f32".into());
    }
    if !operand_supported(client, operand) {
        return Some(format!("the device cannot store {operand:?} operands"));
    }
    let props = client.properties();
    let ty = operand.storage_type();
    let config = MmaConfig {
        a_type: ty,
        b_type: ty,
        cd_type: ElemType::Float(FloatKind::F32).into(),
        m: 16,
        n: 16,
        k: 16,
    };
    if !props.features.matmul.cmma.contains(&config) {
        return Some(format!(
            "the device has no 16x16x16 cmma with {operand:?} operands and f32 accumulators"
        ));
    }
    let hw = &props.hardware;
    if hw.plane_size_min != 32 || hw.plane_size_max != 32 {
        return Some(format!(
            "the cmma kernel needs planes of 32 units, the device has {}..={}",
            hw.plane_size_min, hw.plane_size_max
        ));
    }
    let largest = cmma::CmmaConfig::largest();
    if hw.max_shared_memory_size < largest.shared_memory_bytes(0)
        || hw.max_units_per_cube < largest.units()
    {
        return Some(format!(
            "the cmma kernel needs {} bytes of shared memory and {} units per cube, the device has {} and {}",
            largest.shared_memory_bytes(0),
            largest.units(),
            hw.max_shared_memory_size,
            hw.max_units_per_cube
        ));
    }
    None
}

/// The kernel that [`ConvPath::Auto`] runs for this problem and operand type on this device:
/// a cmma kernel ([`ConvPathUsed::CmmaPatch`] or [`ConvPathUsed::Cmma`], see
/// [`cmma_path_kernel`]) where [`cmma_supported`] on the CUDA runtime, else
/// [`ConvPathUsed::Tiled`].
///
/// The cmma kernels have been checked on CUDA (H200) only; on other runtimes whose devices
/// report cmma (Vulkan cooperative matrices on a discrete GPU, HIP) they run when asked for
/// with [`ConvPath::Cmma`], and the crate's `auto_and_cmma` test checks them there, but `Auto`
/// keeps to the tiled kernel.
pub fn auto_path<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &Conv2dProblem,
    operand: OperandType,
) -> ConvPathUsed {
    if R::name(client) == "cuda" && cmma_supported(client, operand) {
        cmma_kernel(client, problem).0
    } else {
        ConvPathUsed::Tiled
    }
}

/// The kernel that [`ConvPath::Cmma`] runs for this problem on this device, assuming
/// [`cmma_supported`]: [`ConvPathUsed::CmmaPatch`] where it applies, else
/// [`ConvPathUsed::Cmma`].
pub fn cmma_path_kernel<R: Runtime>(
    client: &ComputeClient<R>,
    problem: &Conv2dProblem,
) -> ConvPathUsed {
    cmma_kernel(client, problem).0
}

fn check_buffer(
    buffer: &'static str,
    handle: &Handle,
    elements: usize,
    elem_size: usize,
) -> Result<(), ConvError> {
    let needed = elements as u64 * elem_size as u64;
    let actual = handle.size_in_used();
    if actual < needed {
        return Err(ConvError::BufferTooSmall {
            buffer,
            needed,
            actual,
        });
    }
    Ok(())
}

/// conv2d forward: `output = conv2d(input, weight) + bias`, sums in f32.
///
/// Validates the problem ([`Conv2dProblem::validate`]), the element types against the device and
/// the buffer sizes, picks the kernel (`path`), launches it once, then flushes the client so that
/// a compilation or launch failure that CubeCL reports is returned as [`ConvError::Launch`]
/// (CubeCL reports errors per stream: an earlier failure on the same stream surfaces here too).
/// The kernel runs asynchronously: read the output through the client as usual.
///
/// The flush is a round trip to CubeCL's device thread; where every microsecond counts (small
/// layers), [`conv2d_forward_async`] skips it.
///
/// Returns the kernel that ran. Never panics on bad input.
pub fn conv2d_forward<R: Runtime>(
    client: &ComputeClient<R>,
    buffers: Conv2dBuffers<'_>,
    problem: &Conv2dProblem,
    types: ConvTypes,
    path: ConvPath,
) -> Result<ConvPathUsed, ConvError> {
    let used = conv2d_forward_async(client, buffers, problem, types, path)?;
    client
        .flush()
        .map_err(|e| ConvError::Launch(e.to_string()))?;
    Ok(used)
}

/// [`conv2d_forward`] without the flush: the same checks (everything but the kernel's
/// compilation and launch), one launch, no round trip to CubeCL's device thread. A compilation
/// or launch failure is then reported by CubeCL at the stream's next flush, sync or read, as
/// for any CubeCL kernel.
pub fn conv2d_forward_async<R: Runtime>(
    client: &ComputeClient<R>,
    buffers: Conv2dBuffers<'_>,
    problem: &Conv2dProblem,
    types: ConvTypes,
    path: ConvPath,
) -> Result<ConvPathUsed, ConvError> {
    problem.validate()?;
    if types.storage != types.operand && types.storage != OperandType::F32 {
        return Err(ConvError::Unsupported(format!(
            "{:?} operands read from {:?} buffers (the buffers hold the operand type or f32)",
            types.operand, types.storage
        )));
    }
    if !operand_supported(client, types.storage) {
        return Err(ConvError::Unsupported(format!(
            "the device cannot store {:?} buffers",
            types.storage
        )));
    }
    if !operand_supported(client, types.operand) {
        return Err(ConvError::Unsupported(format!(
            "the device cannot store {:?} operands",
            types.operand
        )));
    }
    if !storage_supported(client, types.output.storage_type()) {
        return Err(ConvError::Unsupported(format!(
            "the device cannot store a {:?} output",
            types.output
        )));
    }
    if buffers.bias.is_some() && !storage_supported(client, OutputType::F32.storage_type()) {
        return Err(ConvError::Unsupported(
            "the device cannot store an f32 bias".into(),
        ));
    }
    check_buffer(
        "input",
        buffers.input,
        problem.input_len(),
        types.storage.size(),
    )?;
    check_buffer(
        "weight",
        buffers.weight,
        problem.weight_len(),
        types.storage.size(),
    )?;
    check_buffer(
        "output",
        buffers.output,
        problem.output_len(),
        types.output.size(),
    )?;
    if let Some(bias) = buffers.bias {
        check_buffer("bias", bias, problem.out_channels, 4)?;
    }

    let cmma = match path {
        ConvPath::Tiled => false,
        ConvPath::Cmma => match cmma_unsupported_reason(client, types.operand) {
            None => true,
            Some(reason) => return Err(ConvError::Unsupported(reason)),
        },
        ConvPath::Auto => auto_path(client, problem, types.operand) != ConvPathUsed::Tiled,
    };
    let (used, plan) = if cmma {
        cmma_kernel(client, problem)
    } else {
        (ConvPathUsed::Tiled, None)
    };

    // Without bias the kernels take a 1-element placeholder that they never read (a bias flag
    // at run time rather than a compile-time option halves the kernels to compile).
    let placeholder;
    let (bias_handle, bias_len) = match buffers.bias {
        Some(bias) => (bias, problem.out_channels),
        None => {
            placeholder = client.empty(4);
            (&placeholder, 1)
        }
    };
    // SAFETY (of the lengths): checked against the handles' sizes above.
    let (input, weight, output, bias) = unsafe {
        (
            ArrayArg::from_raw_parts(buffers.input.clone(), problem.input_len()),
            ArrayArg::from_raw_parts(buffers.weight.clone(), problem.weight_len()),
            ArrayArg::from_raw_parts(buffers.output.clone(), problem.output_len()),
            (
                ArrayArg::from_raw_parts(bias_handle.clone(), bias_len),
                buffers.bias.is_some(),
            ),
        )
    };
    let dtypes = [
        types.storage.storage_type(),
        types.operand.storage_type(),
        types.output.storage_type(),
    ];
    match used {
        ConvPathUsed::Tiled => tiled::launch(client, input, weight, bias, output, problem, dtypes)?,
        ConvPathUsed::Cmma => cmma::launch(client, input, weight, bias, output, problem, dtypes)?,
        ConvPathUsed::CmmaPatch => match plan {
            Some(plan) => {
                patch::launch(client, input, weight, bias, output, problem, plan, dtypes)?
            }
            None => cmma::launch(client, input, weight, bias, output, problem, dtypes)?,
        },
    }
    Ok(used)
}

/// Spreads `tiles_m * tiles_n * groups` cubes over the x and y axes of the grid, within the
/// device's limits. Returns the count and the number of cubes that do work (the kernels stop the
/// others at once).
pub(crate) fn cube_count<R: Runtime>(
    client: &ComputeClient<R>,
    tiles_m: usize,
    tiles_n: usize,
    groups: usize,
) -> Result<(CubeCount, u32), ConvError> {
    let total = tiles_m
        .checked_mul(tiles_n)
        .and_then(|t| t.checked_mul(groups))
        .filter(|&t| t <= u32::MAX as usize)
        .ok_or(ConvError::TooLarge {
            what: "number of cubes",
            elements: usize::MAX,
        })?;
    let (max_x, max_y, _) = client.properties().hardware.max_cube_count;
    let max_x = (max_x as usize).max(1);
    let x = total.min(max_x).max(1);
    let y = total.div_ceil(x).max(1);
    if y > max_y as usize {
        return Err(ConvError::TooLarge {
            what: "number of cubes",
            elements: total,
        });
    }
    Ok((CubeCount::Static(x as u32, y as u32, 1), total as u32))
}
