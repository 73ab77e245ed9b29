//! MutatingAdmissionPolicies through `/mutate`: the GPU health-check
//! examples of tests/fixtures/mutating over real TLS (the returned patch
//! applied with an RFC 6902 implementation gives the expected pod, and a
//! second call gives no patch), their order after placement, failurePolicy,
//! and what `evaluate` and `lint` show of them.
use crate::common;

use common::{config, review_patch, NoNamespaces, TestServer};
use gpu_admission::admission::{Admission, Bundle};
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::policy::{parse_documents, EVALUATION_STACK};
use gpu_admission::review::{Operation, Request};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mutating")
}

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn review(uid: &str, object: &Value) -> Value {
    common::admission_review(uid, "CREATE", object, None, "alice@example.com")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_patch_to_the_expected_pod_over_tls_once() {
    let pod = read_json(&fixtures().join("pod.json"));
    for example in ["apply-configuration", "json-patch"] {
        let loaded = bundle::load(&PolicySource::Dir(fixtures().join(example)))
            .unwrap_or_else(|e| panic!("{example}: {e}"));
        assert_eq!(loaded.bundle.policies.mutating_len(), 1, "{example}");
        let admission = Admission::new(loaded.bundle, Arc::new(NoNamespaces));
        let server = TestServer::start_with(config(), Arc::new(admission)).await;

        let (status, answer) = server.post_review("/mutate", &review(example, &pod)).await;
        assert_eq!(status, 200, "{example}");
        assert_eq!(answer["response"]["uid"], example);
        assert_eq!(answer["response"]["allowed"], true, "{example}: {answer}");
        let patch = review_patch(&answer).unwrap_or_else(|| panic!("{example}: no patch"));
        let mut patched = pod.clone();
        json_patch::patch(&mut patched, &patch).unwrap_or_else(|e| panic!("{example}: {e}"));
        let expected = read_json(&fixtures().join(format!("{example}.expected.json")));
        assert_eq!(patched, expected, "{example}: patched pod");
        let _: k8s_openapi::api::core::v1::Pod = serde_json::from_value(patched.clone())
            .unwrap_or_else(|e| panic!("{example}: not a Pod: {e}"));

        // Reinvocation: gpu-check is there, the match condition excludes
        // the pod, nothing more to do.
        let (_, again) = server
            .post_review("/mutate", &review(&format!("{example}-again"), &patched))
            .await;
        assert_eq!(answer["response"]["allowed"], true);
        assert_eq!(review_patch(&again), None, "{example}: second call patched");

        let pass = r#"gpu_admission_policy_evaluations_total{policy="gpu-health-check.gpu-admission.io",result="pass"}"#;
        assert_eq!(server.metric(pass).await, 1.0, "{example}: metrics");
        server.stop().await;
    }
}

/// The shipped bundle with `policies` (YAML) added.
fn with_placement(policies: &str) -> Admission {
    let shipped = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    let docs = parse_documents(Path::new("mutating.yaml"), policies).unwrap();
    let bundle = Bundle {
        policies: (shipped.bundle.policies.with_documents(&docs)).unwrap_or_else(|e| panic!("{e}")),
        placement: shipped.bundle.placement,
    };
    Admission::new(bundle, Arc::new(NoNamespaces))
}

fn gpu_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"containers": [{
            "name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}}
        }]}
    })
}

/// Two policies whose names order them: `a-label` labels pods placement
/// made tolerate the GPU taint; `b-priority` sets a priority class on pods
/// with that label (so only after `a-label`).
const ORDERED: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: b-priority}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  matchConditions:
  - name: labelled
    expression: "object.metadata.?labels[?'example.com/gpu'].orValue('') == 'true'"
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{spec: Object.spec{priorityClassName: 'gpu-high'}}"
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: a-label}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  matchConditions:
  - name: placed-on-gpu-nodes
    expression: "object.spec.?tolerations.orValue([]).exists(t, t.key == 'sku')"
  reinvocationPolicy: Never
  mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: |
        [JSONPatch{op: "add", path: "/metadata/labels", value: {}},
         JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/gpu"), value: "true"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: b-priority}
spec: {policyName: b-priority}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: a-label}
spec: {policyName: a-label}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_run_after_placement_in_name_order_in_one_patch() {
    let server = TestServer::start_with(config(), Arc::new(with_placement(ORDERED))).await;
    let pod = gpu_pod();
    let (_, answer) = server
        .post_review("/mutate", &review("ordered", &pod))
        .await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let patch = review_patch(&answer).expect("a patch");
    let mut patched = pod.clone();
    json_patch::patch(&mut patched, &patch).expect("one patch against the pod as sent");
    // Placement's toleration, then a-label's label, then b-priority's class.
    let tolerations = patched["spec"]["tolerations"].as_array().unwrap();
    assert!(tolerations.iter().any(|t| t["key"] == "sku"), "{patched}");
    assert_eq!(patched["metadata"]["labels"]["example.com/gpu"], "true");
    assert_eq!(patched["spec"]["priorityClassName"], "gpu-high");
    let (_, again) = server
        .post_review("/mutate", &review("again", &patched))
        .await;
    assert_eq!(review_patch(&again), None, "second call patched: {again}");
    server.stop().await;
}

