//! Where each offloadable op runs, and at which precision.

use core::fmt;
use core::str::FromStr;

/// Operand precision of an op placed on the accelerator.
///
/// Operands are rounded to this type on the CPU before upload (so the bus carries fewer bytes);
/// results come back in the caller's float type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Precision {
    /// 32-bit IEEE float operands.
    F32,
    /// 16-bit IEEE float operands (10-bit mantissa, range up to 65504).
    F16,
    /// bfloat16 operands (7-bit mantissa, the range of f32).
    BF16,
}

impl Precision {
    /// Size of one operand element in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F16 | Precision::BF16 => 2,
        }
    }

    /// The matching Burn dtype.
    pub fn dtype(self) -> burn_backend::DType {
        match self {
            Precision::F32 => burn_backend::DType::F32,
            Precision::F16 => burn_backend::DType::F16,
            Precision::BF16 => burn_backend::DType::BF16,
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::BF16 => "bf16",
        })
    }
}

/// Where one op runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Placement {
    /// On the CPU backend `C`, in the tensor's own dtype.
    Cpu,
    /// On the accelerator, with operands rounded to `precision` and f32 accumulation.
    Accelerator {
        /// Operand precision.
        precision: Precision,
    },
}

impl Placement {
    /// On the accelerator at `precision`.
    pub const fn accelerator(precision: Precision) -> Self {
        Placement::Accelerator { precision }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Cpu => f.write_str("cpu"),
            Placement::Accelerator { precision } => write!(f, "accelerator/{precision}"),
        }
    }
}

impl FromStr for Placement {
    type Err = String;

    /// Parses `cpu`, `f32`, `f16` or `bf16` (the last three mean "on the accelerator at").
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Placement::Cpu),
            "f32" | "accelerator/f32" => Ok(Placement::accelerator(Precision::F32)),
            "f16" | "accelerator/f16" => Ok(Placement::accelerator(Precision::F16)),
            "bf16" | "accelerator/bf16" => Ok(Placement::accelerator(Precision::BF16)),
            other => Err(format!(
                "unknown placement `{other}`: expected cpu, f32, f16 or bf16"
            )),
        }
    }
}

/// The ops whose placement can be chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// conv2d forward.
    Conv2dForward,
    /// conv2d gradient with respect to the input (dgrad).
    Conv2dInputGrad,
    /// conv2d gradient with respect to the weight (wgrad).
    Conv2dWeightGrad,
    /// Float matrix multiplication (linear layers).
    Matmul,
}

impl OpKind {
    /// All op kinds, in display order.
    pub const ALL: [OpKind; 4] = [
        OpKind::Conv2dForward,
        OpKind::Conv2dInputGrad,
        OpKind::Conv2dWeightGrad,
        OpKind::Matmul,
    ];

    /// The name used in the environment override and in reports.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Conv2dForward => "conv2d_forward",
            OpKind::Conv2dInputGrad => "conv2d_input_grad",
            OpKind::Conv2dWeightGrad => "conv2d_weight_grad",
            OpKind::Matmul => "matmul",
        }
    }

    /// The Burn backend op it is (as named in the backend traits).
    pub(crate) fn backend_op_name(self) -> &'static str {
        match self {
            OpKind::Conv2dForward => "conv2d",
            OpKind::Conv2dInputGrad => "conv2d_x_backward",
            OpKind::Conv2dWeightGrad => "conv2d_weight_backward",
            OpKind::Matmul => "float_matmul",
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Name of the environment variable that overrides placements, see [`HeteroConfig::apply_env`].
pub const ENV_PLACEMENT: &str = "BURN_HETERO_PLACEMENT";
/// Name of the environment variable that sets strict mode (`1`/`true` or `0`/`false`).
pub const ENV_STRICT: &str = "BURN_HETERO_STRICT";
/// Name of the environment variable that disables the accelerator (`off`) or enables it (`on`).
pub const ENV_ACCELERATOR: &str = "BURN_HETERO_ACCELERATOR";

/// Run-time settings of a `Hetero` device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeteroConfig {
    /// conv2d forward.
    pub conv2d_forward: Placement,
    /// conv2d input gradient.
    pub conv2d_input_grad: Placement,
    /// conv2d weight gradient.
    pub conv2d_weight_grad: Placement,
    /// Float matmul (linear layers).
    pub matmul: Placement,
    /// When the accelerator cannot run a placed op, panic with the cause instead of running the op
    /// on the CPU.
    pub strict: bool,
    /// Use the accelerator at all. `false` runs every op on the CPU whatever the placements say
    /// (each placed op then counts as a fallback and logs the cause once).
    pub accelerator_enabled: bool,
}

impl Default for HeteroConfig {
    /// Convolutions on the accelerator, matmul on the CPU. Forward operands in f16 (the most
    /// mantissa; activations and weights sit well inside its range); gradient operands in bf16,
    /// whose f32 range keeps small gradients from flushing to zero without loss scaling. The
    /// training tests check that this trains like f32 (as does all-f16 on their model).
    fn default() -> Self {
        Self {
            conv2d_forward: Placement::accelerator(Precision::F16),
            conv2d_input_grad: Placement::accelerator(Precision::BF16),
            conv2d_weight_grad: Placement::accelerator(Precision::BF16),
            matmul: Placement::Cpu,
            strict: false,
            accelerator_enabled: true,
        }
    }
}

