//! Placement and fallback: the counters show where each phase ran; an unavailable or failing
//! accelerator costs nothing but a warning (or an error in strict mode).

use crate::common::*;
use burn::tensor::backend::Backend;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{DType, Tensor, TensorData};
use burn_autodiff::Autodiff;
use burn_hetero::{HeteroConfig, OpKind, Placement, Precision, Ran, Stats};

use Precision::{BF16, F16, F32};

const XS: [usize; 4] = [2, 3, 9, 8];
const WS: [usize; 4] = [5, 3, 3, 3];

fn options() -> ConvOptions<2> {
    ConvOptions::new([1, 1], [1, 1], [1, 1], 1)
}

/// conv2d forward and backward of a fresh problem on `B`; returns y, dx, dw.
fn conv_step<B: Backend>(name: &str) -> [Vec<f32>; 3] {
    type AD<B> = Autodiff<B>;
    let dev = Default::default();
    let mut rng = rng_for(name);
    let x = float::<AD<B>, 4>(&mut rng, &dev, XS).require_grad();
    let w = float::<AD<B>, 4>(&mut rng, &dev, WS).require_grad();
    let b = float::<AD<B>, 1>(&mut rng, &dev, [WS[0]]).require_grad();
    let y = burn::tensor::module::conv2d(x.clone(), w.clone(), Some(b), options());
    let g = float::<AD<B>, 4>(&mut rng, &dev, y.dims());
    let grads = (y.clone() * g).sum().backward();
    let v = |t: Tensor<B, 4>| t.into_data().into_vec::<f32>().unwrap();
    [
        v(y.inner()),
        v(x.grad(&grads).unwrap()),
        v(w.grad(&grads).unwrap()),
    ]
}

fn delta_of(f: impl FnOnce()) -> Stats {
    let before = burn_hetero::stats();
    f();
    burn_hetero::stats().since(&before)
}

#[test]
fn counters_show_each_phase_where_placed() {
    let f16 = Placement::accelerator(Precision::F16);
    let f32p = Placement::accelerator(Precision::F32);
    let layouts = [
        (f16, Placement::Cpu, f32p),
        (Placement::Cpu, f16, Placement::Cpu),
        (f32p, f32p, f16),
    ];
    for (fwd, dgrad, wgrad) in layouts {
        let config = HeteroConfig::cpu_only()
            .with_placement(OpKind::Conv2dForward, fwd)
            .with_placement(OpKind::Conv2dInputGrad, dgrad)
            .with_placement(OpKind::Conv2dWeightGrad, wgrad)
            .with_strict(true);
        let _s = settings(config);
        let delta = delta_of(|| {
            conv_step::<H>("placement counters");
        });
        for (op, place) in [
            (OpKind::Conv2dForward, fwd),
            (OpKind::Conv2dInputGrad, dgrad),
            (OpKind::Conv2dWeightGrad, wgrad),
        ] {
            let ran = match place {
                Placement::Cpu => Ran::Cpu,
                Placement::Accelerator { precision } => Ran::Accelerator(precision),
            };
            let c = delta.get(op, ran);
            assert_eq!(c.calls, 1, "{op} placed {place}:\n{delta}");
            assert_eq!(
                delta.total(op).calls,
                1,
                "{op} ran more than once:\n{delta}"
            );
            if let Ran::Accelerator(p) = ran {
                // The operands cross the bus at the placement's precision, only those the op
                // needs (x 432, w 135, bias 5, output gradient 720 elements); results come back
                // in f32.
                let up = match op {
                    OpKind::Conv2dForward => 432 + 135 + 5,
                    OpKind::Conv2dInputGrad => 135 + 720,
                    _ => 432 + 720,
                };
                assert_eq!(c.bytes_up, up * p.bytes() as u64, "{op}:\n{delta}");
                assert_eq!(c.bytes_down, c.elements * 4, "{op}:\n{delta}");
                // 2 * (output elements) * (c_in / groups * kh * kw)
                assert_eq!(c.flops, 2 * 720 * 27, "{op}:\n{delta}");
            } else {
                assert_eq!((c.bytes_up, c.bytes_down), (0, 0));
            }
        }
    }
}

/// With every phase placed on the accelerator but none able to run there, results are
/// bit-identical to burn-ndarray's and the counters say "fallback".
fn assert_falls_back_identically(why: &str) {
    let delta = delta_of(|| {
        let h = conv_step::<H>(why);
        let n = conv_step::<N>(why);
        assert_eq!(h, n, "{why}: results differ from the CPU run");
    });
    for op in [
        OpKind::Conv2dForward,
        OpKind::Conv2dInputGrad,
        OpKind::Conv2dWeightGrad,
    ] {
        assert_eq!(
            delta.get(op, Ran::CpuFallback).calls,
            1,
            "{why}, {op}:\n{delta}"
        );
        assert_eq!(delta.accelerator_calls(op), 0, "{why}, {op}:\n{delta}");
    }
}

