//! Offline policy tests: `PolicyTest` documents run against a loaded bundle
//! exactly as the webhook would answer (mutation first, then validation of
//! the mutated object).
use crate::admission::{Admission, Bundle};
use crate::authz::{Authorizer, NoAuthorizer};
use crate::budgets::{self, StaticBudgets};
use crate::exceptions::{self, StaticExceptions};
use crate::gpu::StaticNodes;
use crate::k8s::claims::{ClaimKind, StaticClaims};
use crate::k8s::doc::from_value_with_nulls;
use crate::k8s::json::{labels_of, str_at};
use crate::k8s::namespaces::{with_name_label, StaticNamespaces};
use crate::offline::{self, build_request};
use crate::policy::{Document, LoadError, LoadErrors};
use crate::review::Operation;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

mod exceptions_in_tests;
use exceptions_in_tests::{check_excepted, test_exceptions, ExpectedException};

/// One `PolicyTest` document.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyTest {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(default)]
    metadata: Metadata,
    spec: TestSpec,
}

#[derive(Debug, Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct TestSpec {
    #[serde(default)]
    namespaces: Vec<NamespaceSpec>,
    /// ResourceClaims and ResourceClaimTemplates in the cluster, for the
    /// cases' pods to claim (`spec.resourceClaims`).
    #[serde(default)]
    resource_claims: Vec<Value>,
    /// Nodes in the cluster, as the server's node cache holds them
    /// (`spec.nodes`): without them, pods are judged by labels alone.
    #[serde(default)]
    nodes: Vec<Value>,
    /// ValidatingAdmissionPolicyBindings and MutatingAdmissionPolicyBindings
    /// in force for this test's cases only: to test a policy the folder
    /// ships unbound (`policies/examples/`).
    #[serde(default)]
    bindings: Vec<Value>,
    /// GpuPolicyExceptions in the cluster for this test's cases: each an
    /// inline document, or `{file: PATH}` (relative to the test file) for
    /// every GpuPolicyException of a manifest.
    #[serde(default)]
    exceptions: Vec<Value>,
    /// What GpuBudgets count in the cluster (`spec.cluster`): GpuBudgets,
    /// the Pods holding GPUs and Namespaces, each inline or `{file: PATH}`
    /// for every object of a manifest or dump, as `evaluate --cluster`
    /// reads one.
    #[serde(default)]
    cluster: Vec<Value>,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NamespaceSpec {
    name: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Case {
    name: String,
    operation: Option<Operation>,
    namespace: Option<String>,
    object: Option<Value>,
    file: Option<String>,
    old_object: Option<Value>,
    user_info: Option<Value>,
    /// `ephemeralcontainers`, `status`, ...: the request is for that
    /// subresource of the object.
    sub_resource: Option<String>,
    /// The time exceptions are judged at (RFC 3339); default: now.
    at: Option<String>,
    #[serde(default)]
    expect: Expect,
}

/// What a case expects; `warnings` is refused before anything else is
/// read, so an `Expect` equal to the default checks nothing.
#[derive(Debug, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
struct Expect {
    allowed: Option<bool>,
    /// `{policy, message}` entries; checked by [`expected_messages`].
    denied: Vec<Value>,
    warned: Vec<Value>,
    /// The old name of `warned`, refused with a message showing the new form.
    warnings: Option<Value>,
    only_policies: Option<Vec<String>>,
    not_policies: Vec<String>,
    no_warnings: bool,
    audit: BTreeMap<String, String>,
    patched: Option<Value>,
    no_patch: bool,
    /// The MutatingAdmissionPolicies that changed the object, in the order
    /// they ran; `[]` means none did.
    mutated_by: Option<Vec<String>>,
    /// `{policy, exception}` entries: what exceptions let through, all of
    /// it; `[]` means nothing. Without it, any exception letting the object
    /// through fails the case.
    excepted: Option<Vec<ExpectedException>>,
}

/// One expected denial or warning: the policy it comes from, or the
/// GpuBudget (`namespace/name`), and optionally a substring of its message.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    #[serde(default)]
    policy: String,
    #[serde(default)]
    budget: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

impl Expected {
    /// Whether `line` (`<policy>: <message>`, as the webhook writes each
    /// denial and warning, or a budget's `GpuBudget <ns>/<name> allows ...`)
    /// comes from this policy or budget and contains the message.
    fn matches(&self, line: &str) -> bool {
        let want = self.message.as_deref();
        if let Some(budget) = &self.budget {
            let from = budget_line(line) && line.contains(&format!("GpuBudget {budget} allows "));
            return from && want.is_none_or(|want| line.contains(want));
        }
        !budget_line(line)
            && line.split_once(": ").is_some_and(|(policy, message)| {
                policy == self.policy && want.is_none_or(|want| message.contains(want))
            })
    }
}

/// Whether a denial or warning line is a GpuBudget's (a pod's, or a
/// template's after its `Kind name: ` prefix, which no policy name is).
fn budget_line(line: &str) -> bool {
    let template =
        |(kind, rest): (&str, &str)| kind.contains(' ') && rest.starts_with("GpuBudget ");
    line.starts_with("GpuBudget ") || line.split_once(": ").is_some_and(template)
}

impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = match &self.budget {
            Some(budget) => format!("GpuBudget {budget}"),
            None => self.policy.clone(),
        };
        match &self.message {
            Some(m) => write!(f, "{from}: {m:?}"),
            None => write!(f, "{from}"),
        }
    }
}

