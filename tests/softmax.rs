//! `softmax::log_softmax`: values and input gradients against an f64 reference on every CPU
//! path (the fused row pass of `Hetero` on burn-flex and burn-ndarray, the tensor-op default on
//! burn-ndarray), and one op each way in a profile.

use crate::common::*;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use burn_autodiff::Autodiff;
use burn_hetero::HeteroConfig;
use burn_hetero::softmax::{LogSoftmaxBackend, log_softmax};

/// Log-softmax of each row and the gradient of `Σ w · log_softmax(x)` with respect to `x`, in
/// f64: `w - softmax(x) · Σ w` per row.
fn reference(x: &[f32], w: &[f32], width: usize) -> (Vec<f64>, Vec<f64>) {
    let mut out = Vec::with_capacity(x.len());
    let mut grad = Vec::with_capacity(x.len());
    for (row, w) in x.chunks(width).zip(w.chunks(width)) {
        let max = row
            .iter()
            .map(|&v| f64::from(v))
            .fold(f64::NEG_INFINITY, f64::max);
        let log_sum = max
            + row
                .iter()
                .map(|&v| (f64::from(v) - max).exp())
                .sum::<f64>()
                .ln();
        let w_sum: f64 = w.iter().map(|&v| f64::from(v)).sum();
        for (&v, &wv) in row.iter().zip(w) {
            let y = f64::from(v) - log_sum;
            out.push(y);
            grad.push(f64::from(wv) - y.exp() * w_sum);
        }
    }
    (out, grad)
}

fn check<B>(label: &str, rng: &mut TestRng, rows: usize, width: usize, scale: f32)
where
    B: AutodiffBackend + LogSoftmaxBackend,
{
    let device = Default::default();
    let mut xs = random_vec(rng, rows * width, -scale, scale);
    // A row of equal logits, where every class gets 1/width.
    if rows > 1 {
        xs[width..2 * width].fill(0.75 * scale);
    }
    let ws = random_vec(rng, rows * width, -1.0, 1.0);
    let x = Tensor::<B, 2>::from_data(TensorData::new(xs.clone(), [rows, width]), &device)
        .require_grad();
    let w = Tensor::<B, 2>::from_data(TensorData::new(ws.clone(), [rows, width]), &device);
    let y = log_softmax(x.clone());
    let grads = (y.clone() * w).sum().backward();
    let got_y = y.into_data().to_vec::<f32>().unwrap();
    let got_dx = x.grad(&grads).unwrap().into_data().to_vec::<f32>().unwrap();
    let (want_y, want_dx) = reference(&xs, &ws, width);
    assert!(
        got_y.iter().chain(&got_dx).all(|v| v.is_finite()),
        "{label}: not finite"
    );
    let (ey, edx) = (rel_l2(&got_y, &want_y), rel_l2(&got_dx, &want_dx));
    assert!(
        ey < 1e-5 && edx < 1e-5,
        "{label} [{rows},{width}] scale {scale}: output {ey:e}, gradient {edx:e} (relative L2)"
    );
}

#[test]
fn log_softmax_matches_f64_on_every_cpu_path() {
    let _s = settings(HeteroConfig::cpu_only());
    let mut rng = rng_for("log softmax");
    // A classifier's logits, a wide row, and logits large enough that exp overflows f32
    // without the row's maximum taken out first.
    for (rows, width, scale) in [(32, 10, 4.0), (3, 1000, 8.0), (5, 7, 120.0)] {
        check::<Autodiff<HeteroFlex>>("hetero flex", &mut rng, rows, width, scale);
        check::<Autodiff<burn_hetero::Hetero<N, Accel>>>(
            "hetero ndarray",
            &mut rng,
            rows,
            width,
            scale,
        );
        check::<Autodiff<N>>("ndarray (tensor ops)", &mut rng, rows, width, scale);
    }
}

/// On `Hetero` the log-softmax is one CPU op forward and one backward, not burn's composition.
#[test]
fn log_softmax_is_one_op_each_way_on_hetero() {
    use burn_hetero::profile;
    let _s = settings(HeteroConfig::cpu_only());
    let mut rng = rng_for("log softmax profile");
    type B = Autodiff<burn_hetero::Hetero<N, Accel>>;
    let device = Default::default();
    let x = float::<B, 2>(&mut rng, &device, [16, 10]).require_grad();
    profile::reset_profile();
    profile::set_profiling(true);
    let grads = log_softmax(x.clone()).sum().backward();
    let _ = x.grad(&grads).unwrap().into_data();
    profile::set_profiling(false);
    let p = profile::profile();
    profile::reset_profile();
    let calls = |name: &str| {
        p.cpu_ops
            .iter()
            .filter(|o| o.name == name)
            .map(|o| o.calls)
            .sum::<u64>()
    };
    assert_eq!(calls("log_softmax_rows"), 1, "\n{p}");
    assert_eq!(calls("log_softmax_rows_backward"), 1, "\n{p}");
    for composed in ["float_exp", "float_log", "float_max_dim"] {
        assert_eq!(calls(composed), 0, "{composed} ran\n{p}");
    }
}
