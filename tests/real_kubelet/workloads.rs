//! Workloads that really run on the real node: busybox processes that
//! take a set time to stop (a trap on SIGTERM), so a pod's grace period is
//! spent for real; Deployments with budgets, a DaemonSet, static pods.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec, Toleration};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;
use kube::api::PostParams;

/// How long every workload pod may take to stop (its grace period): far
/// more than any of them takes.
pub const GRACE_SECONDS: i64 = 30;

/// A container that runs until SIGTERM, then takes `stop_seconds` to exit
/// (the shell's trap), as a process that flushes its state would.
pub fn trap_container(image: &str, stop_seconds: u32) -> Container {
    Container {
        name: "app".into(),
        image: Some(image.into()),
        image_pull_policy: Some("Never".into()),
        command: Some(vec![
            "/bin/sh".into(),
            "-c".into(),
            // `wait` returns at once on a signal (a foreground sleep would
            // hold the trap back for up to its length).
            format!(
                "trap 'echo stopping; sleep {stop_seconds}; echo stopped; exit 0' TERM; \
                 echo started; while :; do sleep 3600 & wait $!; done"
            ),
        ]),
        ..Default::default()
    }
}

fn labels(app: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("app".to_string(), app.to_string())])
}

fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        ..Default::default()
    }
}

fn pod_spec(image: &str, class: Option<&str>, stop_seconds: u32) -> PodSpec {
    PodSpec {
        priority_class_name: class.map(Into::into),
        termination_grace_period_seconds: Some(GRACE_SECONDS),
        containers: vec![trap_container(image, stop_seconds)],
        // Replacements may go to the KWOK node, whose taints (none) and
        // readiness KWOK fakes.
        tolerations: Some(vec![Toleration {
            key: Some("kwok.x-k8s.io/node".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// `replicas` pods of app `name`, priority class `class` (none: 0).
pub fn deployment(
    ns: &str,
    name: &str,
    replicas: i32,
    class: Option<&str>,
    image: &str,
    stop_seconds: u32,
) -> Deployment {
    Deployment {
        metadata: meta(ns, name),
        spec: DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels(name)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(name)),
                    ..Default::default()
                }),
                spec: Some(pod_spec(image, class, stop_seconds)),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A DaemonSet of app `name` on the real nodes only.
pub fn daemonset(ns: &str, name: &str, image: &str, stop_seconds: u32) -> DaemonSet {
    let mut spec = pod_spec(image, None, stop_seconds);
    spec.node_selector = Some(BTreeMap::from([(
        "maintd.io/e2e-real-node".to_string(),
        "true".to_string(),
    )]));
    DaemonSet {
        metadata: meta(ns, name),
        spec: DaemonSetSpec {
            selector: LabelSelector {
                match_labels: Some(labels(name)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(name)),
                    ..Default::default()
                }),
                spec: Some(spec),
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A budget keeping at least `min_available` pods of app `app`.
pub fn budget(ns: &str, app: &str, min_available: i32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(ns, app),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available)),
            selector: Some(LabelSelector {
                match_labels: Some(labels(app)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn priority_class(name: &str, value: i32) -> PriorityClass {
    PriorityClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        value: Some(value),
        ..Default::default()
    }
}

/// A static pod's manifest (JSON, which the kubelet reads as YAML).
pub fn static_pod(
    ns: &str,
    name: &str,
    class: Option<&str>,
    image: &str,
    stop_seconds: u32,
) -> String {
    let pod = Pod {
        metadata: ObjectMeta {
            labels: Some(labels(name)),
            ..meta(ns, name)
        },
        spec: Some(PodSpec {
            tolerations: None,
            ..pod_spec(image, class, stop_seconds)
        }),
        ..Default::default()
    };
    let mut value = serde_json::to_value(&pod).expect("a pod serializes");
    value["apiVersion"] = "v1".into();
    value["kind"] = "Pod".into();
    serde_json::to_string_pretty(&value).expect("JSON")
}

/// Creates `obj` as cluster-admin.
pub async fn create<K>(client: &kube::Client, obj: &K)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let ns = obj.meta().namespace.clone().expect("a namespaced object");
    Api::<K>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), obj)
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", obj.meta().name));
}

/// Creates the cluster-scoped `obj` as cluster-admin.
pub async fn create_cluster<K>(client: &kube::Client, obj: &K)
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::all(client.clone())
        .create(&PostParams::default(), obj)
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", obj.meta().name));
}
