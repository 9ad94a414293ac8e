//! Validating admission policies (`admissionregistration.k8s.io/v1`), as
//! the API server evaluates them on a client's write: every
//! ValidatingAdmissionPolicyBinding whose policy matches the request runs
//! the policy's match conditions, variables and validations in CEL over
//! `object`, `oldObject`, `request`, `namespaceObject` and `variables`.
//!
//! Like the API server: `matchConstraints` (resource rules with
//! operations, excluded rules, namespace and object selectors) and the
//! binding's `matchResources` decide whether a policy applies; a match
//! condition that is false skips it; a validation that is false denies
//! the request with its `message` (or `messageExpression`, or "failed
//! expression: ...") and its `reason` (default `Invalid`, 422; `Forbidden`
//! 403); an expression that fails denies the request under
//! `failurePolicy: Fail` (the default) and is ignored under `Ignore`.
//! Variables are evaluated only for the validations that read them, so a
//! variable that fails matters only where it is used.
//!
//! Differences: `params` (paramKind) and the `authorizer` library are not
//! simulated (a policy with `paramKind` is refused when it is created);
//! only the `Deny` action has an effect (`Warn` and `Audit` are accepted
//! and do nothing); see [`cel`] for the expression language.

pub mod cel;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ::cel::{Context, Value as CelValue};
use serde_json::{Value, json};

use super::auth::UserInfo;
use super::errors::ApiError;
use super::meta;
use super::resources::{Gr, ResourceDef};
use super::select::selector_object_matches;
use super::store::{Store, rv_of};
use cel::Expression;

/// The API group of admission policies.
pub const GROUP: &str = "admissionregistration.k8s.io";

pub fn policies() -> Gr {
    Gr::new(GROUP, "validatingadmissionpolicies")
}

pub fn bindings() -> Gr {
    Gr::new(GROUP, "validatingadmissionpolicybindings")
}

/// The admission operation of a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// One write, as admission sees it.
pub struct Request<'a> {
    pub operation: Operation,
    pub def: &'a ResourceDef,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The object as it would be stored (None on DELETE).
    pub object: Option<&'a Value>,
    /// The object as stored now (None on CREATE).
    pub old_object: Option<&'a Value>,
    pub user: &'a UserInfo,
}

impl Request<'_> {
    fn version(&self) -> &str {
        self.def.preferred_version()
    }

    /// `request` as a policy reads it. Empty strings are left out, as the
    /// API server's serialization leaves them out: reading one needs `has()`.
    fn to_json(&self) -> Value {
        let gvr = json!({"group": self.def.group, "version": self.version(), "resource": self.def.plural});
        let gvk =
            json!({"group": self.def.group, "version": self.version(), "kind": self.def.kind});
        let mut r = json!({
            "kind": gvk, "requestKind": gvk,
            "resource": gvr, "requestResource": gvr,
            "operation": self.operation.as_str(),
            "userInfo": self.user.to_json(),
            "dryRun": false,
        });
        for (key, value) in [
            ("subResource", self.subresource),
            ("requestSubResource", self.subresource),
            ("name", self.name),
            ("namespace", self.namespace),
        ] {
            if !value.is_empty() {
                r[key] = json!(value);
            }
        }
        r
    }
}

/// A policy compiled once per resourceVersion.
struct Compiled {
    match_conditions: Vec<(String, Expression)>,
    variables: Vec<(String, Expression)>,
    validations: Vec<Validation>,
}

struct Validation {
    expression: Expression,
    message: Option<String>,
    message_expression: Option<Expression>,
    reason: String,
}

impl Compiled {
    fn of(policy: &Value) -> Compiled {
        let spec = &policy["spec"];
        let named = |field: &str| -> Vec<(String, Expression)> {
            spec[field]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or_default().to_string(),
                        Expression::compile(c["expression"].as_str().unwrap_or_default()),
                    )
                })
                .collect()
        };
        let validations = spec["validations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| Validation {
                expression: Expression::compile(v["expression"].as_str().unwrap_or_default()),
                message: v["message"].as_str().map(str::to_string),
                message_expression: v["messageExpression"].as_str().map(Expression::compile),
                reason: v["reason"].as_str().unwrap_or("Invalid").to_string(),
            })
            .collect();
        Compiled {
            match_conditions: named("matchConditions"),
            variables: named("variables"),
            validations,
        }
    }
}

