//! What a request is about, worked out once per request: the kind of
//! object, its namespace and labels, the pod a controller's template
//! describes, the DRA claims its pod names, and the object's GPU facts.
//! Placement, the policy engine, the `gpu` CEL variable and the audit all
//! read it; nothing recomputes it.
use crate::authz::{Authorizer, NoAuthorizer};
use crate::cel::Val;
use crate::gpu::catalog::Catalog;
use crate::gpu::facts::GpuFacts;
use crate::gpu::pools::PoolKind;
use crate::gpu::GpuResources;
use crate::k8s::claims::{pod_claims, PodClaim};
use crate::k8s::json::{labels_of, str_at};
use crate::k8s::namespaces::with_name_label;
use crate::k8s::{workloads, ClaimLookup, NamespaceLookup, NodeInfo, NodeLookup};
use crate::kueue;
use crate::review::{GroupVersionKind, GroupVersionResource, Operation, Request};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

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

/// For a controller on CREATE, or on an UPDATE that changes its pod
/// template ([`judges_template`]): the Pod CREATE request its template
/// describes, judged by the policies written for pods as a new pod is.
#[derive(Clone, Debug)]
pub struct TemplatePod {
    /// A Pod CREATE with no old object: a changed template makes new pods.
    pub request: Request,
    /// `Kind name: `, put before the messages about the template.
    pub prefix: String,
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
    pub template: Option<TemplatePod>,
    /// The DRA claims of the object's pod (or pod template), looked up in
    /// its namespace ([`Subject::with_claims`]); `None` until looked up.
    pub claims: Option<Vec<PodClaim>>,
    /// The object's GPU facts, when worked out ([`Subject::with_gpu`]).
    pub gpu: Option<GpuFacts>,
    /// The cluster's nodes, when known ([`Subject::with_nodes`]): the GPU
    /// facts are then judged against them.
    pub nodes: Option<Arc<[NodeInfo]>>,
    /// The Karpenter NodePools the node cache knows (JSON).
    pub node_pools: Arc<[Value]>,
    /// Host variables already in CEL form (e.g. `gpu`), shared by every
    /// policy and by the object and its template pod alike.
    pub variables: Vec<(String, Box<dyn Val>)>,
    /// What the CEL `authorizer` checks ask ([`NoAuthorizer`] unless
    /// [`Subject::with_authorizer`] says otherwise).
    pub authorizer: Arc<dyn Authorizer>,
}

impl<'r> Subject<'r> {
    /// Works out the kind, namespace (one lookup) and template pod of `req`.
    pub fn new(request: &'r Request, namespaces: &dyn NamespaceLookup) -> Subject<'r> {
        let object = request.object.as_ref();
        let kind = match object {
            _ if request.kind.group.is_empty() && request.kind.kind == "Pod" => SubjectKind::Pod,
            Some(o) if workloads::pod_template(o).is_some() => SubjectKind::Controller,
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
        let template = match kind {
            SubjectKind::Controller if judges_template(request) => template_pod(request),
            _ => None,
        };
        Subject {
            request,
            kind,
            namespace_name,
            namespace,
            namespace_labels,
            template,
            claims: None,
            gpu: None,
            nodes: None,
            node_pools: Arc::from(Vec::new()),
            variables: Vec::new(),
            authorizer: Arc::new(NoAuthorizer),
        }
    }

    /// Answers the CEL `authorizer` checks of the request's user with
    /// `authorizer`.
    pub fn with_authorizer(mut self, authorizer: Arc<dyn Authorizer>) -> Subject<'r> {
        self.authorizer = authorizer;
        self
    }

    /// Looks up the DRA claims (`spec.resourceClaims`) of the object's pod
    /// or pod template in its namespace.
    pub fn with_claims(mut self, lookup: &dyn ClaimLookup) -> Subject<'r> {
        let spec = self.request.object.as_ref().and_then(workloads::pod_spec);
        if let (Some(spec), Some(namespace)) = (spec, self.namespace_name.as_deref()) {
            self.claims = Some(pod_claims(spec, namespace, lookup));
        }
        self
    }

