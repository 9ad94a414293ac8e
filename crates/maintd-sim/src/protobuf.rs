//! Request bodies in `application/vnd.kubernetes.protobuf`, as typed
//! clients send them (kubectl's `create namespace`, `create deployment`,
//! `create configmap` and the other typed `create` commands).
//!
//! The body is the four bytes `k8s\0` and a `runtime.Unknown` message:
//! the object's apiVersion and kind, and the object's own protobuf in
//! `raw`. The object is read with the layout in `protobuf/schema.txt`
//! into the JSON the API server would hold for it, and from there takes
//! the same path as a JSON body. Answers stay JSON: kubectl asks for
//! `application/vnd.kubernetes.protobuf,application/json` and takes
//! either.
//!
//! Where it differs from the API server:
//! - only the built-in kinds of the groups the simulator serves (and
//!   meta/v1 DeleteOptions) are understood; any other kind is a 415 that
//!   says to send JSON, as the API server answers a protobuf body for a
//!   custom resource;
//! - Go writes a field that is not a pointer even when it is zero, and the
//!   protobuf does not say which fields are pointers. Empty optional
//!   strings and zero times are left out, as Go's `omitempty` leaves them
//!   out of the JSON; a zero number or `false` is kept, because for a
//!   pointer (`replicas: 0`) it means something. So an object created from
//!   protobuf can show `paused: false` where the API server shows nothing.

mod schema;
mod to_json;
mod wire;

use serde_json::{Value, json};

use super::errors::ApiError;
use schema::Schema;
use wire::{Fields, WireValue};

/// The media type of Kubernetes' protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8; 4] = b"k8s\0";

/// The object in a protobuf request body, as JSON with its apiVersion and
/// kind. A body that is not a well-formed envelope, or whose object does
/// not parse, is a 400 that says where; a kind without a known layout is a
/// 415 that says which kinds are understood.
pub fn decode_body(body: &[u8]) -> Result<Value, ApiError> {
    let bad =
        |what: String| ApiError::bad_request(format!("error decoding the protobuf body: {what}"));
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| {
        bad(
            "it does not start with the 4 bytes \"k8s\\0\" of the Kubernetes protobuf envelope"
                .into(),
        )
    })?;
    let unknown =
        Envelope::parse(envelope).map_err(|e| bad(format!("the runtime.Unknown envelope: {e}")))?;
    if !unknown.content_encoding.is_empty() {
        return Err(ApiError::unsupported_body(format!(
            "the protobuf envelope says its object is encoded with {:?}; the simulator reads only unencoded objects",
            unknown.content_encoding
        )));
    }
    if !unknown.content_type.is_empty() && unknown.content_type != MEDIA_TYPE {
        return Err(ApiError::unsupported_body(format!(
            "the protobuf envelope holds an object in {:?}; send that as the request's own Content-Type instead",
            unknown.content_type
        )));
    }
    let schema = Schema::builtin().map_err(ApiError::internal)?;
    let (api_version, kind) = (unknown.api_version.as_str(), unknown.kind.as_str());
    let message = schema.kind(api_version, kind).ok_or_else(|| {
        ApiError::unsupported_body(format!(
            "the simulator reads protobuf bodies only for the built-in kinds of {}; {} {:?} is not one of them: send it as application/json",
            schema.api_versions().join(", "),
            if api_version.is_empty() { "(no apiVersion)" } else { api_version },
            kind,
        ))
    })?;
    let mut obj = to_json::message(schema, message, unknown.raw)
        .map_err(|e| bad(format!("{api_version} {kind}: {e}")))?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

/// `runtime.Unknown`: typeMeta (1), raw (2), contentEncoding (3),
/// contentType (4).
#[derive(Debug, Default)]
struct Envelope<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
    content_type: String,
}

impl<'a> Envelope<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        let mut out = Envelope::default();
        for item in Fields::new(bytes) {
            match item? {
                (1, WireValue::Bytes(type_meta)) => {
                    for item in Fields::new(type_meta) {
                        match item? {
                            (1, w) => out.api_version = text(w, "typeMeta.apiVersion")?,
                            (2, w) => out.kind = text(w, "typeMeta.kind")?,
                            _ => {}
                        }
                    }
                }
                (2, WireValue::Bytes(raw)) => out.raw = raw,
                (3, w) => out.content_encoding = text(w, "contentEncoding")?,
                (4, w) => out.content_type = text(w, "contentType")?,
                (n @ (1 | 2), w) => return Err(format!("field {n} is a {} value", w.wire_name())),
                _ => {}
            }
        }
        if out.kind.is_empty() {
            return Err("it names no kind (typeMeta.kind is empty)".into());
        }
        Ok(out)
    }
}

fn text(w: WireValue<'_>, field: &str) -> Result<String, String> {
    match w {
        WireValue::Bytes(b) => std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| format!("{field} is not UTF-8")),
        other => Err(format!("{field} is a {} value", other.wire_name())),
    }
}

#[cfg(test)]
mod tests;
