//! Differential cases of Burn's `FloatTensorOps`: see `run_all`.

use crate::common::*;
use crate::diff;
use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, GridSampleOptions, GridSamplePaddingMode, InterpolateMode};
use burn::tensor::read_sync;
use burn::tensor::{
    DType, Distribution, FloatDType, IndexingUpdateOp, Int, IntDType, Scalar, Shape, Tensor,
    TensorData, TensorPrimitive, s,
};
use rand::Rng;
use rand::seq::SliceRandom;

/// The float primitive of `t`, for the ops that the `Tensor` API does not reach.
fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

/// A `Tensor` around a float primitive.
fn wrap<B: Backend, const D: usize>(p: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

/// Values on the half-integer grid {-2, -1.5, ..., 2}: ties, exact zeros and `x.5` cases.
fn halves<B: Backend, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    shape: [usize; D],
) -> Tensor<B, D> {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| rng.random_range(-4i32..=4) as f32 * 0.5)
        .collect();
    Tensor::from_data(TensorData::new(v, shape), dev)
}

/// An f64 tensor of uniform values in [lo, hi).
fn float64<B: Backend, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    shape: [usize; D],
    lo: f64,
    hi: f64,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.random_range(lo..hi)).collect();
    Tensor::from_data(TensorData::new(v, shape), (dev, DType::F64))
}

/// The IEEE corner cases: signed zeros, infinities, NaN, a subnormal, the extremes, halves.
fn specials<B: Backend>(dev: &B::Device) -> Tensor<B, 1> {
    let v = vec![
        0.0f32,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        0.999,
        -1.001,
        1e-7,
        1e-40,
        f32::MIN_POSITIVE,
        f32::MAX,
        -f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        100.0,
        -100.0,
    ];
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]), dev)
}

/// `count` index tuples into a tensor whose leading dims are `dims`, as a `[count, dims.len()]`
/// int tensor; without repeats when `unique` (for the reductions where order would matter).
fn nd_indices<B: Backend>(
    rng: &mut TestRng,
    dev: &B::Device,
    dims: &[usize],
    count: usize,
    unique: bool,
) -> Tensor<B, 2, Int> {
    let total: usize = dims.iter().product();
    let flat: Vec<usize> = if unique {
        let mut all: Vec<usize> = (0..total).collect();
        all.shuffle(rng);
        all.truncate(count);
        all
    } else {
        (0..count).map(|_| rng.random_range(0..total)).collect()
    };
    let mut v = Vec::with_capacity(count * dims.len());
    for f in flat {
        let mut tuple = vec![0i64; dims.len()];
        let mut rem = f;
        for (i, &d) in dims.iter().enumerate().rev() {
            tuple[i] = (rem % d) as i64;
            rem /= d;
        }
        v.extend(tuple);
    }
    Tensor::from_data(TensorData::new(v, [count, dims.len()]), dev)
}

/// Runs `f`, turning a panic into its message (as bytes): for the ops that burn-ndarray does
/// not implement, `Hetero` must fail the same way rather than return something of its own.
fn outcome(f: impl FnOnce() -> Vec<TensorData>) -> Vec<TensorData> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(outputs) => outputs,
        Err(e) => {
            let msg = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let bytes = format!("panicked: {msg}").into_bytes();
            let n = bytes.len();
            vec![TensorData::new(bytes, [n])]
        }
    }
}

