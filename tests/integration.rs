//! Every integration test of maintd, in one test binary: each file of
//! tests/ is a module here, and its tests are named after it
//! (`scripts/test rolling_reboot::` runs one file's). One binary links once and
//! builds what the files share (tests/common, the simulator's generic code)
//! once, instead of once per file: on 2 cores that was most of the tests'
//! build time. nextest still runs each test in a process of its own.

mod common;
// Helpers more than one file uses, loaded once.
#[path = "sim_eviction_requests/support.rs"]
mod eviction_request_support;
#[path = "logind/support.rs"]
#[allow(dead_code)]
mod logind_support;
#[path = "alerts/prometheus.rs"]
mod prometheus;
#[path = "real_kubelet/mod.rs"]
mod real_kubelet;
#[path = "real_soak/mod.rs"]
mod real_soak;

#[path = "alerts.rs"]
mod alerts;
#[path = "budget_watch.rs"]
mod budget_watch;
#[path = "clock_skew.rs"]
mod clock_skew;
#[path = "confinement.rs"]
mod confinement;
#[path = "coordination.rs"]
mod coordination;
#[path = "demo.rs"]
mod demo;
#[path = "deploy.rs"]
mod deploy;
#[path = "deploy_apply.rs"]
mod deploy_apply;
#[path = "docs.rs"]
mod docs;
#[path = "drain.rs"]
mod drain;
#[path = "drain_stalls.rs"]
mod drain_stalls;
#[path = "drain_workloads.rs"]
mod drain_workloads;
#[path = "events.rs"]
mod events;
#[path = "eviction_request_drain.rs"]
mod eviction_request_drain;
#[path = "eviction_request_fallback.rs"]
mod eviction_request_fallback;
#[path = "faults.rs"]
mod faults;
#[path = "fleetlock.rs"]
mod fleetlock;
#[path = "fleetlock_endpoint.rs"]
mod fleetlock_endpoint;
#[path = "grafana_dashboard.rs"]
mod grafana_dashboard;
#[path = "helm.rs"]
mod helm;
#[path = "install.rs"]
mod install;
#[path = "kubectl.rs"]
mod kubectl;
#[path = "kubectl_style.rs"]
mod kubectl_style;
#[path = "lifecycle_conditions.rs"]
mod lifecycle_conditions;
#[path = "local_endpoint.rs"]
mod local_endpoint;
#[path = "logind.rs"]
mod logind;
#[path = "maintenance_drain.rs"]
mod maintenance_drain;
#[path = "maintenance_trigger.rs"]
mod maintenance_trigger;
#[path = "medik8s.rs"]
mod medik8s;
#[path = "node_helper.rs"]
mod node_helper;
#[path = "node_status.rs"]
mod node_status;
#[path = "notify.rs"]
mod notify;
#[path = "person_errors.rs"]
mod person_errors;
#[path = "plan_cli.rs"]
mod plan_cli;
#[path = "policy.rs"]
mod policy;
#[path = "prometheus_rules.rs"]
mod prometheus_rules;
#[path = "real_api_priority.rs"]
mod real_api_priority;
#[path = "real_connections.rs"]
mod real_connections;
#[path = "real_drain.rs"]
mod real_drain;
#[path = "real_eviction_requests.rs"]
mod real_eviction_requests;
#[path = "real_fault_soak.rs"]
mod real_fault_soak;
#[path = "real_helm.rs"]
mod real_helm;
#[path = "real_kubectl_style.rs"]
mod real_kubectl_style;
#[path = "real_kubelet_drain.rs"]
mod real_kubelet_drain;
#[path = "real_kubelet_install.rs"]
mod real_kubelet_install;
#[path = "real_kubelet_reboot.rs"]
mod real_kubelet_reboot;
#[path = "real_kubelet_upgrade.rs"]
mod real_kubelet_upgrade;
#[path = "real_maintenance.rs"]
mod real_maintenance;
#[path = "real_node_parts.rs"]
mod real_node_parts;
#[path = "real_parity.rs"]
mod real_parity;
#[path = "real_watch_lists.rs"]
mod real_watch_lists;
#[path = "reboot_safety.rs"]
mod reboot_safety;
#[path = "restart.rs"]
mod restart;
#[path = "rolling_reboot.rs"]
mod rolling_reboot;
#[path = "shutdown.rs"]
mod shutdown;
#[path = "sim_api.rs"]
mod sim_api;
#[path = "sim_budgets.rs"]
mod sim_budgets;
#[path = "sim_controllers.rs"]
mod sim_controllers;
#[path = "sim_crd_schema.rs"]
mod sim_crd_schema;
#[path = "sim_deployments.rs"]
mod sim_deployments;
#[path = "sim_events.rs"]
mod sim_events;
#[path = "sim_eviction_request_validation.rs"]
mod sim_eviction_request_validation;
#[path = "sim_eviction_requests.rs"]
mod sim_eviction_requests;
#[path = "sim_nodes.rs"]
mod sim_nodes;
#[path = "sim_statefulsets.rs"]
mod sim_statefulsets;
#[path = "sim_types.rs"]
mod sim_types;
#[path = "sim_volumes.rs"]
mod sim_volumes;
#[path = "soak.rs"]
mod soak;
#[path = "timeline.rs"]
mod timeline;
#[path = "volume_detach.rs"]
mod volume_detach;
#[path = "watch_lists.rs"]
mod watch_lists;
