//! An opt-in profile of a run: every conv layer's phases with their upload, kernel, download and
//! CPU time, and the time of every other op the CPU backend ran, by op.
//!
//! Off by default, because attributing an offloaded op's time to its upload, kernel and download
//! needs a device sync between them, which costs a round trip each. With profiling off the op
//! syncs only by reading its result back, and [`crate::stats`]' phase split only says how long
//! each phase took to be queued. An unsynced profile ([`set_profile_synced`]`(false)`) records
//! the same rows without those syncs: the steps run as they do without a profile, and the
//! profile's wall time, set against the conv phases and the CPU ops, says how much of a step
//! is spent outside the backend's ops (model code, autodiff, the optimizer's bookkeeping).
//!
//! Layers are numbered by the order of their forward convs within a training step. A step
//! starts at a forward conv that follows a backward conv, or that has the shape of the step's
//! first conv at any batch size (forward-only loops such as evaluation). Gradient phases are matched to layers
//! of the same shape in reverse order, the order in which backpropagation visits them.

use crate::placement::OpKind;
use crate::stats::{OpCounters, Ran};
use burn_backend::TensorMetadata;
use core::any::Any;
use core::fmt;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static ENABLED: AtomicBool = AtomicBool::new(false);
static SYNCED: AtomicBool = AtomicBool::new(true);

/// Turns profiling on or off for every `Hetero` backend in this process. The profile's wall
/// time ([`Profile::wall`]) counts while it is on.
pub fn set_profiling(on: bool) {
    let was = ENABLED.swap(on, Ordering::Relaxed);
    if was != on {
        with_state(|s| match (on, s.since.take()) {
            (true, _) => s.since = Some(Instant::now()),
            (false, Some(since)) => s.wall += since.elapsed(),
            (false, None) => {}
        });
    }
}

/// Whether profiling is on.
pub fn profiling() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Whether a profile syncs the accelerator between an offloaded op's upload, kernel and
/// download to time each (the default), or only records the op as it runs unprofiled: then
/// results are read back as without a profile (a conv's weight gradient after the call
/// returns), the upload and kernel times are the time to queue them, and the download time
/// holds the wait for the device.
pub fn set_profile_synced(synced: bool) {
    SYNCED.store(synced, Ordering::Relaxed);
}

/// Whether profiles sync between phases, see [`set_profile_synced`].
pub fn profile_synced() -> bool {
    SYNCED.load(Ordering::Relaxed)
}

/// Whether an offloaded op syncs between its phases now: profiling, synced.
pub(crate) fn syncing() -> bool {
    profiling() && profile_synced()
}

/// The shape of one conv: input and weight shapes and the options, which together identify a
/// layer's work.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConvSignature {
    /// Input shape `[n, c_in, h, w]`.
    pub input: [usize; 4],
    /// Weight shape `[c_out, c_in / groups, kh, kw]`.
    pub weight: [usize; 4],
    /// Stride.
    pub stride: [usize; 2],
    /// Padding.
    pub padding: [usize; 2],
    /// Dilation.
    pub dilation: [usize; 2],
    /// Groups.
    pub groups: usize,
}

impl ConvSignature {
    /// Whether `other` is the same layer shape at any batch size (an evaluation's last batch is
    /// often smaller).
    pub fn same_layer_as(&self, other: &ConvSignature) -> bool {
        self.input[1..] == other.input[1..]
            && (
                &self.weight,
                self.stride,
                self.padding,
                self.dilation,
                self.groups,
            ) == (
                &other.weight,
                other.stride,
                other.padding,
                other.dilation,
                other.groups,
            )
    }
}

