//! The shipped ValidatingAdmissionPolicy that keeps the namespace exempt
//! label (`gpu-admission.io/exempt`), and the gpu-infrastructure and
//! exceptions labels, in the hands of the admin groups,
//! through `gpu-admission evaluate` as a platform team would try it; and
//! what the webhooks' namespaceSelector still honours.
use crate::common;

use common::webhooks::{Cluster, Review};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

const LABEL: &str = "gpu-admission.io/exempt";

fn policy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/namespace-exemption/policy")
}

fn namespace(labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": "team-a", "labels": labels}})
}

/// `evaluate` of `object` (an UPDATE from `old` when given) made by `user`
/// in `groups`: (allowed, denial lines).
fn evaluate(
    object: &Value,
    old: Option<&Value>,
    user: &str,
    groups: &[&str],
) -> (bool, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("namespace.json");
    std::fs::write(&file, object.to_string()).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpu-admission"));
    cmd.args(["evaluate", "-o", "json", "--policies"])
        .arg(policy_dir())
        .arg("-f")
        .arg(&file)
        .args(["--as", user]);
    for g in groups {
        cmd.args(["--as-group", g]);
    }
    if let Some(old) = old {
        let before = dir.path().join("before.json");
        std::fs::write(&before, old.to_string()).unwrap();
        cmd.args(["--operation", "update", "--old-filename"])
            .arg(&before);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Value = serde_json::from_slice(&out.stdout).unwrap();
    let result = &results[0];
    let denials = result["denials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect();
    (result["allowed"] == true, denials)
}

const ALICE: (&str, &[&str]) = (
    "alice@example.com",
    &["system:authenticated", "team-a:devs"],
);
const ADMIN: (&str, &[&str]) = (
    "carol@example.com",
    &["system:authenticated", "gpu-admission:admins"],
);

#[test]
fn only_admins_set_the_gpu_infrastructure_label() {
    const INFRA: &str = "gpu-admission.io/gpu-infrastructure";
    let plain = namespace(json!({"team": "a"}));
    let infra = namespace(json!({"team": "a", INFRA: "true"}));
    let (allowed, denials) = evaluate(&infra, Some(&plain), ALICE.0, ALICE.1);
    assert!(!allowed);
    assert!(
        denials[0].contains("may set, change or remove the label gpu-admission.io/gpu-infrastructure on a namespace (it lets GPU infrastructure there see every GPU)"),
        "{denials:?}"
    );
    assert!(!evaluate(&infra, None, ALICE.0, ALICE.1).0, "born labelled");
    assert!(
        !evaluate(&plain, Some(&infra), ALICE.0, ALICE.1).0,
        "removed"
    );
    assert!(evaluate(&infra, Some(&plain), ADMIN.0, ADMIN.1).0);
    // Unchanged, it stays out of the way of other edits.
    let relabelled = namespace(json!({"team": "b", INFRA: "true"}));
    assert!(evaluate(&relabelled, Some(&infra), ALICE.0, ALICE.1).0);
}

#[test]
fn only_admins_open_a_namespace_for_policy_exceptions() {
    // gpu-admission.io/exceptions=allowed lets non-admins create
    // GpuPolicyExceptions there (deploy/exceptions).
    const OPEN: &str = "gpu-admission.io/exceptions";
    let plain = namespace(json!({"team": "a"}));
    let open = namespace(json!({"team": "a", OPEN: "allowed"}));
    let (allowed, denials) = evaluate(&open, Some(&plain), ALICE.0, ALICE.1);
    assert!(!allowed);
    assert_eq!(denials.len(), 1, "{denials:?}");
    assert!(
        denials[0].contains("may set, change or remove the label gpu-admission.io/exceptions on a namespace (it lets non-admins create policy exceptions there)"),
        "{denials:?}"
    );
    assert!(
        denials[0].ends_with("ask a cluster admin to open the namespace for policy exceptions"),
        "{denials:?}"
    );
    assert!(!evaluate(&open, None, ALICE.0, ALICE.1).0, "born open");
    assert!(!evaluate(&plain, Some(&open), ALICE.0, ALICE.1).0, "closed");
    let other_value = namespace(json!({"team": "a", OPEN: "yes"}));
    assert!(
        !evaluate(&other_value, Some(&open), ALICE.0, ALICE.1).0,
        "changed"
    );
    assert!(evaluate(&open, Some(&plain), ADMIN.0, ADMIN.1).0);
    assert!(evaluate(&plain, Some(&open), ADMIN.0, ADMIN.1).0);
    // Unchanged, it stays out of the way of other edits.
    let relabelled = namespace(json!({"team": "b", OPEN: "allowed"}));
    assert!(evaluate(&relabelled, Some(&open), ALICE.0, ALICE.1).0);
}

#[test]
fn only_admins_set_the_exempt_label() {
    let plain = namespace(json!({"team": "a"}));
    let exempt = namespace(json!({"team": "a", LABEL: "true"}));

    // Adding it, on UPDATE or in a new namespace: denied for alice.
    let (allowed, denials) = evaluate(&exempt, Some(&plain), ALICE.0, ALICE.1);
    assert!(!allowed);
    assert_eq!(denials.len(), 1, "{denials:?}");
    assert!(
        denials[0].starts_with("gpu-admission-exempt-label: only members of gpu-admission:admins, system:masters may set, change or remove the label gpu-admission.io/exempt"),
        "{denials:?}"
    );
    assert!(
        denials[0].ends_with("(it turns gpu-admission off there); leave the label as it was, or ask a cluster admin to exempt the namespace"),
        "{denials:?}"
    );
    let (allowed, _) = evaluate(&exempt, None, ALICE.0, ALICE.1);
    assert!(!allowed, "a new namespace born exempt");

    // A user without any group (kube-apiserver then leaves `groups` out of
    // the request): the same denial, not an evaluation error.
    let (allowed, denials) = evaluate(&exempt, Some(&plain), "bob", &[]);
    assert!(!allowed);
    assert_eq!(denials.len(), 1, "{denials:?}");
    assert!(
        denials[0].contains("may set, change or remove the label"),
        "{denials:?}"
    );
    // ...and other labels stay free for them.
    let relabelled = namespace(json!({"team": "b"}));
    assert!(evaluate(&relabelled, Some(&plain), "bob", &[]).0);

    // An admin may; so may system:masters.
    assert!(evaluate(&exempt, Some(&plain), ADMIN.0, ADMIN.1).0);
    assert!(
        evaluate(
            &exempt,
            None,
            "kubernetes-admin",
            &["system:masters", "system:authenticated"]
        )
        .0
    );
}

#[test]
fn only_admins_change_or_remove_it_and_other_labels_stay_free() {
    let exempt = namespace(json!({"team": "a", LABEL: "true"}));
    let plain = namespace(json!({"team": "a"}));
    let changed = namespace(json!({"team": "a", LABEL: "false"}));
    let relabelled = namespace(json!({"team": "b", "cost-center": "4711", LABEL: "true"}));

    // Removing it (back under the webhook) or changing its value: admins only.
    assert!(!evaluate(&plain, Some(&exempt), ALICE.0, ALICE.1).0);
    assert!(!evaluate(&changed, Some(&exempt), ALICE.0, ALICE.1).0);
    assert!(evaluate(&plain, Some(&exempt), ADMIN.0, ADMIN.1).0);

    // Other labels of an exempt namespace, or of any namespace: anyone.
    assert!(evaluate(&relabelled, Some(&exempt), ALICE.0, ALICE.1).0);
    let other = namespace(json!({"team": "b"}));
    assert!(evaluate(&other, Some(&plain), ALICE.0, ALICE.1).0);
    assert!(evaluate(&plain, None, ALICE.0, ALICE.1).0);
}

/// A privileged GPU pod in namespace `ns`.
fn privileged_gpu_pod(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "miner", "namespace": ns},
        "spec": {"containers": [{
            "name": "worker", "image": "docker.io/someone/gpu-worker:1.0",
            "securityContext": {"privileged": true},
            "resources": {"limits": {"nvidia.com/gpu": "1"}}
        }]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_label_exempts_nothing_and_the_admins_label_still_does() {
    let cluster = Cluster::start().await;
    // Any namespace can carry control-plane (kubebuilder operators set
    // control-plane: controller-manager): it switches nothing off.
    for value in ["true", "controller-manager"] {
        let review = Review::create(privileged_gpu_pod("team-a"))
            .namespace_labels(&[("control-plane", value)]);
        let outcome = cluster.admit(&review).await;
        assert_eq!(outcome.mutated_by, ["pods.mutate.gpu-admission.io"]);
        assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
        assert!(!outcome.allowed, "{outcome:?}");
    }
    // The exempt label, which only admins can set, and kube-system by name.
    let review =
        Review::create(privileged_gpu_pod("research")).namespace_labels(&[(LABEL, "true")]);
    let outcome = cluster.admit(&review).await;
    assert!(!outcome.sent() && outcome.allowed, "{outcome:?}");
    let outcome = cluster
        .admit(&Review::create(privileged_gpu_pod("kube-system")))
        .await;
    assert!(!outcome.sent() && outcome.allowed, "{outcome:?}");
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_cluster_the_apiserver_keeps_the_label_to_admins() {
    let cluster = Cluster::start().await;
    let plain = namespace(json!({"team": "a"}));
    let exempt = namespace(json!({"team": "a", LABEL: "true"}));
    let outcome = cluster
        .admit(&Review::update(plain.clone(), exempt.clone()).by(ALICE.0, &ALICE.1[1..]))
        .await;
    assert!(!outcome.sent(), "namespaces go to no webhook: {outcome:?}");
    assert!(!outcome.allowed);
    assert_eq!(
        outcome.denied_by.as_deref(),
        Some("ValidatingAdmissionPolicy")
    );
    assert!(
        outcome
            .message()
            .contains("may set, change or remove the label gpu-admission.io/exempt"),
        "{}",
        outcome.message()
    );
    let outcome = cluster
        .admit(&Review::update(plain, exempt).by(ADMIN.0, &ADMIN.1[1..]))
        .await;
    assert!(outcome.allowed, "{}", outcome.message());
    cluster.stop().await;
}
