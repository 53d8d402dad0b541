//! CIFAR-10's binary version (<https://www.cs.toronto.edu/~kriz/cifar.html>): files of records
//! of 1 label byte (0..=9) and 3072 pixel bytes (the 1024 red, then green, then blue pixels of a
//! 32×32 image, row-major), with no header. The training set is `data_batch_1.bin` ..
//! `data_batch_5.bin`, the test set `test_batch.bin`, 10,000 records each.

use std::path::Path;

use super::idx::read_maybe_gzip;
use super::{DataError, Example, ImageDataset, ImageShape, Split};

/// The shape of a CIFAR-10 image.
pub const CIFAR10_SHAPE: ImageShape = ImageShape::new(3, 32, 32);
const CLASSES: u8 = 10;
const RECORD_LEN: usize = 1 + CIFAR10_SHAPE.num_pixels();

/// Reads one CIFAR-10 binary batch file. Any number of records is accepted (the distributed
/// files have 10,000), but not zero, nor a partial record.
pub fn read_cifar10_file(path: impl AsRef<Path>) -> Result<ImageDataset, DataError> {
    let path = path.as_ref();
    // The format has no magic number; accepting gzip costs nothing and reads a compressed copy.
    let content = read_maybe_gzip(path)?;
    let actual = content.len() as u64;
    if content.is_empty() || content.len() % RECORD_LEN != 0 {
        let whole_records = (content.len() / RECORD_LEN + 1) as u64;
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            expected: whole_records * RECORD_LEN as u64,
            actual,
        });
    }
    let examples = content
        .chunks_exact(RECORD_LEN)
        .enumerate()
        .map(|(record, bytes)| {
            let label = bytes[0];
            if label >= CLASSES {
                return Err(DataError::BadLabel {
                    path: path.to_path_buf(),
                    record,
                    label,
                    classes: CLASSES,
                });
            }
            Ok(Example {
                image: bytes[1..].to_vec(),
                label,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ImageDataset {
        shape: CIFAR10_SHAPE,
        examples,
    })
}

/// Loads a split of CIFAR-10 from the directory of its binary version
/// (`cifar-10-batches-bin`): `data_batch_1.bin` .. `data_batch_5.bin` for [`Split::Train`], in
/// that order, or `test_batch.bin` for [`Split::Test`].
pub fn load_cifar10(dir: impl AsRef<Path>, split: Split) -> Result<ImageDataset, DataError> {
    let dir = dir.as_ref();
    let files: Vec<String> = match split {
        Split::Train => (1..=5).map(|i| format!("data_batch_{i}.bin")).collect(),
        Split::Test => vec!["test_batch.bin".to_string()],
    };
    let mut examples = Vec::new();
    for file in files {
        examples.extend(read_cifar10_file(dir.join(file))?.examples);
    }
    Ok(ImageDataset {
        shape: CIFAR10_SHAPE,
        examples,
    })
}
