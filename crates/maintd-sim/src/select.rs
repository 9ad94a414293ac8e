//! Label and field selectors in their query-string syntax
//! (`app=web,tier!=db,env in (a,b),!canary` and `spec.nodeName=n1`).

use serde_json::Value;

use super::errors::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in split_terms(s)? {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            reqs.push(parse_label_term(term)?);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Req::NotIn(k, vs) => !get(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside a `( … )` value set.
fn split_terms(s: &str) -> Result<Vec<&str>, ApiError> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(ApiError::bad_request(format!(
                "unable to parse requirement: unbalanced parentheses in {s:?}"
            )));
        }
    }
    if depth != 0 {
        return Err(ApiError::bad_request(format!(
            "unable to parse requirement: unbalanced parentheses in {s:?}"
        )));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_label_term(term: &str) -> Result<Req, ApiError> {
    let bad =
        |why: &str| ApiError::bad_request(format!("unable to parse requirement: {why}: {term:?}"));
    if let Some(k) = term.strip_prefix('!') {
        return Ok(Req::NotExists(valid_key(k.trim()).map_err(|e| bad(&e))?));
    }
    for (op, set_op) in [(" notin ", false), (" in ", true)] {
        if let Some(pos) = term.find(op) {
            let key = valid_key(term[..pos].trim()).map_err(|e| bad(&e))?;
            let rest = term[pos + op.len()..].trim();
            let inner = rest
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or_else(|| bad("expected a parenthesised value set"))?;
            let vals: Vec<String> = inner
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            if vals.is_empty() {
                return Err(bad("for 'in' and 'notin' the value set must not be empty"));
            }
            return Ok(if set_op {
                Req::In(key, vals)
            } else {
                Req::NotIn(key, vals)
            });
        }
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(Req::Ne(
            valid_key(k.trim()).map_err(|e| bad(&e))?,
            v.trim().into(),
        ));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(Req::Eq(
            valid_key(k.trim()).map_err(|e| bad(&e))?,
            v.trim().into(),
        ));
    }
    Ok(Req::Exists(valid_key(term).map_err(|e| bad(&e))?))
}

fn valid_key(k: &str) -> Result<String, String> {
    let ok = !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if ok {
        Ok(k.to_string())
    } else {
        Err(format!("invalid label key {k:?}"))
    }
}

/// A parsed field selector. Only the fields the apiserver supports for the
/// resource (its group and kind) may be used; anything else is a 400, as in
/// Kubernetes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str, group: &str, kind: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if !supported_field(group, kind, field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, want)| {
            let have = field_value(obj, field);
            (have == *want) == *eq
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value `field` must equal, if the selector says so.
    pub fn equal_to(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(f, eq, _)| *eq && f == field)
            .map(|(_, _, v)| v.as_str())
    }
}

fn supported_field(group: &str, kind: &str, field: &str) -> bool {
    if matches!(field, "metadata.name" | "metadata.namespace") {
        return true;
    }
    match (group, kind) {
        ("", "Pod") => matches!(
            field,
            "spec.nodeName"
                | "spec.schedulerName"
                | "spec.serviceAccountName"
                | "spec.hostNetwork"
                | "spec.restartPolicy"
                | "status.phase"
                | "status.podIP"
                | "status.nominatedNodeName"
        ),
        ("", "Node") => field == "spec.unschedulable",
        ("", "Namespace") => field == "status.phase",
        ("", "Event") => super::events::CORE_FIELDS.contains(&field),
        (super::events::GROUP, "Event") => super::events::EVENTS_FIELDS.contains(&field),
        _ => false,
    }
}

/// The value a field selector compares: a string, with missing fields as ""
/// and booleans as "true"/"false", as the apiserver's field sets do.
fn field_value(obj: &Value, field: &str) -> String {
    // Only a core/v1 Event has this field selector.
    if field == "source" {
        return super::events::source_field(obj);
    }
    let mut cur = obj;
    for part in field.split('.') {
        cur = &cur[part];
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null if field == "spec.unschedulable" || field == "spec.hostNetwork" => {
            "false".into()
        }
        _ => String::new(),
    }
}

