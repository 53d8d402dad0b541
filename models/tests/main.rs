//! Tests of burn-hetero-models: one binary, a module per part of the crate. The models run on
//! `Autodiff<NdArray>`, the backend every other one is compared against.

mod cli;
mod data;
mod hetero;
mod mnist_net;
mod resnet;

/// The backend of the model tests.
pub type B = burn::backend::Autodiff<burn_ndarray::NdArray<f32>>;

/// Trainable parameters (elements of the tensors that take gradients) of a module. Burn's
/// `Module::num_params` also counts batch norm's running mean and variance, which PyTorch's
/// parameter counts (and the paper's) leave out.
pub fn trainable_params<M: burn::module::Module<B>>(module: &M) -> usize {
    struct Count(usize);
    impl burn::module::ModuleVisitor<B> for Count {
        fn visit_float<const D: usize>(
            &mut self,
            param: &burn::module::Param<burn::tensor::Tensor<B, D>>,
        ) {
            let tensor = param.val();
            if tensor.is_require_grad() {
                self.0 += tensor.shape().num_elements();
            }
        }
    }
    let mut count = Count(0);
    module.visit(&mut count);
    count.0
}

/// Reads a float tensor back as a vector.
pub fn values<const D: usize>(t: burn::tensor::Tensor<B, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().expect("f32 tensor")
}

/// Asserts that two slices agree within `tol` element by element.
#[track_caller]
pub fn assert_close(actual: &[f32], expected: &[f32], tol: f32) {
    assert_eq!(actual.len(), expected.len(), "lengths differ");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!((a - e).abs() <= tol, "element {i}: {a} vs {e} (tol {tol})");
    }
}
