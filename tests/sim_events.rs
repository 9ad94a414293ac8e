//! Events are one store served by two APIs, as on a real cluster: an Event
//! written through events.k8s.io/v1 is read, listed, watched, patched and
//! deleted through core/v1, with its fields converted, and the reverse;
//! each API selects Events by its own field names; and `kubectl describe
//! node` and `kubectl get events` show the agent's Node Events.

use crate::common;

use common::kubectl::Kubectl;
use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Api;
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use maintd::drain::progress::EventKind;

fn micro(s: &str) -> MicroTime {
    MicroTime(s.parse().unwrap())
}

fn time(s: &str) -> Time {
    Time(s.parse().unwrap())
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        ..Default::default()
    }
}

/// A Node's Event as the agent writes it, named by its node in `uid`.
fn node_event(name: &str, node: &str, reason: &str) -> events::Event {
    events::Event {
        metadata: meta(name),
        event_time: Some(micro("2026-11-27T10:00:00.000001Z")),
        reporting_controller: Some("maintd.io/agent".into()),
        reporting_instance: Some(format!("maintd-{node}")),
        action: Some("Drain".into()),
        reason: Some(reason.into()),
        type_: Some("Normal".into()),
        note: Some(format!("{reason} on {node}")),
        regarding: Some(core::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            namespace: Some(String::new()),
            uid: Some(node.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test]
async fn an_event_written_through_one_api_is_read_through_the_other_converted() {
    let sim = sim().await;
    let client = sim.client();
    let via_events: Api<events::Event> = Api::namespaced(client.clone(), "default");
    let via_core: Api<core::Event> = Api::namespaced(client.clone(), "default");

    // events.k8s.io/v1 → core/v1, every field that has a counterpart and
    // that API may write (the deprecated* ones must stay unset there).
    let mut written = node_event("node-a.1", "node-a", "Drained");
    written.series = Some(events::EventSeries {
        count: 3,
        last_observed_time: micro("2026-11-27T10:01:00.000002Z"),
    });
    written.related = Some(core::ObjectReference {
        kind: Some("Pod".into()),
        name: Some("web-1".into()),
        namespace: Some("shop".into()),
        ..Default::default()
    });
    let created = via_events
        .create(&PostParams::default(), &written)
        .await
        .unwrap();
    let read = via_core.get("node-a.1").await.unwrap();
    assert_eq!(read.metadata.uid, created.metadata.uid, "one object");
    assert_eq!(
        read.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(read.involved_object, written.regarding.clone().unwrap());
    assert_eq!(read.message.as_deref(), Some("Drained on node-a"));
    assert_eq!(read.reporting_component.as_deref(), Some("maintd.io/agent"));
    assert_eq!(read.reporting_instance.as_deref(), Some("maintd-node-a"));
    assert_eq!(
        (&read.first_timestamp, &read.count),
        (&None, &None),
        "nothing where nothing was written"
    );
    assert_eq!(read.event_time, written.event_time);
    assert_eq!(read.related, written.related);
    assert_eq!(
        read.series.as_ref().map(|s| s.count),
        Some(Some(3)),
        "the series, as core/v1 has it"
    );
    assert_eq!(
        (
            read.action.as_deref(),
            read.reason.as_deref(),
            read.type_.as_deref()
        ),
        (Some("Drain"), Some("Drained"), Some("Normal"))
    );

    // A patch through core/v1 shows through events.k8s.io/v1.
    via_core
        .patch(
            "node-a.1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"message": "drained again", "count": 4})),
        )
        .await
        .unwrap();
    let back = via_events.get("node-a.1").await.unwrap();
    assert_eq!(back.note.as_deref(), Some("drained again"));
    assert_eq!(back.deprecated_count, Some(4));
    assert_eq!(back.regarding, written.regarding);

    // core/v1 → events.k8s.io/v1.
    let core_event = core::Event {
        metadata: meta("web-1.2"),
        involved_object: core::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some("web-1".into()),
            namespace: Some("default".into()),
            uid: Some("0f6b".into()),
            field_path: Some("spec.containers{web}".into()),
            ..Default::default()
        },
        reason: Some("Killing".into()),
        message: Some("Stopping container web".into()),
        source: Some(core::EventSource {
            component: Some("kubelet".into()),
            host: Some("node-a".into()),
        }),
        first_timestamp: Some(time("2026-11-27T10:00:00Z")),
        last_timestamp: Some(time("2026-11-27T10:00:05Z")),
        count: Some(2),
        type_: Some("Normal".into()),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some("node-a".into()),
        ..Default::default()
    };
    via_core
        .create(&PostParams::default(), &core_event)
        .await
        .unwrap();
    let read = via_events.get("web-1.2").await.unwrap();
    assert_eq!(read.regarding, Some(core_event.involved_object.clone()));
    assert_eq!(read.note, core_event.message);
    assert_eq!(read.reporting_controller.as_deref(), Some("kubelet"));
    assert_eq!(read.deprecated_source, core_event.source);
    assert_eq!(read.deprecated_first_timestamp, core_event.first_timestamp);
    assert_eq!(read.deprecated_last_timestamp, core_event.last_timestamp);
    assert_eq!(read.deprecated_count, Some(2));

    // Both lists hold both Events; a delete through one is one through both.
    let names = |items: Vec<Option<String>>| {
        let mut names: Vec<String> = items.into_iter().flatten().collect();
        names.sort();
        names
    };
    let listed_core = via_core.list(&ListParams::default()).await.unwrap();
    let listed_events = via_events.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        names(
            listed_core
                .items
                .into_iter()
                .map(|e| e.metadata.name)
                .collect()
        ),
        ["node-a.1", "web-1.2"]
    );
    assert_eq!(
        names(
            listed_events
                .items
                .into_iter()
                .map(|e| e.metadata.name)
                .collect()
        ),
        ["node-a.1", "web-1.2"]
    );
    via_events
        .delete("web-1.2", &DeleteParams::default())
        .await
        .unwrap();
    assert!(via_core.get_opt("web-1.2").await.unwrap().is_none());
    let err = via_events.get("web-1.2").await.unwrap_err();
    assert!(
        err.to_string()
            .contains("events.events.k8s.io \"web-1.2\" not found"),
        "the error names the resource asked for: {err}"
    );
}

/// A watch through either API sees the Events written through the other,
/// converted, and its field selector picks them by its own names.
#[tokio::test]
async fn each_api_watches_and_selects_the_others_events_by_its_own_field_names() {
    let sim = sim().await;
    let client = sim.client();
    let via_events: Api<events::Event> = Api::namespaced(client.clone(), "default");
    let via_core: Api<core::Event> = Api::all(client.clone());
    let node_a = "involvedObject.kind=Node,involvedObject.name=node-a,involvedObject.namespace=,involvedObject.uid=node-a";
    let mut watch = via_core
        .watch(&WatchParams::default().fields(node_a), "0")
        .await
        .unwrap()
        .boxed();
    for (name, node, reason) in [
        ("node-b.1", "node-b", "DrainStarted"),
        ("node-a.1", "node-a", "DrainStarted"),
        ("node-a.2", "node-a", "Drained"),
    ] {
        via_events
            .create(&PostParams::default(), &node_event(name, node, reason))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match tokio::time::timeout(PATIENCE, watch.try_next()).await {
            Ok(Ok(Some(WatchEvent::Added(e)))) => {
                assert_eq!(e.reporting_component.as_deref(), Some("maintd.io/agent"));
                seen.push(e.metadata.name.unwrap_or_default());
            }
            other => panic!("the watch of node-a's Events: {other:?}"),
        }
    }
    assert_eq!(seen, ["node-a.1", "node-a.2"]);

    // Lists, through each API with its own names for the same fields.
    let listed_core = |fields: &'static str| {
        let via_core = via_core.clone();
        async move {
            let list = via_core.list(&ListParams::default().fields(fields)).await;
            let mut names: Vec<String> = list
                .unwrap()
                .items
                .into_iter()
                .filter_map(|e| e.metadata.name)
                .collect();
            names.sort();
            names
        }
    };
    let listed_events = |fields: &'static str| {
        let via_events = via_events.clone();
        async move {
            let list = via_events.list(&ListParams::default().fields(fields)).await;
            let mut names: Vec<String> = list
                .unwrap()
                .items
                .into_iter()
                .filter_map(|e| e.metadata.name)
                .collect();
            names.sort();
            names
        }
    };
    assert_eq!(listed_core(node_a).await, ["node-a.1", "node-a.2"]);
    assert_eq!(
        listed_events("regarding.kind=Node,regarding.name=node-a,regarding.uid=node-a").await,
        ["node-a.1", "node-a.2"]
    );
    assert_eq!(listed_core("reason=Drained").await, ["node-a.2"]);
    assert_eq!(
        listed_events("reason=Drained,type=Normal").await,
        ["node-a.2"]
    );
    assert_eq!(
        listed_core("source=maintd.io/agent,reportingComponent=maintd.io/agent").await,
        ["node-a.1", "node-a.2", "node-b.1"],
        "an Event with no source is found by its reporting controller"
    );
    assert_eq!(
        listed_events("reportingController=maintd.io/agent,regarding.name!=node-a").await,
        ["node-b.1"]
    );
    assert!(listed_core("involvedObject.uid=6f1c").await.is_empty());

    // Each API refuses the other's names, as the API server does.
    for (path, field) in [
        ("/api/v1/events", "regarding.kind"),
        ("/apis/events.k8s.io/v1/events", "involvedObject.kind"),
        ("/apis/events.k8s.io/v1/events", "source"),
    ] {
        let (code, status) = raw(
            &sim,
            "GET",
            &format!("{path}?fieldSelector={field}%3DNode"),
            "",
            vec![],
        )
        .await;
        assert_eq!(
            (code, status["message"].as_str()),
            (
                400,
                Some(format!("field label not supported: {field}").as_str())
            )
        );
    }
}

