//! The policy engine on a typical GPU pod (and on a pod that asks for no
//! GPU): policies compiled once, the full verdict measured per request.
//! Beside it, parts of a request's work measured alone: the review body
//! sized and decoded as the server's edge does it, a cluster Namespace
//! looked up for a request (and the GPU pod validated in it), the GPU pod
//! and a CPU pod aimed at a GPU pool validated against a cluster of 5,000
//! nodes (the node cache), and an apply configuration merged into a long
//! keyed list.
//!
//! Measured on a thread with the evaluation stack, where evaluation runs in
//! place as it does on `serve`'s answering threads. The row "handed to an
//! answering thread" adds what the server pays per request to run the
//! webhook call there: from an async caller to one of the server's
//! [`Executor`] threads and back.

// The allocator the `gpu-admission` binary runs with.
gpu_admission::mimalloc_as_malloc!();
#[path = "common/pods.rs"]
mod pods;

use criterion::{criterion_group, Criterion};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{self, parse_documents, PolicySet};
use gpu_admission::review::{Operation, Request};
use gpu_admission::server::Executor;
use pods::{cpu_pod, create, mutated, placed_gpu_pod, shipped_admission, unplaced_gpu_pod};
use serde_json::json;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    // Criterion's own thread has the default stack: run the measurements on
    // one with the stack of serve's answering threads.
    std::thread::Builder::new()
        .name("engine-bench".into())
        .stack_size(policy::EVALUATION_STACK)
        .spawn(on_evaluation_stack)
        .expect("bench thread")
        .join()
        .expect("benches on the evaluation stack");
    hand_off();
    Criterion::default().configure_from_args().final_summary();
}

criterion_group!(
    on_evaluation_stack,
    bench_engine,
    bench_default_set,
    bench_runaway,
    bench_review_body,
    bench_cluster_namespace,
    bench_node_cache,
    bench_apply_merge,
    bench_workload_kinds
);
criterion_group!(hand_off, bench_hand_off);

/// Validations typical of GPU policies; each becomes its own policy.
const EXPRESSIONS: &[&str] = &[
    "object.spec.containers.all(c, !has(c.resources.limits) || !('nvidia.com/gpu' in c.resources.limits) || quantity(string(c.resources.limits['nvidia.com/gpu'])).compareTo(quantity('8')) <= 0)",
    "object.spec.containers.all(c, has(c.resources.requests) && has(c.resources.requests.memory))",
    "object.spec.containers.all(c, !c.image.endsWith(':latest'))",
    "object.spec.containers.all(c, c.image.startsWith('mcr.microsoft.com/') || c.image.startsWith('nvcr.io/'))",
    "!has(object.spec.hostNetwork) || !object.spec.hostNetwork",
    "has(object.metadata.labels) && 'team' in object.metadata.labels",
    "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)",
    "object.spec.containers.map(c, has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits ? int(c.resources.limits['nvidia.com/gpu']) : 0).sum() <= 8",
    "!has(object.spec.tolerations) || object.spec.tolerations.all(t, !has(t.key) || t.key != 'node-role.kubernetes.io/control-plane')",
    "object.metadata.name.size() <= 63",
    "variables.gpu == 0 || has(object.spec.nodeSelector) || has(object.spec.affinity)",
    "object.spec.containers.all(c, !has(c.command) || !c.command.exists(x, x == 'sleep'))",
    "request.operation != 'CREATE' || request.userInfo.username != 'system:anonymous'",
    "namespaceObject == null || !has(namespaceObject.metadata.labels) || namespaceObject.metadata.labels['tier'] != 'frozen'",
    "object.spec.containers.all(c, !has(c.ports) || c.ports.all(p, p.containerPort > 1024))",
    "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
    "object.spec.containers.all(c, !has(c.resources.limits) || !has(c.resources.limits.memory) || quantity(c.resources.limits.memory).isLessThan(quantity('512Gi')))",
    "object.metadata.namespace != 'default'",
    "!has(object.spec.priorityClassName) || object.spec.priorityClassName in ['gpu-high', 'gpu-low']",
    "size(object.spec.containers) <= 10",
];

