//! The write verbs of the simulated apiserver — create, update, patch,
//! delete — with the apiserver's behaviour: defaulting, validation,
//! resourceVersion preconditions, the status subresource, generation,
//! finalizers, graceful pod deletion and owner-reference garbage collection.

use std::sync::Arc;

use serde_json::{Value, json};

use super::admission;
use super::auth::UserInfo;
use super::crd_validation;
use super::errors::ApiError;
use super::meta::{self, now_time};
use super::patch;
use super::rbac;
use super::resources::{Gr, ResourceDef};
use super::state::SimState;
use super::store::{Store, rv_of};
use super::typecheck;
use super::validate;

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

impl Part {
    pub fn subresource(self) -> Option<&'static str> {
        match self {
            Part::Main => None,
            Part::Status => Some("status"),
        }
    }
}

/// How a PATCH body is to be read, from its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Merge,
    Strategic,
    Json,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/json-patch+json" => Some(PatchType::Json),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// DeleteOptions, from the body or the query string.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub orphan: bool,
    /// The client's user: its deletion passes the admission policies.
    pub user: Option<Arc<UserInfo>>,
}

impl DeleteOptions {
    pub fn from_json(v: &Value) -> Result<Self, ApiError> {
        if !(v.is_object() || v.is_null()) {
            return Err(ApiError::bad_request("DeleteOptions must be a JSON object"));
        }
        let grace =
            match &v["gracePeriodSeconds"] {
                Value::Null => None,
                g => Some(g.as_i64().ok_or_else(|| {
                    ApiError::bad_request("gracePeriodSeconds must be an integer")
                })?),
            };
        Ok(DeleteOptions {
            grace_period_seconds: grace,
            uid: v["preconditions"]["uid"].as_str().map(str::to_string),
            resource_version: v["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
            orphan: v["propagationPolicy"] == "Orphan" || v["orphanDependents"] == true,
            user: None,
        })
    }
}

/// Who makes a write: the field manager, whether an apply forces its
/// way past conflicts, and the user a client's request came from. A write
/// with a user passes the admission policies the cluster holds; the
/// simulated controllers and kubelets write without one (as the real
/// ones do, the shipped policies never match them).
#[derive(Debug, Clone, Default)]
pub struct Writer {
    pub manager: String,
    pub force: bool,
    pub user: Option<std::sync::Arc<crate::auth::UserInfo>>,
}

fn check_namespace(store: &Store, def: &ResourceDef, ns: &str) -> Result<(), ApiError> {
    if def.namespaced && store.get(&Gr::namespaces(), "", ns).is_none() {
        return Err(ApiError::not_found(&Gr::namespaces(), ns));
    }
    Ok(())
}

/// Creates an object. `keep_status` keeps a given status (seeding a scenario);
/// API clients' status on create is reset, as the apiserver does.
pub fn create(
    sim: &SimState,
    def: &ResourceDef,
    ns: Option<&str>,
    mut obj: Value,
    writer: &Writer,
    keep_status: bool,
) -> Result<Arc<Value>, ApiError> {
    let gr = def.gr();
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    // The API server decodes the body into its type before anything else.
    typecheck::on_body(def, &obj)?;
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let md = &mut obj["metadata"];
    if def.namespaced {
        let path_ns = ns.unwrap_or("default");
        match md["namespace"].as_str() {
            Some(body_ns) if !body_ns.is_empty() && body_ns != path_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => md["namespace"] = json!(path_ns),
        }
    } else if let Some(m) = md.as_object_mut() {
        m.remove("namespace");
    }
    // Admission sees no name for an object whose name the server makes.
    let generated = md["name"].as_str().unwrap_or("").is_empty();
    if generated {
        match md["generateName"].as_str() {
            Some(prefix) if !prefix.is_empty() => {
                md["name"] = json!(format!("{prefix}{}", meta::random_suffix()))
            }
            _ => {
                return Err(ApiError::invalid(
                    &gr,
                    "",
                    &def.kind,
                    vec![(
                        "metadata.name".into(),
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            }
        }
    }
    if let Some(m) = md.as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ] {
            m.remove(k);
        }
    }
    md["uid"] = json!(meta::new_uid());
    md["creationTimestamp"] = json!(now_time());
    md["generation"] = json!(1);
    let version = obj["apiVersion"]
        .as_str()
        .and_then(|av| av.rsplit('/').next())
        .filter(|v| def.versions.iter().any(|s| s == v))
        .unwrap_or(def.preferred_version())
        .to_string();
    obj["apiVersion"] = json!(def.api_version(&version));
    match obj["kind"].as_str() {
        Some(k) if k != def.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind {k:?} of the object does not match the resource {gr}"
            )));
        }
        _ => obj["kind"] = json!(def.kind),
    }
    if !keep_status
        && def.status_subresource
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
    let mut store = sim.store();
    super::lifecycle::prune(def, &mut obj);
    super::lifecycle::drop_disabled(&store, def, None, &mut obj);
    validate::default_new(&store, def, &mut obj);
    validate::check(def, &obj)?;
    crd_validation::check(def, None, &obj, false)?;
    patch::record_update(
        None,
        &mut obj,
        &writer.manager,
        "Update",
        None,
        &def.list_schema,
        &now_time(),
    );
    check_namespace(&store, def, meta::namespace(&obj))?;
    if let Some(user) = &writer.user {
        admission::admit(
            &store,
            &admission::Request {
                operation: admission::Operation::Create,
                def,
                subresource: "",
                namespace: meta::namespace(&obj),
                name: if generated { "" } else { meta::name(&obj) },
                object: Some(&obj),
                old_object: None,
                user,
            },
        )?;
    }
    let created = store.insert(&gr, obj)?;
    if gr == Gr::crds() {
        register_crd(&mut store, &created)?;
    }
    Ok(created)
}

