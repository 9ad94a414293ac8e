//! Splitting a shutdown delay budget across drain stages.
//!
//! On shutdown, logind waits for delay inhibitors at most
//! `InhibitDelayMaxUSec`; the drain must fit in that (minus a safety margin,
//! which the caller subtracts). Each stage gets a share of the budget; a pod
//! of a stage that has not left in time is deleted by [`escalation`]'s
//! schedule (Karpenter's rule: at the share's end minus its grace period) with
//! the grace [`deletion_grace`] gives, so it still gets a SIGTERM window and
//! leaves before the next stage starts ([`stage_gives_up_at`]).
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

/// When a pod still on the node is deleted so that it leaves within its
/// stage's share, and the grace period it is planned to get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Escalation {
    /// From the start of the stage: when the deletion is sent.
    pub at: Duration,
    /// The grace period planned for the deletion, whole seconds.
    pub grace_seconds: i64,
}

/// Karpenter's rule for a termination deadline: a pod gets
/// `min(terminationGracePeriodSeconds, share / 2)` (whole seconds, at least
/// 1 s so it still gets a SIGTERM window) and is deleted that long before
/// its stage's share ends; never before the stage starts.
pub fn escalation(share: Duration, termination_grace_seconds: i64) -> Escalation {
    let half = share / 2;
    let own = crate::bounds::seconds(termination_grace_seconds);
    let grace = own.min(half).as_secs().max(1);
    Escalation {
        at: share.saturating_sub(Duration::from_secs(grace)),
        grace_seconds: i64::try_from(grace).unwrap_or(i64::MAX),
    }
}

/// The grace period, whole seconds, a deletion sent now asks for: the
/// planned grace clamped to what is left of the stage's share (rounded
/// down, so the pod is gone when the share ends), but at least 1 s while
/// anything of the shutdown budget is left; 0 (a kill) only when nothing is.
pub fn deletion_grace(planned_seconds: i64, share_left: Duration, budget_left: Duration) -> i64 {
    if budget_left.is_zero() {
        return 0;
    }
    let left = i64::try_from(share_left.as_secs()).unwrap_or(i64::MAX);
    planned_seconds.min(left).max(1)
}

