//! `Hetero<NdArray, _>` hands its arrays to the burn-flex code of its CPU ops and takes the
//! results back (`src/ops/ndarray_bridge.rs`): an array nothing else holds is worked on in
//! place, a shared one is read in place and never written, a strided one is copied dense first,
//! a declined operand comes back as the array it was, and the values are those of
//! burn-ndarray's own op.

use crate::common::*;
use burn::tensor::activation::relu;
use burn::tensor::ops::FloatTensor;
use burn::tensor::ops::{ActivationOps, ConvOptions, FloatTensorOps, ModuleOps};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_hetero::{HeteroConfig, OpKind, Placement, Precision};
use burn_ndarray::NdArrayTensor;

/// Large enough for the threaded elementwise path (it leaves small tensors to the backend).
const SHAPE: [usize; 4] = [4, 16, 32, 32];

fn primitive(values: &[f32], shape: [usize; 4]) -> FloatTensor<H> {
    Tensor::<H, 4>::from_data(TensorData::new(values.to_vec(), shape), &device())
        .into_primitive()
        .tensor()
}

fn values_of(t: FloatTensor<H>) -> Vec<f32> {
    Tensor::<H, 4>::from_primitive(TensorPrimitive::Float(t))
        .into_data()
        .to_vec::<f32>()
        .unwrap()
}

/// The address of an f32 primitive's first value.
fn address(t: &FloatTensor<H>) -> usize {
    match t {
        NdArrayTensor::F32(storage) => storage.view().as_ptr() as usize,
        other => panic!("expected an f32 array, got {other:?}"),
    }
}

fn relu_of(values: &[f32]) -> Vec<f32> {
    values.iter().map(|&v| v.max(0.0)).collect()
}

/// An array held by nothing else: the ReLU writes into its buffer, which comes back as the
/// result's (same address), with burn-ndarray's values.
#[test]
fn an_unshared_array_is_worked_on_in_place() {
    let mut rng = rng_for("bridge unshared");
    let values = random_vec(&mut rng, SHAPE.iter().product(), -2.0, 2.0);
    let x = primitive(&values, SHAPE);
    let before = address(&x);
    let y = H::relu(x);
    assert_eq!(
        address(&y),
        before,
        "the result is not the operand's buffer"
    );
    assert_eq!(values_of(y), relu_of(&values));
}

/// An array held elsewhere too: the ReLU's result is a buffer of its own and the other holder
/// still sees the original values (a write through the lent buffer would change them).
#[test]
fn a_shared_array_is_never_written() {
    let mut rng = rng_for("bridge shared");
    let values = random_vec(&mut rng, SHAPE.iter().product(), -2.0, 2.0);
    let x = primitive(&values, SHAPE);
    let kept = x.clone();
    let y = H::relu(x);
    assert_ne!(address(&y), address(&kept));
    assert_eq!(values_of(kept), values, "the shared operand was written");
    assert_eq!(values_of(y), relu_of(&values));

    // The same with both operands of a binary op the same shared array.
    let a = primitive(&values, SHAPE);
    let kept = a.clone();
    let sum = H::float_add(a.clone(), a);
    let doubled: Vec<f32> = values.iter().map(|v| v + v).collect();
    assert_eq!(values_of(sum), doubled);
    assert_eq!(values_of(kept), values, "the shared operand was written");
}

/// A binary op the threaded path declines (a broadcast it leaves to the backend): the operands
/// reach burn-ndarray's op as the arrays they were, shared or not, and the result is its own.
#[test]
fn declined_operands_come_back_as_they_were() {
    let mut rng = rng_for("bridge declined");
    let n: usize = SHAPE.iter().product();
    let values = random_vec(&mut rng, n, -2.0, 2.0);
    let row = random_vec(&mut rng, SHAPE[3], -2.0, 2.0);
    let x = primitive(&values, SHAPE);
    let kept = x.clone();
    let b = primitive(&row, [1, 1, 1, SHAPE[3]]);
    let expected: Vec<f32> = values
        .iter()
        .enumerate()
        .map(|(i, v)| v + row[i % SHAPE[3]])
        .collect();
    let through_hetero = values_of(H::float_add(x, b.clone()));
    let ndarray = {
        let x = Tensor::<N, 4>::from_data(TensorData::new(values.clone(), SHAPE), &device());
        let b =
            Tensor::<N, 4>::from_data(TensorData::new(row.clone(), [1, 1, 1, SHAPE[3]]), &device());
        (x + b).into_data().to_vec::<f32>().unwrap()
    };
    assert_eq!(through_hetero, ndarray);
    assert_eq!(through_hetero, expected);
    assert_eq!(values_of(kept), values);
}

