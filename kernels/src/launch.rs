//! The public entry point: checks, path selection and launch.

use cubecl::features::{MmaConfig, TypeUsage};
use cubecl::ir::{ElemType, FloatKind};
use cubecl::prelude::*;
use cubecl::server::Handle;

use crate::problem::{Conv2dProblem, ConvError};
use crate::shape::Layout;
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
    check_forward_storage(types)?;
    forward_call(buffers, problem, types, Layout::dense(problem)).launch(client, path)
}

/// [`conv2d_forward_async`] with the weight read transposed and flipped:
/// `output = conv2d(input, w') + bias` with `w'[o][c][y][x] = weight[c][o][KH-1-y][KW-1-x]`,
/// where the weight buffer holds an OIHW `[C, OC, KH, KW]` weight (one group only). That is the
/// input gradient of the conv with that weight, as a forward conv of its output gradient
/// (stride 1; for a strided conv, of its output gradient spread out by the stride), without
/// a pass that transposes and flips the weight first.
pub fn conv2d_forward_flipped_async<R: Runtime>(
    client: &ComputeClient<R>,
    buffers: Conv2dBuffers<'_>,
    problem: &Conv2dProblem,
    types: ConvTypes,
    path: ConvPath,
) -> Result<ConvPathUsed, ConvError> {
    problem.validate()?;
    require_one_group(problem, "a flipped weight")?;
    check_forward_storage(types)?;
    forward_call(buffers, problem, types, Layout::flipped_weight(problem)).launch(client, path)
}

/// The forward entry points read operands of the operand type itself or f32.
fn check_forward_storage(types: ConvTypes) -> Result<(), ConvError> {
    if types.storage != types.operand && types.storage != OperandType::F32 {
        return Err(ConvError::Unsupported(format!(
            "{:?} operands read from {:?} buffers (the buffers hold the operand type or f32)",
            types.operand, types.storage
        )));
    }
    Ok(())
}

/// Element types of one launch: the input's and the weight's buffers (each the operand type,
/// or a type the kernel rounds to it as it loads), the operands and the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KernelTypes {
    pub input: OperandType,
    pub weight: OperandType,
    pub operand: OperandType,
    pub output: OutputType,
}

impl KernelTypes {
    fn of(types: ConvTypes) -> Self {
        KernelTypes {
            input: types.storage,
            weight: types.storage,
            operand: types.operand,
            output: types.output,
        }
    }

    /// The kernels' `#[define]` types: input, weight, operand, output.
    fn storage_types(&self) -> [StorageType; 4] {
        [
            self.input.storage_type(),
            self.weight.storage_type(),
            self.operand.storage_type(),
            self.output.storage_type(),
        ]
    }
}

/// One validated problem to launch, with its buffers (input, weight, bias, output), where the
/// kernel reads and writes them, their element counts and names (input, weight, output, as the
/// caller calls them) and types.
pub(crate) struct Call<'a> {
    pub names: [&'static str; 3],
    pub input: &'a Handle,
    pub weight: &'a Handle,
    pub bias: Option<&'a Handle>,
    pub output: &'a Handle,
    pub problem: Conv2dProblem,
    pub layout: Layout,
    pub lens: [usize; 3],
    pub types: KernelTypes,
}

