//! Published workload custom resources (`../shared/crd-samples`: KubeRay,
//! Kubeflow, JobSet, LeaderWorkerSet, KServe, Volcano, Argo and Kueue
//! manifests from AKS, NVIDIA, GKE, AWS, Open Data Hub...) applied to a
//! cluster running the shipped configuration. Each published sample is
//! allowed (warnings aside) except the two its README names; each
//! one-change waste variant is denied or warned, naming the object and the
//! template. The data is read where CI keeps it, beside the clone; the
//! tests say they skipped when it is absent.
use crate::common;

use common::shared_data::shared_data;
use common::webhooks::{Cluster, Outcome, Review, Webhook};
use common::NoNamespaces;
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::gpu::relevance::gpu_relevant;
use gpu_admission::k8s::workloads::pod_of_template;
use gpu_admission::offline::read_manifest;
use std::path::{Path, PathBuf};

/// The samples a Deny policy catches as published.
const DENIED_SAMPLES: &[&str] = &[
    "jobset-gke-a3-ultra-nccl-privileged.yaml",
    "notebook-odh-workbench.yaml",
];

const PREMIUM: &[(&str, &str)] = &[
    ("gpu-admission.io/tier", "premium"),
    ("gpu-admission.io/premium-gpus", "true"),
];

fn corpus() -> Option<PathBuf> {
    shared_data("crd-samples")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// The labels of the namespace a file is applied in: the published
/// samples and most variants in a premium namespace that opted in to
/// premium GPUs (so that only waste is judged, not the tier); the
/// variants about tiers where their header says.
fn namespace_labels(file: &str) -> &'static [(&'static str, &'static str)] {
    if file.contains("default-tier") {
        &[]
    } else if file.contains("no-optin") {
        &[("gpu-admission.io/tier", "standard")]
    } else {
        PREMIUM
    }
}

/// `Kind name` (or its `generateName`).
fn object_name(object: &serde_json::Value) -> String {
    let meta = &object["metadata"];
    let name = meta["name"].as_str().or(meta["generateName"].as_str());
    format!(
        "{} {}",
        object["kind"].as_str().unwrap_or(""),
        name.unwrap_or("")
    )
}

