//! The fused SGD step (`burn_hetero::optim`) against burn-optim's `Sgd`, bit for bit: on
//! `Hetero<Flex, _>` (one threaded pass, in place where the buffers are unshared), on strided
//! views there (the op-by-op form), on `Hetero<NdArray, _>` and on burn-flex itself; and the
//! optimizer state of a checkpoint written by either optimizer loading into the other.

use crate::common::*;
use burn::module::AutodiffModule;
use burn::nn::{Linear, LinearConfig};
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer, SgdConfig, SimpleOptimizer};
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_autodiff::Autodiff;
use burn_hetero::optim::{FusedSgd, SgdBackend};

type HF = burn_hetero::Hetero<burn_flex::Flex, Accel>;
type HN = burn_hetero::Hetero<N, Accel>;

/// The optimizer settings tried: burn-optim's defaults for dampening (0.1) with decay, Nesterov
/// without dampening, decay alone, neither.
fn settings_tried() -> Vec<(
    &'static str,
    Option<MomentumConfig>,
    Option<WeightDecayConfig>,
)> {
    vec![
        (
            "momentum 0.9, dampening 0.1, decay 1e-4",
            Some(MomentumConfig::new().with_momentum(0.9)),
            Some(WeightDecayConfig::new(1e-4)),
        ),
        (
            "Nesterov 0.8, no dampening",
            Some(
                MomentumConfig::new()
                    .with_momentum(0.8)
                    .with_dampening(0.0)
                    .with_nesterov(true),
            ),
            None,
        ),
        ("decay 5e-4", None, Some(WeightDecayConfig::new(5e-4))),
        ("plain", None, None),
    ]
}

