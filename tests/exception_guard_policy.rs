//! The shipped ValidatingAdmissionPolicy that decides who may write a
//! GpuPolicyException (`deploy/exceptions/policy/exception-guard.yaml`),
//! evaluated by the project's engine on requests shaped as kube-apiserver
//! sends them (creationTimestamp set, userInfo with groups, the namespace's
//! labels); the CRD's schema against the model's example; and the path an
//! exception takes through the shipped webhook configurations.
use crate::common;

use common::webhooks::{Cluster, Review};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{read_documents, PolicySet};
use gpu_admission::review::{Operation, Request};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

const OPEN: (&str, &str) = ("gpu-admission.io/exceptions", "allowed");
const CREATED: &str = "2026-12-01T09:00:00Z";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn policy_dir() -> PathBuf {
    root().join("deploy/exceptions/policy")
}

/// The model's example, as kube-apiserver has it when admission runs:
/// created at [`CREATED`], requested by `by`, expiring `days` after
/// creation (none when `None`).
fn exception(by: &str, policies: &[&str], days: Option<i64>) -> Value {
    let mut spec = json!({
        "policies": policies,
        "match": {
            "kinds": ["Pod", "Job"],
            "names": ["nccl-bench", "nccl-bench-*"],
            "selector": {"matchLabels": {"app": "nccl-bench"}},
            "expression": "object.metadata.name.startsWith('nccl-')"
        },
        "reason": "NCCL bandwidth benchmark needs privileged for one day; OPS-1234",
        "requestedBy": by
    });
    if let Some(days) = days {
        spec["expiresAt"] = json!(after_creation(days));
    }
    json!({
        "apiVersion": "gpu-admission.io/v1alpha1",
        "kind": "GpuPolicyException",
        "metadata": {
            "name": "nccl-bench", "namespace": "research",
            "uid": "6f1c2f0e-5b7a-4c1e-9d59-0c7d1e2a3b4c",
            "creationTimestamp": CREATED
        },
        "spec": spec
    })
}

/// [`CREATED`] plus `days` days, in RFC 3339 (no date library needed for
/// these: December 2026 has 31 days, January 2027 too).
fn after_creation(days: i64) -> String {
    let day = 1 + days;
    let (year, month, day) = match day {
        1..=31 => (2026, 12, day),
        32..=62 => (2027, 1, day - 31),
        63..=90 => (2027, 2, day - 62),
        _ => (2027, 3, day - 90),
    };
    format!("{year}-{month:02}-{day:02}T09:00:00Z")
}

struct User<'a> {
    name: &'a str,
    groups: &'a [&'a str],
}

const ALICE: User = User {
    name: "alice@example.com",
    groups: &["system:authenticated", "research:devs"],
};
const ADMIN: User = User {
    name: "carol@example.com",
    groups: &["system:authenticated", "gpu-admission:admins"],
};
const MASTER: User = User {
    name: "kubernetes-admin",
    groups: &["system:masters", "system:authenticated"],
};

/// The guard policy alone (as kube-apiserver runs it, after the
/// webhooks' mutations) on `object` (an UPDATE from `old` when given) by
/// `user`, in a namespace with `labels`: (allowed, denial lines).
fn evaluate_guard(
    object: &Value,
    old: Option<&Value>,
    user: &User,
    labels: &[(&str, &str)],
) -> (bool, Vec<String>) {
    let docs = read_documents(&policy_dir()).unwrap();
    let set = PolicySet::compile(&docs).unwrap_or_else(|e| panic!("{e}"));
    let operation = match old {
        Some(_) => Operation::Update,
        None => Operation::Create,
    };
    let mut req = Request::for_object(object.clone(), operation, None);
    req.old_object = old.cloned();
    // kube-apiserver leaves `groups` out when there are none.
    req.user_info = match user.groups {
        [] => json!({"username": user.name}),
        groups => json!({"username": user.name, "groups": groups}),
    };
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let namespaces = StaticNamespaces::new().with("research", labels);
    let verdict = set.evaluate(&req, &namespaces);
    (verdict.denials.is_empty(), verdict.denials)
}

/// The one denial of a request that must be denied for one reason.
fn denied(verdict: (bool, Vec<String>)) -> String {
    let (allowed, denials) = verdict;
    assert!(!allowed, "allowed");
    assert_eq!(denials.len(), 1, "{denials:#?}");
    assert!(
        denials[0].starts_with("gpu-admission-exceptions: "),
        "{denials:?}"
    );
    assert!(
        !denials[0].contains("policy error"),
        "an error, not a verdict: {denials:?}"
    );
    denials[0].clone()
}

