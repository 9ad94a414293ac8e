//! The shared state of one simulated cluster: the store, the audit log and
//! the settings, behind one lock that every verb and controller takes.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::json;

use super::audit::Audit;
use super::faults::Faults;
use super::invariants::Invariants;
use super::resources::Gr;
use super::resources::builtins;
use super::store::Store;
use super::validate::SYSTEM_PRIORITY_CLASSES;
use super::verbs::{self, Writer};

/// Settings of a simulated cluster.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// How many past events a watch can resume from before it gets 410 Gone.
    pub history: usize,
    /// How often a watch that asked for bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Also write the audit log to this file, one JSON object per line.
    pub audit_file: Option<PathBuf>,
    /// Where the simulated kubelets look for static pod manifests:
    /// `<root>/<node name>/`.
    pub static_pod_root: Option<PathBuf>,
    /// How often the simulated kubelet rereads static pod directories.
    pub static_pod_poll: Duration,
    /// The largest request body accepted.
    pub max_body: usize,
    /// How long the disruption controller takes to recompute a budget's
    /// status after its pods or spec change (a busy cluster's lag; 0 for
    /// tests that want it at once).
    pub disruption_lag: Duration,
    /// Serve the EvictionRequest API (`lifecycle.k8s.io/v1alpha1`, KEP-4563)
    /// and the Pod's `spec.evictionResponders`, as Kubernetes 1.37 does
    /// with the `EvictionRequestAPI` feature gate on. Off, the group is not
    /// listed, its paths answer 404, and a pod's responders are dropped.
    pub eviction_requests: bool,
    /// Also run the evictionrequest-controller and the responders the
    /// simulator plays, with `eviction_requests`. Off by default, as in
    /// Kubernetes 1.37.2, which ships no controller: a request is accepted
    /// and nothing acts on it. On, the simulator does what the API's type
    /// comments say the controller does (later releases are expected to
    /// ship it), for tests of what a requester sees of responders at work.
    pub eviction_request_controller: bool,
    /// How long the simulated live migration responder takes when its pod
    /// does not say (`sim.maintd.io/live-migration-seconds`).
    pub live_migration: Duration,
    /// How long detaching a CSI volume from a node takes once no pod there
    /// uses it, unless its PersistentVolume says otherwise
    /// ([`crate::volumes::DETACH_ANNOTATION`]).
    pub volume_detach: Duration,
    /// How long an eviction takes from reading its budget to writing its
    /// status back: a write of that status in between (another
    /// eviction's, or the disruption controller's) is a conflict, and the
    /// eviction reads the budget again 500 ms later, as Kubernetes' does.
    /// Kubernetes 1.37 on two cores granted its fastest evictions in 10 ms.
    pub eviction_window: Duration,
    /// How often the API server's watch cache asks etcd how far it has
    /// come while a consistent read waits on it (Kubernetes 1.37:
    /// k8s.io/apiserver's progressRequestPeriod, 100 ms). An eviction of a
    /// running pod lists the namespace's budgets with such a read, served
    /// once the cache has caught up: at the next of those answers, or
    /// sooner if a budget is written meanwhile. Kubernetes 1.37 made the
    /// evictions of one drain wait 43 to 49 ms for it. Zero: no wait.
    pub cache_progress: Duration,
    /// Serve watches that send the current objects first
    /// (`sendInitialEvents`), as Kubernetes 1.34 and later do with the
    /// `WatchList` feature gate on (its default). Off, such a watch is
    /// refused as invalid, as an API server with the gate off refuses it.
    pub watch_list: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            history: 50_000,
            bookmark_interval: Duration::from_secs(5),
            audit_file: None,
            static_pod_root: None,
            static_pod_poll: Duration::from_millis(200),
            max_body: 3 * 1024 * 1024,
            disruption_lag: Duration::from_millis(300),
            eviction_requests: false,
            eviction_request_controller: false,
            live_migration: Duration::from_secs(5),
            volume_detach: Duration::from_secs(1),
            eviction_window: Duration::from_millis(10),
            cache_progress: Duration::from_millis(100),
            watch_list: true,
        }
    }
}

