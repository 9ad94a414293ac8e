//! API errors as Kubernetes `Status` objects, with the codes, reasons and
//! wording the real apiserver uses, so clients react to them unchanged.

use serde_json::{Value, json};

use super::resources::Gr;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub name: Option<String>,
    pub gr: Option<Gr>,
    /// (reason, message, field)
    pub causes: Vec<(String, String, String)>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            name: None,
            gr: None,
            causes: vec![],
        }
    }

    fn on(mut self, gr: &Gr, name: &str) -> Self {
        self.gr = Some(gr.clone());
        // Status details omit an empty name, as the API server's do.
        self.name = (!name.is_empty()).then(|| name.to_string());
        self
    }

    /// 422 for a request's options rather than an object (a watch's
    /// `sendInitialEvents`), as `NewInvalid` on `ListOptions` words it.
    pub fn invalid_options(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(gr: &Gr, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{gr} \"{name}\" not found")).on(gr, name)
    }

    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn already_exists(gr: &Gr, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{gr} \"{name}\" already exists"),
        )
        .on(gr, name)
    }

    pub fn conflict(gr: &Gr, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {gr} \"{name}\": {why}"),
        )
        .on(gr, name)
    }

    pub fn stale(gr: &Gr, name: &str) -> Self {
        Self::conflict(
            gr,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource: {method}"),
        )
    }

    pub fn unsupported_media(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"
            ),
        )
    }

    /// A 415 with its own message: a body whose media type is understood
    /// but whose content is not (a protobuf body of a kind without a known
    /// layout).
    pub fn unsupported_body(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn too_large() -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            "the request body is too large",
        )
    }

    /// 422 with one cause per invalid field.
    pub fn invalid(gr: &Gr, name: &str, kind: &str, causes: Vec<(String, String)>) -> Self {
        let detail = causes
            .iter()
            .map(|(f, m)| format!("{f}: {m}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{kind} \"{name}\" is invalid: {detail}"),
        )
        .on(gr, name);
        e.causes = causes
            .into_iter()
            .map(|(f, m)| ("FieldValueInvalid".to_string(), m, f))
            .collect();
        e
    }

    /// 422 as the API server's `NewInvalid` words it: the kind qualified by
    /// its group (`NodeMaintenance.maintd.io "x" is invalid: ...`), several
    /// errors in brackets, each distinct message once, each cause with its
    /// own reason (`FieldValueTooLong`, ...), and the kind, not the
    /// resource, in the details. `causes` are (reason, field, message
    /// without the field).
    pub fn invalid_object(
        group: &str,
        kind: &str,
        name: &str,
        causes: Vec<(String, String, String)>,
    ) -> Self {
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let mut messages: Vec<String> = Vec::new();
        for (_, field, body) in &causes {
            let message = format!("{field}: {body}");
            if !messages.contains(&message) {
                messages.push(message);
            }
        }
        let detail = match messages.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        // NewInvalid takes a GroupKind: its details name the kind where
        // other errors' name the resource.
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {detail}"),
        )
        .on(&Gr::new(group, kind), name);
        e.causes = causes
            .into_iter()
            .map(|(reason, field, message)| (reason, message, field))
            .collect();
        e
    }

    /// 422 for a patch whose result cannot be decoded: the API server names
    /// no kind and no object, and gives the whole patched object as the bad
    /// value of the field `patch`.
    pub fn patch_invalid(patched: &str, detail: &str) -> Self {
        let body = format!("Invalid value: {patched:?}: {detail}");
        let mut e = Self::new(422, "Invalid", format!(" \"\" is invalid: patch: {body}"));
        e.causes = vec![("FieldValueInvalid".into(), body, "patch".into())];
        e
    }

    pub fn too_many_requests(message: impl Into<String>) -> Self {
        Self::new(429, "TooManyRequests", message)
    }

    /// 401: a token the cluster did not issue (or one whose
    /// ServiceAccount is gone).
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 on `name` of `gr` (or the collection, `name` empty), as the
    /// API server words it: `nodes "b" is forbidden: <why>`.
    pub fn forbidden(gr: &Gr, name: &str, why: &str) -> Self {
        let what = if name.is_empty() {
            gr.to_string()
        } else {
            format!("{gr} {name:?}")
        };
        Self::new(403, "Forbidden", format!("{what} is forbidden: {why}")).on(gr, name)
    }

    /// A request an admission policy denied: `message` (which names the
    /// policy and binding) on `name` of `gr`, with the code of `reason`
    /// (`Invalid` 422, `Forbidden` 403, ...) and the message as its cause.
    pub fn denied_by_policy(gr: &Gr, name: &str, message: &str, reason: &str) -> Self {
        let (code, reason) = match reason {
            "Forbidden" => (403, "Forbidden"),
            "Unauthorized" => (401, "Unauthorized"),
            "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
            _ => (422, "Invalid"),
        };
        let mut e = Self::forbidden(gr, name, message);
        e.code = code;
        e.reason = reason;
        e.causes = vec![(String::new(), message.to_string(), String::new())];
        e
    }

    /// 403 with the API server's own message.
    pub fn forbidden_message(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// 504: the server gave up on the request (e.g. too many conflicts).
    pub fn timeout(message: impl Into<String>) -> Self {
        Self::new(504, "Timeout", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// An error answered because a fault was injected (see sim::faults),
    /// with the reason and message the API server gives for that code.
    pub fn injected(code: u16) -> Self {
        match code {
            429 => Self::new(
                429,
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
            ),
            409 => Self::new(
                409,
                "Conflict",
                "Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again",
            ),
            503 => Self::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => Self::new(
                504,
                "Timeout",
                "the server was unable to return a response in the time allotted",
            ),
            c => Self::new(
                c,
                "InternalError",
                "an error on the server (\"injected fault\") has prevented the request from succeeding",
            ),
        }
    }

    pub fn with_cause(mut self, reason: &str, message: &str, field: &str) -> Self {
        self.causes
            .push((reason.to_string(), message.to_string(), field.to_string()));
        self
    }

    /// The `Status` body sent to the client.
    pub fn status(&self) -> Value {
        let mut details = serde_json::Map::new();
        if let Some(name) = &self.name {
            details.insert("name".into(), json!(name));
        }
        if let Some(gr) = &self.gr {
            if !gr.group.is_empty() {
                details.insert("group".into(), json!(gr.group));
            }
            details.insert("kind".into(), json!(gr.plural));
        }
        if !self.causes.is_empty() {
            let causes: Vec<Value> = self
                .causes
                .iter()
                .map(|(r, m, f)| {
                    let mut c = json!({"message": m});
                    if !r.is_empty() {
                        c["reason"] = json!(r);
                    }
                    if !f.is_empty() {
                        c["field"] = json!(f);
                    }
                    c
                })
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        status
    }
}

/// A `Status` reporting success, as returned by an eviction (201).
pub fn success_status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}