/// The strided views the copy walks: a transposed one (no dense run), a channel range (dense
/// planes, each one run), both spatial dims flipped (one run at stride -1) and a batch range
/// with every second channel.
fn strided_views<B: burn::tensor::backend::Backend>(x: Tensor<B, 4>) -> Vec<Tensor<B, 4>> {
    use burn::tensor::Slice;
    vec![
        x.clone().swap_dims(1, 3),
        x.clone().slice([Slice::full(), Slice::new(4, Some(12), 1)]),
        x.clone().flip([2, 3]),
        x.slice([Slice::new(1, Some(3), 1), Slice::new(0, None, 2)]),
    ]
}

/// A strided array is copied dense before the threaded pass: burn-ndarray's values, and the
/// array it views left as it was.
#[test]
fn strided_arrays_are_copied_dense_first() {
    let mut rng = rng_for("bridge strided");
    let values = random_vec(&mut rng, SHAPE.iter().product(), -2.0, 2.0);
    let x = Tensor::<H, 4>::from_data(TensorData::new(values.clone(), SHAPE), &device());
    let reference = Tensor::<N, 4>::from_data(TensorData::new(values.clone(), SHAPE), &device());
    let views = strided_views(x.clone()).into_iter();
    for (i, (view, expected)) in views.zip(strided_views(reference)).enumerate() {
        let got = relu(view).into_data().to_vec::<f32>().unwrap();
        let expected = relu(expected).into_data().to_vec::<f32>().unwrap();
        assert_eq!(got, expected, "view {i}");
    }
    assert_eq!(x.into_data().to_vec::<f32>().unwrap(), values);
}

/// An op that writes into its operand's buffer (slice assignment) on a shared array: the write
/// goes to a copy, the other holder keeps its values, and the result is burn-ndarray's.
#[test]
fn a_write_into_a_shared_array_goes_to_a_copy() {
    let mut rng = rng_for("bridge copy on write");
    let values = random_vec(&mut rng, SHAPE.iter().product(), -2.0, 2.0);
    let patch_shape = [2, 8, 32, 32];
    let patch = random_vec(&mut rng, patch_shape.iter().product(), 3.0, 4.0);
    let ranges = [0..2, 4..12, 0..32, 0..32];
    let x = Tensor::<H, 4>::from_data(TensorData::new(values.clone(), SHAPE), &device());
    let kept = x.clone();
    let got = x
        .slice_assign(
            ranges.clone(),
            Tensor::<H, 4>::from_data(TensorData::new(patch.clone(), patch_shape), &device()),
        )
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    let expected = Tensor::<N, 4>::from_data(TensorData::new(values.clone(), SHAPE), &device())
        .slice_assign(
            ranges,
            Tensor::<N, 4>::from_data(TensorData::new(patch, patch_shape), &device()),
        )
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(got, expected);
    assert_eq!(
        kept.into_data().to_vec::<f32>().unwrap(),
        values,
        "the shared array was written"
    );
}

