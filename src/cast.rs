//! The casts every offloaded op does on the CPU: f32 operands to f16 or bf16 before their
//! upload (vectorised, split across rayon's threads), results back to f32 after their download,
//! and the writes of uploads into pinned staging memory.
//!
//! Staging memory is written with non-temporal (streaming) stores where the CPU has them
//! ([`Stores::Streaming`], the default on x86-64): the DMA engine then reads the bytes from
//! memory instead of from lines the CPU's caches hold dirty. On the H200 machine a pinned copy
//! of a buffer the CPU has just written through its caches took about twice as long as a copy
//! of one written earlier (1 MiB: 49–58 µs against 27–32 µs; 16 MiB: 652–660 µs against
//! 312–324 µs; `scripts/pinned_copy_rates.py`, `benches/RESULTS.md`). With streaming stores
//! the staging's copies there moved 37–44 GB/s instead of ~25 (`copy_bench`, 2026-12-03).
//! `BURN_HETERO_STAGING_STORES=cached` selects ordinary stores.

use burn_backend::{DType, Shape, TensorData};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;
use std::sync::OnceLock;

/// Environment variable that selects the stores writing into staging memory: `streaming`
/// (the default on x86-64) or `cached`.
pub const ENV_STAGING_STORES: &str = "BURN_HETERO_STAGING_STORES";

/// How a cast or copy writes its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stores {
    /// Ordinary stores, through the CPU's caches.
    Cached,
    /// Non-temporal stores, which go to memory without keeping the lines in the caches, for
    /// memory the CPU will not read again but a device will copy (x86-64; elsewhere these are
    /// ordinary stores).
    Streaming,
}

/// The stores that uploads write staging memory with ([`ENV_STAGING_STORES`]; read once).
pub fn staging_stores() -> Stores {
    static STORES: OnceLock<Stores> = OnceLock::new();
    *STORES.get_or_init(|| {
        let default = if cfg!(target_arch = "x86_64") {
            Stores::Streaming
        } else {
            Stores::Cached
        };
        let Ok(v) = std::env::var(ENV_STAGING_STORES) else {
            return default;
        };
        match v.trim().to_ascii_lowercase().as_str() {
            "streaming" if cfg!(target_arch = "x86_64") => Stores::Streaming,
            "streaming" => {
                log::warn!(
                    "{ENV_STAGING_STORES}={v}: this CPU has no streaming stores here; \
                     staging memory is written through the caches"
                );
                Stores::Cached
            }
            "cached" => {
                log::info!(
                    "{ENV_STAGING_STORES}={v}: staging memory is written through the caches"
                );
                Stores::Cached
            }
            _ => {
                log::warn!(
                    "{ENV_STAGING_STORES}={v}: expected streaming/cached; using {default:?}"
                );
                default
            }
        }
    })
}

/// Writes the first `dst.len() / dtype.size()` values of `src` into `dst` as `dtype`: f16 or
/// bf16 (rounded to nearest even, NaNs kept NaN: the bits of `half`'s conversions), or f32,
/// copied as they are; in chunks across rayon's threads, with `stores`.
///
/// # Panics
///
/// When `dtype` is none of those three, `dst` is not aligned to or sized in whole values of
/// `dtype`'s size (2 bytes, or 4 for f32), or `src` holds fewer values than `dst` has room for.
pub fn f32_into(src: &[f32], dst: &mut [u8], dtype: DType, stores: Stores) {
    let size = dtype.size();
    let convert: fn(&mut [u8], &[f32]) = match dtype {
        DType::F16 => |d, s| f32_to_f16(bytemuck::cast_slice_mut(d), s),
        DType::BF16 => |d, s| f32_to_bf16(bytemuck::cast_slice_mut(d), s),
        DType::F32 => |d, s| d.copy_from_slice(bytemuck::cast_slice(&s[..d.len() / 4])),
        _ => panic!("f32 values are written as f16, bf16 or f32, not {dtype:?}"),
    };
    assert!(
        dst.len().is_multiple_of(size) && (dst.as_ptr() as usize).is_multiple_of(size),
        "a destination for {dtype:?} must be aligned to and sized in whole values of {size} bytes"
    );
    let n = dst.len() / size;
    assert!(
        src.len() >= n,
        "{} values to write from {} in the source",
        n,
        src.len()
    );
    let src = &src[..n];
    fill_chunks(dst, stores, |d, s_off| convert(d, &src[s_off / size..]));
}

