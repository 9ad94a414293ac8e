//! Authorization as the API server's RBAC authorizer decides it: from the
//! ClusterRoles, Roles and their bindings the cluster holds, for the verb
//! the request means (see [`verb_of`]).
//!
//! Like the API server: `system:masters` may do anything; every
//! authenticated user may read discovery and `/version` (the default
//! `system:discovery` and `system:public-info-viewer` roles, built in here,
//! not stored as objects); anything no rule grants is 403 with the API
//! server's words. Differences: no aggregated ClusterRoles, no Node or
//! webhook authorizer, and no escalation checks on writes to roles.

use serde_json::Value;

use super::auth::{MASTERS, UserInfo};
use super::errors::ApiError;
use super::meta;
use super::resources::Gr;
use super::store::Store;

/// What a request asks to do, as the authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    /// None for a request to a path that names no resource (discovery,
    /// `/version`).
    pub resource: Option<ResourceAttributes>,
    pub path: String,
}

/// The resource part of [`Attributes`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceAttributes {
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

impl ResourceAttributes {
    /// `pods`, or `pods/eviction` for a subresource: how rules name it.
    pub fn full_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The verb a request means, as the API server reads it from the method,
/// whether it names an object, and `?watch`: GET of one object `get`, of a
/// collection `list`, either with `watch=true|1` `watch`; POST `create`;
/// PUT `update`; PATCH `patch`; DELETE of one object `delete`, of a
/// collection `deletecollection`.
pub fn verb_of(method: &http::Method, named: bool, watch: bool) -> &'static str {
    match *method {
        http::Method::GET | http::Method::HEAD if watch => "watch",
        http::Method::GET | http::Method::HEAD if named => "get",
        http::Method::GET | http::Method::HEAD => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if named => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "",
    }
}

/// The object name a list or watch is limited to by `fieldSelector
/// metadata.name=X`, which the API server authorizes as a request for X
/// (so a rule's `resourceNames` can allow it).
pub fn name_from_field_selector(selector: &str) -> Option<&str> {
    let mut found = None;
    for term in selector.split(',') {
        let term = term.trim();
        let value = term
            .strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="));
        if let Some(v) = value {
            found = Some(v);
        }
    }
    found
}

/// Discovery and health paths every authenticated user may read (the
/// default `system:discovery` and `system:public-info-viewer` roles).
const DISCOVERY: &[&str] = &[
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/openapi",
    "/openapi/*",
    "/version",
    "/version/",
    "/healthz",
    "/livez",
    "/readyz",
];

/// Whether `user` may do what `attrs` say, or the API server's 403.
pub fn authorize(store: &Store, user: &UserInfo, attrs: &Attributes) -> Result<(), ApiError> {
    if user.in_group(MASTERS) || allowed(store, user, attrs) {
        return Ok(());
    }
    Err(forbidden(user, attrs))
}

fn allowed(store: &Store, user: &UserInfo, attrs: &Attributes) -> bool {
    let Some(res) = &attrs.resource else {
        if attrs.verb == "get"
            && user.in_group("system:authenticated")
            && DISCOVERY.iter().any(|p| url_matches(p, &attrs.path))
        {
            return true;
        }
        return rules_for(store, user, None)
            .iter()
            .any(|r| non_resource_rule_allows(r, attrs));
    };
    let namespace = (!res.namespace.is_empty()).then_some(res.namespace.as_str());
    rules_for(store, user, namespace)
        .iter()
        .any(|r| resource_rule_allows(r, &attrs.verb, res))
}

/// The rules of every role bound to `user`: cluster-wide through
/// ClusterRoleBindings, and in `namespace` through its RoleBindings.
fn rules_for(store: &Store, user: &UserInfo, namespace: Option<&str>) -> Vec<Value> {
    let rbac = |plural: &str| Gr::new("rbac.authorization.k8s.io", plural);
    let mut rules = Vec::new();
    let mut add_role = |kind: &str, name: &str, ns: &str| {
        let role = match kind {
            "ClusterRole" => store.get(&rbac("clusterroles"), "", name),
            "Role" => store.get(&rbac("roles"), ns, name),
            _ => None,
        };
        if let Some(role) = role {
            rules.extend(role["rules"].as_array().cloned().unwrap_or_default());
        }
    };
    for b in store.list(&rbac("clusterrolebindings"), None) {
        if binds(&b, user) {
            add_role(
                "ClusterRole",
                b["roleRef"]["name"].as_str().unwrap_or(""),
                "",
            );
        }
    }
    if let Some(ns) = namespace {
        for b in store.list(&rbac("rolebindings"), Some(ns)) {
            if binds(&b, user) {
                let kind = b["roleRef"]["kind"].as_str().unwrap_or("");
                add_role(kind, b["roleRef"]["name"].as_str().unwrap_or(""), ns);
            }
        }
    }
    rules
}

/// Whether a binding names `user` among its subjects.
fn binds(binding: &Value, user: &UserInfo) -> bool {
    let binding_ns = meta::namespace(binding);
    binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| {
            let name = s["name"].as_str().unwrap_or("");
            match s["kind"].as_str().unwrap_or("") {
                "User" => user.username == name,
                "Group" => user.in_group(name),
                "ServiceAccount" => {
                    // A subject without a namespace means the binding's own
                    // (RoleBindings only; the API refuses it elsewhere).
                    let ns = s["namespace"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(binding_ns);
                    user.username == format!("system:serviceaccount:{ns}:{name}")
                }
                _ => false,
            }
        })
}

fn strings(rule: &Value, field: &str) -> Vec<String> {
    rule[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

fn has_or_star(list: &[String], want: &str) -> bool {
    list.iter().any(|v| v == "*" || v == want)
}

fn resource_rule_allows(rule: &Value, verb: &str, res: &ResourceAttributes) -> bool {
    if !has_or_star(&strings(rule, "verbs"), verb)
        || !has_or_star(&strings(rule, "apiGroups"), &res.group)
    {
        return false;
    }
    let full = res.full_resource();
    let resource_ok = strings(rule, "resources").iter().any(|r| {
        r == "*"
            || *r == full
            || (!res.subresource.is_empty()
                && r.strip_prefix("*/") == Some(res.subresource.as_str()))
    });
    let names = strings(rule, "resourceNames");
    resource_ok && (names.is_empty() || (!res.name.is_empty() && names.contains(&res.name)))
}

fn url_matches(pattern: &str, path: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => pattern == path,
    }
}

fn non_resource_rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    has_or_star(&strings(rule, "verbs"), &attrs.verb)
        && strings(rule, "nonResourceURLs")
            .iter()
            .any(|p| url_matches(p, &attrs.path))
}

/// The API server's 403 for a request no rule allows.
pub fn forbidden(user: &UserInfo, attrs: &Attributes) -> ApiError {
    let who = &user.username;
    let verb = &attrs.verb;
    let Some(res) = &attrs.resource else {
        return ApiError::forbidden_message(format!(
            "forbidden: User {who:?} cannot {verb} path {:?}",
            attrs.path
        ));
    };
    let scope = if res.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", res.namespace)
    };
    let why = format!(
        "User {who:?} cannot {verb} resource {:?} in API group {:?} {scope}",
        res.full_resource(),
        res.group
    );
    ApiError::forbidden(&Gr::new(&res.group, &res.resource), &res.name, &why)
}

#[cfg(test)]
mod tests;
