//! Per-device settings: placements, the accelerator device, and whether it works.

use crate::Accelerator;
use crate::fallback::{guarded, warn_once};
use crate::placement::{HeteroConfig, Precision};
use burn_backend::{Backend, DType, DeviceOps, TensorData};
use burn_std::device::DeviceId;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
struct DeviceEntry {
    config: Option<HeteroConfig>,
    /// The accelerator device per accelerator backend type.
    accelerator: HashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

/// Keyed by the device's type and id: two CPU backends may number their devices alike.
static DEVICES: Mutex<Option<HashMap<(TypeId, DeviceId), DeviceEntry>>> = Mutex::new(None);

fn with_entry<D: DeviceOps, T>(device: &D, f: impl FnOnce(&mut DeviceEntry) -> T) -> T {
    let mut devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    f(devices
        .get_or_insert_with(HashMap::new)
        .entry((TypeId::of::<D>(), device.id()))
        .or_default())
}

fn with_env(mut config: HeteroConfig) -> HeteroConfig {
    for problem in config.apply_env() {
        warn_once(&problem, &format!("ignoring an invalid setting: {problem}"));
    }
    config
}

/// The settings of a CPU device (the defaults with the environment overrides, until
/// [`set_config`] is called for it).
pub(crate) fn config<D: DeviceOps>(device: &D) -> HeteroConfig {
    with_entry(device, |e| {
        e.config
            .get_or_insert_with(|| with_env(HeteroConfig::default()))
            .clone()
    })
}

/// Replaces the settings of a CPU device; the environment overrides still apply on top.
pub(crate) fn set_config<D: DeviceOps>(device: &D, config: HeteroConfig) {
    let config = with_env(config);
    with_entry(device, |e| e.config = Some(config));
}

/// The accelerator device used by the CPU device `device` (the backend's default device until
/// [`set_accelerator_device`] is called).
pub(crate) fn accelerator_device<C: Backend, A: Backend>(device: &C::Device) -> A::Device {
    with_entry(device, |e| {
        e.accelerator
            .get(&TypeId::of::<A>())
            .and_then(|d| d.downcast_ref::<A::Device>())
            .cloned()
            .unwrap_or_default()
    })
}

pub(crate) fn set_accelerator_device<C: Backend, A: Backend>(
    device: &C::Device,
    accelerator: A::Device,
) {
    with_entry(device, |e| {
        e.accelerator
            .insert(TypeId::of::<A>(), Box::new(accelerator))
    });
}

/// What a working accelerator device can do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceleratorInfo {
    /// The backend's name for the device.
    pub name: String,
    /// f16 operands are supported.
    pub f16: bool,
    /// bf16 operands are supported.
    pub bf16: bool,
}

impl AcceleratorInfo {
    /// Whether operands of `precision` are supported.
    pub fn supports(&self, precision: Precision) -> bool {
        match precision {
            Precision::F32 => true,
            Precision::F16 => self.f16,
            Precision::BF16 => self.bf16,
        }
    }
}

type ProbeResult = Result<AcceleratorInfo, String>;
static PROBES: Mutex<Option<HashMap<(TypeId, DeviceId), ProbeResult>>> = Mutex::new(None);

/// Whether the accelerator device works, found out once per device by a round trip of a small
/// tensor; the answer is cached for the life of the process.
pub(crate) fn probe<A: Accelerator>(device: &A::Device) -> ProbeResult {
    let mut probes = PROBES.lock().unwrap_or_else(|e| e.into_inner());
    probes
        .get_or_insert_with(HashMap::new)
        .entry((TypeId::of::<A>(), device.id()))
        .or_insert_with(|| probe_uncached::<A>(device))
        .clone()
}

fn probe_uncached<A: Accelerator>(device: &A::Device) -> ProbeResult {
    let sent = [1.5f32, -2.25, 3.0e-3, 7.0];
    let outcome = guarded(|| {
        let t = A::float_from_data(TensorData::new(sent.to_vec(), [4]), device);
        let back = burn_std::future::block_on(A::float_into_data(t))
            .map_err(|e| format!("reading back a test tensor failed: {e}"))?;
        let got = back
            .convert::<f32>()
            .into_vec::<f32>()
            .map_err(|e| format!("{e:?}"))?;
        if got != sent {
            return Err(format!("a test tensor came back altered: {got:?}"));
        }
        Ok(AcceleratorInfo {
            name: A::name(device),
            f16: A::supports_dtype(device, DType::F16),
            bf16: A::supports_dtype(device, DType::BF16),
        })
    });
    match outcome {
        Ok(result) => result,
        Err(panic) => Err(format!("initialisation failed: {panic}")),
    }
}
