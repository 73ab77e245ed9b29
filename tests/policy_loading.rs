//! Loading policy folders and the errors a policy author sees.
use gpu_admission::cel::{Extension, Extensions};
use gpu_admission::k8s::namespaces::StaticNamespaces;
use gpu_admission::policy::{parse_documents, read_documents, LoadErrors, PolicySet};
use gpu_admission::review::{Operation, Request};
use serde_json::json;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const POLICY: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: p}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
  validations:
  - expression: "EXPR"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: b}
spec:
  policyName: p
  validationActions: [Deny]
"#;

fn compile(yaml: &str) -> Result<PolicySet, LoadErrors> {
    PolicySet::compile(&parse_documents(Path::new("policies/p.yaml"), yaml).unwrap())
}

#[test]
fn cel_errors_name_file_document_field_and_position() {
    let err =
        compile(&POLICY.replace("EXPR", "object.spec.containers.all(c, c.name ==)")).unwrap_err();
    assert_eq!(err.0.len(), 1);
    let e = &err.0[0];
    assert_eq!(e.field.as_deref(), Some("spec.validations[0].expression"));
    assert_eq!(e.line, Some(1));
    assert!(e.column.is_some());
    let text = err.to_string();
    assert!(
        text.starts_with(
            "policies/p.yaml: document 1 (line 1): spec.validations[0].expression: line 1, column "
        ),
        "{text}"
    );
    assert!(
        !text.contains("OtherError") && !text.contains("ParseError {"),
        "{text}"
    );
}

#[test]
fn field_errors_name_the_field() {
    let bad = POLICY.replace(
        "validationActions: [Deny]",
        "validationActions: [Deny, Warn]",
    );
    let err = compile(&bad.replace("EXPR", "true"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("document 2 (line 14): spec.validationActions: Deny and Warn"),
        "{err}"
    );
    let bad = POLICY.replace("operations: [\"CREATE\"]", "operations: [\"PATCH\"]");
    let err = compile(&bad.replace("EXPR", "true"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.matchConstraints.resourceRules[0].operations[0]: must be"),
        "{err}"
    );
}

/// As kube-apiserver: a binding of a policy that does not exist does
/// nothing; the policy without a binding is loaded and inert. Both said.
#[test]
fn a_binding_of_a_missing_policy_is_ignored_with_a_warning() {
    let set = compile(
        &POLICY
            .replace("policyName: p", "policyName: q")
            .replace("EXPR", "false"),
    )
    .expect("loads");
    assert_eq!(set.len(), 1, "the policy is loaded");
    assert_eq!(set.bindings(), 0, "the binding is not");
    let notices: Vec<String> = set.notices().iter().map(|n| n.to_string()).collect();
    assert_eq!(
        notices,
        ["warning: policies/p.yaml: document 2 (line 14): spec.policyName: no ValidatingAdmissionPolicy named q: binding b is ignored"]
    );
    let verdict = set.evaluate(&pod_create("p"), &StaticNamespaces::new());
    assert!(verdict.denials.is_empty(), "inert: {:?}", verdict.denials);
}

/// A one-container pod named `name`, created in `ml`.
fn pod_create(name: &str) -> Request {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    Request::for_object(pod, Operation::Create, None)
}

/// Kubernetes documents `paramRef` as ignored when the policy has no
/// `paramKind`: the binding applies, without params, and `lint` notes it.
#[test]
fn a_param_ref_on_a_policy_without_param_kind_is_ignored_with_a_note() {
    let yaml = POLICY.replace("EXPR", "object.metadata.name != 'bad'").replace(
        "  validationActions: [Deny]",
        "  validationActions: [Deny]\n  paramRef: {name: limits, namespace: default, parameterNotFoundAction: Deny}",
    );
    let set = compile(&yaml).expect("loads");
    assert_eq!(set.bindings(), 1);
    let notices: Vec<String> = set.notices().iter().map(|n| n.to_string()).collect();
    assert_eq!(
        notices,
        ["note: policies/p.yaml: document 2 (line 14): spec.paramRef: ignored: policy p has no paramKind, so it is evaluated without params"]
    );
    let ns = StaticNamespaces::new();
    // Evaluated without params: no "params not found" denial.
    assert!(set.evaluate(&pod_create("good"), &ns).denials.is_empty());
    assert_eq!(set.evaluate(&pod_create("bad"), &ns).denials.len(), 1);
}

/// Documents the engine does not use (a Deployment kept next to its policy,
/// the CRD of a params kind) are skipped with a warning naming file and
/// document; the rest of the folder loads.
#[test]
fn documents_of_other_kinds_are_skipped_with_a_warning() {
    let yaml = format!(
        "{}---\napiVersion: v1\nkind: Secret\nmetadata: {{name: s}}\n",
        POLICY.replace("EXPR", "true")
    );
    let set = compile(&yaml).expect("loads");
    assert_eq!((set.len(), set.bindings()), (1, 1));
    let notices: Vec<String> = set.notices().iter().map(|n| n.to_string()).collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].starts_with(
            "warning: policies/p.yaml: document 3 (line 21): skipped: kind \"Secret\""
        ),
        "{notices:?}"
    );
    // A malformed binding is still an error.
    let broken = format!(
        "{}---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: b2}}\nspec: {{policyName: p, validationActions: [Deny], bogus: 1}}\n",
        POLICY.replace("EXPR", "true")
    );
    assert!(compile(&broken).is_err());
}

