//! Differential cases for Burn's `IntTensorOps` and `BoolTensorOps`: see `run_all`.

use crate::common::*;
use crate::diff;
use burn::tensor::backend::Backend;
use burn::tensor::{
    Bool, BoolStore, DType, Distribution, ElementConversion, FloatDType, IndexingUpdateOp, Int,
    IntDType, Scalar, Tensor, TensorData, s,
};
use rand::Rng;
use rand::seq::SliceRandom;

/// Every integer dtype burn-ndarray stores.
const INT_DTYPES: [IntDType; 8] = [
    IntDType::I64,
    IntDType::I32,
    IntDType::I16,
    IntDType::I8,
    IntDType::U64,
    IntDType::U32,
    IntDType::U16,
    IntDType::U8,
];

/// Signed integer dtypes (negative values are representable).
const SIGNED_DTYPES: [IntDType; 4] = [IntDType::I64, IntDType::I32, IntDType::I16, IntDType::I8];

/// An int tensor of values in [lo, hi) stored with `dtype`.
fn int_as<B: Backend, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    shape: [usize; D],
    lo: i64,
    hi: i64,
    dtype: IntDType,
) -> Tensor<B, D, Int> {
    let n = shape.iter().product();
    let v: Vec<i64> = (0..n).map(|_| rng.random_range(lo..hi)).collect();
    Tensor::from_data(TensorData::new(v, shape), (dev, DType::from(dtype)))
}

/// A divisor tensor: magnitudes in [1, hi), each negated with probability 1/2 (never zero).
fn divisor<B: Backend, const D: usize>(
    rng: &mut TestRng,
    dev: &B::Device,
    shape: [usize; D],
    hi: i64,
) -> Tensor<B, D, Int> {
    let n = shape.iter().product();
    let v: Vec<i64> = (0..n)
        .map(|_| {
            let m = rng.random_range(1..hi);
            if rng.random_bool(0.5) { -m } else { m }
        })
        .collect();
    Tensor::from_data(TensorData::new(v, shape), dev)
}

/// `n` distinct indices drawn from `0..bound` (a prefix of a random permutation), for ops whose
/// result is only defined without duplicate indices.
fn distinct(rng: &mut TestRng, n: usize, bound: usize) -> Vec<i64> {
    let mut all: Vec<i64> = (0..bound as i64).collect();
    all.shuffle(rng);
    all.truncate(n);
    all
}

/// A 1-d index tensor from a vector.
fn idx1<B: Backend>(dev: &B::Device, v: Vec<i64>) -> Tensor<B, 1, Int> {
    let n = v.len();
    Tensor::from_data(TensorData::new(v, [n]), dev)
}

/// The dims of a tensor as int data, to compare shapes of results whose values are unspecified.
fn dims_data(dims: &[usize]) -> TensorData {
    let v: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    TensorData::new(v, [dims.len()])
}

/// The result of `f`, or, if it panics, its panic message as `u8` data, so that an op both
/// backends reject is compared by its error.
fn outcome(f: impl FnOnce() -> TensorData) -> TensorData {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(data) => data,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            let bytes = format!("panic: {msg}").into_bytes();
            let n = bytes.len();
            TensorData::new(bytes, [n])
        }
    }
}

/// Runs every int and bool differential case: each `IntTensorOps` and `BoolTensorOps` method
/// is called on `H` by at least one case, with random inputs, and its results must equal
/// burn-ndarray's bit for bit.
///
/// Inputs stay where the reference is defined: int remainder does not broadcast in
/// burn-ndarray (the divisor is expanded), int matmul and unfold panic on zero-sized operands /
/// windows longer than the axis, int mean of an empty tensor divides by zero, and `int_argtopk`
/// is unimplemented there (its outcome, a panic, is compared instead; see `outcome`).
pub fn run_all() {
    int_cases();
    bool_cases();
}

