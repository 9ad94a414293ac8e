//! The resources the simulated apiserver serves: the built-in ones the agent
//! and kubectl need, and custom resources added by creating a CRD.

use std::sync::Arc;

use serde_json::{Value, json};

use super::patch::ListSchema;

/// Group and plural resource name: the identity of a resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Gr {
    pub group: String,
    pub plural: String,
}

impl Gr {
    pub fn new(group: &str, plural: &str) -> Self {
        Gr {
            group: group.to_string(),
            plural: plural.to_string(),
        }
    }
    pub fn pods() -> Self {
        Gr::new("", "pods")
    }
    /// Whether this is the core pods resource.
    pub fn is_pods(&self) -> bool {
        self.group.is_empty() && self.plural == "pods"
    }
    pub fn nodes() -> Self {
        Gr::new("", "nodes")
    }
    pub fn namespaces() -> Self {
        Gr::new("", "namespaces")
    }
    pub fn pdbs() -> Self {
        Gr::new("policy", "poddisruptionbudgets")
    }
    pub fn daemonsets() -> Self {
        Gr::new("apps", "daemonsets")
    }
    pub fn replicasets() -> Self {
        Gr::new("apps", "replicasets")
    }
    pub fn statefulsets() -> Self {
        Gr::new("apps", "statefulsets")
    }
    pub fn deployments() -> Self {
        Gr::new("apps", "deployments")
    }
    pub fn pvcs() -> Self {
        Gr::new("", "persistentvolumeclaims")
    }
    pub fn pvs() -> Self {
        Gr::new("", "persistentvolumes")
    }
    pub fn volume_attachments() -> Self {
        Gr::new(super::volumes::STORAGE_GROUP, "volumeattachments")
    }
    pub fn crds() -> Self {
        Gr::new("apiextensions.k8s.io", "customresourcedefinitions")
    }
}

impl std::fmt::Display for Gr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.plural)
        } else {
            write!(f, "{}.{}", self.plural, self.group)
        }
    }
}

/// An additional printer column of a CRD (JSONPath into the object).
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub priority: i64,
    pub description: String,
}

/// Everything the server needs to know to serve one resource.
#[derive(Debug, Clone)]
pub struct ResourceDef {
    pub group: String,
    /// Served versions; the first is the preferred one.
    pub versions: Vec<String>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub status_subresource: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub list_schema: Arc<ListSchema>,
    pub printer_columns: Vec<PrinterColumn>,
    /// Set for resources that come from a CRD.
    pub custom: bool,
}

