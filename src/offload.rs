//! The offload path: operands from the CPU tensors, cast, upload, compute, download, and the
//! fallback to the CPU when any of it fails.

use crate::Accelerator;
use crate::cast::cast;
use crate::deferred;
use crate::device;
use crate::fallback::{guarded, injection_point, warn_once};
use crate::placement::{OpKind, Placement, Precision};
use crate::profile::{self, ConvSignature};
use crate::stats::{self, OpCounters, Ran};
use crate::uploads;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, FloatDType, TensorData, TensorMetadata};
use std::time::Instant;

/// One placed op, as the op functions describe it.
pub(crate) struct PlacedOp<C: Backend> {
    /// Which op.
    pub op: OpKind,
    /// The CPU device the op belongs to.
    pub device: C::Device,
    /// The float dtype of the result.
    pub out_dtype: DType,
    /// Floating-point operations of one call.
    pub flops: u64,
    /// The tensors the accelerator needs, in the order `on_accelerator` expects them.
    pub uploads: Vec<FloatTensor<C>>,
    /// The conv's shape, for the per-layer profile (None: not a conv).
    pub signature: Option<ConvSignature>,
    /// Operands (by index into `uploads`) that a later op reads too: where that op is placed on
    /// the accelerator at another precision, they go up with this op's operands at that
    /// precision as well (a conv's weight, for its input gradient), so that the later op finds
    /// them there instead of rounding this op's copy on the device.
    pub ahead: Vec<(usize, OpKind)>,
}

/// Adds one call's counters to the statistics and, while profiling, to its layer's profile.
fn record(op: OpKind, signature: Option<&ConvSignature>, ran: Ran, counters: OpCounters) {
    stats::record(op, ran, counters);
    if profile::profiling() {
        match signature {
            Some(signature) => profile::record_conv(op, signature, ran, counters),
            // Other placed ops (matmul) join the CPU ops when they ran there.
            None if !matches!(ran, Ran::Accelerator(_)) => {
                profile::record_cpu_op(op.backend_op_name(), None, counters.cpu)
            }
            None => {}
        }
    }
}

/// Runs `placed` where its placement says: `on_accelerator` receives the uploaded operands on
/// the accelerator device; `on_cpu` runs the op on `C` (the placement is the CPU, or the
/// accelerator could not run it).
pub(crate) fn run<C, A>(
    placed: PlacedOp<C>,
    on_accelerator: impl FnOnce(Vec<FloatTensor<A>>, &A::Device) -> Result<FloatTensor<A>, String>,
    on_cpu: impl FnOnce() -> FloatTensor<C>,
) -> FloatTensor<C>
where
    C: Backend,
    A: Accelerator,
{
    let part = Part {
        placed,
        launch: Box::new(on_accelerator),
        read_later: None,
    };
    run_parts::<C, A>(part, Vec::new(), on_cpu).0
}

/// A placed op with its launch on the uploaded operands (see [`run_parts`]).
pub(crate) struct Part<'a, C: Backend, A: Accelerator> {
    /// The op.
    pub placed: PlacedOp<C>,
    /// Receives the uploaded operands, in the order of `placed.uploads`, and launches the op.
    pub launch: Launch<'a, A>,
    /// Where the result is not needed before the op returns (a weight gradient): it is read
    /// back after the other parts' results, and this computes it on the CPU if that read fails
    /// (see [`deferred`]). None: read with the others.
    pub read_later: Option<CpuResult<C>>,
}

/// An op's result computed on the CPU.
pub(crate) type CpuResult<C> = Box<dyn FnOnce() -> FloatTensor<C> + Send>;

/// The launch of an offloaded op on its uploaded operands.
pub(crate) type Launch<'a, A> = Box<
    dyn FnOnce(
            Vec<FloatTensor<A>>,
            &<A as burn_backend::BackendTypes>::Device,
        ) -> Result<FloatTensor<A>, String>
        + 'a,
>;

