//! The trainer: SGD with momentum over shuffled, augmented batches, a held-out evaluation per
//! epoch, learning-rate decay, checkpoints and resumption. Generic over the backend and the
//! model, so the same code trains on `Autodiff<NdArray>`, `Autodiff<Hetero<..>>` and
//! `Autodiff<Cuda>`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use burn::module::AutodiffModule;
use burn::optim::decay::WeightDecayConfig;
use burn::optim::momentum::MomentumConfig;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{ElementConversion, Int, Tensor};
use burn_hetero::optim::{FusedSgd, SgdBackend};
use indicatif::{ProgressBar, ProgressStyle};
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use crate::Classifier;
use crate::checkpoint::{self, Checkpoint, CheckpointError, CheckpointMeta};
use crate::data::{ImageBatcher, ImageDataset, seeded_rng};

/// How the learning rate decays.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Schedule {
    /// Multiplied by `gamma` after every epoch.
    Step,
    /// Multiplied by `gamma` at the start of each listed epoch (0-based), as in He et al.
    Milestones(Vec<usize>),
}

/// The settings that decide what a run computes (compared when resuming).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainSettings {
    /// Examples per training step.
    pub batch_size: usize,
    /// Examples per evaluation batch.
    pub test_batch_size: usize,
    /// Epochs to train in total (counting those of a resumed checkpoint).
    pub epochs: usize,
    /// Initial learning rate.
    pub lr: f64,
    /// SGD momentum (0 for none).
    pub momentum: f64,
    /// L2 weight decay (0 for none).
    pub weight_decay: f64,
    /// Decay factor of the schedule.
    pub gamma: f64,
    /// The decay schedule.
    pub schedule: Schedule,
    /// Seed of the model's initialisation, the shuffling and the augmentation.
    pub seed: u64,
    /// The data set's name, for the record.
    pub dataset: String,
}

impl TrainSettings {
    /// The learning rate of epoch `epoch` (0-based).
    pub fn lr_at(&self, epoch: usize) -> f64 {
        let decays = match &self.schedule {
            Schedule::Step => epoch,
            Schedule::Milestones(milestones) => milestones.iter().filter(|&&m| m <= epoch).count(),
        };
        self.lr * self.gamma.powi(decays as i32)
    }

    /// The settings without the number of epochs, as JSON: what must agree to resume a run.
    fn identity(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        if let Some(object) = value.as_object_mut() {
            object.remove("epochs");
        }
        value
    }
}

/// Training and held-out data with their batchers.
pub struct TrainData {
    /// Training examples.
    pub train: ImageDataset,
    /// Held-out examples.
    pub test: ImageDataset,
    /// Batches training examples (with augmentation where the model wants it).
    pub train_batcher: ImageBatcher,
    /// Batches held-out examples (no augmentation).
    pub test_batcher: ImageBatcher,
}

/// Where and when checkpoints are written.
#[derive(Clone, Debug, Default)]
pub struct SavePlan {
    /// Directory of the checkpoints.
    pub dir: PathBuf,
    /// Write `<model>-epoch<N>.ckpt` every this many epochs.
    pub every: Option<usize>,
    /// Write `<model>.ckpt` at the end.
    pub final_model: bool,
}

/// Everything a training run needs besides the model and the backend.
pub struct TrainJob<'a> {
    /// Model name, recorded in checkpoints.
    pub model_name: &'a str,
    /// The model's shape in words, recorded in checkpoints and checked on resume.
    pub architecture: &'a str,
    /// What to compute.
    pub settings: &'a TrainSettings,
    /// The data.
    pub data: &'a TrainData,
    /// Checkpoints.
    pub save: SavePlan,
    /// A checkpoint to continue from.
    pub resume: Option<Checkpoint>,
    /// Print a line every this many steps (0: never).
    pub log_interval: usize,
    /// Train at most this many steps per epoch.
    pub steps_per_epoch: Option<usize>,
    /// One training and one test batch, then stop.
    pub dry_run: bool,
    /// Draw progress bars (they hide themselves when the output is not a terminal).
    pub progress: bool,
}