impl fmt::Display for ConvSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [n, ci, h, w] = self.input;
        let [co, _, kh, kw] = self.weight;
        write!(f, "{n}×{ci}×{h}×{w} → {co}, {kh}×{kw}")?;
        if self.stride != [1, 1] {
            write!(f, " s{}", fmt_pair(self.stride))?;
        }
        if self.padding != [0, 0] {
            write!(f, " p{}", fmt_pair(self.padding))?;
        }
        if self.dilation != [1, 1] {
            write!(f, " d{}", fmt_pair(self.dilation))?;
        }
        if self.groups != 1 {
            write!(f, " g{}", self.groups)?;
        }
        Ok(())
    }
}

fn fmt_pair([a, b]: [usize; 2]) -> String {
    if a == b {
        format!("{a}")
    } else {
        format!("{a},{b}")
    }
}

/// One conv layer's phase at one place, summed over the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerPhase {
    /// Position of the layer among the step's forward convs (0-based).
    pub layer: usize,
    /// The layer's shape.
    pub signature: ConvSignature,
    /// The phase.
    pub op: OpKind,
    /// Where it ran.
    pub ran: Ran,
    /// Its counters.
    pub counters: OpCounters,
}

/// The calls and time of one op of the CPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuOpTime {
    /// The backend op's name, as in Burn's backend traits (`float_add`, `relu_backward`, …).
    pub name: &'static str,
    /// Calls.
    pub calls: u64,
    /// Wall time inside the op.
    pub time: Duration,
}

/// The calls and time of one op of the CPU backend on operands of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuOpOperands {
    /// The backend op's name.
    pub name: &'static str,
    /// The float operands' shapes, in argument order, marked as [`describe_operand`] says.
    pub operands: String,
    /// Calls.
    pub calls: u64,
    /// Wall time inside the op.
    pub time: Duration,
}

/// Uploads through pinned staging memory (CUDA), summed over the run: where their time goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StagedUploads {
    /// Uploads.
    pub uploads: u64,
    /// Uploads into a device buffer kept from an earlier upload (no allocation, no call to the
    /// device thread).
    pub reused: u64,
    /// Bytes moved to the device.
    pub bytes: u64,
    /// Allocating the device buffers and getting their addresses.
    pub allocate: Duration,
    /// Waiting for the device's queue to drain before the copies.
    pub wait: Duration,
    /// Writing the bytes into the staging slots (for activations, the cast to f16/bf16).
    pub fill: Duration,
    /// The transfers on the bus alone, timed by device events around each chunk's copy.
    pub bus: Duration,
    /// The uploads' wall time: fill and bus overlap across chunks.
    pub total: Duration,
    /// The chunks' copies by size, up to each of [`COPY_SIZES`] bytes: how near each size comes
    /// to the bus's rate, whose per-copy cost weighs most on the small ones.
    pub copies_by_size: [BusCopies; COPY_SIZES.len()],
}

/// Upper bounds (inclusive, bytes) of the size classes of [`StagedUploads::copies_by_size`].
pub const COPY_SIZES: [usize; 4] = [64 << 10, 256 << 10, 1 << 20, usize::MAX];

/// Copies of one size class to the device: how many, their bytes and their time on the bus.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusCopies {
    /// Copies.
    pub copies: u64,
    /// Bytes they moved.
    pub bytes: u64,
    /// Their time on the bus (device events around each).
    pub bus: Duration,
}

impl BusCopies {
    /// Bytes per second on the bus, in GB/s.
    pub fn gb_per_s(&self) -> f64 {
        gb_per_s(self.bytes, self.bus)
    }
}

/// `bytes` moved in `time`, in GB/s.
fn gb_per_s(bytes: u64, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64().max(1e-12) / 1e9
}

impl StagedUploads {
    /// Bytes per second on the bus, in GB/s.
    pub fn bus_gb_per_s(&self) -> f64 {
        gb_per_s(self.bytes, self.bus)
    }

    fn add(&mut self, other: &StagedUploads) {
        self.uploads += other.uploads;
        self.reused += other.reused;
        self.bytes += other.bytes;
        self.allocate += other.allocate;
        self.wait += other.wait;
        self.fill += other.fill;
        self.bus += other.bus;
        self.total += other.total;
        for (mine, theirs) in self.copies_by_size.iter_mut().zip(&other.copies_by_size) {
            mine.copies += theirs.copies;
            mine.bytes += theirs.bytes;
            mine.bus += theirs.bus;
        }
    }