#[test]
fn unavailable_accelerator_falls_back_to_cpu() {
    let all_f32 = HeteroConfig::cpu_only()
        .with_placement(
            OpKind::Conv2dForward,
            Placement::accelerator(Precision::F32),
        )
        .with_placement(
            OpKind::Conv2dInputGrad,
            Placement::accelerator(Precision::F32),
        )
        .with_placement(
            OpKind::Conv2dWeightGrad,
            Placement::accelerator(Precision::F32),
        );

    // A device that does not exist.
    {
        let _s = settings(all_f32.clone());
        HeteroApi::set_accelerator_device(&device(), burn_wgpu::WgpuDevice::DiscreteGpu(77));
        let status = HeteroApi::accelerator_status(&device());
        HeteroApi::set_accelerator_device(&device(), Default::default());
        assert!(
            status.is_err(),
            "a missing device must be reported: {status:?}"
        );
        HeteroApi::set_accelerator_device(&device(), burn_wgpu::WgpuDevice::DiscreteGpu(77));
        assert_falls_back_identically("missing device");
        HeteroApi::set_accelerator_device(&device(), Default::default());
    }
    // The accelerator switched off.
    {
        let mut off = all_f32.clone();
        off.accelerator_enabled = false;
        let _s = settings(off.clone());
        assert_falls_back_identically("disabled");
    }
}

#[test]
fn failure_on_kth_op_falls_back_for_that_op_only() {
    let f32p = Placement::accelerator(Precision::F32);
    let config = HeteroConfig::cpu_only().with_placement(OpKind::Conv2dForward, f32p);
    let _s = settings(config);
    let dev = device();
    let mut rng = rng_for("kth failure");
    let inputs: Vec<_> = (0..3)
        .map(|_| {
            (
                random_vec(&mut rng, XS.iter().product(), -1.0, 1.0),
                random_vec(&mut rng, WS.iter().product(), -1.0, 1.0),
            )
        })
        .collect();
    let conv = |x: &[f32], w: &[f32]| -> (Vec<f32>, Vec<f32>) {
        let run = |xb: Tensor<H, 4>, wb: Tensor<H, 4>| {
            burn::tensor::module::conv2d(xb, wb, None, options())
                .into_data()
                .into_vec::<f32>()
                .unwrap()
        };
        let reference = burn::tensor::module::conv2d(
            Tensor::<N, 4>::from_data(TensorData::new(x.to_vec(), XS), &dev),
            Tensor::<N, 4>::from_data(TensorData::new(w.to_vec(), WS), &dev),
            None,
            options(),
        );
        (
            run(
                Tensor::from_data(TensorData::new(x.to_vec(), XS), &dev),
                Tensor::from_data(TensorData::new(w.to_vec(), WS), &dev),
            ),
            reference.into_data().into_vec::<f32>().unwrap(),
        )
    };
    burn_hetero::inject_accelerator_failure(Some(2));
    let delta = delta_of(|| {
        for (k, (x, w)) in inputs.iter().enumerate() {
            let (h, n) = conv(x, w);
            if k == 1 {
                assert_eq!(h, n, "the failed op must give the CPU's result exactly");
            } else {
                assert!(rel_l2(&h, &n.iter().map(|&v| v as f64).collect::<Vec<_>>()) < 1e-5);
            }
        }
    });
    assert_eq!(
        delta
            .get(OpKind::Conv2dForward, Ran::Accelerator(Precision::F32))
            .calls,
        2,
        "{delta}"
    );
    assert_eq!(
        delta.get(OpKind::Conv2dForward, Ran::CpuFallback).calls,
        1,
        "{delta}"
    );
}

#[test]
fn strict_mode_turns_fallbacks_into_errors() {
    let f32p = Placement::accelerator(Precision::F32);
    let dev = device();
    let conv = || {
        let mut rng = rng_for("strict");
        let x = float::<H, 4>(&mut rng, &dev, XS);
        let w = float::<H, 4>(&mut rng, &dev, WS);
        burn::tensor::module::conv2d(x, w, None, options()).into_data()
    };
    // An op failing on the accelerator.
    {
        let _s = settings(
            HeteroConfig::cpu_only()
                .with_placement(OpKind::Conv2dForward, f32p)
                .with_strict(true),
        );
        burn_hetero::inject_accelerator_failure(Some(1));
        let err = std::panic::catch_unwind(conv).expect_err("strict mode must fail");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("strict mode") && msg.contains("injected"),
            "{msg}"
        );
    }
    // No accelerator.
    {
        let mut off = HeteroConfig::cpu_only()
            .with_placement(OpKind::Conv2dForward, f32p)
            .with_strict(true);
        off.accelerator_enabled = false;
        let _s = settings(off);
        let err = std::panic::catch_unwind(conv).expect_err("strict mode must fail");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(
            msg.contains("strict mode") && msg.contains("disabled"),
            "{msg}"
        );
    }
    // And without strict mode the same failure is absorbed.
    {
        let _s = settings(HeteroConfig::cpu_only().with_placement(OpKind::Conv2dForward, f32p));
        burn_hetero::inject_accelerator_failure(Some(1));
        assert!(std::panic::catch_unwind(conv).is_ok());
    }
}

#[test]
fn placement_override_syntax() {
    let mut c = HeteroConfig::cpu_only();
    c.apply_placement_override("forward=f16, dgrad=bf16,wgrad=f32, matmul=cpu")
        .unwrap();
    assert_eq!(c.conv2d_forward, Placement::accelerator(Precision::F16));
    assert_eq!(c.conv2d_input_grad, Placement::accelerator(Precision::BF16));
    assert_eq!(c.conv2d_weight_grad, Placement::accelerator(Precision::F32));
    assert_eq!(c.matmul, Placement::Cpu);
    c.apply_placement_override("all=cpu").unwrap();
    assert_eq!(c, HeteroConfig::cpu_only());
    let before = c.clone();
    for bad in ["forward=f8", "fwd=f16", "forward", "conv=f16,matmul=gpu"] {
        assert!(
            c.apply_placement_override(bad).is_err(),
            "{bad} must be rejected"
        );
        assert_eq!(c, before, "a rejected override must change nothing");
    }
}

