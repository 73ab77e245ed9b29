//! A public ValidatingAdmissionPolicy library run unchanged: every control
//! of kubescape's cel-admission-library (`../shared/kubescape`, beside the
//! clone in CI) with every case of its `tests.json`, through the code
//! `gpu-admission evaluate -f OBJECT --policies DIR` runs.
//!
//! As the library's runner (`scripts/run-control-tests.py`, which applies
//! each object with `kubectl --dry-run=server`) does, a case runs with its
//! control's policy alone, bound by the case's binding template (the
//! library's `test-resources/policy-binding.yaml` unless it names another)
//! with the params of its ControlConfiguration template, on an object built
//! from a `test-resources/` template and the case's `field_change_list`.
//! `fail` is a denial by that policy (by violations rather than evaluation
//! errors, each reported once), `warn` an admission with that policy's
//! warning, `pass` an admission.
use crate::common::shared_data;

use gpu_admission::cli::evaluate::{self, EvaluateArgs, Format, OperationArg};
use gpu_admission::cli::policy_args::PolicyArgs;
use gpu_admission::offline::Evaluation;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Cases this engine answers differently from kube-apiserver, as
/// `(control, case name)`, each under a comment naming the expression and
/// the CEL semantics the engine lacks. The test fails when one of them gets
/// the library's outcome, so that its entry is removed. Empty: every case
/// gets the library's outcome.
const KNOWN_ENGINE_DIVERGENCES: &[(&str, &str)] = &[];

const CASES: usize = 628;
const CONTROLS: usize = 60;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    template: String,
    expected: String,
    #[serde(default)]
    field_change_list: Vec<String>,
    #[serde(default = "default_binding")]
    binding_template: String,
    #[serde(default = "default_params")]
    param_template: String,
}

fn default_binding() -> String {
    "policy-binding.yaml".into()
}

fn default_params() -> String {
    "default-control-configuration.yaml".into()
}

