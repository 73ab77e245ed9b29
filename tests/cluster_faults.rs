//! `serve` against a kube-apiserver that fails: down at start, a 500 on the
//! first list, failing relists, an object that does not read. Every
//! watched cache follows the same rules (src/cluster/watch.rs): ready after
//! any outage, never fail-open on one error, back off like client-go.
use crate::common;

use common::fake_apiserver::{
    FakeApiServer, Recorded, Resource, NAMESPACES, NODEPOOLS, NODES, RESOURCE_CLAIMS,
    RESOURCE_CLAIM_TEMPLATES,
};
use common::in_cluster::InCluster;
use serde_json::{json, Value};
use std::time::Duration;

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}})
}

fn gpu_node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.azure.com/agentpool": "gpupool",
            "kubernetes.azure.com/accelerator": "nvidia",
            "node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3"}},
        "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "3860m", "nvidia.com/gpu": "1"}},
    })
}

/// A CREATE review of a pod in `apps` with `spec`, by a tenant.
fn pod_review(uid: &str, spec: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "apps", "operation": "CREATE",
        "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated"]},
        "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": "apps"},
            "spec": spec},
        "oldObject": null, "dryRun": false}})
}

/// A CPU pod bound by `nodeName` to `node`, as a DaemonSet-less agent or a
/// hand-written pod is.
fn bound_cpu_pod(node: &str) -> Value {
    pod_review(
        "5c0f6a0e-8e0e-4bde-9d0a-4c1f00000001",
        json!({"nodeName": node, "containers": [{"name": "probe", "image": "python:3.12"}]}),
    )
}

fn requests_to(fake: &FakeApiServer, resource: &Resource) -> Vec<Recorded> {
    fake.requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == resource.collection())
        .collect()
}

async fn readyz(server: &InCluster) -> (u16, String) {
    server.request("GET", "/readyz", b"").await
}

/// kube-apiserver down when the replica starts, then back: the replica is
/// not ready while it is down (and says why), and ready soon after it is
/// back, whether or not the cluster serves `resource.k8s.io/v1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_at_start_is_waited_out_before_and_after_kubernetes_1_34() {
    for serves_claims in [false, true] {
        let mut kinds = vec![NAMESPACES, NODES];
        if serves_claims {
            kinds.extend([RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES]);
        }
        let fake = FakeApiServer::start(kinds).await;
        fake.change(|cluster| {
            cluster.apply(namespace("apps"));
            cluster.apply(gpu_node("aks-gpupool-1"));
        });
        fake.outage(true);
        let server = InCluster::serve(&fake);
        // Down: not ready, and the probe says which cache and why.
        let mut said = (0, String::new());
        for _ in 0..500 {
            said = readyz(&server).await;
            if said.1.contains("retrying") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(said.0, 503);
        assert!(
            said.1.starts_with("namespaces not synced: retrying: "),
            "{said:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        fake.outage(false);
        server.wait_until_ready().await;
        let claim_lists = requests_to(&fake, &RESOURCE_CLAIMS);
        if serves_claims {
            assert!(
                claim_lists.iter().any(|r| r.status == 200),
                "{claim_lists:?}"
            );
        } else {
            assert!(
                claim_lists.iter().all(|r| r.status == 404),
                "{claim_lists:?}"
            );
            assert!(server.logged("the cluster does not serve resource.k8s.io/v1 resourceclaims"));
        }
        // The node cache is live: no fail-open.
        let (allowed, message) = server.validate(&bound_cpu_pod("aks-gpupool-1")).await;
        assert!(!allowed, "serves_claims={serves_claims}: {message}");
        assert!(
            message.contains("bound by spec.nodeName to GPU node aks-gpupool-1"),
            "{message}"
        );
    }
}

/// One 500 on the first node list is an error to retry, not an RBAC
/// refusal: the node cache syncs and CPU pods bound to GPU nodes are
/// denied, and the log does not ask for RBAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_on_the_first_node_list_is_retried_not_taken_as_forbidden() {
    let fake = FakeApiServer::start(vec![NAMESPACES, NODES, NODEPOOLS]).await;
    fake.change(|cluster| {
        cluster.apply(namespace("apps"));
        cluster.apply(gpu_node("aks-gpupool-1"));
        // A GPU NodePool with no node yet.
        cluster.apply(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "a100-spot"},
            "spec": {"template": {"spec": {
                "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                    "values": ["Standard_NC24ads_A100_v4"]}],
                "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]}}},
        }));
        cluster.fail(&NODES, 500, 1);
        // The NodePools fail at start too: they are retried, not given up.
        cluster.fail(&NODEPOOLS, 503, 2);
    });
    let server = InCluster::serve(&fake);
    server.wait_until_ready().await;
    let (allowed, message) = server.validate(&bound_cpu_pod("aks-gpupool-1")).await;
    assert!(!allowed, "{message}");
    assert!(
        message.contains("bound by spec.nodeName to GPU node aks-gpupool-1"),
        "{message}"
    );
    let by_nodepool = pod_review(
        "5c0f6a0e-8e0e-4bde-9d0a-4c1f00000002",
        json!({"nodeSelector": {"karpenter.sh/nodepool": "a100-spot"},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "web", "image": "nginx:1.27"}]}),
    );
    let (allowed, message) = server.validate(&by_nodepool).await;
    assert!(!allowed, "{message}");
    assert!(
        message.contains("(it can land on NodePool/a100-spot)"),
        "{message}"
    );
    assert!(!server.logged("grant get, list and watch on nodes"));
    let node_answers: Vec<u16> = requests_to(&fake, &NODES)
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(node_answers[0], 500, "{node_answers:?}");
}