fn policies() -> PolicySet {
    policies_of(EXPRESSIONS)
}

fn policies_of(expressions: &[&str]) -> PolicySet {
    let mut yaml = String::new();
    for (i, expr) in expressions.iter().enumerate() {
        yaml.push_str(&format!(
            r#"---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: p{i}}}
spec:
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["pods"]}}
  variables:
  - name: gpu
    expression: "object.spec.containers.filter(c, has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits).size()"
  validations:
  - expression: {expr:?}
    message: policy {i} failed
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: p{i}}}
spec: {{policyName: p{i}, validationActions: [Deny]}}
"#
        ));
    }
    let docs = parse_documents(Path::new("bench.yaml"), &yaml).expect("bench policies parse");
    PolicySet::compile(&docs).expect("bench policies compile")
}

fn ml_namespace() -> StaticNamespaces {
    StaticNamespaces::new().with(
        "ml",
        [("tier".to_string(), "premium".to_string())]
            .into_iter()
            .collect(),
    )
}

fn bench_engine(c: &mut Criterion) {
    let set = policies();
    let namespaces = ml_namespace();
    let req = Request::for_object(placed_gpu_pod(), Operation::Create, None);
    let verdict = set.evaluate(&req, &namespaces);
    assert!(verdict.denials.is_empty(), "{:?}", verdict.denials);
    assert_eq!(verdict.evaluations.len(), EXPRESSIONS.len());
    c.bench_function("evaluate gpu pod against 20 policies", |b| {
        b.iter(|| black_box(set.evaluate(black_box(&req), &namespaces)))
    });
    // The fixed part: converting the object once, one binding.
    let trivial = policies_of(&["true"]);
    c.bench_function("evaluate gpu pod against 1 trivial policy", |b| {
        b.iter(|| black_box(trivial.evaluate(black_box(&req), &namespaces)))
    });
}

/// The same trivial policy run as the server runs a webhook call: handed
/// from an async caller to one of an [`Executor`]'s threads (sized as
/// `serve` sizes them for this machine), its answer awaited.
fn bench_hand_off(c: &mut Criterion) {
    let namespaces = Arc::new(ml_namespace());
    let req = Arc::new(Request::for_object(
        placed_gpu_pod(),
        Operation::Create,
        None,
    ));
    let trivial = policies_of(&["true"]);
    let threads = gpu_admission::server::default_concurrency();
    let executor = Executor::new("validate", threads, threads, policy::EVALUATION_STACK)
        .expect("answering threads");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    c.bench_function(
        "evaluate gpu pod against 1 trivial policy, handed to an answering thread",
        |b| {
            b.iter(|| {
                let (set, req, namespaces) = (trivial.clone(), req.clone(), namespaces.clone());
                let run = executor.run(move || set.evaluate(&req, namespaces.as_ref()));
                black_box(runtime.block_on(run).expect("answered"))
            })
        },
    );
}

