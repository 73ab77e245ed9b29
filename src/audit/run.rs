//! One audit run: objects fed a page at a time, from files or from the
//! cluster alike, and one [`Report`] at the end that nothing changes
//! afterwards. `audit -f`, `audit` of a cluster and the periodic report
//! all run it, so they reach the same findings on the same objects.
//!
//! The order is the cluster's: Nodes, then the other kinds (controllers,
//! capacity objects, DRA claims, exceptions), which the run holds, then
//! Pods a page at a time, each page judged and dropped. A pod whose
//! controller was read is judged through it and counted towards it (GPUs
//! by state, per controller: counters, not pods); the held objects are
//! judged at the end, each controller counted through its pods where the
//! run read its namespace's pods ([`super::holding`]). Where a pod can
//! land is judged against the Nodes (with Karpenter NodePools and the
//! GPUs DRA DeviceClasses and ResourceSlices serve on nodes) the run
//! read, whatever node lookup the Admission has: a dump is judged as the
//! cluster it was taken from.
use super::{budgets, exceptions, InvalidException, PodLedger, PodsRead, Report};
use crate::admission::Admission;
use crate::gpu::capacity::PoolKind;
use crate::gpu::{DraDevices, StaticNodes};
use crate::k8s::json::{str_at, Pointer as _};
use crate::k8s::workloads::controller_uid;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// An audit under way.
pub struct Run<'a> {
    admission: &'a Admission,
    /// `admission` judging against the nodes read, once the Pods come.
    with_nodes: Option<Admission>,
    /// Nodes, held whole (few, and slim once read); none when none were
    /// read, and the report then has no node section.
    nodes: Option<Vec<Value>>,
    /// The kinds other than Pods, judged at the end.
    held: Vec<Value>,
    /// What DRA serves on the nodes, read from the held objects.
    devices: DraDevices,
    /// The VM size of each node read, by name: what a bound pod is
    /// charged against budgets.
    sizes: HashMap<String, String>,
    /// Once the Pods come: the uid of each object read and the uid of the
    /// one it is judged through (itself, or its controller's up the chain).
    owners: Option<HashMap<String, String>>,
    /// The pods read of the held controllers.
    pods_read: PodsRead,
    /// Pods and late objects judged so far, and what the pods said of
    /// their nodes.
    judged: (Report, PodLedger),
}