fn allowed(verdict: (bool, Vec<String>)) {
    assert!(verdict.0, "{:#?}", verdict.1);
}

#[test]
fn admins_write_any_exception_anywhere() {
    // Every policy, 90 days, a namespace nobody opened.
    let wide = exception(ADMIN.name, &["*"], Some(90));
    allowed(evaluate_guard(&wide, None, &ADMIN, &[]));
    allowed(evaluate_guard(
        &exception(MASTER.name, &["*"], None),
        None,
        &MASTER,
        &[],
    ));
    // ...and an UPDATE that keeps requestedBy.
    let mut longer = wide.clone();
    longer["spec"]["expiresAt"] = json!(after_creation(120));
    allowed(evaluate_guard(&longer, Some(&wide), &ADMIN, &[]));
}

#[test]
fn a_non_admin_writes_a_short_named_reasoned_exception_in_an_opened_namespace() {
    let week = exception(ALICE.name, &["gpu-privileged"], Some(7));
    allowed(evaluate_guard(&week, None, &ALICE, &[OPEN]));
    // Exactly 30 days is the cap, and still allowed.
    let month = exception(ALICE.name, &["gpu-privileged"], Some(30));
    allowed(evaluate_guard(&month, None, &ALICE, &[OPEN]));
    // Editing it within the rules.
    let mut edited = week.clone();
    edited["spec"]["policies"] = json!(["gpu-privileged", "gpu-visible-devices-leak"]);
    allowed(evaluate_guard(&edited, Some(&week), &ALICE, &[OPEN]));
}

#[test]
fn a_namespace_nobody_opened_is_closed_to_non_admins() {
    let week = exception(ALICE.name, &["gpu-privileged"], Some(7));
    for labels in [&[][..], &[("gpu-admission.io/exceptions", "true")][..]] {
        let message = denied(evaluate_guard(&week, None, &ALICE, labels));
        assert!(
            message.contains("namespace research is not open for policy exceptions")
                && message.contains("label it gpu-admission.io/exceptions=allowed")
                && message.contains("ask a cluster admin (gpu-admission:admins, system:masters)"),
            "{message}"
        );
    }
    // A user in no group at all (kube-apiserver then leaves `groups` out):
    // the same denial, not an evaluation error.
    let bob = User {
        name: "bob",
        groups: &[],
    };
    let message = denied(evaluate_guard(
        &exception("bob", &["gpu-privileged"], Some(7)),
        None,
        &bob,
        &[],
    ));
    assert!(
        message.contains("not open for policy exceptions"),
        "{message}"
    );
}

#[test]
fn non_admins_name_the_policies() {
    let message = denied(evaluate_guard(
        &exception(ALICE.name, &["gpu-privileged", "*"], Some(7)),
        None,
        &ALICE,
        &[OPEN],
    ));
    assert!(
        message.contains("may except from every policy (\"*\" in spec.policies)")
            && message.contains("name the policies the workload needs instead"),
        "{message}"
    );
}

#[test]
fn everyone_gives_a_reason() {
    for reason in ["", "   ", "\t\n"] {
        let mut blank = exception(ALICE.name, &["gpu-privileged"], Some(7));
        blank["spec"]["reason"] = json!(reason);
        let message = denied(evaluate_guard(&blank, None, &ALICE, &[OPEN]));
        assert!(
            message.contains("spec.reason is blank: say why the workload needs the exception"),
            "{message}"
        );
        // Admins too: the reason is shown with every request it allows.
        let mut blank = exception(ADMIN.name, &["gpu-privileged"], Some(7));
        blank["spec"]["reason"] = json!(reason);
        let message = denied(evaluate_guard(&blank, None, &ADMIN, &[]));
        assert!(message.contains("spec.reason is blank"), "{message}");
    }
    let mut none = exception(ALICE.name, &["gpu-privileged"], Some(7));
    none["spec"].as_object_mut().unwrap().remove("reason");
    let message = denied(evaluate_guard(&none, None, &ALICE, &[OPEN]));
    assert!(message.contains("spec.reason is blank"), "{message}");
}

#[test]
fn non_admins_expire_within_thirty_days_of_creation() {
    let message = denied(evaluate_guard(
        &exception(ALICE.name, &["gpu-privileged"], Some(90)),
        None,
        &ALICE,
        &[OPEN],
    ));
    assert!(
        message.contains(&format!(
            "spec.expiresAt {} is more than 30 days (720h) after the exception was created ({CREATED})",
            after_creation(90)
        )) && message.contains("set it to 2026-12-31T09:00:00Z or earlier")
            && message.contains("ask a cluster admin"),
        "{message}"
    );
    // One second past the cap.
    let mut late = exception(ALICE.name, &["gpu-privileged"], Some(30));
    late["spec"]["expiresAt"] = json!("2026-12-31T09:00:01Z");
    denied(evaluate_guard(&late, None, &ALICE, &[OPEN]));

    let message = denied(evaluate_guard(
        &exception(ALICE.name, &["gpu-privileged"], None),
        None,
        &ALICE,
        &[OPEN],
    ));
    assert!(
        message.contains("spec.expiresAt is required: set it to at most 30 days (720h)"),
        "{message}"
    );
}

