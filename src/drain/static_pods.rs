//! Placeholder until the staticpods branch lands.
use std::path::PathBuf;
#[derive(Debug, thiserror::Error)]
pub enum StashError {
    #[error("{0}")]
    Io(String),
}
#[derive(Debug, Clone)]
pub struct Manifest {
    pub file: String,
    pub pod_name: Option<String>,
    pub namespace: Option<String>,
}
#[derive(Debug, Default)]
pub struct StashReport {
    pub stashed: Vec<String>,
}
#[derive(Debug, Default)]
pub struct RestoreReport {
    pub restored: Vec<String>,
    pub conflicts: Vec<String>,
}
#[derive(Debug, Clone)]
pub struct StaticPodStash {
    pub manifest_dir: PathBuf,
    pub stash_dir: PathBuf,
}
impl StaticPodStash {
    pub fn new(manifest_dir: PathBuf, stash_dir: Option<PathBuf>) -> Self {
        let s = stash_dir
            .unwrap_or_else(|| PathBuf::from(format!("{}.maintd-stash", manifest_dir.display())));
        StaticPodStash {
            manifest_dir,
            stash_dir: s,
        }
    }
    pub fn manifests(&self) -> Result<Vec<Manifest>, StashError> {
        Ok(vec![])
    }
    pub fn mirror_pod_name(pod_name: &str, node: &str) -> String {
        format!("{pod_name}-{node}")
    }
    pub fn stash(&self, _files: Option<&[String]>) -> Result<StashReport, StashError> {
        Ok(StashReport::default())
    }
    pub fn restore(&self) -> Result<RestoreReport, StashError> {
        Ok(RestoreReport::default())
    }
    pub fn stashed(&self) -> Result<Vec<String>, StashError> {
        Ok(vec![])
    }
}
