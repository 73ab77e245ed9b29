//! The subcommands as a platform team runs them: the real binary, its
//! output and its exit code (and, for `serve`, how it starts).
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpu-admission"))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const DEPLOYMENTS: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 7
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx:1.27}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: small
spec:
  replicas: 2
  selector: {matchLabels: {app: small}}
  template:
    metadata: {labels: {app: small}}
    spec:
      containers: [{name: web, image: nginx:1.27}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: fleet
spec:
  replicas: 150
  selector: {matchLabels: {app: fleet}}
  template:
    metadata: {labels: {app: fleet}}
    spec:
      containers: [{name: web, image: nginx:1.27}]
"#;

/// The GPU replica cap (tests/fixtures/policies/replica-limit): Deny in
/// namespaces labelled environment=test, Warn elsewhere, and an Audit
/// binding with a ConfigMap as params.
#[test]
fn evaluate_replica_limit_example_deny_warn_and_audit() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = write(tmp.path(), "deploy.yaml", DEPLOYMENTS);
    let policies = root().join("tests/fixtures/policies/replica-limit");

    let out = bin()
        .args(["evaluate", "-f"])
        .arg(&manifest)
        .arg("--policies")
        .arg(&policies)
        .args(["--namespace-labels", "environment=test", "-o", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Value = serde_json::from_slice(&out.stdout).unwrap();
    let web = &results[0];
    assert_eq!(web["name"], "default/web");
    assert_eq!(web["allowed"], false);
    assert_eq!(
        web["denials"][0],
        "gpu-replica-cap.gpu-admission.io: at most 3 replicas may share the GPU pool here"
    );
    // The Audit binding (ConfigMap params, limit 5) records, never denies.
    let audit = web["auditAnnotations"]["validation_failure"]
        .as_str()
        .unwrap();
    assert!(
        audit.contains("more replicas than the GPU pool's audit threshold"),
        "{audit}"
    );
    assert_eq!(results[1]["allowed"], true);
    assert_eq!(results[2]["allowed"], false);

    let out = bin()
        .args(["evaluate", "-f"])
        .arg(&manifest)
        .arg("--policies")
        .arg(&policies)
        .args(["--namespace-labels", "environment=prod"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("Deployment default/web: allowed"), "{text}");
    assert!(text.contains("Deployment default/fleet: allowed"), "{text}");
    assert!(
        text.contains("warning: gpu-replica-cap.gpu-admission.io: at most 100 replicas may share the GPU pool here"),
        "{text}"
    );
    assert!(
        text.ends_with("3 objects: 0 denied, 1 warned, 0 patched\n"),
        "{text}"
    );

    let out = bin()
        .args(["evaluate", "--fail-on-deny", "-f"])
        .arg(&manifest)
        .arg("--policies")
        .arg(&policies)
        .args(["--namespace-labels", "environment=test"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn evaluate_shows_the_placement_patch_and_patched_object() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = write(
        tmp.path(),
        "pod.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: train, namespace: ml}
spec:
  containers:
    - name: train
      image: nvcr.io/nvidia/pytorch:24.05-py3
      command: [torchrun, train.py]
      resources:
        limits: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "1"}
        requests: {cpu: "8", memory: 32Gi, nvidia.com/gpu: "1"}
"#,
    );
    let out = bin()
        .args(["evaluate", "-o", "yaml", "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Value = serde_yaml::from_slice(&out.stdout).unwrap();
    let pod = &results[0];
    assert_eq!(pod["allowed"], true, "{pod}");
    assert_eq!(pod["profile"], "aks-nvidia");
    let tolerations = pod["patched"]["spec"]["tolerations"].as_array().unwrap();
    assert!(tolerations
        .iter()
        .any(|t| t["key"] == "sku" && t["value"] == "gpu"));
    assert!(pod["patch"]
        .as_array()
        .unwrap()
        .iter()
        .all(|op| op["op"].is_string()));
}

/// A GPU ResourceClaimTemplate and a Job whose pod claims a GPU through it,
/// then the pod the Job makes, as `kubectl apply -f` would send them.
const DRA_MANIFEST: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: single-gpu, namespace: ml}
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly:
            deviceClassName: gpu.nvidia.com
            allocationMode: ExactCount
            count: 1
---
apiVersion: v1
kind: Pod
metadata: {name: finetune, namespace: ml}
spec:
  restartPolicy: Never
  resourceClaims:
    - name: gpu
      resourceClaimTemplateName: single-gpu
  containers:
    - name: train
      image: nvcr.io/nvidia/pytorch:25.01-py3
      command: [torchrun, finetune.py]
      resources:
        requests: {cpu: "8", memory: 32Gi}
        limits: {memory: 32Gi}
        claims:
          - name: gpu
"#;

#[test]
fn evaluate_places_a_pod_that_claims_a_gpu_through_a_claim_template_of_the_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = write(tmp.path(), "finetune.yaml", DRA_MANIFEST);
    let out = bin()
        .args(["evaluate", "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(
        text.contains("ResourceClaimTemplate ml/single-gpu: allowed\n"),
        "{text}"
    );
    assert!(
        text.contains("Pod ml/finetune: allowed\n  patched by placement profile aks-nvidia:\n"),
        "{text}"
    );
    assert!(
        text.contains(r#"{"op":"add","path":"/spec/tolerations","value":[{"effect":"NoSchedule","key":"sku","operator":"Equal","value":"gpu"}]}"#),
        "{text}"
    );
    assert!(
        // The NVIDIA node pools, held to the sizes of the namespace's tier
        // (default: T4 and A10).
        text.contains(r#""nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.azure.com/accelerator","operator":"In","values":["nvidia"]},{"key":"node.kubernetes.io/instance-type","operator":"In","values":["Standard_NC4as_T4_v3","#),
        "{text}"
    );
    assert!(
        text.ends_with("2 objects: 0 denied, 0 warned, 1 patched\n"),
        "{text}"
    );

    // Without the template beside it, the pod claims nothing known: no patch.
    let pod_only = DRA_MANIFEST.split("---\n").nth(1).unwrap();
    let manifest = write(tmp.path(), "pod-only.yaml", pod_only);
    let out = bin()
        .args(["evaluate", "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(text.contains("Pod ml/finetune: allowed\n"), "{text}");
    assert!(!text.contains("patched by"), "{text}");
}

#[test]
fn audit_judges_running_dra_pods_with_the_claims_read_beside_them() {
    let tmp = tempfile::tempdir().unwrap();
    // The pod as the cluster holds it: it tolerates the GPU taint (placed).
    let placed = DRA_MANIFEST.replace(
        "  restartPolicy: Never\n",
        "  restartPolicy: Never\n  tolerations:\n    - {key: sku, operator: Equal, value: gpu, effect: NoSchedule}\n",
    );
    let manifest = write(tmp.path(), "cluster.yaml", &placed);
    let out = bin()
        .args(["audit", "-o", "json", "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["objects"], 2, "{report}");
    assert_eq!(report["findings"], json!([]), "{report}");

    // Read without its template, the same pod is a CPU pod on GPU nodes.
    let pod_only = placed.split("---\n").nth(1).unwrap();
    let manifest = write(tmp.path(), "pod-only.yaml", pod_only);
    let out = bin()
        .args(["audit", "-o", "json", "-f"])
        .arg(&manifest)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["findings"][0]["policy"], "gpu-node-isolation",
        "{report}"
    );
}

#[test]
fn lint_points_at_file_document_field_and_expression_position() {
    let tmp = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(root().join("tests/fixtures/audit/policies/keepalive.yaml"))
        .unwrap();
    write(tmp.path(), "good.yaml", &good);
    write(
        tmp.path(),
        "broken.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: ok}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  validations: [{expression: "true"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: broken}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  validations:
    - expression: "object.spec.containers.all(c, c.name ==)"
"#,
    );
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("broken.yaml"), "{text}");
    assert!(text.contains("document 2 (line 9)"), "{text}");
    assert!(text.contains("spec.validations[0].expression"), "{text}");
    assert!(
        text.contains("line 1, column 40: Syntax error: mismatched input ')'"),
        "position in the expression: {text}"
    );
    assert!(text.trim_end().ends_with("1 error(s)"), "{text}");

    std::fs::remove_file(tmp.path().join("broken.yaml")).unwrap();
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("ok (2 policies"), "{}", stdout(&out));
}

/// A GpuPolicyException in the policy folder is read with the policies:
/// a bad expression is reported at its document, field and position in
/// the expression, a missing reason at its field.
#[test]
fn lint_points_at_the_field_of_a_malformed_policy_exception() {
    let tmp = tempfile::tempdir().unwrap();
    let exception = |name: &str, rest: &str| {
        format!(
            "apiVersion: gpu-admission.io/v1alpha1\nkind: GpuPolicyException\nmetadata: {{name: {name}, namespace: research}}\nspec:\n  policies: [gpu-privileged]\n{rest}"
        )
    };
    let good = exception(
        "nccl-bench",
        "  match: {names: [nccl-bench]}\n  reason: NCCL benchmark\n",
    );
    write(tmp.path(), "good.yaml", &good);
    let broken = format!(
        "{}---\n{}",
        exception(
            "bad-expression",
            "  match:\n    expression: \"object.metadata.name.startsWith('nccl-') &&\"\n  reason: NCCL benchmark\n",
        ),
        exception("no-reason", "  match: {names: [nccl-bench]}\n"),
    );
    write(tmp.path(), "exceptions.yaml", &broken);
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let dir = tmp.path().display();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            format!("{dir}/exceptions.yaml: document 1 (line 1): spec.match.expression: line 1, column 44: Syntax error: mismatched input '<EOF>' expecting {{'[', '{{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}}").as_str(),
            format!("{dir}/exceptions.yaml: document 2 (line 10): spec.reason: required").as_str(),
            "2 error(s)",
        ],
        "{text}"
    );

    std::fs::remove_file(tmp.path().join("exceptions.yaml")).unwrap();
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("1 policy exception, "),
        "{}",
        stdout(&out)
    );
}

/// Expression positions are kube-apiserver's: 1-based, the line inside the
/// expression (a block scalar's second line is line 2) and the column of
/// the offending token in it.
#[test]
fn lint_reports_expression_positions_as_kube_apiserver_does() {
    let policy = |name: &str, expression: &str| {
        pod_policy(
            name,
            &format!("  validations:\n    - expression: {expression}\n"),
        )
    };
    let tmp = tempfile::tempdir().unwrap();
    let docs = [
        policy("paren", r#"")""#),
        policy("plus-paren", r#""1 + )""#),
        policy(
            "two-lines",
            "|\n        object.spec.containers.all(c,\n          c.name == )",
        ),
        policy(
            "call",
            "|\n        object.metadata.name != '' &&\n          object.metadata.name.startsWith('a', 'b')",
        ),
    ];
    write(tmp.path(), "p.yaml", &docs.join("---\n"));
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let expected = [
        "document 1 (line 1): spec.validations[0].expression: line 1, column 1: Syntax error: mismatched input ')'",
        "document 2 (line 10): spec.validations[0].expression: line 1, column 5: Syntax error: mismatched input ')'",
        "document 3 (line 19): spec.validations[0].expression: line 2, column 13: Syntax error: mismatched input ')'",
        "document 4 (line 30): spec.validations[0].expression: line 2, column 24: found no matching overload for 'startsWith'",
    ];
    assert_eq!(lines.len(), expected.len() + 1, "{text}");
    for (line, want) in lines.iter().zip(expected) {
        assert!(line.contains(&format!("p.yaml: {want}")), "{want}\n{text}");
    }
    assert_eq!(lines[4], "4 error(s)", "{text}");
}

/// A ValidatingAdmissionPolicy of Pod creations, `rest` its spec after
/// `matchConstraints`.
fn pod_policy(name: &str, rest: &str) -> String {
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  matchConstraints:
    resourceRules: [{{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}}]
{rest}"#
    )
}

/// A list literal whose elements differ in type is refused, as
/// kube-apiserver's type checker refuses it when the policy is created:
/// at the first element that differs. A list whose elements' types only
/// a checker knows (fields of `object`) loads, and type checking against
/// the Pod schema warns of it.
#[test]
fn lint_refuses_a_heterogeneous_list_literal_at_its_element() {
    let tmp = tempfile::tempdir().unwrap();
    let fine = pod_policy(
        "fine",
        "  validations:\n    - expression: \"object.metadata.name in [object.metadata.namespace, 'a', 1]\"\n",
    );
    let mixed = pod_policy(
        "mixed",
        "  variables:\n    - name: ports\n      expression: |\n        object.spec.containers.map(c, c.name) +\n          ['sidecar', 8080]\n  validations:\n    - expression: \"object.spec.containers.size() < 10\"\n",
    );
    write(tmp.path(), "lists.yaml", &format!("{fine}---\n{mixed}"));
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            format!(
                "warning: {}/lists.yaml: document 1 (line 1): spec.validations[0].expression: line 1, column 58: v1, Kind=Pod: expected type 'string' but found 'int'",
                tmp.path().display()
            )
            .as_str(),
            format!(
                "{}/lists.yaml: document 2 (line 10): spec.variables[0].expression: line 2, column 15: expected type 'string' but found 'int'",
                tmp.path().display()
            )
            .as_str(),
            "1 error(s)",
        ],
        "{text}"
    );
}

/// Type checking (tests/fixtures/policies/typing): a field no matched
/// kind's schema has (a Pod's, a RayCluster's from the CRD in the folder),
/// a selection on a bool and a comparison of an int with a string are
/// warnings, errors with `--strict`; a list literal of an int and a string
/// is refused either way. Each at its document, field, line and column.
#[test]
fn lint_reports_what_type_checking_finds_at_its_position() {
    let dir = root().join("tests/fixtures/policies/typing");
    let file = dir.join("policies.yaml").display().to_string();
    let findings = [
        "document 1 (line 1): spec.validations[0].expression: line 1, column 35: v1, Kind=Pod: undefined field 'securityContxt' (object.spec.containers[*].securityContxt)",
        "document 1 (line 1): spec.validations[1].expression: line 1, column 25: v1, Kind=Pod: type 'bool' does not support field selection (object.spec.hostNetwork.enabled)",
        "document 1 (line 1): spec.validations[2].expression: line 1, column 30: v1, Kind=Pod: undefined field 'retird' (azure.sku().retird)",
        "document 2 (line 25): spec.validations[0].expression: line 1, column 52: apps/v1, Kind=Deployment; apps/v1, Kind=StatefulSet: found no matching overload for '_!=_' applied to '(int, string)' (object.spec.replicas)",
        "document 4 (line 55): spec.validations[0].expression: line 1, column 38: ray.io/v1, Kind=RayCluster: undefined field 'maxReplica' (object.spec.workerGroupSpecs[*].maxReplica)",
    ];
    let refused = format!("{file}: document 3 (line 40): spec.validations[0].expression: line 1, column 78: expected type 'string' but found 'int'");
    for (strict, level, errors) in [(false, "warning", 1), (true, "error", 6)] {
        let mut lint = bin();
        lint.arg("lint").arg(&dir);
        if strict {
            lint.arg("--strict");
        }
        let out = lint.output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let text = stdout(&out);
        let mut want: Vec<String> = findings
            .iter()
            .map(|f| format!("{level}: {file}: {f}"))
            .collect();
        want.extend([refused.clone(), format!("{errors} error(s)")]);
        assert_eq!(text.lines().collect::<Vec<_>>(), want, "{text}");
    }
}

/// The shipped policies are clean under `lint --strict`: type checking
/// finds nothing in them.
#[test]
fn shipped_policies_lint_clean_under_strict() {
    let out = bin()
        .args(["lint", "--strict"])
        .arg(root().join("policies"))
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        !text.contains("warning:") && !text.contains("error"),
        "{text}"
    );
}

/// `lint -f` checks the GpuBudgets of cluster objects against the Kueue
/// ClusterQueues serving the namespaces they cover, as `audit` does: a
/// flavor's quota above the budget's limit for its model, a model the
/// budget does not limit, quotas together above a team budget's total.
/// Each is a warning at the ClusterQueue's document, an error under
/// `--strict`; a pair that agrees (here a `kubectl get -o json` List) is
/// clean.
#[test]
fn lint_checks_gpu_budgets_against_kueue_cluster_queues() {
    let lint = |files: &str, strict: bool| {
        let mut lint = bin();
        lint.current_dir(root()).args(["lint", "policies", "-f"]);
        lint.arg(format!("tests/fixtures/kueue-pairing/{files}"));
        lint.args(strict.then_some("--strict")).output().unwrap()
    };
    let at = "tests/fixtures/kueue-pairing/disagree/queues.yaml: document 4 (line 28): [gpu-budget-kueue-mismatch] ClusterQueue team-ml gives namespace nlp";
    let want = [
        " 10 GPUs of ResourceFlavor a100 (A100), GpuBudget nlp/team-nlp allows 8 A100 GPUs: ",
        " 4 GPUs of ResourceFlavor h100 (H100), GpuBudget nlp/team-nlp sets no limit for that model (it limits models and sets no total): ",
        " 30 GPUs in all its flavors; GpuBudget gpu-admission/team-ml allows 24 in total: ",
    ];
    for (strict, level) in [(false, "warning"), (true, "error")] {
        let out = lint("disagree", strict);
        let text = stdout(&out);
        assert_eq!(out.status.success(), !strict, "{text}");
        let found: Vec<&str> = (text.lines())
            .filter(|l| l.contains("[gpu-budget-kueue-mismatch]"))
            .collect();
        assert_eq!(found.len(), want.len(), "{text}");
        for (line, want) in found.iter().zip(want) {
            assert!(line.starts_with(&format!("{level}: {at}{want}")), "{line}");
        }
        assert!(
            text.contains("\n2 GpuBudget(s), 1 ClusterQueue(s): 3 disagreement(s)\n"),
            "{text}"
        );
        let last = text.lines().last().unwrap_or_default();
        match strict {
            true => assert_eq!(last, "3 error(s)"),
            false => assert!(last.starts_with("policies: ok ("), "{text}"),
        }
    }
    let out = lint("agree.json", true);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        !text.contains("warning:") && !text.contains("error"),
        "{text}"
    );
    assert!(
        text.contains("\n2 GpuBudget(s), 1 ClusterQueue(s): 0 disagreement(s)\n"),
        "{text}"
    );
}

/// A GpuBudget that does not read is a `lint -f` error at its field; in
/// the policy folder, where nothing would enforce it, a GpuBudget is
/// refused, the error saying where it belongs.
#[test]
fn lint_refuses_a_gpu_budget_that_does_not_read_or_sits_in_the_policy_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let budget = "apiVersion: gpu-admission.io/v1alpha1\nkind: GpuBudget\nmetadata: {name: team-nlp, namespace: nlp}\nspec:\n  models: {A100: -1}\n";
    let file = write(tmp.path(), "budget.yaml", budget);
    let out = (bin().arg("lint").arg(root().join("policies")).arg("-f"))
        .arg(&file)
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    let want = format!(
        "error: {}: document 1 (line 1): spec.models.A100: must be 0 or more",
        file.display()
    );
    assert!(text.lines().any(|l| l == want), "{text}");
    assert_eq!(text.lines().last(), Some("1 error(s)"), "{text}");
    // In a `kubectl get -o json` List, the item is named.
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nlp"}},
        {"apiVersion": "gpu-admission.io/v1alpha1", "kind": "GpuBudget",
         "metadata": {"name": "team-nlp", "namespace": "nlp"}, "spec": {"models": {"A100": -1}}}]});
    let dump = tempfile::tempdir().unwrap();
    let listed = write(dump.path(), "budgets.json", &list.to_string());
    let out = (bin().arg("lint").arg(root().join("policies")).arg("-f"))
        .arg(&listed)
        .output()
        .unwrap();
    let text = stdout(&out);
    let want = format!(
        "error: {}: document 1 (line 1): items[1].spec.models.A100: must be 0 or more",
        listed.display()
    );
    assert!(text.lines().any(|l| l == want), "{text}");
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    let text = stdout(&out);
    assert!(!out.status.success(), "{text}");
    let want = format!(
        "{}: document 1 (line 1): kind: a GpuBudget is not a policy document: apply it to the cluster (docs/budgets.md); `gpu-admission lint DIR -f FILE` checks it against Kueue's ClusterQueues",
        file.display()
    );
    assert!(text.lines().any(|l| l == want), "{text}");
}

