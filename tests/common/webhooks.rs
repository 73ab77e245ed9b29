//! The path a request takes in a cluster running the shipped configuration:
//! the webhook configurations of `deploy/base/` decide, as kube-apiserver
//! does, which webhooks a request is sent to (rules, namespaceSelector,
//! objectSelector, matchConditions); the mutating ones are called over TLS
//! in order and their patches applied; the validating ones, and the
//! ValidatingAdmissionPolicies `deploy/` installs for kube-apiserver to run
//! (`deploy/namespace-exemption`, `deploy/exceptions`), then judge the
//! patched object.
//!
//! ```ignore
//! let outcome = cluster_admit(&Review::create(pod).by("alice@example.com")).await;
//! assert_eq!(outcome.validated_by, ["pods.validate.gpu-admission.io"]);
//! assert!(!outcome.allowed, "{}", outcome.message());
//! ```
//!
//! Pods that claim devices through DRA need the claims in the server's
//! cache: `Cluster::start_with_claims(claims)` with a `StaticClaims`.
//! GpuPolicyExceptions come from a lookup and feed metrics:
//! `Cluster::start_with_exceptions(lookup, metrics, counter)`.
//!
//! The webhooks' own matching is not reimplemented here: each webhook is
//! compiled into a ValidatingAdmissionPolicy with the same rules,
//! selectors, matchPolicy, failurePolicy and matchConditions, and the
//! crate's policy engine (whose matching and matchConditions follow
//! kube-apiserver) says whether it applies.
use super::{config, TestServer};
use base64::Engine as _;
use gpu_admission::admission::{Admission, Bundle, ExceptedCounter};
use gpu_admission::bundle::{self, PolicySource};
use gpu_admission::exceptions::ExceptionLookup;
use gpu_admission::gpu::NodeLookup;
use gpu_admission::k8s::{ClaimLookup, NamespaceLookup, StaticClaims};
use gpu_admission::offline::{build_request, with_evaluation_stack};
use gpu_admission::policy::{Document, PolicySet, Source};
use gpu_admission::review::{Operation, Request};
use gpu_admission::server::Metrics;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// The user most tests create objects as: an ordinary authenticated user.
pub const ALICE: &str = "alice@example.com";

/// One request as a client makes it: what kube-apiserver turns into an
/// AdmissionReview.
#[derive(Clone, Debug)]
pub struct Review {
    pub operation: Operation,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    /// `ephemeralcontainers`, `status`, ...; empty for the main resource.
    pub sub_resource: String,
    /// Labels of the request's namespace; `kubernetes.io/metadata.name` is
    /// added as kube-apiserver does.
    pub namespace_labels: BTreeMap<String, String>,
    pub username: String,
    pub groups: Vec<String>,
    /// `kubectl create --dry-run=server`.
    pub dry_run: bool,
}

impl Review {
    /// `kubectl create` of `object` by [`ALICE`].
    pub fn create(object: Value) -> Review {
        Review {
            operation: Operation::Create,
            object: Some(object),
            old_object: None,
            sub_resource: String::new(),
            namespace_labels: BTreeMap::new(),
            username: ALICE.to_string(),
            groups: vec!["system:authenticated".to_string()],
            dry_run: false,
        }
    }

    /// An update from `old` to `new` by [`ALICE`].
    pub fn update(old: Value, new: Value) -> Review {
        Review {
            operation: Operation::Update,
            old_object: Some(old),
            ..Review::create(new)
        }
    }

    /// The request goes to a subresource (`pods/ephemeralcontainers`).
    pub fn subresource(mut self, sub_resource: &str) -> Review {
        self.sub_resource = sub_resource.to_string();
        self
    }

    /// A dry run: judged, never stored.
    pub fn dry_run(mut self) -> Review {
        self.dry_run = true;
        self
    }

    /// Made by `username`, in `system:authenticated` plus `groups`.
    pub fn by(mut self, username: &str, groups: &[&str]) -> Review {
        self.username = username.to_string();
        self.groups = std::iter::once("system:authenticated")
            .chain(groups.iter().copied())
            .map(str::to_string)
            .collect();
        self
    }

    /// Labels of the namespace the object is in.
    pub fn namespace_labels(mut self, labels: &[(&str, &str)]) -> Review {
        self.namespace_labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self
    }

