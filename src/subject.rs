//! What a request is about, worked out once per request: the kind of
//! object, its namespace and labels, the pod a controller's template
//! describes, the DRA claims its pod names, and the object's GPU facts.
//! Placement, the policy engine, the `gpu` CEL variable and the audit all
//! read it; nothing recomputes it.
use crate::authz::{Authorizer, NoAuthorizer};
use crate::cel::gpu::gpu_tree;
use crate::cel::{Hosts, Tree};
use crate::exceptions::{self, Exception, ExceptionLookup};
use crate::gpu::capacity::PoolKind;
use crate::gpu::catalog::{Catalog, Sku};
use crate::gpu::facts::{Detail, GpuFacts, PlacementFacts, WorkloadFacts};
use crate::gpu::reach::GpuNodes;
use crate::gpu::relevance::gpu_relevant;
use crate::gpu::{GpuResources, NodeLookup};
use crate::k8s::claims::{pod_claims, NoClaims, PodClaim};
use crate::k8s::json::{labels_of, str_at};
use crate::k8s::namespaces::with_name_label;
use crate::k8s::{workloads, ClaimLookup, NamespaceLookup, TemplateSources};
use crate::kueue;
use crate::placement::{self, PodFacts, ProfileSet};
use crate::review::{GroupVersionKind, GroupVersionResource, Operation, Request};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

/// What kind of object a request is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectKind {
    Pod,
    /// A Deployment, Job, CronJob... whose template makes pods.
    Controller,
    /// A Karpenter NodePool, KAITO Workspace, ASO agent pool...
    Capacity(PoolKind),
    Other,
}

/// Pod templates one workload may hold. Each is judged as a pod is, so an
/// object with thousands (a few bytes each, within the size limit of a
/// request) would hold an answering thread for long; real workloads have
/// a handful (Argo workflows a few dozen).
pub const MAX_TEMPLATES: usize = 256;

/// Where a subject's namespace, DRA claims, the cluster's nodes and the
/// policy exceptions of its namespace are looked up, and who Kueue's
/// controller is: snapshots of the cluster, read, never changed.
#[derive(Clone, Copy)]
pub struct Lookups<'a> {
    pub namespaces: &'a dyn NamespaceLookup,
    pub claims: &'a dyn ClaimLookup,
    pub nodes: &'a dyn NodeLookup,
    pub exceptions: &'a dyn ExceptionLookup,
    /// The usernames of Kueue's controller (see [`judges_template`]).
    pub kueue: &'a [String],
}

/// What of the policy folder a subject is worked out with, and for whom.
#[derive(Clone, Copy)]
pub struct Needs<'a> {
    pub profiles: &'a ProfileSet,
    pub sources: &'a TemplateSources,
    /// For the policies: the exceptions that may apply, the template pods
    /// placed as `/mutate` will place their pods, how placement sees the
    /// pod. Else what placement reads only.
    pub policies: bool,
    /// Whether some policy reads the `gpu` variable.
    pub gpu_variable: bool,
    /// Whether some policy reads the `request` variable.
    pub request_variable: bool,
    /// The SKU lists the `gpu` variable shares, converted once.
    pub shared_lists: &'a crate::cel::SharedLists,
}

/// For a workload on CREATE, or on an UPDATE that changes a pod template
/// ([`judges_template`]): the Pod CREATE request one of its templates
/// describes, judged by the policies written for pods as a new pod is.
pub struct TemplatePod {
    /// A Pod CREATE with no old object: a changed template makes new pods.
    pub request: Request,
    /// `Kind name: ` for a built-in controller, `Kind namespace/name
    /// label: ` for a custom resource: put before the messages about the
    /// template.
    pub prefix: String,
    /// Where the template is in the object (`workerGroupSpecs[gpu-workers]`);
    /// empty for a built-in controller, which has one.
    pub label: String,
    /// Pods the template makes, and may make when scaled up.
    pub replicas: i64,
    pub max_replicas: i64,
    /// Its pod's DRA claims, when looked up ([`Subject::work_out`]).
    pub claims: Option<Vec<PodClaim>>,
    /// Its pod's GPU facts ([`Subject::work_out`]).
    pub gpu: Option<GpuFacts>,
    /// Host variables of its pod as trees (`request`, and its own `gpu`).
    pub variables: Hosts,
}

