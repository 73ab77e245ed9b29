//! Where `/validate`'s time goes in the shipped set: the patched GPU pod of
//! the engine bench, evaluated repeatedly on a thread with the evaluation
//! stack (as `serve`'s answering threads run it), with each binding's own
//! duration as the engine records it for metrics. Prints a table, slowest
//! policy first.
//!
//! `cargo bench --bench policies`; GPU_ADMISSION_BENCH_ROUNDS (default
//! 2000) sets the evaluations. Without `--bench` (as under
//! `cargo test --benches`) it runs a few.

// The allocator the `gpu-admission` binary runs with.
gpu_admission::mimalloc_as_malloc!();
#[path = "common/pods.rs"]
mod pods;

use gpu_admission::policy;
use pods::{create, mutated, shipped_admission, unplaced_gpu_pod};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

fn main() {
    let benching = std::env::args().any(|a| a == "--bench");
    let rounds = if benching {
        std::env::var("GPU_ADMISSION_BENCH_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n: &u32| *n > 0)
            .unwrap_or(2000)
    } else {
        3
    };
    std::thread::Builder::new()
        .name("policies-bench".into())
        .stack_size(policy::EVALUATION_STACK)
        .spawn(move || breakdown(rounds))
        .expect("bench thread")
        .join()
        .expect("breakdown ran");
}

fn breakdown(rounds: u32) {
    let (admission, policies) = shipped_admission();
    let req = create(mutated(&admission, unplaced_gpu_pod()));
    // Warm-up: caches, allocator.
    for _ in 0..rounds / 10 + 1 {
        assert!(admission.validate(&req).response.allowed);
    }
    let mut per_policy: BTreeMap<std::sync::Arc<str>, (u32, Duration)> = BTreeMap::new();
    let mut total = Duration::ZERO;
    for _ in 0..rounds {
        let started = Instant::now();
        let outcome = admission.validate(&req);
        total += started.elapsed();
        assert!(outcome.response.allowed, "{:?}", outcome.response.message);
        for evaluation in outcome.evaluations {
            let entry = per_policy.entry(evaluation.policy).or_default();
            entry.0 += 1;
            entry.1 += evaluation.duration;
        }
    }
    let mut rows: Vec<_> = per_policy.into_iter().collect();
    rows.sort_by_key(|(_, (_, spent))| std::cmp::Reverse(*spent));
    let mean = |d: Duration, n: u32| d.as_secs_f64() * 1e6 / f64::from(n);
    let evaluated: Duration = rows.iter().map(|(_, (_, d))| *d).sum();
    println!(
        "shipped set: {policies} policies, {} evaluated for this pod; {rounds} rounds",
        rows.len()
    );
    println!(
        "/validate mean {:.1} µs, of which the bindings' own time {:.1} µs",
        mean(total, rounds),
        mean(evaluated, rounds)
    );
    println!("| policy | mean per review | share of /validate |");
    println!("|---|---|---|");
    for (name, (n, d)) in &rows {
        println!(
            "| `{name}` | {:.1} µs | {:.0}% |",
            mean(*d, *n),
            100.0 * d.as_secs_f64() / total.as_secs_f64()
        );
    }
}