/// The full answer for a typical GPU pod with the shipped policies and
/// placement profiles: `/mutate` of a pod that needs the whole placement
/// patch and of one that needs none, then `/validate` of the patched pod,
/// as the apiserver calls them after mutation (with a deadline, as `serve`
/// passes one).
fn bench_default_set(c: &mut Criterion) {
    let (admission, policies) = shipped_admission();
    let unplaced = create(unplaced_gpu_pod());
    let patch = admission
        .mutate(&unplaced)
        .response
        .patch
        .expect("an unplaced GPU pod gets a placement patch");
    let paths: Vec<String> = patch.0.iter().map(|op| op.path().to_string()).collect();
    assert!(
        paths.iter().any(|p| p.starts_with("/spec/tolerations"))
            && paths.iter().any(|p| p.starts_with("/spec/affinity")),
        "the patch adds the toleration and the node affinity: {paths:?}"
    );
    // What /mutate made of it (toleration, affinity, the namespace tier's
    // sizes): placed, nothing more to add.
    let placed = create(mutated(&admission, unplaced_gpu_pod()));
    assert!(
        admission.mutate(&placed).response.patch.is_none(),
        "a placed pod gets no patch"
    );
    let patched = create(mutated(&admission, unplaced_gpu_pod()));
    let deadline = Instant::now() + Duration::from_secs(24 * 3600);
    let outcome = admission.validate_until(&patched, Some(deadline));
    assert!(outcome.response.allowed, "{:?}", outcome.response.message);
    assert!(
        outcome.evaluations.len() >= 5,
        "{} evaluations",
        outcome.evaluations.len()
    );
    c.bench_function("mutate gpu pod, shipped profiles, full patch", |b| {
        b.iter(|| black_box(admission.mutate(black_box(&unplaced))))
    });
    c.bench_function("mutate placed gpu pod, shipped profiles, no patch", |b| {
        b.iter(|| black_box(admission.mutate(black_box(&placed))))
    });
    c.bench_function(
        &format!("validate patched gpu pod against the shipped set ({policies} policies)"),
        |b| b.iter(|| black_box(admission.validate_until(black_box(&patched), Some(deadline)))),
    );
    let sent = create(as_the_apiserver_sends_it(&mutated(
        &admission,
        unplaced_gpu_pod(),
    )));
    let outcome = admission.validate_until(&sent, Some(deadline));
    assert!(outcome.response.allowed, "{:?}", outcome.response.message);
    c.bench_function(
        &format!("validate patched gpu pod as the apiserver sends it, managedFields and status, against the shipped set ({policies} policies)"),
        |b| b.iter(|| black_box(admission.validate_until(black_box(&sent), Some(deadline)))),
    );
    let cpu = create(cpu_pod());
    let outcome = admission.validate_until(&cpu, Some(deadline));
    assert!(outcome.response.allowed, "{:?}", outcome.response.message);
    assert!(
        admission.mutate(&cpu).response.patch.is_none(),
        "a pod that asks for no GPU is not placed"
    );
    c.bench_function("mutate cpu pod, shipped profiles, no patch", |b| {
        b.iter(|| black_box(admission.mutate(black_box(&cpu))))
    });
    c.bench_function(
        &format!("validate cpu pod against the shipped set ({policies} policies)"),
        |b| b.iter(|| black_box(admission.validate_until(black_box(&cpu), Some(deadline)))),
    );
}

/// `pod` as the apiserver hands it to a validating webhook after a
/// client-side `kubectl apply`: its uid and creation time, the applied
/// manifest in an annotation, the field manager's record of every field it
/// set, and the status a new pod starts with.
fn as_the_apiserver_sends_it(pod: &serde_json::Value) -> serde_json::Value {
    let mut sent = pod.clone();
    let manifest = serde_json::to_string(pod).expect("JSON");
    let metadata = &mut sent["metadata"];
    metadata["uid"] = json!("6c5b0a1e-93d4-4f0b-a3c2-7d1e9f2b8a40");
    metadata["creationTimestamp"] = json!("2026-12-01T00:00:00Z");
    metadata["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json!(manifest);
    metadata["managedFields"] = json!([{
        "manager": "kubectl-client-side-apply",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2026-12-01T00:00:00Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields_v1(pod),
    }]);
    sent["status"] = json!({"phase": "Pending", "qosClass": "Burstable"});
    sent
}

/// The field manager's set of the fields of `value`: `f:<name>` for a
/// field, `k:{"name":...}` for a list item keyed by its name.
fn fields_v1(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::{Map, Value};
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (format!("f:{k}"), fields_v1(v)))
            .collect::<Map<_, _>>()
            .into(),
        Value::Array(items) => items
            .iter()
            .filter_map(|item| {
                let name = item.get("name")?.as_str()?;
                let mut set = fields_v1(item);
                set.as_object_mut()?.insert(".".into(), json!({}));
                Some((format!("k:{{\"name\":\"{name}\"}}"), set))
            })
            .collect::<Map<_, _>>()
            .into(),
        _ => json!({}),
    }
}

