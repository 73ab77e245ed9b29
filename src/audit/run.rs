//! One audit run: objects fed a page at a time, from files or from the
//! cluster alike, and one [`Report`] at the end that nothing changes
//! afterwards. `audit -f`, `audit` of a cluster and the periodic report
//! all run it, so they reach the same findings on the same objects.
//!
//! The order is the cluster's: Nodes, then the other kinds (controllers,
//! capacity objects, DRA claims, exceptions), which the run holds until
//! the Pods come, then Pods a page at a time, each page judged and
//! dropped. A pod whose controller was read is judged through it. Where a
//! pod can land is judged against the Nodes (with Karpenter NodePools and
//! the GPUs DRA DeviceClasses and ResourceSlices serve on nodes) the run
//! read, whatever node lookup the Admission has: a dump is judged as
//! the cluster it was taken from.
use super::{exceptions, InvalidException, PodLedger, Report};
use crate::admission::Admission;
use crate::gpu::capacity::PoolKind;
use crate::gpu::{DraDevices, StaticNodes};
use crate::k8s::json::Pointer as _;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;

/// An audit under way.
pub struct Run<'a> {
    admission: &'a Admission,
    /// `admission` judging against the nodes read, once the Pods come.
    with_nodes: Option<Admission>,
    /// Nodes, held whole (few, and slim once read); none when none were
    /// read, and the report then has no node section.
    nodes: Option<Vec<Value>>,
    /// The kinds other than Pods, until the first page of Pods.
    held: Vec<Value>,
    /// What DRA serves on the nodes, read from the held objects.
    devices: DraDevices,
    /// Once the held objects are judged: the report so far, what the pods
    /// said of their nodes, and the uids of the held objects.
    judged: Option<(Report, PodLedger, HashSet<String>)>,
}

impl<'a> Run<'a> {
    pub fn new(admission: &'a Admission) -> Run<'a> {
        Run {
            admission,
            with_nodes: None,
            nodes: None,
            held: Vec::new(),
            devices: DraDevices::default(),
            judged: None,
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
    /// Pods come: a pod is judged through its controller when it has one.
    /// Objects that come after Pods are judged at once.
    pub fn objects(&mut self, page: Vec<Value>) {
        let Some((report, ledger, uids)) = self.judged.as_mut() else {
            self.held.extend(page);
            return;
        };
        let admission = self.with_nodes.as_ref().unwrap_or(self.admission);
        uids.extend(uids_of(&page));
        let (judged, judged_ledger) = super::audit_workloads(admission, &page);
        merge(report, judged);
        ledger.merge(judged_ledger);
    }

    /// One page of Pods, judged and dropped (a pod whose controller the run
    /// holds only counts towards its node).
    pub fn pods(&mut self, mut page: Vec<Value>) {
        self.judge_held();
        let admission = self.with_nodes.as_ref().unwrap_or(self.admission);
        let bundle = admission.bundle();
        let (report, ledger, controllers) = self.judged.as_mut().expect("judged");
        let read = page.len();
        for pod in &page {
            if controlled_by(pod, controllers) {
                ledger.add(pod, bundle.placement.gpu_resources());
            }
        }
        page.retain(|pod| !controlled_by(pod, controllers));
        let (judged, judged_ledger) = super::audit_workloads(admission, &page);
        merge(report, judged);
        ledger.merge(judged_ledger);
        report.objects += read - page.len();
    }

    /// The report: what was judged, the GPU nodes with what their pods
    /// said, and the GpuPolicyExceptions the run honoured (with `invalid`,
    /// those that could not be read).
    pub fn finish(mut self, invalid: &[InvalidException]) -> Report {
        self.judge_held();
        let (mut report, ledger, _) = self.judged.take().expect("judged");
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
        report
    }

    /// Judges the held objects once, at the first page of Pods (or the
    /// end), and lets them go.
    fn judge_held(&mut self) -> &mut (Report, PodLedger, HashSet<String>) {
        if self.judged.is_none() {
            self.devices = DraDevices::read(&self.held);
            self.with_nodes = self.nodes.as_ref().map(|nodes| {
                let pools = (self.held.iter())
                    .filter(|o| PoolKind::of(o) == Some(PoolKind::NodePool))
                    .cloned()
                    .collect();
                let lookup = StaticNodes::of_objects(nodes, pools, &self.devices);
                self.admission.judging_nodes(Arc::new(lookup))
            });
        }
        let admission = self.with_nodes.as_ref().unwrap_or(self.admission);
        let held = &mut self.held;
        self.judged.get_or_insert_with(|| {
            let held = std::mem::take(held);
            let (report, ledger) = super::audit_workloads(admission, &held);
            (report, ledger, uids_of(&held).collect())
        })
    }
}

/// The uids of `objects`.
fn uids_of(objects: &[Value]) -> impl Iterator<Item = String> + '_ {
    objects
        .iter()
        .filter_map(|o| o.at("/metadata/uid").and_then(Value::as_str))
        .map(str::to_string)
}

/// Whether an object in `uids` is `object`'s controller.
fn controlled_by(object: &Value, uids: &HashSet<String>) -> bool {
    crate::k8s::workloads::controller_uid(object).is_some_and(|u| uids.contains(u))
}

/// Adds `more` (a report of other objects) to `report`.
fn merge(report: &mut Report, more: Report) {
    report.objects += more.objects;
    report.evaluated += more.evaluated;
    report.gpus_held += more.gpus_held;
    report.gpus_pending += more.gpus_pending;
    report.gpus_in_violation += more.gpus_in_violation;
    report.gpus_pending_in_violation += more.gpus_pending_in_violation;
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
}
