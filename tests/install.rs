//! docs/install.md's "Step by step", followed as written against the
//! simulated cluster: the overlay that sets the image (step 2) and the apply
//! and checks (step 3) are taken from the page's own code blocks and run
//! with bash and kubectl, up to the DaemonSet's pods running the image the
//! overlay names, one on every node.

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL: &str = include_str!("../docs/install.md");
const IMAGE: &str = "registry.example.com/maintd:0.1.0";

/// docs/install.md's ```sh block of its step-by-step section that
/// contains `marker`.
fn install_block(marker: &str) -> String {
    let start = INSTALL
        .find("## Step by step")
        .expect("docs/install.md has a step-by-step section");
    let section = &INSTALL[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
    let blocks: Vec<&str> = section[..end].split("```").collect();
    // Odd pieces are inside fences: "sh\n<commands>".
    blocks
        .iter()
        .skip(1)
        .step_by(2)
        .filter_map(|b| b.strip_prefix("sh\n"))
        .find(|b| b.contains(marker))
        .unwrap_or_else(|| panic!("no sh block with {marker:?} in the install section"))
        .to_string()
}

/// Runs `script` with bash in `dir`, kubectl talking to `kubeconfig`;
/// returns stdout, failing the test on a non-zero exit or after 120 s.
fn bash(script: &str, dir: &std::path::Path, kubeconfig: &std::path::Path) -> String {
    let mut child = Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("this install step did not finish in 120 s:\n{script}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "install step failed:\n{script}\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_install_steps_run_the_overridden_image_on_every_node() {
    let sim = common::sim().await;
    let nodes = ["node-a", "node-b", "node-c"];
    for n in nodes {
        common::create_node(&sim.client(), n).await;
    }
    // A checkout as the operator has it: deploy/, and the overlay beside it.
    let clone = tempfile::tempdir().unwrap();
    let copied = Command::new("cp")
        .args(["-r", concat!(env!("CARGO_MANIFEST_DIR"), "/deploy")])
        .arg(clone.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let kubeconfig = clone.path().join("sim.kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();

    let step2 = install_block("my-maintd/kustomization.yaml");
    let step3 = install_block("kubectl apply -k my-maintd/");
    let dir = clone.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        bash(&step2, &dir, &kubeconfig);
        bash(&step3, &dir, &kubeconfig)
    })
    .await
    .unwrap();

    assert!(
        out.contains("daemonset.apps/maintd created"),
        "apply output:\n{out}"
    );
    assert!(
        out.contains("successfully rolled out"),
        "rollout status:\n{out}"
    );
    // The custom-columns table of step 3: one maintd pod per node, each
    // with the image the overlay set, not deploy/'s default.
    let mut rows: Vec<(String, String)> = out
        .lines()
        .filter(|l| l.starts_with("node-") && l.contains("maintd-"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0].to_string(), cols[2].to_string())
        })
        .collect();
    rows.sort();
    let expected: Vec<(String, String)> = nodes
        .iter()
        .map(|n| (n.to_string(), IMAGE.to_string()))
        .collect();
    assert_eq!(rows, expected, "pods:\n{out}");
    assert!(!out.contains("ghcr.io/maintd/maintd"), "{out}");
}
