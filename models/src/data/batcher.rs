//! Turning examples into tensors: centre padding (28×28 digits to the ResNets' 32×32), the
//! study's augmentation (random crop with 4-pixel padding, optional horizontal flip), and
//! per-channel normalisation.

use std::borrow::Borrow;

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Example, ImageShape};

/// A seeded generator for [`ImageBatcher::augmented_batch`]: the same seed gives the same crops
/// and flips (with this crate's locked `rand`).
pub fn seeded_rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Per-channel normalisation: a pixel `p` of channel `c` becomes `(p / 255 - mean[c]) / std[c]`.
/// One value stands for every channel.
#[derive(Clone, Debug, PartialEq)]
pub struct Normalization {
    /// Mean of each channel, in units of the pixel range (0..=1).
    pub mean: Vec<f32>,
    /// Standard deviation of each channel, in the same units.
    pub std: Vec<f32>,
}

impl Normalization {
    /// The usual MNIST statistics (training set): mean 0.1307, std 0.3081.
    pub fn mnist() -> Self {
        Self::new(vec![0.1307], vec![0.3081])
    }

    /// Fashion-MNIST's (training set): mean 0.2860, std 0.3530.
    pub fn fashion_mnist() -> Self {
        Self::new(vec![0.2860], vec![0.3530])
    }

    /// CIFAR-10's (training set): mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616).
    pub fn cifar10() -> Self {
        Self::new(vec![0.4914, 0.4822, 0.4465], vec![0.2470, 0.2435, 0.2616])
    }

    /// Only scales to 0..=1.
    pub fn unit_range() -> Self {
        Self::new(vec![0.0], vec![1.0])
    }

    /// Normalisation with the given per-channel statistics. Panics if the lengths differ, or a
    /// standard deviation is not positive.
    pub fn new(mean: Vec<f32>, std: Vec<f32>) -> Self {
        assert_eq!(
            mean.len(),
            std.len(),
            "normalisation: {} means but {} standard deviations",
            mean.len(),
            std.len()
        );
        assert!(
            std.iter().all(|&s| s > 0.0),
            "normalisation: standard deviations must be positive, got {std:?}"
        );
        Self { mean, std }
    }

    /// The statistics of `examples` (all pixels of each channel), for data sets without
    /// published ones; a constant channel gets standard deviation 1. Summed in f64, in which
    /// millions of pixels add up without rounding drift.
    pub fn of_examples(examples: &[Example], shape: ImageShape) -> Self {
        let plane = shape.height * shape.width;
        let mut sum = vec![0f64; shape.channels];
        let mut sum_sq = vec![0f64; shape.channels];
        for example in examples {
            for (c, pixels) in example.image.chunks_exact(plane).enumerate() {
                for &p in pixels {
                    let v = p as f64 / 255.0;
                    sum[c] += v;
                    sum_sq[c] += v * v;
                }
            }
        }
        let count = (examples.len() * plane).max(1) as f64;
        let mean: Vec<f64> = sum.iter().map(|s| s / count).collect();
        let std = sum_sq
            .iter()
            .zip(&mean)
            .map(|(sq, m)| (sq / count - m * m).max(0.0).sqrt() as f32)
            // A constant channel keeps its scale rather than dividing by zero.
            .map(|std| if std > 0.0 { std } else { 1.0 })
            .collect();
        Self::new(mean.iter().map(|&m| m as f32).collect(), std)
    }

    fn channel(&self, c: usize) -> (f32, f32) {
        if self.mean.len() == 1 {
            (self.mean[0], self.std[0])
        } else {
            (self.mean[c], self.std[c])
        }
    }
}

/// The training augmentation of the study's trainer (the standard CIFAR one of He et al. 2016):
/// zero-pad by `crop_padding` pixels on each side, crop back to the original size at a random
/// offset, and mirror left-right with probability 1/2 if `horizontal_flip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Augmentation {
    /// Pixels of zero padding on each side before the random crop (0: no crop).
    pub crop_padding: usize,
    /// Whether to mirror half of the images left-right.
    pub horizontal_flip: bool,
}

/// One draw of an [`Augmentation`]: where the crop starts in the padded image, and whether to
/// mirror it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CropFlip {
    /// First row of the crop in the padded image, `0..=2 * crop_padding` (`crop_padding`: no
    /// shift).
    pub top: usize,
    /// First column of the crop in the padded image, `0..=2 * crop_padding`.
    pub left: usize,
    /// Whether the crop is mirrored left-right.
    pub flip: bool,
}

impl Augmentation {
    /// For natural images (CIFAR): 4-pixel crop padding and flips.
    pub fn cifar() -> Self {
        Self {
            crop_padding: 4,
            horizontal_flip: true,
        }
    }

    /// For digits and other glyphs: 4-pixel crop padding, no flips, since a mirrored digit is
    /// not the same digit (or not a digit).
    pub fn digits() -> Self {
        Self {
            crop_padding: 4,
            horizontal_flip: false,
        }
    }