/// The entries of `expect.denied` or `expect.warned`. A plain string (the
/// old form, which any policy's message could satisfy) is refused with the
/// form to write instead.
fn expected_messages(field: &str, entries: &[Value]) -> Result<Vec<Expected>, String> {
    let mut out = Vec::new();
    let mut policy_hint: Option<String> = None;
    for (i, entry) in entries.iter().enumerate() {
        if let Value::String(s) = entry {
            let (policy, message) = match s.split_once(':') {
                Some((p, m)) if !p.contains(' ') && !p.is_empty() => {
                    (p.to_string(), m.trim().to_string())
                }
                _ => (
                    policy_hint.clone().unwrap_or_else(|| "POLICY".into()),
                    s.clone(),
                ),
            };
            let example = if message.is_empty() {
                format!("{{policy: {policy}}}")
            } else {
                format!("{{policy: {policy}, message: {message:?}}}")
            };
            return Err(format!(
                "expect.{field}[{i}] is a plain string {s:?}; name the policy the message must come from: `- {example}`"
            ));
        }
        let expected: Expected = serde_json::from_value(entry.clone()).map_err(|e| {
            format!("expect.{field}[{i}]: {e}; write `- {{policy: NAME, message: SUBSTRING}}`")
        })?;
        if expected.policy.is_empty() == expected.budget.is_none() {
            return Err(format!(
                "expect.{field}[{i}]: give one of policy (a policy's message) or budget (a GpuBudget's, NAMESPACE/NAME)"
            ));
        }
        policy_hint = Some(expected.policy.clone());
        out.push(expected);
    }
    Ok(out)
}

/// A case whose expectations have been checked at load.
#[derive(Debug)]
struct Checked {
    denied: Vec<Expected>,
    warned: Vec<Expected>,
}

/// Load-time checks of one case: an expectation exists, `denied` and
/// `warned` name their policies, nothing contradicts itself.
fn check_case(case: &Case) -> Result<Checked, String> {
    let expect = &case.expect;
    if expect.warnings.is_some() {
        return Err(
            "expect.warnings was renamed: write `warned: [{policy: NAME, message: SUBSTRING}]`"
                .into(),
        );
    }
    if *expect == Expect::default() {
        return Err("the case has no expectation; give expect.allowed, denied, warned, onlyPolicies, notPolicies, noWarnings, audit, patched, noPatch, mutatedBy or excepted".into());
    }
    if let Some(at) = &case.at {
        exceptions::parse_time(at).ok_or_else(|| {
            format!("at: {at:?} is not an RFC 3339 time such as 2026-12-31T00:00:00Z")
        })?;
    }
    let denied = expected_messages("denied", &expect.denied)?;
    let warned = expected_messages("warned", &expect.warned)?;
    if expect.allowed == Some(true) && !denied.is_empty() {
        return Err("expect.allowed is true but expect.denied is given".into());
    }
    if expect.no_warnings && !warned.is_empty() {
        return Err("expect.noWarnings is true but expect.warned is given".into());
    }
    for e in denied.iter().chain(&warned).filter(|e| e.budget.is_none()) {
        if expect.not_policies.contains(&e.policy) {
            return Err(format!("{} is both expected and in notPolicies", e.policy));
        }
        if let Some(only) = &expect.only_policies {
            if !only.contains(&e.policy) {
                return Err(format!(
                    "{} is expected but not in onlyPolicies {only:?}",
                    e.policy
                ));
            }
        }
    }
    Ok(Checked { denied, warned })
}