/// Runs every `FloatTensorOps` case on `H` and `N` and requires bit-identical outputs.
///
/// The groups: creation (from data, zeros/ones/full/empty, random, device moves), casts
/// (float dtypes, int dtypes), element-wise arithmetic with broadcasting, scalars, remainder and
/// clamping, matmul and cross, layout (transpose, permute, flip, reshape, expand, repeat,
/// unfold, cat), indexing (gather/scatter, select, nd gather/scatter, slices, masks),
/// comparisons, reductions (sum/mean/prod, cumulative, min/max/arg, any/all), sorting and
/// top-k, unary math (exp/log/pow/trig/rounding/erf) on random and IEEE corner-case inputs,
/// NaN/inf tests, grid sampling and the autodiff flags. Shapes include size-1 and 0-sized
/// dims wherever the op accepts them, and f64 inputs where the op is dtype-generic.
pub fn run_all() {
    // ---- Creation ------------------------------------------------------------------------

    // float_from_data (f32 and f64 data), float_into_data, zeros/ones/full/empty (default and
    // f64 dtype, empty shapes), float_device (to create a tensor where another lives) and
    // float_to_device. burn-ndarray zero-fills `empty`, so its contents are compared too.
    diff!("float_creation", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 3, 4]);
        let a64 = float64::<B, 2>(rng, dev, [3, 1], -5.0, 5.0);
        let e = float::<B, 2>(rng, dev, [0, 3]);
        let f64_opts = (dev, DType::F64);
        vec![
            a.clone().into_data(),
            a64.into_data(),
            e.into_data(),
            Tensor::<B, 2>::zeros([3, 4], dev).into_data(),
            Tensor::<B, 3>::zeros([2, 0, 4], f64_opts).into_data(),
            Tensor::<B, 2>::ones([1, 5], dev).into_data(),
            Tensor::<B, 2>::ones([4, 2], f64_opts).into_data(),
            Tensor::<B, 1>::ones([0], dev).into_data(),
            Tensor::<B, 2>::full([2, 3], -3.25, dev).into_data(),
            Tensor::<B, 2>::full([2, 3], f32::NAN, dev).into_data(),
            Tensor::<B, 3>::full([1, 2, 2], 1e300, f64_opts).into_data(),
            Tensor::<B, 2>::full([0, 2], 7.0, dev).into_data(),
            Tensor::<B, 2>::empty([3, 2], dev).into_data(),
            Tensor::<B, 3>::empty([2, 0, 5], f64_opts).into_data(),
            a.zeros_like().into_data(),
            a.ones_like().into_data(),
            a.full_like(0.75).into_data(),
            Tensor::<B, 2>::ones([2, 2], &a.device()).into_data(),
            a.clone().to_device(dev).into_data(),
            a.to_device(&Default::default()).into_data(),
        ]
    });

    // float_random: every distribution, f32 and f64, an empty shape, `random_like`. Seeded
    // on the backend first, so that both backends draw the same numbers from burn-ndarray's
    // global generator (the suite's other users of that generator hold the settings lock, as
    // this test does, so nothing draws in between).
    diff!("float_random", |dev, rng| {
        B::seed(dev, 42);
        let a = Tensor::<B, 2>::random([4, 5], Distribution::Default, dev);
        let b = Tensor::<B, 3>::random([2, 3, 4], Distribution::Uniform(-3.0, 5.0), dev);
        let c = Tensor::<B, 2>::random([6, 7], Distribution::Normal(1.0, 2.0), dev);
        let d = Tensor::<B, 2>::random([5, 5], Distribution::Bernoulli(0.3), dev);
        let e = Tensor::<B, 2>::random([3, 4], Distribution::Normal(0.0, 1.0), (dev, DType::F64));
        let f = Tensor::<B, 2>::random([0, 4], Distribution::Default, dev);
        let g = a.random_like(Distribution::Uniform(0.0, 0.001));
        vec![
            a.into_data(),
            b.into_data(),
            c.into_data(),
            d.into_data(),
            e.into_data(),
            f.into_data(),
            g.into_data(),
        ]
    });

    // ---- Casts -----------------------------------------------------------------------------

    // float_cast: f32 -> f64 -> f32, to Flex32, f64 -> Flex32; f16/bf16 are not supported by
    // burn-ndarray: both backends must fail alike.
    diff!("float_cast", |dev, rng| {
        let a = float_in::<B, 3>(rng, dev, [2, 3, 4], -1e4, 1e4);
        let s = specials::<B>(dev);
        let b = float64::<B, 2>(rng, dev, [3, 5], -1e10, 1e10);
        let e = float::<B, 2>(rng, dev, [0, 3]);
        let mut out = vec![
            a.clone().cast(FloatDType::F64).into_data(),
            a.clone().cast(DType::F64).cast(FloatDType::F32).into_data(),
            a.clone().cast(FloatDType::Flex32).into_data(),
            s.clone().cast(FloatDType::F64).into_data(),
            b.clone().cast(FloatDType::F32).into_data(),
            b.cast(FloatDType::Flex32).into_data(),
            e.cast(FloatDType::F64).into_data(),
        ];
        out.extend(outcome(|| {
            vec![a.clone().cast(FloatDType::F16).into_data()]
        }));
        out.extend(outcome(|| vec![a.cast(FloatDType::BF16).into_data()]));
        out
    });

    // float_into_int: the default int dtype and every int dtype (values in range, truncation
    // toward zero), from f32 and f64, and an empty tensor.
    diff!("float_into_int", |dev, rng| {
        let signed = float_in::<B, 2>(rng, dev, [4, 6], -100.0, 100.0);
        let unsigned = float_in::<B, 2>(rng, dev, [4, 6], 0.0, 200.0);
        let wide = float_in::<B, 1>(rng, dev, [16], -3e4, 3e4);
        let f64s = float64::<B, 2>(rng, dev, [3, 3], -1e9, 1e9);
        let e = float::<B, 3>(rng, dev, [2, 0, 3]);
        vec![
            signed.clone().int().into_data(),
            signed.clone().cast(IntDType::I64).into_data(),
            signed.clone().cast(IntDType::I32).into_data(),
            signed.clone().cast(IntDType::I16).into_data(),
            signed.cast(IntDType::I8).into_data(),
            unsigned.clone().cast(IntDType::U64).into_data(),
            unsigned.clone().cast(IntDType::U32).into_data(),
            unsigned.clone().cast(IntDType::U16).into_data(),
            unsigned.cast(IntDType::U8).into_data(),
            wide.cast(IntDType::I16).into_data(),
            f64s.clone().int().into_data(),
            f64s.cast(IntDType::I32).into_data(),
            e.int().into_data(),
        ]
    });

    // ---- Element-wise arithmetic -------------------------------------------------------------

    // float_add/sub/mul/div: same shapes, one-sided and two-sided broadcasting, size-1 dims,
    // a 0-sized dim, f64, and the IEEE corner cases against each other (inf - inf, 0 / 0...).
    diff!("float_binary_arith", |dev, rng| {
        let pairs: [([usize; 3], [usize; 3]); 6] = [
            ([2, 3, 4], [2, 3, 4]),
            ([2, 3, 4], [1, 3, 1]),
            ([4, 1, 5], [1, 3, 1]),
            ([1, 1, 1], [3, 2, 5]),
            ([0, 3, 4], [1, 3, 4]),
            ([2, 0, 1], [2, 1, 3]),
        ];
        let mut out = Vec::new();
        for (sa, sb) in pairs {
            let a = float::<B, 3>(rng, dev, sa);
            let b = float::<B, 3>(rng, dev, sb);
            out.push((a.clone() + b.clone()).into_data());
            out.push((a.clone() - b.clone()).into_data());
            out.push((a.clone() * b.clone()).into_data());
            out.push((a / b).into_data());
        }
        let a = float64::<B, 2>(rng, dev, [3, 4], -2.0, 2.0);
        let b = float64::<B, 2>(rng, dev, [3, 1], -2.0, 2.0);
        out.push((a.clone() + b.clone()).into_data());
        out.push((a.clone() - b.clone()).into_data());
        out.push((a.clone() * b.clone()).into_data());
        out.push((a / b).into_data());
        let s = specials::<B>(dev);
        let n = s.dims()[0];
        let (r, c) = (s.clone().reshape([n, 1]), s.reshape([1, n]));
        out.push((r.clone() + c.clone()).into_data());
        out.push((r.clone() - c.clone()).into_data());
        out.push((r.clone() * c.clone()).into_data());
        out.push((r / c).into_data());
        out
    });

    // float_add/sub/mul/div_scalar: several scalars (including 0 and a negative one, so that
    // the division gives signed infinities and NaN), f32 and f64.
    diff!("float_scalar_arith", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 3, 4]);
        let s = specials::<B>(dev);
        let b = float64::<B, 2>(rng, dev, [3, 3], -5.0, 5.0);
        let mut out = Vec::new();
        for k in [0.0f32, 1.5, -2.75, 1e-3] {
            out.push(a.clone().add_scalar(k).into_data());
            out.push(a.clone().sub_scalar(k).into_data());
            out.push(a.clone().mul_scalar(k).into_data());
            out.push(a.clone().div_scalar(k).into_data());
            out.push(s.clone().div_scalar(k).into_data());
            out.push(s.clone().mul_scalar(k).into_data());
        }
        out.push(b.clone().add_scalar(0.1f64).into_data());
        out.push(b.clone().sub_scalar(-7.5).into_data());
        out.push(b.clone().mul_scalar(1e-300).into_data());
        out.push(b.div_scalar(3.0).into_data());
        out.push((a.clone() + 2.0).into_data());
        out.push((a.clone() - 0.5).into_data());
        out.push((a.clone() * -3.0).into_data());
        out.push((a / 7.0).into_data());
        out
    });

    // float_remainder / float_remainder_scalar: signs of both operands (the result takes the
    // divisor's sign), the corner cases (x % 0, inf % y, NaN), f64, and `fmod` (built on
    // trunc/mask_where). burn-ndarray's tensor remainder does not broadcast (it panics on
    // shapes that differ): the broadcast call only requires Hetero to behave the same.
    diff!("float_remainder", |dev, rng| {
        let a = float_in::<B, 3>(rng, dev, [2, 3, 4], -10.0, 10.0);
        let b = float_in::<B, 3>(rng, dev, [2, 3, 4], 0.5, 3.0);
        let nb = float_in::<B, 3>(rng, dev, [2, 3, 4], -3.0, -0.5);
        let nb1 = float_in::<B, 3>(rng, dev, [1, 3, 1], -3.0, -0.5);
        let s = specials::<B>(dev);
        let f = float64::<B, 2>(rng, dev, [4, 4], -10.0, 10.0);
        let g = float64::<B, 2>(rng, dev, [4, 4], 0.5, 3.0);
        let e = float::<B, 2>(rng, dev, [0, 3]);
        let mut out = vec![
            a.clone().remainder(b.clone()).into_data(),
            a.clone().remainder(nb.clone()).into_data(),
            (a.clone() % b.clone()).into_data(),
            a.clone().remainder_scalar(2.5).into_data(),
            a.clone().remainder_scalar(-1.75).into_data(),
            (a.clone() % 3.0).into_data(),
            s.clone().remainder(s.clone().flip([0])).into_data(),
            s.clone().remainder(s.clone()).into_data(),
            s.clone().remainder_scalar(0.0).into_data(),
            s.clone().remainder_scalar(f32::INFINITY).into_data(),
            s.remainder_scalar(1.5).into_data(),
            f.clone().remainder(g).into_data(),
            f.remainder_scalar(-0.3).into_data(),
            e.clone().remainder(e.clone()).into_data(),
            e.remainder_scalar(2.0).into_data(),
            a.clone().fmod(nb).into_data(),
            a.clone().fmod(nb1.clone()).into_data(),
            a.clone().fmod_scalar(2.5).into_data(),
        ];
        out.extend(outcome(|| vec![a.remainder(nb1).into_data()]));
        out
    });

    // float_clamp / clamp_min / clamp_max, including NaN and infinities, and f64.
    diff!("float_clamp", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 3, 4]);
        let s = specials::<B>(dev);
        let b = float64::<B, 2>(rng, dev, [3, 3], -5.0, 5.0);
        vec![
            a.clone().clamp(-0.5, 1.0).into_data(),
            a.clone().clamp_min(0.25).into_data(),
            a.clamp_max(-0.25).into_data(),
            s.clone().clamp(-1.0, 1.0).into_data(),
            s.clone().clamp_min(0.0).into_data(),
            s.clamp_max(0.0).into_data(),
            b.clone().clamp(-1.0, 2.0).into_data(),
            b.clone().clamp_min(1.0).into_data(),
            b.clamp_max(-1.0).into_data(),
        ]
    });

    // float_neg, float_recip (1/0 and 1/-0 included), float_abs, float_sign (exact zeros).
    diff!("float_neg_recip_abs_sign", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 3, 4]);
        let h = halves::<B, 2>(rng, dev, [5, 6]);
        let s = specials::<B>(dev);
        let b = float64::<B, 2>(rng, dev, [3, 3], -5.0, 5.0);
        let e = float::<B, 2>(rng, dev, [0, 4]);
        vec![
            a.clone().neg().into_data(),
            (-s.clone()).into_data(),
            a.clone().recip().into_data(),
            s.clone().recip().into_data(),
            a.abs().into_data(),
            s.clone().abs().into_data(),
            h.sign().into_data(),
            s.sign().into_data(),
            b.clone().neg().into_data(),
            b.clone().recip().into_data(),
            b.clone().abs().into_data(),
            b.sign().into_data(),
            e.clone().neg().into_data(),
            e.recip().into_data(),
        ]
    });

    // ---- Matmul and cross ----------------------------------------------------------------------

    // float_matmul: 2D, batched, broadcast batch dims on either side, the vec-mat form Burn
    // rewrites, 4D, size-1 dims, f64, and transposed (strided) inputs. burn-ndarray panics on a
    // 0-sized m, k or n (it divides by the matrix size): those calls only require Hetero to
    // fail the same way.
    diff!("float_matmul", |dev, rng| {
        let mut out = Vec::new();
        let shapes3: [([usize; 3], [usize; 3]); 7] = [
            ([1, 3, 4], [1, 4, 5]),
            ([2, 3, 4], [2, 4, 5]),
            ([1, 3, 4], [2, 4, 5]),
            ([2, 3, 4], [1, 4, 5]),
            ([3, 1, 4], [1, 4, 6]),
            ([2, 3, 0], [2, 0, 2]),
            ([2, 0, 4], [2, 4, 3]),
        ];
        for (sa, sb) in shapes3 {
            let a = float::<B, 3>(rng, dev, sa);
            let b = float::<B, 3>(rng, dev, sb);
            if sa.contains(&0) || sb.contains(&0) {
                out.extend(outcome(|| vec![a.matmul(b).into_data()]));
            } else {
                out.push(a.matmul(b).into_data());
            }
        }
        let a = float::<B, 2>(rng, dev, [7, 9]);
        let b = float::<B, 2>(rng, dev, [9, 1]);
        out.push(a.clone().matmul(b).into_data());
        let c = float::<B, 2>(rng, dev, [1, 1]);
        out.push(c.clone().matmul(c).into_data());
        let a = float::<B, 4>(rng, dev, [2, 2, 3, 4]);
        let b = float::<B, 4>(rng, dev, [2, 1, 4, 3]);
        out.push(a.clone().matmul(b).into_data());
        // Transposed (strided) operands.
        let bt = float::<B, 2>(rng, dev, [5, 9]);
        let at = float::<B, 2>(rng, dev, [9, 7]);
        out.push(at.transpose().matmul(bt.transpose()).into_data());
        let a = float64::<B, 3>(rng, dev, [2, 3, 4], -1.0, 1.0);
        let b = float64::<B, 3>(rng, dev, [2, 4, 2], -1.0, 1.0);
        out.push(a.matmul(b).into_data());
        out
    });

    // float_cross: along the last, first and a middle dim, with broadcasting, an empty batch,
    // and f64.
    diff!("float_cross", |dev, rng| {
        let a = float::<B, 2>(rng, dev, [4, 3]);
        let b = float::<B, 2>(rng, dev, [4, 3]);
        let b1 = float::<B, 2>(rng, dev, [1, 3]);
        let c = float::<B, 2>(rng, dev, [3, 5]);
        let d = float::<B, 2>(rng, dev, [3, 5]);
        let x = float::<B, 3>(rng, dev, [2, 3, 4]);
        let y = float::<B, 3>(rng, dev, [2, 3, 4]);
        let e = float::<B, 2>(rng, dev, [0, 3]);
        let f = float64::<B, 2>(rng, dev, [5, 3], -1.0, 1.0);
        let g = float64::<B, 2>(rng, dev, [5, 3], -1.0, 1.0);
        vec![
            a.clone().cross(b, 1).into_data(),
            a.cross(b1, 1).into_data(),
            c.cross(d, 0).into_data(),
            x.cross(y, 1).into_data(),
            e.clone().cross(e, 1).into_data(),
            f.cross(g, -1).into_data(),
        ]
    });

    // ---- Layout ----------------------------------------------------------------------------------

    // float_transpose, float_swap_dims, float_permute, float_flip, float_reshape: 2D to 4D,
    // negative axes, inferred dims, 0-sized dims, and ops applied to the strided results.
    diff!("float_layout", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 3, 4]);
        let m = float::<B, 2>(rng, dev, [3, 5]);
        let q = float::<B, 4>(rng, dev, [2, 1, 3, 2]);
        let e = float::<B, 3>(rng, dev, [2, 0, 3]);
        vec![
            m.clone().transpose().into_data(),
            m.clone().t().into_data(),
            a.clone().transpose().into_data(),
            a.clone().swap_dims(0, 2).into_data(),
            a.clone().swap_dims(1, 1).into_data(),
            q.clone().swap_dims(1, 3).into_data(),
            a.clone().permute([2, 0, 1]).into_data(),
            a.clone().permute([-1, -2, -3]).into_data(),
            q.clone().permute([3, 1, 0, 2]).into_data(),
            a.clone().flip([0]).into_data(),
            a.clone().flip([0, -1]).into_data(),
            q.flip([1, 2, 3]).into_data(),
            a.clone().reshape([4, 6]).into_data(),
            a.clone().reshape([-1, 2]).into_data(),
            a.clone().reshape([24]).into_data(),
            a.clone().reshape([1, 2, 1, 12]).into_data(),
            (a.clone().permute([1, 2, 0]).reshape([3, 8]) + 1.0).into_data(),
            (a.clone().flip([1]).transpose() * 1.5).into_data(),
            e.clone().transpose().into_data(),
            e.clone().permute([1, 2, 0]).into_data(),
            e.clone().flip([0, 1]).into_data(),
            e.clone().reshape([3, 0]).into_data(),
            e.reshape([0, -1]).into_data(),
            m.reshape([5, 3]).swap_dims(0, 1).into_data(),
        ]
    });

    // float_expand: broadcasting a size-1 dim, adding leading dims, `-1` to keep a dim, a
    // 0-sized target dim, then computing on the expanded (stride-0) tensor.
    diff!("float_expand", |dev, rng| {
        let r = float::<B, 2>(rng, dev, [1, 3]);
        let c = float::<B, 2>(rng, dev, [3, 1]);
        let z = float::<B, 2>(rng, dev, [1, 0]);
        let f = float64::<B, 1>(rng, dev, [4], -1.0, 1.0);
        vec![
            r.clone().expand([4, 3]).into_data(),
            c.clone().expand::<3, _>([2, 3, 4]).into_data(),
            c.clone().expand([-1, 5]).into_data(),
            r.clone().expand::<3, _>([2, -1, 3]).into_data(),
            r.clone().expand::<2, _>(Shape::new([0, 3])).into_data(),
            z.expand::<2, _>(Shape::new([5, 0])).into_data(),
            (r.expand([3, 3]) + c.expand([3, 3])).into_data(),
            f.expand([2, 4]).into_data(),
        ]
    });

    // float_repeat_dim: each dim, times 1 and more, size-1 and 0-sized dims, `repeat`, f64.
    diff!("float_repeat_dim", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 1, 3]);
        let e = float::<B, 2>(rng, dev, [0, 2]);
        let f = float64::<B, 2>(rng, dev, [2, 2], -1.0, 1.0);
        vec![
            a.clone().repeat_dim(0, 3).into_data(),
            a.clone().repeat_dim(1, 4).into_data(),
            a.clone().repeat_dim(2, 2).into_data(),
            a.clone().repeat_dim(1, 1).into_data(),
            a.repeat(&[2, 3, 1]).into_data(),
            e.clone().repeat_dim(0, 5).into_data(),
            e.repeat_dim(1, 3).into_data(),
            f.repeat_dim(1, 3).into_data(),
        ]
    });

    // float_unfold: windows overlapping, disjoint, with gaps, the full length, along the first,
    // middle and last dims.
    diff!("float_unfold", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 7, 3]);
        let v = float::<B, 1>(rng, dev, [10]);
        let f = float64::<B, 2>(rng, dev, [3, 6], -1.0, 1.0);
        vec![
            a.clone().unfold::<4, _>(1, 3, 1).into_data(),
            a.clone().unfold::<4, _>(1, 2, 2).into_data(),
            a.clone().unfold::<4, _>(1, 2, 4).into_data(),
            a.clone().unfold::<4, _>(1, 7, 1).into_data(),
            a.clone().unfold::<4, _>(0, 1, 1).into_data(),
            a.unfold::<4, _>(2, 2, 1).into_data(),
            v.unfold::<2, _>(0, 4, 3).into_data(),
            f.unfold::<3, _>(1, 3, 2).into_data(),
        ]
    });

    // float_cat: along each dim, pieces of different sizes, a 0-sized piece, one piece, many
    // pieces, f64, and `stack`.
    diff!("float_cat", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 3, 4]);
        let b = float::<B, 3>(rng, dev, [1, 3, 4]);
        let c = float::<B, 3>(rng, dev, [2, 5, 4]);
        let d = float::<B, 3>(rng, dev, [2, 3, 1]);
        let e = float::<B, 3>(rng, dev, [0, 3, 4]);
        let f = float64::<B, 2>(rng, dev, [2, 2], -1.0, 1.0);
        let g = float64::<B, 2>(rng, dev, [2, 3], -1.0, 1.0);
        let many: Vec<_> = (0..6).map(|_| float::<B, 2>(rng, dev, [1, 3])).collect();
        vec![
            Tensor::cat(vec![a.clone(), b.clone(), a.clone()], 0).into_data(),
            Tensor::cat(vec![a.clone(), c, a.clone()], 1).into_data(),
            Tensor::cat(vec![d.clone(), a.clone(), d], 2).into_data(),
            Tensor::cat(vec![e.clone(), a.clone(), e.clone()], 0).into_data(),
            Tensor::cat(vec![e.clone(), e.clone()], 0).into_data(),
            Tensor::cat(vec![b.clone()], 1).into_data(),
            Tensor::cat(many.clone(), 0).into_data(),
            Tensor::cat(vec![f, g], 1).into_data(),
            Tensor::stack::<4>(vec![a.clone(), a.clone().neg()], 3).into_data(),
            Tensor::stack::<3>(many, 1).into_data(),
        ]
    });

    // ---- Indexing ----------------------------------------------------------------------------

    // float_gather and float_scatter_add (scatter with `Add`): along each dim, index tensors
    // smaller and larger than the source along that dim, repeated indices (accumulated in
    // order), f64.
    diff!("float_gather_scatter_add", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 3, 4]);
        let mut out = Vec::new();
        for (dim, len) in [(0, 5), (1, 2), (2, 7)] {
            let mut ishape = [2, 3, 4];
            ishape[dim] = len;
            let src = [2, 3, 4][dim] as i64;
            let idx = int::<B, 3>(rng, dev, ishape, 0, src);
            out.push(a.clone().gather(dim, idx.clone()).into_data());
            let values = float::<B, 3>(rng, dev, ishape);
            out.push(
                a.clone()
                    .scatter(dim, idx, values, IndexingUpdateOp::Add)
                    .into_data(),
            );
        }
        let v = float::<B, 1>(rng, dev, [6]);
        let idx = int::<B, 1>(rng, dev, [12], 0, 6);
        out.push(v.clone().gather(0, idx.clone()).into_data());
        let values = float::<B, 1>(rng, dev, [12]);
        out.push(v.scatter(0, idx, values, IndexingUpdateOp::Add).into_data());
        let f = float64::<B, 2>(rng, dev, [3, 4], -1.0, 1.0);
        let idx = int::<B, 2>(rng, dev, [3, 6], 0, 4);
        let values = float64::<B, 2>(rng, dev, [3, 6], -1.0, 1.0);
        out.push(f.clone().gather(1, idx.clone()).into_data());
        out.push(f.scatter(1, idx, values, IndexingUpdateOp::Add).into_data());
        out
    });

    // float_select and float_select_add (select_assign with `Add`): along each dim, repeated
    // indices, a single index, f64.
    diff!("float_select", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [3, 4, 5]);
        let mut out = Vec::new();
        for (dim, count) in [(0, 5), (1, 2), (2, 8), (1, 1)] {
            let src = [3, 4, 5][dim] as i64;
            let idx = int::<B, 1>(rng, dev, [count], 0, src);
            out.push(a.clone().select(dim, idx.clone()).into_data());
            let mut vshape = [3, 4, 5];
            vshape[dim] = count;
            let values = float::<B, 3>(rng, dev, vshape);
            out.push(
                a.clone()
                    .select_assign(dim, idx, values, IndexingUpdateOp::Add)
                    .into_data(),
            );
        }
        let idx = int::<B, 1>(rng, dev, [3], 0, 5);
        out.push(a.select(-1, idx).into_data());
        let f = float64::<B, 2>(rng, dev, [4, 3], -1.0, 1.0);
        let idx = int::<B, 1>(rng, dev, [6], 0, 4);
        let values = float64::<B, 2>(rng, dev, [6, 3], -1.0, 1.0);
        out.push(f.clone().select(0, idx.clone()).into_data());
        out.push(
            f.select_assign(0, idx, values, IndexingUpdateOp::Add)
                .into_data(),
        );
        out
    });

    // float_gather_nd: index tuples of length 1, 2 and 3 (slices, rows, elements), batched
    // indices. float_scatter_nd: every reduction; the order-dependent ones (Assign, Mul, Min,
    // Max) on unique indices, `Add` with repeats.
    diff!("float_gather_scatter_nd", |dev, rng| {
        let data = float::<B, 3>(rng, dev, [4, 5, 3]);
        let mut out = Vec::new();
        let i1 = nd_indices::<B>(rng, dev, &[4], 6, false);
        out.push(data.clone().gather_nd::<2, 3>(i1).into_data());
        let i2 = nd_indices::<B>(rng, dev, &[4, 5], 7, false);
        out.push(data.clone().gather_nd::<2, 2>(i2).into_data());
        let i3 = nd_indices::<B>(rng, dev, &[4, 5, 3], 9, false);
        out.push(data.clone().gather_nd::<2, 1>(i3).into_data());
        let ib = nd_indices::<B>(rng, dev, &[4, 5], 6, false).reshape([2, 3, 2]);
        out.push(data.clone().gather_nd::<3, 3>(ib).into_data());

        for op in [
            IndexingUpdateOp::Assign,
            IndexingUpdateOp::Mul,
            IndexingUpdateOp::Min,
            IndexingUpdateOp::Max,
        ] {
            let idx = nd_indices::<B>(rng, dev, &[4, 5], 8, true);
            let values = float::<B, 2>(rng, dev, [8, 3]);
            out.push(data.clone().scatter_nd(idx, values, op).into_data());
        }
        let idx = nd_indices::<B>(rng, dev, &[4], 9, false);
        let values = float::<B, 3>(rng, dev, [9, 5, 3]);
        out.push(
            data.clone()
                .scatter_nd(idx, values, IndexingUpdateOp::Add)
                .into_data(),
        );
        let idx = nd_indices::<B>(rng, dev, &[4, 5, 3], 20, false);
        let values = float::<B, 1>(rng, dev, [20]);
        out.push(
            data.clone()
                .scatter_nd(idx, values, IndexingUpdateOp::Add)
                .into_data(),
        );
        let idx = nd_indices::<B>(rng, dev, &[4, 5], 6, true).reshape([3, 2, 2]);
        let values = float::<B, 3>(rng, dev, [3, 2, 3]);
        out.push(
            data.scatter_nd(idx, values, IndexingUpdateOp::Assign)
                .into_data(),
        );
        let f = float64::<B, 2>(rng, dev, [5, 2], -1.0, 1.0);
        let idx = nd_indices::<B>(rng, dev, &[5], 3, true);
        let values = float64::<B, 2>(rng, dev, [3, 2], -1.0, 1.0);
        out.push(f.clone().gather_nd::<2, 2>(idx.clone()).into_data());
        out.push(f.scatter_nd(idx, values, IndexingUpdateOp::Max).into_data());
        out
    });

    // float_slice and float_slice_assign: ranges, open ends, negative indices, steps (also
    // negative), single indices, empty ranges; `slice_fill` and `narrow`.
    diff!("float_slice", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [4, 5, 6]);
        let f = float64::<B, 2>(rng, dev, [4, 4], -1.0, 1.0);
        let v1 = float::<B, 3>(rng, dev, [2, 5, 3]);
        let v2 = float::<B, 3>(rng, dev, [4, 1, 6]);
        let v3 = float::<B, 3>(rng, dev, [2, 3, 3]);
        let v4 = float64::<B, 2>(rng, dev, [2, 4], -1.0, 1.0);
        vec![
            a.clone().slice(s![1..3]).into_data(),
            a.clone().slice(s![.., 1..4, 2..]).into_data(),
            a.clone().slice(s![-2.., .., ..-1]).into_data(),
            a.clone().slice(s![..;2, 1..5;3, ..]).into_data(),
            a.clone().slice(s![..;-1, .., 1..6;-2]).into_data(),
            a.clone().slice(s![1, .., -1]).into_data(),
            a.clone().slice(s![2..2, .., ..]).into_data(),
            a.clone().narrow(2, 1, 3).into_data(),
            f.clone().slice(s![1..3, ..;3]).into_data(),
            a.clone().slice_assign(s![1..3, .., 0..6;2], v1).into_data(),
            a.clone().slice_assign(s![.., 2..3, ..], v2).into_data(),
            a.clone()
                .slice_assign(s![..;-2, 1..4, -3..], v3)
                .into_data(),
            a.clone()
                .slice_assign(s![0..0, .., ..], float::<B, 3>(rng, dev, [0, 5, 6]))
                .into_data(),
            a.slice_fill(s![.., 0..2, 3..], -9.5).into_data(),
            f.slice_assign(s![0..4;2, ..], v4).into_data(),
        ]
    });

    // float_mask_where and float_mask_fill: random masks, the tensor and the source broadcast
    // to the mask (mask_where), the mask broadcast to the tensor (mask_fill), NaN/inf fills,
    // f64, an empty tensor.
    diff!("float_mask", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 3, 4]);
        let b = float::<B, 3>(rng, dev, [2, 3, 4]);
        let m = boolean::<B, 3>(rng, dev, [2, 3, 4]);
        let f = float64::<B, 2>(rng, dev, [3, 3], -1.0, 1.0);
        let g = float64::<B, 2>(rng, dev, [3, 3], -1.0, 1.0);
        let mf = boolean::<B, 2>(rng, dev, [3, 3]);
        let e = float::<B, 2>(rng, dev, [0, 3]);
        let me = boolean::<B, 2>(rng, dev, [0, 3]);
        let a1 = float::<B, 3>(rng, dev, [2, 1, 4]);
        let b1 = float::<B, 3>(rng, dev, [1, 3, 4]);
        let m1 = boolean::<B, 3>(rng, dev, [2, 1, 4]);
        vec![
            a1.mask_where(m.clone(), b1.clone()).into_data(),
            a.clone().mask_where(m.clone(), b1).into_data(),
            a.clone().mask_fill(m1, 0.25).into_data(),
            a.clone().mask_where(m.clone(), b.clone()).into_data(),
            b.mask_where(m.clone().bool_not(), a.clone()).into_data(),
            a.clone().mask_fill(m.clone(), 3.5).into_data(),
            a.clone().mask_fill(m.clone(), f32::NAN).into_data(),
            a.mask_fill(m, f32::NEG_INFINITY).into_data(),
            f.clone().mask_where(mf.clone(), g).into_data(),
            f.mask_fill(mf, -2.0).into_data(),
            e.clone().mask_where(me.clone(), e.clone()).into_data(),
            e.mask_fill(me, 1.0).into_data(),
        ]
    });

    // ---- Comparisons -------------------------------------------------------------------------

    // float_(not_)equal, greater(_equal), lower(_equal) and their `_elem` forms: values on a
    // half-integer grid (so that ties occur), broadcasting, the IEEE corner cases (NaN, signed
    // zeros), f64, empty.
    diff!("float_comparisons", |dev, rng| {
        let a = halves::<B, 3>(rng, dev, [2, 3, 4]);
        let b = halves::<B, 3>(rng, dev, [2, 3, 4]);
        let c = halves::<B, 3>(rng, dev, [1, 3, 1]);
        let s = specials::<B>(dev);
        let n = s.dims()[0];
        let (r, col) = (s.clone().reshape([n, 1]), s.clone().reshape([1, n]));
        let f = float64::<B, 2>(rng, dev, [3, 4], -1.0, 1.0);
        let g = f.clone().mul_scalar(-1.0).flip([1]);
        let e = float::<B, 2>(rng, dev, [0, 3]);
        let mut out = Vec::new();
        for (x, y) in [(a.clone(), b), (a.clone(), c)] {
            out.push(x.clone().equal(y.clone()).into_data());
            out.push(x.clone().not_equal(y.clone()).into_data());
            out.push(x.clone().greater(y.clone()).into_data());
            out.push(x.clone().greater_equal(y.clone()).into_data());
            out.push(x.clone().lower(y.clone()).into_data());
            out.push(x.lower_equal(y).into_data());
        }
        out.push(r.clone().equal(col.clone()).into_data());
        out.push(r.clone().not_equal(col.clone()).into_data());
        out.push(r.clone().greater(col.clone()).into_data());
        out.push(r.clone().greater_equal(col.clone()).into_data());
        out.push(r.clone().lower(col.clone()).into_data());
        out.push(r.lower_equal(col).into_data());
        for k in [0.5f32, 0.0, -2.0, f32::NAN, f32::INFINITY] {
            for x in [a.clone(), s.clone().reshape([1, 1, n])] {
                out.push(x.clone().equal_elem(k).into_data());
                out.push(x.clone().not_equal_elem(k).into_data());
                out.push(x.clone().greater_elem(k).into_data());
                out.push(x.clone().greater_equal_elem(k).into_data());
                out.push(x.clone().lower_elem(k).into_data());
                out.push(x.lower_equal_elem(k).into_data());
            }
        }
        out.push(f.clone().equal(g.clone()).into_data());
        out.push(f.clone().greater(g.clone()).into_data());
        out.push(f.clone().lower_equal(g).into_data());
        out.push(f.clone().greater_elem(0.0).into_data());
        out.push(f.not_equal_elem(0.0).into_data());
        out.push(e.clone().equal(e.clone()).into_data());
        out.push(e.lower_elem(0.0).into_data());
        out
    });

    // ---- Reductions --------------------------------------------------------------------------

    // float_sum/sum_dim, float_mean/mean_dim, float_prod/prod_dim: whole tensor and every dim,
    // size-1 dims, 0-sized dims (sum and prod of nothing), NaN/inf propagation, f64.
    diff!("float_sum_mean_prod", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [3, 4, 5]);
        let p = float_in::<B, 3>(rng, dev, [2, 3, 4], 0.5, 1.5);
        let s = specials::<B>(dev);
        let f = float64::<B, 2>(rng, dev, [4, 6], -1.0, 1.0);
        let e = float::<B, 3>(rng, dev, [2, 0, 3]);
        let mut out = vec![
            a.clone().sum().into_data(),
            a.clone().mean().into_data(),
            p.clone().prod().into_data(),
            s.clone().sum().into_data(),
            s.clone().mean().into_data(),
            s.prod().into_data(),
            f.clone().sum().into_data(),
            f.clone().mean().into_data(),
            f.clone().prod().into_data(),
            f.clone().sum_dim(1).into_data(),
            f.clone().mean_dim(0).into_data(),
            f.prod_dim(1).into_data(),
            e.clone().sum().into_data(),
            e.clone().prod().into_data(),
            e.clone().sum_dim(1).into_data(),
            e.clone().prod_dim(1).into_data(),
            e.clone().sum_dim(2).into_data(),
            e.clone().mean_dim(2).into_data(),
            e.prod_dim(0).into_data(),
            a.clone().sum_dims(&[0, 2]).into_data(),
            a.clone().mean_dims(&[1, 2]).into_data(),
        ];
        for dim in 0..3 {
            out.push(a.clone().sum_dim(dim).into_data());
            out.push(a.clone().mean_dim(dim).into_data());
            out.push(p.clone().prod_dim(dim).into_data());
        }
        let one = float::<B, 3>(rng, dev, [1, 4, 1]);
        out.push(one.clone().sum_dim(0).into_data());
        out.push(one.clone().mean_dim(2).into_data());
        out.push(one.prod_dim(0).into_data());
        out
    });

    // float_cumsum/cumprod/cummin/cummax: along every dim, with ties, the IEEE corner cases
    // (NaN propagation), f64, a 0-sized dim.
    diff!("float_cumulative", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [3, 4, 5]);
        let h = halves::<B, 2>(rng, dev, [4, 6]);
        let s = specials::<B>(dev);
        let f = float64::<B, 2>(rng, dev, [3, 5], -2.0, 2.0);
        let e = float::<B, 2>(rng, dev, [0, 4]);
        let mut out = Vec::new();
        for dim in 0..3 {
            out.push(a.clone().cumsum(dim).into_data());
            out.push(a.clone().cumprod(dim).into_data());
            out.push(a.clone().cummin(dim).into_data());
            out.push(a.clone().cummax(dim).into_data());
        }
        for x in [h, f.reshape([5, 3]).transpose()] {
            out.push(x.clone().cumsum(1).into_data());
            out.push(x.clone().cumprod(1).into_data());
            out.push(x.clone().cummin(1).into_data());
            out.push(x.cummax(1).into_data());
        }
        out.push(s.clone().cumsum(0).into_data());
        out.push(s.clone().cumprod(0).into_data());
        out.push(s.clone().cummin(0).into_data());
        out.push(s.cummax(0).into_data());
        out.push(e.clone().cumsum(1).into_data());
        out.push(e.clone().cumprod(0).into_data());
        out.push(e.clone().cummin(1).into_data());
        out.push(e.cummax(0).into_data());
        out
    });

    // float_argmax/argmin, float_max/min (whole tensor), float_max_dim/min_dim, their
    // `_with_indices` forms, float_max_abs/max_abs_dim: every dim, ties (on the half-integer
    // grid), size-1 dims, f64, and index dtypes other than the default at the primitive level.
    diff!("float_min_max", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [3, 4, 5]);
        let h = halves::<B, 2>(rng, dev, [5, 7]);
        let f = float64::<B, 2>(rng, dev, [4, 3], -2.0, 2.0);
        let one = float::<B, 2>(rng, dev, [1, 6]);
        let mut out = vec![
            a.clone().max().into_data(),
            a.clone().min().into_data(),
            a.clone().max_abs().into_data(),
            h.clone().max().into_data(),
            h.clone().min().into_data(),
            h.clone().max_abs().into_data(),
            f.clone().max().into_data(),
            f.clone().min().into_data(),
            f.clone().max_abs().into_data(),
            one.clone().argmax(0).into_data(),
            one.clone().max_dim(0).into_data(),
            one.clone().min_dim(1).into_data(),
            one.max_abs_dim(0).into_data(),
        ];
        for x in [
            a.clone(),
            h.clone().reshape([5, 7, 1]),
            f.reshape([4, 3, 1]),
        ] {
            for dim in 0..3 {
                out.push(x.clone().argmax(dim).into_data());
                out.push(x.clone().argmin(dim).into_data());
                out.push(x.clone().max_dim(dim).into_data());
                out.push(x.clone().min_dim(dim).into_data());
                out.push(x.clone().max_abs_dim(dim).into_data());
                let (v, i) = x.clone().max_dim_with_indices(dim);
                out.push(v.into_data());
                out.push(i.into_data());
                let (v, i) = x.clone().min_dim_with_indices(dim);
                out.push(v.into_data());
                out.push(i.into_data());
            }
        }
        for dtype in [IntDType::I32, IntDType::U8] {
            let i = B::float_argmax(prim(h.clone()), 1, dtype);
            out.push(Tensor::<B, 2, Int>::from_primitive(i).into_data());
            let i = B::float_argmin(prim(h.clone()), 0, dtype);
            out.push(Tensor::<B, 2, Int>::from_primitive(i).into_data());
            let (v, i) = B::float_max_dim_with_indices(prim(h.clone()), 1, dtype);
            out.push(wrap::<B, 2>(v).into_data());
            out.push(Tensor::<B, 2, Int>::from_primitive(i).into_data());
            let (v, i) = B::float_min_dim_with_indices(prim(h.clone()), 0, dtype);
            out.push(wrap::<B, 2>(v).into_data());
            out.push(Tensor::<B, 2, Int>::from_primitive(i).into_data());
        }
        out
    });

    // float_any/any_dim, float_all/all_dim: exact zeros, all-zero and all-nonzero tensors,
    // -0.0 (zero) and NaN (non-zero), every dim, f64, 0-sized dims (any = false, all = true).
    diff!("float_any_all", |dev, rng| {
        let h = halves::<B, 3>(rng, dev, [3, 4, 5]);
        let z = Tensor::<B, 2>::zeros([3, 4], dev);
        let nz = float_in::<B, 2>(rng, dev, [3, 4], 0.5, 1.0);
        let s = specials::<B>(dev);
        let f = float64::<B, 2>(rng, dev, [3, 3], -1.0, 1.0).round();
        let e = float::<B, 2>(rng, dev, [0, 3]);
        let mut out = vec![
            h.clone().any().into_data(),
            h.clone().all().into_data(),
            z.clone().any().into_data(),
            z.clone().all().into_data(),
            nz.clone().any().into_data(),
            nz.clone().all().into_data(),
            z.any_dim(1).into_data(),
            nz.all_dim(0).into_data(),
            s.clone().slice(s![1..2]).any().into_data(), // -0.0 alone
            s.clone().slice(s![18..19]).all().into_data(), // NaN alone
            s.clone().any().into_data(),
            s.all().into_data(),
            f.clone().any_dim(0).into_data(),
            f.all_dim(1).into_data(),
            e.clone().any().into_data(),
            e.clone().all().into_data(),
            e.clone().any_dim(0).into_data(),
            e.all_dim(0).into_data(),
        ];
        for dim in 0..3 {
            out.push(h.clone().any_dim(dim).into_data());
            out.push(h.clone().all_dim(dim).into_data());
        }
        out
    });

    // ---- Sorting and top-k -------------------------------------------------------------------

    // float_sort, float_sort_with_indices, float_argsort: ascending and descending along every
    // dim, ties (stable order of indices), f64, size-1 and 0-sized dims, and index dtypes at the
    // primitive level.
    diff!("float_sort", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [3, 4, 5]);
        let h = halves::<B, 2>(rng, dev, [4, 9]);
        let f = float64::<B, 2>(rng, dev, [3, 6], -1.0, 1.0);
        let e = float::<B, 2>(rng, dev, [0, 3]);
        let mut out = Vec::new();
        for dim in 0..3 {
            out.push(a.clone().sort(dim).into_data());
            out.push(a.clone().sort_descending(dim).into_data());
            out.push(a.clone().argsort(dim).into_data());
        }
        for x in [h.clone(), f.clone(), h.clone().transpose()] {
            for dim in 0..2 {
                let (v, i) = x.clone().sort_with_indices(dim);
                out.push(v.into_data());
                out.push(i.into_data());
                let (v, i) = x.clone().sort_descending_with_indices(dim);
                out.push(v.into_data());
                out.push(i.into_data());
                out.push(x.clone().argsort(dim).into_data());
                out.push(x.clone().argsort_descending(dim).into_data());
            }
        }
        out.push(e.clone().sort(1).into_data());
        out.push(e.argsort(0).into_data());
        out.push(float::<B, 2>(rng, dev, [1, 5]).sort(0).into_data());
        let (v, i) = B::float_sort_with_indices(prim(h.clone()), 1, true, IntDType::I32);
        out.push(wrap::<B, 2>(v).into_data());
        out.push(Tensor::<B, 2, Int>::from_primitive(i).into_data());
        let i = B::float_argsort(prim(h), 0, false, IntDType::I16);
        out.push(Tensor::<B, 2, Int>::from_primitive(i).into_data());
        out
    });

    // float_topk: k = 1 and k = n - 1 along each dim, ties, f64. float_argtopk is
    // `unimplemented!` in burn-ndarray: the case requires `Hetero` to fail the same way (and
    // compares the indices should burn-ndarray gain an implementation).
    diff!("float_topk", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [3, 4, 5]);
        let h = halves::<B, 2>(rng, dev, [4, 8]);
        let f = float64::<B, 2>(rng, dev, [3, 6], -1.0, 1.0);
        let mut out = Vec::new();
        for dim in 0..3 {
            let n = a.dims()[dim];
            out.push(a.clone().topk(1, dim).into_data());
            out.push(a.clone().topk(n - 1, dim).into_data());
        }
        out.push(h.clone().topk(3, 1).into_data());
        out.push(h.clone().topk(2, 0).into_data());
        let (v, i) = h.clone().topk_with_indices(3, 1);
        out.push(v.into_data());
        out.push(i.into_data());
        out.push(f.topk(4, 1).into_data());
        out.extend(outcome(|| vec![h.clone().argtopk(3, 1).into_data()]));
        out.extend(outcome(|| vec![a.argtopk(1, 0).into_data()]));
        out
    });

    // ---- Unary math ------------------------------------------------------------------------------

    // float_exp, float_log, float_log1p, float_sqrt, float_erf: in their domains, on the IEEE
    // corner cases (log of negatives/zero, exp overflow), f64, empty.
    diff!("float_exp_log_sqrt_erf", |dev, rng| {
        let a = float::<B, 3>(rng, dev, [2, 3, 4]);
        let p = float_in::<B, 3>(rng, dev, [2, 3, 4], 0.1, 4.0);
        let l = float_in::<B, 2>(rng, dev, [3, 5], -0.9, 4.0);
        let s = specials::<B>(dev);
        let f = float64::<B, 2>(rng, dev, [3, 3], 0.1, 4.0);
        let e = float::<B, 2>(rng, dev, [0, 2]);
        vec![
            a.clone().exp().into_data(),
            float_in::<B, 1>(rng, dev, [8], -100.0, 100.0)
                .exp()
                .into_data(),
            p.clone().log().into_data(),
            l.log1p().into_data(),
            p.sqrt().into_data(),
            a.erf().into_data(),
            s.clone().exp().into_data(),
            s.clone().log().into_data(),
            s.clone().log1p().into_data(),
            s.clone().sqrt().into_data(),
            s.erf().into_data(),
            f.clone().exp().into_data(),
            f.clone().log().into_data(),
            f.clone().log1p().into_data(),
            f.clone().sqrt().into_data(),
            f.erf().into_data(),
            e.clone().exp().into_data(),
            e.log().into_data(),
        ]
    });

    // float_powf (tensor exponents, broadcast, negative bases give NaN), float_powi (int
    // exponent tensor), float_powi_scalar (the special-cased exponents 0, ±1, ±2 and general
    // ones, `square`), float_powf_scalar (integral and fractional exponents), and the `_impl`
    // forms called directly.
    diff!("float_pow", |dev, rng| {
        let base = float_in::<B, 3>(rng, dev, [2, 3, 4], 0.1, 3.0);
        let any = float::<B, 3>(rng, dev, [2, 3, 4]);
        let ex = float::<B, 3>(rng, dev, [2, 3, 4]);
        let ex_b = float::<B, 3>(rng, dev, [1, 3, 1]);
        let iex = int::<B, 3>(rng, dev, [2, 3, 4], -3, 4);
        let iex_b = int::<B, 3>(rng, dev, [2, 1, 4], -2, 3);
        let s = specials::<B>(dev);
        let f = float64::<B, 2>(rng, dev, [3, 3], -2.0, 2.0);
        let mut out = vec![
            base.clone().powf(ex.clone()).into_data(),
            base.clone().powf(ex_b).into_data(),
            any.clone().powf(ex).into_data(),
            s.clone()
                .reshape([1, 21])
                .expand([21, 21])
                .powf(s.clone().reshape([21, 1]).expand([21, 21]))
                .into_data(),
            wrap::<B, 3>(B::float_powi(prim(any.clone()), iex.into_primitive())).into_data(),
            wrap::<B, 3>(B::float_powi(prim(base.clone()), iex_b.into_primitive())).into_data(),
            any.clone().square().into_data(),
            s.clone().square().into_data(),
            f.clone().square().into_data(),
        ];
        for k in [0, 1, 2, -1, -2, 3, -3, 7] {
            out.push(any.clone().powi_scalar(k).into_data());
            out.push(s.clone().powi_scalar(k).into_data());
            out.push(
                wrap::<B, 3>(B::float_powi_scalar_impl(prim(any.clone()), k.into())).into_data(),
            );
        }
        out.push(f.clone().powi_scalar(3).into_data());
        for k in [0.5f32, 2.0, -1.5, 3.0, 1.0 / 3.0, 0.0] {
            out.push(base.clone().powf_scalar(k).into_data());
            out.push(any.clone().powf_scalar(k).into_data());
            out.push(s.clone().powf_scalar(k).into_data());
            out.push(
                wrap::<B, 3>(B::float_powf_scalar_impl(
                    prim(base.clone()),
                    Scalar::from(k),
                ))
                .into_data(),
            );
        }
        out.push(f.clone().powf_scalar(2.5f64).into_data());
        out.push(
            wrap::<B, 2>(B::float_powf_scalar_impl(prim(f), Scalar::from(-0.5f64))).into_data(),
        );
        // burn-ndarray broadcasts only one side of powf; both sides panics there.
        let x = float_in::<B, 3>(rng, dev, [2, 1, 4], 0.1, 3.0);
        let y = float::<B, 3>(rng, dev, [1, 3, 1]);
        out.extend(outcome(|| vec![x.powf(y).into_data()]));
        out
    });

    // float_cos/sin/tan, float_cosh/sinh/tanh, float_acos/asin/atan, float_acosh/asinh/atanh,
    // float_atan2: each in (and, on the corner cases, out of) its domain, f64; atan2 on all
    // sign combinations, signed zeros and broadcasting.
    diff!("float_trig", |dev, rng| {
        let a = float_in::<B, 3>(rng, dev, [2, 3, 4], -4.0, 4.0);
        let u = float_in::<B, 2>(rng, dev, [3, 5], -0.999, 0.999);
        let g1 = float_in::<B, 2>(rng, dev, [3, 5], 1.0, 10.0);
        let s = specials::<B>(dev);
        let n = s.dims()[0];
        let f = float64::<B, 2>(rng, dev, [3, 3], -0.99, 0.99);
        let y = halves::<B, 2>(rng, dev, [4, 5]);
        let x = halves::<B, 2>(rng, dev, [4, 5]);
        let xb = float::<B, 2>(rng, dev, [1, 5]);
        let mut out = Vec::new();
        for t in [a.clone(), s.clone().reshape([1, 1, n])] {
            out.push(t.clone().cos().into_data());
            out.push(t.clone().sin().into_data());
            out.push(t.clone().tan().into_data());
            out.push(t.clone().cosh().into_data());
            out.push(t.clone().sinh().into_data());
            out.push(t.clone().tanh().into_data());
            out.push(t.clone().atan().into_data());
            out.push(t.asinh().into_data());
        }
        for t in [u, s.clone().reshape([1, n]), f.clone().reshape([1, 9])] {
            out.push(t.clone().acos().into_data());
            out.push(t.clone().asin().into_data());
            out.push(t.atanh().into_data());
        }
        out.push(g1.acosh().into_data());
        out.push(s.clone().acosh().into_data());
        out.push(f.clone().add_scalar(2.0).acosh().into_data());
        out.push(f.clone().cos().into_data());
        out.push(f.clone().tanh().into_data());
        out.push(f.clone().asinh().into_data());
        out.push(y.clone().atan2(x).into_data());
        out.push(y.atan2(xb).into_data());
        let (r, c) = (s.clone().reshape([n, 1]), s.reshape([1, n]));
        out.push(r.expand([n, n]).atan2(c.expand([n, n])).into_data());
        out.push(f.clone().atan2(f.flip([0])).into_data());
        out
    });

    // float_round (ties to even), float_floor, float_ceil, float_trunc: halves, random values,
    // the corner cases (signed zeros, huge values, NaN), f64, `deg2rad`/`rad2deg`.
    diff!("float_rounding", |dev, rng| {
        let h = halves::<B, 2>(rng, dev, [4, 6]);
        let a = float_in::<B, 3>(rng, dev, [2, 3, 4], -10.0, 10.0);
        let s = specials::<B>(dev);
        let f = float64::<B, 2>(rng, dev, [3, 4], -10.0, 10.0);
        let fh = Tensor::<B, 1>::from_data(
            TensorData::new(vec![-2.5f64, -1.5, -0.5, 0.5, 1.5, 2.5, 1e17 + 0.5], [7]),
            (dev, DType::F64),
        );
        let mut out = Vec::new();
        for t in [h.reshape([1, 4, 6]), a.clone(), s.reshape([1, 1, 21])] {
            out.push(t.clone().round().into_data());
            out.push(t.clone().floor().into_data());
            out.push(t.clone().ceil().into_data());
            out.push(t.trunc().into_data());
        }
        for t in [f, fh.reshape([1, 7])] {
            out.push(t.clone().round().into_data());
            out.push(t.clone().floor().into_data());
            out.push(t.clone().ceil().into_data());
            out.push(t.trunc().into_data());
        }
        out.push(a.clone().deg2rad().into_data());
        out.push(a.rad2deg().into_data());
        out
    });

    // float_is_nan, float_is_inf (and `is_finite`, `contains_nan`): the corner cases, random
    // finite values, f64 with NaN/inf, empty.
    diff!("float_is_nan_inf", |dev, rng| {
        let s = specials::<B>(dev);
        let a = float::<B, 2>(rng, dev, [3, 4]);
        let f = Tensor::<B, 1>::from_data(
            TensorData::new(
                vec![f64::NAN, 1.0, f64::INFINITY, -0.0, f64::NEG_INFINITY],
                [5],
            ),
            (dev, DType::F64),
        );
        let e = float::<B, 2>(rng, dev, [2, 0]);
        vec![
            s.clone().is_nan().into_data(),
            s.clone().is_inf().into_data(),
            s.clone().is_finite().into_data(),
            s.contains_nan().into_data(),
            a.clone().is_nan().into_data(),
            a.is_inf().into_data(),
            f.clone().is_nan().into_data(),
            f.is_inf().into_data(),
            e.clone().is_nan().into_data(),
            e.is_inf().into_data(),
        ]
    });

    // ---- Grid sampling -------------------------------------------------------------------------

    // float_grid_sample_2d: bilinear (the mode burn-ndarray implements) with every padding mode
    // and both corner alignments, grid points partly out of bounds, a 1x1 input, f64. Nearest
    // and bicubic are `todo!` in burn-ndarray: Hetero must fail the same way.
    diff!("float_grid_sample_2d", |dev, rng| {
        let x = float::<B, 4>(rng, dev, [2, 3, 5, 6]);
        let grid = float_in::<B, 4>(rng, dev, [2, 4, 7, 2], -1.3, 1.3);
        let x1 = float::<B, 4>(rng, dev, [1, 2, 1, 1]);
        let grid1 = float_in::<B, 4>(rng, dev, [1, 3, 3, 2], -1.5, 1.5);
        let xf = float64::<B, 4>(rng, dev, [1, 2, 4, 4], -1.0, 1.0);
        let gridf = float64::<B, 4>(rng, dev, [1, 3, 2, 2], -1.2, 1.2);
        let mut out = Vec::new();
        for padding in [
            GridSamplePaddingMode::Zeros,
            GridSamplePaddingMode::Border,
            GridSamplePaddingMode::Reflection,
        ] {
            for align in [false, true] {
                let options = GridSampleOptions::new(InterpolateMode::Bilinear)
                    .with_padding_mode(padding)
                    .with_align_corners(align);
                out.push(
                    x.clone()
                        .grid_sample_2d(grid.clone(), options.clone())
                        .into_data(),
                );
                out.push(
                    x1.clone()
                        .grid_sample_2d(grid1.clone(), options.clone())
                        .into_data(),
                );
                out.push(
                    xf.clone()
                        .grid_sample_2d(gridf.clone(), options)
                        .into_data(),
                );
            }
        }
        for mode in [InterpolateMode::Nearest, InterpolateMode::Bicubic] {
            let options = GridSampleOptions::new(mode);
            out.extend(outcome(|| {
                vec![x.clone().grid_sample_2d(grid.clone(), options).into_data()]
            }));
        }
        out
    });

    // ---- Autodiff flags ------------------------------------------------------------------------

    // float_detach, float_set_require_grad, float_is_require_grad: no-ops without autodiff;
    // the data passes through unchanged and the flag stays false on both.
    diff!("float_autodiff_flags", |dev, rng| {
        let a = float::<B, 2>(rng, dev, [3, 4]);
        let d = a.clone().detach();
        let r = a.clone().require_grad();
        let u = a.set_require_grad(false);
        let flags = vec![
            d.is_require_grad(),
            r.is_require_grad(),
            u.is_require_grad(),
        ];
        vec![
            d.into_data(),
            r.into_data(),
            u.into_data(),
            TensorData::new(flags, [3]),
        ]
    });
}