/// A linear layer's forward and gradients on `B` for a fresh rank-3 input: y, dx, dw, db (loss
/// `sum(y * g)`), with the inputs x `[rows/3, 3, d_in]`, w `[d_in, d_out]`, b, g as f32.
#[allow(clippy::type_complexity)]
fn linear_step<B: Backend>(
    name: &str,
    d_in: usize,
    d_out: usize,
) -> ([Vec<f32>; 4], [Vec<f32>; 4]) {
    let dev = Default::default();
    let mut rng = rng_for(name);
    let x = float::<Autodiff<B>, 3>(&mut rng, &dev, [4, 3, d_in]).require_grad();
    let w = float::<Autodiff<B>, 2>(&mut rng, &dev, [d_in, d_out]).require_grad();
    let b = float::<Autodiff<B>, 1>(&mut rng, &dev, [d_out]).require_grad();
    let y = burn::tensor::module::linear(x.clone(), w.clone(), Some(b.clone()));
    let g = float::<Autodiff<B>, 3>(&mut rng, &dev, [4, 3, d_out]);
    let grads = (y.clone() * g.clone()).sum().backward();
    let v = |d: TensorData| d.into_vec::<f32>().unwrap();
    let inputs = [
        v(x.clone().into_data()),
        v(w.clone().into_data()),
        v(b.clone().into_data()),
        v(g.into_data()),
    ];
    let outputs = [
        v(y.inner().into_data()),
        v(x.grad(&grads).unwrap().into_data()),
        v(w.grad(&grads).unwrap().into_data()),
        v(b.grad(&grads).unwrap().into_data()),
    ];
    (inputs, outputs)
}

/// y = x·w + b, dx = g·wᵀ, dw = xᵀ·g, db = Σ g over the rows, in f64.
fn linear_reference(inputs: &[Vec<f32>; 4], d_in: usize, d_out: usize) -> [Vec<f64>; 4] {
    let [x, w, b, g] = inputs;
    let rows = x.len() / d_in;
    let (mut y, mut dx) = (vec![0f64; rows * d_out], vec![0f64; rows * d_in]);
    let (mut dw, mut db) = (vec![0f64; d_in * d_out], vec![0f64; d_out]);
    for r in 0..rows {
        for o in 0..d_out {
            let go = g[r * d_out + o] as f64;
            y[r * d_out + o] = b[o] as f64;
            db[o] += go;
            for i in 0..d_in {
                let (xi, wio) = (x[r * d_in + i] as f64, w[i * d_out + o] as f64);
                y[r * d_out + o] += xi * wio;
                dx[r * d_in + i] += go * wio;
                dw[i * d_out + o] += xi * go;
            }
        }
    }
    [y, dx, dw, db]
}

#[test]
fn linear_layers_follow_the_matmul_placement() {
    let (d_in, d_out) = (37, 11);
    for (placement, bound) in [
        (Placement::accelerator(Precision::F32), 1e-5),
        (Placement::accelerator(Precision::F16), 5e-3),
        (Placement::accelerator(Precision::BF16), 2e-2),
        (Placement::Cpu, 1e-5),
    ] {
        let config = HeteroConfig::cpu_only()
            .with_placement(OpKind::Matmul, placement)
            .with_strict(true);
        let _s = settings(config);
        let mut result = None;
        let delta = delta_of(|| result = Some(linear_step::<H>("linear placement", d_in, d_out)));
        let (inputs, outputs) = result.unwrap();
        let reference = linear_reference(&inputs, d_in, d_out);
        for (name, (got, want)) in ["y", "dx", "dw", "db"]
            .iter()
            .zip(outputs.iter().zip(&reference))
        {
            assert!(
                got.iter().all(|v| v.is_finite()),
                "{placement}: {name} not finite"
            );
            let err = rel_l2(got, want);
            assert!(
                err <= bound,
                "{placement}: {name} relative L2 {err:.2e} > {bound:.0e}"
            );
        }
        // Forward, input gradient and weight gradient are one matmul each where placed; on the
        // CPU placement the layer is the CPU backend's own op and no matmul is seen.
        let expected = match placement {
            Placement::Cpu => 0,
            Placement::Accelerator { precision } => {
                assert_eq!(
                    delta.get(OpKind::Matmul, Ran::Accelerator(precision)).calls,
                    3
                );
                3
            }
        };
        assert_eq!(
            delta.total(OpKind::Matmul).calls,
            expected,
            "{placement}:\n{delta}"
        );
    }
}

type HF = HeteroFlex;

/// Settings for a test of [`HF`]: every conv phase on the accelerator at f16, strictly; `HF` back
/// to the default when dropped.
struct FlexConvsAtF16 {
    _settings: SettingsGuard,
}

impl FlexConvsAtF16 {
    fn new() -> Self {
        let guard = settings(HeteroConfig::default());
        let f16 = Placement::accelerator(Precision::F16);
        let config = HeteroConfig::cpu_only().with_convs(f16).with_strict(true);
        HF::configure(&burn_flex::FlexDevice, config);
        Self { _settings: guard }
    }
}

impl Drop for FlexConvsAtF16 {
    fn drop(&mut self) {
        HF::configure(&burn_flex::FlexDevice, HeteroConfig::default());
    }
}

/// A float primitive of `HF` holding `values`.
fn flex_tensor(values: Vec<f32>, shape: [usize; 4]) -> burn::tensor::ops::FloatTensor<HF> {
    flex_primitive::<4>(&values, &shape)
}