/// Compiled policies by uid, with the resourceVersion each was compiled at.
type Cache = Mutex<HashMap<String, (u64, Arc<Compiled>)>>;

/// A policy compiled, for the resourceVersion it has; the cache is shared
/// by every simulated cluster of the process (uids are unique).
fn compiled(policy: &Value) -> Arc<Compiled> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let (uid, rv) = (meta::uid(policy).to_string(), rv_of(policy));
    if let Some((at, c)) = cache.get(&uid)
        && *at == rv
    {
        return c.clone();
    }
    if cache.len() > 256 {
        cache.clear();
    }
    let c = Arc::new(Compiled::of(policy));
    cache.insert(uid, (rv, c.clone()));
    c
}

/// What a policy refused, before it is worded as the API server's error.
struct Denial {
    message: String,
    reason: String,
}

/// Runs every bound policy that matches `req`; the first denial is the
/// API server's error for the request.
pub fn admit(store: &Store, req: &Request) -> Result<(), ApiError> {
    let mut bound = store.list(&bindings(), None);
    bound.sort_by(|a, b| meta::name(a).cmp(meta::name(b)));
    for binding in bound {
        let spec = &binding["spec"];
        let actions: Vec<&str> = spec["validationActions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !actions.contains(&"Deny") {
            continue;
        }
        let Some(policy) = store.get(&policies(), "", spec["policyName"].as_str().unwrap_or(""))
        else {
            continue;
        };
        if !matches(store, &policy["spec"]["matchConstraints"], req)
            || (!spec["matchResources"].is_null() && !matches(store, &spec["matchResources"], req))
        {
            continue;
        }
        if let Err(denial) = evaluate(store, &policy, req) {
            let message = format!(
                "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {}",
                meta::name(&policy),
                meta::name(&binding),
                denial.message
            );
            // Named as the API server names it: the request's name, else
            // the object's name or generateName, else "Unknown".
            let object = req.object.or(req.old_object).unwrap_or(&Value::Null);
            let name = [req.name, meta::name(object)]
                .into_iter()
                .chain(object["metadata"]["generateName"].as_str())
                .find(|n| !n.is_empty())
                .unwrap_or("Unknown");
            return Err(ApiError::denied_by_policy(
                &req.def.gr(),
                name,
                &message,
                &denial.reason,
            ));
        }
    }
    Ok(())
}

/// Whether `constraints` (a policy's matchConstraints or a binding's
/// matchResources) select the request.
fn matches(store: &Store, constraints: &Value, req: &Request) -> bool {
    let rules_match = |field: &str| {
        constraints[field]
            .as_array()
            .into_iter()
            .flatten()
            .any(|rule| rule_matches(rule, req))
    };
    if !rules_match("resourceRules") || rules_match("excludeResourceRules") {
        return false;
    }
    let object = req.object.or(req.old_object).unwrap_or(&Value::Null);
    let selects = |field: &str, obj: &Value| {
        let sel = &constraints[field];
        sel.is_null() || selector_object_matches(sel, obj)
    };
    if !selects("objectSelector", object) {
        return false;
    }
    if req.def.namespaced && !constraints["namespaceSelector"].is_null() {
        let ns = store
            .get(&Gr::namespaces(), "", req.namespace)
            .map(|n| (*n).clone())
            .unwrap_or(Value::Null);
        return selects("namespaceSelector", &ns);
    }
    true
}

fn rule_matches(rule: &Value, req: &Request) -> bool {
    let list = |field: &str| -> Vec<&str> {
        rule[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    };
    let any = |field: &str, want: &str| list(field).iter().any(|v| *v == "*" || *v == want);
    // "res" or "res/sub", either part "*": "nodes" does not match
    // nodes/status, "nodes/*" and "*/*" do.
    let resource_ok = list("resources").iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        (res == "*" || res == req.def.plural) && (sub == "*" || sub == req.subresource)
    });
    let names = list("resourceNames");
    let scope_ok = match rule["scope"].as_str().unwrap_or("*") {
        "Cluster" => !req.def.namespaced,
        "Namespaced" => req.def.namespaced,
        _ => true,
    };
    any("operations", req.operation.as_str())
        && any("apiGroups", &req.def.group)
        && any("apiVersions", req.version())
        && resource_ok
        && scope_ok
        && (names.is_empty() || names.contains(&req.name))
}