/// Registers (or re-registers) the resource a CRD describes, and marks the
/// CRD Established. A CRD that cannot be served is rejected.
fn register_crd(store: &mut Store, crd: &Value) -> Result<(), ApiError> {
    let def = ResourceDef::from_crd(crd).map_err(|why| {
        ApiError::invalid(
            &Gr::crds(),
            meta::name(crd),
            "CustomResourceDefinition",
            vec![("spec".into(), why)],
        )
    })?;
    let mut established = crd.clone();
    established["status"] = json!({
        "acceptedNames": crd["spec"]["names"],
        "storedVersions": [def.preferred_version()],
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now_time()},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now_time()},
        ],
    });
    store.register(def);
    store.replace(&Gr::crds(), established)?;
    Ok(())
}

/// Replaces an object (PUT), honouring a resourceVersion precondition.
pub fn update(
    sim: &SimState,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    part: Part,
    new: Value,
    writer: &Writer,
) -> Result<Arc<Value>, ApiError> {
    let gr = def.gr();
    if !new.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    typecheck::on_body(def, &new)?;
    if let Some(body_name) = new["metadata"]["name"].as_str()
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let mut store = sim.store();
    let old = store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    if let Some(rv) = new["metadata"]["resourceVersion"].as_str()
        && !rv.is_empty()
        && rv != rv_of(&old).to_string()
    {
        return Err(ApiError::stale(&gr, name));
    }
    commit(&mut store, def, &old, new, part, writer, "Update")
}