/// A policy or binding under an apiVersion the engine does not read (a
/// typo of the group, a version not served) is an error naming the field
/// and the versions accepted, not a document skipped: skipping it would
/// switch a policy off. Other kinds stay warnings.
#[test]
fn known_kinds_under_an_unknown_api_version_are_errors() {
    const VALIDATING: &str =
        "accepted: admissionregistration.k8s.io/v1, admissionregistration.k8s.io/v1beta1";
    const MUTATING: &str = "accepted: admissionregistration.k8s.io/v1, admissionregistration.k8s.io/v1beta1, admissionregistration.k8s.io/v1alpha1";
    let mutating = r#"apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicy
metadata: {name: m}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["pods"]}]
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration: {expression: "Object{metadata: Object.metadata{labels: {'a': 'b'}}}"}
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: MutatingAdmissionPolicyBinding
metadata: {name: m}
spec: {policyName: m}
"#;
    let folder = format!("{}---\n{mutating}", POLICY.replace("EXPR", "true"));
    let set = compile(&folder).expect("loads");
    assert_eq!((set.len(), set.mutating_len()), (1, 1));
    for (document, line, typo, kind, accepted) in [
        (
            1,
            1,
            "admissionregistration.k8s.io/v2",
            "ValidatingAdmissionPolicy",
            VALIDATING,
        ),
        (
            2,
            14,
            "admisionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicyBinding",
            VALIDATING,
        ),
        (
            3,
            21,
            "admissionregistration.k8s.io/v2",
            "MutatingAdmissionPolicy",
            MUTATING,
        ),
        (
            4,
            32,
            "admissionregistration.k8s.io",
            "MutatingAdmissionPolicyBinding",
            MUTATING,
        ),
    ] {
        let mut docs: Vec<String> = folder.split("---\n").map(str::to_string).collect();
        docs[document - 1] = docs[document - 1].replacen(
            &docs[document - 1].lines().next().unwrap().to_string(),
            &format!("apiVersion: {typo}"),
            1,
        );
        let err = compile(&docs.join("---\n")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("policies/p.yaml: document {document} (line {line}): apiVersion: \"{typo}\" is not an apiVersion of kind {kind}; {accepted}")
        );
    }
    // Without an apiVersion at all.
    let err = compile(&folder.replacen("apiVersion: admissionregistration.k8s.io/v1\n", "", 1))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("policies/p.yaml: document 1 (line 1): apiVersion: required for kind ValidatingAdmissionPolicy; {VALIDATING}")
    );
    // Kinds the engine does not read: skipped, with a warning, as before.
    let others = format!(
        "{folder}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: n}}\n"
    );
    let set = compile(&others).expect("loads");
    assert_eq!(set.notices().len(), 2, "{:?}", set.notices());
}

