//! The accelerator side: which backends can be `A`, and the ops they run for `Hetero`.

use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use burn_backend::ops::{FloatTensorOps, ModuleOps};
use burn_backend::{Backend, Shape, TensorMetadata};
use burn_cubecl::{BoolElement, CubeBackend, CubeRuntime, FloatElement, IntElement};

/// A backend that runs the ops `Hetero` places on the accelerator.
///
/// Each method receives operands already on the accelerator, in the placement's precision, and
/// returns the result there. The defaults use the backend's own Burn kernels; an implementation
/// overrides a method to launch its own kernel instead.
pub trait Accelerator: Backend {
    /// conv2d forward (NCHW input, OIHW weight).
    fn accel_conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        <Self as ModuleOps<Self>>::conv2d(x, weight, bias, options)
    }

    /// conv2d gradient with respect to the input, of shape `x_shape`. Only the shape of the input
    /// is needed, so the input itself is not uploaded.
    fn accel_conv2d_x_backward(
        x_shape: Shape,
        weight: FloatTensor<Self>,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        // Burn's signature takes the input tensor but reads only its shape: an unwritten
        // allocation of that shape stands in for it.
        let device = Self::float_device(&weight);
        let x = Self::float_empty(x_shape, &device, weight.dtype().into());
        <Self as ModuleOps<Self>>::conv2d_x_backward(x, weight, output_grad, options)
    }

    /// conv2d gradient with respect to the weight, of shape `weight_shape`. Only the shape of the
    /// weight is needed, so the weight itself is not uploaded.
    fn accel_conv2d_weight_backward(
        x: FloatTensor<Self>,
        weight_shape: Shape,
        output_grad: FloatTensor<Self>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        let device = Self::float_device(&x);
        let weight = Self::float_empty(weight_shape, &device, x.dtype().into());
        <Self as ModuleOps<Self>>::conv2d_weight_backward(x, weight, output_grad, options)
    }

    /// Batched matrix product.
    fn accel_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        <Self as FloatTensorOps<Self>>::float_matmul(lhs, rhs)
    }
}

impl<R, F, I, BT> Accelerator for CubeBackend<R, F, I, BT>
where
    R: CubeRuntime,
    F: FloatElement,
    I: IntElement,
    BT: BoolElement,
{
}
