//! Shared helpers of the conformance suite.
#![allow(dead_code)]

use burn::tensor::backend::Backend;
use burn::tensor::{Bool, Int, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The reference CPU backend.
pub type N = burn_ndarray::NdArray<f32>;
/// The backend under test: burn-ndarray with a Vulkan accelerator (lavapipe in CI).
pub type H = burn_hetero::HeteroVulkan<N>;
/// The accelerator backend of `H`.
pub type Accel = burn_hetero::VulkanAccelerator;

pub type TestRng = StdRng;

/// The suite's seed: `BURN_HETERO_TEST_SEED` if set (to replay a failure), else fresh.
pub fn suite_seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let seed = std::env::var("BURN_HETERO_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
            });
        eprintln!("conformance seed: BURN_HETERO_TEST_SEED={seed}");
        seed
    })
}

/// A generator seeded from the suite seed and `name`, so that each case draws its own inputs.
pub fn rng_for(name: &str) -> TestRng {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    StdRng::seed_from_u64(suite_seed() ^ h)
}

/// Tests that change the global `Hetero` settings or read the global counters hold this lock.
pub fn settings_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn device() -> <N as burn::tensor::backend::BackendTypes>::Device {
    Default::default()
}

pub fn random_vec(rng: &mut TestRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// A float tensor of uniform values in [-2, 2).
pub fn float<B: Backend, const D: usize>(
    rng: &mut TestRng,
    device: &B::Device,
    shape: [usize; D],
) -> Tensor<B, D> {
    float_in(rng, device, shape, -2.0, 2.0)
}

/// A float tensor of uniform values in [lo, hi).
pub fn float_in<B: Backend, const D: usize>(
    rng: &mut TestRng,
    device: &B::Device,
    shape: [usize; D],
    lo: f32,
    hi: f32,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(random_vec(rng, n, lo, hi), shape), device)
}

