//! `hetero bench`: the training step time of every model × batch size × backend asked for, on
//! synthetic data, as one markdown table, with ratios to PyTorch's figures when their table is
//! given.
//!
//! Each cell is a short training run through the same code as `hetero train` (model, optimizer,
//! backend selection, batching): `--warmup` steps that compile and autotune, then `--steps`
//! timed steps, of which the median is reported.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use rand::{Rng, SeedableRng};

use crate::cli::{
    AccelName, BackendName, Cli, CliError, Command, CpuName, ModelName, Outcome, TrainArgs,
};
use crate::data::{Example, ImageBatcher, ImageDataset, ImageShape, Normalization};
use crate::train::TrainData;

/// The backends a bench compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchBackend {
    /// Everything on the CPU, burn-ndarray.
    CpuNdarray,
    /// Everything on the CPU, burn-flex.
    CpuFlex,
    /// burn-hetero with every op on the CPU: burn-flex with burn-hetero's own CPU ops and convs.
    HeteroCpu,
    /// burn-hetero with only the conv forward on the accelerator (f16); gradients on the CPU.
    HeteroForward,
    /// burn-hetero with the default placement: every conv phase on the accelerator.
    Hetero,
    /// The same with burn-ndarray as the CPU backend (`HeteroCuda`; CUDA only).
    HeteroNdarray,
    /// Everything on the accelerator (f32).
    Gpu,
}

impl BenchBackend {
    fn name(self) -> &'static str {
        match self {
            BenchBackend::CpuNdarray => "cpu-ndarray",
            BenchBackend::CpuFlex => "cpu-flex",
            BenchBackend::HeteroCpu => "hetero-cpu",
            BenchBackend::HeteroForward => "hetero-forward",
            BenchBackend::Hetero => "hetero",
            BenchBackend::HeteroNdarray => "hetero-ndarray",
            BenchBackend::Gpu => "gpu",
        }
    }
}

/// `hetero bench`'s flags.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchArgs {
    /// Models, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [ModelName::Mnist, ModelName::Resnet20])]
    pub models: Vec<ModelName>,
    /// Batch sizes, comma-separated [default: 64 for mnist, 32 and 128 for the ResNets].
    #[arg(long, value_delimiter = ',')]
    pub batch_sizes: Vec<usize>,
    /// Backends, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [
        BenchBackend::CpuFlex, BenchBackend::HeteroForward, BenchBackend::Hetero, BenchBackend::Gpu
    ])]
    pub backends: Vec<BenchBackend>,
    /// Timed steps per cell (the median is reported).
    #[arg(long, default_value_t = 20)]
    pub steps: usize,
    /// Untimed steps before them (kernel compilation, autotuning, allocator warm-up).
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// The accelerator of the hetero and gpu backends.
    #[arg(long, value_enum, default_value_t = AccelName::Auto)]
    pub accel: AccelName,
    /// PyTorch's figures: a file holding the markdown table that `torch_baselines.py` prints
    /// (`| model | batch | variant | ms/step (median) |`); adds its rows and a ratio column per
    /// variant (PyTorch's time / ours: above 1, ours is faster).
    #[arg(long, value_name = "FILE")]
    pub torch: Option<PathBuf>,
    /// Seed of the models' initialisation and of the synthetic data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the table to FILE (rewritten after each cell).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// One cell of the matrix.
#[derive(Clone, Debug)]
pub struct BenchRow {
    /// The model, as `hetero train` names it.
    pub model: String,
    /// Examples per step.
    pub batch: usize,
    /// The backend asked for.
    pub backend: BenchBackend,
    /// The median time of the timed steps, or why the cell failed.
    pub median: Result<Duration, String>,
    /// What the run used, in words (e.g. `hetero: flex + CUDA NVIDIA H200`): a backend whose
    /// accelerator is missing falls back to the CPU, and says so here.
    pub ran_on: String,
}

/// PyTorch's median step times, by (model, batch) and variant.
type TorchFigures = BTreeMap<(String, usize), BTreeMap<String, f64>>;

