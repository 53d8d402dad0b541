//! The CPU ops of a ResNet20 training step on burn-ndarray, burn-flex, `Hetero<Flex, _>`, which
//! replaces several of burn-flex's with threaded or fused passes (`src/ops/`), and
//! `Hetero<NdArray, _>`, which runs the same passes on burn-ndarray's arrays. Shapes are
//! the first stage's at batch 32 (`[32, 16, 32, 32]`; the fused batch norm passes at all three
//! stages' shapes), and the MNIST net's for the scalar scale
//! and the pooling (and its linear layer); every op gets operands held elsewhere too, as in a training step, so none
//! runs in place.
//!
//! `cargo bench -p burn-hetero-benches --bench cpu_ops`

use burn::tensor::{Distribution, Slice, Tensor};
use burn_backend::Backend;
use burn_backend::ops::ConvOptions;
use burn_backend::tensor::FloatTensor;
use burn_hetero::norm::BatchNormBackend;
use divan::Bencher;

type NdArray = burn_ndarray::NdArray<f32>;
type Flex = burn_flex::Flex;
/// The accelerator only completes the type: every op here runs on the CPU backend.
type Hetero = burn_hetero::Hetero<Flex, burn_hetero::CudaAccelerator>;
/// The same ops on burn-ndarray's arrays, handed to burn-flex code and back (the convs excepted:
/// on `Hetero<NdArray, _>` those placed on the CPU are burn-ndarray's).
type HeteroNdArray = burn_hetero::Hetero<NdArray, burn_hetero::CudaAccelerator>;

const SHAPE: [usize; 4] = [32, 16, 32, 32];
const EPSILON: f64 = 1e-5;

/// ResNet20's three stages at batch 32: the activations its batch norms see.
const STAGES: [&str; 3] = ["32x16x32x32", "32x32x16x16", "32x64x8x8"];

fn stage_shape(stage: &str) -> [usize; 4] {
    match stage {
        "32x16x32x32" => [32, 16, 32, 32],
        "32x32x16x16" => [32, 32, 16, 16],
        "32x64x8x8" => [32, 64, 8, 8],
        other => panic!("unknown stage {other}"),
    }
}

fn main() {
    divan::main();
}

fn random<B: Backend, const D: usize>(shape: [usize; D]) -> Tensor<B, D> {
    Tensor::random(shape, Distribution::Default, &Default::default())
}

fn primitive<B: Backend, const D: usize>(t: &Tensor<B, D>) -> FloatTensor<B> {
    t.clone().into_primitive().tensor()
}

#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn relu<B: Backend>(bencher: Bencher) {
    let x = random::<B, 4>(SHAPE);
    bencher.bench_local(|| burn::tensor::activation::relu(x.clone()));
}

/// The same ReLU (of the MNIST net's first activation) after the calling thread has worked
/// alone for 1 ms, as between the CPU ops of a training step: rayon's idle workers asleep by
/// then (`false`), or kept spinning by `burn_hetero::spin` (`true`, as the backend does while
/// offloaded ops keep coming). The difference is the cost of waking the pool.
#[divan::bench(args = [false, true], sample_size = 1, sample_count = 300)]
fn relu_after_idle(bencher: Bencher, spinning: bool) {
    let x = random::<Hetero, 4>([64, 20, 24, 24]);
    bencher
        .with_inputs(|| {
            if spinning {
                burn_hetero::spin::keep_workers_spinning(std::time::Duration::from_millis(50));
            }
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_millis(1) {
                std::hint::spin_loop();
            }
        })
        .bench_local_values(|()| burn::tensor::activation::relu(x.clone()));
}

#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn relu_backward<B: Backend>(bencher: Bencher) {
    let output = burn::tensor::activation::relu(random::<B, 4>(SHAPE));
    let grad = random::<B, 4>(SHAPE);
    bencher.bench_local(|| B::relu_backward(primitive(&output), primitive(&grad)));
}

/// The same on the MNIST net's hidden activation, `[64, 500]`: below the size that is split
/// across threads.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn relu_backward_small<B: Backend>(bencher: Bencher) {
    let output = burn::tensor::activation::relu(random::<B, 2>([64, 500]));
    let grad = random::<B, 2>([64, 500]);
    bencher.bench_local(|| B::relu_backward(primitive(&output), primitive(&grad)));
}