/// `Hetero<Flex, _>` rewrites binary ops that broadcast over a middle dim (see
/// `src/ops/broadcast.rs`): each op, both operand orders, against burn-flex's own result, bit for
/// bit, on shapes the rewrite applies to and shapes it leaves alone.
pub fn flex_broadcasts_are_identical() {
    use burn::tensor::ops::FloatTensorOps;
    type F = burn_flex::Flex;
    type HF = burn_hetero::Hetero<F, Accel>;
    let dev = Default::default();
    let mut rng = rng_for("flex broadcasts");
    let shapes: [(&[usize], &[usize]); 7] = [
        (&[4, 6, 5, 3], &[1, 6, 1, 1]), // a batch norm's statistics
        (&[1, 6, 5, 3], &[1, 6, 1, 1]), // batch 1: nothing to expand
        (&[3, 4, 7], &[1, 4, 1]),
        (&[2, 3, 4, 5], &[1, 3, 4, 1]), // a block of two kept dims
        (&[2, 3, 4, 5], &[2, 3, 1, 1]), // leading dims kept
        (&[2, 3, 4, 5], &[1, 1, 1, 5]), // a row broadcast: left alone
        (&[2, 3, 4, 5], &[1, 3, 1, 5]), // kept dims not in one block: left alone
    ];
    /// The named op on backend `B`.
    fn apply<B: Backend>(name: &str, l: FloatTensor<B>, r: FloatTensor<B>) -> FloatTensor<B> {
        match name {
            "add" => B::float_add(l, r),
            "sub" => B::float_sub(l, r),
            "mul" => B::float_mul(l, r),
            _ => B::float_div(l, r),
        }
    }
    for (full, small) in shapes {
        let a: Vec<f32> = random_vec(&mut rng, full.iter().product(), -2.0, 2.0);
        let b: Vec<f32> = random_vec(&mut rng, small.iter().product(), 0.5, 2.0);
        for name in ["add", "sub", "mul", "div"] {
            for small_first in [false, true] {
                let (l, r) = if small_first {
                    ((&b, small), (&a, full))
                } else {
                    ((&a, full), (&b, small))
                };
                let prim = |(v, s): (&Vec<f32>, &[usize])| TensorData::new(v.clone(), s.to_vec());
                let read = |t| read_sync(<HF as FloatTensorOps<HF>>::float_into_data(t)).unwrap();
                let reference = apply::<F>(
                    name,
                    F::float_from_data(prim(l), &dev),
                    F::float_from_data(prim(r), &dev),
                );
                let got = apply::<HF>(
                    name,
                    HF::float_from_data(prim(l), &dev),
                    HF::float_from_data(prim(r), &dev),
                );
                let case = format!("flex {name} {:?} {:?}", l.1, r.1);
                let reference = read_sync(F::float_into_data(reference)).unwrap();
                assert_identical(&case, 0, &read(got), &reference);
            }
        }
    }
}

