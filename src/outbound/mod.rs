//! HTTP to URLs an operator gives (`--prometheus-url`, `--notify-url`):
//! one client per URL, plain or TLS with this host's CA roots, basic auth
//! from the URL's `user:password@`, and errors told by their innermost
//! cause.

pub(crate) mod url;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Where requests for one URL go, and with which credentials.
pub(crate) struct Target {
    /// scheme://host[:port][/prefix], no credentials, no trailing slash.
    pub base: String,
    /// Basic credentials from the URL's `user:password@`.
    pub authorization: Option<http::HeaderValue>,
    transport: Transport,
}

enum Transport {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

impl Target {
    /// A client for `url`; connecting is bounded by `timeout`. The error
    /// says why requests cannot be sent (no CA roots for https, credentials
    /// that cannot be a header).
    pub fn new(url: url::BaseUrl, timeout: Duration) -> Result<Target, String> {
        let mut http = HttpConnector::new();
        http.set_connect_timeout(Some(timeout));
        let builder = Client::builder(TokioExecutor::new());
        let transport = if url.tls {
            http.enforce_http(false);
            // The provider is named, not taken from the process default, so
            // no feature combination elsewhere can make this panic.
            let tls = hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
                .map_err(|e| {
                    format!(
                        "https needs this host's CA certificates and they could not be loaded ({e}); use http:// or mount the CA bundle"
                    )
                })?
                .https_only()
                .enable_http1()
                .wrap_connector(http);
            Transport::Tls(builder.build(tls))
        } else {
            Transport::Plain(builder.build(http))
        };
        let authorization = match url.credentials {
            Some((user, password)) => {
                use base64::Engine;
                let token =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                Some(
                    http::HeaderValue::from_str(&format!("Basic {token}"))
                        .map_err(|e| format!("the URL's credentials cannot be sent ({e})"))?,
                )
            }
            None => None,
        };
        Ok(Target {
            base: url.base,
            authorization,
            transport,
        })
    }

    /// Sends one request; the caller bounds the whole exchange.
    pub async fn send(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<hyper::body::Incoming>, hyper_util::client::legacy::Error> {
        match &self.transport {
            Transport::Plain(client) => client.request(request).await,
            Transport::Tls(client) => client.request(request).await,
        }
    }
}

/// The innermost cause ("Connection refused (os error 111)"), which is what
/// an operator can act on; hyper's outer layers say only "client error".
pub(crate) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    one_line(&cause.to_string())
}

/// Text on one line: runs of whitespace (newlines included) become one
/// space.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One line of at most `max` characters, cut on a character boundary: for
/// words from elsewhere (an HTTP answer, another controller's message) that
/// go into a status or an Event.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    let line = one_line(text);
    if line.chars().count() <= max {
        return line;
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}