/// A request and everything worked out about it.
pub struct Subject<'r> {
    pub request: &'r Request,
    pub kind: SubjectKind,
    /// The namespace the request is in (for a pod without one, `default`).
    pub namespace_name: Option<String>,
    /// The Namespace object for `namespaceObject`: as looked up, or only
    /// its name when the lookup does not know it.
    pub namespace: Option<Arc<Value>>,
    /// The labels namespace selectors see: the Namespace's own labels plus
    /// `kubernetes.io/metadata.name`.
    pub namespace_labels: BTreeMap<String, String>,
    /// The pods a workload's templates describe, when judged (on CREATE
    /// and on an UPDATE that changes a template), in document order.
    pub templates: Vec<TemplatePod>,
    /// Pods of a workload custom resource's templates that nothing
    /// GPU-related concerns ([`gpu_relevant`]: no GPU, no GPU node),
    /// as `(replicas, max replicas)`: counted in `gpu.workload`, never
    /// judged, as the pods webhook is never sent their pods.
    pub unjudged_pods: Vec<(i64, i64)>,
    /// How many templates a workload holds when that is more than
    /// [`MAX_TEMPLATES`]: none of them is judged, and the request is
    /// denied.
    pub too_many_templates: Option<usize>,
    /// Templates whose patches cannot be read, each as the denial says
    /// it: their pods can be neither judged nor made.
    pub unreadable_templates: Vec<String>,
    /// The DRA claims of the object's pod (or pod template), looked up in
    /// its namespace ([`Subject::work_out`]); `None` until looked up.
    pub claims: Option<Vec<PodClaim>>,
    /// The object's GPU facts, when worked out ([`Subject::work_out`]).
    pub gpu: Option<GpuFacts>,
    /// Host variables as trees (`request`, `gpu`), which programs read in
    /// place, shared by every policy ([`Subject::work_out`] writes them
    /// for the policies).
    pub variables: Hosts,
    /// What the CEL `authorizer` checks ask ([`NoAuthorizer`] unless
    /// [`Subject::with_authorizer`] says otherwise).
    pub authorizer: Arc<dyn Authorizer>,
    /// The `GpuPolicyException`s that may let the request through
    /// ([`Subject::with_exceptions`]): in its namespace, active at
    /// `exceptions_at`, taking its object by kind, name and labels (their
    /// expressions are the policy engine's to evaluate).
    pub exceptions: Vec<Arc<Exception>>,
    /// The time exceptions are judged at.
    pub exceptions_at: SystemTime,
}