    /// Draws a crop offset (uniform over the `(2p + 1)²` offsets) and a flip.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> CropFlip {
        let max_offset = 2 * self.crop_padding;
        CropFlip {
            top: rng.random_range(0..=max_offset),
            left: rng.random_range(0..=max_offset),
            flip: self.horizontal_flip && rng.random_bool(0.5),
        }
    }

    /// Applies one draw to `image` (`[C, H, W]` of `shape`): output pixel `(c, y, x)` is input
    /// pixel `(c, y + top - p, x' + left - p)` with `x' = W - 1 - x` when flipped, else `x`,
    /// and 0 where that falls outside the image (the padding).
    pub fn apply(&self, image: &[u8], shape: ImageShape, draw: CropFlip) -> Vec<u8> {
        assert_eq!(image.len(), shape.num_pixels(), "image size against shape");
        let pad = self.crop_padding as isize;
        let (height, width) = (shape.height as isize, shape.width as isize);
        let mut out = vec![0u8; image.len()];
        for c in 0..shape.channels {
            let plane = c * shape.height * shape.width;
            for y in 0..height {
                let source_y = y + draw.top as isize - pad;
                if !(0..height).contains(&source_y) {
                    continue;
                }
                for x in 0..width {
                    let x_in_crop = if draw.flip { width - 1 - x } else { x };
                    let source_x = x_in_crop + draw.left as isize - pad;
                    if (0..width).contains(&source_x) {
                        out[plane + (y * width + x) as usize] =
                            image[plane + (source_y * width + source_x) as usize];
                    }
                }
            }
        }
        out
    }
}

/// Turns examples into a batch `(images [N, C, H, W], labels [N])` on a device: centre padding to
/// a larger size (optional), augmentation (only in [`ImageBatcher::augmented_batch`]), then
/// normalisation.
///
/// Padding and augmentation pad with pixel value 0 before normalising, i.e. with black, which is
/// MNIST's background, as torchvision's `RandomCrop(32, padding=4)` does before `Normalize`.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageBatcher {
    input: ImageShape,
    output: ImageShape,
    normalization: Normalization,
    augmentation: Option<Augmentation>,
}

impl ImageBatcher {
    /// A batcher for images of `input` shape. Panics if `normalization` has neither one value
    /// nor one per channel.
    pub fn new(input: ImageShape, normalization: Normalization) -> Self {
        assert!(
            normalization.mean.len() == 1 || normalization.mean.len() == input.channels,
            "normalisation has {} channels, the images {}",
            normalization.mean.len(),
            input.channels
        );
        Self {
            input,
            output: input,
            normalization,
            augmentation: None,
        }
    }

    /// Zero-pads every image to `height` × `width`, centred (28×28 digits to 32×32 for the
    /// ResNets: 2 pixels each side). Panics if smaller than the input.
    pub fn with_padding_to(mut self, height: usize, width: usize) -> Self {
        assert!(
            height >= self.input.height && width >= self.input.width,
            "cannot pad {}x{} images to {height}x{width}",
            self.input.height,
            self.input.width
        );
        self.output = ImageShape::new(self.input.channels, height, width);
        self
    }

    /// Sets the augmentation of [`ImageBatcher::augmented_batch`], applied after the padding.
    pub fn with_augmentation(mut self, augmentation: Augmentation) -> Self {
        self.augmentation = Some(augmentation);
        self
    }

    /// The shape of the images of a batch (after padding).
    pub fn output_shape(&self) -> ImageShape {
        self.output
    }

    /// A batch without augmentation, for evaluation.
    pub fn batch<B: Backend, E: Borrow<Example>>(
        &self,
        examples: &[E],
        device: &B::Device,
    ) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
        self.build(examples, None::<&mut StdRng>, device)
    }

    /// A batch with the augmentation drawn from `rng`, one draw per example in order (without
    /// an augmentation set, the same as [`ImageBatcher::batch`]).
    pub fn augmented_batch<B: Backend, E: Borrow<Example>, R: Rng + ?Sized>(
        &self,
        examples: &[E],
        rng: &mut R,
        device: &B::Device,
    ) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
        self.build(examples, Some(rng), device)
    }

    fn build<B: Backend, E: Borrow<Example>, R: Rng + ?Sized>(
        &self,
        examples: &[E],
        mut rng: Option<&mut R>,
        device: &B::Device,
    ) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
        let out = self.output;
        let plane = out.height * out.width;
        let mut pixels = Vec::with_capacity(examples.len() * out.num_pixels());
        let mut labels = Vec::with_capacity(examples.len());
        for example in examples {
            let example = example.borrow();
            assert_eq!(
                example.image.len(),
                self.input.num_pixels(),
                "example of {} pixels for images of shape {:?}",
                example.image.len(),
                self.input
            );
            let mut image = self.pad(&example.image);
            if let (Some(augmentation), Some(rng)) = (&self.augmentation, rng.as_deref_mut()) {
                image = augmentation.apply(&image, out, augmentation.sample(rng));
            }
            for (c, channel) in image.chunks_exact(plane).enumerate() {
                let (mean, std) = self.normalization.channel(c);
                pixels.extend(channel.iter().map(|&p| (p as f32 / 255.0 - mean) / std));
            }
            labels.push(example.label as i64);
        }
        let n = examples.len();
        let images = Tensor::from_data(
            TensorData::new(pixels, [n, out.channels, out.height, out.width]),
            device,
        );
        let labels = Tensor::from_data(TensorData::new(labels, [n]), device);
        (images, labels)
    }

    /// Centre zero padding from the input to the output shape (a copy even without padding, to
    /// keep one path).
    fn pad(&self, image: &[u8]) -> Vec<u8> {
        let (input, output) = (self.input, self.output);
        if input == output {
            return image.to_vec();
        }
        let top = (output.height - input.height) / 2;
        let left = (output.width - input.width) / 2;
        let mut out = vec![0u8; output.num_pixels()];
        for c in 0..input.channels {
            for y in 0..input.height {
                let from = (c * input.height + y) * input.width;
                let to = (c * output.height + y + top) * output.width + left;
                out[to..to + input.width].copy_from_slice(&image[from..from + input.width]);
            }
        }
        out
    }
}