/// `Hetero<Flex, _>` copies strided views into contiguous buffers before burn-flex's binary ops
/// and reshapes see them (`src/ops/layout.rs`) and runs large f32 binary ops, negation, ReLU and
/// its backward across threads, in place when an operand's buffer is its own
/// (`src/ops/elementwise.rs`). Against burn-flex
/// itself, bit for bit: permuted and narrowed views on either side, operands large enough for
/// the threaded path and small ones, held elsewhere or not; a held operand must be left as it was.
pub fn flex_layouts_are_identical() {
    type F = burn_flex::Flex;
    type HF = burn_hetero::Hetero<F, Accel>;
    let mut rng = rng_for("flex layouts");
    /// How an operand is made from its values.
    #[derive(Clone, Copy, Debug)]
    enum View {
        /// Contiguous `[a, b, h, w]`.
        Dense,
        /// Stored `[b, a, h, w]`, dims 0 and 1 swapped (batch norm's gradient views).
        Permuted,
        /// Stored `[a, b, h, w + 8]`, narrowed to `w` columns from column 5.
        Narrowed,
        /// Stored `[a, b, w, h]`, dims 2 and 3 swapped: no contiguous blocks, left to burn-flex.
        InnerSwapped,
    }
    fn make<B: Backend>(values: &[f32], dims: [usize; 4], view: View) -> Tensor<B, 4> {
        let [a, b, h, w] = dims;
        let dev = Default::default();
        let stored =
            |s: [usize; 4]| Tensor::<B, 4>::from_data(TensorData::new(values.to_vec(), s), &dev);
        match view {
            View::Dense => stored(dims),
            View::Permuted => stored([b, a, h, w]).swap_dims(0, 1),
            View::Narrowed => stored([a, b, h, w + 8]).narrow(3, 5, w),
            View::InnerSwapped => stored([a, b, w, h]).swap_dims(2, 3),
        }
    }
    fn stored_len(dims: [usize; 4], view: View) -> usize {
        let n: usize = dims.iter().product();
        match view {
            View::Narrowed => n / dims[3] * (dims[3] + 8),
            _ => n,
        }
    }
    fn apply<B: Backend>(op: &str, l: Tensor<B, 4>, r: Tensor<B, 4>) -> Tensor<B, 4> {
        match op {
            "add" => l + r,
            "sub" => l - r,
            "mul" => l * r,
            _ => l / r,
        }
    }
    let views = [
        View::Dense,
        View::Permuted,
        View::Narrowed,
        View::InnerSwapped,
    ];
    // [4, 16, 32, 32] has 65 536 values, enough for the threaded path; the others are not.
    for dims in [[4, 16, 32, 32], [3, 2, 5, 7], [2, 3, 4, 40]] {
        for (lv, rv) in views
            .iter()
            .flat_map(|&l| views.iter().map(move |&r| (l, r)))
        {
            let a = random_vec(&mut rng, stored_len(dims, lv), -2.0, 2.0);
            let b = random_vec(&mut rng, stored_len(dims, rv), 0.5, 2.0);
            for op in ["add", "sub", "mul", "div"] {
                for held in [false, true] {
                    let case = format!("{op} {dims:?} {lv:?} {rv:?} held {held}");
                    let reference =
                        apply(op, make::<F>(&a, dims, lv), make::<F>(&b, dims, rv)).into_data();
                    let (l, r) = (make::<HF>(&a, dims, lv), make::<HF>(&b, dims, rv));
                    let kept = held.then(|| (l.clone(), r.clone()));
                    let got = apply(op, l, r).into_data();
                    assert_identical(&case, 0, &got, &reference);
                    if let Some((l, r)) = kept {
                        let before = (make::<F>(&a, dims, lv), make::<F>(&b, dims, rv));
                        assert_identical(&case, 1, &l.into_data(), &before.0.into_data());
                        assert_identical(&case, 2, &r.into_data(), &before.1.into_data());
                    }
                }
            }
        }
        // Broadcasts against a [1, C, 1, 1] operand (either side) on the threaded path too.
        let [_, c, _, _] = dims;
        let small = random_vec(&mut rng, c, 0.5, 2.0);
        let small_of = |s: &[f32]| TensorData::new(s.to_vec(), [1, c, 1, 1]);
        for view in views {
            let a = random_vec(&mut rng, stored_len(dims, view), -2.0, 2.0);
            for op in ["add", "sub", "mul", "div"] {
                for small_first in [false, true] {
                    let case =
                        format!("{op} {dims:?} {view:?} against [1, C, 1, 1], first {small_first}");
                    let run = |full_f: Tensor<F, 4>, full_h: Tensor<HF, 4>| {
                        let (sf, sh) = (
                            Tensor::<F, 4>::from_data(small_of(&small), &Default::default()),
                            Tensor::<HF, 4>::from_data(small_of(&small), &Default::default()),
                        );
                        if small_first {
                            (
                                apply(op, sf, full_f).into_data(),
                                apply(op, sh, full_h).into_data(),
                            )
                        } else {
                            (
                                apply(op, full_f, sf).into_data(),
                                apply(op, full_h, sh).into_data(),
                            )
                        }
                    };
                    let (reference, got) =
                        run(make::<F>(&a, dims, view), make::<HF>(&a, dims, view));
                    assert_identical(&case, 0, &got, &reference);
                }
            }
            // Negation, the scalar ops (a scalar that f32 does not hold exactly, as an
            // optimizer's learning rate), ReLU and ReLU's backward (the output gradient of a
            // second view), held elsewhere or not.
            fn unary<B: Backend>(op: &str, x: Tensor<B, 4>, g: Tensor<B, 4>) -> Tensor<B, 4> {
                const S: f64 = 0.1;
                match op {
                    "neg" => -x,
                    "add_scalar" => x.add_scalar(S),
                    "sub_scalar" => x.sub_scalar(S),
                    "mul_scalar" => x.mul_scalar(S),
                    "div_scalar" => x.div_scalar(S),
                    "relu" => burn::tensor::activation::relu(x),
                    _ => {
                        let prim = |t: Tensor<B, 4>| t.into_primitive().tensor();
                        Tensor::from_primitive(TensorPrimitive::Float(B::relu_backward(
                            prim(x),
                            prim(g),
                        )))
                    }
                }
            }
            let g = random_vec(&mut rng, stored_len(dims, view), -1.0, 1.0);
            let ops = [
                "neg",
                "add_scalar",
                "sub_scalar",
                "mul_scalar",
                "div_scalar",
                "relu",
                "relu_backward",
            ];
            for op in ops {
                for held in [false, true] {
                    let case = format!("{op} {dims:?} {view:?} held {held}");
                    let reference =
                        unary(op, make::<F>(&a, dims, view), make::<F>(&g, dims, view)).into_data();
                    let (x, gh) = (make::<HF>(&a, dims, view), make::<HF>(&g, dims, view));
                    let kept = held.then(|| (x.clone(), gh.clone()));
                    assert_identical(&case, 0, &unary(op, x, gh).into_data(), &reference);
                    if let Some((x, gh)) = kept {
                        let before = make::<F>(&a, dims, view).into_data();
                        assert_identical(&case, 1, &x.into_data(), &before);
                        let before = make::<F>(&g, dims, view).into_data();
                        assert_identical(&case, 2, &gh.into_data(), &before);
                    }
                }
            }
            // Reshapes of each view, to a flat vector and to rows.
            fn reshaped<B: Backend>(t: Tensor<B, 4>, dims: [usize; 4]) -> [TensorData; 2] {
                let [n0, n1, n2, n3] = dims;
                [
                    t.clone().reshape([n0 * n1 * n2 * n3]).into_data(),
                    t.reshape([n0, n1 * n2 * n3]).into_data(),
                ]
            }
            let got = reshaped(make::<HF>(&a, dims, view), dims);
            let reference = reshaped(make::<F>(&a, dims, view), dims);
            for (i, (g, r)) in got.iter().zip(&reference).enumerate() {
                assert_identical(&format!("reshape {dims:?} {view:?}"), i, g, r);
            }
        }
    }
}

