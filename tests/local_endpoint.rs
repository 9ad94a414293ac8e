//! The agent's HTTP endpoint and the `maintd status|drain|undrain` CLI,
//! against an agent draining a node of the simulated cluster.

use crate::common;

use std::time::Duration;

use common::endpoint::*;
use common::*;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

/// The keys docs/status.md documents, checked on a live document.
fn assert_documented_schema(st: &Value) {
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(
        keys(st),
        [
            "api_refusals",
            "drain",
            "inhibitor",
            "local_request",
            "node",
            "static_pods",
            "version",
            "watches"
        ],
        "{st:#}"
    );
    assert_eq!(
        keys(&st["static_pods"]),
        ["dir", "from", "warning"],
        "{st:#}"
    );
    assert_eq!(
        keys(&st["drain"]),
        [
            "blockers",
            "current_stage",
            "deadline",
            "finished_at",
            "last_error",
            "phase",
            "pods_remaining",
            "pods_total",
            "skipped",
            "stages",
            "started_at",
            "triggers",
            "updated_at",
            "waiting",
            "warnings"
        ]
    );
    for s in st["drain"]["stages"].as_array().unwrap() {
        assert_eq!(
            keys(s),
            ["label", "pod_type", "pods", "priority", "stage", "state"]
        );
        for p in s["pods"].as_array().unwrap() {
            let k = keys(p);
            assert!(
                k == ["name", "namespace", "state", "uid"]
                    || k == ["blocker", "name", "namespace", "state", "uid"],
                "{p}"
            );
        }
    }
    for b in st["drain"]["blockers"].as_array().unwrap() {
        assert_eq!(keys(b), ["namespace", "pod", "reason"]);
    }
    assert_eq!(
        keys(&st["watches"]),
        ["node_synced", "pods_synced", "views"]
    );
    for (_, v) in st["watches"]["views"].as_object().unwrap() {
        assert_eq!(keys(v), ["last_error", "stale", "synced"]);
    }
    assert!(
        st["api_refusals"]
            .as_array()
            .is_some_and(|r| r.iter().all(Value::is_string))
    );
    if !st["local_request"].is_null() {
        assert_eq!(
            keys(&st["local_request"]),
            ["deadline_seconds_left", "reason", "requested_at"]
        );
    }
}

