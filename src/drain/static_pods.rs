//! Static pods cannot be evicted through the API: the kubelet runs whatever
//! manifests sit in its static pod directory. To drain them, maintd moves
//! their manifests into a stash directory beside it, and moves them back
//! when maintenance ends.
//!
//! A manifest is never lost, whatever moment the process is killed at:
//! every move is one atomic `renameat2(RENAME_NOREPLACE)` within one
//! filesystem (so a file is always in exactly one of the two directories,
//! and nothing is ever overwritten), both directories are fsync'd after
//! moves, and a journal records each operation before it starts so an
//! interrupted one is reported and finished on the next call.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::node_helper::{FileOp, HelperClient};

const JOURNAL: &str = ".maintd-journal.json";

#[derive(Debug, thiserror::Error)]
pub enum StashError {
    #[error(
        "the static pod directory {0} does not exist; nothing can be stashed (set --static-pod-dir to the kubelet's staticPodPath)"
    )]
    ManifestDirMissing(PathBuf),
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error(
        "the stash {stash} is on a different filesystem than {manifests}; a move between them would not be atomic — put the stash beside the static pod directory (--static-pod-stash)"
    )]
    DifferentFilesystem { manifests: PathBuf, stash: PathBuf },
    #[error("{0}")]
    Helper(#[from] crate::node_helper::HelperError),
    #[error("moving {from} to {to}: {error}")]
    Move {
        from: PathBuf,
        to: PathBuf,
        error: nix::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StashError + '_ {
    move |error| StashError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Kubernetes' default terminationGracePeriodSeconds.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// One manifest in the kubelet's directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// File name within the directory.
    pub file: String,
    /// The pod's metadata.name, when the manifest parses.
    pub pod_name: Option<String>,
    /// The pod's namespace (Kubernetes' default "default" when unset).
    pub namespace: Option<String>,
    /// The pod's terminationGracePeriodSeconds (Kubernetes' default 30):
    /// how long the kubelet gives it once its manifest is gone.
    pub grace_seconds: i64,
    /// Why the manifest could not be read, if it could not.
    pub error: Option<String>,
    /// How long ago the file was last changed or moved, in milliseconds
    /// (for a stashed manifest: since its pod was told to stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_ago_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StashReport {
    pub stashed: Vec<String>,
    /// An interrupted earlier operation that was finished first.
    pub recovered: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RestoreReport {
    pub restored: Vec<String>,
    /// Files an admin had already put back: both copies kept; the stashed
    /// one was renamed to this name in the stash.
    pub conflicts: Vec<String>,
    pub recovered: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    op: String,
    files: Vec<String>,
}

/// The manifest stash of one node: its files, or the node helper that
/// holds them (then the directories are the helper's, for messages only).
#[derive(Debug, Clone)]
pub struct StaticPodStash {
    pub manifest_dir: PathBuf,
    pub stash_dir: PathBuf,
    helper: Option<HelperClient>,
}

/// The stash's name inside the static pod directory: a dot-directory, which
/// the kubelet does not read (it skips dotfiles and does not go into
/// directories), so moves stay within the one directory mounted.
pub const STASH_NAME: &str = ".maintd-stash";

impl StaticPodStash {
    /// `stash_dir` defaults to `<manifest_dir>/.maintd-stash`.
    pub fn new(manifest_dir: PathBuf, stash_dir: Option<PathBuf>) -> Self {
        let stash_dir = stash_dir.unwrap_or_else(|| manifest_dir.join(STASH_NAME));
        StaticPodStash {
            manifest_dir,
            stash_dir,
            helper: None,
        }
    }

    /// The same stash, its files moved by the node helper at `socket`.
    pub fn through_helper(self, socket: PathBuf) -> Self {
        StaticPodStash {
            helper: Some(HelperClient::new(socket)),
            ..self
        }
    }

    /// Where earlier releases stashed by default, beside the directory
    /// (`<manifest_dir>.maintd-stash`), when it is there and is not this
    /// stash: what an upgrade finds stashed there is restored too.
    fn earlier_stash(&self) -> Option<StaticPodStash> {
        let mut name = self.manifest_dir.file_name()?.to_os_string();
        name.push(".maintd-stash");
        let dir = self.manifest_dir.with_file_name(name);
        (dir != self.stash_dir && dir.is_dir()).then(|| StaticPodStash {
            manifest_dir: self.manifest_dir.clone(),
            stash_dir: dir,
            helper: None,
        })
    }

    /// The mirror pod name the kubelet gives a static pod.
    pub fn mirror_pod_name(pod_name: &str, node: &str) -> String {
        format!("{pod_name}-{node}")
    }

    /// The manifests the kubelet would run (regular files, not dotfiles).
    pub fn manifests(&self) -> Result<Vec<Manifest>, StashError> {
        if let Some(h) = &self.helper {
            return Ok(h.files(FileOp::Manifests)?);
        }
        if !self.manifest_dir.is_dir() {
            return Err(StashError::ManifestDirMissing(self.manifest_dir.clone()));
        }
        read_manifests(&self.manifest_dir, list_files(&self.manifest_dir)?)
    }

    /// The manifests moved into the stash (a drain resumed after they were
    /// moved finds its static pods there); empty when there is no stash.
    pub fn stashed_manifests(&self) -> Result<Vec<Manifest>, StashError> {
        if let Some(h) = &self.helper {
            return Ok(h.files(FileOp::StashedManifests)?);
        }
        read_manifests(&self.stash_dir, self.stashed()?)
    }

    /// What is in the stash now.
    pub fn stashed(&self) -> Result<Vec<String>, StashError> {
        if let Some(h) = &self.helper {
            return Ok(h.files(FileOp::Stashed)?);
        }
        if !self.stash_dir.is_dir() {
            return Ok(Vec::new());
        }
        Ok(list_files(&self.stash_dir)?
            .into_iter()
            .filter(|f| !is_conflict_copy(f))
            .collect())
    }

    fn ensure_stash_dir(&self) -> Result<(), StashError> {
        if !self.stash_dir.is_dir() {
            fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(&self.stash_dir)
                .map_err(io(&self.stash_dir))?;
        }
        let a = fs::metadata(&self.manifest_dir).map_err(io(&self.manifest_dir))?;
        let b = fs::metadata(&self.stash_dir).map_err(io(&self.stash_dir))?;
        if a.dev() != b.dev() {
            return Err(StashError::DifferentFilesystem {
                manifests: self.manifest_dir.clone(),
                stash: self.stash_dir.clone(),
            });
        }
        Ok(())
    }

    fn write_journal(&self, op: &str, files: &[String]) -> Result<(), StashError> {
        let path = self.stash_dir.join(JOURNAL);
        let tmp = self.stash_dir.join(format!("{JOURNAL}.tmp"));
        let body = serde_json::to_vec(&Journal {
            op: op.into(),
            files: files.to_vec(),
        })
        .unwrap_or_default();
        let mut f = fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&body).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        fs::rename(&tmp, &path).map_err(io(&path))?;
        sync_dir(&self.stash_dir)
    }

    fn clear_journal(&self) -> Result<(), StashError> {
        let path = self.stash_dir.join(JOURNAL);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.stash_dir),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StashError::Io { path, error: e }),
        }
    }

    /// Finishes what a killed process left: since every move is atomic,
    /// each file is whole in one directory or the other; what remains is
    /// to report the interrupted operation and drop its journal.
    pub fn recover(&self) -> Result<Option<String>, StashError> {
        let _ = fs::remove_file(self.stash_dir.join(format!("{JOURNAL}.tmp")));
        let path = self.stash_dir.join(JOURNAL);
        let Ok(text) = fs::read_to_string(&path) else {
            return Ok(None);
        };
        let what = journal_says(&text);
        tracing::warn!(stash = %self.stash_dir.display(), "finishing {what}");
        self.clear_journal()?;
        Ok(Some(what))
    }

    /// Moves the named manifests (all with None) into the stash.
    /// Idempotent: a file already stashed is fine.
    pub fn stash(&self, files: Option<&[String]>) -> Result<StashReport, StashError> {
        if let Some(h) = &self.helper {
            let files = files.map(<[String]>::to_vec);
            return Ok(h.files(FileOp::Stash { files })?);
        }
        if !self.manifest_dir.is_dir() {
            return Err(StashError::ManifestDirMissing(self.manifest_dir.clone()));
        }
        self.ensure_stash_dir()?;
        let recovered = self.recover()?;
        let present = list_files(&self.manifest_dir)?;
        let todo: Vec<String> = match files {
            Some(f) => present.into_iter().filter(|p| f.contains(p)).collect(),
            None => present,
        };
        if todo.is_empty() {
            return Ok(StashReport {
                stashed: vec![],
                recovered,
            });
        }
        self.write_journal("stash", &todo)?;
        for f in &todo {
            let (from, to) = (self.manifest_dir.join(f), self.stash_dir.join(f));
            if to.exists() {
                // An older copy waits in the stash (an admin put the file back
                // and it is being stashed again): keep both.
                move_noreplace(&to, &self.stash_dir.join(conflict_name(f)))?;
            }
            move_noreplace(&from, &to)?;
        }
        sync_dir(&self.manifest_dir)?;
        sync_dir(&self.stash_dir)?;
        self.clear_journal()?;
        Ok(StashReport {
            stashed: todo,
            recovered,
        })
    }

    /// Moves every stashed manifest back, from this stash and from where an
    /// earlier release stashed (see `earlier_stash`). Never overwrites: a
    /// file of the same name already back in the directory is kept, and the
    /// stashed copy stays in the stash under a `.conflict-` name.
    /// Idempotent.
    pub fn restore(&self) -> Result<RestoreReport, StashError> {
        if let Some(h) = &self.helper {
            return Ok(h.files(FileOp::Restore)?);
        }
        let mut report = self.restore_own()?;
        if let Some(earlier) = self.earlier_stash() {
            let more = earlier.restore_own()?;
            report.restored.extend(more.restored);
            report.conflicts.extend(more.conflicts);
            report.recovered = report.recovered.or(more.recovered);
        }
        Ok(report)
    }

    /// Puts back what this stash holds.
    fn restore_own(&self) -> Result<RestoreReport, StashError> {
        if !self.stash_dir.is_dir() {
            return Ok(RestoreReport::default());
        }
        let recovered = self.recover()?;
        let todo = self.stashed()?;
        if todo.is_empty() {
            return Ok(RestoreReport {
                recovered,
                ..Default::default()
            });
        }
        if !self.manifest_dir.is_dir() {
            fs::create_dir_all(&self.manifest_dir).map_err(io(&self.manifest_dir))?;
        }
        self.write_journal("restore", &todo)?;
        let mut report = RestoreReport {
            recovered,
            ..Default::default()
        };
        for f in &todo {
            let (from, to) = (self.stash_dir.join(f), self.manifest_dir.join(f));
            match renameat2(
                AT_FDCWD,
                &from,
                AT_FDCWD,
                &to,
                RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) => report.restored.push(f.clone()),
                Err(nix::Error::EEXIST) => {
                    let kept = conflict_name(f);
                    move_noreplace(&from, &self.stash_dir.join(&kept))?;
                    tracing::warn!(file = %f, kept = %kept, "a manifest of that name is already back; kept both");
                    report.conflicts.push(kept);
                }
                Err(error) => return Err(StashError::Move { from, to, error }),
            }
        }
        sync_dir(&self.manifest_dir)?;
        sync_dir(&self.stash_dir)?;
        self.clear_journal()?;
        Ok(report)
    }
}

