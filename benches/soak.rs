//! The chaos soak, long: 1,000 rounds by default (`MAINTD_SOAK_ROUNDS`),
//! each a fresh simulated cluster with an agent per node, randomized
//! workloads and maintenances, agent kills and API faults, every invariant
//! checked all along (see tests/soak/engine.rs). Prints rounds,
//! maintenances, wall time, the seeds used and every violation with its
//! shortest reproducing sequence; exits 1 on any. Run with
//! `cargo bench --bench soak`.
//!
//! With `MAINTD_SOAK_TARGET=real`, the fault soak on the real control
//! plane instead (tests/real_soak): 200 rounds by default
//! (`MAINTD_REAL_SOAK_ROUNDS`, about a minute and a half each), kube-apiserver
//! and etcd killed, agents SIGKILLed, connections black-holed, reset and
//! half-open, 429s from priority and fairness; prints each round, the
//! faults injected by kind and the invariants checked; exits 1 on any
//! violation.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/soak/engine.rs"]
mod engine;
#[path = "../tests/real_soak/mod.rs"]
mod real_soak;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let violations = if std::env::var("MAINTD_SOAK_TARGET").as_deref() == Ok("real") {
        let soak = real_soak::Soak::from_env(rand::random::<u32>() as u64, 200);
        let report = runtime.block_on(real_soak::run(soak));
        println!("{}", report.describe());
        report.violations()
    } else {
        // A seed of its own each run, printed: the long run explores.
        let soak = engine::Soak::from_env(rand::random(), 1_000, 6);
        let report = runtime.block_on(engine::run(soak));
        println!("{}", report.describe());
        report.failures.iter().map(|f| f.findings.len()).sum()
    };
    println!("violations: {violations}");
    if violations > 0 {
        std::process::exit(1);
    }
}
