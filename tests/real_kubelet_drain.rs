//! A drain on a real node (scripts/real-node), by deploy/'s DaemonSet:
//! the drain taint empties the node in plan order — ordinary pods by
//! priority through the Eviction API behind their budget, then the
//! DaemonSet's, then the static pods, whose manifests the node helper
//! moves out of the kubelet's directory — each pod taking the time its
//! own process takes to stop; the taint removed, the manifests come back,
//! the kubelet runs the static pods again and the node is uncordoned.
//! What happened when is read from the API server's audit log.

use std::time::Instant;

use crate::real_kubelet::node::{NodeOptions, PATIENCE};
use crate::real_kubelet::scenario::{self, APPS, Kind};
use crate::real_kubelet::timeline::ReadyFloor;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_taint_empties_a_real_node_in_plan_order_and_its_removal_undoes_it() {
    let (node, client) = scenario::installed(NodeOptions::default()).await;
    let pods = scenario::run_apps(&node, &client, &APPS).await;
    let manifests = scenario::manifests(&node, &APPS);
    // Room for what leaves: the budget lets web's pods go one at a time,
    // as each replacement is Ready there.
    node.kwok_node(&client, "spare").await;
    let web_floor = ReadyFloor::start(&client, scenario::NS, "web");

    let t = Instant::now();
    scenario::taint(&node, "maintd.io/drain=e2e:NoSchedule");
    let c = client.clone();
    let name = node.name.clone();
    crate::common::eventually_within("the node reads Drained", PATIENCE, || {
        let (c, name) = (c.clone(), name.clone());
        async move {
            scenario::condition(&c, &name, "Drained").await
                == Some(("True".into(), "DrainCompleted".into()))
        }
    })
    .await;
    let drained = t.elapsed();

    // The static pods: their manifests moved into the stash, unchanged.
    assert_eq!(
        scenario::files(&node.stash()),
        manifests,
        "the node helper stashed the manifests"
    );
    for file in manifests.keys() {
        assert!(
            !node.manifests().join(file).exists(),
            "{file} left the kubelet's directory"
        );
    }
    // Nothing left on the node but maintd's own pod.
    let left = node.kubectl_ok(&[
        "get",
        "pods",
        "-A",
        "--field-selector",
        &format!("spec.nodeName={}", node.name),
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
    ]);
    let left: Vec<&str> = left.split_whitespace().collect();
    assert!(
        left.len() == 1 && left[0].starts_with("maintd/maintd-"),
        "only maintd's pod stays: {left:?}"
    );
    let (cordoned, taints) = scenario::cordon_and_taints(&client, &node.name).await;
    assert!(cordoned, "maintd cordoned the node");
    assert!(
        taints.contains(&"maintd.io/draining:NoSchedule".to_string()),
        "{taints:?}"
    );
    assert!(
        web_floor.least() >= 1,
        "web's budget held: {} Ready at the least",
        web_floor.least()
    );

    // What the API server saw: evictions (never deletes) by maintd, each
    // pod gone when the kubelet saw its process stop, stage after stage.
    let report = scenario::assert_left_in_plan_order(&node, &pods, &APPS);
    eprintln!("drained in {drained:?}:\n  {}", report.join("\n  "));

    // The maintenance ends: the manifests back as they were, the kubelet
    // runs the static pods again, the node is back in service.
    let t = Instant::now();
    scenario::taint(&node, "maintd.io/drain-");
    let dir = node.manifests();
    let c = client.clone();
    let name = node.name.clone();
    let want = manifests.clone();
    crate::common::eventually_within("the node back in service", PATIENCE, || {
        let (c, name, dir, want) = (c.clone(), name.clone(), dir.clone(), want.clone());
        async move {
            let (cordoned, taints) = scenario::cordon_and_taints(&c, &name).await;
            !cordoned && taints.is_empty() && scenario::files(&dir) == want
        }
    })
    .await;
    assert!(
        scenario::files(&node.stash()).is_empty(),
        "the stash is empty"
    );
    let statics: Vec<String> = APPS
        .iter()
        .filter(|a| matches!(a.kind, Kind::Static))
        .map(|a| format!("{}-{}", a.name, node.name))
        .collect();
    let c = client.clone();
    crate::common::eventually_within("the kubelet runs the static pods again", PATIENCE, || {
        let (c, statics) = (c.clone(), statics.clone());
        async move {
            let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
                kube::Api::namespaced(c, scenario::NS);
            let mut all = true;
            for s in &statics {
                all &= api
                    .get_opt(s)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|p| crate::common::is_ready(&p));
            }
            all
        }
    })
    .await;
    eprintln!(
        "back in service, static pods running again, in {:?}",
        t.elapsed()
    );
}
