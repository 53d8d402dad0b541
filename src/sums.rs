//! f64 sums over f32 values, eight lanes at a time: the per-plane statistics of batch norm's
//! forward and backward and the per-channel sums of a convolution's bias gradient.
//!
//! Each sum is written once, over a vector of eight f64 lanes, and compiled three ways: with
//! AVX (two registers of four lanes), with SSE2 (four registers of two; part of every x86-64
//! CPU) and as plain arrays (other targets). Written as plain arrays of eight lanes, LLVM, for
//! baseline x86-64, paired each lane's sum with its sum of squares instead of pairing lanes,
//! and converted, subtracted and multiplied one value at a time: batch norm's forward spent
//! three times as long summing as writing its output (`perf` on `cpu_ops`'s
//! `batch_norm_forward`). Every lane adds the same values in the same order in all three, and
//! Rust contracts no multiply-add into a fused one, so they give the same bits.

/// How a sum is computed: see [`available`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lanes {
    /// Arrays of eight f64 lanes, as the compiler vectorises them.
    Portable,
    /// SSE2 intrinsics, four registers of two lanes (x86-64).
    Sse2,
    /// AVX intrinsics, two registers of four lanes (x86-64 CPUs with AVX).
    Avx,
}

/// The forms this CPU can run, the one [`detected`] picks last.
pub fn available() -> Vec<Lanes> {
    let mut all = vec![Lanes::Portable];
    #[cfg(target_arch = "x86_64")]
    {
        all.push(Lanes::Sse2);
        if has_avx() {
            all.push(Lanes::Avx);
        }
    }
    all
}

/// The form the sums use on this CPU: AVX where it has it, else SSE2 on x86-64, else portable.
pub fn detected() -> Lanes {
    #[cfg(target_arch = "x86_64")]
    return if has_avx() { Lanes::Avx } else { Lanes::Sse2 };
    #[cfg(not(target_arch = "x86_64"))]
    Lanes::Portable
}

#[cfg(target_arch = "x86_64")]
fn has_avx() -> bool {
    // The standard library caches what it detected.
    std::arch::is_x86_feature_detected!("avx")
}

/// Runs the instance of `$kernel` for `$lanes` with `$args`; the portable one for a form this
/// CPU cannot run.
macro_rules! dispatch {
    ($lanes:expr, $kernel:ident($($args:expr),*)) => {{
        match $lanes {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX (checked here); the kernel's only precondition.
            Lanes::Avx if has_avx() => unsafe { avx::$kernel($($args),*) },
            // SAFETY: SSE2 is part of x86-64.
            #[cfg(target_arch = "x86_64")]
            Lanes::Sse2 | Lanes::Avx => unsafe { sse2::$kernel($($args),*) },
            // SAFETY: the portable kernels have no precondition.
            _ => unsafe { portable::$kernel($($args),*) },
        }
    }};
}

/// `Σ (x - shift)` and `Σ (x - shift)²`, with [`detected`]'s form.
pub fn shifted_sums(x: &[f32], shift: f32) -> [f64; 2] {
    shifted_sums_with(detected(), x, shift)
}

/// [`shifted_sums`] with the given form (the portable one where this CPU cannot run it).
pub fn shifted_sums_with(lanes: Lanes, x: &[f32], shift: f32) -> [f64; 2] {
    dispatch!(lanes, shifted_sums(x, shift))
}

/// `Σ dy`, `Σ dy · (x - mean)` and `Σ (x - mean)` over the first `min(dy.len(), x.len())`
/// values, with [`detected`]'s form.
pub fn gradient_sums(dy: &[f32], x: &[f32], mean: f32) -> [f64; 3] {
    gradient_sums_with(detected(), dy, x, mean)
}

/// [`gradient_sums`] with the given form (the portable one where this CPU cannot run it).
pub fn gradient_sums_with(lanes: Lanes, dy: &[f32], x: &[f32], mean: f32) -> [f64; 3] {
    dispatch!(lanes, gradient_sums(dy, x, mean))
}

/// `Σ x`, with [`detected`]'s form.
pub fn sum(x: &[f32]) -> f64 {
    sum_with(detected(), x)
}

/// [`sum`] with the given form (the portable one where this CPU cannot run it).
pub fn sum_with(lanes: Lanes, x: &[f32]) -> f64 {
    dispatch!(lanes, sum(x))
}

