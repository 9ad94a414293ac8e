//! The test's real Prometheus, the exporter it scrapes, and canned servers
//! for the wrong things a URL can point at.
// Each test target that includes this module uses a part of it.
#![allow(dead_code)]

use std::convert::Infallible;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use maintd::policy::alerts::{AlertGate, AlertSettings};

const PROMETHEUS: &str = "/usr/bin/prometheus";
/// Prometheus starts, scrapes and evaluates every second: a few cycles, with
/// room for a loaded CI machine.
const WAIT: Duration = Duration::from_secs(60);

const RULES: &str = r#"groups:
  - name: maintd-test
    rules:
      - alert: NodeOnFire
        expr: maintd_test_fire > 0
        for: 0s
      - alert: DiskSlowlyFilling
        expr: maintd_test_filling > 0
        for: 1h
"#;

/// An HTTP server on loopback that answers every request with one canned
/// answer the test can change: the metrics Prometheus scrapes, or a wrong
/// answer for a gate to read.
pub struct Canned {
    pub url: String,
    answer: Arc<Mutex<(u16, &'static str, Bytes)>>,
}

impl Canned {
    pub async fn start(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> Canned {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let answer = Arc::new(Mutex::new((status, content_type, body.into())));
        let shared = answer.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let (status, content_type, body) = shared.lock().unwrap().clone();
                    let mut answer = http::Response::builder()
                        .status(status)
                        .header(http::header::CONTENT_TYPE, content_type);
                    // A redirect sends the client to https, as a proxy would.
                    if (300..400).contains(&status) {
                        let to = format!("https://prometheus.example{}", req.uri().path());
                        answer = answer.header(http::header::LOCATION, to);
                    }
                    let answer = answer.body(Full::new(body)).unwrap();
                    async move { Ok::<_, Infallible>(answer) }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Canned { url, answer }
    }

    /// The metrics the rules alert on: NodeOnFire fires at once while `fire`
    /// is set; DiskSlowlyFilling stays pending (for: 1h) while `filling` is.
    pub fn set_metrics(&self, fire: bool, filling: bool) {
        let body = format!(
            "# TYPE maintd_test_fire gauge\nmaintd_test_fire {}\n\
             # TYPE maintd_test_filling gauge\nmaintd_test_filling {}\n",
            u8::from(fire),
            u8::from(filling)
        );
        *self.answer.lock().unwrap() = (200, "text/plain; version=0.0.4", body.into());
    }
}

/// A real Prometheus on a free loopback port, scraping `exporter` every
/// second; killed when dropped.
pub struct Prometheus {
    pub url: String,
    child: Child,
    dir: tempfile::TempDir,
    pub exporter: Canned,
}

impl Prometheus {
    pub async fn start() -> Prometheus {
        let exporter = Canned::start(200, "text/plain", "").await;
        exporter.set_metrics(false, false);
        let target = exporter.url.trim_start_matches("http://").to_string();
        let scrape =
            format!("  - job_name: fixture\n    static_configs:\n      - targets: ['{target}']\n");
        Self::launch(exporter, &scrape, RULES)
    }

    /// A real Prometheus that scrapes what `scrape_configs` (the YAML list
    /// under `scrape_configs:`) names every second and evaluates `rules` (a
    /// rule file) every second; its canned exporter is not scraped.
    pub async fn scraping(scrape_configs: &str, rules: &str) -> Prometheus {
        let exporter = Canned::start(200, "text/plain", "").await;
        Self::launch(exporter, scrape_configs, rules)
    }

    fn launch(exporter: Canned, scrape_configs: &str, rules: &str) -> Prometheus {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: the alert gating tests need a real Prometheus; \
             install it with `apt-get install prometheus` (CI does)"
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n\
             rule_files: [rules.yml]\n\
             scrape_configs:\n{scrape_configs}"
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).expect("write the config");
        std::fs::write(dir.path().join("rules.yml"), rules).expect("write the rules");
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("a log file");
        let child = Command::new(PROMETHEUS)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {PROMETHEUS}: {e}"));
        Prometheus {
            url: format!("http://127.0.0.1:{port}"),
            child,
            dir,
            exporter,
        }
    }

    /// Settings for a gate on this Prometheus, filters off.
    pub fn gate(&self) -> AlertSettings {
        settings(&self.url, Duration::from_secs(5))
    }

    /// Asks `gate` until `want` holds (Prometheus needs a few evaluation
    /// cycles to change its mind), and returns that answer.
    pub async fn until(
        &mut self,
        gate: &AlertGate,
        what: &str,
        want: impl Fn(&Option<String>) -> bool,
    ) -> Option<String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let answer = gate.check().await;
            if want(&answer) {
                return answer;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "Prometheus exited ({status}) waiting for {what}:\n{}",
                    self.log()
                );
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "no {what} within {WAIT:?}; last answer: {answer:?}\nPrometheus' log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// What Prometheus has logged so far.
    pub fn log(&self) -> String {
        let mut log = String::new();
        let _ = std::fs::File::open(self.dir.path().join("prometheus.log"))
            .and_then(|mut f| f.read_to_string(&mut log));
        log
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port nothing listens on (now).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

pub fn regex(r: &str) -> Option<regex::Regex> {
    Some(regex::Regex::new(r).expect("a test regex"))
}

pub fn holds(answer: &Option<String>, text: &str) -> bool {
    answer.as_deref().is_some_and(|r| r.contains(text))
}

/// Settings for a gate on `url`, filters off.
pub fn settings(url: &str, timeout: Duration) -> AlertSettings {
    AlertSettings {
        url: url.into(),
        filter: None,
        match_only: false,
        firing_only: false,
        query: None,
        timeout,
    }
}
