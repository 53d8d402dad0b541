//! The conformance suite of burn-hetero: one test binary, run on the Vulkan accelerator
//! (lavapipe on machines without a GPU).

mod common;
mod diff_float;
mod diff_int_bool;
mod diff_module;

/// Differential: every op of every Backend op trait on `Hetero` against burn-ndarray, identical
/// results required (all placements on the CPU here, so that every op is the forwarded one; the
/// accelerator path has its own tests). Each test then fails if an op of its traits was never
/// called.
mod differential {
    use crate::common::*;
    use burn_hetero::HeteroConfig;

    #[test]
    fn differential_float_ops() {
        let _s = settings(HeteroConfig::cpu_only());
        crate::diff_float::run_all();
        assert_covered(&["FloatTensorOps::"]);
    }

    /// The rewritten broadcasts of `Hetero<Flex, _>` against burn-flex itself.
    #[test]
    fn differential_flex_broadcasts() {
        crate::diff_float::flex_broadcasts_are_identical();
    }

    /// Strided views and the threaded binary ops of `Hetero<Flex, _>` against burn-flex itself.
    #[test]
    fn differential_flex_layouts() {
        crate::diff_float::flex_layouts_are_identical();
    }

    /// 2D max pooling and its backward on `Hetero<Flex, _>` against burn-flex itself.
    #[test]
    fn differential_flex_pooling() {
        crate::diff_float::flex_pooling_is_identical();
    }

    /// The threaded linear layers of `Hetero<Flex, _>` against an f64 reference.
    #[test]
    fn flex_linear_layers() {
        crate::diff_module::linear_matches_f64::<crate::common::HeteroFlex>();
    }

    /// The linear layers of `Hetero<NdArray, _>` (large products threaded through the bridge,
    /// small ones burn-ndarray's) against the same reference.
    #[test]
    fn ndarray_linear_layers() {
        let _s = settings(HeteroConfig::cpu_only());
        crate::diff_module::linear_matches_f64::<crate::common::H>();
    }

    #[test]
    fn differential_flex_slice_assign() {
        crate::diff_float::flex_slice_assign_is_identical();
    }

    /// Zeros and concatenation written across threads on `Hetero<Flex, _>`, against burn-flex.
    #[test]
    fn differential_flex_fill() {
        crate::diff_float::flex_fill_is_identical();
    }

    #[test]
    fn differential_int_and_bool_ops() {
        let _s = settings(HeteroConfig::cpu_only());
        crate::diff_int_bool::run_all();
        assert_covered(&["IntTensorOps::", "BoolTensorOps::"]);
    }

    #[test]
    fn differential_module_activation_quantized_transaction_ops() {
        let _s = settings(HeteroConfig::cpu_only());
        crate::diff_module::run_all();
        assert_covered(&[
            "ModuleOps::",
            "ActivationOps::",
            "QTensorOps::",
            "TransactionOps::",
        ]);
    }
}

mod autodiff;
mod batch_norm;
mod cast;
mod conv_numerics;
mod cpu_conv;
mod model;
mod ndarray_bridge;
mod optim;
mod placement;
mod pool_spin;
mod softmax;
mod sums;
mod training;
