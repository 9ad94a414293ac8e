//! The drain as a picture, checked as a person would: an agent drains
//! small.yaml's node-a, `GET /v1/timeline.svg` and `maintd timeline` draw
//! it, and headless Chromium (Debian's `chromium`, installed by
//! scripts/install-test-deps) shows something that is not blank.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::endpoint::*;
use common::*;
use serde_json::Value;

/// An agent on small.yaml's node-a.
async fn agent() -> (maintd_sim::SimCluster, EndpointAgent) {
    let sim = scenario("small.yaml").await;
    let agent = EndpointAgent::start(&sim, "node-a").await;
    (sim, agent)
}

/// Has the agent drain its node (a local request with a deadline); the
/// status once drained.
async fn drain(agent: &EndpointAgent) -> Value {
    let (code, body) = request(
        &agent.local,
        "POST",
        "/v1/drain",
        r#"{"reason": "os update", "deadline_seconds": 600}"#,
    )
    .await;
    assert_eq!(code, 202, "{body}");
    agent
        .wait_status("the node is drained", |st| {
            st["drain"]["phase"] == "Drained"
        })
        .await
}

/// Every pod of the drain, as the timeline names it ("namespace/name").
fn drained_pods(st: &Value) -> Vec<String> {
    st["drain"]["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .flat_map(|s| s["pods"].as_array().cloned().unwrap_or_default())
        .map(|p| {
            format!(
                "{}/{}",
                p["namespace"].as_str().unwrap(),
                p["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// Headless Chromium's 1200×800 screenshot of `file`: (width, height, RGBA).
async fn screenshot(file: &Path) -> (u32, u32, Vec<u8>) {
    let profile = tempfile::tempdir().unwrap();
    let png = profile.path().join("shot.png");
    let mut chromium = tokio::process::Command::new("chromium");
    chromium
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1200,800",
        ])
        .arg(format!(
            "--user-data-dir={}",
            profile.path().join("profile").display()
        ))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", file.display()))
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), chromium.output())
        .await
        .expect("chromium took a screenshot within 2 minutes")
        .unwrap_or_else(|e| {
            panic!("chromium does not run ({e}): scripts/install-test-deps installs it")
        });
    assert!(
        png.exists(),
        "chromium wrote no screenshot: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a sane size")];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    buf.truncate(info.buffer_size());
    // Every pixel as RGBA, whatever the PNG's own layout.
    let rgba = match info.color_type {
        png::ColorType::Rgba => buf,
        png::ColorType::Rgb => buf
            .chunks(3)
            .flat_map(|p| [p[0], p[1], p[2], 255])
            .collect(),
        other => panic!("an unexpected PNG colour type {other:?}"),
    };
    (info.width, info.height, rgba)
}

/// What a person sees in the screenshot: the share of pixels that are not
/// the white background, and whether any pixel has exactly `colour`.
fn looks(rgba: &[u8], colour: [u8; 3]) -> (f64, bool) {
    let pixels: Vec<&[u8]> = rgba.chunks(4).collect();
    let ink = pixels.iter().filter(|p| p[..3] != [255, 255, 255]).count();
    let seen = pixels.iter().any(|p| p[..3] == colour);
    (ink as f64 / pixels.len() as f64, seen)
}

const POD_BLUE: [u8; 3] = [0x3b, 0x7d, 0xd8];
const REFUSED_RED: [u8; 3] = [0xd0, 0x39, 0x2b];

fn assert_seen(what: &str, (w, h, rgba): (u32, u32, Vec<u8>)) {
    assert_eq!((w, h), (1200, 800), "{what}: the screenshot's size");
    let (ink, blue) = looks(&rgba, POD_BLUE);
    // A blank page has none; the drawing of a small node about 1.5 %.
    assert!(
        ink > 0.005,
        "{what}: the screenshot is blank ({:.3} % ink)",
        ink * 100.0
    );
    assert!(blue, "{what}: no pod bar is seen");
    assert!(
        looks(&rgba, REFUSED_RED).1,
        "{what}: no budget's refusal is seen"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_draws_the_drain_with_every_pod_its_refusal_and_deadline() {
    let (_sim, agent) = agent().await;
    let (code, body) = request(agent.readonly, "GET", "/v1/timeline.svg", "").await;
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("no drain to draw"), "{body}");

    let st = drain(&agent).await;
    let (code, svg) = request(agent.readonly, "GET", "/v1/timeline.svg", "").await;
    assert_eq!(code, 200, "{svg}");
    assert!(
        svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{svg}"
    );
    assert!(svg.contains("node-a drained in"), "{svg}");
    assert!(svg.contains("deadline"), "{svg}");
    // small.yaml's web budget refuses the second web pod for a while.
    assert!(svg.contains("refused for") && svg.contains("web"), "{svg}");
    let pods = drained_pods(&st);
    assert!(pods.len() >= 5, "{st:#}");
    for pod in &pods {
        assert!(svg.contains(pod.as_str()), "{pod} is not drawn:\n{svg}");
    }

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("timeline.svg");
    std::fs::write(&file, &svg).unwrap();
    assert_seen("the SVG", screenshot(&file).await);
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintd_timeline_writes_the_drain_as_a_page_a_browser_shows() {
    let (sim, agent) = agent().await;
    let st = drain(&agent).await;
    let endpoint = agent.readonly.to_string();
    let (code, svg, err) = maintd(&["timeline", "--endpoint", &endpoint]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        svg.starts_with("<svg") && svg.contains("node-a drained in"),
        "{svg}"
    );

    let dir = tempfile::tempdir().unwrap();
    let page: PathBuf = dir.path().join("timeline.html");
    let out = page.display().to_string();
    let (code, _, err) = maintd(&[
        "timeline",
        "--endpoint",
        &endpoint,
        "-o",
        "html",
        "--out",
        &out,
    ])
    .await;
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    for pod in drained_pods(&st) {
        assert!(html.contains(&pod), "{pod} is not drawn:\n{html}");
    }
    assert_seen("the page", screenshot(&page).await);

    // The cluster's view: the Events the agent recorded on the Node, a
    // row per stage, as soon as the API server has them.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
    let kubeconfig = kubeconfig.display().to_string();
    let args = ["timeline", "--node", "node-a", "--kubeconfig", &kubeconfig];
    eventually(
        "maintd timeline --node draws the drain from the Events",
        || async {
            let (code, svg, _) = maintd(&args).await;
            code == 0 && svg.contains("node-a drained in") && svg.contains("1 · ")
        },
    )
    .await;
    let (_, svg, _) = maintd(&args).await;
    let stages = st["drain"]["stages"].as_array().unwrap();
    for s in stages {
        let label = s["label"].as_str().unwrap();
        assert!(
            svg.contains(&format!("{} · {}", s["stage"], label)),
            "stage {label} is not drawn:\n{svg}"
        );
    }
    let (code, _, err) =
        maintd(&["timeline", "--node", "node-b", "--kubeconfig", &kubeconfig]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("no drain to draw") && err.contains("node-b"),
        "{err}"
    );

    // An agent that cannot be reached is named.
    let (code, _, err) = maintd(&["timeline", "--endpoint", "127.0.0.1:1"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("127.0.0.1:1"), "{err}");
    agent.stop().await;
}
