//! Kueue: the update its controller makes when it admits a queued
//! workload, and the queues and flavors that decide where workloads run.
//!
//! A Job (or a workload CRD) created suspended with the label
//! `kueue.x-k8s.io/queue-name` is judged at creation, as it will run. When
//! Kueue admits it, its controller updates the object: `suspend` turns
//! false, and the ResourceFlavor's `nodeLabels`, tolerations (and node
//! affinity) are written into each pod template, with Kueue's own labels
//! and annotations. That update ([`admission_update_by`]) is not judged again:
//! the selection it writes is the flavor's, and flavors are judged
//! themselves (`gpu-kueue-flavor`, `gpu-sku-lifecycle`) and audited
//! against the tiers of the namespaces their ClusterQueues serve.
use crate::k8s::json::{items, Pointer as _};
use crate::k8s::labels::LabelSelectorDoc;
use crate::k8s::{workloads, LabelSelector};
use crate::review::{Operation, Request};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The API group of Kueue's objects.
pub const GROUP: &str = "kueue.x-k8s.io";
/// The label that puts a workload in a LocalQueue.
pub const QUEUE_NAME_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The username Kueue's controller runs as when installed by its manifests
/// or Helm chart.
pub const DEFAULT_CONTROLLER: &str = "system:serviceaccount:kueue-system:kueue-controller-manager";

/// Where workload kinds keep their suspend switch: `spec.suspend` (Job,
/// JobSet, RayJob, RayCluster) and `spec.runPolicy.suspend` (Kubeflow's
/// PyTorchJob, TFJob, MPIJob...).
const SUSPEND_FIELDS: &[(&str, &str)] = &[("/spec", "suspend"), ("/spec/runPolicy", "suspend")];

/// Kueue's prefix for the labels, annotations and scheduling gates it writes.
const KUEUE_PREFIX: &str = "kueue.x-k8s.io/";

/// Whether `req` is Kueue admitting (or suspending again) a built-in
/// controller (a Job, a Deployment...: the one pod template of its kind in
/// `workloads::TEMPLATE_KINDS`); see [`admission_update_by`].
pub fn admits_controller(req: &Request, controllers: &[String]) -> bool {
    let kind = req.object.as_ref().and_then(workloads::template_kind_of);
    admission_update_by(req, kind.map(|k| k.template).as_slice(), controllers)
}

/// Whether `req` is Kueue admitting (or suspending again) a workload whose
/// pod templates sit at the JSON pointers `templates`: an UPDATE of the
/// object itself by one of `controllers` (the usernames of Kueue's
/// controller: `serve --kueue-controller`, else [`DEFAULT_CONTROLLER`])
/// that changes nothing but what Kueue writes (see
/// [`changes_only_admission_fields`]).
pub fn admission_update_by(req: &Request, templates: &[&str], controllers: &[String]) -> bool {
    update_by(req, controllers)
        && match (req.object.as_ref(), req.old_object.as_ref()) {
            (Some(object), Some(old)) => changes_only_admission_fields(object, old, templates),
            _ => false,
        }
}

/// Whether `req` is an UPDATE of an object itself by one of `controllers`.
pub fn update_by(req: &Request, controllers: &[String]) -> bool {
    let username = crate::k8s::json::str_field(&req.user_info, "username");
    let main_resource = req.sub_resource.as_deref().unwrap_or_default().is_empty();
    req.operation == Operation::Update && main_resource && controllers.iter().any(|c| c == username)
}

/// Whether `object` differs from `old` only in what Kueue writes when it
/// admits or suspends a workload: the suspend switch, in each pod template
/// (at the pointers `templates`) its `nodeSelector`, `tolerations`, node
/// affinity, `kueue.x-k8s.io/*` scheduling gates, labels and annotations;
/// and on the object its `kueue.x-k8s.io/*` labels and annotations,
/// `resourceVersion`, `generation`, `managedFields` and `status`. A
/// container, an image, a GPU count, a volume, anything else: false.
pub fn changes_only_admission_fields(object: &Value, old: &Value, templates: &[&str]) -> bool {
    without_admission_fields(object, templates) == without_admission_fields(old, templates)
}

