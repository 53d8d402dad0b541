//! Burn's op signatures carry a few containers generic over the backend. `Hetero`'s primitives
//! are `C`'s, so converting a container between the two is moving its fields across.

use crate::{Accelerator, Hetero};
use burn_backend::ops::{
    DeformConv2dBackward, MaxPool1dBackward, MaxPool1dWithIndices, MaxPool2dBackward,
    MaxPool2dWithIndices,
};
use burn_backend::tensor::quantization::QuantizationParametersPrimitive;
use burn_backend::{Backend, TensorPrimitive};

/// A container of `C`'s primitives seen as one of `Hetero<C, A>`'s, or the other way round.
pub(crate) trait Rebind<To> {
    fn rebind(self) -> To;
}

/// Moves a container between `C` and `Hetero<C, A>`.
pub(crate) fn rebind<From: Rebind<To>, To>(from: From) -> To {
    from.rebind()
}

/// Implements `Rebind` both ways for a struct whose fields are all primitives.
macro_rules! rebind_struct {
    ($name:ident { $($field:ident),* }) => {
        impl<C: Backend, A: Accelerator> Rebind<$name<Hetero<C, A>>> for $name<C> {
            fn rebind(self) -> $name<Hetero<C, A>> {
                $name { $($field: self.$field),* }
            }
        }
        impl<C: Backend, A: Accelerator> Rebind<$name<C>> for $name<Hetero<C, A>> {
            fn rebind(self) -> $name<C> {
                $name { $($field: self.$field),* }
            }
        }
    };
}

rebind_struct!(DeformConv2dBackward {
    x_grad,
    offset_grad,
    weight_grad,
    mask_grad,
    bias_grad
});
rebind_struct!(MaxPool1dBackward { x_grad });
rebind_struct!(MaxPool1dWithIndices { output, indices });
rebind_struct!(MaxPool2dBackward { x_grad });
rebind_struct!(MaxPool2dWithIndices { output, indices });
rebind_struct!(QuantizationParametersPrimitive { scales });

impl<C: Backend, A: Accelerator> Rebind<TensorPrimitive<Hetero<C, A>>> for TensorPrimitive<C> {
    fn rebind(self) -> TensorPrimitive<Hetero<C, A>> {
        match self {
            TensorPrimitive::Float(t) => TensorPrimitive::Float(t),
            TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(t),
        }
    }
}

impl<C: Backend, A: Accelerator> Rebind<TensorPrimitive<C>> for TensorPrimitive<Hetero<C, A>> {
    fn rebind(self) -> TensorPrimitive<C> {
        match self {
            TensorPrimitive::Float(t) => TensorPrimitive::Float(t),
            TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(t),
        }
    }
}