/// The checks kube-apiserver makes when a policy is created, as load
/// errors with file, document, field and column.
#[test]
fn kubernetes_creation_checks_are_load_errors() {
    let err = compile(&POLICY.replace("EXPR", "object.metadata.name == params.name"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err.trim(),
        "policies/p.yaml: document 1 (line 1): spec.validations[0].expression: undeclared reference to 'params': the policy has no spec.paramKind"
    );
    let later = POLICY.replace(
        "  validations:",
        "  variables:\n  - {name: a, expression: 'variables.b'}\n  - {name: b, expression: '2'}\n  validations:",
    );
    let err = compile(&later.replace("EXPR", "variables.a == 2"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "spec.variables[0].expression: variables.b is not defined before this variable"
        ),
        "{err}"
    );
    let err = compile(&POLICY.replace("EXPR", "object.metadata.name.endsWit('x')"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.validations[0].expression: line 1, column 22: undeclared reference to 'endsWit': no such function"),
        "{err}"
    );
    let err = compile(&POLICY.replace("EXPR", "object.metadata.name.endsWith('x', 'y')"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.validations[0].expression: line 1, column 22: found no matching overload for 'endsWith'"),
        "{err}"
    );
}

/// kube-apiserver refuses a policy whose `<policy name>/<key>` is not a
/// qualified name, or that uses one audit annotation key twice.
#[test]
fn audit_annotation_keys_are_checked_as_kube_apiserver_checks_them() {
    let with_keys = |keys: &[&str]| {
        let annotations: String = keys
            .iter()
            .map(|k| format!("  - {{key: {k:?}, valueExpression: \"'v'\"}}\n"))
            .collect();
        POLICY.replace("EXPR", "true").replace(
            "  validations:",
            &format!("  auditAnnotations:\n{annotations}  validations:"),
        )
    };
    assert!(compile(&with_keys(&["sku", "GPU_count.v2"])).is_ok());
    let long = "k".repeat(64);
    let errors = load_errors(&with_keys(&["sku", "a/b", &long, "sku", "-x"]));
    let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.auditAnnotations[1].key",
            "spec.auditAnnotations[2].key",
            "spec.auditAnnotations[3].key",
            "spec.auditAnnotations[4].key",
        ],
        "{errors:?}"
    );
    assert!(
        errors[0]
            .1
            .starts_with("\"a/b\" must consist of alphanumeric characters"),
        "{errors:?}"
    );
    assert!(
        errors[1]
            .1
            .starts_with("must be at most 63 characters, not 64"),
        "{errors:?}"
    );
    assert_eq!(
        errors[2].1,
        "duplicate key \"sku\": spec.auditAnnotations[0] has it"
    );
    let text = compile(&with_keys(&["sku", "sku"]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        text.trim(),
        "policies/p.yaml: document 1 (line 1): spec.auditAnnotations[1].key: duplicate key \"sku\": spec.auditAnnotations[0] has it"
    );
}

/// A policy `name` and its binding, writing the audit annotation `key`
/// (the pod's name) on every pod.
fn audited(name: &str, key: &str) -> String {
    POLICY
        .replace("EXPR", "true")
        .replace("{name: p}", &format!("{{name: {name}}}"))
        .replace("{name: b}", &format!("{{name: {name}-b}}"))
        .replace("policyName: p", &format!("policyName: {name}"))
        .replace(
            "  validations:",
            &format!("  auditAnnotations:\n  - {{key: {key}, valueExpression: 'object.metadata.name'}}\n  validations:"),
        )
}

/// A key returned otherwise than `<policy>.<key>` is noted with what it
/// is returned as; two policies returning the same key are warned of.
#[test]
fn audit_keys_returned_otherwise_are_noted_and_clashes_warned_of() {
    let long = format!("gpu-{}.example.com", "x".repeat(50));
    let set = compile(&audited(&long, "sku")).expect("loads");
    let notices: Vec<String> = set.notices().iter().map(|n| n.to_string()).collect();
    assert_eq!(notices.len(), 1, "{notices:?}");
    let prefix =
        "note: policies/p.yaml: document 1 (line 1): spec.auditAnnotations[0].key: returned as ";
    assert!(notices[0].starts_with(prefix), "{notices:?}");
    let returned = notices[0][prefix.len()..].split(' ').next().unwrap();
    assert_eq!(returned.len(), 12, "{returned}");
    assert!(returned.ends_with(".sku"), "{returned}");
    let verdict = set.evaluate(&pod_create("trainer"), &StaticNamespaces::new());
    assert_eq!(verdict.audit_annotations[returned], "trainer");

    let clash = format!("{}---\n{}", audited("a.b", "c"), audited("a", "b.c"));
    let set = compile(&clash).expect("loads");
    let notices: Vec<String> = set.notices().iter().map(|n| n.to_string()).collect();
    assert_eq!(
        notices,
        ["warning: policies/p.yaml: document 3 (line 23): spec.auditAnnotations[0].key: returned as a.b.c, like key c of policy a.b: on a request both policies match, one value replaces the other"]
    );
    // A key that fits is returned as written, with nothing to say.
    assert!(compile(&audited("gpu-limits", "gpus"))
        .unwrap()
        .notices()
        .is_empty());
}

#[test]
fn undeclared_variables_and_policy_variables_are_errors() {
    let err = compile(&POLICY.replace("EXPR", "variables.missing"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("variables.missing is not defined"), "{err}");
    let twice = POLICY.replace(
        "  validations:",
        "  variables:\n  - {name: a, expression: '1'}\n  - {name: a, expression: '2'}\n  validations:",
    );
    let err = compile(&twice.replace("EXPR", "variables.a == 1"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spec.variables[1].name: variable a is defined twice"),
        "{err}"
    );
    let err = compile(&POLICY.replace("EXPR", "obj.x"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("undeclared reference to 'obj'"), "{err}");
}

#[test]
fn oversized_expressions_are_rejected_without_crashing() {
    let flat = vec!["1"; 5000].join(" + ");
    let err = compile(&POLICY.replace("EXPR", &format!("{flat} > 0")))
        .unwrap_err()
        .to_string();
    assert!(err.contains("bytes long"), "{err}");
    let parens = format!("{}true{}", "(".repeat(200), ")".repeat(200));
    let err = compile(&POLICY.replace("EXPR", &parens))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nested too deeply"), "{err}");
    let lists = format!("{}1{}", "[".repeat(90), "]".repeat(90));
    let err = compile(&POLICY.replace("EXPR", &lists))
        .unwrap_err()
        .to_string();
    // File, document, field and the position where the parser gave up
    // (inside the brackets, past the nesting limit).
    let position = err
        .strip_prefix(
            "policies/p.yaml: document 1 (line 1): spec.validations[0].expression: line 1, column ",
        )
        .and_then(|rest| rest.strip_suffix(": expression is nested too deeply for the parser"))
        .unwrap_or_else(|| panic!("{err}"));
    let column: usize = position.parse().unwrap_or_else(|_| panic!("{err}"));
    assert!((40..=90).contains(&column), "{err}");
    // Parser blow-up (exponential adaptive prediction) on unary chains.
    let start = std::time::Instant::now();
    let motif = "!!(!!!!!!(!!!!(((((!!(!!(!!!!((".repeat(8) + "1";
    let err = compile(&POLICY.replace("EXPR", &motif))
        .unwrap_err()
        .to_string();
    assert!(err.contains("runs of repeated unary operators"), "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(2));
    let chain = format!("object{} == 1", ".a".repeat(1500));
    let err = compile(&POLICY.replace("EXPR", &chain))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nested too deeply"), "{err}");
}

#[test]
fn folders_are_read_recursively_sorted_and_skip_dot_dirs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // A mounted ConfigMap: files live in a timestamped dot-dir, reached via ..data and top-level symlinks.
    std::fs::create_dir(root.join("..2026_11_29")).unwrap();
    std::fs::write(
        root.join("..2026_11_29/policy.yaml"),
        POLICY.replace("EXPR", "false"),
    )
    .unwrap();
    std::os::unix::fs::symlink("..2026_11_29", root.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/policy.yaml", root.join("policy.yaml")).unwrap();
    std::fs::create_dir(root.join("extra")).unwrap();
    std::fs::write(root.join("extra/readme.txt"), "not yaml").unwrap();
    let docs = read_documents(root).unwrap();
    assert_eq!(docs.len(), 2, "read once, through the symlink");
    assert!(docs[0].source.file.ends_with("policy.yaml"));
    let set = PolicySet::compile(&docs).unwrap();
    assert_eq!(set.len(), 1);
}

struct Counting(Arc<AtomicUsize>);

impl Extension for Counting {
    fn register_functions(&self, ctx: &mut gpu_admission::cel::Context<'static>) {
        let calls = Arc::clone(&self.0);
        ctx.add_function("countCall", move |x: i64| {
            calls.fetch_add(1, Ordering::SeqCst);
            x
        });
    }
    fn variable_names(&self) -> &[&'static str] {
        &["host"]
    }
    fn variables(
        &self,
        object: Option<&serde_json::Value>,
    ) -> Vec<(String, gpu_admission::cel::Value)> {
        let name = object
            .and_then(|o| o.pointer("/metadata/name"))
            .and_then(|n| n.as_str())
            .unwrap_or("");
        vec![(
            "host".to_string(),
            gpu_admission::cel::json_to_value(&json!({"name": name})),
        )]
    }
}

#[test]
fn extensions_add_functions_and_variables_and_variables_are_memoized() {
    let yaml = POLICY
        .replace("  validations:\n  - expression: \"EXPR\"", "  variables:\n  - name: once\n    expression: countCall(1)\n  validations:\n  - expression: \"variables.once == 1 && host.name == 'trainer'\"\n  - expression: \"variables.once + variables.once == 3\"");
    let calls = Arc::new(AtomicUsize::new(0));
    let docs = parse_documents(Path::new("p.yaml"), &yaml).unwrap();
    let set = PolicySet::compile_with(&docs, Extensions::new().with(Counting(Arc::clone(&calls))))
        .unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer", "namespace": "ml"}, "spec": {}});
    let v = set.evaluate(
        &Request::for_object(pod, Operation::Create, None),
        &StaticNamespaces::new(),
    );
    assert_eq!(
        v.denials,
        vec!["p: failed expression: variables.once + variables.once == 3"]
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a variable is evaluated once per request"
    );
    assert!(
        compile(&POLICY.replace("EXPR", "host.name == ''")).is_err(),
        "host is unknown without the extension"
    );
}

/// [`Counting`] saying its function gives the same result for the same
/// argument.
struct PureCounting(Counting);

impl Extension for PureCounting {
    fn register_functions(&self, ctx: &mut gpu_admission::cel::Context<'static>) {
        self.0.register_functions(ctx)
    }
    fn pure(&self) -> bool {
        true
    }
}

/// Calls of `countCall` when three pods are evaluated against `yaml`,
/// with the function declared pure or not.
fn calls_for_three_pods(yaml: &str, pure: bool) -> usize {
    let calls = Arc::new(AtomicUsize::new(0));
    let counting = Counting(Arc::clone(&calls));
    let extensions = if pure {
        Extensions::new().with(PureCounting(counting))
    } else {
        Extensions::new().with(counting)
    };
    let docs = parse_documents(Path::new("p.yaml"), yaml).unwrap();
    let set = PolicySet::compile_with(&docs, extensions).unwrap();
    for name in ["a", "b", "c"] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"}, "spec": {}});
        let v = set.evaluate(
            &Request::for_object(pod, Operation::Create, None),
            &StaticNamespaces::new(),
        );
        assert!(v.denials.is_empty(), "{:?}", v.denials);
    }
    calls.load(Ordering::SeqCst)
}

/// A part that reads only params is worked out once, at load, when its
/// functions are pure (`cel::fold`); an expression written alike in two
/// policies is worked out once per request (`eval::Memo`). Neither
/// happens to a function not declared pure.
#[test]
fn pure_functions_on_params_run_at_load_and_shared_expressions_once_per_request() {
    let params = POLICY
        .replace("spec:\n  matchConstraints:", "spec:\n  paramKind: {apiVersion: v1, kind: ConfigMap}\n  matchConstraints:")
        .replace(
            "  validationActions: [Deny]\n",
            "  validationActions: [Deny]\n  paramRef: {name: limits, namespace: gpu-system, parameterNotFoundAction: Deny}\n",
        )
        .replace("EXPR", "countCall(size(params.data.names.split(','))) == 3 && request.namespace == 'ml'")
        + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: limits, namespace: gpu-system}\ndata: {names: \"x,y,z\"}\n";
    assert_eq!(calls_for_three_pods(&params, true), 1, "once, at load");
    assert_eq!(calls_for_three_pods(&params, false), 3, "once per pod");

    let condition = "countCall(size(object.metadata.name)) == 1";
    let shared = POLICY.replace("EXPR", condition)
        + "---\n"
        + &POLICY
            .replace("EXPR", condition)
            .replace("{name: p}", "{name: q}")
            .replace("policyName: p", "policyName: q")
            .replace("{name: b}", "{name: c}");
    assert_eq!(calls_for_three_pods(&shared, true), 3, "once per pod");
    assert_eq!(
        calls_for_three_pods(&shared, false),
        6,
        "once per pod and policy"
    );
}

#[test]
fn unknown_fields_are_errors_naming_file_document_and_field_path() {
    let policy = POLICY.replace("EXPR", "true");
    let cases = [
        (
            policy.replace("  validations:", "  validation:"),
            "document 1 (line 1): spec.validation: unknown field",
        ),
        (
            policy.replace("  matchConstraints:", "  matchConstraint:"),
            "document 1 (line 1): spec.matchConstraint: unknown field",
        ),
        (
            policy.replace("operations: [\"CREATE\"]", "operation: [\"CREATE\"]"),
            "document 1 (line 1): spec.matchConstraints.resourceRules[0].operation: unknown field",
        ),
        (
            policy.replace("- expression: \"true\"", "- expresion: \"true\""),
            "document 1 (line 1): spec.validations[0].expresion: unknown field",
        ),
        (
            policy.replace("  validationActions:", "  validationAction:"),
            "document 2 (line 14): spec.validationAction: unknown field",
        ),
        (
            policy.replace("policyName: p", "policyName: p\n  paramRef: {nmae: x}"),
            "document 2 (line 14): spec.paramRef.nmae: unknown field",
        ),
        (
            policy.replace("metadata: {name: b}", "metadata: {name: b}\nspecs: {}"),
            "document 2 (line 14): specs: unknown field",
        ),
    ];
    for (yaml, expected) in cases {
        let err = compile(&yaml).unwrap_err().to_string();
        assert!(
            err.starts_with("policies/p.yaml: ") && err.contains(expected),
            "{expected}\n{err}"
        );
    }
}

#[test]
fn wrong_types_and_values_name_the_field_path() {
    let policy = POLICY.replace("EXPR", "true");
    let cases = [
        (
            policy.replace("resources: [\"pods\"]", "resources: \"pods\""),
            "spec.matchConstraints.resourceRules[0].resources: invalid type: string",
        ),
        (
            policy.replace(
                "  validations:",
                "  failurePolicy: Sometimes\n  validations:",
            ),
            "spec.failurePolicy: must be Fail or Ignore, not Sometimes",
        ),
        (
            policy.replace("validationActions: [Deny]", "validationActions: [Block]"),
            "spec.validationActions[0]: must be one of Deny, Warn, Audit, not Block",
        ),
        (
            policy.replace(
                "  validations:",
                "  matchConditions: [{expression: \"true\"}]\n  validations:",
            ),
            "spec.matchConditions[0].name: required",
        ),
        (
            policy.replace(
                "    resourceRules:",
                "    objectSelector: {matchExpressions: [{key: a, operator: In}]}\n    resourceRules:",
            ),
            "spec.matchConstraints.objectSelector.matchExpressions[0].values: required",
        ),
        (
            policy.replace(
                "    resourceRules:",
                "    namespaceSelector: {matchLabels: {team: [ml]}}\n    resourceRules:",
            ),
            "spec.matchConstraints.namespaceSelector.matchLabels.team: invalid type",
        ),
    ];
    for (yaml, expected) in cases {
        let err = compile(&yaml).unwrap_err().to_string();
        assert!(err.contains(expected), "{expected}\n{err}");
    }
}

#[test]
fn a_server_export_with_metadata_status_and_empty_fields_loads() {
    let yaml = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"admissionregistration.k8s.io/v1"}
  creationTimestamp: "2026-11-29T14:00:00Z"
  generation: 3
  labels: {team: ml}
  managedFields:
  - apiVersion: admissionregistration.k8s.io/v1
    fieldsType: FieldsV1
    fieldsV1: {f:spec: {}}
    manager: kubectl-client-side-apply
    operation: Update
    time: "2026-11-29T14:00:00Z"
  name: p
  resourceVersion: "4711"
  uid: 6f1c2a9e-3b7d-4c1e-9a55-0d2f8e4b7c13
spec:
  failurePolicy: Fail
  matchConstraints:
    matchPolicy: Equivalent
    namespaceSelector: {}
    objectSelector: {}
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
      scope: "*"
  variables:
  validations:
  - expression: "true"
    message: ok
    reason: Forbidden
status:
  observedGeneration: 3
  typeChecking: {}
---
apiVersion: admissionregistration.k8s.io/v1beta1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: b
  uid: 0d2f8e4b-3b7d-4c1e-9a55-6f1c2a9e7c13
  resourceVersion: "4712"
  generation: 1
spec:
  policyName: p
  validationActions: [Deny, Audit]
  matchResources:
    namespaceSelector:
      matchExpressions: [{key: team, operator: Exists}]
"#;
    let set = compile(yaml).unwrap();
    assert_eq!((set.len(), set.bindings()), (1, 1));
}

#[test]
fn semantic_errors_of_one_document_are_all_reported() {
    let yaml = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: p}
spec:
  paramKind: {apiVersion: v1}
  matchConstraints:
    namespaceSelector: {matchLabels: {team: ml}}
  validations:
  - expression: "object.x =="
    reason: Bad
"#;
    let err = compile(yaml).unwrap_err();
    let fields: Vec<_> = err.0.iter().map(|e| e.field.as_deref().unwrap()).collect();
    assert_eq!(
        fields,
        [
            "spec.paramKind.kind",
            "spec.matchConstraints.resourceRules",
            "spec.validations[0].expression",
            "spec.validations[0].reason",
        ],
        "{err}"
    );
}

const MUTATING: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: m}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["pods"]
  reinvocationPolicy: Never
  mutations:
  - MUTATION
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: mb}
spec:
  policyName: m
"#;

/// `(field, message)` of each load error of `yaml`.
fn load_errors(yaml: &str) -> Vec<(String, String)> {
    compile(yaml)
        .unwrap_err()
        .0
        .into_iter()
        .map(|e| (e.field.unwrap_or_default(), e.message))
        .collect()
}

#[test]
fn mutating_policy_errors_name_their_field() {
    let with = |mutation: &str| MUTATING.replace("MUTATION", mutation);
    let ok = compile(&with(
        "{patchType: JSONPatch, jsonPatch: {expression: '[JSONPatch{op: \"remove\", path: \"/spec/nodeName\"}]'}}",
    ))
    .unwrap();
    assert_eq!((ok.mutating_len(), ok.len()), (1, 0));
    assert!(ok.has_mutations());
    for (mutation, field, message) in [
        (
            "{patchType: Merge, jsonPatch: {expression: '[]'}}",
            "spec.mutations[0].patchType",
            "must be JSONPatch or ApplyConfiguration, not Merge",
        ),
        (
            "{jsonPatch: {expression: '[]'}}",
            "spec.mutations[0].patchType",
            "required: JSONPatch or ApplyConfiguration",
        ),
        (
            "{patchType: ApplyConfiguration, jsonPatch: {expression: '[]'}}",
            "spec.mutations[0].jsonPatch",
            "must not be set when patchType is ApplyConfiguration",
        ),
        (
            "{patchType: JSONPatch}",
            "spec.mutations[0].jsonPatch",
            "required when patchType is JSONPatch",
        ),
        (
            "{patchType: JSONPatch, jsonPatch: {expression: '[]', type: x}}",
            "spec.mutations[0].jsonPatch.type",
            "unknown field, expected expression",
        ),
        (
            "{patchType: ApplyConfiguration, applyConfiguration: {expression: 'Object{spec: variables.missing}'}}",
            "spec.mutations[0].applyConfiguration.expression",
            "variables.missing is not defined in spec.variables",
        ),
    ] {
        let errors = load_errors(&with(mutation));
        assert!(
            errors.iter().any(|(f, m)| f == field && m.contains(message)),
            "{mutation}: {errors:?}"
        );
    }
    let errors = load_errors(
        &MUTATING
            .replace("  reinvocationPolicy: Never\n", "")
            .replace(
                "MUTATION",
                "{patchType: JSONPatch, jsonPatch: {expression: '[]'}}",
            ),
    );
    assert_eq!(
        errors,
        [(
            "spec.reinvocationPolicy".to_string(),
            "required: Never or IfNeeded".to_string()
        )]
    );
    // A binding of a mutating policy takes no validationActions.
    let errors = load_errors(
        &with("{patchType: JSONPatch, jsonPatch: {expression: '[]'}}").replace(
            "  policyName: m\n",
            "  policyName: m\n  validationActions: [Deny]\n",
        ),
    );
    assert_eq!(errors[0].0, "spec.validationActions", "{errors:?}");
    assert!(errors[0].1.starts_with("unknown field"), "{errors:?}");
}

#[test]
fn validating_and_mutating_policies_of_one_name_are_two_policies() {
    let both = format!(
        "{}---\n{}",
        POLICY
            .replace("EXPR", "true")
            .replace("name: p}", "name: m}")
            .replace("policyName: p", "policyName: m"),
        MUTATING.replace(
            "MUTATION",
            "{patchType: JSONPatch, jsonPatch: {expression: '[]'}}"
        )
    );
    let set = compile(&both).unwrap();
    assert_eq!((set.len(), set.mutating_len(), set.bindings()), (1, 1, 1));
}
