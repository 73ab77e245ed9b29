//! GpuBudgets from the cluster: budgets and GPU pods served by the fake
//! API server's list and watch, held by the server's budget cache, and
//! enforced by /validate behind the shipped webhook configurations (real
//! TLS, AdmissionReview JSON). The test stores each pod the webhooks
//! admit in the fake, as kube-apiserver would. Then `serve` itself in a
//! cluster: a restart counts what is held before it is ready, and two
//! replicas admitting at once overshoot a budget by at most the bound
//! docs/budgets.md states.
use crate::common;

use common::fake_apiserver::{
    FakeApiServer, Resource, NAMESPACES, NODES, RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES,
};
use common::in_cluster::InCluster;
use common::webhooks::{Cluster, Outcome, Review};
use gpu_admission::admission::Admission;
use gpu_admission::budgets::{self, StaticBudgets, Usage};
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::cluster::budgets::{ClusterBudgets, PodReader};
use gpu_admission::cluster::watch::{CacheMetrics, Settings};
use gpu_admission::cluster::ClusterNodes;
use gpu_admission::gpu::facts::GpuFacts;
use gpu_admission::k8s::{NoClaims, StaticClaims, StaticNamespaces};
use gpu_admission::placement::ProfileSet;
use gpu_admission::review::Operation;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const BUDGETS: Resource = Resource::new(
    "gpu-admission.io",
    "v1alpha1",
    "GpuBudget",
    "gpubudgets",
    true,
);
const PODS: Resource = Resource::new("", "v1", "Pod", "pods", true);
/// The namespace labels that let its pods take A100s: the standard tier,
/// premium GPUs opted in.
const LABELS: [(&str, &str); 2] = [
    ("gpu-admission.io/tier", "standard"),
    ("gpu-admission.io/premium-gpus", "true"),
];

fn budget(namespace: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
           "metadata": {"name": name, "namespace": namespace}, "spec": spec})
}

/// A training pod of `gpus` GPUs whose node affinity allows the GPU
/// `models` (Karpenter's `sku-gpu-name` label), as `kubectl apply` sends it.
fn pod(namespace: &str, name: &str, gpus: u32, models: &[&str]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                     "labels": {"app": "train"}},
        "spec": {
            "restartPolicy": "Never",
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{
                    "key": "karpenter.azure.com/sku-gpu-name", "operator": "In", "values": models}]}]}}},
            "containers": [{
                "name": "train",
                "image": "nvcr.io/nvidia/pytorch:24.08-py3",
                "command": ["python", "train.py"],
                "resources": {
                    "requests": {"cpu": "4", "memory": "16Gi"},
                    "limits": {"memory": "16Gi", "nvidia.com/gpu": gpus.to_string()}
                }
            }]
        }
    })
}

/// The shipped policy set's placement (its catalog and GPU resources).
fn shipped() -> ProfileSet {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("policies");
    bundle::load(&PolicySource::Dir(dir))
        .unwrap()
        .bundle
        .placement
}

/// The catalog sizes the node selection of `pod` (as stored) allows.
fn sizes(pod: &Option<Value>) -> Vec<String> {
    let (placement, pod) = (shipped(), pod.as_ref().expect("the pod"));
    let facts = GpuFacts::of(pod, placement.catalog(), placement.gpu_resources());
    facts.skus.to_vec()
}

const A100: [&str; 3] = [
    "Standard_NC24ads_A100_v4",
    "Standard_NC48ads_A100_v4",
    "Standard_NC96ads_A100_v4",
];
const H100: [&str; 2] = ["Standard_NC40ads_H100_v5", "Standard_NC80adis_H100_v5"];

/// How serve reads a pod into its charge: with the shipped policy set's
/// catalog and GPU resources, and the size of the node it is bound to
/// (these pods claim nothing through DRA).
fn reader() -> PodReader {
    let placement = shipped();
    Arc::new(move |pod, landed| {
        let (catalog, resources) = (placement.catalog(), placement.gpu_resources());
        budgets::charge_landed(pod, landed, None, &NoClaims, catalog, resources)
    })
}

