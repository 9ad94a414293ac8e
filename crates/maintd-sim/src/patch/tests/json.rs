use serde_json::json;

use crate::patch::{PatchError, json_patch, merge_patch};

#[test]
fn merge_patch_follows_rfc7386_appendix_a() {
    // RFC 7386 Appendix A, the cases whose patch is an object.
    let cases = [
        (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
        (
            json!({"a": "b"}),
            json!({"b": "c"}),
            json!({"a": "b", "b": "c"}),
        ),
        (json!({"a": "b"}), json!({"a": null}), json!({})),
        (
            json!({"a": "b", "b": "c"}),
            json!({"a": null}),
            json!({"b": "c"}),
        ),
        (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
        (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
        (
            json!({"a": {"b": "c"}}),
            json!({"a": {"b": "d", "c": null}}),
            json!({"a": {"b": "d"}}),
        ),
        (
            json!({"a": [{"b": "c"}]}),
            json!({"a": [1]}),
            json!({"a": [1]}),
        ),
        (
            json!({"e": null}),
            json!({"a": 1}),
            json!({"e": null, "a": 1}),
        ),
        (
            json!([1, 2]),
            json!({"a": "b", "c": null}),
            json!({"a": "b"}),
        ),
        (
            json!({}),
            json!({"a": {"bb": {"ccc": null}}}),
            json!({"a": {"bb": {}}}),
        ),
    ];
    for (target, patch, want) in cases {
        let mut doc = target.clone();
        merge_patch(&mut doc, &patch).unwrap();
        assert_eq!(doc, want, "{target} + {patch}");
    }
}

#[test]
fn merge_patch_rejects_a_root_that_is_not_an_object() {
    // RFC 7386 would replace the document; an API object must stay one.
    for patch in [json!(["c", "d"]), json!(null), json!("bar"), json!(1)] {
        let mut doc = json!({"a": "foo"});
        let err = merge_patch(&mut doc, &patch).unwrap_err();
        assert!(matches!(err, PatchError::BadRequest(_)), "{patch}: {err:?}");
        assert_eq!(doc, json!({"a": "foo"}));
    }
}

#[test]
fn json_patch_follows_rfc6902_appendix_a() {
    let cases = [
        // A.1 add an object member
        (
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz", "value": "qux"}]),
            json!({"baz": "qux", "foo": "bar"}),
        ),
        // A.2 add an array element
        (
            json!({"foo": ["bar", "baz"]}),
            json!([{"op": "add", "path": "/foo/1", "value": "qux"}]),
            json!({"foo": ["bar", "qux", "baz"]}),
        ),
        // A.3 remove an object member
        (
            json!({"baz": "qux", "foo": "bar"}),
            json!([{"op": "remove", "path": "/baz"}]),
            json!({"foo": "bar"}),
        ),
        // A.4 remove an array element
        (
            json!({"foo": ["bar", "qux", "baz"]}),
            json!([{"op": "remove", "path": "/foo/1"}]),
            json!({"foo": ["bar", "baz"]}),
        ),
        // A.5 replace a value
        (
            json!({"baz": "qux", "foo": "bar"}),
            json!([{"op": "replace", "path": "/baz", "value": "boo"}]),
            json!({"baz": "boo", "foo": "bar"}),
        ),
        // A.6 move a value
        (
            json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
            json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}]),
            json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}),
        ),
        // A.7 move an array element
        (
            json!({"foo": ["all", "grass", "cows", "eat"]}),
            json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}]),
            json!({"foo": ["all", "cows", "eat", "grass"]}),
        ),
        // A.8 test, success
        (
            json!({"baz": "qux", "foo": ["a", 2, "c"]}),
            json!([{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}]),
            json!({"baz": "qux", "foo": ["a", 2, "c"]}),
        ),
        // A.10 add a nested member object
        (
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}]),
            json!({"foo": "bar", "child": {"grandchild": {}}}),
        ),
        // A.14 ~ escape ordering
        (
            json!({"/": 9, "~1": 10}),
            json!([{"op": "test", "path": "/~01", "value": 10}]),
            json!({"/": 9, "~1": 10}),
        ),
        // A.16 add an array value
        (
            json!({"foo": ["bar"]}),
            json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]),
            json!({"foo": ["bar", ["abc", "def"]]}),
        ),
        // copy
        (
            json!({"a": {"b": 1}}),
            json!([{"op": "copy", "from": "/a", "path": "/c"}]),
            json!({"a": {"b": 1}, "c": {"b": 1}}),
        ),
    ];
    for (target, patch, want) in cases {
        let mut doc = target.clone();
        json_patch(&mut doc, &patch).unwrap();
        assert_eq!(doc, want, "{target} + {patch}");
    }
}

#[test]
fn json_patch_failures_are_invalid_and_change_nothing() {
    // Kubernetes answers every apply-time JSON patch error with 422.
    let doc = json!({"baz": "qux", "foo": ["a"], "/": 9, "~1": 10});
    let cases = [
        json!([{"op": "test", "path": "/baz", "value": "bar"}]), // A.9
        json!([{"op": "add", "path": "/baz/bat/x", "value": "qux"}]), // A.12
        json!([{"op": "test", "path": "/~01", "value": "10"}]),  // A.15
        json!([{"op": "remove", "path": "/nope"}]),
        json!([{"op": "replace", "path": "/nope", "value": 1}]),
        json!([{"op": "move", "from": "/nope", "path": "/x"}]),
        json!([{"op": "copy", "from": "/nope", "path": "/x"}]),
        json!([{"op": "remove", "path": "/foo/5"}]),
        // The first operation succeeds, the second fails: nothing applies.
        json!([{"op": "add", "path": "/new", "value": 1}, {"op": "test", "path": "/baz", "value": "no"}]),
    ];
    for patch in cases {
        let mut patched = doc.clone();
        let err = json_patch(&mut patched, &patch).unwrap_err();
        assert!(matches!(err, PatchError::Invalid(_)), "{patch}: {err:?}");
        assert_eq!(patched, doc, "{patch} left the document changed");
    }
}

#[test]
fn malformed_json_patches_are_bad_requests() {
    let cases = [
        json!({"op": "add", "path": "/a", "value": 1}),
        json!([{"op": "frobnicate", "path": "/a"}]),
        json!([{"op": "add", "path": "/a"}]),
        json!([{"path": "/a", "value": 1}]),
        json!([{"op": "add", "path": "no-slash", "value": 1}]),
        json!("add"),
    ];
    for patch in cases {
        let mut doc = json!({"a": 0});
        let err = json_patch(&mut doc, &patch).unwrap_err();
        assert!(matches!(err, PatchError::BadRequest(_)), "{patch}: {err:?}");
    }
}