impl<'a> Run<'a> {
    pub fn new(admission: &'a Admission) -> Run<'a> {
        Run {
            admission,
            with_nodes: None,
            nodes: None,
            held: Vec::new(),
            devices: DraDevices::default(),
            sizes: HashMap::new(),
            owners: None,
            pods_read: PodsRead::default(),
            judged: Default::default(),
        }
    }

    /// Nodes read: they are counted and reported per pool, not judged.
    pub fn nodes(&mut self, page: Vec<Value>) {
        self.nodes.get_or_insert_with(Vec::new).extend(page);
    }

    /// How many Nodes and other objects the run holds.
    pub fn held(&self) -> (usize, usize) {
        (self.nodes.as_ref().map_or(0, Vec::len), self.held.len())
    }

    /// Objects of the kinds other than Pods (and Nodes), held until the
    /// end: a pod is judged through its controller when it has one.
    /// Objects that come after Pods are judged at once, by their status.
    pub fn objects(&mut self, page: Vec<Value>) {
        let Some(owners) = self.owners.as_mut() else {
            self.held.extend(page);
            return;
        };
        let admission = self.with_nodes.as_ref().unwrap_or(self.admission);
        owners.extend(uids_of(&page).map(|uid| (uid.clone(), uid)));
        // Budgets are read at the end, with the held objects.
        (self.held).extend(page.iter().filter(|o| budgets::is_budget(o)).cloned());
        let (judged, ledger) = super::audit_workloads(admission, &page, &PodsRead::default());
        merge(&mut self.judged.0, judged);
        self.judged.1.merge(ledger);
    }

    /// One page of a cluster's Pod list: the pods of every namespace are
    /// read, and a controller with none has created none.
    pub fn pods_of_cluster(&mut self, page: Vec<Value>) {
        self.pods_read.every_namespace = true;
        self.pods(page);
    }

    /// One page of Pods, judged and dropped (a pod whose controller the run
    /// holds counts towards it and its node).
    pub fn pods(&mut self, mut page: Vec<Value>) {
        self.prepare();
        let admission = self.with_nodes.as_ref().unwrap_or(self.admission);
        let bundle = admission.bundle();
        let resources = bundle.placement.gpu_resources();
        let owners = self.owners.as_ref().expect("prepared");
        let (report, ledger) = &mut self.judged;
        let read = page.len();
        let catalog = bundle.placement.catalog();
        let snapshot = admission.nodes().nodes();
        let set = snapshot.as_ref().map(|s| s.gpu_nodes(resources, catalog));
        page.retain(|pod| {
            let namespace = crate::k8s::json::str_at(pod, "/metadata/namespace");
            self.pods_read.namespaces.insert(namespace.to_string());
            let holdings = report.budget_holdings.entry(namespace.to_string());
            let claims = admission.claims();
            let nodes = (&self.sizes, set.as_ref());
            (holdings.or_default()).pod(pod, nodes, claims, catalog, resources);
            let Some(owner) = controller_uid(pod).and_then(|uid| owners.get(uid)) else {
                return true;
            };
            let gpus = ledger.add(pod, resources);
            self.pods_read.count(owner, pod, gpus);
            false
        });
        let (judged, judged_ledger) =
            super::audit_workloads(admission, &page, &PodsRead::default());
        merge(report, judged);
        ledger.merge(judged_ledger);
        report.objects += read - page.len();
    }

    /// The report: what was judged, the GPU nodes with what their pods
    /// said, and the GpuPolicyExceptions the run honoured (with `invalid`,
    /// those that could not be read).
    pub fn finish(mut self, invalid: &[InvalidException]) -> Report {
        self.prepare();
        let judging = self.with_nodes.as_ref().unwrap_or(self.admission);
        let (mut report, mut ledger) = super::audit_workloads(judging, &self.held, &self.pods_read);
        let (pods, pods_ledger) = self.judged;
        merge(&mut report, pods);
        ledger.merge(pods_ledger);
        let admission = self.admission;
        if let Some(nodes) = &self.nodes {
            report.objects += nodes.len();
        }
        let known = super::known_exceptions(admission);
        exceptions::list(&mut report, &known, invalid, admission.exceptions().now());
        report.nodes = self
            .nodes
            .map(|nodes| super::account_nodes(admission, &nodes, &self.devices, &ledger));
        report.held_pods = ledger.into_held();
        let placement = &admission.bundle().placement;
        budgets::account(&mut report, &self.held, placement, admission.namespaces());
        // A pod's workload is its root controller, where the run read it.
        let kinds: HashMap<&str, &str> = (self.held.iter())
            .map(|o| (str_at(o, "/metadata/uid"), str_at(o, "/kind")))
            .collect();
        let roots = self.owners.as_ref().expect("prepared");
        for pod in &mut report.held_pods {
            let root =
                (pod.controller_uid.as_ref()).and_then(|uid| kinds.get(roots.get(uid)?.as_str()));
            if let Some(kind) = root {
                pod.workload_kind = Some(kind.to_string());
            }
        }
        report
    }

    /// Once, at the first page of Pods (or the end): what DRA serves, the
    /// nodes to judge against, and which held object each uid is judged
    /// through.
    fn prepare(&mut self) {
        if self.owners.is_some() {
            return;
        }
        self.devices = DraDevices::read(&self.held);
        self.sizes = crate::budgets::node_sizes(self.nodes.iter().flatten());
        self.with_nodes = self.nodes.as_ref().map(|nodes| {
            let pools = (self.held.iter())
                .filter(|o| PoolKind::of(o) == Some(PoolKind::NodePool))
                .cloned()
                .collect();
            let lookup = StaticNodes::of_objects(nodes, pools, &self.devices);
            self.admission.judging_nodes(Arc::new(lookup))
        });
        self.owners = Some(owners(&self.held));
    }
}

/// Each uid of `objects` and the uid of the one among them it is judged
/// through: its controller's, up the chain (a Deployment's ReplicaSet's,
/// a CronJob's Job's), or its own.
fn owners(objects: &[Value]) -> HashMap<String, String> {
    let parent: HashMap<&str, Option<&str>> = (objects.iter())
        .map(|o| {
            (
                crate::k8s::json::str_at(o, "/metadata/uid"),
                controller_uid(o),
            )
        })
        .filter(|(uid, _)| !uid.is_empty())
        .collect();
    (parent.keys())
        .map(|&uid| {
            let mut root = uid;
            // Bounded: owner references can form a loop.
            for _ in 0..8 {
                match parent.get(root).copied().flatten() {
                    Some(up) if parent.contains_key(up) => root = up,
                    _ => break,
                }
            }
            (uid.to_string(), root.to_string())
        })
        .collect()
}

/// The uids of `objects`.
fn uids_of(objects: &[Value]) -> impl Iterator<Item = String> + '_ {
    objects
        .iter()
        .filter_map(|o| o.at("/metadata/uid").and_then(Value::as_str))
        .map(str::to_string)
}