/// What an interrupted operation's journal (its text) says it was.
pub(crate) fn journal_says(text: &str) -> String {
    match serde_json::from_str::<Journal>(text) {
        Ok(j) => format!("an interrupted {} of {}", j.op, j.files.join(", ")),
        Err(_) => {
            "an interrupted operation (its journal is unreadable; the files themselves are intact)"
                .to_string()
        }
    }
}

/// Reads `files` of `dir` as pod manifests; one that cannot be read says why.
fn read_manifests(dir: &Path, files: Vec<String>) -> Result<Vec<Manifest>, StashError> {
    let mut out = Vec::new();
    for file in files {
        let path = dir.join(&file);
        let changed_ago_ms = changed_ago_ms(&path);
        let text = fs::read_to_string(&path).map_err(|e| e.to_string());
        out.push(manifest_of(file, text, changed_ago_ms));
    }
    Ok(out)
}

/// The manifest `file` whose text is `text` (or why it could not be read)
/// says; one that is not YAML, or names no pod, says why.
pub(crate) fn manifest_of(
    file: String,
    text: Result<String, String>,
    changed_ago_ms: Option<u64>,
) -> Manifest {
    let parsed = text.and_then(|t| serde_saphyr::from_str::<Value>(&t).map_err(|e| e.to_string()));
    match parsed {
        Ok(v) => Manifest {
            file,
            pod_name: v["metadata"]["name"].as_str().map(str::to_string),
            namespace: Some(
                v["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_string(),
            ),
            grace_seconds: v["spec"]["terminationGracePeriodSeconds"]
                .as_i64()
                .filter(|g| *g >= 0)
                .unwrap_or(DEFAULT_GRACE_SECONDS),
            error: (!v["metadata"]["name"].is_string())
                .then(|| "the manifest has no metadata.name".to_string()),
            changed_ago_ms,
        },
        Err(e) => Manifest {
            file,
            pod_name: None,
            namespace: None,
            grace_seconds: DEFAULT_GRACE_SECONDS,
            error: Some(e),
            changed_ago_ms,
        },
    }
}

/// How long ago `path` last changed (its ctime: a rename sets it).
fn changed_ago_ms(path: &Path) -> Option<u64> {
    let meta = fs::metadata(path).ok()?;
    let changed = std::time::UNIX_EPOCH
        + std::time::Duration::new(
            u64::try_from(meta.ctime()).ok()?,
            u32::try_from(meta.ctime_nsec()).ok()?,
        );
    let ago = std::time::SystemTime::now()
        .duration_since(changed)
        .unwrap_or_default();
    u64::try_from(ago.as_millis()).ok()
}

fn list_files(dir: &Path) -> Result<Vec<String>, StashError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
            continue;
        }
        out.push(name);
    }
    out.sort();
    Ok(out)
}

fn is_conflict_copy(name: &str) -> bool {
    name.contains(".conflict-")
}

fn conflict_name(file: &str) -> String {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{file}.conflict-{ts}")
}

fn move_noreplace(from: &Path, to: &Path) -> Result<(), StashError> {
    renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE).map_err(|error| {
        StashError::Move {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            error,
        }
    })
}

fn sync_dir(dir: &Path) -> Result<(), StashError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))
}

#[cfg(test)]
mod tests;