fn bits<B: Backend, const D: usize>(t: &Tensor<B, D>) -> Vec<u32> {
    t.to_data()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Three steps of burn-optim's `Sgd` and of `FusedSgd` on `B` from the same parameter, with
/// fresh gradients each step (lr 0.1, 0.05, 0.02); asserts the parameters equal bit for bit
/// after each step. `transposed` hands in strided views of that shape.
fn steps_match<B: SgdBackend>(label: &str, shape: [usize; 2], transposed: bool) {
    let device = Default::default();
    for (name, momentum, decay) in settings_tried() {
        let mut rng = rng_for(&format!("sgd {label} {name} {shape:?}"));
        let view = |t: Tensor<B, 2>| if transposed { t.transpose() } else { t };
        let stored = if transposed {
            [shape[1], shape[0]]
        } else {
            shape
        };
        let mut sgd = SgdConfig::new();
        if let Some(m) = &momentum {
            sgd = sgd.with_momentum(Some(m.clone()));
        }
        if let Some(w) = &decay {
            sgd = sgd.with_weight_decay(Some(w.clone()));
        }
        let theirs = sgd.build::<B>();
        let ours = FusedSgd::<B>::new(momentum.as_ref(), decay.as_ref());
        let start = view(float::<B, 2>(&mut rng, &device, stored));
        let (mut p_theirs, mut p_ours) = (start.clone(), start);
        let (mut s_theirs, mut s_ours) = (None, None);
        for (k, lr) in [0.1, 0.05, 0.02].into_iter().enumerate() {
            let grad = view(float::<B, 2>(&mut rng, &device, stored));
            let (p, s) = theirs.step(lr, p_theirs, grad.clone(), s_theirs);
            (p_theirs, s_theirs) = (p, s);
            let (p, s) = ours.step(lr, p_ours, grad, s_ours);
            (p_ours, s_ours) = (p, s);
            let (a, b) = (bits(&p_ours), bits(&p_theirs));
            let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
            assert_eq!(
                differ,
                0,
                "{label}, {name}, {shape:?}, step {}: {differ} of {} values differ",
                k + 1,
                a.len()
            );
            assert_eq!(s_ours.is_some(), s_theirs.is_some());
        }
        let velocity = s_ours.and_then(|s| s.momentum).map(|m| m.velocity);
        assert_eq!(velocity.is_some(), momentum.is_some(), "{label}, {name}");
    }
}

#[test]
fn fused_sgd_matches_burn_sgd_bit_for_bit() {
    // Large enough to run across threads, and small enough to run on the caller.
    for shape in [[300, 700], [7, 13]] {
        steps_match::<HF>("hetero flex", shape, false);
        steps_match::<HF>("hetero flex, strided", shape, true);
    }
    steps_match::<HN>("hetero ndarray", [300, 700], false);
    steps_match::<burn_flex::Flex>("flex", [7, 13], false);
}

/// A linear layer trained two steps by `first`, its optimizer state saved as the trainer's
/// checkpoints save it and loaded into `second`, then one more step by each of `second` and a
/// `first` that went on: the same weights, bit for bit.
fn continue_after_checkpoint<B, O1, O2>(first: O1, second: O2)
where
    B: AutodiffBackend,
    O1: Optimizer<Linear<B>, B>,
    O2: Optimizer<Linear<B>, B>,
{
    let device = Default::default();
    let mut rng = rng_for("sgd checkpoint");
    let mut model = LinearConfig::new(40, 30).init::<B>(&device);
    let inputs: Vec<Tensor<B, 2>> = (0..3)
        .map(|_| float::<B, 2>(&mut rng, &device, [8, 40]))
        .collect();
    let grads = |model: &Linear<B>, x: &Tensor<B, 2>| {
        let loss = model.forward(x.clone()).powi_scalar(2).mean();
        GradientsParams::from_grads(loss.backward(), model)
    };
    let mut first = first;
    for x in &inputs[..2] {
        let g = grads(&model, x);
        model = first.step(0.1, model, g);
    }
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = Recorder::<B>::record(&recorder, first.to_record(), ()).unwrap();
    let mut second = second.load_record(Recorder::<B>::load(&recorder, bytes, &device).unwrap());
    let went_on = first.step(0.1, model.clone(), grads(&model, &inputs[2]));
    let resumed = second.step(0.1, model.clone(), grads(&model, &inputs[2]));
    assert_eq!(
        bits(&went_on.weight.val().inner()),
        bits(&resumed.weight.val().inner())
    );
    assert_eq!(
        bits(&went_on.valid().weight.val()),
        bits(&resumed.valid().weight.val())
    );
}

#[test]
fn sgd_checkpoints_load_into_either_optimizer() {
    type AB = Autodiff<HF>;
    let momentum = MomentumConfig::new().with_momentum(0.9);
    let decay = WeightDecayConfig::new(1e-4);
    let sgd = || {
        SgdConfig::new()
            .with_momentum(Some(momentum.clone()))
            .with_weight_decay(Some(decay.clone()))
            .init::<AB, Linear<AB>>()
    };
    let fused = || FusedSgd::<HF>::new(Some(&momentum), Some(&decay)).init::<AB, Linear<AB>>();
    continue_after_checkpoint::<AB, _, _>(sgd(), fused());
    continue_after_checkpoint::<AB, _, _>(fused(), sgd());
}

/// The fused step on `Hetero<Flex, _>` updates the parameter's own buffer when nothing else
/// holds it, and leaves a buffer held elsewhere as it was.
#[test]
fn fused_sgd_leaves_shared_buffers_alone() {
    let device = Default::default();
    let mut rng = rng_for("sgd shared");
    let momentum = MomentumConfig::new().with_momentum(0.9);
    let ours = FusedSgd::<HF>::new(Some(&momentum), None);
    let param = float::<HF, 2>(&mut rng, &device, [256, 300]);
    let kept = param.clone();
    let before = bits(&kept);
    let grad = float::<HF, 2>(&mut rng, &device, [256, 300]);
    let (stepped, state) = ours.step(0.1, param, grad.clone(), None);
    assert_eq!(bits(&kept), before, "a shared parameter was written over");
    assert_ne!(bits(&stepped), before);
    let velocity = state.unwrap().momentum.unwrap().velocity;
    assert_eq!(
        bits(&velocity),
        bits(&grad),
        "the first velocity is the gradient"
    );
    // One pass, not the ops written out (the trace is this thread's)...
    let written_out = [
        "FloatTensorOps::float_mul_scalar",
        "FloatTensorOps::float_sub",
    ];
    let called = burn_hetero::ops_called();
    assert!(
        written_out.iter().all(|op| !called.contains(op)),
        "{called:?}"
    );
    // ...which strided views still take.
    let _ = ours.step(0.1, kept.transpose(), grad.transpose(), None);
    let called = burn_hetero::ops_called();
    assert!(
        written_out.iter().all(|op| called.contains(op)),
        "{called:?}"
    );
}

/// A profile names each SGD update by its parameter's shape, so that an update that waited for
/// a weight gradient still being read shows as its own row. Other tests may step meanwhile
/// (the profile is the process's), so only these shapes' counts are checked, and that every
/// update is named.
#[test]
fn profile_names_sgd_updates_by_parameter_shape() {
    use burn_hetero::profile;
    let _s = settings(burn_hetero::HeteroConfig::cpu_only());
    let device = Default::default();
    let mut rng = rng_for("sgd profile");
    let sgd = FusedSgd::<HF>::new(None, None);
    profile::reset_profile();
    profile::set_profiling(true);
    for shape in [[7, 3], [2, 9], [7, 3]] {
        let param = float::<HF, 2>(&mut rng, &device, shape);
        let grad = float::<HF, 2>(&mut rng, &device, shape);
        let before = bits(&param);
        let (stepped, _) = sgd.step(0.1, param, grad, None);
        assert_ne!(bits(&stepped), before, "the update did not run");
    }
    profile::set_profiling(false);
    let p = profile::profile();
    profile::reset_profile();
    let sgd_rows = || p.cpu_op_operands.iter().filter(|o| o.name == "sgd_step");
    let named = |operands: &str| -> u64 {
        sgd_rows()
            .filter(|o| o.operands == operands)
            .map(|o| o.calls)
            .sum()
    };
    assert!(named("[7,3]") >= 2 && named("[2,9]") >= 1, "\n{p}");
    let all = p
        .cpu_ops
        .iter()
        .find(|o| o.name == "sgd_step")
        .map(|o| o.calls);
    let by_operands: u64 = sgd_rows().map(|o| o.calls).sum();
    assert_eq!(
        Some(by_operands),
        all,
        "an update without its parameter's shape\n{p}"
    );
}
