//! The agent on node-a holding its shutdown lock with the simulated logind
//! on a private bus, for tests that reboot the node.

use std::time::Duration;

use maintd::config::{Config, ShutdownSettings};
use maintd_sim::SimCluster;
use maintd_sim::dbus::PrivateBus;
use maintd_sim::logind::{ShutdownRecord, SimLogind, SimLogindConfig};

use super::agent::RunningAgent;

pub struct LockedAgent {
    pub agent: RunningAgent,
    pub logind: SimLogind,
    _bus: PrivateBus,
}

/// Starts logind with a delay budget of `budget` and the agent (with the
/// rights deploy/ gives it, `config` otherwise) holding its lock with a
/// 1 s margin; returns once the lock is held.
pub async fn start(sim: &SimCluster, budget: Duration, mut config: Config) -> LockedAgent {
    let bus = PrivateBus::start().expect("dbus-daemon starts (CI installs the dbus package)");
    let logind = SimLogind::start(
        &bus.address,
        SimLogindConfig {
            inhibit_delay_max: budget,
        },
    )
    .await
    .unwrap();
    config.shutdown = Some(ShutdownSettings {
        sleep: false,
        margin: Duration::from_secs(1),
        bus: Some(bus.address.clone()),
    });
    let agent = RunningAgent::start_with(config, maintd::testbed::agent_client(sim, "node-a"));
    let l = &logind;
    super::eventually("maintd holds its lock", || async move {
        l.inhibitors().iter().any(|i| i.who == "maintd")
    })
    .await;
    LockedAgent {
        agent,
        logind,
        _bus: bus,
    }
}

impl LockedAgent {
    /// Reboots; returns logind's record once the reboot went ahead, which
    /// must be before logind's own limit.
    pub async fn reboot_in_time(&self) -> ShutdownRecord {
        self.logind.reboot().await;
        let record =
            tokio::time::timeout(Duration::from_secs(30), self.logind.wait_for_shutdowns(1))
                .await
                .expect("the reboot proceeds")[0]
                .clone();
        assert!(
            !record.timed_out,
            "released before logind's limit: {record:?}"
        );
        record
    }
}