fn failing(failure_policy: &str) -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {{name: broken}}
spec:
  failurePolicy: {failure_policy}
  matchConstraints:
    resourceRules: [{{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}}]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{{metadata: Object.metadata{{labels: {{'broken': 'half'}}}}}}"
  - patchType: JSONPatch
    jsonPatch:
      expression: '[JSONPatch{{op: "replace", path: "/spec/nodeName", value: "gpu-0"}}]'
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {{name: broken}}
spec: {{policyName: broken}}
"#
    )
}

/// `/mutate` on a thread with the stack policy evaluation needs.
fn mutate(admission: &Admission, object: Value) -> gpu_admission::admission::Outcome {
    let req = Request::for_object(object, Operation::Create, Some("ml"));
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(EVALUATION_STACK)
            .spawn_scoped(s, || admission.mutate(&req))
            .unwrap()
            .join()
            .unwrap()
    })
}

#[test]
fn a_failing_mutation_denies_under_fail_and_is_left_out_under_ignore() {
    // `replace` of a field the pod does not have: the patch does not apply.
    let denied = mutate(&with_placement(&failing("Fail")), gpu_pod());
    assert!(!denied.response.allowed);
    let message = denied.response.message.unwrap();
    assert!(
        message.starts_with("broken: policy error (failurePolicy Fail): mutations[1]: JSON patch"),
        "{message}"
    );
    let ignored = mutate(&with_placement(&failing("Ignore")), gpu_pod());
    assert!(ignored.response.allowed);
    // Placement's patch only: not even the first mutation's label.
    let patch = ignored.response.patch.expect("placement patch");
    let mut patched = gpu_pod();
    json_patch::patch(&mut patched, &patch).unwrap();
    assert_eq!(patched["metadata"].get("labels"), None, "{patched}");
    assert_eq!(patched["spec"].get("nodeName"), None, "{patched}");
    assert!(patched["spec"]["tolerations"].is_array(), "{patched}");
    assert_eq!(ignored.evaluations.len(), 1);
    assert_eq!(ignored.evaluations[0].result.as_str(), "error");
}

#[test]
fn evaluate_and_lint_show_mutating_policies() {
    let dir = fixtures().join("apply-configuration");
    let pod = fixtures().join("pod.json");
    let bin = env!("CARGO_BIN_EXE_gpu-admission");
    let out = std::process::Command::new(bin)
        .args(["evaluate", "-f"])
        .arg(&pod)
        .arg("--policies")
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("  mutating policy gpu-health-check.gpu-admission.io (binding gpu-health-check):\n    {\"op\":\"add\",\"path\":\"/spec/initContainers/1\""),
        "{text}"
    );

    let out = std::process::Command::new(bin)
        .args(["evaluate", "-o", "json", "-f"])
        .arg(&pod)
        .arg("--policies")
        .arg(&dir)
        .output()
        .unwrap();
    let results: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        results[0]["mutations"],
        json!([{
            "policy": "gpu-health-check.gpu-admission.io",
            "binding": "gpu-health-check",
            "patch": [{"op": "add", "path": "/spec/initContainers/1", "value": {
                "name": "gpu-check",
                "image": "registry.example.com/gpu-admission/gpu-check:0.4.2",
                "args": ["--watch", "--interval=30s"], "restartPolicy": "Always"}}]
        }])
    );
    assert_eq!(
        results[0]["patched"],
        read_json(&fixtures().join("apply-configuration.expected.json"))
    );

    let broken = tempfile::tempdir().unwrap();
    let policy = std::fs::read_to_string(dir.join("policy.yaml"))
        .unwrap()
        .replace(
            "restartPolicy: \"Always\"\n",
            "restartPolicy: \"Always\",,\n",
        );
    std::fs::write(broken.path().join("policy.yaml"), policy).unwrap();
    let out = std::process::Command::new(bin)
        .arg("lint")
        .arg(broken.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        text.contains("policy.yaml: document 1 (line 1): spec.mutations[0].applyConfiguration.expression: line 8, column"),
        "{text}"
    );
}

#[test]
fn the_shipped_example_labels_gpu_pods_once_bound() {
    // Shipped (policies/examples/) unbound: nothing happens.
    let unbound = with_placement("");
    assert!(mutate(&unbound, gpu_pod()).mutations.is_empty());

    let bound = with_placement(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingAdmissionPolicyBinding\nmetadata: {name: gpu-cost-labels}\nspec: {policyName: gpu-cost-labels}\n",
    );
    let outcome = mutate(&bound, gpu_pod());
    assert_eq!(outcome.mutations.len(), 1);
    assert_eq!(outcome.mutations[0].policy, "gpu-cost-labels");
    let mut patched = gpu_pod();
    json_patch::patch(&mut patched, &outcome.response.patch.unwrap()).unwrap();
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"gpu-admission.io/gpus": "1", "gpu-admission.io/gpu-resource": "nvidia.com_gpu"})
    );
    assert!(mutate(&bound, patched).response.patch.is_none());
    // A CPU pod is not labelled.
    let mut cpu = gpu_pod();
    cpu["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1"}});
    assert!(mutate(&bound, cpu).mutations.is_empty());
}