/// Why training stopped early.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A checkpoint could not be read, written or used.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The checkpoint was written by a run with other settings.
    #[error(
        "{}: the checkpoint was trained with other settings; rerun the command it was made with (plus --resume). Checkpoint: {found}; this command: {expected}",
        path.display()
    )]
    SettingsDiffer {
        /// The checkpoint.
        path: PathBuf,
        /// Its settings.
        found: String,
        /// This run's.
        expected: String,
    },
    /// The settings cannot train.
    #[error("{0}")]
    Invalid(String),
}

/// One epoch's results.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochReport {
    /// 1-based epoch number.
    pub epoch: usize,
    /// Learning rate used.
    pub lr: f64,
    /// Mean training loss.
    pub train_loss: f64,
    /// Mean held-out loss.
    pub test_loss: f64,
    /// Held-out accuracy, 0..=1.
    pub test_accuracy: f64,
    /// Training steps run.
    pub steps: usize,
    /// Wall time of the training steps.
    pub train_time: Duration,
}

/// A run's results.
#[derive(Clone, Debug, Default)]
pub struct TrainReport {
    /// Epochs run by this invocation (not those of a resumed checkpoint).
    pub epochs: Vec<EpochReport>,
    /// Median wall time of a training step.
    pub median_step: Duration,
    /// Wall time of every training step, in order (the first compiles the kernels).
    pub step_times: Vec<Duration>,
    /// Where the training steps after the first spent their time, summed.
    pub step_phases: StepPhases,
    /// Training examples per second over the training steps.
    pub examples_per_second: f64,
    /// Held-out loss and accuracy of the final model.
    pub final_test: Option<(f64, f64)>,
    /// Checkpoints written.
    pub saved: Vec<PathBuf>,
}

/// A training step's wall time by phase, summed over steps. Each phase holds the backend ops it
/// runs: the forward the conv forwards, the backward the gradients.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepPhases {
    /// Steps summed.
    pub steps: usize,
    /// Building the batch: augmentation, normalisation, the tensors.
    pub batch: Duration,
    /// The forward pass and the loss, up to reading the loss value.
    pub forward: Duration,
    /// Backpropagation and collecting the gradients.
    pub backward: Duration,
    /// The optimizer's update of the parameters.
    pub optimizer: Duration,
}

impl StepPhases {
    /// One line: the mean milliseconds per step of each phase.
    pub fn summary(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / self.steps.max(1) as f64;
        format!(
            "step phases (ms per step, mean of {} steps after the first): batch {:.2}, forward \
             and loss {:.2}, backward {:.2}, optimizer {:.2}",
            self.steps,
            ms(self.batch),
            ms(self.forward),
            ms(self.backward),
            ms(self.optimizer)
        )
    }
}