    /// Counts one chunk's copy of `bytes` that took `bus` on the bus.
    pub(crate) fn add_copy(&mut self, bytes: usize, bus: Duration) {
        self.bus += bus;
        let last = COPY_SIZES.len() - 1;
        let class = COPY_SIZES
            .iter()
            .position(|&max| bytes <= max)
            .unwrap_or(last);
        let copies = &mut self.copies_by_size[class];
        copies.copies += 1;
        copies.bytes += bytes as u64;
        copies.bus += bus;
    }
}

/// A snapshot of the profile, see [`profile`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// Conv phases by layer, then phase, then place.
    pub layers: Vec<LayerPhase>,
    /// The CPU backend's other ops, the most time first.
    pub cpu_ops: Vec<CpuOpTime>,
    /// The same ops split by their float operands, the most time first: which shapes and
    /// layouts the time goes to.
    pub cpu_op_operands: Vec<CpuOpOperands>,
    /// The uploads that went through pinned staging (part of the conv phases' upload time).
    pub staged_uploads: StagedUploads,
    /// Wall time with profiling on since the last [`reset_profile`]: the conv phases, the CPU
    /// ops, and everything between them.
    pub wall: Duration,
    /// Time offloaded ops waited, as they started, for results of earlier ones read after
    /// their call returned (a conv's weight gradient: the counters' `read later`); in none of
    /// the conv phases. A CPU op that touches such a result first waits inside its
    /// own time instead.
    pub deferred_wait: Duration,
    /// Time the profile itself spent naming operands for [`Self::cpu_op_operands`] (part of
    /// [`Self::wall`], in none of the ops).
    pub overhead: Duration,
    /// Whether the accelerator was synced between phases ([`profile_synced`] when the
    /// snapshot was taken).
    pub synced: bool,
}

impl Profile {
    /// Total time of the conv phases (all places) and of the other CPU ops.
    pub fn totals(&self) -> (Duration, Duration) {
        (
            self.layers.iter().map(|l| l.counters.total_time()).sum(),
            self.cpu_ops.iter().map(|o| o.time).sum(),
        )
    }

    /// Wall time in neither the conv phases nor the CPU ops nor the profile's own bookkeeping:
    /// the model's code, autodiff and the optimizer outside the backend, data batching.
    pub fn outside_ops(&self) -> Duration {
        let (convs, cpu_ops) = self.totals();
        self.wall
            .saturating_sub(convs + cpu_ops + self.deferred_wait + self.overhead)
    }

    /// One line: the wall time and how it splits into conv phases, CPU ops and the rest.
    pub fn summary(&self) -> String {
        let (convs, cpu_ops) = self.totals();
        let s = |d: Duration| d.as_secs_f64();
        let share = |d: Duration| 100.0 * s(d) / s(self.wall).max(1e-12);
        format!(
            "profile ({}): {:.2} s of wall time: conv phases {:.2} s ({:.0}%), waiting for \
             results read later {:.2} s ({:.0}%), other CPU-backend ops {:.2} s ({:.0}%), \
             outside the backend's ops {:.2} s ({:.0}%: model code, autodiff, the optimizer's \
             bookkeeping, data), naming operands {:.2} s",
            if self.synced {
                "synced between phases"
            } else {
                "unsynced"
            },
            s(self.wall),
            s(convs),
            share(convs),
            s(self.deferred_wait),
            share(self.deferred_wait),
            s(cpu_ops),
            share(cpu_ops),
            s(self.outside_ops()),
            share(self.outside_ops()),
            s(self.overhead),
        )
    }
}