/// A conv backward uploads its output gradient once (f16, cast from burn-flex's storage): the weight gradient reuses the input
/// gradient's upload of the same burn-flex buffer. Once that buffer is changed in place, the
/// next upload is a fresh one and the result follows the new values.
#[test]
fn output_gradient_is_uploaded_once_per_backward() {
    use burn::tensor::ops::{FloatTensorOps, ModuleOps};
    let _s = FlexConvsAtF16::new();
    let mut rng = rng_for("uploaded once");
    let float = flex_tensor;
    let (xs, ws, gs) = ([2, 3, 6, 6], [4, 3, 3, 3], [2, 4, 6, 6]);
    let x = float(random_vec(&mut rng, 216, -1.0, 1.0), xs);
    let w = float(random_vec(&mut rng, 108, -1.0, 1.0), ws);
    let grad = float(random_vec(&mut rng, 288, -1.0, 1.0), gs);
    let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
    let values = flex_primitive_values::<4>;
    let up = |delta: &Stats, op| delta.get(op, Ran::Accelerator(Precision::F16)).bytes_up;
    let mut weight_grad = None;
    let delta = delta_of(|| {
        let _ = values(HF::conv2d_x_backward(
            x.clone(),
            w.clone(),
            grad.clone(),
            options.clone(),
        ));
        weight_grad = Some(values(HF::conv2d_weight_backward(
            x.clone(),
            w.clone(),
            grad.clone(),
            options.clone(),
        )));
    });
    assert_eq!(
        up(&delta, OpKind::Conv2dInputGrad),
        (108 + 288) * 2,
        "{delta}"
    );
    assert_eq!(up(&delta, OpKind::Conv2dWeightGrad), 216 * 2, "{delta}");
    // Doubling is exact in f16, so the new weight gradient is exactly twice the old.
    // Doubled in place (the buffer is no longer held anywhere else): uploaded afresh.
    let doubled = HF::float_mul_scalar(grad, 2.0f32.into());
    let mut doubled_grad = None;
    let delta = delta_of(|| {
        doubled_grad = Some(values(HF::conv2d_weight_backward(
            x.clone(),
            w.clone(),
            doubled,
            options.clone(),
        )));
    });
    // x's upload is reused; the doubled gradient goes up afresh.
    assert_eq!(up(&delta, OpKind::Conv2dWeightGrad), 288 * 2, "{delta}");
    for (d, g) in doubled_grad.unwrap().iter().zip(weight_grad.unwrap()) {
        assert!(
            (d - 2.0 * g).abs() <= 1e-5 * (1.0 + g.abs()),
            "{d} vs 2 × {g}"
        );
    }
}

/// With both gradients placed alike on burn-flex, the input-gradient call also computes the
/// weight gradient and keeps it for the request that follows: the weight gradient is the one a
/// call of its own gives, bit for bit; a different request is not answered with it; a conv
/// whose weight gradient is never asked for (frozen weights) is no longer paired.
#[test]
fn weight_gradient_comes_with_the_input_gradient() {
    use burn::tensor::ops::ModuleOps;
    let _s = FlexConvsAtF16::new();
    let mut rng = rng_for("paired gradients");
    let mut float = |shape: [usize; 4]| {
        let n = shape.iter().product();
        flex_tensor(random_vec(&mut rng, n, -1.0, 1.0), shape)
    };
    let (xs, ws, gs) = ([2, 3, 7, 6], [4, 3, 3, 3], [2, 4, 7, 6]);
    let (x, w, grad, other_grad) = (float(xs), float(ws), float(gs), float(gs));
    let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
    let values = flex_primitive_values::<4>;
    let calls = |delta: &Stats, op| delta.get(op, Ran::Accelerator(Precision::F16)).calls;
    type T = burn::tensor::ops::FloatTensor<HF>;
    let x_grad = |g: &T| HF::conv2d_x_backward(x.clone(), w.clone(), g.clone(), options.clone());
    let w_grad =
        |g: &T| HF::conv2d_weight_backward(x.clone(), w.clone(), g.clone(), options.clone());

    // Paired: both ops run in the input-gradient call, none in the weight-gradient call.
    let delta = delta_of(|| drop(values(x_grad(&grad))));
    assert_eq!(calls(&delta, OpKind::Conv2dInputGrad), 1, "{delta}");
    assert_eq!(calls(&delta, OpKind::Conv2dWeightGrad), 1, "{delta}");
    let up = |op| delta.get(op, Ran::Accelerator(Precision::F16)).bytes_up;
    let elements = |s: [usize; 4]| s.iter().product::<usize>() as u64;
    assert_eq!(
        up(OpKind::Conv2dInputGrad),
        (elements(ws) + elements(gs)) * 2,
        "{delta}"
    );
    // The output gradient goes up once, for both.
    assert_eq!(up(OpKind::Conv2dWeightGrad), elements(xs) * 2, "{delta}");
    let mut paired = None;
    let delta = delta_of(|| paired = Some(values(w_grad(&grad))));
    assert_eq!(calls(&delta, OpKind::Conv2dWeightGrad), 0, "{delta}");
    // On its own (nothing kept now): the same gradient.
    let delta = delta_of(|| assert_eq!(values(w_grad(&grad)), paired.unwrap()));
    assert_eq!(calls(&delta, OpKind::Conv2dWeightGrad), 1, "{delta}");
    let alone = values(w_grad(&grad));

    // Another request (another output gradient) gets its own gradient, not the kept one.
    let other_alone = values(w_grad(&other_grad));
    drop(values(x_grad(&grad)));
    let delta = delta_of(|| assert_eq!(values(w_grad(&other_grad)), other_alone));
    assert_eq!(calls(&delta, OpKind::Conv2dWeightGrad), 1, "{delta}");

    // The gradient kept by that last input gradient was not asked for, as with frozen weights:
    // from the next input gradient on, this conv's runs alone.
    let delta = delta_of(|| drop(values(x_grad(&grad))));
    assert_eq!(calls(&delta, OpKind::Conv2dWeightGrad), 0, "{delta}");
    let delta = delta_of(|| assert_eq!(values(w_grad(&grad)), alone));
    assert_eq!(calls(&delta, OpKind::Conv2dWeightGrad), 1, "{delta}");
}

