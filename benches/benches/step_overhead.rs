//! The floor of a training step: ResNet20's forward, loss, backward and SGD step on a batch of
//! one 4×4 image (two stride-2 stages take it to 1×1), where the activations are a few values
//! each and what is left is the work sized by the weights (270 k parameters: their casts,
//! gradients and update), Burn's autodiff and module code, and each op's fixed cost, which for
//! an offloaded conv is a round trip to the accelerator. Set against the same step at batch 32
//! of 32×32 images, it says how much of a step does not scale with the batch.
//!
//! - `ndarray`, `flex`: the CPU backends' own steps (convs on the CPU).
//! - `hetero_cpu`: `Hetero<Flex, _>` with every op on the CPU (`HeteroConfig::cpu_only`), with
//!   its profile off and on (unsynced, as `hetero train --profile-unsynced`): what the decorator
//!   and the profile's bookkeeping add to burn-flex.
//! - `hetero_ndarray_cpu`: the same with burn-ndarray as the CPU backend, its arrays handed to
//!   `Hetero`'s CPU passes and back, with its profile off and on.
//! - `hetero_cuda`: the default placements (convs offloaded to CUDA), at 1×4×4 and 32×32×32,
//!   the loop on a thread of rayon's pool or outside it; skipped, with a line that says so,
//!   where there is no CUDA device. The profiled run prints the profile: conv phases, CPU ops
//!   and the time outside the backend's ops.
//! - `hetero_ndarray_cuda`: the same placements with burn-ndarray as the CPU backend
//!   (`HeteroCuda`'s default), at 1×4×4 and 32×32×32, on the pool.
//!
//! `cargo bench -p burn-hetero-benches --bench step_overhead`

use burn::module::AutodiffModule;
use burn::optim::GradientsParams;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{Optimizer, decay::WeightDecayConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Distribution, Int, Tensor};
use burn_autodiff::Autodiff;
use burn_hetero::HeteroConfig;
use burn_hetero::optim::{FusedSgd, SgdBackend};
use burn_hetero::profile;
use burn_hetero_models::{ResNet, ResNetConfig};
use divan::Bencher;

type NdArray = burn_ndarray::NdArray<f32>;
type Flex = burn_flex::Flex;
type Hetero = burn_hetero::Hetero<Flex, burn_hetero::CudaAccelerator>;
/// The default `HeteroCuda`: burn-ndarray's arrays, handed to the same CPU passes.
type HeteroNdArray = burn_hetero::Hetero<NdArray, burn_hetero::CudaAccelerator>;

/// The smallest input: batch 1, 4×4.
const TINY: (usize, usize) = (1, 4);

fn main() {
    // As `hetero` does: a core left beside the pool for the device thread.
    burn_hetero::pool::build_global_pool(true);
    divan::main();
}

/// ResNet20 training steps on `B` at `batch` images of `size`×`size`, each timed from forward
/// to the optimizer's update; each on a thread of rayon's pool when `on_pool` (the hop there and
/// back is in the time).
fn train_step<B>(bencher: Bencher, (batch, size): (usize, usize), on_pool: bool)
where
    B: AutodiffBackend + burn_hetero_models::ModelBackend,
    B::InnerBackend: SgdBackend,
    ResNet<B>: AutodiffModule<B>,
{
    let device = Default::default();
    let mut model = Some(ResNetConfig::new(20).unwrap().init::<B>(&device));
    let mut optimizer = FusedSgd::<B::InnerBackend>::new(
        Some(&MomentumConfig::new().with_momentum(0.9)),
        Some(&WeightDecayConfig::new(5e-4)),
    )
    .init::<B, ResNet<B>>();
    let images = Tensor::<B, 4>::random([batch, 3, size, size], Distribution::Default, &device);
    let targets = Tensor::<B, 1, Int>::from_ints([3].repeat(batch).as_slice(), &device);
    // A profile, where one records, is of the steps alone.
    profile::reset_profile();
    let mut step = || {
        let net = model.take().unwrap();
        let loss = net.loss(net.forward(images.clone()), targets.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &net);
        model = Some(optimizer.step(0.1, net, grads));
    };
    bencher.bench_local(|| {
        if on_pool {
            burn_hetero::pool::run_on_pool(&mut step)
        } else {
            step()
        }
    });
}