impl fmt::Display for Profile {
    /// Three markdown tables: the conv layers' phases (then a line on the staged uploads), the
    /// CPU ops that took at least 0.5% of the CPU ops' time (the rest summed in one row), and
    /// the CPU ops by operands.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let kib = |bytes: usize| match bytes {
            0 => "0".to_string(),
            b if b >= 1 << 20 => format!("{} MiB", b >> 20),
            b => format!("{} KiB", b >> 10),
        };
        writeln!(
            f,
            "| layer | shape | phase | ran on | calls | MB up | MB reused | upload ms | kernel ms | download ms | cpu ms | total ms |"
        )?;
        writeln!(
            f,
            "|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        )?;
        for l in &self.layers {
            let c = &l.counters;
            writeln!(
                f,
                "| {} | {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                l.layer + 1,
                l.signature,
                phase_name(l.op),
                l.ran,
                c.calls,
                c.bytes_up as f64 / 1e6,
                c.bytes_reused as f64 / 1e6,
                ms(c.upload),
                ms(c.compute),
                ms(c.download),
                ms(c.cpu),
                ms(c.total_time())
            )?;
        }
        let staged = &self.staged_uploads;
        if staged.uploads > 0 {
            writeln!(
                f,
                "\nstaged uploads: {} calls ({} into kept device buffers), {:.1} MB in {:.1} ms: \
                 allocate {:.1} ms, wait {:.1} ms, fill {:.1} ms, bus {:.1} ms ({:.1} GB/s on the bus)",
                staged.uploads,
                staged.reused,
                staged.bytes as f64 / 1e6,
                ms(staged.total),
                ms(staged.allocate),
                ms(staged.wait),
                ms(staged.fill),
                ms(staged.bus),
                staged.bus_gb_per_s()
            )?;
            let mut lower = 0;
            let classes: Vec<String> = COPY_SIZES
                .iter()
                .zip(&staged.copies_by_size)
                .filter_map(|(&upper, copies)| {
                    let class = if upper == usize::MAX {
                        format!("> {}", kib(lower))
                    } else {
                        format!("{}–{}", kib(lower), kib(upper))
                    };
                    lower = upper;
                    (copies.copies > 0).then(|| {
                        format!(
                            "{class}: {} copies, {:.1} MB, {:.1} GB/s",
                            copies.copies,
                            copies.bytes as f64 / 1e6,
                            copies.gb_per_s()
                        )
                    })
                })
                .collect();
            writeln!(f, "bus by copy size: {}", classes.join("; "))?;
        }
        let (_, cpu_total) = self.totals();
        writeln!(f)?;
        writeln!(f, "| cpu op | calls | ms | share |")?;
        writeln!(f, "|---|---:|---:|---:|")?;
        let share = |d: Duration| 100.0 * d.as_secs_f64() / cpu_total.as_secs_f64().max(1e-12);
        let (mut rest_calls, mut rest_time) = (0, Duration::ZERO);
        for op in &self.cpu_ops {
            if share(op.time) >= 0.5 {
                writeln!(
                    f,
                    "| {} | {} | {:.1} | {:.1}% |",
                    op.name,
                    op.calls,
                    ms(op.time),
                    share(op.time)
                )?;
            } else {
                rest_calls += op.calls;
                rest_time += op.time;
            }
        }
        if rest_calls > 0 {
            writeln!(
                f,
                "| (others) | {rest_calls} | {:.1} | {:.1}% |",
                ms(rest_time),
                share(rest_time)
            )?;
        }
        if self.cpu_op_operands.is_empty() {
            return Ok(());
        }
        writeln!(f)?;
        writeln!(
            f,
            "| cpu op (top {OPERAND_ROWS} by operands) | operands | calls | ms per call | ms | share |"
        )?;
        writeln!(f, "|---|---|---:|---:|---:|---:|")?;
        for op in self.cpu_op_operands.iter().take(OPERAND_ROWS) {
            writeln!(
                f,
                "| {} | {} | {} | {:.3} | {:.1} | {:.1}% |",
                op.name,
                op.operands,
                op.calls,
                ms(op.time) / op.calls.max(1) as f64,
                ms(op.time),
                share(op.time)
            )?;
        }
        Ok(())
    }
}

