use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::attach::{Wanted, wanted};
use super::*;

#[test]
fn attachment_names_are_kubernetes_own() {
    // sha256("vol-1" + "ebs.csi.aws.com" + "node-a"), as `sha256sum` gives it.
    assert_eq!(
        attachment_name("vol-1", "ebs.csi.aws.com", "node-a"),
        "csi-7ba6b8ed285c3c863d675c3b4567d68ede4307ae1a37202e02bf2c4b9f42f28b"
    );
    // The empty input: the FIPS 180-2 test value.
    assert_eq!(
        attachment_name("", "", ""),
        "csi-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_ne!(
        attachment_name("vol-1", "ebs.csi.aws.com", "node-a"),
        attachment_name("vol-1", "ebs.csi.aws.com", "node-b"),
    );
}

#[test]
fn attacher_finalizers_sanitize_the_driver() {
    for (driver, want) in [
        ("ebs.csi.aws.com", "external-attacher/ebs-csi-aws-com"),
        ("csi-driver", "external-attacher/csi-driver"),
        ("a/b_", "external-attacher/a-b-X"),
    ] {
        assert_eq!(attacher_finalizer(driver), want, "{driver}");
    }
}

#[test]
fn detach_seconds_are_bounded_and_malformed_is_the_default() {
    let default = Duration::from_secs(1);
    let pv = |v: Option<&str>| match v {
        Some(v) => json!({"metadata": {"annotations": {DETACH_ANNOTATION: v}}}),
        None => json!({"metadata": {}}),
    };
    for (value, want) in [
        (None, default),
        (Some("0"), Duration::ZERO),
        (Some("0.25"), Duration::from_millis(250)),
        (Some(" 2 "), Duration::from_secs(2)),
        (Some("3600"), Duration::from_secs(3600)),
        (Some("1e9"), Duration::from_secs(3600)),
        (Some("-1"), default),
        (Some("NaN"), default),
        (Some("inf"), default),
        (Some("soon"), default),
        (Some(""), default),
    ] {
        assert_eq!(detach_delay(&pv(value), default), want, "{value:?}");
    }
}

fn obj(v: Value) -> Arc<Value> {
    Arc::new(v)
}

/// A bound pair as the binder leaves it (uids filled in).
fn bound(ns: &str, claim: &str, pv: &str, driver: Option<&str>) -> (Arc<Value>, Arc<Value>) {
    let (mut v, mut c) = csi_volume(ns, claim, pv, driver.unwrap_or("d"));
    if driver.is_none() {
        v["spec"]["csi"] = Value::Null;
        v["spec"]["hostPath"] = json!({"path": "/data"});
    }
    let uid = format!("uid-{claim}");
    c["metadata"]["uid"] = json!(uid);
    c["status"]["phase"] = json!("Bound");
    v["spec"]["claimRef"]["uid"] = json!(uid);
    (obj(v), obj(c))
}

fn pod(name: &str, node: &str, phase: &str, claims: &[&str]) -> Arc<Value> {
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    obj(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"nodeName": node, "volumes": volumes},
        "status": {"phase": phase},
    }))
}

#[test]
fn pods_on_nodes_want_their_csi_volumes_attached() {
    let (pv1, c1) = bound("ns", "data", "pv-1", Some("disk.example.com"));
    let (pv2, c2) = bound("ns", "local", "pv-2", None);
    let (pvs, claims) = (vec![pv1, pv2], vec![c1, c2]);
    let w = |node: &str| Wanted {
        pv: "pv-1".into(),
        node: node.into(),
        driver: "disk.example.com".into(),
    };
    let name = |node: &str| attachment_name("pv-1-handle", "disk.example.com", node);
    type Case<'a> = (&'a str, Vec<Arc<Value>>, Vec<(String, Wanted)>);
    let cases: Vec<Case> = vec![
        ("none", vec![], vec![]),
        (
            "running",
            vec![pod("a", "n1", "Running", &["data"])],
            vec![(name("n1"), w("n1"))],
        ),
        (
            "two pods on one node, one attachment",
            vec![
                pod("a", "n1", "Running", &["data"]),
                pod("b", "n1", "Pending", &["data"]),
            ],
            vec![(name("n1"), w("n1"))],
        ),
        (
            "two nodes",
            vec![
                pod("a", "n1", "Running", &["data"]),
                pod("b", "n2", "Running", &["data"]),
            ],
            vec![(name("n1"), w("n1")), (name("n2"), w("n2"))],
        ),
        (
            "unscheduled",
            vec![pod("a", "", "Pending", &["data"])],
            vec![],
        ),
        (
            "succeeded",
            vec![pod("a", "n1", "Succeeded", &["data"])],
            vec![],
        ),
        ("failed", vec![pod("a", "n1", "Failed", &["data"])], vec![]),
        (
            "not csi",
            vec![pod("a", "n1", "Running", &["local"])],
            vec![],
        ),
        (
            "no such claim",
            vec![pod("a", "n1", "Running", &["other"])],
            vec![],
        ),
    ];
    for (what, pods, want) in cases {
        let got: Vec<(String, Wanted)> = wanted(&pods, &claims, &pvs).into_iter().collect();
        assert_eq!(got, want, "{what}");
    }
    // A claim not Bound, or a volume bound to another claim, attaches nothing.
    let pods = vec![pod("a", "n1", "Running", &["data"])];
    let mut pending = (*claims[0]).clone();
    pending["status"]["phase"] = json!("Pending");
    assert!(wanted(&pods, &[obj(pending)], &pvs).is_empty());
    let mut taken = (*pvs[0]).clone();
    taken["spec"]["claimRef"]["uid"] = json!("someone-else");
    assert!(wanted(&pods, &claims, &[obj(taken)]).is_empty());
}

