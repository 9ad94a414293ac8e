//! Label selectors written as kubectl takes them (`-l`): `app=db`,
//! `tier!=cache`, `env in (prod,staging)`, `env notin (dev)`, `backup`,
//! `!canary`, comma-separated. Parsed into a `LabelSelector`, so matching
//! is the drain plan's own (`selector_matches`). Parsed here because
//! kube-core has no parser for this syntax: its `Selector` only prints it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

/// A selector string that does not parse, with what is wrong.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("label selector {text:?}: {why}; write it as for kubectl -l, e.g. app=db,env in (prod)")]
pub struct SelectorError {
    pub text: String,
    pub why: String,
}

/// Splits at commas outside parentheses.
fn requirements(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut from) = (0i32, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&text[from..]);
    out
}

fn requirement(key: &str, op: &str, values: Vec<String>) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key: key.to_string(),
        operator: op.to_string(),
        values: (!values.is_empty()).then_some(values),
    }
}

/// Parses `text` (an empty one selects everything).
pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
    let err = |why: &str| SelectorError {
        text: text.to_string(),
        why: why.to_string(),
    };
    let mut exprs = Vec::new();
    for raw in requirements(text) {
        let r = raw.trim();
        if r.is_empty() {
            if text.trim().is_empty() {
                continue;
            }
            return Err(err("an empty requirement between commas"));
        }
        let set = |rest: &str, op: &str| -> Result<LabelSelectorRequirement, SelectorError> {
            let (key, list) = rest.split_once(op).ok_or_else(|| err("no operator"))?;
            let list = list.trim();
            let inner = list
                .strip_prefix('(')
                .and_then(|l| l.strip_suffix(')'))
                .ok_or_else(|| err("a set of values must be in parentheses: in (a,b)"))?;
            let values: Vec<String> = inner
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            if values.is_empty() {
                return Err(err("an empty set of values"));
            }
            let op = if op.trim() == "in" { "In" } else { "NotIn" };
            Ok(requirement(key.trim(), op, values))
        };
        let req = if r.contains(" notin ") {
            set(r, " notin ")?
        } else if r.contains(" in ") {
            set(r, " in ")?
        } else if let Some((k, v)) = r.split_once("!=") {
            requirement(k.trim(), "NotIn", vec![v.trim().to_string()])
        } else if let Some((k, v)) = r.split_once("==").or_else(|| r.split_once('=')) {
            requirement(k.trim(), "In", vec![v.trim().to_string()])
        } else if let Some(k) = r.strip_prefix('!') {
            requirement(k.trim(), "DoesNotExist", vec![])
        } else {
            requirement(r, "Exists", vec![])
        };
        let key_ok = !req.key.is_empty()
            && req
                .key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
        if !key_ok {
            return Err(err(&format!("{:?} is not a label key", req.key)));
        }
        exprs.push(req);
    }
    Ok(LabelSelector {
        match_expressions: (!exprs.is_empty()).then_some(exprs),
        match_labels: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drain::plan::selector_matches;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_as_kubectl_l_does() {
        let db = labels(&[("app", "db"), ("env", "prod")]);
        let web = labels(&[("app", "web"), ("env", "dev"), ("canary", "")]);
        let cases = [
            ("app=db", true, false),
            ("app==db", true, false),
            ("app!=db", false, true),
            ("env in (prod, staging)", true, false),
            ("env notin (prod)", false, true),
            ("app=db,env=prod", true, false),
            ("app=db,env=dev", false, false),
            ("canary", false, true),
            ("!canary", true, false),
            ("app in (db,web),!canary", true, false),
            ("", true, true),
        ];
        for (text, on_db, on_web) in cases {
            let sel = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(selector_matches(&sel, &db).unwrap(), on_db, "{text} on db");
            assert_eq!(
                selector_matches(&sel, &web).unwrap(),
                on_web,
                "{text} on web"
            );
        }
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        for text in [
            "app=db,,env=prod",
            "env in prod",
            "env in ()",
            "a b=c",
            "=x",
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.text, text);
            assert!(e.to_string().contains("kubectl -l"), "{e}");
        }
    }
}