impl<'r> Subject<'r> {
    /// [`Subject::read`] with no lookups but `namespaces`, and Kueue's
    /// controller as its manifests install it ([`kueue::DEFAULT_CONTROLLER`]).
    pub fn new(
        request: &'r Request,
        namespaces: &dyn NamespaceLookup,
        sources: &TemplateSources,
    ) -> Subject<'r> {
        let kueue = [kueue::DEFAULT_CONTROLLER.to_string()];
        Subject::of(request, namespaces, sources, &kueue)
    }

    /// Works out the kind, namespace (one lookup) and template pods of
    /// `req`; `sources` says which kinds are workloads and where their
    /// templates are, `kueue` the usernames of Kueue's controller (whose
    /// admission of a workload is not judged, see [`judges_template`]).
    fn of(
        request: &'r Request,
        namespaces: &dyn NamespaceLookup,
        sources: &TemplateSources,
        kueue: &[String],
    ) -> Subject<'r> {
        let object = request.object.as_ref();
        let kind = match object {
            _ if request.kind.group.is_empty() && request.kind.kind == "Pod" => SubjectKind::Pod,
            Some(o) if sources.is_workload(o) => SubjectKind::Controller,
            Some(o) => PoolKind::of(o).map_or(SubjectKind::Other, SubjectKind::Capacity),
            None => SubjectKind::Other,
        };
        let namespace_name = namespace_name(request);
        let namespace = namespace_name.as_deref().map(|n| {
            namespaces.namespace(n).unwrap_or_else(|| {
                Arc::new(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
            })
        });
        let namespace_labels = match &namespace_name {
            Some(n) => with_name_label(n, labels_of(namespace.as_deref())),
            None => BTreeMap::new(),
        };
        // A built-in controller is sent only when its one template is
        // relevant (the workloads webhook's `gpu-relevant-template`); a
        // custom resource's templates are told apart here.
        let (mut unjudged_pods, mut unreadable_templates) = (Vec::new(), Vec::new());
        let mut templates = match kind {
            SubjectKind::Controller if judges_template(request, sources, kueue) => template_pods(
                request,
                sources,
                &mut unjudged_pods,
                &mut unreadable_templates,
            ),
            _ => Vec::new(),
        };
        let found = templates.len() + unjudged_pods.len();
        let too_many_templates = (found > MAX_TEMPLATES).then_some(found);
        if too_many_templates.is_some() {
            templates.clear();
        }
        Subject {
            request,
            kind,
            namespace_name,
            namespace,
            namespace_labels,
            templates,
            unjudged_pods,
            too_many_templates,
            unreadable_templates,
            claims: None,
            gpu: None,
            variables: Hosts::default(),
            authorizer: Arc::new(NoAuthorizer),
            exceptions: Vec::new(),
            exceptions_at: SystemTime::now(),
        }
    }

    /// The kind, namespace and template pods of `request` (what decides
    /// which policies can match it): the first half of [`Subject::build`].
    pub fn read(request: &'r Request, lookups: &Lookups, sources: &TemplateSources) -> Subject<'r> {
        Subject::of(request, lookups.namespaces, sources, lookups.kueue)
    }

    /// The subject of `request`, worked out once with everything `needs`
    /// asks for.
    pub fn build(request: &'r Request, lookups: &Lookups, needs: &Needs) -> Subject<'r> {
        Subject::read(request, lookups, needs.sources).work_out(lookups, needs)
    }

    /// The second half of [`Subject::build`]: the DRA claims of its pods,
    /// the cluster's nodes, the GPU facts; for the policies also the
    /// exceptions that may apply, its template pods placed as `/mutate`
    /// places their pods, how placement sees its pod, and the `gpu`
    /// variable.
    pub fn work_out(self, lookups: &Lookups, needs: &Needs) -> Subject<'r> {
        let profiles = needs.profiles;
        let (catalog, resources) = (profiles.catalog(), profiles.gpu_resources());
        let mut subject = self.with_claims(lookups.claims);
        // The GPU facts are judged against the cluster's nodes, when known.
        let nodes = lookups.nodes.nodes();
        let gpu_nodes = nodes.as_ref().map(|n| n.gpu_nodes(resources, catalog));
        if !needs.policies {
            // No policy reads this subject's facts: placement's are enough.
            return subject.with_gpu(catalog, resources, &gpu_nodes, Detail::Placement);
        }
        subject = subject.with_exceptions(lookups.exceptions);
        subject.place_templates(profiles, &gpu_nodes);
        let mut subject = subject.with_gpu(catalog, resources, &gpu_nodes, Detail::Policies);
        subject.judge_placement(profiles);
        subject.add_host_variables(needs);
        subject
    }

    /// What `/mutate` does to the subject's object; a GPU Pod's CREATE is
    /// kept to the sizes of `room` when given (budget narrowing) instead
    /// of its tier's.
    pub fn plan(&self, profiles: &ProfileSet, room: Option<&[&Sku]>) -> placement::Plan {
        let facts = (self.gpu.as_ref()).filter(|_| self.kind == SubjectKind::Pod);
        let pod = facts.map(|facts| PodFacts {
            facts,
            namespace: self.namespace_name.as_deref(),
            namespace_labels: &self.namespace_labels,
            room,
        });
        placement::plan(profiles, self.request, pod)
    }

    /// The GPU facts of the subject's object once `patch` applies, as
    /// `/validate` will read the pod `/mutate` placed.
    pub fn placed_facts(
        &self,
        patch: &json_patch::Patch,
        lookups: &Lookups,
        profiles: &ProfileSet,
    ) -> Option<GpuFacts> {
        let mut placed = self.request.object.clone()?;
        json_patch::patch(&mut placed, patch).ok()?;
        let (catalog, resources) = (profiles.catalog(), profiles.gpu_resources());
        let nodes = lookups.nodes.nodes();
        let gpu_nodes = nodes.as_ref().map(|n| n.gpu_nodes(resources, catalog));
        Some(pod_facts(
            &placed,
            self.claims.as_ref(),
            &gpu_nodes,
            catalog,
            resources,
            Detail::Policies,
        ))
    }

    /// The template pods as `/mutate` will make their pods: the placement
    /// of a Pod CREATE (tier pin, tolerations, GPUs hidden from containers
    /// that ask for none) applied to each, judged against the node
    /// snapshot, so that what is admitted as a template is admitted as
    /// pods, and the other way round. The GPU facts placement reads are
    /// kept as the template pod's for the verdict, not worked out again;
    /// when placement changed the pod, they are the placed pod's.
    fn place_templates(&mut self, profiles: &ProfileSet, gpu_nodes: &Option<GpuNodes>) {
        let (catalog, resources) = (profiles.catalog(), profiles.gpu_resources());
        for template in &mut self.templates {
            let Some(pod) = template.request.object.as_ref() else {
                continue;
            };
            let claims = template.claims.as_ref();
            let facts = pod_facts(pod, claims, gpu_nodes, catalog, resources, Detail::Policies);
            let placed = PodFacts {
                facts: &facts,
                namespace: self.namespace_name.as_deref(),
                namespace_labels: &self.namespace_labels,
                room: None,
            };
            let plan = placement::plan(profiles, &template.request, Some(placed));
            if plan.patch.0.is_empty() {
                template.gpu = Some(facts);
                continue;
            }
            if let Some(pod) = template.request.object.as_mut() {
                if let Err(e) = json_patch::patch(pod, &plan.patch) {
                    tracing::error!("placement patch does not apply to a template pod: {e}");
                }
                template.gpu = Some(pod_facts(
                    pod,
                    claims,
                    gpu_nodes,
                    catalog,
                    resources,
                    Detail::Policies,
                ));
            }
        }
    }

    /// How placement sees the pods the subject makes: the profile that
    /// serves each, why it cannot place it, the SKUs it allows. A pod's
    /// scheduling fields cannot change after it is created, so a Pod is
    /// judged on CREATE only; a workload's judged templates always (a
    /// built-in controller's own facts are its template's).
    fn judge_placement(&mut self, profiles: &ProfileSet) {
        let labels = &self.namespace_labels;
        let judge = |pod: &Value, facts: &mut GpuFacts| {
            let judgement = placement::judge(profiles, pod, &facts.placed_request(), labels);
            facts.placement = PlacementFacts {
                profile: judgement.profile.unwrap_or_default(),
                conflict: judgement.conflict.unwrap_or_default(),
                skus: judgement.skus,
            };
        };
        let req = self.request;
        match self.kind {
            SubjectKind::Pod
                if req.operation == Operation::Create
                    && req.sub_resource.as_deref().unwrap_or_default().is_empty() =>
            {
                if let (Some(pod), Some(facts)) = (req.object.as_ref(), self.gpu.as_mut()) {
                    judge(pod, facts);
                }
            }
            SubjectKind::Controller => {
                for template in &mut self.templates {
                    if let (Some(pod), Some(facts)) =
                        (template.request.object.as_ref(), template.gpu.as_mut())
                    {
                        judge(pod, facts);
                    }
                }
                let built_in = self.templates.first().filter(|t| t.label.is_empty());
                if let (Some(template), Some(facts)) = (built_in, self.gpu.as_mut()) {
                    if let Some(placed) = &template.gpu {
                        facts.placement = placed.placement.clone();
                    }
                }
            }
            _ => {}
        }
    }

    /// The host variables some policy reads, of the subject and of each
    /// template pod: `request`, the same for all, and `gpu` (a built-in
    /// controller's own is its template's, written once).
    fn add_host_variables(&mut self, needs: &Needs) {
        if needs.request_variable {
            let request = Arc::new(request_tree(self.request));
            for template in &mut self.templates {
                template.variables.push("request", request.clone());
            }
            self.variables.push("request", request);
        }
        if !needs.gpu_variable {
            return;
        }
        let shared = needs.shared_lists;
        if let Some(facts) = &self.gpu {
            (self.variables).push("gpu", Arc::new(gpu_tree(facts, shared)));
        }
        let own = self.variables.get("gpu");
        for template in &mut self.templates {
            let value = match (template.label.is_empty(), own) {
                (true, Some(value)) => Some(value.clone()),
                _ => (template.gpu.as_ref()).map(|facts| Arc::new(gpu_tree(facts, shared))),
            };
            if let Some(value) = value {
                template.variables.push("gpu", value);
            }
        }
    }

    /// Finds the exceptions `lookup` has that may let the request through,
    /// judged at the lookup's time.
    pub fn with_exceptions(mut self, lookup: &dyn ExceptionLookup) -> Subject<'r> {
        self.exceptions_at = lookup.now();
        if let Some(namespace) = self.namespace_name.as_deref() {
            self.exceptions =
                exceptions::candidates(lookup, &[], self.request, namespace, self.exceptions_at);
        }
        self
    }

    /// Answers the CEL `authorizer` checks of the request's user with
    /// `authorizer`.
    pub fn with_authorizer(mut self, authorizer: Arc<dyn Authorizer>) -> Subject<'r> {
        self.authorizer = authorizer;
        self
    }

    /// Looks up the DRA claims (`spec.resourceClaims`) of the object's pod
    /// or pod template in its namespace.
    fn with_claims(mut self, lookup: &dyn ClaimLookup) -> Subject<'r> {
        let Some(namespace) = self.namespace_name.as_deref() else {
            return self;
        };
        let spec = self.request.object.as_ref().and_then(workloads::pod_spec);
        if let Some(spec) = spec {
            self.claims = Some(pod_claims(spec, namespace, lookup));
        }
        for template in &mut self.templates {
            let spec = template
                .request
                .object
                .as_ref()
                .and_then(workloads::pod_spec);
            if let Some(spec) = spec {
                template.claims = Some(pod_claims(spec, namespace, lookup));
            }
        }
        self
    }

    /// Adds the GPU facts of the request's object and of each template pod
    /// (with their DRA claims when `with_claims` looked them up); on an
    /// UPDATE, which of a capacity object's pools it changes. A
    /// built-in controller's facts are those of its template pod, as
    /// placed when the template pod was; a custom resource's own are
    /// empty but for `workload`, the pods and GPUs of all its templates.
    /// All are judged against `gpu_nodes`, the cluster's GPU nodes, when
    /// known, and worked out for `detail`'s readers.
    fn with_gpu(
        mut self,
        catalog: &Catalog,
        resources: &GpuResources,
        gpu_nodes: &Option<GpuNodes>,
        detail: Detail,
    ) -> Subject<'r> {
        let facts_of = |object: &Value, claims: Option<&Vec<PodClaim>>| {
            pod_facts(object, claims, gpu_nodes, catalog, resources, detail)
        };
        // Those placement worked out already ([`Subject::place_templates`]).
        let per_template: Vec<GpuFacts> = (self.templates.iter_mut())
            .map(|t| {
                let object = t.request.object.as_ref().unwrap_or(&Value::Null);
                (t.gpu.take()).unwrap_or_else(|| facts_of(object, t.claims.as_ref()))
            })
            .collect();
        let own = self.request.object.as_ref().unwrap_or(&Value::Null);
        let built_in = self.templates.first().filter(|t| t.label.is_empty());
        let mut facts = match (built_in, per_template.first()) {
            (Some(_), Some(template)) => template.clone(),
            _ => facts_of(own, self.claims.as_ref()),
        };
        if let (Operation::Update, Some(old)) =
            (self.request.operation, self.request.old_object.as_ref())
        {
            facts.compare_pools(own, old, catalog);
        }
        let workload = match self.kind {
            SubjectKind::Controller
                if !(self.templates.is_empty() && self.unjudged_pods.is_empty()) =>
            {
                let unjudged = self.unjudged_pods.iter().map(|&(r, max)| (r, max, 0));
                WorkloadFacts::of(
                    self.templates
                        .iter()
                        .zip(&per_template)
                        .map(|(t, f)| (t.replicas, t.max_replicas, f.total))
                        .chain(unjudged),
                )
            }
            SubjectKind::Pod => WorkloadFacts::of([(1, 1, facts.total)]),
            _ => WorkloadFacts::default(),
        };
        for (template, mut template_facts) in self.templates.iter_mut().zip(per_template) {
            template_facts.workload = workload.clone();
            template.gpu = Some(template_facts);
        }
        facts.workload = workload;
        self.gpu = Some(facts);
        self
    }

    /// The pod placement and the pod policies judge: the Pod itself, or the
    /// pod of a built-in controller's template.
    pub fn pod(&self) -> Option<&Value> {
        match self.kind {
            SubjectKind::Pod => self.request.object.as_ref(),
            SubjectKind::Controller => self
                .templates
                .first()
                .filter(|t| t.label.is_empty())?
                .request
                .object
                .as_ref(),
            _ => None,
        }
    }

    /// The denial of a workload with more than [`MAX_TEMPLATES`] pod
    /// templates, or a template whose patch cannot be read: none of them
    /// is judged.
    pub fn unjudgeable_templates(&self) -> Option<String> {
        let Some(count) = self.too_many_templates else {
            let problems = &self.unreadable_templates;
            return (!problems.is_empty()).then(|| problems.join("\n"));
        };
        let req = self.request;
        Some(format!(
            "gpu-admission: {} {} holds {count} pod templates; at most {MAX_TEMPLATES} are judged: split it into smaller objects",
            req.kind.kind,
            req.display_name(),
        ))
    }
}

