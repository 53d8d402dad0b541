//! A small CNN with every layer kind the study's networks use: conv (with and without bias),
//! batch norm, ReLU, max pooling, linear, cross-entropy.

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{AvgPool2d, AvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d, Relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

/// Input images: 1 channel, 12x12.
pub const SIDE: usize = 12;
pub const CLASSES: usize = 4;

#[derive(Module, Debug)]
pub struct SmallCnn<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm<B>,
    pool: MaxPool2d,
    /// Replaces `pool` when set: see [`SmallCnn::with_average_pool`].
    average_pool: Option<AvgPool2d>,
    conv2: Conv2d<B>,
    relu: Relu,
    fc: Linear<B>,
}

impl<B: Backend> SmallCnn<B> {
    /// Initialises the model from `B`'s seeded generator: the same seed gives the same weights on
    /// every backend whose random numbers come from burn-ndarray.
    pub fn new(device: &B::Device, seed: u64) -> Self {
        B::seed(device, seed);
        Self {
            conv1: Conv2dConfig::new([1, 6], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device),
            bn1: BatchNormConfig::new(6).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            average_pool: None,
            conv2: Conv2dConfig::new([6, 8], [3, 3])
                .with_bias(false)
                .init(device),
            relu: Relu::new(),
            fc: LinearConfig::new(8 * 4 * 4, CLASSES).init(device),
        }
    }

    /// The same network with average instead of max pooling. Low-precision gradient checks use it:
    /// max pooling picks one element per window, and a pick flipped by f16 rounding moves that
    /// element's gradient by its full value, which no precision-scaled bound can cover.
    pub fn with_average_pool(mut self) -> Self {
        self.average_pool = Some(AvgPool2dConfig::new([2, 2]).with_strides([2, 2]).init());
        self
    }

    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self.conv1.forward(x);
        let x = self.relu.forward(self.bn1.forward(x));
        let x = match &self.average_pool {
            Some(pool) => pool.forward(x),
            None => self.pool.forward(x),
        };
        let x = self.relu.forward(self.conv2.forward(x));
        self.fc.forward(x.flatten(1, 3))
    }

    pub fn loss(&self, x: Tensor<B, 4>, y: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logits = self.forward(x);
        CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits, y)
    }
}

/// A learnable batch: each image holds a bright square in one of four quadrants over noise; the
/// label is the quadrant.
pub fn batch<B: Backend>(
    rng: &mut crate::common::TestRng,
    device: &B::Device,
    n: usize,
) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
    use rand::Rng;
    let mut pixels = vec![0f32; n * SIDE * SIDE];
    let mut labels = vec![0i64; n];
    let half = SIDE / 2;
    for i in 0..n {
        let label = rng.random_range(0..CLASSES);
        labels[i] = label as i64;
        let (r0, c0) = ((label / 2) * half, (label % 2) * half);
        for r in 0..SIDE {
            for c in 0..SIDE {
                let inside =
                    (r0 + 1..r0 + half - 1).contains(&r) && (c0 + 1..c0 + half - 1).contains(&c);
                let noise: f32 = rng.random_range(-0.5..0.5);
                pixels[i * SIDE * SIDE + r * SIDE + c] = noise + if inside { 1.0 } else { 0.0 };
            }
        }
    }
    (
        Tensor::from_data(TensorData::new(pixels, [n, 1, SIDE, SIDE]), device),
        Tensor::from_data(TensorData::new(labels, [n]), device),
    )
}
