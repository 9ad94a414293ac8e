//! The fault soak on the real control plane, a few rounds (tests/real_soak:
//! what a round is and what it checks): kube-apiserver and etcd killed,
//! agents SIGKILLed, their connections black-holed, reset and left
//! half-open, 429s from the API server's priority and fairness, while a
//! node drains behind budgets or a maintenance rolls through slots. Every
//! invariant holds in every round. Four consecutive seeds try every kind
//! of fault and every kind of round; the first seed is new each run and
//! printed (MAINTD_REAL_SOAK_SEED replays it). Runs on a control plane of
//! its own, after the other tests (scripts/test): it kills what it runs on.

use crate::real_soak;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invariant_holds_through_faults_on_the_real_control_plane() {
    let soak = real_soak::Soak::from_env(rand::random::<u32>() as u64, 4);
    let report = real_soak::run(soak).await;
    println!("{}", report.describe());
    assert_eq!(report.violations(), 0, "{}", report.describe());
}
