//! Policy exceptions: `GpuPolicyException` objects that let named objects
//! of one namespace through named policies, with a reason, an optional
//! end, and who asked. Who may create one is decided by kube-apiserver
//! (the `gpu-admission-exceptions` ValidatingAdmissionPolicy in
//! `deploy/exceptions/`), never by this module; it reads them, matches
//! them to requests, and says when they stop applying.
//!
//! An exception applies to a request when it is in the request's
//! namespace, is not expired, and its `match` takes the request's object
//! (kinds, names, label selector: all that are set). Its CEL `expression`,
//! when set, is evaluated by the policy engine, which has the request's
//! variables ([`Exception::expression`]).
use crate::cel::{self, Compiled, Env};
use crate::k8s::doc::{from_value, Object};
use crate::k8s::json::{labels_of, str_at, FieldError};
use crate::k8s::labels::{LabelSelector, LabelSelectorDoc};
use crate::review::Request;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub mod webhook;

/// The API group, version and kind of the documents.
pub const GROUP: &str = "gpu-admission.io";
pub const API_VERSION: &str = "gpu-admission.io/v1alpha1";
pub const KIND: &str = "GpuPolicyException";
/// The resource (plural) kube-apiserver serves them as.
pub const RESOURCE: &str = "gpupolicyexceptions";

/// `spec.policies` entry that names every policy (admins only: the guard
/// policy refuses it from anyone else).
pub const ALL_POLICIES: &str = "*";

/// Policies no exception ever covers, whatever it names: the guards of
/// the exempt label and of exceptions themselves (run by kube-apiserver,
/// and named here so that an offline evaluation of them cannot be
/// excepted either).
pub const NEVER_EXCEPTED: &[&str] = &["gpu-admission-exempt-label", "gpu-admission-exceptions"];

/// How long before its end an exception is listed as expiring soon.
pub const EXPIRING_SOON: Duration = Duration::from_secs(7 * 86_400);

/// Most entries of `spec.policies`, `spec.match.kinds` and
/// `spec.match.names` (as the CRD's schema says).
const MAX_ITEMS: usize = 32;
/// Longest `spec.reason` (as the CRD's schema says).
const MAX_REASON: usize = 1024;

/// One `GpuPolicyException`, read and compiled.
#[derive(Debug)]
pub struct Exception {
    pub namespace: String,
    pub name: String,
    /// Policy names, or [`ALL_POLICIES`].
    pub policies: Vec<String>,
    /// Kinds of the object under admission; empty: any.
    pub kinds: Vec<String>,
    /// Object names, exact or with `*` wildcards; empty: any.
    pub names: Vec<String>,
    /// Over the object's own labels; `None`: any.
    pub selector: Option<LabelSelector>,
    /// CEL over the variables policies see; true to match.
    pub expression: Option<Compiled>,
    pub reason: String,
    /// When it stops applying, and the text it was written as.
    pub expires_at: Option<(SystemTime, String)>,
    /// Who created it (`spec.requestedBy`, checked against the creating
    /// request's user by the guard policy).
    pub requested_by: Option<String>,
}

/// Whether an exception applies at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Active,
    Expired,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Active => "active",
            State::Expired => "expired",
        }
    }
}

/// Why a document is not a valid exception: the field at fault, and for
/// a CEL expression the position inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExceptionError {
    pub field: String,
    pub message: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
}

