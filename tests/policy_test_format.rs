//! The PolicyTest format: expected denials and warnings are tied to the
//! policy they come from, `onlyPolicies` / `notPolicies` say which policies
//! fire, and a case that checks nothing, or uses the old plain-string form,
//! does not load.
use gpu_admission::cli::test::{run_tests, Summary, TestArgs};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The two policies of the audit fixtures (`no-keepalive` warns,
/// `gpu-max-2` denies) and a second denying policy, `no-latest`.
const NO_LATEST: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: no-latest
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["pods"]
  validations:
    - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
      message: an image is tagged latest; pin a version
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: no-latest
spec:
  policyName: no-latest
  validationActions: [Deny]
"#;

/// A pod that all three policies flag: three GPUs, `:latest`, `sleep infinity`.
const POD: &str = r#"
      object:
        apiVersion: v1
        kind: Pod
        metadata: {name: p, namespace: ml}
        spec:
          containers:
            - name: main
              image: cuda:latest
              command: [sh, -c, sleep infinity]
              resources: {limits: {nvidia.com/gpu: "3"}}"#;

fn folder(cases: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let fixture = root().join("tests/fixtures/audit/policies/keepalive.yaml");
    std::fs::copy(fixture, tmp.path().join("keepalive.yaml")).unwrap();
    std::fs::write(tmp.path().join("no-latest.yaml"), NO_LATEST).unwrap();
    let tests = format!(
        "apiVersion: gpu-admission.io/v1alpha1\nkind: PolicyTest\nmetadata: {{name: format}}\nspec:\n  cases:\n{cases}"
    );
    std::fs::write(tmp.path().join("tests.yaml"), tests).unwrap();
    tmp
}

fn run(dir: &Path) -> anyhow::Result<Summary> {
    run_tests(&TestArgs {
        dir: dir.to_path_buf(),
        policies: None,
        catalog: None,
        verbose: true,
        authz: None,
    })
}

fn case(name: &str, expect: &str) -> String {
    format!("    - name: {name}{POD}\n      expect:\n{expect}\n")
}

/// The names of the failing cases, in order.
fn failing(summary: &Summary) -> Vec<&str> {
    summary
        .report
        .lines()
        .filter_map(|l| l.strip_prefix("FAIL "))
        .map(|l| l.rsplit(" / ").next().unwrap())
        .collect()
}

#[test]
fn a_message_must_come_from_the_named_policy() {
    let tmp = folder(
        &[
            case(
                "own message",
                "        denied: [{policy: gpu-max-2, message: \"main asks for more than 2 GPUs\"}]",
            ),
            case(
                "another policy's message",
                "        denied: [{policy: no-latest, message: \"main asks for more than 2 GPUs\"}]",
            ),
            case(
                "a warning is not a denial",
                "        denied: [{policy: no-keepalive}]",
            ),
            case(
                "the policy alone",
                "        denied: [{policy: no-latest}]\n        warned: [{policy: no-keepalive, message: \"sleep infinity\"}]",
            ),
        ]
        .concat(),
    );
    let summary = run(tmp.path()).unwrap();
    assert_eq!(
        failing(&summary),
        ["another policy's message", "a warning is not a denial"],
        "{}",
        summary.report
    );
    assert!(
        summary.report.contains(
            "no denial from no-latest: \"main asks for more than 2 GPUs\": \"gpu-max-2: container main asks for more than 2 GPUs"
        ),
        "{}",
        summary.report
    );
    assert_eq!(
        summary.report.lines().last(),
        Some("2 passed, 2 failed"),
        "{}",
        summary.report
    );
}

/// `expect.audit` names an annotation by the key the webhook returns it
/// under: `validation_failure`, not kube-apiserver's own
/// `validation.policy.admission.k8s.io/validation_failure`.
#[test]
fn audit_expectations_name_the_returned_keys() {
    let tmp = folder(
        &[
            case(
                "returned key",
                "        audit: {validation_failure: \"\\\"policy\\\":\\\"no-keepalive\\\"\"}",
            ),
            case(
                "kube-apiserver's key",
                "        audit: {validation.policy.admission.k8s.io/validation_failure: no-keepalive}",
            ),
        ]
        .concat(),
    );
    let summary = run(tmp.path()).unwrap();
    assert_eq!(
        failing(&summary),
        ["kube-apiserver's key"],
        "{}",
        summary.report
    );
    assert!(
        summary.report.contains(
            "no audit annotation validation.policy.admission.k8s.io/validation_failure; got [\"validation_failure\"]"
        ),
        "{}",
        summary.report
    );
}

#[test]
fn only_and_not_policies_say_which_policies_fire() {
    let tmp = folder(
        &[
            case(
                "all three listed",
                "        onlyPolicies: [gpu-max-2, no-latest, no-keepalive]",
            ),
            case(
                "a warning policy left out",
                "        onlyPolicies: [gpu-max-2, no-latest]",
            ),
            case("none of them", "        onlyPolicies: []"),
            case(
                "a policy that stays quiet",
                "        notPolicies: [gpu-max-3]",
            ),
            case(
                "a warning policy fires",
                "        notPolicies: [no-keepalive]",
            ),
        ]
        .concat(),
    );
    let summary = run(tmp.path()).unwrap();
    assert_eq!(
        failing(&summary),
        [
            "a warning policy left out",
            "none of them",
            "a warning policy fires"
        ],
        "{}",
        summary.report
    );
    assert!(
        summary
            .report
            .contains("policies outside onlyPolicies fired: [\"no-keepalive\"]"),
        "{}",
        summary.report
    );
    assert!(
        summary.report.contains("no-keepalive fired (notPolicies)"),
        "{}",
        summary.report
    );
}

#[test]
fn the_plain_string_form_does_not_load_and_shows_the_new_form() {
    let tmp = folder(&case(
        "old form",
        "        denied: [\"gpu-max-2:\", \"asks for more than 2\"]",
    ));
    let err = run(tmp.path()).err().expect("a load error").to_string();
    assert!(err.contains("tests.yaml: format / old form: "), "{err}");
    assert!(
        err.contains("expect.denied[0] is a plain string \"gpu-max-2:\"; name the policy the message must come from: `- {policy: gpu-max-2}`"),
        "{err}"
    );

    let tmp = folder(&case(
        "old form",
        "        denied: [{policy: gpu-max-2}, \"asks for more than 2\"]",
    ));
    let err = run(tmp.path()).err().expect("a load error").to_string();
    assert!(
        err.contains("`- {policy: gpu-max-2, message: \"asks for more than 2\"}`"),
        "{err}"
    );

    let tmp = folder(&case(
        "old warnings",
        "        warnings: [\"no-keepalive: sleep infinity\"]",
    ));
    let err = run(tmp.path()).err().expect("a load error").to_string();
    assert!(
        err.contains("old warnings: expect.warnings was renamed: write `warned: [{policy: NAME, message: SUBSTRING}]`"),
        "{err}"
    );
}

#[test]
fn a_case_without_an_expectation_does_not_load() {
    let tmp = folder(
        &[
            case("checks nothing", "        {}"),
            format!("    - name: no expect at all{POD}\n"),
            case("fine", "        allowed: false"),
        ]
        .concat(),
    );
    let err = run(tmp.path()).err().expect("a load error").to_string();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(
        lines[1].ends_with("tests.yaml: format / checks nothing: the case has no expectation; give expect.allowed, denied, warned, onlyPolicies, notPolicies, noWarnings, audit, patched, noPatch, mutatedBy or excepted"),
        "{err}"
    );
    assert!(
        lines[2].contains("tests.yaml: format / no expect at all: the case has no expectation"),
        "{err}"
    );
}

#[test]
fn contradictory_expectations_do_not_load() {
    for (expect, says) in [
        (
            "        allowed: true\n        denied: [{policy: gpu-max-2}]",
            "expect.allowed is true but expect.denied is given",
        ),
        (
            "        denied: [{policy: gpu-max-2}]\n        notPolicies: [gpu-max-2]",
            "gpu-max-2 is both expected and in notPolicies",
        ),
        (
            "        warned: [{policy: no-keepalive}]\n        onlyPolicies: [gpu-max-2]",
            "no-keepalive is expected but not in onlyPolicies",
        ),
        (
            "        denied: [{policy: gpu-max-2, mesage: typo}]",
            "unknown field `mesage`",
        ),
    ] {
        let tmp = folder(&case("contradiction", expect));
        let err = run(tmp.path()).err().expect("a load error").to_string();
        assert!(err.contains(says), "{expect}: {err}");
    }
}

/// A ResourceClaimTemplate and a pod that claims a GPU through it, in the
/// order `kubectl apply -f` creates them.
const DRA_MANIFEST: &str = r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: single-gpu}
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly: {deviceClassName: gpu.nvidia.com, count: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: notebook}
spec:
  tolerations:
    - {key: sku, operator: Equal, value: gpu, effect: NoSchedule}
  resourceClaims:
    - {name: gpu, resourceClaimTemplateName: single-gpu}
  containers:
    - name: jupyter
      image: quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07
      resources:
        requests: {cpu: "2", memory: 8Gi}
        claims: [{name: gpu}]
