//! Placeholder until the plan branch lands.
use std::time::Duration;
pub struct StageNeed {
    pub seconds: f64,
}
pub fn split_budget(total: Duration, needs: &[StageNeed]) -> Vec<Duration> {
    let n = needs.len().max(1) as u32;
    needs.iter().map(|_| total / n).collect()
}
pub fn escalation_grace(remaining: Duration) -> i64 {
    remaining.as_secs().max(1) as i64
}
