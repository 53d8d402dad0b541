//! `burn_hetero::cast`: the casts that uploads write into staging memory, with cached and with
//! streaming stores, against `half`'s conversions bit for bit.

use crate::common::rng_for;
use burn_backend::DType;
use burn_hetero::cast::{Stores, bytes_into, f32_into};
use half::{bf16, f16};
use rand::Rng;

/// Bytes written before a cast, so that a value it fails to write shows.
const POISON: u8 = 0xA5;

/// Random values over f16's range and beyond it, with the cases rounding has to get right:
/// signed zeros, infinities, NaNs (quiet, signalling, negative), subnormals of both types,
/// values just past f16's largest, and ties of both types' last places.
fn values(n: usize) -> Vec<f32> {
    let mut rng = rng_for("cast");
    let special = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc0_1234),
        f32::MIN_POSITIVE,
        1e-40,
        -3e-39,
        6e-8,
        -5.9e-8,
        65504.0,
        65520.0,
        -70000.0,
        1.0 + f32::EPSILON * 1024.0,
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
    ];
    (0..n)
        .map(|i| match i % 97 {
            k if k < special.len() => special[k],
            _ => {
                let magnitude = 10f32.powi(rng.random_range(-9..6));
                rng.random_range(-1.0f32..1.0) * magnitude
            }
        })
        .collect()
}

/// The bits `half` gives for `src` as `dtype`, as bytes.
fn expected(src: &[f32], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F16 => src
            .iter()
            .flat_map(|&v| f16::from_f32(v).to_bits().to_ne_bytes())
            .collect(),
        DType::BF16 => src
            .iter()
            .flat_map(|&v| bf16::from_f32(v).to_bits().to_ne_bytes())
            .collect(),
        DType::F32 => src.iter().flat_map(|v| v.to_ne_bytes()).collect(),
        _ => unreachable!(),
    }
}

/// A buffer whose bytes from `offset` on are 64-byte aligned plus `offset`.
struct Buffer {
    storage: Vec<u64>,
    offset: usize,
    len: usize,
}

impl Buffer {
    fn new(len: usize, offset: usize) -> Self {
        let mut storage = vec![0u64; (len + offset + 128) / 8];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut storage);
        bytes.fill(POISON);
        Buffer {
            storage,
            offset,
            len,
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.storage);
        let start = bytes.as_ptr().align_offset(64) + self.offset;
        &mut bytes[start..start + self.len]
    }

    /// Whether the bytes around the destination were left alone.
    fn untouched_outside(&self) -> bool {
        let bytes: &[u8] = bytemuck::cast_slice(&self.storage);
        let start = bytes.as_ptr().align_offset(64) + self.offset;
        bytes[..start].iter().all(|&b| b == POISON)
            && bytes[start + self.len..].iter().all(|&b| b == POISON)
    }
}

/// f16, bf16 and f32, with both kinds of stores, at lengths below one chunk, of several chunks,
/// and not a whole number of blocks; at aligned and unaligned starts.
#[test]
fn casts_into_staging_match_half_bit_for_bit() {
    let src = values(100_003);
    for dtype in [DType::F16, DType::BF16, DType::F32] {
        let size = dtype.size();
        for stores in [Stores::Cached, Stores::Streaming] {
            for n in [1, 7, 8, 513, 16_384, 40_000, 100_003] {
                for offset in [0, size, 3 * size, 32] {
                    let case = format!("{dtype:?}, {stores:?}, {n} values at +{offset}");
                    let mut buffer = Buffer::new(n * size, offset);
                    // Source values past `n` must not be read into the destination.
                    f32_into(&src, buffer.bytes(), dtype, stores);
                    let want = expected(&src[..n], dtype);
                    let got = buffer.bytes().to_vec();
                    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
                        let k = i / size;
                        panic!(
                            "{case}: value {k} ({:e}, bits {:#010x}) written as {:02x?}, \
                             expected {:02x?}",
                            src[k],
                            src[k].to_bits(),
                            &got[k * size..(k + 1) * size],
                            &want[k * size..(k + 1) * size],
                        );
                    }
                    assert!(buffer.untouched_outside(), "{case}: wrote outside");
                }
            }
        }
    }
}

#[test]
fn byte_copies_into_staging_are_exact() {
    let mut rng = rng_for("cast_bytes");
    let src: Vec<u8> = (0..200_001).map(|_| rng.random()).collect();
    for stores in [Stores::Cached, Stores::Streaming] {
        for n in [3, 1000, 65_537, 200_001] {
            for offset in [0, 1, 17] {
                let mut buffer = Buffer::new(n, offset);
                bytes_into(buffer.bytes(), &src[..n], stores);
                assert!(
                    buffer.bytes() == &src[..n],
                    "{stores:?}, {n} bytes at +{offset}: not the source"
                );
                assert!(buffer.untouched_outside(), "{stores:?}: wrote outside");
            }
        }
    }
}

/// Bad destinations and types are refused with a message.
#[test]
fn casts_refuse_a_misaligned_or_short_destination() {
    let src = values(64);
    let message = |f: &dyn Fn()| {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    };
    let odd = message(&|| {
        f32_into(
            &src,
            Buffer::new(10, 1).bytes(),
            DType::F16,
            Stores::Streaming,
        )
    });
    assert!(odd.contains("aligned"), "{odd}");
    let short = message(&|| {
        f32_into(
            &src[..4],
            Buffer::new(64, 0).bytes(),
            DType::F32,
            Stores::Cached,
        )
    });
    assert!(short.contains("values to write"), "{short}");
    let int = message(&|| f32_into(&src, Buffer::new(16, 0).bytes(), DType::I32, Stores::Cached));
    assert!(int.contains("not I32"), "{int}");
}