/// The residual add.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn add<B: Backend>(bencher: Bencher) {
    let (x, y) = (random::<B, 4>(SHAPE), random::<B, 4>(SHAPE));
    bencher.bench_local(|| x.clone() + y.clone());
}

/// A per-channel scale, as batch norm's op-by-op form and inference apply it.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn mul_per_channel<B: Backend>(bencher: Bencher) {
    let x = random::<B, 4>(SHAPE);
    let c = random::<B, 4>([1, SHAPE[1], 1, 1]);
    bencher.bench_local(|| x.clone() * c.clone());
}

/// The per-channel tensor on the left: `c - x`.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn sub_from_per_channel<B: Backend>(bencher: Bencher) {
    let x = random::<B, 4>(SHAPE);
    let c = random::<B, 4>([1, SHAPE[1], 1, 1]);
    bencher.bench_local(|| c.clone() - x.clone());
}

/// A product with a permuted view, as the gradient of batch norm's `swap_dims(0, 1)` arrives in
/// its op-by-op form.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn mul_permuted<B: Backend>(bencher: Bencher) {
    let t = random::<B, 4>([SHAPE[1], SHAPE[0], SHAPE[2], SHAPE[3]]).swap_dims(0, 1);
    let y = random::<B, 4>(SHAPE);
    bencher.bench_local(|| t.clone() * y.clone());
}

/// A reshape of the same permuted view (a copy).
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn reshape_permuted<B: Backend>(bencher: Bencher) {
    let t = random::<B, 4>([SHAPE[1], SHAPE[0], SHAPE[2], SHAPE[3]]).swap_dims(0, 1);
    bencher.bench_local(|| {
        t.clone()
            .reshape([SHAPE[0], SHAPE[1] * SHAPE[2] * SHAPE[3]])
    });
}

/// A ReLU of half the channels of a `[32, 32, 32, 32]` tensor. burn-flex's slice is a view
/// (planes of 16 × 32 × 32 dense values) that `Hetero<Flex, _>` copies before each pass;
/// `Hetero<NdArray, _>`'s slice is a dense copy already, made outside the timed loop.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn relu_channel_slice<B: Backend>(bencher: Bencher) {
    let t = random::<B, 4>([SHAPE[0], 2 * SHAPE[1], SHAPE[2], SHAPE[3]]).slice([
        Slice::from(..),
        Slice::from(0..SHAPE[1]),
        Slice::from(..),
        Slice::from(..),
    ]);
    bencher.bench_local(|| burn::tensor::activation::relu(t.clone()));
}

/// The convs of a ResNet20 step placed on the CPU: its first stage's 3×3 conv (`[32, 16, 32,
/// 32]`, 16 filters, padding 1), the stride-2 conv into the second stage, and a last-stage conv
/// (`[32, 64, 8, 8]`). burn-ndarray and burn-flex run their own ops; `Hetero`, its convs placed
/// on the CPU, runs `burn_hetero::cpu_conv`.
const CONVS: [(&str, [usize; 4], [usize; 4], usize); 3] = [
    ("16x32x32-3x3", SHAPE, [16, 16, 3, 3], 1),
    ("16x32x32-3x3-s2", SHAPE, [32, 16, 3, 3], 2),
    ("64x8x8-3x3", [32, 64, 8, 8], [64, 64, 3, 3], 1),
];

/// The operands of conv `name`: input, weight, an output gradient, options; `Hetero` set to
/// place its convs on the CPU.
fn conv_operands<B: Backend>(
    name: &str,
) -> (
    FloatTensor<B>,
    FloatTensor<B>,
    FloatTensor<B>,
    ConvOptions<2>,
) {
    Hetero::configure(&Default::default(), burn_hetero::HeteroConfig::cpu_only());
    let (_, x, w, stride) = CONVS.iter().find(|c| c.0 == name).expect("a listed conv");
    let options = ConvOptions::new([*stride; 2], [1, 1], [1, 1], 1);
    let out = [x[0], w[0], x[2] / stride, x[3] / stride];
    (
        primitive(&random::<B, 4>(*x)),
        primitive(&random::<B, 4>(*w)),
        primitive(&random::<B, 4>(out)),
        options,
    )
}