/// The review body of the end-to-end bench (the GPU pod fixture, compact
/// as the apiserver sends it), sized before anything is built, then
/// decoded: what the server's edge does with every body; and the
/// `/mutate` answer for it written out.
fn bench_review_body(c: &mut Criterion) {
    use gpu_admission::review::{decode_review, encode_json, measure_request, Limits};
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reviews/pod-create-gpu.json");
    let review: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).expect("fixture")).expect("fixture JSON");
    let body = serde_json::to_vec(&review).expect("review");
    let limits = Limits::default();
    let shape = measure_request(&body, &limits).expect("within the limits");
    assert!(shape.nodes > 50, "{shape:?}");
    assert!(decode_review(&body).is_ok());
    let mut group = c.benchmark_group("review body");
    group.bench_function(format!("sized ({} bytes)", body.len()), |b| {
        b.iter(|| black_box(measure_request(black_box(&body), &limits)))
    });
    group.bench_function(format!("decoded ({} bytes)", body.len()), |b| {
        b.iter(|| black_box(decode_review(black_box(&body))))
    });
    let (admission, _) = shipped_admission();
    let request = decode_review(&body).expect("the fixture decodes");
    let answer = admission.mutate(&request).response;
    let operations = answer.patch.as_ref().map_or(0, |p| p.0.len());
    assert!(operations >= 2, "the fixture gets the placement patch");
    let written = encode_json(&request.uid, &answer);
    group.bench_function(
        format!(
            "/mutate answer written ({operations} patch operations, {} bytes)",
            written.len()
        ),
        |b| b.iter(|| black_box(encode_json(black_box(&request.uid), black_box(&answer)))),
    );
    group.finish();
}