    /// The request kube-apiserver would send to a webhook for this review.
    pub fn request(&self, uid: &str) -> Request {
        let mut req = build_request(
            self.object.clone().unwrap_or(Value::Null),
            self.old_object.clone(),
            self.operation,
            None,
        );
        req.uid = uid.to_string();
        let sub = (!self.sub_resource.is_empty()).then(|| self.sub_resource.clone());
        req.sub_resource = sub.clone();
        req.request_sub_resource = sub;
        req.user_info = json!({"username": self.username, "groups": self.groups});
        req.dry_run = self.dry_run;
        req.options = Some(match self.operation {
            Operation::Create => json!({"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}),
            Operation::Update => json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"}),
            _ => json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"}),
        });
        req
    }
}

/// What happened to a request in the cluster.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Mutating webhooks called, in call order (a reinvoked one twice).
    pub mutated_by: Vec<String>,
    /// Validating webhooks called.
    pub validated_by: Vec<String>,
    /// Every patch operation applied, in order.
    pub patch: Vec<json_patch::PatchOperation>,
    /// The object as stored (after every patch), if allowed or not.
    pub object: Option<Value>,
    pub allowed: bool,
    /// The webhook that denied the request, if one did
    /// (`ValidatingAdmissionPolicy` for the apiserver's own policies).
    pub denied_by: Option<String>,
    /// The denial's message as the webhook wrote it.
    pub denial: Option<String>,
    /// Warnings of every webhook called.
    pub warnings: Vec<String>,
    /// `auditAnnotations` of the validating webhooks' answers.
    pub audit_annotations: BTreeMap<String, String>,
}

impl Outcome {
    /// Whether any webhook was called at all.
    pub fn sent(&self) -> bool {
        !self.mutated_by.is_empty() || !self.validated_by.is_empty()
    }

    /// The denial message, or "" when allowed.
    pub fn message(&self) -> &str {
        self.denial.as_deref().unwrap_or("")
    }
}

/// A server with the shipped policies behind the shipped webhook
/// configurations, and the namespaces the requests name.
pub struct Cluster {
    server: TestServer,
    namespaces: Arc<Namespaces>,
    mutating: Vec<Webhook>,
    validating: Vec<Webhook>,
    /// The ValidatingAdmissionPolicies `deploy/` installs, which
    /// kube-apiserver runs itself (deploy/namespace-exemption,
    /// deploy/exceptions).
    native: PolicySet,
}

/// Starts a [`Cluster`], admits `review` and stops it.
pub async fn cluster_admit(review: &Review) -> Outcome {
    let cluster = Cluster::start().await;
    let outcome = cluster.admit(review).await;
    cluster.stop().await;
    outcome
}

impl Cluster {
    /// The policies of `policies/` behind `deploy/base/`'s webhooks.
    pub async fn start() -> Cluster {
        let dir = root().join("policies");
        let loaded = bundle::load(&PolicySource::Dir(dir)).expect("policies/ loads");
        Cluster::start_with(loaded.bundle).await
    }

    /// The policies of `policies/` behind `deploy/base/`'s webhooks, with
    /// the ResourceClaims and ResourceClaimTemplates of `claims` in the
    /// server's claim cache, as its reflectors hold them once they exist.
    pub async fn start_with_claims(claims: StaticClaims) -> Cluster {
        let dir = root().join("policies");
        let loaded = bundle::load(&PolicySource::Dir(dir)).expect("policies/ loads");
        Cluster::start_serving(loaded.bundle, Some(Arc::new(claims))).await
    }

    /// `bundle` behind `deploy/base/`'s webhooks.
    pub async fn start_with(bundle: Bundle) -> Cluster {
        Cluster::start_serving(bundle, None).await
    }

    /// The policies of `policies/` behind `deploy/base/`'s webhooks, with
    /// `nodes` in the server's node cache, as its watch holds them.
    pub async fn start_with_nodes(nodes: impl NodeLookup + 'static) -> Cluster {
        let dir = root().join("policies");
        let loaded = bundle::load(&PolicySource::Dir(dir)).expect("policies/ loads");
        Cluster::start_admission(loaded.bundle, None, Some(Arc::new(nodes))).await
    }

    /// `bundle` behind `deploy/base/`'s webhooks, with `nodes` in the
    /// server's node cache.
    pub async fn start_with_bundle_and_nodes(
        bundle: Bundle,
        nodes: impl NodeLookup + 'static,
    ) -> Cluster {
        Cluster::start_admission(bundle, None, Some(Arc::new(nodes))).await
    }