/// Runs one policy over the request.
fn evaluate(store: &Store, policy: &Value, req: &Request) -> Result<(), Denial> {
    let compiled = compiled(policy);
    let fail_closed = policy["spec"]["failurePolicy"].as_str() != Some("Ignore");
    let failed = |what: &str, source: &str, error: &str| Denial {
        message: format!("{what} '{source}' resulted in error: {error}"),
        reason: "Invalid".into(),
    };
    let namespace_object = if req.def.namespaced {
        store
            .get(&Gr::namespaces(), "", req.namespace)
            .map(|n| cel::value(&n))
            .unwrap_or(CelValue::Null)
    } else {
        CelValue::Null
    };
    let request = cel::scope(&[
        (
            "object",
            req.object.map(cel::value).unwrap_or(CelValue::Null),
        ),
        (
            "oldObject",
            req.old_object.map(cel::value).unwrap_or(CelValue::Null),
        ),
        ("request", cel::value(&req.to_json())),
        ("namespaceObject", namespace_object),
        ("params", CelValue::Null),
    ]);
    for (_, condition) in &compiled.match_conditions {
        match condition.eval(&request) {
            Ok(CelValue::Bool(true)) => {}
            Ok(CelValue::Bool(false)) => return Ok(()),
            Ok(_) if !fail_closed => return Ok(()),
            Ok(other) => {
                return Err(failed(
                    "match condition",
                    &condition.source,
                    &format!("expected a bool, got {other:?}"),
                ));
            }
            Err(_) if !fail_closed => return Ok(()),
            Err(e) => return Err(failed("match condition", &condition.source, &e)),
        }
    }
    // Each variable is evaluated in order, seeing those before it; one that
    // fails fails only the validations that read it.
    let mut values: Vec<(String, CelValue)> = Vec::new();
    let mut errors: HashMap<String, String> = HashMap::new();
    for (name, expr) in &compiled.variables {
        let mut scope = request.new_inner_scope();
        scope.add_variable_from_value("variables", cel::map(&values));
        match expr.eval(&scope) {
            Ok(v) => values.push((name.clone(), v)),
            Err(e) => {
                errors.insert(name.clone(), e);
            }
        }
    }
    let mut scope = request.new_inner_scope();
    scope.add_variable_from_value("variables", cel::map(&values));
    for v in &compiled.validations {
        let broken = v
            .expression
            .variables_used()
            .into_iter()
            .find_map(|name| errors.get(&name).map(|e| (name, e.clone())));
        let outcome = match broken {
            Some((name, e)) => Err(format!(
                "composited variable \"{name}\" fails to evaluate: {e}"
            )),
            None => v.expression.eval(&scope),
        };
        match outcome {
            Ok(CelValue::Bool(true)) => {}
            Ok(CelValue::Bool(false)) => {
                return Err(Denial {
                    message: message_of(v, &scope),
                    reason: v.reason.clone(),
                });
            }
            Ok(_) | Err(_) if !fail_closed => {}
            Ok(other) => {
                return Err(failed(
                    "expression",
                    &v.expression.source,
                    &format!("expected a bool, got {other:?}"),
                ));
            }
            Err(e) => return Err(failed("expression", &v.expression.source, &e)),
        }
    }
    Ok(())
}

/// What a failed validation says: its messageExpression when that gives a
/// non-empty string, else its message, else the expression.
fn message_of(v: &Validation, scope: &Context) -> String {
    if let Some(expr) = &v.message_expression
        && let Ok(CelValue::String(s)) = expr.eval(scope)
        && !s.trim().is_empty()
    {
        return s.to_string();
    }
    match &v.message {
        Some(m) if !m.is_empty() => m.clone(),
        _ => format!("failed expression: {}", v.expression.source.trim()),
    }
}

/// A policy the simulator cannot evaluate faithfully is refused when it is
/// created or changed, rather than run wrongly.
pub fn check_policy(policy: &Value) -> Result<(), String> {
    if !policy["spec"]["paramKind"].is_null() {
        return Err("spec.paramKind: policies with parameters are not simulated".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests;
