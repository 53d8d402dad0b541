//! The accelerator side: which backends can be `A`, and the ops they run for `Hetero`.

use burn_backend::ops::{ConvOptions, FloatTensorOps, ModuleOps};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, FloatDType, Shape, Slice, TensorData, TensorMetadata};
use burn_cubecl::kernel::conv::{ConvStrategy, conv_data_backward, conv_weight_backward};
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_contiguous_dtype;
use burn_cubecl::tensor::CubeTensor;
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};
use burn_hetero_kernels::{
    Conv2dBuffers, Conv2dProblem, ConvPath, ConvTypes, OperandType, WeightGradBuffers,
    WeightGradTypes, conv2d_forward_async, conv2d_forward_flipped_async, conv2d_weight_grad_async,
    weight_grad_splits,
};
use cubecl::server::CopyDescriptor;

/// Waits for results whose copy to the host was started (see
/// [`Accelerator::accel_download_later`]) and returns them.
pub type Download = Box<dyn FnOnce() -> Result<Vec<TensorData>, String> + Send>;

/// A backend that runs the ops `Hetero` places on the accelerator.
///
/// Each method receives operands already on the accelerator, in the placement's precision (or
/// in f32 holding values already rounded to it, where the device cannot store that precision),
/// and returns the result there, accumulated in f32. The defaults use the backend's own Burn
/// kernels; an implementation overrides a method to launch its own kernel instead.
pub trait Accelerator: Backend {
    /// Copies host data (already in the upload dtype) to the device.
    fn accel_upload(data: TensorData, device: &Self::Device) -> Result<FloatTensor<Self>, String> {
        Ok(Self::float_from_data(data, device))
    }

    /// Copies f32 host values to the device as `dtype` (f16 or bf16, cast on the way; or f32 as
    /// they are). The default casts into a host buffer and calls [`Self::accel_upload`]; an
    /// implementation with a staging buffer casts (or copies) straight into it.
    fn accel_upload_cast(
        src: &[f32],
        shape: Shape,
        dtype: DType,
        device: &Self::Device,
    ) -> Result<FloatTensor<Self>, String> {
        Self::accel_upload(crate::cast::cast_slice(src, shape, dtype), device)
    }

    /// Copies several f32 host operands to the device, each as its dtype says and as
    /// [`Self::accel_upload_cast`] would. The default uploads them one by one; an implementation
    /// moves them in one transfer, as parts of one device buffer, so that an op's small operands
    /// (a conv's weight beside its input) do not each pay a copy's fixed cost.
    fn accel_upload_cast_all(
        operands: &[(&[f32], Shape, DType)],
        device: &Self::Device,
    ) -> Result<Vec<FloatTensor<Self>>, String> {
        upload_one_by_one::<Self>(operands, device)
    }

    /// Copies a result back to the host.
    fn accel_download(tensor: FloatTensor<Self>) -> Result<TensorData, String> {
        burn_std::future::block_on(Self::float_into_data(tensor)).map_err(|e| e.to_string())
    }

    /// Copies several results back to the host, in order. The default reads them one by one; an
    /// implementation reads them in one round trip to the device.
    fn accel_download_all(tensors: Vec<FloatTensor<Self>>) -> Result<Vec<TensorData>, String> {
        tensors.into_iter().map(Self::accel_download).collect()
    }

    /// Starts copying results back to the host and returns what waits for them: work queued on
    /// the device after this call does not hold up the copy (the device reads them in order,
    /// and the wait is for these results only). The default reads them at once, with
    /// [`Self::accel_download_all`].
    fn accel_download_later(tensors: Vec<FloatTensor<Self>>) -> Result<Download, String> {
        Ok(already_read(Self::accel_download_all(tensors)))
    }

    /// Called as an offloaded op starts, before its uploads: a backend whose device is driven
    /// by a thread that may be asleep wakes it here (see `wake`). The default does nothing.
    fn accel_wake(_device: &Self::Device) {}

    /// conv2d forward (NCHW input, OIHW weight).
    fn accel_conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> Result<FloatTensor<Self>, String> {
        Ok(<Self as ModuleOps<Self>>::conv2d(
            widen::<Self>(x),
            widen::<Self>(weight),
            bias.map(widen::<Self>),
            options,
        ))
    }

