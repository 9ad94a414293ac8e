use serde_json::{Value, json};

use super::*;
use crate::resources::ResourceDef;

/// A CRD with one field per kind of bound.
fn widgets() -> ResourceDef {
    let schema = json!({"type": "object", "properties": {
        "spec": {"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 1000},
            "ratio": {"type": "number", "minimum": 0, "maximum": 1, "exclusiveMaximum": true},
            "step": {"type": "integer", "multipleOf": 5},
            "name": {"type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[a-z]+$"},
            "mode": {"type": "string", "enum": ["Fast", "Slow"]},
            "level": {"type": "string", "default": "Low", "enum": ["Low", "High"]},
            "tags": {"type": "array", "minItems": 1, "maxItems": 2,
                     "items": {"type": "string", "maxLength": 3}},
            "labels": {"type": "object", "maxProperties": 2,
                       "additionalProperties": {"type": "string", "maxLength": 4}},
            "rules": {"type": "array", "x-kubernetes-list-type": "map",
                      "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "required": ["name"], "properties": {
                          "name": {"type": "string"},
                          "weight": {"type": "integer", "maximum": 10}}}},
            "note": {"type": "string", "nullable": true},
            "port": {"x-kubernetes-int-or-string": true},
        }},
        "status": {"type": "object", "properties": {
            "count": {"type": "integer", "minimum": 0}}},
    }});
    ResourceDef::from_crd(&json!({"spec": {
        "group": "example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "kind": "Widget"},
        "versions": [{"name": "v1", "served": true, "storage": true,
                      "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": schema}}],
    }}))
    .unwrap()
}

fn widget(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
           "metadata": {"name": "w", "namespace": "default"}, "spec": spec})
}

/// The 422's message, or "" if the object passes.
fn verdict(old: Option<&Value>, new: &Value, status_only: bool) -> String {
    match check(&widgets(), old, new, status_only) {
        Ok(()) => String::new(),
        Err(e) => {
            assert_eq!((e.code, e.reason), (422, "Invalid"));
            e.message
        }
    }
}