/// A ResourceClaimTemplate `two-gpus` in `nlp`: 2 devices of NVIDIA's GPU
/// device class, as NVIDIA's DRA driver examples write it.
fn two_gpus() -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two-gpus", "namespace": "nlp"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}}]}}}})
}

/// [`pod`] asking for no GPU resource, its GPUs claimed through
/// [`two_gpus`] instead.
fn claiming(name: &str, models: &[&str]) -> Value {
    let mut claiming = pod("nlp", name, 0, models);
    claiming["spec"]["resourceClaims"] =
        json!([{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}]);
    let resources = &mut claiming["spec"]["containers"][0]["resources"];
    resources["limits"] = json!({"memory": "16Gi"});
    resources["claims"] = json!([{"name": "gpu"}]);
    claiming
}

/// The fake cluster, the server's budget cache watching it (with its node
/// cache, as serve's), and the shipped webhooks in front of a server
/// judging with that cache.
struct Setup {
    fake: FakeApiServer,
    cluster: Cluster,
}

impl Setup {
    async fn start(objects: Vec<Value>) -> Setup {
        Setup::serving(objects, false).await
    }

    /// [`Setup::start`], `/mutate` narrowing GPU pods to the sizes with
    /// room (`serve --budget-narrowing`) when `narrowing`.
    async fn serving(objects: Vec<Value>, narrowing: bool) -> Setup {
        let fake = FakeApiServer::start(vec![BUDGETS, PODS, NODES]).await;
        fake.change(|c| objects.into_iter().for_each(|o| _ = c.apply(o)));
        let cache = ClusterBudgets::new(Arc::new(StaticNamespaces::new()), "gpu-admission");
        let (settings, metrics) = (Settings::default(), CacheMetrics::default());
        let (nodes, _) = ClusterNodes::start(fake.client(), settings, metrics.clone());
        let nodes = Some(nodes);
        let [budgets, pods] =
            cache.watch(fake.client(), reader(), nodes, vec![], settings, metrics);
        assert!(budgets.0.synced().await && pods.0.synced().await);
        let cluster = Cluster::start_with_budgets(Arc::new(cache), narrowing).await;
        Setup { fake, cluster }
    }

    /// Admits `pod` through the webhooks; stores what they admitted.
    async fn create(&self, pod: Value) -> Outcome {
        self.admit(Review::create(pod)).await
    }

    /// Admits `review` (in a namespace labelled [`LABELS`]); stores the
    /// pod they admitted unless it is a dry run.
    async fn admit(&self, review: Review) -> Outcome {
        let dry_run = review.dry_run;
        let outcome = self.cluster.admit(&review.namespace_labels(&LABELS)).await;
        let pod = outcome.object.as_ref().is_some_and(|o| o["kind"] == "Pod");
        if outcome.allowed && pod && !dry_run {
            let stored = outcome.object.clone().expect("the admitted pod");
            self.fake.change(|c| c.apply(stored));
        }
        outcome
    }