/// `request` as Kubernetes shows it to CEL (no uid, object or oldObject).
/// kube-apiserver converts an `AdmissionRequest` to unstructured JSON, so
/// the fields Go tags `omitempty` are absent when empty (`subResource`,
/// `name` and `namespace` of a cluster-scoped object, a user's `groups`):
/// reading one unguarded is an error there, and is one here. Converted
/// straight from the request, no JSON tree built on the way (the tests
/// check it against the JSON form); the tree programs read in place.
pub fn request_tree(req: &Request) -> Tree {
    let sub_resource = req.sub_resource.as_deref().filter(|s| !s.is_empty());
    let variable = RequestVariable {
        kind: &req.kind,
        resource: &req.resource,
        request_kind: req.request_kind.as_ref().unwrap_or(&req.kind),
        request_resource: req.request_resource.as_ref().unwrap_or(&req.resource),
        operation: req.operation.as_str(),
        user_info: UserInfo(&req.user_info),
        dry_run: req.dry_run,
        options: req.options.as_ref().unwrap_or(&NULL),
        sub_resource,
        request_sub_resource: req
            .request_sub_resource
            .as_deref()
            .or(req.sub_resource.as_deref())
            .filter(|s| !s.is_empty()),
        name: Some(req.name.as_str()).filter(|s| !s.is_empty()),
        namespace: req.namespace.as_deref().filter(|s| !s.is_empty()),
    };
    // References to plain data always convert.
    crate::cel::to_tree(&variable, crate::cel::SharedLists::none()).unwrap_or(Tree::Map(Vec::new()))
}

