//! Where the kubelet reads static pod manifests from: its own config file's
//! `staticPodPath`, so that a kubeadm, k3s or RKE2 node needs no flag. An
//! explicit `--static-pod-dir` wins, and differing from the kubelet's is
//! said out loud: static pods in the kubelet's directory would not be
//! drained.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// kubeadm's directory, used when nothing says otherwise.
pub const DEFAULT_DIR: &str = "/etc/kubernetes/manifests";

/// Where the kubelet's config file is on the usual distributions, tried in
/// this order when `--kubelet-config` is not given.
pub const KUBELET_CONFIGS: [&str; 3] = [
    // kubeadm
    "/var/lib/kubelet/config.yaml",
    // k3s
    "/var/lib/rancher/k3s/agent/etc/kubelet.conf.d/00-k3s-defaults.conf",
    // RKE2
    "/var/lib/rancher/rke2/agent/etc/kubelet.conf.d/00-rke2-defaults.conf",
];

/// The static pod directory in use, and how it was chosen.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StaticPodDir {
    pub dir: PathBuf,
    /// e.g. `--static-pod-dir`, `staticPodPath in /var/lib/kubelet/config.yaml`.
    pub from: String,
    /// Something an operator should fix (a directory that differs from the
    /// kubelet's, a config file that cannot be read).
    pub warning: Option<String>,
}

impl StaticPodDir {
    /// A directory given outright, nothing checked (tests, the demo).
    pub fn given(dir: PathBuf) -> StaticPodDir {
        StaticPodDir {
            dir,
            from: "--static-pod-dir".into(),
            warning: None,
        }
    }
}

/// Chooses the static pod directory: `flag` if given, else the kubelet's
/// `staticPodPath` from `kubelet_config` (or the first of
/// [`KUBELET_CONFIGS`] that sets it), else [`DEFAULT_DIR`].
pub fn resolve(flag: Option<PathBuf>, kubelet_config: Option<&Path>) -> StaticPodDir {
    resolve_among(flag, kubelet_config, &KUBELET_CONFIGS.map(Path::new))
}

/// [`resolve`], probing `candidates` in order when no kubelet config is
/// given: the first that sets a directory (or cannot be read) is used; one
/// that exists but sets none is said in the warning if no other does.
fn resolve_among(
    flag: Option<PathBuf>,
    kubelet_config: Option<&Path>,
    candidates: &[&Path],
) -> StaticPodDir {
    let found = match kubelet_config {
        Some(path) => Some(read_static_pod_path(path)),
        None => {
            let mut read = candidates
                .iter()
                .filter(|p| p.is_file())
                .map(|p| read_static_pod_path(p));
            let first = read.next();
            match first {
                Some(Found::NotSet(_)) => read.find(|r| !matches!(r, Found::NotSet(_))).or(first),
                said => said,
            }
        }
    };
    let (kubelet_dir, trouble) = match &found {
        Some(Found::Dir(path, dir)) => (Some((path, dir)), None),
        Some(Found::NotSet(path)) => (
            None,
            Some(format!(
                "the kubelet config {} sets no staticPodPath",
                path.display()
            )),
        ),
        Some(Found::Unreadable(why)) => (None, Some(why.clone())),
        None => (None, None),
    };
    match (flag, kubelet_dir) {
        (Some(dir), Some((path, kubelet))) if dir != *kubelet => StaticPodDir {
            warning: Some(format!(
                "--static-pod-dir {} differs from the kubelet's staticPodPath {} (in {}): static pods in {} are not drained",
                dir.display(),
                kubelet.display(),
                path.display(),
                kubelet.display()
            )),
            dir,
            from: "--static-pod-dir".into(),
        },
        (Some(dir), _) => StaticPodDir {
            dir,
            from: "--static-pod-dir".into(),
            warning: None,
        },
        (None, Some((path, kubelet))) => StaticPodDir {
            dir: kubelet.clone(),
            from: format!("staticPodPath in {}", path.display()),
            warning: None,
        },
        (None, None) => StaticPodDir {
            dir: PathBuf::from(DEFAULT_DIR),
            from: "the default (no kubelet config says otherwise)".into(),
            warning: trouble.map(|t| format!("{t}; using {DEFAULT_DIR}")),
        },
    }
}

/// What one kubelet config file says.
enum Found {
    Dir(PathBuf, PathBuf),
    NotSet(PathBuf),
    Unreadable(String),
}

fn read_static_pod_path(path: &Path) -> Found {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            return Found::Unreadable(format!(
                "the kubelet config {} cannot be read ({e})",
                path.display()
            ));
        }
    };
    match static_pod_path_of(&text) {
        Ok(Some(dir)) => Found::Dir(path.to_path_buf(), dir),
        Ok(None) => Found::NotSet(path.to_path_buf()),
        Err(e) => Found::Unreadable(format!(
            "the kubelet config {} is not YAML ({e})",
            path.display()
        )),
    }
}