pub struct SimState {
    store: Mutex<Store>,
    /// Faults the server is told to have (tests and benches).
    pub faults: Arc<Faults>,
    /// Disruption safety as checked on every eviction and pod deletion.
    pub invariants: Invariants,
    pub audit: Audit,
    /// The watches being served now.
    pub watches: super::watch::OpenWatches,
    pub config: SimConfig,
    pub started: Instant,
    /// The bearer tokens this cluster issued, and who each one is.
    pub tokens: super::auth::Tokens,
    /// A token with an admin's rights (`system:masters`), as kubeadm's
    /// admin.conf carries: what tests, the demo and kubectl act with.
    pub admin_token: String,
    /// The resourceVersion each budget's status was last written at (by
    /// the budget's uid), and whether by an eviction or the disruption
    /// controller: whom an eviction that lost the race for its budget
    /// lost it to (see `eviction::wait_turn`).
    pub(crate) status_writes: std::sync::Mutex<
        std::collections::HashMap<String, (String, crate::eviction::StatusWriter)>,
    >,
    /// Evictions that lost the race for their budget's status to another
    /// eviction and waited the API server's backoff before reading it
    /// again.
    pub eviction_races: std::sync::atomic::AtomicU64,
    /// The same, lost to the disruption controller's write.
    pub controller_races: std::sync::atomic::AtomicU64,
    /// The same, lost to any other write of the budget (its spec or
    /// labels edited, another client's write of its status).
    pub other_races: std::sync::atomic::AtomicU64,
    /// Evictions between reading their budget and writing it back (or
    /// waiting to read it again) now.
    pub evictions_in_window: std::sync::atomic::AtomicUsize,
}

impl SimState {
    pub fn new(config: SimConfig) -> Arc<Self> {
        let mut store = Store::new(config.history);
        for def in builtins() {
            store.register(def);
        }
        let (events, core_events) = super::events::view();
        store.add_view(events, core_events);
        if config.eviction_requests {
            for def in super::lifecycle::resources() {
                store.register(def);
            }
        }
        let tokens = super::auth::Tokens::default();
        let admin_token = tokens.issue_admin();
        let sim = Arc::new(SimState {
            tokens,
            admin_token,
            store: Mutex::new(store),
            faults: Arc::default(),
            invariants: Invariants::new(config.disruption_lag),
            audit: Audit::new(config.audit_file.clone()),
            watches: Default::default(),
            config,
            started: Instant::now(),
            status_writes: Default::default(),
            eviction_races: Default::default(),
            controller_races: Default::default(),
            other_races: Default::default(),
            evictions_in_window: Default::default(),
        });
        // Every cluster has these namespaces and priority classes.
        let system = Writer {
            manager: "kube-apiserver".into(),
            force: false,
            user: None,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let def = sim.store().resource(&Gr::namespaces());
            if let Some(def) = def {
                let _ = verbs::create(
                    &sim,
                    &def,
                    None,
                    json!({"metadata": {"name": ns}}),
                    &system,
                    false,
                );
            }
        }
        for (name, value) in SYSTEM_PRIORITY_CLASSES {
            let def = sim
                .store()
                .resource(&Gr::new("scheduling.k8s.io", "priorityclasses"));
            if let Some(def) = def {
                let pc = json!({"metadata": {"name": name}, "value": value, "description": "Used for system critical pods that must run in the cluster."});
                let _ = verbs::create(&sim, &def, None, pc, &system, false);
            }
        }
        sim
    }

    /// Asks RBAC whether `user` may do what `attrs` say, and records the
    /// question and the answer in the audit log.
    pub fn authorize(
        &self,
        user: &super::auth::UserInfo,
        attrs: &super::rbac::Attributes,
    ) -> Result<(), super::errors::ApiError> {
        let decision = super::rbac::authorize(&self.store(), user, attrs);
        let res = attrs.resource.as_ref();
        self.audit
            .record_authorization(super::audit::AuthorizationRecord {
                user: user.username.clone(),
                verb: attrs.verb.clone(),
                group: res.map(|r| r.group.clone()).unwrap_or_default(),
                resource: res.map(|r| r.full_resource()).unwrap_or_default(),
                namespace: res.map(|r| r.namespace.clone()).unwrap_or_default(),
                name: res.map(|r| r.name.clone()).unwrap_or_default(),
                path: attrs.path.clone(),
                allowed: decision.is_ok(),
            });
        decision
    }

    /// The store, locked. A panic elsewhere while holding the lock must not
    /// take the whole simulator down, so a poisoned lock is recovered.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes `node` report itself Ready, NotReady, or not at all
    /// (unreachable), as its kubelet or the node controller would write it;
    /// the simulated node lifecycle controller then taints or untaints it.
    pub fn set_node_health(&self, node: &str, health: super::controllers::NodeHealth) {
        super::controllers::set_node_health(self, node, health);
    }

    /// What an API server restart looks like to its clients: every
    /// connection closes, and the new watch cache starts at the current
    /// resourceVersion, so a watch resumed from before gets 410 Gone and
    /// the client has to list again.
    pub fn restart(&self) {
        self.store().forget_history();
        self.faults.close_all_connections();
    }
}
