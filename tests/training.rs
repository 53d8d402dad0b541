//! A few SGD steps of the small CNN: `Autodiff<Hetero>` learns like `Autodiff<NdArray>`.

use crate::common::*;
use crate::model::{SmallCnn, batch};
use burn::optim::{GradientsParams, Optimizer, SgdConfig, momentum::MomentumConfig};
use burn::tensor::ElementConversion;
use burn::tensor::backend::AutodiffBackend;
use burn_autodiff::Autodiff;
use burn_hetero::{HeteroConfig, OpKind, Placement, Precision};

/// Losses of `steps` SGD steps on fresh batches drawn from the seed `name`.
pub fn losses<B: AutodiffBackend>(name: &str, steps: usize) -> Vec<f32> {
    let device = Default::default();
    let mut model = SmallCnn::<B>::new(&device, 5);
    let mut optim = SgdConfig::new()
        .with_momentum(Some(MomentumConfig::new().with_momentum(0.9)))
        .init();
    let mut rng = rng_for(name);
    (0..steps)
        .map(|_| {
            let (x, y) = batch::<B>(&mut rng, &device, 16);
            let loss = model.loss(x, y);
            let value: f32 = loss.clone().into_scalar().elem();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(0.05, model.clone(), grads);
            value
        })
        .collect()
}

fn mean(v: &[f32]) -> f32 {
    v.iter().sum::<f32>() / v.len() as f32
}

/// The loss curve of `config` follows the CPU's: same start, and the mean of the last steps
/// within 10% of the CPU's (both must have dropped well below the start).
fn assert_trains_like_cpu<A: burn_hetero::Accelerator>(config: HeteroConfig, label: &str) {
    const STEPS: usize = 14;
    let _s = settings(config);
    let name = format!("training {label}");
    let before = burn_hetero::stats();
    let reference = losses::<Autodiff<N>>(&name, STEPS);
    let hetero = losses::<Autodiff<burn_hetero::Hetero<N, A>>>(&name, STEPS);
    let delta = burn_hetero::stats().since(&before);
    eprintln!("{label}:\n{delta}");
    for op in [
        OpKind::Conv2dForward,
        OpKind::Conv2dInputGrad,
        OpKind::Conv2dWeightGrad,
    ] {
        assert_eq!(
            delta.total(op).calls,
            delta.accelerator_calls(op),
            "{label}: {op} left the accelerator"
        );
    }
    eprintln!("{label}: ndarray {reference:.3?}\n{label}: hetero  {hetero:.3?}");
    assert!(
        hetero.iter().all(|l| l.is_finite()),
        "{label}: non-finite loss"
    );
    assert!(
        (hetero[0] - reference[0]).abs() < 0.01 * reference[0],
        "{label}: first loss"
    );
    let (tail_n, tail_h) = (mean(&reference[STEPS - 4..]), mean(&hetero[STEPS - 4..]));
    assert!(
        tail_n < 0.6 * reference[0],
        "reference did not learn: {reference:?}"
    );
    assert!(
        tail_h < 0.6 * hetero[0],
        "{label}: did not learn: {hetero:?}"
    );
    assert!(
        (tail_h - tail_n).abs() <= 0.1 * tail_n.max(0.05),
        "{label}: end loss {tail_h} vs {tail_n}"
    );
}

#[test]
fn default_placement_trains_like_ndarray() {
    assert_trains_like_cpu::<Accel>(HeteroConfig::default(), "default");
}

/// The default placement on a CUDA GPU (run on the GPU machine with `--ignored`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_default_placement_trains_like_ndarray() {
    assert_trains_like_cpu::<burn_hetero::CudaAccelerator>(HeteroConfig::default(), "cuda default");
}

#[test]
fn every_conv_phase_at_f16_trains_like_ndarray() {
    let f16 = Placement::accelerator(Precision::F16);
    let config = HeteroConfig::default().with_convs(f16);
    assert_trains_like_cpu::<Accel>(config, "all f16");
}