/// A request's Namespace from the cluster's cache, as `serve` in a cluster
/// looks it up for each request: written as JSON from the typed object for
/// each request (as before `ClusterNamespaces` kept the JSON of each
/// version), and shared from what an earlier request wrote.
/// `/validate` of the placed GPU pod, and of a CPU pod that tolerates
/// everything and selects the GPU pool by its name, by labels alone and
/// against 5,000 nodes (1,000 of them with GPUs) and 20 NodePools.
fn bench_node_cache(c: &mut Criterion) {
    use gpu_admission::gpu::StaticNodes;
    use gpu_admission::k8s::{NodeInfo, Taint};
    let node = |i: usize| {
        let gpu = i.is_multiple_of(5);
        let pool = if gpu { "gpupool" } else { "general" };
        let mut labels: std::collections::BTreeMap<String, String> = [
            ("kubernetes.azure.com/agentpool", pool.to_string()),
            ("kubernetes.io/hostname", format!("aks-{pool}-{i}")),
            ("kubernetes.io/os", "linux".to_string()),
            (
                "node.kubernetes.io/instance-type",
                if gpu {
                    "Standard_NC24ads_A100_v4"
                } else {
                    "Standard_D8s_v5"
                }
                .to_string(),
            ),
            (
                "topology.kubernetes.io/zone",
                format!("eastus-{}", i % 3 + 1),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if gpu {
            labels.insert("kubernetes.azure.com/accelerator".into(), "nvidia".into());
        }
        NodeInfo {
            name: format!("aks-{pool}-{i}"),
            labels,
            taints: if gpu {
                vec![Taint::parse("sku=gpu:NoSchedule").unwrap()]
            } else {
                Vec::new()
            },
            allocatable: [("cpu", "7820m"), ("memory", "28Gi"), ("pods", "110")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .chain(gpu.then(|| ("nvidia.com/gpu".to_string(), "1".to_string())))
                .collect(),
            conditions: Vec::new(),
        }
    };
    let pools: Vec<serde_json::Value> = (0..20usize)
        .map(|i| json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": format!("pool-{i}")},
            "spec": {"template": {"spec": {"requirements": [{"key": "karpenter.azure.com/sku-family", "operator": "In",
                "values": [if i.is_multiple_of(4) { "N" } else { "D" }]}]}}}}))
        .collect();
    let nodes = StaticNodes::with_pools((0..5_000).map(node).collect(), pools);
    let (labels_only, _) = shipped_admission();
    let (with_nodes, _) = shipped_admission();
    let with_nodes = with_nodes.with_nodes(Arc::new(nodes));
    let gpu_pod = create(mutated(&labels_only, placed_gpu_pod()));
    let aimed = create(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent", "namespace": "ml"},
        "spec": {"nodeSelector": {"kubernetes.azure.com/agentpool": "gpupool"},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "agent", "image": "python:3.12"}]}}));
    assert!(with_nodes.validate(&gpu_pod).response.allowed);
    assert!(!with_nodes.validate(&aimed).response.allowed);
    assert!(
        labels_only.validate(&aimed).response.allowed,
        "only the nodes tell the pool"
    );
    let mut group = c.benchmark_group("node cache");
    group.bench_function("GPU pod, by labels", |b| {
        b.iter(|| black_box(labels_only.validate(black_box(&gpu_pod))))
    });
    group.bench_function("GPU pod, 5,000 nodes", |b| {
        b.iter(|| black_box(with_nodes.validate(black_box(&gpu_pod))))
    });
    group.bench_function("CPU pod aimed at the GPU pool, 5,000 nodes", |b| {
        b.iter(|| black_box(with_nodes.validate(black_box(&aimed))))
    });
    group.finish();
}

fn bench_cluster_namespace(c: &mut Criterion) {
    use gpu_admission::cluster::ClusterNamespaces;
    use gpu_admission::k8s::NamespaceLookup;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::runtime::{reflector, watcher::Event};
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {
            "name": "ml",
            "uid": "4a7b6c1e-2f4d-4e61-9d1e-0b9f1c2d3e4f",
            "resourceVersion": "884213",
            "creationTimestamp": "2026-10-02T09:14:27Z",
            "labels": {
                "kubernetes.io/metadata.name": "ml",
                "gpu-admission.io/tier": "standard",
                "team": "ml-platform"
            },
            "managedFields": [{
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-10-02T09:14:27Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {
                    ".": {}, "f:kubernetes.io/metadata.name": {},
                    "f:gpu-admission.io/tier": {}, "f:team": {}
                }}}
            }]
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"}
    }))
    .expect("a Namespace");
    let (store, mut writer) = reflector::store::<Namespace>();
    writer.apply_watcher_event(&Event::Apply(namespace));
    let cached = ClusterNamespaces::from_store(store.clone());
    let key = reflector::ObjectRef::new("ml");
    let written_each_time = || {
        let ns = store.get(&key)?;
        let mut value = serde_json::to_value(ns.as_ref()).ok()?;
        let obj = value.as_object_mut()?;
        obj.insert("apiVersion".into(), json!("v1"));
        obj.insert("kind".into(), json!("Namespace"));
        Some(Arc::new(value))
    };
    assert_eq!(written_each_time(), cached.namespace("ml"));
    let mut group = c.benchmark_group("cluster namespace lookup");
    group.bench_function("written as JSON for each request", |b| {
        b.iter(|| black_box(written_each_time()))
    });
    group.bench_function("shared from the last request", |b| {
        b.iter(|| black_box(cached.namespace(black_box("ml"))))
    });
    // The whole /validate of a GPU pod in that namespace: the policies see
    // it as `namespaceObject` (its tier label picks the allowed sizes).
    let (admission, _) =
        pods::shipped_admission_in(Arc::new(ClusterNamespaces::from_store(store.clone())));
    let patched = create(mutated(&admission, unplaced_gpu_pod()));
    let deadline = Instant::now() + Duration::from_secs(24 * 3600);
    let outcome = admission.validate_until(&patched, Some(deadline));
    assert!(outcome.response.allowed, "{:?}", outcome.response.message);
    group.bench_function("/validate of the patched gpu pod in it, shipped set", |b| {
        b.iter(|| black_box(admission.validate_until(black_box(&patched), Some(deadline))))
    });
    group.finish();
}

