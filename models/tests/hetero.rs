//! The models on the backend they are for, `Autodiff<Hetero<NdArray, Vulkan>>` (lavapipe on
//! machines without a GPU), unchanged: a few SGD steps must lower the loss.
//!
//! Convolution forward runs on the accelerator in f16; the gradients stay on the CPU, since the
//! accelerator's conv gradients are the root crate's to test and cost tens of seconds on
//! lavapipe.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use burn_hetero::{HeteroConfig, HeteroVulkan, OpKind, Placement, Precision};
use burn_hetero_models::{Classifier, MnistNet, ResNetConfig};

type H = burn::backend::Autodiff<HeteroVulkan>;

/// Losses of `steps` SGD steps on one random batch of `shape` with labels 0, 1, ...
fn losses<M: Classifier<H> + AutodiffModule<H>>(mut model: M, shape: [usize; 4]) -> Vec<f32> {
    let device = Default::default();
    let images = Tensor::<H, 4>::random(shape, Distribution::Normal(0.0, 1.0), &device);
    let n = shape[0];
    let labels = TensorData::new((0..n as i64).collect(), [n]);
    let targets = Tensor::<H, 1, Int>::from_data(labels, &device);
    let mut optimizer = SgdConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..4 {
        let loss = model.loss(model.forward(images.clone()), targets.clone());
        losses.push(loss.clone().into_data().to_vec::<f32>().unwrap()[0]);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(0.05, model, grads);
    }
    losses
}

#[test]
fn models_train_on_hetero_unchanged() {
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