/// A relist that keeps failing is retried with client-go's backoff (0.8 s
/// doubling, jittered, to 30 s), not once a second; the cache keeps what it
/// had and the replica stays ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_relist_backs_off_and_the_cache_keeps_what_it_had() {
    let fake = FakeApiServer::start(vec![NAMESPACES, NODES]).await;
    fake.change(|cluster| {
        cluster.apply(namespace("apps"));
        cluster.apply(gpu_node("aks-gpupool-1"));
    });
    let server = InCluster::serve_with(&fake, &["--metrics-listen", "127.0.0.1:0"]);
    server.wait_until_ready().await;
    let before = requests_to(&fake, &NODES).len();
    // History compacted and the watch closed: the next watch gets 410 Gone,
    // and every list and watch after that answers 500.
    fake.change(|cluster| {
        cluster.compact();
        cluster.fail(&NODES, 500, usize::MAX);
        cluster.end_watches();
    });
    tokio::time::sleep(Duration::from_secs(10)).await;
    let failed: Vec<Recorded> = requests_to(&fake, &NODES)[before..]
        .iter()
        .filter(|r| r.status == 500)
        .cloned()
        .collect();
    // 0.8 + 1.6 + 3.2 + 6.4 s of waits (each up to doubled) exceed 10 s:
    // at most 5 attempts; once a second would be 10.
    assert!(!failed.is_empty());
    assert!(
        failed.len() <= 5,
        "{} attempts in 10 s: {failed:?}",
        failed.len()
    );
    assert_eq!(readyz(&server).await, (200, "ok\n".to_string()));
    let (allowed, _) = server.validate(&bound_cpu_pod("aks-gpupool-1")).await;
    assert!(!allowed, "the cache kept the node through the failures");
    assert!(
        server
            .metric("gpu_admission_cache_failures_total{kind=\"nodes\"}")
            .await
            >= 1.0
    );
    fake.change(|cluster| cluster.heal(&NODES));
}