/// A folder as people publish them: a binding with a `paramRef` for a
/// policy without `paramKind`, a binding of a policy kept elsewhere, and a
/// Deployment next to the policies. kube-apiserver accepts all three; so
/// does `lint`, saying what it ignores.
#[test]
fn lint_accepts_what_kube_apiserver_ignores_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    write(
        tmp.path(),
        "library.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: no-latest}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  validations: [{expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: no-latest}
spec:
  policyName: no-latest
  validationActions: [Deny]
  paramRef: {name: no-latest-params, parameterNotFoundAction: Deny}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: elsewhere}
spec:
  policyName: defined-in-another-repo
  validationActions: [Deny]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: example, namespace: default}
spec:
  selector: {matchLabels: {app: example}}
  template:
    metadata: {labels: {app: example}}
    spec: {containers: [{name: web, image: nginx:1.27}]}
"#,
    );
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "{text}");
    assert!(
        lines[0].starts_with("note: ")
            && lines[0].contains("library.yaml: document 2")
            && lines[0].contains("spec.paramRef: ignored: policy no-latest has no paramKind"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("warning: ") && lines[1].contains("document 3")
            && lines[1].contains("no ValidatingAdmissionPolicy named defined-in-another-repo: binding elsewhere is ignored"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("warning: ")
            && lines[2].contains("document 4")
            && lines[2].contains("skipped: kind \"Deployment\""),
        "{text}"
    );
    assert!(
        lines[3].starts_with("note: ")
            && lines[3].contains("library.yaml: document 1")
            && lines[3].contains("policy no-latest matches Pod CREATE, so it is also run on the pod templates of Deployment"),
        "{text}"
    );
    // The policy uses nothing beyond kube-apiserver's CEL.
    assert_eq!(
        lines[4], "kube-apiserver 1.33: 1 of 1 policies would load as written",
        "{text}"
    );
    assert!(
        lines[5].ends_with("ok (1 policies, 0 placement profiles, 0 tests)"),
        "{text}"
    );
}

/// `lint` names what a policy uses beyond kube-apiserver's CEL environment
/// (the engine's own extensions, `cel.bind`, `math`) and counts the
/// policies that would load there as written.
#[test]
fn lint_says_which_policies_would_load_in_kube_apiserver() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = |name: &str, expression: &str| {
        pod_policy(
            name,
            &format!(
                r#"  validations: [{{expression: "{expression}"}}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec: {{policyName: {name}, validationActions: [Deny]}}
"#
            ),
        )
    };
    write(
        tmp.path(),
        "policies.yaml",
        &[
            policy("plain", "object.spec.containers.all(c, c.?securityContext.privileged.orValue(false) == false)"),
            policy("bound", "cel.bind(n, size(object.spec.containers), n < 10)"),
            policy("mathematical", "math.greatest(1, size(object.spec.containers)) < 10"),
        ]
        .join("---\n"),
    );
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("bound: uses cel.bind beyond kube-apiserver 1.33's CEL"),
        "{text}"
    );
    assert!(
        text.contains("mathematical: uses math.greatest beyond kube-apiserver 1.33's CEL"),
        "{text}"
    );
    assert!(!text.contains("plain: uses"), "{text}");
    assert!(
        text.contains("kube-apiserver 1.33: 1 of 3 policies would load as written"),
        "{text}"
    );
}

