//! Splitting a shutdown delay budget across drain stages.
//!
//! On shutdown, logind waits for delay inhibitors at most
//! `InhibitDelayMaxUSec`; the drain must fit in that (minus a safety margin,
//! which the caller subtracts). Each stage gets a share of the budget; a stage
//! that overruns its share is escalated to deletions with the grace period
//! [`escalation_grace`] gives, the way the kubelet shuts pods down by priority.
//!
//! Rules of [`split_budget`]:
//! - the shares never sum to more than the budget (the rounding remainder, a
//!   few nanoseconds, goes to the last stage, so they sum to it exactly);
//! - every stage gets at least a floor of `min(1 s, budget / stages)`, even a
//!   stage that needs nothing: later stages hold the most critical pods and
//!   are never starved to zero by earlier ones;
//! - if the needs (each lifted to the floor) fit, every stage gets its need
//!   and the slack is shared out in proportion to the needs, so no stage gets
//!   less than it needs;
//! - if they don't fit, every stage gets the floor, and what is left is shared
//!   in proportion to what each stage needs above the floor;
//! - a zero budget gives zero shares, no stages give no shares.

use std::time::Duration;

use super::plan::Stage;

/// How long a stage needs to drain: its slowest pod's expected shutdown.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StageNeed {
    /// Seconds; negative or NaN counts as 0, infinite as "a very long time".
    pub seconds: f64,
}

impl StageNeed {
    /// The need of a planned stage: the longest grace period among its pods.
    pub fn of_stage(stage: &Stage) -> StageNeed {
        StageNeed {
            seconds: stage.slowest_grace_seconds() as f64,
        }
    }
}

/// Every stage gets at least this (or budget / stages, if that is less),
/// whatever its need.
pub const STAGE_FLOOR: Duration = Duration::from_secs(1);

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Splits `total` across stages with the given `needs`, in stage order.
/// See the module docs for the rules.
pub fn split_budget(total: Duration, needs: &[StageNeed]) -> Vec<Duration> {
    let n = needs.len() as u128;
    // Capped at u64 nanoseconds (584 years) so the products below fit in u128.
    let total_ns = total.as_nanos().min(u128::from(u64::MAX));
    if n == 0 {
        return Vec::new();
    }
    if total_ns == 0 {
        return vec![Duration::ZERO; needs.len()];
    }
    let floor = STAGE_FLOOR.as_nanos().min(total_ns / n);
    // `as` saturates: NaN and negatives become 0, infinity u64::MAX.
    let want: Vec<u128> = needs
        .iter()
        .map(|need| u128::from((need.seconds * 1e9) as u64).max(floor))
        .collect();
    let sum_want: u128 = want.iter().sum();

    let mut shares: Vec<u128> = if sum_want == 0 {
        // Only when there are more stages than nanoseconds: share equally.
        vec![total_ns / n; needs.len()]
    } else if sum_want <= total_ns {
        let slack = total_ns - sum_want;
        want.iter().map(|w| w + slack * w / sum_want).collect()
    } else {
        let rest = total_ns - floor * n;
        let sum_above: u128 = want.iter().map(|w| w - floor).sum();
        want.iter()
            .map(|w| floor + rest * (w - floor) / sum_above)
            .collect()
    };
    let used: u128 = shares.iter().sum();
    if let Some(last) = shares.last_mut() {
        *last += total_ns.saturating_sub(used);
    }
    shares.into_iter().map(duration_from_nanos).collect()
}

/// The grace period, in whole seconds, for deleting the pods of a stage that
/// overran: what is left of its share, rounded down so the deletion fits,
/// but at least 1 s (0 would force-kill); 0 only when nothing is left.
pub fn escalation_grace(remaining_share: Duration) -> i64 {
    if remaining_share.is_zero() {
        0
    } else {
        i64::try_from(remaining_share.as_secs())
            .unwrap_or(i64::MAX)
            .max(1)
    }
}