/// The phase's short name: forward, dgrad (input gradient), wgrad (weight gradient).
pub fn phase_name(op: OpKind) -> &'static str {
    match op {
        OpKind::Conv2dForward => "forward",
        OpKind::Conv2dInputGrad => "dgrad",
        OpKind::Conv2dWeightGrad => "wgrad",
        OpKind::Matmul => "matmul",
    }
}

/// Rows of the per-operand table in the printed profile.
const OPERAND_ROWS: usize = 25;

#[derive(Default)]
struct State {
    /// (layer, signature, op, ran) → counters.
    layers: BTreeMap<(usize, ConvSignature, OpKind, Ran), OpCounters>,
    cpu_ops: BTreeMap<&'static str, (u64, Duration)>,
    cpu_op_operands: BTreeMap<(&'static str, String), (u64, Duration)>,
    staged_uploads: StagedUploads,
    /// The current step's forward convs, in order.
    step: Vec<ConvSignature>,
    /// Whether a gradient phase ran since the step began.
    backward_seen: bool,
    /// Gradient calls of each (signature, phase) in the current step.
    backward_calls: BTreeMap<(ConvSignature, OpKind), usize>,
    /// Wall time with profiling on, up to `since`.
    wall: Duration,
    /// When profiling was last turned on, while it is on.
    since: Option<Instant>,
    /// Time spent naming operands.
    overhead: Duration,
    /// Time offloaded ops waited for results read later.
    deferred_wait: Duration,
}

impl State {
    /// The layer position of a call, advancing the step bookkeeping.
    fn layer_of(&mut self, op: OpKind, signature: &ConvSignature) -> usize {
        if op == OpKind::Conv2dForward {
            let restarts = self
                .step
                .first()
                .is_some_and(|first| first.same_layer_as(signature));
            if self.backward_seen || restarts {
                self.step.clear();
                self.backward_calls.clear();
                self.backward_seen = false;
            }
            self.step.push(signature.clone());
            return self.step.len() - 1;
        }
        self.backward_seen = true;
        let seen = self
            .backward_calls
            .entry((signature.clone(), op))
            .or_default();
        let nth_from_end = *seen;
        *seen += 1;
        self.step
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, s)| *s == signature)
            .nth(nth_from_end)
            .map(|(i, _)| i)
            // A gradient without its forward in this step (the forward ran on another path):
            // its own row after the step's layers.
            .unwrap_or(self.step.len() + nth_from_end)
    }
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut guard = STATE.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(State::default))
}

/// A snapshot of the profile gathered since the last [`reset_profile`].
pub fn profile() -> Profile {
    with_state(|s| {
        let layers = s
            .layers
            .iter()
            .map(|((layer, signature, op, ran), c)| LayerPhase {
                layer: *layer,
                signature: signature.clone(),
                op: *op,
                ran: *ran,
                counters: *c,
            })
            .collect();
        let mut cpu_ops: Vec<CpuOpTime> = s
            .cpu_ops
            .iter()
            .map(|(name, (calls, time))| CpuOpTime {
                name,
                calls: *calls,
                time: *time,
            })
            .collect();
        cpu_ops.sort_by(|a, b| b.time.cmp(&a.time).then(a.name.cmp(b.name)));
        let mut cpu_op_operands: Vec<CpuOpOperands> = s
            .cpu_op_operands
            .iter()
            .map(|((name, operands), (calls, time))| CpuOpOperands {
                name,
                operands: operands.clone(),
                calls: *calls,
                time: *time,
            })
            .collect();
        cpu_op_operands.sort_by(|a, b| b.time.cmp(&a.time).then(a.name.cmp(b.name)));
        Profile {
            layers,
            cpu_ops,
            cpu_op_operands,
            staged_uploads: s.staged_uploads,
            wall: s.wall + s.since.map_or(Duration::ZERO, |t| t.elapsed()),
            deferred_wait: s.deferred_wait,
            overhead: s.overhead,
            synced: profile_synced(),
        }
    })
}