    /// Judges `pod` until `done` holds (the watch has brought a change),
    /// storing nothing; at most 30 s.
    async fn judged_until(&self, pod: &Value, what: &str, done: impl Fn(&Outcome) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let review = Review::create(pod.clone()).namespace_labels(&LABELS);
            let outcome = self.cluster.admit(&review).await;
            if done(&outcome) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: {outcome:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn set_phase(&self, name: &str, node: &str, phase: &str) {
        self.fake.change(|c| {
            let mut pod = c.object(&PODS, "nlp", name).expect("stored");
            pod["spec"]["nodeName"] = json!(node);
            pod["status"] = json!({"phase": phase});
            c.apply(pod)
        });
    }
}

const BUDGET_DENIAL: &str = "pods.validate.gpu-admission.io";

#[tokio::test]
async fn pods_are_admitted_until_the_budget_and_the_next_is_denied_with_its_message() {
    let setup = Setup::start(vec![budget(
        "nlp",
        "team-nlp",
        json!({"models": {"A100": 4, "T4": 16}}),
    )])
    .await;
    for name in ["a", "b"] {
        let outcome = setup.create(pod("nlp", name, 2, &["A100"])).await;
        assert!(outcome.allowed, "{name}: {outcome:?}");
    }
    let denied = setup.create(pod("nlp", "c", 1, &["A100"])).await;
    assert!(!denied.allowed);
    assert_eq!(denied.denied_by.as_deref(), Some(BUDGET_DENIAL));
    assert_eq!(
        denied.message(),
        "GpuBudget nlp/team-nlp allows 4 A100 GPUs held at once; 4/4 are held and this pod asks for 1 more \
         (counted as A100 on Standard_NC96ads_A100_v4, the most expensive size its node selection allows). \
         Wait for pods holding them to finish or delete some, narrow the pod's node selection to a model \
         with room (T4: 16 left), or ask the budget's owner for more"
    );
    // Another model, another limit; another namespace, no budget.
    assert!(setup.create(pod("nlp", "t4", 1, &["T4"])).await.allowed);
    assert!(setup.create(pod("web", "w", 4, &["A100"])).await.allowed);
    setup.cluster.stop().await;
}

#[tokio::test]
async fn finishing_or_deleting_a_pod_frees_room_through_the_watch() {
    let setup = Setup::start(vec![budget(
        "nlp",
        "team-nlp",
        json!({"models": {"A100": 4}}),
    )])
    .await;
    for name in ["a", "b"] {
        assert!(setup.create(pod("nlp", name, 2, &["A100"])).await.allowed);
    }
    // Bound and running: still held.
    setup.set_phase("a", "aks-a100-1", "Running");
    let next = pod("nlp", "c", 2, &["A100"]);
    assert!(!setup.create(next.clone()).await.allowed);
    setup.set_phase("a", "aks-a100-1", "Succeeded");
    setup.judged_until(&next, "a finished", |o| o.allowed).await;
    assert!(setup.create(next).await.allowed);
    let more = pod("nlp", "d", 2, &["A100"]);
    assert!(!setup.create(more.clone()).await.allowed);
    setup.fake.change(|c| c.delete(&PODS, "nlp", "b"));
    setup.judged_until(&more, "b deleted", |o| o.allowed).await;
    setup.cluster.stop().await;
}

#[tokio::test]
async fn a_pod_that_may_take_two_models_counts_against_the_most_expensive() {
    let setup = Setup::start(vec![budget(
        "nlp",
        "team-nlp",
        json!({"models": {"A100": 1, "T4": 8}}),
    )])
    .await;
    assert!(setup.create(pod("nlp", "a", 1, &["A100"])).await.allowed);
    let either = setup.create(pod("nlp", "either", 1, &["A100", "T4"])).await;
    assert!(!either.allowed);
    assert!(
        either
            .message()
            .contains("1/1 are held and this pod asks for 1 more (counted as A100")
            && either.message().contains("(T4: 8 left)"),
        "{either:?}"
    );
    // Left as it is (no `--budget-narrowing`): it may take either model.
    let allowed = sizes(&either.object);
    let t4 = allowed.iter().filter(|s| s.contains("_T4_")).count();
    assert!(
        A100.iter().all(|s| allowed.contains(&s.to_string())) && t4 == 4,
        "{allowed:?}"
    );
    assert!(either.warnings.is_empty(), "{either:?}");
    // Narrowed to the model with room, as the message says.
    assert!(setup.create(pod("nlp", "t4", 1, &["T4"])).await.allowed);
    setup.cluster.stop().await;
}

/// `serve --budget-narrowing`: a pod that may take an A100 or an H100 is
/// placed by `/mutate` on the sizes of the model with room (a warning
/// says so) and admitted; a dry run is narrowed the same and holds
/// nothing; a pod no model of which has room is left as it is and denied.
#[tokio::test]
async fn with_narrowing_a_pod_that_may_take_two_models_is_placed_on_the_one_with_room() {
    let setup = Setup::serving(
        vec![
            budget("nlp", "team-nlp", json!({"models": {"A100": 1, "H100": 1}})),
            budget("cv", "team-cv", json!({"models": {"A100": 4, "H100": 1}})),
        ],
        true,
    )
    .await;
    let a = setup.create(pod("nlp", "a", 1, &["A100"])).await;
    assert!(a.allowed && a.warnings.is_empty(), "{a:?}");
    assert_eq!(sizes(&a.object), A100, "one model: nothing to narrow");
    let warning = "GpuBudget nlp/team-nlp has no room on A100 for this pod's 1 GPU; its node \
        affinity was narrowed to the sizes with room: H100 (Standard_NC40ads_H100_v5, Standard_NC80adis_H100_v5)";
    let either = pod("nlp", "either", 1, &["A100", "H100"]);
    let dry = setup.admit(Review::create(either.clone()).dry_run()).await;
    for outcome in [dry, setup.create(either).await] {
        assert!(outcome.allowed, "{outcome:?}");
        assert_eq!(sizes(&outcome.object), H100);
        assert_eq!(outcome.warnings, [warning]);
        assert!(outcome.validated_by.iter().any(|w| w == BUDGET_DENIAL));
    }
    // Both models held now: left as it is, and denied.
    let more = setup.create(pod("nlp", "more", 1, &["A100", "H100"])).await;
    assert_eq!(more.denied_by.as_deref(), Some(BUDGET_DENIAL), "{more:?}");
    assert!(more
        .message()
        .contains("1/1 are held and this pod asks for 1 more (counted as H100"));
    assert_eq!(sizes(&more.object), [&A100[..], &H100[..]].concat());
    assert!(more.warnings.is_empty(), "{more:?}");
    // The H100s held: placed on the A100 sizes, which /validate admits.
    assert!(setup.create(pod("cv", "h", 1, &["H100"])).await.allowed);
    let a100 = setup
        .create(pod("cv", "either", 2, &["A100", "H100"]))
        .await;
    assert!(a100.allowed, "{a100:?}");
    assert_eq!(sizes(&a100.object), A100);
    assert!(a100.warnings[0]
        .starts_with("GpuBudget cv/team-cv has no room on H100 for this pod's 2 GPUs"));
    setup.cluster.stop().await;
}

/// Narrowing only ever intersects: a pod already kept to some sizes is
/// kept to those of them with room, never given the others; a pod pinned
/// to one size keeps exactly that; a namespace no budget covers is left
/// alone.
#[tokio::test]
async fn narrowing_never_widens_a_selection_and_leaves_namespaces_without_a_budget_alone() {
    let setup = Setup::serving(
        vec![budget("nlp", "team-nlp", json!({"models": {"A100": 1}}))],
        true,
    )
    .await;
    assert!(setup.create(pod("nlp", "a", 1, &["A100"])).await.allowed);
    let mut pinned = pod("nlp", "pinned", 1, &["A100", "H100"]);
    pinned["spec"]["nodeSelector"] = json!({"node.kubernetes.io/instance-type": H100[0]});
    let pinned = setup.create(pinned).await;
    assert!(pinned.allowed && pinned.warnings.is_empty(), "{pinned:?}");
    assert_eq!(sizes(&pinned.object), [H100[0]]);
    let mut two = pod("nlp", "two", 1, &["A100", "H100"]);
    let term = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/0";
    let expressions = two
        .pointer_mut(&format!("{term}/matchExpressions"))
        .unwrap();
    (expressions.as_array_mut().unwrap()).push(json!({"key": "node.kubernetes.io/instance-type",
        "operator": "In", "values": [A100[0], H100[1]]}));
    let two = setup.create(two).await;
    assert!(two.allowed, "{two:?}");
    assert_eq!(sizes(&two.object), [H100[1]]);
    assert!(
        two.warnings[0].ends_with(&format!("H100 ({})", H100[1])),
        "{two:?}"
    );
    let web = setup
        .create(pod("web", "either", 1, &["A100", "H100"]))
        .await;
    assert!(web.allowed && web.warnings.is_empty(), "{web:?}");
    assert_eq!(sizes(&web.object), [&A100[..], &H100[..]].concat());
    setup.cluster.stop().await;
}

#[tokio::test]
async fn a_workload_template_is_warned_when_its_replicas_cannot_all_fit_and_denied_when_one_pod_cannot(
) {
    let setup = Setup::start(vec![budget(
        "nlp",
        "team-nlp",
        json!({"models": {"A100": 3}}),
    )])
    .await;
    let deployment = |name: &str, replicas: u32, gpus: u32| {
        let template = pod("nlp", name, gpus, &["A100"]);
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": "nlp"},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "train"}},
                        "template": {"metadata": {"labels": {"app": "train"}}, "spec": template["spec"]}}})
    };
    let warned = setup.create(deployment("serve", 2, 2)).await;
    assert!(warned.allowed, "{warned:?}");
    assert!(
        warned.warnings.iter().any(|w| w
            .starts_with("Deployment serve: GpuBudget nlp/team-nlp allows 3 A100 GPUs")
            && w.contains("0/3 are held: 1 of 2 replicas of 2 GPUs each fit")),
        "{:?}",
        warned.warnings
    );
    let denied = setup.create(deployment("big", 1, 4)).await;
    assert!(!denied.allowed);
    assert!(
        denied
            .message()
            .starts_with("Deployment big: GpuBudget nlp/team-nlp"),
        "{denied:?}"
    );
    assert!(
        denied.message().contains("one pod asks for 4 more"),
        "{denied:?}"
    );
    setup.cluster.stop().await;
}

