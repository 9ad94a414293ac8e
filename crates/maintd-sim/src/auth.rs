//! Who makes a request: bearer tokens the simulated cluster issues, read
//! into the user the API server's authenticators would name.
//!
//! Like the API server: a token the cluster did not issue is 401, and a
//! ServiceAccount token stops working when its ServiceAccount, or the Node
//! it is bound to, is deleted. The admin token stands for a kubeadm
//! admin.conf: group `system:masters`, which authorization lets through
//! whatever the roles say.
//!
//! Differences: the simulator speaks plain HTTP, over which kubectl sends
//! no credentials at all; so a request without any is taken as the API
//! servers before 1.20 took one on their insecure port: user
//! `system:unsecured` in `system:masters`. Every client that sends a token
//! (the agent always does) is the user its token names. Tokens are opaque
//! random strings, not signed JWTs, and never expire.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use http::HeaderMap;
use serde_json::{Value, json};

use super::errors::ApiError;
use super::rbac::{Attributes, ResourceAttributes};
use super::resources::Gr;
use super::store::Store;

/// The extra key carrying the node a ServiceAccount token is bound to (a
/// pod's projected token names its pod's node; a Node-bound token its Node).
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";
/// The extra key carrying that node's uid.
pub const NODE_UID_EXTRA: &str = "authentication.kubernetes.io/node-uid";
/// The extra key naming the token itself (its JWT ID).
pub const CREDENTIAL_ID_EXTRA: &str = "authentication.kubernetes.io/credential-id";

/// The group whose members every authorizer lets through.
pub const MASTERS: &str = "system:masters";

/// A user as the authenticators name it, and as admission sees it in
/// `request.userInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// Who a request without credentials is: the insecure port's user.
    pub fn unsecured() -> Self {
        UserInfo {
            username: "system:unsecured".into(),
            groups: vec![MASTERS.into(), "system:authenticated".into()],
            ..UserInfo::default()
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    /// The ServiceAccount this user is, as (namespace, name).
    pub fn service_account(&self) -> Option<(&str, &str)> {
        let rest = self.username.strip_prefix("system:serviceaccount:")?;
        rest.split_once(':')
    }

    /// `request.userInfo` of an admission request: `extra` left out when
    /// empty, as the API server serializes it.
    pub fn to_json(&self) -> Value {
        let mut v = json!({"username": self.username});
        if !self.groups.is_empty() {
            v["groups"] = json!(self.groups);
        }
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}

/// What a token was issued for.
#[derive(Debug, Clone)]
enum Credential {
    Admin,
    ServiceAccount {
        namespace: String,
        name: String,
        /// The Node the token is bound to (its name).
        node: Option<String>,
        id: String,
    },
}

/// The tokens a simulated cluster has issued.
#[derive(Debug, Default)]
pub struct Tokens {
    issued: Mutex<HashMap<String, Credential>>,
}

fn random_token() -> String {
    format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    )
}

impl Tokens {
    fn issue(&self, credential: Credential) -> String {
        let token = random_token();
        self.issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.clone(), credential);
        token
    }

    /// A token with the rights of a cluster admin (`system:masters`).
    pub fn issue_admin(&self) -> String {
        self.issue(Credential::Admin)
    }

    /// A token for ServiceAccount `namespace`/`name`, bound to `node` if
    /// given: its user carries the node's name and uid in `extra`, as a
    /// pod's projected token does from Kubernetes 1.30 (the
    /// ServiceAccountTokenPodNodeInfo feature, GA in 1.32).
    pub fn issue_service_account(&self, namespace: &str, name: &str, node: Option<&str>) -> String {
        self.issue(Credential::ServiceAccount {
            namespace: namespace.into(),
            name: name.into(),
            node: node.map(str::to_string),
            id: format!("JTI={}", random_token()),
        })
    }

    /// The user a request's `Authorization` header names, read against the
    /// objects as they are now.
    pub fn authenticate(&self, headers: &HeaderMap, store: &Store) -> Result<UserInfo, ApiError> {
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Ok(UserInfo::unsecured());
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(ApiError::unauthorized)?;
        let credential = self
            .issued
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()
            .ok_or_else(ApiError::unauthorized)?;
        match credential {
            Credential::Admin => Ok(UserInfo {
                username: "kubernetes-admin".into(),
                groups: vec![MASTERS.into(), "system:authenticated".into()],
                ..UserInfo::default()
            }),
            Credential::ServiceAccount {
                namespace,
                name,
                node,
                id,
            } => {
                let account = store
                    .get(&Gr::new("", "serviceaccounts"), &namespace, &name)
                    .ok_or_else(ApiError::unauthorized)?;
                let mut extra = BTreeMap::from([(CREDENTIAL_ID_EXTRA.to_string(), vec![id])]);
                if let Some(node) = node {
                    let bound = store
                        .get(&Gr::nodes(), "", &node)
                        .ok_or_else(ApiError::unauthorized)?;
                    let uid = bound["metadata"]["uid"].as_str().unwrap_or_default();
                    extra.insert(NODE_NAME_EXTRA.into(), vec![node.clone()]);
                    extra.insert(NODE_UID_EXTRA.into(), vec![uid.to_string()]);
                }
                Ok(UserInfo {
                    username: format!("system:serviceaccount:{namespace}:{name}"),
                    uid: account["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .into(),
                    groups: vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{namespace}"),
                        "system:authenticated".into(),
                    ],
                    extra,
                })
            }
        }
    }
}

