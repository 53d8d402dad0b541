//! The host-to-device copy path on a CUDA device, piece by piece: what an offloaded op's upload
//! of an f32 activation as f16 costs through CubeCL's `create` (host cast, then a pageable copy)
//! and through `Hetero`'s pinned staging (`accel_upload_cast`; after the first repetition it copies
//! into a kept device buffer, as every training step after the first does), beside its parts (a
//! device sync right after another, one after 1 ms without calls — CubeCL's device thread sleeps
//! in steps when idle —, a device allocation with its pointer, the host cast alone) and the
//! download of an f32 result of the same element count. Prints a markdown table, then a second
//! one: the pinned staging again, now as a training step runs it (on a thread of rayon's pool,
//! the other workers kept spinning), with its time split as the profile splits it (fill into the
//! slots, time on the bus, waits). A third table times a conv's input and weight uploaded one
//! by one against both in one transfer.
//!
//! ```sh
//! cargo build --release -p burn-hetero --no-default-features --features cuda --example copy_bench
//! ./copy_bench            # on the GPU machine
//! ```
//!
//! Each figure is the median of 41 timed repetitions after 5 untimed ones; every path ends with
//! its data on the device (a device sync where the path does not end with one).

use burn_backend::{DType, Shape, TensorData};
use burn_hetero::{Accelerator, CudaAccelerator as B, pool, profile, spin};
use cubecl::Runtime;
use cubecl::cuda::{CudaDevice, CudaRuntime};
use half::f16;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;
use std::time::{Duration, Instant};

const WARMUP: usize = 5;
const REPS: usize = 41;

/// Median time of `f` over [`REPS`] runs after [`WARMUP`] untimed ones.
fn median<T>(mut f: impl FnMut() -> T) -> Duration {
    for _ in 0..WARMUP {
        drop(f());
    }
    let mut times: Vec<Duration> = (0..REPS)
        .map(|_| {
            let start = Instant::now();
            drop(f());
            start.elapsed()
        })
        .collect();
    times.sort();
    times[REPS / 2]
}

/// Median time of `f` alone, each run after `pause` without calls to the device.
fn median_after(pause: Duration, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..WARMUP + REPS)
        .map(|_| {
            std::thread::sleep(pause);
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .skip(WARMUP)
        .collect();
    times.sort();
    times[REPS / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// GB/s moving `bytes` in `d`.
fn rate(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

/// `src` cast to f16 across rayon's threads, as the upload path does.
fn cast_f16(src: &[f32]) -> Vec<f16> {
    let mut dst = vec![f16::ZERO; src.len()];
    dst.par_chunks_mut(1 << 14)
        .zip(src.par_chunks(1 << 14))
        .for_each(|(d, s)| d.convert_from_f32_slice(s));
    dst
}

/// Element counts of the uploads timed.
const SIZES: [usize; 6] = [4_608, 32_768, 262_144, 524_288, 2_097_152, 8_388_608];

/// `n` f32 values to upload (not all equal, so a wrong copy would show).
fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7919) % 1000) as f32 * 0.01).collect()
}

/// The second table: pinned staging on a pool thread with the workers spinning, as in a
/// training step, split into its stages by the profile's counters (means per upload over every
/// repetition, warm-up included; the total is the median).
fn staging_on_the_pool(device: &CudaDevice) {
    println!(
        "\nPinned staging on a thread of rayon's pool, the other workers spinning (as in a \
         training step); µs per upload: the total a median of {REPS}, its stages means from the \
         profile; GB/s of the f16 bytes.\n"
    );
    println!(
        "| values | f16 MB | total µs | GB/s | fill µs | fill GB/s | bus µs | bus GB/s | wait µs |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for n in SIZES {
        let src = values(n);
        let bytes = n * 2;
        let shape = Shape::new([n]);
        profile::set_profiling(true);
        profile::reset_profile();
        let total = median(|| {
            spin::keep_workers_spinning(Duration::from_millis(20));
            B::accel_upload_cast(&src, shape.clone(), DType::F16, device).expect("pinned upload")
        });
        let staged = profile::profile().staged_uploads;
        profile::set_profiling(false);
        let per_upload = |d: Duration| d / staged.uploads.max(1) as u32;
        let (fill, bus) = (per_upload(staged.fill), per_upload(staged.bus));
        println!(
            "| {n} | {:.2} | {:.0} | {:.1} | {:.0} | {:.1} | {:.0} | {:.1} | {:.0} |",
            bytes as f64 / 1e6,
            us(total),
            rate(bytes, total),
            us(fill),
            rate(bytes, fill),
            us(bus),
            rate(bytes, bus),
            us(per_upload(staged.wait)),
        );
    }
}

