//! Hot reload of a policy folder mounted the way the kubelet mounts a
//! ConfigMap: files are symlinks through `..data`, and an update swaps the
//! `..data` symlink in one rename. A broken update keeps the last good set,
//! and so does an update that would switch every policy off; a periodic
//! rescan catches what the watcher missed.
use crate::common;

use common::configmap::publish_files;
use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource, Snapshot};
use gpu_admission::cli::serve::{watch_policies, PolicyReloader, ReloadOutcome};
use gpu_admission::gpu::catalog::Catalog;
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::offline::build_request;
use gpu_admission::policy::WatchOptions;
use gpu_admission::review::Operation;
use gpu_admission::server::Metrics;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: gpu-cap
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["pods"]
  validations:
    - expression: "gpu.total <= MAX"
      messageExpression: "'asks for ' + string(gpu.total) + ' GPUs; at most MAX per pod'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: gpu-cap
spec:
  policyName: gpu-cap
  validationActions: [Deny]
"#;

/// Writes a new ConfigMap payload and swaps `..data` to it, as the kubelet does.
fn publish(volume: &Path, generation: u32, text: &str) {
    publish_files(volume, generation, &[("gpu-cap.yaml", text)]);
}

/// The served admission and a reloader for `volume`, loaded from it now.
fn serving(volume: &Path, metrics: &Metrics) -> (Arc<Admission>, PolicyReloader) {
    let snapshot = Snapshot::read(volume).unwrap();
    let loaded = snapshot
        .load(Catalog::embedded_arc())
        .expect("first generation loads");
    let admission = Arc::new(Admission::new(
        loaded.bundle,
        Arc::new(StaticNamespaces::new()),
    ));
    let reloader = PolicyReloader::new(
        volume.to_path_buf(),
        Catalog::embedded_arc(),
        admission.clone(),
        metrics.clone(),
    )
    .serving(snapshot.fingerprint());
    (admission, reloader)
}

fn pod_with_gpus(n: u32) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "resources": {"limits": {"nvidia.com/gpu": n.to_string()}}}]}
    })
}