    /// Judges the GPU facts ([`Subject::with_gpu`], called after this)
    /// against the nodes `lookup` knows, when it knows them.
    pub fn with_nodes(mut self, lookup: &dyn NodeLookup) -> Subject<'r> {
        self.nodes = lookup.nodes();
        if self.nodes.is_some() {
            self.node_pools = lookup.node_pools();
        }
        self
    }

    /// Adds the GPU facts of the request's object (with its DRA claims when
    /// [`Subject::with_claims`] looked them up); on an UPDATE, which of a
    /// capacity object's pools it changes. A controller's facts are those
    /// of its template pod, as placed when the template pod was.
    pub fn with_gpu(mut self, catalog: &Catalog, resources: &GpuResources) -> Subject<'r> {
        let template = self
            .template
            .as_ref()
            .and_then(|t| t.request.object.as_ref());
        let own = self.request.object.as_ref().unwrap_or(&Value::Null);
        let object = template.unwrap_or(own);
        let mut facts = match &self.claims {
            Some(claims) => GpuFacts::with_claims(object, claims, catalog, resources),
            None => GpuFacts::of(object, catalog, resources),
        };
        if let (Operation::Update, Some(old)) =
            (self.request.operation, self.request.old_object.as_ref())
        {
            facts.compare_pools(own, old, catalog);
        }
        self.gpu = Some(match &self.nodes {
            Some(nodes) => facts.with_nodes(object, nodes, &self.node_pools, catalog, resources),
            None => facts,
        });
        self
    }

    /// The pod placement and the pod policies judge: the Pod itself, or the
    /// pod of a controller's template.
    pub fn pod(&self) -> Option<&Value> {
        match self.kind {
            SubjectKind::Pod => self.request.object.as_ref(),
            SubjectKind::Controller => self.template.as_ref()?.request.object.as_ref(),
            _ => None,
        }
    }

    /// The host variable `name`, when the subject carries it.
    pub fn variable(&self, name: &str) -> Option<&dyn Val> {
        self.variables
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_ref())
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

/// Whether the pod policies judge the template of the controller in
/// `req`: on CREATE, and on an UPDATE of the object itself that changes the
/// template. An UPDATE that leaves the template as it was (scaling,
/// finalizers, labels of the controller) makes no new kind of pod, and is
/// never judged: a policy or profile change must not stop a workload from
/// scaling down or being deleted. Nor is Kueue admitting a queued workload
/// ([`kueue::admits_controller`]): its flavors are judged instead.
pub fn judges_template(req: &Request) -> bool {
    let main_resource = req.sub_resource.as_deref().unwrap_or_default().is_empty();
    let Some(object) = req.object.as_ref() else {
        return false;
    };
    main_resource
        && workloads::pod_template(object).is_some()
        && match req.operation {
            Operation::Create => true,
            Operation::Update => {
                !kueue::admits_controller(req)
                    && workloads::template_changed(object, req.old_object.as_ref())
            }
            _ => false,
        }
}

/// The Pod CREATE request a controller's template describes.
fn template_pod(req: &Request) -> Option<TemplatePod> {
    let pod = workloads::pod_from_template(req.object.as_ref()?)?;
    // `generateName` controllers have no name yet; `display_name` shows `web-*`.
    let name = if req.name.is_empty() {
        req.display_name()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string()
    } else {
        req.name.clone()
    };
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
    let prefix = format!("{} {}: ", req.kind.kind, name);
    Some(TemplatePod {
        request: Request {
            uid: req.uid.clone(),
            kind: pod_kind.clone(),
            resource: pod_resource.clone(),
            sub_resource: None,
            request_kind: Some(pod_kind),
            request_resource: Some(pod_resource),
            request_sub_resource: None,
            name,
            namespace: req.namespace.clone(),
            operation: Operation::Create,
            user_info: req.user_info.clone(),
            object: Some(pod),
            old_object: None,
            dry_run: req.dry_run,
            options: None,
        },
        prefix,
    })
}