/// The outcome of one test case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// `file: test / case`.
    pub name: String,
    /// Empty when the case passed; otherwise one line per unmet expectation.
    pub failures: Vec<String>,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Runs every case of every `PolicyTest` document against `bundle`.
///
/// The documents are checked first ([`check`]); if any has an error, no
/// case runs.
pub fn run(bundle: &Bundle, tests: &[Document]) -> Result<Vec<CaseResult>, LoadErrors> {
    run_with_authorizer(bundle, tests, Arc::new(NoAuthorizer))
}

/// Checks `PolicyTest` documents as [`run`] does before running a case:
/// a document that is not a valid `PolicyTest` is an error naming file,
/// document, line and the path of the field at fault
/// (`spec.cases[1].expect.allowed`); a case without an expectation, or
/// with a `denied` or `warned` entry that does not name its policy, is an
/// error naming file, test and case.
pub fn check(tests: &[Document]) -> Result<(), LoadErrors> {
    load(tests).map(|_| ())
}

/// [`run`], answering the policies' `authorizer` checks with `authorizer`.
pub fn run_with_authorizer(
    bundle: &Bundle,
    tests: &[Document],
    authorizer: Arc<dyn Authorizer>,
) -> Result<Vec<CaseResult>, LoadErrors> {
    let loaded = load(tests)?;
    let mut results = Vec::new();
    for LoadedTest {
        doc,
        file,
        test,
        checked,
    } in loaded
    {
        let mut namespaces = StaticNamespaces::new();
        let base = doc.source.file.parent().unwrap_or(Path::new("."));
        let cluster = test_cluster(&test.spec.cluster, base);
        let of_kind = |kind| (cluster.iter().flatten()).filter(move |o| o["kind"] == kind);
        for ns in of_kind("Namespace") {
            let name = str_at(ns, "/metadata/name");
            namespaces.insert(name, with_name_label(name, labels_of(Some(ns))));
        }
        for ns in &test.spec.namespaces {
            namespaces.insert(&ns.name, with_name_label(&ns.name, ns.labels.clone()));
        }
        // A test that cannot be set up is one failed result, named by the
        // part that failed.
        let prepared = (cluster.clone().map_err(|e| (" / spec.cluster", e)))
            .and_then(|cluster| test_claims(&test, &cluster, base).map_err(|e| ("", e)))
            .and_then(|claims| {
                let bound = with_bindings(bundle, doc, &test.spec.bindings);
                Ok((claims, bound.map_err(|e| ("", e))?))
            })
            .and_then(|(claims, bundle)| {
                match test_exceptions(&bundle, &test.spec.exceptions, base) {
                    Ok(found) => Ok((claims, bundle, found)),
                    Err(err) => Err((" / spec.exceptions", err)),
                }
            });
        let (claims, bundle, found) = match prepared {
            Ok(prepared) => prepared,
            Err((part, err)) => {
                let name = format!("{file}: {}{part}", test.metadata.name);
                results.push(CaseResult {
                    name,
                    failures: vec![err],
                });
                continue;
            }
        };
        let (namespaces, claims): (Arc<StaticNamespaces>, Arc<StaticClaims>) =
            (Arc::new(namespaces), Arc::new(claims));
        let nodes = (!test.spec.nodes.is_empty()).then(|| {
            let nodes = StaticNodes::of_objects(&test.spec.nodes, Vec::new(), &Default::default());
            Arc::new(nodes) as Arc<dyn crate::gpu::NodeLookup>
        });
        // The cluster's GpuBudgets hold what its pods hold, afresh for each
        // case (a case's pod admitted holds nothing in the next).
        let cluster = cluster.unwrap_or_default();
        let (catalog, resources) = (bundle.placement.catalog(), bundle.placement.gpu_resources());
        let budgets = || {
            let objects: Vec<&Value> = cluster.iter().chain(&test.spec.nodes).collect();
            let (namespaces, claims) = (namespaces.as_ref(), claims.as_ref());
            let nodes = nodes.as_deref();
            StaticBudgets::of_objects(&objects, namespaces, claims, nodes, catalog, resources)
        };
        // The time exceptions are judged at is the lookup's: one admission
        // per time a case asks for.
        let admission_at = |at: Option<SystemTime>| {
            let mut lookup = StaticExceptions::new(found.clone());
            if let Some(at) = at {
                lookup = lookup.at(at);
            }
            let admission = Admission::new(bundle.clone(), namespaces.clone())
                .with_budgets(Arc::new(budgets()))
                .with_claims(claims.clone())
                .with_authorizer(authorizer.clone())
                .with_exceptions(Arc::new(lookup));
            match &nodes {
                Some(nodes) => admission.with_nodes(nodes.clone()),
                None => admission,
            }
        };
        let admission = admission_at(None);
        for (case, checked) in test.spec.cases.iter().zip(&checked) {
            let name = format!("{file}: {} / {}", test.metadata.name, case.name);
            let at_admission;
            let at = case.at.as_deref().and_then(exceptions::parse_time);
            let admission = if at.is_some() || !cluster.is_empty() {
                at_admission = admission_at(at);
                &at_admission
            } else {
                &admission
            };
            let failures = match run_case(admission, case, checked, base) {
                Ok(failures) => failures,
                Err(err) => vec![err],
            };
            results.push(CaseResult { name, failures });
        }
    }
    Ok(results)
}

