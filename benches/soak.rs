//! The chaos soak, long: 1,000 rounds by default (`MAINTD_SOAK_ROUNDS`),
//! each a fresh simulated cluster with an agent per node, randomized
//! workloads and maintenances, agent kills and API faults, every invariant
//! checked all along (see tests/soak/engine.rs). Prints rounds,
//! maintenances, wall time, the seeds used and every violation with its
//! shortest reproducing sequence; exits 1 on any. Run with
//! `cargo bench --bench soak`.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/soak/engine.rs"]
mod engine;

fn main() {
    // A seed of its own each run, printed: the long run explores.
    let soak = engine::Soak::from_env(rand::random(), 1_000, 6);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let report = runtime.block_on(engine::run(soak));
    println!("{}", report.describe());
    let violations: usize = report.failures.iter().map(|f| f.findings.len()).sum();
    println!("violations: {violations}");
    if violations > 0 {
        std::process::exit(1);
    }
}