fn main() {
    // The pool a training step runs on (one core left for CubeCL's device thread).
    pool::build_global_pool(true);
    let device = CudaDevice::default();
    let client = CudaRuntime::client(&device);
    let sync = || burn_std::future::block_on(client.sync()).expect("device sync");
    println!(
        "f32 activations uploaded as f16; µs (median of {REPS}) and GB/s of the f16 bytes; \
         download: the same number of f32 values. {} CPU threads.\n",
        rayon::current_num_threads()
    );
    println!(
        "| values | f16 MB | sync µs | sync after 1 ms idle µs | alloc + pointer µs | host cast µs | \
         CubeCL create µs | GB/s | pinned staging µs | GB/s | download µs | GB/s |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for n in SIZES {
        let src = values(n);
        let bytes = n * 2;
        let shape = Shape::new([n]);
        let idle = median(sync);
        let woken = median_after(Duration::from_millis(1), sync);
        let alloc = median(|| {
            let handle = client.empty(bytes);
            client.get_resource(handle).expect("resource")
        });
        let cast = median(|| cast_f16(&src));
        let create = median(|| {
            let handle = client.create(burn_std::Bytes::from_elems(cast_f16(&src)));
            sync();
            handle
        });
        let pinned = median(|| {
            B::accel_upload_cast(&src, shape.clone(), DType::F16, &device).expect("pinned upload")
        });
        let result = B::accel_upload(TensorData::new(src.clone(), shape.clone()), &device)
            .expect("f32 upload");
        let download = median(|| B::accel_download(result.clone()).expect("download"));
        println!(
            "| {n} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.0} | {:.1} | {:.0} | {:.1} |",
            bytes as f64 / 1e6,
            us(idle),
            us(woken),
            us(alloc),
            us(cast),
            us(create),
            rate(bytes, create),
            us(pinned),
            rate(bytes, pinned),
            us(download),
            rate(n * 4, download),
        );
    }
    pool::run_on_pool(|| staging_on_the_pool(&device));
    pool::run_on_pool(|| input_and_weight(&device));
}

/// A conv's input and weight, as the forward uploads them (f16), from ResNet20's layers at
/// batch 32 and 128: one upload each, or both in one transfer.
const CONV_OPERANDS: [([usize; 4], [usize; 4]); 4] = [
    ([32, 16, 32, 32], [16, 16, 3, 3]),
    ([32, 64, 8, 8], [64, 64, 3, 3]),
    ([128, 16, 32, 32], [16, 16, 3, 3]),
    ([128, 64, 8, 8], [64, 64, 3, 3]),
];

/// The third table: a conv's two operands uploaded one by one (`accel_upload_cast` twice) or
/// together (`accel_upload_cast_all`), on a pool thread as in a training step.
fn input_and_weight(device: &CudaDevice) {
    println!(
        "\nA conv's input and weight as f16, on a thread of rayon's pool: µs (median of {REPS}) \
         for both, uploaded one by one or in one transfer.\n"
    );
    println!(
        "| input | weight | f16 MB | one by one µs | together µs | one by one / together |\n\
         |---|---|---:|---:|---:|---:|"
    );
    for (x_shape, w_shape) in CONV_OPERANDS {
        let x = values(x_shape.iter().product());
        let w = values(w_shape.iter().product());
        let (xs, ws) = (Shape::new(x_shape), Shape::new(w_shape));
        let mut separate = || {
            spin::keep_workers_spinning(Duration::from_millis(20));
            let a = B::accel_upload_cast(&x, xs.clone(), DType::F16, device).expect("upload");
            let b = B::accel_upload_cast(&w, ws.clone(), DType::F16, device).expect("upload");
            (a, b)
        };
        let mut together = || {
            spin::keep_workers_spinning(Duration::from_millis(20));
            let operands = [
                (&x[..], xs.clone(), DType::F16),
                (&w[..], ws.clone(), DType::F16),
            ];
            B::accel_upload_cast_all(&operands, device).expect("upload")
        };
        // Alternated, so that neither gets a quieter stretch of the machine.
        let (mut one, mut both) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            one.push(median(&mut separate));
            both.push(median(&mut together));
        }
        one.sort();
        both.sort();
        println!(
            "| {x_shape:?} | {w_shape:?} | {:.2} | {:.0} | {:.0} | {:.2} |",
            (x.len() + w.len()) as f64 * 2.0 / 1e6,
            us(one[1]),
            us(both[1]),
            one[1].as_secs_f64() / both[1].as_secs_f64()
        );
    }
}
