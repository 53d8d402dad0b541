//! conv2d and both gradients on the CPU (`burn_hetero::cpu_conv`, what `Hetero<Flex, _>` runs for
//! the convs placed there) against the f64 reference of `conv_numerics`.

use crate::common::*;
use crate::conv_numerics::{
    CASES, ConvCase, reference_forward, reference_w_grad, reference_x_grad,
};
use burn::tensor::ops::ModuleOps;
use burn::tensor::{DType, Shape, TensorData};
use burn_flex::FlexTensor;
use burn_hetero::HeteroConfig;
use burn_hetero::cpu_conv;

/// The grid of `conv_numerics` and the layers of the models: ResNet's 3×3 convs at stride 1
/// and 2, option B's 1×1 shortcut at stride 2, a 1×1 conv at stride 1 (the planes read in
/// place), the MNIST net's 5×5 layers, planes longer than one task's block of outputs, and
/// small planes of large batches (several images per task).
fn cases() -> Vec<ConvCase> {
    let case = |n, c_in, hw: [usize; 2], c_out, k: usize, stride: usize, padding: usize| ConvCase {
        n,
        c_in,
        h: hw[0],
        w: hw[1],
        c_out,
        k: [k, k],
        stride: [stride, stride],
        padding: [padding, padding],
        dilation: [1, 1],
        groups: 1,
        bias: false,
    };
    let mut all = CASES.to_vec();
    all.extend([
        case(3, 16, [32, 32], 16, 3, 1, 1),
        case(2, 16, [32, 32], 32, 3, 2, 1),
        case(3, 16, [32, 32], 32, 1, 2, 0),
        case(2, 24, [9, 11], 20, 1, 1, 0),
        case(3, 20, [12, 12], 50, 5, 1, 0),
        case(1, 3, [40, 37], 8, 3, 1, 1),
        // Batches large enough that small planes go several images to a task (the last task
        // holding fewer), in place of one image each.
        case(70, 8, [6, 7], 12, 3, 1, 1),
        case(40, 6, [9, 9], 10, 1, 1, 0),
        case(37, 5, [10, 10], 7, 3, 2, 1),
    ]);
    // The same 1×1 conv with a bias and groups.
    let mut grouped = case(2, 24, [9, 11], 20, 1, 1, 0);
    grouped.groups = 4;
    grouped.bias = true;
    all.push(grouped);
    all
}

fn flex(values: &[f32], shape: [usize; 4]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values.to_vec(), shape))
}

fn values(t: FlexTensor) -> Vec<f32> {
    t.into_data().into_vec::<f32>().unwrap()
}

/// The three phases of `case` on fresh inputs, each output checked against the f64 reference;
/// returns the outputs (for the determinism check).
fn run_case(case: &ConvCase, rng: &mut TestRng) -> [Vec<f32>; 3] {
    let x = random_vec(rng, case.x_shape().iter().product(), -1.0, 1.0);
    let w = random_vec(rng, case.w_shape().iter().product(), -1.0, 1.0);
    let b = random_vec(rng, case.c_out, -1.0, 1.0);
    let g = random_vec(rng, case.y_shape().iter().product(), -1.0, 1.0);
    let bias = case
        .bias
        .then(|| FlexTensor::from_data(TensorData::new(b.clone(), [case.c_out])));
    let options = case.options();
    let check = |what: &str, got: &[f32], want: &[f64]| {
        assert_eq!(got.len(), want.len(), "{what} {case:?}: length");
        assert!(
            got.iter().all(|v| v.is_finite()),
            "{what} {case:?}: not finite"
        );
        let err = rel_l2(got, want);
        assert!(err <= 1e-5, "{what} {case:?}: relative L2 error {err:.3e}");
    };

    let y = cpu_conv::conv2d(
        &flex(&x, case.x_shape()),
        &flex(&w, case.w_shape()),
        bias.as_ref(),
        &options,
    )
    .expect("an f32 conv");
    assert_eq!(y.layout().shape().as_slice(), case.y_shape());
    let y = values(y);
    check(
        "forward",
        &y,
        &reference_forward(case, &x, &w, case.bias.then_some(&b[..])),
    );

    let dx = cpu_conv::conv2d_x_backward(
        &Shape::new(case.x_shape()),
        &flex(&w, case.w_shape()),
        &flex(&g, case.y_shape()),
        &options,
    )
    .expect("an f32 conv");
    let dx = values(dx);
    check("input gradient", &dx, &reference_x_grad(case, &w, &g));

    let dw = cpu_conv::conv2d_weight_backward(
        &flex(&x, case.x_shape()),
        &Shape::new(case.w_shape()),
        &flex(&g, case.y_shape()),
        &options,
    )
    .expect("an f32 conv");
    let dw = values(dw);
    check("weight gradient", &dw, &reference_w_grad(case, &x, &g));
    [y, dx, dw]
}