/// Each kind of bound, in the API server's words, quirks included: each
/// expected message is what k8s.io/apiextensions-apiserver v0.37.2's
/// validation (with kube-openapi and apimachinery at the versions
/// Kubernetes 1.37.2 pins) answered for the same schema and object.
#[test]
fn objects_beyond_each_bound_are_refused_in_the_api_servers_words() {
    let cases: Vec<(Value, &[&str])> = vec![
        (
            json!({"size": 5000}),
            &[
                "spec.size: Invalid value: 5000: spec.size in body should be less than or equal to 1000",
            ],
        ),
        (
            json!({"size": 0}),
            &[
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
            ],
        ),
        (
            json!({"size": 1, "ratio": 1}),
            &["spec.ratio: Invalid value: 1: spec.ratio in body should be less than 1"],
        ),
        (
            json!({"size": 1, "ratio": 1.5}),
            &["spec.ratio: Invalid value: 1.5: spec.ratio in body should be less than 1"],
        ),
        (
            json!({"size": 1, "ratio": -0.25}),
            &[
                "spec.ratio: Invalid value: -0.25: spec.ratio in body should be greater than or equal to 0",
            ],
        ),
        (
            json!({"size": 1, "step": 7}),
            &["spec.step: Invalid value: 7: spec.step in body should be a multiple of 5"],
        ),
        (
            json!({"size": 1, "name": ""}),
            &["spec.name: Invalid value: \"\": spec.name in body should be at least 1 chars long"],
        ),
        (
            json!({"size": 1, "name": "abcdefghi"}),
            &["spec.name: Too long: may not be more than 8 bytes"],
        ),
        (
            json!({"size": 1, "name": "Ab"}),
            &["spec.name: Invalid value: \"Ab\": spec.name in body should match '^[a-z]+$'"],
        ),
        (
            json!({"size": 1, "mode": "Medium"}),
            &["spec.mode: Unsupported value: \"Medium\": supported values: \"Fast\", \"Slow\""],
        ),
        (
            json!({"size": 1, "mode": 3}),
            &[
                "spec.mode: Invalid value: \"integer\": spec.mode in body must be of type string: \"integer\"",
                "spec.mode: Unsupported value: 3: supported values: \"Fast\", \"Slow\"",
            ],
        ),
        (
            json!({"size": 1, "tags": []}),
            &["spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items"],
        ),
        (
            json!({"size": 1, "tags": ["a", "b", "c"]}),
            &["spec.tags: Too many: 3: must have at most 2 items"],
        ),
        (
            json!({"size": 1, "tags": ["abcd"]}),
            &["spec.tags[0]: Too long: may not be more than 3 bytes"],
        ),
        (
            json!({"size": 1, "labels": {"a": "", "b": "", "c": ""}}),
            &["spec.labels: Too many: 3: must have at most 2 items"],
        ),
        (
            json!({"size": 1, "labels": {"a": "12345"}}),
            &["spec.labels.a: Too long: may not be more than 4 bytes"],
        ),
        (
            json!({"size": 1, "rules": [{"name": "a"}, {"weight": 11}]}),
            &[
                "spec.rules[1].weight: Invalid value: 11: spec.rules[1].weight in body should be less than or equal to 10",
                "spec.rules[1].name: Required value",
            ],
        ),
        (json!({}), &["spec.size: Required value"]),
        (json!({"size": null}), &["spec.size: Required value"]),
        (
            json!({"size": "big"}),
            &[
                "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"",
            ],
        ),
        (
            json!({"size": 1, "port": true}),
            &[
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
            ],
        ),
        // A value beyond int32 is out of the format's range as well as
        // beyond the maximum; the range error is a plain one, on no field.
        (
            json!({"size": 5_000_000_000_i64}),
            &[
                "<nil>: Invalid value: \"\": Checked value must be of type integer with format int32 in spec.size",
                "spec.size: Invalid value: 5000000000: spec.size in body should be less than or equal to 1000",
            ],
        ),
        // Not a number where a formatted integer belongs: named by the format.
        (
            json!({"size": true}),
            &["spec.size: Invalid value: \"\": spec.size in body must be of type int32: \"\""],
        ),
        (
            json!({"size": 1.5}),
            &[
                "spec.size: Invalid value: \"float64\": spec.size in body must be of type int32: \"float64\"",
                "<nil>: Invalid value: \"\": Checked value must be of type integer with format int32 in spec.size",
            ],
        ),
        // Floats as Go's %v prints them.
        (
            json!({"size": 1, "ratio": 2e6}),
            &["spec.ratio: Invalid value: 2e+06: spec.ratio in body should be less than 1"],
        ),
        (
            json!({"size": 1, "ratio": 1234567.5}),
            &["spec.ratio: Invalid value: 1.2345675e+06: spec.ratio in body should be less than 1"],
        ),
    ];
    for (spec, errors) in cases {
        let detail = match errors {
            [one] => one.to_string(),
            many => format!("[{}]", many.join(", ")),
        };
        let got = verdict(None, &widget(spec.clone()), false);
        assert_eq!(
            got,
            format!("Widget.example.com \"w\" is invalid: {detail}"),
            "{spec}"
        );
    }
}

#[test]
fn objects_within_every_bound_pass() {
    for spec in [
        json!({"size": 1}),
        json!({"size": 1000, "ratio": 0.99, "step": 10, "name": "abcdefgh", "mode": "Slow",
               "tags": ["a", "abc"], "labels": {"a": "1234", "b": ""},
               "rules": [{"name": "x", "weight": 10}], "port": "http"}),
        json!({"size": 1.0, "ratio": 0, "step": 0, "port": 8080, "note": null, "level": null}),
        // An unknown field is the API server's to prune, not to refuse.
        json!({"size": 1, "color": "blue"}),
    ] {
        assert_eq!(verdict(None, &widget(spec.clone()), false), "", "{spec}");
    }
}

