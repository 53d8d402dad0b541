//! The MNIST net: size, output, loss, and that it learns.

use burn::module::Module;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use burn_hetero_models::{MnistNet, nll_loss};

use crate::{B, assert_close, trainable_params, values};

#[test]
fn parameter_count_is_that_of_the_layers() {
    let model = MnistNet::<B>::new(&Default::default());
    // conv1 20*1*5*5 + 20, conv2 50*20*5*5 + 50, fc1 800*500 + 500, fc2 500*10 + 10.
    let expected = 520 + 25_050 + 400_500 + 5_010;
    assert_eq!(expected, 431_080);
    assert_eq!(trainable_params(&model), expected);
    assert_eq!(
        model.num_params(),
        expected,
        "no batch norm, so Burn's count is the same"
    );
}

#[test]
fn forward_gives_log_probabilities_of_ten_classes() {
    let device = Default::default();
    B::seed(&device, 1);
    let model = MnistNet::<B>::new(&device);
    let images = Tensor::<B, 4>::random([3, 1, 28, 28], Distribution::Normal(0.0, 1.0), &device);
    let log_probs = model.forward(images);
    assert_eq!(log_probs.dims(), [3, 10]);
    let row_sums = values(log_probs.clone().exp().sum_dim(1));
    assert_close(&row_sums, &[1.0; 3], 1e-5);
    assert!(values(log_probs).iter().all(|&v| v <= 0.0));
}

#[test]
fn nll_loss_of_known_log_probabilities() {
    let device = Default::default();
    let probs = [[0.5f32, 0.25, 0.25], [0.1, 0.6, 0.3]];
    let log_probs = Tensor::<B, 2>::from_data(probs, &device).log();
    let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![0i64, 2], [2]), &device);
    let loss = nll_loss(log_probs.clone(), targets.clone());
    // -(ln 0.5 + ln 0.3) / 2
    let expected = -(0.5f32.ln() + 0.3f32.ln()) / 2.0;
    assert_close(&values(loss.clone()), &[expected], 1e-6);
    // The model's loss is the same function.
    let model = MnistNet::<B>::new(&device);
    assert_close(&values(model.loss(log_probs, targets)), &[expected], 1e-6);
}

#[test]
fn sgd_steps_fit_a_fixed_batch() {
    let device = Default::default();
    B::seed(&device, 7);
    let mut model = MnistNet::<B>::new(&device);
    let images = Tensor::<B, 4>::random([8, 1, 28, 28], Distribution::Normal(0.0, 1.0), &device);
    let targets =
        Tensor::<B, 1, Int>::from_data(TensorData::new((0..8i64).collect(), [8]), &device);
    let mut optimizer = SgdConfig::new().init();
    let mut losses = Vec::new();
    for _ in 0..8 {
        let loss = model.loss(model.forward(images.clone()), targets.clone());
        losses.push(values(loss.clone())[0]);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(0.05, model, grads);
    }
    // Uniform guessing over 10 classes is ln 10 = 2.30; every step must then lower the loss.
    // (The weights differ from run to run: the tests share burn-ndarray's generator.)
    assert!(
        (losses[0] - 10f32.ln()).abs() < 0.3,
        "initial loss {losses:?}"
    );
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "losses {losses:?}");
    assert!(losses[7] < 0.9 * losses[0], "losses {losses:?}");
}
