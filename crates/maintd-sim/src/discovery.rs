//! Discovery documents: `/version`, `/api`, `/apis`, and the resource lists
//! of each group version. kubectl asks for aggregated discovery first; the
//! simulator answers with the legacy documents, which kubectl accepts as a
//! fallback (their content type says which one it got).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::store::Store;

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-maintd-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

pub fn core_versions(server: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    })
}

/// group name → served versions (preferred first), for the named groups.
fn groups(store: &Store) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for def in store.resources() {
        if def.group.is_empty() {
            continue;
        }
        let versions = out.entry(def.group.clone()).or_default();
        for v in &def.versions {
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
    }
    // policy/v1 is also where the Eviction subresource lives.
    out.entry("policy".into())
        .or_insert_with(|| vec!["v1".into()]);
    out
}

fn group_doc(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

pub fn group_list(store: &Store) -> Value {
    let groups: Vec<Value> = groups(store)
        .iter()
        .map(|(n, vs)| group_doc(n, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(store: &Store, name: &str) -> Option<Value> {
    let groups = groups(store);
    let vs = groups.get(name)?;
    let mut doc = group_doc(name, vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// The APIResourceList of one group version, or None if nothing is served
/// there.
pub fn resource_list(store: &Store, group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = store
        .resources()
        .filter(|d| d.group == group && d.versions.iter().any(|v| v == version))
        .flat_map(|d| d.discovery_entries())
        .collect();
    if resources.is_empty() && !(group == "policy" && version == "v1") {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }))
}

/// The OpenAPI v3 root: one document per group version.
pub fn openapi_root(store: &Store) -> Value {
    let mut paths = serde_json::Map::new();
    for def in store.resources() {
        for v in &def.versions {
            let key = if def.group.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{}/{v}", def.group)
            };
            let url = format!("/openapi/v3/{key}?hash={}", store.current_rv());
            paths.insert(key, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

/// The OpenAPI v3 document of one group version. It describes the paths and
/// operations (kubectl reads them to learn that the server validates fields
/// itself), not the object schemas: the simulator has none for built-in
/// kinds, so kubectl uses its compiled-in knowledge of them.
pub fn openapi_group_version(store: &Store, group: &str, version: &str) -> Option<Value> {
    let mut paths = serde_json::Map::new();
    for def in store
        .resources()
        .filter(|d| d.group == group && d.versions.iter().any(|v| v == version))
    {
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let item = if def.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", def.plural)
        } else {
            format!("{prefix}/{}/{{name}}", def.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": def.kind});
        let params = json!([
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
        ]);
        let op = |id: &str| {
            json!({
                "operationId": format!("{id}{}", def.kind),
                "x-kubernetes-group-version-kind": gvk,
                "parameters": params,
                "responses": {"200": {"description": "OK"}},
            })
        };
        paths.insert(
            item,
            json!({"get": op("read"), "put": op("replace"), "patch": op("patch"), "delete": op("delete")}),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (maintd simulated cluster)", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}
