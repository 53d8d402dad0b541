//! Models and data for burn-hetero: the networks of the original study and the loaders that feed
//! them.
//!
//! Everything here is generic over `B: Backend`, so the same model trains on
//! `Autodiff<NdArray>`, `Autodiff<Hetero<..>>` or `Autodiff<Cuda>` with no change but the type.
//!
//! - [`mnist_net`]: the study's MNIST net (2 conv + 2 linear layers);
//! - [`resnet`]: the CIFAR ResNets of He et al. 2016 (ResNet20 ... ResNet1202);
//! - [`data`]: IDX (MNIST, Fashion-MNIST) and CIFAR-10 readers, the bundled MNIST digits, and a
//!   batcher with the study's augmentation;
//! - [`train`]: the trainer (SGD with momentum, schedules, evaluation), with [`checkpoint`]s;
//! - [`cli`]: the `hetero` command; [`bench`]: its step-time matrix.

#![warn(missing_docs)]

pub mod bench;
pub mod chart;
pub mod checkpoint;
pub mod cli;
pub mod data;
pub mod mnist_net;
pub mod resnet;
pub mod train;

pub use mnist_net::MnistNet;
pub use resnet::{ResNet, ResNetConfig, ResNetConfigError, Shortcut};

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor};

/// An image classifier, so that a trainer can be written once for every model of this crate.
pub trait Classifier<B: Backend> {
    /// Class scores `[N, classes]` of images `[N, C, H, W]`; the predicted class is their argmax.
    fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2>;

    /// The mean loss of a batch, from the output of [`Classifier::forward`] and the true classes
    /// `[N]`. It takes the scores rather than the images so that a trainer that also wants the
    /// accuracy runs the forward pass once.
    fn loss(&self, scores: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1>;
}

/// A backend with the ops this crate's models run as single ops with their own backward (batch
/// norm, and the log-softmax of the loss): every backend has them, `Hetero`'s run as fused CPU
/// passes.
pub trait ModelBackend:
    burn_hetero::norm::BatchNormBackend + burn_hetero::softmax::LogSoftmaxBackend
{
}

impl<B: burn_hetero::norm::BatchNormBackend + burn_hetero::softmax::LogSoftmaxBackend> ModelBackend
    for B
{
}

/// Mean negative log-likelihood of `targets` `[N]` under `log_probs` `[N, classes]` (rows of
/// log-probabilities, e.g. a log-softmax): `-mean_i log_probs[i, targets[i]]`. Returns a
/// one-element tensor.
pub fn nll_loss<B: Backend>(log_probs: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    let picked = log_probs.gather(1, targets.unsqueeze_dim(1));
    picked.mean().neg()
}

/// Any model of this crate, so that a program that picks the model at run time compiles its
/// training loop once per backend rather than once per model and backend.
// A model is built once per run, so the size of the enum does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(burn::module::Module, Debug)]
pub enum AnyModel<B: Backend> {
    /// The MNIST net.
    Mnist(MnistNet<B>),
    /// A CIFAR ResNet.
    ResNet(ResNet<B>),
}

impl<B: ModelBackend> Classifier<B> for AnyModel<B> {
    fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        match self {
            AnyModel::Mnist(m) => m.forward(images),
            AnyModel::ResNet(m) => m.forward(images),
        }
    }

    fn loss(&self, scores: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        match self {
            AnyModel::Mnist(m) => m.loss(scores, targets),
            AnyModel::ResNet(m) => m.loss(scores, targets),
        }
    }
}