/// A policy whose apiVersion has a typo is an error, not a document
/// skipped with a warning: `lint` fails, naming file, document, line and
/// field. A ConfigMap beside it is still accepted.
#[test]
fn lint_fails_on_a_policy_under_an_unknown_api_version() {
    let tmp = tempfile::tempdir().unwrap();
    let policy = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: gpu-cap}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  validations: [{expression: "true"}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: gpu-cap}
spec: {policyName: gpu-cap, validationActions: [Deny]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: notes}
data: {owner: platform}
"#;
    write(tmp.path(), "gpu.yaml", policy);
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("skipped: kind \"ConfigMap\""),
        "{}",
        stdout(&out)
    );

    write(
        tmp.path(),
        "gpu.yaml",
        &policy.replacen(
            "admissionregistration.k8s.io/v1\n",
            "admissionregistration.k8s.io/v2\n",
            1,
        ),
    );
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].ends_with("gpu.yaml: document 1 (line 1): apiVersion: \"admissionregistration.k8s.io/v2\" is not an apiVersion of kind ValidatingAdmissionPolicy; accepted: admissionregistration.k8s.io/v1, admissionregistration.k8s.io/v1beta1"),
        "{text}"
    );
    assert_eq!(lines[1], "1 error(s)", "{text}");
}

