//! The HTTP front of the simulated apiserver: routing of Kubernetes REST
//! paths to the verbs, request parsing with limits, and responses.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::audit::{AuditEntry, RequestRecord};
use super::auth::{self, UserInfo};
use super::errors::{ApiError, success_status};
use super::eviction;
use super::faults::FaultyIo;
use super::resources::{Gr, ResourceDef};
use super::select::{FieldSelector, LabelSelector};
use super::state::SimState;
use super::store::{Store, rv_of};
use super::verbs::{self, DeleteOptions, Part, PatchType, Writer};
use super::{admission, discovery, lifecycle, protobuf, requestinfo, scale, table, watch};

pub type Body = BoxBody<Bytes, Infallible>;

/// Serves the simulated API on `listener` until `stop` is cancelled.
pub async fn serve(sim: Arc<SimState>, listener: TcpListener, stop: CancellationToken) {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    loop {
        let conn = tokio::select! {
            c = listener.accept() => c,
            _ = stop.cancelled() => return,
        };
        let Ok((stream, _)) = conn else { continue };
        let stream = FaultyIo::new(stream, sim.faults.clone());
        let mut restarts = sim.faults.restarts();
        let sim = sim.clone();
        let addr = addr.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let sim = sim.clone();
                let addr = addr.clone();
                async move { Ok::<_, Infallible>(handle(sim, &addr, req).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let builder =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            let conn = builder.serve_connection(io, svc);
            // A restart closes every connection (its watches end).
            tokio::select! {
                _ = conn => {}
                _ = restarts.changed() => {}
                _ = stop.cancelled() => {}
            }
        });
    }
}

/// Binds 127.0.0.1:`port` (0 for any free port).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

fn json_response(code: u16, v: &Value) -> Response<Body> {
    let body = serde_json::to_vec(v).unwrap_or_default();
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.status())
}

/// Percent-decoding for query strings (`+` is a space).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                    16,
                ) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    q.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// A resource path, parsed.
struct Target {
    def: Arc<ResourceDef>,
    version: String,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

enum Route {
    Doc(Value),
    Resource(Target),
}

fn route(sim: &SimState, server: &str, path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let store = sim.store();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Ok(Route::Doc(discovery::version())),
        ["api"] => return Ok(Route::Doc(discovery::core_versions(server))),
        ["apis"] => return Ok(Route::Doc(discovery::group_list(&store))),
        ["api", v] => {
            return discovery::resource_list(&store, "", v)
                .map(Route::Doc)
                .ok_or_else(ApiError::path_not_found);
        }
        ["apis", g] => {
            return discovery::group(&store, g)
                .map(Route::Doc)
                .ok_or_else(ApiError::path_not_found);
        }
        ["apis", g, v] => {
            return discovery::resource_list(&store, g, v)
                .map(Route::Doc)
                .ok_or_else(ApiError::path_not_found);
        }
        ["openapi", "v3"] => return Ok(Route::Doc(discovery::openapi_root(&store))),
        ["openapi", "v3", "api", v] => {
            return discovery::openapi_group_version(&store, "", v)
                .map(Route::Doc)
                .ok_or_else(ApiError::path_not_found);
        }
        ["openapi", "v3", "apis", g, v] => {
            return discovery::openapi_group_version(&store, g, v)
                .map(Route::Doc)
                .ok_or_else(ApiError::path_not_found);
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::path_not_found()),
    };
    let (namespace, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..] if *plural != "status" && *plural != "finalize" => (
            Some(*ns),
            *plural,
            tail.first().copied(),
            tail.get(1).copied(),
        ),
        [plural, tail @ ..] => (None, *plural, tail.first().copied(), tail.get(1).copied()),
        [] => return Err(ApiError::path_not_found()),
    };
    if rest.len() > 5 || (namespace.is_none() && rest.len() > 3) {
        return Err(ApiError::path_not_found());
    }
    let def = store
        .lookup(group, version, plural)
        .ok_or_else(ApiError::path_not_found)?;
    if namespace.is_some() && !def.namespaced {
        return Err(ApiError::path_not_found());
    }
    Ok(Route::Resource(Target {
        def,
        version: version.to_string(),
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        sub: sub.map(str::to_string),
    }))
}

