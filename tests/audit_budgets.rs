//! `gpu-admission audit -f` of a dump with GpuBudgets: held / limit per
//! budget, limit and namespace, with pending pods and Kueue's queued
//! GPUs, a full budget, a budget that does not read and a ClusterQueue
//! that disagrees with the budgets, in the JSON, text and HTML reports.
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

fn audit(format: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    audit_of(&root.join("tests/fixtures/audit/budgets.yaml"), format)
}

fn audit_of(file: &Path, format: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["audit", "-f"])
        .arg(file)
        .arg("--policies")
        .arg(root.join("policies"))
        .args(["-o", format])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn budgets_show_held_pending_and_queued_gpus_and_their_findings() {
    let report: Value = serde_json::from_str(&audit("json")).unwrap();
    // nlp holds 4 A100s (one pod of 2 on a node, one waiting) and queues a
    // Job of 2 GPUs; vision holds 1 T4; the team budget covers both.
    assert_eq!(
        report["budgets"],
        json!([
            {"namespace": "nlp", "budget": "gpus", "model": "A100", "limit": 4,
             "held": 4, "pending": 2, "queued": 2,
             "namespaces": {"nlp": {"held": 4, "pending": 2, "queued": 2}}},
            {"namespace": "nlp", "budget": "gpus", "model": "T4", "limit": 8,
             "held": 0, "pending": 0, "queued": 2,
             "namespaces": {"nlp": {"held": 0, "pending": 0, "queued": 2}}},
            {"namespace": "gpu-admission", "budget": "team-ml", "model": "total", "limit": 6,
             "held": 5, "pending": 2, "queued": 2,
             "namespaces": {"nlp": {"held": 4, "pending": 2, "queued": 2},
                            "vision": {"held": 1, "pending": 0, "queued": 0}}},
        ])
    );
    let findings: Vec<(&str, &str, &str)> = (report["budgetFindings"].as_array().unwrap())
        .iter()
        .map(|f| {
            let (rule, budget) = (f["rule"].as_str().unwrap(), f["budget"].as_str().unwrap());
            (rule, budget, f["message"].as_str().unwrap())
        })
        .collect();
    let rules: Vec<(&str, &str)> = findings.iter().map(|(r, b, _)| (*r, *b)).collect();
    // A mismatch names its ClusterQueue; a full limit has none.
    let queues: Vec<&Value> = (report["budgetFindings"].as_array().unwrap().iter())
        .map(|f| &f["clusterQueue"])
        .collect();
    assert_eq!(
        queues,
        [
            &Value::Null,
            &Value::Null,
            &json!("team-nlp"),
            &json!("team-nlp"),
            &json!("team-nlp")
        ]
    );
    assert_eq!(
        rules,
        [
            ("gpu-budget-unread", "vision-gpus"),
            ("gpu-budget-full", "gpus"),
            ("gpu-budget-kueue-mismatch", "gpus"),
            ("gpu-budget-kueue-mismatch", "gpus"),
            ("gpu-budget-kueue-mismatch", "team-ml"),
        ]
    );
    let starts = [
        "GpuBudget vision/vision-gpus does not read (spec.models.T4: invalid type: string \"two\", expected i64): the server ignores it, so it limits nothing until fixed",
        "4/4 A100 GPUs are held in the namespaces GpuBudget nlp/gpus covers, 2 of them by pods not on a node yet",
        "ClusterQueue team-nlp gives namespace nlp 8 GPUs of ResourceFlavor a100 (A100), GpuBudget nlp/gpus allows 4 A100 GPUs",
        "ClusterQueue team-nlp gives namespace nlp 2 GPUs of ResourceFlavor h100 (H100), GpuBudget nlp/gpus sets no limit for that model",
        "ClusterQueue team-nlp gives namespace nlp 10 GPUs in all its flavors; GpuBudget gpu-admission/team-ml allows 6 in total",
    ];
    for ((_, _, message), start) in findings.iter().zip(starts) {
        assert!(message.starts_with(start), "{message}");
    }

    let text = audit("text");
    assert!(
        text.contains(
            "  gpu-admission/team-ml total: 5/6, 2 pending, 2 queued (nlp 4, vision 1)\n"
        ),
        "{text}"
    );
    for (rule, _, message) in &findings {
        assert!(text.contains(&format!("  [{rule}] {message}\n")), "{text}");
    }

    let html = audit("html");
    let section = &html[html
        .find(r#"<section id="budgets">"#)
        .expect("a budgets section")..];
    let section = &section[..section.find("</section>").unwrap()];
    assert!(
        section.contains(r#"<tr class="budget" data-budget="gpus" data-model="A100">"#),
        "{section}"
    );
    assert!(section.contains("4 / 4"), "{section}");
    assert_eq!(
        section
            .matches(r#"data-rule="gpu-budget-kueue-mismatch""#)
            .count(),
        3
    );
}

/// A pod allowed on an A100 or a T4 and bound to a T4 node of the dump is
/// held against the T4 limit, not the A100 one.
#[test]
fn a_pod_bound_to_a_node_is_held_against_the_size_of_the_node() {
    let dump = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nlp"}},
        {"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
         "metadata": {"name": "gpus", "namespace": "nlp"}, "spec": {"models": {"A100": 1, "T4": 1}}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "aks-t4-0", "labels": {
            "node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3",
            "karpenter.azure.com/sku-gpu-name": "T4"}},
         "status": {"allocatable": {"nvidia.com/gpu": "1"}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "either", "namespace": "nlp", "uid": "p-either"},
         "spec": {"nodeName": "aks-t4-0",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "karpenter.azure.com/sku-gpu-name",
                    "operator": "In", "values": ["A100", "T4"]}]}]}}},
            "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
         "status": {"phase": "Running"}}]});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dump.json");
    std::fs::write(&file, dump.to_string()).unwrap();
    let report: Value = serde_json::from_str(&audit_of(&file, "json")).unwrap();
    let held: Vec<(&str, &Value)> = (report["budgets"].as_array().unwrap().iter())
        .map(|row| (row["model"].as_str().unwrap(), &row["held"]))
        .collect();
    assert_eq!(held, [("A100", &json!(0)), ("T4", &json!(1))]);
}