/// A MutatingAdmissionPolicy's apply configuration merged into a pod whose
/// container carries a long env list (a keyed list, merged by `name`): one
/// entry changed, one added. Twice the entries take about twice as long
/// (key lookups are not quadratic); from 5,000 to 50,000 the list also
/// stops fitting in the caches.
fn bench_apply_merge(c: &mut Criterion) {
    use gpu_admission::k8s::apply::{check, merge, Schema};
    let config = json!({"spec": {"containers": [{"name": "app", "env": [
        {"name": "V4999", "value": "y"}, {"name": "NEW", "value": "z"}
    ]}]}});
    let mut group = c.benchmark_group("apply configuration");
    for entries in [5_000usize, 50_000, 100_000] {
        let env: Vec<serde_json::Value> = (0..entries)
            .map(|i| json!({"name": format!("V{i}"), "value": "x"}))
            .collect();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app", "env": env}]}});
        let schema = Schema::of(&pod);
        let out = merge(&schema, &pod, &config).expect("the configuration merges");
        check(&Schema::of(&out), &out).expect("the result is a valid object");
        assert_eq!(out["spec"]["containers"][0]["env"][4999]["value"], "y");
        assert_eq!(
            out["spec"]["containers"][0]["env"].as_array().map(Vec::len),
            Some(entries + 1)
        );
        group.bench_function(format!("merge into {entries} env entries"), |b| {
            b.iter(|| black_box(merge(&schema, black_box(&pod), &config)))
        });
    }
    group.finish();
}

/// How long the cost limit lets a runaway expression run: three nested
/// comprehensions over 1,000 elements, stopped at 1,000,000 units.
fn bench_runaway(c: &mut Criterion) {
    let yaml = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: runaway}
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}
  validations:
  - expression: "object.items.all(a, object.items.all(b, object.items.all(c, a + b + c >= 0)))"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: runaway}
spec: {policyName: runaway, validationActions: [Deny]}
"#;
    let docs = parse_documents(Path::new("runaway.yaml"), yaml).expect("parses");
    let set = PolicySet::compile(&docs).expect("compiles");
    let mut pod = placed_gpu_pod();
    pod["items"] = json!((0..1000).collect::<Vec<i64>>());
    let req = Request::for_object(pod, Operation::Create, None);
    let namespaces = StaticNamespaces::new();
    let verdict = set.evaluate(&req, &namespaces);
    assert!(
        verdict.denials[0].contains("cost limit exceeded"),
        "{:?}",
        verdict.denials
    );
    let mut group = c.benchmark_group("cost limit");
    group.sample_size(10);
    group.bench_function("runaway expression stopped", |b| {
        b.iter(|| black_box(set.evaluate(black_box(&req), &namespaces)))
    });
    group.finish();
}

