//! The test harness of `tests/common/webhooks.rs`: requests reach the
//! shipped webhooks exactly when kube-apiserver would send them.
use crate::common;

use common::webhooks::{cluster_admit, Cluster, Review};
use serde_json::{json, Value};

fn pod(namespace: &str, resources: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {"containers": [{
            "name": "pytorch",
            "image": "nvcr.io/nvidia/pytorch:24.08-py3",
            "command": ["python", "train.py"],
            "resources": resources
        }]}
    })
}

fn gpu_pod(namespace: &str) -> Value {
    pod(
        namespace,
        json!({
            "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
            "limits": {"memory": "16Gi", "nvidia.com/gpu": "1"}
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_pod_goes_to_mutate_then_validate_and_comes_out_placed() {
    let outcome = cluster_admit(&Review::create(gpu_pod("ml"))).await;
    assert_eq!(outcome.mutated_by, ["pods.mutate.gpu-admission.io"]);
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    assert!(outcome.allowed, "{}", outcome.message());
    let object = outcome.object.unwrap();
    let tolerations = object["spec"]["tolerations"]
        .as_array()
        .expect("tolerations added");
    assert!(
        tolerations.contains(
            &json!({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
        ),
        "{tolerations:?}"
    );
    assert!(!outcome.patch.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_pods_and_the_control_plane_reach_no_webhook() {
    let cluster = Cluster::start().await;
    let cpu = pod(
        "web",
        json!({"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}),
    );
    let outcome = cluster
        .admit(&Review::create(cpu).namespace_labels(&[("team", "web")]))
        .await;
    assert!(!outcome.sent(), "{outcome:?}");
    assert!(outcome.allowed);

    // kube-system is excluded by name, even for a GPU pod.
    let outcome = cluster.admit(&Review::create(gpu_pod("kube-system"))).await;
    assert!(!outcome.sent(), "{outcome:?}");
    assert!(outcome.allowed);
    assert_eq!(
        outcome.object.unwrap(),
        gpu_pod("kube-system"),
        "not mutated"
    );
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_nodepools_ignore_the_namespace_selector() {
    let pool = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "limits": {"cpu": "1000", "nvidia.com/gpu": "16"},
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "10m"},
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.azure.com/sku-name", "operator": "In", "values": ["Standard_NC24ads_A100_v4"]}
                ]
            }}
        }
    });
    let outcome = cluster_admit(&Review::create(pool)).await;
    assert_eq!(outcome.mutated_by, ["nodepools.mutate.gpu-admission.io"]);
    assert_eq!(
        outcome.validated_by,
        ["nodepools.validate.gpu-admission.io"]
    );
    // The GPU taint is added by /mutate and the result is then validated.
    let taints = &outcome.object.as_ref().unwrap()["spec"]["template"]["spec"]["taints"];
    assert!(
        taints
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["key"] == "sku")),
        "{taints}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_and_subresources_follow_the_rules() {
    let cluster = Cluster::start().await;
    let old = gpu_pod("ml");
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({"run": "2"});
    // /mutate takes CREATE only; /validate CREATE and UPDATE.
    let outcome = cluster.admit(&Review::update(old.clone(), new)).await;
    assert!(outcome.mutated_by.is_empty(), "{outcome:?}");
    assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
    // A subresource is not the main resource: pods/status reaches no webhook.
    let outcome = cluster
        .admit(&Review::update(old.clone(), old).subresource("status"))
        .await;
    assert!(!outcome.sent(), "{outcome:?}");
    cluster.stop().await;
}

/// deploy/tests/match-conditions.yaml (which ci/validate-deploy.sh runs
/// with cel-python) gives the same answers through the crate's engine,
/// rules and selectors included.
#[test]
fn the_deploy_match_condition_cases_agree_with_the_engine() {
    use common::webhooks::Webhook;
    use gpu_admission::k8s::StaticNamespaces;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let webhooks: Vec<Webhook> = ["mutating-webhook.yaml", "validating-webhook.yaml"]
        .iter()
        .flat_map(|f| Webhook::load(&root.join("deploy/base").join(f)))
        .collect();
    let text = std::fs::read_to_string(root.join("deploy/tests/match-conditions.yaml")).unwrap();
    let cases: Value = serde_yaml::from_str(&text).unwrap();
    let cases = cases["cases"].as_array().unwrap();
    assert!(cases.len() > 20);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let webhook = webhooks
            .iter()
            .find(|w| w.name == case["webhook"])
            .unwrap_or_else(|| panic!("{name}: no webhook {}", case["webhook"]));
        let request = &case["request"];
        let mut review = match (request["operation"].as_str(), case.get("oldObject")) {
            (Some("UPDATE"), Some(old)) => Review::update(old.clone(), case["object"].clone()),
            _ => Review::create(case["object"].clone()),
        };
        if let Some(sub) = request["subResource"].as_str() {
            review = review.subresource(sub);
        }
        if let Some(user) = request["userInfo"]["username"].as_str() {
            let groups: Vec<&str> = request["userInfo"]["groups"]
                .as_array()
                .map(|g| g.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            review = review.by(user, &groups);
        }
        let req = review.request(name);
        let sent = webhook
            .applies(&req, &StaticNamespaces::new())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(sent, case["sent"] == true, "{name}");
    }
}