/// Applies a patch of any of the four kinds.
#[allow(clippy::too_many_arguments)]
pub fn patch(
    sim: &SimState,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    part: Part,
    kind: PatchType,
    body: &Value,
    writer: &Writer,
) -> Result<Arc<Value>, ApiError> {
    let gr = def.gr();
    let mut store = sim.store();
    let old = store.get(&gr, ns, name);
    let Some(old) = old else {
        if kind == PatchType::Apply && part == Part::Main {
            drop(store);
            return apply_create(sim, def, ns, name, body, writer);
        }
        return Err(ApiError::not_found(&gr, name));
    };
    let old_rv = rv_of(&old).to_string();
    let new = match kind {
        PatchType::Apply => {
            if !body.is_object() {
                return Err(ApiError::bad_request("an apply patch must be an object"));
            }
            if let Some(rv) = body["metadata"]["resourceVersion"].as_str()
                && !rv.is_empty()
                && rv != old_rv
            {
                return Err(ApiError::stale(&gr, name));
            }
            typecheck::on_apply(def, ns, name, body)?;
            patch::apply(
                Some(&old),
                body,
                &writer.manager,
                writer.force,
                part.subresource(),
                &def.list_schema,
                &now_time(),
            )
            .map_err(|e| patch_error(&gr, name, &def.kind, e))?
        }
        _ => {
            let mut target = (*old).clone();
            let res = match kind {
                PatchType::Merge => patch::merge_patch(&mut target, body),
                PatchType::Strategic => {
                    patch::strategic_merge_patch(&mut target, body, &def.list_schema)
                }
                _ => patch::json_patch(&mut target, body),
            };
            res.map_err(|e| patch_error(&gr, name, &def.kind, e))?;
            typecheck::on_patched(def, &target)?;
            // A resourceVersion in the patch is a precondition.
            if target["metadata"]["resourceVersion"].as_str() != Some(old_rv.as_str()) {
                if target["metadata"]["resourceVersion"].is_string() {
                    return Err(ApiError::stale(&gr, name));
                }
                target["metadata"]["resourceVersion"] = json!(old_rv);
            }
            target
        }
    };
    let op = if kind == PatchType::Apply {
        "Apply"
    } else {
        "Update"
    };
    commit(&mut store, def, &old, new, part, writer, op)
}

fn apply_create(
    sim: &SimState,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    body: &Value,
    writer: &Writer,
) -> Result<Arc<Value>, ApiError> {
    let gr = def.gr();
    // An apply that creates the object is a create too: the API server
    // asks the authorizer for `create` as well as the `patch` it allowed.
    if let Some(user) = &writer.user {
        let attrs = rbac::Attributes {
            verb: "create".into(),
            resource: Some(rbac::ResourceAttributes {
                group: gr.group.clone(),
                resource: gr.plural.clone(),
                subresource: String::new(),
                namespace: ns.to_string(),
                name: name.to_string(),
            }),
            path: String::new(),
        };
        sim.authorize(user, &attrs)?;
    }
    typecheck::on_apply(def, ns, name, body)?;
    let mut obj = patch::apply(
        None,
        body,
        &writer.manager,
        writer.force,
        None,
        &def.list_schema,
        &now_time(),
    )
    .map_err(|e| patch_error(&gr, name, &def.kind, e))?;
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]["name"] = json!(name);
    let managed = obj["metadata"]["managedFields"].take();
    let ns = (!ns.is_empty()).then_some(ns);
    let creator = Writer {
        user: writer.user.clone(),
        ..Writer::default()
    };
    let created = create(sim, def, ns, obj, &creator, false)?;
    if managed.is_array() {
        // Keep the apply ownership rather than the plain create's.
        let mut with = (*created).clone();
        with["metadata"]["managedFields"] = managed;
        return sim.store().replace(&gr, with);
    }
    Ok(created)
}

fn patch_error(gr: &Gr, name: &str, kind: &str, e: patch::PatchError) -> ApiError {
    match e {
        patch::PatchError::BadRequest(m) => ApiError::bad_request(m),
        patch::PatchError::Invalid(m) => {
            ApiError::invalid(gr, name, kind, vec![("patch".into(), m)])
        }
        patch::PatchError::Conflict { message, causes } => {
            let mut err = ApiError::conflict(gr, name, &message);
            err.message = message;
            for (field, msg) in causes {
                err = err.with_cause("FieldManagerConflict", &msg, &field);
            }
            err
        }
    }
}