/// `object` with what [`changes_only_admission_fields`] lets change taken out.
fn without_admission_fields(object: &Value, templates: &[&str]) -> Value {
    let mut v = object.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["resourceVersion", "generation", "managedFields"] {
            meta.remove(field);
        }
        drop_kueue_keys(meta);
    }
    for (parent, field) in SUSPEND_FIELDS {
        if let Some(p) = v.pointer_mut(parent).and_then(Value::as_object_mut) {
            p.remove(*field);
        }
    }
    for template in templates {
        let Some(t) = v.pointer_mut(template).and_then(Value::as_object_mut) else {
            continue;
        };
        if let Some(meta) = t.get_mut("metadata").and_then(Value::as_object_mut) {
            drop_kueue_keys(meta);
        }
        remove_if_empty(t, "metadata");
        let Some(spec) = t.get_mut("spec").and_then(Value::as_object_mut) else {
            continue;
        };
        spec.remove("nodeSelector");
        spec.remove("tolerations");
        if let Some(affinity) = spec.get_mut("affinity").and_then(Value::as_object_mut) {
            affinity.remove("nodeAffinity");
        }
        remove_if_empty(spec, "affinity");
        if let Some(gates) = spec
            .get_mut("schedulingGates")
            .and_then(Value::as_array_mut)
        {
            gates.retain(|g| {
                !(g.get("name").and_then(Value::as_str))
                    .is_some_and(|n| n.starts_with(KUEUE_PREFIX))
            });
            if gates.is_empty() {
                spec.remove("schedulingGates");
            }
        }
    }
    v
}

/// Takes the `kueue.x-k8s.io/*` keys out of `labels` and `annotations`.
fn drop_kueue_keys(meta: &mut Map<String, Value>) {
    for field in ["labels", "annotations"] {
        if let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) {
            map.retain(|k, _| !k.starts_with(KUEUE_PREFIX));
        }
        remove_if_empty(meta, field);
    }
}

/// Removes `field` when it is an empty object or null: "none" and "empty"
/// are the same to every reader of these fields.
fn remove_if_empty(map: &mut Map<String, Value>, field: &str) {
    let empty = match map.get(field) {
        Some(Value::Object(o)) => o.is_empty(),
        Some(Value::Null) => true,
        _ => false,
    };
    if empty {
        map.remove(field);
    }
}

/// A Kueue ClusterQueue as the audit reads it: which namespaces it admits
/// workloads from and which ResourceFlavors it gives them.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterQueue {
    pub name: String,
    /// `spec.namespaceSelector`: `None` when absent, which Kueue reads as
    /// no namespace; an empty selector selects every namespace.
    pub namespace_selector: Option<LabelSelector>,
    /// `spec.resourceGroups[].flavors[].name`, each once, in order.
    pub flavors: Vec<String>,
    /// (flavor, resource, nominalQuota as written) of every
    /// `spec.resourceGroups[].flavors[].resources[]`.
    pub quotas: Vec<(String, String, String)>,
}

impl ClusterQueue {
    /// Reads a `kueue.x-k8s.io` ClusterQueue (any version); `None` for any
    /// other object. A selector that cannot be read selects nothing.
    pub fn from_object(object: &Value) -> Option<ClusterQueue> {
        if !is_kind(object, "ClusterQueue") {
            return None;
        }
        let namespace_selector = object
            .at("/spec/namespaceSelector")
            .filter(|s| s.is_object())
            .and_then(|s| serde_json::from_value::<LabelSelectorDoc>(s.clone()).ok())
            .and_then(|s| s.validate("spec.namespaceSelector").ok());
        let (mut flavors, mut quotas) = (Vec::<String>::new(), Vec::new());
        let groups = items(object.at("/spec/resourceGroups"));
        for flavor in groups.flat_map(|g| items(g.get("flavors"))) {
            let Some(name) = flavor.get("name").and_then(Value::as_str) else {
                continue;
            };
            if !flavors.iter().any(|f| f == name) {
                flavors.push(name.to_string());
            }
            for resource in items(flavor.get("resources")) {
                let quota = match resource.get("nominalQuota") {
                    Some(Value::String(q)) => q.clone(),
                    Some(Value::Number(q)) => q.to_string(),
                    _ => continue,
                };
                let resource = crate::k8s::json::str_field(resource, "name").to_string();
                quotas.push((name.to_string(), resource, quota));
            }
        }
        Some(ClusterQueue {
            name: crate::k8s::json::str_at(object, "/metadata/name").to_string(),
            namespace_selector,
            flavors,
            quotas,
        })
    }

