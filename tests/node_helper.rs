//! The DaemonSet's pod as processes, each with the rights its container
//! has: the node helper as root with no capability and no API
//! credentials, in the agent's group; the agent as uid 65532 with its
//! ServiceAccount's kubeconfig and nothing of the host. The static pod
//! directory is root's own (0700), out of the agent's reach. Through the
//! helper the agent still holds logind's lock, stashes and restores the
//! static pod manifests, and takes drain requests from the host's root.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::*;
use maintd_sim::SimCluster;
use maintd_sim::dbus::PrivateBus;
use maintd_sim::logind::{SimLogind, SimLogindConfig};

/// The agent container's runAsUser and runAsGroup in deploy/.
const AGENT_UID: &str = "65532";

struct Pod {
    /// The host's /run/maintd.
    host: PathBuf,
    /// The pod's shared volume.
    shared: PathBuf,
    helper: Child,
    agent: Option<Child>,
    _dir: tempfile::TempDir,
    _kubeconfig: tempfile::NamedTempFile,
}

impl Drop for Pod {
    fn drop(&mut self) {
        for child in [Some(&mut self.helper), self.agent.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn maintd() -> &'static str {
    env!("CARGO_BIN_EXE_maintd")
}

/// `setpriv` arguments for a process with no capability at all.
const NO_CAPS: [&str; 2] = ["--bounding-set=-all", "--inh-caps=-all"];

fn spawn_agent(pod: &Pod, kubeconfig: &Path) -> Child {
    Command::new("setpriv")
        .args(["--reuid", AGENT_UID, "--regid", AGENT_UID, "--clear-groups"])
        .args(NO_CAPS)
        .args(["--", maintd(), "run", "--node", "node-a", "--listen", ""])
        .arg("--listen-local")
        .arg(pod.shared.join("local.sock"))
        .arg("--node-helper")
        .arg(pod.shared.join("helper.sock"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_clear()
        .env("MAINTD_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("setpriv (util-linux) runs the agent")
}

async fn start(sim: &SimCluster, bus: &PrivateBus) -> Pod {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let host = dir.path().join("run-maintd");
    std::fs::create_dir(&host).unwrap();
    // An emptyDir: open to every container of the pod.
    let shared = dir.path().join("maintd-pod");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let static_dir = sim.static_pod_dir("node-a").unwrap();
    std::fs::set_permissions(&static_dir, std::fs::Permissions::from_mode(0o700)).unwrap();

    let helper = Command::new("setpriv")
        .args(["--groups", AGENT_UID])
        .args(NO_CAPS)
        .args(["--", maintd(), "node-helper", "--agent-uid", AGENT_UID])
        .args(["--agent-gid", AGENT_UID])
        .arg("--socket")
        .arg(shared.join("helper.sock"))
        .arg("--static-pod-dir")
        .arg(&static_dir)
        .args(["--logind-bus", &bus.address])
        .arg("--host-socket")
        .arg(host.join("maintd.sock"))
        .arg("--agent-socket")
        .arg(shared.join("local.sock"))
        .env_clear()
        .env("MAINTD_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("setpriv (util-linux) runs the node helper");

    // The ServiceAccount's token, readable by the agent's user only.
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        kubeconfig.path(),
        maintd::testbed::agent_kubeconfig(sim, "node-a"),
    )
    .unwrap();
    let uid = nix::unistd::Uid::from_raw(AGENT_UID.parse().unwrap());
    nix::unistd::chown(kubeconfig.path(), Some(uid), None).unwrap();
    let mut pod = Pod {
        host,
        shared,
        helper,
        agent: None,
        _dir: dir,
        _kubeconfig: kubeconfig,
    };
    pod.agent = Some(spawn_agent(&pod, pod._kubeconfig.path()));
    pod
}

/// `maintd <args> --endpoint <host socket>` as root, or as `uid`.
fn cli(pod: &Pod, uid: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new("setpriv");
    if let Some(uid) = uid {
        cmd.args(["--reuid", uid, "--regid", uid, "--clear-groups"]);
    }
    cmd.args(["--", maintd()])
        .args(args)
        .arg("--endpoint")
        .arg(pod.host.join("maintd.sock"))
        .output()
        .unwrap()
}

fn maintd_locks(logind: &SimLogind) -> Vec<u32> {
    logind
        .inhibitors()
        .iter()
        .filter(|i| i.who == "maintd" && i.mode == "delay")
        .map(|i| i.uid)
        .collect()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_root_drains_through_the_node_helper_and_its_lock_holds_the_reboot() {
    let bus = PrivateBus::start().expect("dbus-daemon starts (CI installs the dbus package)");
    let logind = SimLogind::start(
        &bus.address,
        SimLogindConfig {
            inhibit_delay_max: Duration::from_secs(30),
        },
    )
    .await
    .unwrap();
    let sim = scenario("small.yaml").await;
    create_namespace(&sim, "maintd").await;
    let client = sim.client();
    let static_dir = sim.static_pod_dir("node-a").unwrap();
    let stash = static_dir.join(".maintd-stash");
    let original = dir_files(&static_dir);
    assert_eq!(original.len(), 1);
    let mut pod = start(&sim, &bus).await;

    // The lock is the helper's (root on the bus), taken for the agent.
    eventually("the node helper holds the lock for the agent", || async {
        maintd_locks(&logind) == [0]
    })
    .await;
    let agent_pid = pod.agent.as_ref().unwrap().id();
    let status = std::fs::read_to_string(format!("/proc/{agent_pid}/status")).unwrap();
    let uids = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uids.split_whitespace().skip(1).all(|u| u == AGENT_UID),
        "the agent runs as {AGENT_UID}: {uids}"
    );

    // The lock lives only as long as the agent: a node is never held for
    // an agent that is gone.
    let mut agent = pod.agent.take().unwrap();
    agent.kill().unwrap();
    agent.wait().unwrap();
    eventually("the lock went with the agent", || async {
        maintd_locks(&logind).is_empty()
    })
    .await;
    pod.agent = Some(spawn_agent(&pod, pod._kubeconfig.path()));
    eventually("a restarted agent has the lock again", || async {
        maintd_locks(&logind) == [0]
    })
    .await;

    // Only the host's root may ask for a drain on the host's socket.
    let refused = cli(&pod, Some("1000"), &["drain", "--reason", "not root"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    eventually("the agent is ready to take requests", || async {
        cli(&pod, None, &["status"]).status.success()
    })
    .await;
    let asked = cli(&pod, None, &["drain", "--reason", "kernel update"]);
    assert!(asked.status.success(), "{}", text(&asked));
    eventually("node-a drained, its static pod stopped", || async {
        dir_files(&static_dir).is_empty()
            && pods_on(&client, "node-a")
                .await
                .iter()
                .all(|p| p.metadata.name.as_deref() == Some("pinned") || is_mirror(p))
    })
    .await;
    assert_eq!(
        dir_files(&stash),
        original,
        "the manifest waits in the stash"
    );

    let undone = cli(&pod, None, &["undrain"]);
    assert!(undone.status.success(), "{}", text(&undone));
    eventually("the manifest is back", || async {
        dir_files(&static_dir) == original
    })
    .await;
    eventually("node-a uncordoned", || async {
        !is_cordoned(&client, "node-a").await
    })
    .await;

    // A reboot waits for the drain the agent does through the helper,
    // and goes ahead once it is done, within logind's limit.
    logind.reboot().await;
    let record = tokio::time::timeout(Duration::from_secs(60), logind.wait_for_shutdowns(1))
        .await
        .expect("the reboot proceeds")[0]
        .clone();
    assert!(!record.timed_out, "released in time: {record:?}");
    assert_eq!(record.waited_for, ["maintd"]);
    assert!(
        dir_files(&static_dir).is_empty() && dir_files(&stash) == original,
        "the static pod was stopped before the reboot went ahead"
    );
}