/// Every phase within f32 rounding of the f64 reference, and the same bits on 1, 2 and 5
/// threads (the work is cut by shape, never by thread count).
#[test]
fn cpu_conv_matches_f64_reference_on_any_thread_count() {
    for case in cases() {
        let name = format!("cpu conv {case:?}");
        let results: Vec<[Vec<f32>; 3]> = [1, 2, 5]
            .into_iter()
            .map(|threads| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .expect("a pool");
                // The same inputs on every pool.
                pool.install(|| run_case(&case, &mut rng_for(&name)))
            })
            .collect();
        for (i, phase) in ["forward", "input gradient", "weight gradient"]
            .iter()
            .enumerate()
        {
            for other in &results[1..] {
                assert!(
                    other[i]
                        .iter()
                        .zip(&results[0][i])
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{phase} {case:?}: different bits on another thread count"
                );
            }
        }
    }
}

/// Strided views give the dense operands' results; what is not an f32 convolution is left to
/// Burn's own op (None).
#[test]
fn cpu_conv_strided_operands_and_refusals() {
    let mut rng = rng_for("cpu conv strided");
    let case = ConvCase {
        n: 3,
        c_in: 5,
        h: 10,
        w: 9,
        c_out: 4,
        k: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 1,
        bias: false,
    };
    let options = case.options();
    let [n, c, h, w] = case.x_shape();
    // x laid out as [C, N, H, W] and viewed as [N, C, H, W].
    let x = random_vec(&mut rng, n * c * h * w, -1.0, 1.0);
    let x_cnhw: Vec<f32> = (0..x.len())
        .map(|i| {
            let (ci, rest) = (i / (n * h * w), i % (n * h * w));
            x[(rest / (h * w) * c + ci) * h * w + rest % (h * w)]
        })
        .collect();
    let strided = flex(&x_cnhw, [c, n, h, w]).transpose(0, 1);
    assert!(!strided.is_contiguous());
    let weight = flex(
        &random_vec(&mut rng, case.w_shape().iter().product(), -1.0, 1.0),
        case.w_shape(),
    );
    let dense = flex(&x, case.x_shape());
    let got = values(cpu_conv::conv2d(&strided, &weight, None, &options).unwrap());
    let want = values(cpu_conv::conv2d(&dense, &weight, None, &options).unwrap());
    assert_eq!(got, want, "a strided input");
    let g = flex(
        &random_vec(&mut rng, case.y_shape().iter().product(), -1.0, 1.0),
        case.y_shape(),
    );
    let got = values(
        cpu_conv::conv2d_weight_backward(&strided, &Shape::new(case.w_shape()), &g, &options)
            .unwrap(),
    );
    let want = values(
        cpu_conv::conv2d_weight_backward(&dense, &Shape::new(case.w_shape()), &g, &options)
            .unwrap(),
    );
    assert_eq!(got, want, "a strided input's weight gradient");

    let f64_x = FlexTensor::from_data(TensorData::new(vec![1f64; n * c * h * w], case.x_shape()));
    assert_eq!(f64_x.dtype(), DType::F64);
    assert!(
        cpu_conv::conv2d(&f64_x, &weight, None, &options).is_none(),
        "f64"
    );
    let wrong_channels = flex(&vec![1.0; 4 * 3 * 9], [4, 3, 3, 3]);
    assert!(
        cpu_conv::conv2d(&dense, &wrong_channels, None, &options).is_none(),
        "channels"
    );
    let wrong_grad = flex(&vec![1.0; 3 * 4 * 9 * 9], [3, 4, 9, 9]);
    assert!(
        cpu_conv::conv2d_x_backward(&Shape::new(case.x_shape()), &weight, &wrong_grad, &options)
            .is_none(),
        "output gradient shape"
    );
    let too_small = flex(&[1.0; 5 * 2 * 2], [1, 5, 2, 2]);
    let no_padding = burn::tensor::ops::ConvOptions::new([1, 1], [0, 0], [1, 1], 1);
    assert!(
        cpu_conv::conv2d(&too_small, &weight, None, &no_padding).is_none(),
        "no output"
    );
}