/// When a stage under a shutdown budget stops waiting, from its start: at
/// the end of its share, or once the last pod it deleted has had its grace
/// period (which the 1 s minimum can stretch slightly past the share).
/// `deletions` are (sent at, grace seconds) pairs.
pub fn stage_gives_up_at(share: Duration, deletions: &[(Duration, i64)]) -> Duration {
    deletions
        .iter()
        .map(|(at, grace)| at.saturating_add(crate::bounds::seconds(*grace)))
        .fold(share, Duration::max)
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

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn escalation_table() {
        // (share, terminationGracePeriodSeconds) → (delete at, grace)
        let cases: &[(&str, Duration, i64, Duration, i64)] = &[
            (
                "grace fits in half the share",
                secs(60.0),
                30,
                secs(30.0),
                30,
            ),
            (
                "grace cut to half the share",
                secs(20.0),
                30,
                secs(10.0),
                10,
            ),
            ("short grace: deleted late", secs(60.0), 5, secs(55.0), 5),
            (
                "odd share rounds the grace down",
                secs(7.0),
                30,
                secs(4.0),
                3,
            ),
            ("sub-second half share: 1 s", secs(1.5), 30, ms(500), 1),
            ("share of the 1 s floor", secs(1.0), 30, Duration::ZERO, 1),
            (
                "share shorter than 1 s: at the start",
                ms(300),
                30,
                Duration::ZERO,
                1,
            ),
            (
                "grace 0 in the spec still gets 1 s",
                secs(10.0),
                0,
                secs(9.0),
                1,
            ),
            ("negative grace counts as 0", secs(10.0), -5, secs(9.0), 1),
            ("zero share", Duration::ZERO, 30, Duration::ZERO, 1),
            (
                "long share, long grace",
                secs(600.0),
                3600,
                secs(300.0),
                300,
            ),
            ("huge grace", secs(90.0), i64::MAX, secs(45.0), 45),
            ("fractional share", ms(12_345), 3600, ms(6_345), 6),
            ("grace equal to half", secs(8.0), 4, secs(4.0), 4),
            ("grace just under half", secs(8.0), 3, secs(5.0), 3),
        ];
        let mut failures = Vec::new();
        for (name, share, grace, at, want) in cases {
            let got = escalation(*share, *grace);
            let expected = Escalation {
                at: *at,
                grace_seconds: *want,
            };
            if got != expected {
                failures.push(format!("{name}: got {got:?}, want {expected:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn escalation_fits_the_share_and_always_leaves_a_sigterm_window() {
        for share_ms in [
            0, 1, 999, 1_000, 1_001, 1_999, 2_000, 2_500, 7_777, 30_000, 600_000,
        ] {
            for grace in [-1, 0, 1, 2, 3, 10, 29, 30, 31, 300, i64::MAX] {
                let share = ms(share_ms);
                let e = escalation(share, grace);
                assert!(e.grace_seconds >= 1, "{share:?} {grace}: {e:?}");
                assert!(e.at <= share, "{share:?} {grace}: {e:?}");
                assert!(
                    e.grace_seconds <= grace.max(1),
                    "never more than the pod asks for: {share:?} {grace}: {e:?}"
                );
                if share >= secs(2.0) {
                    // Deleted then, with that grace, the pod is gone by the
                    // share's end, and got at most half of it.
                    let end = e.at + Duration::from_secs(e.grace_seconds as u64);
                    assert!(end <= share, "{share:?} {grace}: {e:?}");
                    assert!(
                        Duration::from_secs(e.grace_seconds as u64) <= share / 2,
                        "{share:?} {grace}: {e:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn deletion_grace_table() {
        // (planned, share left, budget left) → grace sent
        let cases: &[(&str, i64, Duration, Duration, i64)] = &[
            ("on time: the planned grace", 10, secs(10.0), secs(30.0), 10),
            (
                "late: clamped to the share left",
                10,
                secs(4.5),
                secs(30.0),
                4,
            ),
            (
                "share over, budget left: 1 s",
                10,
                Duration::ZERO,
                secs(5.0),
                1,
            ),
            ("less than 1 s of share: 1 s", 10, ms(400), ms(400), 1),
            ("budget spent: kill", 10, secs(3.0), Duration::ZERO, 0),
            (
                "nothing left at all: kill",
                10,
                Duration::ZERO,
                Duration::ZERO,
                0,
            ),
            (
                "a nanosecond of budget: 1 s",
                10,
                Duration::ZERO,
                Duration::from_nanos(1),
                1,
            ),
            (
                "early: never more than planned",
                3,
                secs(60.0),
                secs(60.0),
                3,
            ),
            ("planned 1 s", 1, secs(20.0), secs(20.0), 1),
            ("huge share left", 45, Duration::MAX, Duration::MAX, 45),
        ];
        let mut failures = Vec::new();
        for (name, planned, share_left, budget_left, want) in cases {
            let got = deletion_grace(*planned, *share_left, *budget_left);
            if got != *want {
                failures.push(format!("{name}: got {got}, want {want}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn a_stage_gives_up_at_its_share_end_or_once_the_last_grace_ran_out() {
        /// (sent at, grace seconds) of each deletion.
        type Deletions<'a> = &'a [(Duration, i64)];
        let cases: &[(&str, Duration, Deletions<'_>, Duration)] = &[
            ("nothing deleted", secs(10.0), &[], secs(10.0)),
            (
                "graces end inside the share",
                secs(10.0),
                &[(secs(5.0), 5), (secs(8.0), 2)],
                secs(10.0),
            ),
            (
                "the 1 s minimum stretches it",
                secs(1.0),
                &[(ms(500), 1)],
                ms(1_500),
            ),
            (
                "a late deletion",
                secs(10.0),
                &[(secs(10.0), 1)],
                secs(11.0),
            ),
            (
                "a kill adds nothing",
                secs(4.0),
                &[(secs(4.0), 0)],
                secs(4.0),
            ),
        ];
        for (name, share, deletions, want) in cases {
            assert_eq!(stage_gives_up_at(*share, deletions), *want, "{name}");
        }
    }
}
