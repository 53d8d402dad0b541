//! The CIFAR ResNets of He et al. 2016 ("Deep Residual Learning for Image Recognition", §4.2):
//! depth 6n+2, i.e. ResNet20 (n = 3), 32, 44, 56, 110 and 1202 (n = 200).
//!
//! ```text
//! [N,C,32,32] -conv 3x3 C->16, BN, ReLU-> [N,16,32,32]
//!             -n basic blocks, 16 channels-> [N,16,32,32]
//!             -n basic blocks, 32 channels, the first with stride 2-> [N,32,16,16]
//!             -n basic blocks, 64 channels, the first with stride 2-> [N,64,8,8]
//!             -global average pool-> [N,64] -linear 64->10-> logits [N,10]
//! ```
//!
//! A basic block is `relu(bn(conv3x3(relu(bn(conv3x3(x))))) + shortcut(x))`, its convolutions
//! without bias (the batch norm that follows has one). Where a block changes the shape (stride 2,
//! more channels), the shortcut is the paper's option A (subsample and zero-pad the new channels,
//! no parameters: the choice of the paper's CIFAR experiments) or option B (1×1 convolution
//! projection and batch norm), see [`Shortcut`].

use std::f64::consts::SQRT_2;

use burn::module::{Initializer, Module};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Slice, Tensor};

use burn_hetero::norm::{BatchNormBackend, batch_norm, batch_norm_relu};
use burn_hetero::softmax::{LogSoftmaxBackend, log_softmax};

use crate::{Classifier, nll_loss};

/// Channels of the three stages.
pub const STAGE_CHANNELS: [usize; 3] = [16, 32, 64];

/// The shortcut of the blocks that change the shape of their input (the first block of stages 2
/// and 3). Blocks that keep the shape always use the identity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Shortcut {
    /// The paper's option A, used in its CIFAR experiments: take every second pixel and append
    /// zero channels. No parameters.
    #[default]
    ZeroPad,
    /// The paper's option B: a strided 1×1 convolution (no bias) and batch norm.
    Projection,
}

/// An invalid [`ResNetConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResNetConfigError {
    /// The depth is not 6n+2 with n ≥ 1.
    #[error(
        "invalid ResNet depth {depth}: the CIFAR ResNets have depth 6n+2 with n >= 1 \
         (8, 14, 20, 26, 32, 44, 56, 110, 1202, ...)"
    )]
    InvalidDepth {
        /// The depth asked for.
        depth: usize,
    },
    /// Zero input channels.
    #[error("a ResNet needs at least one input channel (1 for grey images, 3 for colour)")]
    NoInputChannels,
    /// Zero classes.
    #[error("a ResNet needs at least one class")]
    NoClasses,
}

/// Configuration of a CIFAR ResNet: a validated depth 6n+2, the input channels (3 by default),
/// the classes (10 by default) and the [`Shortcut`] (option A by default).
///
/// ```
/// use burn_hetero_models::{ResNetConfig, Shortcut};
/// let config = ResNetConfig::new(20)?.with_in_channels(1)?.with_shortcut(Shortcut::Projection);
/// assert_eq!(config.blocks_per_stage(), 3);
/// assert!(ResNetConfig::new(21).is_err());
/// # Ok::<(), burn_hetero_models::ResNetConfigError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResNetConfig {
    depth: usize,
    in_channels: usize,
    num_classes: usize,
    shortcut: Shortcut,
}

/// The shape of one basic block, shared by [`ResNetConfig::init`] and
/// [`ResNetConfig::num_params`] so that both describe the same network.
#[derive(Clone, Copy, Debug)]
struct BlockPlan {
    in_channels: usize,
    out_channels: usize,
    stride: usize,
}

impl BlockPlan {
    fn changes_shape(&self) -> bool {
        self.stride != 1 || self.in_channels != self.out_channels
    }
}

