//! Training checkpoints: the model, the optimizer's state and where training stands, in one file
//! written atomically.
//!
//! Layout: the magic line `burn-hetero checkpoint\n`, a format version (u32, little-endian), then
//! three length-prefixed (u64, little-endian) sections: the [`CheckpointMeta`] as JSON, the model
//! record and the optimizer record, both as Burn's named MessagePack at full precision. A file is
//! written under a temporary name in the same directory, synced, then renamed over the target,
//! so a crash during a save leaves the previous checkpoint whole.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Record, Recorder};
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

const MAGIC: &[u8] = b"burn-hetero checkpoint\n";
const VERSION: u32 = 1;

/// Where training stands, and what it was trained with, so that a resumed run can check it is
/// the same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// The model's name (`mnist`, `resnet20`, ...).
    pub model: String,
    /// The model's shape in words (input channels, classes, shortcut), compared on load.
    pub architecture: String,
    /// Epochs completed.
    pub epoch: usize,
    /// The run's settings, as JSON, compared on resume.
    pub settings: serde_json::Value,
    /// Held-out accuracy after the last completed epoch, when it was measured.
    pub test_accuracy: Option<f64>,
}

/// Why a checkpoint could not be written or read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading or writing the file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a checkpoint of this program, or is cut short or damaged.
    #[error("{}: not a valid checkpoint: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The checkpoint holds another model than the one asked for.
    #[error(
        "{}: checkpoint of {found} ({found_architecture}), but the command trains {expected} ({expected_architecture})",
        path.display()
    )]
    WrongModel {
        /// The file.
        path: PathBuf,
        /// The model in the file.
        found: String,
        /// Its architecture.
        found_architecture: String,
        /// The model asked for.
        expected: String,
        /// Its architecture.
        expected_architecture: String,
    },
}

impl CheckpointError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    fn corrupt(path: &Path, reason: impl Into<String>) -> Self {
        Self::Corrupt {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

type Mpk = NamedMpkBytesRecorder<FullPrecisionSettings>;

/// A checkpoint read back: metadata plus the two records, not yet loaded into a model.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Where it was read from.
    pub path: PathBuf,
    /// Where training stands.
    pub meta: CheckpointMeta,
    model: Vec<u8>,
    optimizer: Vec<u8>,
}

/// Writes a checkpoint of `model` and the optimizer record `optimizer` to `path` atomically.
pub fn save<B: Backend, M: Module<B>, O: Record<B>>(
    path: &Path,
    meta: &CheckpointMeta,
    model: &M,
    optimizer: O,
) -> Result<(), CheckpointError> {
    let recorder = Mpk::default();
    let model_bytes = Recorder::<B>::record(&recorder, model.clone().into_record(), ())
        .map_err(|e| CheckpointError::corrupt(path, format!("encoding the model: {e}")))?;
    let optimizer_bytes = Recorder::<B>::record(&recorder, optimizer, ())
        .map_err(|e| CheckpointError::corrupt(path, format!("encoding the optimizer: {e}")))?;
    let meta_bytes = serde_json::to_vec(meta)
        .map_err(|e| CheckpointError::corrupt(path, format!("encoding the metadata: {e}")))?;

    let mut content = Vec::with_capacity(64 + meta_bytes.len() + model_bytes.len());
    content.extend_from_slice(MAGIC);
    content.extend_from_slice(&VERSION.to_le_bytes());
    for section in [&meta_bytes, &model_bytes, &optimizer_bytes] {
        content.extend_from_slice(&(section.len() as u64).to_le_bytes());
        content.extend_from_slice(section);
    }
    write_atomically(path, &content)
}

/// Writes `content` to a temporary file next to `path`, syncs it, and renames it to `path`.
fn write_atomically(path: &Path, content: &[u8]) -> Result<(), CheckpointError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| CheckpointError::io(&dir, e))?;
    let name = path
        .file_name()
        .ok_or_else(|| CheckpointError::corrupt(path, "the path names no file"))?;
    let temporary = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        let mut file = File::create(&temporary)?;
        file.write_all(content)?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(CheckpointError::io(&temporary, e));
    }
    std::fs::rename(&temporary, path).map_err(|e| {
        let _ = std::fs::remove_file(&temporary);
        CheckpointError::io(path, e)
    })?;
    // The rename is durable once the directory is synced; not every platform can open one.
    if let Ok(dir) = File::open(&dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Reads a checkpoint's sections, checking the framing (not yet the records).
pub fn read(path: &Path) -> Result<Checkpoint, CheckpointError> {
    let content = std::fs::read(path).map_err(|e| CheckpointError::io(path, e))?;
    let rest = content
        .strip_prefix(MAGIC)
        .ok_or_else(|| CheckpointError::corrupt(path, "it does not start with the magic line"))?;
    let (version, mut rest) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| CheckpointError::corrupt(path, "cut short in the header"))?;
    let version = u32::from_le_bytes(*version);
    if version != VERSION {
        return Err(CheckpointError::corrupt(
            path,
            format!("format version {version}, this program reads {VERSION}"),
        ));
    }
    let mut sections = Vec::new();
    for name in ["metadata", "model", "optimizer"] {
        let (len, after) = rest.split_first_chunk::<8>().ok_or_else(|| {
            CheckpointError::corrupt(path, format!("cut short before the {name} section"))
        })?;
        let len = u64::from_le_bytes(*len);
        if len > after.len() as u64 {
            return Err(CheckpointError::corrupt(
                path,
                format!(
                    "cut short in the {name} section ({len} bytes announced, {} there)",
                    after.len()
                ),
            ));
        }
        let (section, after) = after.split_at(len as usize);
        sections.push(section.to_vec());
        rest = after;
    }
    if !rest.is_empty() {
        return Err(CheckpointError::corrupt(
            path,
            format!("{} unexpected bytes at the end", rest.len()),
        ));
    }
    let optimizer = sections.pop().unwrap_or_default();
    let model = sections.pop().unwrap_or_default();
    let meta = serde_json::from_slice(&sections[0])
        .map_err(|e| CheckpointError::corrupt(path, format!("metadata: {e}")))?;
    Ok(Checkpoint {
        path: path.to_path_buf(),
        meta,
        model,
        optimizer,
    })
}

impl Checkpoint {
    /// Fails unless the checkpoint holds `model` of `architecture`.
    pub fn check_model(&self, model: &str, architecture: &str) -> Result<(), CheckpointError> {
        if self.meta.model != model || self.meta.architecture != architecture {
            return Err(CheckpointError::WrongModel {
                path: self.path.clone(),
                found: self.meta.model.clone(),
                found_architecture: self.meta.architecture.clone(),
                expected: model.to_string(),
                expected_architecture: architecture.to_string(),
            });
        }
        Ok(())
    }

    /// `model` with the checkpoint's parameters.
    pub fn load_model<B: Backend, M: Module<B>>(
        &self,
        model: M,
        device: &B::Device,
    ) -> Result<M, CheckpointError> {
        let record = Recorder::<B>::load(&Mpk::default(), self.model.clone(), device)
            .map_err(|e| CheckpointError::corrupt(&self.path, format!("model record: {e}")))?;
        Ok(model.load_record(record))
    }

    /// The optimizer record.
    pub fn optimizer_record<B: Backend, O: Record<B>>(
        &self,
        device: &B::Device,
    ) -> Result<O, CheckpointError> {
        Recorder::<B>::load(&Mpk::default(), self.optimizer.clone(), device)
            .map_err(|e| CheckpointError::corrupt(&self.path, format!("optimizer record: {e}")))
    }
}