/// A Node that does not read as a Node is skipped and counted: a fresh
/// start still becomes ready, and a synced cache follows later changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_object_is_skipped_and_counted_not_a_stall() {
    let fake = FakeApiServer::start(vec![NAMESPACES, NODES]).await;
    let mut broken = gpu_node("aks-broken-1");
    broken["spec"]["taints"] = json!("sku=gpu:NoSchedule");
    fake.change(|cluster| {
        cluster.apply(namespace("apps"));
        cluster.apply(gpu_node("aks-gpupool-1"));
        cluster.apply(broken.clone());
    });
    let server = InCluster::serve_with(&fake, &["--metrics-listen", "127.0.0.1:0"]);
    server.wait_until_ready().await;
    let skipped = "gpu_admission_cache_skipped_total{kind=\"nodes\"}";
    assert_eq!(server.metric(skipped).await, 1.0);
    assert!(server.logged("aks-broken-1"), "the skipped object is named");
    let (allowed, _) = server.validate(&bound_cpu_pod("aks-gpupool-1")).await;
    assert!(!allowed);
    // After a 410 relist with the broken node still there, a new GPU node
    // is seen and the cache is whole.
    // The node is added, history compacted past it and the watch closed at
    // once: only a relist can bring the node.
    fake.change(|cluster| {
        cluster.apply(gpu_node("aks-gpupool-2"));
        cluster.compact();
        cluster.end_watches();
    });
    let message = server
        .denial_eventually(&bound_cpu_pod("aks-gpupool-2"), "the new node")
        .await;
    assert!(message.contains("aks-gpupool-2"), "{message}");
    assert!(
        requests_to(&fake, &NODES).iter().any(|r| r.expired),
        "the watch was answered 410 and the cache relisted"
    );
    assert_eq!(
        server.metric(skipped).await,
        2.0,
        "skipped again by the relist"
    );
    assert_eq!(readyz(&server).await, (200, "ok\n".to_string()));
}

/// While the node cache has no list of the cluster's nodes (here: the list
/// is refused), where pods land is judged by labels, and a pod that asks
/// for no GPU and names its node (`spec.nodeName`, a hostname selector) is
/// judged as bound to a GPU node: fail closed. A DaemonSet's pod (its node
/// in `matchFields`) and a pod that names no node pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_node_list_a_pod_that_names_its_node_is_taken_as_bound_to_a_gpu_node() {
    let fake = FakeApiServer::start(vec![NAMESPACES, NODES]).await;
    fake.change(|cluster| {
        cluster.apply(namespace("apps"));
        cluster.apply(gpu_node("aks-gpupool-1"));
        cluster.forbid(&NODES);
    });
    let server = InCluster::serve(&fake);
    server.wait_until_ready().await;
    let (allowed, message) = server.validate(&bound_cpu_pod("aks-system-1")).await;
    assert!(!allowed, "{message}");
    assert!(
        message.contains(
            "aks-system-1, which may be a GPU node: the server has not listed the cluster's nodes"
        ),
        "{message}"
    );
    let by_hostname = pod_review(
        "5c0f6a0e-8e0e-4bde-9d0a-4c1f00000003",
        json!({"nodeSelector": {"kubernetes.io/hostname": "aks-system-1"},
            "containers": [{"name": "probe", "image": "python:3.12"}]}),
    );
    let (allowed, message) = server.validate(&by_hostname).await;
    assert!(!allowed, "{message}");
    let daemon_pod = pod_review(
        "5c0f6a0e-8e0e-4bde-9d0a-4c1f00000004",
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                    "values": ["aks-system-1"]}]}]}}},
            "containers": [{"name": "agent", "image": "fluent/fluent-bit:3.2"}]}),
    );
    let (allowed, message) = server.validate(&daemon_pod).await;
    assert!(allowed, "{message}");
    let unnamed = pod_review(
        "5c0f6a0e-8e0e-4bde-9d0a-4c1f00000005",
        json!({"containers": [{"name": "web", "image": "nginx:1.27"}]}),
    );
    let (allowed, message) = server.validate(&unnamed).await;
    assert!(allowed, "{message}");
}