/// `dst.copy_from_slice(src)`, in chunks across rayon's threads, with `stores`.
///
/// # Panics
///
/// When the lengths differ.
pub fn bytes_into(dst: &mut [u8], src: &[u8], stores: Stores) {
    assert_eq!(
        dst.len(),
        src.len(),
        "a copy between buffers of different lengths"
    );
    fill_chunks(dst, stores, |d, off| {
        d.copy_from_slice(&src[off..off + d.len()])
    });
}

/// Fills `dst` with `fill(part, offset)` (`part` being `dst[offset..offset + part.len()]`, or
/// a buffer written to it afterwards), in chunks across rayon's threads, with `stores`. Every
/// part starts at an even offset and has an even length when `dst`'s length is even.
fn fill_chunks(dst: &mut [u8], stores: Stores, fill: impl Fn(&mut [u8], usize) + Sync) {
    /// Bytes per rayon task.
    const CHUNK: usize = 1 << 15;
    let write = |d: &mut [u8], offset: usize| match stores {
        Stores::Cached => fill(d, offset),
        Stores::Streaming => stream(d, |part, at| fill(part, offset + at)),
    };
    // One chunk (a weight, a bias) is written here: handing it to rayon's pool from outside it
    // costs a wake-up and a wait, longer than the work.
    if dst.len() <= CHUNK {
        return write(dst, 0);
    }
    dst.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(i, d)| write(d, i * CHUNK));
}

/// Fills `dst` as [`fill_chunks`]'s `fill` does, with non-temporal stores for its 16-byte
/// aligned body: each block of it is filled into a buffer that stays in the L1 cache and then
/// streamed out, so the converters stay as they are. The unaligned head and the tail short of a
/// block are filled in place. Ends with a store fence, so that the streamed bytes are in memory
/// before whatever this thread does next (the caller's copy is queued after it).
#[cfg(target_arch = "x86_64")]
fn stream(dst: &mut [u8], fill: impl Fn(&mut [u8], usize)) {
    use std::arch::x86_64::{__m128i, _mm_load_si128, _mm_sfence, _mm_stream_si128};
    /// Bytes per block: 16 cache lines.
    const BLOCK: usize = 1024;
    #[repr(align(64))]
    struct Block([u8; BLOCK]);
    let head = dst.as_ptr().align_offset(16).min(dst.len());
    let body = (dst.len() - head) / BLOCK * BLOCK;
    let (first, rest) = dst.split_at_mut(head);
    let (blocks, tail) = rest.split_at_mut(body);
    if !first.is_empty() {
        fill(first, 0);
    }
    let mut buffer = Block([0; BLOCK]);
    for (i, block) in blocks.chunks_exact_mut(BLOCK).enumerate() {
        fill(&mut buffer.0, head + i * BLOCK);
        for (to, from) in block.chunks_exact_mut(16).zip(buffer.0.chunks_exact(16)) {
            // SAFETY: `to` is 16 bytes at a 16-byte aligned address (`head` aligns the body,
            // blocks are multiples of 16), `from` 16 bytes of the 64-byte aligned buffer;
            // SSE2 is part of x86-64.
            unsafe {
                let v = _mm_load_si128(from.as_ptr() as *const __m128i);
                _mm_stream_si128(to.as_mut_ptr() as *mut __m128i, v);
            }
        }
    }
    if !tail.is_empty() {
        fill(tail, head + body);
    }
    // SAFETY: SSE is part of x86-64.
    unsafe { _mm_sfence() };
}

/// [`fill_chunks`]'s `fill` in place: the CPU has no non-temporal stores here.
#[cfg(not(target_arch = "x86_64"))]
fn stream(dst: &mut [u8], fill: impl Fn(&mut [u8], usize)) {
    fill(dst, 0)
}

/// `src` cast to `dtype` (f16 or bf16) as tensor data of `shape`.
pub(crate) fn cast_slice(src: &[f32], shape: Shape, dtype: DType) -> TensorData {
    match dtype {
        DType::F16 => TensorData::new(convert(src, f16::ZERO, f32_to_f16), shape),
        DType::BF16 => TensorData::new(convert(src, bf16::ZERO, f32_to_bf16), shape),
        _ => TensorData::new(src.to_vec(), shape).convert_dtype(dtype),
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
    // One chunk (a weight, a bias) is converted here, as in `fill_chunks`.
    if dst.len() <= CHUNK {
        return convert_chunk(dst, src);
    }
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| convert_chunk(d, s));
}