/// The `staticPodPath` a kubelet config file's text sets, if any; the
/// error is the first line of why the text is not YAML.
pub(crate) fn static_pod_path_of(text: &str) -> Result<Option<PathBuf>, String> {
    // YAML, or JSON (which YAML reads too); an empty file says nothing.
    if text.trim().is_empty() {
        return Ok(None);
    }
    let doc: serde_json::Value = serde_saphyr::from_str(text)
        .map_err(|e| e.to_string().lines().next().unwrap_or("").to_string())?;
    Ok(match doc["staticPodPath"].as_str().map(str::trim) {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_kubelets_static_pod_path_is_followed_unless_a_flag_says_otherwise() {
        let tmp = tempfile::tempdir().unwrap();
        let path = config(
            &tmp,
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nstaticPodPath: /var/lib/rancher/k3s/agent/pod-manifests\n",
        );
        let r = resolve(None, Some(&path));
        assert_eq!(
            r.dir,
            PathBuf::from("/var/lib/rancher/k3s/agent/pod-manifests")
        );
        assert_eq!(r.from, format!("staticPodPath in {}", path.display()));
        assert_eq!(r.warning, None);

        let r = resolve(Some("/etc/kubernetes/manifests".into()), Some(&path));
        assert_eq!(r.dir, PathBuf::from("/etc/kubernetes/manifests"));
        assert!(
            r.warning.as_deref().is_some_and(|w| w.starts_with(
                "--static-pod-dir /etc/kubernetes/manifests differs from the kubelet's staticPodPath /var/lib/rancher/k3s/agent/pod-manifests"
            )),
            "{r:?}"
        );
        let same = resolve(
            Some("/var/lib/rancher/k3s/agent/pod-manifests".into()),
            Some(&path),
        );
        assert_eq!(same.warning, None);
    }

    #[test]
    fn a_config_without_the_setting_or_unreadable_falls_back_with_a_warning() {
        let tmp = tempfile::tempdir().unwrap();
        // No setting, or an empty one (the kubelet then runs no static
        // pods from a directory).
        for text in [
            "{\"kind\": \"KubeletConfiguration\"}",
            "staticPodPath: \"  \"\n",
        ] {
            let r = resolve(None, Some(&config(&tmp, text)));
            assert_eq!(r.dir, PathBuf::from(DEFAULT_DIR));
            assert!(
                r.warning
                    .as_deref()
                    .is_some_and(|w| w.contains("sets no staticPodPath")),
                "{text}: {r:?}"
            );
        }
        let r = resolve(None, Some(&tmp.path().join("missing.yaml")));
        assert!(
            r.warning
                .as_deref()
                .is_some_and(|w| w.contains("cannot be read")),
            "{r:?}"
        );
        let bad = config(&tmp, "staticPodPath: [unclosed");
        let r = resolve(None, Some(&bad));
        assert!(
            r.warning
                .as_deref()
                .is_some_and(|w| w.contains("is not YAML")),
            "{r:?}"
        );
    }

    /// With no `--kubelet-config`, the usual places are tried in order: a
    /// missing file is passed over, a file that sets no directory gives way
    /// to a later one that does, and is named if none does.
    #[test]
    fn the_usual_kubelet_configs_are_probed_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = tmp.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let missing = tmp.path().join("missing.yaml");
        let unset = write("unset.yaml", "kind: KubeletConfiguration\n");
        let k3s = write("k3s.conf", "staticPodPath: /k3s/manifests\n");
        let rke2 = write("rke2.conf", "staticPodPath: /rke2/manifests\n");

        let r = resolve_among(None, None, &[&missing, &unset, &k3s, &rke2]);
        assert_eq!(r.dir, PathBuf::from("/k3s/manifests"));
        assert_eq!(r.from, format!("staticPodPath in {}", k3s.display()));
        assert_eq!(r.warning, None);

        let r = resolve_among(None, None, &[&rke2, &k3s]);
        assert_eq!(r.dir, PathBuf::from("/rke2/manifests"));

        let r = resolve_among(None, None, &[&missing, &unset]);
        assert_eq!(r.dir, PathBuf::from(DEFAULT_DIR));
        assert_eq!(
            r.warning,
            Some(format!(
                "the kubelet config {} sets no staticPodPath; using {DEFAULT_DIR}",
                unset.display()
            ))
        );

        let r = resolve_among(None, None, &[&missing]);
        assert_eq!(r.dir, PathBuf::from(DEFAULT_DIR));
        assert_eq!(r.warning, None, "no kubelet config at all is not a fault");
        // An explicit config is read even where none of the usual ones is.
        let r = resolve_among(None, Some(&rke2), &[&k3s]);
        assert_eq!(r.dir, PathBuf::from("/rke2/manifests"));
    }
}