    /// Whether Kueue admits workloads of a namespace with `labels` here.
    pub fn serves(&self, labels: &BTreeMap<String, String>) -> bool {
        self.namespace_selector
            .as_ref()
            .is_some_and(|s| s.matches(labels))
    }
}

/// A `kueue.x-k8s.io` LocalQueue's namespace and the ClusterQueue it
/// sends workloads to; `None` for any other object.
pub fn local_queue(object: &Value) -> Option<(&str, &str)> {
    if !is_kind(object, "LocalQueue") {
        return None;
    }
    let namespace = object.at("/metadata/namespace").and_then(Value::as_str)?;
    let cluster_queue = object.at("/spec/clusterQueue").and_then(Value::as_str)?;
    Some((namespace, cluster_queue))
}

/// Whether `object` is a `kueue.x-k8s.io` object of `kind`.
pub fn is_kind(object: &Value, kind: &str) -> bool {
    workloads::group_kind(object) == Some((GROUP, kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offline::build_request;
    use serde_json::json;

    const JOB_TEMPLATE: &[&str] = &["/spec/template"];
    const ALICE: &str = "alice@example.com";

    fn queued_job(gpus: i64, image: &str) -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a", "resourceVersion": "100",
                "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
            "spec": {"suspend": true, "parallelism": 2, "template": {
                "metadata": {"labels": {"app": "train"}},
                "spec": {"restartPolicy": "Never",
                    "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
                    "containers": [{"name": "worker", "image": image,
                        "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}
        })
    }

    /// What Kueue's controller writes when it admits the job on a flavor
    /// of `instance_type`.
    fn admitted(job: &Value, instance_type: &str) -> Value {
        let mut job = job.clone();
        job["metadata"]["resourceVersion"] = json!("101");
        job["metadata"]["annotations"] = json!({"kueue.x-k8s.io/workload": "job-train-1a2b3"});
        job["spec"]["suspend"] = json!(false);
        let template = &mut job["spec"]["template"];
        template["metadata"]["labels"]["kueue.x-k8s.io/podset"] = json!("main");
        template["spec"]["nodeSelector"] =
            json!({"node.kubernetes.io/instance-type": instance_type});
        template["spec"]["tolerations"]
            .as_array_mut()
            .unwrap()
            .push(json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}));
        job
    }

    /// Whether the default controller's `req` is Kueue's admission.
    fn by_default_controller(req: &Request) -> bool {
        admission_update_by(req, JOB_TEMPLATE, &[DEFAULT_CONTROLLER.into()])
    }

    fn update(old: &Value, new: &Value, user: &str) -> Request {
        let mut req = build_request(new.clone(), Some(old.clone()), Operation::Update, None);
        req.user_info = json!({"username": user, "groups": ["system:serviceaccounts"]});
        req
    }

    #[test]
    fn kueues_unsuspend_is_its_admission() {
        let job = queued_job(1, "nvcr.io/nvidia/pytorch:24.05-py3");
        let unsuspended = admitted(&job, "Standard_NC24ads_A100_v4");
        let req = update(&job, &unsuspended, DEFAULT_CONTROLLER);
        assert!(by_default_controller(&req));
        // Suspended again (preemption): the selection taken back out.
        let back = update(&unsuspended, &job, DEFAULT_CONTROLLER);
        assert!(by_default_controller(&back));
    }

    #[test]
    fn the_same_change_by_anyone_else_is_not() {
        let job = queued_job(1, "nvcr.io/nvidia/pytorch:24.05-py3");
        let admitted = admitted(&job, "Standard_NC24ads_A100_v4");
        assert!(!by_default_controller(&update(&job, &admitted, ALICE)));
        // A controller set elsewhere: the default one is then not trusted.
        let req = update(&job, &admitted, DEFAULT_CONTROLLER);
        let other = ["system:serviceaccount:queues:kueue-controller-manager".to_string()];
        assert!(!admission_update_by(&req, JOB_TEMPLATE, &other));
    }

    #[test]
    fn kueues_update_that_changes_anything_else_is_not() {
        let job = queued_job(1, "nvcr.io/nvidia/pytorch:24.05-py3");
        let controllers = [DEFAULT_CONTROLLER.to_string()];
        let judged = |new: Value| {
            let req = update(&job, &new, DEFAULT_CONTROLLER);
            !admission_update_by(&req, JOB_TEMPLATE, &controllers)
        };
        let admitted_as = |gpus: i64, image: &str| admitted(&queued_job(gpus, image), "x");
        assert!(judged(admitted_as(1, "nvcr.io/nvidia/pytorch:24.06-py3")));
        assert!(judged(admitted_as(8, "nvcr.io/nvidia/pytorch:24.05-py3")));
        let mut parallelism = admitted(&job, "x");
        parallelism["spec"]["parallelism"] = json!(16);
        assert!(judged(parallelism));
        let mut team_label = admitted(&job, "x");
        team_label["spec"]["template"]["metadata"]["labels"]["team"] = json!("b");
        assert!(judged(team_label));
        let mut pod_affinity = admitted(&job, "x");
        pod_affinity["spec"]["template"]["spec"]["affinity"] =
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}});
        assert!(judged(pod_affinity));
        let mut node_affinity = admitted(&job, "x");
        node_affinity["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity":
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}});
        assert!(!judged(node_affinity));
        // A subresource, or another operation, is never Kueue's admission.
        let mut status = update(&job, &admitted(&job, "x"), DEFAULT_CONTROLLER);
        status.sub_resource = Some("status".into());
        assert!(!admission_update_by(&status, JOB_TEMPLATE, &controllers));
        let mut create = update(&job, &admitted(&job, "x"), DEFAULT_CONTROLLER);
        create.operation = Operation::Create;
        assert!(!admission_update_by(&create, JOB_TEMPLATE, &controllers));
    }

    #[test]
    fn kubeflow_suspend_and_several_templates() {
        let pytorch = |suspend: bool, selector: Value| {
            let spec = json!({"nodeSelector": selector, "containers": [{"name": "pytorch",
                "image": "pytorch:2", "resources": {"limits": {"nvidia.com/gpu": 1}}}]});
            json!({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                "metadata": {"name": "ddp", "namespace": "ml"},
                "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": {"spec": spec}},
                    "Worker": {"replicas": 2, "template": {"spec": spec}}}}})
        };
        let templates = [
            "/spec/pytorchReplicaSpecs/Master/template",
            "/spec/pytorchReplicaSpecs/Worker/template",
        ];
        let old = pytorch(true, json!({}));
        let new = pytorch(false, json!({"accelerator": "nvidia"}));
        assert!(changes_only_admission_fields(&new, &old, &templates));
        // Only the first template named: the second one's change counts.
        assert!(!changes_only_admission_fields(&new, &old, &templates[..1]));
    }

    #[test]
    fn cluster_queues_and_local_queues() {
        let cq = json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
            "metadata": {"name": "team-a-gpu"},
            "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
                "resourceGroups": [
                    {"coveredResources": ["cpu"], "flavors": [{"name": "default"}]},
                    {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "a100"}, {"name": "default"}]}]}});
        let cq = ClusterQueue::from_object(&cq).unwrap();
        assert_eq!(cq.flavors, ["default", "a100"]);
        let labels = |ns: &str| {
            BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns.to_string())])
        };
        assert!(cq.serves(&labels("team-a")));
        assert!(!cq.serves(&labels("team-b")));
        let all = json!({"apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue", "metadata": {"name": "all"}, "spec": {"namespaceSelector": {}}});
        assert!(ClusterQueue::from_object(&all)
            .unwrap()
            .serves(&labels("anything")));
        let none = json!({"apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue", "metadata": {"name": "none"}, "spec": {}});
        assert!(!ClusterQueue::from_object(&none)
            .unwrap()
            .serves(&labels("team-a")));
        let lq = json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": "gpu-queue", "namespace": "team-a"}, "spec": {"clusterQueue": "team-a-gpu"}});
        assert_eq!(local_queue(&lq), Some(("team-a", "team-a-gpu")));
        let core = json!({"apiVersion": "v1", "kind": "LocalQueue"});
        assert_eq!(local_queue(&core), None);
    }
}