fn allowed(admission: &Admission, gpus: u32) -> bool {
    let req = build_request(pod_with_gpus(gpus), None, Operation::Create, None);
    admission.validate(&req).response.allowed
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn reload_failures(metrics: &Metrics) -> u64 {
    metrics
        .encode()
        .lines()
        .find(|l| l.starts_with("gpu_admission_policy_reload_failures_total"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[test]
fn configmap_swaps_reload_and_a_broken_update_keeps_the_last_good_set() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path();
    publish(volume, 1, &POLICY.replace("MAX", "2"));

    let source = PolicySource::Dir(volume.to_path_buf());
    let loaded = bundle::load(&source).expect("first generation loads");
    let admission = Arc::new(Admission::new(
        loaded.bundle,
        Arc::new(StaticNamespaces::new()),
    ));
    let metrics = Metrics::new();
    let reloader = PolicyReloader::new(
        volume.to_path_buf(),
        Catalog::embedded_arc(),
        admission.clone(),
        metrics.clone(),
    );
    let _watcher = watch_policies(reloader, WatchOptions::default()).expect("watch starts");
    assert!(allowed(&admission, 2));
    assert!(!allowed(&admission, 4), "4 GPUs denied under a cap of 2");

    // A broken update: the old policies stay in force, and the failure is counted.
    publish(volume, 2, &POLICY.replace("MAX", "2 +"));
    wait_for("the reload failure", || reload_failures(&metrics) >= 1);
    assert!(!allowed(&admission, 4), "last good set still enforced");
    assert!(allowed(&admission, 2));

    // So does one that kube-apiserver's type checker would refuse: a list
    // literal whose elements differ in type.
    publish(volume, 3, &POLICY.replace("MAX", "[2, 'two'][0]"));
    wait_for("the second reload failure", || {
        reload_failures(&metrics) >= 2
    });
    assert!(!allowed(&admission, 4), "last good set still enforced");
    assert!(allowed(&admission, 2));

    // A good update takes over.
    publish(volume, 4, &POLICY.replace("MAX", "8"));
    wait_for("the new cap", || allowed(&admission, 4));
    assert!(!allowed(&admission, 9));
    assert!(metrics.encode().contains("gpu_admission_policies_loaded 1"));
}

/// An update that writes one policy under an apiVersion the engine does
/// not read fails to load: the server does not reload with one policy
/// fewer.
#[test]
fn a_policy_under_an_unknown_api_version_fails_the_reload() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path();
    let cap = POLICY.replace("MAX", "2");
    let loose_cap = POLICY.replace("gpu-cap", "gpu-cap-16").replace("MAX", "16");
    publish_files(
        volume,
        1,
        &[("gpu-cap.yaml", &cap), ("gpu-cap-16.yaml", &loose_cap)],
    );
    let metrics = Metrics::new();
    let (admission, reloader) = serving(volume, &metrics);
    assert!(!allowed(&admission, 4));

    let typo = cap.replacen(
        "admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n",
        "admissionregistration.k8s.io/v2\nkind: ValidatingAdmissionPolicy\n",
        1,
    );
    publish_files(
        volume,
        2,
        &[("gpu-cap.yaml", &typo), ("gpu-cap-16.yaml", &loose_cap)],
    );
    assert_eq!(reloader.check(), ReloadOutcome::Failed);
    assert_eq!(reload_failures(&metrics), 1);
    assert!(!allowed(&admission, 4), "the cap of 2 is still enforced");
}

#[test]
fn an_emptied_configmap_is_refused_and_the_last_set_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path();
    publish(volume, 1, &POLICY.replace("MAX", "2"));
    let metrics = Metrics::new();
    let (admission, reloader) = serving(volume, &metrics);

    publish_files(volume, 2, &[]);
    assert_eq!(reloader.check(), ReloadOutcome::RefusedEmpty);
    assert_eq!(reload_failures(&metrics), 1);
    assert!(!allowed(&admission, 4), "the cap of 2 is still enforced");
    // The same empty content is refused once, not once per rescan.
    assert_eq!(reloader.check(), ReloadOutcome::Unchanged);
    assert_eq!(reload_failures(&metrics), 1);

    // Content back: loaded as usual.
    publish(volume, 3, &POLICY.replace("MAX", "8"));
    assert_eq!(reloader.check(), ReloadOutcome::Reloaded);
    assert!(allowed(&admission, 4));
}

#[test]
fn an_emptied_configmap_is_accepted_when_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path();
    publish(volume, 1, &POLICY.replace("MAX", "2"));
    let metrics = Metrics::new();
    let (admission, reloader) = serving(volume, &metrics);
    let reloader = reloader.allow_empty(true);

    // A file with only a comment is as empty as no file at all.
    publish_files(volume, 2, &[("gpu-cap.yaml", "# switched off\n")]);
    assert_eq!(reloader.check(), ReloadOutcome::Reloaded);
    assert_eq!(reload_failures(&metrics), 0);
    assert!(allowed(&admission, 4), "no policy left to deny");
}

#[test]
fn only_changed_content_is_reloaded() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path();
    publish(volume, 1, &POLICY.replace("MAX", "2"));
    let metrics = Metrics::new();
    let (admission, reloader) = serving(volume, &metrics);
    assert_eq!(reloader.check(), ReloadOutcome::Unchanged);
    // A new `..data` with the same text (a ConfigMap re-applied unchanged).
    publish(volume, 2, &POLICY.replace("MAX", "2"));
    assert_eq!(reloader.check(), ReloadOutcome::Unchanged);

    publish(volume, 3, &POLICY.replace("MAX", "8"));
    assert_eq!(reloader.check(), ReloadOutcome::Reloaded);
    assert!(allowed(&admission, 4));
    assert_eq!(reloader.check(), ReloadOutcome::Unchanged);

    // A broken version fails once and is not counted again until it changes.
    publish(volume, 4, &POLICY.replace("MAX", "8 +"));
    assert_eq!(reloader.check(), ReloadOutcome::Failed);
    assert_eq!(reloader.check(), ReloadOutcome::Unchanged);
    assert_eq!(reload_failures(&metrics), 1);
    assert!(allowed(&admission, 4), "last good set kept");
}

#[test]
fn the_rescan_catches_a_change_without_events() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path();
    publish(volume, 1, &POLICY.replace("MAX", "2"));
    let metrics = Metrics::new();
    let (admission, reloader) = serving(volume, &metrics);
    // No file events at all: only the periodic rescan can see the swap.
    let options = WatchOptions {
        rescan: Duration::from_millis(100),
        events: false,
    };
    let _watcher = watch_policies(reloader, options).expect("watch starts");
    assert!(!allowed(&admission, 4));
    publish(volume, 2, &POLICY.replace("MAX", "8"));
    wait_for("the rescan to load the new cap", || allowed(&admission, 4));
    assert_eq!(reload_failures(&metrics), 0);
}
