//! deploy/ installed on a real kubelet (scripts/real-node: containerd 1.6,
//! runc, CNI, the kubelet of Kubernetes 1.37) as an operator installs it:
//! `kubectl apply -k` of an overlay pointing at the image
//! scripts/build-image made, imported on the node. The DaemonSet's pod
//! runs there with the security context deploy/ gives it, the agent
//! reaches the node helper over the pod's emptyDir and takes logind's
//! shutdown lock through it, and its endpoint answers on the node's
//! address.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::real_kubelet::node::{NodeOptions, PATIENCE, RealNode, image_archive};

/// `/proc/PID/status` as key → value.
fn proc_status(pid: u32) -> BTreeMap<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Whether the process's root filesystem is mounted read-only.
fn root_read_only(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .is_some_and(|l| {
            l.split(' ')
                .nth(5)
                .is_some_and(|o| o.split(',').any(|f| f == "ro"))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_runs_on_a_real_kubelet_as_operators_install_it() {
    let node = RealNode::start(NodeOptions::default()).await;
    let client = node.admin().await;

    let t = Instant::now();
    node.import_maintd(&image_archive(), "e2e").await;
    node.apply("e2e");
    let pod = node.maintd_pod(&client, PATIENCE).await;
    eprintln!(
        "node start {:?}; deploy/ applied to both containers ready: {:?}",
        node.timings,
        t.elapsed()
    );

    // Both containers of the imported image, never pulled.
    let spec = pod.spec.clone().unwrap_or_default();
    let images: Vec<(String, Option<String>)> = spec
        .containers
        .iter()
        .map(|c| {
            (
                c.image.clone().unwrap_or_default(),
                c.image_pull_policy.clone(),
            )
        })
        .collect();
    assert_eq!(
        images,
        vec![
            (
                "localhost/maintd:e2e".to_string(),
                Some("Never".to_string())
            ),
            (
                "localhost/maintd:e2e".to_string(),
                Some("Never".to_string())
            ),
        ]
    );
    let status = pod.status.clone().unwrap_or_default();
    assert_eq!(
        status.pod_ip.as_deref(),
        Some(node.ip.as_str()),
        "host network"
    );
    let ids: BTreeMap<String, String> = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .map(|c| (c.name, c.container_id.unwrap_or_default()))
        .collect();
    let agent = node
        .container_pid(&ids["maintd"])
        .expect("containerd runs the agent");
    let helper = node
        .container_pid(&ids["node-helper"])
        .expect("containerd runs the node helper");

    // The security context deploy/ asks for, as runc applied it.
    let a = proc_status(agent);
    assert!(
        a["Uid"].starts_with("65532\t65532"),
        "agent uid: {}",
        a["Uid"]
    );
    assert!(
        a["Gid"].starts_with("65532\t65532"),
        "agent gid: {}",
        a["Gid"]
    );
    let h = proc_status(helper);
    assert!(h["Uid"].starts_with("0\t0"), "helper uid: {}", h["Uid"]);
    assert!(
        h["Groups"].split_whitespace().any(|g| g == "65532"),
        "the helper is in the agent's group (supplementalGroups): {}",
        h["Groups"]
    );
    for (who, s) in [("agent", &a), ("node helper", &h)] {
        assert_eq!(s["CapEff"], "0000000000000000", "{who}: no capability");
        assert_eq!(s["CapPrm"], "0000000000000000", "{who}: no capability");
        assert_eq!(
            s["NoNewPrivs"], "1",
            "{who}: allowPrivilegeEscalation false"
        );
        assert_eq!(
            s["Seccomp"], "2",
            "{who}: seccomp RuntimeDefault (filter mode)"
        );
    }
    assert!(root_read_only(agent), "the agent's root is read-only");
    assert!(
        root_read_only(helper),
        "the node helper's root is read-only"
    );
    // The token is the agent's alone.
    let token = "var/run/secrets/kubernetes.io/serviceaccount/token";
    assert!(
        std::path::Path::new(&format!("/proc/{agent}/root/{token}")).is_file(),
        "the agent has its projected token"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{helper}/root/{token}")).exists(),
        "the node helper has no API credentials"
    );

    // logind's shutdown lock: one of maintd's, taken by the node helper's
    // process (as root) for the agent, beside the kubelet's own.
    let locks = node.logind.inhibitors();
    let maintd: Vec<_> = locks.iter().filter(|i| i.who == "maintd").collect();
    assert_eq!(maintd.len(), 1, "{locks:?}");
    assert_eq!(
        (maintd[0].pid, maintd[0].uid, maintd[0].mode.as_str()),
        (helper, 0, "delay"),
        "the node helper holds the lock: {locks:?}"
    );
    assert!(
        locks
            .iter()
            .any(|i| i.who == "kubelet" && i.mode == "delay"),
        "the kubelet's graceful node shutdown holds its own: {locks:?}"
    );

    // The endpoint on the node's address: ready, and scraped there.
    let (code, body) = node.endpoint("/readyz").await;
    assert_eq!(code, 200, "/readyz: {body}");
    let (code, metrics) = node.endpoint("/metrics").await;
    assert_eq!(code, 200);
    assert!(
        metrics.lines().any(|l| l == "maintd_inhibitor_held 1"),
        "{metrics}"
    );
    let (_, status) = node.endpoint("/v1/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON status");
    assert_eq!(status["node"], node.name.as_str());
    assert_eq!(status["inhibitor"]["held"], true, "{status}");
    assert_eq!(
        status["inhibitor"]["competing"][0]["who"], "kubelet",
        "maintd sees the kubelet's lock: {status}"
    );
}
