//! Readers and batcher, on hand-made files in a temporary directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use burn_hetero_models::data::{
    Augmentation, CropFlip, DataError, Example, ImageBatcher, ImageShape, Normalization, Split,
    load_cifar10, load_idx, load_idx_dir, read_cifar10_file, read_idx_images, read_idx_labels,
    seeded_rng,
};
use flate2::Compression;
use flate2::write::GzEncoder;

use crate::{B, assert_close, values};

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// An IDX file's bytes: magic, big-endian sizes, data.
fn idx_bytes(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut bytes = magic.to_be_bytes().to_vec();
    for d in dims {
        bytes.extend(d.to_be_bytes());
    }
    bytes.extend(data);
    bytes
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Three 2x3 images with distinct pixels, and their labels.
fn pixels() -> Vec<u8> {
    (0..18).map(|i| i * 13 + 1).collect()
}
const LABELS: [u8; 3] = [7, 0, 9];

fn images_file() -> Vec<u8> {
    idx_bytes(0x803, &[3, 2, 3], &pixels())
}
fn labels_file() -> Vec<u8> {
    idx_bytes(0x801, &[3], &LABELS)
}

/// Asserts that the error is about `path` and that its message names the file.
#[track_caller]
fn assert_names(err: &DataError, path: &Path) {
    assert_eq!(err.path(), path);
    let message = err.to_string();
    let name = path.file_name().unwrap().to_str().unwrap();
    assert!(
        message.contains(name),
        "message {message:?} does not name {name}"
    );
}

#[test]
fn idx_round_trip_raw_and_gzip() {
    let dir = tempfile::tempdir().unwrap();
    for gz in [false, true] {
        let encode = |b: Vec<u8>| if gz { gzip(&b) } else { b };
        let images = write(dir.path(), &format!("img{gz}"), &encode(images_file()));
        let labels = write(dir.path(), &format!("lab{gz}"), &encode(labels_file()));
        if gz {
            assert_eq!(&std::fs::read(&images).unwrap()[..2], &[0x1f, 0x8b]);
        }

        let read = read_idx_images(&images).unwrap();
        assert_eq!((read.count, read.rows, read.cols), (3, 2, 3));
        assert_eq!(read.pixels, pixels());
        assert_eq!(read.image(1), &pixels()[6..12]);
        assert_eq!(read_idx_labels(&labels).unwrap(), LABELS);

        let dataset = load_idx(&images, &labels).unwrap();
        assert_eq!(dataset.shape, ImageShape::new(1, 2, 3));
        assert_eq!(dataset.len(), 3);
        for (i, example) in dataset.examples.iter().enumerate() {
            assert_eq!(example.image, pixels()[6 * i..6 * (i + 1)]);
            assert_eq!(example.label, LABELS[i]);
        }
    }
}

#[test]
fn idx_directory_with_distributed_names() {
    let dir = tempfile::tempdir().unwrap();
    // Training files gzipped, test files raw.
    write(
        dir.path(),
        "train-images-idx3-ubyte.gz",
        &gzip(&images_file()),
    );
    write(
        dir.path(),
        "train-labels-idx1-ubyte.gz",
        &gzip(&labels_file()),
    );
    write(dir.path(), "t10k-images-idx3-ubyte", &images_file());
    write(dir.path(), "t10k-labels-idx1-ubyte", &labels_file());
    let train = load_idx_dir(dir.path(), Split::Train).unwrap();
    let test = load_idx_dir(dir.path(), Split::Test).unwrap();
    assert_eq!(train, test);
    assert_eq!(train.examples[2].label, 9);

    let empty = tempfile::tempdir().unwrap();
    let err = load_idx_dir(empty.path(), Split::Test).unwrap_err();
    assert!(matches!(err, DataError::Missing { .. }), "{err:?}");
    assert_names(&err, &empty.path().join("t10k-images-idx3-ubyte.gz"));
}

#[test]
fn idx_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing-here-idx3-ubyte");
    let err = read_idx_images(&path).unwrap_err();
    assert!(matches!(err, DataError::Missing { .. }), "{err:?}");
    assert_names(&err, &path);
}

