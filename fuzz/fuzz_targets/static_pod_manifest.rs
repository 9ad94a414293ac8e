//! A file in the kubelet's static pod directory, and the stash's journal,
//! as the agent (or the node helper) reads them. Input: the file's text.
//! Checks: a manifest that cannot be used says why in words; one that
//! names its pod gives a namespace and a grace period that is never
//! negative; the listing the helper sends the agent reads back the same
//! (parse(render(x)) == x); the journal's text always gives a sentence.
#![no_main]

use libfuzzer_sys::fuzz_target;
use maintd::drain::static_pods::{Manifest, StaticPodStash};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let m = maintd::fuzzing::static_pod_manifest("pod.yaml", text);
    assert!(m.grace_seconds >= 0, "a grace period is never negative");
    match (&m.pod_name, &m.error) {
        (Some(name), None) => {
            assert!(m.namespace.is_some());
            let _ = StaticPodStash::mirror_pod_name(name, "node-a");
        }
        (_, Some(e)) => assert!(!e.trim().is_empty(), "an unusable manifest says why"),
        (None, None) => panic!("a manifest without a pod name says so"),
    }
    let line = serde_json::to_string(&vec![m.clone()]).expect("a listing serializes");
    let back: Vec<Manifest> = serde_json::from_str(&line).expect("a listing reads back");
    assert_eq!(back, vec![m], "parse(render(x)) == x");
    let said = maintd::fuzzing::stash_journal(text);
    assert!(said.starts_with("an interrupted"));
});
