//! Protobuf bodies as kubectl sends them (the byte strings below are
//! kubectl's own, from `kubectl create ... -v=8`), the Kubernetes JSON
//! quirks, and malformed bodies.

use rand::{Rng, SeedableRng};
use serde_json::json;

use super::schema::Schema;
use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = vec![];
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A length-delimited field.
fn field(number: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = varint(u64::from(number) << 3 | 2);
    out.extend(varint(bytes.len() as u64));
    out.extend(bytes);
    out
}

fn int(number: u32, v: u64) -> Vec<u8> {
    let mut out = varint(u64::from(number) << 3);
    out.extend(varint(v));
    out
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
    [b"k8s\0".to_vec(), field(1, &type_meta), field(2, raw)].concat()
}

fn metadata(name: &str) -> Vec<u8> {
    field(1, &field(1, name.as_bytes()))
}

#[test]
fn kubectl_create_namespace() {
    let body = hex("6b3873000a0f0a02763112094e616d657370616365121\
         90a110a017812001a0022002a0032003800420012001a020a001a002200");
    let obj = decode_body(&body).unwrap();
    assert_eq!(
        obj,
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "x", "generation": 0}, "spec": {}, "status": {}})
    );
}

#[test]
fn kubectl_create_secret_has_its_data_in_base64() {
    let body = hex(
        "6b3873000a0c0a0276311206536563726574121e0a120a02733212001a0022002a00320038004200\
         12060a016b1201761a001a002200",
    );
    let obj = decode_body(&body).unwrap();
    assert_eq!(obj["data"], json!({"k": "dg=="}));
    assert_eq!(obj["metadata"]["name"], "s2");
    assert!(
        obj.get("type").is_none(),
        "an empty optional string is left out: {obj}"
    );
}

#[test]
fn kubectl_create_pdb_and_service_have_int_or_strings() {
    let pdb = hex(
        "6b3873000a200a09706f6c6963792f76311213506f6444697372757074696f6e427564676574123b\
         0a140a047064623212001a0022002a0032003800420012170a09080110001a03353025120a0a080a\
         036170701201781a0a080018002000280030001a002200",
    );
    let obj = decode_body(&pdb).unwrap();
    assert_eq!(obj["spec"]["minAvailable"], "50%");
    assert_eq!(
        obj["spec"]["selector"],
        json!({"matchLabels": {"app": "x"}})
    );

    let svc = hex(
        "6b3873000a0d0a027631120753657276696365126f0a210a047376633212001a0022002a00320038\
         0042005a0b0a0361707012047376633212460a1e0a0738302d6874747012035443501850220a0801\
         10001a04687474702800120b0a036170701204737663321a002209436c757374657249503a004200\
         52005a00600068001a020a001a002200",
    );
    let obj = decode_body(&svc).unwrap();
    assert_eq!(
        obj["spec"]["ports"],
        json!([{"name": "80-http", "protocol": "TCP", "port": 80, "targetPort": "http", "nodePort": 0}])
    );
    assert_eq!(obj["spec"]["type"], "ClusterIP");
    assert_eq!(obj["metadata"]["labels"], json!({"app": "svc2"}));
}

#[test]
fn times_quantities_ints_and_inline_fields_read_as_the_json_form() {
    let time = [int(1, 1_700_000_000), int(2, 123_456_789)].concat();
    let lease_spec = [
        field(1, b"node-a"),
        int(2, 40),
        field(3, &time),
        field(4, &time),
    ]
    .concat();
    let obj = decode_body(&envelope(
        "coordination.k8s.io/v1",
        "Lease",
        &[metadata("l"), field(2, &lease_spec)].concat(),
    ))
    .unwrap();
    assert_eq!(obj["spec"]["holderIdentity"], "node-a");
    assert_eq!(obj["spec"]["leaseDurationSeconds"], 40);
    assert_eq!(obj["spec"]["acquireTime"], "2023-11-14T22:13:20.123456Z");

    // A pod: deletionGracePeriodSeconds is an int64, a Time in seconds,
    // requests are Quantities, an env var's configMapKeyRef has the
    // reference's name inline.
    let key_ref = [field(1, &field(1, b"cm")), field(2, b"k")].concat();
    let env = [field(1, b"E"), field(3, &field(3, &key_ref))].concat();
    let quantity = |q: &str| field(1, q.as_bytes());
    let requests = field(2, &[field(1, b"cpu"), field(2, &quantity("250m"))].concat());
    let container = [
        field(1, b"c"),
        field(2, b"img"),
        field(7, &env),
        field(8, &requests),
    ]
    .concat();
    let meta = [
        field(1, b"p"),
        field(9, &time),
        int(10, (-1i64) as u64),
        field(8, &[]),
    ]
    .concat();
    let obj = decode_body(&envelope(
        "v1",
        "Pod",
        &[field(1, &meta), field(2, &field(2, &container))].concat(),
    ))
    .unwrap();
    assert_eq!(obj["metadata"]["deletionTimestamp"], "2023-11-14T22:13:20Z");
    assert_eq!(obj["metadata"]["deletionGracePeriodSeconds"], -1);
    assert!(
        obj["metadata"].get("creationTimestamp").is_none(),
        "the zero time is left out"
    );
    let c = &obj["spec"]["containers"][0];
    assert_eq!(c["resources"]["requests"]["cpu"], "250m");
    assert_eq!(
        c["env"][0]["valueFrom"]["configMapKeyRef"],
        json!({"name": "cm", "key": "k"})
    );
}