async fn handle(sim: Arc<SimState>, server: &str, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let query = parse_query(parts.uri.query());
    let ua = parts
        .headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let watch = matches!(query.get("watch").map(String::as_str), Some("1" | "true"));
    // Who asks, then (after any injected fault) whether they may, before
    // the body is read, as the API server's filters decide before its
    // handlers run.
    // Two statements: the store's lock taken for the token is let go
    // before impersonation takes it again to authorize.
    let requester = sim.tokens.authenticate(&parts.headers, &sim.store());
    let authenticated = requester.and_then(|requester| {
        auth::impersonate(&parts.headers, requester, |who, attrs| {
            sim.authorize(who, attrs)
        })
    });
    let username = authenticated
        .as_ref()
        .map(|u| u.username.clone())
        .unwrap_or_default();
    let record = |code: u16| {
        record_request(&sim, &parts.method, &path, watch, &ua, &username, code);
    };
    let (fail, delay) = sim.faults.for_request(&parts.method, &path);
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(code) = fail {
        record(code);
        return error_response(&ApiError::injected(code));
    }
    let authorized = authenticated.and_then(|user| {
        let attrs = requestinfo::attributes(&parts.method, &path, &query);
        sim.authorize(&user, &attrs).map(|()| Arc::new(user))
    });
    let user = match authorized {
        Ok(user) => user,
        Err(e) => {
            record(e.code);
            return error_response(&e);
        }
    };
    let body = match Limited::new(body, sim.config.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            record(413);
            return error_response(&ApiError::too_large());
        }
    };
    let late = sim.faults.late_commit(&parts.method, &path);
    let resource = resource_of(&path).to_string();
    let req = ReadRequest {
        method: parts.method,
        headers: parts.headers,
        query,
        path,
        body,
        ua: ua.clone(),
        watch,
        user,
    };
    let resp = match late {
        // A late commit goes on in a task of its own: the client hanging
        // up does not stop it.
        Some(delay) => {
            let (sim, server) = (sim.clone(), server.to_string());
            sim.faults.hold(true);
            let task = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let resp = process(&sim, &server, &req).await;
                sim.faults.hold(false);
                resp
            });
            match task.await {
                Ok(resp) => resp,
                Err(_) => error_response(&ApiError::injected(500)),
            }
        }
        None => process(&sim, server, &req).await,
    };
    // Count what goes back to this client: each frame of a watch stream is
    // one event (or bookmark).
    let (parts, body) = resp.into_parts();
    let counted = body.map_frame(move |frame| {
        if let Some(data) = frame.data_ref() {
            sim.audit.record_sent(&ua, &resource, data.len(), watch);
        }
        frame
    });
    Response::from_parts(parts, counted.boxed())
}

/// The resource a path is about (its plural), for counting what is sent;
/// the path itself for discovery and the like.
fn resource_of(path: &str) -> &str {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match segments.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] => rest,
        _ => return path,
    };
    match rest {
        ["namespaces", _, plural, ..] => plural,
        [plural, ..] => plural,
        [] => path,
    }
}

/// A request whose body has been read.
struct ReadRequest {
    method: Method,
    headers: HeaderMap,
    query: HashMap<String, String>,
    path: String,
    body: Bytes,
    ua: String,
    watch: bool,
    user: Arc<UserInfo>,
}

/// Routes and answers a request, recording it in the audit log.
async fn process(sim: &Arc<SimState>, server: &str, req: &ReadRequest) -> Response<Body> {
    let resp = match route(sim, server, &req.path) {
        Ok(Route::Doc(doc)) if req.method == Method::GET => json_response(200, &doc),
        Ok(Route::Doc(_)) => error_response(&ApiError::method_not_allowed(req.method.as_str())),
        Ok(Route::Resource(t)) => {
            let (resp, audit) = resource(sim, req, t).await;
            if let Some(mut entry) = audit {
                entry.code = resp.status().as_u16();
                entry.rv = sim.store().current_rv();
                entry.user_agent = req.ua.clone();
                sim.audit.record(entry);
            }
            resp
        }
        Err(e) => error_response(&e),
    };
    record_request(
        sim,
        &req.method,
        &req.path,
        req.watch,
        &req.ua,
        &req.user.username,
        resp.status().as_u16(),
    );
    resp
}

