//! The `--prometheus-url` an operator gives, read once: where requests go,
//! which credentials they carry, and how the URL is shown without them.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

/// A Prometheus base URL, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BaseUrl {
    /// scheme://host[:port][/prefix] with no credentials and no trailing
    /// slash: API paths are appended to it, and reasons show it.
    pub base: String,
    pub tls: bool,
    /// User and password from `user:password@host`, decoded, for basic auth
    /// (as Go's HTTP client, and so kured, sends them).
    pub credentials: Option<(String, String)>,
}

/// Reads a base URL; the error says what is wrong with it, never quoting a
/// password.
pub(crate) fn parse(raw: &str) -> Result<BaseUrl, String> {
    let raw = raw.trim();
    let shown = redact(raw);
    let uri: http::Uri = raw
        .parse()
        .map_err(|e| format!("the URL `{shown}` cannot be read ({e})"))?;
    let tls = match uri.scheme_str().map(str::to_ascii_lowercase).as_deref() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(format!(
                "the URL `{shown}` must start with http:// or https://"
            ));
        }
    };
    let authority = uri
        .authority()
        .ok_or_else(|| format!("the URL `{shown}` names no host"))?;
    if uri.query().is_some() {
        return Err(format!(
            "the URL `{shown}` must be Prometheus' base URL, without a query (?...)"
        ));
    }
    let (credentials, host) = match authority.as_str().rsplit_once('@') {
        Some((userinfo, host)) => {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let decoded = (decode(user), decode(password));
            match decoded {
                (Some(user), Some(password)) => (Some((user, password)), host),
                _ => {
                    return Err(format!(
                        "the URL `{shown}` has credentials that are not valid percent-encoded UTF-8"
                    ));
                }
            }
        }
        None => (None, authority.as_str()),
    };
    let scheme = if tls { "https" } else { "http" };
    let prefix = uri.path().trim_end_matches('/');
    Ok(BaseUrl {
        base: format!("{scheme}://{host}{prefix}"),
        tls,
        credentials,
    })
}

/// The URL with its `user:password@` replaced, for messages about a URL
/// that could not be read.
pub(crate) fn redact(raw: &str) -> String {
    let Some((scheme, rest)) = raw.split_once("://") else {
        return raw.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}{}", &rest[end..]),
        None => raw.to_string(),
    }
}

/// What `encode` escapes: everything but RFC 3986's unreserved characters.
const QUERY_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes a query parameter value (everything but RFC 3986's
/// unreserved characters), so any PromQL survives the trip.
pub(crate) fn encode(value: &str) -> String {
    utf8_percent_encode(value, QUERY_VALUE).to_string()
}

/// Decodes `%XX` escapes; None when the result is not UTF-8. A `%` not
/// followed by two hex digits stays as it is, as browsers do.
fn decode(text: &str) -> Option<String> {
    percent_decode_str(text)
        .decode_utf8()
        .ok()
        .map(|text| text.into_owned())
}