/// Runs `main` like [`run`] and, when it runs on the accelerator, the `extras` in the same call:
/// their operands go up after `main`'s (reusing its uploads of the same buffers), their launches
/// follow, and every result comes back in one read, which saves the accelerator a round trip
/// per extra. The extras must be placed like `main` (the caller checks); on the CPU or on a
/// fallback only `main` runs, and no extra result is returned. Each op's counters are recorded
/// apart.
pub(crate) fn run_parts<C, A>(
    main: Part<'_, C, A>,
    extras: Vec<Part<'_, C, A>>,
    on_cpu: impl FnOnce() -> FloatTensor<C>,
) -> (FloatTensor<C>, Vec<FloatTensor<C>>)
where
    C: Backend,
    A: Accelerator,
{
    let (op, flops) = (main.placed.op, main.placed.flops);
    let signature = main.placed.signature.clone();
    let config = device::config(&main.placed.device);
    let on_cpu_only = |ran| {
        let out = run_on_cpu::<C>(op, signature.as_ref(), ran, flops, on_cpu);
        (out, Vec::new())
    };
    let precision = match config.placement(op) {
        Placement::Cpu => return on_cpu_only(Ran::Cpu),
        Placement::Accelerator { precision } => precision,
    };
    let fallback = |cause_key: String, cause: String| {
        if config.strict {
            panic!("burn-hetero (strict mode): {op} is placed on the accelerator, but {cause}");
        }
        warn_once(
            &cause_key,
            &format!("{op} runs on the CPU instead of the accelerator: {cause}"),
        );
    };
    if !config.accelerator_enabled {
        fallback(
            "disabled".into(),
            "the accelerator is disabled by configuration".into(),
        );
        return on_cpu_only(Ran::CpuFallback);
    }
    let accel_device = device::accelerator_device::<C, A>(&main.placed.device);
    let info = match device::probe::<A>(&accel_device) {
        Ok(info) => info,
        Err(reason) => {
            fallback(
                format!("unavailable:{reason}"),
                format!("the accelerator {accel_device:?} is unavailable: {reason}"),
            );
            return on_cpu_only(Ran::CpuFallback);
        }
    };
    // Operands always carry values rounded to `precision`; a device that cannot store that type
    // receives them widened to f32 (same values, twice the bytes on the bus).
    let upload_dtype = if info.supports(precision) {
        precision.dtype()
    } else {
        warn_once(
            &format!("precision:{}:{precision}", info.name),
            &format!(
                "{} cannot store {precision}: {op} operands are rounded to {precision} on the CPU \
                 and uploaded as f32",
                info.name
            ),
        );
        DType::F32
    };
    let mut parts = vec![main];
    parts.extend(extras);
    let described: Vec<_> = parts
        .iter()
        .map(|p| (p.placed.op, p.placed.signature.clone()))
        .collect();
    let strict = config.strict;
    // The dtype a later op reads an operand in, where it differs from this op's and the device
    // stores it (f16 or bf16, read straight from burn-flex's buffer).
    let ahead_dtype = |later: OpKind| match config.placement(later) {
        Placement::Accelerator { precision: p }
            if p != precision && p != Precision::F32 && info.supports(p) =>
        {
            Some(p.dtype())
        }
        _ => None,
    };
    let uploading = Uploading {
        precision,
        upload_dtype,
        ahead_dtype: &ahead_dtype,
    };
    match guarded(|| offload::<C, A>(parts, &uploading, &accel_device, strict)) {
        Ok(Ok(results)) => {
            let mut outs = Vec::with_capacity(results.len());
            for ((out, counters), (op, signature)) in results.into_iter().zip(described) {
                let ran = Ran::Accelerator(precision);
                record(op, signature.as_ref(), ran, counters);
                outs.push(out);
            }
            let main = outs.remove(0);
            (main, outs)
        }
        Ok(Err(cause)) | Err(cause) => {
            fallback(
                format!("failed:{op}:{cause}"),
                format!("it failed there: {cause}"),
            );
            on_cpu_only(Ran::CpuFallback)
        }
    }
}