fn record_request(
    sim: &SimState,
    method: &Method,
    path: &str,
    watch: bool,
    ua: &str,
    user: &str,
    code: u16,
) {
    sim.audit.record_request(RequestRecord {
        t_ms: 0,
        method: method.to_string(),
        path: path.to_string(),
        watch,
        user_agent: ua.to_string(),
        user: user.to_string(),
        code,
    });
}

fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    if ct.contains("yaml") {
        let text = std::str::from_utf8(body)
            .map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
        return serde_saphyr::from_str::<Value>(text)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")));
    }
    if ct.starts_with(protobuf::MEDIA_TYPE) {
        return protobuf::decode_body(body);
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding the request body as JSON: {e}")))
}

/// Whether the client asked for metadata only (`as=PartialObjectMetadata`
/// or `as=PartialObjectMetadataList` in Accept), as the API server serves
/// any resource.
fn wants_metadata(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=PartialObjectMetadata"))
}

/// An object as `PartialObjectMetadata`: its metadata alone.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    })
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"))
}

fn writer(headers: &HeaderMap, query: &HashMap<String, String>, user: &Arc<UserInfo>) -> Writer {
    let ua = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    Writer {
        manager: query
            .get("fieldManager")
            .cloned()
            .unwrap_or_else(|| ua.split('/').next().unwrap_or("unknown").to_string()),
        force: query.get("force").is_some_and(|f| f == "true"),
        user: Some(user.clone()),
    }
}