/// The fields of `request` as kube-apiserver's CEL sees them.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct RequestVariable<'r> {
    kind: &'r crate::review::GroupVersionKind,
    resource: &'r crate::review::GroupVersionResource,
    request_kind: &'r crate::review::GroupVersionKind,
    request_resource: &'r crate::review::GroupVersionResource,
    operation: &'static str,
    user_info: UserInfo<'r>,
    dry_run: bool,
    options: &'r serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    sub_resource: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_sub_resource: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'r str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<&'r str>,
}

/// `userInfo` with the four fields CEL sees, each left out when empty.
struct UserInfo<'r>(&'r serde_json::Value);

const USER_INFO_FIELDS: [&str; 4] = ["username", "uid", "groups", "extra"];

impl serde::Serialize for UserInfo<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for field in USER_INFO_FIELDS {
            if let Some(v) = self.0.get(field).filter(|v| !is_empty(v)) {
                map.serialize_entry(field, v)?;
            }
        }
        map.end()
    }
}

/// The `request` variable as JSON (what [`request_tree`] writes).
#[cfg(test)]
fn request_value(req: &Request) -> serde_json::Value {
    let mut user = serde_json::Map::new();
    for field in USER_INFO_FIELDS {
        if let Some(v) = req.user_info.get(field).filter(|v| !is_empty(v)) {
            user.insert(field.to_string(), v.clone());
        }
    }
    let mut request = json!({
        "kind": req.kind,
        "resource": req.resource,
        "requestKind": req.request_kind.as_ref().unwrap_or(&req.kind),
        "requestResource": req.request_resource.as_ref().unwrap_or(&req.resource),
        "operation": req.operation.as_str(),
        "userInfo": user,
        "dryRun": req.dry_run,
        "options": req.options.clone().unwrap_or(serde_json::Value::Null),
    });
    let sub_resource = req.sub_resource.clone();
    let optional = [
        ("subResource", sub_resource.clone()),
        (
            "requestSubResource",
            req.request_sub_resource.clone().or(sub_resource),
        ),
        ("name", Some(req.name.clone())),
        ("namespace", req.namespace.clone()),
    ];
    for (field, value) in optional {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            request[field] = json!(value);
        }
    }
    request
}