/// 2D max pooling and its backward on `Hetero<Flex, _>` (plane-parallel, `src/ops/pool.rs`)
/// against burn-flex itself, bit for bit: outputs, indices and input gradients, over kernels,
/// strides, paddings, dilations and ceil mode, with ties and NaNs in the input; a permuted view
/// (left to burn-flex) as well.
pub fn flex_pooling_is_identical() {
    use burn::tensor::module::max_pool2d_with_indices;
    type F = burn_flex::Flex;
    type HF = burn_hetero::Hetero<F, Accel>;
    type Options = ([usize; 2], [usize; 2], [usize; 2], [usize; 2], bool);
    fn run<B: Backend>(
        values: &[f32],
        dims: [usize; 4],
        permuted: bool,
        (kernel, stride, padding, dilation, ceil): Options,
        grad_values: &dyn Fn(usize) -> Vec<f32>,
    ) -> Vec<TensorData> {
        let dev = Default::default();
        let [a, b, h, w] = dims;
        let x = if permuted {
            Tensor::<B, 4>::from_data(TensorData::new(values.to_vec(), [b, a, h, w]), &dev)
                .swap_dims(0, 1)
        } else {
            Tensor::<B, 4>::from_data(TensorData::new(values.to_vec(), dims), &dev)
        };
        let plain =
            burn::tensor::module::max_pool2d(x.clone(), kernel, stride, padding, dilation, ceil);
        let (out, indices) =
            max_pool2d_with_indices(x.clone(), kernel, stride, padding, dilation, ceil);
        let out_dims = out.dims();
        let grad = Tensor::<B, 4>::from_data(
            TensorData::new(grad_values(out_dims.iter().product()), out_dims),
            &dev,
        );
        let x_grad = B::max_pool2d_with_indices_backward(
            x.into_primitive().tensor(),
            kernel,
            stride,
            padding,
            dilation,
            ceil,
            grad.into_primitive().tensor(),
            indices.clone().into_primitive(),
        )
        .x_grad;
        vec![
            plain.into_data(),
            out.into_data(),
            indices.into_data(),
            Tensor::<B, 4>::from_primitive(burn::tensor::TensorPrimitive::Float(x_grad))
                .into_data(),
        ]
    }
    let mut rng = rng_for("flex pooling");
    // 2x2 at stride 2 has its own loop where every window lies inside the input (the first
    // option; with odd sizes, a row or column is left over); in ceil mode on odd sizes the
    // last windows are partial and take the general loop.
    let options: [Options; 6] = [
        ([2, 2], [2, 2], [0, 0], [1, 1], false),
        ([2, 2], [2, 2], [0, 0], [1, 1], true),
        ([3, 3], [2, 2], [1, 1], [1, 1], true),
        ([3, 2], [1, 2], [1, 0], [2, 1], false),
        ([2, 2], [3, 3], [1, 1], [1, 1], true),
        ([5, 5], [1, 1], [2, 2], [1, 1], false),
    ];
    for dims in [[3, 4, 9, 7], [2, 3, 24, 24], [1, 2, 2, 3]] {
        let n: usize = dims.iter().product();
        // Few distinct values, so that windows hold ties, and a few NaNs.
        let mut values: Vec<f32> = (0..n).map(|_| rng.random_range(0..5) as f32).collect();
        for i in (0..n).step_by(13) {
            values[i] = f32::NAN;
        }
        for option in options {
            for permuted in [false, true] {
                let grads =
                    |m: usize| -> Vec<f32> { (0..m).map(|i| (i % 7) as f32 - 3.25).collect() };
                let hetero = run::<HF>(&values, dims, permuted, option, &grads);
                let flex = run::<F>(&values, dims, permuted, option, &grads);
                let case = format!("max pool {dims:?} {option:?} permuted {permuted}");
                for (i, (h, f)) in hetero.iter().zip(&flex).enumerate() {
                    assert_identical(&case, i, h, f);
                }
            }
        }
    }
    // Indices of another pooling (3x3 windows at stride 2, padding 1: the same output size)
    // into a 2x2, stride-2 backward: many lie outside their 2x2 window, which its one-pass loop
    // must notice, scattering then as burn-flex does.
    fn foreign<B: Backend>(values: &[f32], dims: [usize; 4], grad: &[f32]) -> TensorData {
        let dev = Default::default();
        let x = Tensor::<B, 4>::from_data(TensorData::new(values.to_vec(), dims), &dev);
        let (out, index) =
            max_pool2d_with_indices(x.clone(), [3, 3], [2, 2], [1, 1], [1, 1], false);
        let grad = Tensor::<B, 4>::from_data(TensorData::new(grad.to_vec(), out.dims()), &dev);
        let x_grad = B::max_pool2d_with_indices_backward(
            x.into_primitive().tensor(),
            [2, 2],
            [2, 2],
            [0, 0],
            [1, 1],
            false,
            grad.into_primitive().tensor(),
            index.into_primitive(),
        )
        .x_grad;
        Tensor::<B, 4>::from_primitive(burn::tensor::TensorPrimitive::Float(x_grad)).into_data()
    }
    let dims = [2, 3, 8, 6];
    let values = random_vec(&mut rng, dims.iter().product(), -1.0, 1.0);
    let grad = random_vec(&mut rng, 2 * 3 * 4 * 3, -1.0, 1.0);
    assert_identical(
        "max pool backward, foreign indices",
        0,
        &foreign::<HF>(&values, dims, &grad),
        &foreign::<F>(&values, dims, &grad),
    );
}