impl Call<'_> {
    /// Checks the types against the device and the buffers' sizes, picks the kernel and
    /// launches it once (no flush).
    pub(crate) fn launch<R: Runtime>(
        &self,
        client: &ComputeClient<R>,
        path: ConvPath,
    ) -> Result<ConvPathUsed, ConvError> {
        let (problem, types) = (&self.problem, self.types);
        for (what, ty) in [("buffers", types.input), ("buffers", types.weight)] {
            if !operand_supported(client, ty) {
                return Err(ConvError::Unsupported(format!(
                    "the device cannot store {ty:?} {what}"
                )));
            }
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
        if self.bias.is_some() && !storage_supported(client, OutputType::F32.storage_type()) {
            return Err(ConvError::Unsupported(
                "the device cannot store an f32 bias".into(),
            ));
        }
        let [input_len, weight_len, output_len] = self.lens;
        let [input_name, weight_name, output_name] = self.names;
        check_buffer(input_name, self.input, input_len, types.input.size())?;
        check_buffer(weight_name, self.weight, weight_len, types.weight.size())?;
        check_buffer(output_name, self.output, output_len, types.output.size())?;
        if let Some(bias) = self.bias {
            check_buffer("bias", bias, problem.out_channels, 4)?;
        }

        let cmma = match path {
            ConvPath::Tiled => false,
            ConvPath::Cmma => match cmma_unsupported_reason(client, types.operand) {
                None => true,
                Some(reason) => return Err(ConvError::Unsupported(reason)),
            },
            ConvPath::Auto => R::name(client) == "cuda" && cmma_supported(client, types.operand),
        };
        // The patch kernel reads dense operands of one buffer type, the weight possibly
        // flipped (see `Layout::patch_read`).
        let patch_read = self
            .layout
            .patch_read(problem)
            .filter(|_| types.input == types.weight);
        let (used, plan) = match (cmma, patch_read) {
            (false, _) => (ConvPathUsed::Tiled, None),
            (true, None) => (ConvPathUsed::Cmma, None),
            (true, Some(_)) => cmma_kernel(client, problem),
        };

        // Without bias the kernels take a 1-element placeholder that they never read (a bias
        // flag at run time rather than a compile-time option halves the kernels to compile).
        let placeholder;
        let (bias_handle, bias_len) = match self.bias {
            Some(bias) => (bias, problem.out_channels),
            None => {
                placeholder = client.empty(4);
                (&placeholder, 1)
            }
        };
        // SAFETY (of the lengths): checked against the handles' sizes above.
        let (input, weight, output, bias) = unsafe {
            (
                ArrayArg::from_raw_parts(self.input.clone(), input_len),
                ArrayArg::from_raw_parts(self.weight.clone(), weight_len),
                ArrayArg::from_raw_parts(self.output.clone(), output_len),
                (
                    ArrayArg::from_raw_parts(bias_handle.clone(), bias_len),
                    self.bias.is_some(),
                ),
            )
        };
        let dtypes = types.storage_types();
        let layout = &self.layout;
        match (used, plan, patch_read) {
            (ConvPathUsed::CmmaPatch, Some(plan), Some(read)) => {
                let dtypes = [dtypes[0], dtypes[2], dtypes[3]];
                patch::launch(
                    client, input, weight, bias, output, problem, plan, read, dtypes,
                )?
            }
            (ConvPathUsed::Tiled, _, _) => {
                tiled::launch(client, input, weight, bias, output, problem, layout, dtypes)?
            }
            _ => {
                cmma::launch(client, input, weight, bias, output, problem, layout, dtypes)?;
                return Ok(ConvPathUsed::Cmma);
            }
        }
        Ok(used)
    }
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

/// The call of a forward conv (dense or flipped weight) on caller buffers.
fn forward_call<'a>(
    buffers: Conv2dBuffers<'a>,
    problem: &Conv2dProblem,
    types: ConvTypes,
    layout: Layout,
) -> Call<'a> {
    Call {
        names: ["input", "weight", "output"],
        input: buffers.input,
        weight: buffers.weight,
        bias: buffers.bias,
        output: buffers.output,
        problem: *problem,
        layout,
        lens: [
            problem.input_len(),
            problem.weight_len(),
            problem.output_len(),
        ],
        types: KernelTypes::of(types),
    }
}

/// An `Unsupported` error unless `problem` has one group; `what` names what needs it.
pub(crate) fn require_one_group(problem: &Conv2dProblem, what: &str) -> Result<(), ConvError> {
    if problem.groups == 1 {
        return Ok(());
    }
    Err(ConvError::Unsupported(format!(
        "{what} takes one group, the problem has {}",
        problem.groups
    )))
}