/// Each object of `file` created by an ordinary user, and what the
/// cluster did with it.
async fn apply(cluster: &Cluster, file: &Path) -> Vec<(String, Outcome)> {
    let name = file.file_name().unwrap().to_string_lossy().to_string();
    let mut outcomes = Vec::new();
    for object in read_manifest(file).unwrap() {
        let what = object_name(&object);
        let review = Review::create(object).namespace_labels(namespace_labels(&name));
        outcomes.push((what, cluster.admit(&review).await));
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_samples_are_allowed_but_two() {
    let Some(dir) = corpus() else { return };
    let cluster = Cluster::start().await;
    let mut wrong = Vec::new();
    let mut judged = 0;
    for file in files(&dir.join("samples")) {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let outcomes = apply(&cluster, &file).await;
        judged += outcomes.iter().filter(|(_, o)| o.sent()).count();
        let denied: Vec<String> = outcomes
            .iter()
            .filter(|(_, o)| !o.allowed)
            .map(|(what, o)| format!("{what}: {}", o.message()))
            .collect();
        let expected = DENIED_SAMPLES.contains(&name.as_str());
        if expected == denied.is_empty() {
            wrong.push(format!(
                "{name}: {}",
                if expected {
                    "allowed, expected a denial".to_string()
                } else {
                    denied.join(" | ")
                }
            ));
        }
    }
    cluster.stop().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every file holds a workload (or a Kueue object) the webhook is sent.
    assert!(judged >= 46, "only {judged} objects reached the webhook");
}

/// Every denial and warning of the objects of `file`, each after the
/// object it is about (`RayCluster rc: ...`).
async fn said(cluster: &Cluster, file: &Path, labels_of: &str) -> Vec<String> {
    let mut said = Vec::new();
    for object in read_manifest(file).unwrap() {
        let what = object_name(&object);
        let review = Review::create(object).namespace_labels(namespace_labels(labels_of));
        let outcome = cluster.admit(&review).await;
        for message in outcome.denial.iter().chain(&outcome.warnings) {
            said.push(format!("{what}: {message}"));
        }
    }
    said
}

/// `samples/x.yaml`, from the header line `# WASTE VARIANT of samples/x.yaml ...`.
fn sample_of(variant: &Path) -> String {
    let text = std::fs::read_to_string(variant).unwrap();
    let first = text.lines().next().unwrap_or("");
    first
        .split_whitespace()
        .find(|w| w.starts_with("samples/"))
        .unwrap_or_else(|| panic!("{}: no sample named in {first:?}", variant.display()))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waste_variants_are_denied_or_warned_naming_object_and_template() {
    let Some(dir) = corpus() else { return };
    let cluster = Cluster::start().await;
    let mut wrong = Vec::new();
    let variants = files(&dir.join("waste"));
    assert_eq!(variants.len(), 24);
    for file in variants {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let sample = dir.join(sample_of(&file));
        // The published sample as it runs (premium), and the variant.
        let before = said(&cluster, &sample, "").await;
        let after = said(&cluster, &file, &name).await;
        let new: Vec<&String> = after.iter().filter(|m| !before.contains(m)).collect();
        if new.is_empty() {
            wrong.push(format!(
                "{name}: nothing denied or warned beyond the sample's"
            ));
        }
        // Each new message names the object it is about, and a template's
        // message the template: `RayCluster ns/name workerGroupSpecs[x]: `.
        for message in new {
            let (what, said) = message.split_once(": ").unwrap();
            let (kind, object) = what.split_once(' ').unwrap();
            let object = object.trim_end_matches('-');
            let names_object = said.contains(&format!("{kind} ")) && said.contains(object);
            if !names_object {
                wrong.push(format!("{name}: does not name {what}: {said}"));
            }
        }
    }
    cluster.stop().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The server judges a custom resource's template only when the pods
/// webhook would be sent its pod (`gpu::relevance`): over every template
/// of every sample and variant, and every pod and pod template of the
/// public GPU manifests in `../shared/corpus`, the
/// function and the shipped `gpu-relevant` matchCondition agree.
#[test]
fn template_relevance_is_the_pods_webhooks_condition() {
    let Some(dir) = corpus() else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pods_webhook = Webhook::load(&root.join("deploy/base/validating-webhook.yaml"))
        .into_iter()
        .find(|w| w.name == "pods.validate.gpu-admission.io")
        .expect("the pods webhook");
    let shipped = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    let sources = shipped.bundle.policies.template_sources();
    let mut pods = Vec::new();
    for file in files(&dir.join("samples"))
        .into_iter()
        .chain(files(&dir.join("waste")))
    {
        for object in read_manifest(&file).unwrap() {
            for found in sources.templates(&object).unwrap_or_default() {
                pods.push(pod_of_template(&object, found.template));
            }
        }
    }
    // The public GPU manifests: pods, and the templates of Deployments,
    // Jobs, DaemonSets...
    for file in shared_data("corpus").map(|d| files(&d)).unwrap_or_default() {
        for object in read_manifest(&file).unwrap_or_default() {
            if object["kind"] == "Pod" {
                pods.push(object.clone());
            }
            for found in sources.templates(&object).unwrap_or_default() {
                pods.push(pod_of_template(&object, found.template));
            }
        }
    }
    let (mut relevant, mut wrong) = (0, Vec::new());
    for (n, pod) in pods.iter_mut().enumerate() {
        // The condition is compared, not the namespace selector (the
        // corpus has kube-system DaemonSets).
        pod["metadata"]["namespace"] = "ml".into();
        let pod = &*pod;
        let sent = pods_webhook
            .applies(
                &Review::create(pod.clone()).request(&n.to_string()),
                &NoNamespaces,
            )
            .unwrap();
        relevant += usize::from(sent);
        if sent != gpu_relevant(pod) {
            wrong.push(format!("sent: {sent}, gpu_relevant: {}: {pod}", !sent));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Both answers occur: CPU heads, launchers and submitters are not sent.
    assert!(
        pods.len() >= 100 && relevant >= 50 && relevant < pods.len(),
        "{relevant} of {}",
        pods.len()
    );
}
