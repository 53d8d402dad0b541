//! The `hetero` command: a real training run on the bundled digits, checkpoints and resumption,
//! and the error paths. Runs on `--backend cpu` (burn-flex; the ndarray backend's conv gradients
//! are too slow for CI) through `cli::run`, and once through the built binary for exit codes.

use std::path::Path;

use burn_hetero_models::checkpoint;
use burn_hetero_models::cli::{CliError, Outcome, RunError, run};
use burn_hetero_models::train::TrainError;
use burn_hetero_models::{AnyModel, MnistNet, checkpoint::CheckpointError};

type Flex = burn_flex::Flex;

fn hetero(args: &[&str]) -> Result<Outcome, RunError> {
    let mut all = vec!["hetero", "train"];
    all.extend_from_slice(args);
    all.push("--quiet");
    run(all)
}

fn failure(args: &[&str]) -> CliError {
    match hetero(args) {
        Err(RunError::Failed(e)) => *e,
        Err(RunError::Flags(e)) => panic!("flag error instead of a command error: {e}"),
        Ok(_) => panic!("{args:?} succeeded"),
    }
}

#[test]
fn mnist_trains_above_90_percent_in_a_few_hundred_steps() {
    let outcome = hetero(&[
        "mnist",
        "--backend",
        "cpu",
        "--epochs",
        "2",
        "--steps-per-epoch",
        "150",
    ])
    .unwrap();
    let report = outcome.report;
    assert_eq!(report.epochs.len(), 2);
    let (loss, accuracy) = report.final_test.unwrap();
    assert!(accuracy >= 0.90, "held-out accuracy {accuracy}");
    assert!(loss.is_finite() && loss < 0.5, "held-out loss {loss}");
    // The schedule decays per epoch (gamma 0.7) and the loss falls.
    assert!((report.epochs[1].lr - 0.007).abs() < 1e-12);
    assert!(report.epochs[1].train_loss < report.epochs[0].train_loss);
    assert!(report.examples_per_second > 0.0);
}

/// The parameters of an MNIST-net checkpoint, flattened.
fn parameters(path: &Path) -> Vec<f32> {
    let device = Default::default();
    let checkpoint = checkpoint::read(path).unwrap();
    let model = checkpoint
        .load_model::<Flex, _>(AnyModel::Mnist(MnistNet::<Flex>::new(&device)), &device)
        .unwrap();
    use burn::module::Module;
    struct Collect(Vec<f32>);
    impl burn::module::ModuleVisitor<Flex> for Collect {
        fn visit_float<const D: usize>(
            &mut self,
            param: &burn::module::Param<burn::tensor::Tensor<Flex, D>>,
        ) {
            self.0
                .extend(param.val().into_data().to_vec::<f32>().unwrap());
        }
    }
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}