fn blocked_by(st: &Value, budget: &str) -> bool {
    st["drain"]["blockers"].as_array().is_some_and(|bs| {
        bs.iter().any(|b| {
            b["reason"]
                .as_str()
                .is_some_and(|r| r.contains(&format!("budget {budget} ")))
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_drain_shows_its_stage_and_blocker_and_drain_wait_exits_0_when_drained() {
    let sim = scenario("small.yaml").await;
    let agent = EndpointAgent::start(&sim, "node-a").await;
    let (code, body) = request(
        &agent.local,
        "POST",
        "/v1/drain",
        r#"{"reason": "os update"}"#,
    )
    .await;
    assert_eq!(code, 202, "{body}");
    let st: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(st["local_request"]["reason"], "os update");

    // small.yaml's web budget blocks the second web pod until a
    // replacement is Ready; the status names it while that lasts.
    let st = agent
        .wait_status("a web pod is blocked by the web budget", |st| {
            blocked_by(st, "web")
        })
        .await;
    assert_documented_schema(&st);
    let current = st["drain"]["current_stage"].as_u64().expect("a stage runs") as usize;
    let stage = &st["drain"]["stages"][current - 1];
    assert_eq!(stage["state"], "running", "{st:#}");
    assert!(
        stage["pods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["state"] == "blocked" && p["name"].as_str().unwrap().starts_with("web-")),
        "{st:#}"
    );

    let endpoint = agent.local.display().to_string();
    let (code, out, err) = maintd(&["status", "--endpoint", &endpoint]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("node-a") && out.contains("os update"), "{out}");
    let (code, out, err) = maintd(&["status", "--endpoint", &endpoint, "-o", "json"]).await;
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).expect("status -o json prints JSON");
    assert_documented_schema(&doc);

    let (code, out, err) = maintd(&[
        "drain",
        "--wait",
        "--reason",
        "os update",
        "--endpoint",
        &endpoint,
    ])
    .await;
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("the node is drained"), "{out}");
    assert_eq!(agent.status().await["drain"]["phase"], "Drained");

    // The metrics saw the drain.
    let (code, text) = request(agent.readonly, "GET", "/metrics", "").await;
    assert_eq!(code, 200);
    let families = parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for name in [
        "maintd_drain_active",
        "maintd_drain_duration_seconds",
        "maintd_evictions",
        "maintd_pods_remaining",
        "maintd_inhibitor_held",
        "maintd_status_writes",
        "maintd_build_info",
    ] {
        let f = families
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing\n{text}"));
        assert!(!f.help.is_empty() && !f.kind.is_empty(), "{name}: {f:?}");
    }
    let value = |name: &str, label: Option<(&str, &str)>| -> f64 {
        families
            .values()
            .flat_map(|f| &f.samples)
            .find(|(n, l, _)| {
                n == name && label.is_none_or(|(k, v)| l.get(k).map(String::as_str) == Some(v))
            })
            .map(|s| s.2)
            .unwrap_or_else(|| panic!("no sample {name} {label:?}\n{text}"))
    };
    assert_eq!(value("maintd_drain_active", None), 1.0);
    assert_eq!(value("maintd_drain_duration_seconds_count", None), 1.0);
    assert!(value("maintd_evictions_total", Some(("outcome", "evicted"))) >= 3.0);
    // The budget held pods back: refused (blocked) or, once this drain's
    // own evictions took what it allows, waiting their turn (queued).
    assert!(
        value("maintd_evictions_total", Some(("outcome", "blocked")))
            + value("maintd_evictions_total", Some(("outcome", "queued")))
            >= 1.0
    );
    assert_eq!(value("maintd_pods_remaining", Some(("stage", "1"))), 0.0);

    let (code, out, err) = maintd(&["undrain", "--endpoint", &endpoint]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("withdrawn"), "{out}");
    agent
        .wait_status("the drain is undone", |st| {
            st["drain"]["phase"] == "Idle" && st["local_request"].is_null()
        })
        .await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_wait_times_out_with_exit_2_naming_a_budget_that_never_allows_an_eviction() {
    let sim = scenario("small.yaml").await;
    // minAvailable equal to the replicas: no web pod may ever be evicted.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(sim.client(), "default");
    pdbs.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"minAvailable": 3}})),
    )
    .await
    .expect("patch the web budget");
    let agent = EndpointAgent::start(&sim, "node-a").await;
    let endpoint = agent.local.display().to_string();
    let (code, out, err) = maintd(&[
        "drain",
        "--wait",
        "--timeout-seconds",
        "3",
        "--endpoint",
        &endpoint,
    ])
    .await;
    assert_eq!(code, 2, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("timed out"), "{out}");
    assert!(
        out.contains("The disruption budget web needs 3 healthy pods"),
        "{out}"
    );
    let st = agent
        .wait_status("blocked by the web budget", |st| blocked_by(st, "web"))
        .await;
    assert_eq!(st["drain"]["phase"], "Blocked", "{st:#}");
    assert_documented_schema(&st);
    let (code, out, _) = maintd(&["status", "--endpoint", &endpoint]).await;
    assert_eq!(code, 0);
    assert!(
        out.contains("Blocked") && out.contains("The disruption budget web needs 3"),
        "{out}"
    );
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_names_the_address_it_cannot_reach() {
    let addr = free_port().to_string();
    let (code, _, err) = maintd(&["status", "--endpoint", &addr]).await;
    assert_eq!(code, 1);
    assert!(err.contains(&addr) && err.contains("cannot reach"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_requests_get_4xx_or_a_closed_connection_and_the_drain_goes_on() {
    let sim = scenario("small.yaml").await;
    let agent = EndpointAgent::start(&sim, "node-a").await;

    // The read-only listener never takes a drain request.
    for path in ["/v1/drain", "/v1/undrain"] {
        let (code, _) = request(agent.readonly, "POST", path, r#"{"reason": "x"}"#).await;
        assert_eq!(code, 404, "{path}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let st = agent.status().await;
    assert!(st["local_request"].is_null(), "{st:#}");
    assert_eq!(st["drain"]["phase"], "Idle", "{st:#}");

    // A drain runs while the endpoint is under attack.
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("")).await;
    let trickle = |addr: Target| async move {
        let mut s: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = match addr {
            Target::Tcp(a) => Box::new(tokio::net::TcpStream::connect(a).await.unwrap()),
            Target::Unix(p) => Box::new(tokio::net::UnixStream::connect(p).await.unwrap()),
        };
        s.write_all(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        // One header byte a second; the server must give up (header read
        // timeout) long before we run out of bytes.
        for b in b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".iter() {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if s.write_all(&[*b]).await.is_err() {
                return true;
            }
        }
        false
    };
    let listeners = [
        Target::from(agent.readonly),
        Target::from(&agent.local),
        Target::from(agent.fleetlock),
    ];
    let slow: Vec<_> = listeners
        .iter()
        .map(|t| tokio::spawn(trickle(t.clone())))
        .collect();
    for addr in listeners {
        let big = "x".repeat(200 * 1024);
        let (code, body) = request(addr.clone(), "POST", "/v1/drain", &big).await;
        assert!(code == 413 || code == 404, "{code} {body}");
        let (code, _) = request(addr.clone(), "DELETE", "/v1/status", "").await;
        assert_eq!(code, 405);
        let (code, _) = request(addr.clone(), "GET", "/v1/../etc/passwd", "").await;
        assert!((400..500).contains(&code), "{code}");
        let (code, _) = request(addr.clone(), "GET", "/nope", "").await;
        assert_eq!(code, 404);
        let (code, _) = send_raw(addr, b"\x16\x03\x01garbage\r\n\r\n").await;
        assert!(code == 0 || (400..500).contains(&code), "{code}");
    }
    let (code, body) = request(&agent.local, "POST", "/v1/drain", "{not json").await;
    assert_eq!(code, 400);
    assert!(
        serde_json::from_str::<Value>(&body).unwrap()["error"].is_string(),
        "{body}"
    );
    for bad in [
        r#"{"reason": 5}"#,
        r#"{"deadline_seconds": -1}"#,
        r#"{"reason": "a\nb"}"#,
        r#"{"surprise": true}"#,
    ] {
        let (code, body) = request(&agent.local, "POST", "/v1/drain", bad).await;
        assert_eq!(code, 400, "{bad}: {body}");
    }
    let (code, _) = request(&agent.local, "GET", "/v1/drain", "").await;
    assert_eq!(code, 405);
    assert!(agent.status().await["local_request"].is_null());

    for s in slow {
        assert!(s.await.unwrap(), "a slow client kept its connection open");
    }
    agent
        .wait_status("the node is drained", |st| {
            st["drain"]["phase"] == "Drained"
        })
        .await;
    assert_eq!(request(agent.readonly, "GET", "/healthz", "").await.0, 200);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_requests_are_taken_on_the_unix_socket_only_and_from_root_only() {
    let sim = scenario("small.yaml").await;
    let agent = EndpointAgent::start(&sim, "node-a").await;
    let body = r#"{"reason": "fleetlock: x", "deadline_seconds": 1}"#;
    // Over TCP, on either listener, nothing starts.
    for tcp in [agent.readonly, agent.fleetlock] {
        let (code, text) = request(tcp, "POST", "/v1/drain", body).await;
        assert_eq!(code, 404, "{text}");
        assert!(text.contains("unix socket"), "{text}");
    }
    assert!(agent.status().await["local_request"].is_null());

    // The socket is its owner's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&agent.local)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    if nix::unistd::geteuid().is_root() {
        // Opened to everyone (as an operator might, with a group): another
        // uid connects, and is refused by its uid, with the reason.
        std::fs::set_permissions(&agent.local, std::fs::Permissions::from_mode(0o666)).unwrap();
        let dir = agent.local.parent().unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let socket = agent.local.clone();
        let out = tokio::task::spawn_blocking(move || {
            use std::os::unix::process::CommandExt;
            std::process::Command::new("curl")
                .args(["-s", "-w", "\n%{http_code}", "--unix-socket"])
                .arg(&socket)
                .args(["-X", "POST", "-d", "{}", "http://localhost/v1/drain"])
                .uid(65534)
                .gid(65534)
                .output()
                .expect("curl is installed (CI installs it)")
        })
        .await
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.ends_with("403"), "{text}");
        assert!(text.contains("this caller is uid 65534"), "{text}");
        assert!(agent.status().await["local_request"].is_null());
    } else {
        eprintln!(
            "not root: the refusal of another uid is checked only when the tests run as root (as CI does)"
        );
    }

    // Root (this test) on the socket: the request is a plain local one,
    // whatever its reason says: it waits for a slot like any other, and
    // the status shows it as a local request, not FleetLock's.
    let (code, text) = request(
        &agent.local,
        "POST",
        "/v1/drain",
        r#"{"reason": "fleetlock: x"}"#,
    )
    .await;
    assert_eq!(code, 202, "{text}");
    let st = agent
        .wait_status("the request is shown", |s| !s["local_request"].is_null())
        .await;
    assert_eq!(st["local_request"]["reason"], "fleetlock: x");
    let triggers = st["drain"]["triggers"].to_string();
    assert!(!triggers.contains("\"fleetlock: x\""), "{st:#}");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_idle_connections_hold_only_a_few_and_the_endpoint_comes_back() {
    let sim = scenario("small.yaml").await;
    let agent = EndpointAgent::start(&sim, "node-a").await;
    let mut idle = Vec::new();
    for _ in 0..2000 {
        // Connections the server closes at once may fail later; what counts
        // is that none of them grows the agent.
        if let Ok(s) = tokio::net::TcpStream::connect(agent.readonly).await {
            idle.push(s);
        }
    }
    // The held ones send nothing and are closed by the header timeout; the
    // rest were closed as they came. Then a scrape gets through.
    let readonly = agent.readonly;
    eventually("the read-only listener answers again", || async move {
        request(readonly, "GET", "/healthz", "").await.0 == 200
    })
    .await;
    let (_, text) = request(agent.readonly, "GET", "/metrics", "").await;
    let families = parse_exposition(&text).unwrap();
    let sample = |family: &str, listener: &str| -> f64 {
        families[family]
            .samples
            .iter()
            .find(|(_, labels, _)| labels.get("listener").map(String::as_str) == Some(listener))
            .map_or(0.0, |s| s.2)
    };
    let refused = sample("maintd_http_connections_refused", "readonly");
    assert!(refused >= 1900.0, "most were refused at once: {refused}");
    let open = sample("maintd_http_connections", "readonly");
    assert!(open <= 64.0, "at most 64 held: {open}");
    // The local socket was never short of room, and the drain path works.
    let (code, _) = request(&agent.local, "GET", "/healthz", "").await;
    assert_eq!(code, 200);
    drop(idle);
    agent.stop().await;
}

#[tokio::test]
async fn the_socket_replaces_only_a_dead_socket_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    // A file that is not a socket is never removed.
    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    let err = maintd::http::bind_socket(&file).unwrap_err();
    assert!(err.to_string().contains("not a socket"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    // A socket a live process answers on is not taken over.
    let path = dir.path().join("sub/maintd.sock");
    let live = maintd::http::bind_socket(&path).unwrap();
    let err = maintd::http::bind_socket(&path).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse, "{err}");
    // Once that process is gone, its socket is replaced.
    drop(live);
    maintd::http::bind_socket(&path).expect("a dead socket is replaced");
}