/// A `PolicyTest` document read, with its cases checked.
struct LoadedTest<'d> {
    doc: &'d Document,
    /// The file, as case names show it.
    file: String,
    test: PolicyTest,
    checked: Vec<Checked>,
}

/// Reads and checks every document; see [`check`].
fn load(tests: &[Document]) -> Result<Vec<LoadedTest<'_>>, LoadErrors> {
    let mut loaded = Vec::new();
    let mut errors = Vec::new();
    for doc in tests {
        let file = doc.source.file.display().to_string();
        // Nulls kept: a case's object or expected patch may hold one.
        let test: PolicyTest = match from_value_with_nulls(&doc.value) {
            Ok(t) => t,
            Err(e) => {
                errors.push(LoadError::at(&doc.source, e.field, e.message));
                continue;
            }
        };
        let mut checked = Vec::new();
        for case in &test.spec.cases {
            match check_case(case) {
                Ok(c) => checked.push(c),
                Err(err) => errors.push(LoadError::new(format!(
                    "{file}: {} / {}: {err}",
                    test.metadata.name, case.name
                ))),
            }
        }
        loaded.push(LoadedTest {
            doc,
            file,
            test,
            checked,
        });
    }
    if errors.is_empty() {
        Ok(loaded)
    } else {
        Err(LoadErrors(errors, Vec::new()))
    }
}

/// `bundle` with a test's own bindings added to its policies.
fn with_bindings(bundle: &Bundle, test: &Document, bindings: &[Value]) -> Result<Bundle, String> {
    if bindings.is_empty() {
        return Ok(bundle.clone());
    }
    const KINDS: [&str; 2] = [
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicyBinding",
    ];
    let mut docs = Vec::with_capacity(bindings.len());
    for (i, value) in bindings.iter().enumerate() {
        let doc = Document {
            source: test.source.clone(),
            value: value.clone(),
        };
        if !KINDS.contains(&doc.type_meta().1) {
            return Err(format!(
                "spec.bindings[{i}]: kind {:?} is not one of {KINDS:?}",
                doc.type_meta().1
            ));
        }
        docs.push(doc);
    }
    let policies = bundle
        .policies
        .with_documents(&docs)
        .map_err(|e| format!("spec.bindings: {e}"))?;
    Ok(Bundle {
        policies,
        ..bundle.clone()
    })
}