#[test]
fn an_update_cannot_push_the_expiry_past_thirty_days_after_creation() {
    let week = exception(ALICE.name, &["gpu-privileged"], Some(7));
    let mut extended = week.clone();
    extended["spec"]["expiresAt"] = json!(after_creation(45));
    let message = denied(evaluate_guard(&extended, Some(&week), &ALICE, &[OPEN]));
    assert!(
        message.contains("is more than 30 days (720h) after the exception was created")
            && message.contains("set it to 2026-12-31T09:00:00Z or earlier"),
        "{message}"
    );
    // Nor drop it.
    let mut open_ended = week.clone();
    open_ended["spec"]
        .as_object_mut()
        .unwrap()
        .remove("expiresAt");
    let message = denied(evaluate_guard(&open_ended, Some(&week), &ALICE, &[OPEN]));
    assert!(message.contains("spec.expiresAt is required"), "{message}");
}

#[test]
fn requested_by_is_the_creator_for_everyone() {
    for user in [&ALICE, &ADMIN] {
        let forged = exception("dave@example.com", &["gpu-privileged"], Some(7));
        let message = denied(evaluate_guard(&forged, None, user, &[OPEN]));
        assert!(
            message.contains(&format!(
                "spec.requestedBy must be the user creating the exception ({}), not 'dave@example.com'",
                user.name
            )) && message.contains("leave it out (gpu-admission fills it in) or set it to your own user name"),
            "{message}"
        );
    }
    // Left out (the mutating webhook did not run): the same denial.
    let mut missing = exception(ALICE.name, &["gpu-privileged"], Some(7));
    missing["spec"]
        .as_object_mut()
        .unwrap()
        .remove("requestedBy");
    let message = denied(evaluate_guard(&missing, None, &ALICE, &[OPEN]));
    assert!(message.contains("not empty"), "{message}");
}

#[test]
fn an_update_keeps_requested_by_for_everyone() {
    // Alice hands it to someone else; an admin takes it over.
    for (user, creator, new) in [
        (&ALICE, ALICE.name, "dave@example.com"),
        (&ADMIN, ALICE.name, ADMIN.name),
    ] {
        let before = exception(creator, &["gpu-privileged"], Some(7));
        let mut taken = before.clone();
        taken["spec"]["requestedBy"] = json!(new);
        let message = denied(evaluate_guard(&taken, Some(&before), user, &[OPEN]));
        assert!(
            message.contains(&format!(
                "spec.requestedBy cannot change: keep it '{creator}'"
            )),
            "{message}"
        );
    }
    // An admin may edit an exception someone else created, keeping it.
    let before = exception(ALICE.name, &["gpu-privileged"], Some(7));
    let mut edited = before.clone();
    edited["spec"]["reason"] = json!("extended after review; OPS-1240");
    allowed(evaluate_guard(&edited, Some(&before), &ADMIN, &[]));
}

#[test]
fn the_guards_of_exemptions_cannot_be_excepted_even_by_admins() {
    for reserved in ["gpu-admission-exempt-label", "gpu-admission-exceptions"] {
        for (user, labels) in [(&ADMIN, &[][..]), (&ALICE, &[OPEN][..])] {
            let message = denied(evaluate_guard(
                &exception(user.name, &["gpu-privileged", reserved], Some(7)),
                None,
                user,
                labels,
            ));
            assert!(
                message.contains(&format!("spec.policies may not name {reserved}"))
                    && message.contains("remove it from spec.policies"),
                "{message}"
            );
        }
    }
}

// The CRD's schema: kube-apiserver refuses what it does not allow before
// any admission runs. Checked by a walk over the structural schema (types,
// required fields, bounds, date-time) and its x-kubernetes-validations
// rules, evaluated with the crate's CEL environment.

fn crd_schema() -> Value {
    let text = std::fs::read_to_string(root().join("deploy/exceptions/crd.yaml")).unwrap();
    let crd: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(
        crd["metadata"]["name"],
        "gpupolicyexceptions.gpu-admission.io"
    );
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["gpuex"]));
    let versions = crd["spec"]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["name"], "v1alpha1");
    versions[0]["schema"]["openAPIV3Schema"].clone()
}

