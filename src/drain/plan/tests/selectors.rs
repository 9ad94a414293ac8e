//! `selector_matches`: matchLabels and every matchExpressions operator.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn selector_matches_table() {
    let web = labels(&[("app", "web"), ("tier", "front")]);
    let none = labels(&[]);
    let expr = |key: &str, operator: &str, values: &[&str]| json!({"matchExpressions": [{"key": key, "operator": operator, "values": values}]});
    let cases = [
        ("empty selector matches all", json!({}), &none, Ok(true)),
        (
            "matchLabels match",
            json!({"matchLabels": {"app": "web"}}),
            &web,
            Ok(true),
        ),
        (
            "matchLabels all must match",
            json!({"matchLabels": {"app": "web", "tier": "back"}}),
            &web,
            Ok(false),
        ),
        (
            "matchLabels missing label",
            json!({"matchLabels": {"app": "web"}}),
            &none,
            Ok(false),
        ),
        ("In hit", expr("app", "In", &["db", "web"]), &web, Ok(true)),
        ("In miss", expr("app", "In", &["db"]), &web, Ok(false)),
        (
            "In absent label",
            expr("app", "In", &["web"]),
            &none,
            Ok(false),
        ),
        ("NotIn hit", expr("app", "NotIn", &["web"]), &web, Ok(false)),
        (
            "NotIn other value",
            expr("app", "NotIn", &["db"]),
            &web,
            Ok(true),
        ),
        (
            "NotIn absent label matches",
            expr("app", "NotIn", &["web"]),
            &none,
            Ok(true),
        ),
        (
            "Exists present",
            expr("tier", "Exists", &[]),
            &web,
            Ok(true),
        ),
        (
            "Exists absent",
            expr("zone", "Exists", &[]),
            &web,
            Ok(false),
        ),
        (
            "DoesNotExist absent",
            expr("zone", "DoesNotExist", &[]),
            &web,
            Ok(true),
        ),
        (
            "DoesNotExist present",
            expr("app", "DoesNotExist", &[]),
            &web,
            Ok(false),
        ),
        (
            "labels and expressions are ANDed",
            json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}),
            &web,
            Ok(false),
        ),
        (
            "unknown operator is an error",
            expr("app", "Gt", &["1"]),
            &web,
            Err("Gt"),
        ),
        (
            "In without values is an error",
            expr("app", "In", &[]),
            &web,
            Err("has no values"),
        ),
        (
            "Exists with values is an error",
            expr("app", "Exists", &["x"]),
            &web,
            Err("has values"),
        ),
        (
            "a malformed requirement is an error even after a failing one",
            json!({"matchLabels": {"app": "db"}, "matchExpressions": [{"key": "a", "operator": "Foo"}]}),
            &web,
            Err("Foo"),
        ),
    ];
    let mut failures = Vec::new();
    for (name, selector, labels, want) in cases {
        let selector = serde_json::from_value(selector).unwrap();
        let got = selector_matches(&selector, labels);
        let ok = match (&got, want) {
            (Ok(g), Ok(w)) => *g == w,
            (Err(e), Err(text)) => e.to_string().contains(text),
            _ => false,
        };
        if !ok {
            failures.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