/// What Go's `omitempty` leaves out.
fn is_empty(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::String(s) => s.is_empty(),
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

static NULL: Value = Value::Null;

/// The GPU facts of `object` (with its DRA `claims` when looked up),
/// judged against the cluster's GPU nodes when known.
fn pod_facts(
    object: &Value,
    claims: Option<&Vec<PodClaim>>,
    gpu_nodes: &Option<GpuNodes>,
    catalog: &Catalog,
    resources: &GpuResources,
    detail: Detail,
) -> GpuFacts {
    let facts = match claims {
        Some(claims) => GpuFacts::with_claims_for(object, claims, catalog, resources, detail),
        None => GpuFacts::claiming_for(object, &NoClaims, catalog, resources, detail),
    };
    match gpu_nodes {
        Some(set) => facts.with_nodes(object, set, catalog),
        None => facts,
    }
}

/// The namespace `req` is in: the request's, or for a Pod without one its
/// `metadata.namespace`, else `default` (where the apiserver puts it).
pub fn namespace_name(req: &Request) -> Option<String> {
    if let Some(ns) = req.namespace.as_deref().filter(|n| !n.is_empty()) {
        return Some(ns.to_string());
    }
    if !(req.kind.group.is_empty() && req.kind.kind == "Pod") {
        return None;
    }
    let ns = req
        .object
        .as_ref()
        .map(|o| str_at(o, "/metadata/namespace"))
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    Some(ns.to_string())
}

/// Whether the pod policies judge the templates of the workload in `req`:
/// on CREATE, and on an UPDATE of the object itself that changes a
/// template. An UPDATE that leaves every template as it was (scaling,
/// finalizers, labels of the workload) makes no new kind of pod, and is
/// never judged: a policy or profile change must not stop a workload from
/// scaling down or being deleted. Nor is Kueue admitting a queued workload
/// (an update by one of `kueue`, see [`kueue::admission_update_by`]): its
/// flavors are judged instead.
pub fn judges_template(req: &Request, sources: &TemplateSources, kueue: &[String]) -> bool {
    let main_resource = req.sub_resource.as_deref().unwrap_or_default().is_empty();
    let Some(object) = req.object.as_ref() else {
        return false;
    };
    if !main_resource || !sources.is_workload(object) {
        return false;
    }
    match req.operation {
        Operation::Create => true,
        Operation::Update => match req.old_object.as_ref() {
            Some(old) if workloads::pod_template(object).is_some() => {
                !kueue::admits_controller(req, kueue)
                    && workloads::template_changed(object, Some(old))
            }
            Some(old) => {
                let templates = |o: &Value| {
                    sources
                        .templates(o)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|t| (t.label, t.pointer, t.template))
                        .collect::<Vec<_>>()
                };
                let (now, before) = (templates(object), templates(old));
                // Kueue writes into pod templates it knows the place of,
                // and reaches an inline pod spec (a TrainJob's trainer)
                // through the object's patches: then the templates as found
                // may differ only in what it writes.
                let pointers: Option<Vec<&str>> =
                    now.iter().map(|(_, p, _)| p.as_deref()).collect();
                let kueue_admits = match pointers {
                    Some(p) => kueue::admission_update_by(req, &p, kueue),
                    None => {
                        kueue::update_by(req, kueue) && {
                            let found = |ts: &[(String, Option<String>, Value)]| {
                                json!(ts.iter().map(|(l, _, t)| json!([l, t])).collect::<Vec<_>>())
                            };
                            let at: Vec<String> =
                                (0..now.len()).map(|i| format!("/{i}/1")).collect();
                            let at: Vec<&str> = at.iter().map(String::as_str).collect();
                            kueue::changes_only_admission_fields(&found(&now), &found(&before), &at)
                        }
                    }
                };
                !kueue_admits && now != before
            }
            None => true,
        },
        _ => false,
    }
}