impl ExceptionError {
    fn at(field: impl Into<String>, message: impl Into<String>) -> ExceptionError {
        ExceptionError {
            field: field.into(),
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

impl From<FieldError> for ExceptionError {
    fn from(e: FieldError) -> ExceptionError {
        ExceptionError::at(e.field, e.message)
    }
}

impl std::fmt::Display for ExceptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, "line {l}, column {c}: ")?;
        }
        f.write_str(&self.message)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SpecDoc {
    policies: Vec<String>,
    #[serde(rename = "match")]
    match_: MatchDoc,
    reason: String,
    expires_at: Option<String>,
    requested_by: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MatchDoc {
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    names: Vec<String>,
    selector: Option<LabelSelectorDoc>,
    expression: Option<String>,
}

/// Reads one `GpuPolicyException` object (`value`, as YAML or the API
/// gives it) with `env` for its expression. The expression is compiled
/// on the calling thread, which needs the compile stack
/// ([`cel::on_compile_stack`]). Every error found, each at its field.
pub fn read_here(value: &Value, env: &Env) -> Result<Exception, Vec<ExceptionError>> {
    let object: Object<SpecDoc> = from_value(value).map_err(|e| vec![e.into()])?;
    let mut errors = Vec::new();
    let meta = object.metadata;
    if meta.name.is_empty() {
        errors.push(ExceptionError::at("metadata.name", "required"));
    }
    let namespace = meta.namespace.clone().unwrap_or_default();
    let Some(spec) = object.spec else {
        errors.push(ExceptionError::at("spec", "required"));
        return Err(errors);
    };
    if spec.policies.is_empty() {
        errors.push(ExceptionError::at(
            "spec.policies",
            "name at least one policy (or \"*\" for every policy)",
        ));
    }
    for (field, list) in [
        ("spec.policies", &spec.policies),
        ("spec.match.kinds", &spec.match_.kinds),
        ("spec.match.names", &spec.match_.names),
    ] {
        if list.len() > MAX_ITEMS {
            errors.push(ExceptionError::at(
                field,
                format!("at most {MAX_ITEMS} entries, not {}", list.len()),
            ));
        }
        for (i, item) in list.iter().enumerate() {
            if item.trim().is_empty() {
                errors.push(ExceptionError::at(format!("{field}[{i}]"), "empty"));
            }
        }
    }
    for (i, policy) in spec.policies.iter().enumerate() {
        if NEVER_EXCEPTED.contains(&policy.as_str()) {
            errors.push(ExceptionError::at(
                format!("spec.policies[{i}]"),
                format!(
                    "{policy} guards exemptions and exceptions themselves and cannot be excepted"
                ),
            ));
        }
    }
    if spec.reason.trim().is_empty() {
        errors.push(ExceptionError::at(
            "spec.reason",
            "required: say why the objects need the exception (it is shown with every request it allows)",
        ));
    } else if spec.reason.len() > MAX_REASON {
        errors.push(ExceptionError::at(
            "spec.reason",
            format!("at most {MAX_REASON} bytes"),
        ));
    }
    let has_selector = spec.match_.selector.is_some();
    let selector = (spec.match_.selector).and_then(|doc| {
        let selector = doc.validate("spec.match.selector");
        selector.map_err(|e| errors.push(e.into())).ok()
    });
    let expression = (spec.match_.expression.as_deref()).and_then(|source| {
        let compiled = cel::compile_here(env, source).map_err(|e| ExceptionError {
            field: "spec.match.expression".to_string(),
            message: e.message,
            line: e.line,
            column: e.column,
        });
        compiled.map_err(|e| errors.push(e)).ok()
    });
    if spec.match_.names.is_empty() && !has_selector && spec.match_.expression.is_none() {
        errors.push(ExceptionError::at(
            "spec.match",
            "set at least one of names, selector or expression: an exception names the objects it lets through",
        ));
    }
    let expires_at = spec.expires_at.and_then(|text| match parse_time(&text) {
        Some(at) => Some((at, text)),
        None => {
            let message = format!("{text:?} is not an RFC 3339 time such as 2026-12-31T00:00:00Z");
            errors.push(ExceptionError::at("spec.expiresAt", message));
            None
        }
    });
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Exception {
        namespace,
        name: meta.name,
        policies: spec.policies,
        kinds: spec.match_.kinds,
        names: spec.match_.names,
        selector,
        expression,
        reason: spec.reason,
        expires_at,
        requested_by: spec.requested_by.filter(|s| !s.is_empty()),
    })
}

/// [`read_here`] on a thread of its own with the compile stack.
pub fn read(value: &Value, env: &Env) -> Result<Exception, Vec<ExceptionError>> {
    cel::on_compile_stack(|| read_here(value, env))
        .unwrap_or_else(|e| Err(vec![ExceptionError::at("", e)]))
}

/// An RFC 3339 time (`2026-12-31T00:00:00Z`, with an offset or fraction).
pub fn parse_time(text: &str) -> Option<SystemTime> {
    text.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(SystemTime::from)
}

impl Exception {
    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Whether it names `policy` (directly or by `*`); never a policy of
    /// [`NEVER_EXCEPTED`].
    pub fn covers(&self, policy: &str) -> bool {
        !NEVER_EXCEPTED.contains(&policy)
            && self
                .policies
                .iter()
                .any(|p| p == ALL_POLICIES || p == policy)
    }

    pub fn state(&self, now: SystemTime) -> State {
        match &self.expires_at {
            Some((at, _)) if *at <= now => State::Expired,
            _ => State::Active,
        }
    }

    /// Whether it ends within [`EXPIRING_SOON`] of `now` (and has not
    /// ended yet).
    pub fn expiring_soon(&self, now: SystemTime) -> bool {
        self.expires_at
            .as_ref()
            .is_some_and(|(at, _)| *at > now && *at <= now + EXPIRING_SOON)
    }

