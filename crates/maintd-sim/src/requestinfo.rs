//! What a request asks for, read from its method, path and query the way
//! the API server's request-info resolver reads them, before it knows
//! whether the resource exists: that is what authorization decides on.
//!
//! `/api/v1/...` and `/apis/<group>/<version>/...` are resource requests;
//! `namespaces/<ns>/` scopes them (except the namespace's own `status` and
//! `finalize`); the parts after the resource are the name and the
//! subresource. Any other path is a non-resource request whose verb is the
//! lower-cased method.

use std::collections::HashMap;

use super::rbac::{Attributes, ResourceAttributes, name_from_field_selector, verb_of};

/// The authorization attributes of a request.
pub fn attributes(
    method: &http::Method,
    path: &str,
    query: &HashMap<String, String>,
) -> Attributes {
    let non_resource = || Attributes {
        verb: method.as_str().to_ascii_lowercase(),
        resource: None,
        path: path.to_string(),
    };
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
        _ => return non_resource(),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..]
            if !tail.is_empty() && !matches!(tail[0], "status" | "finalize") =>
        {
            (*ns, tail)
        }
        ["namespaces", ns, ..] => (*ns, rest),
        _ => ("", rest),
    };
    let resource = rest.first().copied().unwrap_or_default();
    let mut name = rest.get(1).copied().unwrap_or_default().to_string();
    let subresource = rest.get(2).copied().unwrap_or_default();
    let watch = matches!(query.get("watch").map(String::as_str), Some("1" | "true"));
    // Only a request for a collection becomes list or watch; a GET of a
    // named object is `get` whatever its query.
    let verb = verb_of(method, !name.is_empty(), watch && name.is_empty());
    if name.is_empty()
        && matches!(verb, "list" | "watch")
        && let Some(n) = query
            .get("fieldSelector")
            .and_then(|s| name_from_field_selector(s))
    {
        name = n.to_string();
    }
    Attributes {
        verb: verb.to_string(),
        resource: Some(ResourceAttributes {
            group: group.to_string(),
            resource: resource.to_string(),
            subresource: subresource.to_string(),
            namespace: namespace.to_string(),
            name,
        }),
        path: path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(method: &str, uri: &str) -> (String, String, String, String, String, String) {
        let (path, q) = uri.split_once('?').unwrap_or((uri, ""));
        let query: HashMap<String, String> = q
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_string(), v.to_string())
            })
            .collect();
        let a = attributes(&method.parse().unwrap(), path, &query);
        let r = a.resource.unwrap_or(ResourceAttributes {
            group: "-".into(),
            resource: "-".into(),
            subresource: String::new(),
            namespace: String::new(),
            name: String::new(),
        });
        let full = r.full_resource();
        (a.verb, r.group, full, r.namespace, r.name, a.path)
    }

    #[test]
    fn verbs_resources_and_names_are_read_as_the_api_server_reads_them() {
        // (method, uri) → (verb, group, resource, namespace, name)
        let cases = [
            ("GET", "/api/v1/nodes/a", ("get", "", "nodes", "", "a")),
            ("GET", "/api/v1/nodes", ("list", "", "nodes", "", "")),
            (
                "GET",
                "/api/v1/nodes?watch=true",
                ("watch", "", "nodes", "", ""),
            ),
            (
                "GET",
                "/api/v1/nodes?watch=1&fieldSelector=metadata.name=a",
                ("watch", "", "nodes", "", "a"),
            ),
            (
                "GET",
                "/api/v1/nodes?fieldSelector=metadata.name==a,spec.unschedulable=true",
                ("list", "", "nodes", "", "a"),
            ),
            (
                "GET",
                "/api/v1/nodes/a?watch=true",
                ("get", "", "nodes", "", "a"),
            ),
            (
                "PATCH",
                "/api/v1/nodes/a/status",
                ("patch", "", "nodes/status", "", "a"),
            ),
            (
                "POST",
                "/api/v1/namespaces/d/pods/p/eviction",
                ("create", "", "pods/eviction", "d", "p"),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/d/pods/p",
                ("delete", "", "pods", "d", "p"),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/d/pods",
                ("deletecollection", "", "pods", "d", ""),
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/m/leases/l",
                ("update", "coordination.k8s.io", "leases", "m", "l"),
            ),
            (
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                ("create", "events.k8s.io", "events", "default", ""),
            ),
            (
                "PATCH",
                "/apis/maintd.io/v1alpha1/nodedrains/n1",
                ("patch", "maintd.io", "nodedrains", "", "n1"),
            ),
            // A namespace's own requests are in that namespace (a Role there
            // can grant them).
            (
                "GET",
                "/api/v1/namespaces/m",
                ("get", "", "namespaces", "m", "m"),
            ),
            (
                "PUT",
                "/api/v1/namespaces/m/finalize",
                ("update", "", "namespaces/finalize", "m", "m"),
            ),
            (
                "GET",
                "/api/v1/namespaces",
                ("list", "", "namespaces", "", ""),
            ),
        ];
        for (method, uri, (verb, group, resource, ns, name)) in cases {
            let got = attrs(method, uri);
            assert_eq!(
                (
                    got.0.as_str(),
                    got.1.as_str(),
                    got.2.as_str(),
                    got.3.as_str(),
                    got.4.as_str()
                ),
                (verb, group, resource, ns, name),
                "{method} {uri}"
            );
        }
    }

    #[test]
    fn other_paths_are_non_resource_requests_with_the_method_as_verb() {
        for (method, uri) in [
            ("GET", "/api"),
            ("GET", "/api/v1"),
            ("GET", "/apis/maintd.io/v1alpha1"),
            ("GET", "/version"),
            ("POST", "/openapi/v3"),
        ] {
            let got = attrs(method, uri);
            assert_eq!(got.1, "-", "{method} {uri} is not a resource request");
            assert_eq!(got.0, method.to_ascii_lowercase());
            assert_eq!(got.5, uri);
        }
    }
}