/// Slice assignment on `Hetero<Flex, _>` (its own threaded copy for f32) against burn-flex, bit
/// for bit: strided slices on the last and on the first dimension, negative bounds, fewer slices
/// than dimensions, values that are strided views, a permuted destination, and a reversed slice
/// (left to burn-flex).
pub fn flex_slice_assign_is_identical() {
    use burn::tensor::Slice;
    type F = burn_flex::Flex;
    type HF = burn_hetero::Hetero<F, Accel>;
    /// Destination dims, slices, value dims, and how the value is laid out: 0 dense, 1 a narrow
    /// view of a wider tensor along dim 1, 2 a view with its first two dims swapped.
    type Case = (Vec<usize>, Vec<Slice>, Vec<usize>, u8);
    fn tensor<B: Backend>(values: &[f32], dims: &[usize], layout: u8) -> Tensor<B, 4> {
        let dev = Default::default();
        let mut d = [1usize; 4];
        d[4 - dims.len()..].copy_from_slice(dims);
        let from =
            |v: Vec<f32>, s: [usize; 4]| Tensor::<B, 4>::from_data(TensorData::new(v, s), &dev);
        match layout {
            1 => {
                let mut wide = d;
                wide[1] += 3;
                let n: usize = wide.iter().product();
                let padded: Vec<f32> = (0..n).map(|i| values[i % values.len()]).collect();
                from(padded, wide).narrow(1, 2, d[1])
            }
            2 => from(values.to_vec(), [d[1], d[0], d[2], d[3]]).swap_dims(0, 1),
            _ => from(values.to_vec(), d),
        }
    }
    fn run<B: Backend>(case: &Case, dst: &[f32], value: &[f32], dst_layout: u8) -> TensorData {
        let (dims, slices, value_dims, value_layout) = case;
        let lead = 4 - dims.len();
        let mut all = vec![Slice::new(0, None, 1); lead];
        all.extend(slices.iter().cloned());
        tensor::<B>(dst, dims, dst_layout)
            .slice_assign(
                all.as_slice(),
                tensor::<B>(value, value_dims, *value_layout),
            )
            .into_data()
    }
    let s = |start: isize, end: Option<isize>, step: isize| Slice::new(start, end, step);
    let cases: Vec<Case> = vec![
        // ResNet's option-A shortcut backward: every second pixel of each plane.
        (
            vec![3, 4, 8, 10],
            vec![s(0, None, 1), s(0, None, 1), s(0, None, 2), s(0, None, 2)],
            vec![3, 4, 4, 5],
            0,
        ),
        (
            vec![3, 4, 8, 10],
            vec![s(0, None, 1), s(0, None, 1), s(0, None, 2), s(0, None, 2)],
            vec![3, 4, 4, 5],
            1,
        ),
        (
            vec![3, 4, 8, 10],
            vec![s(0, None, 1), s(0, None, 1), s(1, None, 2), s(1, None, 3)],
            vec![3, 4, 4, 3],
            2,
        ),
        // Negative bounds, an odd step, a step on the first dimension.
        (
            vec![5, 7, 9],
            vec![s(1, Some(4), 1), s(-5, None, 1), s(2, Some(9), 3)],
            vec![3, 5, 3],
            0,
        ),
        (
            vec![7, 5],
            vec![s(0, None, 2), s(1, Some(-1), 1)],
            vec![4, 3],
            0,
        ),
        // Fewer slices than dimensions.
        (vec![4, 3, 2], vec![s(1, Some(3), 1)], vec![2, 3, 2], 0),
        // Reversed: burn-flex's own path.
        (
            vec![4, 6],
            vec![s(0, None, -1), s(0, None, 2)],
            vec![4, 3],
            0,
        ),
    ];
    let mut rng = rng_for("flex slice assign");
    for case in &cases {
        for dst_layout in [0u8, 2] {
            if dst_layout == 2 && case.0.len() < 2 {
                continue;
            }
            let n: usize = case.0.iter().product();
            let m: usize = case.2.iter().product();
            let dst = random_vec(&mut rng, n, -1.0, 1.0);
            let value = random_vec(&mut rng, m, 5.0, 9.0);
            let hetero = run::<HF>(case, &dst, &value, dst_layout);
            let flex = run::<F>(case, &dst, &value, dst_layout);
            let name = format!("slice_assign {case:?} destination layout {dst_layout}");
            assert_identical(&name, 0, &hetero, &flex);
        }
    }
}