impl ResNetConfig {
    /// A ResNet of `depth` layers (6n+2: 20, 32, 44, 56, 110, 1202, ...) with 3 input channels,
    /// 10 classes and option A shortcuts.
    pub fn new(depth: usize) -> Result<Self, ResNetConfigError> {
        if depth < 8 || !(depth - 2).is_multiple_of(6) {
            return Err(ResNetConfigError::InvalidDepth { depth });
        }
        Ok(Self {
            depth,
            in_channels: 3,
            num_classes: 10,
            shortcut: Shortcut::default(),
        })
    }

    /// Sets the input channels (1 for MNIST-like data, 3 for CIFAR).
    pub fn with_in_channels(mut self, in_channels: usize) -> Result<Self, ResNetConfigError> {
        if in_channels == 0 {
            return Err(ResNetConfigError::NoInputChannels);
        }
        self.in_channels = in_channels;
        Ok(self)
    }

    /// Sets the number of classes.
    pub fn with_num_classes(mut self, num_classes: usize) -> Result<Self, ResNetConfigError> {
        if num_classes == 0 {
            return Err(ResNetConfigError::NoClasses);
        }
        self.num_classes = num_classes;
        Ok(self)
    }

    /// Sets the shortcut of the blocks that change shape.
    pub fn with_shortcut(mut self, shortcut: Shortcut) -> Self {
        self.shortcut = shortcut;
        self
    }

    /// The depth: weighted layers on the longest path (convolutions and the linear layer).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// n, the number of basic blocks in each of the three stages: (depth - 2) / 6.
    pub fn blocks_per_stage(&self) -> usize {
        (self.depth - 2) / 6
    }

    /// Input channels.
    pub fn in_channels(&self) -> usize {
        self.in_channels
    }

    /// Number of classes.
    pub fn num_classes(&self) -> usize {
        self.num_classes
    }

    /// The shortcut of the blocks that change shape.
    pub fn shortcut(&self) -> Shortcut {
        self.shortcut
    }

    fn block_plans(&self) -> Vec<BlockPlan> {
        let n = self.blocks_per_stage();
        let mut plans = Vec::with_capacity(3 * n);
        let mut in_channels = STAGE_CHANNELS[0];
        for (stage, &out_channels) in STAGE_CHANNELS.iter().enumerate() {
            for block in 0..n {
                let stride = if stage > 0 && block == 0 { 2 } else { 1 };
                plans.push(BlockPlan {
                    in_channels,
                    out_channels,
                    stride,
                });
                in_channels = out_channels;
            }
        }
        plans
    }

    /// The number of trainable parameters, counted from the architecture without allocating the
    /// model (ResNet1202 has 19.4 M): the figure of the paper and of PyTorch's
    /// `sum(p.numel() for p in model.parameters())`. Batch norm's running mean and variance are
    /// not trained and not counted, unlike in Burn's `Module::num_params`, which includes them.
    pub fn num_params(&self) -> usize {
        // Convs have no bias; each batch norm has a scale and a shift per channel.
        let conv3x3 = |c_in: usize, c_out: usize| c_in * c_out * 9;
        let batch_norm = |c: usize| 2 * c;
        let stem = conv3x3(self.in_channels, STAGE_CHANNELS[0]) + batch_norm(STAGE_CHANNELS[0]);
        let blocks: usize = self
            .block_plans()
            .iter()
            .map(|plan| {
                let (c_in, c_out) = (plan.in_channels, plan.out_channels);
                let residual = conv3x3(c_in, c_out)
                    + batch_norm(c_out)
                    + conv3x3(c_out, c_out)
                    + batch_norm(c_out);
                let projection = if self.shortcut == Shortcut::Projection && plan.changes_shape() {
                    c_in * c_out + batch_norm(c_out)
                } else {
                    0
                };
                residual + projection
            })
            .sum();
        let last = STAGE_CHANNELS[2];
        let linear = last * self.num_classes + self.num_classes;
        stem + blocks + linear
    }