impl HeteroConfig {
    /// Every op on the CPU.
    pub fn cpu_only() -> Self {
        Self {
            conv2d_forward: Placement::Cpu,
            conv2d_input_grad: Placement::Cpu,
            conv2d_weight_grad: Placement::Cpu,
            matmul: Placement::Cpu,
            ..Self::default()
        }
    }

    /// The three conv phases at `placement`, everything else unchanged.
    pub fn with_convs(self, placement: Placement) -> Self {
        self.with_placement(OpKind::Conv2dForward, placement)
            .with_placement(OpKind::Conv2dInputGrad, placement)
            .with_placement(OpKind::Conv2dWeightGrad, placement)
    }

    /// The placement of `op`.
    pub fn placement(&self, op: OpKind) -> Placement {
        match op {
            OpKind::Conv2dForward => self.conv2d_forward,
            OpKind::Conv2dInputGrad => self.conv2d_input_grad,
            OpKind::Conv2dWeightGrad => self.conv2d_weight_grad,
            OpKind::Matmul => self.matmul,
        }
    }

    /// Sets the placement of `op`.
    pub fn with_placement(mut self, op: OpKind, placement: Placement) -> Self {
        *self.placement_mut(op) = placement;
        self
    }

    /// Sets strict mode.
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    fn placement_mut(&mut self, op: OpKind) -> &mut Placement {
        match op {
            OpKind::Conv2dForward => &mut self.conv2d_forward,
            OpKind::Conv2dInputGrad => &mut self.conv2d_input_grad,
            OpKind::Conv2dWeightGrad => &mut self.conv2d_weight_grad,
            OpKind::Matmul => &mut self.matmul,
        }
    }

    /// Applies a placement override such as `conv2d_forward=f16,conv2d_weight_grad=cpu`.
    ///
    /// Keys: `conv2d_forward` (or `forward`), `conv2d_input_grad` (`dgrad`), `conv2d_weight_grad`
    /// (`wgrad`), `matmul`, `conv` (the three conv phases), `all`. Values: `cpu`, `f32`, `f16`,
    /// `bf16`. On error nothing is changed.
    pub fn apply_placement_override(&mut self, spec: &str) -> Result<(), String> {
        let mut next = self.clone();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("`{item}` is not of the form op=placement"))?;
            let placement: Placement = value.parse()?;
            let ops: &[OpKind] = match key.trim().to_ascii_lowercase().as_str() {
                "conv2d_forward" | "forward" => &[OpKind::Conv2dForward],
                "conv2d_input_grad" | "dgrad" => &[OpKind::Conv2dInputGrad],
                "conv2d_weight_grad" | "wgrad" => &[OpKind::Conv2dWeightGrad],
                "matmul" => &[OpKind::Matmul],
                "conv" => &OpKind::ALL[..3],
                "all" => &OpKind::ALL,
                other => {
                    return Err(format!(
                        "unknown op `{other}`: expected conv2d_forward, conv2d_input_grad, \
                         conv2d_weight_grad, matmul, conv or all"
                    ));
                }
            };
            for &op in ops {
                *next.placement_mut(op) = placement;
            }
        }
        *self = next;
        Ok(())
    }

    /// Applies the environment overrides, which win over the code's settings so that an
    /// experiment needs no rebuild:
    ///
    /// - `BURN_HETERO_PLACEMENT`: see [`apply_placement_override`](Self::apply_placement_override);
    /// - `BURN_HETERO_STRICT`: `1`/`true` or `0`/`false`;
    /// - `BURN_HETERO_ACCELERATOR`: `off` to run everything on the CPU, `on` to allow it.
    ///
    /// Returns the problems found; entries that are not understood are ignored.
    pub fn apply_env(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Ok(spec) = std::env::var(ENV_PLACEMENT)
            && let Err(e) = self.apply_placement_override(&spec)
        {
            problems.push(format!("{ENV_PLACEMENT}={spec}: {e}"));
        }
        if let Ok(v) = std::env::var(ENV_STRICT) {
            match parse_bool(&v) {
                Some(b) => self.strict = b,
                None => problems.push(format!("{ENV_STRICT}={v}: expected 1/0/true/false")),
            }
        }
        if let Ok(v) = std::env::var(ENV_ACCELERATOR) {
            match v.trim().to_ascii_lowercase().as_str() {
                "off" | "0" | "false" | "cpu" => self.accelerator_enabled = false,
                "on" | "1" | "true" => self.accelerator_enabled = true,
                _ => problems.push(format!("{ENV_ACCELERATOR}={v}: expected on or off")),
            }
        }
        problems
    }
}

/// `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`, any case; `None` for anything else.
pub(crate) fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}
