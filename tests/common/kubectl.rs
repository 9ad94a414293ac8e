//! kubectl, run against a simulated cluster as an independent client, with
//! its own kubeconfig and a discovery cache of its own.

use std::process::Command;

use maintd_sim::SimCluster;
use serde_json::Value;

pub struct Kubectl {
    kubeconfig: tempfile::NamedTempFile,
    cache: tempfile::TempDir,
}

impl Kubectl {
    pub fn new(sim: &SimCluster) -> Kubectl {
        let kubeconfig = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(kubeconfig.path(), sim.kubeconfig()).unwrap();
        Kubectl {
            kubeconfig,
            cache: tempfile::tempdir().unwrap(),
        }
    }

    /// kubectl acting as `user` with `extra` (the user's extra values, one
    /// each), through the API server's impersonation headers: over plain
    /// HTTP kubectl sends no token, so the simulator takes it as its
    /// insecure port's admin, who may impersonate anyone.
    pub fn impersonating(sim: &SimCluster, user: &str, extra: &[(&str, &str)]) -> Kubectl {
        let extra: String = extra
            .iter()
            .map(|(k, v)| format!("      {k}: [{v}]\n"))
            .collect();
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: {url}\n\
             contexts:\n- name: sim\n  context:\n    cluster: sim\n    user: as\n    namespace: default\n\
             current-context: sim\nusers:\n- name: as\n  user:\n    as: {user}\n    as-user-extra:\n{extra}",
            url = sim.url()
        );
        let kubeconfig = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(kubeconfig.path(), config).unwrap();
        Kubectl {
            kubeconfig,
            cache: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs kubectl; returns (success, stdout, stderr).
    pub async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = Command::new("kubectl");
        cmd.args(args)
            .env("KUBECONFIG", self.kubeconfig.path())
            .env("KUBECACHEDIR", self.cache.path())
            .env("HOME", self.cache.path());
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .unwrap()
            .expect(
                "kubectl is installed on this machine (the tests use it as an independent client)",
            );
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }

    /// `kubectl apply -f` of `yaml` (through a file, as an operator would);
    /// returns what kubectl printed.
    pub async fn apply_yaml(&self, yaml: &str) -> String {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), yaml).unwrap();
        self.ok(&["apply", "-f", file.path().to_str().unwrap()])
            .await
    }

    pub async fn json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&all).await).unwrap()
    }
}

/// A `kubectl get --watch -o json` running in the background: every
/// object it prints, in order. The process is killed when this is dropped.
pub struct KubectlWatch {
    child: std::process::Child,
    pub seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Kubectl {
    /// Starts `kubectl get <args> --watch -o json`.
    pub fn watch_json(&self, args: &[&str]) -> KubectlWatch {
        let mut child = Command::new("kubectl")
            .arg("get")
            .args(args)
            .args(["--watch", "-o", "json"])
            .env("KUBECONFIG", self.kubeconfig.path())
            .env("KUBECACHEDIR", self.cache.path())
            .env("HOME", self.cache.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kubectl runs");
        let stdout = child.stdout.take().unwrap();
        let seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
        let sink = seen.clone();
        std::thread::spawn(move || {
            let reader = std::io::BufReader::new(stdout);
            for object in serde_json::Deserializer::from_reader(reader).into_iter::<Value>() {
                match object {
                    Ok(o) => sink.lock().unwrap().push(o),
                    Err(_) => return,
                }
            }
        });
        KubectlWatch { child, seen }
    }
}

impl Drop for KubectlWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
