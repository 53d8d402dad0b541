//! conv2d forward on a CUDA device: our kernels (each path) beside burn-cuda's own conv2d, with
//! device-resident operands, and cuDNN's figures joined in from `torch_baselines.py`'s table.
//!
//! ```sh
//! cargo build --release -p burn-hetero --features cuda --example conv_bench   # here; then there:
//! python3 torch_baselines.py --models mnist_net --variants gpu --steps 3 --no-bus > torch.md
//! ./conv_bench --cudnn torch.md
//! ```
//!
//! Each figure is the median over 15 samples of the mean time of 50 back-to-back launches
//! (a device sync before and after each sample: its cost is in the figure), after a warm-up
//! that also runs burn-cuda's autotune; "device µs" is CubeCL's profiler (device timestamps
//! around the same launches), which is how cuDNN's figure is taken (CUDA events), so the
//! ratio uses it. `--only TEXT` keeps the shapes whose label contains TEXT, `--no-uploads` leaves
//! out the second table.
//! Ours write f32 outputs (and, in one column, f16 ones), burn-cuda and cuDNN f16/bf16 ones. A first line gives the launch
//! floor (an empty kernel), a second table the two places for the operands' cast (on the host
//! before a 2-byte upload, or in the kernel after an f32 upload), from host values to output.

use std::collections::HashMap;
use std::time::Instant;

use burn_backend::ops::{ConvOptions, FloatTensorOps};
use burn_backend::{Backend, DType, FloatDType, Shape};
use burn_cubecl::kernel::conv::{ConvStrategy, conv_forward};
use burn_hetero::{Accelerator, CudaAccelerator as B};
use burn_hetero_kernels::{
    Conv2dBuffers, Conv2dProblem, ConvPath, ConvTypes, OperandType, OutputType,
    conv2d_forward_async,
};
use cubecl::cuda::CudaRuntime;
use cubecl::prelude::*;

/// One shape: batch, in channels, out channels, side, stride, kernel side, padding.
#[derive(Clone, Copy)]
struct Case {
    label: &'static str,
    n: usize,
    ci: usize,
    co: usize,
    hw: usize,
    stride: usize,
    k: usize,
    pad: usize,
}

