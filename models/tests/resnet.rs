//! The CIFAR ResNets: depth validation, the paper's parameter counts, shapes, loss.

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use burn_hetero_models::resnet::BasicBlock;
use burn_hetero_models::{ResNetConfig, ResNetConfigError, Shortcut};

use crate::{B, assert_close, trainable_params, values};

/// Batch norm running mean and variance of ResNet20: 2 per channel of its 19 batch norms
/// (16 + 6·16 + 6·32 + 6·64 = 688 channels), plus 2·(32 + 64) for option B's projections.
const RESNET20_RUNNING_STATS: usize = 2 * 688;

/// Trainable parameters with option A shortcuts and 3 input channels, and the paper's rounded
/// figure (He et al. 2016, Table 6). Per n: stem 3·16·9 + 32, stage 1 n·2·(16·16·9 + 32),
/// stage 2 (16·32·9 + 64) + (2n-1)·(32·32·9 + 64), stage 3 likewise with 64, linear 64·10 + 10,
/// which sums to 97 216 n − 21 926.
const PAPER_COUNTS: [(usize, usize, f64); 6] = [
    (20, 269_722, 0.27e6),
    (32, 464_154, 0.46e6),
    (44, 658_586, 0.66e6),
    (56, 853_018, 0.85e6),
    (110, 1_727_962, 1.7e6),
    (1202, 19_421_274, 19.4e6),
];

#[test]
fn depths_that_are_not_6n_plus_2_are_errors() {
    for depth in [0, 1, 2, 7, 9, 19, 21, 100, 1201] {
        let err = ResNetConfig::new(depth).unwrap_err();
        assert_eq!(err, ResNetConfigError::InvalidDepth { depth });
        let message = err.to_string();
        assert!(
            message.contains(&depth.to_string()) && message.contains("6n+2"),
            "{message}"
        );
    }
    for (depth, n) in [(8, 1), (14, 2), (20, 3), (56, 9), (110, 18), (1202, 200)] {
        assert_eq!(ResNetConfig::new(depth).unwrap().blocks_per_stage(), n);
    }
    let config = ResNetConfig::new(20).unwrap();
    assert_eq!(
        config.clone().with_in_channels(0),
        Err(ResNetConfigError::NoInputChannels)
    );
    assert_eq!(
        config.with_num_classes(0),
        Err(ResNetConfigError::NoClasses)
    );
}

#[test]
fn counted_parameters_are_the_papers() {
    for (depth, exact, paper) in PAPER_COUNTS {
        let count = ResNetConfig::new(depth).unwrap().num_params();
        assert_eq!(count, exact, "ResNet{depth}");
        assert_eq!(count, 97_216 * (depth - 2) / 6 - 21_926, "ResNet{depth}");
        // The paper rounds to 2 significant digits (3 for ResNet1202).
        let rel = (count as f64 - paper).abs() / paper;
        assert!(
            rel < 0.02,
            "ResNet{depth}: {count} against the paper's {paper}"
        );
    }
}

#[test]
fn built_models_have_the_counted_parameters() {
    let device = Default::default();
    for (depth, exact, _) in &PAPER_COUNTS {
        let model = ResNetConfig::new(*depth).unwrap().init::<B>(&device);
        assert_eq!(trainable_params(&model), *exact, "ResNet{depth}");
        assert_eq!(model.blocks().len(), 3 * (depth - 2) / 6);
    }
}

#[test]
fn option_b_adds_the_two_projections() {
    let device = Default::default();
    // 1x1 16->32 + BN(32), and 1x1 32->64 + BN(64): whatever the depth.
    let projections = (16 * 32 + 2 * 32) + (32 * 64 + 2 * 64);
    assert_eq!(projections, 2_752);
    for depth in [20, 56, 1202] {
        let a = ResNetConfig::new(depth).unwrap();
        let b = a.clone().with_shortcut(Shortcut::Projection);
        assert_eq!(
            b.num_params() - a.num_params(),
            projections,
            "ResNet{depth}"
        );
    }
    let a = ResNetConfig::new(20).unwrap();
    let b = a.clone().with_shortcut(Shortcut::Projection);
    let (model_a, model_b) = (a.init::<B>(&device), b.init::<B>(&device));
    assert_eq!(trainable_params(&model_a), 269_722);
    assert_eq!(trainable_params(&model_b), 269_722 + 2_752);
    // Burn's count adds the running statistics, which are not trained.
    assert_eq!(model_a.num_params(), 269_722 + RESNET20_RUNNING_STATS);
    assert_eq!(
        model_b.num_params(),
        269_722 + 2_752 + RESNET20_RUNNING_STATS + 2 * (32 + 64)
    );
}

#[test]
fn one_input_channel_drops_two_thirds_of_the_stem() {
    let config = ResNetConfig::new(20).unwrap().with_in_channels(1).unwrap();
    // The stem conv has 1*16*9 weights instead of 3*16*9.
    assert_eq!(config.num_params(), 269_722 - 2 * 16 * 9);
    assert_eq!(
        trainable_params(&config.init::<B>(&Default::default())),
        269_722 - 288
    );
}