/// The model evaluated on held-out data: mean loss and accuracy.
pub fn evaluate<B: Backend, M: Classifier<B>>(
    model: &M,
    data: &ImageDataset,
    batcher: &ImageBatcher,
    batch_size: usize,
    device: &B::Device,
    progress: bool,
) -> (f64, f64) {
    let bar = progress_bar(progress, data.len().div_ceil(batch_size), "test");
    let (mut loss_sum, mut correct) = (0.0f64, 0i64);
    for chunk in data.examples.chunks(batch_size) {
        let (images, targets): (Tensor<B, 4>, Tensor<B, 1, Int>) = batcher.batch(chunk, device);
        let scores = model.forward(images);
        let predicted = scores.clone().argmax(1).squeeze_dim::<1>(1);
        correct += predicted
            .equal(targets.clone())
            .int()
            .sum()
            .into_scalar()
            .elem::<i64>();
        let loss = model.loss(scores, targets).into_scalar().elem::<f64>();
        loss_sum += loss * chunk.len() as f64;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let n = data.len().max(1) as f64;
    (loss_sum / n, correct as f64 / n)
}

fn progress_bar(visible: bool, len: usize, prefix: &str) -> ProgressBar {
    if !visible {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    let style = ProgressStyle::with_template(
        "{prefix:>10} [{bar:30}] {pos}/{len} steps, {per_sec}, eta {eta} {msg}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(prefix.to_string());
    bar
}

/// A generator per epoch, derived from the seed, so that a run resumed at an epoch boundary
/// shuffles and augments exactly as the uninterrupted run would.
fn epoch_rng(seed: u64, epoch: usize) -> rand::rngs::StdRng {
    seeded_rng(seed ^ (epoch as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// Trains `model` (freshly initialised, or the shape to load a resumed checkpoint into).
pub fn train<B, M>(
    mut model: M,
    job: TrainJob<'_>,
    device: &B::Device,
) -> Result<(M, TrainReport), TrainError>
where
    B: AutodiffBackend,
    B::InnerBackend: SgdBackend,
    M: AutodiffModule<B> + Classifier<B>,
    M::InnerModule: Classifier<B::InnerBackend>,
{
    let settings = job.settings;
    if settings.batch_size == 0 || settings.test_batch_size == 0 {
        return Err(TrainError::Invalid("batch sizes must be at least 1".into()));
    }
    if job.data.train.is_empty() || job.data.test.is_empty() {
        return Err(TrainError::Invalid("the data set has no examples".into()));
    }
    // burn-optim's SGD, one fused op per parameter (the same bits, the same checkpoints).
    let momentum =
        (settings.momentum != 0.0).then(|| MomentumConfig::new().with_momentum(settings.momentum));
    let decay = (settings.weight_decay != 0.0)
        .then(|| WeightDecayConfig::new(settings.weight_decay as f32));
    let mut optimizer =
        FusedSgd::<B::InnerBackend>::new(momentum.as_ref(), decay.as_ref()).init::<B, M>();

    let mut start_epoch = 0;
    if let Some(checkpoint) = &job.resume {
        checkpoint.check_model(job.model_name, job.architecture)?;
        if checkpoint.meta.settings != settings.identity() {
            return Err(TrainError::SettingsDiffer {
                path: checkpoint.path.clone(),
                found: checkpoint.meta.settings.to_string(),
                expected: settings.identity().to_string(),
            });
        }
        model = checkpoint.load_model(model, device)?;
        optimizer = optimizer.load_record(checkpoint.optimizer_record(device)?);
        start_epoch = checkpoint.meta.epoch;
    }

    let save = |model: &M, optimizer_record, epoch: usize, accuracy, name: String| {
        let meta = CheckpointMeta {
            model: job.model_name.to_string(),
            architecture: job.architecture.to_string(),
            epoch,
            settings: settings.identity(),
            test_accuracy: accuracy,
        };
        let path = job.save.dir.join(name);
        checkpoint::save::<B, M, _>(&path, &meta, model, optimizer_record).map(|()| path)
    };

    let mut report = TrainReport::default();
    let mut step_times = Vec::new();
    let mut step_phases = StepPhases::default();
    let mut examples_trained = 0usize;
    let epochs = if job.dry_run {
        start_epoch + 1
    } else {
        settings.epochs
    };
    let data = job.data;
    let steps_per_epoch = data.train.len().div_ceil(settings.batch_size);
    for epoch in start_epoch..epochs {
        let lr = settings.lr_at(epoch);
        let mut rng = epoch_rng(settings.seed, epoch);
        let mut order: Vec<usize> = (0..data.train.len()).collect();
        order.shuffle(&mut rng);
        let steps = if job.dry_run {
            1
        } else {
            steps_per_epoch.min(job.steps_per_epoch.unwrap_or(usize::MAX))
        };
        let bar = progress_bar(job.progress, steps, &format!("epoch {}", epoch + 1));
        let (mut loss_sum, mut seen) = (0.0f64, 0usize);
        let epoch_start = Instant::now();
        for (step, indices) in order.chunks(settings.batch_size).take(steps).enumerate() {
            let started = Instant::now();
            let examples: Vec<_> = indices.iter().map(|&i| &data.train.examples[i]).collect();
            let (images, targets) = data
                .train_batcher
                .augmented_batch::<B, _, _>(&examples, &mut rng, device);
            let batched = Instant::now();
            let loss = model.loss(model.forward(images), targets);
            let loss_value = loss.clone().into_scalar().elem::<f64>();
            let forwarded = Instant::now();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let backwarded = Instant::now();
            model = optimizer.step(lr, model, grads);
            let done = Instant::now();
            step_times.push(done - started);
            if step_times.len() > 1 {
                step_phases.steps += 1;
                step_phases.batch += batched - started;
                step_phases.forward += forwarded - batched;
                step_phases.backward += backwarded - forwarded;
                step_phases.optimizer += done - backwarded;
            }
            // The run's first step compiles (and may autotune) every kernel: a profile of the
            // steady state starts after it (a dry run has only that step).
            if step_times.len() == 1 && !job.dry_run && burn_hetero::profile::profiling() {
                burn_hetero::profile::reset_profile();
            }

            loss_sum += loss_value * indices.len() as f64;
            seen += indices.len();
            bar.inc(1);
            bar.set_message(format!("loss {loss_value:.4}"));
            if job.log_interval > 0 && (step + 1) % job.log_interval == 0 {
                bar.suspend(|| {
                    println!(
                        "epoch {} [{}/{} ({:.0}%)] loss {loss_value:.6}",
                        epoch + 1,
                        seen,
                        data.train.len(),
                        100.0 * seen as f64 / data.train.len() as f64
                    )
                });
            }
        }
        let train_time = epoch_start.elapsed();
        bar.finish_and_clear();
        examples_trained += seen;

        let valid = model.valid();
        // The profile is of training steps: the evaluation is left out of it.
        let profiling = burn_hetero::profile::profiling();
        burn_hetero::profile::set_profiling(false);
        let test = if job.dry_run {
            let n = settings.test_batch_size.min(data.test.len());
            let subset = ImageDataset {
                shape: data.test.shape,
                examples: data.test.examples[..n].to_vec(),
            };
            evaluate(&valid, &subset, &data.test_batcher, n, device, false)
        } else {
            evaluate(
                &valid,
                &data.test,
                &data.test_batcher,
                settings.test_batch_size,
                device,
                job.progress,
            )
        };
        burn_hetero::profile::set_profiling(profiling);
        let epoch_report = EpochReport {
            epoch: epoch + 1,
            lr,
            train_loss: loss_sum / seen.max(1) as f64,
            test_loss: test.0,
            test_accuracy: test.1,
            steps,
            train_time,
        };
        println!(
            "epoch {}/{}: lr {:.4e}, train loss {:.4}, test loss {:.4}, test accuracy {:.2}%, {:.1} s",
            epoch_report.epoch,
            epochs,
            lr,
            epoch_report.train_loss,
            test.0,
            100.0 * test.1,
            train_time.as_secs_f64()
        );
        report.final_test = Some(test);
        report.epochs.push(epoch_report);

        let done = epoch + 1;
        if let Some(every) = job.save.every.filter(|&e| e > 0)
            && done % every == 0
        {
            let name = format!("{}-epoch{done}.ckpt", job.model_name);
            let path = save(&model, optimizer.to_record(), done, Some(test.1), name)?;
            println!("saved {}", path.display());
            report.saved.push(path);
        }
    }
    if job.save.final_model {
        let done = epochs.max(start_epoch);
        let accuracy = report.final_test.map(|t| t.1);
        let name = format!("{}.ckpt", job.model_name);
        let path = save(&model, optimizer.to_record(), done, accuracy, name)?;
        println!("saved {}", path.display());
        report.saved.push(path);
    }

    let total: Duration = step_times.iter().sum();
    report.step_times = step_times.clone();
    report.step_phases = step_phases;
    step_times.sort();
    report.median_step = step_times
        .get(step_times.len() / 2)
        .copied()
        .unwrap_or_default();
    report.examples_per_second = if total.is_zero() {
        0.0
    } else {
        examples_trained as f64 / total.as_secs_f64()
    };
    Ok((model, report))
}