#[divan::bench(types = [NdArray, Flex, Hetero], args = ["16x32x32-3x3", "16x32x32-3x3-s2", "64x8x8-3x3"], sample_count = 10)]
fn conv2d_forward<B: Backend>(bencher: Bencher, conv: &str) {
    let (x, w, _, options) = conv_operands::<B>(conv);
    bencher.bench_local(|| B::conv2d(x.clone(), w.clone(), None, options.clone()));
}

#[divan::bench(types = [NdArray, Flex, Hetero], args = ["16x32x32-3x3", "16x32x32-3x3-s2", "64x8x8-3x3"], sample_count = 10)]
fn conv2d_x_backward<B: Backend>(bencher: Bencher, conv: &str) {
    let (x, w, g, options) = conv_operands::<B>(conv);
    bencher.bench_local(|| B::conv2d_x_backward(x.clone(), w.clone(), g.clone(), options.clone()));
}

#[divan::bench(types = [NdArray, Flex, Hetero], args = ["16x32x32-3x3", "16x32x32-3x3-s2", "64x8x8-3x3"], sample_count = 10)]
fn conv2d_weight_backward<B: Backend>(bencher: Bencher, conv: &str) {
    let (x, w, g, options) = conv_operands::<B>(conv);
    bencher.bench_local(|| {
        B::conv2d_weight_backward(x.clone(), w.clone(), g.clone(), options.clone())
    });
}

#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn batch_norm_forward<B: BatchNormBackend>(bencher: Bencher) {
    let x = random::<B, 4>(SHAPE);
    let (gamma, beta) = (random::<B, 1>([SHAPE[1]]), random::<B, 1>([SHAPE[1]]));
    bencher.bench_local(|| {
        B::batch_norm_train(primitive(&x), primitive(&gamma), primitive(&beta), EPSILON)
    });
}

#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn batch_norm_backward<B: BatchNormBackend>(bencher: Bencher) {
    let x = random::<B, 4>(SHAPE);
    let gamma = random::<B, 1>([SHAPE[1]]);
    // The batch statistics per channel, as the forward returns them.
    let per_channel = x
        .clone()
        .swap_dims(0, 1)
        .reshape([SHAPE[1], SHAPE[0] * SHAPE[2] * SHAPE[3]]);
    let mean = per_channel.clone().mean_dim(1).reshape([SHAPE[1]]);
    let var = per_channel.var_bias(1).reshape([SHAPE[1]]);
    let grad = random::<B, 4>(SHAPE);
    bencher.bench_local(|| {
        B::batch_norm_train_backward(
            primitive(&x),
            primitive(&gamma),
            primitive(&mean),
            primitive(&var),
            primitive(&grad),
            EPSILON,
        )
    });
}

/// `relu(batch_norm(x) + residual)`, the end of a ResNet block: one fused pass on `Hetero`, the
/// batch norm, an add and a ReLU on the others (compare with `batch_norm_forward` + `add` +
/// `relu`).
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray], args = STAGES)]
fn batch_norm_relu_forward<B: BatchNormBackend>(bencher: Bencher, stage: &str) {
    let shape = stage_shape(stage);
    let (x, residual) = (random::<B, 4>(shape), random::<B, 4>(shape));
    let (gamma, beta) = (random::<B, 1>([shape[1]]), random::<B, 1>([shape[1]]));
    bencher.bench_local(|| {
        B::batch_norm_relu_train(
            primitive(&x),
            primitive(&gamma),
            primitive(&beta),
            Some(primitive(&residual)),
            EPSILON,
        )
    });
}

/// Its backward, with and without the residual's gradient: ReLU's backward a pass of the same
/// op on `Hetero` (compare with `batch_norm_backward` + `relu_backward`).
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray], consts = [false, true], args = STAGES)]
fn batch_norm_relu_backward<B: BatchNormBackend, const KEEP_RESIDUAL_GRAD: bool>(
    bencher: Bencher,
    stage: &str,
) {
    let shape = stage_shape(stage);
    let keep_residual_grad = KEEP_RESIDUAL_GRAD;
    let (x, residual) = (random::<B, 4>(shape), random::<B, 4>(shape));
    let (gamma, beta) = (random::<B, 1>([shape[1]]), random::<B, 1>([shape[1]]));
    let forward = B::batch_norm_relu_train(
        primitive(&x),
        primitive(&gamma),
        primitive(&beta),
        Some(primitive(&residual)),
        EPSILON,
    );
    let grad = random::<B, 4>(shape);
    bencher.bench_local(|| {
        B::batch_norm_relu_train_backward(
            primitive(&x),
            primitive(&gamma),
            forward.mean.clone(),
            forward.var.clone(),
            forward.output.clone(),
            primitive(&grad),
            keep_residual_grad,
            EPSILON,
        )
    });
}