/// The Pod CREATE requests a workload's templates describe; the pods of
/// a custom resource's templates that nothing GPU-related concerns are
/// added to `unjudged` instead (replicas, max replicas), and why a
/// template's patch cannot be read to `unreadable`.
fn template_pods(
    req: &Request,
    sources: &TemplateSources,
    unjudged: &mut Vec<(i64, i64)>,
    unreadable: &mut Vec<String>,
) -> Vec<TemplatePod> {
    let Some(object) = req.object.as_ref() else {
        return Vec::new();
    };
    let name = req.name_or_generated();
    let pod_kind = GroupVersionKind {
        group: String::new(),
        version: "v1".into(),
        kind: "Pod".into(),
    };
    let pod_resource = GroupVersionResource {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
    };
    let namespace = req.namespace.as_deref().filter(|n| !n.is_empty());
    let found = sources.templates(object).unwrap_or_default();
    found
        .into_iter()
        .filter(|t| {
            let judged = t.label.is_empty() || t.unreadable.is_some() || gpu_relevant(&t.template);
            if !judged {
                unjudged.push((t.replicas, t.max_replicas));
            }
            judged
        })
        .map(|t| {
            let prefix = if t.label.is_empty() {
                format!("{} {}: ", req.kind.kind, name)
            } else {
                match namespace {
                    Some(ns) => format!("{} {ns}/{name} {}: ", req.kind.kind, t.label),
                    None => format!("{} {name} {}: ", req.kind.kind, t.label),
                }
            };
            if let Some(problem) = &t.unreadable {
                unreadable.push(format!(
                    "gpu-admission: {prefix}{problem}: its pods can be neither judged nor made; fix the patch"
                ));
            }
            let pod = workloads::pod_of_template(object, t.template);
            TemplatePod {
                request: Request {
                    uid: req.uid.clone(),
                    kind: pod_kind.clone(),
                    resource: pod_resource.clone(),
                    sub_resource: None,
                    request_kind: Some(pod_kind.clone()),
                    request_resource: Some(pod_resource.clone()),
                    request_sub_resource: None,
                    name: name.clone(),
                    namespace: req.namespace.clone(),
                    operation: Operation::Create,
                    user_info: req.user_info.clone(),
                    object: Some(pod),
                    old_object: None,
                    dry_run: req.dry_run,
                    options: None,
                },
                prefix,
                label: t.label,
                replicas: t.replicas,
                max_replicas: t.max_replicas,
                claims: None,
                gpu: None,
                variables: Hosts::default(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{self, PolicySource};
    use crate::gpu::catalog::Catalog;
    use crate::k8s::namespaces::StaticNamespaces;
    use crate::offline::build_request;

    #[test]
    fn the_request_variable_holds_what_its_json_holds() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml"}});
        let mut requests = vec![Request::for_object(pod.clone(), Operation::Create, None)];
        let mut full = Request::for_object(pod.clone(), Operation::Update, Some("ml"));
        full.sub_resource = Some("status".into());
        full.request_sub_resource = Some(String::new());
        full.dry_run = true;
        full.options = Some(json!({"kind": "UpdateOptions", "fieldManager": "kubectl"}));
        full.user_info = json!({"username": "alice", "uid": "", "groups": [],
            "extra": {"scopes": ["a"]}, "other": "not shown"});
        requests.push(full);
        let mut bare = Request::for_object(pod, Operation::Delete, None);
        bare.name = String::new();
        bare.namespace = Some(String::new());
        bare.user_info = serde_json::Value::Null;
        bare.request_kind = None;
        bare.request_resource = None;
        requests.push(bare);
        for req in &requests {
            let tree = request_tree(req).to_val();
            let direct = crate::cel::Value::try_from(tree.as_ref()).unwrap();
            let through_json = crate::cel::json_to_value(&request_value(req));
            assert_eq!(direct, through_json, "{:?}", req.operation);
        }
    }

    /// A RayCluster's CPU head is counted, not judged; its GPU workers are
    /// both.
    #[test]
    fn templates_of_cpu_pods_are_counted_not_judged() {
        let loaded = bundle::load(&PolicySource::Embedded).unwrap();
        let sources = loaded.bundle.policies.template_sources();
        let rc = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "ml"},
            "spec": {
                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head",
                    "resources": {"requests": {"cpu": "2"}}}]}}},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 3, "maxReplicas": 5,
                    "template": {"spec": {"containers": [{"name": "worker",
                        "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}},
                    {"groupName": "cpu", "replicas": 4, "maxReplicas": 4,
                    "template": {"spec": {"containers": [{"name": "worker",
                        "resources": {"limits": {"cpu": "8"}}}]}}}]}});
        let req = build_request(rc, None, Operation::Create, None);
        let catalog = Catalog::embedded();
        let subject = Subject::new(&req, &StaticNamespaces::new(), sources).with_gpu(
            &catalog,
            &GpuResources::default(),
            &None,
            Detail::Policies,
        );
        let labels: Vec<&str> = subject.templates.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["workerGroupSpecs[gpu]"]);
        assert_eq!(subject.unjudged_pods, [(1, 1), (4, 4)]);
        let workload = &subject.gpu.as_ref().unwrap().workload;
        assert_eq!((workload.pods, workload.max_pods), (8, 10));
        assert_eq!((workload.gpus, workload.max_gpus), (6, 10));
    }

    /// A template pod's GPU facts are worked out once, as placement reads
    /// them, and are the verdict's: the same as those of the pod as
    /// placed, whether placement changed it (a worker as its author wrote
    /// it) or left it as it was (one placed as `/mutate` places its pods).
    #[test]
    fn template_facts_are_those_of_the_pod_as_placed() {
        let loaded = bundle::load(&PolicySource::Embedded).unwrap();
        let bundle = &loaded.bundle;
        let namespaces = StaticNamespaces::new();
        let lookups = Lookups {
            namespaces: &namespaces,
            claims: &crate::k8s::NoClaims,
            nodes: &crate::gpu::NoNodes,
            exceptions: &crate::exceptions::NoExceptions,
            kueue: &[],
        };
        let needs = Needs {
            profiles: &bundle.placement,
            sources: bundle.policies.template_sources(),
            policies: true,
            gpu_variable: true,
            request_variable: true,
            shared_lists: bundle.policies.shared_lists(),
        };
        let pod = |gpus: &str| {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w", "namespace": "ml"},
                "spec": {"containers": [
                    {"name": "w", "resources": {"limits": {"nvidia.com/gpu": gpus}}},
                    {"name": "log", "image": "fluent-bit"}]}})
        };
        let plan = |pod: &Value| {
            let req = build_request(pod.clone(), None, Operation::Create, None);
            Subject::build(&req, &lookups, &needs)
                .plan(&bundle.placement, None)
                .patch
        };
        let mut placed = pod("4");
        let patch = plan(&placed);
        json_patch::patch(&mut placed, &patch).unwrap();
        assert!(plan(&placed).0.is_empty(), "placement leaves it as it is");
        let template =
            |pod: Value| json!({"metadata": pod["metadata"].clone(), "spec": pod["spec"].clone()});
        let group = |name: &str, pod: Value| json!({"groupName": name, "replicas": 1, "template": template(pod)});
        let rc = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "ml"},
            "spec": {"headGroupSpec": {"template": template(pod("1"))},
                "workerGroupSpecs": [group("as-written", pod("2")), group("placed", placed.clone())]}});
        let req = build_request(rc, None, Operation::Create, None);
        let subject = Subject::build(&req, &lookups, &needs);
        let (catalog, resources) = (bundle.placement.catalog(), bundle.placement.gpu_resources());
        assert_eq!(subject.templates.len(), 3);
        let kept = subject
            .templates
            .iter()
            .find(|t| t.label.contains("placed"));
        let kept = kept.and_then(|t| t.request.object.as_ref()).unwrap();
        assert_eq!(
            kept["spec"], placed["spec"],
            "placement left the placed one as it is"
        );
        for template in &subject.templates {
            let pod = template.request.object.as_ref().unwrap();
            let mut expected = pod_facts(
                pod,
                template.claims.as_ref(),
                &None,
                catalog,
                resources,
                Detail::Policies,
            );
            let facts = template.gpu.as_ref().unwrap();
            (expected.placement, expected.workload) =
                (facts.placement.clone(), facts.workload.clone());
            assert_eq!(facts, &expected, "{}", template.label);
            let placed = &pod["spec"]["containers"][1]["env"][0]["value"];
            assert_eq!(
                placed, "void",
                "{}: placed as /mutate places it",
                template.label
            );
        }
    }
}