    /// The policies of `policies/` behind `deploy/base/`'s webhooks, Kueue's
    /// controller running as `usernames` (`serve --kueue-controller`).
    pub async fn start_with_kueue_controllers(usernames: Vec<String>) -> Cluster {
        let dir = root().join("policies");
        let loaded = bundle::load(&PolicySource::Dir(dir)).expect("policies/ loads");
        let configure = |admission: Admission| admission.with_kueue_controllers(usernames);
        Cluster::start_configured(loaded.bundle, configure, Metrics::new()).await
    }

    /// The policies of `policies/` behind `deploy/base/`'s webhooks, with
    /// the GpuPolicyExceptions of `exceptions`; what they let through is
    /// told to `counted`, and `metrics` is served on /metrics.
    pub async fn start_with_exceptions(
        exceptions: Arc<dyn ExceptionLookup>,
        metrics: Metrics,
        counted: ExceptedCounter,
    ) -> Cluster {
        let dir = root().join("policies");
        let loaded = bundle::load(&PolicySource::Dir(dir)).expect("policies/ loads");
        Cluster::start_configured(
            loaded.bundle,
            |admission| admission.with_exceptions(exceptions).on_excepted(counted),
            metrics,
        )
        .await
    }

    /// The policies of `policies/` behind `deploy/base/`'s webhooks, GPU
    /// pods judged against the GpuBudgets of `budgets` (and, with
    /// `narrowing`, placed on the sizes with room: `serve
    /// --budget-narrowing`).
    pub async fn start_with_budgets(
        budgets: Arc<dyn gpu_admission::budgets::BudgetLookup>,
        narrowing: bool,
    ) -> Cluster {
        let dir = root().join("policies");
        let loaded = bundle::load(&PolicySource::Dir(dir)).expect("policies/ loads");
        let configure = |admission: Admission| {
            (admission.with_budgets(budgets)).with_budget_narrowing(narrowing)
        };
        Cluster::start_configured(loaded.bundle, configure, Metrics::new()).await
    }

    /// The server this cluster calls.
    pub fn server(&self) -> &TestServer {
        &self.server
    }

    async fn start_serving(bundle: Bundle, claims: Option<Arc<dyn ClaimLookup>>) -> Cluster {
        Cluster::start_admission(bundle, claims, None).await
    }

    async fn start_admission(
        bundle: Bundle,
        claims: Option<Arc<dyn ClaimLookup>>,
        nodes: Option<Arc<dyn NodeLookup>>,
    ) -> Cluster {
        let configure = |mut admission: Admission| {
            if let Some(claims) = claims {
                admission = admission.with_claims(claims);
            }
            if let Some(nodes) = nodes {
                admission = admission.with_nodes(nodes);
            }
            admission
        };
        Cluster::start_configured(bundle, configure, Metrics::new()).await
    }

    async fn start_configured(
        bundle: Bundle,
        configure: impl FnOnce(Admission) -> Admission,
        metrics: Metrics,
    ) -> Cluster {
        let namespaces = Arc::new(Namespaces::default());
        let admission = configure(Admission::new(bundle, namespaces.clone()));
        let server = TestServer::start_with_metrics(config(), Arc::new(admission), metrics).await;
        Cluster {
            server,
            namespaces,
            mutating: Webhook::load(&root().join("deploy/base/mutating-webhook.yaml")),
            validating: Webhook::load(&root().join("deploy/base/validating-webhook.yaml")),
            native: native_policies(),
        }
    }

    pub async fn stop(self) {
        self.server.stop().await;
    }