/// The backward of ResNet's strided shortcut `x[:, :, ::2, ::2]`: the gradient written into
/// every other row and column of zeros.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn strided_slice_assign<B: Backend>(bencher: Bencher) {
    let zeros = Tensor::<B, 4>::zeros(SHAPE, &Default::default());
    let grad = random::<B, 4>([SHAPE[0], SHAPE[1], SHAPE[2] / 2, SHAPE[3] / 2]);
    let (all, every_other) = (Slice::new(0, None, 1), Slice::new(0, None, 2));
    let slices = [all, all, every_other, every_other];
    bencher.bench_local(|| zeros.clone().slice_assign(slices.as_slice(), grad.clone()));
}

/// An optimizer's scaling of a parameter or gradient held elsewhere (SGD: `lr * grad`), on the
/// MNIST net's largest weight.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn mul_scalar<B: Backend>(bencher: Bencher) {
    let w = random::<B, 2>([800, 500]);
    bencher.bench_local(|| w.clone().mul_scalar(0.01));
}

/// The MNIST net's first max pooling: 2x2 windows, stride 2, over `[64, 20, 24, 24]`.
const POOL_INPUT: [usize; 4] = [64, 20, 24, 24];
const POOL_WINDOW: [usize; 2] = [2, 2];

/// That pooling with its indices, as training runs it.
fn pool_with_indices<B: Backend>(
    x: Tensor<B, 4>,
) -> (Tensor<B, 4>, Tensor<B, 4, burn::tensor::Int>) {
    burn::tensor::module::max_pool2d_with_indices(
        x,
        POOL_WINDOW,
        POOL_WINDOW,
        [0, 0],
        [1, 1],
        false,
    )
}

#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn max_pool2d_with_indices<B: Backend>(bencher: Bencher) {
    let x = random::<B, 4>(POOL_INPUT);
    bencher.bench_local(|| pool_with_indices(x.clone()));
}

/// Its backward.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn max_pool2d_backward<B: Backend>(bencher: Bencher) {
    let x = random::<B, 4>(POOL_INPUT);
    let (y, indices) = pool_with_indices(x.clone());
    let grad = random::<B, 4>(y.dims());
    bencher.bench_local(|| {
        B::max_pool2d_with_indices_backward(
            primitive(&x),
            POOL_WINDOW,
            POOL_WINDOW,
            [0, 0],
            [1, 1],
            false,
            primitive(&grad),
            indices.clone().into_primitive(),
        )
    });
}

/// The MNIST net's first linear layer at batch 64: `[64, 800] · [800, 500] + [500]`.
const LINEAR: (usize, usize, usize) = (64, 800, 500);

#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn linear<B: Backend>(bencher: Bencher) {
    let (rows, d_in, d_out) = LINEAR;
    let (x, w, b) = (
        random::<B, 2>([rows, d_in]),
        random::<B, 2>([d_in, d_out]),
        random::<B, 1>([d_out]),
    );
    bencher.bench_local(|| B::linear(primitive(&x), primitive(&w), Some(primitive(&b))));
}

/// Its input gradient, `output_grad · weightᵀ`.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn linear_x_backward<B: Backend>(bencher: Bencher) {
    let (rows, d_in, d_out) = LINEAR;
    let (w, g) = (random::<B, 2>([d_in, d_out]), random::<B, 2>([rows, d_out]));
    bencher.bench_local(|| B::linear_x_backward(primitive(&w), primitive(&g)));
}

/// Its weight gradient, `xᵀ · output_grad`.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray])]
fn linear_weight_backward<B: Backend>(bencher: Bencher) {
    let (rows, d_in, d_out) = LINEAR;
    let (x, g) = (random::<B, 2>([rows, d_in]), random::<B, 2>([rows, d_out]));
    bencher.bench_local(|| B::linear_weight_backward(primitive(&x), primitive(&g)));
}