/// Three convs in a chain on `Autodiff<Hetero<C, A>>`, the forward at `forward` and both
/// gradients at `backward`: each backward reads its forward's uploads of the input (weight
/// gradient) and the weight (input gradient) from the device, with the uploads of the later
/// layers in between, and uploads only its output gradient. The gradients follow an f32 run on
/// burn-flex within `tolerance` (relative L2). With burn-ndarray as `C` the buffers are
/// burn-ndarray's arrays, lent to each op anew, which the uploads and the paired gradients
/// know again by the array.
fn backward_reads_the_forward_uploads<C: Backend, A: burn_hetero::Accelerator>(
    device: &C::Device,
    forward: Precision,
    backward: Precision,
    tolerance: f64,
) {
    type AF = Autodiff<burn_flex::Flex>;
    let _guard = settings(HeteroConfig::default());
    let config = HeteroConfig::cpu_only()
        .with_placement(OpKind::Conv2dForward, Placement::accelerator(forward))
        .with_placement(OpKind::Conv2dInputGrad, Placement::accelerator(backward))
        .with_placement(OpKind::Conv2dWeightGrad, Placement::accelerator(backward))
        .with_strict(true);
    burn_hetero::Hetero::<C, A>::configure(device, config);
    let (xs, ws) = ([2, 4, 7, 6], [4, 4, 3, 3]);
    let (x, weights, output_grad) = chain_operands("forward uploads", xs, ws);
    let operands = (xs, ws);
    let reference =
        chained_conv_grads::<AF>(&Default::default(), operands, &x, &weights, &output_grad);
    let mut got = Vec::new();
    let delta = delta_of(|| {
        got = chained_conv_grads::<Autodiff<burn_hetero::Hetero<C, A>>>(
            device,
            operands,
            &x,
            &weights,
            &output_grad,
        );
    });
    burn_hetero::Hetero::<C, A>::configure(device, HeteroConfig::default());
    for (i, (g, r)) in got.iter().zip(&reference).enumerate() {
        let r: Vec<f64> = r.iter().map(|&v| v as f64).collect();
        let err = rel_l2(g, &r);
        assert!(err <= tolerance, "gradient {i}: relative L2 {err:.2e}");
    }
    let (xn, wn) = (xs.iter().product::<usize>(), ws.iter().product::<usize>());
    let at = |op, p: Precision| delta.get(op, Ran::Accelerator(p));
    let (fwd, dgrad, wgrad) = (
        at(OpKind::Conv2dForward, forward),
        at(OpKind::Conv2dInputGrad, backward),
        at(OpKind::Conv2dWeightGrad, backward),
    );
    let bytes = |n: usize, p: Precision| (n * p.bytes()) as u64;
    assert_eq!((fwd.calls, dgrad.calls, wgrad.calls), (3, 3, 3), "{delta}");
    // At another low precision than the forward's, the input gradient's weight goes up with
    // the forward's operands.
    let weight_ahead = backward != forward && backward != Precision::F32;
    let ahead = if weight_ahead { bytes(wn, backward) } else { 0 };
    assert_eq!(
        fwd.bytes_up,
        3 * (bytes(xn + wn, forward) + ahead),
        "{delta}"
    );
    // Each backward uploads its output gradient (shared by both phases) and nothing else.
    assert_eq!(dgrad.bytes_up, 3 * bytes(xn, backward), "{delta}");
    assert_eq!(dgrad.bytes_reused, 3 * bytes(wn, backward), "{delta}");
    // The weight gradient: the output gradient from the input gradient's upload, the input
    // from the forward's where that one serves (the same precision, or f16 rounded on to
    // bf16), else uploaded.
    let x_from_forward =
        forward == backward || (forward, backward) == (Precision::F16, Precision::BF16);
    let (x_up, x_reused) = if x_from_forward {
        (0, bytes(xn, backward))
    } else {
        (bytes(xn, backward), 0)
    };
    assert_eq!(wgrad.bytes_up, 3 * x_up, "{delta}");
    assert_eq!(
        wgrad.bytes_reused,
        3 * (bytes(xn, backward) + x_reused),
        "{delta}"
    );
    // Every weight gradient was read back after its call returned.
    assert_eq!(wgrad.deferred_reads, 3, "{delta}");
    assert_eq!(dgrad.deferred_reads + fwd.deferred_reads, 0, "{delta}");
}

/// Fresh random operands of [`chained_conv_grads`]: the input, three weights and the output's
/// gradient.
fn chain_operands(
    label: &str,
    xs: [usize; 4],
    ws: [usize; 4],
) -> (Vec<f32>, Vec<Vec<f32>>, Vec<f32>) {
    let mut rng = rng_for(label);
    let x = random_vec(&mut rng, xs.iter().product(), -1.0, 1.0);
    let weights = (0..3)
        .map(|_| random_vec(&mut rng, ws.iter().product(), -0.5, 0.5))
        .collect();
    let output_grad = random_vec(&mut rng, xs.iter().product(), -1.0, 1.0);
    (x, weights, output_grad)
}