/// The model's example exactly as documented.
fn documented_example() -> Value {
    let mut example = exception("alice@example.com", &["gpu-privileged"], None);
    example["spec"]["expiresAt"] = json!("2026-12-31T00:00:00Z");
    example
}

#[test]
fn the_crd_accepts_the_models_example() {
    let schema = crd_schema();
    let example = documented_example();
    assert_eq!(
        common::crd_schema::with_cel(&schema, &example),
        Vec::<String>::new()
    );
    // Any one of names, selector or expression is enough.
    for only in ["names", "selector", "expression"] {
        let mut narrower = example.clone();
        let m = narrower["spec"]["match"].as_object_mut().unwrap();
        m.retain(|k, _| k == only);
        assert_eq!(
            common::crd_schema::with_cel(&schema, &narrower),
            Vec::<String>::new(),
            "{only}"
        );
    }
}

#[test]
fn the_crd_refuses_an_exception_without_reason_or_match() {
    let schema = crd_schema();
    let mut no_reason = documented_example();
    no_reason["spec"].as_object_mut().unwrap().remove("reason");
    assert_eq!(
        common::crd_schema::with_cel(&schema, &no_reason),
        [".spec: reason is required"]
    );

    let mut kinds_only = documented_example();
    kinds_only["spec"]["match"] = json!({"kinds": ["Pod"]});
    assert_eq!(
        common::crd_schema::with_cel(&schema, &kinds_only),
        [".spec.match: set at least one of match.names, match.selector or match.expression"]
    );

    // And the bounds of the model.
    let cases: [(&str, Value, &str); 6] = [
        ("policies", json!([]), ".spec.policies: fewer than 1 items"),
        ("policies", json!([""]), ".spec.policies[0]: shorter than 1"),
        (
            "policies",
            json!((0..33).map(|i| format!("p{i}")).collect::<Vec<_>>()),
            ".spec.policies: more than 32 items",
        ),
        ("reason", json!(""), ".spec.reason: shorter than 1"),
        (
            "reason",
            json!("x".repeat(1025)),
            ".spec.reason: longer than 1024",
        ),
        (
            "expiresAt",
            json!("next tuesday"),
            ".spec.expiresAt: \"next tuesday\" is not an RFC 3339 date-time",
        ),
    ];
    for (field, value, want) in cases {
        let mut broken = documented_example();
        broken["spec"][field] = value;
        assert_eq!(
            common::crd_schema::with_cel(&schema, &broken),
            [want],
            "{field}"
        );
    }
    let mut many_names = documented_example();
    many_names["spec"]["match"]["names"] =
        json!((0..33).map(|i| format!("n{i}")).collect::<Vec<_>>());
    assert_eq!(
        common::crd_schema::with_cel(&schema, &many_names),
        [".spec.match.names: more than 32 items"]
    );
}

// In the cluster: the shipped webhook configurations send exceptions to
// the server, and the guard runs in kube-apiserver before them.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_cluster_exceptions_reach_the_webhooks_behind_the_guard() {
    let cluster = Cluster::start().await;
    let week = exception(ALICE.name, &["gpu-privileged"], Some(7));
    let outcome = cluster
        .admit(
            &Review::create(week.clone())
                .by(ALICE.name, &ALICE.groups[1..])
                .namespace_labels(&[OPEN]),
        )
        .await;
    assert_eq!(outcome.mutated_by, ["exceptions.mutate.gpu-admission.io"]);
    assert_eq!(
        outcome.validated_by,
        ["exceptions.validate.gpu-admission.io"]
    );
    assert!(outcome.allowed, "{}", outcome.message());

    // A namespace nobody opened: kube-apiserver's policy denies.
    let outcome = cluster
        .admit(&Review::create(week.clone()).by(ALICE.name, &ALICE.groups[1..]))
        .await;
    assert!(!outcome.allowed);
    assert_eq!(
        outcome.denied_by.as_deref(),
        Some("ValidatingAdmissionPolicy")
    );
    assert!(
        outcome.message().contains("not open for policy exceptions"),
        "{}",
        outcome.message()
    );

    // The webhook's own namespace and kube-system are never sent.
    for ns in ["gpu-admission", "kube-system"] {
        let mut elsewhere = exception(ADMIN.name, &["gpu-privileged"], Some(7));
        elsewhere["metadata"]["namespace"] = json!(ns);
        let outcome = cluster
            .admit(&Review::create(elsewhere).by(ADMIN.name, &ADMIN.groups[1..]))
            .await;
        assert!(!outcome.sent() && outcome.allowed, "{ns}: {outcome:?}");
    }
    cluster.stop().await;
}