#[test]
fn resumed_training_equals_uninterrupted_training() {
    let dir = tempfile::tempdir().unwrap();
    let straight = dir.path().join("straight");
    let split = dir.path().join("split");
    let common = [
        "mnist",
        "--backend",
        "cpu",
        "--steps-per-epoch",
        "4",
        "--test-batch-size",
        "500",
        "--save-model",
    ];
    let with_dir = |dir: &Path, extra: &[&str]| {
        let mut args = common.to_vec();
        let dir = dir.to_str().unwrap().to_string();
        let mut owned = vec!["--save-dir".to_string(), dir];
        owned.extend(extra.iter().map(|s| s.to_string()));
        args.extend(owned.iter().map(|s| s.as_str()));
        hetero(&args).unwrap()
    };
    let uninterrupted = with_dir(&straight, &["--epochs", "2"]);
    // The first epoch only, with a checkpoint after it ...
    let first = with_dir(&split, &["--epochs", "1", "--save-every", "1"]);
    assert_eq!(first.report.epochs.len(), 1);
    let epoch1 = split.join("mnist-epoch1.ckpt");
    assert_eq!(checkpoint::read(&epoch1).unwrap().meta.epoch, 1);
    // ... then the second from that checkpoint.
    let epoch1_arg = epoch1.to_str().unwrap();
    let resumed = with_dir(&split, &["--epochs", "2", "--resume", epoch1_arg]);
    assert_eq!(resumed.report.epochs.len(), 1);
    assert_eq!(resumed.report.epochs[0].epoch, 2);

    let a = parameters(&straight.join("mnist.ckpt"));
    let b = parameters(&split.join("mnist.ckpt"));
    assert_eq!(a.len(), 431_080);
    assert!(a.iter().all(|v| v.is_finite()));
    assert_eq!(
        a, b,
        "resumed parameters differ from the uninterrupted run's"
    );
    assert_eq!(
        uninterrupted.report.final_test, resumed.report.final_test,
        "held-out results differ"
    );

    // --evaluate tests the checkpoint and trains nothing.
    let final_ckpt = straight.join("mnist.ckpt");
    let evaluated = hetero(&[
        "mnist",
        "--backend",
        "cpu",
        "--test-batch-size",
        "500",
        "--evaluate",
        "--resume",
        final_ckpt.to_str().unwrap(),
    ])
    .unwrap();
    assert!(evaluated.report.epochs.is_empty());
    let (eval_loss, eval_accuracy) = evaluated.report.final_test.unwrap();
    let (loss, accuracy) = uninterrupted.report.final_test.unwrap();
    assert_eq!(eval_accuracy, accuracy);
    assert!(
        (eval_loss - loss).abs() <= 1e-6 * loss.abs(),
        "{eval_loss} vs {loss}"
    );

    // Resuming with other settings is refused, naming the file.
    let err = failure(&[
        "mnist",
        "--backend",
        "cpu",
        "--lr",
        "0.5",
        "--resume",
        final_ckpt.to_str().unwrap(),
    ]);
    assert!(
        matches!(err, CliError::Train(TrainError::SettingsDiffer { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("mnist.ckpt"), "{err}");

    // A damaged checkpoint: cut short, or not a checkpoint at all.
    let bytes = std::fs::read(&final_ckpt).unwrap();
    let cut = dir.path().join("cut.ckpt");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let garbage = dir.path().join("garbage.ckpt");
    std::fs::write(&garbage, b"PK\x03\x04 certainly not a checkpoint").unwrap();
    for (path, says) in [(&cut, "cut short"), (&garbage, "magic")] {
        let err = failure(&["mnist", "--evaluate", "--resume", path.to_str().unwrap()]);
        assert!(
            matches!(err, CliError::Checkpoint(CheckpointError::Corrupt { .. })),
            "{err}"
        );
        let message = err.to_string();
        assert!(
            message.contains(path.to_str().unwrap()) && message.contains(says),
            "{message}"
        );
    }
    // No temporary file is left behind by the saves.
    for entry in std::fs::read_dir(&split).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(name.ends_with(".ckpt") && !name.starts_with('.'), "{name}");
    }
}

#[test]
fn a_checkpoint_of_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let save_dir = dir.path().to_str().unwrap();
    hetero(&[
        "resnet20",
        "--backend",
        "cpu",
        "--dry-run",
        "--batch-size",
        "4",
        "--test-batch-size",
        "4",
        "--save-model",
        "--save-dir",
        save_dir,
    ])
    .unwrap();
    let resnet = dir.path().join("resnet20.ckpt");
    let err = failure(&["mnist", "--evaluate", "--resume", resnet.to_str().unwrap()]);
    assert!(
        matches!(
            err,
            CliError::Checkpoint(CheckpointError::WrongModel { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("resnet20"), "{err}");
}

#[test]
fn bad_flags_and_missing_data_are_clear_errors() {
    match hetero(&["resnet21"]) {
        Err(RunError::Flags(e)) => {
            let text = e.to_string();
            assert!(
                text.contains("resnet21") && text.contains("resnet20"),
                "{text}"
            );
        }
        other => panic!("unknown model accepted: {other:?}"),
    }
    match hetero(&["mnist", "--evaluate"]) {
        Err(RunError::Flags(e)) => assert!(e.to_string().contains("--resume"), "{e}"),
        other => panic!("--evaluate without --resume accepted: {other:?}"),
    }
    // Hetero on burn-ndarray runs on CUDA only: asked for Vulkan, or with no CUDA device (as
    // on the CI machines), it says so rather than training elsewhere.
    let err = failure(&["mnist", "--cpu", "ndarray", "--accel", "vulkan"]);
    assert!(
        matches!(&err, CliError::Usage(m) if m.contains("CUDA only")),
        "{err}"
    );
    match hetero(&["mnist", "--cpu", "ndarray", "--steps-per-epoch", "1"]) {
        Err(RunError::Failed(e)) => assert!(
            matches!(&*e, CliError::Accelerator(m) if m.contains("CUDA")),
            "{e}"
        ),
        Ok(outcome) => assert!(
            outcome.backend.contains("ndarray") && outcome.backend.contains("CUDA"),
            "{}",
            outcome.backend
        ),
        Err(RunError::Flags(e)) => panic!("--cpu ndarray refused as a flag: {e}"),
    }
    let err = failure(&["mnist", "--dataset", "cifar10"]);
    assert!(err.to_string().contains("--data-dir"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().to_str().unwrap();
    let err = failure(&[
        "resnet20",
        "--dataset",
        "fashion-mnist",
        "--data-dir",
        empty,
    ]);
    assert!(
        err.to_string().contains("train-images-idx3-ubyte") && err.to_string().contains(empty),
        "{err}"
    );
    for milestones in ["3,x", "0,3"] {
        let err = failure(&["mnist", "--milestones", milestones]);
        assert!(err.to_string().contains("--milestones"), "{err}");
    }
    let err = failure(&["mnist", "--placement", "forward=f8"]);
    assert!(err.to_string().contains("--placement"), "{err}");
    let err = failure(&["mnist", "--lr", "NaN"]);
    assert!(err.to_string().contains("--lr"), "{err}");
    let missing = dir.path().join("nothing.ckpt");
    let err = failure(&["mnist", "--resume", missing.to_str().unwrap()]);
    assert!(err.to_string().contains("nothing.ckpt"), "{err}");
}

#[test]
fn the_binary_exits_non_zero_without_a_panic() {
    let binary = env!("CARGO_BIN_EXE_hetero");
    for (args, code, says) in [
        (vec!["train", "lenet"], 2, "invalid value 'lenet'"),
        (
            vec!["train", "mnist", "--dataset", "cifar10"],
            1,
            "error: --dataset cifar10 needs --data-dir",
        ),
    ] {
        let output = std::process::Command::new(binary)
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn every_backend_here_runs_a_step() {
    let quick = ["--dry-run", "--batch-size", "8", "--test-batch-size", "8"];
    for (flags, runs_on) in [
        (
            &["--backend", "cpu", "--cpu", "ndarray"][..],
            "cpu (ndarray",
        ),
        (&["--backend", "cpu"][..], "cpu (flex"),
        // Vulkan on whatever device there is (lavapipe on CI): conv forward f16, gradients on
        // the CPU, strict so that any fallback fails.
        (
            &[
                "--accel",
                "vulkan",
                "--placement",
                "forward=f16,dgrad=cpu,wgrad=cpu",
                "--strict",
            ][..],
            "hetero: flex + Vulkan",
        ),
    ] {
        let mut args = vec!["mnist"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&quick);
        let outcome = hetero(&args).unwrap();
        assert!(
            outcome.backend.starts_with(runs_on),
            "{flags:?} ran on {}",
            outcome.backend
        );
        let (loss, accuracy) = outcome.report.final_test.unwrap();
        assert!(loss.is_finite() && (0.0..=1.0).contains(&accuracy));
        assert_eq!(outcome.report.epochs[0].steps, 1);
    }
}

#[test]
fn profile_chart_shows_every_conv_phase_by_layer() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("profile.svg");
    let quick = ["--dry-run", "--batch-size", "8", "--test-batch-size", "8"];
    let mut args = vec![
        "mnist",
        "--accel",
        "vulkan",
        "--placement",
        "conv=f16",
        "--strict",
    ];
    args.extend_from_slice(&quick);
    args.extend_from_slice(&["--profile-chart", chart.to_str().unwrap()]);
    hetero(&args).unwrap();
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for row in [
        "L1 forward 8×1×28×28 → 20, 5×5 (accelerator/f16)",
        "L1 wgrad 8×1×28×28 → 20, 5×5 (accelerator/f16)",
        "L2 forward 8×20×12×12 → 50, 5×5 (accelerator/f16)",
        "L2 dgrad",
        "L2 wgrad",
    ] {
        assert!(svg.contains(row), "{row} missing:\n{svg}");
    }
    // The first layer's input is the data: no input gradient.
    assert!(!svg.contains("L1 dgrad"), "{svg}");
    assert!(svg.matches("<rect").count() >= 5 * 3, "{svg}");
    // A path that cannot be written fails before training; other backends are not profiled.
    let unwritable = dir.path().join("missing-dir").join("p.svg");
    let err = failure(&["mnist", "--profile-chart", unwritable.to_str().unwrap()]);
    assert!(
        matches!(&err, CliError::Output(m) if m.contains("missing-dir")),
        "{err}"
    );
    for flag in ["--profile", "--profile-unsynced"] {
        let err = failure(&["mnist", "--backend", "cpu", flag]);
        assert!(
            matches!(&err, CliError::Usage(m) if m.contains("--backend hetero")),
            "{flag}: {err}"
        );
    }
}

/// The ResNets' default milestones (half and three quarters of the epochs) never fall before the
/// first epoch's end: a one-epoch run trains at the full rate.
#[test]
fn one_epoch_resnet_run_keeps_the_initial_learning_rate() {
    let outcome = hetero(&[
        "resnet20",
        "--backend",
        "cpu",
        "--dry-run",
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--test-batch-size",
        "4",
    ])
    .unwrap();
    assert_eq!(outcome.report.epochs.len(), 1);
    assert_eq!(outcome.report.epochs[0].lr, 0.1);
}

#[test]
fn bench_times_each_cell_and_compares_with_pytorch() {
    use burn_hetero_models::bench::BenchBackend;
    let dir = tempfile::tempdir().unwrap();
    let torch = dir.path().join("torch.md");
    std::fs::write(
        &torch,
        "bus pinned=True: H2D 53.0 GB/s\n| model | batch | variant | ms/step (median) |\n\
         |---|---|---|---|\n| mnist_net | 4 | cpu | 5.00 |\n| mnist_net | 4 | gpu | 2.50 |\n\
         | resnet20 | 32 | cpu | 33.10 |\n",
    )
    .unwrap();
    let table = dir.path().join("bench.md");
    let (torch_arg, table_arg) = (torch.to_str().unwrap(), table.to_str().unwrap());
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "hetero",
            "bench",
            "--models",
            "mnist",
            "--batch-sizes",
            "4",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--accel",
            "vulkan",
        ];
        args.extend_from_slice(extra);
        run(args)
    };
    let outcome = bench(&[
        "--backends",
        "cpu-flex,hetero-cpu,hetero-forward",
        "--torch",
        torch_arg,
        "--output",
        table_arg,
    ])
    .unwrap();
    let rows = outcome.bench;
    assert_eq!(rows.len(), 3);
    assert_eq!(
        (rows[0].backend, rows[1].backend, rows[2].backend),
        (
            BenchBackend::CpuFlex,
            BenchBackend::HeteroCpu,
            BenchBackend::HeteroForward
        )
    );
    assert!(
        rows[0].ran_on.starts_with("cpu (flex"),
        "{}",
        rows[0].ran_on
    );
    for row in &rows[1..] {
        assert!(
            row.ran_on.starts_with("hetero: flex + Vulkan"),
            "{}",
            row.ran_on
        );
    }
    let written = std::fs::read_to_string(&table).unwrap();
    assert!(
        written.contains("| ms/step (median) | × PyTorch cpu | × PyTorch gpu |"),
        "{written}"
    );
    for row in &rows {
        assert_eq!((row.model.as_str(), row.batch), ("mnist", 4));
        let ms = row.median.as_ref().unwrap().as_secs_f64() * 1e3;
        assert!(ms > 0.0);
        // Each ratio is PyTorch's time over ours.
        let line = format!("| {ms:.2} | {:.2} | {:.2} |", 5.0 / ms, 2.5 / ms);
        assert!(written.contains(&line), "{line} not in\n{written}");
    }
    // PyTorch's rows for the benched cells only.
    assert!(
        written.contains("| mnist | 4 | pytorch-cpu | PyTorch | 5.00 | | |"),
        "{written}"
    );
    assert!(!written.contains("33.10"), "{written}");

    // A bad --torch file fails before any run, naming the file.
    std::fs::write(&torch, "no table here\n").unwrap();
    match bench(&["--backends", "cpu-flex", "--torch", torch_arg]) {
        Err(RunError::Failed(e)) => {
            assert!(matches!(*e, CliError::Usage(_)), "{e}");
            assert!(e.to_string().contains("torch.md"), "{e}");
        }
        other => panic!("a table-less --torch file was accepted: {other:?}"),
    }
}