/// Clears the profile (and the step bookkeeping); the wall time starts again from now.
pub fn reset_profile() {
    with_state(|s| {
        *s = State {
            since: profiling().then(Instant::now),
            ..State::default()
        }
    });
}

pub(crate) fn record_conv(op: OpKind, signature: &ConvSignature, ran: Ran, counters: OpCounters) {
    with_state(|s| {
        let layer = s.layer_of(op, signature);
        s.layers
            .entry((layer, signature.clone(), op, ran))
            .or_default()
            .add(&counters);
    });
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn record_staged_upload(upload: &StagedUploads) {
    with_state(|s| s.staged_uploads.add(upload));
}

pub(crate) fn record_deferred_wait(elapsed: Duration) {
    with_state(|s| s.deferred_wait += elapsed);
}

pub(crate) fn record_cpu_op(name: &'static str, operands: Option<String>, elapsed: Duration) {
    record_cpu_op_named(name, operands, elapsed, Duration::ZERO);
}

/// Like [`record_cpu_op`], also adding the time spent naming the operands to the overhead.
fn record_cpu_op_named(
    name: &'static str,
    operands: Option<String>,
    elapsed: Duration,
    naming: Duration,
) {
    with_state(|s| {
        s.overhead += naming;
        let entry = s.cpu_ops.entry(name).or_default();
        entry.0 += 1;
        entry.1 += elapsed;
        if let Some(operands) = operands {
            let entry = s.cpu_op_operands.entry((name, operands)).or_default();
            entry.0 += 1;
            entry.1 += elapsed;
        }
    });
}

/// One float operand as the profile names it: its shape, `(strided)` when burn-flex holds it in a
/// non-contiguous layout (its slow paths), `(shared)` when its buffer is also held elsewhere
/// (burn-flex then cannot write the result in place). Other backends' layouts are not visible here.
pub(crate) fn describe_operand<T: TensorMetadata + 'static>(tensor: &T) -> String {
    let flex = (tensor as &dyn Any).downcast_ref::<burn_flex::FlexTensor>();
    let dims: Vec<String> = tensor.shape().iter().map(|d| d.to_string()).collect();
    let mut text = format!("[{}]", dims.join(","));
    if flex.is_some_and(|t| !t.is_contiguous()) {
        text.push_str(" (strided)");
    }
    if flex.is_some_and(|t| !t.is_unique()) {
        text.push_str(" (shared)");
    }
    text
}

/// Times one op of the CPU backend while profiling is on (a no-op otherwise).
pub(crate) struct CpuOpTimer {
    started: Option<StartedOp>,
}

/// An op being timed: its name, its operands as named, the time naming them took, its start.
struct StartedOp {
    name: &'static str,
    operands: Option<String>,
    naming: Duration,
    start: Instant,
}

impl CpuOpTimer {
    pub(crate) fn start(name: &'static str) -> Self {
        Self {
            started: profiling().then(|| StartedOp {
                name,
                operands: None,
                naming: Duration::ZERO,
                start: Instant::now(),
            }),
        }
    }

    /// Like [`Self::start`], also recording the op's float operands (`describe` runs only
    /// while profiling).
    pub(crate) fn start_with(name: &'static str, describe: impl FnOnce() -> Vec<String>) -> Self {
        Self {
            started: profiling().then(|| {
                let naming = Instant::now();
                let operands = Some(describe().join(" · "));
                let start = Instant::now();
                StartedOp {
                    name,
                    operands,
                    naming: start - naming,
                    start,
                }
            }),
        }
    }
}

impl Drop for CpuOpTimer {
    fn drop(&mut self) {
        if let Some(op) = self.started.take() {
            record_cpu_op_named(op.name, op.operands, op.start.elapsed(), op.naming);
        }
    }
}