#[test]
fn test_command_counts_and_fails_on_a_failing_case() {
    let tmp = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(root().join("tests/fixtures/audit/policies/keepalive.yaml"))
        .unwrap();
    write(tmp.path(), "policies.yaml", &good);
    write(
        tmp.path(),
        "tests.yaml",
        r#"apiVersion: gpu-admission.io/v1alpha1
kind: PolicyTest
metadata: {name: gpu-max-2}
spec:
  cases:
    - name: three GPUs are denied
      object:
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: ml}
        spec: {containers: [{name: main, image: cuda, resources: {limits: {nvidia.com/gpu: "3"}}}]}
      expect:
        denied: [{policy: gpu-max-2, message: "main asks for more than 2 GPUs"}]
    - name: this expectation is wrong on purpose
      object:
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: ml}
        spec: {containers: [{name: main, image: cuda, resources: {limits: {nvidia.com/gpu: "1"}}}]}
      expect:
        allowed: false
"#,
    );
    let out = bin().arg("test").arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("FAIL"), "{text}");
    assert!(
        text.contains("this expectation is wrong on purpose"),
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("1 passed, 1 failed"), "{text}");
}

/// A PolicyTest that does not load (a misspelt field, a string where a
/// boolean goes) fails `lint` as well as `test`, and both name file,
/// document, line and the path of the field.
#[test]
fn lint_and_test_fail_on_a_broken_policy_test() {
    let tmp = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(root().join("tests/fixtures/audit/policies/keepalive.yaml"))
        .unwrap();
    write(tmp.path(), "policies.yaml", &good);
    let tests = r#"apiVersion: gpu-admission.io/v1alpha1
kind: PolicyTest
metadata: {name: gpu-max-2}
spec:
  cases:
    - name: one GPU is allowed
      object:
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: ml}
        spec: {containers: [{name: main, image: cuda, resources: {limits: {nvidia.com/gpu: "1"}}}]}
      expect:
        allowed: true
    - name: three GPUs are denied
      object:
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: ml}
        spec: {containers: [{name: main, image: cuda, resources: {limits: {nvidia.com/gpu: "3"}}}]}
      expect:
        allowed: false
