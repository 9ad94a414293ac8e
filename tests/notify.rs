//! Notifications as a receiver sees them: a drain that is blocked, fails
//! under its deadline, then finishes and is undone posts the five kinds in
//! that order to a real HTTP receiver, one that failed its first answer
//! included; a receiver that never answers holds up nothing.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::agent::RunningAgent;
use common::*;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use maintd::config::Config;
use maintd::drain::progress::EventKind;
use maintd::trigger::local::LocalSource;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// A webhook receiver: keeps every JSON body it is posted, and answers the
/// first request 503 (a receiver in trouble) and the rest 200.
struct Receiver {
    url: String,
    posted: Arc<Mutex<Vec<Value>>>,
    requests: Arc<Mutex<usize>>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks/maintd/", listener.local_addr().unwrap());
        let posted: Arc<Mutex<Vec<Value>>> = Arc::default();
        let requests: Arc<Mutex<usize>> = Arc::default();
        let (p, r) = (posted.clone(), requests.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (p, r) = (p.clone(), r.clone());
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (p, r) = (p.clone(), r.clone());
                        async move {
                            assert_eq!(
                                req.uri().path(),
                                "/hooks/maintd/",
                                "posted to the path given"
                            );
                            assert_eq!(
                                req.headers()[http::header::CONTENT_TYPE],
                                "application/json"
                            );
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let first = {
                                let mut n = r.lock().unwrap();
                                *n += 1;
                                *n == 1
                            };
                            let code = if first {
                                503
                            } else {
                                p.lock()
                                    .unwrap()
                                    .push(serde_json::from_slice(&body).unwrap());
                                200
                            };
                            Ok::<_, std::convert::Infallible>(
                                http::Response::builder()
                                    .status(code)
                                    .body(Full::new(Bytes::new()))
                                    .unwrap(),
                            )
                        }
                    });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
                );
            }
        });
        Receiver {
            url,
            posted,
            requests,
        }
    }

    fn kinds(&self) -> Vec<String> {
        self.posted
            .lock()
            .unwrap()
            .iter()
            .map(|b| b["kind"].as_str().unwrap_or("?").to_string())
            .collect()
    }
}

/// A receiver that takes connections and reads what is sent, and never
/// answers.
async fn hanging_receiver() -> (String, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let connections: Arc<Mutex<usize>> = Arc::default();
    let c = connections.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            *c.lock().unwrap() += 1;
            held.push(stream);
        }
    });
    (url, connections)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_gets_started_blocked_failed_drained_undone_in_order_and_a_hanging_one_holds_nothing()
 {
    let sim = scenario("small.yaml").await;
    create_namespace(&sim, "maintd").await;
    unmovable_budget(&sim, "stuck").await;
    let mut stuck = pod_json("default", "stuck", "node-a", json!({"app": "stuck"}));
    stuck["spec"]["priority"] = json!(1500);
    // Neither eviction nor deletion gets it off until the finalizer goes.
    stuck["metadata"]["finalizers"] = json!(["example.com/hold"]);
    post_pod(&sim, &stuck).await;
    sim.wait_settled(Duration::from_secs(30)).await.unwrap();

    let receiver = Receiver::start().await;
    let (hanging, hanging_connections) = hanging_receiver().await;
    let mut config = Config::for_node("node-a", sim.static_pod_dir("node-a").unwrap());
    config.notify_urls = vec![hanging.clone(), receiver.url.clone()];
    // The stuck pod is refused for the whole deadline, far longer.
    config.notify_blocked_after = Duration::from_secs(2);
    let agent = RunningAgent::start_with(config, maintd::testbed::agent_client(&sim, "node-a"));

    // A drain with a deadline: the budget blocks, the deadline passes, the
    // drain fails with the pod left.
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("kernel")).await;
    agent.local.request(
        LocalSource::Request,
        "reboot soon",
        Some(Duration::from_secs(8)),
    );
    agent.wait_event(EventKind::DrainFailed).await;
    // The deadline withdrawn, the taint still asks: the pod is asked again,
    // and once its finalizer goes the node is drained.
    agent.local.clear();
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    pods.patch(
        "stuck",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    agent.wait_event(EventKind::DrainCompleted).await;
    taint(&sim.client(), "node-a", "maintd.io/drain", None).await;
    agent.wait_event(EventKind::UndoCompleted).await;

    let want = ["started", "blocked", "failed", "drained", "undone"];
    eventually("the receiver has every notification", || {
        let got = receiver.kinds();
        async move { got.last().map(String::as_str) == Some("undone") }
    })
    .await;
    let posted = receiver.posted.lock().unwrap().clone();
    let mut kinds = receiver.kinds();
    // Another budget may pace the drain past the wait on a loaded machine:
    // blockers are told once each, all before the drain fails.
    kinds.dedup();
    assert_eq!(kinds, want, "in the order they happened: {posted:#?}");
    assert!(
        *receiver.requests.lock().unwrap() > posted.len(),
        "the notification refused with 503 was sent again"
    );
    for doc in &posted {
        assert_eq!(doc["node"], "node-a");
        assert_eq!(doc["source"], "maintd");
        assert!(doc["text"].as_str().unwrap().contains("node-a"), "{doc}");
        assert!(doc["time"].as_str().unwrap().ends_with('Z'), "{doc}");
    }
    let by_kind = |kind: &'static str| posted.iter().filter(move |d| d["kind"] == kind);
    assert_eq!(
        posted[0]["triggers"][0],
        "taint maintd.io/drain=kernel:NoSchedule"
    );
    let stuck = by_kind("blocked")
        .find(|d| d["pod"] == "default/stuck")
        .expect("the pod refused for the whole deadline is told");
    assert!(
        stuck["reason"].as_str().unwrap().contains("budget stuck"),
        "the budget that blocks is named: {stuck}"
    );
    let failed = by_kind("failed").next().unwrap();
    assert!(
        failed["reason"].as_str().unwrap().contains("default/stuck"),
        "{failed}"
    );
    for kind in want {
        if kind != "blocked" {
            assert_eq!(by_kind(kind).count(), 1, "one {kind}");
        }
    }
    // The hanging receiver was asked and never answered, and the drain went
    // through every step meanwhile.
    assert!(*hanging_connections.lock().unwrap() >= 1);
    agent.stop().await;
}

#[test]
fn a_notify_url_that_cannot_be_used_stops_the_agent_with_why() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_maintd"))
        .args([
            "run",
            "--node",
            "n",
            "--notify-url",
            "ftp://ops:hunter2@chat.example/hook",
        ])
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--notify-url") && err.contains("http:// or https://"),
        "{err}"
    );
    assert!(
        !err.contains("hunter2"),
        "the password is not repeated: {err}"
    );
}