#[test]
fn forward_shapes_for_32x32_batch_2() {
    let device = Default::default();
    B::seed(&device, 3);
    for (channels, shortcut) in [
        (3, Shortcut::ZeroPad),
        (3, Shortcut::Projection),
        (1, Shortcut::ZeroPad),
    ] {
        let model = ResNetConfig::new(20)
            .unwrap()
            .with_in_channels(channels)
            .unwrap()
            .with_shortcut(shortcut)
            .init::<B>(&device);
        let images = Tensor::<B, 4>::random(
            [2, channels, 32, 32],
            Distribution::Normal(0.0, 1.0),
            &device,
        );
        let logits = model.forward(images);
        assert_eq!(logits.dims(), [2, 10], "{channels} channels, {shortcut:?}");
        assert!(values(logits).iter().all(|v| v.is_finite()));
    }
}

#[test]
fn loss_is_cross_entropy_and_gradients_reach_the_stem() {
    let device = Default::default();
    B::seed(&device, 5);
    let model = ResNetConfig::new(8).unwrap().init::<B>(&device);
    let images = Tensor::<B, 4>::random([2, 3, 32, 32], Distribution::Normal(0.0, 1.0), &device);
    let targets = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![3i64, 7], [2]), &device);
    let logits = model.forward(images);
    let expected = CrossEntropyLossConfig::new()
        .init(&device)
        .forward(logits.clone(), targets.clone());
    let loss = model.loss(logits, targets);
    assert_close(&values(loss.clone()), &values(expected), 1e-5);

    // Through every block, option A's subsampling and zero channels included.
    let grads = loss.backward();
    let mut stem_grad_norm = None;
    model.visit(&mut FirstParamGrad {
        grads: &grads,
        norm: &mut stem_grad_norm,
    });
    let norm = stem_grad_norm.expect("stem weight has a gradient");
    assert!(norm.is_finite() && norm > 0.0, "stem gradient norm {norm}");
}

/// Records the L2 norm of the gradient of the first parameter visited (the stem's weight).
struct FirstParamGrad<'a> {
    grads: &'a <B as burn::tensor::backend::AutodiffBackend>::Gradients,
    norm: &'a mut Option<f32>,
}

impl burn::module::ModuleVisitor<B> for FirstParamGrad<'_> {
    fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<B, D>>) {
        if self.norm.is_none()
            && let Some(grad) = param.val().grad(self.grads)
        {
            let sq: f32 = grad.into_data().iter::<f32>().map(|g| g * g).sum();
            *self.norm = Some(sq.sqrt());
        }
    }
}

fn block(in_channels: usize, out_channels: usize, stride: usize) -> BasicBlock<B> {
    BasicBlock::new(
        in_channels,
        out_channels,
        stride,
        Shortcut::ZeroPad,
        &Default::default(),
    )
}

#[test]
fn option_a_takes_every_second_pixel_and_appends_zero_channels() {
    let device = Default::default();
    // [1, 2, 4, 4] holding 0..32.
    let x = Tensor::<B, 1>::from_data(
        TensorData::new((0..32).map(|v| v as f32).collect(), [32]),
        &device,
    )
    .reshape([1, 2, 4, 4]);
    let out = block(2, 4, 2).zero_pad_shortcut(x.clone());
    assert_eq!(out.dims(), [1, 4, 2, 2]);
    let expected = [
        0., 2., 8., 10., 16., 18., 24., 26., 0., 0., 0., 0., 0., 0., 0., 0.,
    ];
    assert_eq!(out.into_data().to_vec::<f32>().unwrap(), expected);

    // Odd sizes: ceil(5 / 2) = 3, the size the strided conv gives.
    let odd = Tensor::<B, 4>::ones([1, 2, 5, 5], &device);
    let b = block(2, 4, 2);
    assert_eq!(b.zero_pad_shortcut(odd.clone()).dims(), [1, 4, 3, 3]);
    assert_eq!(b.forward(odd).dims(), [1, 4, 3, 3]);

    // Blocks that keep the shape pass the input through.
    let same = block(2, 2, 1).zero_pad_shortcut(x.clone());
    assert_eq!(same.into_data(), x.into_data());
}

/// Sample standard deviation of a tensor's values.
fn std_of<const D: usize>(t: Tensor<B, D>) -> f64 {
    let v: Vec<f32> = t.into_data().to_vec().unwrap();
    let n = v.len() as f64;
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
    (v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n).sqrt()
}

#[test]
fn convolutions_are_kaiming_normal_with_fan_out() {
    let device = Default::default();
    B::seed(&device, 11);
    let model = ResNetConfig::new(20)
        .unwrap()
        .with_shortcut(Shortcut::Projection)
        .init::<B>(&device);
    // (weights, fan_out, fan_in): fan_in and fan_out differ on these, so the std tells them
    // apart (by a factor √(16/3) for the stem, √2 for the first conv of stage 2).
    let first_of_stage_2 = &model.blocks()[3];
    let cases = [
        (model.stem.weight.val(), 16 * 9, 3 * 9),
        (first_of_stage_2.conv1.weight.val(), 32 * 9, 16 * 9),
        (
            first_of_stage_2
                .projection
                .as_ref()
                .unwrap()
                .conv
                .weight
                .val(),
            32,
            16,
        ),
    ];
    for (weights, fan_out, fan_in) in cases {
        let expected = (2.0 / fan_out as f64).sqrt();
        let std = std_of(weights);
        assert!(
            (std / expected - 1.0).abs() < 0.1,
            "std {std}, fan_out gives {expected}, fan_in {}",
            (2.0 / fan_in as f64).sqrt()
        );
    }
    assert!(model.stem.bias.is_none() && first_of_stage_2.conv1.bias.is_none());
}