#[test]
fn the_library_cases_get_the_library_outcomes() {
    let Some(library) = shared_data::shared_data("kubescape") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let dirs = control_dirs(&library);
    let (mut total, mut passed) = (0, 0);
    let mut wrong = Vec::new();
    let mut diverging = Vec::new();
    let mut now_right = Vec::new();
    for dir in &dirs {
        let control = Control::read(dir);
        let id = control.id.as_str();
        let (mut control_passed, mut control_known) = (0, 0);
        let answers = run_control(&library, work.path(), &control);
        for (case, got) in control.cases.iter().zip(answers) {
            let known = KNOWN_ENGINE_DIVERGENCES.contains(&(id, case.name.as_str()));
            match (got == case.expected, known) {
                (true, false) => control_passed += 1,
                (true, true) => now_right.push(format!("{id} {:?}", case.name)),
                (false, true) => {
                    control_known += 1;
                    diverging.push(format!("{id} {:?}: got {got}", case.name));
                }
                (false, false) => wrong.push(format!(
                    "{id} {:?}: expected {}, got {got}",
                    case.name, case.expected
                )),
            }
        }
        let failed = control.cases.len() - control_passed - control_known;
        let known = match control_known {
            0 => String::new(),
            n => format!(", {n} known engine divergences"),
        };
        println!(
            "{id} {}: {control_passed} passed, {failed} failed{known}",
            control.policy_name
        );
        total += control.cases.len();
        passed += control_passed;
    }
    println!(
        "{} controls, {total} cases: {passed} passed, {} failed, {} known engine divergences",
        dirs.len(),
        wrong.len() + now_right.len(),
        diverging.len()
    );
    for line in &diverging {
        println!("known engine divergence: {line}");
    }
    assert_eq!(dirs.len(), CONTROLS, "controls in the library");
    assert_eq!(total, CASES, "cases in the library");
    let unknown: Vec<_> = KNOWN_ENGINE_DIVERGENCES
        .iter()
        .filter(|(id, name)| {
            let case = format!("{id} {name:?}");
            !diverging
                .iter()
                .chain(&now_right)
                .any(|l| l.starts_with(&case))
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "KNOWN_ENGINE_DIVERGENCES names cases the library does not have: {unknown:?}"
    );
    assert!(
        now_right.is_empty(),
        "these cases now get the library's outcome; remove them from KNOWN_ENGINE_DIVERGENCES:\n{}",
        now_right.join("\n")
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The library's control folders (those with a `tests.json`), by name.
fn control_dirs(library: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(library.join("controls"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("tests.json").is_file())
        .collect();
    dirs.sort();
    dirs
}

/// A control folder: `policy.yaml` and `tests.json`.
struct Control {
    id: String,
    policy_name: String,
    policy_yaml: String,
    cases: Vec<Case>,
}

impl Control {
    fn read(dir: &Path) -> Control {
        let id = dir.file_name().unwrap().to_str().unwrap().to_string();
        let cases = serde_json::from_str(&read(&dir.join("tests.json")))
            .unwrap_or_else(|e| panic!("{id}/tests.json: {e}"));
        let policy_yaml = read(&dir.join("policy.yaml"));
        let policy: Value = serde_yaml::from_str(&policy_yaml).unwrap();
        let policy_name = policy["metadata"]["name"].as_str().unwrap().to_string();
        Control {
            id,
            policy_name,
            policy_yaml,
            cases,
        }
    }
}

/// The cases of `control` that share a binding and params: their
/// positions, a folder holding the policy with that binding and those
/// params, and one manifest of their objects.
struct Group {
    members: Vec<usize>,
    policies: PathBuf,
    manifest: PathBuf,
}

fn groups(library: &Path, work: &Path, control: &Control) -> Vec<Group> {
    let mut by_templates: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (i, case) in control.cases.iter().enumerate() {
        let key = (case.binding_template.as_str(), case.param_template.as_str());
        by_templates.entry(key).or_default().push(i);
    }
    let mut out = Vec::new();
    for (g, ((binding, params), members)) in by_templates.into_iter().enumerate() {
        let policies = work.join(format!("{}-policies-{g}", control.id));
        write_policy_folder(&policies, library, control, binding, params);
        let mut manifest = String::new();
        for &i in &members {
            let case = &control.cases[i];
            let object = build_object(library, case)
                .unwrap_or_else(|e| panic!("{} {:?}: {e}", control.id, case.name));
            manifest.push_str("---\n");
            manifest.push_str(&serde_yaml::to_string(&object).unwrap());
        }
        let file = work.join(format!("{}-objects-{g}.yaml", control.id));
        std::fs::write(&file, manifest).unwrap();
        out.push(Group {
            members,
            policies,
            manifest: file,
        });
    }
    out
}

/// The outcome of each case of `control`, in order.
fn run_control(library: &Path, work: &Path, control: &Control) -> Vec<String> {
    let mut outcomes = vec![String::new(); control.cases.len()];
    for group in groups(library, work, control) {
        let results = evaluate_manifest(&group.manifest, &group.policies);
        assert_eq!(
            results.len(),
            group.members.len(),
            "{}",
            group.manifest.display()
        );
        for (i, result) in group.members.into_iter().zip(&results) {
            outcomes[i] = outcome(result, &control.policy_name);
        }
    }
    outcomes
}

/// The plan's passes (`policy::plan`) only make evaluation cheaper: with
/// each one turned off, every case's object gets the same answer
/// (denials, warnings, audit annotations) as with all of them.
#[test]
fn the_library_answers_do_not_depend_on_the_plan_passes() {
    use gpu_admission::admission::{Admission, Bundle};
    use gpu_admission::bundle::{self, PolicySource};
    use gpu_admission::k8s::StaticNamespaces;
    use gpu_admission::offline;
    use gpu_admission::policy::Passes;
    use gpu_admission::review::Operation;
    use std::sync::Arc;
    let Some(library) = shared_data::shared_data("kubescape") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let dirs = control_dirs(&library);
    let mut compared = 0;
    offline::with_evaluation_stack(|| {
        for dir in &dirs {
            let control = Control::read(dir);
            for group in groups(&library, work.path(), &control) {
                let loaded = bundle::load(&PolicySource::Dir(group.policies.clone())).unwrap();
                let mut requests = Vec::new();
                for object in offline::read_manifest(&group.manifest).unwrap() {
                    let mut req = offline::build_request(object, None, Operation::Create, None);
                    req.user_info =
                        json!({"username": "kubernetes-admin", "groups": ["system:masters"]});
                    requests.push(req);
                }
                let answers = |bundle: Bundle| -> Vec<Value> {
                    let mut lookup = StaticNamespaces::new();
                    for ns in requests.iter().filter_map(|r| r.namespace.as_deref()) {
                        lookup.insert(ns, Default::default());
                    }
                    let admission = Admission::new(bundle, Arc::new(lookup));
                    (requests.iter())
                        .map(|req| {
                            let e = offline::evaluate(&admission, req.clone());
                            json!([e.allowed, e.denials, e.warnings, e.audit_annotations])
                        })
                        .collect()
                };
                let planned = answers(loaded.bundle.clone());
                for name in Passes::NAMES {
                    let passes = Passes::without(name).unwrap();
                    let bundle = Bundle {
                        policies: loaded.bundle.policies.replanned(passes).unwrap(),
                        ..loaded.bundle.clone()
                    };
                    assert_eq!(answers(bundle), planned, "{} without {name}", control.id);
                }
                compared += requests.len();
            }
        }
    })
    .unwrap();
    assert_eq!(compared, CASES);
}

/// `fail`, `warn` or `pass` as the library means them for `policy`, or
/// what happened instead.
fn outcome(result: &Evaluation, policy: &str) -> String {
    let prefix = format!("{policy}: ");
    if result.allowed {
        if result.warnings.iter().any(|w| w.starts_with(&prefix)) {
            return "warn".into();
        }
        return "pass".into();
    }
    // One line per violated validation (kube-apiserver answers with the
    // first); a line repeated would be the policy judging twice.
    let denials = &result.denials;
    let by_violations = denials
        .iter()
        .all(|d| d.starts_with(&prefix) && !d.contains("policy error"));
    let repeated = (1..denials.len()).any(|i| denials[..i].contains(&denials[i]));
    if !denials.is_empty() && by_violations && !repeated {
        "fail".into()
    } else {
        format!("denied by {denials:?}")
    }
}

/// What `gpu-admission evaluate -f FILE --policies POLICIES` answers, one
/// evaluation per object, as the library's cluster admin.
fn evaluate_manifest(file: &Path, policies: &Path) -> Vec<Evaluation> {
    let args = EvaluateArgs {
        file: file.to_path_buf(),
        policies: PolicyArgs {
            policies: Some(policies.to_path_buf()),
            catalog: None,
        },
        namespace: None,
        namespace_labels: None,
        cluster: Vec::new(),
        operation: OperationArg::Create,
        old_filename: None,
        user: "kubernetes-admin".to_string(),
        groups: vec!["system:masters".to_string()],
        output: Format::Json,
        fail_on_deny: false,
        authz: None,
        at: None,
    };
    evaluate::evaluate(&args).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The control's policy with the binding and params templates, named as
/// the library's runner names them.
fn write_policy_folder(dir: &Path, library: &Path, control: &Control, binding: &str, params: &str) {
    let name = &control.policy_name;
    let resources = library.join("test-resources");
    let mut binding = read_yaml(&resources.join(binding));
    binding["metadata"]["name"] = json!(format!("{name}-binding"));
    binding["spec"]["policyName"] = json!(name);
    binding["spec"]["paramRef"]["name"] = json!(format!("{name}-params"));
    let mut params = read_yaml(&resources.join(params));
    params["metadata"]["name"] = json!(format!("{name}-params"));
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("policy.yaml"), &control.policy_yaml).unwrap();
    for (file, doc) in [("binding.yaml", &binding), ("params.yaml", &params)] {
        std::fs::write(dir.join(file), serde_yaml::to_string(doc).unwrap()).unwrap();
    }
}

/// The case's template with its `field_change_list` applied.
fn build_object(library: &Path, case: &Case) -> Result<Value, String> {
    let mut object = read_yaml(&library.join("test-resources").join(&case.template));
    for change in &case.field_change_list {
        apply_change(&mut object, change).map_err(|e| format!("{change}: {e}"))?;
    }
    Ok(object)
}

/// One `field_change_list` entry, `dotted.path.[0].key=value`, applied as
/// the library's `scripts/change-yaml-field.py` applies it: the value is
/// JSON when it parses as JSON and a string otherwise; a missing (or null)
/// level becomes a list when the next step is an index and a map
/// otherwise; a list grows with nulls up to the index.
fn apply_change(doc: &mut Value, change: &str) -> Result<(), String> {
    let [path, raw] = change.split('=').collect::<Vec<_>>()[..] else {
        return Err("not one `=`".into());
    };
    let value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
    let steps = path
        .split('.')
        .map(Step::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let (last, parents) = steps.split_last().expect("split yields one step");
    let mut node = doc;
    for (i, step) in parents.iter().enumerate() {
        let slot = step.slot(node)?;
        if slot.is_null() {
            *slot = match steps[i + 1] {
                Step::Index(_) => json!([]),
                Step::Key(_) => json!({}),
            };
        }
        node = slot;
    }
    *last.slot(node)? = value;
    Ok(())
}

#[derive(Debug)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

impl<'a> Step<'a> {
    /// `[N]` is a list index; a key starts with a letter (the script
    /// checks no more: `app.kubernetes.io/name` cannot be one key).
    fn parse(step: &'a str) -> Result<Step<'a>, String> {
        if let Some(index) = step.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            return index
                .parse()
                .map(Step::Index)
                .map_err(|_| format!("bad index {step}"));
        }
        match step.chars().next() {
            Some(c) if c.is_ascii_alphabetic() => Ok(Step::Key(step)),
            _ => Err(format!("bad field name {step:?}")),
        }
    }

    /// The value this step selects in `node`, null when it is not there yet.
    fn slot<'v>(&self, node: &'v mut Value) -> Result<&'v mut Value, String> {
        match (node, self) {
            (Value::Array(items), Step::Index(i)) => {
                if items.len() <= *i {
                    items.resize(i + 1, Value::Null);
                }
                Ok(&mut items[*i])
            }
            (Value::Object(map), Step::Key(key)) => {
                Ok(map.entry(key.to_string()).or_insert(Value::Null))
            }
            (node, step) => Err(format!("cannot take {step:?} of {node}")),
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_yaml(path: &Path) -> Value {
    serde_yaml::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn changes_are_applied_as_the_library_script_applies_them() {
    let mut pod = json!({"spec": {"containers": [{"name": "a"}]}});
    for change in [
        "spec.containers.[0].securityContext.runAsUser=1000",
        "spec.containers.[0].ports.[0].hostPort=22",
        "spec.containers.[0].image=test:latest",
        "spec.containers.[1].name=\"b\"",
        "spec.hostPID=true",
        "data.password=\"\"",
        "metadata.labels={\"admission-policy-test\": \"abc\"}",
    ] {
        apply_change(&mut pod, change).unwrap();
    }
    assert_eq!(
        pod,
        json!({
            "spec": {
                "containers": [
                    {"name": "a", "securityContext": {"runAsUser": 1000},
                     "ports": [{"hostPort": 22}], "image": "test:latest"},
                    {"name": "b"},
                ],
                "hostPID": true,
            },
            "data": {"password": ""},
            "metadata": {"labels": {"admission-policy-test": "abc"}},
        })
    );
    assert!(apply_change(&mut pod, "spec.hostPID.[0]=1").is_err());
    assert!(apply_change(&mut pod, "spec.containers.name=x").is_err());
    assert!(apply_change(&mut pod, "a=b=c").is_err());
}