/// The user a request acts as: `requester` itself, or the user its
/// `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and
/// `Impersonate-Extra-<key>` headers name, each checked as the API server
/// checks it with `may` (verb `impersonate` on `users`, `serviceaccounts`,
/// `groups`, `uids` and `userextras/<key>`). Like the API server, an
/// impersonated ServiceAccount gets its `system:serviceaccounts` groups,
/// and every impersonated user `system:authenticated`; extra keys arrive
/// percent-encoded and are read lower-cased.
pub fn impersonate(
    headers: &HeaderMap,
    requester: UserInfo,
    may: impl Fn(&UserInfo, &Attributes) -> Result<(), ApiError>,
) -> Result<UserInfo, ApiError> {
    let Some(username) = headers.get("impersonate-user") else {
        let impersonating = headers
            .keys()
            .any(|k| k.as_str().starts_with("impersonate-"));
        if impersonating {
            return Err(ApiError::internal(
                "requested impersonation without a user (Impersonate-User)",
            ));
        }
        return Ok(requester);
    };
    let text = |v: &http::HeaderValue| {
        v.to_str()
            .map(str::to_string)
            .map_err(|_| ApiError::bad_request("impersonation headers must be ASCII"))
    };
    let check = |group: &str, resource: &str, namespace: &str, name: &str| {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        may(
            &requester,
            &Attributes {
                verb: "impersonate".into(),
                resource: Some(ResourceAttributes {
                    group: group.into(),
                    resource: resource.into(),
                    subresource: subresource.into(),
                    namespace: namespace.into(),
                    name: name.into(),
                }),
                path: String::new(),
            },
        )
    };
    let mut user = UserInfo {
        username: text(username)?,
        ..UserInfo::default()
    };
    match user.service_account() {
        Some((ns, name)) => {
            check("", "serviceaccounts", ns, name)?;
            let ns = ns.to_string();
            user.groups.push("system:serviceaccounts".into());
            user.groups.push(format!("system:serviceaccounts:{ns}"));
        }
        None => check("", "users", "", &user.username)?,
    }
    for value in headers.get_all("impersonate-group") {
        let group = text(value)?;
        check("", "groups", "", &group)?;
        user.groups.push(group);
    }
    if let Some(uid) = headers.get("impersonate-uid") {
        user.uid = text(uid)?;
        check("authentication.k8s.io", "uids", "", &user.uid)?;
    }
    for (key, value) in headers {
        let Some(encoded) = key.as_str().strip_prefix("impersonate-extra-") else {
            continue;
        };
        let key = percent_decode(encoded).to_lowercase();
        let value = text(value)?;
        check(
            "authentication.k8s.io",
            &format!("userextras/{key}"),
            "",
            &value,
        )?;
        user.extra.entry(key).or_default().push(value);
    }
    if user.username != "system:anonymous" && !user.in_group("system:authenticated") {
        user.groups.push("system:authenticated".into());
    }
    Ok(user)
}

/// `%2F` and the like decoded (as the API server decodes an
/// `Impersonate-Extra-` header's key); anything malformed kept as it is.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// The tokens of one cluster, shared.
pub type SharedTokens = Arc<Tokens>;