/// A T4 node as AKS labels it.
fn t4_node() -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "aks-t4-1", "labels": {
            "node.kubernetes.io/instance-type": "Standard_NC4as_T4_v3",
            "karpenter.azure.com/sku-gpu-name": "T4"}},
        "status": {"allocatable": {"nvidia.com/gpu": "1"}}})
}

#[tokio::test]
async fn a_pod_bound_to_a_t4_node_counts_against_the_t4_limit_and_frees_the_a100_room() {
    let setup = Setup::start(vec![
        budget("nlp", "team-nlp", json!({"models": {"A100": 2, "T4": 1}})),
        t4_node(),
    ])
    .await;
    assert!(
        setup
            .create(pod("nlp", "either", 1, &["A100", "T4"]))
            .await
            .allowed
    );
    // Not bound yet: counted as an A100, the most expensive it may take.
    let a100 = pod("nlp", "a100", 2, &["A100"]);
    let denied = setup.create(a100.clone()).await;
    assert!(
        denied
            .message()
            .contains("1/2 are held and this pod asks for 2 more"),
        "{denied:?}"
    );
    // The scheduler binds it to the T4 node (a MODIFIED event): counted
    // against the T4 limit from then on, and the A100 room is free.
    setup.set_phase("either", "aks-t4-1", "Running");
    setup
        .judged_until(&a100, "bound to T4", |o| o.allowed)
        .await;
    assert!(setup.create(a100).await.allowed);
    let t4 = setup.create(pod("nlp", "t4", 1, &["T4"])).await;
    assert!(
        t4.message().starts_with(
            "GpuBudget nlp/team-nlp allows 1 T4 GPUs held at once; 1/1 are held and this pod asks for 1 more"
        ),
        "{t4:?}"
    );
    setup.cluster.stop().await;
}