"#;
    write(tmp.path(), "tests.yaml", tests);
    let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("1 tests)"), "{}", stdout(&out));
    let out = bin().arg("test").arg(tmp.path()).output().unwrap();
    assert!(out.status.success(), "{}", stdout(&out));

    for (broken, says) in [
        (
            tests.replacen("allowed: true", "alowed: true", 1),
            "tests.yaml: document 1 (line 1): spec.cases[0].expect.alowed: unknown field, expected one of allowed, denied",
        ),
        (
            tests.replacen("allowed: false", "allowed: \"no\"", 1),
            "tests.yaml: document 1 (line 1): spec.cases[1].expect.allowed: invalid type: string \"no\", expected a boolean",
        ),
    ] {
        write(tmp.path(), "tests.yaml", &broken);
        let out = bin().arg("lint").arg(tmp.path()).output().unwrap();
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].contains(says), "{says}\n{text}");
        assert_eq!(lines[1], "1 error(s)", "{text}");

        let out = bin().arg("test").arg(tmp.path()).output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("has PolicyTest errors:"), "{err}");
        assert!(err.contains(says), "{says}\n{err}");
    }
}

#[test]
fn audit_prints_policy_reports() {
    let out = bin()
        .args(["audit", "-o", "policyreport", "-f"])
        .arg(root().join("tests/fixtures/audit/cluster-list.json"))
        .arg("--policies")
        .arg(root().join("tests/fixtures/audit/policies"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert!(docs
        .iter()
        .all(|d| d["apiVersion"] == "wgpolicyk8s.io/v1alpha2"));
    assert!(docs.iter().any(|d| d["metadata"]["namespace"] == "serving"));
}

#[test]
fn bad_input_is_a_clean_error() {
    let out = bin()
        .args(["evaluate", "-f", "/nonexistent/manifest.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: cannot read /nonexistent/manifest.yaml"),
        "{err}"
    );
}

/// `evaluate --authz FILE` answers a policy's `authorizer` checks from the
/// file's grants; without it every check is denied, "no authorizer
/// configured".
#[test]
fn evaluate_answers_authorizer_checks_from_the_authz_file() {
    let tmp = tempfile::tempdir().unwrap();
    let policies = tmp.path().join("policies");
    std::fs::create_dir(&policies).unwrap();
    write(
        &policies,
        "p.yaml",
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: privileged-needs-permission}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  variables:
  - name: check
    expression: "authorizer.group('policy.example.com').resource('privilegedpods').namespace(object.metadata.namespace).check('create')"
  validations:
  - expression: "variables.check.allowed()"
    messageExpression: "'not allowed: ' + variables.check.reason()"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: privileged-needs-permission}
spec: {policyName: privileged-needs-permission, validationActions: [Deny]}
"#,
    );
    let pod = write(
        tmp.path(),
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ml}\nspec: {containers: [{name: c, image: i}]}\n",
    );
    let authz = write(
        tmp.path(),
        "authz.yaml",
        "- {userGroup: ml-admins, verb: create, apiGroup: policy.example.com, resource: privilegedpods, namespace: ml}\n",
    );
    let run = |extra: &[&str]| {
        let out = bin()
            .args(["evaluate", "-o", "json", "-f"])
            .arg(&pod)
            .arg("--policies")
            .arg(&policies)
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        v[0].clone()
    };
    let without = run(&[]);
    assert_eq!(
        without["denials"],
        json!(["privileged-needs-permission: not allowed: no authorizer configured"])
    );
    let authz = authz.to_str().unwrap();
    let other = run(&["--authz", authz, "--as", "bob"]);
    assert_eq!(
        other["denials"],
        json!(["privileged-needs-permission: not allowed: no --authz grant allows it"])
    );
    let admin = run(&["--authz", authz, "--as", "bob", "--as-group", "ml-admins"]);
    assert_eq!(admin["allowed"], json!(true), "{admin}");
    // A malformed file is an error naming it.
    let bad = write(tmp.path(), "bad.yaml", "- {verb: get}\n");
    let out = bin()
        .args(["evaluate", "-f"])
        .arg(&pod)
        .arg("--policies")
        .arg(&policies)
        .arg("--authz")
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml: grant 0: exactly one of user or userGroup is required"),
        "{err}"
    );
}