    /// Which webhooks kube-apiserver would send `req` to, of `webhooks`;
    /// `Err` when a matchCondition fails to evaluate under failurePolicy
    /// Fail (the apiserver then rejects the request).
    fn sent_to<'w>(
        &self,
        webhooks: &'w [Webhook],
        req: &Request,
    ) -> Result<Vec<&'w Webhook>, String> {
        let mut sent = Vec::new();
        for webhook in webhooks {
            if webhook.applies(req, &*self.namespaces)? {
                sent.push(webhook);
            }
        }
        Ok(sent)
    }

    /// Admits `review` as kube-apiserver would: mutating webhooks in order
    /// (reinvoked once when a later one changed the object and their
    /// reinvocationPolicy is IfNeeded), then every validating webhook on
    /// the result.
    pub async fn admit(&self, review: &Review) -> Outcome {
        let mut req = review.request("review");
        if let Some(ns) = req.namespace.clone() {
            let mut labels = review.namespace_labels.clone();
            labels.insert("kubernetes.io/metadata.name".to_string(), ns.clone());
            self.namespaces.insert(&ns, labels);
        }
        let mut outcome = Outcome {
            allowed: true,
            ..Outcome::default()
        };
        // Mutation: each webhook in order; then those with
        // reinvocationPolicy IfNeeded once more if another webhook changed
        // the object after their call.
        let mut calls: Vec<(usize, usize)> = Vec::new(); // (webhook, call number)
        let mut changes: Vec<(usize, usize)> = Vec::new(); // (webhook, call number)
        let mut reinvoking = false;
        loop {
            for (i, webhook) in self.mutating.iter().enumerate() {
                if reinvoking {
                    let first = calls.iter().find(|(w, _)| *w == i).map(|(_, n)| *n);
                    let changed_later =
                        first.is_some_and(|at| changes.iter().any(|&(by, n)| by != i && n > at));
                    if !(webhook.reinvoke && changed_later) {
                        continue;
                    }
                }
                match webhook.applies(&req, &*self.namespaces) {
                    Err(e) => return outcome.denied(&webhook.name, e),
                    Ok(false) => continue,
                    Ok(true) => {}
                }
                let number = calls.len() + 1;
                calls.push((i, number));
                outcome.mutated_by.push(webhook.name.clone());
                let answer = self.call(webhook, &req).await;
                outcome.warnings.extend(answer.warnings.iter().cloned());
                if !answer.allowed {
                    outcome.object = req.object.clone();
                    return outcome.denied(&webhook.name, answer.message);
                }
                if let (Some(ops), Some(object)) = (answer.patch, req.object.as_mut()) {
                    let before = object.clone();
                    json_patch::patch(object, &ops).unwrap_or_else(|e| {
                        panic!("{}: the patch does not apply: {e}: {ops:?}", webhook.name)
                    });
                    if *object != before {
                        changes.push((i, number));
                    }
                    outcome.patch.extend(ops.0);
                }
            }
            if reinvoking || changes.is_empty() {
                break;
            }
            reinvoking = true;
        }
        outcome.object = req.object.clone();
        // Validation: the apiserver's own policies, and every matching
        // webhook, see the final object.
        let verdict = with_evaluation_stack(|| self.native.evaluate(&req, &*self.namespaces))
            .expect("evaluation thread");
        outcome.warnings.extend(verdict.warnings);
        if let Some(denial) = verdict.denials.first() {
            return outcome.denied("ValidatingAdmissionPolicy", denial.clone());
        }
        let sent = match self.sent_to(&self.validating, &req) {
            Ok(sent) => sent,
            Err(e) => return outcome.denied("matchConditions", e),
        };
        for webhook in sent {
            outcome.validated_by.push(webhook.name.clone());
            let answer = self.call(webhook, &req).await;
            outcome.warnings.extend(answer.warnings.iter().cloned());
            outcome
                .audit_annotations
                .extend(answer.audit_annotations.clone());
            if !answer.allowed && outcome.allowed {
                outcome = outcome.denied(&webhook.name, answer.message);
            }
        }
        outcome
    }

    async fn call(&self, webhook: &Webhook, req: &Request) -> Answer {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": req,
        });
        let (status, answer) = self.server.post_review(&webhook.path, &body).await;
        assert_eq!(status, 200, "{}: {answer}", webhook.name);
        let response = &answer["response"];
        assert_eq!(response["uid"], req.uid.as_str(), "{}", webhook.name);
        let patch = response["patch"].as_str().map(|encoded| {
            assert_eq!(response["patchType"], "JSONPatch");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .expect("base64 patch");
            serde_json::from_slice(&bytes).expect("RFC 6902 patch")
        });
        Answer {
            allowed: response["allowed"] == true,
            message: response["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            warnings: response["warnings"]
                .as_array()
                .map(|w| {
                    w.iter()
                        .filter_map(|w| w.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            audit_annotations: response["auditAnnotations"]
                .as_object()
                .map(|a| {
                    a.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default(),
            patch,
        }
    }
}

impl Outcome {
    fn denied(mut self, by: &str, message: String) -> Outcome {
        self.allowed = false;
        self.denied_by = Some(by.to_string());
        self.denial = Some(message);
        self
    }
}

struct Answer {
    allowed: bool,
    message: String,
    warnings: Vec<String>,
    audit_annotations: BTreeMap<String, String>,
    patch: Option<json_patch::Patch>,
}

/// One entry of a webhook configuration.
pub struct Webhook {
    pub name: String,
    /// `clientConfig.service.path`.
    pub path: String,
    reinvoke: bool,
    fail_open: bool,
    /// The entry as a ValidatingAdmissionPolicy that fails exactly when the
    /// entry applies.
    matcher: PolicySet,
}

impl Webhook {
    /// Every webhook of the configuration in `file`.
    pub fn load(file: &Path) -> Vec<Webhook> {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let config: Value = serde_yaml::from_str(&text).unwrap();
        config["webhooks"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: no webhooks", file.display()))
            .iter()
            .map(|w| Webhook::new(file, w))
            .collect()
    }

    fn new(file: &Path, w: &Value) -> Webhook {
        let name = w["name"].as_str().expect("webhook name").to_string();
        let failure_policy = w["failurePolicy"].as_str().unwrap_or("Fail");
        let mut constraints = json!({
            "resourceRules": w["rules"],
            "matchPolicy": w["matchPolicy"].as_str().unwrap_or("Equivalent"),
        });
        for selector in ["namespaceSelector", "objectSelector"] {
            if !w[selector].is_null() {
                constraints[selector] = w[selector].clone();
            }
        }
        let mut spec = json!({
            "failurePolicy": failure_policy,
            "matchConstraints": constraints,
            "validations": [{"expression": "false", "message": SENT}],
        });
        if !w["matchConditions"].is_null() {
            spec["matchConditions"] = w["matchConditions"].clone();
        }
        let document = |n: usize, value: Value| Document {
            source: Source {
                file: PathBuf::from(file),
                document: n,
                line: 1,
            },
            value,
        };
        let docs = [
            document(
                1,
                json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingAdmissionPolicy",
                    "metadata": {"name": name},
                    "spec": spec,
                }),
            ),
            document(
                2,
                json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": name},
                    "spec": {"policyName": name, "validationActions": ["Deny"]},
                }),
            ),
        ];
        let matcher = PolicySet::compile(&docs)
            .unwrap_or_else(|e| panic!("{}: webhook {name}: {e}", file.display()));
        Webhook {
            path: w["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or("/")
                .to_string(),
            reinvoke: w["reinvocationPolicy"] == "IfNeeded",
            fail_open: failure_policy == "Ignore",
            matcher,
            name,
        }
    }

    /// Whether kube-apiserver sends `req` to this webhook. A matchCondition
    /// that fails to evaluate skips the webhook under failurePolicy
    /// Ignore and rejects the request under Fail.
    pub fn applies(&self, req: &Request, namespaces: &dyn NamespaceLookup) -> Result<bool, String> {
        let verdict = with_evaluation_stack(|| self.matcher.evaluate(req, namespaces))
            .expect("evaluation thread");
        // The engine also runs pod policies on a controller's template pod
        // (those lines carry a `Kind name: ` prefix); a webhook has no such
        // thing, so only the lines about the request itself count.
        let sent = format!("{}: {SENT}", self.name);
        let error = format!("{}: policy error", self.name);
        if verdict.denials.contains(&sent) {
            return Ok(true);
        }
        match verdict.denials.iter().find(|d| d.starts_with(&error)) {
            None => Ok(false),
            Some(_) if self.fail_open => Ok(false),
            Some(d) => Err(format!(
                "failed calling webhook \"{}\": matchCondition error: {d}",
                self.name
            )),
        }
    }
}

const SENT: &str = "sent";

/// The ValidatingAdmissionPolicies of `deploy/namespace-exemption/policy`
/// and `deploy/exceptions/policy`.
fn native_policies() -> PolicySet {
    let mut docs = Vec::new();
    for dir in [
        "deploy/namespace-exemption/policy",
        "deploy/exceptions/policy",
    ] {
        docs.extend(
            gpu_admission::policy::read_documents(&root().join(dir)).expect("native policies read"),
        );
    }
    PolicySet::compile(&docs).expect("native policies compile")
}

/// The repository root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The namespaces requests have named so far, with their labels.
#[derive(Default)]
struct Namespaces {
    labels: RwLock<BTreeMap<String, BTreeMap<String, String>>>,
}

impl Namespaces {
    fn insert(&self, name: &str, labels: BTreeMap<String, String>) {
        self.labels
            .write()
            .unwrap()
            .insert(name.to_string(), labels);
    }
}

impl NamespaceLookup for Namespaces {
    fn namespace(&self, name: &str) -> Option<Arc<Value>> {
        let labels = self.labels.read().unwrap().get(name)?.clone();
        Some(Arc::new(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        })))
    }
}