/// What an operator sees on a real cluster: `kubectl describe node` lists
/// the agent's Node Events (it asks core/v1 for them by the node's uid and
/// again by its name in `involvedObject.uid`), and `kubectl get events`
/// shows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_node_and_get_events_show_the_agents_node_events() {
    let sim = scenario("small.yaml").await;
    let k = Kubectl::new(&sim);
    let agent = agent::RunningAgent::start(&sim, "node-a", None);
    taint(&sim.client(), "node-a", "maintd.io/drain", Some("")).await;
    agent.wait_event(EventKind::DrainStarted).await;
    let row = |out: &str| {
        out.split_once("Events:")
            .map(|(_, events)| events.to_string())
            .unwrap_or_default()
            .lines()
            .find(|l| l.contains("DrainStarted"))
            .map(str::to_string)
    };
    let k = &k;
    eventually(
        "kubectl describe node lists the agent's Event",
        || async move { row(&k.ok(&["describe", "node", "node-a"]).await).is_some() },
    )
    .await;
    let described = k.ok(&["describe", "node", "node-a"]).await;
    let row = row(&described).unwrap();
    for want in [
        "Normal",
        "maintd.io/agent",
        "maintd started draining the node",
    ] {
        assert!(row.contains(want), "{want}: {row}\n{described}");
    }
    assert!(!row.contains("<unknown>"), "the age is known: {row}");

    let listed = k
        .ok(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.kind=Node,involvedObject.name=node-a",
        ])
        .await;
    let line = listed
        .lines()
        .find(|l| l.contains("DrainStarted"))
        .unwrap_or_else(|| panic!("kubectl get events: {listed}"));
    assert!(line.contains("node/node-a"), "{line}");
    agent.stop().await;
}