/// Input, input gradient and weight gradients of three chained 3×3 convs (input of shape `xs`,
/// weights of shape `ws`, padding 1) on autodiff backend `B`, given the output's gradient.
/// The first weight's gradient is first touched by a write (doubled where nothing else holds
/// it, then halved here: exact), the others by reads.
fn chained_conv_grads<B: burn::tensor::backend::AutodiffBackend>(
    dev: &B::Device,
    (xs, ws): ([usize; 4], [usize; 4]),
    x: &[f32],
    weights: &[Vec<f32>],
    output_grad: &[f32],
) -> Vec<Vec<f32>> {
    use burn::tensor::module::conv2d;
    let tensor = |v: &[f32], s: [usize; 4]| {
        Tensor::<B, 4>::from_data(TensorData::new(v.to_vec(), s), dev).require_grad()
    };
    let x = tensor(x, xs);
    let ws: Vec<_> = weights.iter().map(|w| tensor(w, ws)).collect();
    let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
    let mut y = x.clone();
    for w in &ws {
        y = conv2d(y, w.clone(), None, options.clone());
    }
    let mut grads = (y * tensor(output_grad, xs).detach()).sum().backward();
    let v = |t: Tensor<B::InnerBackend, 4>| t.into_data().to_vec::<f32>().unwrap();
    let mut out = vec![v(x.grad(&grads).unwrap())];
    let doubled = v(ws[0].grad_remove(&mut grads).unwrap().mul_scalar(2.0));
    out.push(doubled.iter().map(|g| g / 2.0).collect());
    out.extend(ws[1..].iter().map(|w| v(w.grad(&grads).unwrap())));
    out
}

/// Every other op on the CPU, the three conv phases on the accelerator at f32.
fn conv_phases_at_f32() -> HeteroConfig {
    let f32p = Placement::accelerator(Precision::F32);
    HeteroConfig::cpu_only()
        .with_placement(OpKind::Conv2dForward, f32p)
        .with_placement(OpKind::Conv2dInputGrad, f32p)
        .with_placement(OpKind::Conv2dWeightGrad, f32p)
}

/// A weight gradient whose read back fails (injected) is computed on the CPU from the operands
/// kept for it; the others still come from the accelerator; nothing is lost.
#[test]
fn a_failed_deferred_read_is_computed_on_the_cpu() {
    type AF = Autodiff<burn_flex::Flex>;
    let _guard = settings(HeteroConfig::default());
    let config = conv_phases_at_f32();
    burn_hetero::Hetero::<burn_flex::Flex, Accel>::configure(&burn_flex::FlexDevice, config);
    let (xs, ws) = ([2, 3, 6, 5], [3, 3, 3, 3]);
    let (x, weights, output_grad) = chain_operands("failed deferred read", xs, ws);
    let reference =
        chained_conv_grads::<AF>(&Default::default(), (xs, ws), &x, &weights, &output_grad);
    for k in 1..=3 {
        let fallbacks = burn_hetero::deferred_read_fallbacks();
        burn_hetero::inject_deferred_read_failure(Some(k));
        let mut got = Vec::new();
        let delta = delta_of(|| {
            got = chained_conv_grads::<Autodiff<burn_hetero::Hetero<burn_flex::Flex, Accel>>>(
                &burn_flex::FlexDevice,
                (xs, ws),
                &x,
                &weights,
                &output_grad,
            );
        });
        burn_hetero::inject_deferred_read_failure(None);
        assert_eq!(
            burn_hetero::deferred_read_fallbacks() - fallbacks,
            1,
            "read {k}: one result computed on the CPU"
        );
        let wgrad = delta.get(OpKind::Conv2dWeightGrad, Ran::Accelerator(Precision::F32));
        assert_eq!((wgrad.calls, wgrad.deferred_reads), (3, 3), "{delta}");
        for (i, (g, r)) in got.iter().zip(&reference).enumerate() {
            let r: Vec<f64> = r.iter().map(|&v| v as f64).collect();
            let err = rel_l2(g, &r);
            assert!(err <= 1e-5, "read {k}, gradient {i}: relative L2 {err:.2e}");
        }
    }
    burn_hetero::Hetero::<burn_flex::Flex, Accel>::configure(
        &burn_flex::FlexDevice,
        HeteroConfig::default(),
    );
}

