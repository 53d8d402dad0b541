//! The MNIST net of the original study (Caffe's LeNet variant): two 5×5 convolutions with max
//! pooling, then two linear layers.
//!
//! ```text
//! [N,1,28,28] -conv 5x5 1->20, ReLU-> [N,20,24,24] -max-pool 2-> [N,20,12,12]
//!             -conv 5x5 20->50, ReLU-> [N,50,8,8]  -max-pool 2-> [N,50,4,4]
//!             -flatten-> [N,800] -linear 800->500, ReLU-> -linear 500->10-> log-softmax [N,10]
//! ```

use burn::module::Module;
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::relu;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

use crate::{Classifier, nll_loss};
use burn_hetero::softmax::{LogSoftmaxBackend, log_softmax};

/// Side of the square input images.
pub const INPUT_SIDE: usize = 28;
/// Number of classes (digits).
pub const NUM_CLASSES: usize = 10;

/// The study's MNIST net. Input `[N, 1, 28, 28]`, output log-probabilities `[N, 10]`.
///
/// Weights use Burn's default initialisation, which is PyTorch's default for these layers
/// (uniform in ±1/√fan_in for weights and biases), the initialisation the study's PyTorch model
/// had.
#[derive(Module, Debug)]
pub struct MnistNet<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    pool: MaxPool2d,
    fc1: Linear<B>,
    fc2: Linear<B>,
}

impl<B: Backend> MnistNet<B> {
    /// Creates the net with freshly initialised weights, drawn from `B`'s generator (seed it with
    /// `B::seed` for reproducible weights).
    pub fn new(device: &B::Device) -> Self {
        Self {
            conv1: Conv2dConfig::new([1, 20], [5, 5]).init(device),
            conv2: Conv2dConfig::new([20, 50], [5, 5]).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            fc1: LinearConfig::new(50 * 4 * 4, 500).init(device),
            fc2: LinearConfig::new(500, NUM_CLASSES).init(device),
        }
    }

    /// Mean negative log-likelihood loss (one element) of `targets` `[N]` under the output of
    /// [`MnistNet::forward`].
    pub fn loss(&self, log_probs: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        nll_loss(log_probs, targets)
    }
}

impl<B: LogSoftmaxBackend> MnistNet<B> {
    /// Log-probabilities `[N, 10]` of images `[N, 1, 28, 28]` (the log-softmax one op each way,
    /// see `burn_hetero::softmax`).
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self.pool.forward(relu(self.conv1.forward(images)));
        let x = self.pool.forward(relu(self.conv2.forward(x)));
        let x = relu(self.fc1.forward(x.flatten(1, 3)));
        log_softmax(self.fc2.forward(x))
    }
}

impl<B: LogSoftmaxBackend> Classifier<B> for MnistNet<B> {
    fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        MnistNet::forward(self, images)
    }

    fn loss(&self, scores: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        MnistNet::loss(self, scores, targets)
    }
}