fn run_on_cpu<C: Backend>(
    op: OpKind,
    signature: Option<&ConvSignature>,
    ran: Ran,
    flops: u64,
    on_cpu: impl FnOnce() -> FloatTensor<C>,
) -> FloatTensor<C> {
    let start = Instant::now();
    let out = on_cpu();
    // The CPU backend may be lazy; the time recorded includes the work only once synced.
    let _ = C::sync(&C::float_device(&out));
    let counters = OpCounters {
        calls: 1,
        elements: out.shape().num_elements() as u64,
        flops,
        cpu: start.elapsed(),
        ..Default::default()
    };
    record(op, signature, ran, counters);
    out
}

/// Uploads, launches and reads back every part, in that order, each part's time and bytes in
/// its own counters. Parts to be read later are launched after the others' read is queued and
/// come back as tensors whose bytes arrive on first access (see [`deferred`]); in a synced profile,
/// every part is read at once, to time it.
fn offload<C: Backend, A: Accelerator>(
    parts: Vec<Part<'_, C, A>>,
    uploading: &Uploading<'_>,
    accel_device: &A::Device,
    strict: bool,
) -> Result<Vec<(FloatTensor<C>, OpCounters)>, String> {
    // Syncing between the phases only attributes their time (a synced profile); otherwise the
    // read below waits for the whole chain and reports any failure in it.
    let syncing = profile::syncing();
    injection_point();
    // Results left for later by the previous op are in by now; taking them frees their
    // operands and staging memory before this op needs more.
    let settling = profile::profiling().then(Instant::now);
    deferred::settle_all();
    if let Some(start) = settling {
        profile::record_deferred_wait(start.elapsed());
    }
    A::accel_wake(accel_device);
    let mut launches = Vec::with_capacity(parts.len());
    for part in parts {
        let mut counters = OpCounters {
            calls: 1,
            flops: part.placed.flops,
            ..Default::default()
        };
        // Each part's operands go up before the next part's are looked up, so that a buffer
        // two parts share is uploaded once.
        let ahead: Vec<(usize, DType)> = part
            .placed
            .ahead
            .iter()
            .filter_map(|&(i, later)| (uploading.ahead_dtype)(later).map(|d| (i, d)))
            .collect();
        // The weight gradient may read the forward's f16 input as is, for bf16 operands.
        let f16_as_is = part.placed.op == OpKind::Conv2dWeightGrad && A::accel_reads_f16_for_bf16();
        let uploaded = upload_operands::<C, A>(
            part.placed.uploads,
            uploading,
            &ahead,
            f16_as_is,
            accel_device,
            &mut counters,
        )?;
        if syncing {
            let start = Instant::now();
            A::sync(accel_device).map_err(|e| format!("upload failed: {e}"))?;
            counters.upload += start.elapsed();
        }
        let later = part.read_later.filter(|_| !syncing);
        let out = Out::<C> {
            op: part.placed.op,
            dtype: part.placed.out_dtype,
            device: part.placed.device,
            later,
        };
        launches.push((part.launch, uploaded, counters, out));
    }
    let (now, later): (Vec<_>, Vec<_>) = launches
        .into_iter()
        .enumerate()
        .partition(|(_, l)| l.3.later.is_none());

    let mut results = Vec::with_capacity(now.len() + later.len());
    let mut outs = Vec::with_capacity(now.len());
    let mut meta = Vec::with_capacity(now.len());
    for (index, (launch, uploaded, mut counters, out)) in now {
        let start = Instant::now();
        outs.push(launch(uploaded, accel_device)?);
        if syncing {
            A::sync(accel_device).map_err(|e| format!("kernel failed: {e}"))?;
        }
        counters.compute += start.elapsed();
        meta.push((index, counters, out));
    }

    // One read for all results; in a synced profile, one per part, to time each.
    let mut datas = Vec::with_capacity(outs.len());
    if syncing {
        for (out, (_, counters, _)) in outs.into_iter().zip(&mut meta) {
            let start = Instant::now();
            let data = A::accel_download(out).map_err(|e| format!("download failed: {e}"))?;
            counters.download += start.elapsed();
            datas.push(data);
        }
    } else {
        let start = Instant::now();
        let read = A::accel_download_later(outs).map_err(|e| format!("download failed: {e}"))?;
        let mut elapsed = start.elapsed();
        // The parts read later go to the device behind this read.
        for (index, (launch, uploaded, mut counters, out)) in later {
            let launched = Instant::now();
            let result = launch(uploaded, accel_device)?;
            counters.compute += launched.elapsed();
            let shape = result.shape();
            let read = A::accel_download_later(vec![result])
                .map_err(|e| format!("download failed: {e}"))?;
            let Out {
                op,
                dtype,
                device,
                later,
            } = out;
            let fallback = later.expect("parts read later have a CPU fallback");
            let job = deferred::Job {
                op: op.to_string(),
                settle: Box::new(move || {
                    let data = read()?.pop().ok_or("a read returned no result")?;
                    Ok(cast(data, dtype))
                }),
                fallback: Box::new(move || {
                    burn_std::future::block_on(C::float_into_data(fallback()))
                        .map_err(|e| format!("reading the CPU result failed: {e}"))
                }),
                strict,
            };
            let data = deferred::tensor_data(job, shape, dtype);
            counters.bytes_down += data.bytes.len() as u64;
            counters.elements = data.num_elements() as u64;
            counters.deferred_reads += 1;
            let tensor = crate::ops::layout::pending_from_data::<C>(data, &device);
            results.push((index, tensor, counters));
        }
        let start = Instant::now();
        datas = read().map_err(|e| format!("download failed: {e}"))?;
        elapsed += start.elapsed();
        // The shared read's time, split by bytes.
        let total: usize = datas.iter().map(|d| d.bytes.len()).sum();
        for (data, (_, counters, _)) in datas.iter().zip(&mut meta) {
            let share = data.bytes.len() as f64 / total.max(1) as f64;
            counters.download += elapsed.mul_f64(share);
        }
    }

    for (data, (index, mut counters, out)) in datas.into_iter().zip(meta) {
        counters.bytes_down += data.bytes.len() as u64;
        counters.elements = data.num_elements() as u64;
        let start = Instant::now();
        let tensor = crate::ops::layout::float_from_data::<C>(cast(data, out.dtype), &out.device);
        counters.cpu += start.elapsed();
        results.push((index, tensor, counters));
    }
    results.sort_by_key(|(index, _, _)| *index);
    Ok(results.into_iter().map(|(_, t, c)| (t, c)).collect())
}

