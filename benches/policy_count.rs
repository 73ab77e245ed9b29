//! What each policy adds to `/validate`: the shipped set plus 0, 100 and 500
//! extra policies of two simple validations and one variable, each with its
//! binding, on the patched GPU pod of the engine bench (as `serve` runs it:
//! on an evaluation thread, with a deadline).
//!
//! The cost of one such policy is (t500 - t0) / 500 from the "matching pods"
//! group. The "matching deployments" group adds policies the pod does not
//! match, to show what a policy costs that is only matched and skipped.
//!
//! `cargo bench --bench policy_count -- --warm-up-time 1 --measurement-time 3`

// The allocator the `gpu-admission` binary runs with.
gpu_admission::mimalloc_as_malloc!();
#[path = "common/extra_policies.rs"]
mod extra_policies;
#[path = "common/pods.rs"]
mod pods;

use criterion::{criterion_group, BenchmarkId, Criterion};
use extra_policies::{extra_policies, Target};
use gpu_admission::admission::Admission;
use gpu_admission::bundle;
use gpu_admission::gpu::catalog::Catalog;
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{self, parse_documents};
use pods::{create, mutated, unplaced_gpu_pod};
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    std::thread::Builder::new()
        .name("policy-count-bench".into())
        .stack_size(policy::EVALUATION_STACK)
        .spawn(|| {
            on_evaluation_thread();
        })
        .expect("bench thread")
        .join()
        .expect("benches on the evaluation thread");
    Criterion::default().configure_from_args().final_summary();
}

criterion_group!(on_evaluation_thread, bench_policy_count);

const EXTRA: &[usize] = &[0, 100, 500];

/// The shipped policies and placement profiles plus `n` extra policies.
fn admission_with(n: usize, target: Target) -> Admission {
    let mut documents = bundle::embedded_documents().expect("shipped policies parse");
    if n > 0 {
        let extra = parse_documents(Path::new("extra.yaml"), &extra_policies(n, target))
            .expect("extra policies parse");
        documents.extend(extra);
    }
    let mut loaded =
        bundle::from_documents(documents, Catalog::embedded_arc()).expect("policies compile");
    pods::replan_as_asked(&mut loaded.bundle);
    Admission::new(
        loaded.bundle,
        Arc::new(StaticNamespaces::new().with("ml", Default::default())),
    )
}

fn bench_policy_count(c: &mut Criterion) {
    let shipped = admission_with(0, Target::Pods);
    let pod = create(mutated(&shipped, unplaced_gpu_pod()));
    let deadline = Instant::now() + Duration::from_secs(24 * 3600);
    let baseline = shipped.validate_until(&pod, Some(deadline));
    assert!(baseline.response.allowed, "{:?}", baseline.response.message);
    let evaluated = baseline.evaluations.len();
    drop(shipped);

    for (target, name, evaluated_extra) in [
        (Target::Pods, "matching pods", 1),
        (Target::Deployments, "matching deployments", 0),
    ] {
        let mut group = c.benchmark_group(format!("validate gpu pod, extra policies {name}"));
        for &n in EXTRA {
            if n == 0 && matches!(target, Target::Deployments) {
                // The same as the pods group's.
                continue;
            }
            let admission = admission_with(n, target);
            let outcome = admission.validate_until(&pod, Some(deadline));
            assert!(outcome.response.allowed, "{:?}", outcome.response.message);
            assert_eq!(
                outcome.evaluations.len(),
                evaluated + evaluated_extra * n,
                "the extra policies that match are evaluated, the others not"
            );
            group.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
                b.iter(|| black_box(admission.validate_until(black_box(&pod), Some(deadline))))
            });
        }
        group.finish();
    }
}