    /// Whether its kinds, names and selector take the object of `req`
    /// (the object under admission; its old object on DELETE), in
    /// `namespace`. The expression is not evaluated here.
    pub fn matches_object(&self, req: &Request, namespace: &str) -> bool {
        let object = req.object.as_ref().or(req.old_object.as_ref());
        let name = || {
            (object.map(|o| str_at(o, "/metadata/name")))
                .filter(|n| !n.is_empty())
                .unwrap_or(&req.name)
        };
        self.namespace == namespace
            && (self.kinds.is_empty() || self.kinds.contains(&req.kind.kind))
            && (self.names.is_empty() || self.names.iter().any(|p| glob_matches(p, name())))
            && (self.selector.as_ref()).is_none_or(|s| s.matches(&labels_of(object)))
    }

    /// How it is shown beside what it allowed: `GpuPolicyException
    /// ns/name (reason; expires 2026-12-31T00:00:00Z)`.
    pub fn describe(&self) -> String {
        let expiry = self.expires_at.as_ref().map(|(_, text)| text.as_str());
        format!(
            "GpuPolicyException {}",
            with_reason(&self.id(), &self.reason, expiry)
        )
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of
/// characters (none included) and every other character for itself.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || !name.ends_with(last) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

/// Where the exceptions of a namespace come from: the cluster (a watch
/// cache), or documents known up front.
pub trait ExceptionLookup: Send + Sync {
    /// The exceptions of `namespace`, expired ones included.
    fn in_namespace(&self, namespace: &str) -> Arc<[Arc<Exception>]>;

    /// Every exception known, for the report and the metrics.
    fn all(&self) -> Vec<Arc<Exception>>;

    /// The time exceptions are judged at (their clock, for tests).
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// No exceptions at all.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoExceptions;

impl ExceptionLookup for NoExceptions {
    fn in_namespace(&self, _: &str) -> Arc<[Arc<Exception>]> {
        Arc::from([])
    }

    fn all(&self) -> Vec<Arc<Exception>> {
        Vec::new()
    }
}

/// Exceptions known up front (from a policy folder or a manifest), judged
/// at the wall clock or at a fixed time.
#[derive(Clone, Debug, Default)]
pub struct StaticExceptions {
    exceptions: Vec<Arc<Exception>>,
    at: Option<SystemTime>,
}

impl StaticExceptions {
    pub fn new(exceptions: Vec<Arc<Exception>>) -> StaticExceptions {
        StaticExceptions {
            exceptions,
            at: None,
        }
    }

    /// Judged at `at` instead of the wall clock.
    pub fn at(mut self, at: SystemTime) -> StaticExceptions {
        self.at = Some(at);
        self
    }
}

impl ExceptionLookup for StaticExceptions {
    fn in_namespace(&self, namespace: &str) -> Arc<[Arc<Exception>]> {
        self.exceptions
            .iter()
            .filter(|e| e.namespace == namespace)
            .cloned()
            .collect()
    }

    fn all(&self) -> Vec<Arc<Exception>> {
        self.exceptions.clone()
    }

    fn now(&self) -> SystemTime {
        self.at.unwrap_or_else(SystemTime::now)
    }
}

/// The exceptions that may let `req` (in `namespace`) through, at `now`:
/// in its namespace, not expired, and whose kinds, names and selector take
/// its object. Their expressions are left to the policy engine.
pub fn candidates(
    lookup: &dyn ExceptionLookup,
    extra: &[Arc<Exception>],
    req: &Request,
    namespace: &str,
    now: SystemTime,
) -> Vec<Arc<Exception>> {
    let found = lookup.in_namespace(namespace);
    found
        .iter()
        .chain(extra)
        .filter(|e| e.state(now) == State::Active && e.matches_object(req, namespace))
        .cloned()
        .collect()
}

/// One policy result an exception turned: the request would have been
/// denied (or warned, or audited) by `policy` and was let through. The
/// offline commands show it as it is (JSON and YAML in camelCase).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Excepted {
    pub policy: Arc<str>,
    /// The exception's `namespace/name`.
    pub exception: String,
    pub reason: String,
    /// As written in the exception.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The line the policy said (`<policy>: <message>`, with its template
    /// prefix).
    pub message: String,
    /// What the binding would have done: `Deny`, `Warn` or `Audit`.
    pub action: &'static str,
}

impl Excepted {
    /// `allowed by exception ns/name (reason; expires ...)`.
    pub fn allowed_by(&self) -> String {
        let expiry = self.expires_at.as_deref();
        format!(
            "allowed by exception {}",
            with_reason(&self.exception, &self.reason, expiry)
        )
    }
}

/// `ns/name (reason; expires ...)`, or `(reason; no expiry)`.
fn with_reason(id: &str, reason: &str, expires_at: Option<&str>) -> String {
    let expiry = expires_at.map_or("no expiry".to_string(), |at| format!("expires {at}"));
    format!("{id} ({}; {expiry})", reason.trim())
}

#[cfg(test)]
mod tests;