/// Zeros and concatenation of `Hetero<Flex, _>` (written across threads for large f32 tensors)
/// against burn-flex, bit for bit: shapes over and under the threaded size, concatenation along
/// each dimension (the first gives one output block: burn-flex's own path), three parts, views
/// (narrow, every second pixel) and ResNet's option-A padding (every second pixel of a tensor and
/// zeros along the channels).
pub fn flex_fill_is_identical() {
    type F = burn_flex::Flex;
    type HF = burn_hetero::Hetero<F, Accel>;
    fn zeros<B: Backend>(shape: [usize; 4]) -> TensorData {
        Tensor::<B, 4>::zeros(shape, &Default::default()).into_data()
    }
    for shape in [[4, 16, 32, 32], [2, 3, 5, 7], [1, 1, 1, 1 << 17]] {
        assert_identical(
            &format!("zeros {shape:?}"),
            0,
            &zeros::<HF>(shape),
            &zeros::<F>(shape),
        );
        let poisoned = zeros::<HF>(shape).into_vec::<f32>().unwrap();
        assert!(poisoned.iter().all(|v| v.to_bits() == 0), "zeros {shape:?}");
    }
    /// Parts (shapes, and 0 for a dense part, 1 for a narrow view of a wider one, 2 for every
    /// second pixel of a larger one) joined along `dim`.
    type Case = (Vec<([usize; 4], u8)>, usize);
    fn cat<B: Backend>(case: &Case, values: &[Vec<f32>]) -> TensorData {
        let dev = Default::default();
        let parts = case
            .0
            .iter()
            .zip(values)
            .map(|((shape, view), v)| {
                let mut wide = *shape;
                match view {
                    1 => wide[3] += 2,
                    2 => (wide[2], wide[3]) = (2 * wide[2], 2 * wide[3]),
                    _ => {}
                }
                let n: usize = wide.iter().product();
                let v: Vec<f32> = (0..n).map(|i| v[i % v.len()]).collect();
                let t = Tensor::<B, 4>::from_data(TensorData::new(v, wide), &dev);
                match view {
                    1 => t.narrow(3, 1, shape[3]),
                    2 => t.slice(s![.., .., 0..;2, 0..;2]),
                    _ => t,
                }
            })
            .collect();
        Tensor::cat(parts, case.1).into_data()
    }
    let cases: Vec<Case> = vec![
        (vec![([8, 16, 16, 16], 0), ([8, 16, 16, 16], 0)], 1),
        (vec![([8, 16, 16, 16], 0), ([8, 8, 16, 16], 0)], 1),
        (
            vec![
                ([4, 3, 40, 16], 0),
                ([4, 3, 40, 16], 0),
                ([4, 3, 40, 16], 0),
            ],
            2,
        ),
        (vec![([4, 4, 64, 33], 0), ([4, 4, 64, 31], 0)], 3),
        (vec![([8, 16, 16, 16], 0), ([9, 16, 16, 16], 0)], 0),
        (vec![([8, 16, 16, 16], 0), ([8, 16, 16, 16], 1)], 1),
        (vec![([8, 16, 16, 16], 2), ([8, 16, 16, 16], 0)], 1),
        (vec![([8, 16, 16, 16], 1), ([8, 16, 16, 16], 2)], 3),
        (vec![([2, 3, 4, 5], 0), ([2, 3, 4, 5], 0)], 1),
    ];
    let mut rng = rng_for("flex fill");
    for case in &cases {
        let values: Vec<Vec<f32>> = case
            .0
            .iter()
            .map(|(s, _)| random_vec(&mut rng, s.iter().product(), -1.0, 1.0))
            .collect();
        let name = format!("cat {case:?}");
        assert_identical(
            &name,
            0,
            &cat::<HF>(case, &values),
            &cat::<F>(case, &values),
        );
    }
    // Option A: every second pixel of x and zeros of the new channels.
    let dev = Default::default();
    let x = random_vec(&mut rng, 32 * 16 * 32 * 32, -1.0, 1.0);
    fn pad<B: Backend>(x: Tensor<B, 4>) -> TensorData {
        let x = x.slice(s![.., .., 0..;2, 0..;2]);
        Tensor::cat(vec![x.clone(), x.zeros_like()], 1).into_data()
    }
    let hetero = pad::<HF>(Tensor::from_data(
        TensorData::new(x.clone(), [32, 16, 32, 32]),
        &dev,
    ));
    let flex = pad::<F>(Tensor::from_data(
        TensorData::new(x, [32, 16, 32, 32]),
        &dev,
    ));
    assert_identical("option-A padding", 0, &hetero, &flex);
}
