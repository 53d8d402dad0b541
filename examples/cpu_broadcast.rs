//! Binary ops with a broadcast over a middle dim (a batch norm's `[1, C, 1, 1]` against
//! `[N, C, H, W]`) on burn-flex, burn-ndarray and `Hetero<Flex, _>` (which rewrites them, see
//! `src/ops/broadcast.rs`), next to the same-shape op. Prints a markdown table of mean times.
//!
//! `cargo run --release --example cpu_broadcast`

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use std::time::Instant;

const ROUNDS: u32 = 50;

/// Mean milliseconds of `f` over `ROUNDS` runs, after one untimed run.
fn mean_ms(mut f: impl FnMut()) -> f64 {
    f();
    let start = Instant::now();
    for _ in 0..ROUNDS {
        f();
    }
    start.elapsed().as_secs_f64() * 1e3 / ROUNDS as f64
}

fn row<B: Backend>(label: &str) {
    let device = Default::default();
    let x = Tensor::<B, 4>::random([32, 16, 32, 32], Distribution::Default, &device);
    let y = Tensor::<B, 4>::random([32, 16, 32, 32], Distribution::Default, &device);
    let c = Tensor::<B, 4>::random([1, 16, 1, 1], Distribution::Default, &device);
    // Each result is read back, so that a lazy backend does the work inside the timing.
    let same = mean_ms(|| drop((x.clone() * y.clone()).into_data()));
    let mul = mean_ms(|| drop((x.clone() * c.clone()).into_data()));
    let sub = mean_ms(|| drop((x.clone() - c.clone()).into_data()));
    let mul_first = mean_ms(|| drop((c.clone() * x.clone()).into_data()));
    let sub_first = mean_ms(|| drop((c.clone() - x.clone()).into_data()));
    println!("| {label} | {same:.3} | {mul:.3} | {sub:.3} | {mul_first:.3} | {sub_first:.3} |");
}

fn main() {
    println!("[32, 16, 32, 32] against [32, 16, 32, 32] or [1, 16, 1, 1], ms per op\n");
    println!("| backend | x * y | x * c | x - c | c * x | c - x |\n|---|---:|---:|---:|---:|---:|");
    row::<burn_flex::Flex>("burn-flex");
    row::<burn_hetero::NdArray>("burn-ndarray");
    row::<burn_hetero::Hetero<burn_flex::Flex, burn_hetero::VulkanAccelerator>>("Hetero<Flex, _>");
}