    /// Builds the network with freshly initialised weights from `B`'s generator (seed it with
    /// `B::seed` for reproducible weights).
    pub fn init<B: Backend>(&self, device: &B::Device) -> ResNet<B> {
        let blocks = self
            .block_plans()
            .into_iter()
            .map(|plan| BasicBlock::from_plan(plan, self.shortcut, device))
            .collect();
        ResNet {
            stem: conv_config(self.in_channels, STAGE_CHANNELS[0], 3, 1).init(device),
            stem_bn: BatchNormConfig::new(STAGE_CHANNELS[0]).init(device),
            blocks,
            // Burn's default linear initialisation is PyTorch's (uniform in ±1/√fan_in), which is
            // what the reference CIFAR ResNets use for this layer.
            fc: LinearConfig::new(STAGE_CHANNELS[2], self.num_classes).init(device),
        }
    }
}

/// A convolution of the ResNets: no bias, since batch norm follows and has its own shift;
/// "same" padding for 3×3 (none for the 1×1 projection); Kaiming-normal weights.
///
/// Kaiming normal with gain √2 (for ReLU), std = √2 / √fan, with fan = fan_out = c_out · k²: the
/// mode torchvision's ResNets use, and the form of He et al. 2015 (eq. 14) that keeps the variance
/// of the *gradients* constant through the backward pass. Batch norm after every convolution
/// renormalises the forward activations whatever the weight scale, so it is the backward scale
/// that the initialisation still sets; fan_in and fan_out only differ where a convolution changes
/// the channel count (the stem and the first conv of stages 2 and 3).
fn conv_config(c_in: usize, c_out: usize, kernel: usize, stride: usize) -> Conv2dConfig {
    let pad = kernel / 2;
    Conv2dConfig::new([c_in, c_out], [kernel, kernel])
        .with_stride([stride, stride])
        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
        .with_bias(false)
        .with_initializer(Initializer::KaimingNormal {
            gain: SQRT_2,
            fan_out_only: true,
        })
}

/// A CIFAR ResNet; build it with [`ResNetConfig::init`]. Input `[N, C, H, W]` (32×32 for CIFAR,
/// any size ≥ 1 works thanks to the global pooling), output logits `[N, classes]`.
#[derive(Module, Debug)]
pub struct ResNet<B: Backend> {
    /// The first 3×3 convolution (input channels → 16).
    pub stem: Conv2d<B>,
    /// Its batch norm.
    pub stem_bn: BatchNorm<B>,
    blocks: Vec<BasicBlock<B>>,
    /// The classifier, 64 → classes.
    pub fc: Linear<B>,
}

impl<B: BatchNormBackend> ResNet<B> {
    /// Logits `[N, classes]` of images `[N, C, H, W]`.
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let mut x = batch_norm_relu(&self.stem_bn, self.stem.forward(images), None);
        for block in &self.blocks {
            x = block.forward(x);
        }
        let [batch, channels, _, _] = x.dims();
        let pooled = x.flatten::<3>(2, 3).mean_dim(2).reshape([batch, channels]);
        self.fc.forward(pooled)
    }
}

impl<B: LogSoftmaxBackend> ResNet<B> {
    /// Mean cross-entropy loss (one element) of `targets` `[N]` given the logits of
    /// [`ResNet::forward`]: the negative log-likelihood of their log-softmax (one op each way,
    /// see `burn_hetero::softmax`).
    pub fn loss(&self, logits: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        nll_loss(log_softmax(logits), targets)
    }
}

impl<B: Backend> ResNet<B> {
    /// The basic blocks, in order (3n of them).
    pub fn blocks(&self) -> &[BasicBlock<B>] {
        &self.blocks
    }
}

impl<B: crate::ModelBackend> Classifier<B> for ResNet<B> {
    fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        ResNet::forward(self, images)
    }

    fn loss(&self, scores: Tensor<B, 2>, targets: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        ResNet::loss(self, scores, targets)
    }
}