/// A momentum SGD step with weight decay (lr 0.01, momentum 0.9, decay 1e-4) of the MNIST
/// net's largest weight, the velocity from an earlier step: burn-optim's `Sgd` (tensor ops) on
/// each backend, and `FusedSgd` (one op; on `Hetero<Flex, _>` one threaded pass). Parameter,
/// gradient and velocity are fresh buffers of their own each time (made outside the timing), as
/// in a training step, so either may write in place.
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray], args = [false, true])]
fn sgd_step<B: burn_hetero::optim::SgdBackend>(bencher: Bencher, fused: bool) {
    use burn::optim::decay::WeightDecayConfig;
    use burn::optim::momentum::MomentumConfig;
    let momentum = MomentumConfig::new().with_momentum(0.9);
    let decay = WeightDecayConfig::new(1e-4);
    if fused {
        let sgd = burn_hetero::optim::FusedSgd::<B>::new(Some(&momentum), Some(&decay));
        bench_sgd_step::<B, _>(bencher, sgd);
    } else {
        let sgd = burn::optim::SgdConfig::new()
            .with_momentum(Some(momentum))
            .with_weight_decay(Some(decay))
            .build::<B>();
        bench_sgd_step::<B, _>(bencher, sgd);
    }
}

/// One step of `sgd` on fresh `[800, 500]` operands, the state from a first step.
fn bench_sgd_step<B: Backend, O: burn::optim::SimpleOptimizer<B>>(bencher: Bencher, sgd: O) {
    let fresh = || random::<B, 2>([800, 500]);
    bencher
        .with_inputs(|| (sgd.step(0.01, fresh(), fresh(), None), fresh()))
        .bench_local_values(|((w, state), g)| sgd.step(0.01, w, g, state));
}

/// The log-softmax of ResNet20's logits at batch 128 (`[128, 10]`) forward and its input
/// gradient, as a training step runs them (under autodiff, the gradient of the sum): burn's
/// `log_softmax` (tensor ops, recorded one by one) on each backend, and
/// `burn_hetero::softmax::log_softmax` (one op each way; on `Hetero` a pass over each row).
#[divan::bench(types = [NdArray, Flex, Hetero, HeteroNdArray], args = [false, true])]
fn log_softmax<B: burn_hetero::softmax::LogSoftmaxBackend>(bencher: Bencher, one_op: bool) {
    type Ad<B> = burn_autodiff::Autodiff<B>;
    let logits = random::<Ad<B>, 2>([128, 10]);
    bencher.bench_local(|| {
        let x = logits.clone().require_grad();
        let y = if one_op {
            burn_hetero::softmax::log_softmax(x.clone())
        } else {
            burn::tensor::activation::log_softmax(x.clone(), 1)
        };
        let grads = y.sum().backward();
        x.grad(&grads)
    });
}

/// The host half of an upload: ResNet20's first-stage activation at batch 32 and 128 cast to
/// f16 into a staging-sized destination with ordinary (`false`) or streaming (`true`) stores
/// (`burn_hetero::cast::f32_into`). Here the destination is ordinary memory and nothing copies
/// it afterwards, so this times the fill alone; what streaming stores save on the copy after it
/// shows only on a device (`examples/copy_bench.rs`). Where the destination fits in the caches,
/// as here when one buffer is filled over and over, cached stores win the fill alone (2-core
/// development machine, 2026-12-03, medians: 1 MiB 39.5 against 86.2 µs, 4 MiB 144.8 against
/// 232.1); on the H200 machine, in `copy_bench`'s table of the staging as a step runs it, the
/// fill was equal at 1 MiB and 1.7× faster with streaming stores from 4 MiB, and the copy
/// behind it 1.5–1.7× faster (`benches/RESULTS.md`, 2026-12-03).
#[divan::bench(args = [(524_288, false), (524_288, true), (2_097_152, false), (2_097_152, true)])]
fn f16_into_staging(bencher: Bencher, (n, streaming): (usize, bool)) {
    use burn_hetero::cast::{Stores, f32_into};
    let src: Vec<f32> = random::<Flex, 1>([n]).into_data().to_vec().unwrap();
    // u64 words keep the destination 8-byte aligned, as a pinned slot's start is.
    let mut dst = vec![0u64; n.div_ceil(4)];
    let stores = if streaming {
        Stores::Streaming
    } else {
        Stores::Cached
    };
    bencher.bench_local(|| {
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut dst);
        f32_into(&src, &mut bytes[..n * 2], burn_backend::DType::F16, stores)
    });
}