/// Large f32 slices are copied across threads (burn-ndarray copies on one): every form the
/// models use (every second pixel, a channel range, a batch range, a bound counted from the
/// end) gives burn-ndarray's shape and values, and leaves the sliced array as it was.
#[test]
fn large_slices_are_burn_ndarrays() {
    use burn::tensor::Slice;
    let mut rng = rng_for("bridge slices");
    let shape = [8, 16, 32, 32];
    let values = random_vec(&mut rng, shape.iter().product(), -2.0, 2.0);
    let cases: Vec<Vec<Slice>> = vec![
        vec![
            Slice::full(),
            Slice::full(),
            Slice::new(0, None, 2),
            Slice::new(0, None, 2),
        ],
        vec![
            Slice::full(),
            Slice::new(1, None, 2),
            Slice::new(1, Some(31), 3),
        ],
        vec![Slice::full(), Slice::new(4, Some(12), 1)],
        vec![Slice::new(2, Some(7), 1)],
        vec![
            Slice::full(),
            Slice::new(-8, None, 1),
            Slice::new(-30, Some(-1), 1),
        ],
        vec![
            Slice::full(),
            Slice::full(),
            Slice::full(),
            Slice::new(3, Some(29), 1),
        ],
    ];
    for slices in cases {
        let x = primitive(&values, shape);
        let kept = x.clone();
        let reference =
            Tensor::<N, 4>::from_data(TensorData::new(values.clone(), shape), &device())
                .into_primitive()
                .tensor();
        let got = H::float_slice(x, &slices);
        let expected = N::float_slice(reference, &slices);
        let (got_shape, expected_shape) = (
            burn::tensor::TensorMetadata::shape(&got),
            burn::tensor::TensorMetadata::shape(&expected),
        );
        assert_eq!(got_shape, expected_shape, "shape of {slices:?}");
        let got = Tensor::<H, 4>::from_primitive(TensorPrimitive::Float(got));
        let expected = Tensor::<N, 4>::from_primitive(TensorPrimitive::Float(expected));
        assert_eq!(
            got.into_data().to_vec::<f32>().unwrap(),
            expected.into_data().to_vec::<f32>().unwrap(),
            "values of {slices:?}"
        );
        assert_eq!(values_of(kept), values, "the sliced array changed");
    }
}

/// A reshape of a dense array keeps its buffer (burn-ndarray's own copies it), and a write
/// into either array afterwards leaves the other as it was.
#[test]
fn a_reshape_keeps_the_buffer() {
    let mut rng = rng_for("bridge reshape");
    let values = random_vec(&mut rng, SHAPE.iter().product(), -2.0, 2.0);
    let x = primitive(&values, SHAPE);
    let before = address(&x);
    let flat = [SHAPE[0] * SHAPE[1], SHAPE[2] * SHAPE[3]];
    let y = H::float_reshape(x.clone(), flat.into());
    assert_eq!(address(&y), before, "the reshape copied the values");
    assert_eq!(burn::tensor::TensorMetadata::shape(&y), flat.into());
    // A write into the reshaped array (through slice assignment) goes to a copy.
    let patch = random_vec(&mut rng, 4 * 1024, 5.0, 6.0);
    let patch = Tensor::<H, 2>::from_data(TensorData::new(patch, [4, 1024]), &device())
        .into_primitive()
        .tensor();
    let written =
        H::float_slice_assign(y.clone(), &[burn::tensor::Slice::new(0, Some(4), 1)], patch);
    let written = Tensor::<H, 2>::from_primitive(TensorPrimitive::Float(written))
        .into_data()
        .to_vec::<f32>()
        .unwrap();
    assert!(written[..4 * 1024].iter().all(|v| (5.0..6.0).contains(v)));
    assert_eq!(&written[4 * 1024..], &values[4 * 1024..]);
    assert_eq!(
        values_of(x),
        values,
        "the reshaped array's write reached the original"
    );
    let y = Tensor::<H, 2>::from_primitive(TensorPrimitive::Float(y));
    assert_eq!(y.into_data().to_vec::<f32>().unwrap(), values);
}