async fn resource(
    sim: &Arc<SimState>,
    req: &ReadRequest,
    t: Target,
) -> (Response<Body>, Option<AuditEntry>) {
    let (method, headers, query, body) = (&req.method, &req.headers, &req.query, &req.body);
    let writer =
        |headers: &HeaderMap, query: &HashMap<String, String>| writer(headers, query, &req.user);
    let ns = t.namespace.clone().unwrap_or_default();
    let mut audit = AuditEntry {
        time: String::new(),
        t_ms: 0,
        verb: String::new(),
        resource: t.def.gr().to_string(),
        subresource: t.sub.clone(),
        namespace: ns.clone(),
        name: t.name.clone().unwrap_or_default(),
        code: 0,
        user_agent: String::new(),
        uid: None,
        rv: 0,
    };
    let result: Result<(u16, Value), ApiError> = async {
        let part = match t.sub.as_deref() {
            None => Part::Main,
            Some("status") if t.def.status_subresource => Part::Status,
            Some("eviction") if t.def.plural == "pods" && t.def.group.is_empty() => Part::Main,
            Some("scale") if scale::serves(&t.def) => Part::Main,
            // The simulated kubelet runs no containers: say so, rather than
            // a 404 that reads as a wrong command.
            Some(sub @ ("log" | "exec" | "attach" | "portforward")) if t.def.plural == "pods" && t.def.group.is_empty() => {
                let name = t.name.as_deref().unwrap_or_default();
                sim.store().get(&t.def.gr(), &ns, name).ok_or_else(|| ApiError::not_found(&t.def.gr(), name))?;
                return Err(ApiError::bad_request(format!(
                    "pods/{sub} is not simulated: the simulated kubelet runs no containers, so pod {name:?} has no {}",
                    if sub == "log" { "logs" } else { "process to connect to" }
                )));
            }
            Some(_) => return Err(ApiError::path_not_found()),
        };
        match (method, t.name.as_deref(), t.sub.as_deref()) {
            (&Method::GET, Some(name), Some("scale")) => Ok((200, scale::get(sim, &t.def, &ns, name)?)),
            (&Method::PUT, Some(name), Some("scale")) => {
                audit.verb = "update".into();
                Ok((200, scale::update(sim, &t.def, &ns, name, &parse_body(headers, body)?, &writer(headers, query))?))
            }
            (&Method::GET, None, _) => {
                if matches!(query.get("watch").map(String::as_str), Some("1" | "true")) {
                    return Err(ApiError::internal("watch handled elsewhere"));
                }
                let mut v = list(sim, &t, query, wants_table(headers))?;
                if wants_metadata(headers) {
                    let items: Vec<Value> = v["items"]
                        .as_array()
                        .map(|a| a.iter().map(partial_metadata).collect())
                        .unwrap_or_default();
                    v = json!({
                        "kind": "PartialObjectMetadataList",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": v["metadata"],
                        "items": items,
                    });
                }
                Ok((200, v))
            }
            (&Method::GET, Some(name), _) => {
                let obj = sim.store().get(&t.def.gr(), &ns, name).ok_or_else(|| ApiError::not_found(&t.def.gr(), name))?;
                let mut obj = (*obj).clone();
                obj["apiVersion"] = json!(t.def.api_version(&t.version));
                if wants_table(headers) {
                    return Ok((200, table::to_table(&t.def, &[obj], "", query.get("includeObject").is_some_and(|i| i == "Object"))));
                }
                if wants_metadata(headers) {
                    return Ok((200, partial_metadata(&obj)));
                }
                Ok((200, obj))
            }
            (&Method::POST, None, None) => {
                audit.verb = "create".into();
                let obj = parse_body(headers, body)?;
                audit.name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
                lifecycle::strict(&t.def, &obj, query.get("fieldValidation").map(String::as_str))?;
                let created = verbs::create(sim, &t.def, t.namespace.as_deref(), obj, &writer(headers, query), false)?;
                audit.name = created["metadata"]["name"].as_str().unwrap_or_default().to_string();
                audit.uid = created["metadata"]["uid"].as_str().map(str::to_string);
                Ok((201, (*created).clone()))
            }
            (&Method::POST, Some(name), Some("eviction")) => {
                audit.verb = "evict".into();
                let ev = parse_body(headers, body)?;
                audit.uid = sim.store().get(&t.def.gr(), &ns, name).map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_string());
                admission::admit(&sim.store(), &admission::Request {
                    operation: admission::Operation::Create,
                    def: &t.def,
                    subresource: "eviction",
                    namespace: &ns,
                    name,
                    object: Some(&ev),
                    old_object: None,
                    user: &req.user,
                })?;
                eviction::wait_turn(sim, &ns, name).await;
                eviction::evict(sim, &ns, name, &ev)?;
                Ok((201, success_status(201)))
            }
            (&Method::PUT, Some(name), _) => {
                audit.verb = "update".into();
                let obj = parse_body(headers, body)?;
                lifecycle::strict(&t.def, &obj, query.get("fieldValidation").map(String::as_str))?;
                let updated = verbs::update(sim, &t.def, &ns, name, part, obj, &writer(headers, query))?;
                Ok((200, (*updated).clone()))
            }
            (&Method::PATCH, Some(name), _) => {
                audit.verb = "patch".into();
                let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
                let kind = PatchType::from_content_type(ct).ok_or_else(|| ApiError::unsupported_media(ct))?;
                if kind == PatchType::Apply && !query.contains_key("fieldManager") {
                    return Err(ApiError::bad_request("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"));
                }
                let patch_body = if kind == PatchType::Apply {
                    let text = std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
                    serde_saphyr::from_str::<Value>(text).map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
                } else {
                    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("error decoding the patch as JSON: {e}")))?
                };
                if t.sub.as_deref() == Some("scale") {
                    return Ok((200, scale::patch(sim, &t.def, &ns, name, kind, &patch_body, &writer(headers, query))?));
                }
                // An apply that creates its object answers 201 Created, as
                // a create does.
                let existed = sim.store().get(&t.def.gr(), &ns, name).is_some();
                let patched = verbs::patch(sim, &t.def, &ns, name, part, kind, &patch_body, &writer(headers, query))?;
                Ok((if existed { 200 } else { 201 }, (*patched).clone()))
            }
            (&Method::DELETE, Some(name), None) => {
                audit.verb = "delete".into();
                let mut opts = if body.is_empty() { DeleteOptions::default() } else { DeleteOptions::from_json(&parse_body(headers, body)?)? };
                if let Some(g) = query.get("gracePeriodSeconds") {
                    opts.grace_period_seconds = Some(g.parse().map_err(|_| ApiError::bad_request("gracePeriodSeconds must be an integer"))?);
                }
                if query.get("propagationPolicy").is_some_and(|p| p == "Orphan") {
                    opts.orphan = true;
                }
                opts.user = Some(req.user.clone());
                audit.uid = sim.store().get(&t.def.gr(), &ns, name).map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_string());
                if t.def.gr() == Gr::pods() {
                    let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
                    sim.invariants.deleting_pod(&sim.store(), &ns, name, ua);
                }
                let deleted = verbs::delete(sim, &t.def, &ns, name, &opts)?;
                Ok((200, (*deleted).clone()))
            }
            (&Method::DELETE, None, None) => {
                audit.verb = "deletecollection".into();
                let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
                let fields = FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str), &t.def.group, &t.def.kind)?;
                let victims: Vec<Value> = sim.store().list(&t.def.gr(), t.namespace.as_deref()).into_iter()
                    .filter(|o| labels.matches(o) && fields.matches(o)).map(|o| (*o).clone()).collect();
                for v in &victims {
                    let vns = v["metadata"]["namespace"].as_str().unwrap_or_default();
                    let vname = v["metadata"]["name"].as_str().unwrap_or_default();
                    let _ = verbs::delete(sim, &t.def, vns, vname, &DeleteOptions::default());
                }
                Ok((200, json!({"kind": format!("{}List", t.def.kind), "apiVersion": t.def.api_version(&t.version), "metadata": {}, "items": victims})))
            }
            _ => Err(ApiError::method_not_allowed(method.as_str())),
        }
    }
    .await;
    let is_write = !audit.verb.is_empty();
    let resp = match result {
        Ok((code, v)) => json_response(code, &v),
        Err(e) if e.code == 500 && e.message == "watch handled elsewhere" => {
            return (watch_response(sim, headers, query, t), None);
        }
        Err(e) => error_response(&e),
    };
    (resp, is_write.then_some(audit))
}