fn int_cases() {
    // Data round trip (int_from_data / int_into_data) for every int dtype, empty tensors
    // included; int_device and int_to_device.
    diff!("int_data_roundtrip", |dev, rng| {
        let mut out = Vec::new();
        for dtype in INT_DTYPES {
            let t = int_as::<B, 3>(rng, dev, [2, 3, 4], 0, 100, dtype);
            out.push(t.into_data());
        }
        for dtype in SIGNED_DTYPES {
            let t = int_as::<B, 2>(rng, dev, [5, 3], -100, 100, dtype);
            out.push(t.into_data());
        }
        out.push(int::<B, 2>(rng, dev, [0, 3], -5, 5).into_data());
        out.push(int::<B, 1>(rng, dev, [1], -5, 5).into_data());
        let t = int::<B, 2>(rng, dev, [4, 6], -1000, 1000);
        let d = t.device();
        out.push(t.to_device(&d).into_data());
        out
    });

    // Creation: int_zeros, int_ones, int_full, int_empty (values unspecified: only its shape and
    // dtype are compared, then it is overwritten), int_arange, int_arange_step; default and
    // explicit dtypes, empty shapes.
    diff!("int_creation", |dev, rng| {
        let mut out = vec![
            Tensor::<B, 2, Int>::zeros([3, 4], dev).into_data(),
            Tensor::<B, 3, Int>::ones([2, 1, 3], dev).into_data(),
            Tensor::<B, 2, Int>::full([2, 5], rng.random_range(-100i64..100), dev).into_data(),
            Tensor::<B, 2, Int>::zeros([0, 4], dev).into_data(),
            Tensor::<B, 1, Int>::full([0], 7, dev).into_data(),
            Tensor::<B, 1, Int>::arange(-5..rng.random_range(0i64..20), dev).into_data(),
            Tensor::<B, 1, Int>::arange(3..3, dev).into_data(),
            Tensor::<B, 1, Int>::arange_step(-7..rng.random_range(10i64..30), 3, dev).into_data(),
            Tensor::<B, 1, Int>::arange_step(0..10, 20, dev).into_data(),
        ];
        for dtype in [IntDType::I32, IntDType::I8, IntDType::U16] {
            let dt = DType::from(dtype);
            out.push(Tensor::<B, 2, Int>::zeros([2, 3], (dev, dt)).into_data());
            out.push(Tensor::<B, 2, Int>::ones([3, 2], (dev, dt)).into_data());
            out.push(Tensor::<B, 1, Int>::full([4], 42, (dev, dt)).into_data());
            out.push(Tensor::<B, 1, Int>::arange(2..9, (dev, dt)).into_data());
            out.push(Tensor::<B, 1, Int>::arange_step(1..20, 4, (dev, dt)).into_data());
        }
        for (shape, dtype) in [([3usize, 4], IntDType::I64), ([2, 0], IntDType::I32)] {
            let e = Tensor::<B, 2, Int>::empty(shape, (dev, DType::from(dtype)));
            out.push(dims_data(&e.dims()));
            out.push(TensorData::new(vec![e.dtype() == DType::from(dtype)], [1]));
            let v = int_as::<B, 2>(rng, dev, shape, 0, 50, dtype);
            out.push(e.slice_assign(s![.., ..], v).into_data());
        }
        out
    });

    // Random: int_random with each distribution and a non-default dtype; both backends are
    // seeded identically right before drawing.
    diff!("int_random", |dev, rng| {
        let mut out = Vec::new();
        let dists = [
            Distribution::Default,
            Distribution::Uniform(-20.0, 20.0),
            Distribution::Bernoulli(0.3),
            Distribution::Normal(5.0, 3.0),
        ];
        for dist in dists {
            B::seed(dev, 42);
            out.push(Tensor::<B, 2, Int>::random([4, 7], dist, dev).into_data());
        }
        B::seed(dev, 42);
        let t = Tensor::<B, 3, Int>::random(
            [2, 3, 5],
            Distribution::Uniform(0.0, 100.0),
            (dev, DType::I32),
        );
        out.push(t.into_data());
        B::seed(dev, 42);
        out.push(Tensor::<B, 2, Int>::random([0, 3], Distribution::Default, dev).into_data());
        out
    });

    // Reshape, slice (ranges, steps, negative steps and indices, empty results) and
    // slice_assign (strided, reversed), slice_fill.
    diff!("int_reshape_slice", |dev, rng| {
        let t = int::<B, 3>(rng, dev, [4, 6, 5], -100, 100);
        let v1 = int::<B, 3>(rng, dev, [2, 3, 5], -100, 100);
        let v2 = int::<B, 3>(rng, dev, [4, 2, 1], -100, 100);
        let e = int::<B, 2>(rng, dev, [0, 6], -1, 1);
        vec![
            t.clone().reshape([24, 5]).into_data(),
            t.clone().reshape([-1, 10]).into_data(),
            t.clone().reshape([1, 120]).into_data(),
            e.clone().reshape([0, 3, 2]).into_data(),
            t.clone().slice(s![1..3, .., 2..]).into_data(),
            t.clone().slice(s![..;2, 1..6;2, -1]).into_data(),
            t.clone().slice(s![..;-1, 0..4;-2, ..]).into_data(),
            t.clone().slice(s![2..2, .., ..]).into_data(),
            t.clone().slice(s![-1, -3.., 1..4]).into_data(),
            t.clone().slice_assign(s![1..3, 0..6;2, ..], v1).into_data(),
            t.clone()
                .slice_assign(s![.., 4..0;-2, 3..4], v2)
                .into_data(),
            t.clone().slice_fill(s![.., 1..2, ..], -7).into_data(),
            e.slice(s![.., 2..4]).into_data(),
        ]
    });

    // Layout: transpose, swap_dims, permute, flip, expand (broadcast, new leading dims),
    // repeat_dim, cat (with an empty part), unfold (overlapping, strided, one full window).
    diff!("int_layout", |dev, rng| {
        let t = int::<B, 3>(rng, dev, [2, 3, 4], -50, 50);
        let b = int::<B, 3>(rng, dev, [1, 3, 1], -50, 50);
        let c = int::<B, 3>(rng, dev, [2, 5, 4], -50, 50);
        let e = int::<B, 3>(rng, dev, [2, 0, 4], -50, 50);
        let r = int::<B, 1>(rng, dev, [7], -50, 50);
        vec![
            t.clone().transpose().into_data(),
            t.clone().swap_dims(0, 2).into_data(),
            t.clone().permute([2, 0, 1]).into_data(),
            t.clone().permute([1, 2, 0]).into_data(),
            t.clone().flip([0, 2]).into_data(),
            t.clone().flip([1]).into_data(),
            b.clone().expand([2, 3, 5]).into_data(),
            b.clone().expand([4, 2, 3, 3]).into_data(),
            t.clone().repeat_dim(1, 3).into_data(),
            b.clone().repeat_dim(0, 4).into_data(),
            Tensor::cat(vec![t.clone(), c, e.clone(), t.clone()], 1).into_data(),
            Tensor::cat(vec![t.clone(), t.clone()], 0).into_data(),
            e.clone().transpose().into_data(),
            t.clone().unfold::<4, _>(2, 2, 1).into_data(),
            t.clone().unfold::<4, _>(1, 2, 2).into_data(),
            r.clone().unfold::<2, _>(0, 3, 2).into_data(),
            r.unfold::<2, _>(0, 7, 3).into_data(),
        ]
    });

    // Arithmetic with broadcasting and scalars: add, sub, mul, div and remainder (divisors
    // nonzero, both signs, so that truncation and the sign of the remainder are exercised),
    // neg, abs, sign; empty operands.
    diff!("int_arithmetic", |dev, rng| {
        let a = int::<B, 3>(rng, dev, [2, 3, 4], -1000, 1000);
        let b = int::<B, 3>(rng, dev, [1, 3, 1], -1000, 1000);
        let c = int::<B, 3>(rng, dev, [2, 3, 4], -1000, 1000);
        let d = divisor::<B, 3>(rng, dev, [2, 1, 4], 20);
        let d_same = divisor::<B, 3>(rng, dev, [2, 3, 4], 20);
        let e1 = int::<B, 2>(rng, dev, [0, 4], -5, 5);
        let e2 = int::<B, 2>(rng, dev, [1, 4], -5, 5);
        let k = rng.random_range(1i64..20) * if rng.random_bool(0.5) { -1 } else { 1 };
        let m = rng.random_range(-30i64..30);
        vec![
            (a.clone() + b.clone()).into_data(),
            (a.clone() + c.clone()).into_data(),
            (a.clone() - b.clone()).into_data(),
            (b.clone() - a.clone()).into_data(),
            (a.clone() * b.clone()).into_data(),
            (a.clone() * c.clone()).into_data(),
            (a.clone() / d.clone()).into_data(),
            (a.clone() / d_same.clone()).into_data(),
            // burn-ndarray's int remainder does not broadcast: expand the divisor explicitly.
            a.clone().remainder(d.clone().expand([2, 3, 4])).into_data(),
            a.clone().remainder(d_same).into_data(),
            (a.clone() + m).into_data(),
            (a.clone() - m).into_data(),
            (a.clone() * m).into_data(),
            (a.clone() / k).into_data(),
            (a.clone() / 7).into_data(),
            (a.clone() / -7).into_data(),
            a.clone().remainder_scalar(k).into_data(),
            a.clone().remainder_scalar(-6).into_data(),
            a.clone().remainder_scalar(6).into_data(),
            (-a.clone()).into_data(),
            a.clone().abs().into_data(),
            a.clone().sign().into_data(),
            a.zeros_like().sign().into_data(),
            (e1.clone() + e2.clone()).into_data(),
            (e1.clone() * e2).into_data(),
            (e1.clone() / 3).into_data(),
            e1.abs().into_data(),
        ]
    });

    // Powers: powi with a broadcast exponent tensor, powi_scalar through its special cases
    // (0, 1, 2) and the general path, and int_powi_scalar_impl called directly.
    diff!("int_powi", |dev, rng| {
        let a = int::<B, 2>(rng, dev, [4, 5], -9, 10);
        let e = int::<B, 2>(rng, dev, [1, 5], 0, 6);
        let e_full = int::<B, 2>(rng, dev, [4, 5], 0, 6);
        let mut out = vec![
            a.clone().powi(e).into_data(),
            a.clone().powi(e_full).into_data(),
        ];
        for p in [0i64, 1, 2, 3, 5] {
            out.push(a.clone().powi_scalar(p).into_data());
        }
        for p in [3i64, 4, 0] {
            let dtype = a.dtype();
            let prim = B::int_powi_scalar_impl(a.clone().into_primitive(), Scalar::new(p, &dtype));
            out.push(Tensor::<B, 2, Int>::from_primitive(prim).into_data());
        }
        out
    });

    // Clamping: clamp, clamp_min, clamp_max with random bounds.
    diff!("int_clamp", |dev, rng| {
        let a = int::<B, 3>(rng, dev, [3, 4, 5], -100, 100);
        let lo = rng.random_range(-60i64..0);
        let hi = rng.random_range(0i64..60);
        vec![
            a.clone().clamp(lo, hi).into_data(),
            a.clone().clamp(hi, hi).into_data(),
            a.clone().clamp_min(lo).into_data(),
            a.clone().clamp_max(hi).into_data(),
        ]
    });

    // Comparisons, tensor-tensor (broadcast) and tensor-scalar; small value range so that
    // equality is frequent; an empty operand.
    diff!("int_compare", |dev, rng| {
        let a = int::<B, 3>(rng, dev, [2, 3, 4], -3, 4);
        let b = int::<B, 3>(rng, dev, [2, 1, 4], -3, 4);
        let c = int::<B, 3>(rng, dev, [2, 3, 4], -3, 4);
        let e = int::<B, 2>(rng, dev, [0, 3], -3, 4);
        let k = rng.random_range(-3i64..4);
        vec![
            a.clone().equal(b.clone()).into_data(),
            a.clone().equal(c.clone()).into_data(),
            a.clone().not_equal(b.clone()).into_data(),
            a.clone().greater(b.clone()).into_data(),
            a.clone().greater(c.clone()).into_data(),
            a.clone().greater_equal(b.clone()).into_data(),
            a.clone().lower(b.clone()).into_data(),
            a.clone().lower_equal(b.clone()).into_data(),
            a.clone().lower_equal(c).into_data(),
            a.clone().equal_elem(k).into_data(),
            a.clone().not_equal_elem(k).into_data(),
            a.clone().greater_elem(k).into_data(),
            a.clone().greater_equal_elem(k).into_data(),
            a.clone().lower_elem(k).into_data(),
            a.clone().lower_equal_elem(k).into_data(),
            e.clone().greater(e.clone()).into_data(),
            e.equal_elem(0).into_data(),
        ]
    });

    // Reductions: sum, prod, mean (integer division of negative sums), their _dim variants
    // on every axis, cumulative sum / product / min / max; empty tensors for sum and prod.
    diff!("int_reductions", |dev, rng| {
        let a = int::<B, 3>(rng, dev, [3, 4, 5], -100, 100);
        let small = int::<B, 3>(rng, dev, [2, 3, 4], -4, 5);
        let e = int::<B, 2>(rng, dev, [3, 0], -4, 5);
        let mut out = vec![
            a.clone().sum().into_data(),
            small.clone().prod().into_data(),
            a.clone().mean().into_data(),
            (a.clone() - 1000).mean().into_data(),
            e.clone().sum().into_data(),
            e.clone().prod().into_data(),
            e.clone().sum_dim(1).into_data(),
            e.clone().prod_dim(1).into_data(),
            e.clone().sum_dim(0).into_data(),
        ];
        for dim in 0..3 {
            out.push(a.clone().sum_dim(dim).into_data());
            out.push(small.clone().prod_dim(dim).into_data());
            out.push(a.clone().mean_dim(dim).into_data());
            out.push(a.clone().cumsum(dim).into_data());
            out.push(small.clone().cumprod(dim).into_data());
            out.push(a.clone().cummin(dim).into_data());
            out.push(a.clone().cummax(dim).into_data());
        }
        out
    });

    // Extremes: argmax/argmin (ties from a small value range), max/min, max_dim/min_dim and
    // their _with_indices variants, max_abs / max_abs_dim, topk, on each axis and on a size-1
    // axis.
    diff!("int_extremes", |dev, rng| {
        let a = int::<B, 3>(rng, dev, [3, 4, 5], -5, 6);
        let one = int::<B, 2>(rng, dev, [1, 6], -50, 50);
        let mut out = vec![
            a.clone().max().into_data(),
            a.clone().min().into_data(),
            a.clone().max_abs().into_data(),
            one.clone().argmax(0).into_data(),
            one.clone().max_dim(0).into_data(),
            one.clone().topk(3, 1).into_data(),
        ];
        for dim in 0..3 {
            out.push(a.clone().argmax(dim).into_data());
            out.push(a.clone().argmin(dim).into_data());
            out.push(a.clone().max_dim(dim).into_data());
            out.push(a.clone().min_dim(dim).into_data());
            let (v, i) = a.clone().max_dim_with_indices(dim);
            out.push(v.into_data());
            out.push(i.into_data());
            let (v, i) = a.clone().min_dim_with_indices(dim);
            out.push(v.into_data());
            out.push(i.into_data());
            out.push(a.clone().max_abs_dim(dim).into_data());
            out.push(a.clone().topk(2, dim).into_data());
        }
        out
    });

    // argtopk: burn-ndarray 0.21 does not implement `int_argtopk` (it panics with
    // "argtopk not implemented for ndarray"), so the outcome is compared: the indices if the
    // op succeeds, else the panic message, which must be the same on both backends.
    diff!("int_argtopk", |dev, rng| {
        let a = int::<B, 3>(rng, dev, [3, 4, 5], -50, 50);
        (0..3)
            .map(|dim| outcome(|| a.clone().argtopk(2, dim).into_data()))
            .collect()
    });

    // Sorting: sort, sort_descending, sort_with_indices (both orders) and argsort (both
    // orders), on every axis, with many ties.
    diff!("int_sort", |dev, rng| {
        let a = int::<B, 3>(rng, dev, [3, 4, 6], -4, 5);
        let mut out = Vec::new();
        for dim in 0..3 {
            out.push(a.clone().sort(dim).into_data());
            out.push(a.clone().sort_descending(dim).into_data());
            let (v, i) = a.clone().sort_with_indices(dim);
            out.push(v.into_data());
            out.push(i.into_data());
            let (v, i) = a.clone().sort_descending_with_indices(dim);
            out.push(v.into_data());
            out.push(i.into_data());
            out.push(a.clone().argsort(dim).into_data());
            out.push(a.clone().argsort_descending(dim).into_data());
        }
        out
    });

    // any / all over the whole tensor and per axis: mostly-zero, all-nonzero, all-zero and
    // empty inputs.
    diff!("int_any_all", |dev, rng| {
        let sparse = int::<B, 3>(rng, dev, [3, 4, 5], 0, 10).lower_elem(2).int();
        let dense = int::<B, 2>(rng, dev, [3, 4], 1, 10);
        let zeros = Tensor::<B, 2, Int>::zeros([2, 3], dev);
        let e = int::<B, 2>(rng, dev, [0, 3], 0, 5);
        let mut out = vec![
            sparse.clone().any().into_data(),
            sparse.clone().all().into_data(),
            dense.clone().any().into_data(),
            dense.clone().all().into_data(),
            dense.any_dim(1).into_data(),
            zeros.clone().any().into_data(),
            zeros.clone().all_dim(0).into_data(),
            e.clone().any().into_data(),
            e.clone().all().into_data(),
            e.any_dim(0).into_data(),
        ];
        for dim in 0..3 {
            out.push(sparse.clone().any_dim(dim).into_data());
            out.push(sparse.clone().all_dim(dim).into_data());
        }
        out
    });

    // Indexing: gather and scatter-add along each axis (duplicate indices accumulate), select
    // and select_assign-add (1-d indices with repeats), mask_where (broadcast source) and
    // mask_fill.
    diff!("int_gather_scatter_select", |dev, rng| {
        let shape = [3, 4, 5];
        let a = int::<B, 3>(rng, dev, shape, -100, 100);
        let mut out = Vec::new();
        for dim in 0..3 {
            let mut ishape = [3, 4, 5];
            ishape[dim] = 6;
            let idx = int::<B, 3>(rng, dev, ishape, 0, shape[dim] as i64);
            out.push(a.clone().gather(dim, idx.clone()).into_data());
            let vals = int::<B, 3>(rng, dev, ishape, -100, 100);
            out.push(
                a.clone()
                    .scatter(dim, idx, vals, IndexingUpdateOp::Add)
                    .into_data(),
            );
            let sel = int::<B, 1>(rng, dev, [7], 0, shape[dim] as i64);
            out.push(a.clone().select(dim, sel.clone()).into_data());
            let mut vshape = shape;
            vshape[dim] = 7;
            let vals = int::<B, 3>(rng, dev, vshape, -100, 100);
            out.push(
                a.clone()
                    .select_assign(dim, sel, vals, IndexingUpdateOp::Add)
                    .into_data(),
            );
        }
        // Empty selection.
        let none = Tensor::<B, 1, Int>::from_data(TensorData::new(Vec::<i64>::new(), [0]), dev);
        out.push(a.clone().select(1, none).into_data());
        // Masks.
        let mask = boolean::<B, 3>(rng, dev, shape);
        let src = int::<B, 3>(rng, dev, shape, -100, 100);
        out.push(a.clone().mask_where(mask.clone(), src).into_data());
        let src_b = int::<B, 3>(rng, dev, [1, 4, 1], -100, 100);
        out.push(
            a.clone()
                .mask_where(mask.clone(), src_b.expand(shape))
                .into_data(),
        );
        out.push(a.clone().mask_fill(mask.clone(), -1).into_data());
        out.push(
            a.mask_fill(mask, rng.random_range(-1000i64..1000))
                .into_data(),
        );
        out
    });

    // N-d indexing: gather_nd with full and partial index depth; scatter_nd with every update
    // op (distinct indices for Assign/Mul/Min/Max, duplicates accumulating for Add).
    diff!("int_gather_scatter_nd", |dev, rng| {
        let data = int::<B, 3>(rng, dev, [3, 4, 5], -50, 50);
        let mut out = Vec::new();
        // Full depth: [6, 3] indices -> 6 elements.
        let mut full = Vec::new();
        for _ in 0..6 {
            full.extend([
                rng.random_range(0i64..3),
                rng.random_range(0i64..4),
                rng.random_range(0i64..5),
            ]);
        }
        let full = Tensor::<B, 2, Int>::from_data(TensorData::new(full, [6, 3]), dev);
        out.push(data.clone().gather_nd::<2, 1>(full).into_data());
        // Partial depth with batch dims: [2, 3, 2] indices -> [2, 3, 5] slices.
        let mut part = Vec::new();
        for _ in 0..6 {
            part.extend([rng.random_range(0i64..3), rng.random_range(0i64..4)]);
        }
        let part = Tensor::<B, 3, Int>::from_data(TensorData::new(part, [2, 3, 2]), dev);
        out.push(data.clone().gather_nd::<3, 3>(part).into_data());
        // Scatter rows of a [6, 5] matrix: distinct row indices, then duplicates for Add.
        let target = int::<B, 2>(rng, dev, [6, 5], -20, 20);
        let rows = distinct(rng, 4, 6);
        let rows = Tensor::<B, 2, Int>::from_data(TensorData::new(rows, [4, 1]), dev);
        for op in [
            IndexingUpdateOp::Assign,
            IndexingUpdateOp::Add,
            IndexingUpdateOp::Mul,
            IndexingUpdateOp::Min,
            IndexingUpdateOp::Max,
        ] {
            let vals = int::<B, 2>(rng, dev, [4, 5], -20, 20);
            out.push(
                target
                    .clone()
                    .scatter_nd(rows.clone(), vals, op)
                    .into_data(),
            );
        }
        let dup: Vec<i64> = (0..8).map(|_| rng.random_range(0i64..6)).collect();
        let dup = Tensor::<B, 2, Int>::from_data(TensorData::new(dup, [8, 1]), dev);
        let vals = int::<B, 2>(rng, dev, [8, 5], -20, 20);
        out.push(
            target
                .clone()
                .scatter_nd(dup, vals, IndexingUpdateOp::Add)
                .into_data(),
        );
        // Element-level scatter into a 3-d tensor (full depth, distinct positions).
        let flat = distinct(rng, 7, 60);
        let mut pos = Vec::new();
        for f in flat {
            pos.extend([f / 20, (f / 5) % 4, f % 5]);
        }
        let pos = Tensor::<B, 2, Int>::from_data(TensorData::new(pos, [7, 3]), dev);
        let vals = int::<B, 1>(rng, dev, [7], -50, 50);
        out.push(
            data.scatter_nd(pos, vals, IndexingUpdateOp::Assign)
                .into_data(),
        );
        out
    });

    // Matmul: plain, batched, broadcast batch dims (3-d and 4-d), a size-1 row dim. (No
    // zero-sized dims: burn-ndarray's matmul divides by the matrix size and panics on them.)
    diff!("int_matmul", |dev, rng| {
        let a = int::<B, 2>(rng, dev, [3, 4], -20, 20);
        let b = int::<B, 2>(rng, dev, [4, 5], -20, 20);
        let ba = int::<B, 3>(rng, dev, [2, 3, 4], -20, 20);
        let bb = int::<B, 3>(rng, dev, [2, 4, 2], -20, 20);
        let bc = int::<B, 3>(rng, dev, [1, 4, 6], -20, 20);
        let v = int::<B, 2>(rng, dev, [1, 4], -20, 20);
        let qa = int::<B, 4>(rng, dev, [2, 1, 3, 4], -20, 20);
        let qb = int::<B, 4>(rng, dev, [1, 3, 4, 2], -20, 20);
        vec![
            a.clone().matmul(b.clone()).into_data(),
            ba.clone().matmul(bb).into_data(),
            ba.matmul(bc).into_data(),
            v.matmul(b).into_data(),
            qa.matmul(qb).into_data(),
        ]
    });

    // Bitwise: and/or/xor (broadcast) and their scalar forms, not, left/right shifts by
    // tensors and scalars (arithmetic right shift of negatives).
    diff!("int_bitwise", |dev, rng| {
        let a = int::<B, 3>(rng, dev, [2, 3, 4], -10000, 10000);
        let b = int::<B, 3>(rng, dev, [2, 1, 4], -10000, 10000);
        let sh = int::<B, 3>(rng, dev, [2, 3, 4], 0, 12);
        let sh_b = int::<B, 3>(rng, dev, [1, 3, 1], 0, 12);
        let k = rng.random_range(-10000i64..10000);
        let n = rng.random_range(0i64..12);
        vec![
            a.clone().bitwise_and(b.clone()).into_data(),
            a.clone().bitwise_or(b.clone()).into_data(),
            a.clone().bitwise_xor(b.clone()).into_data(),
            a.clone().bitwise_not().into_data(),
            a.clone().bitwise_and_scalar(k.elem()).into_data(),
            a.clone().bitwise_or_scalar(k.elem()).into_data(),
            a.clone().bitwise_xor_scalar(k.elem()).into_data(),
            a.clone().bitwise_left_shift(sh.clone()).into_data(),
            a.clone().bitwise_right_shift(sh).into_data(),
            a.clone().bitwise_left_shift(sh_b.clone()).into_data(),
            a.clone().bitwise_right_shift(sh_b).into_data(),
            a.clone().bitwise_left_shift_scalar(n.elem()).into_data(),
            a.clone().bitwise_right_shift_scalar(n.elem()).into_data(),
        ]
    });

    // Casts: int_cast between every pair of int dtypes (non-negative values fit all of them;
    // negative values among signed dtypes), int_into_float to f32 and f64 (default through
    // `float()`), from non-default int dtypes too.
    diff!("int_casts", |dev, rng| {
        let mut out = Vec::new();
        for from in INT_DTYPES {
            let a = int_as::<B, 2>(rng, dev, [3, 4], 0, 100, from);
            for to in INT_DTYPES {
                out.push(a.clone().cast(to).into_data());
            }
            out.push(a.clone().float().into_data());
            out.push(a.clone().cast(FloatDType::F64).into_data());
        }
        for from in SIGNED_DTYPES {
            let a = int_as::<B, 2>(rng, dev, [2, 5], -100, 100, from);
            for to in SIGNED_DTYPES {
                out.push(a.clone().cast(to).into_data());
            }
            out.push(a.clone().cast(FloatDType::F32).into_data());
        }
        let big = int::<B, 1>(rng, dev, [6], -(1 << 40), 1 << 40);
        out.push(big.clone().float().into_data());
        out.push(big.cast(FloatDType::F64).into_data());
        out.push(
            int::<B, 2>(rng, dev, [0, 2], 0, 5)
                .cast(IntDType::I32)
                .into_data(),
        );
        out
    });
}

