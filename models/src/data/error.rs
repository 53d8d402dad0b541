use std::io;
use std::path::{Path, PathBuf};

/// Why a data file could not be read. Every variant names the file it is about.
///
/// Sizes are those of the file's content, after decompression for gzip files.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// The file does not exist.
    #[error("{}: file not found", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// Reading the file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The file starts like gzip but its stream is corrupt or cut short.
    #[error("{}: invalid gzip data: {source}", path.display())]
    Gzip {
        /// The file.
        path: PathBuf,
        /// The decompressor's error.
        source: io::Error,
    },
    /// The file's magic number is not the one of the expected content.
    #[error(
        "{}: bad magic number {found:#010x}, expected {expected:#010x} ({what})",
        path.display()
    )]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The magic number read.
        found: u32,
        /// The magic number of the expected content.
        expected: u32,
        /// What the expected content is.
        what: &'static str,
    },
    /// The file is shorter than its header (or its record size) says.
    #[error("{}: truncated: {expected} bytes expected, {actual} found", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes needed.
        expected: u64,
        /// Bytes there.
        actual: u64,
    },
    /// The file is longer than its header says.
    #[error(
        "{}: {} unexpected bytes after the {expected} bytes the header describes",
        path.display(),
        actual - expected
    )]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Bytes the header describes.
        expected: u64,
        /// Bytes there.
        actual: u64,
    },
    /// An image file and its label file disagree on the number of examples.
    #[error(
        "{} has {image_count} images but {} has {label_count} labels",
        images.display(),
        labels.display()
    )]
    CountMismatch {
        /// The image file.
        images: PathBuf,
        /// Images in it.
        image_count: usize,
        /// The label file.
        labels: PathBuf,
        /// Labels in it.
        label_count: usize,
    },
    /// A label outside the classes of the format (CIFAR-10 has 10).
    #[error("{}: label {label} of record {record} is out of range 0..{classes}", path.display())]
    BadLabel {
        /// The file.
        path: PathBuf,
        /// The index of the record in the file.
        record: usize,
        /// The label read.
        label: u8,
        /// The number of classes of the format.
        classes: u8,
    },
}

impl DataError {
    /// The error for a failed read of `path`: [`DataError::Missing`] where the file does not
    /// exist, so that the most common mistake gets the clearest message.
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::NotFound {
            DataError::Missing {
                path: path.to_path_buf(),
            }
        } else {
            DataError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }

    /// The file the error is about (the image file for [`DataError::CountMismatch`]).
    pub fn path(&self) -> &Path {
        match self {
            DataError::Missing { path }
            | DataError::Io { path, .. }
            | DataError::Gzip { path, .. }
            | DataError::BadMagic { path, .. }
            | DataError::Truncated { path, .. }
            | DataError::TrailingBytes { path, .. }
            | DataError::BadLabel { path, .. } => path,
            DataError::CountMismatch { images, .. } => images,
        }
    }
}