"#;

#[test]
fn a_file_case_judges_its_pod_with_the_claims_of_the_same_file() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("notebook.yaml"), DRA_MANIFEST).unwrap();
    let pod = DRA_MANIFEST.split("---\n").nth(1).unwrap();
    let inline: String = pod.lines().map(|l| format!("        {l}\n")).collect();
    let tests = format!(
        "apiVersion: gpu-admission.io/v1alpha1\nkind: PolicyTest\nmetadata: {{name: dra}}\nspec:\n  cases:\n\
         \x20   - name: the pod of the file claims a GPU through the template beside it\n\
         \x20     file: notebook.yaml\n\
         \x20     namespace: ml\n\
         \x20     expect:\n\
         \x20       allowed: true\n\
         \x20       notPolicies: [gpu-node-isolation]\n\
         \x20   - name: in another namespace no such template exists\n\
         \x20     namespace: web\n\
         \x20     object:\n{inline}\
         \x20     expect:\n\
         \x20       denied: [{{policy: gpu-node-isolation, message: pod asks for no GPU}}]\n"
    );
    std::fs::write(tmp.path().join("tests.yaml"), tests).unwrap();
    let summary = run_tests(&TestArgs {
        dir: tmp.path().to_path_buf(),
        policies: Some(root().join("policies")),
        catalog: None,
        verbose: true,
        authz: None,
    })
    .unwrap();
    assert_eq!(failing(&summary), Vec::<&str>::new(), "{}", summary.report);
    assert_eq!(summary.passed, 2, "{}", summary.report);
}