#[test]
fn packed_and_unpacked_lists_of_numbers_both_read() {
    // PodSecurityContext.supplementalGroups is `repeated int64`.
    let unpacked = [int(4, 3), int(4, 4)].concat();
    let packed = field(4, &[3, 4]);
    for security_context in [unpacked, packed] {
        let spec = field(14, &security_context);
        let obj = decode_body(&envelope(
            "v1",
            "Pod",
            &[metadata("p"), field(2, &spec)].concat(),
        ))
        .unwrap();
        assert_eq!(
            obj["spec"]["securityContext"]["supplementalGroups"],
            json!([3, 4])
        );
    }
}

#[test]
fn a_pods_eviction_responders_read_as_kubernetes_1_37_numbers_them() {
    // PodSpec.evictionResponders = 44: EvictionResponder {name = 1,
    // priority = 2} (k8s.io/api v0.37.2 core/v1/generated.proto).
    let responder = [
        field(1, b"live-migration.kubevirt.io/migrator"),
        int(2, 10000),
    ]
    .concat();
    let spec = field(44, &responder);
    let obj = decode_body(&envelope(
        "v1",
        "Pod",
        &[metadata("p"), field(2, &spec)].concat(),
    ))
    .unwrap();
    assert_eq!(
        obj["spec"]["evictionResponders"],
        json!([{"name": "live-migration.kubevirt.io/migrator", "priority": 10000}])
    );
}

#[test]
fn fields_it_does_not_know_are_skipped() {
    let raw = [metadata("x"), field(99, b"from a newer version")].concat();
    let obj = decode_body(&envelope("v1", "Namespace", &raw)).unwrap();
    assert_eq!(obj["metadata"]["name"], "x");
}

#[test]
fn a_kind_without_a_layout_is_415_and_says_which_kinds_are_read() {
    let err = decode_body(&envelope(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        &metadata("x"),
    ))
    .unwrap_err();
    assert_eq!(err.code, 415);
    assert!(err.message.contains("apps/v1"), "{}", err.message);
    assert!(
        err.message.contains("CustomResourceDefinition"),
        "{}",
        err.message
    );
    assert!(err.message.contains("application/json"), "{}", err.message);

    let mut gzip = envelope("v1", "Namespace", &metadata("x"));
    gzip.extend(field(3, b"gzip"));
    let err = decode_body(&gzip).unwrap_err();
    assert_eq!(err.code, 415);
    assert!(err.message.contains("gzip"), "{}", err.message);
}

#[test]
fn a_malformed_body_is_400_and_says_what_is_wrong() {
    let valid = envelope("v1", "Namespace", &metadata("x"));
    for (body, says) in [
        (b"{\"kind\": \"Namespace\"}".to_vec(), "k8s\\0"),
        (
            valid[..valid.len() - 2].to_vec(),
            "the runtime.Unknown envelope",
        ),
        (envelope("v1", "", &metadata("x")), "names no kind"),
        (
            envelope("v1", "Namespace", &[0x0a, 0x05, 0x0a]),
            "v1 Namespace: field 1 says it is 5 bytes long",
        ),
        (
            envelope("v1", "Namespace", &field(1, &[0x0a, 0x05, 0x0a])),
            "v1 Namespace: metadata: field 1",
        ),
        (
            envelope("v1", "Namespace", &field(1, &field(1, &[0xff, 0xfe]))),
            "not UTF-8",
        ),
        (
            envelope("v1", "Namespace", &int(1, 7)),
            "varint value where",
        ),
    ] {
        let err = decode_body(&body).unwrap_err();
        assert_eq!(err.code, 400, "{says}: {}", err.message);
        assert!(err.message.contains(says), "{says}: {}", err.message);
        assert!(
            err.message.starts_with("error decoding the protobuf body"),
            "{}",
            err.message
        );
    }
}

#[test]
fn any_truncation_or_garbage_is_an_error_never_a_panic() {
    let body = hex(
        "6b3873000a0d0a027631120753657276696365126f0a210a047376633212001a0022002a00320038\
         0042005a0b0a0361707012047376633212460a1e0a0738302d6874747012035443501850220a0801\
         10001a04687474702800120b0a036170701204737663321a002209436c757374657249503a004200\
         52005a00600068001a020a001a002200",
    );
    for len in 0..body.len() {
        let _ = decode_body(&body[..len]);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    for _ in 0..2000 {
        let mut b = body.clone();
        for _ in 0..rng.random_range(1..4) {
            let i = rng.random_range(4..b.len());
            b[i] = rng.random();
        }
        let _ = decode_body(&b);
    }
}

#[test]
fn nesting_deeper_than_any_object_is_refused() {
    let schema = Schema::parse("message t.Node\n  1 child Node\n").unwrap();
    let mut bytes = vec![];
    for _ in 0..200 {
        bytes = field(1, &bytes);
    }
    let err = to_json::message(&schema, "t.Node", &bytes).unwrap_err();
    assert!(err.contains("nested more than"), "{err}");
}

#[test]
fn an_eviction_and_a_delete_body_read_in_any_group() {
    // DeleteOptions.gracePeriodSeconds (1), Eviction.deleteOptions (2).
    let options = int(1, 5);
    let eviction = decode_body(&envelope(
        "policy/v1",
        "Eviction",
        &[metadata("p"), field(2, &options)].concat(),
    ))
    .unwrap();
    assert_eq!(eviction["metadata"]["name"], "p");
    assert_eq!(eviction["deleteOptions"]["gracePeriodSeconds"], 5);

    // A typed client's delete body names the group it deletes from.
    let delete = decode_body(&envelope("apps/v1", "DeleteOptions", &options)).unwrap();
    assert_eq!(delete["gracePeriodSeconds"], 5);
    assert_eq!(delete["apiVersion"], "apps/v1");
}