/// Formats results as the `test` command prints them; the last line is
/// `N passed, N failed`.
pub fn report(results: &[CaseResult], verbose: bool) -> String {
    let mut out = String::new();
    for r in results {
        if r.passed() {
            if verbose {
                let _ = writeln!(out, "PASS {}", r.name);
            }
        } else {
            let _ = writeln!(out, "FAIL {}", r.name);
            for f in &r.failures {
                let _ = writeln!(out, "     {f}");
            }
        }
    }
    let passed = results.iter().filter(|r| r.passed()).count();
    let _ = writeln!(out, "{} passed, {} failed", passed, results.len() - passed);
    out
}

fn run_case(
    admission: &Admission,
    case: &Case,
    checked: &Checked,
    base: &Path,
) -> Result<Vec<String>, String> {
    let object = match (&case.object, &case.file) {
        (Some(obj), None) => obj.clone(),
        (None, Some(file)) => read_first_document(&base.join(file))?,
        (Some(_), Some(_)) => return Err("give either object or file, not both".into()),
        (None, None) if case.old_object.is_some() => Value::Null,
        (None, None) => return Err("case has no object".into()),
    };
    let operation = case.operation.unwrap_or(Operation::Create);
    let mut req = build_request(
        object,
        case.old_object.clone(),
        operation,
        case.namespace.as_deref(),
    );
    if let Some(user) = &case.user_info {
        req.user_info = user.clone();
    }
    if let Some(sub) = case.sub_resource.as_ref().filter(|s| !s.is_empty()) {
        req.sub_resource = Some(sub.clone());
        req.request_sub_resource = Some(sub.clone());
    }

    let result = offline::evaluate(admission, req);
    let mut failures = Vec::new();
    let expect = &case.expect;
    if expect.no_patch && result.patch.is_some() {
        failures.push(format!(
            "expected no patch, got {}",
            serde_json::to_string(&result.patch).unwrap_or_default()
        ));
    }
    if let Some(want) = &expect.patched {
        match &result.patched {
            Some(got) if got == want => {}
            Some(got) => failures.push(format!(
                "patched object differs:\n{}",
                json_diff(want, got).join("\n")
            )),
            None => failures.push("expected a patched object, got no patch".to_string()),
        }
    }
    if let Some(want) = &expect.mutated_by {
        let got: Vec<&str> = result.mutations.iter().map(|m| m.policy.as_str()).collect();
        if got != *want {
            failures.push(format!("expected mutations by {want:?}, got {got:?}"));
        }
    }
    let message = result.denials.join("\n");
    let expected_allowed = expect
        .allowed
        .or((!checked.denied.is_empty()).then_some(false));
    if let Some(want) = expected_allowed {
        if want != result.allowed {
            failures.push(if want {
                format!("expected allowed, got denied: {message}")
            } else {
                "expected denied, got allowed".to_string()
            });
        }
    }
    for want in &checked.denied {
        if !result.denials.iter().any(|line| want.matches(line)) {
            failures.push(format!("no denial from {want}: {message:?}"));
        }
    }
    for want in &checked.warned {
        if !result.warnings.iter().any(|line| want.matches(line)) {
            failures.push(format!("no warning from {want}: {:?}", result.warnings));
        }
    }
    let fired = firing_policies(&result.denials, &result.warnings);
    if let Some(only) = &expect.only_policies {
        let only: BTreeSet<&str> = only.iter().map(String::as_str).collect();
        let extra: Vec<&str> = fired.difference(&only).copied().collect();
        if !extra.is_empty() {
            failures.push(format!(
                "policies outside onlyPolicies fired: {extra:?}; denials {:?}, warnings {:?}",
                result.denials, result.warnings
            ));
        }
    }
    for policy in &expect.not_policies {
        if fired.contains(policy.as_str()) {
            failures.push(format!(
                "{policy} fired (notPolicies); denials {:?}, warnings {:?}",
                result.denials, result.warnings
            ));
        }
    }
    if expect.no_warnings && !result.warnings.is_empty() {
        failures.push(format!("expected no warnings, got {:?}", result.warnings));
    }
    check_excepted(expect.excepted.as_deref(), &result.excepted, &mut failures);
    for (key, want) in &expect.audit {
        match result.audit_annotations.get(key) {
            Some(v) if v.contains(want.as_str()) => {}
            Some(v) => failures.push(format!(
                "audit annotation {key} = {v:?} does not contain {want:?}"
            )),
            None => failures.push(format!(
                "no audit annotation {key}; got {:?}",
                result.audit_annotations.keys().collect::<Vec<_>>()
            )),
        }
    }
    Ok(failures)
}

