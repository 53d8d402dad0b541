//! The `Hetero` backend type and its `Backend` impl.

use crate::Accelerator;
use crate::device::{self, AcceleratorInfo};
use crate::placement::HeteroConfig;
use burn_backend::{Backend, BackendTypes, DType, DTypeUsageSet, ExecutionError, TensorData};
use core::marker::PhantomData;

/// A Burn backend whose tensors live on the CPU backend `C` and whose convolutions (and, when
/// placed there, matmuls) run on the accelerator backend `A` in low precision.
///
/// Every op that is not placed on the accelerator is `C`'s own implementation. Placements are
/// set per device at run time with [`Hetero::configure`], or through the environment (see
/// [`HeteroConfig::apply_env`]).
pub struct Hetero<C, A> {
    _backends: PhantomData<fn() -> (C, A)>,
}

impl<C, A> Clone for Hetero<C, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C, A> Copy for Hetero<C, A> {}

impl<C, A> Default for Hetero<C, A> {
    fn default() -> Self {
        Self {
            _backends: PhantomData,
        }
    }
}

impl<C, A> core::fmt::Debug for Hetero<C, A> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Hetero<{}, {}>",
            core::any::type_name::<C>(),
            core::any::type_name::<A>()
        )
    }
}

impl<C: Backend, A: Accelerator> Hetero<C, A> {
    /// Replaces the settings of `device`. The environment overrides still win (see
    /// [`HeteroConfig::apply_env`]).
    pub fn configure(device: &C::Device, config: HeteroConfig) {
        device::set_config(device, config);
    }

    /// The settings in force for `device`.
    pub fn config(device: &C::Device) -> HeteroConfig {
        device::config(device)
    }

    /// Chooses the accelerator device that the ops of `device` are offloaded to (by default,
    /// the accelerator backend's default device).
    pub fn set_accelerator_device(device: &C::Device, accelerator: A::Device) {
        device::set_accelerator_device::<C, A>(device, accelerator);
    }

    /// The accelerator device that the ops of `device` are offloaded to.
    pub fn accelerator_device(device: &C::Device) -> A::Device {
        device::accelerator_device::<C, A>(device)
    }

    /// Whether the accelerator of `device` works, and what it supports; `Err` says why not.
    /// The check runs once per accelerator device and is cached.
    pub fn accelerator_status(device: &C::Device) -> Result<AcceleratorInfo, String> {
        device::probe::<A>(&Self::accelerator_device(device))
    }

    /// Whether the accelerator device `accelerator` works (the probe of
    /// [`Hetero::accelerator_status`], for a device not yet set), e.g. to choose among several
    /// before [`Hetero::set_accelerator_device`]. Changes no setting.
    pub fn probe_accelerator(accelerator: &A::Device) -> Result<AcceleratorInfo, String> {
        device::probe::<A>(accelerator)
    }
}

impl<C: Backend, A: Accelerator> BackendTypes for Hetero<C, A> {
    type Device = C::Device;
    type FloatTensorPrimitive = C::FloatTensorPrimitive;
    type FloatElem = C::FloatElem;
    type IntTensorPrimitive = C::IntTensorPrimitive;
    type IntElem = C::IntElem;
    type BoolTensorPrimitive = C::BoolTensorPrimitive;
    type BoolElem = C::BoolElem;
    type QuantizedTensorPrimitive = C::QuantizedTensorPrimitive;
}

impl<C: Backend, A: Accelerator> Backend for Hetero<C, A> {
    fn ad_enabled(device: &Self::Device) -> bool {
        C::ad_enabled(device)
    }

    fn memory_persistent_allocations<
        Output: Send,
        Input: Send,
        Func: Fn(Input) -> Output + Send,
    >(
        device: &Self::Device,
        input: Input,
        func: Func,
    ) -> Output {
        C::memory_persistent_allocations(device, input, func)
    }

    fn memory_cleanup(device: &Self::Device) {
        C::memory_cleanup(device)
    }

    fn name(device: &Self::Device) -> String {
        // Naming a CubeCL device initialises it, which panics when there is none.
        let accelerator = crate::fallback::guarded(|| A::name(&Self::accelerator_device(device)))
            .unwrap_or_else(|_| "unavailable".to_string());
        format!("hetero<{}, {accelerator}>", C::name(device))
    }

    fn seed(device: &Self::Device, seed: u64) {
        C::seed(device, seed)
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        C::sync(device)
    }

    fn staging<'a, Iter>(data: Iter, device: &Self::Device)
    where
        Iter: Iterator<Item = &'a mut TensorData>,
    {
        C::staging(data, device)
    }

    fn supports_dtype(device: &Self::Device, dtype: DType) -> bool {
        C::supports_dtype(device, dtype)
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        C::dtype_usage(device, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        C::device_count(type_id)
    }
}