/// A reshape of permuted views (batch norm's gradient form, a transpose of the inner dims, a
/// reversed dim) gives burn-ndarray's values in burn-ndarray's order: the view is copied dense
/// across threads first, and the original is unchanged.
#[test]
fn a_reshape_of_a_permuted_view_is_burn_ndarrays() {
    let mut rng = rng_for("bridge permuted reshape");
    let values = random_vec(&mut rng, SHAPE.iter().product(), -2.0, 2.0);
    let flat = [SHAPE[0] * SHAPE[1], SHAPE[2] * SHAPE[3]];
    type Views = [(&'static str, fn(Tensor<H, 4>) -> Tensor<H, 4>); 3];
    let views: Views = [
        ("dims 0 and 1 swapped", |t| t.swap_dims(0, 1)),
        ("dims 2 and 3 swapped", |t| t.swap_dims(2, 3)),
        ("dim 3 reversed", |t| t.flip([3])),
    ];
    // The same views on burn-ndarray, in the same order.
    type NdViews = [fn(Tensor<burn_ndarray::NdArray, 4>) -> Tensor<burn_ndarray::NdArray, 4>; 3];
    let nd_views: NdViews = [
        |t| t.swap_dims(0, 1),
        |t| t.swap_dims(2, 3),
        |t| t.flip([3]),
    ];
    for ((name, view), nd_view) in views.into_iter().zip(nd_views) {
        let x = Tensor::<H, 4>::from_data(TensorData::new(values.clone(), SHAPE), &device());
        let reshaped = view(x.clone()).reshape(flat);
        let nd = Tensor::<burn_ndarray::NdArray, 4>::from_data(
            TensorData::new(values.clone(), SHAPE),
            &Default::default(),
        );
        let want = nd_view(nd)
            .reshape(flat)
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(
            reshaped.into_data().to_vec::<f32>().unwrap(),
            want,
            "{name}"
        );
        assert_eq!(x.into_data().to_vec::<f32>().unwrap(), values, "{name}");
    }
}

/// Large f32 binary ops, broadcasts among them, run on the threaded passes: burn-ndarray's bits
/// for same shapes, a column (an average pool's backward), a channel vector (batch norm's form)
/// and a broadcast operand on the left of the non-commutative ops.
#[test]
fn large_binary_ops_are_burn_ndarrays() {
    let mut rng = rng_for("bridge binary");
    let shapes: [([usize; 4], [usize; 4]); 5] = [
        (SHAPE, SHAPE),
        ([1, 32, 64, 64], [1, 32, 64, 1]),
        (SHAPE, [1, 16, 1, 1]),
        ([1, 16, 1, 1], SHAPE),
        ([4, 16, 1, 1], SHAPE),
    ];
    for (lhs_shape, rhs_shape) in shapes {
        let lhs = random_vec(&mut rng, lhs_shape.iter().product(), -2.0, 2.0);
        // Away from zero, for the division.
        let rhs: Vec<f32> = random_vec(&mut rng, rhs_shape.iter().product(), 0.5, 2.0)
            .into_iter()
            .enumerate()
            .map(|(i, v)| if i % 3 == 0 { -v } else { v })
            .collect();
        type Op<B> = fn(Tensor<B, 4>, Tensor<B, 4>) -> Tensor<B, 4>;
        let ops: [(&str, Op<H>, Op<N>); 4] = [
            ("add", |a, b| a + b, |a, b| a + b),
            ("sub", |a, b| a - b, |a, b| a - b),
            ("mul", |a, b| a * b, |a, b| a * b),
            ("div", |a, b| a / b, |a, b| a / b),
        ];
        for (name, on_h, on_n) in ops {
            let h = |v: &[f32], s: [usize; 4]| {
                Tensor::<H, 4>::from_data(TensorData::new(v.to_vec(), s), &device())
            };
            let n = |v: &[f32], s: [usize; 4]| {
                Tensor::<N, 4>::from_data(TensorData::new(v.to_vec(), s), &device())
            };
            let kept = h(&lhs, lhs_shape);
            let got = on_h(kept.clone(), h(&rhs, rhs_shape)).into_data();
            let expected = on_n(n(&lhs, lhs_shape), n(&rhs, rhs_shape)).into_data();
            assert_eq!(
                got.shape, expected.shape,
                "{name} {lhs_shape:?} {rhs_shape:?}"
            );
            let (got, expected) = (
                got.to_vec::<f32>().unwrap(),
                expected.to_vec::<f32>().unwrap(),
            );
            assert!(
                got.iter()
                    .zip(&expected)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{name} {lhs_shape:?} {rhs_shape:?}: not burn-ndarray's bits"
            );
            assert_eq!(kept.into_data().to_vec::<f32>().unwrap(), lhs);
        }
    }
}

/// Large zeros and ones are written across threads: burn-ndarray's shape, dtype and values, and
/// an array of their own (a write into one leaves a second one as it was).
#[test]
fn large_constants_are_burn_ndarrays() {
    use burn::tensor::FloatDType;
    let shape: burn::tensor::Shape = SHAPE.into();
    for (name, value) in [("zeros", 0.0f32), ("ones", 1.0)] {
        let make_h = |s: burn::tensor::Shape| match name {
            "zeros" => H::float_zeros(s, &device(), FloatDType::F32),
            _ => H::float_ones(s, &device(), FloatDType::F32),
        };
        let expected = match name {
            "zeros" => N::float_zeros(shape.clone(), &device(), FloatDType::F32),
            _ => N::float_ones(shape.clone(), &device(), FloatDType::F32),
        };
        let (a, b) = (make_h(shape.clone()), make_h(shape.clone()));
        assert_ne!(address(&a), address(&b), "{name}: two calls share a buffer");
        assert_eq!(burn::tensor::TensorMetadata::shape(&a), shape);
        let expected = Tensor::<N, 4>::from_primitive(TensorPrimitive::Float(expected))
            .into_data()
            .to_vec::<f32>()
            .unwrap();
        assert!(expected.iter().all(|&v| v == value));
        let written = H::float_add_scalar(a, 3.0.into());
        assert!(
            values_of(written).iter().all(|&v| v == value + 3.0),
            "{name}"
        );
        assert_eq!(values_of(b), expected, "{name}");
    }
}

/// Memory that is not a `Vec` of burn-ndarray's (as an accelerator's read-back is): clones share
/// it, and a write through it fails the test, since burn-ndarray and the bridge must copy
/// borrowed memory before writing.
struct Foreign(std::sync::Arc<Vec<f32>>);

impl burn_std::AllocationController for Foreign {
    fn alloc_align(&self) -> usize {
        align_of::<f32>()
    }

    fn property(&self) -> burn_std::AllocationProperty {
        burn_std::AllocationProperty::Other
    }

    unsafe fn memory_mut(&mut self) -> &mut [core::mem::MaybeUninit<u8>] {
        panic!("borrowed memory was written in place")
    }

    fn memory(&self) -> &[core::mem::MaybeUninit<u8>] {
        let (ptr, len) = (self.0.as_ptr(), self.0.len() * size_of::<f32>());
        // SAFETY: the vector's initialised values, viewed as bytes.
        unsafe { core::slice::from_raw_parts(ptr.cast(), len) }
    }

    fn duplicate(&self) -> Option<Box<dyn burn_std::AllocationController>> {
        Some(Box::new(Foreign(self.0.clone())))
    }
}

/// `values` as a tensor borrowing memory of its own (burn-ndarray's borrowed storage).
fn borrowed(values: &[f32], shape: [usize; 4]) -> FloatTensor<H> {
    let memory = Foreign(std::sync::Arc::new(values.to_vec()));
    let len = size_of_val(values);
    // SAFETY: the controller's memory is `len` initialised bytes.
    let bytes = unsafe { burn_std::Bytes::from_controller(Box::new(memory), len) };
    let data = TensorData::from_bytes(bytes, shape, burn::tensor::DType::F32);
    let t = Tensor::<H, 4>::from_data(data, &device())
        .into_primitive()
        .tensor();
    assert!(
        matches!(&t, NdArrayTensor::F32(s) if s.is_borrowed()),
        "burn-ndarray did not borrow the memory"
    );
    t
}

/// A borrowed array (an accelerator's result on `Hetero<NdArray, _>`) through the bridge:
/// burn-ndarray's values for a ReLU, a same-shape sum, a declined broadcast, a reshape, a slice
/// and a slice assignment, and the borrowed memory is never written (its controller panics on
/// a write) and keeps its values. That no copy is made is not observable here; the read-back
/// profile on a GPU shows it.
#[test]
fn a_borrowed_array_is_read_in_place() {
    let mut rng = rng_for("bridge borrowed");
    let n: usize = SHAPE.iter().product();
    let values = random_vec(&mut rng, n, -2.0, 2.0);
    let other = random_vec(&mut rng, n, -2.0, 2.0);
    let row = random_vec(&mut rng, SHAPE[3], -2.0, 2.0);
    let x = borrowed(&values, SHAPE);
    let nd = |v: &[f32]| Tensor::<N, 4>::from_data(TensorData::new(v.to_vec(), SHAPE), &device());
    let of_nd = |t: Tensor<N, 4>| t.into_data().to_vec::<f32>().unwrap();

    assert_eq!(values_of(H::relu(x.clone())), relu_of(&values));
    let sum = H::float_add(x.clone(), primitive(&other, SHAPE));
    assert_eq!(values_of(sum), of_nd(nd(&values) + nd(&other)));
    let b = primitive(&row, [1, 1, 1, SHAPE[3]]);
    let row_nd = Tensor::<N, 4>::from_data(TensorData::new(row, [1, 1, 1, SHAPE[3]]), &device());
    assert_eq!(
        values_of(H::float_add(x.clone(), b)),
        of_nd(nd(&values) + row_nd)
    );

    let flat = [SHAPE[0] * SHAPE[1], SHAPE[2] * SHAPE[3]];
    let reshaped = H::float_reshape(x.clone(), flat.into());
    assert_eq!(burn::tensor::TensorMetadata::shape(&reshaped), flat.into());
    let reshaped = Tensor::<H, 2>::from_primitive(TensorPrimitive::Float(reshaped));
    assert_eq!(reshaped.into_data().to_vec::<f32>().unwrap(), values);

    let every_second = Tensor::<H, 4>::from_primitive(TensorPrimitive::Float(x.clone()))
        .slice([0..SHAPE[0], 0..SHAPE[1], 0..SHAPE[2], 0..SHAPE[3]])
        .slice_dim(3, burn::tensor::s![..;2]);
    let expected = nd(&values).slice_dim(3, burn::tensor::s![..;2]);
    assert_eq!(
        every_second.into_data().to_vec::<f32>().unwrap(),
        of_nd(expected)
    );

    let patch_shape = [2, 8, 32, 32];
    let patch = random_vec(&mut rng, patch_shape.iter().product(), 3.0, 4.0);
    let ranges = [0..2, 4..12, 0..32, 0..32];
    let written = Tensor::<H, 4>::from_primitive(TensorPrimitive::Float(x.clone())).slice_assign(
        ranges.clone(),
        Tensor::<H, 4>::from_data(TensorData::new(patch.clone(), patch_shape), &device()),
    );
    let expected = nd(&values).slice_assign(
        ranges,
        Tensor::<N, 4>::from_data(TensorData::new(patch, patch_shape), &device()),
    );
    assert_eq!(
        written.into_data().to_vec::<f32>().unwrap(),
        of_nd(expected)
    );

    assert_eq!(values_of(x), values, "the borrowed memory changed");
}

/// An offloaded conv's f32 result on `Hetero<NdArray, _>` is a tensor over the memory it was read
/// into (burn-ndarray's borrowed storage), not an array it was copied into: before results were
/// borrowed this failed, every result being a new `Vec`. The ReLU after it reads it through the
/// bridge and leaves it borrowed and unchanged. Values against burn-ndarray's conv at f32.
#[test]
fn an_offloaded_result_is_borrowed_not_copied() {
    let _s = settings(
        HeteroConfig::cpu_only()
            .with_placement(
                OpKind::Conv2dForward,
                Placement::accelerator(Precision::F32),
            )
            .with_strict(true),
    );
    let mut rng = rng_for("bridge read back");
    let (xs, ws) = ([4, 8, 32, 32], [16, 8, 3, 3]);
    let x = random_vec(&mut rng, xs.iter().product(), -2.0, 2.0);
    let w = random_vec(&mut rng, ws.iter().product(), -1.0, 1.0);
    let options = || ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
    let y = H::conv2d(primitive(&x, xs), primitive(&w, ws), None, options());
    assert!(
        matches!(&y, NdArrayTensor::F32(s) if s.is_borrowed()),
        "the result was copied into an array of its own"
    );
    let nd = |v: &[f32], shape: [usize; 4]| {
        Tensor::<N, 4>::from_data(TensorData::new(v.to_vec(), shape), &device())
            .into_primitive()
            .tensor()
    };
    let reference = N::conv2d(nd(&x, xs), nd(&w, ws), None, options());
    let reference: Vec<f64> = Tensor::<N, 4>::from_primitive(TensorPrimitive::Float(reference))
        .into_data()
        .iter::<f64>()
        .collect();
    let got = values_of(y.clone());
    let err = rel_l2(&got, &reference);
    assert!(err <= 1e-5, "relative L2 {err:.2e}");

    assert_eq!(values_of(H::relu(y.clone())), relu_of(&got));
    assert!(matches!(&y, NdArrayTensor::F32(s) if s.is_borrowed()));
    assert_eq!(values_of(y), got, "the read-back memory changed");
}