/// Writes `new` over `old`: keeps what clients may not change, applies the
/// status subresource split, bumps generation, records field ownership and
/// finishes a deletion whose last finalizer went.
fn commit(
    store: &mut Store,
    def: &ResourceDef,
    old: &Arc<Value>,
    mut new: Value,
    part: Part,
    writer: &Writer,
    op: &str,
) -> Result<Arc<Value>, ApiError> {
    let gr = def.gr();
    if !new.is_object() {
        return Err(ApiError::bad_request("the object must be a JSON object"));
    }
    if !new["metadata"].is_object() {
        new["metadata"] = json!({});
    }
    for k in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old["metadata"].get(k) {
            Some(v) => new["metadata"][k] = v.clone(),
            None => {
                if let Some(m) = new["metadata"].as_object_mut() {
                    m.remove(k);
                }
            }
        }
    }
    new["apiVersion"] = old["apiVersion"].clone();
    new["kind"] = old["kind"].clone();
    if def.status_subresource {
        match part {
            Part::Main => match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    if let Some(m) = new.as_object_mut() {
                        m.remove("status");
                    }
                }
            },
            Part::Status => {
                let status = new.get("status").cloned();
                let managed = new["metadata"]["managedFields"].clone();
                new = (**old).clone();
                match status {
                    Some(s) => new["status"] = s,
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                new["metadata"]["managedFields"] = managed;
            }
        }
    }
    validate::default_workload(def, &mut new);
    if spec_changed(old, &new) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        new["metadata"]["generation"] = json!(generation + 1);
    }
    super::lifecycle::prune(def, &mut new);
    super::lifecycle::drop_disabled(store, def, Some(old), &mut new);
    validate::check(def, &new)?;
    crd_validation::check(def, Some(old), &new, part == Part::Status)?;
    super::lifecycle::check_update(def, old, &new)?;
    super::volumes::check_update(def, old, &new)?;
    if op != "Apply" {
        patch::record_update(
            Some(old),
            &mut new,
            &writer.manager,
            op,
            part.subresource(),
            &def.list_schema,
            &now_time(),
        );
    }
    // A deletion waiting only on finalizers finishes when the last one goes;
    // for a pod, only once its kubelet is done with it (grace 0).
    let finished = meta::is_terminating(&new)
        && new["metadata"]["finalizers"]
            .as_array()
            .is_none_or(|f| f.is_empty())
        && (gr != Gr::pods() || new["metadata"]["deletionGracePeriodSeconds"].as_i64() == Some(0));
    let (ns, name) = (
        meta::namespace(&new).to_string(),
        meta::name(&new).to_string(),
    );
    if let Some(user) = &writer.user {
        admission::admit(
            store,
            &admission::Request {
                operation: admission::Operation::Update,
                def,
                subresource: part.subresource().unwrap_or(""),
                namespace: &ns,
                name: &name,
                object: Some(&new),
                old_object: Some(old),
                user,
            },
        )?;
    }
    let written = store.replace(&gr, new)?;
    if finished {
        return Ok(remove_now(store, &gr, &ns, &name, false).unwrap_or(written));
    }
    if gr == Gr::crds() {
        register_crd(store, &written)?;
        return store
            .get(&gr, "", &name)
            .ok_or_else(|| ApiError::not_found(&gr, &name));
    }
    Ok(written)
}

/// Whether anything but metadata and status changed (the apiserver bumps
/// metadata.generation then).
fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

/// Deletes an object, gracefully for pods on a node: the pod gets a
/// deletionTimestamp and the simulated kubelet removes it later.
pub fn delete(
    sim: &SimState,
    def: &ResourceDef,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<Arc<Value>, ApiError> {
    let gr = def.gr();
    let mut store = sim.store();
    let obj = store
        .get(&gr, ns, name)
        .ok_or_else(|| ApiError::not_found(&gr, name))?;
    if let Some(uid) = &opts.uid
        && uid != meta::uid(&obj)
    {
        return Err(ApiError::conflict(
            &gr,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta::uid(&obj)
            ),
        ));
    }
    if let Some(rv) = &opts.resource_version
        && *rv != rv_of(&obj).to_string()
    {
        return Err(ApiError::conflict(
            &gr,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                rv_of(&obj)
            ),
        ));
    }
    if let Some(user) = &opts.user {
        admission::admit(
            &store,
            &admission::Request {
                operation: admission::Operation::Delete,
                def,
                subresource: "",
                namespace: ns,
                name,
                object: None,
                old_object: Some(&obj),
                user,
            },
        )?;
    }
    if gr == Gr::pods() {
        return delete_pod(&mut store, obj, opts);
    }
    let has_finalizers = obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if has_finalizers {
        if meta::is_terminating(&obj) {
            return Ok(obj);
        }
        let mut marked = (*obj).clone();
        marked["metadata"]["deletionTimestamp"] = json!(now_time());
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        return store.replace(&gr, marked);
    }
    remove_now(&mut store, &gr, ns, name, opts.orphan).ok_or_else(|| ApiError::not_found(&gr, name))
}

