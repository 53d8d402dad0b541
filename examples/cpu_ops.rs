//! The CPU ops a batch norm's forward and backward are made of, on burn-flex, burn-ndarray and
//! `Hetero<Flex, _>` (which rewrites some of them for burn-flex, see `src/ops/broadcast.rs`,
//! `src/ops/layout.rs` and `src/ops/elementwise.rs`). Prints a markdown table of mean times.
//!
//! `cargo run --release -p burn-hetero --example cpu_ops` (with either accelerator feature)

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Tensor};
use std::time::Instant;

const ROUNDS: u32 = 50;

/// The accelerator type only completes the backend's type: no op here runs on it.
#[cfg(feature = "vulkan")]
type Accel = burn_hetero::VulkanAccelerator;
#[cfg(all(feature = "cuda", not(feature = "vulkan")))]
type Accel = burn_hetero::CudaAccelerator;

/// Mean milliseconds of `f` over `ROUNDS` runs, after one untimed run. The backends here are
/// eager, so each op's work is done by the time it returns.
fn mean_ms<T>(mut f: impl FnMut() -> T) -> f64 {
    drop(f());
    let start = Instant::now();
    for _ in 0..ROUNDS {
        drop(f());
    }
    start.elapsed().as_secs_f64() * 1e3 / ROUNDS as f64
}

fn row<B: Backend>(label: &str) {
    let device = Default::default();
    let x = Tensor::<B, 4>::random([32, 16, 32, 32], Distribution::Default, &device);
    let y = Tensor::<B, 4>::random([32, 16, 32, 32], Distribution::Default, &device);
    let c = Tensor::<B, 4>::random([1, 16, 1, 1], Distribution::Default, &device);
    // A permuted view, as the gradient of batch norm's `swap_dims(0, 1)` arrives.
    let t =
        Tensor::<B, 4>::random([16, 32, 32, 32], Distribution::Default, &device).swap_dims(0, 1);
    let times = [
        mean_ms(|| x.clone() * y.clone()),
        mean_ms(|| x.clone() * c.clone()),
        mean_ms(|| x.clone() - c.clone()),
        mean_ms(|| c.clone() * x.clone()),
        mean_ms(|| c.clone() - x.clone()),
        mean_ms(|| t.clone() * y.clone()),
        mean_ms(|| t.clone().reshape([32, 16 * 32 * 32])),
    ];
    let cells: Vec<String> = times.iter().map(|ms| format!("{ms:.3}")).collect();
    println!("| {label} | {} |", cells.join(" | "));
}

fn main() {
    println!(
        "x, y: [32, 16, 32, 32]; c: [1, 16, 1, 1]; t: a [16, 32, 32, 32] tensor with dims 0 and 1 \
         swapped. ms per op, {} threads\n",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!(
        "| backend | x * y | x * c | x - c | c * x | c - x | t * y | t reshaped |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|"
    );
    row::<burn_flex::Flex>("burn-flex");
    row::<burn_hetero::NdArray>("burn-ndarray");
    row::<burn_hetero::Hetero<burn_flex::Flex, Accel>>("Hetero<Flex, _>");
}