    /// conv2d gradient with respect to the input, of shape `x_shape`. Only the shape of the input
    /// is needed, so the input itself is not uploaded.
    fn accel_conv2d_x_backward(
        x_shape: Shape,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> Result<FloatTensor<Self>, String> {
        // Burn's signature takes the input tensor but reads only its shape: an unwritten
        // allocation of that shape stands in for it.
        let device = Self::float_device(&weight);
        let x = Self::float_empty(x_shape, &device, FloatDType::F32);
        Ok(<Self as ModuleOps<Self>>::conv2d_x_backward(
            x,
            widen::<Self>(weight),
            widen::<Self>(output_grad),
            options,
        ))
    }

    /// conv2d gradient with respect to the weight, of shape `weight_shape`. Only the shape of the
    /// weight is needed, so the weight itself is not uploaded.
    fn accel_conv2d_weight_backward(
        x: FloatTensor<Self>,
        weight_shape: Shape,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> Result<FloatTensor<Self>, String> {
        let device = Self::float_device(&x);
        let weight = Self::float_empty(weight_shape, &device, FloatDType::F32);
        Ok(<Self as ModuleOps<Self>>::conv2d_weight_backward(
            widen::<Self>(x),
            weight,
            widen::<Self>(output_grad),
            options,
        ))
    }

    /// Whether [`Self::accel_conv2d_weight_backward`] takes an input stored as f16 where its
    /// operands are bf16, and rounds it on to bf16 as it reads it (the forward's f16 upload of
    /// that input then serves as is). The default is false: the input is rounded to bf16 on
    /// the device first.
    fn accel_reads_f16_for_bf16() -> bool {
        false
    }

    /// Batched matrix product.
    fn accel_matmul(
        lhs: FloatTensor<Self>,
        rhs: FloatTensor<Self>,
    ) -> Result<FloatTensor<Self>, String> {
        Ok(<Self as FloatTensorOps<Self>>::float_matmul(
            widen::<Self>(lhs),
            widen::<Self>(rhs),
        ))
    }
}

/// A dense tensor of `shape` and `dtype` uploaded through pinned staging, when `R` is CUDA and
/// the staging is available; `fill` writes its `len` bytes chunk by chunk.
#[cfg(feature = "cuda")]
fn pinned_upload<R: CubeRuntime>(
    device: &R::Device,
    shape: &Shape,
    dtype: DType,
    len: usize,
    fill: &crate::pinned::Fill<'_>,
) -> Option<Result<CubeTensor<R>, String>> {
    let handle = pinned_upload_buffer::<R>(device, len, fill)?;
    Some(handle.map(|handle| {
        CubeTensor::new_contiguous(
            R::client(device),
            device.clone(),
            shape.clone(),
            handle,
            dtype,
        )
    }))
}

/// A device buffer of `len` bytes written by `fill` through pinned staging, when `R` is CUDA
/// and the staging is available.
#[cfg(feature = "cuda")]
fn pinned_upload_buffer<R: CubeRuntime>(
    device: &R::Device,
    len: usize,
    fill: &crate::pinned::Fill<'_>,
) -> Option<Result<cubecl::server::Handle, String>> {
    use cubecl::cuda::{CudaDevice, CudaRuntime};
    use cubecl::prelude::ComputeClient;
    use std::any::Any;
    if len == 0 {
        return None;
    }
    let cuda_device = (device as &dyn Any).downcast_ref::<CudaDevice>()?;
    let client = R::client(device);
    let cuda_client = (&client as &dyn Any).downcast_ref::<ComputeClient<CudaRuntime>>()?;
    crate::pinned::upload(cuda_client, cuda_device.index, len, fill)
}

/// Each operand uploaded on its own, with [`Accelerator::accel_upload_cast`].
fn upload_one_by_one<A: Accelerator>(
    operands: &[(&[f32], Shape, DType)],
    device: &A::Device,
) -> Result<Vec<FloatTensor<A>>, String> {
    operands
        .iter()
        .map(|(src, shape, dtype)| A::accel_upload_cast(src, shape.clone(), *dtype, device))
        .collect()
}

/// Alignment in bytes of each part of a buffer uploaded by `accel_upload_cast_all`: that of
/// CUDA's allocations, past any vector load of the kernels and the binding offsets wgpu allows.
const PART_ALIGN: usize = 256;

/// Where the parts of one upload lie in its buffer: each at an offset aligned to
/// [`PART_ALIGN`], the gaps between them left unwritten.
struct Parts {
    /// Byte offset and length of each part.
    spans: Vec<(usize, usize)>,
    /// Bytes of the buffer: the end of the last part.
    total: usize,
}

impl Parts {
    fn new(lens: impl Iterator<Item = usize>) -> Self {
        let mut spans = Vec::new();
        let mut total = 0usize;
        for len in lens {
            let start = total.next_multiple_of(PART_ALIGN);
            spans.push((start, len));
            total = start + len;
        }
        Parts { spans, total }
    }

    /// Fills `dst`, the buffer's bytes from `offset` on, with `fill(part, part_dst, at)`: the
    /// bytes of `part` from byte `at` of it into `part_dst`, for each part `dst` overlaps.
    fn fill(&self, dst: &mut [u8], offset: usize, fill: impl Fn(usize, &mut [u8], usize)) {
        let end = offset + dst.len();
        for (part, &(start, len)) in self.spans.iter().enumerate() {
            let (from, to) = (start.max(offset), (start + len).min(end));
            if from < to {
                fill(part, &mut dst[from - offset..to - offset], from - start);
            }
        }
    }

    /// The parts of `buffer` as dense tensors of the operands' shapes. Each handle starts at
    /// its part and runs to the buffer's end: the handle's size is its allocation's, rounded
    /// up past the bytes the storage holds, so an end offset counted from it cuts the part
    /// short (on CUDA and on wgpu alike). The tensors read only their shape's bytes.
    fn tensors<R: CubeRuntime>(
        &self,
        buffer: &cubecl::server::Handle,
        operands: &[(&[f32], Shape, DType)],
        client: &cubecl::prelude::ComputeClient<R>,
        device: &R::Device,
    ) -> Vec<CubeTensor<R>> {
        self.spans
            .iter()
            .zip(operands)
            .map(|(&(start, _), (_, shape, dtype))| {
                let handle = buffer.clone().offset_start(start as u64);
                CubeTensor::new_contiguous(
                    client.clone(),
                    device.clone(),
                    shape.clone(),
                    handle,
                    *dtype,
                )
            })
            .collect()
    }
}

/// Dense tensors of one device read back flat, in one call (one wait for the device).
fn read_dense<R: CubeRuntime>(tensors: Vec<CubeTensor<R>>) -> Result<Vec<TensorData>, String> {
    read_dense_later(tensors)()
}

/// A [`Download`] of results read already.
fn already_read(datas: Result<Vec<TensorData>, String>) -> Download {
    Box::new(move || datas)
}

/// Whether `tensors` are dense and on one device: then one call reads them all.
fn dense_on_one_device<R: CubeRuntime>(tensors: &[CubeTensor<R>]) -> bool {
    tensors.windows(2).all(|w| w[0].device == w[1].device)
        && tensors.iter().all(|t| t.is_contiguous())
}

/// [`read_dense`], the copies queued on the device now and waited for by the returned closure.
fn read_dense_later<R: CubeRuntime>(tensors: Vec<CubeTensor<R>>) -> Download {
    let Some(client) = tensors.first().map(|t| t.client.clone()) else {
        return Box::new(|| Ok(Vec::new()));
    };
    let expected: Vec<(Shape, DType, usize)> = tensors
        .iter()
        .map(|t| {
            let shape = t.shape();
            let num_bytes = shape.num_elements() * t.dtype.size();
            (shape, t.dtype, num_bytes)
        })
        .collect();
    let descriptors = tensors
        .iter()
        .zip(&expected)
        .map(|(t, (_, _, num_bytes))| {
            CopyDescriptor::new(
                t.handle.clone().binding(),
                [*num_bytes].into(),
                [1].into(),
                1,
            )
        })
        .collect();
    // Queues the copies (one round trip to the device thread); the future waits for them. The
    // results stay alive until then: their memory must not go back to the runtime's pool, where
    // another stream's work could take it, while the copy may still read it.
    let read = ReadInFlight::start(client, descriptors);
    Box::new(move || {
        let read = read.wait();
        drop(tensors);
        let read = read?;
        if read.len() != expected.len() {
            return Err(format!("read {} of {} results", read.len(), expected.len()));
        }
        read.into_iter()
            .zip(expected)
            .map(|(bytes, (shape, dtype, num_bytes))| {
                if bytes.len() != num_bytes {
                    return Err(format!(
                        "read {} bytes of a {num_bytes}-byte result",
                        bytes.len()
                    ));
                }
                Ok(TensorData::from_bytes(bytes, shape, dtype))
            })
            .collect()
    })
}

/// A read queued on a CubeCL device, with the client its future borrows.
struct ReadInFlight<R: CubeRuntime> {
    /// Borrows `*client`; dropped first (see `Drop`).
    future: core::mem::ManuallyDrop<ReadFuture<'static>>,
    client: Box<cubecl::prelude::ComputeClient<R>>,
}

type ReadFuture<'a> = core::pin::Pin<
    Box<dyn Future<Output = Result<Vec<burn_std::Bytes>, cubecl::server::ServerError>> + Send + 'a>,
>;

impl<R: CubeRuntime> ReadInFlight<R> {
    fn start(client: cubecl::prelude::ComputeClient<R>, descriptors: Vec<CopyDescriptor>) -> Self {
        let client = Box::new(client);
        let future: ReadFuture<'_> = Box::pin(client.read_tensor_async(descriptors));
        // SAFETY: the future borrows the client, which lives on the heap (its address does not
        // move with `Self`) and is dropped after the future (`Drop` below; `wait` consumes the
        // future before the client).
        let future: ReadFuture<'static> = unsafe { core::mem::transmute(future) };
        ReadInFlight {
            future: core::mem::ManuallyDrop::new(future),
            client,
        }
    }

    /// Waits for the read.
    fn wait(mut self) -> Result<Vec<burn_std::Bytes>, String> {
        // SAFETY: taken once; `Drop` will not see it again (`self` is forgotten below).
        let future = unsafe { core::mem::ManuallyDrop::take(&mut self.future) };
        let result = burn_std::future::block_on(future).map_err(|e| format!("{e:?}"));
        // The client is dropped after the future it lent itself to.
        let client = unsafe { core::ptr::read(&self.client) };
        core::mem::forget(self);
        drop(client);
        result
    }
}

impl<R: CubeRuntime> Drop for ReadInFlight<R> {
    fn drop(&mut self) {
        // SAFETY: the future is still there (`wait` forgets `self` after taking it), and goes
        // before the client it borrows, which the fields' own drop releases after this.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.future) };
    }
}

/// Casts low-precision operands to f32 on the device. Burn's kernels accumulate in the operand
/// type; casting first keeps the rounding of the operands (and the halved upload) while the sums
/// run in f32.
pub(crate) fn widen<B: Backend>(t: FloatTensor<B>) -> FloatTensor<B> {
    if t.dtype() == DType::F32 {
        t
    } else {
        B::float_cast(t, FloatDType::F32)
    }
}

/// Every CubeCL backend: the forward conv is our own kernel (matrix units where the device has
/// them, else a portable tiled kernel); the gradients are burn-cubecl's direct kernels.
impl<R, F, I, BT> Accelerator for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    /// One flat copy into a dense buffer. CubeCL's default tensor allocation pads every row on
    /// CUDA, which makes the upload a pitched 2D copy (one row of a 12x12 f16 image is 24 bytes)
    /// and the conv kernel's dense read needs a copy of it again.
    /// On CUDA the copy goes through pinned staging memory (see `pinned`).
    fn accel_upload(data: TensorData, device: &Self::Device) -> Result<FloatTensor<Self>, String> {
        #[cfg(feature = "cuda")]
        {
            let bytes: &[u8] = &data.bytes;
            let stores = crate::cast::staging_stores();
            let fill = |dst: &mut [u8], offset: usize| {
                crate::cast::bytes_into(dst, &bytes[offset..offset + dst.len()], stores)
            };
            let pinned = pinned_upload::<R>(device, &data.shape, data.dtype, bytes.len(), &fill);
            if let Some(result) = pinned {
                return result;
            }
        }
        let client = R::client(device);
        let shape = data.shape.clone();
        let dtype = data.dtype;
        let handle = client.create(data.bytes);
        Ok(CubeTensor::new_contiguous(
            client,
            device.clone(),
            shape,
            handle,
            dtype,
        ))
    }

    /// On CUDA the cast (or the copy, for f32) writes straight into pinned staging memory, a
    /// chunk at a time while the previous chunk is copied.
    fn accel_upload_cast(
        src: &[f32],
        shape: Shape,
        dtype: DType,
        device: &Self::Device,
    ) -> Result<FloatTensor<Self>, String> {
        #[cfg(feature = "cuda")]
        if matches!(dtype, DType::F16 | DType::BF16 | DType::F32) {
            let size = dtype.size();
            let stores = crate::cast::staging_stores();
            let fill = |dst: &mut [u8], offset: usize| {
                crate::cast::f32_into(&src[offset / size..], dst, dtype, stores)
            };
            let pinned = pinned_upload::<R>(device, &shape, dtype, src.len() * size, &fill);
            if let Some(result) = pinned {
                return result;
            }
        }
        Self::accel_upload(crate::cast::cast_slice(src, shape, dtype), device)
    }

    /// One device buffer holds all the operands, each at an offset aligned to
    /// [`PART_ALIGN`] bytes. On CUDA its bytes are cast straight into pinned staging and go up
    /// in one staged upload; elsewhere they are cast on the host and written by one call.
    fn accel_upload_cast_all(
        operands: &[(&[f32], Shape, DType)],
        device: &Self::Device,
    ) -> Result<Vec<FloatTensor<Self>>, String> {
        let castable = |d: &DType| matches!(d, DType::F16 | DType::BF16 | DType::F32);
        if operands.len() < 2 || !operands.iter().all(|(_, _, d)| castable(d)) {
            return upload_one_by_one::<Self>(operands, device);
        }
        let parts = Parts::new(operands.iter().map(|(src, _, d)| src.len() * d.size()));
        let stores = crate::cast::staging_stores();
        let fill = |dst: &mut [u8], offset: usize| {
            parts.fill(dst, offset, |part, dst, at| {
                let (src, _, dtype) = &operands[part];
                crate::cast::f32_into(&src[at / dtype.size()..], dst, *dtype, stores)
            })
        };
        let client = R::client(device);
        #[cfg(feature = "cuda")]
        if let Some(buffer) = pinned_upload_buffer::<R>(device, parts.total, &fill) {
            return Ok(parts.tensors(&buffer?, operands, &client, device));
        }
        // Whole u64 words: the casts write aligned values.
        let mut words = vec![0u64; parts.total.div_ceil(8)];
        fill(&mut bytemuck::cast_slice_mut(&mut words)[..parts.total], 0);
        let buffer = client.create(burn_std::Bytes::from_elems(words));
        Ok(parts.tensors(&buffer, operands, &client, device))
    }

    /// A dense result is read back as one flat copy (the rank-1 path of CubeCL's reads);
    /// any other layout goes through Burn's read.
    fn accel_download(tensor: FloatTensor<Self>) -> Result<TensorData, String> {
        if !tensor.is_contiguous() {
            return burn_std::future::block_on(Self::float_into_data(tensor))
                .map_err(|e| e.to_string());
        }
        read_dense(vec![tensor])?
            .pop()
            .ok_or_else(|| "a read returned no result".to_string())
    }

    /// Dense results of one device are read in one call (one wait for the device); others one
    /// by one.
    fn accel_download_all(tensors: Vec<FloatTensor<Self>>) -> Result<Vec<TensorData>, String> {
        if dense_on_one_device(&tensors) {
            return read_dense(tensors);
        }
        tensors.into_iter().map(Self::accel_download).collect()
    }

    /// Dense results of one device: their copies queued now, in one call; others read at once.
    fn accel_download_later(tensors: Vec<FloatTensor<Self>>) -> Result<Download, String> {
        if dense_on_one_device(&tensors) {
            return Ok(read_dense_later(tensors));
        }
        Ok(already_read(Self::accel_download_all(tensors)))
    }

    /// CubeCL's device thread sleeps when idle; the op's read would wait for it to wake.
    fn accel_wake(device: &Self::Device) {
        let id = cubecl_common::device::Device::to_id(device);
        #[cfg(feature = "cuda")]
        if core::any::TypeId::of::<R>() == core::any::TypeId::of::<cubecl::cuda::CudaRuntime>() {
            return crate::wake::wake_and_keep(id);
        }
        crate::wake::wake(id);
    }

    /// Our own kernels (`burn-hetero-kernels`): one launch, the operands read in their upload
    /// precision, sums in f32, the bias added in the epilogue.
    fn accel_conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> Result<FloatTensor<Self>, String> {
        own_conv2d::<R, F, I, BT>(x, weight, bias, options, WeightArg::Dense)
    }

    /// One group: our forward kernel on the output gradient, the weight read transposed and
    /// flipped by the kernel itself; with a stride, on the output gradient spread out by the
    /// stride with zeros in between (see [`XGradAsForward`]). Otherwise burn-cubecl's fallback
    /// (a transposed conv).
    fn accel_conv2d_x_backward(
        x_shape: Shape,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> Result<FloatTensor<Self>, String> {
        let plan = XGradAsForward::of(&x_shape, &weight.shape(), &output_grad.shape(), &options);
        if let Some(plan) = plan {
            let output_grad = plan.spread::<Self>(output_grad);
            let x_grad = own_conv2d::<R, F, I, BT>(
                output_grad,
                weight,
                None,
                plan.options,
                WeightArg::Flipped,
            )?;
            if x_grad.shape() != x_shape {
                return Err(format!(
                    "input gradient of shape {:?}, expected {x_shape:?}",
                    x_grad.shape()
                ));
            }
            return Ok(x_grad);
        }
        // The fallback's autotuned choice returned wrong input gradients for f16 operands on
        // the H200 (relative L2 0.57 on 5x5, 1 -> 20 channels, 28x28): Direct, in f32.
        conv_data_backward::<R, 2>(
            widen::<Self>(output_grad),
            widen::<Self>(weight),
            x_shape,
            options,
            ConvStrategy::Direct,
        )
        .map_err(|e| format!("{e:?}"))
    }

    /// One group: our weight-gradient kernel on the input and output gradient as they are
    /// (the input possibly the forward's f16 copy, rounded to bf16 as it is loaded), its
    /// reduction split over parts of the batch
    /// ([`burn_hetero_kernels::weight_grad_splits`]) whose partial sums are added here.
    /// Otherwise burn-cubecl's fallback.
    fn accel_conv2d_weight_backward(
        x: FloatTensor<Self>,
        weight_shape: Shape,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> Result<FloatTensor<Self>, String> {
        if options.groups == 1 {
            return own_weight_grad::<R, F, I, BT>(x, weight_shape, output_grad, options);
        }
        // The direct kernel (an f32 conv of the swapped operands), like the input gradient.
        conv_weight_backward::<R, 2>(
            widen::<Self>(x),
            widen::<Self>(output_grad),
            weight_shape,
            options,
            ConvStrategy::Direct,
        )
        .map_err(|e| format!("{e:?}"))
    }

    /// The weight gradient reads the forward's f16 input for its bf16 operands.
    fn accel_reads_f16_for_bf16() -> bool {
        true
    }
}

/// The input gradient of a conv (one group) as a forward conv of the output gradient with the
/// weight transposed and flipped: same dilation, stride 1, padding `dilation * (k - 1) -
/// padding`. With a stride `s`, the output gradient is first spread out: output pixel `o` goes
/// to `s * o`, zeros in between, and as many zero rows (columns) after the last as the input
/// had rows (columns) past the last window's reach. That spends `s²` times the multiplies of
/// the direct transposed conv, on the matrix units.
#[derive(Debug, Clone, PartialEq)]
struct XGradAsForward {
    /// The forward conv's options.
    options: ConvOptions<2>,
    /// The stride the output gradient is spread out by.
    stride: [usize; 2],
    /// Height and width of the spread output gradient.
    spread: [usize; 2],
}

impl XGradAsForward {
    /// The plan for an input of shape `x`, a weight of shape `weight` and an output gradient of
    /// shape `output_grad`; None where it does not apply (groups, a padding past the kernel's
    /// reach, an output gradient of another size than the conv's output).
    fn of(
        x: &Shape,
        weight: &Shape,
        output_grad: &Shape,
        options: &ConvOptions<2>,
    ) -> Option<Self> {
        if options.groups != 1 {
            return None;
        }
        let (mut padding, mut spread) = ([0; 2], [0; 2]);
        for i in 0..2 {
            let reach = options.dilation[i] * (weight[2 + i] - 1);
            padding[i] = reach.checked_sub(options.padding[i])?;
            // Output size o = (x + 2p - reach - 1) / s + 1; the input rows the last window
            // leaves out (< s) are the zero rows after the spread gradient's last.
            let span = (x[2 + i] + 2 * options.padding[i]).checked_sub(reach + 1)?;
            let outputs = span / options.stride[i] + 1;
            if output_grad[2 + i] != outputs {
                return None;
            }
            spread[i] = (outputs - 1) * options.stride[i] + 1 + span % options.stride[i];
        }
        Some(XGradAsForward {
            options: ConvOptions::new([1, 1], padding, options.dilation, 1),
            stride: options.stride,
            spread,
        })
    }

    /// The output gradient spread out (itself at stride 1): zeros, then the gradient assigned
    /// to every `stride`-th row and column.
    fn spread<B: Backend>(&self, output_grad: FloatTensor<B>) -> FloatTensor<B> {
        if self.stride == [1, 1] {
            return output_grad;
        }
        let shape = output_grad.shape();
        let (batch, channels) = (shape[0], shape[1]);
        let spread = Shape::new([batch, channels, self.spread[0], self.spread[1]]);
        let device = B::float_device(&output_grad);
        let zeros = B::float_zeros(spread, &device, output_grad.dtype().into());
        let every = |i: usize| {
            let end = (shape[2 + i] - 1) * self.stride[i] + 1;
            Slice::new(0, Some(end as isize), self.stride[i] as isize)
        };
        let slices = [
            Slice::from(0..batch),
            Slice::from(0..channels),
            every(0),
            every(1),
        ];
        B::float_slice_assign(zeros, &slices, output_grad)
    }
}

/// How [`own_conv2d`]'s weight is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WeightArg {
    /// As the conv's OIHW weight.
    Dense,
    /// The OIHW weight `[C, OC, KH, KW]` of another conv, read transposed and flipped (one
    /// group): the input gradient of that conv as this forward.
    Flipped,
}

/// The kernels' operand type of a tensor's dtype.
fn operand_type(dtype: DType) -> Result<(OperandType, FloatDType), String> {
    match dtype {
        DType::F32 => Ok((OperandType::F32, FloatDType::F32)),
        DType::F16 => Ok((OperandType::F16, FloatDType::F16)),
        DType::BF16 => Ok((OperandType::BF16, FloatDType::BF16)),
        other => Err(format!("no conv2d kernel for {other:?} operands")),
    }
}

/// conv2d forward through `burn-hetero-kernels` on the operands' client, into a new f32 tensor,
/// the weight read as `weight_arg` says.
fn own_conv2d<R, F, I, BT>(
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: Option<CubeTensor<R>>,
    options: ConvOptions<2>,
    weight_arg: WeightArg,
) -> Result<CubeTensor<R>, String>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    type B<R, F, I, BT> = CubeBackend<R, F, I, BT>;
    let (operand, dtype) = operand_type(x.dtype)?;
    // Both operands come from the same placement, so they share a dtype (but for a weight
    // whose copy at this precision was not uploaded); the kernels read them as laid out
    // (row-major, no offsets into views).
    let x = into_contiguous(x);
    let weight = if weight.dtype == x.dtype {
        weight
    } else {
        B::<R, F, I, BT>::float_cast(weight, dtype)
    };
    let weight = into_contiguous(weight);
    let bias = bias.map(|b| into_contiguous(widen::<B<R, F, I, BT>>(b)));
    let (xs, ws) = (x.shape(), weight.shape());
    if xs.num_dims() != 4 || ws.num_dims() != 4 {
        return Err(format!("conv2d of shapes {xs:?} and {ws:?}"));
    }
    // The conv's weight is [out, in / groups, kh, kw]; a flipped one is stored [in, out, ..].
    let (out_channels, weight_in) = match weight_arg {
        WeightArg::Dense => (ws[0], ws[1]),
        WeightArg::Flipped => (ws[1], ws[0]),
    };
    let problem = Conv2dProblem::new(xs[0], xs[1], [xs[2], xs[3]], out_channels, [ws[2], ws[3]])
        .with_stride(options.stride)
        .with_padding(options.padding)
        .with_dilation(options.dilation)
        .with_groups(options.groups);
    problem.validate().map_err(|e| e.to_string())?;
    if weight_in * options.groups != xs[1] {
        return Err(format!(
            "weight {ws:?} does not fit {} input channels in {} groups",
            xs[1], options.groups
        ));
    }
    let output_shape = Shape::from(vec![
        xs[0],
        out_channels,
        problem.out_height(),
        problem.out_width(),
    ]);
    // Dense row-major, as the kernel writes it: CubeCL's default ("optimized") allocation pads
    // each row to an alignment on CUDA, and a dense write into it scrambles the result.
    let output = empty_device_contiguous_dtype::<R>(
        x.client.clone(),
        x.device.clone(),
        output_shape,
        DType::F32,
    );
    check_dense(&[("input", &x), ("weight", &weight), ("output", &output)])?;
    if let Some(b) = &bias {
        check_dense(&[("bias", b)])?;
    }
    let buffers = Conv2dBuffers {
        input: &x.handle,
        weight: &weight.handle,
        bias: bias.as_ref().map(|b| &b.handle),
        output: &output.handle,
    };
    let launch = match weight_arg {
        WeightArg::Dense => conv2d_forward_async::<R>,
        WeightArg::Flipped => conv2d_forward_flipped_async::<R>,
    };
    // No flush here: the offload path reads the output next, which reports a failed launch.
    launch(
        &x.client,
        buffers,
        &problem,
        ConvTypes::new(operand),
        ConvPath::Auto,
    )
    .map_err(|e| e.to_string())?;
    Ok(output)
}

/// An error naming the first of `tensors` that is not dense.
fn check_dense<R: CubeRuntime>(tensors: &[(&str, &CubeTensor<R>)]) -> Result<(), String> {
    for (name, t) in tensors {
        if !t.is_contiguous() {
            return Err(format!(
                "the conv2d kernels need a dense {name}, got shape {:?} strides {:?}",
                t.shape(),
                t.meta.strides()
            ));
        }
    }
    Ok(())
}

/// The weight gradient of a one-group conv through `burn-hetero-kernels`: the kernel's partial
/// sums over parts of the batch, then their sum (one reduction) where there are several.
fn own_weight_grad<R, F, I, BT>(
    x: CubeTensor<R>,
    weight_shape: Shape,
    output_grad: CubeTensor<R>,
    options: ConvOptions<2>,
) -> Result<CubeTensor<R>, String>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    type B<R, F, I, BT> = CubeBackend<R, F, I, BT>;
    let (operand, _) = operand_type(output_grad.dtype)?;
    let (input_type, _) = operand_type(x.dtype)?;
    let (x, output_grad) = (into_contiguous(x), into_contiguous(output_grad));
    let (xs, gs) = (x.shape(), output_grad.shape());
    if xs.num_dims() != 4 || gs.num_dims() != 4 || weight_shape.num_dims() != 4 {
        return Err(format!(
            "conv2d weight gradient of shapes {xs:?}, {gs:?} for a weight of {weight_shape:?}"
        ));
    }
    let problem = Conv2dProblem::new(
        xs[0],
        xs[1],
        [xs[2], xs[3]],
        weight_shape[0],
        [weight_shape[2], weight_shape[3]],
    )
    .with_stride(options.stride)
    .with_padding(options.padding)
    .with_dilation(options.dilation);
    problem.validate().map_err(|e| e.to_string())?;
    let expected = problem.output_shape();
    if weight_shape[1] != xs[1] || gs.as_slice() != expected.as_slice() {
        return Err(format!(
            "conv2d weight gradient: input {xs:?}, output gradient {gs:?} and weight \
             {weight_shape:?} do not fit (the output gradient should be {expected:?})"
        ));
    }
    let splits = weight_grad_splits(&problem);
    let [o, i, kh, kw] = problem.weight_shape();
    let partials = empty_device_contiguous_dtype::<R>(
        x.client.clone(),
        x.device.clone(),
        Shape::new([splits, o * i * kh * kw]),
        DType::F32,
    );
    check_dense(&[
        ("input", &x),
        ("output gradient", &output_grad),
        ("partials", &partials),
    ])?;
    let buffers = WeightGradBuffers {
        input: &x.handle,
        output_grad: &output_grad.handle,
        partials: &partials.handle,
    };
    let types = WeightGradTypes {
        input: input_type,
        ..WeightGradTypes::new(operand)
    };
    conv2d_weight_grad_async(&x.client, buffers, &problem, types, splits, ConvPath::Auto)
        .map_err(|e| e.to_string())?;
    let grad = if splits > 1 {
        B::<R, F, I, BT>::float_sum_dim(partials, 0)
    } else {
        partials
    };
    Ok(B::<R, F, I, BT>::float_reshape(grad, weight_shape))
}