/// Adds `more` (a report of other objects) to `report`.
fn merge(report: &mut Report, more: Report) {
    report.objects += more.objects;
    report.evaluated += more.evaluated;
    report.gpus_held += more.gpus_held;
    report.gpus_pending += more.gpus_pending;
    report.gpus_in_violation += more.gpus_in_violation;
    report.gpus_pending_in_violation += more.gpus_pending_in_violation;
    for (way, n) in more.gpus_counted {
        *report.gpus_counted.entry(way).or_default() += n;
    }
    for (ns, holdings) in &more.budget_holdings {
        (report.budget_holdings.entry(ns.clone()).or_default()).add(holdings);
    }
    for (ns, row) in &more.namespaces {
        report.namespaces.entry(ns.clone()).or_default().add(row);
    }
    for (ns, n) in more.passed {
        *report.passed.entry(ns).or_default() += n;
    }
    report.findings.extend(more.findings);
    report.excepted.extend(more.excepted);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{self, PolicySource};
    use crate::k8s::StaticNamespaces;
    use serde_json::json;

    fn privileged(kind: &str, name: &str) -> Value {
        let pod = json!({"containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
            "securityContext": {"privileged": true},
            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]});
        match kind {
            "Pod" => json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}")}, "spec": pod}),
            _ => json!({"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}")},
                "spec": {"template": {"spec": pod}}}),
        }
    }

    /// Objects fed after the first page of Pods are judged all the same.
    #[test]
    fn objects_after_pods_are_judged() {
        let loaded = bundle::load(&PolicySource::Embedded).unwrap();
        let admission = Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()));
        let in_order = {
            let mut run = Run::new(&admission);
            run.objects(vec![privileged("Job", "train")]);
            run.pods(vec![privileged("Pod", "debug")]);
            run.finish(&[])
        };
        let late = {
            let mut run = Run::new(&admission);
            run.pods(vec![privileged("Pod", "debug")]);
            run.objects(vec![privileged("Job", "train")]);
            run.finish(&[])
        };
        let names = |report: &Report| {
            let mut names: Vec<String> = report.findings.iter().map(|f| f.name.clone()).collect();
            names.sort();
            names.dedup();
            names
        };
        assert_eq!(names(&in_order), ["debug", "train"]);
        assert_eq!(names(&late), names(&in_order));
        assert_eq!(late.evaluated, in_order.evaluated);
        assert_eq!(late.gpus_in_violation, in_order.gpus_in_violation);
    }

    /// A pod's workload is its root controller where the run read it
    /// (the Deployment, not its ReplicaSet), else its own controller.
    #[test]
    fn held_pods_carry_the_kind_of_their_root_controller() {
        let loaded = bundle::load(&PolicySource::Embedded).unwrap();
        let admission = Admission::new(loaded.bundle, Arc::new(StaticNamespaces::new()));
        let owned = |kind: &str, name: &str, owner: Option<(&str, &str)>| {
            let mut o = json!({"apiVersion": "apps/v1", "kind": kind,
                "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}")}});
            if let Some((kind, name)) = owner {
                o["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind,
                    "name": name, "uid": format!("uid-{name}"), "controller": true}]);
            }
            o
        };
        let pod = |name: &str, owner: Option<(&str, &str)>| {
            let mut p = privileged("Pod", name);
            p["metadata"]["ownerReferences"] =
                owned("Pod", name, owner)["metadata"]["ownerReferences"].clone();
            p["spec"]["nodeName"] = json!("aks-gpu-0");
            p["status"] = json!({"phase": "Running"});
            p
        };
        let mut run = Run::new(&admission);
        run.objects(vec![
            owned("Deployment", "llm", None),
            owned("ReplicaSet", "llm-5d8f", Some(("Deployment", "llm"))),
        ]);
        run.pods(vec![
            pod("llm-5d8f-x", Some(("ReplicaSet", "llm-5d8f"))),
            pod("orphan-x", Some(("ReplicaSet", "unread"))),
            pod("bare", None),
        ]);
        let kinds: Vec<(String, Option<String>)> = (run.finish(&[]).held_pods.into_iter())
            .map(|p| (p.name, p.workload_kind))
            .collect();
        assert_eq!(
            kinds,
            [
                ("llm-5d8f-x".to_string(), Some("Deployment".to_string())),
                ("orphan-x".to_string(), Some("ReplicaSet".to_string())),
                ("bare".to_string(), None),
            ]
        );
    }
}