impl ResourceDef {
    pub fn gr(&self) -> Gr {
        Gr::new(&self.group, &self.plural)
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    pub fn preferred_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }

    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status: bool,
        short: &[&str],
    ) -> Self {
        ResourceDef {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            status_subresource: status,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            // The "all" category as the API server has it, for `kubectl get all`.
            categories: if [
                "pods",
                "services",
                "daemonsets",
                "deployments",
                "replicasets",
                "statefulsets",
            ]
            .contains(&plural)
            {
                vec!["all".into()]
            } else {
                vec![]
            },
            list_schema: Arc::new(ListSchema::builtin(group, kind)),
            printer_columns: vec![],
            custom: false,
        }
    }

    /// The resource a CustomResourceDefinition object describes, or a reason
    /// why it cannot be served.
    pub fn from_crd(crd: &Value) -> Result<ResourceDef, String> {
        let spec = &crd["spec"];
        let group = spec["group"].as_str().ok_or("spec.group is required")?;
        let names = &spec["names"];
        let plural = names["plural"]
            .as_str()
            .ok_or("spec.names.plural is required")?;
        let kind = names["kind"]
            .as_str()
            .ok_or("spec.names.kind is required")?;
        let singular = names["singular"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| kind.to_lowercase());
        let namespaced = match spec["scope"].as_str() {
            Some("Namespaced") => true,
            Some("Cluster") => false,
            other => {
                return Err(format!(
                    "spec.scope must be Namespaced or Cluster, not {other:?}"
                ));
            }
        };
        let versions = spec["versions"]
            .as_array()
            .filter(|v| !v.is_empty())
            .ok_or("spec.versions must list at least one version")?;
        let mut served = Vec::new();
        let mut storage: Option<&Value> = None;
        for v in versions {
            let name = v["name"]
                .as_str()
                .ok_or("spec.versions[].name is required")?;
            if v["served"].as_bool().unwrap_or(true) {
                served.push(name.to_string());
            }
            if v["storage"].as_bool() == Some(true) || storage.is_none() {
                storage = Some(v);
            }
        }
        if served.is_empty() {
            return Err("no version of the CRD is served".into());
        }
        let storage = storage.ok_or("no storage version")?;
        let printer_columns = storage["additionalPrinterColumns"]
            .as_array()
            .map(|cols| {
                cols.iter()
                    .filter_map(|c| {
                        Some(PrinterColumn {
                            name: c["name"].as_str()?.to_string(),
                            type_: c["type"].as_str().unwrap_or("string").to_string(),
                            json_path: c["jsonPath"].as_str()?.to_string(),
                            priority: c["priority"].as_i64().unwrap_or(0),
                            description: c["description"].as_str().unwrap_or("").to_string(),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(ResourceDef {
            group: group.into(),
            versions: served,
            plural: plural.into(),
            singular,
            kind: kind.into(),
            namespaced,
            status_subresource: storage["subresources"]["status"].is_object(),
            short_names: str_list(&names["shortNames"]),
            categories: str_list(&names["categories"]),
            list_schema: Arc::new(ListSchema::from_openapi_v3(
                &storage["schema"]["openAPIV3Schema"],
            )),
            printer_columns,
            custom: true,
        })
    }

    /// This resource as an entry of an APIResourceList.
    pub fn discovery_entries(&self) -> Vec<Value> {
        let mut verbs = vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        if self.plural == "events" {
            verbs.retain(|v| *v != "deletecollection");
        }
        let mut out = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": verbs,
            "shortNames": self.short_names,
            "categories": self.categories,
        })];
        if self.status_subresource {
            out.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if super::scale::serves(self) {
            out.push(json!({
                "name": format!("{}/scale", self.plural),
                "singularName": "",
                "namespaced": true,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
        if self.plural == "pods" && self.group.is_empty() {
            out.push(json!({
                "name": "pods/eviction",
                "singularName": "",
                "namespaced": true,
                "group": "policy",
                "version": "v1",
                "kind": "Eviction",
                "verbs": ["create"],
            }));
        }
        out
    }
}

fn str_list(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The built-in resources of the simulated cluster.
pub fn builtins() -> Vec<ResourceDef> {
    let d = ResourceDef::builtin;
    let mut defs = vec![
        d("", "v1", "nodes", "Node", false, true, &["no"]),
        d("", "v1", "pods", "Pod", true, true, &["po"]),
        d("", "v1", "namespaces", "Namespace", false, true, &["ns"]),
        d("", "v1", "events", "Event", true, false, &["ev"]),
        d(
            "",
            "v1",
            "serviceaccounts",
            "ServiceAccount",
            true,
            false,
            &["sa"],
        ),
        d("", "v1", "configmaps", "ConfigMap", true, false, &["cm"]),
        d("", "v1", "secrets", "Secret", true, false, &[]),
        d("", "v1", "services", "Service", true, true, &["svc"]),
        d("apps", "v1", "daemonsets", "DaemonSet", true, true, &["ds"]),
        d(
            "apps",
            "v1",
            "replicasets",
            "ReplicaSet",
            true,
            true,
            &["rs"],
        ),
        d(
            "apps",
            "v1",
            "deployments",
            "Deployment",
            true,
            true,
            &["deploy"],
        ),
        d(
            "apps",
            "v1",
            "statefulsets",
            "StatefulSet",
            true,
            true,
            &["sts"],
        ),
        d(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            true,
            &["pdb"],
        ),
        d(
            "coordination.k8s.io",
            "v1",
            "leases",
            "Lease",
            true,
            false,
            &[],
        ),
        // No short name: "ev" is the core Event's, and kubectl warns when
        // two resources share one.
        d("events.k8s.io", "v1", "events", "Event", true, false, &[]),
        d(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "PriorityClass",
            false,
            false,
            &["pc"],
        ),
        d(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "ClusterRole",
            false,
            false,
            &[],
        ),
        d(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            false,
            &[],
        ),
        d(
            "rbac.authorization.k8s.io",
            "v1",
            "roles",
            "Role",
            true,
            false,
            &[],
        ),
        d(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "RoleBinding",
            true,
            false,
            &[],
        ),
        d(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicies",
            "ValidatingAdmissionPolicy",
            false,
            true,
            &[],
        ),
        d(
            "admissionregistration.k8s.io",
            "v1",
            "validatingadmissionpolicybindings",
            "ValidatingAdmissionPolicyBinding",
            false,
            false,
            &[],
        ),
        d(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
            &["crd", "crds"],
        ),
    ];
    defs.extend(super::volumes::resources());
    defs
}