/// `Hetero<Flex, _>` with its convs placed on the CPU runs these functions: its ops give their
/// bits.
#[test]
fn cpu_conv_hetero_flex_runs_them() {
    let _lock = settings_lock();
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            HeteroFlex::configure(&Default::default(), HeteroConfig::default());
        }
    }
    let _restore = Restore;
    HeteroFlex::configure(&Default::default(), HeteroConfig::cpu_only());
    let mut rng = rng_for("cpu conv through hetero");
    let case = ConvCase {
        n: 2,
        c_in: 6,
        h: 11,
        w: 10,
        c_out: 9,
        k: [3, 3],
        stride: [2, 2],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 3,
        bias: true,
    };
    let options = case.options();
    let x = random_vec(&mut rng, case.x_shape().iter().product(), -1.0, 1.0);
    let w = random_vec(&mut rng, case.w_shape().iter().product(), -1.0, 1.0);
    let b = random_vec(&mut rng, case.c_out, -1.0, 1.0);
    let g = random_vec(&mut rng, case.y_shape().iter().product(), -1.0, 1.0);
    let prim = |v: &[f32], shape: [usize; 4]| flex_primitive::<4>(v, &shape);
    let bias = || {
        burn::tensor::Tensor::<HeteroFlex, 1>::from_data(
            TensorData::new(b.clone(), [case.c_out]),
            &Default::default(),
        )
        .into_primitive()
        .tensor()
    };
    let y = HeteroFlex::conv2d(
        prim(&x, case.x_shape()),
        prim(&w, case.w_shape()),
        Some(bias()),
        options.clone(),
    );
    let bias_flex = FlexTensor::from_data(TensorData::new(b.clone(), [case.c_out]));
    let want = cpu_conv::conv2d(
        &flex(&x, case.x_shape()),
        &flex(&w, case.w_shape()),
        Some(&bias_flex),
        &options,
    )
    .unwrap();
    assert_eq!(flex_primitive_values::<4>(y), values(want), "forward");
    let dx = HeteroFlex::conv2d_x_backward(
        prim(&x, case.x_shape()),
        prim(&w, case.w_shape()),
        prim(&g, case.y_shape()),
        options.clone(),
    );
    let want = cpu_conv::conv2d_x_backward(
        &Shape::new(case.x_shape()),
        &flex(&w, case.w_shape()),
        &flex(&g, case.y_shape()),
        &options,
    )
    .unwrap();
    assert_eq!(
        flex_primitive_values::<4>(dx),
        values(want),
        "input gradient"
    );
    let dw = HeteroFlex::conv2d_weight_backward(
        prim(&x, case.x_shape()),
        prim(&w, case.w_shape()),
        prim(&g, case.y_shape()),
        options.clone(),
    );
    let want = cpu_conv::conv2d_weight_backward(
        &flex(&x, case.x_shape()),
        &Shape::new(case.w_shape()),
        &flex(&g, case.y_shape()),
        &options,
    )
    .unwrap();
    assert_eq!(
        flex_primitive_values::<4>(dw),
        values(want),
        "weight gradient"
    );
}