/// A workload custom resource costs its templates: a Deployment of the
/// GPU pod (and of the pod as `/mutate` placed it, whose template
/// placement leaves as it is) against a RayCluster whose three GPU worker groups (the same
/// pod, in three sizes) are each judged as that pod is, and whose CPU head
/// is not (nothing GPU-related concerns it: the pods webhook would not be
/// sent its pod); and a Karpenter NodePool, judged by the node-pool
/// policies through its sizes.
fn bench_workload_kinds(c: &mut Criterion) {
    let (admission, policies) = shipped_admission();
    let template = |gpus: &str| {
        let mut pod = placed_gpu_pod();
        for kind in ["requests", "limits"] {
            pod["spec"]["containers"][0]["resources"][kind]["nvidia.com/gpu"] = json!(gpus);
        }
        json!({"metadata": {"labels": pod["metadata"]["labels"].clone()}, "spec": pod["spec"].clone()})
    };
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "ml"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "trainer"}},
            "template": template("2")}});
    let head = json!({"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.41.0",
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "2", "memory": "8Gi"}}}]}});
    let group = |name: &str, gpus: &str| {
        json!({"groupName": name, "replicas": 2, "maxReplicas": 4, "rayStartParams": {},
            "template": template(gpus)})
    };
    let ray_cluster = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "rc", "namespace": "ml"},
        "spec": {"headGroupSpec": {"rayStartParams": {}, "template": head},
            "workerGroupSpecs": [group("small", "1"), group("medium", "2"), group("large", "4")]}});
    // The same Deployment with the pod as /mutate placed it in its
    // template: placement leaves that template pod as it is.
    let mut placed = deployment.clone();
    let pod = mutated(&admission, placed_gpu_pod());
    let again = admission.mutate(&create(pod.clone())).response.patch;
    assert!(again.is_none(), "placement leaves the placed pod as it is");
    placed["spec"]["template"] =
        json!({"metadata": pod["metadata"].clone(), "spec": pod["spec"].clone()});
    let deadline = Instant::now() + Duration::from_secs(24 * 3600);
    for object in [&deployment, &placed, &ray_cluster] {
        let outcome = admission.validate_until(&create(object.clone()), Some(deadline));
        assert!(outcome.response.allowed, "{:?}", outcome.response.message);
        assert!(
            !outcome.evaluations.is_empty(),
            "nothing judged the templates"
        );
    }
    // A Karpenter NodePool of A10 sizes: the node-pool policies narrow its
    // sizes by the SKU catalog (`azure.skusIn`, `azure.skusWhere`, ...).
    let node_pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "a10"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.azure.com", "kind": "AKSNodeClass", "name": "gpu"},
            "requirements": [
                {"key": "karpenter.azure.com/sku-family", "operator": "In", "values": ["N"]},
                {"key": "karpenter.azure.com/sku-gpu-name", "operator": "In", "values": ["A10"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "taints": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]}},
            "limits": {"nvidia.com/gpu": "8"}}});
    let outcome = admission.validate_until(&create(node_pool.clone()), Some(deadline));
    assert!(outcome.response.allowed, "{:?}", outcome.response.message);
    assert!(
        !outcome.evaluations.is_empty(),
        "nothing judged the NodePool"
    );
    let deployment = create(deployment);
    let placed = create(placed);
    let ray_cluster = create(ray_cluster);
    let node_pool = create(node_pool);
    let mut group = c.benchmark_group("workload kinds");
    group.bench_function(
        format!("validate Deployment of the gpu pod, shipped set ({policies} policies)"),
        |b| b.iter(|| black_box(admission.validate_until(black_box(&deployment), Some(deadline)))),
    );
    group.bench_function(
        format!("validate Deployment of the placed gpu pod, shipped set ({policies} policies)"),
        |b| b.iter(|| black_box(admission.validate_until(black_box(&placed), Some(deadline)))),
    );
    group.bench_function(
        format!(
            "validate RayCluster, head and 3 gpu worker groups, shipped set ({policies} policies)"
        ),
        |b| b.iter(|| black_box(admission.validate_until(black_box(&ray_cluster), Some(deadline)))),
    );
    group.bench_function(
        format!("validate Karpenter NodePool of A10 sizes, shipped set ({policies} policies)"),
        |b| b.iter(|| black_box(admission.validate_until(black_box(&node_pool), Some(deadline)))),
    );
    group.finish();
}
