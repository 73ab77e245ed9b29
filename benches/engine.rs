//! The policy engine on a typical GPU pod: 20 policies compiled once, the
//! full verdict measured per request.
use criterion::{criterion_group, criterion_main, Criterion};
use gpu_admission::admission::Admission;
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::namespaces::StaticNamespaces;
use gpu_admission::policy::{parse_documents, PolicySet};
use gpu_admission::review::{Operation, Request};
use serde_json::json;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;

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

fn gpu_pod() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "ml", "labels": {"team": "vision", "app": "trainer"}},
        "spec": {
            "nodeSelector": {"kubernetes.azure.com/accelerator": "nvidia"},
            "containers": [
                {"name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                 "command": ["python", "train.py"],
                 "ports": [{"containerPort": 8080}],
                 "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                               "limits": {"memory": "64Gi", "nvidia.com/gpu": "2"}}},
                {"name": "metrics", "image": "mcr.microsoft.com/oss/prometheus:v2",
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
            ],
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
        }
    })
}

fn bench_engine(c: &mut Criterion) {
    let set = policies();
    let namespaces = StaticNamespaces::new().with(
        "ml",
        [("tier".to_string(), "premium".to_string())]
            .into_iter()
            .collect(),
    );
    let req = Request::for_object(gpu_pod(), Operation::Create, None);
    let verdict = set.evaluate(&req, &namespaces);
    assert!(verdict.denials.is_empty(), "{:?}", verdict.denials);
    assert_eq!(verdict.evaluations.len(), EXPRESSIONS.len());
    c.bench_function("evaluate gpu pod against 20 policies", |b| {
        b.iter(|| black_box(set.evaluate(black_box(&req), &namespaces)))
    });
    // The fixed part: handing the request to an evaluation thread and
    // converting the object once.
    let trivial = policies_of(&["true"]);
    c.bench_function("evaluate gpu pod against 1 trivial policy", |b| {
        b.iter(|| black_box(trivial.evaluate(black_box(&req), &namespaces)))
    });
}

/// The full answer for a typical GPU pod with the shipped policies and
/// placement profiles: `/mutate` (placement patch), then `/validate` of the
/// patched pod, as the apiserver calls them.
fn bench_default_set(c: &mut Criterion) {
    let loaded = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    let policies = loaded.bundle.policies.len();
    let admission = Admission::new(
        loaded.bundle,
        Arc::new(StaticNamespaces::new().with("ml", Default::default())),
    );
    let mut pod = gpu_pod();
    pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = json!("2");
    pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("8");
    let req = Request::for_object(pod, Operation::Create, None);
    let outcome = admission.validate(&req);
    assert!(outcome.response.allowed, "{:?}", outcome.response.message);
    assert!(
        outcome.evaluations.len() >= 5,
        "{} evaluations",
        outcome.evaluations.len()
    );
    c.bench_function("mutate gpu pod, shipped profiles", |b| {
        b.iter(|| black_box(admission.mutate(black_box(&req))))
    });
    c.bench_function(
        &format!("validate gpu pod against the shipped set ({policies} policies)"),
        |b| b.iter(|| black_box(admission.validate(black_box(&req)))),
    );
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
    let mut pod = gpu_pod();
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

criterion_group!(benches, bench_engine, bench_default_set, bench_runaway);
criterion_main!(benches);
