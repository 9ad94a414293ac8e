//! What a person sees when `maintd run` or `maintd plan` cannot work: one
//! line saying what failed and what to do, a non-zero exit, and never a
//! Debug dump of the API's `Status`. And when the API server is only out of
//! reach, `maintd run` warns and starts anyway (a node booting while the
//! control plane is away must still take its shutdown lock).

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `maintd ARGS` with no cluster credentials around it but `kubeconfig`, no
/// logind and no endpoints to bind.
fn maintd(args: &[&str], home: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_maintd"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("MAINTD_INHIBIT_SHUTDOWN", "false")
        .env("MAINTD_LISTEN", "")
        .env("MAINTD_LISTEN_LOCAL", "")
        .stdin(Stdio::null());
    cmd
}

/// Runs to the end (bounded: a check that hangs fails the test).
async fn finish(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                panic!("maintd did not exit within 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

/// The run failed with one line on stderr that contains each of `words`.
fn assert_one_line_error(out: &Output, words: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit 0; stderr:\n{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line:\n{err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    for w in words {
        assert!(lines[0].contains(w), "{w:?} missing:\n{err}");
    }
    assert!(!err.contains("Status {"), "a Status dump:\n{err}");
    assert!(!err.contains("ErrorResponse"), "a Status dump:\n{err}");
}

fn kubeconfig_for(url: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{url}\"}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

#[tokio::test]
async fn no_node_name() {
    let home = tempfile::tempdir().unwrap();
    let out = finish(maintd(&["run"], home.path())).await;
    assert_one_line_error(&out, &["node name is not set", "--node", "NODE_NAME"]);
}

#[tokio::test]
async fn no_credentials() {
    let home = tempfile::tempdir().unwrap();
    let out = finish(maintd(&["run", "--node", "node-a"], home.path())).await;
    assert_one_line_error(&out, &["no cluster credentials", "--kubeconfig"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_does_not_exist() {
    let sim = common::sim().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, sim.kubeconfig()).unwrap();
    let kc = kc.to_str().unwrap();
    for cmd in [
        vec!["run", "--node", "ghost", "--kubeconfig", kc],
        vec!["plan", "--node", "ghost", "--kubeconfig", kc],
    ] {
        let out = finish(maintd(&cmd, dir.path())).await;
        assert_one_line_error(&out, &["node ghost does not exist", "(404)", "NODE_NAME"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_not_applied() {
    let sim = common::sim().await;
    common::create_node(&sim.client(), "node-a").await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, sim.kubeconfig()).unwrap();
    let out = finish(maintd(
        &[
            "run",
            "--node",
            "node-a",
            "--kubeconfig",
            kc.to_str().unwrap(),
        ],
        dir.path(),
    ))
    .await;
    assert_one_line_error(
        &out,
        &[
            "namespace maintd not found (404)",
            "kubectl apply -k deploy/",
        ],
    );
}

/// A stand-in API server that answers every request with `code` and a
/// `Status` body, as kube-apiserver does for 401 and 403.
fn refusing_server(code: u16, reason: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let body = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("{} refused by the test", reason.to_lowercase()), "reason": reason, "code": code})
    .to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(8) {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let _ = write!(
                conn,
                "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

#[tokio::test]
async fn credentials_refused_or_not_allowed() {
    let dir = tempfile::tempdir().unwrap();
    for (code, reason, words) in [
        (
            401,
            "Unauthorized",
            &[
                "refused maintd's credentials (401 Unauthorized)",
                "kubeconfig",
            ][..],
        ),
        (
            403,
            "Forbidden",
            &["may not read node node-a (403 Forbidden)", "RBAC"][..],
        ),
    ] {
        let url = refusing_server(code, reason);
        let kc = kubeconfig_for(&url, dir.path());
        let out = finish(maintd(
            &[
                "run",
                "--node",
                "node-a",
                "--kubeconfig",
                kc.to_str().unwrap(),
            ],
            dir.path(),
        ))
        .await;
        assert_one_line_error(&out, words);
    }
}

/// A port nothing listens on.
fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

#[tokio::test]
async fn plan_against_an_unreachable_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let url = closed_port_url();
    let kc = kubeconfig_for(&url, dir.path());
    let out = finish(maintd(
        &[
            "plan",
            "--node",
            "node-a",
            "--kubeconfig",
            kc.to_str().unwrap(),
        ],
        dir.path(),
    ))
    .await;
    assert_one_line_error(&out, &["cannot reach the API server", &url, "refused"]);
}

#[tokio::test]
async fn run_against_an_unreachable_api_server_warns_and_starts() {
    let dir = tempfile::tempdir().unwrap();
    let kc = kubeconfig_for(&closed_port_url(), dir.path());
    let mut child = maintd(
        &[
            "run",
            "--node",
            "node-a",
            "--kubeconfig",
            kc.to_str().unwrap(),
        ],
        dir.path(),
    )
    .env("MAINTD_LOG", "warn,kube_client::client::builder=off")
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let stderr = child.stderr.take().unwrap();
    // The warning comes first; the agent is still running after it, past
    // the start-up checks' bound.
    let warning = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        let mut reader = BufReader::new(stderr);
        reader.read_line(&mut line).unwrap();
        // Keep draining so the agent never blocks on a full pipe.
        std::thread::spawn(move || {
            let _ = reader.read_to_end(&mut Vec::new());
        });
        line
    });
    let warning = tokio::time::timeout(Duration::from_secs(20), warning)
        .await
        .expect("a warning within 20 s")
        .unwrap();
    assert!(
        warning.contains("WARN")
            && warning.contains("could not check node node-a")
            && warning.contains("starting anyway"),
        "{warning}"
    );
    assert!(!warning.contains("Status {"), "{warning}");
    tokio::time::sleep(maintd::preflight::TIMEOUT + Duration::from_secs(1)).await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the agent exited although the API server was only out of reach"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