/// The objects a list may return, before its selectors: only those of
/// its route (one object by name, one node's pods, or all of the
/// resource's), in its namespace.
fn candidates(store: &Store, t: &Target, fields: &FieldSelector) -> Vec<Arc<Value>> {
    let ns = match &t.namespace {
        Some(ns) => Some(ns.as_str()),
        // Every object of a cluster-scoped resource has the namespace "".
        None if !t.def.namespaced => Some(""),
        None => None,
    };
    store.on_route(&watch::route_for(&t.def.gr(), fields), ns)
}

fn list(
    sim: &SimState,
    t: &Target,
    query: &HashMap<String, String>,
    as_table: bool,
) -> Result<Value, ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
    let fields = FieldSelector::parse(
        query.get("fieldSelector").map_or("", String::as_str),
        &t.def.group,
        &t.def.kind,
    )?;
    let limit: usize = match query.get("limit") {
        Some(l) => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        None => 0,
    };
    let (snapshot_rv, after) = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(c) => parse_continue(c)?,
        None => (0, None),
    };
    let store = sim.store();
    if snapshot_rv != 0 && snapshot_rv < store.compacted_rv() {
        return Err(ApiError::gone(
            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        ));
    }
    let rv = if snapshot_rv != 0 {
        snapshot_rv
    } else {
        store.current_rv()
    };
    let api_version = t.def.api_version(&t.version);
    let mut items = Vec::new();
    let mut next = None;
    for obj in candidates(&store, t, &fields) {
        let key = (
            obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            obj["metadata"]["name"].as_str().unwrap_or("").to_string(),
        );
        if after.as_ref().is_some_and(|a| key <= *a)
            || !labels.matches(&obj)
            || !fields.matches(&obj)
        {
            continue;
        }
        if limit > 0 && items.len() == limit {
            let last: &Value = items.last().unwrap_or(&Value::Null);
            next = Some(make_continue(rv, last));
            break;
        }
        let mut o = (*obj).clone();
        o["apiVersion"] = json!(api_version);
        items.push(o);
    }
    drop(store);
    let mut md = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = next {
        md["continue"] = json!(c);
    }
    if as_table {
        let mut tbl = table::to_table(
            &t.def,
            &items,
            &rv.to_string(),
            query.get("includeObject").is_some_and(|i| i == "Object"),
        );
        tbl["metadata"] = md;
        return Ok(tbl);
    }
    Ok(
        json!({"kind": format!("{}List", t.def.kind), "apiVersion": api_version, "metadata": md, "items": items}),
    )
}

/// Continue tokens are opaque to clients: the snapshot resourceVersion and
/// the last key returned, hex-encoded. Later pages show the objects as they
/// are when the page is read (a real apiserver serves the snapshot); the
/// reported resourceVersion is the first page's, so a watch from it replays
/// every change in between.
fn make_continue(rv: u64, last: &Value) -> String {
    let raw = format!(
        "{rv}\n{}\n{}",
        last["metadata"]["namespace"].as_str().unwrap_or(""),
        last["metadata"]["name"].as_str().unwrap_or("")
    );
    raw.bytes().map(|b| format!("{b:02x}")).collect()
}