/// The policies behind a verdict's denial and warning lines
/// (`<policy>: <message>` each).
fn firing_policies<'a>(denials: &'a [String], warnings: &'a [String]) -> BTreeSet<&'a str> {
    denials
        .iter()
        .chain(warnings)
        .filter(|line| !budget_line(line))
        .filter_map(|line| line.split_once(": ").map(|(policy, _)| policy))
        .collect()
}

/// The object a `file` case judges: the file's first document that is not a
/// ResourceClaim or ResourceClaimTemplate (those are the cluster's claims,
/// see [`test_claims`]), or its first document when all are.
fn read_first_document(path: &Path) -> Result<Value, String> {
    let objects = offline::read_manifest(path).map_err(|e| e.to_string())?;
    let judged = objects.iter().position(|o| ClaimKind::of(o).is_none());
    objects
        .into_iter()
        .nth(judged.unwrap_or(0))
        .ok_or_else(|| format!("{}: no object", path.display()))
}

/// The claims a test's pods can name: `spec.resourceClaims`, those of
/// `cluster` (`spec.cluster`), and every ResourceClaim and
/// ResourceClaimTemplate of the cases' files.
fn test_claims(test: &PolicyTest, cluster: &[Value], base: &Path) -> Result<StaticClaims, String> {
    let mut claims = StaticClaims::new();
    for object in cluster {
        claims.insert(object, "default");
    }
    for (i, object) in test.spec.resource_claims.iter().enumerate() {
        if !claims.insert(object, "default") {
            return Err(format!(
                "spec.resourceClaims[{i}] is not a resource.k8s.io ResourceClaim or ResourceClaimTemplate"
            ));
        }
    }
    for case in &test.spec.cases {
        let Some(file) = &case.file else { continue };
        // An unreadable file fails its own case.
        let objects = offline::read_manifest(&base.join(file)).unwrap_or_default();
        let namespace = case.namespace.as_deref().unwrap_or("default");
        for object in objects.iter().filter(|o| ClaimKind::of(o).is_some()) {
            claims.insert(object, namespace);
        }
    }
    Ok(claims)
}

/// The objects of `spec.cluster`: each entry inline, or `{file: PATH}`
/// (relative to the test file) for every object of a manifest or dump.
/// One without `metadata.namespace` is in `default`; every GpuBudget must
/// read.
fn test_cluster(entries: &[Value], base: &Path) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let objects = match entry.get("file").and_then(Value::as_str) {
            Some(file) if entry.as_object().is_some_and(|m| m.len() == 1) => {
                offline::read_manifest(&base.join(file))
                    .map_err(|e| format!("spec.cluster[{i}]: {e}"))?
            }
            _ => vec![entry.clone()],
        };
        for mut object in objects {
            let namespace = object["kind"] == "Namespace";
            let meta = object.get_mut("metadata").and_then(Value::as_object_mut);
            if let (Some(meta), false) = (meta, namespace) {
                meta.entry("namespace").or_insert(Value::from("default"));
            }
            if object["kind"] == budgets::KIND {
                budgets::read(&object).map_err(|errors| {
                    let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    format!("spec.cluster[{i}]: {}", errors.join("; "))
                })?;
            }
            out.push(object);
        }
    }
    Ok(out)
}

/// Differences between two JSON values, one line each, by JSON pointer.
pub fn json_diff(want: &Value, got: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff_at(&mut String::new(), want, got, &mut out);
    out
}

