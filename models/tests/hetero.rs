//! The models on the backend they are for, `Autodiff<Hetero<NdArray, Vulkan>>` (lavapipe on
//! machines without a GPU), unchanged: a few SGD steps must lower the loss; and with every op on
//! the CPU, a ResNet's steps follow burn-ndarray's own.
//!
//! Convolution forward runs on the accelerator in f16; the gradients stay on the CPU, since the
//! accelerator's conv gradients are the root crate's to test and cost tens of seconds on
//! lavapipe.

use burn::module::{AutodiffModule, Module};
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use burn_hetero::optim::{FusedSgd, SgdBackend};
use burn_hetero::{HeteroConfig, HeteroVulkan, OpKind, Placement, Precision};
use burn_hetero_models::{Classifier, MnistNet, ResNet, ResNetConfig};
use std::sync::Mutex;

type H = burn::backend::Autodiff<HeteroVulkan>;

/// The tests here set `HeteroVulkan`'s global placements: one at a time.
static SETTINGS: Mutex<()> = Mutex::new(());

/// Losses of `steps` steps of `optimizer` (learning rate 0.05) on one batch of `images` with
/// labels 0, 1, ...
fn train_losses<B, M, O>(
    mut model: M,
    mut optimizer: O,
    images: Tensor<B, 4>,
    steps: usize,
) -> Vec<f32>
where
    B: AutodiffBackend,
    M: Classifier<B> + AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    let n = images.dims()[0];
    let labels = TensorData::new((0..n as i64).collect(), [n]);
    let targets = Tensor::<B, 1, Int>::from_data(labels, &images.device());
    let mut losses = Vec::new();
    for _ in 0..steps {
        let loss = model.loss(model.forward(images.clone()), targets.clone());
        losses.push(loss.clone().into_data().to_vec::<f32>().unwrap()[0]);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(0.05, model, grads);
    }
    losses
}

/// Losses of 4 SGD steps on one random batch of `shape`.
fn losses<M: Classifier<H> + AutodiffModule<H>>(model: M, shape: [usize; 4]) -> Vec<f32> {
    let images = Tensor::<H, 4>::random(shape, Distribution::Normal(0.0, 1.0), &Default::default());
    train_losses(model, SgdConfig::new().init(), images, 4)
}

#[test]
fn models_train_on_hetero_unchanged() {
    let _settings = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    let device = Default::default();
    let config = HeteroConfig::cpu_only().with_placement(
        OpKind::Conv2dForward,
        Placement::accelerator(Precision::F16),
    );
    <HeteroVulkan>::configure(&device, config);
    H::seed(&device, 2);

    let mnist = losses(MnistNet::<H>::new(&device), [4, 1, 28, 28]);
    let config = ResNetConfig::new(8).unwrap().with_in_channels(1).unwrap();
    let resnet = losses(config.init::<H>(&device), [2, 1, 32, 32]);
    for (name, losses) in [("MnistNet", mnist), ("ResNet8", resnet)] {
        assert!(
            losses.windows(2).all(|w| w[1] < w[0]),
            "{name}: losses {losses:?}"
        );
    }
}

/// Losses of ResNet8 (weights from `record`) trained `steps` SGD steps with momentum on `B`, on
/// one batch of `images` (`[n, 1, 32, 32]`).
fn resnet_losses<B>(record: &[u8], images: &[f32], steps: usize) -> Vec<f32>
where
    B: AutodiffBackend + burn_hetero_models::ModelBackend,
    B::InnerBackend: SgdBackend,
{
    let device = Default::default();
    let record = BinBytesRecorder::<FullPrecisionSettings>::default()
        .load(record.to_vec(), &device)
        .expect("the record loads");
    let config = ResNetConfig::new(8).unwrap().with_in_channels(1).unwrap();
    let model: ResNet<B> = config.init::<B>(&device).load_record(record);
    let n = images.len() / (32 * 32);
    let x = Tensor::<B, 4>::from_data(TensorData::new(images.to_vec(), [n, 1, 32, 32]), &device);
    let momentum = MomentumConfig::new().with_momentum(0.9);
    let optimizer = FusedSgd::<B::InnerBackend>::new(Some(&momentum), None).init::<B, ResNet<B>>();
    train_losses(model, optimizer, x, steps)
}

/// ResNet8 with every op on the CPU: on `Hetero<NdArray>` its batch norms, ReLUs, adds and SGD
/// run on burn-ndarray's arrays through the bridge to the fused, threaded passes, on
/// burn-ndarray op by op; from the same weights and batch the losses agree to f32 rounding
/// (the fused batch norm sums in another order) over several steps.
#[test]
fn resnet_on_hetero_ndarray_follows_ndarray() {
    type N = burn::backend::Autodiff<burn_ndarray::NdArray>;
    let _settings = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    let device = Default::default();
    <HeteroVulkan>::configure(&device, HeteroConfig::cpu_only());
    N::seed(&device, 11);
    let config = ResNetConfig::new(8).unwrap().with_in_channels(1).unwrap();
    let record = BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(config.init::<N>(&device).into_record(), ())
        .expect("the record saves");
    let images: Vec<f32> =
        Tensor::<N, 4>::random([4, 1, 32, 32], Distribution::Normal(0.0, 1.0), &device)
            .into_data()
            .to_vec()
            .unwrap();
    let ours = resnet_losses::<H>(&record, &images, 4);
    let theirs = resnet_losses::<N>(&record, &images, 4);
    <HeteroVulkan>::configure(&device, HeteroConfig::default());
    for (step, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert!(a.is_finite(), "step {step}: loss {a}");
        assert!(
            (a - b).abs() <= 1e-4 * b.abs().max(1.0),
            "step {step}: Hetero<NdArray> loss {a}, burn-ndarray {b} (all: {ours:?} vs {theirs:?})"
        );
    }
    assert!(ours[3] < ours[0], "the loss did not fall: {ours:?}");
}
