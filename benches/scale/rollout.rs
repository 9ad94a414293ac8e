//! A rolling reboot's figures, whichever API server it ran against: the
//! fleet's wall time against its ideal, the most nodes out of scheduling
//! at once, each step of a turn, and where the slots stood idle. The
//! checks refuse figures that cannot be true.

/// The rolling reboot as the bench saw it, looking at the Nodes, NodeDrains
/// and slot Leases every 50 ms (in the simulator's store, or in the bench's
/// watches of the real API server).
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Rollout {
    /// The object's `maxConcurrentDrains`.
    pub slots: usize,
    /// The object's `cordonAhead`.
    pub ahead: usize,
    /// How long each rebooting node stayed NotReady.
    #[serde(default)]
    pub reboot_ms: u64,
    /// How many drain orders the nodes were labelled in.
    #[serde(default)]
    pub orders: usize,
    /// Nodes cordoned before every node of a lower order was back.
    #[serde(default)]
    pub out_of_order: usize,
    /// From the first node seen cordoned to the last seen uncordoned.
    pub wall_secs: f64,
    /// Every node's time unschedulable, added up.
    pub unschedulable_secs: f64,
    /// Every node's turn, added up: from taking its slot (or its cordon,
    /// if later) to its uncordon. The same as the time unschedulable when
    /// no node is cordoned ahead.
    pub turn_secs: f64,
    /// The most nodes seen unschedulable in one look.
    pub most_unschedulable: usize,
    /// Nodes never seen cordoned: their time is not measured.
    pub never_cordoned: usize,
    /// Nodes seen cordoned more than once (a turn taken again).
    pub cordoned_again: usize,
    /// How far apart the looks were, ms.
    pub look_mean_ms: f64,
    pub look_max_ms: f64,
    /// The fewest and most nodes one slot was held by.
    pub holds_per_slot: (usize, usize),
    /// Where a node's turn goes, step by step.
    pub steps: Vec<Step>,
    /// Slot-seconds a slot had no node taking its turn, by why; together
    /// they are `wall_secs × slots − turn_secs`.
    pub idle: Vec<(String, f64)>,
}

/// One step of the nodes' turns: how long it took, over the nodes (or
/// slot handovers) it was seen for, in seconds.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct Step {
    pub what: String,
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub max: f64,
}

impl Step {
    pub fn of(what: &str, mut v: Vec<f64>) -> Step {
        v.sort_by(f64::total_cmp);
        let at = |q: f64| {
            v.get(((v.len().saturating_sub(1)) as f64 * q).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        Step {
            what: what.to_string(),
            count: v.len(),
            mean: v.iter().sum::<f64>() / v.len().max(1) as f64,
            p50: at(0.5),
            p90: at(0.9),
            max: v.last().copied().unwrap_or(0.0),
        }
    }
}

impl Rollout {
    /// The wall time if the slots had always been full: every node's turn,
    /// shared by the slots.
    pub fn ideal_secs(&self) -> f64 {
        self.turn_secs / self.slots.max(1) as f64
    }

    pub fn ratio(&self) -> f64 {
        self.wall_secs / self.ideal_secs()
    }

    /// Refuses figures that cannot be true: a bench that prints numbers for
    /// a rollout it did not see is worse than none.
    pub fn check(&self, n: usize) {
        assert!(
            self.never_cordoned == 0,
            "N={n}: {} NODES WERE NEVER SEEN CORDONED: either their turn never cordoned them or a 50 ms look missed it; their time out of scheduling is not measured, so there is no ideal to compare with",
            self.never_cordoned
        );
        assert!(
            self.wall_secs > 0.0 && self.turn_secs > 0.0,
            "N={n}: NO TURN MEASURED (wall {:.3} s, sum {:.3} s)",
            self.wall_secs,
            self.turn_secs
        );
        assert!(
            self.most_unschedulable <= self.slots + self.ahead,
            "N={n}: {} NODES WERE UNSCHEDULABLE AT ONCE, more than {} slots + {} cordoned ahead",
            self.most_unschedulable,
            self.slots,
            self.ahead
        );
        assert!(
            self.out_of_order == 0,
            "N={n}: {} NODES WERE CORDONED BEFORE EVERY NODE OF A LOWER DRAIN ORDER WAS BACK IN SCHEDULING ({} orders)",
            self.out_of_order,
            self.orders
        );
        let ratio = self.ratio();
        assert!(
            ratio >= 1.0,
            "N={n}: THE ROLLING REBOOT BEAT ITS IDEAL ({ratio:.3}x) with {} slots: more turns at once than slots, or a wrong measurement",
            self.slots,
        );
    }

    /// The rollout's figures, a few lines, indented under a row.
    pub fn print(&self) {
        let ro = self;
        println!(
            "    rolling reboot: wall time {:.1} s (first cordon to last uncordon), ideal {:.1} s ({:.1} s of turns in all ÷ {} slots; {:.1} s unschedulable): {:.2}x; most nodes unschedulable at once {} of {} slots + {} cordoned ahead; nodes cordoned more than once {}; looks every {:.0} ms (at most {:.0} ms); reboots {} ms NotReady; drain orders {} (nodes out of order {})",
            ro.wall_secs,
            ro.ideal_secs(),
            ro.turn_secs,
            ro.slots,
            ro.unschedulable_secs,
            ro.ratio(),
            ro.most_unschedulable,
            ro.slots,
            ro.ahead,
            ro.cordoned_again,
            ro.look_mean_ms,
            ro.look_max_ms,
            ro.reboot_ms,
            ro.orders.max(1),
            ro.out_of_order,
        );
        println!("    a turn, step by step (s: mean / p50 / p90 / max):");
        for s in &ro.steps {
            println!(
                "      {:<42} {:>6.2} / {:>6.2} / {:>6.2} / {:>6.2}  ({} seen)",
                s.what, s.mean, s.p50, s.p90, s.max, s.count
            );
        }
        let idle_total: f64 = ro.idle.iter().map(|(_, v)| v).sum();
        println!(
            "    slot time with no node taking its turn: {:.1} slot-s = {:.2}x of the ideal (each slot held by {} to {} nodes):",
            idle_total,
            idle_total / ro.turn_secs.max(f64::MIN_POSITIVE),
            ro.holds_per_slot.0,
            ro.holds_per_slot.1
        );
        for (what, v) in &ro.idle {
            println!(
                "      {what:<42} {v:>8.1} slot-s  +{:.3}x",
                v / ro.turn_secs.max(f64::MIN_POSITIVE)
            );
        }
    }
}
