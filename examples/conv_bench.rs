//! conv2d forward on a CUDA device: our kernels (each path) beside burn-cuda's own conv2d, with
//! device-resident operands, and cuDNN's figures joined in from `torch_baselines.py`'s table.
//!
//! ```sh
//! cargo build -p burn-hetero --example conv_bench   # here; then on the GPU machine:
//! python3 torch_baselines.py --models mnist_net --variants gpu --steps 3 --no-bus > torch.md
//! ./conv_bench --cudnn torch.md
//! ```
//!
//! Each figure is the median over 15 samples of the mean time of 20 back-to-back launches
//! (a device sync before and after each sample), after a warm-up that also runs burn-cuda's
//! autotune. Ours write f32 outputs, burn-cuda and cuDNN f16/bf16 ones.

use std::collections::HashMap;
use std::time::Instant;

use burn_backend::ops::{ConvOptions, FloatTensorOps};
use burn_backend::{Backend, FloatDType, TensorData};
use burn_cubecl::kernel::conv::{ConvStrategy, conv_forward};
use burn_hetero::CudaAccelerator as B;
use burn_hetero_kernels::{
    Conv2dBuffers, Conv2dProblem, ConvPath, ConvTypes, OperandType, conv2d_forward_async,
};

/// One shape: batch, in channels, out channels, side, stride, kernel side, padding.
#[derive(Clone, Copy)]
struct Shape {
    label: &'static str,
    n: usize,
    ci: usize,
    co: usize,
    hw: usize,
    stride: usize,
    k: usize,
    pad: usize,
}

fn shapes() -> Vec<Shape> {
    let mut shapes = Vec::new();
    for n in [32, 128] {
        for (ci, co, hw, stride) in [
            (3, 16, 32, 1),
            (16, 16, 32, 1),
            (16, 32, 32, 2),
            (32, 32, 16, 1),
            (32, 64, 16, 2),
            (64, 64, 8, 1),
        ] {
            shapes.push(Shape {
                label: "resnet20",
                n,
                ci,
                co,
                hw,
                stride,
                k: 3,
                pad: 1,
            });
        }
    }
    for (ci, co, hw) in [(1, 20, 28), (20, 50, 12)] {
        shapes.push(Shape {
            label: "mnist",
            n: 64,
            ci,
            co,
            hw,
            stride: 1,
            k: 5,
            pad: 0,
        });
    }
    shapes.push(Shape {
        label: "large",
        n: 256,
        ci: 64,
        co: 64,
        hw: 56,
        stride: 1,
        k: 3,
        pad: 1,
    });
    shapes
}

