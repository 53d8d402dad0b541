//! conv2d forward and both gradients on the accelerator against an f64 CPU reference.

use crate::common::*;
use burn::tensor::backend::Backend;
use burn::tensor::ops::{ConvOptions, FloatTensorOps, ModuleOps};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use burn_hetero::{Accelerator, Hetero, HeteroConfig, OpKind, Placement, Precision, Ran};

/// One convolution problem.
#[derive(Clone, Debug)]
pub struct ConvCase {
    pub n: usize,
    pub c_in: usize,
    pub h: usize,
    pub w: usize,
    pub c_out: usize,
    pub k: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub bias: bool,
}

impl ConvCase {
    #[allow(clippy::too_many_arguments)]
    const fn new(
        n: usize,
        c_in: usize,
        hw: [usize; 2],
        c_out: usize,
        k: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
        bias: bool,
    ) -> Self {
        Self {
            n,
            c_in,
            h: hw[0],
            w: hw[1],
            c_out,
            k,
            stride,
            padding,
            dilation,
            groups,
            bias,
        }
    }

    pub fn options(&self) -> ConvOptions<2> {
        ConvOptions::new(self.stride, self.padding, self.dilation, self.groups)
    }

    pub fn out_hw(&self) -> [usize; 2] {
        let o = |i: usize, size: usize| {
            (size + 2 * self.padding[i] - self.dilation[i] * (self.k[i] - 1) - 1) / self.stride[i]
                + 1
        };
        [o(0, self.h), o(1, self.w)]
    }

    pub fn x_shape(&self) -> [usize; 4] {
        [self.n, self.c_in, self.h, self.w]
    }

    pub fn w_shape(&self) -> [usize; 4] {
        [self.c_out, self.c_in / self.groups, self.k[0], self.k[1]]
    }

    pub fn y_shape(&self) -> [usize; 4] {
        let [ho, wo] = self.out_hw();
        [self.n, self.c_out, ho, wo]
    }
}

