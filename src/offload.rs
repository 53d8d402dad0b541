//! The offload path: operands from the CPU tensors, cast, upload, compute, download, and the
//! fallback to the CPU when any of it fails.

use crate::Accelerator;
use crate::deferred;
use crate::device;
use crate::fallback::{guarded, injection_point, warn_once};
use crate::placement::{OpKind, Placement, Precision};
use crate::profile::{self, ConvSignature};
use crate::stats::{self, OpCounters, Ran};
use crate::uploads;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, FloatDType, Shape, TensorData, TensorMetadata};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
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
    match guarded(|| offload::<C, A>(parts, precision, upload_dtype, &accel_device, strict)) {
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
    precision: Precision,
    upload_dtype: DType,
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
        let uploaded = upload_operands::<C, A>(
            part.placed.uploads,
            precision,
            upload_dtype,
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
            results.push((index, C::float_from_data(data, &device), counters));
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
        let tensor = C::float_from_data(cast(data, out.dtype), &out.device);
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

/// `tensors` on the accelerator as `upload_dtype` with values rounded to `precision`: each an
/// earlier upload of the same buffer where one is remembered, else uploaded now (and remembered
/// when it is a burn-flex buffer). Time and bytes go to `counters`.
fn upload_operands<C: Backend, A: Accelerator>(
    tensors: Vec<FloatTensor<C>>,
    precision: Precision,
    upload_dtype: DType,
    accel_device: &A::Device,
    counters: &mut OpCounters,
) -> Result<Vec<FloatTensor<A>>, String> {
    let start = Instant::now();
    // Each operand: its device copy from an earlier upload, or its host data to upload, with
    // the burn-flex tensor it came from (to remember the upload by).
    let mut operands: Vec<Operand<A>> = Vec::with_capacity(tensors.len());
    let key = (upload_dtype, precision.dtype());
    for tensor in tensors {
        let tensor = match crate::ops::layout::into_flex::<C>(tensor) {
            Ok(flex) => {
                let on_device = |t: &FloatTensor<A>| A::float_device(t) == *accel_device;
                let reused = (flex.layout().num_elements() * key.0.size()) as u64;
                if let Some(uploaded) = uploads::reuse(&flex, key, on_device) {
                    counters.bytes_reused += reused;
                    operands.push(Operand::Uploaded(uploaded));
                    continue;
                }
                if let Some(f16) = f16_copy_for_bf16::<A>(&flex, key, on_device) {
                    counters.bytes_reused += reused;
                    operands.push(Operand::ToRound(f16));
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
            Operand::Flex(flex, dense) => {
                counters.bytes_up += (dense.layout().num_elements() * upload_dtype.size()) as u64;
                let tensor = upload_flex::<A>(&dense, upload_dtype, accel_device)?;
                uploads::remember(&flex, key, tensor.clone());
                uploaded.push(Some(tensor));
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

/// Uploads a dense burn-flex f32 tensor (from [`flex_operand`]) as `dtype`.
fn upload_flex<A: Accelerator>(
    dense: &burn_flex::FlexTensor,
    dtype: DType,
    device: &A::Device,
) -> Result<FloatTensor<A>, String> {
    let (start, end) = dense
        .layout()
        .contiguous_offsets()
        .ok_or("a dense operand lost its layout")?;
    let src = &dense.storage::<f32>()[start..end];
    A::accel_upload_cast(src, dense.layout().shape().clone(), dtype, device)
}

/// `src` cast to `dtype` (f16 or bf16) as tensor data of `shape`.
pub(crate) fn cast_slice(src: &[f32], shape: Shape, dtype: DType) -> TensorData {
    match dtype {
        DType::F16 => TensorData::new(convert(src, f16::ZERO, f32_to_f16), shape),
        DType::BF16 => TensorData::new(convert(src, bf16::ZERO, f32_to_bf16), shape),
        _ => TensorData::new(src.to_vec(), shape).convert_dtype(dtype),
    }
}

/// Writes the first `dst.len() / dtype.size()` values of `src` into `dst` as f16 or bf16
/// (`dtype`; or f32, copied as they are), in chunks across threads. `dst` must be 2-byte aligned.
pub(crate) fn cast_into(src: &[f32], dst: &mut [u8], dtype: DType) {
    let src = &src[..dst.len() / dtype.size()];
    match dtype {
        DType::F16 => convert_into(src, bytemuck::cast_slice_mut::<u8, f16>(dst), f32_to_f16),
        DType::BF16 => convert_into(src, bytemuck::cast_slice_mut::<u8, bf16>(dst), f32_to_bf16),
        DType::F32 => copy_bytes(dst, bytemuck::cast_slice(src)),
        _ => unreachable!("uploads are cast to f16 or bf16 or copied as f32, not {dtype:?}"),
    }
}

/// Whether this x86-64 CPU has AVX2 and F16C (detected once).
#[cfg(target_arch = "x86_64")]
fn has_avx2_f16c() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("f16c")
    })
}

/// f32 to f16, rounding to nearest even. On x86-64 CPUs with F16C, eight values per
/// instruction in one loop: `half`, in a crate built for baseline x86-64, reaches the same
/// instruction through a function pointer and two copies for every eight values. Same bits.
fn f32_to_f16(dst: &mut [f16], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_f16c() {
        // SAFETY: the CPU has AVX2 and F16C (checked above).
        return unsafe { f32_to_f16_f16c(dst, src) };
    }
    dst.convert_from_f32_slice(src)
}

/// [`f32_to_f16`] with F16C: eight values at a time, the tail through `half`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn f32_to_f16_f16c(dst: &mut [f16], src: &[f32]) {
    use std::arch::x86_64::{__m128i, _MM_FROUND_TO_NEAREST_INT, _mm_storeu_si128};
    use std::arch::x86_64::{_mm256_cvtps_ph, _mm256_loadu_ps};
    let n = dst.len().min(src.len());
    let body = n / 8 * 8;
    for i in (0..body).step_by(8) {
        // SAFETY: `i + 8 <= n`, within both slices; unaligned loads and stores.
        unsafe {
            let v = _mm256_loadu_ps(src.as_ptr().add(i));
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
            _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
        }
    }
    dst[body..n].convert_from_f32_slice(&src[body..n]);
}

/// f32 to bf16 as [`bf16_bits`], compiled for AVX2 where the CPU has it (eight values per
/// instruction instead of baseline x86-64's four).
fn f32_to_bf16(dst: &mut [bf16], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_f16c() {
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { f32_to_bf16_avx2(dst, src) };
    }
    bf16_bits(dst, src)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn f32_to_bf16_avx2(dst: &mut [bf16], src: &[f32]) {
    bf16_bits(dst, src)
}

/// f32 to bf16, rounding to nearest even, NaNs kept NaN: the same bits as `half`'s conversion,
/// written without branches so that the loop vectorises (`half` converts bf16 one value at a
/// time with a branch per value).
#[inline(always)]
fn bf16_bits(dst: &mut [bf16], src: &[f32]) {
    for (d, s) in dst.iter_mut().zip(src) {
        let x = s.to_bits();
        let nan = (x & 0x7fff_ffff) > 0x7f80_0000;
        let rounded = x.wrapping_add(0x7fff + ((x >> 16) & 1)) >> 16;
        let bits = if nan { (x >> 16) | 0x40 } else { rounded };
        *d = bf16::from_bits(bits as u16);
    }
}

/// `dst.copy_from_slice(src)` in chunks across threads.
pub(crate) fn copy_bytes(dst: &mut [u8], src: &[u8]) {
    /// Bytes per rayon task.
    const CHUNK: usize = 1 << 16;
    // One chunk is copied here: handing it to rayon's pool from outside it costs a wake-up and
    // a wait, longer than the copy.
    if dst.len() <= CHUNK {
        return dst.copy_from_slice(src);
    }
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// Converts float data to `dtype`, with vectorised paths for the f32 <-> f16/bf16 casts that
/// every offloaded op does, split across rayon's threads in chunks.
pub(crate) fn cast(data: TensorData, dtype: DType) -> TensorData {
    if data.dtype == dtype {
        return data;
    }
    let shape = data.shape.clone();
    match (data.dtype, dtype) {
        (DType::F32, DType::F16 | DType::BF16) => {
            cast_slice(data.as_slice::<f32>().expect("f32 data"), shape, dtype)
        }
        (DType::F16, DType::F32) => {
            let src = data.as_slice::<f16>().expect("f16 data");
            TensorData::new(convert(src, 0f32, |d, s| s.convert_to_f32_slice(d)), shape)
        }
        (DType::BF16, DType::F32) => {
            let src = data.as_slice::<bf16>().expect("bf16 data");
            TensorData::new(convert(src, 0f32, |d, s| s.convert_to_f32_slice(d)), shape)
        }
        _ => data.convert_dtype(dtype),
    }
}

/// `src` converted element by element with `convert_chunk(dst, src)`, in chunks across threads.
fn convert<S: Sync, D: Copy + Send>(
    src: &[S],
    zero: D,
    convert_chunk: impl Fn(&mut [D], &[S]) + Sync,
) -> Vec<D> {
    let mut dst = vec![zero; src.len()];
    convert_into(src, &mut dst, convert_chunk);
    dst
}

/// `dst` converted element by element from `src` with `convert_chunk(dst, src)`, in chunks
/// across threads.
fn convert_into<S: Sync, D: Send>(
    src: &[S],
    dst: &mut [D],
    convert_chunk: impl Fn(&mut [D], &[S]) + Sync,
) {
    /// Elements per rayon task.
    const CHUNK: usize = 1 << 14;
    // One chunk (a weight, a bias) is converted here, as in `copy_bytes`.
    if dst.len() <= CHUNK {
        return convert_chunk(dst, src);
    }
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| convert_chunk(d, s));
}