fn causes(kind: &str, obj: &Value) -> Vec<String> {
    let def = resources()
        .into_iter()
        .find(|d| d.kind == kind)
        .unwrap_or_else(|| unreachable!("{kind} is served"));
    let mut out = Vec::new();
    check(&def, obj, &mut out);
    out.into_iter().map(|(f, m)| format!("{f}: {m}")).collect()
}

#[test]
fn admission_refuses_what_the_api_server_refuses() {
    let (pv, claim) = csi_volume("ns", "data", "pv-1", "disk.example.com");
    assert!(causes("PersistentVolume", &pv).is_empty());
    assert!(causes("PersistentVolumeClaim", &claim).is_empty());
    let mut two = pv.clone();
    two["spec"]["hostPath"] = json!({"path": "/x"});
    assert_eq!(
        causes("PersistentVolume", &two),
        ["spec.hostPath: Forbidden: may not specify more than 1 volume type"]
    );
    let empty = json!({"metadata": {"name": "x"}, "spec": {}});
    assert_eq!(
        causes("PersistentVolume", &empty),
        [
            "spec.capacity: Required value",
            "spec.accessModes: Required value: at least 1 access mode is required",
            "spec: Required value: must specify a volume type",
        ]
    );
    let mut no_handle = pv.clone();
    no_handle["spec"]["csi"] = json!({"driver": "d"});
    assert_eq!(
        causes("PersistentVolume", &no_handle),
        ["spec.csi.volumeHandle: Required value"]
    );
    assert_eq!(
        causes("PersistentVolumeClaim", &empty),
        [
            "spec.accessModes: Required value: at least 1 access mode is required",
            "spec.resources[storage]: Required value",
        ]
    );
    assert_eq!(
        causes("VolumeAttachment", &empty),
        [
            "spec.attacher: Required value",
            "spec.nodeName: Required value",
            "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName",
        ]
    );
}

#[test]
fn what_is_fixed_stays_fixed() {
    let defs = resources();
    let def = |kind: &str| {
        defs.iter()
            .find(|d| d.kind == kind)
            .cloned()
            .unwrap_or_else(|| unreachable!())
    };
    let (pv, claim) = csi_volume("ns", "data", "pv-1", "disk.example.com");
    let mut moved = pv.clone();
    moved["spec"]["csi"]["volumeHandle"] = json!("other");
    assert!(check_update(&def("PersistentVolume"), &pv, &moved).is_err());
    let mut claimed = pv.clone();
    claimed["spec"]["claimRef"]["uid"] = json!("u");
    assert!(check_update(&def("PersistentVolume"), &pv, &claimed).is_ok());

    let mut unnamed = claim.clone();
    unnamed["spec"]["volumeName"] = Value::Null;
    assert!(
        check_update(&def("PersistentVolumeClaim"), &unnamed, &claim).is_ok(),
        "the binder names the volume"
    );
    let mut renamed = claim.clone();
    renamed["spec"]["volumeName"] = json!("pv-2");
    assert!(check_update(&def("PersistentVolumeClaim"), &claim, &renamed).is_err());
    let mut grown = claim.clone();
    grown["spec"]["resources"]["requests"]["storage"] = json!("2Gi");
    assert!(check_update(&def("PersistentVolumeClaim"), &claim, &grown).is_ok());

    let va = json!({"spec": {"attacher": "d", "nodeName": "n1", "source": {"persistentVolumeName": "pv-1"}}});
    let mut elsewhere = va.clone();
    elsewhere["spec"]["nodeName"] = json!("n2");
    assert!(check_update(&def("VolumeAttachment"), &va, &elsewhere).is_err());
    let mut attached = va.clone();
    attached["status"] = json!({"attached": true});
    assert!(check_update(&def("VolumeAttachment"), &va, &attached).is_ok());
}