/// Median over samples of the mean time of one launch, in microseconds.
fn time_us(mut launch: impl FnMut(), device: &burn_cuda::CudaDevice) -> f64 {
    for _ in 0..3 {
        launch();
    }
    B::sync(device).expect("sync");
    let mut samples = Vec::new();
    for _ in 0..15 {
        let start = Instant::now();
        for _ in 0..20 {
            launch();
        }
        B::sync(device).expect("sync");
        samples.push(start.elapsed().as_secs_f64() * 1e6 / 20.0);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// A row of torch_baselines.py's conv table: n, ci, co, hw, stride, k, dtype.
type CudnnKey = (usize, usize, usize, usize, usize, usize, String);

/// cuDNN's microseconds by shape and dtype, from torch_baselines.py's table.
fn read_cudnn(path: &str) -> HashMap<CudnnKey, f64> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut table = HashMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | n | c_in | c_out | hw | stride | k | dtype | us | TFLOP/s |
        if cells.len() != 11 {
            continue;
        }
        let num = |i: usize| cells[i].parse::<usize>().ok();
        if let (Some(n), Some(ci), Some(co), Some(hw), Some(s), Some(k), Ok(us)) = (
            num(1),
            num(2),
            num(3),
            num(4),
            num(5),
            num(6),
            cells[8].parse::<f64>(),
        ) {
            // torch prints `float16`/`bfloat16`/`float32`.
            let dtype = match cells[7] {
                "float16" => "f16",
                "bfloat16" => "bf16",
                "float32" => "f32",
                other => other,
            };
            table.insert((n, ci, co, hw, s, k, dtype.to_string()), us);
        }
    }
    table
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let cudnn = args
        .iter()
        .position(|a| a == "--cudnn")
        .and_then(|i| args.get(i + 1))
        .map(|p| read_cudnn(p))
        .unwrap_or_default();
    let device = burn_cuda::CudaDevice::default();
    println!(
        "| shape | dtype | GFLOP | ours tiled µs | ours cmma µs (kernel) | burn-cuda µs | cuDNN µs | ours best TFLOP/s | ours/cuDNN throughput |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for s in shapes() {
        let problem = Conv2dProblem::new(s.n, s.ci, [s.hw, s.hw], s.co, [s.k, s.k])
            .with_stride([s.stride; 2])
            .with_padding([s.pad; 2]);
        let flops = problem.flops() as f64;
        let x_data: Vec<f32> = (0..problem.input_len())
            .map(|i| ((i * 7919 % 1000) as f32 / 500.0) - 1.0)
            .collect();
        let w_data: Vec<f32> = (0..s.co * s.ci * s.k * s.k)
            .map(|i| ((i * 104_729 % 1000) as f32 / 5000.0) - 0.1)
            .collect();
        let x32 = B::float_from_data(TensorData::new(x_data, [s.n, s.ci, s.hw, s.hw]), &device);
        let w32 = B::float_from_data(TensorData::new(w_data, [s.co, s.ci, s.k, s.k]), &device);
        for (operand, dtype, name) in [
            (OperandType::F16, FloatDType::F16, "f16"),
            (OperandType::BF16, FloatDType::BF16, "bf16"),
        ] {
            let x = B::float_cast(x32.clone(), dtype);
            let w = B::float_cast(w32.clone(), dtype);
            let out_shape = [s.n, s.co, problem.out_height(), problem.out_width()];
            let out = B::float_empty(out_shape.into(), &device, FloatDType::F32);
            let buffers = || Conv2dBuffers {
                input: &x.handle,
                weight: &w.handle,
                bias: None,
                output: &out.handle,
            };
            let types = ConvTypes::new(operand);
            let tiled = time_us(
                || {
                    conv2d_forward_async(&x.client, buffers(), &problem, types, ConvPath::Tiled)
                        .expect("tiled");
                },
                &device,
            );
            let used = conv2d_forward_async(&x.client, buffers(), &problem, types, ConvPath::Auto)
                .expect("auto");
            let cmma = time_us(
                || {
                    conv2d_forward_async(&x.client, buffers(), &problem, types, ConvPath::Auto)
                        .expect("auto");
                },
                &device,
            );
            let options = ConvOptions::new([s.stride; 2], [s.pad; 2], [1, 1], 1);
            let burn = if name == "f16" {
                let us = time_us(
                    || {
                        let y = conv_forward::<_, 2>(
                            x.clone(),
                            w.clone(),
                            None,
                            options.clone(),
                            ConvStrategy::Autotune,
                        )
                        .expect("burn-cuda conv");
                        drop(y);
                    },
                    &device,
                );
                format!("{us:.1}")
            } else {
                "—".into()
            };
            let best = tiled.min(cmma);
            let key = (s.n, s.ci, s.co, s.hw, s.stride, s.k, name.to_string());
            let (cudnn_us, ratio) = match cudnn.get(&key) {
                Some(&us) => (format!("{us:.1}"), format!("{:.2}", us / best)),
                None => ("—".into(), "—".into()),
            };
            println!(
                "| {} {}×{}×{}² → {}, {}×{} s{} | {name} | {:.3} | {tiled:.1} | {cmma:.1} ({:?}) | {burn} | {cudnn_us} | {:.2} | {ratio} |",
                s.label,
                s.n,
                s.ci,
                s.hw,
                s.co,
                s.k,
                s.k,
                s.stride,
                flops / 1e9,
                used,
                flops / best / 1e6,
            );
        }
    }
}