#[test]
fn mutating_policies_stop_at_the_deadline() {
    let hundred = (0..100)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let slow = failing("Fail").replace(
        r#"'[JSONPatch{op: "replace", path: "/spec/nodeName", value: "gpu-0"}]'"#,
        &format!(
            r#"'[JSONPatch{{op: "add", path: "/metadata/annotations", value: {{"n": [{hundred}].all(i, [{hundred}].all(j, i * j >= 0)) ? "yes" : "no"}}}}]'"#
        ),
    );
    let admission = with_placement(&slow);
    // In time: the annotation is added.
    let done = mutate(&admission, gpu_pod());
    assert!(done.response.allowed, "{:?}", done.response.message);
    assert_eq!(done.mutations.len(), 1);
    // Past its deadline, the evaluation stops and failurePolicy Fail denies.
    let req = Request::for_object(gpu_pod(), Operation::Create, Some("ml"));
    let late = std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(EVALUATION_STACK)
            .spawn_scoped(s, || {
                admission.mutate_until(&req, Some(std::time::Instant::now()))
            })
            .unwrap()
            .join()
            .unwrap()
    });
    assert!(!late.response.allowed);
    let message = late.response.message.unwrap();
    assert!(message.contains("deadline exceeded"), "{message}");
}

/// What platform teams add with MutatingAdmissionPolicies: a native
/// sidecar (a restartable init container) and a log shipper taking
/// envFrom a Secret on every pod of the namespace, and the GPU taint's
/// toleration on pods labelled for a GPU node agent.
const INJECTORS: &str = concat!(
    include_str!("fixtures/mutating/injectors/mesh-proxy.yaml"),
    "---\n",
    include_str!("fixtures/mutating/injectors/log-shipper-json-patch.yaml"),
    "---\n",
    include_str!("fixtures/mutating/injectors/gpu-node-agent.yaml"),
);

fn shipped_with(policies: &str) -> Bundle {
    let shipped = bundle::load(&PolicySource::Embedded).expect("shipped policies load");
    let docs = parse_documents(Path::new("mutating.yaml"), policies).unwrap();
    Bundle {
        policies: (shipped.bundle.policies.with_documents(&docs)).unwrap_or_else(|e| panic!("{e}")),
        placement: shipped.bundle.placement,
    }
}

fn visible_devices(pod: &Value, field: &str, name: &str) -> Option<String> {
    let container = pod["spec"][field]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)?;
    container["env"]
        .as_array()?
        .iter()
        .rev()
        .find(|e| e["name"] == "NVIDIA_VISIBLE_DEVICES")
        .map(|e| e["value"].as_str().unwrap_or("").to_string())
}

/// One `/mutate` is a fixed point: the containers and tolerations the
/// policies add are placed and pinned in the same call, through the
/// shipped webhook configurations over TLS, and a second call (the
/// apiserver's reinvocation) patches nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containers_the_policies_add_are_pinned_in_the_same_call() {
    use common::webhooks::{Cluster, Review};
    let cluster = Cluster::start_with(shipped_with(INJECTORS)).await;

    // A GPU pod: the sidecar and the shipper get the pin with the rest.
    let outcome = cluster.admit(&Review::create(gpu_pod())).await;
    assert!(outcome.allowed, "{}", outcome.message());
    assert_eq!(outcome.mutated_by, ["pods.mutate.gpu-admission.io"]);
    let pod = outcome.object.clone().unwrap();
    assert_eq!(
        visible_devices(&pod, "initContainers", "mesh-proxy").as_deref(),
        Some("void")
    );
    assert_eq!(
        visible_devices(&pod, "containers", "log-shipper").as_deref(),
        Some("void")
    );
    assert_eq!(
        visible_devices(&pod, "containers", "train"),
        None,
        "the GPU container"
    );
    let again = cluster.admit(&Review::create(pod)).await;
    assert!(again.patch.is_empty(), "second call: {:?}", again.patch);

    // A node agent the policy makes tolerate the GPU taint: hidden by
    // default in the same call, its added containers too.
    let agent = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent", "namespace": "ml", "labels": {"example.com/node-agent": "gpu"}},
        "spec": {"tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "agent", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}]}});
    let outcome = cluster.admit(&Review::create(agent)).await;
    assert_eq!(outcome.mutated_by, ["hide.mutate.gpu-admission.io"]);
    let pod = outcome.object.clone().unwrap();
    for (field, name) in [
        ("containers", "agent"),
        ("containers", "log-shipper"),
        ("initContainers", "mesh-proxy"),
    ] {
        assert_eq!(
            visible_devices(&pod, field, name).as_deref(),
            Some("void"),
            "{name}: {pod}"
        );
    }
    let again = cluster.admit(&Review::create(pod)).await;
    assert!(again.patch.is_empty(), "second call: {:?}", again.patch);
    cluster.stop().await;
}