/// The binary's allocations are served by mimalloc as the process's
/// `malloc` (src/allocator.rs): it reports its start when asked to, which
/// it does only once it serves an allocation; with the C library's malloc
/// (the `override` feature lost) nothing is printed. This is the test
/// profile's binary; the release build links mimalloc only through the
/// reference `mimalloc_as_malloc!` keeps (`nm -D
/// target/release/gpu-admission` shows `malloc` defined in the binary).
#[test]
fn the_binary_allocates_with_mimalloc() {
    let out = bin()
        .arg("--version")
        .env("MIMALLOC_VERBOSE", "1")
        .output()
        .expect("run");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mimalloc: process init"),
        "mimalloc did not start: {stderr}"
    );
    assert!(stdout(&out).starts_with("gpu-admission "));
}

/// The soft and hard open-file limits of process `pid`.
fn open_file_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let mut numbers = line
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

/// `serve` on a free port with JSON logs and no metrics or health
/// listeners; `--certs-dir` comes next.
const SERVE_LOGGING_JSON: [&str; 10] = [
    "serve",
    "--listen",
    "127.0.0.1:0",
    "--metrics-listen",
    "off",
    "--health-listen",
    "off",
    "--log-format",
    "json",
    "--certs-dir",
];

/// Starts `serve` logging at info to a pipe (its stderr).
trait LoggingToStderr {
    fn logging_to_stderr(&mut self) -> std::process::Child;
}

