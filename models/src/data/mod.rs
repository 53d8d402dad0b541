//! Data: readers for the IDX files of MNIST and Fashion-MNIST and for CIFAR-10's binary batches,
//! and a batcher that turns examples into normalised, optionally padded and augmented tensors.
//!
//! Everything is read whole into memory (70,000 MNIST digits are 55 MB, CIFAR-10 180 MB): the
//! trainer then shuffles and batches without touching the disk.

mod batcher;
mod cifar;
mod error;
mod idx;

pub use batcher::{Augmentation, CropFlip, ImageBatcher, Normalization, seeded_rng};
pub use cifar::{CIFAR10_SHAPE, load_cifar10, read_cifar10_file};
pub use error::DataError;
pub use idx::{IdxImages, bundled_mnist, load_idx, load_idx_dir, read_idx_images, read_idx_labels};

/// Which part of a data set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// The training examples.
    Train,
    /// The held-out test examples.
    Test,
}

/// The shape of one image: channels, height, width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageShape {
    /// Channels (1 for grey, 3 for RGB).
    pub channels: usize,
    /// Rows.
    pub height: usize,
    /// Columns.
    pub width: usize,
}

impl ImageShape {
    /// A shape of `channels` × `height` × `width`.
    pub const fn new(channels: usize, height: usize, width: usize) -> Self {
        Self {
            channels,
            height,
            width,
        }
    }

    /// Bytes (pixels) in one image.
    pub const fn num_pixels(&self) -> usize {
        self.channels * self.height * self.width
    }
}

/// One labelled image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    /// Pixels, channel-major then row-major (`[C, H, W]`, the layout of both file formats and
    /// of Burn's image tensors), 0..=255.
    pub image: Vec<u8>,
    /// Class index.
    pub label: u8,
}

/// Labelled images of one shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageDataset {
    /// The shape of every image.
    pub shape: ImageShape,
    /// The examples, in file order.
    pub examples: Vec<Example>,
}

impl ImageDataset {
    /// Number of examples.
    pub fn len(&self) -> usize {
        self.examples.len()
    }

    /// Whether there are no examples.
    pub fn is_empty(&self) -> bool {
        self.examples.is_empty()
    }
}