/// A weight gradient read later is handed out before its read settles, on burn-ndarray's arrays
/// as on burn-flex's: with that read made to fail (injected), nothing is computed on the CPU
/// until the gradient is first read (the input gradient read before it does not wait for it),
/// and then its values are the reference's. On burn-ndarray the read used to settle as the
/// gradient was handed out, inside the backward.
fn a_weight_gradient_is_read_when_first_used<C: Backend>(device: &C::Device) {
    type AF = Autodiff<burn_flex::Flex>;
    let _guard = settings(HeteroConfig::default());
    let config = conv_phases_at_f32();
    burn_hetero::Hetero::<C, Accel>::configure(device, config);
    let (xs, ws) = ([2, 3, 9, 7], [4, 3, 3, 3]);
    let (x, weights, _) = chain_operands("weight gradient read when used", xs, ws);
    // Padding 1 keeps the image size: the output has the weight's channels.
    let ys = [xs[0], ws[0], xs[2], xs[3]];
    let output_grad = random_vec(
        &mut rng_for("read when used, output gradient"),
        ys.iter().product(),
        -1.0,
        1.0,
    );
    fn grads<B: burn::tensor::backend::AutodiffBackend>(
        dev: &B::Device,
        (xs, ws, ys): ([usize; 4], [usize; 4], [usize; 4]),
        (x, w, output_grad): (&[f32], &[f32], &[f32]),
        read: impl Fn(&str),
    ) -> (Vec<f32>, Vec<f32>) {
        let tensor = |v: &[f32], s: [usize; 4]| {
            Tensor::<B, 4>::from_data(TensorData::new(v.to_vec(), s), dev).require_grad()
        };
        let (x, w) = (tensor(x, xs), tensor(w, ws));
        let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
        let y = burn::tensor::module::conv2d(x.clone(), w.clone(), None, options);
        let output_grad = tensor(output_grad, ys).detach();
        let grads = (y * output_grad).sum().backward();
        read("after the backward");
        let v = |t: Tensor<B::InnerBackend, 4>| t.into_data().to_vec::<f32>().unwrap();
        let x_grad = v(x.grad(&grads).unwrap());
        read("after reading the input gradient");
        (x_grad, v(w.grad(&grads).unwrap()))
    }
    let operands = (x.as_slice(), weights[0].as_slice(), output_grad.as_slice());
    let reference = grads::<AF>(&Default::default(), (xs, ws, ys), operands, |_| {});
    let fallbacks = burn_hetero::deferred_read_fallbacks();
    burn_hetero::inject_deferred_read_failure(Some(1));
    let mut got = (Vec::new(), Vec::new());
    let delta = delta_of(|| {
        got = grads::<Autodiff<burn_hetero::Hetero<C, Accel>>>(
            device,
            (xs, ws, ys),
            operands,
            |when| {
                assert_eq!(
                    burn_hetero::deferred_read_fallbacks(),
                    fallbacks,
                    "the weight gradient's read settled {when}"
                );
            },
        );
    });
    burn_hetero::inject_deferred_read_failure(None);
    burn_hetero::Hetero::<C, Accel>::configure(device, HeteroConfig::default());
    assert_eq!(burn_hetero::deferred_read_fallbacks() - fallbacks, 1);
    let wgrad = delta.get(OpKind::Conv2dWeightGrad, Ran::Accelerator(Precision::F32));
    assert_eq!((wgrad.calls, wgrad.deferred_reads), (1, 1), "{delta}");
    for (name, g, r) in [
        ("input", &got.0, &reference.0),
        ("weight", &got.1, &reference.1),
    ] {
        let r: Vec<f64> = r.iter().map(|&v| v as f64).collect();
        let err = rel_l2(g, &r);
        assert!(err <= 1e-5, "{name} gradient: relative L2 {err:.2e}");
    }
}

#[test]
fn a_weight_gradient_is_read_when_first_used_on_flex() {
    a_weight_gradient_is_read_when_first_used::<burn_flex::Flex>(&burn_flex::FlexDevice);
}

#[test]
fn a_weight_gradient_is_read_when_first_used_on_ndarray() {
    a_weight_gradient_is_read_when_first_used::<N>(&device());
}

/// At one precision the backward reads the forward's device copies as they are.
#[test]
fn backward_reads_the_forward_uploads_at_f16() {
    let flex = burn_flex::FlexDevice;
    backward_reads_the_forward_uploads::<burn_flex::Flex, Accel>(&flex, F16, F16, 5e-3);
}

/// The same on burn-ndarray's arrays.
#[test]
fn backward_reads_the_forward_uploads_of_ndarray_arrays() {
    backward_reads_the_forward_uploads::<N, Accel>(&device(), F16, F16, 5e-3);
    backward_reads_the_forward_uploads::<N, Accel>(&device(), F32, F16, 5e-3);
}

/// The forward at f32, the gradients at f16: the input gradients read the weights uploaded at
/// f16 beside the forward's operands; the weight gradients upload their input again.
#[test]
fn backward_reads_the_weights_uploaded_ahead_at_f16() {
    let flex = burn_flex::FlexDevice;
    backward_reads_the_forward_uploads::<burn_flex::Flex, Accel>(&flex, F32, F16, 5e-3);
}

/// The forward at f16, the gradients at bf16 (the default placement): the weights go up at
/// bf16 too, beside the forward's operands; the inputs' f16 copies are rounded on to bf16 on the
/// device.
#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_backward_reads_the_forward_uploads_at_bf16() {
    let flex = burn_flex::FlexDevice;
    type Cuda = burn_hetero::CudaAccelerator;
    backward_reads_the_forward_uploads::<burn_flex::Flex, Cuda>(&flex, F16, BF16, 2e-2);
    backward_reads_the_forward_uploads::<N, Cuda>(&device(), F16, BF16, 2e-2);
}