fn bool_cases() {
    // Creation and data: bool_zeros, bool_ones (also via full), bool_empty (shape only, then
    // overwritten), from_data / into_data, device / to_device; empty shapes.
    diff!("bool_creation_data", |dev, rng| {
        let mut out = vec![
            Tensor::<B, 2, Bool>::zeros([3, 4], dev).into_data(),
            Tensor::<B, 3, Bool>::ones([2, 1, 3], dev).into_data(),
            Tensor::<B, 2, Bool>::full([2, 2], true, dev).into_data(),
            Tensor::<B, 2, Bool>::full([2, 3], false, dev).into_data(),
            Tensor::<B, 2, Bool>::zeros([0, 3], dev).into_data(),
            boolean::<B, 3>(rng, dev, [2, 3, 4]).into_data(),
            boolean::<B, 2>(rng, dev, [4, 0]).into_data(),
        ];
        for shape in [[3usize, 5], [0, 2]] {
            let e = Tensor::<B, 2, Bool>::empty(shape, dev);
            out.push(dims_data(&e.dims()));
            out.push(TensorData::new(
                vec![e.dtype() == DType::Bool(BoolStore::Native)],
                [1],
            ));
            let v = boolean::<B, 2>(rng, dev, shape);
            out.push(e.slice_assign(s![.., ..], v).into_data());
        }
        let t = boolean::<B, 2>(rng, dev, [5, 6]);
        let d = t.device();
        out.push(t.to_device(&d).into_data());
        out
    });

    // Conversions: bool_into_int (default and every int dtype), bool_into_float (default,
    // f32, f64).
    diff!("bool_conversions", |dev, rng| {
        let b = boolean::<B, 3>(rng, dev, [2, 3, 4]);
        let mut out = vec![
            b.clone().int().into_data(),
            b.clone().float().into_data(),
            b.clone().cast(FloatDType::F32).into_data(),
            b.clone().cast(FloatDType::F64).into_data(),
            boolean::<B, 2>(rng, dev, [0, 3]).int().into_data(),
        ];
        for dtype in INT_DTYPES {
            out.push(b.clone().cast(dtype).into_data());
        }
        out
    });

    // Reshape, slice (steps, negative steps), slice_assign, layout ops (transpose, swap_dims,
    // permute, flip), expand, repeat_dim, cat (with an empty part), unfold.
    diff!("bool_layout", |dev, rng| {
        let t = boolean::<B, 3>(rng, dev, [3, 4, 5]);
        let v = boolean::<B, 3>(rng, dev, [2, 2, 5]);
        let c = boolean::<B, 3>(rng, dev, [3, 2, 5]);
        let e = boolean::<B, 3>(rng, dev, [3, 0, 5]);
        let b1 = boolean::<B, 3>(rng, dev, [1, 4, 1]);
        vec![
            t.clone().reshape([12, 5]).into_data(),
            t.clone().reshape([5, -1]).into_data(),
            e.clone().reshape([5, 0]).into_data(),
            t.clone().slice(s![1.., ..;2, 1..4]).into_data(),
            t.clone().slice(s![..;-1, -1, ..;-2]).into_data(),
            t.clone().slice_assign(s![0..3;2, 1..3, ..], v).into_data(),
            t.clone().transpose().into_data(),
            t.clone().swap_dims(0, 1).into_data(),
            t.clone().permute([2, 0, 1]).into_data(),
            t.clone().flip([0, 1, 2]).into_data(),
            t.clone().flip([2]).into_data(),
            b1.clone().expand([3, 4, 5]).into_data(),
            b1.clone().expand([2, 2, 4, 3]).into_data(),
            t.clone().repeat_dim(2, 2).into_data(),
            b1.repeat_dim(0, 3).into_data(),
            Tensor::cat(vec![t.clone(), e.clone(), c], 1).into_data(),
            Tensor::cat(vec![t.clone(), t.clone()], 2).into_data(),
            t.clone().unfold::<4, _>(1, 3, 1).into_data(),
            t.clone().unfold::<4, _>(2, 2, 3).into_data(),
            e.permute([1, 2, 0]).into_data(),
        ]
    });

    // Logic and comparisons: not, and, or, xor (same shape and broadcast through expand),
    // equal / not_equal between tensors and with a scalar.
    diff!("bool_logic_compare", |dev, rng| {
        let a = boolean::<B, 3>(rng, dev, [2, 3, 4]);
        let b = boolean::<B, 3>(rng, dev, [2, 3, 4]);
        let c = boolean::<B, 3>(rng, dev, [2, 1, 4]).expand([2, 3, 4]);
        let e = boolean::<B, 2>(rng, dev, [0, 4]);
        vec![
            a.clone().bool_not().into_data(),
            a.clone().bool_and(b.clone()).into_data(),
            a.clone().bool_or(b.clone()).into_data(),
            a.clone().bool_xor(b.clone()).into_data(),
            a.clone().bool_and(c.clone()).into_data(),
            a.clone().bool_or(c.clone()).into_data(),
            a.clone().bool_xor(c.clone()).into_data(),
            a.clone().equal(b.clone()).into_data(),
            a.clone().not_equal(b.clone()).into_data(),
            a.clone().equal(c).into_data(),
            a.clone().equal_elem(true).into_data(),
            a.clone().equal_elem(false).into_data(),
            a.clone().not_equal_elem(true).into_data(),
            a.not_equal_elem(false).into_data(),
            e.clone().bool_not().into_data(),
            e.clone().bool_and(e.clone()).into_data(),
            e.clone().equal(e).into_data(),
        ]
    });

    // any / all, whole and per axis: random, all-true, all-false and empty inputs.
    diff!("bool_any_all", |dev, rng| {
        let a = boolean::<B, 3>(rng, dev, [3, 4, 5]);
        // Mostly true, so that `all` along short axes is sometimes true.
        let mostly = int::<B, 3>(rng, dev, [3, 2, 4], 0, 10).greater_elem(1);
        let t = Tensor::<B, 2, Bool>::ones([2, 3], dev);
        let f = Tensor::<B, 2, Bool>::zeros([2, 3], dev);
        let e = boolean::<B, 2>(rng, dev, [0, 3]);
        let mut out = vec![
            a.clone().any().into_data(),
            a.clone().all().into_data(),
            mostly.clone().all().into_data(),
            t.clone().all().into_data(),
            t.any_dim(1).into_data(),
            f.clone().any().into_data(),
            f.all_dim(0).into_data(),
            e.clone().any().into_data(),
            e.clone().all().into_data(),
            e.clone().any_dim(0).into_data(),
            e.all_dim(1).into_data(),
        ];
        for dim in 0..3 {
            out.push(a.clone().any_dim(dim).into_data());
            out.push(a.clone().all_dim(dim).into_data());
            out.push(mostly.clone().all_dim(dim).into_data());
        }
        out
    });

    // Indexing: gather and scatter-or along each axis, select and select_assign-or (repeated
    // indices), mask_where and mask_fill with both fill values.
    diff!("bool_gather_scatter_select_mask", |dev, rng| {
        let shape = [3, 4, 5];
        let a = boolean::<B, 3>(rng, dev, shape);
        let mut out = Vec::new();
        for dim in 0..3 {
            let mut ishape = shape;
            ishape[dim] = 4;
            let idx = int::<B, 3>(rng, dev, ishape, 0, shape[dim] as i64);
            out.push(a.clone().gather(dim, idx.clone()).into_data());
            let vals = boolean::<B, 3>(rng, dev, ishape);
            out.push(
                a.clone()
                    .scatter(dim, idx, vals, IndexingUpdateOp::Add)
                    .into_data(),
            );
            let sel = int::<B, 1>(rng, dev, [6], 0, shape[dim] as i64);
            out.push(a.clone().select(dim, sel.clone()).into_data());
            let mut vshape = shape;
            vshape[dim] = 6;
            let vals = boolean::<B, 3>(rng, dev, vshape);
            out.push(
                a.clone()
                    .select_assign(dim, sel, vals, IndexingUpdateOp::Add)
                    .into_data(),
            );
        }
        // All-false base: scatter-or / select-or then show exactly which positions were hit.
        let f = Tensor::<B, 2, Bool>::zeros([4, 6], dev);
        let idx = int::<B, 2>(rng, dev, [4, 3], 0, 6);
        let ones = Tensor::<B, 2, Bool>::ones([4, 3], dev);
        out.push(
            f.clone()
                .scatter(1, idx, ones, IndexingUpdateOp::Add)
                .into_data(),
        );
        let rows = idx1::<B>(dev, vec![3, 0, 3]);
        let vals = boolean::<B, 2>(rng, dev, [3, 6]);
        out.push(
            f.select_assign(0, rows, vals, IndexingUpdateOp::Add)
                .into_data(),
        );
        let mask = boolean::<B, 3>(rng, dev, shape);
        let src = boolean::<B, 3>(rng, dev, shape);
        out.push(a.clone().mask_where(mask.clone(), src).into_data());
        out.push(a.clone().mask_fill(mask.clone(), true).into_data());
        out.push(a.mask_fill(mask, false).into_data());
        out
    });

    // argwhere (and nonzero, built on it): random, all-false (no rows), all-true, 1-d and
    // empty inputs.
    diff!("bool_argwhere", |dev, rng| {
        let a = boolean::<B, 3>(rng, dev, [3, 4, 5]);
        let mut out = vec![
            a.clone().argwhere().into_data(),
            boolean::<B, 1>(rng, dev, [9]).argwhere().into_data(),
            Tensor::<B, 2, Bool>::zeros([3, 3], dev)
                .argwhere()
                .into_data(),
            Tensor::<B, 2, Bool>::ones([2, 3], dev)
                .argwhere()
                .into_data(),
            boolean::<B, 2>(rng, dev, [0, 4]).argwhere().into_data(),
        ];
        for coord in a.nonzero() {
            out.push(coord.into_data());
        }
        out
    });
}