fn delete_pod(
    store: &mut Store,
    pod: Arc<Value>,
    opts: &DeleteOptions,
) -> Result<Arc<Value>, ApiError> {
    let gr = Gr::pods();
    let (ns, name) = (
        meta::namespace(&pod).to_string(),
        meta::name(&pod).to_string(),
    );
    let unscheduled = pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty();
    let terminal = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    let default_grace = pod["spec"]["terminationGracePeriodSeconds"]
        .as_i64()
        .unwrap_or(30);
    let mut grace = opts.grace_period_seconds.unwrap_or(default_grace).max(0);
    if unscheduled || terminal {
        grace = 0;
    }
    if let Some(current) = pod["metadata"]["deletionGracePeriodSeconds"].as_i64() {
        // A second delete may only shorten the grace period.
        if grace >= current {
            return Ok(pod);
        }
    }
    let has_finalizers = pod["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if grace == 0 && !has_finalizers {
        return remove_now(store, &gr, &ns, &name, opts.orphan)
            .ok_or_else(|| ApiError::not_found(&gr, &name));
    }
    let mut marked = (*pod).clone();
    marked["metadata"]["deletionTimestamp"] = json!(meta::time_after(grace));
    marked["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
    store.replace(&gr, marked)
}

/// Removes an object for good and collects what it owned (background
/// propagation), as the garbage collector does.
pub fn remove_now(
    store: &mut Store,
    gr: &Gr,
    ns: &str,
    name: &str,
    orphan: bool,
) -> Option<Arc<Value>> {
    let gone = store.remove(gr, ns, name)?;
    if *gr == Gr::namespaces() {
        let grs: Vec<Gr> = store
            .resources()
            .filter(|d| d.namespaced)
            .map(|d| d.gr())
            .collect();
        for g in grs {
            for o in store.list(&g, Some(name)) {
                store.remove(&g, name, meta::name(&o));
            }
        }
    }
    if *gr == Gr::crds()
        && let Ok(def) = ResourceDef::from_crd(&gone)
    {
        store.unregister(&def.gr());
    }
    if !orphan {
        collect_dependents(store, meta::uid(&gone));
    }
    Some(gone)
}

fn collect_dependents(store: &mut Store, owner_uid: &str) {
    if owner_uid.is_empty() {
        return;
    }
    for (g, o) in store.dependents(owner_uid) {
        if meta::is_terminating(&o) {
            continue;
        }
        if g == Gr::pods() {
            let _ = delete_pod(store, o, &DeleteOptions::default());
        } else {
            let (ns, name) = (meta::namespace(&o).to_string(), meta::name(&o).to_string());
            remove_now(store, &g, &ns, &name, false);
        }
    }
}

/// A merge patch of an object's status by a simulated component (kubelet,
/// controllers), the way they write status through the API. A failure is
/// logged: the component tries again on its next pass.
pub fn write_status(sim: &SimState, gr: &Gr, ns: &str, name: &str, manager: &str, status: Value) {
    let Some(def) = sim.store().resource(gr) else {
        return;
    };
    let writer = Writer {
        manager: manager.to_string(),
        force: false,
        user: None,
    };
    if let Err(e) = patch(
        sim,
        &def,
        ns,
        name,
        Part::Status,
        PatchType::Merge,
        &json!({"status": status}),
        &writer,
    ) {
        tracing::debug!(%name, %manager, error = %e.message, "simulated component could not write status");
    }
}