fn shapes() -> Vec<Case> {
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
            shapes.push(Case {
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
        shapes.push(Case {
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
    shapes.push(Case {
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

/// Samples per figure.
const SAMPLES: usize = 15;
/// Launches per sample.
const LAUNCHES: usize = 50;

/// Median over samples of the mean time of one launch, in microseconds.
fn time_us(mut launch: impl FnMut(), device: &burn_cuda::CudaDevice) -> f64 {
    for _ in 0..3 {
        launch();
    }
    B::sync(device).expect("sync");
    let mut samples = Vec::new();
    for _ in 0..SAMPLES {
        let start = Instant::now();
        for _ in 0..LAUNCHES {
            launch();
        }
        B::sync(device).expect("sync");
        samples.push(start.elapsed().as_secs_f64() * 1e6 / LAUNCHES as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Median over samples of the device time of one launch (CubeCL's profiler: device timestamps
/// around `LAUNCHES` launches), in microseconds: the kernel without the host's launch cost.
fn device_us(client: &ComputeClient<CudaRuntime>, launch: impl Fn() + Send + Sync) -> f64 {
    let mut samples = Vec::new();
    for _ in 0..SAMPLES {
        let (_, ticks) = client
            .profile(
                || {
                    for _ in 0..LAUNCHES {
                        launch();
                    }
                },
                "conv_bench",
            )
            .expect("profile");
        let duration = cubecl::future::block_on(ticks.resolve()).duration();
        samples.push(duration.as_secs_f64() * 1e6 / LAUNCHES as f64);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Writes 1 into its one-element output: the cheapest kernel there is, for the launch floor.
#[cube(launch_unchecked)]
fn noop_kernel(out: &mut Array<f32>) {
    if ABSOLUTE_POS == 0 {
        out[0] = 1.0f32;
    }
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
    // `--no-uploads`: leave out the table of the two cast places.
    let with_uploads = !args.iter().any(|a| a == "--no-uploads");
    // `--only TEXT`: the shapes whose label contains TEXT.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let device = burn_cuda::CudaDevice::default();
    let client = CudaRuntime::client(&device);

    // The launch floor: one empty kernel, timed as the convs are.
    let floor_out = client.empty(4);
    let floor = || unsafe {
        noop_kernel::launch_unchecked::<CudaRuntime>(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(32),
            ArrayArg::from_raw_parts(floor_out.clone(), 1),
        );
    };
    println!(
        "launch floor (an empty kernel): {:.1} µs per launch on the host clock, {:.1} µs device time\n",
        time_us(floor, &device),
        device_us(&client, floor)
    );

    println!(
        "| shape | dtype | GFLOP | ours tiled µs | ours cmma µs (kernel) | cmma device µs | cmma f16-out device µs | cast in kernel µs | burn-cuda µs | cuDNN µs (device) | ours best TFLOP/s (host clock) | ours cmma TFLOP/s (device) | ours/cuDNN throughput (device) | same, f16 out |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut uploads = Vec::new();
    for s in shapes() {
        let label = format!(
            "{} {}×{}×{}² → {}, {}×{} s{}",
            s.label, s.n, s.ci, s.hw, s.co, s.k, s.k, s.stride
        );
        if only
            .as_ref()
            .is_some_and(|text| !label.contains(text.as_str()))
        {
            continue;
        }
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
        let x_shape = Shape::new([s.n, s.ci, s.hw, s.hw]);
        let w_shape = Shape::new([s.co, s.ci, s.k, s.k]);
        // Dense device buffers (CubeCL's default allocation pads rows on CUDA).
        let dense = |data: &[f32], shape: &Shape, dtype: DType| {
            B::accel_upload_cast(data, shape.clone(), dtype, &device).expect("upload")
        };
        let x32 = dense(&x_data, &x_shape, DType::F32);
        let w32 = dense(&w_data, &w_shape, DType::F32);
        let out_shape = [s.n, s.co, problem.out_height(), problem.out_width()];
        let out = B::float_empty(out_shape.into(), &device, FloatDType::F32);
        for (operand, dtype, name) in [
            (OperandType::F16, DType::F16, "f16"),
            (OperandType::BF16, DType::BF16, "bf16"),
        ] {
            let x = dense(&x_data, &x_shape, dtype);
            let w = dense(&w_data, &w_shape, dtype);
            let buffers = || Conv2dBuffers {
                input: &x.handle,
                weight: &w.handle,
                bias: None,
                output: &out.handle,
            };
            let types = ConvTypes::new(operand);
            let launch = |path| {
                conv2d_forward_async(&client, buffers(), &problem, types, path).expect("launch")
            };
            let tiled = time_us(
                || {
                    launch(ConvPath::Tiled);
                },
                &device,
            );
            let used = launch(ConvPath::Auto);
            let cmma = time_us(
                || {
                    launch(ConvPath::Auto);
                },
                &device,
            );
            let cmma_device = device_us(&client, || {
                launch(ConvPath::Auto);
            });
            // With an f16 output, the bytes cuDNN writes.
            let out16 = B::float_empty(out_shape.into(), &device, FloatDType::F16);
            let types16 = types.with_output(OutputType::F16);
            let half_out = Conv2dBuffers {
                output: &out16.handle,
                ..buffers()
            };
            let cmma16_device = device_us(&client, || {
                conv2d_forward_async(&client, half_out, &problem, types16, ConvPath::Auto)
                    .expect("f16 output");
            });
            // The same kernel reading the f32 buffers and casting as it loads.
            let from_f32 = Conv2dBuffers {
                input: &x32.handle,
                weight: &w32.handle,
                bias: None,
                output: &out.handle,
            };
            let fused_types = types.with_storage(OperandType::F32);
            let fused = time_us(
                || {
                    conv2d_forward_async(&client, from_f32, &problem, fused_types, ConvPath::Auto)
                        .expect("cast in kernel");
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
            // cuDNN's figure is device time (events around back-to-back launches): the
            // ratio compares it with ours measured the same way.
            let (cudnn_us, ratio, ratio16) = match cudnn.get(&key) {
                Some(&us) => (
                    format!("{us:.1}"),
                    format!("{:.2}", us / cmma_device),
                    format!("{:.2}", us / cmma16_device),
                ),
                None => ("—".into(), "—".into(), "—".into()),
            };
            println!(
                "| {label} | {name} | {:.3} | {tiled:.1} | {cmma:.1} ({used:?}) | {cmma_device:.1} | {cmma16_device:.1} | {fused:.1} | {burn} | {cudnn_us} | {:.2} | {:.2} | {ratio} | {ratio16} |",
                flops / 1e9,
                flops / best / 1e6,
                flops / cmma_device / 1e6,
            );

            // From host f32 values to the conv's output, the two places for the cast: on the
            // host into the pinned staging (half the bytes on the bus), or in the kernel.
            let upload_and_conv = |upload: DType, types: ConvTypes| {
                let x = B::accel_upload_cast(&x_data, x_shape.clone(), upload, &device)
                    .expect("upload");
                let w = B::accel_upload_cast(&w_data, w_shape.clone(), upload, &device)
                    .expect("upload");
                let buffers = Conv2dBuffers {
                    input: &x.handle,
                    weight: &w.handle,
                    bias: None,
                    output: &out.handle,
                };
                conv2d_forward_async(&client, buffers, &problem, types, ConvPath::Auto)
                    .expect("launch");
            };
            if !with_uploads {
                continue;
            }
            let host_cast = time_us(|| upload_and_conv(dtype, types), &device);
            let kernel_cast = time_us(|| upload_and_conv(DType::F32, fused_types), &device);
            uploads.push(format!(
                "| {label} | {name} | {:.2} | {host_cast:.1} | {kernel_cast:.1} | {:.2} |",
                (x_data.len() + w_data.len()) as f64 * 4.0 / 1e6,
                kernel_cast / host_cast,
            ));
        }
    }
    if !with_uploads {
        return;
    }
    println!(
        "\nFrom host f32 values to the output (upload of input and weight through pinned staging, \
         then the conv; µs per call):\n"
    );
    println!(
        "| shape | dtype | f32 MB | cast on the host, 2-byte upload | f32 upload, cast in the kernel | ratio |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for row in uploads {
        println!("{row}");
    }
}