impl LoggingToStderr for Command {
    fn logging_to_stderr(&mut self) -> std::process::Child {
        self.env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// `serve` started under `limits` (a shell `ulimit` command): the soft and
/// hard open-file limits it then runs with, and its log up to the line
/// saying it serves.
fn serve_under(limits: &str) -> ((u64, u64), String) {
    use std::io::BufRead as _;
    let certs = tempfile::tempdir().unwrap();
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!("{limits} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_gpu-admission"))
        .args(SERVE_LOGGING_JSON)
        .arg(certs.path())
        .logging_to_stderr();
    let mut log = String::new();
    for line in std::io::BufReader::new(child.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        log.push_str(&line);
        log.push('\n');
        if line.contains("serving admission webhooks") {
            break;
        }
    }
    let limits = open_file_limits(child.id());
    let _ = child.kill();
    let _ = child.wait();
    (limits, log)
}

/// At start the soft open-file limit is raised to the hard one (containers
/// often start with 1,024 soft), and `--max-connections` is lowered, with a
/// warning, to what a low hard limit leaves.
#[test]
fn serve_raises_the_open_file_limit_and_fits_the_connection_cap_to_it() {
    let (_, hard) = open_file_limits(std::process::id());
    if hard >= 2048 {
        let ((soft_after, hard_after), log) = serve_under("ulimit -Sn 1024");
        assert_eq!(soft_after, hard_after, "soft raised to hard");
        assert_eq!(hard_after, hard);
        assert!(!log.contains("lowered"), "{log}");
    } else {
        eprintln!("skipped the raise: this process's hard open-file limit is {hard}");
    }
    let ((soft_after, _), log) = serve_under("ulimit -n 512");
    assert_eq!(soft_after, 512);
    let warning = log
        .lines()
        .find(|l| l.contains("--max-connections lowered"))
        .unwrap_or_else(|| panic!("no warning in:\n{log}"));
    let entry: serde_json::Value = serde_json::from_str(warning).unwrap();
    assert_eq!(entry["fields"]["asked"], 700);
    let allowed = entry["fields"]["max_connections"].as_u64().unwrap();
    assert!(allowed > 0 && allowed < 512, "{warning}");
}

/// `serve` logs what type checking finds at WARN, at start and on each
/// reload, and keeps serving with the policies loaded.
#[test]
fn serve_logs_type_checking_findings_at_start_and_on_reload() {
    use std::io::BufRead as _;
    use std::time::{Duration, Instant};
    let (policies, certs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let typo = |field: &str| {
        pod_policy(
            "typo",
            &format!("  validations:\n    - expression: \"!has(object.spec.{field})\"\n"),
        )
    };
    write(policies.path(), "p.yaml", &typo("hostNetwrk"));
    let mut child = bin()
        .args(SERVE_LOGGING_JSON)
        .arg(certs.path())
        .arg("--policies")
        .arg(policies.path())
        .logging_to_stderr();
    let (lines, log) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    let mut seen = Vec::new();
    let mut wait_for = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match log.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(line) => seen.push(line),
                Err(_) => panic!("no {what:?} in:\n{}", seen.join("\n")),
            }
        }
    };
    for field in ["hostNetwrk", "dnsPolicyy"] {
        if field != "hostNetwrk" {
            write(policies.path(), "p.yaml", &typo(field));
        }
        let finding = wait_for(&format!("undefined field '{field}'"));
        let entry: serde_json::Value = serde_json::from_str(&finding).unwrap();
        assert_eq!(entry["level"], "WARN", "{finding}");
        let message = entry["fields"]["message"].as_str().unwrap();
        assert!(
            message.ends_with(&format!("p.yaml: document 1 (line 1): spec.validations[0].expression: line 1, column 5: v1, Kind=Pod: undefined field '{field}' (object.spec.{field})")),
            "{message}"
        );
        wait_for(if field == "hostNetwrk" {
            "serving admission webhooks"
        } else {
            "policies reloaded"
        });
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `test` counts a PolicyTest's GpuBudgets against what its cluster holds
/// (a dump), and a budget expectation that is not met fails its case.
#[test]
fn test_judges_cases_against_the_budgets_of_the_test() {
    let fixture = root().join("tests/fixtures/budgets");
    let run = |dir: &Path| {
        let out = bin()
            .arg("test")
            .arg(dir)
            .arg("--policies")
            .arg(root().join("policies"))
            .output()
            .unwrap();
        (out.status.code(), stdout(&out))
    };
    let (code, text) = run(&fixture);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(text.lines().last(), Some("3 passed, 0 failed"), "{text}");

    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(fixture.join("dump.json"), tmp.path().join("dump.json")).unwrap();
    let tests = std::fs::read_to_string(fixture.join("tests.yaml")).unwrap();
    let wrong = tests.replace("6/8 are held", "5/8 are held");
    assert_ne!(wrong, tests);
    write(tmp.path(), "tests.yaml", &wrong);
    let (code, text) = run(tmp.path());
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL ") && text.contains("three more A100s do not"),
        "{text}"
    );
    assert!(
        text.contains("no denial from GpuBudget nlp/team-nlp: \"5/8 are held"),
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("2 passed, 1 failed"), "{text}");
}