/// The error as a client reads it: 422, the kind in the details, one cause
/// per field with its own reason.
#[test]
fn the_status_names_the_kind_and_each_field() {
    let err = check(
        &widgets(),
        None,
        &widget(json!({"size": 5000, "name": "abcdefghi", "tags": ["a", "b", "c"], "mode": "x"})),
        false,
    )
    .unwrap_err();
    let status = err.status();
    assert_eq!(status["code"], 422);
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["group"], "example.com", "{status}");
    assert_eq!(status["details"]["kind"], "Widget");
    assert_eq!(status["details"]["name"], "w");
    let causes: Vec<(&str, &str)> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["reason"].as_str().unwrap(), c["field"].as_str().unwrap()))
        .collect();
    assert_eq!(
        causes,
        [
            ("FieldValueNotSupported", "spec.mode"),
            ("FieldValueTooLong", "spec.name"),
            ("FieldValueInvalid", "spec.size"),
            ("FieldValueTooMany", "spec.tags"),
        ]
    );
    assert_eq!(
        status["details"]["causes"][2]["message"],
        "Invalid value: 5000: spec.size in body should be less than or equal to 1000"
    );
}

/// A write of the status subresource checks the status, named from it.
#[test]
fn a_status_write_checks_the_status_alone() {
    let old = widget(json!({"size": 1}));
    let mut new = widget(json!({"size": 1}));
    new["status"] = json!({"count": -1});
    assert_eq!(
        verdict(Some(&old), &new, true),
        "Widget.example.com \"w\" is invalid: status.count: Invalid value: -1: count in body should be greater than or equal to 0"
    );
    new["status"] = json!({"count": 3});
    assert_eq!(verdict(Some(&old), &new, true), "");
}

/// Ratcheting: what an update leaves as it was passes, what it changes
/// does not; items of a map list are matched by key, of other lists not.
#[test]
fn an_update_may_keep_an_old_value_that_no_longer_fits() {
    let old =
        widget(json!({"size": 5000, "tags": ["abcd"], "rules": [{"name": "a", "weight": 50}]}));
    let cases = [
        (
            json!({"size": 5000, "tags": ["abcd"], "rules": [{"name": "a", "weight": 50}], "mode": "Fast"}),
            "",
        ),
        (
            json!({"size": 5000, "tags": ["abcd"], "rules": [{"name": "b", "weight": 1}, {"name": "a", "weight": 50}]}),
            "",
        ),
        (
            json!({"size": 4000, "tags": ["abcd"], "rules": [{"name": "a", "weight": 50}]}),
            "spec.size: Invalid value: 4000: spec.size in body should be less than or equal to 1000",
        ),
        (
            json!({"size": 5000, "tags": ["abcd"], "rules": [{"name": "a", "weight": 51}]}),
            "spec.rules[0].weight: Invalid value: 51: spec.rules[0].weight in body should be less than or equal to 10",
        ),
        (
            json!({"size": 5000, "tags": ["abcd", "a"], "rules": [{"name": "a", "weight": 50}]}),
            "spec.tags[0]: Too long: may not be more than 3 bytes",
        ),
    ];
    for (spec, want) in cases {
        let want = if want.is_empty() {
            String::new()
        } else {
            format!("Widget.example.com \"w\" is invalid: {want}")
        };
        assert_eq!(
            verdict(Some(&old), &widget(spec.clone()), false),
            want,
            "{spec}"
        );
    }
}

#[test]
fn built_in_kinds_are_left_to_their_own_checks() {
    let pods = crate::resources::builtins()
        .into_iter()
        .find(|d| d.plural == "pods")
        .unwrap();
    assert!(check(&pods, None, &json!({"spec": {"size": "x"}}), false).is_ok());
}

#[test]
fn go_prints_values_its_own_way() {
    for (f, want) in [
        (1000.0, "1000"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (123456.5, "123456.5"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (-2.5, "-2.5"),
        (0.0, "0"),
    ] {
        assert_eq!(words::go_float(f), want, "{f}");
    }
    assert_eq!(
        words::go_quote("a\"b\\c\n\u{1}é"),
        "\"a\\\"b\\\\c\\n\\x01é\""
    );
}