/// Whether a `LabelSelector` object (matchLabels / matchExpressions) selects
/// an object. `None` (null) selects nothing and `{}` everything, as for a
/// policy/v1 PodDisruptionBudget; a malformed selector selects nothing.
pub fn selector_object_matches(sel: &Value, obj: &Value) -> bool {
    if sel.is_null() || !sel.is_object() {
        return false;
    }
    let labels = &obj["metadata"]["labels"];
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    let labels_ok = sel["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| get(k) == v.as_str()));
    let exprs_ok = sel["matchExpressions"].as_array().is_none_or(|es| {
        es.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e["operator"].as_str() {
                Some("In") => get(key).is_some_and(|l| values.contains(&l)),
                Some("NotIn") => !get(key).is_some_and(|l| values.contains(&l)),
                Some("Exists") => get(key).is_some(),
                Some("DoesNotExist") => get(key).is_none(),
                _ => false,
            }
        })
    });
    labels_ok && exprs_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labelled(l: Value) -> Value {
        json!({"metadata": {"labels": l}})
    }

    #[test]
    fn label_selector_table() {
        let obj = labelled(json!({"app": "web", "tier": "front", "env": "prod"}));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=web,tier=front", true),
            ("app=web,tier=back", false),
            ("env in (prod,staging)", true),
            ("env notin (prod)", false),
            ("env in (dev)", false),
            ("canary", false),
            ("!canary", true),
            ("app", true),
            ("!app", false),
            ("missing!=x", true),
            ("env in (dev, prod),app=web", true),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.matches(&obj), want, "selector {sel:?}");
        }
    }

    #[test]
    fn bad_label_selectors_are_400() {
        for sel in ["a in (", "a in ()", "a=(b", "in (x)", "=x", "a b c in (x"] {
            let err = LabelSelector::parse(sel).unwrap_err();
            assert_eq!(err.code, 400, "selector {sel:?}");
        }
    }

    #[test]
    fn field_selectors() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let yes = FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed", "", "Pod").unwrap();
        assert!(yes.matches(&pod));
        let no = FieldSelector::parse("spec.nodeName=n2", "", "Pod").unwrap();
        assert!(!no.matches(&pod));
        let err = FieldSelector::parse("spec.foo=1", "", "Pod").unwrap_err();
        assert_eq!(err.message, "field label not supported: spec.foo");
        assert!(FieldSelector::parse("garbage", "", "Pod").is_err());
        let node = json!({"metadata": {"name": "n"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.unschedulable=false", "", "Node")
                .unwrap()
                .matches(&node)
        );
    }

    /// Each Event API selects by its own field names, and only by those
    /// Kubernetes lists for it; the same Event answers both alike.
    #[test]
    fn event_field_selectors_follow_the_api_they_are_asked_through() {
        let events = json!({
            "metadata": {"name": "node-a.1", "namespace": "default"},
            "regarding": {"kind": "Node", "name": "node-a", "namespace": "", "uid": "node-a"},
            "reason": "Drained", "type": "Normal", "reportingController": "maintd.io/agent",
        });
        let core = crate::events::to_core(events.clone());
        // (selector through events.k8s.io, the same through core/v1, matches)
        let cases = [
            ("regarding.kind=Node", "involvedObject.kind=Node", true),
            ("regarding.name=node-a", "involvedObject.name=node-a", true),
            ("regarding.namespace=", "involvedObject.namespace=", true),
            ("regarding.uid=node-a", "involvedObject.uid=node-a", true),
            ("regarding.uid=6c1b", "involvedObject.uid=6c1b", false),
            ("regarding.apiVersion=", "involvedObject.apiVersion=", true),
            (
                "regarding.fieldPath!=x",
                "involvedObject.fieldPath!=x",
                true,
            ),
            (
                "regarding.resourceVersion=1",
                "involvedObject.resourceVersion=1",
                false,
            ),
            (
                "reason=Drained,type=Normal",
                "reason=Drained,type=Normal",
                true,
            ),
            ("type=Warning", "type=Warning", false),
            (
                "reportingController=maintd.io/agent",
                "reportingComponent=maintd.io/agent",
                true,
            ),
            ("metadata.name=node-a.1", "metadata.name=node-a.1", true),
        ];
        for (through_events, through_core, want) in cases {
            let e = FieldSelector::parse(through_events, "events.k8s.io", "Event").unwrap();
            assert_eq!(e.matches(&events), want, "{through_events}");
            let c = FieldSelector::parse(through_core, "", "Event").unwrap();
            assert_eq!(c.matches(&core), want, "{through_core}");
        }
        // `source` is the reporting controller when there is no source.
        let by_source = FieldSelector::parse("source=maintd.io/agent", "", "Event").unwrap();
        assert!(by_source.matches(&core));
        // Each API refuses the other's names, and fields it does not list.
        for (group, field) in [
            ("events.k8s.io", "involvedObject.kind"),
            ("events.k8s.io", "source"),
            ("events.k8s.io", "reportingComponent"),
            ("events.k8s.io", "note"),
            ("", "regarding.kind"),
            ("", "reportingController"),
            ("", "involvedObject.labels"),
            ("", "message"),
        ] {
            let err = FieldSelector::parse(&format!("{field}=x"), group, "Event").unwrap_err();
            assert_eq!(
                (err.code, err.message),
                (400, format!("field label not supported: {field}"))
            );
        }
    }
}