/// The cluster `serve` starts in: namespace nlp in the standard tier, a
/// budget of `limit` A100s, and `held` running pods of one A100 each.
fn serve_cluster(fake: &FakeApiServer, limit: i64, held: usize) {
    fake.change(|c| {
        c.apply(json!({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": "nlp", "labels": {LABELS[0].0: LABELS[0].1, LABELS[1].0: LABELS[1].1}}}));
        c.apply(budget(
            "nlp",
            "team-nlp",
            json!({"models": {"A100": limit}}),
        ));
        for i in 0..held {
            let mut running = pod("nlp", &format!("held-{i}"), 1, &["A100"]);
            running["spec"]["nodeName"] = json!("aks-a100-1");
            running["status"] = json!({"phase": "Running"});
            c.apply(running);
        }
    });
}

/// Waits (at most 30 s) until `server`'s /readyz names `gate`.
async fn not_ready_for(server: &InCluster, gate: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = server.request("GET", "/readyz", b"").await;
        if status == 503 && body.contains(gate) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status} {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_restarted_server_counts_what_is_held_before_it_is_ready() {
    let fake = FakeApiServer::start(vec![NAMESPACES, BUDGETS, PODS]).await;
    serve_cluster(&fake, 2, 0);
    let mut first = InCluster::serve(&fake);
    first.wait_until_ready().await;
    for name in ["a", "b"] {
        let created = pod("nlp", name, 1, &["A100"]);
        assert!(first.validate_pod(&created).await.0);
        fake.change(|c| c.apply(created));
    }
    assert!(first.terminate().success());
    // Restarted while the pods cannot be listed: not ready, and /readyz
    // says why.
    fake.change(|c| c.fail(&PODS, 500, usize::MAX));
    let server = InCluster::serve(&fake);
    not_ready_for(&server, "pods not synced").await;
    fake.change(|c| c.heal(&PODS));
    server.wait_until_ready().await;
    // Ready means counted: the first pod after readiness is denied.
    let (allowed, message) = server.validate_pod(&pod("nlp", "next", 1, &["A100"])).await;
    assert!(!allowed);
    let said = "GpuBudget nlp/team-nlp allows 2 A100 GPUs held at once; 2/2 are held";
    assert!(message.contains(said), "{message}");
}

/// `serve` started with `running` stored running on `node`, while the
/// kind `late` cannot be listed: it stays not ready (saying `<what> not
/// synced`) until the kind is listed, 300 ms on.
async fn serve_listing_late(
    fake: &FakeApiServer,
    mut running: Value,
    node: &str,
    (late, what): (Resource, &str),
) -> InCluster {
    running["spec"]["nodeName"] = json!(node);
    running["status"] = json!({"phase": "Running"});
    fake.change(|c| {
        c.apply(running);
        c.fail(&late, 500, usize::MAX)
    });
    let server = InCluster::serve(fake);
    not_ready_for(&server, &format!("{what} not synced")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    fake.change(|c| c.heal(&late));
    server.wait_until_ready().await;
    server
}

/// `serve` charges a pod bound to a node by the node's size from its
/// first list of pods on, which waits for the nodes' list: the A100 room
/// a running pod allowed on an A100 or a T4 does not take, on a T4 node,
/// is free even when the nodes are listed after the pods could have been.
#[tokio::test]
async fn serve_counts_a_bound_pod_by_the_size_of_its_node() {
    let fake = FakeApiServer::start(vec![NAMESPACES, BUDGETS, PODS, NODES]).await;
    serve_cluster(&fake, 1, 0);
    fake.change(|c| c.apply(t4_node()));
    let either = pod("nlp", "either", 1, &["A100", "T4"]);
    let server = serve_listing_late(&fake, either, "aks-t4-1", (NODES, "nodes")).await;
    let (allowed, message) = server.validate_pod(&pod("nlp", "next", 1, &["A100"])).await;
    assert!(allowed, "{message}");
    let (allowed, message) = server.validate_pod(&pod("nlp", "more", 1, &["A100"])).await;
    assert!(!allowed && message.contains("1/1 are held"), "{message}");
}

/// `serve` charges a pod the GPUs it claims through DRA, its claims
/// looked up in the server's claim cache: its first list of pods waits for
/// the claims' list, so a running pod claiming 2 A100s through a
/// ResourceClaimTemplate holds them even when the templates are listed
/// after the pods could have been, and the next GPU pod is denied.
#[tokio::test]
async fn serve_counts_the_gpus_a_running_pod_claims_through_dra() {
    let served = [
        NAMESPACES,
        BUDGETS,
        PODS,
        RESOURCE_CLAIMS,
        RESOURCE_CLAIM_TEMPLATES,
    ];
    let fake = FakeApiServer::start(served.to_vec()).await;
    serve_cluster(&fake, 2, 0);
    fake.change(|c| c.apply(two_gpus()));
    let late = (RESOURCE_CLAIM_TEMPLATES, "resource claim templates");
    let dra = claiming("dra", &["A100"]);
    let server = serve_listing_late(&fake, dra, "aks-a100-1", late).await;
    let (allowed, message) = server.validate_pod(&pod("nlp", "next", 1, &["A100"])).await;
    assert!(!allowed, "{message}");
    assert!(
        message.starts_with(
            "GpuBudget nlp/team-nlp allows 2 A100 GPUs held at once; 2/2 are held and this pod asks for 1 more"
        ),
        "{message}"
    );
}

/// The shipped policies judging namespace `nlp` (premium GPUs opted in)
/// with one GpuBudget `nlp/team-nlp` of `limits`, holding nothing yet: the
/// admission, and the budgets it records what it admits in.
fn recording(limits: Value) -> (Admission, Arc<StaticBudgets>) {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("policies");
    let bundle = bundle::load(&PolicySource::Dir(dir)).unwrap().bundle;
    let standing = budgets::Standing {
        budget: Arc::new(budgets::read(&budget("nlp", "team-nlp", limits)).unwrap()),
        used: Usage::default(),
    };
    let recorded = Arc::new(StaticBudgets::new(vec![standing]));
    let mut namespaces = StaticNamespaces::new();
    let labels = LABELS.map(|(k, v)| (k.to_string(), v.to_string()));
    namespaces.insert("nlp", labels.into_iter().collect());
    let admission = Admission::new(bundle, Arc::new(namespaces)).with_budgets(recorded.clone());
    (admission, recorded)
}

/// What `/validate` records for a pod claiming GPUs through DRA is what
/// the cache charges it once the watch shows it: the same charge.
#[test]
fn admission_and_the_cache_charge_a_pod_claiming_gpus_alike() {
    let mut claims = StaticClaims::new();
    claims.insert(&two_gpus(), "default");
    let limits = json!({"models": {"A100": 8}, "sizes": {A100[2]: 8}, "total": 8});
    let (admission, recorded) = recording(limits);
    let admission = admission.with_claims(Arc::new(claims.clone()));
    let created = claiming("a", &["A100"]);
    let req = gpu_admission::offline::build_request(created, None, Operation::Create, None);
    let evaluation = gpu_admission::offline::evaluate(&admission, req);
    assert!(evaluation.allowed, "{evaluation:?}");
    let stored = evaluation.patched.expect("placed");
    let placement = &admission.bundle().placement;
    let (catalog, resources) = (placement.catalog(), placement.gpu_resources());
    let cached = budgets::charge_landed(&stored, None, None, &claims, catalog, resources).unwrap();
    assert_eq!((cached.model.as_str(), cached.gpus), ("A100", 2));
    let mut held = Usage::default();
    held.add(&cached, 1);
    assert_eq!(recorded.standings()[0].used, held);
}

/// A pending pod that names a node pool (`agentpool: gpua100`) and no
/// GPU model: admission judging against the cluster's nodes narrows it to
/// the pool's size, and the cache, reading the same nodes, charges it the
/// same, not the most expensive size its labels alone would allow.
#[test]
fn admission_and_the_cache_charge_a_pod_naming_a_node_pool_alike() {
    let node = |name: &str, pool: &str, size: &str| {
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "labels": {
                   "kubernetes.azure.com/agentpool": pool,
                   "node.kubernetes.io/instance-type": size}},
               "spec": {"taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]},
               "status": {"capacity": {"nvidia.com/gpu": "1"},
                          "allocatable": {"nvidia.com/gpu": "1"}}})
    };
    let nodes = gpu_admission::gpu::StaticNodes::of_objects(
        &[
            node("aks-gpua100-1", "gpua100", A100[0]),
            node("aks-gpuh100-1", "gpuh100", H100[0]),
        ],
        Vec::new(),
        &Default::default(),
    );
    let nodes: Arc<dyn gpu_admission::gpu::NodeLookup> = Arc::new(nodes);
    let limits = json!({"models": {"A100": 8, "H100": 8}, "total": 8});
    let (admission, recorded) = recording(limits);
    let admission = admission.with_nodes(nodes.clone());
    let mut created = pod("nlp", "a", 1, &["A100"]);
    created["spec"]["affinity"] = json!(null);
    created["spec"]["nodeSelector"] = json!({"kubernetes.azure.com/agentpool": "gpua100"});
    let req = gpu_admission::offline::build_request(created.clone(), None, Operation::Create, None);
    let evaluation = gpu_admission::offline::evaluate(&admission, req);
    assert!(evaluation.allowed, "{evaluation:?}");
    let stored = evaluation.patched.unwrap_or(created);
    let placement = &admission.bundle().placement;
    let (catalog, resources) = (placement.catalog(), placement.gpu_resources());
    let snapshot = nodes.nodes().expect("listed");
    let set = snapshot.gpu_nodes(resources, catalog);
    let cached =
        budgets::charge_landed(&stored, None, Some(&set), &NoClaims, catalog, resources).unwrap();
    assert_eq!((cached.model.as_str(), cached.gpus), ("A100", 1));
    let mut held = Usage::default();
    held.add(&cached, 1);
    assert_eq!(recorded.standings()[0].used, held);
    // Without the nodes, its labels alone allow any GPU size of the tier.
    let by_labels = budgets::charge_landed(&stored, None, None, &NoClaims, catalog, resources);
    assert_ne!(by_labels.map(|c| c.model), Some("A100".to_string()));
}

/// N clients create one-A100 pods at once, half through each of two
/// `serve` processes watching the same cluster; each pod admitted is
/// stored as kube-apiserver would. One process never admits past the
/// budget; two may each admit what the other's pods, not yet seen through
/// the watch, would have taken: at most (replicas - 1) x limit more.
#[tokio::test]
async fn two_replicas_admitting_at_once_overshoot_by_at_most_the_documented_bound() {
    const LIMIT: i64 = 4;
    const CLIENTS: usize = 24;
    let fake = Arc::new(FakeApiServer::start(vec![NAMESPACES, BUDGETS, PODS]).await);
    serve_cluster(&fake, LIMIT, 0);
    let replicas = [InCluster::serve(&fake), InCluster::serve(&fake)];
    for replica in &replicas {
        replica.wait_until_ready().await;
    }
    let replicas = Arc::new(replicas);
    let clients = (0..CLIENTS).map(|i| {
        let (fake, replicas) = (fake.clone(), replicas.clone());
        tokio::spawn(async move {
            let created = pod("nlp", &format!("burst-{i}"), 1, &["A100"]);
            let (allowed, _) = replicas[i % 2].validate_pod(&created).await;
            if allowed {
                fake.change(|c| c.apply(created));
            }
            allowed
        })
    });
    let mut admitted = 0;
    for client in clients.collect::<Vec<_>>() {
        admitted += i64::from(client.await.unwrap());
    }
    let overshoot = admitted - LIMIT;
    println!("{CLIENTS} concurrent creates, 2 replicas, limit {LIMIT}: {admitted} admitted (overshoot {overshoot})");
    assert!(admitted >= LIMIT, "the budget's room is used: {admitted}");
    assert!(
        overshoot <= LIMIT,
        "overshoot {overshoot} past the bound (replicas - 1) x limit = {LIMIT}"
    );
    // Paced (one create every 100 ms, alternating replicas), each replica
    // sees the other's pods before the next create: nothing past the
    // budget, in a namespace of its own.
    fake.change(|c| {
        c.apply(json!({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": "eval", "labels": {LABELS[0].0: LABELS[0].1, LABELS[1].0: LABELS[1].1}}}));
        c.apply(budget("eval", "team-eval", json!({"models": {"A100": LIMIT}})))
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut paced = 0;
    for i in 0..3 * LIMIT as usize {
        let created = pod("eval", &format!("paced-{i}"), 1, &["A100"]);
        if replicas[i % 2].validate_pod(&created).await.0 {
            fake.change(|c| c.apply(created));
            paced += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("paced creates, 2 replicas, limit {LIMIT}: {paced} admitted");
    assert!((LIMIT..=2 * LIMIT).contains(&paced), "{paced}");
    // Once the watch shows every pod, both replicas count them all.
    let held = format!("{admitted}/{LIMIT} are held");
    for replica in replicas.iter() {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (allowed, message) = replica
                .validate_pod(&pod("nlp", "late", 1, &["A100"]))
                .await;
            assert!(!allowed, "{message}");
            if message.contains(&held) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{message}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