/// Uploads come back bit for bit as the host casts them: f32 values cast to f16/bf16 on their way
/// up (`accel_upload_cast`) and host data copied as they are (`accel_upload`), at sizes under
/// one staging chunk, just over one (4 MiB by default: on CUDA's pinned path the f16 upload's
/// 2-byte tail rides with the chunk, the f32 upload's second chunk is in the other slot), just
/// over a chunk and its 256 KiB tail (a short last chunk of its own) and over several. Each size
/// is uploaded twice with fresh values, so a copy that silently left a reused
/// device buffer alone would show the first values; within a round every upload stays alive until
/// all are downloaded, so two live tensors sharing a kept device buffer would show the other's
/// values.
fn uploads_round_trip<A: burn_hetero::Accelerator>(device: &A::Device, dtypes: &[DType]) {
    let mut rng = rng_for("uploads round trip");
    for &n in &[1usize, 4097, (1 << 21) + 1, 2_228_225, 7_000_001] {
        for round in 0..2 {
            let mut src = random_vec(&mut rng, n, -300.0, 300.0);
            // Values where a cast can go wrong: ties to even (1 + 2^-8 and 1 + 3·2^-8 are
            // halfway between bf16 neighbours), overflow, infinities, zeros, subnormals, NaN.
            let special = [
                1.003_906_3,
                1.011_718_8,
                -1.003_906_3,
                f32::MAX,
                f32::INFINITY,
                f32::NEG_INFINITY,
                -0.0,
                1e-40,
                65_520.0,
                f32::NAN,
                // f16: a tie (1 + 2^-11), its largest finite value, subnormals.
                1.000_488_3,
                65_504.0,
                3.0e-6,
                -6.0e-8,
            ];
            for (i, v) in special.iter().enumerate() {
                let at = (i * 997 + round) % n;
                src[at] = *v;
            }
            let shape = [n];
            // Every upload of the round is held until its end: uploads of the same length
            // (f16 and bf16; the f32 copy and the plain f32 upload below) must not share a
            // device buffer while both are alive.
            let mut held = Vec::new();
            for &dtype in dtypes {
                let expected = TensorData::new(src.clone(), shape).convert_dtype(dtype);
                let up = A::accel_upload_cast(&src, shape.into(), dtype, device).unwrap();
                held.push((up, expected, dtype));
            }
            let data = TensorData::new(src.clone(), shape);
            let back = A::accel_download(A::accel_upload(data.clone(), device).unwrap()).unwrap();
            assert!(
                back.bytes[..] == data.bytes[..],
                "f32 upload of {n} values (round {round}) differs"
            );
            for (up, expected, dtype) in held {
                let back = A::accel_download(up).unwrap();
                assert_eq!(back.dtype, dtype, "n = {n}");
                assert!(
                    back.bytes[..] == expected.bytes[..],
                    "{dtype:?} cast upload of {n} values (round {round}) differs"
                );
            }
        }
    }
}

/// Several operands in one transfer (`accel_upload_cast_all`, parts of one device buffer) come
/// back bit for bit, each as its own upload would: parts from one value to several staging
/// chunks, so that parts start and end inside chunks and a chunk holds several parts, every
/// other part in another dtype (f16 beside bf16, as a forward's weight goes up for its gradient). Twice
/// with fresh values (the second round may reuse the first's device buffer); all parts of a
/// round stay alive until each is read, and each is read on its own.
fn uploads_in_one_transfer_round_trip<A: burn_hetero::Accelerator>(
    device: &A::Device,
    dtypes: &[DType],
) {
    let mut rng = rng_for("uploads in one transfer");
    let lens = [4097usize, 1, 2304, (1 << 20) + 1, 129, 3_500_001];
    for (d, &dtype) in dtypes.iter().enumerate() {
        for round in 0..2 {
            let sources: Vec<Vec<f32>> = lens
                .iter()
                .map(|&n| random_vec(&mut rng, n, -300.0, 300.0))
                .collect();
            // The dtype under test, with every other part in another where there is one.
            let dtype_of = |i: usize| {
                if i % 2 == 1 {
                    dtypes[(d + 1) % dtypes.len()]
                } else {
                    dtype
                }
            };
            let operands: Vec<(&[f32], burn::tensor::Shape, DType)> = sources
                .iter()
                .enumerate()
                .map(|(i, src)| (&src[..], burn::tensor::Shape::new([src.len()]), dtype_of(i)))
                .collect();
            let up = A::accel_upload_cast_all(&operands, device).unwrap();
            assert_eq!(up.len(), lens.len());
            for (i, (tensor, src)) in up.into_iter().zip(&sources).enumerate() {
                let dtype = dtype_of(i);
                let expected = TensorData::new(src.clone(), [src.len()]).convert_dtype(dtype);
                let back = A::accel_download(tensor).unwrap();
                assert_eq!(back.dtype, dtype);
                assert_eq!(back.shape, expected.shape, "part {i}");
                let first_diff = back
                    .bytes
                    .iter()
                    .zip(expected.bytes.iter())
                    .position(|(a, b)| a != b);
                assert!(
                    back.bytes[..] == expected.bytes[..],
                    "{dtype:?} part {i} of {} values (round {round}) differs: {} against {} \
                     bytes, first at byte {first_diff:?}",
                    src.len(),
                    back.bytes.len(),
                    expected.bytes.len()
                );
            }
        }
    }
}

#[test]
fn uploads_in_one_transfer_bit_for_bit() {
    uploads_in_one_transfer_round_trip::<Accel>(
        &Default::default(),
        &[DType::F16, DType::BF16, DType::F32],
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_uploads_in_one_transfer_bit_for_bit() {
    uploads_in_one_transfer_round_trip::<burn_hetero::CudaAccelerator>(
        &Default::default(),
        &[DType::F16, DType::BF16, DType::F32],
    );
}

#[test]
fn uploads_round_trip_bit_for_bit() {
    uploads_round_trip::<Accel>(&Default::default(), &[DType::F16, DType::BF16, DType::F32]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_uploads_round_trip_bit_for_bit() {
    uploads_round_trip::<burn_hetero::CudaAccelerator>(
        &Default::default(),
        &[DType::F16, DType::BF16, DType::F32],
    );
}