fn duration_from_nanos(ns: u128) -> Duration {
    let secs = u64::try_from(ns / NANOS_PER_SEC).unwrap_or(u64::MAX);
    Duration::new(secs, (ns % NANOS_PER_SEC) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn needs(seconds: &[f64]) -> Vec<StageNeed> {
        seconds
            .iter()
            .map(|&seconds| StageNeed { seconds })
            .collect()
    }

    /// Shares rounded to milliseconds, for readable expectations.
    fn split_ms(total_s: f64, need_s: &[f64]) -> Vec<u128> {
        split_budget(secs(total_s), &needs(need_s))
            .iter()
            .map(|d| d.as_millis())
            .collect()
    }

    #[test]
    fn split_table() {
        struct Case {
            name: &'static str,
            total_s: f64,
            needs: &'static [f64],
            want_ms: &'static [u128],
        }
        let cases = [
            Case {
                name: "no stages",
                total_s: 30.0,
                needs: &[],
                want_ms: &[],
            },
            Case {
                name: "zero budget",
                total_s: 0.0,
                needs: &[30.0, 10.0],
                want_ms: &[0, 0],
            },
            Case {
                name: "exact fit",
                total_s: 40.0,
                needs: &[30.0, 10.0],
                want_ms: &[30_000, 10_000],
            },
            Case {
                name: "slack shared in proportion to need",
                total_s: 80.0,
                needs: &[30.0, 10.0],
                want_ms: &[60_000, 20_000],
            },
            Case {
                name: "short budget shared in proportion above the floor",
                total_s: 12.0,
                needs: &[21.0, 1.0, 11.0],
                // floor 1 s each, the 9 s left split 20:0:10
                want_ms: &[7_000, 1_000, 4_000],
            },
            Case {
                name: "budget smaller than one pod's grace",
                total_s: 10.0,
                needs: &[30.0],
                want_ms: &[10_000],
            },
            Case {
                name: "stage needing nothing still gets the floor",
                total_s: 5.0,
                needs: &[30.0, 0.0],
                want_ms: &[4_000, 1_000],
            },
            Case {
                name: "floor shrinks to budget / stages when tiny",
                total_s: 1.0,
                needs: &[30.0, 30.0, 30.0, 30.0],
                want_ms: &[250, 250, 250, 250],
            },
            Case {
                name: "all needs zero: slack shared equally",
                total_s: 9.0,
                needs: &[0.0, 0.0, 0.0],
                want_ms: &[3_000, 3_000, 3_000],
            },
            Case {
                name: "negative and NaN needs count as zero",
                total_s: 4.0,
                needs: &[-5.0, f64::NAN],
                want_ms: &[2_000, 2_000],
            },
        ];
        let mut failures = Vec::new();
        for c in &cases {
            let got = split_ms(c.total_s, c.needs);
            if got != c.want_ms {
                failures.push(format!("{}: got {got:?}, want {:?}", c.name, c.want_ms));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn shares_never_exceed_total_and_respect_floor_and_needs() {
        // Many shapes of stages, including many stages and awkward numbers.
        let totals = [
            0.0, 0.001, 0.7, 1.0, 3.3, 29.999, 30.0, 90.0, 600.0, 86_400.0,
        ];
        let shapes: [&[f64]; 7] = [
            &[30.0],
            &[1.0, 2.0, 3.0],
            &[0.0, 0.0, 30.0],
            &[30.0; 17],
            &[0.5, 120.0, 7.0, 3600.0, 0.0, 1.0],
            &[f64::INFINITY, 1.0],
            &[1e12, 1e12],
        ];
        for total_s in totals {
            for shape in shapes {
                let total = secs(total_s);
                let shares = split_budget(total, &needs(shape));
                assert_eq!(shares.len(), shape.len());
                let sum: Duration = shares.iter().sum();
                assert!(
                    sum <= total,
                    "total {total_s}, needs {shape:?}: {sum:?} > {total:?}"
                );
                let floor = STAGE_FLOOR.min(total / shape.len() as u32);
                let fits = shape
                    .iter()
                    .map(|&s| secs(s.min(1e9)).max(floor))
                    .sum::<Duration>()
                    <= total;
                for (share, &need) in shares.iter().zip(shape) {
                    assert!(
                        *share >= floor,
                        "total {total_s}, needs {shape:?}: {share:?} < floor"
                    );
                    if fits {
                        assert!(
                            share.as_secs_f64() + 1e-9 >= need,
                            "need {need} got {share:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn later_stages_never_starved_when_earlier_need_everything() {
        let shares = split_budget(secs(10.0), &needs(&[3600.0, 3600.0, 30.0, 30.0]));
        assert_eq!(shares.iter().sum::<Duration>(), secs(10.0));
        assert!(shares.iter().all(|s| *s >= STAGE_FLOOR), "{shares:?}");
    }

    #[test]
    fn many_stages_sum_exactly_to_budget() {
        let many: Vec<f64> = (0..1000).map(|i| f64::from(i % 37)).collect();
        let total = Duration::from_millis(123_457);
        let shares = split_budget(total, &needs(&many));
        assert_eq!(shares.len(), 1000);
        assert_eq!(shares.iter().sum::<Duration>(), total);
    }

    #[test]
    fn needs_come_from_the_plan_and_fit_a_short_budget() {
        use crate::drain::plan::{PlanOptions, PodInfo, build_plan};
        let pod = |name: &str, priority: i32, grace: i64| PodInfo {
            namespace: "ns".into(),
            name: name.into(),
            priority,
            termination_grace_seconds: grace,
            ..PodInfo::default()
        };
        let pods = [
            pod("a", 0, 10),
            pod("b", 0, 61),
            pod("c", 100, 0),
            pod("d", 1000, 31),
        ];
        let plan = build_plan(&pods, None, &PlanOptions::default());
        let needs: Vec<StageNeed> = plan.stages.iter().map(StageNeed::of_stage).collect();
        assert_eq!(needs, self::needs(&[61.0, 0.0, 31.0]));
        // 30 s for 92 s of needs: each stage gets 1 s, the other 27 s go 60:0:30.
        let shares = split_budget(secs(30.0), &needs);
        assert_eq!(shares, [secs(19.0), secs(1.0), secs(10.0)]);
    }

    #[test]
    fn escalation_grace_table() {
        let cases = [
            (Duration::ZERO, 0),
            (Duration::from_nanos(1), 1),
            (Duration::from_millis(999), 1),
            (Duration::from_millis(1500), 1),
            (Duration::from_millis(2999), 2),
            (Duration::from_secs(45), 45),
            (Duration::MAX, i64::MAX),
        ];
        for (share, want) in cases {
            assert_eq!(escalation_grace(share), want, "share {share:?}");
        }
    }
}