/// The option B shortcut: strided 1×1 convolution and batch norm.
#[derive(Module, Debug)]
pub struct Projection<B: Backend> {
    /// The 1×1 convolution.
    pub conv: Conv2d<B>,
    /// Its batch norm.
    pub bn: BatchNorm<B>,
}

/// A basic block: two 3×3 convolutions with batch norm, and a shortcut.
#[derive(Module, Debug)]
pub struct BasicBlock<B: Backend> {
    /// The first 3×3 convolution (carries the block's stride).
    pub conv1: Conv2d<B>,
    /// Its batch norm.
    pub bn1: BatchNorm<B>,
    /// The second 3×3 convolution.
    pub conv2: Conv2d<B>,
    /// Its batch norm.
    pub bn2: BatchNorm<B>,
    /// Option B's shortcut where the block changes shape; `None` means identity or option A.
    pub projection: Option<Projection<B>>,
    /// Subsampling step of option A's shortcut (1: none).
    stride: usize,
    /// Zero channels option A's shortcut appends.
    extra_channels: usize,
}

impl<B: Backend> BasicBlock<B> {
    /// A block from `in_channels` to `out_channels` whose first convolution has `stride`, with
    /// `shortcut` where the shape changes (Kaiming-normal weights, no biases).
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        stride: usize,
        shortcut: Shortcut,
        device: &B::Device,
    ) -> Self {
        let plan = BlockPlan {
            in_channels,
            out_channels,
            stride,
        };
        Self::from_plan(plan, shortcut, device)
    }

    fn from_plan(plan: BlockPlan, shortcut: Shortcut, device: &B::Device) -> Self {
        let BlockPlan {
            in_channels,
            out_channels,
            stride,
        } = plan;
        let projection =
            (shortcut == Shortcut::Projection && plan.changes_shape()).then(|| Projection {
                conv: conv_config(in_channels, out_channels, 1, stride).init(device),
                bn: BatchNormConfig::new(out_channels).init(device),
            });
        Self {
            conv1: conv_config(in_channels, out_channels, 3, stride).init(device),
            bn1: BatchNormConfig::new(out_channels).init(device),
            conv2: conv_config(out_channels, out_channels, 3, 1).init(device),
            bn2: BatchNormConfig::new(out_channels).init(device),
            projection,
            stride,
            extra_channels: out_channels - in_channels,
        }
    }
}

impl<B: BatchNormBackend> BasicBlock<B> {
    /// Output `[N, c_out, ⌈H/s⌉, ⌈W/s⌉]` of input `[N, c_in, H, W]`, s the block's stride.
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let hidden = batch_norm_relu(&self.bn1, self.conv1.forward(x.clone()), None);
        let shortcut = match &self.projection {
            Some(projection) => batch_norm(&projection.bn, projection.conv.forward(x)),
            None => self.zero_pad_shortcut(x),
        };
        // relu(bn2(conv2(hidden)) + shortcut), the add and the ReLU inside batch norm's op.
        batch_norm_relu(&self.bn2, self.conv2.forward(hidden), Some(shortcut))
    }
}

impl<B: Backend> BasicBlock<B> {
    /// Option A (identity when the shape does not change). Taking every `stride`-th pixel from
    /// index 0 gives ⌈H/stride⌉ rows, the size the 3×3 convolution with padding 1 outputs. The
    /// zero channels go after the input's, so that the first channels of the output carry the
    /// identity; where they go makes no difference to what the block can learn, since the
    /// residual branch's channels are free to permute.
    pub fn zero_pad_shortcut(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let x = if self.stride == 1 {
            x
        } else {
            let step = Slice::new(0, None, self.stride as isize);
            x.slice([Slice::full(), Slice::full(), step, step])
        };
        if self.extra_channels == 0 {
            return x;
        }
        let [batch, _, height, width] = x.dims();
        let zeros = Tensor::zeros([batch, self.extra_channels, height, width], &x.device());
        Tensor::cat(vec![x, zeros], 1)
    }
}