#[divan::bench]
fn ndarray(bencher: Bencher) {
    train_step::<Autodiff<NdArray>>(bencher, TINY, false);
}

#[divan::bench]
fn flex(bencher: Bencher) {
    train_step::<Autodiff<Flex>>(bencher, TINY, false);
}

/// `Hetero<Flex, _>` with every op on the CPU; `true` with an unsynced profile recording.
#[divan::bench(args = [false, true])]
fn hetero_cpu(bencher: Bencher, profiled: bool) {
    Hetero::configure(&Default::default(), HeteroConfig::cpu_only());
    with_profile(profiled, || {
        train_step::<Autodiff<Hetero>>(bencher, TINY, false)
    });
}

/// `Hetero<NdArray, _>` with every op on the CPU: what handing burn-ndarray's arrays to the
/// fused passes and back costs where the activations are a few values (compare with `ndarray`,
/// and its profile, op by op, with `hetero_cpu`'s); `true` with an unsynced profile recording.
#[divan::bench(args = [false, true])]
fn hetero_ndarray_cpu(bencher: Bencher, profiled: bool) {
    HeteroNdArray::configure(&Default::default(), HeteroConfig::cpu_only());
    with_profile(profiled, || {
        train_step::<Autodiff<HeteroNdArray>>(bencher, TINY, false)
    });
}

/// The default placements: convs on CUDA, f16 forward and bf16 gradients; the loop on a pool
/// thread (`burn_hetero::pool::run_on_pool`, as `hetero` runs it) or on the bench's own thread.
#[divan::bench(args = [
    (1, 4, "pool"), (1, 4, "outside"), (1, 4, "pool, profiled"),
    (32, 32, "pool"), (32, 32, "outside"), (32, 32, "pool, profiled"),
])]
fn hetero_cuda(bencher: Bencher, (batch, size, run): (usize, usize, &str)) {
    if !cuda_ready::<Flex>("hetero_cuda") {
        return;
    }
    let shape = (batch, size);
    match run {
        "outside" => train_step::<Autodiff<Hetero>>(bencher, shape, false),
        "pool" => train_step::<Autodiff<Hetero>>(bencher, shape, true),
        _ => with_profile(true, || {
            train_step::<Autodiff<Hetero>>(bencher, shape, true)
        }),
    }
}

/// `Hetero<NdArray, _>` with the default placements, the loop on a pool thread: its CPU ops on
/// burn-ndarray's arrays (batch norm, ReLU, adds, pooling, SGD through the bridge to the same
/// passes as `Hetero<Flex, _>`); compare with `hetero_cuda`'s "pool" rows. `true`: with an
/// unsynced profile recording, printed.
#[divan::bench(args = [(1, 4, false), (32, 32, false), (32, 32, true)])]
fn hetero_ndarray_cuda(bencher: Bencher, (batch, size, profiled): (usize, usize, bool)) {
    if cuda_ready::<NdArray>("hetero_ndarray_cuda") {
        with_profile(profiled, || {
            train_step::<Autodiff<HeteroNdArray>>(bencher, (batch, size), true)
        });
    }
}

/// Sets `Hetero<C, CUDA>` to the default placements; false, with a line that says why, where
/// there is no CUDA device.
fn cuda_ready<C: burn::tensor::backend::Backend>(bench: &str) -> bool {
    type On<C> = burn_hetero::Hetero<C, burn_hetero::CudaAccelerator>;
    let device = Default::default();
    On::<C>::configure(&device, HeteroConfig::default());
    match On::<C>::accelerator_status(&device) {
        Ok(_) => true,
        Err(why) => {
            let why: String = why.chars().take(120).collect();
            eprintln!("{bench} skipped, no CUDA device: {why}…");
            false
        }
    }
}

/// Runs `bench` with an unsynced profile recording when `profiled`, and prints it.
fn with_profile(profiled: bool, bench: impl FnOnce()) {
    profile::set_profile_synced(false);
    profile::set_profiling(profiled);
    bench();
    profile::set_profiling(false);
    if profiled {
        let profile = profile::profile();
        eprintln!("{}\n\n{profile}", profile.summary());
    }
}