/// A pending pod whose nodeSelector names the dump's A100 node pool, and
/// no GPU model, is held against the A100 limit: the pool's size, as
/// admission judging against the same nodes sizes it.
#[test]
fn a_pending_pod_naming_a_node_pool_is_held_against_the_pools_size() {
    let dump = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nlp"}},
        {"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
         "metadata": {"name": "gpus", "namespace": "nlp"}, "spec": {"models": {"A100": 1, "H100": 1}}},
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "aks-gpua100-0", "labels": {
            "kubernetes.azure.com/agentpool": "gpua100",
            "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"}},
         "status": {"allocatable": {"nvidia.com/gpu": "1"}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waiting", "namespace": "nlp", "uid": "p-waiting"},
         "spec": {"nodeSelector": {"kubernetes.azure.com/agentpool": "gpua100"},
            "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
         "status": {"phase": "Pending"}}]});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dump.json");
    std::fs::write(&file, dump.to_string()).unwrap();
    let report: Value = serde_json::from_str(&audit_of(&file, "json")).unwrap();
    let held: Vec<(&str, &Value, &Value)> = (report["budgets"].as_array().unwrap().iter())
        .map(|row| {
            (
                row["model"].as_str().unwrap(),
                &row["held"],
                &row["pending"],
            )
        })
        .collect();
    assert_eq!(
        held,
        [
            ("A100", &json!(1), &json!(1)),
            ("H100", &json!(0), &json!(0))
        ]
    );
}

/// A running pod that asks for no GPU resource but claims 2 GPUs through
/// a ResourceClaimTemplate of the dump holds them: in the audit's budget
/// row, and for `evaluate --cluster` of the same dump, whose next GPU pod
/// the budget then denies.
#[test]
fn gpus_claimed_through_dra_are_held_against_the_budget() {
    let pod = |name: &str, resources: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": name, "namespace": "nlp", "uid": format!("p-{name}")},
         "spec": {"restartPolicy": "Never",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "karpenter.azure.com/sku-gpu-name",
                    "operator": "In", "values": ["A100"]}]}]}}},
            "containers": [{"name": "train", "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                "command": ["python", "train.py"], "resources": resources}]}})
    };
    let mut running = pod(
        "dra",
        json!({"requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"memory": "16Gi"}, "claims": [{"name": "gpu"}]}),
    );
    running["spec"]["nodeName"] = json!("aks-a100-0");
    running["status"] = json!({"phase": "Running"});
    let dump = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nlp", "labels": {
            "gpu-admission.io/tier": "standard", "gpu-admission.io/premium-gpus": "true"}}},
        {"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
         "metadata": {"name": "gpus", "namespace": "nlp"}, "spec": {"models": {"A100": 2}}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "two-gpus", "namespace": "nlp"},
         "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}]}}}},
        running]});
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dump.json");
    std::fs::write(&file, dump.to_string()).unwrap();
    let report: Value = serde_json::from_str(&audit_of(&file, "json")).unwrap();
    assert_eq!(
        report["budgets"],
        json!([{"namespace": "nlp", "budget": "gpus", "model": "A100", "limit": 2,
                "held": 2, "pending": 0, "queued": 0,
                "namespaces": {"nlp": {"held": 2, "pending": 0, "queued": 0}}}])
    );

    let mut next = pod(
        "next",
        json!({"requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"memory": "16Gi", "nvidia.com/gpu": "1"}}),
    );
    next["spec"]
        .as_object_mut()
        .unwrap()
        .remove("resourceClaims");
    let manifest = dir.path().join("next.json");
    std::fs::write(&manifest, next.to_string()).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(["evaluate", "-f"])
        .arg(&manifest)
        .arg("--cluster")
        .arg(&file)
        .arg("--policies")
        .arg(root.join("policies"))
        .args(["-o", "json"])
        .output()
        .unwrap();
    let results: Value = serde_json::from_slice(&out.stdout).unwrap();
    let denial = results[0]["denials"][0].as_str().unwrap_or_default();
    let said = "GpuBudget nlp/gpus allows 2 A100 GPUs held at once; 2/2 are held and this pod asks for 1 more";
    assert!(denial.starts_with(said), "{results}");

    // `test` with the dump as its spec.cluster: the same denial.
    let test = json!({"apiVersion": "gpu-admission.io/v1alpha1", "kind": "PolicyTest",
        "metadata": {"name": "dra-budget"},
        "spec": {"cluster": [{"file": "dump.json"}], "cases": [{"name": "next", "namespace": "nlp",
            "object": next, "expect": {"denied": [{"budget": "nlp/gpus", "message": said}]}}]}});
    std::fs::write(dir.path().join("tests.yaml"), test.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
        .arg("test")
        .arg(dir.path())
        .arg("--policies")
        .arg(root.join("policies"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().last(),
        Some("1 passed, 0 failed"),
        "{stdout}"
    );
}