/// Where a part's result goes: its op, dtype and CPU device, and its CPU fallback where it is
/// read later.
struct Out<C: Backend> {
    op: OpKind,
    dtype: DType,
    device: C::Device,
    later: Option<CpuResult<C>>,
}

/// How an op's operands go up: the op's precision, the dtype its operands are uploaded as
/// (`precision`'s, or f32 holding values rounded to it where the device cannot store it), and
/// the dtype a later op reads an operand in, where that differs (see [`PlacedOp::ahead`]).
struct Uploading<'a> {
    precision: Precision,
    upload_dtype: DType,
    ahead_dtype: &'a dyn Fn(OpKind) -> Option<DType>,
}

/// `tensors` on the accelerator as `upload_dtype` with values rounded to `precision`: each an
/// earlier upload of the same buffer where one is remembered, else uploaded now (and remembered
/// when it is a burn-flex buffer). The burn-flex operands listed in `ahead` (index and dtype)
/// also go up in that dtype, for a later op, unless such a copy is remembered already. A
/// remembered f16 copy where bf16 is asked for is rounded to bf16 on the device, or with
/// `f16_as_is` handed over as it is (the op rounds it as it reads it). Time and bytes go to
/// `counters`.
fn upload_operands<C: Backend, A: Accelerator>(
    tensors: Vec<FloatTensor<C>>,
    uploading: &Uploading<'_>,
    ahead: &[(usize, DType)],
    f16_as_is: bool,
    accel_device: &A::Device,
    counters: &mut OpCounters,
) -> Result<Vec<FloatTensor<A>>, String> {
    let (precision, upload_dtype) = (uploading.precision, uploading.upload_dtype);
    let start = Instant::now();
    // Each operand: its device copy from an earlier upload, or its host data to upload, with
    // the burn-flex tensor it came from (to remember the upload by).
    let mut operands: Vec<Operand<A>> = Vec::with_capacity(tensors.len());
    // Burn-flex operands to upload in another dtype for a later op: the tensor, its dense
    // form, and the dtype.
    let mut later = Vec::new();
    let key = (upload_dtype, precision.dtype());
    for (index, tensor) in tensors.into_iter().enumerate() {
        let tensor = match crate::ops::layout::into_flex::<C>(tensor) {
            Ok(flex) => {
                let on_device = |t: &FloatTensor<A>| A::float_device(t) == *accel_device;
                for &(_, dtype) in ahead.iter().filter(|(i, _)| *i == index) {
                    if uploads::reuse(&flex, (dtype, dtype), on_device).is_none()
                        && let Some(dense) = flex_operand(&flex, dtype, dtype)
                    {
                        counters.bytes_up += (dense.layout().num_elements() * dtype.size()) as u64;
                        later.push((flex.clone(), dense, dtype));
                    }
                }
                let reused = (flex.layout().num_elements() * key.0.size()) as u64;
                if let Some(uploaded) = uploads::reuse(&flex, key, on_device) {
                    counters.bytes_reused += reused;
                    operands.push(Operand::Uploaded(uploaded));
                    continue;
                }
                if let Some(f16) = f16_copy_for_bf16::<A>(&flex, key, on_device) {
                    counters.bytes_reused += reused;
                    operands.push(if f16_as_is {
                        Operand::Uploaded(f16)
                    } else {
                        Operand::ToRound(f16)
                    });
                    continue;
                }
                match flex_operand(&flex, precision.dtype(), upload_dtype) {
                    Some(dense) => {
                        operands.push(Operand::Flex(flex, dense));
                        continue;
                    }
                    None => crate::ops::layout::from_flex::<C>(flex),
                }
            }
            Err(tensor) => tensor,
        };
        let data = burn_std::future::block_on(C::float_into_data(tensor))
            .map_err(|e| format!("reading an operand on the CPU failed: {e}"))?;
        let rounded = cast(data, precision.dtype());
        operands.push(Operand::Host(cast(rounded, upload_dtype)));
    }
    counters.cpu += start.elapsed();

    let start = Instant::now();
    let mut uploaded = Vec::with_capacity(operands.len());
    let mut to_round = Vec::new();
    let mut flex = Vec::new();
    for (i, operand) in operands.into_iter().enumerate() {
        match operand {
            Operand::Uploaded(tensor) => uploaded.push(Some(tensor)),
            Operand::ToRound(f16) => {
                to_round.push((i, f16));
                uploaded.push(None);
            }
            Operand::Host(data) => {
                counters.bytes_up += data.bytes.len() as u64;
                uploaded.push(Some(A::accel_upload(data, accel_device)?));
            }
            Operand::Flex(tensor, dense) => {
                counters.bytes_up += (dense.layout().num_elements() * upload_dtype.size()) as u64;
                flex.push((i, tensor, dense));
                uploaded.push(None);
            }
        }
    }
    // The burn-flex operands go up together, with those for later ops: one transfer for a
    // conv's input, weight and the weight for its input gradient.
    let later = later
        .into_iter()
        .map(|(tensor, dense, dtype)| (None, tensor, dense, dtype));
    let flex: Vec<_> = flex
        .into_iter()
        .map(|(i, tensor, dense)| (Some(i), tensor, dense, upload_dtype))
        .chain(later)
        .collect();
    if !flex.is_empty() {
        let sources = flex
            .iter()
            .map(|(_, _, dense, dtype)| {
                dense_f32(dense).map(|src| (src, dense.layout().shape().clone(), *dtype))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let tensors = A::accel_upload_cast_all(&sources, accel_device)?;
        if tensors.len() != flex.len() {
            return Err(format!(
                "{} operands uploaded for {}",
                tensors.len(),
                flex.len()
            ));
        }
        for ((i, tensor, _, dtype), on_device) in flex.iter().zip(tensors) {
            match i {
                Some(i) => {
                    uploads::remember(tensor, key, on_device.clone());
                    uploaded[*i] = Some(on_device);
                }
                None => uploads::remember(tensor, (*dtype, *dtype), on_device),
            }
        }
    }
    // The device-side roundings are queued after the host copies. The op's start flushed the
    // device thread's queue (`wake`), and a task queued after a flush waits, spinning, until
    // that thread, maybe asleep in 150 µs steps, takes the next batch: queued first, they
    // would hold up the copies by that wake-up; queued after, the thread has woken meanwhile.
    for (i, f16) in to_round {
        uploaded[i] = Some(A::float_cast(f16, FloatDType::BF16));
    }
    counters.upload += start.elapsed();
    uploaded
        .into_iter()
        .map(|t| t.ok_or_else(|| "an operand was not placed on the accelerator".to_string()))
        .collect()
}

/// The f16 upload of `flex`, to be rounded on to bf16 on the device, when `key` asks for bf16
/// and only an f16 upload is remembered: a conv's backward (bf16 by default) reads the input and
/// weight its forward (f16) uploaded. The values are then the forward's f16 values rounded on to
/// bf16, which can differ from rounding the f32 values to bf16 directly by one bf16 unit in the
/// last place (where the f16 value is a bf16 tie), and carry the forward's f16 range: the
/// weight gradient sees the input the forward computed with.
fn f16_copy_for_bf16<A: Accelerator>(
    flex: &burn_flex::FlexTensor,
    key: (DType, DType),
    on_device: impl Fn(&FloatTensor<A>) -> bool,
) -> Option<FloatTensor<A>> {
    if key != (DType::BF16, DType::BF16) {
        return None;
    }
    uploads::reuse(flex, (DType::F16, DType::F16), on_device)
}

/// An operand of an offloaded op.
// A few live per op, briefly: boxing the large variant would cost more than it saves.
#[allow(clippy::large_enum_variant)]
enum Operand<A: Backend> {
    /// On the device already: an earlier upload of the same buffer (see [`uploads`]).
    Uploaded(FloatTensor<A>),
    /// On the device as f16, to be rounded to bf16 there (see [`f16_copy_for_bf16`]).
    ToRound(FloatTensor<A>),
    /// Host data in the upload dtype.
    Host(TensorData),
    /// A burn-flex f32 tensor to upload as the upload dtype: the tensor (remembered by
    /// [`uploads`]) and its dense form (itself, or a copy of its view).
    Flex(burn_flex::FlexTensor, burn_flex::FlexTensor),
}

/// A burn-flex f32 operand to be cast to `dtype` (f16 or bf16, the upload type) straight from
/// its storage, without the copy that reading it as `TensorData` makes of a buffer shared with
/// the autodiff graph: the tensor itself when dense, else a dense copy of its view made block by
/// block. None for other cases.
fn flex_operand(
    tensor: &burn_flex::FlexTensor,
    precision: DType,
    dtype: DType,
) -> Option<burn_flex::FlexTensor> {
    if tensor.dtype() != DType::F32
        || precision != dtype
        || !matches!(dtype, DType::F16 | DType::BF16)
    {
        return None;
    }
    let dense = crate::ops::layout::block_copy(tensor).unwrap_or_else(|| tensor.clone());
    dense.layout().contiguous_offsets()?;
    Some(dense)
}

/// The f32 values of a dense burn-flex tensor (from [`flex_operand`]), in order.
fn dense_f32(dense: &burn_flex::FlexTensor) -> Result<&[f32], String> {
    let (start, end) = dense
        .layout()
        .contiguous_offsets()
        .ok_or("a dense operand lost its layout")?;
    Ok(&dense.storage::<f32>()[start..end])
}