#[test]
fn idx_wrong_magic() {
    let dir = tempfile::tempdir().unwrap();
    for gz in [false, true] {
        let encode = |b: Vec<u8>| if gz { gzip(&b) } else { b };
        // A label file where images are expected, and the other way round.
        let labels = write(dir.path(), &format!("labels{gz}"), &encode(labels_file()));
        let err = read_idx_images(&labels).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::BadMagic {
                    found: 0x801,
                    expected: 0x803,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_names(&err, &labels);
        assert!(err.to_string().contains("0x00000801"), "{err}");

        let images = write(dir.path(), &format!("images{gz}"), &encode(images_file()));
        let err = read_idx_labels(&images).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::BadMagic {
                    found: 0x803,
                    expected: 0x801,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_names(&err, &images);
    }
}

#[test]
fn idx_truncated_and_trailing() {
    let dir = tempfile::tempdir().unwrap();
    let full = images_file(); // 16 header bytes + 18 pixels
    assert_eq!(full.len(), 34);
    for gz in [false, true] {
        let encode = |b: &[u8]| if gz { gzip(b) } else { b.to_vec() };

        let short = write(dir.path(), &format!("short{gz}"), &encode(&full[..33]));
        let err = read_idx_images(&short).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::Truncated {
                    expected: 34,
                    actual: 33,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_names(&err, &short);

        // Cut inside the header: the sizes cannot be read.
        let header = write(dir.path(), &format!("header{gz}"), &encode(&full[..10]));
        let err = read_idx_images(&header).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::Truncated {
                    expected: 12,
                    actual: 10,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_names(&err, &header);

        let empty = write(dir.path(), &format!("empty{gz}"), &encode(&[]));
        let err = read_idx_labels(&empty).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::Truncated {
                    expected: 4,
                    actual: 0,
                    ..
                }
            ),
            "{err:?}"
        );

        let mut long = full.clone();
        long.push(0);
        let long = write(dir.path(), &format!("long{gz}"), &encode(&long));
        let err = read_idx_images(&long).unwrap_err();
        assert!(
            matches!(
                err,
                DataError::TrailingBytes {
                    expected: 34,
                    actual: 35,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_names(&err, &long);
    }

    // A header claiming 2^32-1 images of 2^32-1 x 2^32-1 pixels must not overflow.
    let huge = write(
        dir.path(),
        "huge",
        &idx_bytes(0x803, &[u32::MAX; 3], &[1, 2, 3]),
    );
    let err = read_idx_images(&huge).unwrap_err();
    assert!(
        matches!(err, DataError::Truncated { actual: 19, .. }),
        "{err:?}"
    );
}

#[test]
fn idx_corrupt_gzip() {
    let dir = tempfile::tempdir().unwrap();
    let compressed = gzip(&images_file());
    let cut = write(dir.path(), "cut.gz", &compressed[..compressed.len() / 2]);
    let err = read_idx_images(&cut).unwrap_err();
    assert!(matches!(err, DataError::Gzip { .. }), "{err:?}");
    assert_names(&err, &cut);

    let mut garbage = vec![0x1f, 0x8b];
    garbage.extend([0xff; 30]);
    let garbage = write(dir.path(), "garbage.gz", &garbage);
    let err = read_idx_labels(&garbage).unwrap_err();
    assert!(matches!(err, DataError::Gzip { .. }), "{err:?}");
    assert_names(&err, &garbage);
}

#[test]
fn idx_count_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let images = write(dir.path(), "images", &images_file());
    let labels = write(dir.path(), "labels", &idx_bytes(0x801, &[2], &[1, 2]));
    let err = load_idx(&images, &labels).unwrap_err();
    match &err {
        DataError::CountMismatch {
            images: i,
            image_count: 3,
            labels: l,
            label_count: 2,
        } => assert_eq!((i, l), (&images, &labels)),
        other => panic!("{other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("images") && message.contains("labels"),
        "{message}"
    );
}

/// A CIFAR record: label, then 3072 pixels derived from `seed`.
fn cifar_record(label: u8, seed: u8) -> Vec<u8> {
    let mut record = vec![label];
    record.extend((0..3072u32).map(|i| (i as u8).wrapping_mul(3).wrapping_add(seed)));
    record
}

#[test]
fn cifar_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    // Batch i holds two records with labels i and i + 5 (mod 10).
    for i in 1..=5u8 {
        let mut bytes = cifar_record(i, i);
        bytes.extend(cifar_record((i + 5) % 10, 100 + i));
        write(dir.path(), &format!("data_batch_{i}.bin"), &bytes);
    }
    let mut test = cifar_record(0, 42);
    test.extend(cifar_record(9, 43));
    test.extend(cifar_record(4, 44));
    write(dir.path(), "test_batch.bin", &test);

    let train = load_cifar10(dir.path(), Split::Train).unwrap();
    assert_eq!(train.shape, ImageShape::new(3, 32, 32));
    let labels: Vec<u8> = train.examples.iter().map(|e| e.label).collect();
    assert_eq!(labels, [1, 6, 2, 7, 3, 8, 4, 9, 5, 0]);
    assert_eq!(train.examples[3].image, cifar_record(7, 102)[1..]);

    let test = load_cifar10(dir.path(), Split::Test).unwrap();
    assert_eq!(test.len(), 3);
    assert_eq!(test.examples[2].label, 4);
    // Red plane first: pixel 0 of channel 1 (green) is byte 1024 of the image.
    assert_eq!(
        test.examples[2].image[1024],
        (1024u32 as u8).wrapping_mul(3).wrapping_add(44)
    );
    assert_eq!(
        read_cifar10_file(dir.path().join("test_batch.bin")).unwrap(),
        test
    );
}

#[test]
fn cifar_errors() {
    let dir = tempfile::tempdir().unwrap();
    for i in [1, 2, 4, 5] {
        write(
            dir.path(),
            &format!("data_batch_{i}.bin"),
            &cifar_record(1, 0),
        );
    }
    let err = load_cifar10(dir.path(), Split::Train).unwrap_err();
    assert!(matches!(err, DataError::Missing { .. }), "{err:?}");
    assert_names(&err, &dir.path().join("data_batch_3.bin"));

    let mut cut = cifar_record(1, 0);
    cut.extend(&cifar_record(2, 0)[..100]);
    let cut = write(dir.path(), "data_batch_3.bin", &cut);
    let err = load_cifar10(dir.path(), Split::Train).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::Truncated {
                expected: 6146,
                actual: 3173,
                ..
            }
        ),
        "{err:?}"
    );
    assert_names(&err, &cut);

    let empty = write(dir.path(), "test_batch.bin", &[]);
    let err = load_cifar10(dir.path(), Split::Test).unwrap_err();
    assert!(
        matches!(err, DataError::Truncated { actual: 0, .. }),
        "{err:?}"
    );
    assert_names(&err, &empty);

    let mut bad = cifar_record(3, 0);
    bad.extend(cifar_record(10, 0));
    let bad = write(dir.path(), "bad.bin", &bad);
    let err = read_cifar10_file(&bad).unwrap_err();
    assert!(
        matches!(
            err,
            DataError::BadLabel {
                record: 1,
                label: 10,
                ..
            }
        ),
        "{err:?}"
    );
    assert_names(&err, &bad);
}

fn example(image: Vec<u8>, label: u8) -> Example {
    Example { image, label }
}

#[test]
fn batch_normalises_and_keeps_labels() {
    let device = Default::default();
    let shape = ImageShape::new(1, 2, 2);
    let batcher = ImageBatcher::new(shape, Normalization::mnist());
    let examples = [example(vec![0, 255, 51, 102], 3), example(vec![255; 4], 8)];
    let (images, labels) = batcher.batch::<B, _>(&examples, &device);
    assert_eq!(images.dims(), [2, 1, 2, 2]);
    let norm = |p: f32| (p / 255.0 - 0.1307) / 0.3081;
    let expected: Vec<f32> = [0., 255., 51., 102., 255., 255., 255., 255.]
        .iter()
        .map(|&p| norm(p))
        .collect();
    assert_close(&values(images), &expected, 1e-6);
    assert_eq!(labels.into_data().to_vec::<i64>().unwrap(), [3, 8]);

    // A slice of references gives the same batch.
    let refs: Vec<&Example> = examples.iter().rev().collect();
    let (images, labels) = batcher.batch::<B, _>(&refs, &device);
    assert_close(&values(images)[..4], &[norm(255.); 4], 1e-6);
    assert_eq!(labels.into_data().to_vec::<i64>().unwrap(), [8, 3]);
}

#[test]
fn batch_normalises_each_channel() {
    let device = Default::default();
    let batcher = ImageBatcher::new(ImageShape::new(3, 1, 1), Normalization::cifar10());
    let (images, _) = batcher.batch::<B, _>(&[example(vec![0, 128, 255], 0)], &device);
    let expected = [
        (0.0 - 0.4914) / 0.2470,
        (128.0 / 255.0 - 0.4822) / 0.2435,
        (1.0 - 0.4465) / 0.2616,
    ];
    assert_close(&values(images), &expected, 1e-6);
}

#[test]
fn padding_28_to_32_centres_the_digit() {
    let device = Default::default();
    let image: Vec<u8> = (0..28 * 28).map(|i| (i % 251) as u8 + 1).collect();
    let batcher = ImageBatcher::new(ImageShape::new(1, 28, 28), Normalization::unit_range())
        .with_padding_to(32, 32);
    assert_eq!(batcher.output_shape(), ImageShape::new(1, 32, 32));
    let (images, _) = batcher.batch::<B, _>(&[example(image.clone(), 1)], &device);
    assert_eq!(images.dims(), [1, 1, 32, 32]);
    let out = values(images);
    for y in 0..32 {
        for x in 0..32 {
            let inside = (2..30).contains(&y) && (2..30).contains(&x);
            let expected = if inside {
                image[(y - 2) * 28 + (x - 2)] as f32 / 255.0
            } else {
                0.0
            };
            assert_eq!(out[y * 32 + x], expected, "pixel ({y}, {x})");
        }
    }
}

#[test]
fn crop_and_flip_move_pixels_as_described() {
    let shape = ImageShape::new(2, 3, 3);
    // Channel 0: 1..=9, channel 1: 11..=19.
    let image: Vec<u8> = (1..=9).chain(11..=19).collect();
    let augmentation = Augmentation {
        crop_padding: 1,
        horizontal_flip: true,
    };
    let apply = |top, left, flip| augmentation.apply(&image, shape, CropFlip { top, left, flip });

    // Centred crop, no flip: the image itself.
    assert_eq!(apply(1, 1, false), image);
    // Crop at the padded image's corner: shifted down and right by one.
    assert_eq!(
        apply(0, 0, false),
        [0, 0, 0, 0, 1, 2, 0, 4, 5, 0, 0, 0, 0, 11, 12, 0, 14, 15]
    );
    // Crop at the other corner: shifted up and left.
    assert_eq!(
        apply(2, 2, false),
        [5, 6, 0, 8, 9, 0, 0, 0, 0, 15, 16, 0, 18, 19, 0, 0, 0, 0]
    );
    // Flip alone mirrors each row.
    assert_eq!(
        apply(1, 1, true),
        [
            3, 2, 1, 6, 5, 4, 9, 8, 7, 13, 12, 11, 16, 15, 14, 19, 18, 17
        ]
    );
    // Crop then flip (torchvision's order): mirror of the shifted crop.
    assert_eq!(
        apply(0, 0, true),
        [0, 0, 0, 2, 1, 0, 5, 4, 0, 0, 0, 0, 12, 11, 0, 15, 14, 0]
    );
}

#[test]
fn draws_cover_every_offset_and_follow_the_seed() {
    let cifar = Augmentation::cifar();
    let mut rng = seeded_rng(17);
    let draws: Vec<CropFlip> = (0..4000).map(|_| cifar.sample(&mut rng)).collect();
    let mut seen = [[false; 9]; 9];
    for d in &draws {
        seen[d.top][d.left] = true; // panics if an offset is outside 0..=8
    }
    assert!(seen.iter().flatten().all(|&s| s), "an offset never drawn");
    let flips = draws.iter().filter(|d| d.flip).count();
    assert!((1800..2200).contains(&flips), "{flips} flips in 4000");

    let mut again = seeded_rng(17);
    let replay: Vec<CropFlip> = (0..4000).map(|_| cifar.sample(&mut again)).collect();
    assert_eq!(draws, replay);
    let mut other = seeded_rng(18);
    let different: Vec<CropFlip> = (0..100).map(|_| cifar.sample(&mut other)).collect();
    assert_ne!(draws[..100], different[..]);

    let digits = Augmentation::digits();
    assert!(!digits.horizontal_flip);
    assert!((0..1000).all(|_| !digits.sample(&mut rng).flip));
}

#[test]
fn augmented_batch_applies_one_draw_per_example() {
    let device = Default::default();
    let shape = ImageShape::new(1, 28, 28);
    let examples: Vec<Example> = (0..4u8)
        .map(|i| {
            example(
                (0..784)
                    .map(|p| (p as u8).wrapping_add(i * 50) | 1)
                    .collect(),
                i,
            )
        })
        .collect();
    let batcher = ImageBatcher::new(shape, Normalization::unit_range())
        .with_padding_to(32, 32)
        .with_augmentation(Augmentation::cifar());
    let (augmented, labels) =
        batcher.augmented_batch::<B, _, _>(&examples, &mut seeded_rng(5), &device);
    assert_eq!(augmented.dims(), [4, 1, 32, 32]);
    assert_eq!(labels.into_data().to_vec::<i64>().unwrap(), [0, 1, 2, 3]);

    // The same draws applied by hand to the padded images (which `batch` gives).
    let (padded, _) = batcher.batch::<B, _>(&examples, &device);
    let padded: Vec<u8> = values(padded)
        .iter()
        .map(|&v| (v * 255.0).round() as u8)
        .collect();
    let out_shape = ImageShape::new(1, 32, 32);
    let mut rng = seeded_rng(5);
    let mut expected = Vec::new();
    for image in padded.chunks(1024) {
        let draw = Augmentation::cifar().sample(&mut rng);
        expected.extend(Augmentation::cifar().apply(image, out_shape, draw));
    }
    let augmented: Vec<u8> = values(augmented)
        .iter()
        .map(|&v| (v * 255.0).round() as u8)
        .collect();
    assert_eq!(augmented, expected);
    assert_ne!(augmented, padded, "seed 5 drew only identity crops");
}

#[test]
fn statistics_of_examples() {
    let shape = ImageShape::new(2, 1, 2);
    // Channel 0: 0 and 255 (mean 0.5, std 0.5); channel 1: 51 everywhere (mean 0.2, std 0,
    // replaced by 1).
    let examples = [
        example(vec![0, 255, 51, 51], 0),
        example(vec![255, 0, 51, 51], 1),
    ];
    let stats = Normalization::of_examples(&examples, shape);
    assert_close(&stats.mean, &[0.5, 0.2], 1e-6);
    assert_close(&stats.std, &[0.5, 1.0], 1e-6);
}

#[test]
fn bundled_mnist_is_real_digits_with_a_fixed_split() {
    let train = burn_hetero_models::data::bundled_mnist(Split::Train).unwrap();
    let test = burn_hetero_models::data::bundled_mnist(Split::Test).unwrap();
    assert_eq!((train.len(), test.len()), (8004, 1996));
    for set in [&train, &test] {
        assert_eq!(set.shape, ImageShape::new(1, 28, 28));
        let mut per_class = [0usize; 10];
        for example in &set.examples {
            per_class[example.label as usize] += 1;
        }
        // Every class is there, in roughly MNIST's proportions (863..1127 of 10,000 each).
        assert!(
            per_class.iter().all(|&n| n * 14 > set.len()),
            "{per_class:?}"
        );
        // Digits: mostly black background, some ink, a mean brightness near MNIST's 0.13.
        let pixels: Vec<u8> = set.examples.iter().flat_map(|e| e.image.clone()).collect();
        let mean = pixels.iter().map(|&p| p as f64).sum::<f64>() / pixels.len() as f64 / 255.0;
        assert!((0.10..0.16).contains(&mean), "mean brightness {mean}");
    }
    // The split is disjoint: no test image appears in the training set.
    let train_images: std::collections::HashSet<&[u8]> =
        train.examples.iter().map(|e| e.image.as_slice()).collect();
    let shared = test
        .examples
        .iter()
        .filter(|e| train_images.contains(e.image.as_slice()))
        .count();
    assert_eq!(shared, 0, "test images also in the training set");
}