/// An int tensor of uniform values in [lo, hi).
pub fn int<B: Backend, const D: usize>(
    rng: &mut TestRng,
    device: &B::Device,
    shape: [usize; D],
    lo: i64,
    hi: i64,
) -> Tensor<B, D, Int> {
    let n = shape.iter().product();
    let v: Vec<i64> = (0..n).map(|_| rng.random_range(lo..hi)).collect();
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// A bool tensor, each element true with probability 1/2.
pub fn boolean<B: Backend, const D: usize>(
    rng: &mut TestRng,
    device: &B::Device,
    shape: [usize; D],
) -> Tensor<B, D, Bool> {
    let n = shape.iter().product();
    let v: Vec<bool> = (0..n).map(|_| rng.random_bool(0.5)).collect();
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// Asserts two results are the same bit for bit (dtype, shape and bytes), NaNs included.
pub fn assert_identical(case: &str, index: usize, hetero: &TensorData, reference: &TensorData) {
    assert_eq!(
        (hetero.dtype, &hetero.shape),
        (reference.dtype, &reference.shape),
        "{case}: output {index}: dtype/shape differ"
    );
    assert!(
        hetero.as_bytes() == reference.as_bytes(),
        "{case}: output {index}: values differ\n hetero:    {hetero:?}\n reference: {reference:?}"
    );
}

/// Runs one differential case on `H` and on `N` with the same random inputs and requires
/// identical outputs.
pub fn compare(
    case: &str,
    on_hetero: impl FnOnce(
        &<H as burn::tensor::backend::BackendTypes>::Device,
        &mut TestRng,
    ) -> Vec<TensorData>,
    on_reference: impl FnOnce(
        &<N as burn::tensor::backend::BackendTypes>::Device,
        &mut TestRng,
    ) -> Vec<TensorData>,
) {
    let hetero = on_hetero(&device(), &mut rng_for(case));
    let reference = on_reference(&device(), &mut rng_for(case));
    assert_eq!(hetero.len(), reference.len(), "{case}: output count");
    assert!(!hetero.is_empty(), "{case}: a case must return outputs");
    for (i, (h, r)) in hetero.iter().zip(&reference).enumerate() {
        assert_identical(case, i, h, r);
    }
}

/// Defines a differential case generic over the backend and runs it on `H` and `N`:
/// `diff!("name", |device, rng| { ...; vec![out.into_data()] })`.
#[macro_export]
macro_rules! diff {
    ($name:expr, |$dev:ident, $rng:ident| $body:block) => {{
        #[allow(unused_variables, unused_mut, clippy::redundant_clone)]
        fn case<B: burn::tensor::backend::Backend>(
            $dev: &B::Device,
            $rng: &mut $crate::common::TestRng,
        ) -> Vec<burn::tensor::TensorData> {
            $body
        }
        $crate::common::compare($name, case::<$crate::common::H>, case::<$crate::common::N>);
    }};
}

/// Relative L2 error ||a - b|| / ||b|| in f64.
pub fn rel_l2(a: &[f32], reference: &[f64]) -> f64 {
    assert_eq!(a.len(), reference.len());
    let mut num = 0.0f64;
    let mut den = 0.0f64;
    for (&x, &r) in a.iter().zip(reference) {
        num += (x as f64 - r).powi(2);
        den += r * r;
    }
    (num / den.max(f64::MIN_POSITIVE)).sqrt()
}

/// The `Hetero` under test, for its settings API.
pub type HeteroApi = burn_hetero::Hetero<N, Accel>;

/// Restores the default settings when dropped (also when the test panics).
pub struct SettingsGuard {
    _lock: MutexGuard<'static, ()>,
}

impl Drop for SettingsGuard {
    fn drop(&mut self) {
        HeteroApi::configure(&device(), burn_hetero::HeteroConfig::default());
        burn_hetero::inject_accelerator_failure(None);
    }
}

/// Takes the settings lock and applies `config` until the guard is dropped.
pub fn settings(config: burn_hetero::HeteroConfig) -> SettingsGuard {
    let lock = settings_lock();
    HeteroApi::configure(&device(), config);
    SettingsGuard { _lock: lock }
}

/// Every op of Burn's backend traits, from `tests/ops_list.txt`.
pub fn all_ops() -> Vec<&'static str> {
    include_str!("../ops_list.txt")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect()
}

/// Fails when an op of the traits named by `prefixes` (e.g. `"FloatTensorOps::"`) was not
/// called on `Hetero` by this thread.
pub fn assert_covered(prefixes: &[&str]) {
    let called = burn_hetero::ops_called();
    let missing: Vec<_> = all_ops()
        .into_iter()
        .filter(|op| prefixes.iter().any(|p| op.starts_with(p)))
        .filter(|op| !called.contains(op))
        .collect();
    assert!(
        missing.is_empty(),
        "{} ops have no differential test: {missing:#?}",
        missing.len()
    );
}

/// `Hetero<Flex, _>`, for the tests of what it does with burn-flex buffers.
pub type HeteroFlex = burn_hetero::Hetero<burn_flex::Flex, Accel>;

/// `values` of `shape` as a [`HeteroFlex`] float primitive (the ops' own argument type).
pub fn flex_primitive<const D: usize>(
    values: &[f32],
    shape: &[usize],
) -> burn::tensor::ops::FloatTensor<HeteroFlex> {
    burn::tensor::Tensor::<HeteroFlex, D>::from_data(
        burn::tensor::TensorData::new(values.to_vec(), shape.to_vec()),
        &Default::default(),
    )
    .into_primitive()
    .tensor()
}

/// The f32 values of a [`HeteroFlex`] float primitive of rank `D`.
pub fn flex_primitive_values<const D: usize>(
    t: burn::tensor::ops::FloatTensor<HeteroFlex>,
) -> Vec<f32> {
    burn::tensor::Tensor::<HeteroFlex, D>::from_primitive(burn::tensor::TensorPrimitive::Float(t))
        .into_data()
        .to_vec::<f32>()
        .unwrap()
}