/// The kernels, over the enclosing module's eight-lane vector `V` and its operations `zero`,
/// `splat`, `widen` (eight f32 values read from a pointer), `add`, `sub`, `mul` and `lanes`
/// (the eight values, lane 0 first). Each is an `unsafe fn` for the AVX instance's sake (the
/// CPU must have AVX), with the attributes given.
macro_rules! kernels {
    ($(#[$attr:meta])*) => {
        $(#[$attr])*
        pub(super) unsafe fn shifted_sums(x: &[f32], shift: f32) -> [f64; 2] {
            let s = shift as f64;
            let shift = splat(s);
            let (mut sum, mut squares) = (zero(), zero());
            let body = x.len() / 8 * 8;
            for i in (0..body).step_by(8) {
                // SAFETY: `i + 8 <= x.len()`.
                let d = sub(unsafe { widen(x.as_ptr().add(i)) }, shift);
                sum = add(sum, d);
                squares = add(squares, mul(d, d));
            }
            let (mut sum, mut squares) = (lanes(sum), lanes(squares));
            for &v in &x[body..] {
                let d = v as f64 - s;
                sum[0] += d;
                squares[0] += d * d;
            }
            [sum.iter().sum(), squares.iter().sum()]
        }

        $(#[$attr])*
        pub(super) unsafe fn gradient_sums(dy: &[f32], x: &[f32], mean: f32) -> [f64; 3] {
            let m = mean as f64;
            let mean = splat(m);
            let (mut sum, mut dot, mut centred) = (zero(), zero(), zero());
            let n = dy.len().min(x.len());
            let body = n / 8 * 8;
            for i in (0..body).step_by(8) {
                // SAFETY: `i + 8 <= n`, within both slices.
                let (g, v) = unsafe { (widen(dy.as_ptr().add(i)), widen(x.as_ptr().add(i))) };
                let d = sub(v, mean);
                sum = add(sum, g);
                dot = add(dot, mul(g, d));
                centred = add(centred, d);
            }
            let (mut sum, mut dot, mut centred) = (lanes(sum), lanes(dot), lanes(centred));
            for (&g, &v) in dy[body..n].iter().zip(&x[body..n]) {
                let d = v as f64 - m;
                sum[0] += g as f64;
                dot[0] += g as f64 * d;
                centred[0] += d;
            }
            [sum.iter().sum(), dot.iter().sum(), centred.iter().sum()]
        }

        $(#[$attr])*
        pub(super) unsafe fn sum(x: &[f32]) -> f64 {
            let mut sum = zero();
            let body = x.len() / 8 * 8;
            for i in (0..body).step_by(8) {
                // SAFETY: `i + 8 <= x.len()`.
                sum = add(sum, unsafe { widen(x.as_ptr().add(i)) });
            }
            lanes(sum).iter().sum::<f64>() + x[body..].iter().map(|&v| v as f64).sum::<f64>()
        }
    };
}

/// Eight lanes as an array.
mod portable {
    type V = [f64; 8];

    #[inline(always)]
    fn zero() -> V {
        [0.0; 8]
    }

    #[inline(always)]
    fn splat(v: f64) -> V {
        [v; 8]
    }

    /// # Safety
    ///
    /// `p` points to eight readable f32 values.
    #[inline(always)]
    unsafe fn widen(p: *const f32) -> V {
        // SAFETY: the caller's.
        core::array::from_fn(|lane| unsafe { *p.add(lane) } as f64)
    }

    #[inline(always)]
    fn add(a: V, b: V) -> V {
        core::array::from_fn(|lane| a[lane] + b[lane])
    }

    #[inline(always)]
    fn sub(a: V, b: V) -> V {
        core::array::from_fn(|lane| a[lane] - b[lane])
    }

    #[inline(always)]
    fn mul(a: V, b: V) -> V {
        core::array::from_fn(|lane| a[lane] * b[lane])
    }

    #[inline(always)]
    fn lanes(v: V) -> [f64; 8] {
        v
    }

    kernels!();
}

/// Eight lanes as four SSE2 registers of two.
#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    type V = [__m128d; 4];

    #[inline]
    #[target_feature(enable = "sse2")]
    fn zero() -> V {
        [_mm_setzero_pd(); 4]
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn splat(v: f64) -> V {
        [_mm_set1_pd(v); 4]
    }

    /// # Safety
    ///
    /// `p` points to eight readable f32 values.
    #[inline]
    #[target_feature(enable = "sse2")]
    unsafe fn widen(p: *const f32) -> V {
        // SAFETY: the caller's; unaligned loads.
        let (a, b) = unsafe { (_mm_loadu_ps(p), _mm_loadu_ps(p.add(4))) };
        // Lanes 0-1 and 2-3 of each half (`movehl` brings the upper two values down).
        [
            _mm_cvtps_pd(a),
            _mm_cvtps_pd(_mm_movehl_ps(a, a)),
            _mm_cvtps_pd(b),
            _mm_cvtps_pd(_mm_movehl_ps(b, b)),
        ]
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn add(a: V, b: V) -> V {
        let [a0, a1, a2, a3] = a;
        let [b0, b1, b2, b3] = b;
        [
            _mm_add_pd(a0, b0),
            _mm_add_pd(a1, b1),
            _mm_add_pd(a2, b2),
            _mm_add_pd(a3, b3),
        ]
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn sub(a: V, b: V) -> V {
        let [a0, a1, a2, a3] = a;
        let [b0, b1, b2, b3] = b;
        [
            _mm_sub_pd(a0, b0),
            _mm_sub_pd(a1, b1),
            _mm_sub_pd(a2, b2),
            _mm_sub_pd(a3, b3),
        ]
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn mul(a: V, b: V) -> V {
        let [a0, a1, a2, a3] = a;
        let [b0, b1, b2, b3] = b;
        [
            _mm_mul_pd(a0, b0),
            _mm_mul_pd(a1, b1),
            _mm_mul_pd(a2, b2),
            _mm_mul_pd(a3, b3),
        ]
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn lanes(v: V) -> [f64; 8] {
        let mut out = [0.0; 8];
        for (pair, r) in out.chunks_exact_mut(2).zip(v) {
            // SAFETY: two f64 values into the two of `pair`; an unaligned store.
            unsafe { _mm_storeu_pd(pair.as_mut_ptr(), r) };
        }
        out
    }

    kernels!(#[target_feature(enable = "sse2")]);
}

/// Eight lanes as two AVX registers of four.
#[cfg(target_arch = "x86_64")]
mod avx {
    use std::arch::x86_64::*;

    type V = [__m256d; 2];

    #[inline]
    #[target_feature(enable = "avx")]
    fn zero() -> V {
        [_mm256_setzero_pd(); 2]
    }

    #[inline]
    #[target_feature(enable = "avx")]
    fn splat(v: f64) -> V {
        [_mm256_set1_pd(v); 2]
    }

    /// # Safety
    ///
    /// `p` points to eight readable f32 values.
    #[inline]
    #[target_feature(enable = "avx")]
    unsafe fn widen(p: *const f32) -> V {
        // SAFETY: the caller's; unaligned loads.
        unsafe {
            [
                _mm256_cvtps_pd(_mm_loadu_ps(p)),
                _mm256_cvtps_pd(_mm_loadu_ps(p.add(4))),
            ]
        }
    }

    #[inline]
    #[target_feature(enable = "avx")]
    fn add(a: V, b: V) -> V {
        [_mm256_add_pd(a[0], b[0]), _mm256_add_pd(a[1], b[1])]
    }

    #[inline]
    #[target_feature(enable = "avx")]
    fn sub(a: V, b: V) -> V {
        [_mm256_sub_pd(a[0], b[0]), _mm256_sub_pd(a[1], b[1])]
    }

    #[inline]
    #[target_feature(enable = "avx")]
    fn mul(a: V, b: V) -> V {
        [_mm256_mul_pd(a[0], b[0]), _mm256_mul_pd(a[1], b[1])]
    }

    #[inline]
    #[target_feature(enable = "avx")]
    fn lanes(v: V) -> [f64; 8] {
        let mut out = [0.0; 8];
        // SAFETY: four f64 values into each half of `out`; unaligned stores.
        unsafe {
            _mm256_storeu_pd(out.as_mut_ptr(), v[0]);
            _mm256_storeu_pd(out.as_mut_ptr().add(4), v[1]);
        }
        out
    }

    kernels!(#[target_feature(enable = "avx")]);
}