/// The grid: kernels 1/3/5/7, strides, paddings 0..3, dilation, groups (incl. depthwise), bias or
/// not, odd and non-square sizes, batch 1 and larger, channel counts off multiples of 4 and 8,
/// weight gradients split over the batch.
pub const CASES: &[ConvCase] = &[
    ConvCase::new(1, 3, [9, 7], 5, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
    ConvCase::new(2, 4, [8, 8], 6, [1, 1], [1, 1], [0, 0], [1, 1], 1, false),
    ConvCase::new(2, 6, [11, 10], 9, [3, 3], [2, 2], [1, 1], [1, 1], 3, true),
    ConvCase::new(3, 5, [12, 9], 7, [5, 5], [1, 1], [2, 2], [1, 1], 1, true),
    ConvCase::new(2, 3, [16, 15], 4, [7, 7], [2, 2], [3, 3], [1, 1], 1, false),
    ConvCase::new(1, 8, [10, 12], 8, [3, 3], [1, 1], [2, 2], [2, 2], 1, true),
    ConvCase::new(4, 12, [8, 8], 12, [3, 3], [1, 1], [1, 1], [1, 1], 12, false),
    ConvCase::new(2, 7, [5, 13], 3, [3, 5], [2, 1], [0, 1], [1, 1], 1, true),
    ConvCase::new(5, 1, [28, 28], 20, [5, 5], [1, 1], [0, 0], [1, 1], 1, true),
    ConvCase::new(2, 20, [12, 12], 50, [5, 5], [1, 1], [0, 0], [1, 1], 1, true),
    ConvCase::new(1, 2, [3, 3], 2, [3, 3], [1, 1], [0, 0], [1, 1], 1, false),
    // Strides with dilation, stride 3, and rows past the last window (the input gradient's
    // spread output gradient ends in zero rows there).
    ConvCase::new(2, 3, [13, 11], 4, [3, 3], [2, 2], [2, 1], [2, 2], 1, false),
    ConvCase::new(1, 4, [11, 10], 5, [3, 3], [3, 3], [1, 1], [1, 1], 1, true),
    // Weight gradients long enough to be split over the batch (see the accelerator's
    // `weight_grad_splits`): 2 parts of 2 images, and 2 parts of 6 with stride 2.
    ConvCase::new(4, 5, [17, 16], 6, [3, 3], [1, 1], [1, 1], [1, 1], 1, true),
    ConvCase::new(12, 3, [20, 20], 4, [3, 3], [2, 2], [1, 1], [1, 1], 1, false),
    ConvCase::new(
        8,
        16,
        [16, 16],
        32,
        [3, 3],
        [2, 2],
        [1, 1],
        [1, 1],
        1,
        false,
    ),
];

fn idx4(s: [usize; 4], a: usize, b: usize, c: usize, d: usize) -> usize {
    ((a * s[1] + b) * s[2] + c) * s[3] + d
}

/// Visits every (output, input, weight) index triple of the convolution.
fn for_each_tap(c: &ConvCase, mut f: impl FnMut(usize, usize, usize)) {
    let (xs, ws, ys) = (c.x_shape(), c.w_shape(), c.y_shape());
    let cin_g = c.c_in / c.groups;
    let cout_g = c.c_out / c.groups;
    for n in 0..c.n {
        for o in 0..c.c_out {
            let g = o / cout_g;
            for oh in 0..ys[2] {
                for ow in 0..ys[3] {
                    let yi = idx4(ys, n, o, oh, ow);
                    for ci in 0..cin_g {
                        for kh in 0..c.k[0] {
                            let ih = (oh * c.stride[0] + kh * c.dilation[0]) as isize
                                - c.padding[0] as isize;
                            if ih < 0 || ih >= c.h as isize {
                                continue;
                            }
                            for kw in 0..c.k[1] {
                                let iw = (ow * c.stride[1] + kw * c.dilation[1]) as isize
                                    - c.padding[1] as isize;
                                if iw < 0 || iw >= c.w as isize {
                                    continue;
                                }
                                let xi = idx4(xs, n, g * cin_g + ci, ih as usize, iw as usize);
                                let wi = idx4(ws, o, ci, kh, kw);
                                f(yi, xi, wi);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// f64 reference of the forward convolution.
pub fn reference_forward(c: &ConvCase, x: &[f32], w: &[f32], b: Option<&[f32]>) -> Vec<f64> {
    let ys = c.y_shape();
    let mut y = vec![0f64; ys.iter().product()];
    for_each_tap(c, |yi, xi, wi| y[yi] += x[xi] as f64 * w[wi] as f64);
    if let Some(b) = b {
        let plane = ys[2] * ys[3];
        for (i, v) in y.iter_mut().enumerate() {
            *v += b[(i / plane) % c.c_out] as f64;
        }
    }
    y
}

/// f64 reference of the input gradient for output gradient `g`.
pub fn reference_x_grad(c: &ConvCase, w: &[f32], g: &[f32]) -> Vec<f64> {
    let mut dx = vec![0f64; c.x_shape().iter().product()];
    for_each_tap(c, |yi, xi, wi| dx[xi] += w[wi] as f64 * g[yi] as f64);
    dx
}

/// f64 reference of the weight gradient for output gradient `g`.
pub fn reference_w_grad(c: &ConvCase, x: &[f32], g: &[f32]) -> Vec<f64> {
    let mut dw = vec![0f64; c.w_shape().iter().product()];
    for_each_tap(c, |yi, xi, wi| dw[wi] += x[xi] as f64 * g[yi] as f64);
    dw
}

/// Relative L2 bound of each operand precision (f32 accumulation).
pub fn bound(p: Precision) -> f64 {
    match p {
        Precision::F32 => 1e-5,
        Precision::F16 => 5e-3,
        Precision::BF16 => 2e-2,
    }
}

/// Fills the accelerator's memory pool with NaN-filled buffers and frees them, so that a kernel
/// that leaves part of its output unwritten is caught by the NaN check.
pub fn poison_accelerator<A: Accelerator>(elements: usize) {
    let device = Hetero::<N, A>::accelerator_device(&device());
    let shape = burn::tensor::Shape::new([elements]);
    let mut held = Vec::new();
    for dtype in [burn::tensor::FloatDType::F32, burn::tensor::FloatDType::F16] {
        for _ in 0..4 {
            held.push(<A as FloatTensorOps<A>>::float_full(
                shape.clone(),
                f32::NAN.into(),
                &device,
                dtype,
            ));
        }
    }
    A::sync(&device).unwrap();
    drop(held);
}

fn values<B: Backend>(t: Tensor<B, 4>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec::<f32>().unwrap()
}

fn tensor<B: Backend>(data: &[f32], shape: [usize; 4]) -> Tensor<B, 4> {
    Tensor::from_data(TensorData::new(data.to_vec(), shape), &Default::default())
}

fn prim<B: Backend>(data: &[f32], shape: [usize; 4]) -> B::FloatTensorPrimitive {
    tensor::<B>(data, shape).into_primitive().tensor()
}

fn check(
    what: &str,
    case: &ConvCase,
    p: Precision,
    bound: f64,
    got: &[f32],
    reference: &[f64],
) -> f64 {
    assert!(
        got.iter().all(|v| v.is_finite()),
        "{what} {p} {case:?}: non-finite output"
    );
    let err = rel_l2(got, reference);
    assert!(
        err <= bound,
        "{what} {p} {case:?}: relative L2 error {err:.3e} > {bound:.0e}"
    );
    err
}

/// The bound of burn-cubecl's gradient kernels for f32 operands on a GPU with matrix units:
/// their inner matmul runs in tf32 (10 mantissa bits), which no strategy argument reaches.
/// Measured on the H200: up to 6.2e-4. The own kernels of `kernels/` are to lift this.
pub const TF32_BOUND: f64 = 1e-3;

/// The precisions the accelerator supports (bf16 is not on lavapipe: it is checked on the GPU
/// machine).
pub fn supported_precisions<A: Accelerator>() -> Vec<Precision> {
    let info =
        Hetero::<N, A>::accelerator_status(&device()).expect("the accelerator must work here");
    let all = [Precision::F32, Precision::F16, Precision::BF16];
    let (yes, no): (Vec<_>, Vec<_>) = all.into_iter().partition(|p| info.supports(*p));
    if !no.is_empty() {
        eprintln!("{}: not supported, not checked here: {no:?}", info.name);
    }
    yes
}

/// Runs the whole grid at `precision` for the three phases, checking the counters say the
/// accelerator ran each one. Returns the worst error per phase.
pub fn run_grid<A: Accelerator>(precision: Precision, f32_gradient_bound: f64) -> [f64; 3] {
    type H<A> = Hetero<N, A>;
    let place = Placement::accelerator(precision);
    let config = HeteroConfig::cpu_only().with_convs(place).with_strict(true);
    let _s = settings(config);
    let mut worst = [0f64; 3];
    let grad_bound = if precision == Precision::F32 {
        f32_gradient_bound
    } else {
        bound(precision)
    };
    for case in CASES {
        let mut rng = rng_for(&format!("conv {case:?} {precision}"));
        let x = random_vec(&mut rng, case.x_shape().iter().product(), -1.0, 1.0);
        let w = random_vec(&mut rng, case.w_shape().iter().product(), -1.0, 1.0);
        let b = random_vec(&mut rng, case.c_out, -1.0, 1.0);
        let g = random_vec(&mut rng, case.y_shape().iter().product(), -1.0, 1.0);
        let bias = case.bias.then_some(&b[..]);
        let big = x.len().max(w.len()).max(g.len()) * 2;
        let before = burn_hetero::stats();

        poison_accelerator::<A>(big);
        let y = burn::tensor::module::conv2d(
            tensor::<H<A>>(&x, case.x_shape()),
            tensor(&w, case.w_shape()),
            bias.map(|b| {
                Tensor::<H<A>, 1>::from_data(TensorData::new(b.to_vec(), [case.c_out]), &device())
            }),
            case.options(),
        );
        assert_eq!(y.dims(), case.y_shape());
        let e = check(
            "forward",
            case,
            precision,
            bound(precision),
            &values(y),
            &reference_forward(case, &x, &w, bias),
        );
        worst[0] = worst[0].max(e);

        poison_accelerator::<A>(big);
        // One set of operands for both gradients: the weight gradient is the one computed
        // with the input gradient where the two are paired (`Hetero<NdArray, _>` pairs them).
        let operands = (
            prim::<H<A>>(&x, case.x_shape()),
            prim::<H<A>>(&w, case.w_shape()),
            prim::<H<A>>(&g, case.y_shape()),
        );
        let dx = <H<A> as ModuleOps<H<A>>>::conv2d_x_backward(
            operands.0.clone(),
            operands.1.clone(),
            operands.2.clone(),
            case.options(),
        );
        let dx = values(Tensor::<H<A>, 4>::from_primitive(TensorPrimitive::Float(
            dx,
        )));
        worst[1] = worst[1].max(check(
            "input grad",
            case,
            precision,
            grad_bound,
            &dx,
            &reference_x_grad(case, &w, &g),
        ));

        poison_accelerator::<A>(big);
        let dw = <H<A> as ModuleOps<H<A>>>::conv2d_weight_backward(
            operands.0,
            operands.1,
            operands.2,
            case.options(),
        );
        let dw = values(Tensor::<H<A>, 4>::from_primitive(TensorPrimitive::Float(
            dw,
        )));
        worst[2] = worst[2].max(check(
            "weight grad",
            case,
            precision,
            grad_bound,
            &dw,
            &reference_w_grad(case, &x, &g),
        ));

        let delta = burn_hetero::stats().since(&before);
        for op in [
            OpKind::Conv2dForward,
            OpKind::Conv2dInputGrad,
            OpKind::Conv2dWeightGrad,
        ] {
            assert_eq!(
                delta.get(op, Ran::Accelerator(precision)).calls,
                1,
                "{op} {case:?}: {delta}"
            );
        }
    }
    eprintln!(
        "conv grid at {precision}: worst relative L2 forward {:.2e}, input grad {:.2e}, weight grad {:.2e}",
        worst[0], worst[1], worst[2]
    );
    worst
}

#[test]
fn conv2d_phases_on_accelerator_match_f64_reference() {
    for precision in [Precision::F32, Precision::F16, Precision::BF16] {
        run_grid::<Accel>(precision, bound(Precision::F32));
    }
}

/// The same grid on a CUDA GPU, every precision (run on the GPU machine with `--ignored`).
#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_conv2d_phases_match_f64_reference() {
    let precisions = supported_precisions::<burn_hetero::CudaAccelerator>();
    assert_eq!(
        precisions.len(),
        3,
        "a CUDA GPU of this century stores f32, f16 and bf16"
    );
    for precision in precisions {
        run_grid::<burn_hetero::CudaAccelerator>(precision, TF32_BOUND);
    }
}

/// The reference itself is checked against burn-ndarray, so that a wrong reference cannot make a
/// wrong kernel pass.
#[test]
fn f64_reference_matches_ndarray() {
    for case in CASES {
        let mut rng = rng_for(&format!("reference {case:?}"));
        let x = random_vec(&mut rng, case.x_shape().iter().product(), -1.0, 1.0);
        let w = random_vec(&mut rng, case.w_shape().iter().product(), -1.0, 1.0);
        let b = random_vec(&mut rng, case.c_out, -1.0, 1.0);
        let d = device();
        let y = burn::tensor::module::conv2d(
            Tensor::<N, 4>::from_data(TensorData::new(x.clone(), case.x_shape()), &d),
            Tensor::<N, 4>::from_data(TensorData::new(w.clone(), case.w_shape()), &d),
            Some(Tensor::<N, 1>::from_data(
                TensorData::new(b.clone(), [case.c_out]),
                &d,
            )),
            case.options(),
        );
        let y = y.into_data().into_vec::<f32>().unwrap();
        let err = rel_l2(&y, &reference_forward(case, &x, &w, Some(&b)));
        assert!(
            err < 1e-5,
            "{case:?}: reference differs from burn-ndarray by {err:.2e}"
        );
    }
}