fn diff_at(path: &mut String, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            let keys: BTreeSet<&String> = w.keys().chain(g.keys()).collect();
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                match (w.get(key), g.get(key)) {
                    (Some(a), Some(b)) => diff_at(path, a, b, out),
                    (Some(a), None) => out.push(format!("  missing {path}: want {a}")),
                    (None, Some(b)) => out.push(format!("  unexpected {path}: {b}")),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (a, b)) in w.iter().zip(g).enumerate() {
                let len = path.len();
                let _ = write!(path, "/{i}");
                diff_at(path, a, b, out);
                path.truncate(len);
            }
        }
        _ if want != got => out.push(format!(
            "  {}: want {want}, got {got}",
            if path.is_empty() { "/" } else { path }
        )),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diff_names_pointers() {
        let want = json!({"spec": {"tolerations": [{"key": "sku"}], "a": 1}});
        let got = json!({"spec": {"tolerations": [{"key": "gpu"}], "b": 2}});
        let diff = json_diff(&want, &got);
        assert_eq!(diff.len(), 3, "{diff:?}");
        assert!(diff[0].contains("/spec/a"));
        assert!(diff[1].contains("/spec/b"));
        assert!(diff[2].contains("/spec/tolerations/0/key"));
    }

    fn documents(text: &str) -> Vec<Document> {
        crate::policy::parse_documents(Path::new("tests.yaml"), text).unwrap()
    }

    const TEST: &str = "apiVersion: gpu-admission.io/v1alpha1
kind: PolicyTest
metadata: {name: t}
spec:
  cases:
    - name: first
      object: {apiVersion: v1, kind: Pod, metadata: {name: p}}
      expect: {allowed: true}
    - name: second
      object: {apiVersion: v1, kind: Pod, metadata: {name: p}}
      expect: {allowed: true}
";

    #[test]
    fn invalid_documents_name_file_document_line_and_field() {
        assert_eq!(check(&documents(TEST)), Ok(()));
        let text = format!(
            "{TEST}---\n{}---\n{}",
            TEST.replacen("expect: {allowed: true}\n    - name: second", "expect: {alowed: true}\n    - name: second", 1),
            TEST.replace("name: second\n      object: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n      expect: {allowed: true}", "name: second\n      object: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n      expect: {allowed: \"no\"}"),
        );
        let errors = check(&documents(&text)).unwrap_err().to_string();
        let lines: Vec<&str> = errors.lines().collect();
        assert_eq!(lines.len(), 2, "{errors}");
        assert!(
            lines[0].starts_with("tests.yaml: document 2 (line 13): spec.cases[0].expect.alowed: unknown field, expected one of allowed, denied"),
            "{errors}"
        );
        assert_eq!(
            lines[1],
            "tests.yaml: document 3 (line 25): spec.cases[1].expect.allowed: invalid type: string \"no\", expected a boolean",
        );
    }

    #[test]
    fn case_errors_name_file_test_and_case() {
        let text = TEST.replacen("expect: {allowed: true}", "expect: {}", 1);
        assert_eq!(
            check(&documents(&text)).unwrap_err().to_string(),
            "tests.yaml: t / first: the case has no expectation; give expect.allowed, denied, warned, onlyPolicies, notPolicies, noWarnings, audit, patched, noPatch, mutatedBy or excepted"
        );
    }

    #[test]
    fn an_expected_message_names_a_policy_or_a_budget() {
        let entry = |v: Value| expected_messages("denied", &[v]);
        let budget = entry(json!({"budget": "nlp/team-nlp", "message": "7/8"})).unwrap();
        let line = "GpuBudget nlp/team-nlp allows 8 A100 GPUs held at once; 7/8 are held";
        assert!(budget[0].matches(line));
        assert!(budget[0].matches(&format!("Deployment serve: {line}")));
        assert!(!budget[0].matches("gpu-max: GpuBudget nlp/team-nlp allows 7/8"));
        let policy = entry(json!({"policy": "GpuBudget nlp/team-nlp allows 8 A100 GPUs held at once; 7/8 are held"})).unwrap();
        assert!(!policy[0].matches(line), "a budget's line is no policy's");
        assert_eq!(firing_policies(&[line.to_string()], &[]), BTreeSet::new());
        for both in [
            json!({"policy": "p", "budget": "a/b"}),
            json!({"message": "m"}),
        ] {
            let err = entry(both).unwrap_err();
            assert!(err.contains("give one of policy"), "{err}");
        }
    }

    #[test]
    fn report_ends_with_counts() {
        let results = vec![
            CaseResult {
                name: "a".into(),
                failures: vec![],
            },
            CaseResult {
                name: "b".into(),
                failures: vec!["expected denied, got allowed".into()],
            },
        ];
        let text = report(&results, false);
        assert!(text.contains("FAIL b"));
        assert!(!text.contains("PASS a"));
        assert_eq!(text.lines().last(), Some("1 passed, 1 failed"));
    }
}