fn parse_continue(token: &str) -> Result<(u64, Option<(String, String)>), ApiError> {
    let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
    if !token.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes: Result<Vec<u8>, _> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2).unwrap_or("zz"), 16))
        .collect();
    let raw = String::from_utf8(bytes.map_err(|_| bad())?).map_err(|_| bad())?;
    let mut parts = raw.splitn(3, '\n');
    let rv = parts.next().and_then(|r| r.parse().ok()).ok_or_else(bad)?;
    let ns = parts.next().ok_or_else(bad)?.to_string();
    let name = parts.next().ok_or_else(bad)?.to_string();
    Ok((rv, Some((ns, name))))
}

fn watch_response(
    sim: &Arc<SimState>,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    t: Target,
) -> Response<Body> {
    let parsed = (|| {
        let labels = LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
        let mut fields = FieldSelector::parse(
            query.get("fieldSelector").map_or("", String::as_str),
            &t.def.group,
            &t.def.kind,
        )?;
        if let Some(name) = &t.name {
            fields =
                FieldSelector::parse(&format!("metadata.name={name}"), &t.def.group, &t.def.kind)?;
        }
        check_watch_list(query, sim.config.watch_list)?;
        let timeout = match query.get("timeoutSeconds") {
            Some(s) => Some(Duration::from_secs(s.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid timeoutSeconds {s:?}"))
            })?)),
            None => None,
        };
        Ok::<_, ApiError>(watch::WatchRequest {
            def: t.def.clone(),
            version: t.version.clone(),
            namespace: t.namespace.clone(),
            labels,
            fields,
            resource_version: query.get("resourceVersion").cloned(),
            bookmarks: query
                .get("allowWatchBookmarks")
                .is_some_and(|b| b == "true" || b == "1"),
            send_initial_events: query.get("sendInitialEvents").is_some_and(|b| b == "true"),
            timeout,
            table: wants_table(headers),
            metadata_only: wants_metadata(headers),
        })
    })();
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return error_response(&e),
    };
    match watch::start(sim, req) {
        Ok(rx) => {
            let stream = tokio_stream_from(rx).map(|b| Ok::<_, Infallible>(Frame::data(b)));
            Response::builder()
                .status(200)
                .header(header::CONTENT_TYPE, "application/json")
                .body(BodyExt::boxed(StreamBody::new(stream)))
                .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
        }
        Err(e) => error_response(&e),
    }
}

/// A watch's `sendInitialEvents` and `resourceVersionMatch`, judged as
/// Kubernetes 1.37 judges them (k8s.io/apimachinery's
/// `validateWatchOptions`): the first needs the second to be
/// `NotOlderThan`, the second is for the first alone, and without the
/// `WatchList` feature the first is forbidden.
fn check_watch_list(query: &HashMap<String, String>, served: bool) -> Result<(), ApiError> {
    let initial = query.get("sendInitialEvents");
    let matching = query.get("resourceVersionMatch").filter(|m| !m.is_empty());
    let mut errors = Vec::new();
    if initial.is_some() {
        if matching.map(String::as_str) != Some("NotOlderThan") {
            errors.push(
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                    .to_string(),
            );
        }
        if !served {
            errors.push("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled".to_string());
        }
    }
    if let Some(m) = matching {
        if initial.is_none() {
            errors.push("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".to_string());
        }
        if m != "NotOlderThan" {
            errors.push(format!(
                "resourceVersionMatch: Unsupported value: {m:?}: supported values: \"NotOlderThan\""
            ));
        }
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(ApiError::invalid_options(format!(
            "ListOptions.meta.k8s.io \"\" is invalid: {}",
            errors[0]
        ))),
        _ => Err(ApiError::invalid_options(format!(
            "ListOptions.meta.k8s.io \"\" is invalid: [{}]",
            errors.join(", ")
        ))),
    }
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures::Stream<Item = Bytes> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The resourceVersion of an object as a number (for tests).
pub fn resource_version(obj: &Value) -> u64 {
    rv_of(obj)
}
