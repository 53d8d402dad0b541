//! The copy path of an offloaded op on a CUDA device: an f32 activation cast to f16 or bf16 on
//! the host and uploaded (`Accelerator::accel_upload_cast`: pinned staging, into a kept device
//! buffer after the first run), and an f32 result downloaded. Sizes are ResNet20's first-stage
//! activation at batch 32 and 128. Without a CUDA device it says so and measures nothing.
//!
//! `cargo bench -p burn-hetero-benches --bench copy_path` (or carry the binary of
//! `cargo bench -p burn-hetero-benches --bench copy_path --no-run` to the GPU machine)

use burn_backend::{DType, Shape, TensorData};
use burn_hetero::{Accelerator, CudaAccelerator, Hetero};
use divan::Bencher;

const VALUES: [usize; 2] = [32 * 16 * 32 * 32, 128 * 16 * 32 * 32];

fn main() {
    let device = Default::default();
    if let Err(e) = Hetero::<burn_flex::Flex, CudaAccelerator>::probe_accelerator(&device) {
        println!("copy_path: no CUDA device to measure ({e})");
        return;
    }
    divan::main();
}

fn activation(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 2003) as f32 * 1e-3 - 1.0)
        .collect()
}

fn upload_cast(bencher: Bencher, n: usize, dtype: DType) {
    let src = activation(n);
    let device = Default::default();
    bencher
        .counter(divan::counter::BytesCount::new(n * dtype.size()))
        .bench_local(|| {
            CudaAccelerator::accel_upload_cast(&src, Shape::new([n]), dtype, &device)
                .expect("upload")
        });
}

#[divan::bench(args = VALUES)]
fn upload_f16(bencher: Bencher, n: usize) {
    upload_cast(bencher, n, DType::F16);
}

#[divan::bench(args = VALUES)]
fn upload_bf16(bencher: Bencher, n: usize) {
    upload_cast(bencher, n, DType::BF16);
}

#[divan::bench(args = VALUES)]
fn download_f32(bencher: Bencher, n: usize) {
    let device = Default::default();
    let result = CudaAccelerator::accel_upload(TensorData::new(activation(n), [n]), &device)
        .expect("upload");
    bencher
        .counter(divan::counter::BytesCount::new(n * 4))
        .bench_local(|| CudaAccelerator::accel_download(result.clone()).expect("download"));
}