/// An unbound MutatingAdmissionPolicy, bound by one PolicyTest's
/// `spec.bindings` only; `expect.mutatedBy` names the policies that changed
/// the object.
#[test]
fn a_test_binds_an_unbound_mutating_policy_and_checks_who_mutated() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("label.yaml"),
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: label-pods}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  reinvocationPolicy: Never
  mutations:
    - patchType: ApplyConfiguration
      applyConfiguration:
        expression: "Object{metadata: Object.metadata{labels: {'team': 'ml'}}}"
"#,
    )
    .unwrap();
    let binding = "  bindings:\n    - {apiVersion: admissionregistration.k8s.io/v1, kind: MutatingAdmissionPolicyBinding, metadata: {name: label-pods}, spec: {policyName: label-pods}}\n";
    let test = |name: &str, bindings: &str, cases: &str| {
        format!("apiVersion: gpu-admission.io/v1alpha1\nkind: PolicyTest\nmetadata: {{name: {name}}}\nspec:\n{bindings}  cases:\n{cases}")
    };
    let pod = "      object: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ml}, spec: {containers: [{name: a, image: nginx:1.27}]}}\n";
    let patched = "{apiVersion: v1, kind: Pod, metadata: {name: p, namespace: ml, labels: {team: ml}}, spec: {containers: [{name: a, image: nginx:1.27}]}}";
    let tests = [
        test(
            "bound",
            binding,
            &format!(
                "    - name: labelled\n{pod}      expect: {{mutatedBy: [label-pods], patched: {patched}}}\n    - name: said untouched\n{pod}      expect: {{mutatedBy: []}}\n"
            ),
        ),
        test(
            "unbound",
            "",
            &format!("    - name: untouched\n{pod}      expect: {{mutatedBy: [], noPatch: true}}\n"),
        ),
    ]
    .join("---\n");
    std::fs::write(tmp.path().join("tests.yaml"), tests).unwrap();
    let summary = run(tmp.path()).unwrap();
    assert_eq!(failing(&summary), ["said untouched"], "{}", summary.report);
    assert!(
        summary
            .report
            .contains("expected mutations by [], got [\"label-pods\"]"),
        "{}",
        summary.report
    );

    // Only bindings may be added.
    let not_a_binding = test(
        "bad",
        "  bindings:\n    - {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n",
        &format!("    - name: any\n{pod}      expect: {{allowed: true}}\n"),
    );
    std::fs::write(tmp.path().join("tests.yaml"), not_a_binding).unwrap();
    let summary = run(tmp.path()).unwrap();
    assert!(
        summary.report.contains(
            "spec.bindings[0]: kind \"ConfigMap\" is not one of [\"ValidatingAdmissionPolicyBinding\", \"MutatingAdmissionPolicyBinding\"]"
        ),
        "{}",
        summary.report
    );
}

