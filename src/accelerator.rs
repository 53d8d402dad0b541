//! The accelerator side: which backends can be `A`, and the ops they run for `Hetero`.

use burn_backend::ops::{ConvOptions, FloatTensorOps, ModuleOps};
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, FloatDType, Shape, TensorMetadata};
use burn_cubecl::kernel::conv::{
    ConvStrategy, conv_data_backward, conv_forward, conv_weight_backward,
};
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

/// A backend that runs the ops `Hetero` places on the accelerator.
///
/// Each method receives operands already on the accelerator, in the placement's precision (or
/// in f32 holding values already rounded to it, where the device cannot store that precision),
/// and returns the result there, accumulated in f32. The defaults use the backend's own Burn
/// kernels; an implementation overrides a method to launch its own kernel instead.
pub trait Accelerator: Backend {
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

/// burn-cubecl's conv kernels. Forward: autotuned where the device has matrix instructions and
/// the operands are f16/bf16 (whose values the matrix
/// units' tf32 mode holds exactly, so the sums stay f32-accurate), the direct kernels for f32
/// operands (tf32 would round them to 10 mantissa bits) and on devices without matrix units (a
/// CPU Vulkan driver, where autotune would only benchmark kernels that cannot win).
impl<R, F, I, BT> Accelerator for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
    fn accel_conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> Result<FloatTensor<Self>, String> {
        let strategy = conv_strategy(&x);
        conv_forward::<R, 2>(
            widen::<Self>(x),
            widen::<Self>(weight),
            bias.map(widen::<Self>),
            options,
            strategy,
        )
        .map_err(|e| format!("{e:?}"))
    }

    fn accel_conv2d_x_backward(
        x_shape: Shape,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> Result<FloatTensor<Self>, String> {
        // The direct kernel always: on the H200 the autotuned choice returned wrong input
        // gradients for f16 operands (relative L2 0.57 on 5x5, 1 -> 20 channels, 28x28).
        conv_data_backward::<R, 2>(
            widen::<Self>(output_grad),
            widen::<Self>(weight),
            x_shape,
            options,
            ConvStrategy::Direct,
        )
        .map_err(|e| format!("{e:?}"))
    }

    fn accel_conv2d_weight_backward(
        x: FloatTensor<Self>,
        weight_shape: Shape,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> Result<FloatTensor<Self>, String> {
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
}

/// `operand` is one of the uploaded operands, in its upload dtype.
fn conv_strategy<R: CubeRuntime>(operand: &burn_cubecl::tensor::CubeTensor<R>) -> ConvStrategy {
    let features = &operand.client.properties().features.matmul;
    let no_matrix_units = features.cmma.is_empty() && features.mma.is_empty();
    if no_matrix_units || operand.dtype == DType::F32 {
        ConvStrategy::Direct
    } else {
        ConvStrategy::Autotune
    }
}