/// Reads the markdown table of `torch_baselines.py`; its model `mnist_net` is our `mnist`.
fn read_torch(path: &PathBuf) -> Result<(TorchFigures, Vec<String>), CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("--torch {}: {e}", path.display())))?;
    let mut figures = TorchFigures::new();
    let mut variants = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if !line.trim_start().starts_with('|') || cells.len() != 4 {
            continue;
        }
        let (Ok(batch), Ok(ms)) = (cells[1].parse::<usize>(), cells[3].parse::<f64>()) else {
            continue; // the header, the separator, or another table's row
        };
        let model = match cells[0] {
            "mnist_net" => "mnist".to_string(),
            other => other.to_string(),
        };
        let variant = cells[2].to_string();
        if !variants.contains(&variant) {
            variants.push(variant.clone());
        }
        figures
            .entry((model, batch))
            .or_default()
            .insert(variant, ms);
    }
    if figures.is_empty() {
        return Err(CliError::Usage(format!(
            "--torch {}: no row like | resnet20 | 32 | cpu | 33.1 | (the table torch_baselines.py prints)",
            path.display()
        )));
    }
    Ok((figures, variants))
}

/// `batch × (steps + 1)` random images of the model's input shape (CIFAR's 3×32×32 for the
/// ResNets, as in PyTorch's figures) and random labels: one batch per step and one to test.
fn synthetic_data(model: ModelName, batch: usize, steps: usize, seed: u64) -> TrainData {
    let (shape, normalization) = if model == ModelName::Mnist {
        (ImageShape::new(1, 28, 28), Normalization::mnist())
    } else {
        (ImageShape::new(3, 32, 32), Normalization::cifar10())
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let size = shape.channels * shape.height * shape.width;
    let mut examples = |n: usize| ImageDataset {
        shape,
        examples: (0..n)
            .map(|_| Example {
                image: (0..size).map(|_| rng.random()).collect(),
                label: rng.random_range(0..10),
            })
            .collect(),
    };
    let batcher = ImageBatcher::new(shape, normalization);
    TrainData {
        train: examples(batch * steps),
        test: examples(batch),
        train_batcher: batcher.clone(),
        test_batcher: batcher,
    }
}

/// `hetero train`'s flags for one cell: one epoch of `steps` steps, its defaults otherwise.
fn cell_args(args: &BenchArgs, model: ModelName, batch: usize, backend: BenchBackend) -> TrainArgs {
    let model_name = model.to_possible_value().expect("a model name");
    let parsed = <Cli as clap::Parser>::try_parse_from(["hetero", "train", model_name.get_name()])
        .expect("the defaults of hetero train parse");
    let Command::Train(mut train) = parsed.command else {
        unreachable!("parsed a train command")
    };
    train.batch_size = Some(batch);
    train.test_batch_size = batch;
    train.epochs = Some(1);
    train.steps_per_epoch = Some(args.warmup + args.steps);
    train.seed = args.seed;
    train.accel = args.accel;
    (train.backend, train.cpu) = match backend {
        BenchBackend::CpuNdarray => (BackendName::Cpu, CpuName::Ndarray),
        BenchBackend::CpuFlex => (BackendName::Cpu, CpuName::Flex),
        BenchBackend::HeteroCpu | BenchBackend::HeteroForward | BenchBackend::Hetero => {
            (BackendName::Hetero, CpuName::Flex)
        }
        BenchBackend::HeteroNdarray => (BackendName::Hetero, CpuName::Ndarray),
        BenchBackend::Gpu => (BackendName::Gpu, CpuName::Flex),
    };
    match backend {
        BenchBackend::HeteroCpu => train.placement = Some("all=cpu".into()),
        BenchBackend::HeteroForward => train.placement = Some("dgrad=cpu,wgrad=cpu".into()),
        _ => {}
    }
    train
}

/// Median of the steps after the warm-up.
fn median_after(step_times: &[Duration], warmup: usize) -> Option<Duration> {
    let mut timed = step_times.get(warmup..)?.to_vec();
    timed.sort();
    timed.get(timed.len() / 2).copied()
}

/// Runs the matrix, prints the table (and writes it to `--output`).
pub(crate) fn bench_command(args: &BenchArgs) -> Result<Outcome, CliError> {
    if args.steps == 0 {
        return Err(CliError::Usage("--steps must be at least 1".into()));
    }
    if args.batch_sizes.contains(&0) {
        return Err(CliError::Usage("batch sizes must be at least 1".into()));
    }
    // Read and create first, so that a bad path fails now and not after the runs.
    let torch = args.torch.as_ref().map(read_torch).transpose()?;
    let write = |table: &str| match &args.output {
        Some(path) => std::fs::write(path, table)
            .map_err(|e| CliError::Output(format!("--output {}: {e}", path.display()))),
        None => Ok(()),
    };
    write("")?;

    let mut rows = Vec::new();
    for &model in &args.models {
        let batches = match (&args.batch_sizes[..], model) {
            ([], ModelName::Mnist) => vec![64],
            ([], _) => vec![32, 128],
            (list, _) => list.to_vec(),
        };
        for batch in batches {
            for &backend in &args.backends {
                let train = cell_args(args, model, batch, backend);
                let data = synthetic_data(model, batch, args.warmup + args.steps, args.seed);
                println!("\n== {} b={batch} {} ==", model.name(), backend.name());
                let row = match crate::cli::train_on(&train, data) {
                    Ok(outcome) => BenchRow {
                        model: model.name(),
                        batch,
                        backend,
                        median: median_after(&outcome.report.step_times, args.warmup)
                            .ok_or_else(|| "no timed step".to_string()),
                        ran_on: outcome.backend,
                    },
                    Err(e) => BenchRow {
                        model: model.name(),
                        batch,
                        backend,
                        median: Err(e.to_string()),
                        ran_on: "-".into(),
                    },
                };
                rows.push(row);
                // The table so far, so that a run cut short keeps its finished cells.
                write(&table(&rows, torch.as_ref(), args))?;
            }
        }
    }

    let table = table(&rows, torch.as_ref(), args);
    println!("\n{table}");
    if let Some(path) = &args.output {
        println!("table written to {}", path.display());
    }
    Ok(Outcome {
        report: Default::default(),
        backend: "bench".into(),
        bench: rows,
    })
}

/// The markdown table: our rows, then PyTorch's for the same models and batch sizes, with a
/// ratio column per PyTorch variant.
fn table(
    rows: &[BenchRow],
    torch: Option<&(TorchFigures, Vec<String>)>,
    args: &BenchArgs,
) -> String {
    let variants: &[String] = torch.map(|t| &t.1[..]).unwrap_or(&[]);
    let mut out = format!(
        "{} timed steps after {} warm-up steps per cell, synthetic data\n\n| model | batch | backend | ran on | ms/step (median) |",
        args.steps, args.warmup
    );
    for v in variants {
        let _ = write!(out, " × PyTorch {v} |");
    }
    out.push_str("\n|---|---:|---|---|---:|");
    out.push_str(&"---:|".repeat(variants.len()));
    out.push('\n');
    for row in rows {
        let ms = match &row.median {
            Ok(d) => format!("{:.2}", d.as_secs_f64() * 1e3),
            Err(e) => format!("failed: {}", e.replace('|', "/").replace('\n', " ")),
        };
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {ms} |",
            row.model,
            row.batch,
            row.backend.name(),
            row.ran_on
        );
        let figures = torch.and_then(|t| t.0.get(&(row.model.clone(), row.batch)));
        for v in variants {
            let ratio = match (figures.and_then(|f| f.get(v)), &row.median) {
                (Some(theirs), Ok(ours)) => format!("{:.2}", theirs / (ours.as_secs_f64() * 1e3)),
                _ => "-".into(),
            };
            let _ = write!(out, " {ratio} |");
        }
        out.push('\n');
    }
    if let Some((figures, _)) = torch {
        let mut cells: Vec<(String, usize)> =
            rows.iter().map(|r| (r.model.clone(), r.batch)).collect();
        cells.dedup();
        for key in cells {
            for (variant, ms) in figures.get(&key).into_iter().flatten() {
                let _ = writeln!(
                    out,
                    "| {} | {} | pytorch-{variant} | PyTorch | {ms:.2} |{}",
                    key.0,
                    key.1,
                    " |".repeat(variants.len())
                );
            }
        }
    }
    out
}