/// `spec.exceptions` puts GpuPolicyExceptions in the cluster of a test
/// (inline, or from a manifest file); `expect.excepted` says what they let
/// through, all of it, and `at` the time a case is judged at.
#[test]
fn exceptions_let_through_what_the_case_expects_and_nothing_else() {
    let elsewhere = tempfile::tempdir().unwrap();
    let file = elsewhere.path().join("bench.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: gpu-admission.io/v1alpha1
kind: GpuPolicyException
metadata: {name: big-bench, namespace: ml}
spec:
  policies: [gpu-max-2]
  match: {names: [p]}
  reason: three-GPU benchmark
  expiresAt: "2026-07-01T00:00:00Z"
"#,
    )
    .unwrap();
    let exceptions = format!(
        r#"  exceptions:
    - apiVersion: gpu-admission.io/v1alpha1
      kind: GpuPolicyException
      metadata: {{name: latest-ok, namespace: ml}}
      spec:
        policies: [no-latest]
        match: {{selector: {{matchLabels: {{}}}}, names: ["*"]}}
        reason: image pinned next sprint
        expiresAt: "2026-07-01T00:00:00Z"
    - file: {}
"#,
        file.display()
    );
    let at = |time: &str, case: String| {
        case.replacen(
            "      expect:\n",
            &format!("      at: \"{time}\"\n      expect:\n"),
            1,
        )
    };
    let (june, july) = ("2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z");
    let cases = [
        at(
            june,
            case(
                "both excepted",
                "        allowed: true\n        warned: [{policy: no-keepalive}]\n        excepted:\n          - {policy: no-latest, exception: ml/latest-ok}\n          - {policy: gpu-max-2}",
            ),
        ),
        at(
            june,
            case("an exception the case does not expect", "        allowed: true"),
        ),
        at(
            july,
            case(
                "expired exceptions let nothing through",
                "        denied: [{policy: no-latest}, {policy: gpu-max-2}]\n        excepted: []",
            ),
        ),
        at(
            july,
            case(
                "an expected exception that has expired",
                "        excepted: [{policy: no-latest}]",
            ),
        ),
    ]
    .concat();
    let tmp = folder(&cases);
    let text = std::fs::read_to_string(tmp.path().join("tests.yaml")).unwrap();
    let text = text.replace(
        "spec:\n  cases:\n",
        &format!("spec:\n{exceptions}  cases:\n"),
    );
    std::fs::write(tmp.path().join("tests.yaml"), text).unwrap();
    let summary = run(tmp.path()).unwrap();
    assert_eq!(
        failing(&summary),
        [
            "an exception the case does not expect",
            "an expected exception that has expired"
        ],
        "{}",
        summary.report
    );
    assert!(
        summary.report.contains("no-latest was let through by exception ml/latest-ok, which the case does not expect (add `- {policy: no-latest, exception: ml/latest-ok}` to expect.excepted)"),
        "{}",
        summary.report
    );
    assert!(
        summary.report.contains(
            "gpu-max-2 was let through by exception ml/big-bench, which the case does not expect"
        ),
        "{}",
        summary.report
    );
    assert!(
        summary.report.contains(
            "expected an exception to let through no-latest by any exception; let through: []"
        ),
        "{}",
        summary.report
    );
    assert_eq!((summary.passed, summary.failed), (2, 2));
}

/// A test's exception that does not read fails its test with the field
/// at fault; a bad `at` does not load.
#[test]
fn a_bad_exception_or_time_is_an_error_at_its_field() {
    let tmp = folder(&case("any", "        allowed: false"));
    let text = std::fs::read_to_string(tmp.path().join("tests.yaml")).unwrap();
    let broken = text.replace(
        "spec:\n  cases:\n",
        "spec:\n  exceptions:\n    - apiVersion: gpu-admission.io/v1alpha1\n      kind: GpuPolicyException\n      metadata: {name: vague}\n      spec: {policies: [no-latest], match: {names: [p]}, reason: \" \"}\n  cases:\n",
    );
    std::fs::write(tmp.path().join("tests.yaml"), &broken).unwrap();
    let summary = run(tmp.path()).unwrap();
    assert_eq!(summary.failed, 1, "{}", summary.report);
    assert!(
        summary.report.contains("tests.yaml: format / spec.exceptions\n     spec.exceptions[0]: spec.reason: required: say why"),
        "{}",
        summary.report
    );

    let timed = text.replace("      expect:\n", "      at: tomorrow\n      expect:\n");
    std::fs::write(tmp.path().join("tests.yaml"), timed).unwrap();
    let err = run(tmp.path()).err().unwrap().to_string();
    assert!(
        err.contains(
            "format / any: at: \"tomorrow\" is not an RFC 3339 time such as 2026-12-31T00:00:00Z"
        ),
        "{err}"
    );
}
