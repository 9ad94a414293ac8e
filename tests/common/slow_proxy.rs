//! A pass-through HTTP proxy in front of the simulator that holds back the
//! answers to chosen requests: the request reaches the API at once (the
//! audit log records it), but its caller waits, as behind a slow API
//! server. It lets a test act while a request is in flight.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_util::sync::CancellationToken;

/// Which requests wait, and how long: (method, path) → delay.
pub type Slowness = Arc<dyn Fn(&http::Method, &str) -> Option<Duration> + Send + Sync>;

pub struct SlowProxy {
    pub url: String,
    stop: CancellationToken,
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl SlowProxy {
    /// A proxy to `target` (an http:// URL) on a loopback port.
    pub async fn start(target: String, slow: Slowness) -> SlowProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let client: Client<HttpConnector, Incoming> =
            Client::builder(TokioExecutor::new()).build_http();
        let stop = CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    r = listener.accept() => match r {
                        Ok((stream, _)) => stream,
                        Err(_) => continue,
                    },
                    _ = s.cancelled() => return,
                };
                let (client, target, slow) = (client.clone(), target.clone(), slow.clone());
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (client, target, slow) = (client.clone(), target.clone(), slow.clone());
                    async move {
                        let delay = slow(req.method(), req.uri().path());
                        let (mut parts, body) = req.into_parts();
                        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                        parts.uri = format!("{target}{path}").parse().expect("a proxied URI");
                        let resp = client.request(Request::from_parts(parts, body)).await;
                        if let Some(d) = delay {
                            tokio::time::sleep(d).await;
                        }
                        resp.map(|r: Response<Incoming>| r)
                    }
                });
                let conn_stop = s.clone();
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        _ = conn_stop.cancelled() => {}
                    }
                });
            }
        });
        SlowProxy { url, stop }
    }

    /// A client for `node`'s agent through this proxy, with the agent's
    /// token and settings (see `maintd::testbed::agent_client`).
    pub fn agent_client(&self, sim: &maintd_sim::SimCluster, node: &str) -> kube::Client {
        let mut config = sim.client_config_as(&maintd::testbed::agent_token(sim, node));
        config.cluster_url = self.url.parse().expect("the proxy's URL");
        kube::Client::try_from(maintd::cluster::agent_config(config, node))
            .expect("a client for the proxy")
    }
}
